//! Distributed NAT: the flows northd writes for a `dnat_and_snat` rule with `logical_port` and
//! `external_mac` on a router with a distributed gateway port (Kube-OVN's `OvnFip` of a pod, an
//! EIP handled on the pod's own chassis). For FIP `E` of pod port `P` (address `L`, MAC `M`) on
//! gateway port `GW`, as northd 23.03 writes them:
//! - `lr_in_gw_redirect`: `ip4.src == L && outport == GW && is_chassis_resident(P)` →
//!   `eth.src = M; reg1 = E; next;` (not redirected to the gateway chassis), and `lr_out_snat`:
//!   the same match (`&& reg9[4] == 1` for a hairpinned packet) → `eth.src = M; ct_snat…(E)`:
//!   each is the whole rule, [`IrEntry::DistributedNat`];
//! - the rest of the rule, each carried out by that entry on `P`'s chassis (the flow compiles
//!   to nothing more): the DNAT of what enters `GW` for `E` (`lr_in_dnat`), the un-SNAT of the
//!   replies to what `L` sent (`lr_in_unsnat`), the reverse DNAT of `L`'s replies
//!   (`lr_out_undnat`), the admission of frames to `M` on `GW` (`lr_in_admission`), the
//!   external switch's lookup sending frames to `M` to the router (`ls_in_l2_lookup`), the
//!   router's ARP answer for `E` with `M` and its refusal where `P` is not (`lr_in_ip_input`),
//!   the drop of what would leave `GW` for `E` after entering it (`lr_in_arp_resolve`), and the
//!   mark of traffic to `E` for the SNAT zone (`lr_out_chk_dnat_local`).
//!
//! And the gateway port's redirect itself (`lr_in_gw_redirect`: `outport == GW` →
//! `outport = "cr-GW"; next;`), which [`IrEntry::GatewayPort`] carries out.
//!
//! The translation is stateless (one address for another, both ways): for a 1:1 rule that is
//! what the connection tracker does for every packet of `L`'s and `E`'s flows, and a rule's
//! change takes effect on the next packet. Not carried out (they stay unsupported, confined to
//! the gateway port): traffic from inside the VPC to `E` (`lr_out_egr_loop`).

use std::net::Ipv4Addr;

use super::{Class, matching::*};
use crate::{
    lflow::{
        ast::{Action, Expr, Source},
        lexer::{Constant, Token},
    },
    pipeline::ir::{IrEntry, Mac},
};

/// The class of `terms`/`actions` in `stage` if the flow is one of a distributed NAT rule's.
pub(super) fn classify(dp: u32, stage: &str, terms: &[&Expr], actions: &[Action]) -> Option<Class> {
    let matched = Terms::of(terms)?;
    match stage {
        "lr_in_gw_redirect" if is_redirect(&matched, actions) => Some(Class::Compiled(Vec::new())),
        "lr_in_gw_redirect" | "lr_out_snat" => {
            rule(dp, stage, &matched, actions).map(|entry| Class::Compiled(vec![entry]))
        }
        _ => carried(stage, &matched, actions).then(|| Class::Compiled(Vec::new())),
    }
}

/// The conjuncts a distributed NAT rule's flows are made of.
#[derive(Default)]
struct Terms<'a> {
    ip: bool,
    source: Option<Ipv4Addr>,
    destination: Option<Ipv4Addr>,
    inport: Option<&'a str>,
    outport: Option<&'a str>,
    resident: Option<&'a str>,
    eth_destination: Option<Mac>,
    arp_request_for: Option<Ipv4Addr>,
    arp_request: bool,
    /// `flags.loopback == 0`, or `flags.loopback == 1 && flags.use_snat_zone == 1`.
    loopback: Option<bool>,
    snat_zone: bool,
    hairpin_mark: bool,
}

