//! The compiler: Southbound rows → reference-counted IR entries. Each logical flow is parsed once
//! and classified per datapath ([`super::classify`]); Port_Binding and Multicast_Group rows become
//! port and flood-group entries. Every source row remembers the entries it contributed, so a
//! change set costs O(changed rows) and yields an [`IrDiff`]. Touches only the SB replica (read)
//! and the IR.

use std::collections::{BTreeMap, HashMap, HashSet};

use uuid::Uuid;

use super::{
    classify::{self, Class, Flow},
    ir::{IrDiff, IrEntry, PortKind},
};
use crate::{
    lflow::{parse_actions, parse_match},
    ovsdb::replica::{ChangeSet, SetChange},
    sb::{
        Southbound,
        rows::{
            Chassis, DatapathBinding, LogicalDpGroup, LogicalFlow, MacBinding, MulticastGroup,
            PortBinding,
        },
    },
};

/// How one logical flow was handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Compiled,
    Neutral,
    /// Forwarding compiled; a side duty of the flow (the reason) is not done.
    SideDuty(String),
    Unsupported(String),
}

impl Outcome {
    /// How much an outcome weighs when a flow's datapaths disagree: a flow is as supported as
    /// its worst datapath.
    fn severity(&self) -> u8 {
        match self {
            Outcome::Compiled | Outcome::Neutral => 0,
            Outcome::SideDuty(_) => 1,
            Outcome::Unsupported(_) => 2,
        }
    }
}

/// A source row's contribution.
#[derive(Debug, Default)]
struct Contribution {
    stage: String,
    outcome: Option<Outcome>,
    entries: Vec<IrEntry>,
}

/// Per-stage counts of logical flows (rows).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StageCoverage {
    pub flows: usize,
    pub compiled: usize,
    pub neutral: usize,
    /// Flows whose forwarding is compiled but which also ask for a side duty the datapath does
    /// not do (they do not stop forwarding), by duty in `side_duties`.
    pub side_duty: usize,
    pub side_duties: BTreeMap<String, usize>,
    /// Flows that cannot be forwarded correctly (their datapath is not forwarded), by reason in
    /// `reasons`.
    pub unsupported: usize,
    pub reasons: BTreeMap<String, usize>,
}

/// A flood group's entries: its header and one entry per member port (by Port_Binding row);
/// `None` for a listed port whose Port_Binding is not (yet) in the replica.
#[derive(Debug)]
struct GroupState {
    header: IrEntry,
    members: HashMap<Uuid, Option<IrEntry>>,
}

/// The compiler's state: contributions per source row and the reference-counted IR.
#[derive(Debug, Default)]
pub struct Compiler {
    flows: HashMap<Uuid, Contribution>,
    rows: HashMap<Uuid, Contribution>,
    groups: HashMap<Uuid, GroupState>,
    /// Port_Binding row → the groups listing it, so a port that arrives (or changes its key)
    /// after its groups updates just its member entries.
    port_groups: HashMap<Uuid, HashSet<Uuid>>,
    /// Switches with a localnet port that routers route onto (Kube-OVN's U2O interconnection,
    /// not compiled): per switch tunnel key, the Unsupported entries of those routers.
    underlay_routing: HashMap<u32, Vec<IrEntry>>,
    entries: HashMap<IrEntry, u32>,
}

#[derive(Default)]
struct Delta(HashMap<IrEntry, i64>);

impl Delta {
    fn into_diff(self) -> IrDiff {
        let mut diff = IrDiff::default();
        for (entry, change) in self.0 {
            match change {
                1.. => diff.added.push(entry),
                ..=-1 => diff.removed.push(entry),
                0 => {}
            }
        }
        diff.added.sort();
        diff.removed.sort();
        diff
    }
}

impl Compiler {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Every IR entry.
    pub fn entries(&self) -> impl Iterator<Item = &IrEntry> {
        self.entries.keys()
    }

