//! The ACL family of the L2 maps: per switch, whether its pipelines run the ACL stages and send
//! packets to conntrack (`ACL_SWITCHES`), its rule lists (`ACL_RULES`, highest priority first,
//! from the IR's compiled ACL flows by [`acl_rules`](super::acl_rules)), and the members of the
//! address sets and port sets those rules name (`ACL_ADDRESSES`, `ACL_PORT_SETS`), installed for
//! the sets some rule names. A pod joining a NetworkPolicy's port group or address set writes
//! its one member entry; a rule's change recomputes its switch's lists. Switches whose egress
//! pipeline has rules give their local ports `LOCAL_PORT_ACL`. After any write to these maps the
//! flush (and the sweep) advances `ACL_GENERATION`, which makes the kernel's cached verdicts
//! stale; an agent's first flush advances it whatever it writes. Owns these maps' desired values
//! and tables and the generation; reads the state's ports.
//!
//! A pipeline whose rules do not fit the kernel (more than [`MAX_RULES_PER_LIST`] in a list, a
//! clause the kernel rule cannot hold) fails closed, as an untranslatable flow does, and says so
//! in the log.

use std::{
    cell::Cell,
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
};

use ovnbpf_common::acl::{
    self as kernel, AclAddressKey, AclPortKey, AclRuleKey, AclSwitch, COMMIT_EGRESS,
    COMMIT_INGRESS, FAIL_CLOSED_EGRESS, FAIL_CLOSED_INGRESS, MAX_RULES_PER_LIST,
    STATELESS_SKIPS_LB_EGRESS, STATELESS_SKIPS_LB_INGRESS, SWITCH_EGRESS, SWITCH_INGRESS,
    TRACK_EGRESS_ACL, TRACK_EGRESS_LB, TRACK_INGRESS_ACL, TRACK_INGRESS_LB, UNCHECKED_EGRESS,
    UNCHECKED_FLOOD, UNCHECKED_INGRESS, USER_RULES_EGRESS, USER_RULES_INGRESS, list,
};
use ovnbpf_common::maps::{AclAddresses, AclGeneration, AclPortSets, AclRules, AclSwitches};
use tracing::warn;

use super::{
    super::{
        EbpfError, Maps,
        tables::{Table, TableKey, flush_from},
    },
    L2State,
    acl_rules::{self, SetIds},
};
use crate::dataplane::ebpf::acl_log::{AclLogBook, AclLogName};
use crate::pipeline::ir::{
    AclAction, AclLog, AclMatch, AclRule, AclStage, IrEntry, PortRef, Prefix, TrackingStage,
};

impl TableKey<AclSwitches> for u32 {
    fn slot(&self) -> u32 {
        *self
    }
}

impl TableKey<AclRules> for AclRuleKey {
    fn slot(&self) -> AclRuleKey {
        *self
    }
}

impl TableKey<AclAddresses> for (u32, Prefix) {
    fn slot(&self) -> (AclAddressKey, u32) {
        let (set, prefix) = self;
        (
            AclAddressKey {
                set: *set,
                address: u32::from_ne_bytes(prefix.network.octets()),
            },
            32 + u32::from(prefix.length.min(32)),
        )
    }
}

impl TableKey<AclPortSets> for AclPortKey {
    fn slot(&self) -> AclPortKey {
        *self
    }
}

/// A switch's ACL entries from the IR.
#[derive(Debug, Default)]
struct SwitchAcl {
    rules: BTreeSet<Box<AclRule>>,
    tracking: BTreeSet<(bool, TrackingStage)>,
    bypasses: BTreeSet<(bool, TrackingStage, bool, AclMatch)>,
    stateless_skips_lb: BTreeSet<bool>,
    fail_closed: BTreeSet<bool>,
    commit: BTreeSet<bool>,
}

impl SwitchAcl {
    fn is_empty(&self) -> bool {
        self.rules.is_empty()
            && self.tracking.is_empty()
            && self.bypasses.is_empty()
            && self.stateless_skips_lb.is_empty()
            && self.fail_closed.is_empty()
            && self.commit.is_empty()
    }
}

