//! A router's load balancers (`lr-lb-add`: Kube-OVN's `OvnDnatRule`, one VIP `E:P` → `L:Q` in
//! a balancer of its own on the VPC's router), as northd 23.03 writes them for a router with a
//! distributed gateway port `GW` (chassisredirect port `cr-GW`):
//! - `lr_in_dnat`, where `cr-GW` resides: `ct.new && !ct.rel && ip4 && ip4.dst == E [&& tcp &&
//!   tcp.dst == P] && is_chassis_resident("cr-GW")` → `ct_lb_mark(backends=L:Q,…);` is the VIP,
//!   [`IrEntry::RouterLoadBalancer`] (a VIP without backends: `drop;`); any other action there
//!   (`flags.force_snat_for_lb`, `skip_snat`: options Kube-OVN does not set) fences the
//!   gateway ([`IrEntry::CentralizedNat`]);
//! - the rest of the balancing, carried out by those entries in the gateway NAT stage (each
//!   compiles to nothing more): `lr_out_undnat`'s reverse translation of the backends' replies
//!   (`ip4 && ((ip4.src == L && tcp.src == Q) || …) && outport == GW && is_chassis_resident`
//!   → `ct_dnat_in_czone;`), `lr_in_defrag`'s conntrack lookup of what goes to `E`
//!   (`ip && ip4.dst == E` → `ct_dnat;`), `lr_in_dnat`'s flows for established and related
//!   packets of balanced connections (`ct.est && … && ct_mark.natted` → `next;`, `ct.rel &&
//!   …` → `ct_commit_nat;`, with their `force_snat`/`skip_snat` twins, which only connections
//!   of balancers with those options carry), and `lr_out_chk_dnat_local`'s mark of balanced
//!   connections for the hairpin SNAT (`ip && ct_mark.natted == 1` → `reg9[4] = 1; next;`);
//!   northd tests `ct_label` for `ct_mark` where the chassis do not advertise `ct_lb_mark`;
//! - the router's answer to ARP for its VIPs (`arp.tpa == $_rtr_lb_N_ip4`) on the gateway port,
//!   where `cr-GW` resides, is the backend's for an active gateway (neutral); on its other ports
//!   it is a side duty not done (a VIP is an address of the external network, which the VPC's
//!   pods reach through the gateway).
//!
//! Pure functions over the parsed flow; touches nothing.

use std::net::Ipv4Addr;

use super::{Class, lb::balance_arguments, matching::*};
use crate::{
    lflow::ast::{Action, Expr},
    pipeline::ir::{IrEntry, LbProtocol, LbVip},
};

/// The class of a flow of `stage` that applies only where chassisredirect port `redirect`
/// resides, if it is one of a router load balancer's (see the module doc).
pub(super) fn resident(
    dp: u32,
    stage: &str,
    terms: &[&Expr],
    actions: &[Action],
    redirect: &str,
) -> Option<Class> {
    match stage {
        "lr_in_dnat" => {
            let (vip, port, protocol) = resident_vip(terms)?;
            let fence = || {
                Class::Compiled(vec![IrEntry::CentralizedNat {
                    datapath: dp,
                    redirect: redirect.to_string(),
                }])
            };
            let (backends, hash_fields) = match actions {
                [Action::Keyword { name, .. }] if is_drop(name) => (Vec::new(), Vec::new()),
                [
                    Action::Keyword {
                        name,
                        arguments: Some(arguments),
                        block: None,
                    },
                ] if name == "ct_lb_mark" || name == "ct_lb" => {
                    match balance_arguments(arguments) {
                        Some(parsed) => parsed,
                        None => return Some(fence()),
                    }
                }
                _ => return Some(fence()),
            };
            if backends
                .iter()
                .any(|backend| backend.port.is_some() != port.is_some())
            {
                return Some(fence());
            }
            Some(Class::Compiled(vec![IrEntry::RouterLoadBalancer {
                datapath: dp,
                redirect: redirect.to_string(),
                vip: Box::new(LbVip {
                    vip,
                    port,
                    protocol,
                    backends,
                    hash_fields,
                    reject: false,
                }),
            }]))
        }
        "lr_out_undnat" => is_backend_undnat(terms, actions).then(|| Class::Compiled(Vec::new())),
        _ => None,
    }
}