    /// Brings the IR in line with `sb` after it applied `changes`.
    pub fn apply(&mut self, sb: &Southbound, changes: &ChangeSet) -> IrDiff {
        let mut delta = Delta::default();
        if changes.resynced {
            self.rebuild(sb, &mut delta);
            return delta.into_diff();
        }
        let mut flows = Vec::new();
        let mut rows = Vec::new();
        let mut groups = Vec::new();
        for (table, change) in &changes.tables {
            let touched = change
                .inserted
                .iter()
                .copied()
                .chain(change.modified.iter().map(|(u, _)| *u));
            let gone = change.deleted.iter().map(|(u, _)| *u);
            match table.as_str() {
                LogicalFlow::TABLE => flows.extend(touched.chain(gone)),
                PortBinding::TABLE | MacBinding::TABLE => rows.extend(touched.chain(gone)),
                MulticastGroup::TABLE => {
                    for uuid in touched.chain(gone) {
                        let ports = change
                            .set_changes
                            .get(&uuid)
                            .and_then(|c| c.iter().find(|c| c.column == "ports"));
                        groups.push((uuid, ports.cloned()));
                    }
                }
                LogicalDpGroup::TABLE => {
                    for group in touched.chain(gone) {
                        flows.extend(
                            sb.indexes()
                                .flows_by_group
                                .get(&group)
                                .into_iter()
                                .flatten(),
                        );
                    }
                }
                DatapathBinding::TABLE | Chassis::TABLE => {
                    // Tunnel keys and chassis names are baked into entries everywhere: rare, so
                    // recompile all rather than tracking every dependency.
                    self.rebuild(sb, &mut delta);
                    return delta.into_diff();
                }
                _ => {}
            }
        }
        for uuid in flows {
            self.retract_flow(uuid, &mut delta);
            if let Some(flow) = sb.row::<LogicalFlow>(&uuid) {
                self.compile_flow(sb, &flow, &mut delta);
            }
        }
        let mut underlay_candidates = HashSet::new();
        for uuid in rows {
            underlay_candidates.extend(self.underlay_candidates(sb, uuid));
            self.retract_row(uuid, &mut delta);
            self.compile_row(sb, uuid, &mut delta);
            self.refresh_memberships(sb, uuid, &mut delta);
            underlay_candidates.extend(self.underlay_candidates(sb, uuid));
        }
        for switch in underlay_candidates {
            self.refresh_underlay_routing(sb, switch, &mut delta);
        }
        for (uuid, ports_change) in groups {
            match ports_change {
                Some(change) if self.group_header_unchanged(sb, uuid) => {
                    self.apply_member_change(sb, uuid, &change, &mut delta)
                }
                _ => self.update_group(sb, uuid, &mut delta),
            }
        }
        delta.into_diff()
    }

    /// Whether a group's datapath, key and name are what its header entry says (read without
    /// decoding its member list).
    fn group_header_unchanged(&self, sb: &Southbound, uuid: Uuid) -> bool {
        let Some(state) = self.groups.get(&uuid) else {
            return false;
        };
        group_header(sb, uuid).is_some_and(|header| header == state.header)
    }

    /// Applies the members a group gained and lost (from the update's set diff): O(change).
    fn apply_member_change(
        &mut self,
        sb: &Southbound,
        uuid: Uuid,
        change: &SetChange,
        delta: &mut Delta,
    ) {
        let Some(mut state) = self.groups.remove(&uuid) else {
            return;
        };
        let IrEntry::FloodGroup {
            datapath,
            key: group,
            ..
        } = state.header
        else {
            self.groups.insert(uuid, state);
            return;
        };
        for port in change.removed.iter().filter_map(|a| a.as_uuid()) {
            self.unlist_member(uuid, &mut state, port, delta);
        }
        let key_of = port_key_reader(sb);
        for port in change.added.iter().filter_map(|a| a.as_uuid()) {
            let key = key_of.as_ref().and_then(|read| read(&port));
            self.list_member(uuid, &mut state, (datapath, group), port, key, delta);
        }
        self.groups.insert(uuid, state);
    }

