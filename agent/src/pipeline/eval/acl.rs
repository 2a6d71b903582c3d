//! The ACL stages of a switch in the evaluator, as the kernel's `acl` module runs them: whether
//! the packet goes through conntrack (the tracking entries and their bypasses), the state
//! conntrack reports (taken, like `ovn-trace --ct`, from the trace's assumed states, one per
//! conntrack action), then the rules of the stage by priority, the first that holds in that
//! state and matches the packet deciding. Reads only IR entries, indexed here once.

use std::collections::{HashMap, HashSet};

use ovnbpf_common::ct;

use super::{
    Evaluator, Trace, is_multicast,
    packet::{L3, L4, Packet},
};
use crate::pipeline::ir::{
    AclAction, AclClause, AclFamily, AclMatch, AclRule, AclStage, AddressTerm, AddressValue,
    IrEntry, PortRef, Prefix, TrackingStage,
};

/// Conntrack states a trace assumes, in the order the packet meets conntrack (ovn-trace's
/// `--ct`), or by zone (the logical port whose zone it is, as a kernel's table answers); once
/// they run out, or for a zone not named, established (ovn-trace's default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtAssumptions {
    states: Vec<u8>,
    used: usize,
    by_zone: Option<HashMap<String, u8>>,
}

impl CtAssumptions {
    #[must_use]
    pub fn new(states: Vec<u8>) -> Self {
        Self {
            states,
            used: 0,
            by_zone: None,
        }
    }

    /// The state of each zone (`zone` → state); zones not named are established.
    #[must_use]
    pub fn by_zone(states: HashMap<String, u8>) -> Self {
        Self {
            by_zone: Some(states),
            ..Self::default()
        }
    }

    fn next(&mut self, zone: &str) -> u8 {
        let established = ct::TRACKED | ct::ESTABLISHED;
        if let Some(states) = &self.by_zone {
            self.used += 1;
            return states.get(zone).copied().unwrap_or(established);
        }
        let state = self.states.get(self.used).copied().unwrap_or(established);
        self.used += 1;
        state
    }
}

/// One pipeline's (ingress or egress) tracking of a switch.
#[derive(Default)]
struct Tracking<'a> {
    stages: Vec<TrackingStage>,
    bypasses: Vec<(TrackingStage, &'a AclMatch, bool)>,
    stateless_skips_lb: bool,
    fails_closed: bool,
}

/// The ACL entries of the IR, indexed.
#[derive(Default)]
pub(super) struct AclIndex<'a> {
    /// (switch, egress) → tracking.
    tracking: HashMap<(u32, bool), Tracking<'a>>,
    /// (switch, stage) → rules, highest priority first.
    rules: HashMap<(u32, AclStage), Vec<&'a AclRule>>,
    groups: HashMap<&'a str, HashSet<&'a str>>,
    sets: HashMap<&'a str, Vec<Prefix>>,
}

impl<'a> AclIndex<'a> {
    pub(super) fn add(&mut self, entry: &'a IrEntry) {
        match entry {
            IrEntry::Acl { datapath, rule } => {
                self.rules
                    .entry((*datapath, rule.stage))
                    .or_default()
                    .push(rule);
            }
            IrEntry::AclTracking {
                datapath,
                egress,
                stage,
            } => self
                .tracking
                .entry((*datapath, *egress))
                .or_default()
                .stages
                .push(*stage),
            IrEntry::AclTrackingBypass {
                datapath,
                egress,
                stage,
                condition,
                stateless,
            } => self
                .tracking
                .entry((*datapath, *egress))
                .or_default()
                .bypasses
                .push((*stage, condition, *stateless)),
            IrEntry::StatelessSkipsLb { datapath, egress } => {
                self.tracking
                    .entry((*datapath, *egress))
                    .or_default()
                    .stateless_skips_lb = true;
            }
            IrEntry::AclFailClosed { datapath, egress } => {
                self.tracking
                    .entry((*datapath, *egress))
                    .or_default()
                    .fails_closed = true;
            }
            IrEntry::PortGroupMember { group, port } => {
                self.groups.entry(group).or_default().insert(port);
            }
            IrEntry::AddressSetMember { set, prefix } => {
                self.sets.entry(set).or_default().push(*prefix);
            }
            _ => {}
        }
    }

