//! One compiled ACL flow ([`AclRule`] of the IR) → the kernel's rules
//! ([`ovnbpf_common::acl::AclRule`]), one per clause (more when a clause has more port ranges or
//! ICMP types than a kernel rule holds), with the address and port sets it names turned into set
//! ids, and its `log` option into a log id, by the caller's [`SetIds`]. Pure: no state but the
//! ids asked for. A clause the kernel
//! cannot hold (more than two address terms a side, a term naming more than two sets) is an
//! error naming why; the caller fails that pipeline closed.

use ovnbpf_common::acl::{
    self as kernel, AclAddressTerm, PortRange, RULE_ADDRESS_TERMS, RULE_AFTER_RELATED,
    RULE_DESTINATION_PORTS, RULE_ETH_DESTINATION, RULE_ETH_MULTICAST, RULE_ETH_SOURCE,
    RULE_ICMP_TYPES, RULE_IP, RULE_IPV4, RULE_IPV6, RULE_SOURCE_PORTS, action,
};

use crate::pipeline::ir::{
    AclAction, AclClause, AclFamily, AclLog, AclMatch, AclRule, AddressTerm, AddressValue, PortRef,
    Prefix, States,
};

/// Where the translation gets set ids (and log ids) from.
pub(super) trait SetIds {
    /// The id of `log` on a rule of the ingress (or `egress`) pipeline (never 0).
    fn log_id(&mut self, log: &AclLog, egress: bool) -> u32;
    /// The id of address set `name`.
    fn address_set(&mut self, name: &str) -> u32;
    /// The id of the anonymous set of `prefixes` (a match's literal addresses).
    fn inline_set(&mut self, prefixes: &[Prefix]) -> u32;
    /// The id of the port set of `port` on switch `datapath`.
    fn port_set(&mut self, datapath: u32, port: &PortRef) -> u32;
}

/// The kernel action of an IR verdict.
fn kernel_action(verdict: AclAction) -> u8 {
    match verdict {
        AclAction::Allow {
            related: true,
            commit: _,
        } => action::ALLOW_RELATED,
        AclAction::Allow { commit: true, .. } => action::ALLOW_COMMIT,
        AclAction::Allow { .. } => action::ALLOW,
        AclAction::Drop { block: false } => action::DROP,
        AclAction::Drop { block: true } => action::DROP_BLOCK,
        AclAction::Reject { block: false } => action::REJECT,
        AclAction::Reject { block: true } => action::REJECT_BLOCK,
    }
}

/// The kernel rules of a compiled ACL flow on switch `datapath`.
pub(super) fn rules_of(
    datapath: u32,
    rule: &AclRule,
    ids: &mut impl SetIds,
) -> Result<Vec<kernel::AclRule>, String> {
    let base = kernel::AclRule {
        states: rule.states,
        priority: rule.priority,
        action: kernel_action(rule.action),
        flags: if rule.after_related {
            RULE_AFTER_RELATED
        } else {
            0
        },
        log: rule
            .log
            .as_ref()
            .map_or(0, |log| ids.log_id(log, rule.stage.egress())),
        ..kernel::AclRule::default()
    };
    clauses_of(datapath, &rule.condition, base, ids)
}

/// The kernel rules of a bypass (a flow that skips conntrack): `stateless` for an
/// `allow-stateless` filter.
pub(super) fn bypass_rules_of(
    datapath: u32,
    condition: &AclMatch,
    stateless: bool,
    ids: &mut impl SetIds,
) -> Result<Vec<kernel::AclRule>, String> {
    let base = kernel::AclRule {
        states: States::ALL,
        action: if stateless {
            action::BYPASS_STATELESS
        } else {
            action::BYPASS
        },
        ..kernel::AclRule::default()
    };
    clauses_of(datapath, condition, base, ids)
}

fn clauses_of(
    datapath: u32,
    condition: &AclMatch,
    base: kernel::AclRule,
    ids: &mut impl SetIds,
) -> Result<Vec<kernel::AclRule>, String> {
    let mut rules = Vec::new();
    for clause in &condition.0 {
        rules.extend(clause_rules(datapath, clause, base, ids)?);
    }
    Ok(rules)
}

