//! Classifies one logical flow, keyed by its stage name and parsed content (never by table
//! numbers or priorities alone), into IR entries (compiled), nothing (neutral: it does not change
//! forwarding, e.g. a priority-0 `next;`), or unsupported with a reason. A flow whose shape is not
//! recognised is unsupported, never guessed at. One classifier per stage, by stage family:
//! `switch` (`ls_*`), `acl` and `lb` (the switch's stateful stages), `router` (`lr_*`), `ipv6` (IPv6-only flows of either, consulted
//! first); `matching` names the AST patterns they share; `verdict` is what they return.

mod acl;
mod acl_match;
mod ipv6;
mod lb;
pub(super) mod matching;
mod nat;
mod policy;
mod router;
mod router_advert;
mod router_lb;
mod switch;
#[cfg(test)]
mod tests;
mod verdict;

use matching::*;
use verdict::not_compiled;
pub use verdict::{
    Class, acl_fails_closed, is_acl_stage, keeps_address_sets, unsupported_stops_forwarding,
};

/// The duty's old path; see [`crate::pipeline::ir::MAC_LEARNING_NOT_DONE`].
pub use crate::pipeline::ir::MAC_LEARNING_NOT_DONE;

use crate::lflow::{
    ast::{Action, Expr},
    lexer::Constant,
};

/// The parsed flow being classified.
pub struct Flow<'a> {
    pub datapath: u32,
    pub stage: &'a str,
    pub priority: i64,
    pub match_: &'a Expr,
    pub actions: &'a [Action],
}

/// A stage's classifier: (datapath, priority, conjuncts of the match, actions) → verdict.
type Classifier = fn(u32, i64, &[&Expr], &[Action]) -> Class;

/// The compiled stages and their classifiers (`*_ecmp` stages are matched by suffix).
const STAGES: &[(&str, Classifier)] = &[
    ("ls_in_check_port_sec", switch::check_port_security),
    ("ls_in_apply_port_sec", switch::apply_port_security_in),
    ("ls_out_apply_port_sec", switch::apply_port_security_out),
    ("ls_out_check_port_sec", switch::check_out_port_security),
    ("ls_in_arp_rsp", switch::arp_responder),
    ("ls_in_l2_lkup", switch::l2_lookup),
    ("ls_in_l2_unknown", switch::l2_unknown),
    ("ls_in_pre_acl", acl::pre_acl_in),
    ("ls_out_pre_acl", acl::pre_acl_out),
    ("ls_in_pre_lb", acl::pre_lb_in),
    ("ls_out_pre_lb", acl::pre_lb_out),
    ("ls_in_pre_stateful", acl::pre_stateful),
    ("ls_out_pre_stateful", acl::pre_stateful),
    ("ls_in_acl_hint", acl::acl_hint),
    ("ls_out_acl_hint", acl::acl_hint),
    ("ls_in_acl", acl::acl_in),
    ("ls_in_acl_after_lb", acl::acl_after_lb),
    ("ls_out_acl", acl::acl_out),
    ("ls_in_stateful", acl::stateful_in),
    ("ls_in_lb", lb::lb),
    ("ls_in_lb_aff_check", lb::affinity),
    ("ls_in_lb_aff_learn", lb::affinity),
    ("ls_in_pre_hairpin", lb::hairpin),
    ("ls_in_nat_hairpin", lb::hairpin),
    ("ls_in_hairpin", lb::hairpin),
    ("ls_out_stateful", acl::stateful_out),
    ("lr_in_admission", router::admission),
    ("lr_in_ip_routing", router::route),
    ("lr_in_arp_resolve", router::neighbour),
    ("lr_in_ip_input", router::router_input),
    ("lr_in_lookup_neighbor", router::neighbour_learning),
    ("lr_in_learn_neighbor", router::neighbour_learning),
    ("lr_in_ip_routing_pre", router::routing_pre),
    ("lr_in_policy", policy::policy),
    ("lr_in_policy_ecmp", policy::policy_ecmp),
    ("lr_in_ip_routing_ecmp", policy::route_ecmp),
    ("lr_in_arp_request", router::arp_request),
    ("lr_out_delivery", router::delivery),
    ("lr_out_chk_dnat_local", router::chk_dnat_local),
];

/// Whether only IPv6 packets can match `match_` (it names IPv6 and no IPv4 field).
#[must_use]
pub fn matches_only_ipv6(match_: &Expr) -> bool {
    ipv6_only(&conjuncts(match_))
}

