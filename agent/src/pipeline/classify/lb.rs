//! The load-balancer stages of a switch, as northd 23.03 writes them for Northbound
//! Load_Balancer rows (Kubernetes Services as Kube-OVN writes them): `ls_in_lb`'s VIP flows
//! (`ct.new && ip4.dst == V [&& tcp.dst == P]` → `reg0[1] = 0; ct_lb_mark(backends=…);`, or
//! `drop;` / `reject {…}` for a VIP without backends), the `ls_in_pre_stateful` flow that
//! sends a VIP's packets to conntrack first (neutral: the kernel's load-balancer stage does
//! both), the hairpin stages, and session affinity (`ls_in_lb_aff_check`, `ls_in_lb_aff_learn`
//! and `ls_in_lb`'s `reg9[6]` flows: the VIP's affinity timeout, [`IrEntry::LbAffinity`]).

use std::net::Ipv4Addr;

use super::{matching::*, verdict::unsupported};
use crate::{
    lflow::{
        ast::{Action, Expr, Source},
        lexer::{Constant, Token},
    },
    pipeline::{
        classify::Class,
        ir::{IrEntry, LbBackend, LbHashField, LbProtocol, LbVip},
    },
};

/// The balancing actions' names (23.03 writes `ct_lb` without `ct-no-masked-label`).
const BALANCE: &[&str] = &["ct_lb_mark", "ct_lb"];

/// `ls_in_lb`.
pub(super) fn lb(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    if passes_on(actions) {
        return Class::Neutral;
    }
    if terms.iter().any(|term| mentions_ipv6(term)) {
        return unsupported("an IPv6 load balancer VIP is not in the datapath yet");
    }
    // Session affinity's VIP flow for a learned backend: what `LbAffinity` makes the kernel
    // do (the backend the client had, while it is still the VIP's).
    if terms.iter().any(|term| mentions(term, "reg9")) {
        return if is_affinity_hit(terms, actions) {
            Class::Neutral
        } else {
            unsupported("this session affinity flow is not in the datapath yet")
        };
    }
    let Some((vip, port, protocol)) = vip_match(terms) else {
        return unsupported("load balancer VIP match not recognised");
    };
    let result = match actions {
        [Action::Keyword { name, .. }] if is_drop(name) => Some((Vec::new(), Vec::new(), false)),
        [Action::Assign { .. }, Action::Keyword { name, .. }] if name == "reject" => {
            Some((Vec::new(), Vec::new(), true))
        }
        [
            clear,
            Action::Keyword {
                name,
                arguments: Some(arguments),
                block: None,
            },
        ] if zeroes(clear, "reg0", 1) && BALANCE.contains(&name.as_str()) => {
            balance_arguments(arguments).map(|(backends, fields)| (backends, fields, false))
        }
        _ => None,
    };
    let Some((backends, hash_fields, reject)) = result else {
        return unsupported("load balancer action not recognised");
    };
    if backends
        .iter()
        .any(|backend: &LbBackend| backend.port.is_some() != port.is_some())
    {
        return unsupported("load balancer backends and VIP disagree on ports");
    }
    Class::Compiled(vec![IrEntry::LoadBalancer {
        datapath: dp,
        vip: Box::new(LbVip {
            vip,
            port,
            protocol,
            backends,
            hash_fields,
            reject,
        }),
    }])
}

/// `ct.new && ip4.dst == V [&& (tcp|udp).dst == P]`.
fn vip_match(terms: &[&Expr]) -> Option<(Ipv4Addr, Option<u16>, Option<LbProtocol>)> {
    let (new, vip, port) = match terms {
        [new, vip] => (new, vip, None),
        [new, vip, port] => (new, vip, Some(port)),
        _ => return None,
    };
    if !is_predicate(new, "ct.new") {
        return None;
    }
    let vip = compare_ipv4(vip, "ip4.dst")?;
    let Some(port) = port else {
        return Some((vip, None, None));
    };
    for (name, protocol) in [("tcp.dst", LbProtocol::Tcp), ("udp.dst", LbProtocol::Udp)] {
        if let Some(value) = compare_integer(port, name) {
            return Some((vip, Some(u16::try_from(value).ok()?), Some(protocol)));
        }
    }
    None
}

