//! What the OpenFlow translation leaves out, per datapath, and what that costs: the backend
//! forwards only what it has flows for (a table miss drops), so an IR entry it does not
//! translate is one of two kinds.
//! - An entry that only adds forwarding or answers (IPv6 routing, the router's own ARP
//!   answers, …): left out, what it would forward or answer is dropped. The datapath is
//!   [`Effect::Partial`]. (The answers OVN makes in userspace, the agent makes:
//!   [`super::answer`].)
//! - An entry that restricts or redirects forwarding (a user's ACL, a load balancer's VIP, NAT,
//!   a gateway port, the compiler's `NotForwardable`): forwarding without it
//!   would send what OVN would not, so the whole datapath goes without flows (security fails
//!   closed). The datapath is [`Effect::Fenced`]. Where such an entry concerns only IPv6
//!   (the compiler's `UnsupportedIpv6Flow`), only the datapath's IPv6 goes unforwarded:
//!   [`Effect::Ipv6Fenced`].
//!
//! Owns that classification and the per-datapath reasons; the flows follow
//! [`Untranslated::take_fence_changes`]. Touches nothing else.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::pipeline::ir::{AclAction, IrDiff, IrEntry, RejectResponse, Unforwardable};

/// What an untranslated entry costs its datapath.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    /// Some of its traffic is dropped where OVN forwards or answers it.
    Partial,
    /// The datapath's IPv6 is not forwarded at all (a flow only IPv6 matches could not be
    /// compiled); its IPv4 is. Counted as partial.
    Ipv6Fenced,
    /// The datapath is not forwarded at all.
    Fenced,
}

impl Effect {
    /// The metric label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Effect::Partial => "partial",
            Effect::Ipv6Fenced => "ipv6_fenced",
            Effect::Fenced => "fenced",
        }
    }
}

/// The untranslated entries' reasons per datapath.
#[derive(Debug, Default)]
pub struct Untranslated {
    /// Datapath → (effect, reason) → entries with it.
    reasons: HashMap<u32, BTreeMap<(Effect, String), usize>>,
    /// Datapaths whose fence came or went since [`Self::take_fence_changes`].
    changed: BTreeSet<u32>,
    /// The fenced datapaths the flows were last told of.
    fenced: BTreeSet<u32>,
    /// The routers whose IPv6 is fenced the flows were last told of.
    ipv6_fenced: BTreeSet<u32>,
}

/// A datapath whose fence changed: whether it is fenced now, whole or its IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FenceChange {
    pub datapath: u32,
    pub fenced: bool,
    pub ipv6_fenced: bool,
}

impl Untranslated {
    /// Takes in an IR diff's entries.
    pub fn apply<E: Borrow<IrEntry>>(&mut self, diff: &IrDiff<E>) {
        for (entry, added) in diff.in_order() {
            let Some((effect, reason)) = classify(entry) else {
                continue;
            };
            let datapath = entry.datapath();
            let reasons = self.reasons.entry(datapath).or_default();
            let key = (effect, reason);
            if added {
                let count = reasons.entry(key.clone()).or_default();
                *count += 1;
                if *count == 1 {
                    tracing::warn!(
                        datapath,
                        effect = effect.label(),
                        reason = key.1,
                        "the OpenFlow datapath does not translate this"
                    );
                }
            } else if let Some(count) = reasons.get_mut(&key) {
                *count -= 1;
                if *count == 0 {
                    reasons.remove(&key);
                }
            }
            if reasons.is_empty() {
                self.reasons.remove(&datapath);
            }
            self.changed.insert(datapath);
        }
    }

    /// Whether `datapath` is fenced.
    #[must_use]
    pub fn is_fenced(&self, datapath: u32) -> bool {
        self.reasons
            .get(&datapath)
            .is_some_and(|reasons| reasons.keys().any(|(effect, _)| *effect == Effect::Fenced))
    }

    /// Whether router `datapath`'s IPv6 is fenced.
    #[must_use]
    pub fn is_ipv6_fenced(&self, datapath: u32) -> bool {
        self.reasons.get(&datapath).is_some_and(|reasons| {
            reasons
                .keys()
                .any(|(effect, _)| *effect == Effect::Ipv6Fenced)
        })
    }

