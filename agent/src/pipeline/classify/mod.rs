//! Classifies one logical flow, keyed by its stage name and parsed content (never by table
//! numbers or priorities alone), into IR entries (compiled), nothing (neutral: it does not change
//! forwarding, e.g. a priority-0 `next;`), or unsupported with a reason. A flow whose shape is not
//! recognised is unsupported, never guessed at.

mod ipv6;
pub(super) mod matching;

use std::net::Ipv4Addr;

use super::ir::{IrEntry, Mac, PolicyVerdict, RejectProtocol, RejectResponse, RouterDropRule};
use crate::lflow::{
    ast::{Action, Expr, FieldRef, Relation, Source},
    lexer::Constant,
};
use matching::*;

/// The verdict on one flow for one datapath.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Class {
    Compiled(Vec<IrEntry>),
    /// Forwarding is compiled as `entries`, but the flow also has a duty beside forwarding that
    /// the datapath does not perform (e.g. learning a MAC_Binding). Unlike `Unsupported`, this
    /// does not stop the datapath from forwarding: it is only reported.
    SideDuty {
        entries: Vec<IrEntry>,
        duty: String,
    },
    Neutral,
    /// The flow cannot be forwarded correctly: the datapath must not forward as if it did not
    /// exist.
    Unsupported(String),
}

/// The parsed flow being classified.
pub struct Flow<'a> {
    pub datapath: u32,
    pub stage: &'a str,
    pub priority: i64,
    pub match_: &'a Expr,
    pub actions: &'a [Action],
}

fn unsupported(reason: impl Into<String>) -> Class {
    Class::Unsupported(reason.into())
}