/// A switch's kernel form.
#[derive(Debug, Default)]
struct Compiled {
    switch: AclSwitch,
    rules: HashMap<(u32, u32), kernel::AclRule>,
    address_sets: BTreeSet<u32>,
    port_sets: BTreeSet<u32>,
}

/// What a port set holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum PortSetName {
    /// An SB port group (`<datapath key>_<name>`), of that datapath's ports.
    Group { datapath: u32, name: String },
    /// One logical port.
    Port { datapath: u32, name: String },
}

/// Set ids, allocated once per name while the agent runs (0 is "any"): a hash of the set's
/// name, so that a restarted agent gives each set the id the kernel holds its members under
/// (ids in order of first use differ from one agent to the next, and until the new agent's
/// writes and sweep are all in, rules would meet another set's members under their ids).
#[derive(Debug, Default)]
struct Ids {
    addresses: HashMap<String, u32>,
    address_names: HashMap<u32, String>,
    ports: HashMap<PortSetName, u32>,
    port_names: HashMap<u32, PortSetName>,
    /// Literal prefixes of inline sets, by their name.
    inline: HashMap<String, Vec<Prefix>>,
    /// Log ids (their own numbering), and what each stands for, shared with the event reader.
    logs: HashMap<AclLogName, u32>,
    log_book: AclLogBook,
}

impl Ids {
    /// The id of a new set named `name` (FNV-1a, the next free one on a collision).
    fn allocate(&self, name: &str) -> u32 {
        let mut hash: u32 = 0x811c_9dc5;
        for byte in name.bytes() {
            hash = (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193);
        }
        let mut id = hash.max(1);
        while self.address_names.contains_key(&id) || self.port_names.contains_key(&id) {
            id = id.wrapping_add(1).max(1);
        }
        id
    }
}

impl SetIds for Ids {
    fn log_id(&mut self, log: &AclLog, egress: bool) -> u32 {
        let name = AclLogName {
            name: log.name.clone(),
            severity: log.severity.clone().unwrap_or_else(|| "info".into()),
            verdict: log.verdict.clone(),
            egress,
        };
        if let Some(id) = self.logs.get(&name) {
            return *id;
        }
        let id = u32::try_from(self.logs.len() + 1).unwrap_or(u32::MAX);
        self.logs.insert(name.clone(), id);
        if let Ok(mut book) = self.log_book.write() {
            book.insert(id, name);
        }
        id
    }

    fn address_set(&mut self, name: &str) -> u32 {
        if let Some(id) = self.addresses.get(name) {
            return *id;
        }
        let id = self.allocate(&format!("address set {name}"));
        self.addresses.insert(name.to_string(), id);
        self.address_names.insert(id, name.to_string());
        id
    }

    fn inline_set(&mut self, prefixes: &[Prefix]) -> u32 {
        let mut sorted = prefixes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        // Address_Set names are identifiers: ':' never starts one.
        let name = format!(":{sorted:?}");
        self.inline.entry(name.clone()).or_insert(sorted);
        self.address_set(&name)
    }

    fn port_set(&mut self, datapath: u32, port: &PortRef) -> u32 {
        let name = match port {
            PortRef::Group(name) => PortSetName::Group {
                datapath: name
                    .split_once('_')
                    .and_then(|(key, _)| key.parse().ok())
                    .unwrap_or(datapath),
                name: name.clone(),
            },
            PortRef::Port(name) => PortSetName::Port {
                datapath,
                name: name.clone(),
            },
        };
        if let Some(id) = self.ports.get(&name) {
            return *id;
        }
        let id = self.allocate(&match &name {
            PortSetName::Group { datapath, name } => format!("port group {datapath} {name}"),
            PortSetName::Port { datapath, name } => format!("port {datapath} {name}"),
        });
        self.ports.insert(name.clone(), id);
        self.port_names.insert(id, name);
        id
    }
}