/// `ct.new && !ct.rel && ip4 && ip4.dst == E [&& (tcp|udp) && (tcp|udp).dst == P] &&
/// is_chassis_resident(…)`: the VIP, its port and protocol.
fn resident_vip(terms: &[&Expr]) -> Option<(Ipv4Addr, Option<u16>, Option<LbProtocol>)> {
    let (mut new, mut not_related, mut ip4, mut resident) = (false, false, false, false);
    let (mut vip, mut port, mut protocol) = (None, None, None);
    for term in terms {
        if is_predicate(term, "ct.new") {
            new = true;
        } else if matches!(term, Expr::Not(inner) if is_predicate(inner, "ct.rel")) {
            not_related = true;
        } else if is_predicate(term, "ip4") {
            ip4 = true;
        } else if let Some(address) = compare_ipv4(term, "ip4.dst") {
            vip = Some(address);
        } else if is_predicate(term, "tcp") {
            protocol = Some(LbProtocol::Tcp);
        } else if is_predicate(term, "udp") {
            protocol = Some(LbProtocol::Udp);
        } else if let Some(value) =
            compare_integer(term, "tcp.dst").or_else(|| compare_integer(term, "udp.dst"))
        {
            port = Some(u16::try_from(value).ok()?);
        } else if matches!(term, Expr::Function { name, .. } if name == "is_chassis_resident") {
            resident = true;
        } else {
            return None;
        }
    }
    let consistent = port.is_some() == protocol.is_some();
    (new && not_related && ip4 && resident && consistent).then_some((vip?, port, protocol))
}

/// `lr_out_undnat`'s `ip4 && ((ip4.src == L && tcp.src == Q) || …) && outport == GW &&
/// is_chassis_resident(…)` → `ct_dnat_in_czone;`.
fn is_backend_undnat(terms: &[&Expr], actions: &[Action]) -> bool {
    let bare = matches!(actions, [Action::Keyword { name, arguments: None, block: None }] if name == "ct_dnat_in_czone");
    let mut shape = (false, false, false, false);
    for term in terms {
        if is_predicate(term, "ip4") {
            shape.0 = true;
        } else if compare_string(term, "outport").is_some() {
            shape.1 = true;
        } else if matches!(term, Expr::Function { name, .. } if name == "is_chassis_resident") {
            shape.2 = true;
        } else if names_backends(term) {
            shape.3 = true;
        } else {
            return false;
        }
    }
    bare && shape == (true, true, true, true)
}

/// Whether `expr` tests backends' addresses and source ports only (an `||` of `ip4.src == L
/// [&& tcp.src == Q]`).
fn names_backends(expr: &Expr) -> bool {
    match expr {
        Expr::Or(alternatives) | Expr::And(alternatives) => alternatives.iter().all(names_backends),
        _ => ["ip4.src", "tcp.src", "udp.src"]
            .iter()
            .any(|name| compare_eq(expr).is_some_and(|(field, _)| plain(field, name))),
    }
}

/// The connection marks northd tests balanced connections by: in `ct_mark`, or in `ct_label`
/// where a chassis does not advertise `ct_lb_mark` (as this agent's do not).
const NAT_MARKS: [(&str, &str); 2] = [
    ("ct_mark.force_snat", "ct_label.force_snat"),
    ("ct_mark.skip_snat", "ct_label.skip_snat"),
];

/// `ct_mark.natted` (`ct_label.natted`), as a predicate or `== 1`.
fn is_natted(term: &Expr) -> bool {
    ["ct_mark.natted", "ct_label.natted"]
        .iter()
        .any(|name| is_predicate(term, name) || compare_integer(term, name) == Some(1))
}