/// Classifies `flow`.
#[must_use]
pub fn classify(flow: &Flow<'_>) -> Class {
    if is_next_only(flow.actions) && matches!(flow.match_, Expr::Bool(true)) {
        return Class::Neutral;
    }
    let dp = flow.datapath;
    let terms = conjuncts(flow.match_);
    if ipv6_only(&terms)
        && let Some(class) = ipv6::classify(dp, flow.stage, flow.priority, &terms, flow.actions)
    {
        return class;
    }
    match flow.stage {
        "ls_in_check_port_sec" => match (terms.as_slice(), flow.actions) {
            ([Expr::Field(f)], [Action::Keyword { name, .. }])
                if is_drop(name) && (plain(f, "vlan.present") || f == &bit("eth.src", 40)) =>
            {
                Class::Compiled(vec![IrEntry::IngressSanity { datapath: dp }])
            }
            ([Expr::Bool(true)], [assign, next])
                if calls(assign, "check_in_port_sec") && is_next(next) =>
            {
                Class::Compiled(vec![IrEntry::PortSecurity {
                    datapath: dp,
                    egress: false,
                }])
            }
            _ => unsupported("port security variant"),
        },
        "ls_in_apply_port_sec" | "ls_out_apply_port_sec" => {
            let egress = flow.stage.starts_with("ls_out");
            match (terms.as_slice(), flow.actions) {
                (
                    [
                        Expr::Compare {
                            field,
                            relation: Relation::Eq,
                            values,
                            ..
                        },
                    ],
                    [Action::Keyword { name, .. }],
                ) if field == &bit("reg0", 15) && is_one(values) && is_drop(name) => {
                    Class::Compiled(vec![IrEntry::PortSecurity {
                        datapath: dp,
                        egress,
                    }])
                }
                (
                    [Expr::Bool(true)],
                    [
                        Action::Keyword {
                            name,
                            arguments: None,
                            block: None,
                        },
                    ],
                ) if egress && name == "output" => Class::Compiled(vec![IrEntry::Deliver {
                    datapath: dp,
                    egress: true,
                }]),
                _ => unsupported("port security variant"),
            }
        }
        "ls_out_check_port_sec" => match (terms.as_slice(), flow.actions) {
            // Multicast is exempt from egress port security.
            ([Expr::Field(field)], actions)
                if plain(field, "eth.mcast") && zeroes_then_next(actions, &bit("reg0", 15)) =>
            {
                Class::Compiled(vec![IrEntry::PortSecurity {
                    datapath: dp,
                    egress: true,
                }])
            }
            ([Expr::Bool(true)], [assign, next])
                if calls(assign, "check_out_port_sec") && is_next(next) =>
            {
                Class::Compiled(vec![IrEntry::PortSecurity {
                    datapath: dp,
                    egress: true,
                }])
            }
            _ => unsupported("port security variant"),
        },
        "ls_in_arp_rsp" => classify_arp_responder(dp, &terms, flow.actions),
        "ls_in_l2_lkup" => classify_l2_lookup(dp, flow.priority, &terms, flow.actions),
        "ls_in_l2_unknown" => match (terms.as_slice(), flow.actions) {
            (
                [
                    Expr::Compare {
                        field,
                        relation: Relation::Eq,
                        values,
                        ..
                    },
                ],
                [Action::Keyword { name, .. }],
            ) if plain(field, "outport")
                && string_value(values) == Some("none")
                && is_drop(name) =>
            {
                Class::Compiled(vec![IrEntry::DropUnknownDestination { datapath: dp }])
            }
            // The switch has ports with "unknown" addresses (localnet, or LSPs that accept any
            // MAC): frames nobody claims are flooded to them.
            (
                [
                    Expr::Compare {
                        field,
                        relation: Relation::Eq,
                        values,
                        ..
                    },
                ],
                actions @ [_, _],
            ) if plain(field, "outport") && string_value(values) == Some("none") => {
                match output_to(actions) {
                    Some(group) => Class::Compiled(vec![IrEntry::FloodUnknown {
                        datapath: dp,
                        group: group.to_string(),
                    }]),
                    None => unsupported("unknown-destination variant"),
                }
            }
            (
                [Expr::Bool(true)],
                [
                    Action::Keyword {
                        name,
                        arguments: None,
                        block: None,
                    },
                ],
            ) if name == "output" => Class::Compiled(vec![IrEntry::Deliver {
                datapath: dp,
                egress: false,
            }]),
            _ => unsupported("unknown-destination flooding (ports with \"unknown\" addresses)"),
        },
        "lr_in_admission" => classify_admission(dp, &terms, flow.actions),
        "lr_in_ip_routing" => classify_route(dp, flow.priority, &terms, flow.actions),
        "lr_in_arp_resolve" => classify_neighbour(dp, &terms, flow.actions),
        "lr_in_ip_input" => classify_router_input(dp, flow.priority, &terms, flow.actions),
        "lr_in_lookup_neighbor" | "lr_in_learn_neighbor" => {
            classify_neighbour_learning(dp, &terms, flow.actions)
        }
        "lr_in_ip_routing_pre" => match (terms.as_slice(), flow.actions) {
            // Everything uses route table 0 unless route tables are configured.
            ([Expr::Bool(true)], actions)
                if zeroes_then_next(
                    actions,
                    &FieldRef {
                        name: "reg7".into(),
                        slice: None,
                    },
                ) =>
            {
                Class::Neutral
            }
            _ => unsupported("route tables"),
        },
        "lr_in_policy" => match (terms.as_slice(), flow.actions) {
            ([Expr::Bool(true)], actions) if zeroes_then_next(actions, &slice("reg8", 0, 15)) => {
                Class::Neutral
            }
            _ => classify_policy(dp, flow.priority, &terms, flow.actions),
        },
        "lr_in_arp_request" => match (terms.as_slice(), flow.actions) {
            (
                [Expr::Bool(true)],
                [
                    Action::Keyword {
                        name,
                        arguments: None,
                        block: None,
                    },
                ],
            ) if name == "output" => Class::Compiled(vec![IrEntry::Deliver {
                datapath: dp,
                egress: false,
            }]),
            (
                [dst, Expr::Field(ip4)],
                [
                    Action::Keyword {
                        name,
                        block: Some(_),
                        ..
                    },
                ],
            ) if compare_mac(dst, "eth.dst") == Some([0; 6])
                && plain(ip4, "ip4")
                && name == "arp" =>
            {
                Class::Compiled(vec![IrEntry::ArpRequestForNextHop { datapath: dp }])
            }
            _ => unsupported("IPv6 neighbour discovery"),
        },
        "lr_out_delivery"
            if matches!(terms.as_slice(), [Expr::Bool(true)])
                && matches!(flow.actions, [Action::Keyword { name, .. }] if is_drop(name)) =>
        {
            Class::Compiled(vec![IrEntry::EgressDefaultDrop { datapath: dp }])
        }
        "lr_out_delivery" => match (terms.as_slice(), flow.actions) {
            (
                [
                    Expr::Compare {
                        field,
                        relation: Relation::Eq,
                        values,
                        ..
                    },
                ],
                [
                    Action::Keyword {
                        name,
                        arguments: None,
                        block: None,
                    },
                ],
            ) if plain(field, "outport") && name == "output" => match string_value(values) {
                Some(port) => Class::Compiled(vec![IrEntry::RouterDelivery {
                    datapath: dp,
                    port: port.to_string(),
                }]),
                None => unsupported("delivery to a non-literal port"),
            },
            _ => unsupported("router delivery variant"),
        },
        stage if stage.ends_with("_ecmp") => match (terms.as_slice(), flow.actions) {
            // Without ECMP routes the group id is always 0 and the default drop is unreachable.
            (
                [
                    Expr::Compare {
                        field,
                        relation: Relation::Eq,
                        values,
                        ..
                    },
                ],
                [next],
            ) if field == &slice("reg8", 0, 15) && is_zero(values) && is_next(next) => {
                Class::Neutral
            }
            ([Expr::Bool(true)], [Action::Keyword { name, .. }]) if is_drop(name) => Class::Neutral,
            _ => unsupported("ECMP routes"),
        },
        "lr_out_chk_dnat_local"
            if matches!(terms.as_slice(), [Expr::Bool(true)])
                && zeroes_then_next(flow.actions, &bit("reg9", 4)) =>
        {
            Class::Neutral
        }
        stage => match stateful_feature(stage) {
            Some(feature) => unsupported(format!("{feature} is not in the datapath yet")),
            None => unsupported(format!("stage {stage} is not compiled yet")),
        },
    }
}