fn clause_rules(
    datapath: u32,
    clause: &AclClause,
    base: kernel::AclRule,
    ids: &mut impl SetIds,
) -> Result<Vec<kernel::AclRule>, String> {
    let mut rule = base;
    rule.flags |= match clause.family {
        AclFamily::Any => 0,
        AclFamily::Ip => RULE_IP,
        AclFamily::Ipv4 => RULE_IPV4,
        AclFamily::Ipv6 => RULE_IPV6,
    };
    if clause.eth_multicast {
        rule.flags |= RULE_ETH_MULTICAST;
    }
    if let Some(mac) = clause.eth_source {
        rule.flags |= RULE_ETH_SOURCE;
        rule.eth_source = mac;
    }
    if let Some(mac) = clause.eth_destination {
        rule.flags |= RULE_ETH_DESTINATION;
        rule.eth_destination = mac;
    }
    rule.protocol = clause.protocol.unwrap_or(0);
    if let Some(port) = &clause.inport {
        rule.inport_set = ids.port_set(datapath, port);
    }
    if let Some(port) = &clause.outport {
        rule.outport_set = ids.port_set(datapath, port);
    }
    rule.source = address_terms(&clause.source, ids)?;
    rule.destination = address_terms(&clause.destination, ids)?;
    // Ranges and types beyond one rule's room: one rule per chunk (their product).
    let chunks = |ranges: &Option<Vec<(u16, u16)>>, size: usize| -> Vec<Vec<(u16, u16)>> {
        match ranges {
            None => vec![Vec::new()],
            Some(ranges) => ranges.chunks(size).map(<[_]>::to_vec).collect(),
        }
    };
    let types: Vec<Vec<u8>> = match &clause.icmp_types {
        None => vec![Vec::new()],
        Some(types) => types.chunks(RULE_ICMP_TYPES).map(<[_]>::to_vec).collect(),
    };
    let mut rules = Vec::new();
    for sources in chunks(&clause.source_ports, RULE_SOURCE_PORTS) {
        for destinations in chunks(&clause.destination_ports, RULE_DESTINATION_PORTS) {
            for kinds in &types {
                let mut chunk = rule;
                fill_ranges(
                    &mut chunk.source_ports,
                    &mut chunk.source_port_count,
                    &sources,
                );
                fill_ranges(
                    &mut chunk.destination_ports,
                    &mut chunk.destination_port_count,
                    &destinations,
                );
                for (slot, kind) in chunk.icmp_types.iter_mut().zip(kinds) {
                    *slot = *kind;
                }
                chunk.icmp_type_count = u8::try_from(kinds.len()).unwrap_or(0);
                rules.push(chunk);
            }
        }
    }
    Ok(rules)
}

fn fill_ranges(slots: &mut [PortRange], count: &mut u8, ranges: &[(u16, u16)]) {
    for (slot, (low, high)) in slots.iter_mut().zip(ranges) {
        *slot = PortRange {
            low: *low,
            high: *high,
        };
    }
    *count = u8::try_from(ranges.len().min(slots.len())).unwrap_or(0);
}