/// The ACL family's state and tables.
#[derive(Debug, Default)]
pub(super) struct AclState {
    switches: HashMap<u32, SwitchAcl>,
    dirty: BTreeSet<u32>,
    compiled: HashMap<u32, Compiled>,
    ids: Ids,
    /// Rules of installed switches naming each set.
    address_refs: HashMap<u32, usize>,
    port_refs: HashMap<u32, usize>,
    /// Members from the IR: address set → prefixes; port group → port names.
    address_members: HashMap<String, BTreeSet<Prefix>>,
    group_members: HashMap<String, BTreeSet<String>>,
    groups_of_port: HashMap<String, BTreeSet<String>>,
    /// Switches whose egress pipeline runs the ACL stage.
    pub(super) egress_switches: HashSet<u32>,
    /// `--unsupported-acl=allow`: what does not translate is left out, nothing fails closed.
    fail_open: bool,
    switch_table: Table<AclSwitches, u32>,
    rule_table: Table<AclRules, AclRuleKey>,
    address_table: Table<AclAddresses, (u32, Prefix)>,
    port_table: Table<AclPortSets, AclPortKey>,
    /// The generation this agent last wrote to `ACL_GENERATION` (the agent alone writes it);
    /// `None` until its first flush, which advances whatever it writes (a previous agent may
    /// have written without advancing). A cell: the sweep advances it too.
    generation: Cell<Option<u64>>,
}

impl AclState {
    pub(super) fn pending(&self) -> usize {
        self.dirty.len()
            + self.switch_table.pending()
            + self.rule_table.pending()
            + self.address_table.pending()
            + self.port_table.pending()
    }
}

/// The list a rule of `stage` goes in.
fn list_of(stage: AclStage) -> u32 {
    match stage {
        AclStage::Ingress => list::INGRESS,
        AclStage::IngressAfterLb => list::AFTER_LB,
        AclStage::Egress => list::EGRESS,
    }
}

fn bypass_list(egress: bool, stage: TrackingStage) -> u32 {
    match (egress, stage) {
        (false, TrackingStage::PreAcl) => list::INGRESS_BYPASS_ACL,
        (false, TrackingStage::PreLb) => list::INGRESS_BYPASS_LB,
        (true, TrackingStage::PreAcl) => list::EGRESS_BYPASS_ACL,
        (true, TrackingStage::PreLb) => list::EGRESS_BYPASS_LB,
    }
}

impl L2State {
    /// What the log ids of the kernel's ACL log events stand for (kept while the agent runs:
    /// one entry per distinct ACL name, severity, verdict and direction ever logged).
    #[must_use]
    pub fn acl_log_book(&self) -> AclLogBook {
        self.acl.ids.log_book.clone()
    }

    /// Whether ACLs that do not translate are ignored (fail-open) rather than dropping what
    /// reaches their stage; every switch is recomputed.
    pub fn set_acl_fail_open(&mut self, fail_open: bool) {
        self.acl.fail_open = fail_open;
        let switches: Vec<u32> = self.acl.switches.keys().copied().collect();
        self.acl.dirty.extend(switches);
    }

