//! Gateway chassis election (OVN's `controller/ha-chassis.c` and `consider_cr_lport`): which
//! chassisredirect ports (a distributed gateway port's companion, bound to one chassis of its
//! HA group) this chassis is the active gateway for, and so claims; [`super::sb_sync`] writes
//! the claims and the releases. The rule is ovn-controller 23.03's without BFD: a group of one
//! chassis is active on that chassis; a group of several on the one chassis of it that still
//! has a Chassis row (`is_local_chassis_only_candidate`: the others are gone); otherwise OVN
//! decides by the BFD sessions between the chassis, which ovnbpf does not run yet, so no
//! ovnbpf chassis claims the port (ovn-controller, seeing no BFD session up, claims none
//! either). The group is the port's `ha_chassis_group` (northd 23.03 writes one per gateway
//! port), else its legacy `gateway_chassis` rows. Reads the replica; touches nothing else.

use std::collections::HashSet;

use uuid::Uuid;

use crate::{
    ovsdb::replica::ChangeSet,
    sb::{
        Southbound,
        rows::{Chassis, GatewayChassis, HaChassis, HaChassisGroup, PortBinding},
    },
};

/// The Port_Binding type of a distributed gateway port's companion.
const CHASSIS_REDIRECT: &str = "chassisredirect";

/// What the election makes of this chassis for one chassisredirect port whose group names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The active gateway: it claims the port.
    Active,
    /// A group of several live chassis: OVN decides by BFD, which ovnbpf does not run yet, so
    /// no ovnbpf chassis of it is active (logged, and counted in the metrics).
    UndecidedWithoutBfd,
}

impl Role {
    pub const ALL: [Role; 2] = [Role::Active, Role::UndecidedWithoutBfd];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::UndecidedWithoutBfd => "undecided_without_bfd",
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
    roles: std::collections::BTreeMap<String, Role>,
}

impl GatewayElection {
    /// The chassisredirect ports this chassis is the active gateway for.
    #[must_use]
    pub fn active(&self) -> &HashSet<String> {
        &self.active
    }

    /// How many ports whose group names this chassis it has each role for.
    #[must_use]
    pub fn roles(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let mut counts: std::collections::BTreeMap<&'static str, u64> =
            Role::ALL.iter().map(|role| (role.as_str(), 0)).collect();
        for role in self.roles.values() {
            *counts.entry(role.as_str()).or_default() += 1;
        }
        counts
    }

    /// Takes in a replica change and elects again where it can move a gateway (a
    /// chassisredirect port, an HA group, a gateway chassis or a Chassis row changed); returns
    /// the ports whose election for `chassis` changed (to be claimed or released).
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
                .chain(ports.deleted.iter().map(|(uuid, _)| uuid))
                .any(|uuid| self.redirects.contains(uuid))
                || !ports.deleted.is_empty()
        });
        let groups_changed = [
            HaChassisGroup::TABLE,
            HaChassis::TABLE,
            GatewayChassis::TABLE,
            Chassis::TABLE,
        ]
        .iter()
        .any(|table| changes.tables.get(*table).is_some_and(|c| !c.is_empty()));
        if !(changes.resynced || redirect_changed || groups_changed) {
            return Vec::new();
        }
        let roles: std::collections::BTreeMap<String, Role> = match chassis {
            Some(chassis) => self
                .redirects
                .iter()
                .filter_map(|uuid| sb.row::<PortBinding>(uuid))
                .filter_map(|port| Some((port.logical_port.clone(), role(sb, &port, chassis)?)))
                .collect(),
            None => std::collections::BTreeMap::new(),
        };
        for (port, role) in &roles {
            if *role == Role::UndecidedWithoutBfd && self.roles.get(port) != Some(role) {
                tracing::warn!(port = %port, "gateway chassis group of several live chassis: OVN elects by BFD, which this agent does not run yet; not claiming the port");
            }
        }
        let active: HashSet<String> = roles
            .iter()
            .filter(|(_, role)| **role == Role::Active)
            .map(|(port, _)| port.clone())
            .collect();
        self.roles = roles;
        let moved: Vec<String> = active.symmetric_difference(&self.active).cloned().collect();
        for port in &moved {
            if active.contains(port) {
                tracing::info!(port = %port, "active gateway chassis here: claiming the port");
            } else {
                tracing::info!(port = %port, "no longer the active gateway chassis: releasing the port");
            }
        }
        self.active = active;
        moved
    }
}

