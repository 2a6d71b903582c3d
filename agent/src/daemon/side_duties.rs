//! The side duties the datapath leaves undone (e.g. MAC learning), per datapath, from the IR's
//! [`IrEntry::SideDutyNotDone`] entries: a note when a datapath gets its first flow of a duty
//! (forwarding is unaffected: the compiler compiled it) and when it has none left. Unlike
//! unsupported flows these never stop a datapath. Owns only its counts; reads nothing but the
//! diffs it is given.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};

use tracing::info;

use crate::pipeline::{IrDiff, ir::IrEntry};

/// Flows with a duty not done, by datapath (tunnel key) → duty → number of IR entries.
#[derive(Debug, Default)]
pub struct SideDuties {
    by_datapath: HashMap<u32, BTreeMap<String, usize>>,
}

impl SideDuties {
    /// Applies one IR diff; `name` names a datapath for the logs.
    pub fn apply<E: Borrow<IrEntry>>(&mut self, diff: &IrDiff<E>, name: impl Fn(u32) -> String) {
        for (entry, added) in diff.in_order() {
            let IrEntry::SideDutyNotDone { datapath, duty, .. } = entry else {
                continue;
            };
            let duties = self.by_datapath.entry(*datapath).or_default();
            let count = duties.entry(duty.clone()).or_insert(0);
            if added {
                *count += 1;
                if *count == 1 {
                    info!(
                        datapath = name(*datapath),
                        duty,
                        "flows of this datapath ask for a side duty the eBPF datapath does not \
                         do; it forwards as OVN would"
                    );
                }
            } else {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    duties.remove(duty);
                    info!(
                        datapath = name(*datapath),
                        duty, "no flow of this datapath asks for this side duty any more"
                    );
                }
            }
            if duties.is_empty() {
                self.by_datapath.remove(datapath);
            }
        }
    }

    /// Datapaths with at least one duty not done.
    #[must_use]
    pub fn datapaths(&self) -> usize {
        self.by_datapath.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn duty(datapath: u32, stage: &str) -> IrEntry {
        IrEntry::SideDutyNotDone {
            datapath,
            stage: stage.into(),
            duty: "MAC learning".into(),
        }
    }

    #[test]
    fn datapaths_count_while_a_flow_asks_for_a_duty() {
        let mut duties = SideDuties::default();
        let name = |datapath: u32| format!("router-{datapath}");
        duties.apply(
            &IrDiff {
                added: vec![
                    duty(1, "lr_in_lookup_neighbor"),
                    duty(1, "lr_in_learn_neighbor"),
                    duty(2, "lr_in_learn_neighbor"),
                ],
                removed: Vec::new(),
            },
            name,
        );
        assert_eq!(duties.datapaths(), 2);
        duties.apply(
            &IrDiff {
                added: Vec::new(),
                removed: vec![
                    duty(1, "lr_in_lookup_neighbor"),
                    duty(2, "lr_in_learn_neighbor"),
                ],
            },
            name,
        );
        assert_eq!(duties.datapaths(), 1, "router 1 still has a learning flow");
        duties.apply(
            &IrDiff {
                added: vec![IrEntry::UnknownUnicast { datapath: 3 }],
                removed: vec![duty(1, "lr_in_learn_neighbor")],
            },
            name,
        );
        assert_eq!(duties.datapaths(), 0);
    }
}