    /// Takes in an ACL entry of the IR.
    pub(super) fn take_acl(&mut self, entry: &IrEntry, added: bool) {
        let acl = &mut self.acl;
        fn update<T: Ord>(set: &mut BTreeSet<T>, value: T, added: bool) {
            if added {
                set.insert(value);
            } else {
                set.remove(&value);
            }
        }
        match entry {
            IrEntry::AddressSetMember { set, prefix } => {
                let members = acl.address_members.entry(set.clone()).or_default();
                update(members, *prefix, added);
                if members.is_empty() {
                    acl.address_members.remove(set);
                }
                if let Some(id) = acl.ids.addresses.get(set) {
                    acl.address_table.mark((*id, *prefix));
                }
                return;
            }
            IrEntry::PortGroupMember { group, port } => {
                let members = acl.group_members.entry(group.clone()).or_default();
                update(members, port.clone(), added);
                if members.is_empty() {
                    acl.group_members.remove(group);
                }
                let groups = acl.groups_of_port.entry(port.clone()).or_default();
                update(groups, group.clone(), added);
                if groups.is_empty() {
                    acl.groups_of_port.remove(port);
                }
                self.mark_acl_port(port);
                return;
            }
            _ => {}
        }
        let datapath = entry.datapath();
        let switch = acl.switches.entry(datapath).or_default();
        match entry {
            IrEntry::Acl { rule, .. } => update(&mut switch.rules, rule.clone(), added),
            IrEntry::AclTracking { egress, stage, .. } => {
                update(&mut switch.tracking, (*egress, *stage), added);
            }
            IrEntry::AclTrackingBypass {
                egress,
                stage,
                condition,
                stateless,
                ..
            } => update(
                &mut switch.bypasses,
                (*egress, *stage, *stateless, condition.clone()),
                added,
            ),
            IrEntry::StatelessSkipsLb { egress, .. } => {
                update(&mut switch.stateless_skips_lb, *egress, added)
            }
            IrEntry::AclFailClosed { egress, .. } => {
                update(&mut switch.fail_closed, *egress, added)
            }
            IrEntry::AclCommit { egress, .. } => update(&mut switch.commit, *egress, added),
            _ => return,
        }
        if switch.is_empty() {
            acl.switches.remove(&datapath);
        }
        acl.dirty.insert(datapath);
    }

    /// Marks the port-set entries of logical port `port` (its groups', and its own set's).
    pub(super) fn mark_acl_port(&mut self, port: &str) {
        let Some(info) = self.ports.get(port) else {
            return;
        };
        let key = info.key;
        let datapath = info.datapath;
        let acl = &mut self.acl;
        let mut sets: Vec<u32> = acl
            .groups_of_port
            .get(port)
            .into_iter()
            .flatten()
            .filter_map(|group| {
                acl.ids.ports.get(&PortSetName::Group {
                    datapath,
                    name: group.clone(),
                })
            })
            .copied()
            .collect();
        sets.extend(acl.ids.ports.get(&PortSetName::Port {
            datapath,
            name: port.to_string(),
        }));
        for set in sets {
            acl.port_table.mark(AclPortKey { set, port: key });
        }
    }

    /// Recomputes the kernel form of the switches whose ACL entries changed, marking what
    /// moved.
    fn recompile_acls(&mut self) {
        let dirty: Vec<u32> = std::mem::take(&mut self.acl.dirty).into_iter().collect();
        for datapath in dirty {
            let new = self.compile_switch(datapath);
            let acl = &mut self.acl;
            let old = acl.compiled.remove(&datapath).unwrap_or_default();
            for key in old.rules.keys().chain(new.rules.keys()) {
                acl.rule_table.mark(AclRuleKey {
                    datapath,
                    list: key.0,
                    index: key.1,
                });
            }
            acl.switch_table.mark(datapath);
            let mut newly_named = Vec::new();
            let mut no_longer_named = Vec::new();
            for set in &new.address_sets {
                let count = acl.address_refs.entry(*set).or_insert(0);
                *count += 1;
                if *count == 1 {
                    newly_named.push(*set);
                }
            }
            for set in &old.address_sets {
                if let Some(count) = acl.address_refs.get_mut(set) {
                    *count -= 1;
                    if *count == 0 {
                        acl.address_refs.remove(set);
                        no_longer_named.push(*set);
                    }
                }
            }
            for set in newly_named.into_iter().chain(no_longer_named) {
                let members: Option<BTreeSet<Prefix>> =
                    acl.ids.address_names.get(&set).and_then(|name| {
                        acl.address_members.get(name).cloned().or_else(|| {
                            acl.ids
                                .inline
                                .get(name)
                                .map(|p| p.iter().copied().collect())
                        })
                    });
                for prefix in members.into_iter().flatten() {
                    acl.address_table.mark((set, prefix));
                }
            }
            let mut ports_changed = Vec::new();
            for set in &new.port_sets {
                let count = acl.port_refs.entry(*set).or_insert(0);
                *count += 1;
                if *count == 1 {
                    ports_changed.push(*set);
                }
            }
            for set in &old.port_sets {
                if let Some(count) = acl.port_refs.get_mut(set) {
                    *count -= 1;
                    if *count == 0 {
                        acl.port_refs.remove(set);
                        ports_changed.push(*set);
                    }
                }
            }
            let egress = new.switch.flags & SWITCH_EGRESS != 0;
            let egress_changed = if egress {
                acl.egress_switches.insert(datapath)
            } else {
                acl.egress_switches.remove(&datapath)
            };
            if new.switch.flags != 0 || !new.rules.is_empty() {
                acl.compiled.insert(datapath, new);
            }
            for set in ports_changed {
                for name in self.port_set_ports(set) {
                    self.mark_acl_port(&name);
                }
            }
            if egress_changed {
                self.mark_ports_of(datapath);
            }
        }
    }

