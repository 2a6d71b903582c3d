//! Router policies (`lr_in_policy`) and ECMP (`lr_in_ip_routing_ecmp`, `lr_in_policy_ecmp`): a
//! policy's prefixes (address sets expanded by the compiler), transport ports and verdict (allow,
//! drop, reroute to one next hop or an ECMP group), and where each ECMP member leads.

use super::{
    matching::*,
    verdict::{Class, unsupported},
};
use crate::{
    lflow::ast::{Action, Expr},
    pipeline::ir::{EcmpStage, IrEntry, L4Match, PolicyVerdict},
};

/// `lr_in_policy`: the default (no policy) is neutral; policies are compiled one by one.
pub(super) fn policy(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    match terms {
        [Expr::Bool(true)] if zeroes_then_next(actions, &slice("reg8", 0, 15)) => Class::Neutral,
        _ => policy_rule(dp, priority, terms, actions),
    }
}

/// `lr_in_policy`: policies matching on IPv4 source and/or destination prefixes (or address
/// sets), optionally on one transport protocol and its ports, that allow, drop or reroute to one
/// or several next hops (other matches stay unsupported).
fn policy_rule(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    let source = terms.iter().find_map(|t| compare_prefixes(t, "ip4.src"));
    let destination = terms.iter().find_map(|t| compare_prefixes(t, "ip4.dst"));
    let ip4_only = terms.iter().filter(|t| is_predicate(t, "ip4")).count();
    let protocols: Vec<u8> = terms
        .iter()
        .filter_map(|t| {
            L4_PROTOCOLS
                .iter()
                .find(|(name, _)| is_predicate(t, name))
                .map(|(_, number)| *number)
        })
        .collect();
    let ports: Vec<PortTerm> = terms.iter().filter_map(|t| port_ranges(t)).collect();
    let recognised = terms.len()
        == usize::from(source.is_some())
            + usize::from(destination.is_some())
            + ip4_only
            + protocols.len()
            + ports.len();
    let mut protocol: Option<u8> = None;
    let mut consistent = true;
    for number in protocols.iter().chain(ports.iter().map(|(p, ..)| p)) {
        consistent &= protocol.is_none_or(|p| p == *number);
        protocol = Some(*number);
    }
    let side = |wanted| {
        let mut sides = ports.iter().filter(move |(_, side, _)| *side == wanted);
        let first = sides.next().map(|(_, _, ranges)| ranges.clone());
        (first, sides.next().is_none())
    };
    let (source_ports, one_source) = side(PortSide::Source);
    let (destination_ports, one_destination) = side(PortSide::Destination);
    if !recognised
        || !consistent
        || !one_source
        || !one_destination
        || (source.is_none() && destination.is_none() && protocol.is_none())
    {
        return unsupported(
            "router policy match (IPv4 prefixes, address sets and one transport protocol's ports are compiled)",
        );
    }
    // A reroute ends by clearing the ECMP group id (reg8[0..15]) before `next;`.
    let resets_ecmp = |actions: &[Action]| {
        actions.iter().any(|a| {
            matches!(a, Action::Assign { destination, .. } if destination == &slice("reg8", 0, 15))
        })
    };
    let verdict = match actions {
        [Action::Keyword { name, .. }] if is_drop(name) => PolicyVerdict::Drop,
        [_, _] if let Some((group, members)) = ecmp_selection(actions) => {
            PolicyVerdict::RerouteEcmp { group, members }
        }
        _ if zeroes_then_next(actions, &slice("reg8", 0, 15)) => PolicyVerdict::Allow,
        [.., next] if is_next(next) && resets_ecmp(actions) => {
            let (Some(nexthop), Some(source_ip), Some(source_mac), Some(port)) = (
                assigned_ipv4(actions, "reg0"),
                assigned_ipv4(actions, "reg1"),
                assigned_mac(actions, "eth.src"),
                assigned_string(actions, "outport"),
            ) else {
                return unsupported("router policy reroute variant");
            };
            PolicyVerdict::Reroute {
                nexthop,
                source_ip,
                source_mac,
                port: port.to_string(),
            }
        }
        _ => return unsupported("router policy action"),
    };
    // One entry per (source, destination, ports) combination: a set (an address set's pods,
    // `{80, 443}`) matches when any of its members does; an empty set matches nothing.
    let any = || vec![None];
    let sources = source.map_or_else(any, |s| s.into_iter().map(Some).collect());
    let destinations = destination.map_or_else(any, |d| d.into_iter().map(Some).collect());
    let l4s: Vec<Option<L4Match>> = match protocol {
        None => vec![None],
        Some(protocol) => {
            let ranges = |ports: Option<Vec<(u16, u16)>>| {
                ports.map_or_else(|| vec![None], |r| r.into_iter().map(Some).collect())
            };
            let destination_ranges = ranges(destination_ports);
            let mut l4s = Vec::new();
            for source_ports in ranges(source_ports) {
                for destination_ports in &destination_ranges {
                    l4s.push(Some(L4Match {
                        protocol,
                        source_ports,
                        destination_ports: *destination_ports,
                    }));
                }
            }
            l4s
        }
    };
    let priority = u16::try_from(priority).unwrap_or(u16::MAX);
    let mut entries = Vec::new();
    for source in &sources {
        for destination in &destinations {
            for l4 in &l4s {
                entries.push(IrEntry::RouterPolicy {
                    datapath: dp,
                    priority,
                    source: *source,
                    destination: *destination,
                    l4: *l4,
                    verdict: verdict.clone(),
                });
            }
        }
    }
    Class::Compiled(entries)
}

