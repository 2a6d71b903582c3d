//! The bookkeeping the translation's parts ([`super::l2`], [`super::l3`]) share: per datapath,
//! the flows installed on br-int, which datapaths changed since the last write, and which are
//! fenced (no flows at all, [`super::untranslated`]). A part computes a marked datapath's
//! desired flows; [`DatapathFlows::diff`] turns them into the flow mods that install them
//! (strict deletes first, then adds) and records them. Owns that state; touches nothing else.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{
    message::{Command, FlowMod},
    oxm::Match,
};

/// A flow's identity in the switch: (table, priority, the encoded match).
pub(super) type FlowKey = (u8, u16, Vec<u8>);

/// One datapath's flows by identity.
pub(super) type Flows = BTreeMap<FlowKey, FlowMod>;

/// Adds `flow` to `flows` under its identity.
pub(super) fn insert(flows: &mut Flows, flow: FlowMod) {
    let mut matching = Vec::new();
    flow.matching.encode(&mut matching);
    flows.insert((flow.table, flow.priority, matching), flow);
}

/// A match on datapath `datapath`'s pipeline (`metadata`, its tunnel key).
pub(super) fn on_datapath(datapath: u32) -> Match {
    Match::new().with(super::oxm::Field::metadata(u64::from(datapath)))
}

/// Installed flows per datapath, the datapaths changed since, the fenced ones.
#[derive(Debug, Default)]
pub(super) struct DatapathFlows {
    marked: BTreeSet<u32>,
    installed: HashMap<u32, Flows>,
    fenced: BTreeSet<u32>,
}

impl DatapathFlows {
    /// `datapath`'s flows may have changed.
    pub(super) fn mark(&mut self, datapath: u32) {
        self.marked.insert(datapath);
    }

    /// `datapath` goes without flows (`fenced`) or has them again.
    pub(super) fn set_fenced(&mut self, datapath: u32, fenced: bool) {
        if fenced {
            self.fenced.insert(datapath);
        } else {
            self.fenced.remove(&datapath);
        }
        self.marked.insert(datapath);
    }

    pub(super) fn is_fenced(&self, datapath: u32) -> bool {
        self.fenced.contains(&datapath)
    }

    pub(super) fn has_changes(&self) -> bool {
        !self.marked.is_empty()
    }

    /// The datapaths marked since the last call.
    pub(super) fn take_marked(&mut self) -> BTreeSet<u32> {
        std::mem::take(&mut self.marked)
    }

    /// The datapaths with flows installed.
    pub(super) fn installed_datapaths(&self) -> impl Iterator<Item = u32> + '_ {
        self.installed.keys().copied()
    }

    /// Forgets what is installed and marked (a resync installs everything afresh).
    pub(super) fn reset(&mut self) {
        self.marked.clear();
        self.installed.clear();
    }

    /// The flow mods that bring each datapath's installed flows to `desired` (deletes first,
    /// then adds), recorded as installed.
    pub(super) fn diff(&mut self, desired: Vec<(u32, Flows)>) -> Vec<FlowMod> {
        let mut deletes = Vec::new();
        let mut adds = Vec::new();
        for (datapath, desired) in desired {
            let before = self.installed.remove(&datapath).unwrap_or_default();
            for (key, flow) in &before {
                if !desired.contains_key(key) {
                    deletes.push(FlowMod {
                        command: Command::DeleteStrict,
                        cookie_mask: u64::MAX,
                        instructions: Vec::new(),
                        ..flow.clone()
                    });
                }
            }
            for (key, flow) in &desired {
                if before.get(key) != Some(flow) {
                    adds.push(flow.clone());
                }
            }
            if !desired.is_empty() {
                self.installed.insert(datapath, desired);
            }
        }
        deletes.extend(adds);
        deletes
    }
}
