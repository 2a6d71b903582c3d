//! Logical router stages (`lr_*`): admission, router input (what the router answers and drops),
//! routes and route tables, neighbour resolution and learning, next-hop ARP and delivery
//! (policies and ECMP are [`super::policy`]'s). IPv4 and
//! family-neutral flows; IPv6-only ones go to [`super::ipv6`] first.

use std::net::Ipv4Addr;

use super::{
    matching::*,
    verdict::{Class, not_compiled, unsupported},
};
use crate::{
    lflow::{
        ast::{Action, Expr, Source, Value},
        lexer::Constant,
    },
    pipeline::ir::{
        IrEntry, MAC_LEARNING_NOT_DONE, RejectProtocol, RejectResponse, RouteSelector,
        RouterDropRule,
    },
};

/// `lr_in_ip_routing_pre`: route table 0 by default; a router port with a route table sets its
/// id (`inport == "P"` → `reg7 = N; next;`).
pub(super) fn routing_pre(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    match (terms, actions) {
        ([Expr::Bool(true)], _) if zeroes_then_next(actions, &field("reg7")) => Class::Neutral,
        (
            [term],
            [
                Action::Assign {
                    destination,
                    source,
                },
                next,
            ],
        ) if plain(destination, "reg7") && is_next(next) => {
            let table = match source {
                Source::Constant(Constant::Integer {
                    value, mask: None, ..
                }) => u32::try_from(*value).ok(),
                _ => None,
            };
            match (compare_string(term, "inport"), table) {
                (Some(port), Some(table)) => Class::Compiled(vec![IrEntry::RouteTableOfPort {
                    datapath: dp,
                    port: port.to_string(),
                    table,
                }]),
                _ => unsupported("route table selection variant"),
            }
        }
        _ => unsupported("route table selection variant"),
    }
}

/// `lr_in_arp_request`: delivery, or an ARP request for an unresolved IPv4 next hop.
pub(super) fn arp_request(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    match (terms, actions) {
        ([Expr::Bool(true)], _) if is_bare_output(actions) => {
            Class::Compiled(vec![IrEntry::Deliver {
                datapath: dp,
                egress: false,
            }])
        }
        (
            [dst, Expr::Field(ip4)],
            [
                Action::Keyword {
                    name,
                    block: Some(_),
                    ..
                },
            ],
        ) if compare_mac(dst, "eth.dst") == Some([0; 6]) && plain(ip4, "ip4") && name == "arp" => {
            Class::Compiled(vec![IrEntry::ArpRequestForNextHop { datapath: dp }])
        }
        _ => unsupported("IPv6 neighbour discovery"),
    }
}

/// `lr_out_delivery`: the default drop, and delivery out of each router port.
pub(super) fn delivery(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    match terms {
        [Expr::Bool(true)] if is_drop_only(actions) => {
            Class::Compiled(vec![IrEntry::EgressDefaultDrop { datapath: dp }])
        }
        [term] if is_bare_output(actions) => match compare_eq(term) {
            Some((field, values)) if plain(field, "outport") => match string_value(values) {
                Some(port) => Class::Compiled(vec![IrEntry::RouterDelivery {
                    datapath: dp,
                    port: port.to_string(),
                }]),
                None => unsupported("delivery to a non-literal port"),
            },
            _ => unsupported("router delivery variant"),
        },
        _ => unsupported("router delivery variant"),
    }
}

/// `lr_out_chk_dnat_local`: neutral while no NAT is configured.
pub(super) fn chk_dnat_local(_: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    if matches!(terms, [Expr::Bool(true)]) && zeroes_then_next(actions, &bit("reg9", 4)) {
        Class::Neutral
    } else {
        not_compiled("lr_out_chk_dnat_local")
    }
}

/// `lr_in_admission`: which MACs each router port admits.
pub(super) fn admission(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    let sanity = |a: &Expr| matches!(a, Expr::Field(f) if is_sanity_field(f));
    match (terms, actions) {
        ([Expr::Or(alternatives)], _)
            if is_drop_only(actions) && alternatives.iter().all(sanity) =>
        {
            Class::Compiled(vec![IrEntry::IngressSanity { datapath: dp }])
        }
        ([Expr::Bool(true)], _) if is_drop_only(actions) => {
            Class::Compiled(vec![IrEntry::RouterAdmissionDrop { datapath: dp }])
        }
        ([first, second], _)
            if let Some(mac) = sets_mac_then_next(actions, &slice("xreg0", 0, 47)) =>
        {
            let Some(port) = compare_string(second, "inport") else {
                return unsupported("admission variant");
            };
            let multicast = is_field(first, "eth.mcast");
            if multicast || compare_mac(first, "eth.dst") == Some(mac) {
                Class::Compiled(vec![IrEntry::RouterPort {
                    datapath: dp,
                    port: port.to_string(),
                    mac,
                    multicast,
                }])
            } else {
                unsupported("admission variant")
            }
        }
        _ => unsupported("admission variant (gateway or chassis-resident port)"),
    }
}