/// Whether `stage` is one of the ACL stages (where NetworkPolicies and subnet ACLs land).
#[must_use]
pub fn is_acl_stage(stage: &str) -> bool {
    stateful_feature(stage) == Some("ACL")
}

/// The stateful feature a stage implements, for the unsupported reason.
fn stateful_feature(stage: &str) -> Option<&'static str> {
    let words: Vec<&str> = stage.split('_').collect();
    let has = |word: &str| words.contains(&word);
    Some(if has("acl") {
        "ACL"
    } else if has("lb") || has("aff") || has("hairpin") {
        "load balancing"
    } else if has("dnat") || has("snat") || has("unsnat") || has("undnat") {
        "NAT"
    } else if has("stateful") || has("defrag") || has("ct") {
        "conntrack"
    } else if has("qos") {
        "QoS"
    } else {
        return None;
    })
}

fn classify_arp_responder(dp: u32, terms: &[&Expr], actions: &[Action]) -> Class {
    let tpa = terms.iter().find_map(|t| compare_ipv4(t, "arp.tpa"));
    let is_request = terms
        .iter()
        .any(|t| compare_integer(t, "arp.op") == Some(1));
    let inport = terms.iter().find_map(|t| compare_string(t, "inport"));
    match (tpa, is_request, inport, terms.len(), actions) {
        (Some(ip), true, Some(port), 3, [next]) if is_next(next) => {
            Class::Compiled(vec![IrEntry::ArpReplySkip {
                datapath: dp,
                ip,
                inport: port.to_string(),
            }])
        }
        (Some(ip), true, None, 2, _) => match arp_reply_mac(actions) {
            Some(mac) => Class::Compiled(vec![IrEntry::ArpReply {
                datapath: dp,
                ip,
                mac,
            }]),
            None => unsupported("ARP reply with an unrecognised action"),
        },
        (None, false, Some(port), 1, [next]) if is_next(next) => {
            Class::Compiled(vec![IrEntry::ArpReplySkipPort {
                datapath: dp,
                inport: port.to_string(),
            }])
        }
        _ if terms
            .iter()
            .any(|t| mentions(t, "nd_ns") || mentions(t, "nd.target")) =>
        {
            unsupported("IPv6 neighbour discovery")
        }
        _ => unsupported("ARP responder variant"),
    }
}

/// The MAC an ARP-reply action list answers with (`eth.src = MAC; … arp.sha = MAC; … output;`).
fn arp_reply_mac(actions: &[Action]) -> Option<Mac> {
    let mac = assigned_mac(actions, "eth.src")?;
    let shape = assigned_mac(actions, "arp.sha") == Some(mac)
        && assigned_integer(actions, "arp.op") == Some(2)
        && ends_with_output(actions);
    shape.then_some(mac)
}