/// `reg0[1] = 0;`
fn zeroes(action: &Action, register: &str, bit_number: u32) -> bool {
    matches!(action, Action::Assign {
        destination,
        source: Source::Constant(Constant::Integer { value: 0, mask: None, .. }),
    } if *destination == bit(register, bit_number))
}

/// `backends=IP[:PORT],…[; hash_fields="f,…"]` → the backends and the hash fields.
pub(super) fn balance_arguments(tokens: &[Token]) -> Option<(Vec<LbBackend>, Vec<LbHashField>)> {
    let mut parts = tokens.split(|token| matches!(token, Token::Punct(";")));
    let backends = parts.next()?;
    let [Token::Id(name), Token::Punct("="), list @ ..] = backends else {
        return None;
    };
    if name != "backends" {
        return None;
    }
    let mut parsed = Vec::new();
    for backend in list.split(|token| matches!(token, Token::Punct(","))) {
        parsed.push(match backend {
            [
                Token::Constant(Constant::Ipv4 {
                    address,
                    mask: None,
                }),
            ] => LbBackend {
                ip: *address,
                port: None,
            },
            [
                Token::Constant(Constant::Ipv4 {
                    address,
                    mask: None,
                }),
                Token::Punct(":"),
                Token::Constant(Constant::Integer {
                    value, mask: None, ..
                }),
            ] => LbBackend {
                ip: *address,
                port: Some(u16::try_from(*value).ok()?),
            },
            _ => return None,
        });
    }
    let mut fields = Vec::new();
    for option in parts {
        match option {
            [
                Token::Id(name),
                Token::Punct("="),
                Token::Constant(Constant::String(list)),
            ] if name == "hash_fields" => {
                for field in list.split(',') {
                    fields.push(LbHashField::from_name(field.trim())?);
                }
            }
            _ => return None,
        }
    }
    fields.sort_unstable();
    fields.dedup();
    Some((parsed, fields))
}

/// `ls_in_pre_stateful`'s VIP flow: `reg0[2] == 1 && ip4.dst == V [&& tcp.dst == P]` →
/// `reg1 = V; [reg2[0..15] = P;] ct_lb_mark;`: the VIP's packets go to conntrack, which the
/// kernel's load-balancer stage does with the balancing itself.
pub(super) fn is_vip_conntrack(terms: &[&Expr], actions: &[Action]) -> bool {
    let Some((last, registers)) = actions.split_last() else {
        return false;
    };
    let balance = matches!(last, Action::Keyword { name, arguments: None, block: None }
        if BALANCE.contains(&name.as_str()));
    let writes_vip_registers = registers.iter().all(|action| {
        matches!(action, Action::Assign { destination, .. }
            if plain(destination, "reg1") || *destination == slice("reg2", 0, 15))
    });
    let vip = terms.get(1).and_then(|term| compare_ipv4(term, "ip4.dst"));
    balance && writes_vip_registers && !registers.is_empty() && vip.is_some() && terms.len() <= 3
}

/// The hairpin stages (`ls_in_pre_hairpin`, `ls_in_nat_hairpin`, `ls_in_hairpin`), the
/// shapes northd writes on every switch with load balancers.
pub(super) fn hairpin(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    if passes_on(actions) {
        return Class::Neutral;
    }
    let compiled = Class::Compiled(vec![IrEntry::LbHairpin { datapath: dp }]);
    // ls_in_pre_hairpin: `ip && ct.trk` → `reg0[6] = chk_lb_hairpin(); reg0[12] =
    // chk_lb_hairpin_reply(); next;`
    if actions.iter().any(|a| calls(a, "chk_lb_hairpin")) {
        return compiled;
    }
    // ls_in_nat_hairpin: `ct_snat_to_vip; next;`, `ct_snat;`.
    if uses_keyword(actions, &["ct_snat_to_vip", "ct_snat"])
        && terms.iter().any(|term| mentions(term, "reg0"))
    {
        return compiled;
    }
    // ls_in_hairpin: `eth.dst <-> eth.src; outport = inport; flags.loopback = 1; output;`
    if exchanges(actions, "eth.dst", "eth.src") && ends_with_output(actions) {
        return compiled;
    }
    unsupported("this hairpin flow is not in the datapath yet")
}

