//! The ACL and conntrack stages of a switch (northd 23.03's shapes): which packets go through
//! conntrack (`ls_*_pre_acl`, `ls_*_pre_lb`, `ls_*_pre_stateful`), northd's hint registers
//! (`ls_*_acl_hint`: only the standard table is accepted, [`ovnbpf_common::ct::hints`]), the
//! rules (`ls_in_acl`, `ls_in_acl_after_lb`, `ls_out_acl`) and the commit (`ls_*_stateful`).
//!
//! A rule flow is split into its conditions on the conntrack state (`ct.*`, `ct_mark.blocked`,
//! the hint registers), folded into the set of states it applies in, and its conditions on the
//! packet, turned into clauses (ports and port groups, addresses and address sets kept by name,
//! transport protocol and ports, ICMP types). A flow with anything else is unsupported with the
//! term named; the compiler makes its switch fail closed.

use ovnbpf_common::ct;

use super::{
    acl_match::packet_match,
    matching::*,
    verdict::{Class, unsupported},
};
use crate::{
    lflow::{
        ast::{Action, Expr, FieldRef, Relation, Source},
        lexer::{Constant, Token},
    },
    pipeline::ir::{AclAction, AclLog, AclRule, AclStage, IrEntry, States, TrackingStage},
};

/// The register bit that sends a packet to conntrack, per tracking stage.
fn tracking_bit(stage: TrackingStage) -> u32 {
    match stage {
        TrackingStage::PreAcl => 0,
        TrackingStage::PreLb => 2,
    }
}

pub(super) fn pre_acl_in(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    pre_tracking(dp, false, TrackingStage::PreAcl, terms, actions)
}

pub(super) fn pre_acl_out(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    pre_tracking(dp, true, TrackingStage::PreAcl, terms, actions)
}

pub(super) fn pre_lb_in(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    pre_tracking(dp, false, TrackingStage::PreLb, terms, actions)
}

pub(super) fn pre_lb_out(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    pre_tracking(dp, true, TrackingStage::PreLb, terms, actions)
}

/// `ls_*_pre_acl`, `ls_*_pre_lb`: `ip → reg0[b] = 1; next;` (track), the flows that skip it
/// (`next;`, `ct_clear; next;`) and `allow-stateless` filters (`reg0[16] = 1; next;`).
fn pre_tracking(
    dp: u32,
    egress: bool,
    stage: TrackingStage,
    terms: &[&Expr],
    actions: &[Action],
) -> Class {
    if let [term] = terms
        && is_predicate(term, "ip")
        && sets_bits_then_next(actions, &[tracking_bit(stage)])
    {
        return Class::Compiled(vec![IrEntry::AclTracking {
            datapath: dp,
            egress,
            stage,
        }]);
    }
    if stage == TrackingStage::PreLb
        && let [term] = terms
        && is_register_bit(term, 16)
        && is_next_only(actions)
    {
        return Class::Compiled(vec![IrEntry::StatelessSkipsLb {
            datapath: dp,
            egress,
        }]);
    }
    let stateless = stage == TrackingStage::PreAcl && sets_bits_then_next(actions, &[16]);
    if !stateless && !passes_on(actions) {
        return unsupported("conntrack pre-stage action (only tracking, skipping, stateless)");
    }
    match packet_match(dp, terms) {
        Ok(condition) => Class::Compiled(vec![IrEntry::AclTrackingBypass {
            datapath: dp,
            egress,
            stage,
            condition,
            stateless,
        }]),
        Err(reason) => unsupported(reason),
    }
}

/// `ls_*_pre_stateful`: `reg0[0] == 1 → ct_next;` and `reg0[2] == 1 → ct_lb_mark;` send what
/// the pre-stages chose to conntrack (which the tracking entries already say). A load
/// balancer's VIP flow (`ct_lb_mark` after setting the VIP's registers) is the load-balancer
/// stage's (see [`super::lb`]).
pub(super) fn pre_stateful(_: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    let keyword = |names: &[&str]| {
        matches!(actions, [Action::Keyword { name, arguments: None, block: None }]
            if names.contains(&name.as_str()))
    };
    match terms {
        [term] if is_register_bit(term, 0) && keyword(&["ct_next"]) => Class::Neutral,
        [term] if is_register_bit(term, 2) && keyword(&["ct_lb_mark", "ct_lb"]) => Class::Neutral,
        [term, ..] if is_register_bit(term, 2) && super::lb::is_vip_conntrack(terms, actions) => {
            Class::Neutral
        }
        _ => unsupported("load balancing is not in the datapath yet"),
    }
}