fn classify_l2_lookup(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    let output_port = output_to(actions);
    match (terms, output_port) {
        (
            [
                Expr::Compare {
                    field,
                    relation: Relation::Eq,
                    values,
                    set: false,
                },
            ],
            Some(port),
        ) if plain(field, "eth.dst") => match single_mac(values) {
            Some(mac) => Class::Compiled(vec![IrEntry::L2Fib {
                datapath: dp,
                mac,
                port: port.to_string(),
            }]),
            None => unsupported("L2 lookup on a non-MAC destination"),
        },
        ([Expr::Field(field)], Some(group)) if plain(field, "eth.mcast") => {
            Class::Compiled(vec![IrEntry::FloodMulticast {
                datapath: dp,
                group: group.to_string(),
            }])
        }
        (
            [
                Expr::Compare {
                    field,
                    relation: Relation::Eq,
                    values,
                    ..
                },
                Expr::Or(_),
            ],
            Some(group),
        ) if plain(field, "eth.src") => {
            let macs: Option<Vec<Mac>> = values.iter().map(value_mac).collect();
            match macs {
                Some(router_macs) => Class::Compiled(vec![IrEntry::RouterOriginatedFlood {
                    datapath: dp,
                    router_macs,
                    group: group.to_string(),
                }]),
                None => unsupported("router-originated flood variant"),
            }
        }
        ([Expr::Bool(true)], None)
            if matches!(actions, [Action::Assign { destination, source: Source::Call { name, .. } }, next]
            if plain(destination, "outport") && name == "get_fdb" && is_next(next)) =>
        {
            Class::Compiled(vec![IrEntry::UnknownUnicast { datapath: dp }])
        }
        _ if priority == 80 => {
            let ip = terms.iter().find_map(|t| compare_ipv4(t, "arp.tpa"));
            match (ip, actions) {
                (
                    Some(ip),
                    [
                        Action::Keyword {
                            name,
                            block: Some(block),
                            ..
                        },
                        ..,
                    ],
                ) if name == "clone" => match (output_to(block), output_to(actions)) {
                    (Some(router_port), Some(group)) => {
                        Class::Compiled(vec![IrEntry::ArpForRouterIp {
                            datapath: dp,
                            ip,
                            router_port: router_port.to_string(),
                            group: Some(group.to_string()),
                        }])
                    }
                    _ => unsupported("ARP-for-router variant"),
                },
                // A switch whose only other member is the router: no L2 flood needed.
                (Some(ip), [_, _]) if output_to(actions).is_some() => {
                    Class::Compiled(vec![IrEntry::ArpForRouterIp {
                        datapath: dp,
                        ip,
                        router_port: output_to(actions).unwrap_or_default().to_string(),
                        group: None,
                    }])
                }
                _ if terms.iter().any(|t| mentions(t, "nd_ns")) => {
                    unsupported("IPv6 neighbour discovery")
                }
                _ => unsupported("L2 lookup variant"),
            }
        }
        _ if actions
            .iter()
            .any(|a| matches!(a, Action::Keyword { name, .. } if name == "handle_svc_check")) =>
        {
            Class::Compiled(vec![IrEntry::Punt {
                datapath: dp,
                reason: "service monitor (load balancer health checks)".into(),
            }])
        }
        _ => unsupported("L2 lookup variant"),
    }
}

fn classify_admission(dp: u32, terms: &[&Expr], actions: &[Action]) -> Class {
    match (terms, actions) {
        ([Expr::Or(alternatives)], [Action::Keyword { name, .. }]) if is_drop(name)
            && alternatives.iter().all(|a| matches!(a, Expr::Field(f) if plain(f, "vlan.present") || f == &bit("eth.src", 40))) =>
        {
            Class::Compiled(vec![IrEntry::IngressSanity { datapath: dp }])
        }
        ([Expr::Bool(true)], [Action::Keyword { name, .. }]) if is_drop(name) => {
            Class::Compiled(vec![IrEntry::RouterAdmissionDrop { datapath: dp }])
        }
        ([first, second], [Action::Assign { destination, source: Source::Constant(Constant::Mac { address, mask: None }) }, next])
            if destination == &slice("xreg0", 0, 47) && is_next(next) =>
        {
            let Some(port) = compare_string(second, "inport") else { return unsupported("admission variant") };
            let multicast = matches!(first, Expr::Field(f) if plain(f, "eth.mcast"));
            let unicast = compare_mac(first, "eth.dst") == Some(*address);
            if multicast || unicast {
                Class::Compiled(vec![IrEntry::RouterPort { datapath: dp, port: port.to_string(), mac: *address, multicast }])
            } else {
                unsupported("admission variant")
            }
        }
        _ => unsupported("admission variant (gateway or chassis-resident port)"),
    }
}

fn classify_route(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
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
    let prefix = terms.iter().find_map(|t| compare_prefix(t, "ip4.dst"));
    let route_table = terms
        .iter()
        .find_map(|t| compare_integer(t, "reg7"))
        .and_then(|v| u32::try_from(v).ok());
    let recognised =
        terms.len() == usize::from(prefix.is_some()) + usize::from(route_table.is_some());
    let decrements = actions
        .iter()
        .any(|a| matches!(a, Action::Decrement(f) if plain(f, "ip.ttl")));
    let (Some(prefix), true, true) = (prefix, recognised, decrements) else {
        return unsupported("route variant (ECMP, source-based or policy routes)");
    };
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
        prefix,
        priority: u16::try_from(priority).unwrap_or(u16::MAX),
        route_table,
        nexthop,
        source_ip,
        source_mac,
        port: port.to_string(),
    }])
}