/// `ls_in_lb` priority 150: `reg9[6] == 1 && ct.new && ip4 && reg4 == B && reg8[0..15] == P`
/// → `reg0[1] = 0; reg1 = V; reg2[0..15] = P; ct_lb_mark(backends=B:P);`.
fn is_affinity_hit(terms: &[&Expr], actions: &[Action]) -> bool {
    let backend = terms
        .iter()
        .any(|term| compare_ipv4(term, "reg4").is_some());
    let balances = matches!(actions.last(), Some(Action::Keyword { name, arguments: Some(arguments), .. })
        if BALANCE.contains(&name.as_str())
            && balance_arguments(arguments).is_some_and(|(backends, _)| backends.len() == 1));
    backend && balances && terms.iter().any(|term| is_predicate(term, "ct.new"))
}

/// `ls_in_lb_aff_check`: `ct.new && ip4 && reg1 == V && reg2[0..15] == P` → `reg9[6] =
/// chk_lb_aff(); next;` (the lookup `LbAffinity` makes the kernel do); `ls_in_lb_aff_learn`:
/// `… && ip4.dst == B && tcp.dst == P` → `commit_lb_aff(vip = "V:P", backend = "B:P", proto =
/// tcp, timeout = T);`, one per backend: the VIP's affinity and its timeout.
pub(super) fn affinity(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    if passes_on(actions) {
        return Class::Neutral;
    }
    let is_new = terms.iter().any(|term| is_predicate(term, "ct.new"));
    if is_new && matches!(actions, [check, next] if calls(check, "chk_lb_aff") && is_next(next)) {
        return Class::Neutral;
    }
    let learned = match actions {
        [
            Action::Keyword {
                name,
                arguments: Some(arguments),
                block: None,
            },
        ] if name == "commit_lb_aff" && is_new => commit_arguments(arguments),
        _ => None,
    };
    match learned {
        Some((vip, port, protocol, timeout)) => Class::Compiled(vec![IrEntry::LbAffinity {
            datapath: dp,
            vip,
            port,
            protocol,
            timeout,
        }]),
        None => unsupported("this session affinity flow is not in the datapath yet"),
    }
}

/// `vip = "V[:P]", backend = "…", proto = tcp|udp, timeout = T`.
fn commit_arguments(tokens: &[Token]) -> Option<(Ipv4Addr, Option<u16>, Option<LbProtocol>, u32)> {
    let (mut vip, mut protocol, mut timeout) = (None, None, None);
    for argument in tokens.split(|token| matches!(token, Token::Punct(","))) {
        match argument {
            [
                Token::Id(name),
                Token::Punct("="),
                Token::Constant(Constant::String(text)),
            ] if name == "vip" => {
                vip = Some(match text.split_once(':') {
                    Some((ip, port)) => (ip.parse().ok()?, Some(port.parse().ok()?)),
                    None => (text.parse().ok()?, None),
                });
            }
            [
                Token::Id(name),
                Token::Punct("="),
                Token::Constant(Constant::String(_)),
            ] if name == "backend" => {}
            [Token::Id(name), Token::Punct("="), Token::Id(value)] if name == "proto" => {
                protocol = Some(match value.as_str() {
                    "tcp" => LbProtocol::Tcp,
                    "udp" => LbProtocol::Udp,
                    _ => return None,
                });
            }
            [
                Token::Id(name),
                Token::Punct("="),
                Token::Constant(Constant::Integer {
                    value, mask: None, ..
                }),
            ] if name == "timeout" => timeout = Some(u32::try_from(*value).ok()?),
            _ => return None,
        }
    }
    let (vip, port) = vip?;
    Some((vip, port, port.and(protocol), timeout?))
}

#[cfg(test)]
#[path = "lb_tests.rs"]
mod tests;