    /// Records `port` as listed by group `uuid`, with a member entry when its key is known.
    fn list_member(
        &mut self,
        uuid: Uuid,
        state: &mut GroupState,
        (datapath, group): (u32, u32),
        port: Uuid,
        key: Option<u32>,
        delta: &mut Delta,
    ) {
        self.port_groups.entry(port).or_default().insert(uuid);
        let entry = key.map(|key| IrEntry::FloodMember {
            datapath,
            group,
            port: key,
        });
        if let Some(entry) = &entry {
            self.add(entry.clone(), delta);
        }
        if let Some(Some(old)) = state.members.insert(port, entry) {
            self.remove(old, delta);
        }
    }

    fn unlist_member(&mut self, uuid: Uuid, state: &mut GroupState, port: Uuid, delta: &mut Delta) {
        if let Some(Some(entry)) = state.members.remove(&port) {
            self.remove(entry, delta);
        }
        if let Some(groups) = self.port_groups.get_mut(&port) {
            groups.remove(&uuid);
            if groups.is_empty() {
                self.port_groups.remove(&port);
            }
        }
    }

    /// A Port_Binding row changed: re-resolve its member entries in the groups listing it.
    fn refresh_memberships(&mut self, sb: &Southbound, port: Uuid, delta: &mut Delta) {
        let Some(groups) = self.port_groups.get(&port).cloned() else {
            return;
        };
        let key = port_key_reader(sb).and_then(|read| read(&port));
        for uuid in groups {
            let Some(mut state) = self.groups.remove(&uuid) else {
                continue;
            };
            if let IrEntry::FloodGroup {
                datapath,
                key: group,
                ..
            } = state.header
            {
                self.list_member(uuid, &mut state, (datapath, group), port, key, delta);
            }
            self.groups.insert(uuid, state);
        }
    }

    /// Brings one Multicast_Group's entries up to date, touching only the members that changed.
    fn update_group(&mut self, sb: &Southbound, uuid: Uuid, delta: &mut Delta) {
        let Some(group) = sb.row::<MulticastGroup>(&uuid) else {
            self.retract_group(uuid, delta);
            return;
        };
        let Some(datapath) = group
            .datapath
            .and_then(|dp| sb.row::<DatapathBinding>(&dp))
            .map(|dp| dp.tunnel_key)
        else {
            self.retract_group(uuid, delta);
            return;
        };
        let header = IrEntry::FloodGroup {
            datapath,
            key: group.tunnel_key,
            name: group.name.clone(),
        };
        if self
            .groups
            .get(&uuid)
            .is_some_and(|state| state.header != header)
        {
            self.retract_group(uuid, delta);
        }
        if !self.groups.contains_key(&uuid) {
            self.add(header.clone(), delta);
            self.groups.insert(
                uuid,
                GroupState {
                    header,
                    members: HashMap::new(),
                },
            );
        }
        let ports: HashSet<Uuid> = group.ports.iter().copied().collect();
        let Some(mut state) = self.groups.remove(&uuid) else {
            return;
        };
        let gone: Vec<Uuid> = state
            .members
            .keys()
            .filter(|p| !ports.contains(p))
            .copied()
            .collect();
        for port in gone {
            self.unlist_member(uuid, &mut state, port, delta);
        }
        let key_of = port_key_reader(sb);
        for port in ports {
            if matches!(state.members.get(&port), Some(Some(_))) {
                continue;
            }
            let key = key_of.as_ref().and_then(|read| read(&port));
            self.list_member(
                uuid,
                &mut state,
                (datapath, group.tunnel_key),
                port,
                key,
                delta,
            );
        }
        self.groups.insert(uuid, state);
    }

    fn retract_group(&mut self, uuid: Uuid, delta: &mut Delta) {
        if let Some(mut state) = self.groups.remove(&uuid) {
            let ports: Vec<Uuid> = state.members.keys().copied().collect();
            for port in ports {
                self.unlist_member(uuid, &mut state, port, delta);
            }
            self.remove(state.header, delta);
        }
    }