/// The class of a router flow of `stage` not confined to a chassis, if it is one of the parts
/// of a router load balancer its entries carry out (see the module doc).
pub(super) fn carried(stage: &str, terms: &[&Expr], actions: &[Action]) -> Option<Class> {
    match stage {
        // `ip && ip4.dst == E` → `ct_dnat;` (later northd: with the VIP in registers first).
        "lr_in_defrag" => {
            let (last, registers) = actions.split_last()?;
            let lookup = matches!(last, Action::Keyword { name, arguments: None, block: None } if name == "ct_dnat");
            let registers_only = registers.iter().all(|action| {
                matches!(action, Action::Assign { destination, .. }
                    if destination.name == "reg0" || destination.name == "reg9")
            });
            let to_vip = terms.iter().any(|t| compare_ipv4(t, "ip4.dst").is_some())
                && terms.iter().all(|t| {
                    compare_ipv4(t, "ip4.dst").is_some()
                        || ["ip", "ip4", "tcp", "udp"]
                            .iter()
                            .any(|name| is_predicate(t, name))
                });
            (lookup && registers_only && to_vip).then(|| Class::Compiled(Vec::new()))
        }
        "lr_in_dnat" => {
            let state = |name: &str| terms.iter().any(|t| is_predicate(t, name));
            let not = |name: &str| {
                terms
                    .iter()
                    .any(|t| matches!(t, Expr::Not(inner) if is_predicate(inner, name)))
            };
            let known = terms.iter().all(|t| {
                ["ct.est", "ct.rel"].iter().any(|name| is_predicate(t, name))
                    || is_natted(t)
                    || matches!(t, Expr::Not(inner) if ["ct.est", "ct.rel", "ct.new"].iter().any(|name| is_predicate(inner, name)))
                    || NAT_MARKS.iter().any(|(mark, label)| {
                        compare_integer(t, mark) == Some(1) || compare_integer(t, label) == Some(1)
                    })
            });
            let (last, flags) = actions.split_last()?;
            let flags_only = flags.iter().all(|action| {
                matches!(action, Action::Assign { destination, .. }
                    if plain(destination, "flags.force_snat_for_lb")
                        || plain(destination, "flags.skip_snat_for_lb"))
            });
            let commits = matches!(last, Action::Keyword { name, arguments: None, block: None } if name == "ct_commit_nat");
            let established =
                state("ct.est") && not("ct.rel") && terms.iter().any(|t| is_natted(t));
            let related = state("ct.rel") && not("ct.est");
            let shape = (established && is_next(last)) || (related && commits);
            (known && flags_only && not("ct.new") && shape).then(|| Class::Compiled(Vec::new()))
        }
        // `ip && ct_mark.natted == 1` → `reg9[4] = 1; next;`
        "lr_out_chk_dnat_local" => {
            let natted = matches!(terms, [ip, mark] if is_predicate(ip, "ip") && is_natted(mark));
            let marks = matches!(actions, [Action::Assign { destination, .. }, last] if *destination == bit("reg9", 4) && is_next(last));
            (natted && marks).then(|| Class::Compiled(Vec::new()))
        }
        // `inport == P && arp.op == 1 && arp.tpa == {E, …}` → the ARP answer, on a port
        // without the gateway's residence.
        "lr_in_ip_input" => {
            let request = terms.len() == 3
                && terms.iter().any(|t| compare_string(t, "inport").is_some())
                && terms
                    .iter()
                    .any(|t| compare_integer(t, "arp.op") == Some(1))
                && terms.iter().any(|t| {
                    compare_eq(t).is_some_and(|(field, values)| {
                        plain(field, "arp.tpa") && values.iter().all(|v| value_ipv4(v).is_some())
                    })
                });
            let answers =
                assigned_integer(actions, "arp.op") == Some(2) && ends_with_output(actions);
            (request && answers).then(|| Class::SideDuty {
                entries: Vec::new(),
                duty: "the router's answer to ARP for its load balancer VIPs on a port other \
                       than its gateway port"
                    .to_string(),
            })
        }
        _ => None,
    }
}