fn address_terms(
    terms: &[AddressTerm],
    ids: &mut impl SetIds,
) -> Result<[AclAddressTerm; RULE_ADDRESS_TERMS], String> {
    if terms.len() > RULE_ADDRESS_TERMS {
        return Err(format!(
            "an ACL clause with {} conditions on one address (the kernel takes {RULE_ADDRESS_TERMS})",
            terms.len()
        ));
    }
    let mut kernel_terms = [AclAddressTerm::default(); RULE_ADDRESS_TERMS];
    for (slot, term) in kernel_terms.iter_mut().zip(terms) {
        let mut sets = Vec::new();
        let mut literal = Vec::new();
        for value in &term.values {
            match value {
                AddressValue::Set(name) => sets.push(ids.address_set(name)),
                AddressValue::Prefix(prefix) => literal.push(*prefix),
            }
        }
        if !literal.is_empty() {
            sets.push(ids.inline_set(&literal));
        }
        // `== {}` matches nothing, `!= {}` everything: an empty set stands for both.
        if sets.is_empty() {
            sets.push(ids.inline_set(&[]));
        }
        if sets.len() > 2 {
            return Err("an ACL address condition naming more than two sets".into());
        }
        slot.sets[0] = sets[0];
        slot.sets[1] = sets.get(1).copied().unwrap_or(0);
        slot.negated = u32::from(term.negated);
    }
    Ok(kernel_terms)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::pipeline::ir::AclStage;

    #[derive(Default)]
    struct Ids(HashMap<String, u32>);

    impl Ids {
        fn id(&mut self, name: String) -> u32 {
            let next = self.0.len() as u32 + 1;
            *self.0.entry(name).or_insert(next)
        }
    }

    impl SetIds for Ids {
        fn address_set(&mut self, name: &str) -> u32 {
            self.id(format!("set {name}"))
        }
        fn inline_set(&mut self, prefixes: &[Prefix]) -> u32 {
            self.id(format!("inline {prefixes:?}"))
        }
        fn port_set(&mut self, datapath: u32, port: &PortRef) -> u32 {
            self.id(format!("port {datapath} {port}"))
        }
        fn log_id(&mut self, log: &AclLog, egress: bool) -> u32 {
            self.id(format!("log {log:?} {egress}"))
        }
    }

    fn prefix(text: &str) -> Prefix {
        let (network, length) = text.split_once('/').unwrap();
        Prefix {
            network: network.parse().unwrap(),
            length: length.parse().unwrap(),
        }
    }

    #[test]
    fn a_network_policy_rule_becomes_one_kernel_rule_with_its_sets() {
        let rule = AclRule {
            stage: AclStage::Egress,
            priority: 3001,
            states: States::ALL,
            after_related: false,
            condition: AclMatch(vec![AclClause {
                outport: Some(PortRef::Group("3_web.ns".into())),
                family: AclFamily::Ipv4,
                source: vec![
                    AddressTerm {
                        negated: false,
                        values: vec![AddressValue::Set("allow".into())],
                    },
                    AddressTerm {
                        negated: true,
                        values: vec![AddressValue::Prefix(prefix("10.0.2.0/24"))],
                    },
                ],
                protocol: Some(6),
                destination_ports: Some(vec![(80, 80), (443, 443)]),
                ..AclClause::default()
            }]),
            action: AclAction::Allow {
                commit: true,
                related: false,
            },
            log: None,
            acl: Some("0123abcd".into()),
        };
        let mut ids = Ids::default();
        let rules = rules_of(3, &rule, &mut ids).unwrap();
        assert_eq!(rules.len(), 1);
        let kernel = rules[0];
        assert_eq!(kernel.action, action::ALLOW_COMMIT);
        assert_eq!((kernel.priority, kernel.protocol), (3001, 6));
        assert_eq!(kernel.flags, RULE_IPV4);
        assert_eq!(kernel.outport_set, ids.0["port 3 @3_web.ns"]);
        assert_eq!(kernel.inport_set, 0);
        assert_eq!(kernel.source[0].sets, [ids.0["set allow"], 0]);
        assert_eq!(kernel.source[0].negated, 0);
        assert_eq!(kernel.source[1].negated, 1);
        assert_eq!(kernel.destination[0].sets, [0, 0], "no condition");
        assert_eq!(kernel.destination_port_count, 2);
        assert_eq!(
            kernel.destination_ports[..2],
            [
                PortRange { low: 80, high: 80 },
                PortRange {
                    low: 443,
                    high: 443
                }
            ]
        );
    }

    #[test]
    fn clauses_and_long_range_lists_split_and_too_many_terms_fail() {
        let ranges: Vec<(u16, u16)> = (0..6).map(|i| (1000 + i, 1000 + i)).collect();
        let condition = AclMatch(vec![
            AclClause {
                protocol: Some(17),
                destination_ports: Some(ranges),
                ..AclClause::default()
            },
            AclClause {
                eth_multicast: true,
                ..AclClause::default()
            },
        ]);
        let mut ids = Ids::default();
        let rules = bypass_rules_of(1, &condition, true, &mut ids).unwrap();
        // Six ranges: a rule of four and one of two; then the multicast clause.
        assert_eq!(rules.len(), 3);
        assert_eq!(
            rules
                .iter()
                .map(|r| r.destination_port_count)
                .collect::<Vec<_>>(),
            [4, 2, 0]
        );
        assert!(rules.iter().all(|r| r.action == action::BYPASS_STATELESS));
        assert_eq!(rules[2].flags, RULE_ETH_MULTICAST);
        let term = AddressTerm {
            negated: false,
            values: vec![AddressValue::Set("a".into())],
        };
        let crowded = AclMatch(vec![AclClause {
            source: vec![term.clone(), term.clone(), term],
            ..AclClause::default()
        }]);
        assert!(bypass_rules_of(1, &crowded, false, &mut ids).is_err());
    }
}