/// `lr_in_ip_routing`: IPv4 routes, by destination or (`src-ip` static routes) by source.
pub(super) fn route(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    if terms
        .iter()
        .any(|t| mentions(t, "ip6.dst") || mentions(t, "nd_rs"))
    {
        return unsupported("IPv6 routing");
    }
    if matches!(terms, [Expr::Bool(true)])
        && matches!(actions, [Action::Keyword { name, .. }] if is_drop(name))
    {
        return Class::Compiled(vec![IrEntry::RouteMissDrop { datapath: dp }]);
    }
    let destination = terms.iter().find_map(|t| compare_prefix(t, "ip4.dst"));
    let source = terms.iter().find_map(|t| compare_prefix(t, "ip4.src"));
    let (selector, prefix) = match (destination, source) {
        (Some(prefix), None) => (RouteSelector::Destination, Some(prefix)),
        (None, Some(prefix)) => (RouteSelector::Source, Some(prefix)),
        _ => (RouteSelector::Destination, None),
    };
    let route_table = terms
        .iter()
        .find_map(|t| compare_integer(t, "reg7"))
        .and_then(|v| u32::try_from(v).ok());
    let recognised =
        terms.len() == usize::from(prefix.is_some()) + usize::from(route_table.is_some());
    if let (Some(prefix), true, [Action::Keyword { name, .. }]) = (prefix, recognised, actions)
        && is_drop(name)
    {
        return Class::Compiled(vec![IrEntry::DiscardRoute {
            datapath: dp,
            selector,
            prefix,
            priority: u16::try_from(priority).unwrap_or(u16::MAX),
            route_table,
        }]);
    }
    let decrements = actions
        .iter()
        .any(|a| matches!(a, Action::Decrement(f) if plain(f, "ip.ttl")));
    let (Some(prefix), true, true) = (prefix, recognised, decrements) else {
        return unsupported("route variant (policy routes)");
    };
    if let Some((group, members)) = ecmp_selection(actions) {
        return Class::Compiled(vec![IrEntry::EcmpRoute {
            datapath: dp,
            selector,
            prefix,
            priority: u16::try_from(priority).unwrap_or(u16::MAX),
            route_table,
            group,
            members,
        }]);
    }
    let nexthop = match assigned(actions, "reg0") {
        Some(Source::Field(field)) if plain(field, "ip4.dst") => None,
        Some(Source::Constant(Constant::Ipv4 {
            address,
            mask: None,
        })) => Some(*address),
        _ => return unsupported("route next-hop variant"),
    };
    let Some(source_ip) = assigned_ipv4(actions, "reg1") else {
        return unsupported("route source-address variant");
    };
    let (Some(source_mac), Some(port)) = (
        assigned_mac(actions, "eth.src"),
        assigned_string(actions, "outport"),
    ) else {
        return unsupported("route output variant");
    };
    Class::Compiled(vec![IrEntry::Route {
        datapath: dp,
        selector,
        prefix,
        priority: u16::try_from(priority).unwrap_or(u16::MAX),
        route_table,
        nexthop,
        source_ip,
        source_mac,
        port: port.to_string(),
    }])
}