/// `chassis`'s role for chassisredirect port `port` (see the module doc); `None` when the
/// port's group does not name it.
fn role(sb: &Southbound, port: &PortBinding, chassis: Uuid) -> Option<Role> {
    let members = group_members(sb, port);
    if !members.contains(&Some(chassis)) {
        return None;
    }
    if let [_] = members.as_slice() {
        return Some(Role::Active);
    }
    // The members whose chassis still exists: ours alone, or others too.
    let alive = members
        .iter()
        .filter_map(|member| *member)
        .filter(|member| sb.row::<Chassis>(member).is_some())
        .count();
    Some(if alive == 1 {
        Role::Active
    } else {
        Role::UndecidedWithoutBfd
    })
}

/// The chassis of `port`'s HA group (or its legacy gateway chassis); `None` for a member whose
/// Chassis row is gone (a weak reference the server cleared).
fn group_members(sb: &Southbound, port: &PortBinding) -> Vec<Option<Uuid>> {
    if let Some(group) = port
        .ha_chassis_group
        .and_then(|group| sb.row::<HaChassisGroup>(&group))
    {
        return group
            .ha_chassis
            .iter()
            .filter_map(|member| sb.row::<HaChassis>(member))
            .map(|member| member.chassis)
            .collect();
    }
    port.gateway_chassis
        .iter()
        .filter_map(|member| sb.row::<GatewayChassis>(member))
        .map(|member| member.chassis)
        .collect()
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
    fn southbound(members: &[(&str, &str)]) -> Southbound {
        let optional = |key: Value| json!({"type": {"key": key, "min": 0, "max": 1}});
        let set = json!({"type": {"key": {"type": "uuid"}, "min": 0, "max": "unlimited"}});
        let ha_chassis: serde_json::Map<String, Value> = members
            .iter()
            .map(|(member, chassis)| {
                (
                    (*member).to_string(),
                    json!({"initial": {"chassis": ["uuid", chassis], "priority": 100}}),
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
                "HA_Chassis_Group": {"columns": {"name": {"type": "string"}, "ha_chassis": set}},
                "HA_Chassis": {"columns": {"chassis": optional(json!({"type": "uuid"})),
                    "priority": {"type": "integer"}}},
            }),
            json!({
                "Chassis": {US: {"initial": {"name": "node1"}}, OTHER: {"initial": {"name": "node2"}}},
                "Port_Binding": {
                    REDIRECT: {"initial": {"logical_port": "cr-vpc-ext", "type": "chassisredirect",
                        "ha_chassis_group": ["uuid", GROUP]}},
                    POD: {"initial": {"logical_port": "pod.ns"}}},
                "HA_Chassis_Group": {GROUP: {"initial": {"name": "vpc-ext",
                    "ha_chassis": ["set", group_members]}}},
                "HA_Chassis": ha_chassis,
            }),
        )
    }

    fn update(sb: &mut Southbound, updates: Value) -> ChangeSet {
        sb.apply(&SessionEvent::Update {
            updates,
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
        // Both chassis are there: OVN decides by BFD, which is not run, so no one claims (and
        // the metrics say why).
        assert!(election.observe(&sb, &resync(), Some(uuid(US))).is_empty());
        assert_eq!(election.roles()["undecided_without_bfd"], 1);
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
            (
                election.roles()["active"],
                election.roles()["undecided_without_bfd"]
            ),
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
}