/// `lr_in_policy`: policies matching on IPv4 source and/or destination prefixes that allow,
/// drop or reroute (ECMP reroutes and other matches stay unsupported).
fn classify_policy(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    let source = terms.iter().find_map(|t| compare_prefix(t, "ip4.src"));
    let destination = terms.iter().find_map(|t| compare_prefix(t, "ip4.dst"));
    let ip4_only = terms.iter().filter(|t| is_predicate(t, "ip4")).count();
    let recognised = terms.len()
        == usize::from(source.is_some()) + usize::from(destination.is_some()) + ip4_only;
    if !recognised || (source.is_none() && destination.is_none()) {
        return unsupported("router policy match (only IPv4 prefixes are compiled)");
    }
    // A reroute ends by clearing the ECMP group id (reg8[0..15]) before `next;`.
    let resets_ecmp = |actions: &[Action]| {
        actions.iter().any(|a| {
            matches!(a, Action::Assign { destination, .. } if destination == &slice("reg8", 0, 15))
        })
    };
    let verdict = match actions {
        [Action::Keyword { name, .. }] if is_drop(name) => PolicyVerdict::Drop,
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
        _ => return unsupported("router policy action (ECMP reroute)"),
    };
    Class::Compiled(vec![IrEntry::RouterPolicy {
        datapath: dp,
        priority: u16::try_from(priority).unwrap_or(u16::MAX),
        source,
        destination,
        verdict,
    }])
}

fn classify_router_input(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
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
            && actions.iter().any(|a| matches!(a, Action::Exchange { left, right } if plain(left, "ip4.dst") && plain(right, "ip4.src")));
        return if replies && terms.len() == 3 {
            Class::Compiled(vec![IrEntry::RouterEchoReply { datapath: dp, ip }])
        } else {
            unsupported("router ICMP variant")
        };
    }
    match (terms, drops) {
        ([Expr::Compare { field, relation: Relation::Eq, values, .. }, Expr::Compare { field: reg9, values: zero, .. }], true)
            if plain(field, "ip4.src") && reg9 == &bit("reg9", 0) && is_zero(zero) =>
        {
            match values.iter().map(value_ipv4).collect::<Option<Vec<_>>>() {
                Some(addresses) => drop(RouterDropRule::SpoofedSource(addresses)),
                None => unsupported("router input variant"),
            }
        }
        ([Expr::Or(alternatives)], true) if alternatives.iter().any(|a| mentions(a, "ip4.src_mcast")) => drop(RouterDropRule::Martian),
        ([Expr::Or(alternatives)], true)
            if alternatives.iter().all(|a| matches!(a, Expr::Field(f) if plain(f, "arp") || plain(f, "nd"))) =>
        {
            drop(RouterDropRule::UnhandledNeighbourDiscovery)
        }
        ([Expr::Or(alternatives)], true) if alternatives.iter().any(|a| matches!(a, Expr::Field(f) if plain(f, "ip4.mcast"))) => {
            drop(RouterDropRule::Multicast)
        }
        ([Expr::Field(field)], true) if plain(field, "eth.bcast") => drop(RouterDropRule::Broadcast),
        ([Expr::Compare { field, relation: Relation::Eq, values, .. }], true) if plain(field, "ip4.dst") => {
            match values.iter().map(value_ipv4).collect::<Option<Vec<_>>>() {
                Some(addresses) => drop(RouterDropRule::ToRouter(addresses)),
                None => unsupported("router input variant"),
            }
        }
        _ if drops && terms.iter().any(|t| mentions(t, "ip.ttl")) => drop(RouterDropRule::TtlExpired),
        _ if priority == 31 => match (
            terms.iter().find_map(|t| compare_string(t, "inport")),
            ttl_exceeded_source(actions),
        ) {
            (Some(port), Some(source)) => Class::Compiled(vec![IrEntry::TtlExceeded { datapath: dp, port: port.to_string(), source }]),
            _ => unsupported("TTL-exceeded variant"),
        },
        _ if actions.iter().any(|a| matches!(a, Action::Keyword { name, .. } if ["tcp_reset", "sctp_abort", "icmp4"].contains(&name.as_str()))) => {
            classify_router_reject(dp, terms, actions)
        }
        _ if actions.iter().any(|a| matches!(a, Action::Keyword { name, .. } if name == "handle_dhcpv6_reply")) => unsupported("IPv6"),
        _ => unsupported("router input variant"),
    }
}

/// Traffic to a router IP that the router answers: `ip4 && ip4.dst == IP && !ip.later_frag
/// [&& tcp|udp|sctp]` → `tcp_reset {…}`, `sctp_abort {…}` or `icmp4 { … icmp4.type = 3; … }`.
fn classify_router_reject(dp: u32, terms: &[&Expr], actions: &[Action]) -> Class {
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
    if name != "icmp4" || assigned_integer(block, "icmp4.type") != Some(11) {
        return None;
    }
    match assigned(block, "ip4.src")? {
        Source::Constant(Constant::Ipv4 {
            address,
            mask: None,
        }) => Some(*address),
        _ => None,
    }
}

/// What the datapath leaves undone of the neighbour stages: ovn-controller (pinctrl) writes
/// MAC_Binding rows from ARP and ND (`put_arp`, `put_nd`); ovnbpf does not learn yet.
pub const MAC_LEARNING_NOT_DONE: &str =
    "MAC learning (MAC_Binding from ARP/ND senders) is not done by the datapath";