    fn rebuild(&mut self, sb: &Southbound, delta: &mut Delta) {
        let flows: Vec<Uuid> = self.flows.keys().copied().collect();
        for uuid in flows {
            self.retract_flow(uuid, delta);
        }
        let rows: Vec<Uuid> = self.rows.keys().copied().collect();
        for uuid in rows {
            self.retract_row(uuid, delta);
        }
        let groups: Vec<Uuid> = self.groups.keys().copied().collect();
        for uuid in groups {
            self.retract_group(uuid, delta);
        }
        for flow in sb.rows::<LogicalFlow>() {
            self.compile_flow(sb, &flow, delta);
        }
        let rows: Vec<Uuid> = sb
            .rows::<PortBinding>()
            .map(|p| p.uuid)
            .chain(sb.rows::<DatapathBinding>().map(|d| d.uuid))
            .chain(sb.rows::<MacBinding>().map(|m| m.uuid))
            .collect();
        for uuid in rows {
            self.compile_row(sb, uuid, delta);
        }
        let groups: Vec<Uuid> = sb.rows::<MulticastGroup>().map(|m| m.uuid).collect();
        for uuid in groups {
            self.update_group(sb, uuid, delta);
        }
        let switches: HashSet<u32> = self
            .underlay_routing
            .keys()
            .copied()
            .chain(
                sb.rows::<PortBinding>()
                    .filter(|port| port.kind == "localnet")
                    .filter_map(|port| sb.row::<DatapathBinding>(&port.datapath?))
                    .map(|datapath| datapath.tunnel_key),
            )
            .collect();
        for switch in switches {
            self.refresh_underlay_routing(sb, switch, delta);
        }
    }

    /// The switches (tunnel keys) whose U2O state a Port_Binding row can change: a localnet or
    /// patch port's own datapath, and a patch port's peer's. From the row's compiled entry, so
    /// that a deleted row still names them.
    fn underlay_candidates(&self, sb: &Southbound, row: Uuid) -> Vec<u32> {
        let Some(contribution) = self.rows.get(&row) else {
            return Vec::new();
        };
        let mut switches = Vec::new();
        for entry in &contribution.entries {
            match entry {
                IrEntry::Port {
                    datapath,
                    kind: PortKind::Localnet { .. },
                    ..
                } => switches.push(*datapath),
                IrEntry::Port {
                    datapath,
                    kind: PortKind::Patch { peer },
                    ..
                } => {
                    switches.push(*datapath);
                    switches.extend(
                        sb.port_by_name(peer)
                            .and_then(|port| sb.row::<DatapathBinding>(&port.datapath?))
                            .map(|datapath| datapath.tunnel_key),
                    );
                }
                _ => {}
            }
        }
        switches
    }

    /// Recomputes which routers route onto `switch` while it has a localnet port.
    fn refresh_underlay_routing(&mut self, sb: &Southbound, switch: u32, delta: &mut Delta) {
        let entries = underlay_routing_entries(sb, switch);
        for entry in &entries {
            self.add(entry.clone(), delta);
        }
        for entry in self.underlay_routing.remove(&switch).unwrap_or_default() {
            self.remove(entry, delta);
        }
        if !entries.is_empty() {
            self.underlay_routing.insert(switch, entries);
        }
    }

    fn add(&mut self, entry: IrEntry, delta: &mut Delta) {
        let count = self.entries.entry(entry.clone()).or_insert(0);
        *count += 1;
        if *count == 1 {
            *delta.0.entry(entry).or_insert(0) += 1;
        }
    }

    fn remove(&mut self, entry: IrEntry, delta: &mut Delta) {
        if let Some(count) = self.entries.get_mut(&entry) {
            *count -= 1;
            if *count == 0 {
                self.entries.remove(&entry);
                *delta.0.entry(entry).or_insert(0) -= 1;
            }
        }
    }

    fn retract_flow(&mut self, uuid: Uuid, delta: &mut Delta) {
        if let Some(contribution) = self.flows.remove(&uuid) {
            for entry in contribution.entries {
                self.remove(entry, delta);
            }
        }
    }

