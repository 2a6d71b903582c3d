//! The compiler: Southbound rows → reference-counted IR entries. Each logical flow is parsed once
//! and classified per datapath ([`super::classify`]); Port_Binding and Multicast_Group rows become
//! port and flood-group entries, Encap rows the chassis's tunnel endpoints. Every source row remembers the entries it contributed, so a
//! change set costs O(changed rows) and yields an [`IrDiff`]. Touches only the SB replica (read)
//! and the IR.

mod address_sets;
mod coverage;
mod entry_table;
mod gateway;
mod groups;
mod registers;
mod rows;
mod underlay;

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use smallvec::SmallVec;

use uuid::Uuid;

use address_sets::FlowsBySet;
pub use coverage::{Outcome, StageCoverage};
use entry_table::{EntryId, EntryTable};
use groups::GroupState;
pub use underlay::UNDERLAY_ROUTING_STAGE;

use super::{
    classify::{self, Class, Flow},
    ir::{IrDiff, IrDiffRef, IrEntry, Unforwardable},
};
use crate::{
    lflow::{parse_actions, parse_match},
    ovsdb::replica::ChangeSet,
    sb::{
        Southbound,
        rows::{
            AddressSet, Chassis, DatapathBinding, Encap, LogicalDpGroup, LogicalFlow, MacBinding,
            MulticastGroup, PortBinding, PortGroup,
        },
    },
};

/// A logical flow's contribution.
#[derive(Debug)]
struct Contribution {
    /// A flow's stage (`stage-name`), one shared copy per stage name.
    stage: Arc<str>,
    outcome: Option<Outcome>,
    /// What the row contributed, by id in the compiler's [`EntryTable`].
    entries: EntryIds,
    /// How a logical flow uses registers, for the flows that need or set any (most do
    /// neither, and pay one pointer).
    registers: Option<Box<registers::RegisterUse>>,
    /// The address sets a logical flow's match names (`$name`).
    address_sets: Box<[String]>,
}

/// A source's entry ids: most flows and rows have one to four, kept inline (a vector's block
/// of a 4-byte id took 32 bytes).
type EntryIds = SmallVec<[EntryId; 4]>;

/// The compiler's state: contributions per source row and the reference-counted IR.
#[derive(Debug, Default)]
pub struct Compiler {
    flows: HashMap<Uuid, Contribution>,
    /// Which flows name which address set.
    flows_by_set: FlowsBySet,
    /// The entries of each row (Port_Binding, MAC_Binding, Encap, …) that is not a flow.
    rows: HashMap<Uuid, EntryIds>,
    groups: HashMap<Uuid, GroupState>,
    /// Port_Binding row → the groups listing it, so a port that arrives (or changes its key)
    /// after its groups updates just its member entries.
    port_groups: HashMap<Uuid, HashSet<Uuid>>,
    /// Switches with a localnet port that routers route onto (Kube-OVN's U2O interconnection,
    /// not compiled): per switch tunnel key, the Unsupported entries of those routers.
    underlay_routing: HashMap<u32, EntryIds>,
    ir: EntryTable,
    /// The stage names of the flows compiled, each held once.
    stages: HashSet<Arc<str>>,
    /// Port_Binding address entries (`mac`, `port_security`) that did not parse, counted each
    /// time their row was compiled.
    bad_addresses: u64,
    /// Whole recompiles (the first view, a resync, a Datapath_Binding change).
    full_compiles: u64,
}

/// How the IR's entries changed in one [`Compiler::apply`], or `None` while the first view is
/// compiled into an empty IR: its diff is then the whole IR, and a change set of it would be a
/// second copy of every entry at the snapshot's peak.
struct Delta(Option<HashMap<IrEntry, i64>>);

impl Delta {
    fn tracked() -> Self {
        Self(Some(HashMap::new()))
    }

    fn count(&mut self, entry: IrEntry, change: i64) {
        if let Some(changes) = &mut self.0 {
            *changes.entry(entry).or_insert(0) += change;
        }
    }