    /// The logical ports of port set `set`.
    fn port_set_ports(&self, set: u32) -> Vec<String> {
        match self.acl.ids.port_names.get(&set) {
            Some(PortSetName::Group { name, .. }) => self
                .acl
                .group_members
                .get(name)
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
            Some(PortSetName::Port { name, .. }) => vec![name.clone()],
            None => Vec::new(),
        }
    }

    /// Whether `port` is a router (patch) or localnet port: the kernel runs no ACL stage for
    /// what enters or leaves the switch through it.
    fn is_foreign_port(&self, port: &str) -> bool {
        self.physical
            .binding(port)
            .is_some_and(|binding| binding.peer.is_some())
            || self.localnets.values().any(|(name, ..)| name == port)
    }

    /// The `UNCHECKED_*` flags of a switch with `rules`: users' drop and reject rules that may
    /// act on paths the kernel runs no ACL stage on (see [`kernel::UNCHECKED_INGRESS`]). Rules
    /// naming a port group are taken to name pods (Kube-OVN's groups hold pods only).
    fn unchecked_paths<'r>(&self, rules: impl Iterator<Item = &'r AclRule>) -> u32 {
        let foreign = |port: &Option<PortRef>| match port {
            None => true,
            Some(PortRef::Port(name)) => self.is_foreign_port(name),
            Some(PortRef::Group(_)) => false,
        };
        let mut flags = 0;
        for rule in rules {
            let drops = matches!(
                rule.action,
                AclAction::Drop { .. } | AclAction::Reject { .. }
            );
            if rule.acl.is_none() || !drops {
                continue;
            }
            // What the kernel does not run the ACLs for is never tracked there.
            let untracked = rule.states.contains(0);
            if rule.stage.egress() {
                flags |= UNCHECKED_FLOOD;
                if untracked && rule.condition.0.iter().any(|c| foreign(&c.outport)) {
                    flags |= UNCHECKED_EGRESS;
                }
            } else if untracked && rule.condition.0.iter().any(|c| foreign(&c.inport)) {
                flags |= UNCHECKED_INGRESS;
            }
        }
        flags
    }

    /// Switch `datapath`'s kernel form.
    fn compile_switch(&mut self, datapath: u32) -> Compiled {
        let mut compiled = Compiled::default();
        let Some(switch) = self.acl.switches.get(&datapath) else {
            return compiled;
        };
        let unchecked = self.unchecked_paths(switch.rules.iter().map(|rule| &**rule));
        if unchecked != 0 {
            warn!(
                datapath,
                unchecked,
                "ACLs of this switch may act on routed, provider-network or flooded IPv4, which \
                 the kernel runs no ACL stage for: that traffic is dropped (fails closed)"
            );
        }
        let fail_open = self.acl.fail_open;
        let ids = &mut self.acl.ids;
        let mut lists: BTreeMap<u32, Vec<kernel::AclRule>> = BTreeMap::new();
        let mut failures: Vec<(bool, String)> = Vec::new();
        // Highest priority first; the IR's order breaks ties the same way every time.
        let mut rules: Vec<&AclRule> = switch.rules.iter().map(|rule| &**rule).collect();
        rules.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.cmp(b)));
        let mut flags = unchecked;
        for rule in rules {
            if rule.acl.is_some() {
                flags |= if rule.stage.egress() {
                    USER_RULES_EGRESS
                } else {
                    USER_RULES_INGRESS
                };
            }
            match acl_rules::rules_of(datapath, rule, ids) {
                Ok(kernel_rules) => lists
                    .entry(list_of(rule.stage))
                    .or_default()
                    .extend(kernel_rules),
                Err(reason) => failures.push((rule.stage.egress(), reason)),
            }
        }
        // Stateless filters first: the kernel takes the first bypass that matches as the one
        // that says whether the packet is stateless.
        let mut bypasses: Vec<_> = switch.bypasses.iter().collect();
        bypasses.sort_by_key(|(_, _, stateless, _)| !stateless);
        for (egress, stage, stateless, condition) in bypasses {
            match acl_rules::bypass_rules_of(datapath, condition, *stateless, ids) {
                Ok(kernel_rules) => lists
                    .entry(bypass_list(*egress, *stage))
                    .or_default()
                    .extend(kernel_rules),
                Err(reason) => failures.push((*egress, reason)),
            }
        }
        for (egress, stage) in &switch.tracking {
            flags |= match (egress, stage) {
                (false, TrackingStage::PreAcl) => TRACK_INGRESS_ACL,
                (false, TrackingStage::PreLb) => TRACK_INGRESS_LB,
                (true, TrackingStage::PreAcl) => TRACK_EGRESS_ACL,
                (true, TrackingStage::PreLb) => TRACK_EGRESS_LB,
            };
        }
        for egress in &switch.stateless_skips_lb {
            flags |= if *egress {
                STATELESS_SKIPS_LB_EGRESS
            } else {
                STATELESS_SKIPS_LB_INGRESS
            };
        }
        for egress in &switch.commit {
            flags |= if *egress {
                COMMIT_EGRESS
            } else {
                COMMIT_INGRESS
            };
        }
        for egress in switch.fail_closed.iter().filter(|_| !fail_open) {
            flags |= if *egress {
                FAIL_CLOSED_EGRESS
            } else {
                FAIL_CLOSED_INGRESS
            };
        }
        for (list, rules) in &lists {
            if rules.len() > MAX_RULES_PER_LIST as usize {
                failures.push((
                    *list >= list::EGRESS_BYPASS_ACL,
                    format!(
                        "{} rules in one list (the kernel walks {MAX_RULES_PER_LIST})",
                        rules.len()
                    ),
                ));
            }
        }
        for (egress, reason) in &failures {
            if fail_open {
                warn!(
                    datapath,
                    egress,
                    reason,
                    "an ACL of this switch does not fit the kernel: left out (--unsupported-acl=allow)"
                );
                continue;
            }
            warn!(
                datapath,
                egress, reason, "an ACL of this switch does not fit the kernel: it fails closed"
            );
            flags |= if *egress {
                FAIL_CLOSED_EGRESS
            } else {
                FAIL_CLOSED_INGRESS
            };
        }
        let has = |wanted: &[u32]| wanted.iter().any(|list| lists.contains_key(list));
        if has(&[list::INGRESS, list::AFTER_LB]) || flags & FAIL_CLOSED_INGRESS != 0 {
            flags |= SWITCH_INGRESS;
        }
        if has(&[list::EGRESS]) || flags & FAIL_CLOSED_EGRESS != 0 {
            flags |= SWITCH_EGRESS;
        }
        compiled.switch.flags = flags;
        for (list, rules) in lists {
            let count = rules.len().min(MAX_RULES_PER_LIST as usize);
            compiled.switch.counts[list as usize] = u16::try_from(count).unwrap_or(u16::MAX);
            for (index, rule) in rules.into_iter().take(count).enumerate() {
                for term in rule.source.iter().chain(rule.destination.iter()) {
                    compiled
                        .address_sets
                        .extend(term.sets.iter().filter(|s| **s != 0));
                }
                compiled.port_sets.extend(
                    [rule.inport_set, rule.outport_set]
                        .into_iter()
                        .filter(|s| *s != 0),
                );
                compiled.rules.insert((list, index as u32), rule);
            }
        }
        compiled
    }

    fn desired_acl_switch(&self, datapath: u32) -> Option<AclSwitch> {
        let compiled = self.acl.compiled.get(&datapath)?;
        (compiled.switch.flags & (SWITCH_INGRESS | SWITCH_EGRESS) != 0).then_some(compiled.switch)
    }

    fn desired_acl_rule(&self, key: AclRuleKey) -> Option<kernel::AclRule> {
        self.acl
            .compiled
            .get(&key.datapath)?
            .rules
            .get(&(key.list, key.index))
            .copied()
    }

    fn desired_acl_address(&self, set: u32, prefix: Prefix) -> Option<u32> {
        if !self.acl.address_refs.contains_key(&set) {
            return None;
        }
        let name = self.acl.ids.address_names.get(&set)?;
        let member = match self.acl.address_members.get(name) {
            Some(members) => members.contains(&prefix),
            None => self
                .acl
                .ids
                .inline
                .get(name)
                .is_some_and(|prefixes| prefixes.contains(&prefix)),
        };
        member.then_some(1)
    }

    fn desired_acl_port(&self, key: AclPortKey) -> Option<u32> {
        if !self.acl.port_refs.contains_key(&key.set) {
            return None;
        }
        let member = match self.acl.ids.port_names.get(&key.set)? {
            PortSetName::Group { datapath, name } => self
                .port_names
                .get(&(*datapath, key.port))
                .is_some_and(|port| {
                    self.acl
                        .group_members
                        .get(name)
                        .is_some_and(|members| members.contains(port))
                }),
            PortSetName::Port { datapath, name } => self
                .ports
                .get(name)
                .is_some_and(|info| info.datapath == *datapath && info.key == key.port),
        };
        member.then_some(1)
    }

    /// Writes the marked ACL slots: the sets first, then the rules, then the switches (what a
    /// rule names is there before it; a switch's counts cover only rules written).
    pub(super) fn flush_acls(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        self.recompile_acls();
        let mut writes = flush_from(
            self,
            maps,
            |s| &mut s.acl.address_table,
            |s, &(set, prefix)| s.desired_acl_address(set, prefix),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.acl.port_table,
            |s, key| s.desired_acl_port(*key),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.acl.rule_table,
            |s, key| s.desired_acl_rule(*key),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.acl.switch_table,
            |s, datapath| s.desired_acl_switch(*datapath),
        )?;
        if writes > 0 || self.acl.generation.get().is_none() {
            self.acl.advance_generation(maps)?;
        }
        Ok(writes)
    }

    /// Removes the ACL slots this state did not install.
    pub(super) fn sweep_acls(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        let removed = self.acl.switch_table.sweep(maps)?
            + self.acl.rule_table.sweep(maps)?
            + self.acl.address_table.sweep(maps)?
            + self.acl.port_table.sweep(maps)?;
        if removed > 0 {
            self.acl.advance_generation(maps)?;
        }
        Ok(removed)
    }
}

impl AclState {
    /// Advances the ACL maps' generation (`ACL_GENERATION`), after writes to them: the verdicts
    /// the kernel cached from the maps as they were are stale from now on. The first advance
    /// follows the one in the map (a previous agent's), so no stale verdict becomes current
    /// again; later ones follow this agent's own.
    fn advance_generation(&self, maps: &mut impl Maps) -> Result<(), EbpfError> {
        let current = match self.generation.get() {
            Some(generation) => generation,
            None => maps.get::<AclGeneration>(0)?.unwrap_or(0),
        };
        let next = current.wrapping_add(1).max(1);
        maps.set::<AclGeneration>(0, next)?;
        self.generation.set(Some(next));
        Ok(())
    }
}

#[cfg(test)]
#[path = "acl_tests.rs"]
mod tests;