    fn retract_row(&mut self, uuid: Uuid, delta: &mut Delta) {
        if let Some(contribution) = self.rows.remove(&uuid) {
            for entry in contribution.entries {
                self.remove(entry, delta);
            }
        }
    }

    fn compile_flow(&mut self, sb: &Southbound, flow: &LogicalFlow, delta: &mut Delta) {
        let stage = flow
            .external_ids
            .get("stage-name")
            .cloned()
            .unwrap_or_default();
        let mut contribution = Contribution {
            stage: stage.clone(),
            ..Contribution::default()
        };
        let parsed = parse_match(&flow.match_)
            .map_err(|e| format!("match does not parse: {e}"))
            .and_then(|m| {
                parse_actions(&flow.actions)
                    .map(|a| (m, a))
                    .map_err(|e| format!("actions do not parse: {e}"))
            });
        match parsed {
            Err(reason) => contribution.outcome = Some(Outcome::Unsupported(reason)),
            Ok((match_, actions)) => {
                for datapath in flow_datapaths(sb, flow) {
                    let class = classify::classify(&Flow {
                        datapath,
                        stage: &stage,
                        priority: flow.priority,
                        match_: &match_,
                        actions: &actions,
                    });
                    let outcome = match class {
                        Class::Compiled(entries) => {
                            contribution.entries.extend(entries);
                            Outcome::Compiled
                        }
                        Class::Neutral => Outcome::Neutral,
                        Class::SideDuty { entries, duty } => {
                            contribution.entries.extend(entries);
                            contribution.entries.push(IrEntry::SideDutyNotDone {
                                datapath,
                                stage: stage.clone(),
                                duty: duty.clone(),
                            });
                            Outcome::SideDuty(duty)
                        }
                        Class::Unsupported(reason) => {
                            contribution.entries.push(IrEntry::Unsupported {
                                datapath,
                                stage: stage.clone(),
                                reason: reason.clone(),
                            });
                            // northd names the ACL a flow comes from; its default ACL-stage
                            // flows carry no such hint.
                            if let Some(acl) = flow.external_ids.get("stage-hint")
                                && classify::is_acl_stage(&stage)
                            {
                                contribution.entries.push(IrEntry::UnenforcedAcl {
                                    datapath,
                                    acl: acl.clone(),
                                });
                            }
                            Outcome::Unsupported(reason)
                        }
                    };
                    // A flow is as supported as its worst datapath.
                    if contribution
                        .outcome
                        .as_ref()
                        .is_none_or(|worst| outcome.severity() >= worst.severity())
                    {
                        contribution.outcome = Some(outcome);
                    }
                }
            }
        }
        for entry in contribution.entries.clone() {
            self.add(entry, delta);
        }
        self.flows.insert(flow.uuid, contribution);
    }

    fn compile_row(&mut self, sb: &Southbound, uuid: Uuid, delta: &mut Delta) {
        let entries = if let Some(port) = sb.row::<PortBinding>(&uuid) {
            port_entry(sb, &port).into_iter().collect()
        } else if let Some(binding) = sb.row::<MacBinding>(&uuid) {
            learned_neighbour(sb, &binding).into_iter().collect()
        } else if let Some(datapath) = sb.row::<DatapathBinding>(&uuid) {
            vec![IrEntry::Datapath {
                datapath: datapath.tunnel_key,
                name: datapath
                    .external_ids
                    .get("name")
                    .cloned()
                    .unwrap_or_default(),
                router: datapath.external_ids.contains_key("logical-router"),
            }]
        } else {
            return;
        };
        let contribution = Contribution {
            entries,
            ..Contribution::default()
        };
        for entry in contribution.entries.clone() {
            self.add(entry, delta);
        }
        self.rows.insert(uuid, contribution);
    }