    /// The datapaths fenced or unfenced (whole or their IPv6) since the last call.
    pub fn take_fence_changes(&mut self) -> Vec<FenceChange> {
        let mut changes = Vec::new();
        for datapath in std::mem::take(&mut self.changed) {
            let fenced = self.is_fenced(datapath);
            let ipv6_fenced = self.is_ipv6_fenced(datapath);
            let was = (
                self.fenced.contains(&datapath),
                self.ipv6_fenced.contains(&datapath),
            );
            if (fenced, ipv6_fenced) != was {
                toggle(&mut self.fenced, datapath, fenced);
                toggle(&mut self.ipv6_fenced, datapath, ipv6_fenced);
                changes.push(FenceChange {
                    datapath,
                    fenced,
                    ipv6_fenced,
                });
            }
        }
        changes
    }

    /// How many datapaths each effect holds (a datapath counts once, by its worst).
    #[must_use]
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        let fenced = self.fenced.len();
        let partial = self
            .reasons
            .keys()
            .filter(|datapath| !self.is_fenced(**datapath))
            .count();
        vec![
            (Effect::Partial.label(), partial),
            (Effect::Fenced.label(), fenced),
        ]
    }

    /// Datapath `datapath`'s reasons, for tests and logs.
    #[must_use]
    pub fn reasons(&self, datapath: u32) -> Vec<(Effect, String)> {
        self.reasons
            .get(&datapath)
            .into_iter()
            .flat_map(|reasons| reasons.keys().cloned())
            .collect()
    }
}

/// `item` in `set` when `present`, out of it otherwise.
fn toggle(set: &mut BTreeSet<u32>, item: u32, present: bool) {
    if present {
        set.insert(item);
    } else {
        set.remove(&item);
    }
}