/// One action of the neighbour lookup/learning stages, by what it does to forwarding.
enum LearningEffect {
    /// Sets a learning register bit (reg9[2] "already known", reg9[3] "may learn") to a constant.
    Flag,
    /// Looks a sender up in MAC_Binding into a learning register bit (`lookup_arp`,
    /// `lookup_arp_ip`, `lookup_nd`, `lookup_nd_ip`): only the learning stage reads the result.
    Lookup,
    /// Writes MAC_Binding (`put_arp`, `put_nd`).
    Learn,
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
            Source::Call { name, .. }
                if matches!(
                    name.as_str(),
                    "lookup_arp" | "lookup_arp_ip" | "lookup_nd" | "lookup_nd_ip"
                ) =>
            {
                Some(LearningEffect::Lookup)
            }
            _ => None,
        },
        Action::Keyword {
            name,
            arguments: Some(_),
            block: None,
        } if name == "put_arp" || name == "put_nd" => Some(LearningEffect::Learn),
        _ => None,
    }
}

/// `lr_in_lookup_neighbor` and `lr_in_learn_neighbor`, in every variant northd writes
/// (`always_learn_from_arp_request` true or false, IPv4 and IPv6). Their actions only set the
/// learning bits reg9[2]/reg9[3], which nothing but the learning stage reads, and write
/// MAC_Binding; every path ends in `next;` (the learning stage's default drop is unreachable:
/// reg9[2] is 0 only after a lookup on ARP/ND, which a priority-90 `put_*` flow takes). So
/// forwarding is compiled (`NeighbourLearning`: on to the next stage) and the learning itself is
/// a side duty ([`MAC_LEARNING_NOT_DONE`]). Any other action is unsupported.
fn classify_neighbour_learning(dp: u32, terms: &[&Expr], actions: &[Action]) -> Class {
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
            if effects.iter().all(|e| matches!(e, LearningEffect::Flag)) {
                Class::Compiled(vec![forwarding])
            } else {
                Class::SideDuty {
                    entries: vec![forwarding],
                    duty: MAC_LEARNING_NOT_DONE.to_string(),
                }
            }
        }
        _ => unsupported("neighbour learning variant"),
    }
}