impl<'a> Terms<'a> {
    /// The terms, if every one is of the kinds above (else the flow is not one of these).
    fn of(terms: &[&'a Expr]) -> Option<Self> {
        let mut parsed = Terms::default();
        for term in terms {
            if matches!(term, Expr::Field(f) if plain(f, "ip")) {
                parsed.ip = true;
            } else if let Some(ip) = compare_ipv4(term, "ip4.src") {
                parsed.source = Some(ip);
            } else if let Some(ip) = compare_ipv4(term, "ip4.dst") {
                parsed.destination = Some(ip);
            } else if let Some(port) = compare_string(term, "inport") {
                parsed.inport = Some(port);
            } else if let Some(port) = compare_string(term, "outport") {
                parsed.outport = Some(port);
            } else if let Some(mac) = compare_mac(term, "eth.dst") {
                parsed.eth_destination = Some(mac);
            } else if let Some(ip) = compare_ipv4(term, "arp.tpa") {
                parsed.arp_request_for = Some(ip);
            } else if compare_integer(term, "arp.op") == Some(1) {
                parsed.arp_request = true;
            } else if let Some(value) = compare_integer(term, "flags.loopback") {
                parsed.loopback = Some(value == 1);
            } else if compare_integer(term, "flags.use_snat_zone") == Some(1) {
                parsed.snat_zone = true;
            } else if compare_field_integer(term, &bit("reg9", 4)) == Some(1) {
                parsed.hairpin_mark = true;
            } else if let Expr::Function { name, arguments } = term
                && name == "is_chassis_resident"
                && let [Constant::String(port)] = arguments.as_slice()
            {
                parsed.resident = Some(port);
            } else {
                return None;
            }
        }
        Some(parsed)
    }
}

/// The class of a flow of a centralized SNAT rule on the chassis where the gateway's
/// chassisredirect port `cr` is active, as northd 23.03 writes them for `snat` from `P` to `E`
/// on gateway port `GW`: `lr_out_snat` `ip && ip4.src == P && outport == GW &&
/// is_chassis_resident(cr)` → `ct_snat_in_czone(E);` is the rule; its hairpin twin (`&&
/// reg9[4] == 1` → `reg9[4] = 0; ct_snat(E);`, traffic from inside the VPC to a NAT address,
/// which the datapath does not loop back) and `lr_in_unsnat`'s `ip && ip4.dst == E && inport
/// == GW && flags.loopback == 0 && is_chassis_resident(cr)` → `ct_snat_in_czone;` (and its
/// loopback twin → `ct_snat;`: the gateway NAT stage's way in) compile to nothing more. `None`
/// for other flows.
pub(super) fn centralized(
    dp: u32,
    stage: &str,
    terms: &[&Expr],
    actions: &[Action],
) -> Option<Class> {
    match stage {
        "lr_out_snat" => {
            let (mut ip, mut source, mut outport, mut resident, mut hairpin) =
                (false, None, None, false, false);
            for term in terms {
                if matches!(term, Expr::Field(f) if plain(f, "ip")) {
                    ip = true;
                } else if let Some(prefix) = compare_prefix(term, "ip4.src") {
                    source = Some(prefix);
                } else if let Some(port) = compare_string(term, "outport") {
                    outport = Some(port);
                } else if compare_field_integer(term, &bit("reg9", 4)) == Some(1) {
                    hairpin = true;
                } else if matches!(term, Expr::Function { name, .. } if name == "is_chassis_resident")
                {
                    resident = true;
                } else {
                    return None;
                }
            }
            let (Some(logical), Some(gateway_port), true, true) = (source, outport, ip, resident)
            else {
                return None;
            };
            let zeroes_mark = |a: &Action| matches!(a, Action::Assign { destination, source: Source::Constant(Constant::Integer { value: 0, mask: None, .. }) } if *destination == bit("reg9", 4));
            match (actions, hairpin) {
                ([only], false) => {
                    let external = keyword_address(only, "ct_snat_in_czone")?;
                    Some(Class::Compiled(vec![IrEntry::CentralizedSnat {
                        datapath: dp,
                        gateway_port: gateway_port.to_string(),
                        logical,
                        external,
                    }]))
                }
                ([mark, last], true) if zeroes_mark(mark) => {
                    keyword_address(last, "ct_snat").map(|_| Class::Compiled(Vec::new()))
                }
                _ => None,
            }
        }
        // `ip && ip4.dst == E && inport == GW` → `ct_dnat_in_czone(L);`: the DNAT.
        "lr_in_dnat" => {
            let t = Terms::of(terms)?;
            let shape = t.ip
                && t.inport.is_some()
                && t.resident.is_some()
                && t.source.is_none()
                && t.outport.is_none()
                && t.eth_destination.is_none()
                && t.loopback.is_none();
            let (Some(external), Some(gateway_port), [only], true) =
                (t.destination, t.inport, actions, shape)
            else {
                return None;
            };
            let logical = keyword_address(only, "ct_dnat_in_czone")?;
            Some(Class::Compiled(vec![IrEntry::CentralizedDnat {
                datapath: dp,
                gateway_port: gateway_port.to_string(),
                external,
                logical,
            }]))
        }
        // `ip && ip4.src == L && outport == GW` → `ct_dnat_in_czone;`: the reverse DNAT of the
        // replies, carried out by the pair (the backend fences a DNAT without its SNAT).
        "lr_out_undnat" => {
            let t = Terms::of(terms)?;
            let shape = t.ip
                && t.source.is_some()
                && t.outport.is_some()
                && t.resident.is_some()
                && t.destination.is_none()
                && t.inport.is_none();
            let bare = matches!(actions, [Action::Keyword { name, arguments: None, block: None }] if name == "ct_dnat_in_czone");
            (shape && bare).then(|| Class::Compiled(Vec::new()))
        }
        "lr_in_unsnat" => {
            let t = Terms::of(terms)?;
            let shape = t.ip
                && t.destination.is_some()
                && t.inport.is_some()
                && t.resident.is_some()
                && t.source.is_none()
                && t.outport.is_none()
                && t.eth_destination.is_none();
            let bare = |name: &str| matches!(actions, [Action::Keyword { name: keyword, arguments: None, block: None }] if keyword == name);
            let carried = match t.loopback {
                Some(false) => !t.snat_zone && bare("ct_snat_in_czone"),
                Some(true) => t.snat_zone && bare("ct_snat"),
                None => false,
            };
            (shape && carried).then(|| Class::Compiled(Vec::new()))
        }
        _ => None,
    }
}

/// Whether a `lr_in_gw_redirect` flow is the gateway port's redirect itself (`outport == GW` →
/// `outport = "cr-GW"; next;`), which the gateway port's entry carries out (the backend sends
/// the port's traffic to the chassis where `cr-GW` is active).
fn is_redirect(terms: &Terms, actions: &[Action]) -> bool {
    let only_outport = matches!(
        terms,
        Terms {
            ip: false,
            source: None,
            destination: None,
            inport: None,
            outport: Some(_),
            resident: None,
            eth_destination: None,
            arp_request_for: None,
            arp_request: false,
            loopback: None,
            snat_zone: false,
            hairpin_mark: false,
        }
    );
    only_outport
        && matches!(actions, [
            Action::Assign { destination, source: Source::Constant(Constant::String(_)) },
            last,
        ] if plain(destination, "outport") && is_next(last))
}

/// The rule of a `lr_in_gw_redirect` or `lr_out_snat` flow of a distributed NAT rule.
fn rule(dp: u32, stage: &str, terms: &Terms, actions: &[Action]) -> Option<IrEntry> {
    let (Some(logical_ip), Some(gateway_port), Some(logical_port)) =
        (terms.source, terms.outport, terms.resident)
    else {
        return None;
    };
    if terms.destination.is_some() || terms.inport.is_some() || terms.eth_destination.is_some() {
        return None;
    }
    let external_mac = assigned_mac(actions, "eth.src")?;
    let external_ip = match stage {
        // `eth.src = M; reg1 = E; next;`
        "lr_in_gw_redirect" => match actions {
            [
                _,
                Action::Assign {
                    destination,
                    source:
                        Source::Constant(Constant::Ipv4 {
                            address,
                            mask: None,
                        }),
                },
                last,
            ] if plain(destination, "reg1")
                && is_next(last)
                && !terms.ip
                && !terms.hairpin_mark =>
            {
                *address
            }
            _ => return None,
        },
        // `eth.src = M; [reg9[4] = 0;] ct_snat_in_czone(E);` (`ct_snat(E)` when hairpinned).
        _ => {
            let (last, middle) = actions.split_last()?;
            let keyword = if terms.hairpin_mark {
                "ct_snat"
            } else {
                "ct_snat_in_czone"
            };
            let zeroes_mark = |a: &Action| matches!(a, Action::Assign { destination, source: Source::Constant(Constant::Integer { value: 0, mask: None, .. }) } if *destination == bit("reg9", 4));
            let middle_ok = match middle {
                [_] => !terms.hairpin_mark,
                [_, mark] => terms.hairpin_mark && zeroes_mark(mark),
                _ => false,
            };
            if !terms.ip || !middle_ok {
                return None;
            }
            keyword_address(last, keyword)?
        }
    };
    Some(IrEntry::DistributedNat {
        datapath: dp,
        gateway_port: gateway_port.to_string(),
        logical_ip,
        external_ip,
        external_mac,
        logical_port: logical_port.to_string(),
    })
}

/// Whether a flow of `stage` is one of the parts of a distributed NAT rule its
/// [`IrEntry::DistributedNat`] carries out (see the module doc).
fn carried(stage: &str, terms: &Terms, actions: &[Action]) -> bool {
    let t = terms;
    let only = |ip: bool| t.ip == ip;
    match stage {
        // `ip && ip4.dst == E && inport == GW` → `ct_dnat_in_czone(L);`
        "lr_in_dnat" => {
            only(true)
                && t.destination.is_some()
                && t.inport.is_some()
                && t.resident.is_none()
                && t.outport.is_none()
                && t.loopback.is_none()
                && matches!(actions, [a] if keyword_address(a, "ct_dnat_in_czone").is_some())
        }
        // `ip && ip4.dst == E && inport == GW && flags.loopback == 0` → `ct_snat_in_czone;`,
        // `… && flags.loopback == 1 && flags.use_snat_zone == 1` → `ct_snat;`
        "lr_in_unsnat" => {
            let keyword = match (t.loopback, t.snat_zone) {
                (Some(false), false) => "ct_snat_in_czone",
                (Some(true), true) => "ct_snat",
                _ => return false,
            };
            only(true)
                && t.destination.is_some()
                && t.inport.is_some()
                && t.resident.is_none()
                && matches!(actions, [Action::Keyword { name, arguments: None, block: None }] if name == keyword)
        }
        // `ip && ip4.src == L && outport == GW` → `eth.src = M; ct_dnat_in_czone;`
        "lr_out_undnat" => {
            only(true)
                && t.source.is_some()
                && t.outport.is_some()
                && t.resident.is_none()
                && matches!(actions, [_, Action::Keyword { name, arguments: None, block: None }] if name == "ct_dnat_in_czone")
                && assigned_mac(actions, "eth.src").is_some()
        }
        // `eth.dst == M && inport == GW && is_chassis_resident(P)` → `xreg0[0..47] = …; next;`
        "lr_in_admission" => {
            only(false)
                && t.eth_destination.is_some()
                && t.inport.is_some()
                && t.resident.is_some()
                && matches!(actions, [Action::Assign { destination, .. }, last] if *destination == slice("xreg0", 0, 47) && is_next(last))
        }
        // `eth.dst == M && is_chassis_resident(P)` → `outport = "<switch's router port>"; output;`
        "ls_in_l2_lkup" => {
            only(false)
                && t.eth_destination.is_some()
                && t.resident.is_some()
                && t.inport.is_none()
                && matches!(actions, [Action::Assign { destination, source: Source::Constant(Constant::String(_)) }, Action::Keyword { name, arguments: None, block: None }] if plain(destination, "outport") && name == "output")
        }
        "lr_in_ip_input" => {
            let request =
                only(false) && t.arp_request && t.arp_request_for.is_some() && t.inport.is_some();
            // `… && is_chassis_resident(P)` → the ARP answer with M; without it: `drop;`
            request
                && match t.resident {
                    Some(_) => {
                        assigned_mac(actions, "eth.src").is_some()
                            && uses_keyword(actions, &["output"])
                    }
                    None => is_drop_only(actions),
                }
        }
        // `inport == GW && outport == GW && ip4.dst == E` → `drop;`
        "lr_in_arp_resolve" => {
            only(false)
                && t.inport.is_some()
                && t.inport == t.outport
                && t.destination.is_some()
                && is_drop_only(actions)
        }
        // `ip && ip4.dst == E && is_chassis_resident(P)` → `reg9[4] = 1; next;`
        "lr_out_chk_dnat_local" => {
            only(true)
                && t.destination.is_some()
                && t.resident.is_some()
                && matches!(actions, [Action::Assign { destination, source: Source::Constant(Constant::Integer { value: 1, mask: None, .. }) }, last] if *destination == bit("reg9", 4) && is_next(last))
        }
        _ => false,
    }
}

/// The address of `action` if it is keyword `name` with one IPv4 argument (`ct_snat(E)`).
fn keyword_address(action: &Action, name: &str) -> Option<Ipv4Addr> {
    match action {
        Action::Keyword {
            name: keyword,
            arguments: Some(arguments),
            block: None,
        } if keyword == name => match arguments.as_slice() {
            [
                Token::Constant(Constant::Ipv4 {
                    address,
                    mask: None,
                }),
            ] => Some(*address),
            _ => None,
        },
        _ => None,
    }
}
