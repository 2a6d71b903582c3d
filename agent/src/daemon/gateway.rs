//! Gateway chassis election (OVN's `controller/ha-chassis.c`, `consider_cr_lport` and
//! `bfd_calculate_chassis`): which chassisredirect ports (a distributed gateway port's
//! companion, bound to one chassis of its HA group) this chassis is the active gateway for, and
//! so claims ([`super::sb_sync`] writes the claims and the releases), and which chassis it runs
//! BFD with ([`bfd_peers`]; the sessions are `crate::bfd`'s). The rule is ovn-controller
//! 23.03's, `ha_chassis_group_is_active`: a group of one chassis is active on that chassis; a
//! group of several on the one chassis of it that still has a Chassis row
//! (`is_local_chassis_only_candidate`), else, by the chassis whose BFD session with this one is
//! up (its "active tunnels"; none up: not active), on the highest-priority one of them and this
//! chassis, where this chassis alone of the group is up only if a BFD session with one of the
//! group's reference chassis (those with ports behind the gateway) is. The group is the port's
//! `ha_chassis_group` (northd 23.03 writes one per gateway port), else its legacy
//! `gateway_chassis` rows. Reads the replica; touches nothing else.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use uuid::Uuid;

use crate::{
    ovsdb::replica::ChangeSet,
    sb::{
        Southbound,
        rows::{Chassis, Encap, GatewayChassis, HaChassis, HaChassisGroup, PortBinding, SbGlobal},
    },
};

/// The Port_Binding type of a distributed gateway port's companion.
const CHASSIS_REDIRECT: &str = "chassisredirect";

/// What the election makes of this chassis for one chassisredirect port whose group names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The active gateway: it claims the port.
    Active,
    /// Another chassis of the group is, or none is reachable (no BFD session up).
    Standby,
}

impl Role {
    pub const ALL: [Role; 2] = [Role::Active, Role::Standby];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::Standby => "standby",
        }
    }
}

/// The chassisredirect ports of the Southbound and those this chassis is active for.
#[derive(Debug, Default)]
pub struct GatewayElection {
    /// Every chassisredirect Port_Binding row.
    redirects: HashSet<Uuid>,
    /// The ports this chassis is the active gateway for.
    active: HashSet<String>,
    /// This chassis's role for each port whose group names it.
    roles: BTreeMap<String, Role>,
    /// The chassis whose BFD session with this one is up.
    active_tunnels: BTreeSet<String>,
    /// Until when a port this chassis already holds is kept, whatever BFD says: a restarted
    /// agent's sessions start down (ovn-controller's live on in Open vSwitch across its
    /// restarts), and releasing the port meanwhile would move the gateway away and back.
    hold_until: Option<std::time::Instant>,
    /// The ports bound to this chassis when it first elected (`None` before): the only ones
    /// the hold keeps (a port it takes meanwhile goes by BFD).
    held_at_start: Option<HashSet<String>>,
}

/// How long a restarted agent keeps the gateway ports it holds while its BFD sessions come up
/// (a few of OVS's default 1 s slow transmit intervals).
pub const HOLD_AFTER_START: std::time::Duration = std::time::Duration::from_secs(5);

impl GatewayElection {
    /// An election that keeps the ports this chassis holds until `hold_until`
    /// ([`HOLD_AFTER_START`] after the agent's start).
    #[must_use]
    pub fn holding_until(hold_until: std::time::Instant) -> Self {
        Self {
            hold_until: Some(hold_until),
            ..Self::default()
        }
    }

    /// When the hold on the ports this chassis holds ends, if it has not yet.
    #[must_use]
    pub fn hold_until(&self) -> Option<std::time::Instant> {
        self.hold_until
    }

    /// The hold has ended: elects again by BFD alone.
    pub fn end_hold(&mut self, sb: &Southbound, chassis: Option<Uuid>) -> Vec<String> {
        self.hold_until = None;
        self.elect(sb, chassis)
    }

    /// The chassisredirect ports this chassis is the active gateway for.
    #[must_use]
    pub fn active(&self) -> &HashSet<String> {
        &self.active
    }