/// The ports `match_` pins `inport` or `outport` to (its conjuncts `inport == "p"`,
/// `outport == "p"`): the flow applies only to packets entering or leaving through them.
#[must_use]
pub fn pinned_ports(match_: &Expr) -> Vec<&str> {
    conjuncts(match_)
        .into_iter()
        .filter_map(|term| {
            compare_string(term, "inport").or_else(|| compare_string(term, "outport"))
        })
        .collect()
}

/// The ports `match_` requires to reside on the chassis (its conjuncts
/// `is_chassis_resident("p")`).
#[must_use]
pub fn resident_ports(match_: &Expr) -> Vec<&str> {
    conjuncts(match_)
        .into_iter()
        .filter_map(|term| match term {
            Expr::Function { name, arguments } if name == "is_chassis_resident" => {
                match arguments.as_slice() {
                    [Constant::String(port)] => Some(port.as_str()),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect()
}

/// Whether a router flow of `stage` translates addresses through conntrack (`ct_snat`,
/// `ct_dnat`, their `_in_czone` forms, `ct_lb`, `ct_lb_mark`): where it applies only where a
/// chassisredirect port resides, a centralized NAT rule of that gateway.
#[must_use]
pub fn translates_with_conntrack(stage: &str, actions: &[crate::lflow::ast::Action]) -> bool {
    stage.starts_with("lr_")
        && matching::uses_keyword(
            actions,
            &[
                "ct_snat",
                "ct_dnat",
                "ct_snat_in_czone",
                "ct_dnat_in_czone",
                "ct_lb",
                "ct_lb_mark",
            ],
        )
}

/// Whether `match_` is an ARP request for one address and nothing else
/// (`arp.op == 1 && arp.tpa == A`): in `lr_in_ip_input` of a router with a gateway port,
/// northd's answer for a NAT external address on every port of the router.
#[must_use]
pub fn is_bare_arp_request(match_: &Expr) -> bool {
    match conjuncts(match_).as_slice() {
        [first, second] => {
            let op = |t: &Expr| compare_integer(t, "arp.op") == Some(1);
            let target = |t: &Expr| compare_ipv4(t, "arp.tpa").is_some();
            (op(first) && target(second)) || (op(second) && target(first))
        }
        _ => false,
    }
}

/// Whether `match_` tests the IPv4 destination and nothing else (`ip4.dst == {A, …}`): in
/// `lr_in_arp_resolve` of a router with a gateway port, northd's drop of routed traffic to the
/// gateway's NAT addresses.
#[must_use]
pub fn is_bare_destination(match_: &Expr) -> bool {
    matches!(conjuncts(match_).as_slice(), [term] if compare_eq(term).is_some_and(|(f, _)| plain(f, "ip4.dst")))
}

/// Classifies `flow`, which applies only where chassisredirect port `redirect` is active: a
/// router load balancer's VIP ([`IrEntry::RouterLoadBalancer`]) and a centralized SNAT rule's
/// flows are carried ([`IrEntry::CentralizedSnat`]); the others are neutral (what
/// the gateway chassis does for the port is the backend's; see `compile/gateway.rs`).
#[must_use]
pub fn classify_resident(flow: &Flow<'_>, redirect: &str) -> Class {
    let terms = conjuncts(flow.match_);
    let dp = flow.datapath;
    router_lb::resident(dp, flow.stage, &terms, flow.actions, redirect)
        .or_else(|| nat::centralized(dp, flow.stage, &terms, flow.actions))
        .unwrap_or(Class::Neutral)
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
    let classifier = STAGES
        .iter()
        .find(|(stage, _)| *stage == flow.stage)
        .map(|(_, classifier)| *classifier)
        .or_else(|| {
            flow.stage
                .ends_with("_ecmp")
                .then_some(policy::ecmp as Classifier)
        });
    let class = match classifier {
        Some(classifier) => classifier(dp, flow.priority, &terms, flow.actions),
        // A stage the datapath does not compile passes every packet on: a flow of it that only
        // says `next;` (or `ct_clear; next;`: no connection state is kept) agrees with that,
        // whatever it matches (the others stay reported). Conntrack in the datapath will give
        // these stages classifiers of their own.
        None if passes_on(flow.actions) => Class::Neutral,
        None => not_compiled(flow.stage),
    };
    // A distributed NAT rule's flows (in stages whose other flows their classifiers know).
    match class {
        Class::Unsupported(_) => nat::classify(dp, flow.stage, &terms, flow.actions)
            .or_else(|| router_lb::carried(flow.stage, &terms, flow.actions))
            .unwrap_or(class),
        class => class,
    }
}