    /// Every unsupported flow: (flow, stage, reason).
    #[must_use]
    pub fn unsupported_flows(&self) -> Vec<(Uuid, &str, &str)> {
        let mut flows: Vec<(Uuid, &str, &str)> = self
            .flows
            .iter()
            .filter_map(|(uuid, c)| match &c.outcome {
                Some(Outcome::Unsupported(reason)) => {
                    Some((*uuid, c.stage.as_str(), reason.as_str()))
                }
                _ => None,
            })
            .collect();
        flows.sort_by(|a, b| (a.1, a.2, a.0).cmp(&(b.1, b.2, b.0)));
        flows
    }

    /// Every flow compiled with a side duty not done: (flow, stage, duty).
    #[must_use]
    pub fn side_duty_flows(&self) -> Vec<(Uuid, &str, &str)> {
        let mut flows: Vec<(Uuid, &str, &str)> = self
            .flows
            .iter()
            .filter_map(|(uuid, c)| match &c.outcome {
                Some(Outcome::SideDuty(duty)) => Some((*uuid, c.stage.as_str(), duty.as_str())),
                _ => None,
            })
            .collect();
        flows.sort_by(|a, b| (a.1, a.2, a.0).cmp(&(b.1, b.2, b.0)));
        flows
    }

    /// Per-stage coverage of the logical flows compiled so far.
    #[must_use]
    pub fn coverage(&self) -> BTreeMap<String, StageCoverage> {
        let mut coverage: BTreeMap<String, StageCoverage> = BTreeMap::new();
        for contribution in self.flows.values() {
            let stage = coverage.entry(contribution.stage.clone()).or_default();
            stage.flows += 1;
            match &contribution.outcome {
                Some(Outcome::Compiled) => stage.compiled += 1,
                Some(Outcome::Neutral) => stage.neutral += 1,
                Some(Outcome::SideDuty(duty)) => {
                    stage.side_duty += 1;
                    *stage.side_duties.entry(duty.clone()).or_insert(0) += 1;
                }
                Some(Outcome::Unsupported(reason)) => {
                    stage.unsupported += 1;
                    *stage.reasons.entry(reason.clone()).or_insert(0) += 1;
                }
                // A flow on no datapath known to this replica: nothing to forward with.
                None => stage.neutral += 1,
            }
        }
        // Not a flow but the topology: routers that route onto underlay switches.
        for entry in self.underlay_routing.values().flatten() {
            if let IrEntry::Unsupported { stage, reason, .. } = entry {
                let stage = coverage.entry(stage.clone()).or_default();
                stage.unsupported += 1;
                *stage.reasons.entry(reason.clone()).or_insert(0) += 1;
            }
        }
        coverage
    }
}

/// The stage name under which routers that route onto an underlay switch are reported.
pub const UNDERLAY_ROUTING_STAGE: &str = "u2o (router ports on underlay switches)";

/// One Unsupported entry per router with a port on `switch`, if `switch` has a localnet port:
/// routing between an underlay and an overlay subnet (Kube-OVN's U2O interconnection) is not
/// compiled. OVN sends such routed traffic through the localnet port, with per-chassis MACs
/// (`ovn-chassis-mac-mappings`), which the kernel programs do not do.
fn underlay_routing_entries(sb: &Southbound, switch: u32) -> Vec<IrEntry> {
    let Some(datapath) = sb.datapath_by_key(switch) else {
        return Vec::new();
    };
    if datapath.external_ids.contains_key("logical-router") {
        return Vec::new();
    }
    let ports: Vec<PortBinding> = sb.typed_ports_on_datapath(datapath.uuid).collect();
    let Some(localnet) = ports.iter().find(|port| port.kind == "localnet") else {
        return Vec::new();
    };
    let name = datapath
        .external_ids
        .get("name")
        .cloned()
        .unwrap_or_default();
    let mut routers: Vec<u32> = ports
        .iter()
        .filter(|port| port.kind == "patch")
        .filter_map(|port| sb.port_by_name(port.options.get("peer")?))
        .filter_map(|router_port| sb.row::<DatapathBinding>(&router_port.datapath?))
        .filter(|router| router.external_ids.contains_key("logical-router"))
        .map(|router| router.tunnel_key)
        .collect();
    routers.sort_unstable();
    routers.dedup();
    routers
        .into_iter()
        .map(|router| IrEntry::Unsupported {
            datapath: router,
            stage: UNDERLAY_ROUTING_STAGE.to_string(),
            reason: format!(
                "routes onto underlay switch {name} (localnet port {}): U2O interconnection is not compiled",
                localnet.logical_port
            ),
        })
        .collect()
}