    /// How many ports whose group names this chassis it has each role for.
    #[must_use]
    pub fn roles(&self) -> BTreeMap<&'static str, u64> {
        let mut counts: BTreeMap<&'static str, u64> =
            Role::ALL.iter().map(|role| (role.as_str(), 0)).collect();
        for role in self.roles.values() {
            *counts.entry(role.as_str()).or_default() += 1;
        }
        counts
    }

    /// Takes in a replica change and elects again where it can move a gateway (a
    /// chassisredirect port, an HA group, a gateway chassis or a Chassis row changed); returns
    /// the ports to compare again: those whose election for `chassis` changed (to be claimed or
    /// released), and the active ones whose row changed (another chassis took one).
    pub fn observe(
        &mut self,
        sb: &Southbound,
        changes: &ChangeSet,
        chassis: Option<Uuid>,
    ) -> Vec<String> {
        let ports = changes.tables.get(PortBinding::TABLE);
        if changes.resynced {
            self.redirects = sb
                .rows::<PortBinding>()
                .filter(|port| port.kind == CHASSIS_REDIRECT)
                .map(|port| port.uuid)
                .collect();
        } else if let Some(ports) = ports {
            for uuid in ports
                .inserted
                .iter()
                .chain(ports.modified.iter().map(|(uuid, _)| uuid))
            {
                match sb.row::<PortBinding>(uuid) {
                    Some(port) if port.kind == CHASSIS_REDIRECT => self.redirects.insert(*uuid),
                    _ => self.redirects.remove(uuid),
                };
            }
            for (uuid, _) in &ports.deleted {
                self.redirects.remove(uuid);
            }
        }
        let redirect_changed = ports.is_some_and(|ports| {
            ports
                .inserted
                .iter()
                .chain(ports.modified.iter().map(|(uuid, _)| uuid))
                .any(|uuid| self.redirects.contains(uuid))
                || !ports.deleted.is_empty()
        });
        // An active port's row changed (another chassis took it, or released it): compared
        // again, so that it is claimed back.
        let touched: Vec<String> = ports
            .into_iter()
            .flat_map(|ports| {
                ports
                    .inserted
                    .iter()
                    .chain(ports.modified.iter().map(|(uuid, _)| uuid))
            })
            .filter_map(|uuid| sb.row::<PortBinding>(uuid))
            .map(|port| port.logical_port)
            .filter(|port| self.active.contains(port))
            .collect();
        let mut moved = if changes.resynced || redirect_changed || groups_changed(changes) {
            self.elect(sb, chassis)
        } else {
            Vec::new()
        };
        for port in touched {
            if !moved.contains(&port) {
                moved.push(port);
            }
        }
        moved
    }

    /// The chassis whose BFD session with this one is up changed: elects again.
    pub fn tunnels_changed(
        &mut self,
        sb: &Southbound,
        chassis: Option<Uuid>,
        active_tunnels: BTreeSet<String>,
    ) -> Vec<String> {
        self.active_tunnels = active_tunnels;
        self.elect(sb, chassis)
    }

    /// Elects every port again; returns those whose election for `chassis` changed.
    fn elect(&mut self, sb: &Southbound, chassis: Option<Uuid>) -> Vec<String> {
        let holding = self
            .hold_until
            .is_some_and(|until| std::time::Instant::now() < until);
        if let (None, Some(chassis)) = (&self.held_at_start, chassis) {
            self.held_at_start = Some(
                self.redirects
                    .iter()
                    .filter_map(|uuid| sb.row::<PortBinding>(uuid))
                    .filter(|port| port.chassis == Some(chassis))
                    .map(|port| port.logical_port)
                    .collect(),
            );
        }
        let held_at_start = self.held_at_start.as_ref();
        let roles: BTreeMap<String, Role> = match chassis {
            Some(chassis) => self
                .redirects
                .iter()
                .filter_map(|uuid| sb.row::<PortBinding>(uuid))
                .filter_map(|port| {
                    let role = match role(sb, &port, chassis, &self.active_tunnels)? {
                        // Held here already: kept while the sessions come up.
                        Role::Standby
                            if holding
                                && port.chassis == Some(chassis)
                                && held_at_start
                                    .is_some_and(|held| held.contains(&port.logical_port)) =>
                        {
                            Role::Active
                        }
                        role => role,
                    };
                    Some((port.logical_port, role))
                })
                .collect(),
            None => BTreeMap::new(),
        };
        let active: HashSet<String> = roles
            .iter()
            .filter(|(_, role)| **role == Role::Active)
            .map(|(port, _)| port.clone())
            .collect();
        let moved: Vec<String> = active.symmetric_difference(&self.active).cloned().collect();
        for port in &moved {
            if active.contains(port) {
                tracing::info!(port = %port, "active gateway chassis here: claiming the port");
            } else {
                tracing::info!(port = %port, "no longer the active gateway chassis: releasing the port");
            }
        }
        self.roles = roles;
        self.active = active;
        moved
    }
}