/// What leaving `entry` out costs, if the translation leaves it out.
#[must_use]
pub fn classify(entry: &IrEntry) -> Option<(Effect, String)> {
    let fenced = |reason: &str| Some((Effect::Fenced, reason.to_string()));
    let partial = |reason: &str| Some((Effect::Partial, reason.to_string()));
    match entry {
        // A flow only IPv6 matches: the datapath's IPv6 is not forwarded, its IPv4 is.
        IrEntry::NotForwardable {
            reason: reason @ Unforwardable::UnsupportedIpv6Flow { .. },
            ..
        } => Some((Effect::Ipv6Fenced, reason.to_string())),
        IrEntry::NotForwardable { reason, .. } => Some((Effect::Fenced, reason.to_string())),
        IrEntry::AclFailClosed { .. } | IrEntry::UnenforcedAcl { .. } => {
            fenced("ACLs the compiler could not translate")
        }
        // northd's own allow rules (IPv6 neighbour discovery) restrict nothing.
        IrEntry::Acl { rule, .. }
            if rule.acl.is_none() && matches!(rule.action, AclAction::Allow { .. }) =>
        {
            None
        }
        IrEntry::Acl { .. } | IrEntry::AclTracking { .. } => {
            fenced("ACLs are not translated to OpenFlow")
        }
        IrEntry::LoadBalancer { .. } | IrEntry::LbAffinity { .. } | IrEntry::LbHairpin { .. } => {
            fenced("load balancers are not translated to OpenFlow")
        }
        IrEntry::GatewayPort { .. }
        | IrEntry::CentralizedNat { .. }
        | IrEntry::CentralizedSnat { .. }
        | IrEntry::CentralizedDnat { .. }
        | IrEntry::RouterLoadBalancer { .. }
        | IrEntry::DistributedNat { .. } => {
            fenced("gateway ports and NAT are not translated to OpenFlow")
        }
        IrEntry::RouterPolicy { l4: Some(l4), .. } if ![6, 17, 132].contains(&l4.protocol) => {
            fenced("router policies on this transport protocol are not translated to OpenFlow")
        }
        IrEntry::Port {
            name,
            port_security,
            ..
        } if !port_security.is_empty() => Some((
            Effect::Partial,
            format!("port security is not translated to OpenFlow: {name} does not forward"),
        )),
        IrEntry::RouterReject {
            response: RejectResponse::SctpAbort,
            ..
        }
        | IrEntry::RouterReject6 {
            response: RejectResponse::SctpAbort,
            ..
        } => partial("the router's SCTP aborts are not sent"),
        IrEntry::Punt { .. } | IrEntry::ServiceMonitorAnswers { .. } => {
            partial("nothing is punted to the agent")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::ir::PolicyVerdict;

    fn diff(entries: Vec<IrEntry>, added: bool) -> IrDiff {
        if added {
            IrDiff {
                added: entries,
                removed: Vec::new(),
            }
        } else {
            IrDiff {
                added: Vec::new(),
                removed: entries,
            }
        }
    }

    /// A datapath is fenced while one of its entries restricts what it forwards and the
    /// translation leaves it out; entries that only add forwarding make it partial; the fence
    /// goes with the last such entry.
    #[test]
    fn a_restricting_entry_left_out_fences_its_datapath_until_it_goes() {
        let mut untranslated = Untranslated::default();
        let nat = IrEntry::GatewayPort {
            datapath: 3,
            port: "lrp".into(),
            redirect: "cr-lrp".into(),
        };
        let blocked = IrEntry::NotForwardable {
            datapath: 3,
            reason: Unforwardable::UnsupportedFlow {
                stage: "lr_in_x".into(),
                reason: "y".into(),
            },
        };
        let punt = IrEntry::Punt {
            datapath: 4,
            reason: "DHCPv6".into(),
        };
        untranslated.apply(&diff(vec![nat.clone(), blocked.clone(), punt], true));
        assert_eq!(
            untranslated.take_fence_changes(),
            [FenceChange {
                datapath: 3,
                fenced: true,
                ipv6_fenced: false
            }]
        );
        assert!(!untranslated.is_fenced(4));
        assert_eq!(untranslated.counts(), [("partial", 1), ("fenced", 1)]);
        untranslated.apply(&diff(vec![nat], false));
        assert!(
            untranslated.take_fence_changes().is_empty(),
            "still fenced by the other entry"
        );
        untranslated.apply(&diff(vec![blocked], false));
        assert_eq!(
            untranslated.take_fence_changes(),
            [FenceChange {
                datapath: 3,
                fenced: false,
                ipv6_fenced: false
            }]
        );
        assert!(untranslated.reasons(3).is_empty());
    }

    /// A flow only IPv6 matches that the compiler could not translate fences the datapath's
    /// IPv6 only (its IPv4 forwarded), counted as partial; gone, the fence goes.
    #[test]
    fn an_untranslated_ipv6_flow_fences_only_ipv6() {
        let mut untranslated = Untranslated::default();
        let ipv6 = IrEntry::NotForwardable {
            datapath: 5,
            reason: crate::pipeline::ir::Unforwardable::UnsupportedIpv6Flow {
                stage: "ls_in_acl".into(),
                reason: "x".into(),
            },
        };
        untranslated.apply(&diff(vec![ipv6.clone()], true));
        assert_eq!(
            untranslated.take_fence_changes(),
            [FenceChange {
                datapath: 5,
                fenced: false,
                ipv6_fenced: true
            }]
        );
        assert_eq!(untranslated.counts(), [("partial", 1), ("fenced", 0)]);
        untranslated.apply(&diff(vec![ipv6], false));
        assert_eq!(
            untranslated.take_fence_changes(),
            [FenceChange {
                datapath: 5,
                fenced: false,
                ipv6_fenced: false
            }]
        );
    }

    /// Policies on ports and port ranges are translated.
    #[test]
    fn policies_on_ports_and_ranges_are_translated() {
        use crate::pipeline::ir::L4Match;
        let policy = |ports: (u16, u16)| IrEntry::RouterPolicy {
            datapath: 3,
            priority: 10,
            source: None,
            destination: None,
            l4: Some(L4Match {
                protocol: 6,
                source_ports: None,
                destination_ports: Some(ports),
            }),
            verdict: PolicyVerdict::Drop,
        };
        assert_eq!(classify(&policy((80, 80))), None);
        assert_eq!(classify(&policy((80, 90))), None);
    }
}