/// `lr_in_ip_input`: what the router answers itself and what it drops.
pub(super) fn router_input(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    if ipv6_only(terms) {
        return if is_next_only(actions) {
            Class::Neutral
        } else {
            unsupported("IPv6")
        };
    }
    let drops = matches!(actions, [Action::Keyword { name, .. }] if is_drop(name));
    let drop = |rule| Class::Compiled(vec![IrEntry::RouterDrop { datapath: dp, rule }]);
    // ARP request for a router IP from its own subnet: answered with the port's MAC.
    if let (Some(port), Some(ip), Some(subnet), true) = (
        terms.iter().find_map(|t| compare_string(t, "inport")),
        terms.iter().find_map(|t| compare_ipv4(t, "arp.tpa")),
        terms.iter().find_map(|t| compare_prefix(t, "arp.spa")),
        terms
            .iter()
            .any(|t| compare_integer(t, "arp.op") == Some(1)),
    ) {
        let replies = assigned_integer(actions, "arp.op") == Some(2) && ends_with_output(actions);
        return if replies && terms.len() == 4 {
            Class::Compiled(vec![IrEntry::RouterArpReply {
                datapath: dp,
                port: port.to_string(),
                ip,
                subnet,
            }])
        } else {
            unsupported("router ARP variant")
        };
    }
    // ICMP echo to a router IP: echo reply.
    if let (Some(ip), Some(8), Some(0)) = (
        terms.iter().find_map(|t| compare_ipv4(t, "ip4.dst")),
        terms.iter().find_map(|t| compare_integer(t, "icmp4.type")),
        terms.iter().find_map(|t| compare_integer(t, "icmp4.code")),
    ) {
        let replies = assigned_integer(actions, "icmp4.type") == Some(0)
            && exchanges(actions, "ip4.dst", "ip4.src");
        return if replies && terms.len() == 3 {
            Class::Compiled(vec![IrEntry::RouterEchoReply { datapath: dp, ip }])
        } else {
            unsupported("router ICMP variant")
        };
    }
    let addresses = |values: &[Value]| values.iter().map(value_ipv4).collect::<Option<Vec<_>>>();
    let any_field = |alternatives: &[Expr], names: &[&str]| {
        alternatives
            .iter()
            .any(|a| names.iter().any(|n| is_field(a, n)))
    };
    match (terms, drops) {
        ([source, reg9], true)
            if compare_eq(reg9).is_some_and(|(f, v)| f == &bit("reg9", 0) && is_zero(v))
                && compare_eq(source).is_some_and(|(f, _)| plain(f, "ip4.src")) =>
        {
            match compare_eq(source).and_then(|(_, values)| addresses(values)) {
                Some(addresses) => drop(RouterDropRule::SpoofedSource(addresses)),
                None => unsupported("router input variant"),
            }
        }
        ([Expr::Or(alternatives)], true)
            if alternatives.iter().any(|a| mentions(a, "ip4.src_mcast")) =>
        {
            drop(RouterDropRule::Martian)
        }
        ([Expr::Or(alternatives)], true)
            if alternatives
                .iter()
                .all(|a| is_field(a, "arp") || is_field(a, "nd")) =>
        {
            drop(RouterDropRule::UnhandledNeighbourDiscovery)
        }
        ([Expr::Or(alternatives)], true) if any_field(alternatives, &["ip4.mcast"]) => {
            drop(RouterDropRule::Multicast)
        }
        ([bcast], true) if is_field(bcast, "eth.bcast") => drop(RouterDropRule::Broadcast),
        ([term], true) if compare_eq(term).is_some_and(|(f, _)| plain(f, "ip4.dst")) => {
            match compare_eq(term).and_then(|(_, values)| addresses(values)) {
                Some(addresses) => drop(RouterDropRule::ToRouter(addresses)),
                None => unsupported("router input variant"),
            }
        }
        _ if drops && terms.iter().any(|t| mentions(t, "ip.ttl")) => {
            drop(RouterDropRule::TtlExpired)
        }
        _ if priority == 31 => match (
            terms.iter().find_map(|t| compare_string(t, "inport")),
            ttl_exceeded_source(actions),
        ) {
            (Some(port), Some(source)) => Class::Compiled(vec![IrEntry::TtlExceeded {
                datapath: dp,
                port: port.to_string(),
                source,
            }]),
            // A gateway port's (northd swaps the addresses: the answer comes from the
            // packet's destination): what enters the port comes from the provider network,
            // whose way in answers it so (`ebpf/src/nat.rs`).
            (Some(_), None) if ttl_exceeded_swaps(actions) => Class::Compiled(Vec::new()),
            _ => unsupported("TTL-exceeded variant"),
        },
        _ if uses_keyword(actions, &["tcp_reset", "sctp_abort", "icmp4"]) => {
            router_reject(dp, terms, actions)
        }
        _ if uses_keyword(actions, &["handle_dhcpv6_reply"]) => unsupported("IPv6"),
        _ => unsupported("router input variant"),
    }
}