/// Whether `changes` touch what an election or the BFD peers are made of.
#[must_use]
pub fn groups_changed(changes: &ChangeSet) -> bool {
    changes.resynced
        || [
            HaChassisGroup::TABLE,
            HaChassis::TABLE,
            GatewayChassis::TABLE,
            Chassis::TABLE,
            Encap::TABLE,
            SbGlobal::TABLE,
        ]
        .iter()
        .any(|table| changes.tables.get(*table).is_some_and(|c| !c.is_empty()))
}

/// A member of a gateway group: its chassis (`None`: the Chassis row is gone, a weak reference
/// the server cleared), its name and priority.
struct Member {
    chassis: Option<Uuid>,
    name: String,
    priority: i64,
}

/// `chassis`'s role for chassisredirect port `port` (see the module doc); `None` when the
/// port's group does not name it.
fn role(
    sb: &Southbound,
    port: &PortBinding,
    chassis: Uuid,
    active_tunnels: &BTreeSet<String>,
) -> Option<Role> {
    let (members, references) = group_members(sb, port);
    if !members.iter().any(|member| member.chassis == Some(chassis)) {
        return None;
    }
    let active = |yes: bool| if yes { Role::Active } else { Role::Standby };
    if let [_] = members.as_slice() {
        return Some(Role::Active);
    }
    let alive: Vec<&Member> = members.iter().filter(|m| m.chassis.is_some()).collect();
    if let [only] = alive.as_slice() {
        return Some(active(only.chassis == Some(chassis)));
    }
    if active_tunnels.is_empty() {
        return Some(Role::Standby);
    }
    let mut ordered: Vec<&Member> = alive
        .into_iter()
        .filter(|m| m.chassis == Some(chassis) || active_tunnels.contains(&m.name))
        .collect();
    // `compare_chassis_prio_`: higher priority first, then the greater name.
    ordered.sort_by(|a, b| b.priority.cmp(&a.priority).then(b.name.cmp(&a.name)));
    if let [only] = ordered.as_slice() {
        // Only this chassis of the group is up: active if it reaches a reference chassis.
        let reaches = references.iter().any(|name| active_tunnels.contains(name));
        return Some(active(only.chassis == Some(chassis) && reaches));
    }
    Some(active(ordered.first()?.chassis == Some(chassis)))
}

/// The members of `port`'s HA group (or its legacy gateway chassis), and the names of the
/// group's reference chassis.
fn group_members(sb: &Southbound, port: &PortBinding) -> (Vec<Member>, Vec<String>) {
    let name = |chassis: Option<Uuid>| {
        chassis
            .and_then(|uuid| sb.row::<Chassis>(&uuid))
            .map(|row| row.name)
            .unwrap_or_default()
    };
    if let Some(group) = port
        .ha_chassis_group
        .and_then(|group| sb.row::<HaChassisGroup>(&group))
    {
        let members = group
            .ha_chassis
            .iter()
            .filter_map(|member| sb.row::<HaChassis>(member))
            .map(|member| Member {
                chassis: member.chassis,
                name: name(member.chassis),
                priority: member.priority,
            })
            .collect();
        let references = group
            .ref_chassis
            .iter()
            .map(|chassis| name(Some(*chassis)))
            .collect();
        return (members, references);
    }
    let members = port
        .gateway_chassis
        .iter()
        .filter_map(|member| sb.row::<GatewayChassis>(member))
        .map(|member| Member {
            chassis: member.chassis,
            name: name(member.chassis),
            priority: member.priority,
        })
        .collect();
    (members, Vec::new())
}

