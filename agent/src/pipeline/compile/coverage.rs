//! How each logical flow was handled and the per-stage coverage (compiled / neutral / side duty
//! not done / unsupported) that `ovnbpfctl lflow coverage` prints. Reads only the compiler's
//! contributions.

use std::collections::{BTreeMap, HashSet};

use uuid::Uuid;

use super::{Compiler, registers::RegisterBit};
use crate::pipeline::ir::IrEntry;

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
    pub(super) fn severity(&self) -> u8 {
        match self {
            Outcome::Compiled | Outcome::Neutral => 0,
            Outcome::SideDuty(_) => 1,
            Outcome::Unsupported(_) => 2,
        }
    }
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

impl Compiler {
    /// Every unsupported flow: (flow, stage, reason).
    #[must_use]
    pub fn unsupported_flows(&self) -> Vec<(Uuid, &str, &str)> {
        let mut flows: Vec<(Uuid, &str, &str)> = self
            .flows
            .iter()
            .filter_map(|(uuid, c)| match &c.outcome {
                Some(Outcome::Unsupported(reason)) => Some((*uuid, &*c.stage, reason.as_str())),
                _ => None,
            })
            .collect();
        flows.sort_by(|a, b| (a.1, a.2, a.0).cmp(&(b.1, b.2, b.0)));
        flows
    }

    /// The unsupported flows on `datapath` (one flow may stand on several, through a datapath
    /// group) that a packet can reach: (flow, stage, reason), in the order of
    /// [`Self::unsupported_flows`]. A flow whose match needs a register bit set that no flow of
    /// the datapath sets (northd's `reg0[2] == 1 → ct_lb_mark;` on a switch without load
    /// balancers) cannot match and is left out ([`super::registers`]).
    #[must_use]
    pub fn unsupported_flows_on(&self, datapath: u32) -> Vec<(Uuid, &str, &str)> {
        let settable: HashSet<RegisterBit> = self
            .flows
            .values()
            .filter_map(|c| c.registers.as_deref())
            .filter(|r| r.datapaths.contains(&datapath))
            .flat_map(|r| r.sets.iter().copied())
            .collect();
        let mut flows: Vec<(Uuid, &str, &str)> = self
            .flows
            .iter()
            .filter_map(|(uuid, c)| match &c.outcome {
                Some(Outcome::Unsupported(reason))
                    if c
                        .registers
                        .as_deref()
                        .is_none_or(|r| r.gates.iter().all(|bit| settable.contains(bit)))
                        && self.ir.resolve(&c.entries).any(|entry| {
                            matches!(entry, IrEntry::Unsupported { datapath: d, .. } if *d == datapath)
                        }) =>
                {
                    Some((*uuid, &*c.stage, reason.as_str()))
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
                Some(Outcome::SideDuty(duty)) => Some((*uuid, &*c.stage, duty.as_str())),
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
            let stage = coverage.entry(contribution.stage.to_string()).or_default();
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
        for entry in (self.underlay_routing.values()).flat_map(|ids| self.ir.resolve(ids)) {
            if let IrEntry::Unsupported { stage, reason, .. } = entry {
                let stage = coverage.entry(stage.clone()).or_default();
                stage.unsupported += 1;
                *stage.reasons.entry(reason.clone()).or_insert(0) += 1;
            }
        }
        coverage
    }
}
