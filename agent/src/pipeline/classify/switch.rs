//! Logical switch stages (`ls_*`): port security, the ARP responder, the L2 lookup and
//! unknown-destination handling. IPv4 and family-neutral flows; IPv6-only ones go to
//! [`super::ipv6`] first.

use super::{
    matching::*,
    verdict::{Class, unsupported},
};
use crate::{
    lflow::ast::{Action, Expr, Relation},
    pipeline::ir::{IrEntry, Mac},
};

/// `ls_in_check_port_sec`: ingress sanity (VLAN-tagged or multicast-source frames dropped) and
/// ingress port security.
pub(super) fn check_port_security(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    match (terms, actions) {
        ([Expr::Field(f)], _) if is_drop_only(actions) && is_sanity_field(f) => {
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
    }
}

/// `ls_out_check_port_sec`: egress port security (multicast is exempt).
pub(super) fn check_out_port_security(
    dp: u32,
    _: i64,
    terms: &[&Expr],
    actions: &[Action],
) -> Class {
    let egress = || {
        Class::Compiled(vec![IrEntry::PortSecurity {
            datapath: dp,
            egress: true,
        }])
    };
    match (terms, actions) {
        // Multicast is exempt from egress port security.
        ([Expr::Field(field)], actions)
            if plain(field, "eth.mcast") && zeroes_then_next(actions, &bit("reg0", 15)) =>
        {
            egress()
        }
        ([Expr::Bool(true)], [assign, next])
            if calls(assign, "check_out_port_sec") && is_next(next) =>
        {
            egress()
        }
        _ => unsupported("port security variant"),
    }
}

/// `ls_in_apply_port_sec`.
pub(super) fn apply_port_security_in(
    dp: u32,
    _: i64,
    terms: &[&Expr],
    actions: &[Action],
) -> Class {
    apply_port_security(dp, false, terms, actions)
}

/// `ls_out_apply_port_sec`.
pub(super) fn apply_port_security_out(
    dp: u32,
    _: i64,
    terms: &[&Expr],
    actions: &[Action],
) -> Class {
    apply_port_security(dp, true, terms, actions)
}

fn apply_port_security(dp: u32, egress: bool, terms: &[&Expr], actions: &[Action]) -> Class {
    match terms {
        [term]
            if is_drop_only(actions)
                && compare_eq(term).is_some_and(|(f, v)| f == &bit("reg0", 15) && is_one(v)) =>
        {
            Class::Compiled(vec![IrEntry::PortSecurity {
                datapath: dp,
                egress,
            }])
        }
        [Expr::Bool(true)] if egress && is_bare_output(actions) => {
            Class::Compiled(vec![IrEntry::Deliver {
                datapath: dp,
                egress: true,
            }])
        }
        _ => unsupported("port security variant"),
    }
}

/// `ls_in_l2_unknown`: frames to unknown destinations dropped, or flooded to the ports with
/// "unknown" addresses (localnet, or LSPs that accept any MAC).
pub(super) fn l2_unknown(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    let to_none = |term: &Expr| {
        compare_eq(term)
            .is_some_and(|(f, v)| plain(f, "outport") && string_value(v) == Some("none"))
    };
    match terms {
        [term] if to_none(term) && is_drop_only(actions) => {
            Class::Compiled(vec![IrEntry::DropUnknownDestination { datapath: dp }])
        }
        // The switch has ports with "unknown" addresses (localnet, or LSPs that accept any
        // MAC): frames nobody claims are flooded to them.
        [term] if to_none(term) && actions.len() == 2 => match output_to(actions) {
            Some(group) => Class::Compiled(vec![IrEntry::FloodUnknown {
                datapath: dp,
                group: group.to_string(),
            }]),
            None => unsupported("unknown-destination variant"),
        },
        [Expr::Bool(true)] if is_bare_output(actions) => Class::Compiled(vec![IrEntry::Deliver {
            datapath: dp,
            egress: false,
        }]),
        _ => unsupported("unknown-destination flooding (ports with \"unknown\" addresses)"),
    }
}

/// `ls_in_arp_rsp`: the ARP responder and its per-port exceptions.
pub(super) fn arp_responder(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
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

/// `ls_in_l2_lkup`: the FIB, multicast and router-originated flooding, ARP for router IPs.
pub(super) fn l2_lookup(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
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
        ([Expr::Bool(true)], None) if looks_up_fdb(actions) => {
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
            // `eth.dst == $svc_monitor_mac && (tcp || icmp || icmp6)` (23.03.1 on; 23.03.0
            // without the protocols): every frame to the MAC is the agent's, whatever it
            // carries (the rest would find no port either).
            let mac = terms.iter().find_map(|term| match term {
                // The address set expanded: a set of one.
                Expr::Compare {
                    field,
                    relation: Relation::Eq,
                    values,
                    ..
                } if plain(field, "eth.dst") => single_mac(values),
                _ => None,
            });
            match mac {
                Some(mac) => {
                    Class::Compiled(vec![IrEntry::ServiceMonitorAnswers { datapath: dp, mac }])
                }
                None => unsupported("service monitor answers to a destination that is not one MAC"),
            }
        }
        _ => unsupported("L2 lookup variant"),
    }
}

/// `outport = get_fdb(eth.dst); next;`: a MAC learnt by OVN's FDB (unknown unicast).
fn looks_up_fdb(actions: &[Action]) -> bool {
    matches!(actions, [lookup, next] if calls_into(lookup, "outport", "get_fdb") && is_next(next))
}