    pub(super) fn finish(&mut self) {
        for rules in self.rules.values_mut() {
            rules.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.cmp(b)));
        }
    }
}

/// Where the packet is in the switch: its ports as OVN's registers hold them.
#[derive(Clone, Copy)]
pub(super) struct AclPorts<'p> {
    pub inport: &'p str,
    /// `None` in the ingress pipeline (the output port is not chosen yet).
    pub outport: Option<&'p str>,
}

/// What a switch's ACL stages did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AclVerdict {
    /// On through the pipeline.
    Pass,
    Drop,
    /// Dropped and answered (OVN's `reject`): the caller sends [`Packet::reject_answer`].
    Reject,
}

impl Evaluator<'_> {
    /// The ACL stages of switch `dp`'s ingress (`outport` `None`) or egress pipeline.
    pub(super) fn acl(
        &self,
        dp: u32,
        ports: AclPorts<'_>,
        packet: &Packet,
        trace: &mut Trace,
    ) -> AclVerdict {
        let egress = ports.outport.is_some();
        let stages: &[AclStage] = if egress {
            &[AclStage::Egress]
        } else {
            &[AclStage::Ingress, AclStage::IngressAfterLb]
        };
        let tracking = self.acl.tracking.get(&(dp, egress));
        if tracking.is_some_and(|t| t.fails_closed) {
            self.step(
                trace,
                dp,
                "dropped: an ACL of this switch is not translated (fails closed)".into(),
            );
            return AclVerdict::Drop;
        }
        let state = match tracking {
            Some(tracking) if self.tracked(tracking, ports, packet) => {
                let zone = ports.outport.unwrap_or(ports.inport);
                let state = trace.ct.next(zone);
                self.step(trace, dp, format!("conntrack: {}", describe(state)));
                state
            }
            _ => 0,
        };
        let mut related = false;
        for stage in stages {
            let rules = self
                .acl
                .rules
                .get(&(dp, *stage))
                .map(Vec::as_slice)
                .unwrap_or_default();
            let winner = rules.iter().find(|rule| {
                rule.states.contains(state)
                    && (!rule.after_related || related)
                    && self.matches(&rule.condition, ports, packet)
            });
            let Some(rule) = winner else {
                continue;
            };
            let name = rule.acl.as_deref().unwrap_or("northd");
            match rule.action {
                AclAction::Allow {
                    related: allowed_related,
                    ..
                } => {
                    related |= allowed_related;
                    self.step(
                        trace,
                        dp,
                        format!(
                            "{}: allowed by priority {} ({name})",
                            stage.name(),
                            rule.priority
                        ),
                    );
                }
                AclAction::Drop { .. } => {
                    self.step(
                        trace,
                        dp,
                        format!(
                            "dropped: {} priority {} ({name})",
                            stage.name(),
                            rule.priority
                        ),
                    );
                    return AclVerdict::Drop;
                }
                AclAction::Reject { .. } => {
                    self.step(
                        trace,
                        dp,
                        format!(
                            "rejected: {} priority {} ({name})",
                            stage.name(),
                            rule.priority
                        ),
                    );
                    return AclVerdict::Reject;
                }
            }
        }
        AclVerdict::Pass
    }

    /// Whether the packet goes through conntrack: a tracking stage takes it and none of that
    /// stage's bypasses (or a stateless filter) skips it.
    fn tracked(&self, tracking: &Tracking<'_>, ports: AclPorts<'_>, packet: &Packet) -> bool {
        if !matches!(packet.l3, L3::Ipv4 { .. } | L3::Ipv6 { .. }) {
            return false;
        }
        let stateless = tracking
            .bypasses
            .iter()
            .any(|(_, condition, stateless)| *stateless && self.matches(condition, ports, packet));
        tracking.stages.iter().any(|stage| {
            let skipped = tracking.bypasses.iter().any(|(bypassed, condition, _)| {
                bypassed == stage && self.matches(condition, ports, packet)
            });
            let stateless_skips = match stage {
                TrackingStage::PreAcl => stateless,
                TrackingStage::PreLb => stateless && tracking.stateless_skips_lb,
            };
            !skipped && !stateless_skips
        })
    }

    fn matches(&self, condition: &AclMatch, ports: AclPorts<'_>, packet: &Packet) -> bool {
        condition
            .0
            .iter()
            .any(|clause| self.clause_matches(clause, ports, packet))
    }

    fn clause_matches(&self, clause: &AclClause, ports: AclPorts<'_>, packet: &Packet) -> bool {
        let port_is = |wanted: &Option<PortRef>, port: Option<&str>| match wanted {
            None => true,
            Some(wanted) => port.is_some_and(|port| self.port_in(wanted, port)),
        };
        if !port_is(&clause.inport, Some(ports.inport))
            || !port_is(&clause.outport, ports.outport)
            || (clause.eth_multicast && !is_multicast(&packet.eth_dst))
            || clause.eth_source.is_some_and(|mac| mac != packet.eth_src)
            || clause
                .eth_destination
                .is_some_and(|mac| mac != packet.eth_dst)
        {
            return false;
        }
        let (family_ok, l4) = match (clause.family, packet.l3) {
            (AclFamily::Any, L3::Arp { .. }) => (true, None),
            (_, L3::Arp { .. }) => (false, None),
            (AclFamily::Ipv6, L3::Ipv4 { .. }) | (AclFamily::Ipv4, L3::Ipv6 { .. }) => {
                (false, None)
            }
            (_, L3::Ipv4 { l4, .. } | L3::Ipv6 { l4, .. }) => (true, Some(l4)),
        };
        if !family_ok {
            return false;
        }
        if let L3::Ipv4 {
            source,
            destination,
            ..
        } = packet.l3
        {
            let holds = |terms: &[AddressTerm], ip| terms.iter().all(|t| self.term_holds(t, ip));
            if !holds(&clause.source, source) || !holds(&clause.destination, destination) {
                return false;
            }
        } else if !clause.source.is_empty() || !clause.destination.is_empty() {
            return false;
        }
        let Some(protocol) = clause.protocol else {
            return true;
        };
        let Some(l4) = l4 else {
            return false;
        };
        // The kernel's reading of the packet: protocol and ports (ICMP's type apart).
        let (number, transport_ports) = packet.transport();
        let ports_of = matches!(number, 6 | 17).then_some(transport_ports);
        let kind = match l4 {
            L4::Icmp { kind, .. } | L4::Nd { kind, .. } => Some(kind),
            _ => None,
        };
        if number != protocol {
            return false;
        }
        let within = |ranges: &Option<Vec<(u16, u16)>>, port: Option<u16>| match ranges {
            None => true,
            Some(ranges) => {
                port.is_some_and(|port| ranges.iter().any(|(l, h)| (*l..=*h).contains(&port)))
            }
        };
        within(&clause.source_ports, ports_of.map(|p| p.0))
            && within(&clause.destination_ports, ports_of.map(|p| p.1))
            && clause
                .icmp_types
                .as_ref()
                .is_none_or(|types| kind.is_some_and(|k| types.contains(&k)))
    }

    fn port_in(&self, wanted: &PortRef, port: &str) -> bool {
        match wanted {
            PortRef::Port(name) => name == port,
            PortRef::Group(group) => self
                .acl
                .groups
                .get(group.as_str())
                .is_some_and(|ports| ports.contains(port)),
        }
    }

    fn term_holds(&self, term: &AddressTerm, ip: std::net::Ipv4Addr) -> bool {
        let member = term.values.iter().any(|value| match value {
            AddressValue::Prefix(prefix) => prefix.contains(ip),
            AddressValue::Set(set) => self
                .acl
                .sets
                .get(set.as_str())
                .is_some_and(|prefixes| prefixes.iter().any(|p| p.contains(ip))),
        });
        member != term.negated
    }
}

/// A state in ovn-trace's words (`new|trk`).
fn describe(state: u8) -> String {
    let names = [
        (ct::NEW, "new"),
        (ct::ESTABLISHED, "est"),
        (ct::RELATED, "rel"),
        (ct::REPLY, "rpl"),
        (ct::INVALID, "inv"),
        (ct::TRACKED, "trk"),
        (ct::BLOCKED, "blocked"),
    ];
    let words: Vec<&str> = names
        .iter()
        .filter(|(bit, _)| state & bit != 0)
        .map(|(_, name)| *name)
        .collect();
    if words.is_empty() {
        "untracked".into()
    } else {
        words.join("|")
    }
}