    fn into_diff(self) -> IrDiff {
        let mut diff = IrDiff::default();
        for (entry, change) in self.0.unwrap_or_default() {
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

    /// Port_Binding address entries that did not parse (and were left out of the IR) so far,
    /// counted each time their row was compiled.
    #[must_use]
    pub fn bad_addresses(&self) -> u64 {
        self.bad_addresses
    }

    /// How many times every row and flow was compiled: the first view, a resync, a
    /// Datapath_Binding change (the costly case: the cold start's compile again).
    #[must_use]
    pub fn full_compiles(&self) -> u64 {
        self.full_compiles
    }

    /// Every IR entry.
    pub fn entries(&self) -> impl Iterator<Item = &IrEntry> {
        self.ir.iter()
    }

    /// Brings the IR in line with `sb` after it applied `changes`, and says what changed: a copy
    /// of [`Self::compile`]'s diff, the first view's too (for callers that keep it).
    pub fn apply(&mut self, sb: &Southbound, changes: &ChangeSet) -> IrDiff {
        self.compile(sb, changes)
            .unwrap_or_else(|| self.whole_view().to_owned_diff())
    }

    /// What a [`Self::compile`] changed, by reference: its diff, or for a first view the
    /// whole IR.
    #[must_use]
    pub fn view<'a>(&'a self, compiled: Option<&'a IrDiff>) -> IrDiffRef<'a> {
        compiled.map_or_else(|| self.whole_view(), IrDiff::borrowed)
    }

    /// Every entry, sorted: the diff of a first view, read in place.
    #[must_use]
    pub fn whole_view(&self) -> IrDiffRef<'_> {
        let mut added: Vec<&IrEntry> = self.ir.iter().collect();
        added.sort_unstable();
        IrDiff {
            added,
            removed: Vec::new(),
        }
    }

    /// Brings the IR in line with `sb` after it applied `changes`: the entries that appeared and
    /// disappeared, or `None` when this compiled a first view into an empty IR. That diff is
    /// then the whole IR, [`Self::whole_view`]: a copy of it was the largest allocation of the
    /// agent's start (25 MB at 10,000 pods), and a change set of it a second one.
    pub fn compile(&mut self, sb: &Southbound, changes: &ChangeSet) -> Option<IrDiff> {
        if changes.resynced && self.ir.is_empty() {
            self.rebuild(sb, &mut Delta(None));
            return None;
        }
        let mut delta = Delta::tracked();
        if changes.resynced {
            self.rebuild(sb, &mut delta);
            return Some(delta.into_diff());
        }
        let mut flows = HashSet::new();
        let mut rows = Vec::new();
        let mut groups = Vec::new();
        let mut member_changes = Vec::new();
        for (table, change) in &changes.tables {
            let touched = change
                .inserted
                .iter()
                .copied()
                .chain(change.modified.iter().map(|(u, _)| *u));
            let gone = change.deleted.iter().map(|(u, _)| *u);
            match table.as_str() {
                LogicalFlow::TABLE => flows.extend(touched.chain(gone)),
                AddressSet::TABLE => {
                    for set in touched.chain(gone) {
                        let (named_by, old, new) = self.flows_by_set.changed(sb, set);
                        flows.extend(named_by);
                        // A set whose addresses changed (its name did not): its members'
                        // entries alone, O(the addresses that changed).
                        let addresses = change
                            .set_changes
                            .get(&set)
                            .and_then(|c| c.iter().find(|c| c.column == "addresses"));
                        match (addresses, old, new) {
                            (Some(addresses), Some(old), Some(new))
                                if old == new && self.rows.contains_key(&set) =>
                            {
                                member_changes.push((set, new, addresses.clone()));
                            }
                            _ => rows.push(set),
                        }
                    }
                }
                PortGroup::TABLE => rows.extend(touched.chain(gone)),
                PortBinding::TABLE | MacBinding::TABLE | Encap::TABLE => {
                    rows.extend(touched.chain(gone))
                }
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
                Chassis::TABLE => {
                    // A chassis's name is in the port entries of the ports bound to it (or
                    // asking for it), and nowhere else: theirs alone. Every chassis that
                    // registers or changes used to recompile every row and flow on every node
                    // (at 50,000 pods, as much as a cold start; once more at each start, for
                    // the agent's own registration).
                    for chassis in touched.chain(gone) {
                        rows.extend(
                            (sb.indexes().ports_by_chassis.get(&chassis).into_iter())
                                .flatten()
                                .copied(),
                        );
                    }
                }
                DatapathBinding::TABLE => {
                    // Tunnel keys are baked into entries everywhere: rare, so recompile all
                    // rather than tracking every dependency.
                    self.rebuild(sb, &mut delta);
                    return Some(delta.into_diff());
                }
                _ => {}
            }
        }
        // A chassisredirect port's coming or going turns the verdicts of its router's flows.
        for uuid in &rows {
            let now = sb
                .row::<PortBinding>(uuid)
                .and_then(|port| gateway::gateway_port_entry(sb, &port));
            let before = self
                .rows
                .get(uuid)
                .map(|ids| ids.as_slice())
                .unwrap_or_default();
            let gateway = |entry: &&IrEntry| matches!(entry, IrEntry::GatewayPort { .. });
            let entries: Vec<IrEntry> = (self.ir.resolve(before))
                .filter(gateway)
                .cloned()
                .chain(now)
                .collect();
            flows.extend(gateway::dependent_flows(sb, &entries));
        }
        for (set, name, addresses) in member_changes {
            self.change_address_set_members(set, &name, &addresses, &mut delta);
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
        Some(delta.into_diff())
    }

    fn rebuild(&mut self, sb: &Southbound, delta: &mut Delta) {
        self.full_compiles += 1;
        self.flows_by_set.relearn_names(sb);
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
            .chain(sb.rows::<Encap>().map(|e| e.uuid))
            .chain(sb.rows::<AddressSet>().map(|a| a.uuid))
            .chain(sb.rows::<PortGroup>().map(|g| g.uuid))
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
        self.ir.shrink_to_fit();
    }

    /// Counts one more use of `entry`, by the source that keeps the returned id.
    fn add(&mut self, entry: IrEntry, delta: &mut Delta) -> EntryId {
        let (id, new) = self.ir.add(entry);
        if new
            && delta.0.is_some()
            && let Some(entry) = self.ir.get(id)
        {
            delta.count(entry.clone(), 1);
        }
        id
    }

    fn add_all(&mut self, entries: Vec<IrEntry>, delta: &mut Delta) -> EntryIds {
        entries
            .into_iter()
            .map(|entry| self.add(entry, delta))
            .collect()
    }

    fn remove(&mut self, id: EntryId, delta: &mut Delta) {
        if let Some(entry) = self.ir.remove(id) {
            delta.count(entry, -1);
        }
    }

    fn retract_flow(&mut self, uuid: Uuid, delta: &mut Delta) {
        if let Some(contribution) = self.flows.remove(&uuid) {
            self.flows_by_set.remove(uuid, &contribution.address_sets);
            for entry in contribution.entries {
                self.remove(entry, delta);
            }
        }
    }

    fn retract_row(&mut self, uuid: Uuid, delta: &mut Delta) {
        for id in self.rows.remove(&uuid).unwrap_or_default() {
            self.remove(id, delta);
        }
    }

    fn compile_flow(&mut self, sb: &Southbound, flow: &LogicalFlow, delta: &mut Delta) {
        let stage = flow
            .external_ids
            .get("stage-name")
            .cloned()
            .unwrap_or_default();
        let shared_stage = match self.stages.get(stage.as_str()) {
            Some(shared) => shared.clone(),
            None => {
                let shared: Arc<str> = Arc::from(stage.as_str());
                self.stages.insert(shared.clone());
                shared
            }
        };
        let mut contribution = Contribution {
            stage: shared_stage,
            outcome: None,
            entries: EntryIds::new(),
            registers: None,
            address_sets: Box::default(),
        };
        let mut address_sets = Vec::new();
        let mut contributed = Vec::new();
        let parsed = parse_match(&flow.match_)
            .map_err(|e| format!("match does not parse: {e}"))
            .and_then(|m| {
                parse_actions(&flow.actions)
                    .map(|a| (m, a))
                    .map_err(|e| format!("actions do not parse: {e}"))
            });
        match parsed {
            Err(reason) => contribution.outcome = Some(Outcome::Unsupported(reason)),
            Ok((mut match_, actions)) => {
                let datapaths = flow_datapaths(sb, flow);
                contribution.registers =
                    registers::RegisterUse::of(&match_, &actions, &datapaths).map(Box::new);
                let expanded = address_sets::expand(
                    &mut match_,
                    sb,
                    &mut address_sets,
                    classify::keeps_address_sets(&stage),
                );
                let acl_name = flow.external_ids.get("stage-hint");
                let redirect_port = expanded
                    .is_ok()
                    .then(|| gateway::redirect_port(sb, &classify::resident_ports(&match_)))
                    .flatten()
                    .map(str::to_string);
                for datapath in datapaths {
                    let class = match &expanded {
                        // Installed by ovn-controller only where the port resides.
                        Ok(()) if let Some(redirect) = &redirect_port => {
                            classify::classify_resident(
                                &Flow {
                                    datapath,
                                    stage: &stage,
                                    priority: flow.priority,
                                    match_: &match_,
                                    actions: &actions,
                                },
                                redirect,
                            )
                        }
                        Ok(()) => classify::classify(&Flow {
                            datapath,
                            stage: &stage,
                            priority: flow.priority,
                            match_: &match_,
                            actions: &actions,
                        }),
                        Err(reason) => Class::Unsupported(reason.clone()),
                    };
                    // Centralized NAT not carried: the gateway is fenced wherever its port is
                    // active.
                    if let Some(redirect) = &redirect_port
                        && matches!(class, Class::Neutral)
                        && classify::translates_with_conntrack(&stage, &actions)
                    {
                        contributed.push(IrEntry::CentralizedNat {
                            datapath,
                            redirect: redirect.clone(),
                        });
                    }
                    let outcome = match class {
                        Class::Compiled(entries) => {
                            contributed.extend(entries.into_iter().map(|entry| match entry {
                                IrEntry::Acl { datapath, mut rule } => {
                                    rule.acl = acl_name.cloned();
                                    IrEntry::Acl { datapath, rule }
                                }
                                other => other,
                            }));
                            Outcome::Compiled
                        }
                        Class::Neutral => Outcome::Neutral,
                        Class::SideDuty { entries, duty } => {
                            contributed.extend(entries);
                            contributed.push(IrEntry::SideDutyNotDone {
                                datapath,
                                stage: stage.clone(),
                                duty: duty.clone(),
                            });
                            Outcome::SideDuty(duty)
                        }
                        Class::Unsupported(reason) => {
                            let gateway = (expanded.is_ok() && stage.starts_with("lr_"))
                                .then(|| {
                                    gateway::confined_to_gateway(
                                        &gateway::gateway_ports(sb, datapath),
                                        &stage,
                                        &classify::pinned_ports(&match_),
                                        classify::is_bare_arp_request(&match_)
                                            || classify::is_bare_destination(&match_),
                                    )
                                })
                                .flatten();
                            let reason = match &gateway {
                                Some(port) => format!(
                                    "{reason}; only gateway port {port}'s traffic, dropped as \
                                     gateway_unsupported"
                                ),
                                None => reason,
                            };
                            contributed.push(IrEntry::Unsupported {
                                datapath,
                                stage: stage.clone(),
                                reason: reason.clone(),
                            });
                            if gateway.is_none() && classify::unsupported_stops_forwarding(&stage) {
                                let (stage, reason) = (stage.clone(), reason.clone());
                                // A flow only IPv6 can match keeps the IPv6 of the router out
                                // (a dual-stack VPC's IPv4 goes on).
                                let reason =
                                    if expanded.is_ok() && classify::matches_only_ipv6(&match_) {
                                        Unforwardable::UnsupportedIpv6Flow { stage, reason }
                                    } else {
                                        Unforwardable::UnsupportedFlow { stage, reason }
                                    };
                                contributed.push(IrEntry::NotForwardable { datapath, reason });
                            }
                            // Security fails closed: the switch's pipeline drops what reaches
                            // an ACL stage it cannot translate.
                            if let Some(egress) = classify::acl_fails_closed(&stage) {
                                contributed.push(IrEntry::AclFailClosed { datapath, egress });
                            }
                            // northd names the ACL a flow comes from; its default ACL-stage
                            // flows carry no such hint.
                            if let Some(acl) = acl_name
                                && classify::is_acl_stage(&stage)
                            {
                                contributed.push(IrEntry::UnenforcedAcl {
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
        contribution.entries = self.add_all(contributed, delta);
        contribution.address_sets = address_sets.into_boxed_slice();
        self.flows_by_set.add(flow.uuid, &contribution.address_sets);
        self.flows.insert(flow.uuid, contribution);
    }
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

#[cfg(test)]
mod tests;
