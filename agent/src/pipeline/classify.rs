//! Classifies one logical flow, keyed by its stage name and parsed content (never by table
//! numbers or priorities alone), into IR entries (compiled), nothing (neutral: it does not change
//! forwarding, e.g. a priority-0 `next;`), or unsupported with a reason. A flow whose shape is not
//! recognised is unsupported, never guessed at.

use std::net::Ipv4Addr;

use super::ir::{IrEntry, Mac, Prefix};
use crate::lflow::{
    ast::{Action, Expr, FieldRef, Relation, Source, Value},
    lexer::{Constant, Mask},
};

/// The verdict on one flow for one datapath.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Class {
    Compiled(Vec<IrEntry>),
    Neutral,
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
        stage if is_stateful_stage(stage) => {
            unsupported("ACL/conntrack/load balancing is not in the datapath yet")
        }
        stage => unsupported(format!("stage {stage} is not compiled yet")),
    }
}

fn is_stateful_stage(stage: &str) -> bool {
    [
        "acl", "lb", "stateful", "hairpin", "dnat", "snat", "defrag", "ecmp", "aff", "qos", "ct",
    ]
    .iter()
    .any(|word| stage.split('_').any(|part| part == *word) || stage.contains(&format!("_{word}")))
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
                            group: group.to_string(),
                        }])
                    }
                    _ => unsupported("ARP-for-router variant"),
                },
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
            unsupported("service monitor (load balancer health checks)")
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
    let source_ip = match assigned(actions, "reg1") {
        Some(Source::Constant(Constant::Ipv4 {
            address,
            mask: None,
        })) => *address,
        _ => return unsupported("route source-address variant"),
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
        _ => unsupported("neighbour variant (IPv6 or gateway)"),
    }
}

// ---- helpers over the syntax trees ----

fn conjuncts(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::And(terms) => terms.iter().flat_map(conjuncts).collect(),
        other => vec![other],
    }
}

fn plain(field: &FieldRef, name: &str) -> bool {
    field.name == name && field.slice.is_none()
}

fn bit(name: &str, bit: u32) -> FieldRef {
    FieldRef {
        name: name.to_string(),
        slice: Some((bit, None)),
    }
}

fn slice(name: &str, low: u32, high: u32) -> FieldRef {
    FieldRef {
        name: name.to_string(),
        slice: Some((low, Some(high))),
    }
}

fn mentions(expr: &Expr, name: &str) -> bool {
    match expr {
        Expr::Field(field) | Expr::Compare { field, .. } | Expr::Range { field, .. } => {
            field.name == name
        }
        Expr::Not(inner) => mentions(inner, name),
        Expr::And(terms) | Expr::Or(terms) => terms.iter().any(|t| mentions(t, name)),
        Expr::Bool(_) | Expr::Function { .. } => false,
    }
}

fn is_drop(name: &str) -> bool {
    name == "drop"
}

fn is_next(action: &Action) -> bool {
    matches!(action, Action::Keyword { name, arguments: None, block: None } if name == "next")
}

fn is_next_only(actions: &[Action]) -> bool {
    matches!(actions, [next] if is_next(next))
}

fn calls(action: &Action, function: &str) -> bool {
    matches!(action, Action::Assign { source: Source::Call { name, .. }, .. } if name == function)
}

fn is_one(values: &[Value]) -> bool {
    matches!(
        values,
        [Value::Constant(Constant::Integer {
            value: 1,
            mask: None,
            ..
        })]
    )
}

fn string_value(values: &[Value]) -> Option<&str> {
    match values {
        [Value::Constant(Constant::String(text))] => Some(text),
        _ => None,
    }
}

fn value_mac(value: &Value) -> Option<Mac> {
    match value {
        Value::Constant(Constant::Mac {
            address,
            mask: None,
        }) => Some(*address),
        _ => None,
    }
}

fn single_mac(values: &[Value]) -> Option<Mac> {
    match values {
        [value] => value_mac(value),
        _ => None,
    }
}

fn compare_values<'a>(expr: &'a Expr, name: &str) -> Option<&'a [Value]> {
    match expr {
        Expr::Compare {
            field,
            relation: Relation::Eq,
            values,
            ..
        } if plain(field, name) => Some(values),
        _ => None,
    }
}

fn compare_string<'a>(expr: &'a Expr, name: &str) -> Option<&'a str> {
    string_value(compare_values(expr, name)?)
}

fn compare_integer(expr: &Expr, name: &str) -> Option<u128> {
    match compare_values(expr, name)? {
        [
            Value::Constant(Constant::Integer {
                value, mask: None, ..
            }),
        ] => Some(*value),
        _ => None,
    }
}

fn compare_mac(expr: &Expr, name: &str) -> Option<Mac> {
    single_mac(compare_values(expr, name)?)
}

fn compare_ipv4(expr: &Expr, name: &str) -> Option<Ipv4Addr> {
    match compare_values(expr, name)? {
        [
            Value::Constant(Constant::Ipv4 {
                address,
                mask: None,
            }),
        ] => Some(*address),
        _ => None,
    }
}

fn compare_prefix(expr: &Expr, name: &str) -> Option<Prefix> {
    match compare_values(expr, name)? {
        [
            Value::Constant(Constant::Ipv4 {
                address,
                mask: None,
            }),
        ] => Some(Prefix {
            network: *address,
            length: 32,
        }),
        [
            Value::Constant(Constant::Ipv4 {
                address,
                mask: Some(Mask::Prefix(length)),
            }),
        ] => Some(Prefix {
            network: *address,
            length: *length,
        }),
        _ => None,
    }
}

fn assigned<'a>(actions: &'a [Action], name: &str) -> Option<&'a Source> {
    actions.iter().find_map(|action| match action {
        Action::Assign {
            destination,
            source,
        } if plain(destination, name) => Some(source),
        _ => None,
    })
}

fn assigned_mac(actions: &[Action], name: &str) -> Option<Mac> {
    match assigned(actions, name)? {
        Source::Constant(Constant::Mac {
            address,
            mask: None,
        }) => Some(*address),
        _ => None,
    }
}

fn assigned_integer(actions: &[Action], name: &str) -> Option<u128> {
    match assigned(actions, name)? {
        Source::Constant(Constant::Integer {
            value, mask: None, ..
        }) => Some(*value),
        _ => None,
    }
}

fn assigned_string<'a>(actions: &'a [Action], name: &str) -> Option<&'a str> {
    match assigned(actions, name)? {
        Source::Constant(Constant::String(text)) => Some(text),
        _ => None,
    }
}

fn ends_with_output(actions: &[Action]) -> bool {
    matches!(actions.last(), Some(Action::Keyword { name, arguments: None, block: None }) if name == "output")
}

/// `outport = "P"; output;` → P.
fn output_to(actions: &[Action]) -> Option<&str> {
    match actions {
        [
            ..,
            Action::Assign {
                destination,
                source: Source::Constant(Constant::String(port)),
            },
            Action::Keyword {
                name,
                arguments: None,
                block: None,
            },
        ] if plain(destination, "outport") && name == "output" => Some(port),
        _ => None,
    }
}
