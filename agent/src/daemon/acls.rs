//! The users' ACLs the datapath does not enforce as written (NetworkPolicies, subnet ACLs), per
//! switch, from the IR: the ACLs whose flows did not translate ([`IrEntry::UnenforcedAcl`]:
//! their switch fails closed, or, with `--unsupported-acl=allow`, switches as if they did not
//! exist) and, with a datapath that runs no ACL stages, every ACL ([`IrEntry::Acl`] rules of a
//! named ACL). A warning when a switch gets its first one, a note when it has none left, and the
//! counts for the metrics. Owns only its counts; reads nothing but the diffs it is given.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use tracing::{info, warn};

use crate::pipeline::{IrDiff, ir::IrEntry};

/// What the datapath does with ACLs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Enforcement {
    /// It runs no ACL stages: every ACL is unenforced.
    #[default]
    None,
    /// It enforces what translates; the rest fails closed.
    FailClosed,
    /// It enforces what translates; the rest is let through (the operator's choice).
    FailOpen,
}

/// Unenforced ACLs by switch (tunnel key) → ACL hint → entries naming it (an ACL has several
/// flows).
#[derive(Debug, Default)]
pub struct UnenforcedAcls {
    by_datapath: HashMap<u32, BTreeMap<String, usize>>,
    enforcement: Enforcement,
}

impl UnenforcedAcls {
    #[must_use]
    pub fn new(enforcement: Enforcement) -> Self {
        Self {
            by_datapath: HashMap::new(),
            enforcement,
        }
    }

    /// Applies one IR diff; `name` names a datapath for the logs.
    pub fn apply<E: Borrow<IrEntry>>(&mut self, diff: &IrDiff<E>, name: impl Fn(u32) -> String) {
        let mut touched = BTreeSet::new();
        let before: HashMap<u32, usize> = self
            .by_datapath
            .iter()
            .map(|(datapath, acls)| (*datapath, acls.len()))
            .collect();
        for (entry, added) in diff.in_order() {
            let (datapath, acl) = match entry {
                IrEntry::UnenforcedAcl { datapath, acl } => (datapath, acl),
                IrEntry::Acl { datapath, rule } if self.enforcement == Enforcement::None => {
                    match &rule.acl {
                        Some(acl) => (datapath, acl),
                        None => continue,
                    }
                }
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
                match self.enforcement {
                    Enforcement::None => warn!(
                        switch,
                        acls = has,
                        "this switch has ACLs (NetworkPolicies, subnet ACLs) that the datapath \
                         does not enforce: its traffic is switched as if they did not exist"
                    ),
                    Enforcement::FailClosed => warn!(
                        switch,
                        acls = has,
                        "this switch has ACLs the datapath cannot translate (ovnbpfctl lflow \
                         coverage names them): it drops what reaches them (fails closed)"
                    ),
                    Enforcement::FailOpen => warn!(
                        switch,
                        acls = has,
                        "this switch has ACLs the datapath cannot translate (ovnbpfctl lflow \
                         coverage names them): they are not enforced (--unsupported-acl=allow)"
                    ),
                }
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
