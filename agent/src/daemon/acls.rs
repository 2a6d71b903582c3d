//! The users' ACLs the datapath does not enforce yet (NetworkPolicies, subnet ACLs), per switch,
//! from the IR: the ACLs whose flows did not compile ([`IrEntry::UnenforcedAcl`]) and, while
//! the kernel does not run the ACL stages, the compiled ones too ([`IrEntry::Acl`] rules of a
//! named ACL). A warning when a switch gets its first one (its pods' traffic is switched as if
//! the ACLs did not exist), a note when it has none left, and the counts for the metrics. Owns
//! only its counts; reads nothing but the diffs it is given.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tracing::{info, warn};

use crate::pipeline::{IrDiff, ir::IrEntry};

/// Unenforced ACLs by switch (tunnel key) → ACL hint → entries naming it (an ACL has several
/// flows).
#[derive(Debug, Default)]
pub struct UnenforcedAcls {
    by_datapath: HashMap<u32, BTreeMap<String, usize>>,
}

impl UnenforcedAcls {
    /// Applies one IR diff; `name` names a datapath for the logs.
    pub fn apply(&mut self, diff: &IrDiff, name: impl Fn(u32) -> String) {
        let mut touched = BTreeSet::new();
        let before: HashMap<u32, usize> = self
            .by_datapath
            .iter()
            .map(|(datapath, acls)| (*datapath, acls.len()))
            .collect();
        for (entry, added) in diff
            .removed
            .iter()
            .map(|e| (e, false))
            .chain(diff.added.iter().map(|e| (e, true)))
        {
            let (datapath, acl) = match entry {
                IrEntry::UnenforcedAcl { datapath, acl } => (datapath, acl),
                IrEntry::Acl { datapath, rule } => match &rule.acl {
                    Some(acl) => (datapath, acl),
                    None => continue,
                },
                _ => continue,
            };
            let acls = self.by_datapath.entry(*datapath).or_default();
            let count = acls.entry(acl.clone()).or_insert(0);
            if added {
                *count += 1;
            } else {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    acls.remove(acl);
                }
            }
            touched.insert(*datapath);
        }
        for datapath in touched {
            let had = before.get(&datapath).copied().unwrap_or(0);
            let has = self.by_datapath.get(&datapath).map_or(0, BTreeMap::len);
            let switch = name(datapath);
            if had == 0 && has > 0 {
                warn!(
                    switch,
                    acls = has,
                    "this switch has ACLs (NetworkPolicies, subnet ACLs) that the eBPF datapath \
                     does not enforce: its traffic is switched as if they did not exist"
                );
            } else if had > 0 && has == 0 {
                info!(switch, "no unenforced ACL left on this switch");
            }
            if has == 0 {
                self.by_datapath.remove(&datapath);
            }
        }
    }

    /// Switches with at least one unenforced ACL.
    #[must_use]
    pub fn switches(&self) -> usize {
        self.by_datapath.len()
    }

    /// Unenforced ACLs, counted once per switch they apply to.
    #[must_use]
    pub fn acls(&self) -> usize {
        self.by_datapath.values().map(BTreeMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(datapath: u32, acl: &str) -> IrEntry {
        IrEntry::UnenforcedAcl {
            datapath,
            acl: acl.into(),
        }
    }

    #[test]
    fn switches_are_counted_while_they_have_unenforced_acls() {
        let mut acls = UnenforcedAcls::default();
        let name = |datapath: u32| format!("switch-{datapath}");
        acls.apply(
            &IrDiff {
                added: vec![acl(1, "aaaa0001"), acl(1, "aaaa0002"), acl(2, "aaaa0001")],
                removed: Vec::new(),
            },
            name,
        );
        assert_eq!((acls.switches(), acls.acls()), (2, 3));
        acls.apply(
            &IrDiff {
                added: Vec::new(),
                removed: vec![acl(1, "aaaa0001"), acl(2, "aaaa0001")],
            },
            name,
        );
        assert_eq!((acls.switches(), acls.acls()), (1, 1));
        // Other entries do not count.
        acls.apply(
            &IrDiff {
                added: vec![IrEntry::UnknownUnicast { datapath: 3 }],
                removed: vec![acl(1, "aaaa0002")],
            },
            name,
        );
        assert_eq!((acls.switches(), acls.acls()), (0, 0));
    }
}