/// Tunnel keys of the datapaths a flow applies to.
fn flow_datapaths(sb: &Southbound, flow: &LogicalFlow) -> Vec<u32> {
    let datapaths: Vec<Uuid> = match (flow.logical_datapath, flow.logical_dp_group) {
        (Some(datapath), _) => vec![datapath],
        (None, Some(group)) => sb
            .row::<LogicalDpGroup>(&group)
            .map(|g| g.datapaths)
            .unwrap_or_default(),
        (None, None) => Vec::new(),
    };
    datapaths
        .iter()
        .filter_map(|dp| sb.row::<DatapathBinding>(dp))
        .map(|dp| dp.tunnel_key)
        .collect()
}

fn port_entry(sb: &Southbound, port: &PortBinding) -> Option<IrEntry> {
    let datapath = sb.row::<DatapathBinding>(&port.datapath?)?.tunnel_key;
    let kind = match port.kind.as_str() {
        "" => PortKind::Vif {
            chassis: port
                .chassis
                .and_then(|c| sb.row::<Chassis>(&c))
                .map(|c| c.name),
        },
        "patch" => PortKind::Patch {
            peer: port.options.get("peer").cloned().unwrap_or_default(),
        },
        "localnet" => PortKind::Localnet {
            network_name: port
                .options
                .get("network_name")
                .cloned()
                .unwrap_or_default(),
            tag: port.tag.and_then(|t| u16::try_from(t).ok()),
        },
        other => PortKind::Other(other.to_string()),
    };
    Some(IrEntry::Port {
        datapath,
        key: port.tunnel_key,
        name: port.logical_port.clone(),
        kind,
        addresses: port.mac.clone(),
        port_security: port.port_security.clone(),
    })
}

/// A MAC_Binding row as a learned neighbour (IPv4 only for now).
fn learned_neighbour(sb: &Southbound, binding: &MacBinding) -> Option<IrEntry> {
    let datapath = sb.row::<DatapathBinding>(&binding.datapath?)?.tunnel_key;
    let ip = binding.ip.parse().ok()?;
    let mut mac = [0_u8; 6];
    let parts: Vec<&str> = binding.mac.split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    for (byte, part) in mac.iter_mut().zip(parts) {
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    Some(IrEntry::LearnedNeighbour {
        datapath,
        port: binding.logical_port.clone(),
        ip,
        mac,
    })
}

/// A Multicast_Group's header entry, read column by column (its member list is not decoded).
fn group_header(sb: &Southbound, uuid: Uuid) -> Option<IrEntry> {
    let row = sb.replica().table(MulticastGroup::TABLE)?.row(&uuid)?;
    let datapath_row = row.get("datapath")?.single()?.as_uuid()?;
    let datapath = sb.row::<DatapathBinding>(&datapath_row)?.tunnel_key;
    let key = u32::try_from(row.get("tunnel_key")?.single()?.as_integer()?).ok()?;
    let name = row.get("name")?.single()?.as_str()?.to_string();
    Some(IrEntry::FloodGroup {
        datapath,
        key,
        name,
    })
}

/// Reads a Port_Binding's tunnel key by row, from the replica column alone (no row decoding:
/// groups like `_MC_flood` hold every port of a switch).
fn port_key_reader(sb: &Southbound) -> Option<impl Fn(&Uuid) -> Option<u32> + '_> {
    let bindings = sb.replica().table(PortBinding::TABLE)?;
    let key_column = bindings.layout().position("tunnel_key")?;
    Some(move |port: &Uuid| {
        let row = bindings.row(port)?;
        let key = row.row.values[key_column].single()?.as_integer()?;
        u32::try_from(key).ok()
    })
}