/// The chassis this chassis (`chassis`, named `name`) runs BFD with (ovn-controller's
/// `bfd_calculate_chassis`): for each HA group of at least two chassis, its other members and
/// its reference chassis when this chassis is a member, its members when it is a reference; by
/// their Geneve endpoint of this node's underlay family (`ipv6`), with the timers of
/// `SB_Global.options` (`bfd-min-rx`, `bfd-min-tx` in ms, `bfd-mult`; Open vSwitch's defaults
/// without them).
#[must_use]
pub fn bfd_peers(sb: &Southbound, chassis: Uuid, name: &str, ipv6: bool) -> crate::bfd::Peers {
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for group in sb.rows::<HaChassisGroup>() {
        let members: Vec<Uuid> = group
            .ha_chassis
            .iter()
            .filter_map(|member| sb.row::<HaChassis>(member)?.chassis)
            .collect();
        if group.ha_chassis.len() < 2 {
            continue;
        }
        let names = |uuids: &[Uuid]| -> Vec<String> {
            uuids
                .iter()
                .filter_map(|uuid| sb.row::<Chassis>(uuid).map(|row| row.name))
                .collect()
        };
        if members.contains(&chassis) {
            wanted.extend(names(&members));
            wanted.extend(names(&group.ref_chassis));
        } else if group.ref_chassis.contains(&chassis) {
            wanted.extend(names(&members));
        }
    }
    wanted.remove(name);
    let endpoints: BTreeMap<String, std::net::IpAddr> = sb
        .rows::<Encap>()
        .filter(|encap| encap.kind == "geneve" && wanted.contains(&encap.chassis_name))
        .filter_map(|encap| {
            let ip: std::net::IpAddr = encap.ip.parse().ok()?;
            (ip.is_ipv6() == ipv6).then_some((encap.chassis_name, ip))
        })
        .collect();
    let options = sb
        .sb_global()
        .map(|global| global.options)
        .unwrap_or_default();
    let defaults = crate::bfd::Timers::default();
    let millis = |key: &str, default: std::time::Duration| {
        options
            .get(key)
            .and_then(|value| value.parse::<u64>().ok())
            .map_or(default, std::time::Duration::from_millis)
    };
    crate::bfd::Peers {
        chassis: endpoints,
        timers: crate::bfd::Timers {
            min_rx: millis("bfd-min-rx", defaults.min_rx),
            min_tx: millis("bfd-min-tx", defaults.min_tx),
            mult: options
                .get("bfd-mult")
                .and_then(|value| value.parse().ok())
                .unwrap_or(defaults.mult),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::ovsdb::session::{SessionEvent, UpdateFormat};

    const US: &str = "00000000-0000-0000-0000-0000000000c1";
    const OTHER: &str = "00000000-0000-0000-0000-0000000000c2";
    const REDIRECT: &str = "00000000-0000-0000-0000-0000000000b1";
    const POD: &str = "00000000-0000-0000-0000-0000000000b2";
    const GROUP: &str = "00000000-0000-0000-0000-0000000000a1";
    const FIRST: &str = "00000000-0000-0000-0000-0000000000a2";
    const SECOND: &str = "00000000-0000-0000-0000-0000000000a3";

    fn uuid(text: &str) -> Uuid {
        Uuid::parse_str(text).unwrap()
    }

    /// Chassis node1 (us) and node2, port `cr-vpc-ext` with HA group members `members`
    /// (HA_Chassis uuid → its chassis), and a pod's port.
    const THIRD: &str = "00000000-0000-0000-0000-0000000000c3";

    /// Chassis node1 (us, priority 90 in the group), node2 (100) and node3 (the group's
    /// reference chassis), port `cr-vpc-ext` with HA group members `members` (HA_Chassis uuid →
    /// its chassis), and a pod's port.
    fn southbound(members: &[(&str, &str)]) -> Southbound {
        let optional = |key: Value| json!({"type": {"key": key, "min": 0, "max": 1}});
        let set = json!({"type": {"key": {"type": "uuid"}, "min": 0, "max": "unlimited"}});
        let ha_chassis: serde_json::Map<String, Value> = members
            .iter()
            .map(|(member, chassis)| {
                (
                    (*member).to_string(),
                    json!({"initial": {"chassis": ["uuid", chassis],
                        "priority": if *chassis == US { 90 } else { 100 }}}),
                )
            })
            .collect();
        let group_members: Vec<Value> = members
            .iter()
            .map(|(member, _)| json!(["uuid", member]))
            .collect();
        crate::sb::testing::southbound(
            &json!({
                "Chassis": {"columns": {"name": {"type": "string"}}},
                "Port_Binding": {"columns": {"logical_port": {"type": "string"},
                    "type": {"type": "string"},
                    "chassis": optional(json!({"type": "uuid"})),
                    "ha_chassis_group": optional(json!({"type": "uuid"})),
                    "gateway_chassis": set}},
                "HA_Chassis_Group": {"columns": {"name": {"type": "string"}, "ha_chassis": set,
                    "ref_chassis": set}},
                "HA_Chassis": {"columns": {"chassis": optional(json!({"type": "uuid"})),
                    "priority": {"type": "integer"}}},
            }),
            json!({
                "Chassis": {US: {"initial": {"name": "node1"}}, OTHER: {"initial": {"name": "node2"}},
                    THIRD: {"initial": {"name": "node3"}}},
                "Port_Binding": {
                    REDIRECT: {"initial": {"logical_port": "cr-vpc-ext", "type": "chassisredirect",
                        "ha_chassis_group": ["uuid", GROUP]}},
                    POD: {"initial": {"logical_port": "pod.ns"}}},
                "HA_Chassis_Group": {GROUP: {"initial": {"name": "vpc-ext",
                    "ha_chassis": ["set", group_members],
                    "ref_chassis": ["set", [["uuid", THIRD]]]}}},
                "HA_Chassis": ha_chassis,
            }),
        )
    }

    fn update(sb: &mut Southbound, updates: Value) -> ChangeSet {
        sb.apply(&SessionEvent::Update {
            updates: updates.into(),
            format: UpdateFormat::Update2,
        })
    }

    fn resync() -> ChangeSet {
        ChangeSet {
            resynced: true,
            ..ChangeSet::default()
        }
    }

    #[test]
    fn a_group_of_one_is_active_on_its_chassis_and_follows_it() {
        let mut sb = southbound(&[(FIRST, US)]);
        let mut election = GatewayElection::default();
        assert_eq!(
            election.observe(&sb, &resync(), Some(uuid(US))),
            vec!["cr-vpc-ext".to_string()]
        );
        assert!(election.active().contains("cr-vpc-ext"));
        // A pod's port changing moves no gateway.
        let changes = update(
            &mut sb,
            json!({"Port_Binding": {POD: {"modify": {"chassis": ["uuid", US]}}}}),
        );
        assert!(election.observe(&sb, &changes, Some(uuid(US))).is_empty());
        // The member now names the other chassis: released here.
        let changes = update(
            &mut sb,
            json!({"HA_Chassis": {FIRST: {"modify": {"chassis": ["uuid", OTHER]}}}}),
        );
        assert_eq!(
            election.observe(&sb, &changes, Some(uuid(US))),
            vec!["cr-vpc-ext".to_string()]
        );
        assert!(election.active().is_empty());
        // Seen from the other chassis, it is active there.
        let mut there = GatewayElection::default();
        there.observe(&sb, &resync(), Some(uuid(OTHER)));
        assert!(there.active().contains("cr-vpc-ext"));
    }

    #[test]
    fn a_group_of_several_is_active_only_where_the_others_are_gone() {
        let mut sb = southbound(&[(FIRST, US), (SECOND, OTHER)]);
        let mut election = GatewayElection::default();
        // Both chassis are there, no BFD session up: no one claims (OVN's "lost connectivity").
        assert!(election.observe(&sb, &resync(), Some(uuid(US))).is_empty());
        assert_eq!(election.roles()["standby"], 1);
        // With the other's session up, the higher priority (the other's, 100 against ours,
        // 90) wins; with it down and a reference chassis's up, this one does.
        let tunnels = |names: &[&str]| names.iter().map(|name| name.to_string()).collect();
        assert!(
            election
                .tunnels_changed(&sb, Some(uuid(US)), tunnels(&["node2"]))
                .is_empty()
        );
        assert_eq!(
            election.tunnels_changed(&sb, Some(uuid(US)), tunnels(&["node3"])),
            vec!["cr-vpc-ext".to_string()]
        );
        assert_eq!(
            election.tunnels_changed(&sb, Some(uuid(US)), tunnels(&["node2", "node3"])),
            vec!["cr-vpc-ext".to_string()]
        );
        // The other chassis leaves (its row deleted, the weak reference cleared): the only
        // candidate left is this chassis.
        let changes = update(
            &mut sb,
            json!({"Chassis": {OTHER: {"delete": null}},
                   "HA_Chassis": {SECOND: {"modify": {"chassis": ["set", []]}}}}),
        );
        assert_eq!(
            election.observe(&sb, &changes, Some(uuid(US))),
            vec!["cr-vpc-ext".to_string()]
        );
        assert_eq!(
            (election.roles()["active"], election.roles()["standby"]),
            (1, 0)
        );
        // The chassisredirect port goes: nothing to hold.
        let changes = update(
            &mut sb,
            json!({"Port_Binding": {REDIRECT: {"delete": null}}}),
        );
        assert_eq!(
            election.observe(&sb, &changes, Some(uuid(US))),
            vec!["cr-vpc-ext".to_string()]
        );
        assert!(election.active().is_empty());
    }

    /// A restarted agent keeps the gateway port it holds while its BFD sessions come up, then
    /// goes by them.
    #[test]
    fn a_restarted_agent_keeps_the_port_it_holds_until_the_hold_ends() {
        let mut sb = southbound(&[(FIRST, US), (SECOND, OTHER)]);
        update(
            &mut sb,
            json!({"Port_Binding": {REDIRECT: {"modify": {"chassis": ["uuid", US]}}}}),
        );
        let later = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut election = GatewayElection::holding_until(later);
        // No session up yet: without the hold this chassis would release the port.
        assert!(
            election
                .observe(&sb, &resync(), Some(uuid(US)))
                .contains(&"cr-vpc-ext".to_string())
        );
        assert!(election.active().contains("cr-vpc-ext"));
        assert_eq!(
            election.end_hold(&sb, Some(uuid(US))),
            vec!["cr-vpc-ext".to_string()]
        );
        assert!(election.active().is_empty() && election.hold_until().is_none());
    }

    /// A port this chassis is active for that another chassis takes (or releases) is compared
    /// again, so that it is claimed back; a port it took during the hold is not kept by it.
    #[test]
    fn an_active_port_taken_by_another_chassis_is_compared_again() {
        let mut sb = southbound(&[(FIRST, US)]);
        let mut election = GatewayElection::holding_until(
            std::time::Instant::now() + std::time::Duration::from_secs(60),
        );
        election.observe(&sb, &resync(), Some(uuid(US)));
        assert!(election.active().contains("cr-vpc-ext"));
        let changes = update(
            &mut sb,
            json!({"Port_Binding": {REDIRECT: {"modify": {"chassis": ["uuid", OTHER]}}}}),
        );
        assert_eq!(
            election.observe(&sb, &changes, Some(uuid(US))),
            vec!["cr-vpc-ext".to_string()]
        );
        // The port was not bound here at the first election: the hold does not keep it when a
        // second chassis joins and no session is up.
        let changes = update(
            &mut sb,
            json!({"Port_Binding": {REDIRECT: {"modify": {"chassis": ["uuid", US]}}},
                   "HA_Chassis": {SECOND: {"insert": {"chassis": ["uuid", OTHER], "priority": 100}}},
                   "HA_Chassis_Group": {GROUP: {"modify": {"ha_chassis": ["set", [["uuid", SECOND]]]}}}}),
        );
        assert!(
            election
                .observe(&sb, &changes, Some(uuid(US)))
                .contains(&"cr-vpc-ext".to_string())
        );
        assert!(election.active().is_empty());
    }
}