fn classify_neighbour(dp: u32, terms: &[&Expr], actions: &[Action]) -> Class {
    match (terms, actions) {
        (
            [first, second],
            [
                Action::Assign {
                    destination,
                    source:
                        Source::Constant(Constant::Mac {
                            address,
                            mask: None,
                        }),
                },
                next,
            ],
        ) if plain(destination, "eth.dst") && is_next(next) => {
            match (
                compare_string(first, "outport"),
                compare_ipv4(second, "reg0"),
            ) {
                (Some(port), Some(ip)) => Class::Compiled(vec![IrEntry::Neighbour {
                    datapath: dp,
                    port: port.to_string(),
                    ip,
                    mac: *address,
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
        ([Expr::Bool(true)], [Action::Keyword { name, .. }]) if is_drop(name) => {
            Class::Compiled(vec![IrEntry::RouterDrop {
                datapath: dp,
                rule: RouterDropRule::Unresolvable,
            }])
        }
        _ if terms.iter().any(|t| mentions_ipv6(t)) => unsupported("IPv6 neighbour discovery"),
        _ => unsupported("neighbour variant (gateway port)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lflow::{parse_actions, parse_match};

    fn class(stage: &str, priority: i64, match_: &str, actions: &str) -> Class {
        let match_ = parse_match(match_).unwrap();
        let actions = parse_actions(actions).unwrap();
        classify(&Flow {
            datapath: 7,
            stage,
            priority,
            match_: &match_,
            actions: &actions,
        })
    }

    #[test]
    fn switch_flows_from_northd_compile() {
        assert_eq!(
            class(
                "ls_in_l2_lkup",
                50,
                "eth.dst == 00:00:00:00:00:01",
                r#"outport = "pod-a1.ns1"; output;"#
            ),
            Class::Compiled(vec![IrEntry::L2Fib {
                datapath: 7,
                mac: [0, 0, 0, 0, 0, 1],
                port: "pod-a1.ns1".into()
            }])
        );
        assert!(matches!(
            class("ls_in_l2_lkup", 75, "eth.src == {0a:58:0a:00:01:01} && (arp.op == 1 || rarp.op == 3 || nd_ns)", r#"outport = "_MC_flood_l2"; output;"#),
            Class::Compiled(entries) if matches!(entries[0], IrEntry::RouterOriginatedFlood { .. })
        ));
        assert!(matches!(
            class("ls_in_l2_lkup", 80, "flags[1] == 0 && arp.op == 1 && arp.tpa == 10.0.1.1", r#"clone {outport = "subnet-a-vpc-a"; output; }; outport = "_MC_flood_l2"; output;"#),
            Class::Compiled(entries) if matches!(&entries[0], IrEntry::ArpForRouterIp { router_port, .. } if router_port == "subnet-a-vpc-a")
        ));
        assert_eq!(
            class(
                "ls_in_arp_rsp",
                50,
                "arp.tpa == 10.0.1.2 && arp.op == 1",
                "eth.dst = eth.src; eth.src = 00:00:00:00:00:01; arp.op = 2; /* ARP reply */ arp.tha = arp.sha; arp.sha = 00:00:00:00:00:01; arp.tpa = arp.spa; arp.spa = 10.0.1.2; outport = inport; flags.loopback = 1; output;"
            ),
            Class::Compiled(vec![IrEntry::ArpReply {
                datapath: 7,
                ip: Ipv4Addr::new(10, 0, 1, 2),
                mac: [0, 0, 0, 0, 0, 1]
            }])
        );
        assert_eq!(class("ls_in_pre_acl", 0, "1", "next;"), Class::Neutral);
        assert!(
            matches!(class("ls_in_acl", 1000, "ip4", "ct_commit { ct_mark.blocked = 0; }; next;"), Class::Unsupported(r) if r.contains("ACL"))
        );
        assert!(matches!(
            class("ls_in_l2_lkup", 110, "eth.dst == $svc_monitor_mac && (tcp || icmp || icmp6)", "handle_svc_check(inport);"),
            Class::Compiled(entries) if matches!(&entries[0], IrEntry::Punt { reason, .. } if reason.contains("service monitor"))
        ));
    }

    #[test]
    fn peer_router_link_local_neighbours_compile() {
        // On a peering link the next hop is the peer router port's link-local address, held in
        // xxreg0 (no ip6.* field in the match).
        assert_eq!(
            class(
                "lr_in_arp_resolve",
                100,
                r#"outport == "vpc-a-vpc-c" && xxreg0 == fe80::858:d6ff:fe22:2a24"#,
                "eth.dst = 0a:58:d6:22:2a:24; next;"
            ),
            Class::Compiled(vec![IrEntry::Neighbour6 {
                datapath: 7,
                port: "vpc-a-vpc-c".into(),
                ip: "fe80::858:d6ff:fe22:2a24".parse().unwrap(),
                mac: [0x0a, 0x58, 0xd6, 0x22, 0x2a, 0x24],
            }])
        );
    }

    #[test]
    fn router_flows_from_northd_compile() {
        assert!(matches!(
            class("lr_in_ip_routing", 73, "reg7 == 0 && ip4.dst == 10.1.1.0/24", r#"ip.ttl--; reg8[0..15] = 0; reg0 = 10.0.255.2; reg1 = 10.0.255.1; eth.src = 0a:58:0a:00:ff:01; outport = "vpc-a-vpc-b"; flags.loopback = 1; next;"#),
            Class::Compiled(entries) if matches!(&entries[0], IrEntry::Route { nexthop: Some(_), route_table: Some(0), priority: 73, .. })
        ));
        assert!(matches!(
            class("lr_in_ip_input", 90, r#"inport == "vpc-a-subnet-a" && arp.op == 1 && arp.tpa == 10.0.1.1 && arp.spa == 10.0.1.0/24"#, "eth.dst = eth.src; eth.src = xreg0[0..47]; arp.op = 2; /* ARP reply */ arp.tha = arp.sha; arp.sha = xreg0[0..47]; arp.tpa <-> arp.spa; outport = inport; flags.loopback = 1; output;"),
            Class::Compiled(entries) if matches!(entries[0], IrEntry::RouterArpReply { .. })
        ));
        assert_eq!(
            class(
                "lr_in_ip_input",
                90,
                "ip4.dst == 10.0.1.1 && icmp4.type == 8 && icmp4.code == 0",
                "ip4.dst <-> ip4.src; ip.ttl = 255; icmp4.type = 0; flags.loopback = 1; next; "
            ),
            Class::Compiled(vec![IrEntry::RouterEchoReply {
                datapath: 7,
                ip: Ipv4Addr::new(10, 0, 1, 1)
            }])
        );
        assert!(matches!(
            class("lr_in_ip_input", 31, r#"inport == "vpc-a-subnet-a" && ip4 && ip.ttl == {0, 1} && !ip.later_frag"#, r#"icmp4 {eth.dst <-> eth.src; icmp4.type = 11; /* Time exceeded */ icmp4.code = 0; /* TTL exceeded in transit */ ip4.dst = ip4.src; ip4.src = 10.0.1.1 ; ip.ttl = 254; outport = "vpc-a-subnet-a"; flags.loopback = 1; output; };"#),
            Class::Compiled(entries) if matches!(entries[0], IrEntry::TtlExceeded { .. })
        ));
        assert!(
            matches!(class("lr_in_ip_routing", 194, r#"inport == "p" && ip6.dst == fe80::/64"#, "ip.ttl--; next;"), Class::Unsupported(r) if r.contains("IPv6"))
        );
    }

    /// The neighbour stages as northd 23.03 writes them for a router with Kube-OVN's options
    /// (`always_learn_from_arp_request=false`) and without (the default, true): every flow
    /// compiles; the ones that look up or write MAC_Binding are side duties (not learned), never
    /// unsupported, so they do not stop the router; an unknown action still is unsupported.
    #[test]
    fn neighbour_learning_compiles_with_learning_as_a_side_duty() {
        let side_duty = |stage: &str, priority: i64, match_: &str, actions: &str| match class(
            stage, priority, match_, actions,
        ) {
            Class::SideDuty { entries, duty } => {
                assert_eq!(duty, MAC_LEARNING_NOT_DONE);
                assert!(
                    matches!(
                        entries.as_slice(),
                        [IrEntry::NeighbourLearning { datapath: 7, .. }]
                    ),
                    "{entries:?}"
                );
            }
            other => panic!("{stage} {match_} / {actions}: {other:?}"),
        };
        let lookup = "lr_in_lookup_neighbor";
        let learn = "lr_in_learn_neighbor";
        // always_learn_from_arp_request=false
        side_duty(
            lookup,
            110,
            r#"inport == "r2-s1" && arp.spa == 10.0.1.0/24 && arp.tpa == 10.0.1.1 && arp.op == 1"#,
            "reg9[2] = lookup_arp(inport, arp.spa, arp.sha); reg9[3] = 1; next;",
        );
        side_duty(
            lookup,
            110,
            "nd_na && ip6.src == fe80::/10 && ip6.dst == ff00::/8",
            "reg9[2] = lookup_nd(inport, ip6.src, nd.tll); reg9[3] = lookup_nd_ip(inport, ip6.src); next;",
        );
        side_duty(
            lookup,
            100,
            "arp.op == 2",
            "reg9[2] = lookup_arp(inport, arp.spa, arp.sha); reg9[3] = 1; next;",
        );
        side_duty(
            lookup,
            100,
            r#"inport == "r2-s1" && arp.spa == 10.0.1.0/24 && arp.op == 1"#,
            "reg9[2] = lookup_arp(inport, arp.spa, arp.sha); reg9[3] = lookup_arp_ip(inport, arp.spa); next;",
        );
        side_duty(
            lookup,
            100,
            "nd_ns",
            "reg9[2] = lookup_nd(inport, ip6.src, nd.sll); reg9[3] = lookup_nd_ip(inport, ip6.src); next;",
        );
        // The default (true)
        side_duty(
            lookup,
            100,
            "arp.op == 2",
            "reg9[2] = lookup_arp(inport, arp.spa, arp.sha); next;",
        );
        side_duty(
            lookup,
            100,
            "nd_na",
            "reg9[2] = lookup_nd(inport, nd.target, nd.tll); next;",
        );
        // Both
        side_duty(learn, 90, "arp", "put_arp(inport, arp.spa, arp.sha); next;");
        side_duty(
            learn,
            95,
            "nd_na && nd.tll == 0",
            "put_nd(inport, nd.target, eth.src); next;",
        );
        side_duty(learn, 90, "nd_ns", "put_nd(inport, ip6.src, nd.sll); next;");
        let forwarding_only = |stage: &str, priority: i64, match_: &str, actions: &str| {
            assert!(
                matches!(
                    class(stage, priority, match_, actions),
                    Class::Compiled(entries) if matches!(entries.as_slice(), [IrEntry::NeighbourLearning { .. }])
                ),
                "{stage} {match_} / {actions}"
            );
        };
        forwarding_only(lookup, 0, "1", "reg9[2] = 1; next;");
        forwarding_only(learn, 100, "reg9[2] == 1 || reg9[3] == 0", "next;");
        forwarding_only(learn, 100, "reg9[2] == 1", "next;");
        forwarding_only(learn, 95, "nd_ns && (ip6.src == 0 || nd.sll == 0)", "next;");
        forwarding_only(learn, 0, "1", "drop;");
        // What would change forwarding is not guessed at.
        for (stage, match_, actions) in [
            (learn, "arp", "put_arp(inport, arp.spa, arp.sha); drop;"),
            (
                lookup,
                "arp.op == 2",
                "reg9[2] = lookup_arp(inport, arp.spa, arp.sha); reg0 = 1; next;",
            ),
            (learn, "arp.op == 2", "drop;"),
            (lookup, "arp", "reg9[2] = get_fdb(eth.src); next;"),
        ] {
            assert!(
                matches!(class(stage, 90, match_, actions), Class::Unsupported(r) if r.contains("neighbour learning")),
                "{stage} {match_} / {actions}"
            );
        }
    }
}