/// northd 23.03's `ls_*_acl_hint` flows, highest priority first: (priority, the states the
/// match holds in, the hint bits its actions set). [`ct::hints`] is the stage they make.
/// A hint flow: the states its match holds in, and the hint bits it sets.
type HintFlow = (fn(u8) -> bool, &'static [u32]);

fn standard_hint(priority: i64) -> Option<HintFlow> {
    fn has(state: u8, bit: u8) -> bool {
        state & bit != 0
    }
    Some(match priority {
        7 => (|s| has(s, ct::NEW) && !has(s, ct::ESTABLISHED), &[7, 9]),
        6 => (
            |s| {
                !has(s, ct::NEW)
                    && has(s, ct::ESTABLISHED)
                    && !has(s, ct::REPLY)
                    && has(s, ct::BLOCKED)
            },
            &[7, 9],
        ),
        5 => (|s| !has(s, ct::TRACKED), &[8, 9]),
        4 => (
            |s| {
                !has(s, ct::NEW)
                    && has(s, ct::ESTABLISHED)
                    && !has(s, ct::REPLY)
                    && !has(s, ct::BLOCKED)
            },
            &[8, 10],
        ),
        3 => (|s| !has(s, ct::ESTABLISHED), &[9]),
        2 => (|s| has(s, ct::ESTABLISHED) && has(s, ct::BLOCKED), &[9]),
        1 => (|s| has(s, ct::ESTABLISHED) && !has(s, ct::BLOCKED), &[10]),
        _ => return None,
    })
}

/// `ls_*_acl_hint`: neutral when the flow is northd's standard one at its priority (the rules'
/// conditions on the hints are folded with [`ct::hints`]), unsupported otherwise.
pub(super) fn acl_hint(_: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    let standard = standard_hint(priority).is_some_and(|(holds, bits)| {
        let states = state_set(terms, false);
        let expected = (0..ct::STATE_COUNT as u8)
            .filter(|s| holds(*s))
            .fold(States::default(), States::with);
        states == Some(expected) && sets_bits_then_next(actions, bits)
    });
    if standard {
        Class::Neutral
    } else {
        unsupported("ACL hint flow that is not northd 23.03's")
    }
}

pub(super) fn acl_in(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    acl_rule(dp, AclStage::Ingress, priority, terms, actions)
}

pub(super) fn acl_after_lb(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    acl_rule(dp, AclStage::IngressAfterLb, priority, terms, actions)
}

pub(super) fn acl_out(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    acl_rule(dp, AclStage::Egress, priority, terms, actions)
}

/// One ACL-stage flow → an [`AclRule`] (the name and `stage-hint` are the compiler's to add).
fn acl_rule(dp: u32, stage: AclStage, priority: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    let Ok(priority) = u16::try_from(priority) else {
        return unsupported("ACL flow priority out of range");
    };
    let mut after_related = false;
    let mut state_terms = Vec::new();
    let mut packet_terms = Vec::new();
    for term in terms {
        if is_register_bit(term, 17) {
            after_related = true;
        } else if state_value(term, 0).is_some() {
            state_terms.push(*term);
        } else {
            packet_terms.push(*term);
        }
    }
    let Some(states) = state_set(&state_terms, true) else {
        return unsupported("ACL flow condition on the connection state");
    };
    let condition = match packet_match(dp, &packet_terms) {
        Ok(condition) => condition,
        Err(reason) => return unsupported(reason),
    };
    let (action, log) = match acl_action(actions) {
        Ok(action) => action,
        Err(reason) => return unsupported(reason),
    };
    Class::Compiled(vec![IrEntry::Acl {
        datapath: dp,
        rule: Box::new(AclRule {
            stage,
            priority,
            states,
            after_related,
            condition,
            action,
            log,
            acl: None,
        }),
    }])
}

/// `ls_*_stateful`: `reg0[1] == 1 && reg0[13] == 0|1 → ct_commit { ct_mark.blocked = 0; … };
/// next;` (the label variant's `ct_label.label` is not kept: only logging of related traffic
/// reads it).
pub(super) fn stateful_in(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    stateful(dp, false, terms, actions)
}

pub(super) fn stateful_out(dp: u32, _: i64, terms: &[&Expr], actions: &[Action]) -> Class {
    stateful(dp, true, terms, actions)
}

fn stateful(dp: u32, egress: bool, terms: &[&Expr], actions: &[Action]) -> Class {
    let commits = matches!(terms, [commit, label] if is_register_bit(commit, 1)
        && compare_field_integer(label, &bit("reg0", 13)).is_some());
    let unblocks = match actions {
        [
            Action::Keyword {
                name,
                block: Some(block),
                ..
            },
            next,
        ] if name == "ct_commit" && is_next(next) => block.iter().all(|action| match action {
            Action::Assign {
                destination,
                source: Source::Constant(Constant::Integer { value: 0, .. }),
            } => is_blocked_field(destination),
            Action::Assign { destination, .. } => plain(destination, "ct_label.label"),
            _ => false,
        }),
        _ => false,
    };
    if commits && unblocks {
        Class::Compiled(vec![IrEntry::AclCommit {
            datapath: dp,
            egress,
        }])
    } else {
        unsupported("conntrack commit that is not northd 23.03's")
    }
}

/// `reg0[b] == 1` or bare `reg0[b]`.
fn is_register_bit(term: &Expr, bit_number: u32) -> bool {
    let wanted = bit("reg0", bit_number);
    match term {
        Expr::Field(field) => *field == wanted,
        Expr::Compare {
            field,
            relation: Relation::Eq,
            values,
            ..
        } => *field == wanted && is_one(values),
        _ => false,
    }
}

/// `reg0[b1] = 1; reg0[b2] = 1; …; next;` setting exactly `bits`, in any order.
fn sets_bits_then_next(actions: &[Action], bits: &[u32]) -> bool {
    let Some((next, assignments)) = actions.split_last() else {
        return false;
    };
    let mut set: Vec<u32> = Vec::new();
    for action in assignments {
        match action {
            Action::Assign {
                destination,
                source:
                    Source::Constant(Constant::Integer {
                        value: 1,
                        mask: None,
                        ..
                    }),
            } if destination.name == "reg0" => match destination.slice {
                Some((low, None)) => set.push(low),
                _ => return false,
            },
            _ => return false,
        }
    }
    set.sort_unstable();
    let mut wanted = bits.to_vec();
    wanted.sort_unstable();
    is_next(next) && set == wanted
}

fn is_blocked_field(field: &FieldRef) -> bool {
    plain(field, "ct_mark.blocked") || plain(field, "ct_label.blocked")
}

/// The value of a condition on the connection state (`ct.*`, `ct_mark.blocked`, the hint
/// registers of `state`), or `None` when it also tests the packet.
fn state_value(expr: &Expr, state: u8) -> Option<bool> {
    let flag = |name: &str| -> Option<bool> {
        let bit = match name {
            "ct.trk" => ct::TRACKED,
            "ct.new" => ct::NEW,
            "ct.est" => ct::ESTABLISHED,
            "ct.rel" => ct::RELATED,
            "ct.rpl" => ct::REPLY,
            "ct.inv" => ct::INVALID,
            "ct_mark.blocked" | "ct_label.blocked" => ct::BLOCKED,
            _ => return None,
        };
        Some(state & bit != 0)
    };
    let field_value = |field: &FieldRef| -> Option<bool> {
        match field.slice {
            None => flag(&field.name),
            Some((hint @ 7..=10, None)) if field.name == "reg0" => {
                Some(ct::hints(state) & (1 << hint) != 0)
            }
            _ => None,
        }
    };
    match expr {
        Expr::Bool(value) => Some(*value),
        Expr::Field(field) => field_value(field),
        Expr::Not(inner) => state_value(inner, state).map(|v| !v),
        Expr::And(terms) => terms
            .iter()
            .map(|t| state_value(t, state))
            .try_fold(true, |all, v| Some(all && v?)),
        Expr::Or(terms) => terms
            .iter()
            .map(|t| state_value(t, state))
            .try_fold(false, |any, v| Some(any || v?)),
        Expr::Compare {
            field,
            relation,
            values,
            ..
        } => {
            let value = field_value(field)?;
            let wanted = if is_one(values) {
                true
            } else if is_zero(values) {
                false
            } else {
                return None;
            };
            match relation {
                Relation::Eq => Some(value == wanted),
                Relation::Ne => Some(value != wanted),
                _ => None,
            }
        }
        Expr::Range { .. } | Expr::Function { .. } => None,
    }
}

/// The states in which all `terms` hold (every state for none); `None` when a term is not a
/// condition on the state. `with_hints`: the hint registers may be read.
fn state_set(terms: &[&Expr], with_hints: bool) -> Option<States> {
    let mut states = States::default();
    for state in 0..ct::STATE_COUNT as u8 {
        let mut holds = true;
        for term in terms {
            if !with_hints && mentions(term, "reg0") {
                return None;
            }
            holds &= state_value(term, state)?;
        }
        if holds {
            states = states.with(state);
        }
    }
    Some(states)
}

/// `log(name=…, severity=…, verdict=…, meter=…)`'s arguments.
fn log_of(arguments: Option<&[Token]>) -> AclLog {
    let mut log = AclLog {
        name: None,
        severity: None,
        verdict: String::new(),
    };
    let tokens = arguments.unwrap_or_default();
    for window in tokens.windows(3) {
        let [Token::Id(key), Token::Punct("="), value] = window else {
            continue;
        };
        let value = match value {
            Token::Id(text) | Token::Constant(Constant::String(text)) => text.clone(),
            _ => continue,
        };
        match key.as_str() {
            "name" => log.name = Some(value),
            "severity" => log.severity = Some(value),
            "verdict" => log.verdict = value,
            _ => {}
        }
    }
    log
}

/// An ACL flow's actions → its verdict and log.
fn acl_action(actions: &[Action]) -> Result<(AclAction, Option<AclLog>), String> {
    let mut log = None;
    let (mut commit, mut related, mut block) = (false, false, false);
    let mut verdict = None;
    for action in actions {
        if verdict.is_some() {
            return Err("ACL flow with actions after its verdict".into());
        }
        match action {
            Action::Keyword {
                name, arguments, ..
            } if name == "log" => log = Some(log_of(arguments.as_deref())),
            Action::Assign {
                destination,
                source,
            } if destination.name == "reg0" || plain(destination, "reg3") => {
                let one = matches!(source, Source::Constant(Constant::Integer { value: 1, .. }));
                match destination.slice {
                    Some((1, None)) if one => commit = true,
                    Some((17, None)) if one => related = true,
                    // The label (reg0[13], reg3), hint bits cleared for later stages, and
                    // `reg0 = 0` before a reject do not change the verdict.
                    Some((9 | 10 | 13, None)) => {}
                    None => {}
                    _ => return Err(format!("ACL flow sets {}", destination.name)),
                }
            }
            Action::Keyword {
                name,
                block: Some(inner),
                ..
            } if name == "ct_commit" => {
                let blocks = inner.iter().all(|a| {
                    matches!(a, Action::Assign { destination, source: Source::Constant(Constant::Integer { value: 1, .. }) }
                        if is_blocked_field(destination))
                });
                if !blocks || inner.is_empty() {
                    return Err("ACL flow commits other conntrack marks".into());
                }
                block = true;
            }
            Action::Keyword {
                name,
                arguments: None,
                block: None,
            } if name == "ct_commit" => commit = true,
            Action::Keyword {
                name,
                arguments: None,
                block: None,
            } if name == "next" || name == "ct_commit_nat" => {
                verdict = Some(AclAction::Allow { commit, related })
            }
            Action::Keyword {
                name,
                arguments: None,
                block: None,
            } if is_drop(name) => verdict = Some(AclAction::Drop { block }),
            Action::Keyword {
                name,
                block: Some(_),
                ..
            } if name == "reject" => verdict = Some(AclAction::Reject { block }),
            other => return Err(format!("ACL flow action {other:?}")),
        }
    }
    // No verdict: northd's `/* drop */` (an empty action list drops).
    Ok((verdict.unwrap_or(AclAction::Drop { block }), log))
}

#[cfg(test)]
#[path = "acl_tests.rs"]
mod tests;