/// Traffic to a router IP that the router answers: `ip4 && ip4.dst == IP && !ip.later_frag
/// [&& tcp|udp|sctp]` → `tcp_reset {…}`, `sctp_abort {…}` or `icmp4 { … icmp4.type = 3; … }`.
fn router_reject(dp: u32, terms: &[&Expr], actions: &[Action]) -> Class {
    let Some(ip) = terms.iter().find_map(|t| compare_ipv4(t, "ip4.dst")) else {
        return unsupported("router reject variant");
    };
    let protocols: Vec<RejectProtocol> = terms
        .iter()
        .filter_map(|t| match t {
            Expr::Field(f) if plain(f, "tcp") => Some(RejectProtocol::Tcp),
            Expr::Field(f) if plain(f, "udp") => Some(RejectProtocol::Udp),
            Expr::Field(f) if plain(f, "sctp") => Some(RejectProtocol::Sctp),
            _ => None,
        })
        .collect();
    let recognised = terms.iter().all(|t| match t {
        Expr::Field(f) => {
            ["ip4", "tcp", "udp", "sctp"].contains(&f.name.as_str()) && f.slice.is_none()
        }
        Expr::Not(inner) => matches!(inner.as_ref(), Expr::Field(f) if plain(f, "ip.later_frag")),
        other => compare_ipv4(other, "ip4.dst").is_some(),
    });
    let response = match actions {
        [
            Action::Keyword {
                name,
                block: Some(_),
                ..
            },
        ] if name == "tcp_reset" => Some(RejectResponse::TcpReset),
        [
            Action::Keyword {
                name,
                block: Some(_),
                ..
            },
        ] if name == "sctp_abort" => Some(RejectResponse::SctpAbort),
        [
            Action::Keyword {
                name,
                block: Some(block),
                ..
            },
        ] if name == "icmp4" && assigned_integer(block, "icmp4.type") == Some(3) => {
            assigned_integer(block, "icmp4.code")
                .and_then(|code| u8::try_from(code).ok())
                .map(|code| RejectResponse::IcmpUnreachable { code })
        }
        _ => None,
    };
    match (protocols.as_slice(), response, recognised) {
        ([], Some(response), true) => Class::Compiled(vec![IrEntry::RouterReject {
            datapath: dp,
            ip,
            protocol: None,
            response,
        }]),
        ([protocol], Some(response), true) => Class::Compiled(vec![IrEntry::RouterReject {
            datapath: dp,
            ip,
            protocol: Some(*protocol),
            response,
        }]),
        _ => unsupported("router reject variant"),
    }
}

/// `icmp4 { …; ip4.src = S; …; output; }` → S.
fn ttl_exceeded_source(actions: &[Action]) -> Option<Ipv4Addr> {
    match assigned(time_exceeded(actions)?, "ip4.src")? {
        Source::Constant(Constant::Ipv4 {
            address,
            mask: None,
        }) => Some(*address),
        _ => None,
    }
}

/// The block of an ICMP time exceeded (`icmp4 { …; icmp4.type = 11; … }`), if `actions` are one.
fn time_exceeded(actions: &[Action]) -> Option<&[Action]> {
    let [
        Action::Keyword {
            name,
            block: Some(block),
            ..
        },
    ] = actions
    else {
        return None;
    };
    (name == "icmp4" && assigned_integer(block, "icmp4.type") == Some(11)).then_some(block)
}

/// Whether `actions` are an ICMP time exceeded with the packet's addresses swapped
/// (`icmp4 { …; icmp4.type = 11; …; ip4.dst <-> ip4.src; … }`).
fn ttl_exceeded_swaps(actions: &[Action]) -> bool {
    time_exceeded(actions).is_some_and(|block| {
        block.iter().any(|action| {
            matches!(action, Action::Exchange { left, right }
                if (plain(left, "ip4.dst") && plain(right, "ip4.src"))
                    || (plain(left, "ip4.src") && plain(right, "ip4.dst")))
        })
    })
}

/// One action of the neighbour lookup/learning stages, by what it does to forwarding.
enum LearningEffect {
    /// Sets a learning register bit (reg9[2] "already known", reg9[3] "may learn") to a constant.
    Flag,
    /// Looks a sender up in MAC_Binding into a learning register bit (`lookup_arp`,
    /// `lookup_arp_ip`, `lookup_nd`, `lookup_nd_ip`): only the learning stage reads the result.
    /// `nd`: of IPv6 neighbour discovery.
    Lookup { nd: bool },
    /// Writes MAC_Binding (`put_arp`, `put_nd`).
    Learn { nd: bool },
}