/// `lr_in_ip_routing_ecmp`: the members of ECMP routes' groups.
pub(super) fn route_ecmp(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    ecmp_member(dp, EcmpStage::Route, priority, terms, actions)
}

/// `lr_in_policy_ecmp`: the members of multi-next-hop reroutes' groups.
pub(super) fn policy_ecmp(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    ecmp_member(dp, EcmpStage::Policy, priority, terms, actions)
}

/// `reg8[0..15] == G && reg8[16..31] == M` → `reg0 = NH; reg1 = SRC; eth.src = MAC; outport =
/// P; [flags.loopback = 1;] next;`: where member M of group G leads (and the stage's neutral
/// rows, see [`ecmp`]).
fn ecmp_member(
    dp: u32,
    stage: EcmpStage,
    priority: i64,
    terms: &[&Expr],
    actions: &[Action],
) -> Class {
    let (group, member) = match terms {
        [first, second] => (
            compare_field_integer(first, &ecmp_group_register()),
            compare_field_integer(second, &ecmp_member_register()),
        ),
        _ => (None, None),
    };
    let (Some(group), Some(member)) = (group, member) else {
        return ecmp(dp, priority, terms, actions);
    };
    let (Ok(group), Ok(member)) = (u16::try_from(group), u16::try_from(member)) else {
        return unsupported("ECMP group or member id beyond 16 bits");
    };
    // An IPv6 route's member: `xxreg0 = NH6; xxreg1 = SRC6; …`.
    if stage == EcmpStage::Route
        && let (Some(nexthop), Some(source_ip), Some(source_mac), Some(port), Some(last)) = (
            assigned_ipv6(actions, "xxreg0"),
            assigned_ipv6(actions, "xxreg1"),
            assigned_mac(actions, "eth.src"),
            assigned_string(actions, "outport"),
            actions.last(),
        )
        && is_next(last)
    {
        return Class::Compiled(vec![IrEntry::EcmpMember6 {
            datapath: dp,
            group,
            member,
            nexthop,
            source_ip,
            source_mac,
            port: port.to_string(),
        }]);
    }
    let (Some(nexthop), Some(source_ip), Some(source_mac), Some(port), Some(last)) = (
        assigned_ipv4(actions, "reg0"),
        assigned_ipv4(actions, "reg1"),
        assigned_mac(actions, "eth.src"),
        assigned_string(actions, "outport"),
        actions.last(),
    ) else {
        return unsupported("ECMP member variant (a policy's IPv6 or an unknown next hop)");
    };
    if !is_next(last) {
        return unsupported("ECMP member variant");
    }
    Class::Compiled(vec![IrEntry::EcmpMember {
        datapath: dp,
        stage,
        group,
        member,
        nexthop,
        source_ip,
        source_mac,
        port: port.to_string(),
    }])
}

/// `*_ecmp` stages: without ECMP routes the group id is always 0 and the default drop is
/// unreachable.
pub(super) fn ecmp(_: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    match (terms, actions) {
        ([term], [next])
            if is_next(next)
                && compare_eq(term)
                    .is_some_and(|(f, v)| f == &slice("reg8", 0, 15) && is_zero(v)) =>
        {
            Class::Neutral
        }
        ([Expr::Bool(true)], _) if is_drop_only(actions) => Class::Neutral,
        _ => unsupported("ECMP routes"),
    }
}