fn learning_effect(action: &Action) -> Option<LearningEffect> {
    match action {
        Action::Assign {
            destination,
            source,
        } if *destination == bit("reg9", 2) || *destination == bit("reg9", 3) => match source {
            Source::Constant(Constant::Integer {
                value: 0 | 1,
                mask: None,
                ..
            }) => Some(LearningEffect::Flag),
            Source::Call { name, .. } => match name.as_str() {
                "lookup_arp" | "lookup_arp_ip" => Some(LearningEffect::Lookup { nd: false }),
                "lookup_nd" | "lookup_nd_ip" => Some(LearningEffect::Lookup { nd: true }),
                _ => None,
            },
            _ => None,
        },
        Action::Keyword {
            name,
            arguments: Some(_),
            block: None,
        } => match name.as_str() {
            "put_arp" => Some(LearningEffect::Learn { nd: false }),
            "put_nd" => Some(LearningEffect::Learn { nd: true }),
            _ => None,
        },
        _ => None,
    }
}

/// `lr_in_lookup_neighbor` and `lr_in_learn_neighbor`, in every variant northd writes
/// (`always_learn_from_arp_request` true or false, IPv4 and IPv6). Their actions only set the
/// learning bits reg9[2]/reg9[3], which nothing but the learning stage reads, and write
/// MAC_Binding; every path ends in `next;` (the learning stage's default drop is unreachable:
/// reg9[2] is 0 only after a lookup on ARP/ND, which a priority-90 `put_*` flow takes). So
/// forwarding is compiled (`NeighbourLearning`: on to the next stage). The learning itself is
/// done for ARP: the kernel reports the senders a router does not know and the daemon writes
/// their MAC_Binding as pinctrl's `put_arp` does (`daemon/mac_learning.rs`); for ND it is a
/// side duty not done ([`MAC_LEARNING_NOT_DONE`]). Any other action is unsupported.
pub(super) fn neighbour_learning(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    let forwarding = IrEntry::NeighbourLearning {
        datapath: dp,
        port: terms
            .iter()
            .find_map(|t| compare_string(t, "inport"))
            .map(str::to_string),
        subnet: terms.iter().find_map(|t| compare_prefix(t, "arp.spa")),
    };
    match actions.split_last() {
        // Unreachable default of the learning stage (see above).
        Some((Action::Keyword { name, .. }, []))
            if is_drop(name) && matches!(terms, [Expr::Bool(true)]) =>
        {
            Class::Compiled(vec![forwarding])
        }
        Some((last, effects)) if is_next(last) => {
            let Some(effects) = effects
                .iter()
                .map(learning_effect)
                .collect::<Option<Vec<_>>>()
            else {
                return unsupported("neighbour learning variant");
            };
            let nd = effects.iter().any(|effect| {
                matches!(
                    effect,
                    LearningEffect::Lookup { nd: true } | LearningEffect::Learn { nd: true }
                )
            });
            if nd {
                Class::SideDuty {
                    entries: vec![forwarding],
                    duty: MAC_LEARNING_NOT_DONE.to_string(),
                }
            } else {
                Class::Compiled(vec![forwarding])
            }
        }
        _ => unsupported("neighbour learning variant"),
    }
}

/// `lr_in_arp_resolve`: next-hop MACs.
pub(super) fn neighbour(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    match (terms, actions) {
        ([first, second], _) if let Some(mac) = sets_mac_then_next(actions, &field("eth.dst")) => {
            match (
                compare_string(first, "outport"),
                compare_ipv4(second, "reg0"),
            ) {
                (Some(port), Some(ip)) => Class::Compiled(vec![IrEntry::Neighbour {
                    datapath: dp,
                    port: port.to_string(),
                    ip,
                    mac,
                }]),
                _ => unsupported("neighbour variant (IPv6 or gateway)"),
            }
        }
        (
            [Expr::Field(field)],
            [
                Action::Keyword {
                    name,
                    arguments: Some(_),
                    ..
                },
                next,
            ],
        ) if plain(field, "ip4") && name == "get_arp" && is_next(next) => {
            Class::Compiled(vec![IrEntry::NeighbourLookup { datapath: dp }])
        }
        ([Expr::Or(_)], [next]) if is_next(next) => Class::Neutral,
        ([Expr::Bool(true)], _) if is_drop_only(actions) => {
            Class::Compiled(vec![IrEntry::RouterDrop {
                datapath: dp,
                rule: RouterDropRule::Unresolvable,
            }])
        }
        _ if terms.iter().any(|t| mentions_ipv6(t)) => unsupported("IPv6 neighbour discovery"),
        _ => unsupported("neighbour variant (gateway port)"),
    }
}
