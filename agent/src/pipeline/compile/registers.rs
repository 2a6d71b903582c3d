//! Which logical register bits a flow needs set to match, and which bits its actions may set,
//! so that a report of unsupported flows (`ovnbpfctl trace`) can leave out flows no packet can
//! reach: northd writes `reg0[0] == 1 → ct_next;`, `reg0[2] == 1 → ct_lb_mark;` and their kin on
//! every switch, but only a switch with stateful ACLs or load balancers has a flow that sets those
//! bits. Owns no state: reads parsed matches and actions, returns bit sets.
//!
//! The analysis errs on the side of "reachable": any assignment, exchange or keyword argument
//! that names a register counts as setting the bits it covers (a whole register when unsliced),
//! and bits set in either pipeline of a datapath count for both (more than needed: ovn-controller
//! clears the logical registers when a packet enters the egress pipeline, `physical.c`'s table
//! 34, and so before it reaches any other datapath), so only the datapath's own flows set them.

use std::collections::BTreeSet;

use crate::lflow::{
    ast::{Action, Expr, FieldRef, Relation, Source, Value},
    lexer::{Constant, Token},
};

/// One bit of a 32-bit logical register: (register number, bit).
pub(crate) type RegisterBit = (u8, u8);

/// How one logical flow uses registers.
#[derive(Debug, Default)]
pub(crate) struct RegisterUse {
    /// The flow's datapaths, kept only when it sets bits (the question asked is which bits a
    /// datapath's flows set).
    pub datapaths: Vec<u32>,
    /// The bits its match needs set ([`gates`]).
    pub gates: Vec<RegisterBit>,
    /// The bits its actions may set ([`sets`]).
    pub sets: Vec<RegisterBit>,
}

impl RegisterUse {
    /// How a flow with `match_` and `actions` on `datapaths` uses registers; `None` when it
    /// neither needs nor sets any bit.
    pub(crate) fn of(match_: &Expr, actions: &[Action], datapaths: &[u32]) -> Option<Self> {
        let gates = gates(match_);
        let sets: Vec<RegisterBit> = sets(actions).into_iter().collect();
        if gates.is_empty() && sets.is_empty() {
            return None;
        }
        let datapaths = if sets.is_empty() {
            Vec::new()
        } else {
            datapaths.to_vec()
        };
        Some(RegisterUse {
            datapaths,
            gates,
            sets,
        })
    }
}

/// The register bits `match_` requires to be 1 (its top-level conjuncts `regN[b]` and
/// `regN[b] == 1`); other conditions are not gates.
pub(crate) fn gates(match_: &Expr) -> Vec<RegisterBit> {
    let conjuncts: Vec<&Expr> = match match_ {
        Expr::And(terms) => terms.iter().collect(),
        other => vec![other],
    };
    let mut bits = Vec::new();
    for term in conjuncts {
        let field = match term {
            Expr::Field(field) => field,
            Expr::Compare {
                field,
                relation: Relation::Eq,
                values,
                ..
            } if matches!(
                values.as_slice(),
                [Value::Constant(Constant::Integer {
                    value: 1,
                    mask: None,
                    ..
                })]
            ) =>
            {
                field
            }
            _ => continue,
        };
        if let Some((low, None)) = field.slice {
            bits.extend(register_bits(&field.name, low, low));
        }
    }
    bits
}

/// The register bits `actions` may set (nested blocks included).
pub(crate) fn sets(actions: &[Action]) -> BTreeSet<RegisterBit> {
    let mut bits = BTreeSet::new();
    collect_sets(actions, &mut bits);
    bits
}

fn collect_sets(actions: &[Action], bits: &mut BTreeSet<RegisterBit>) {
    for action in actions {
        match action {
            Action::Assign {
                destination,
                source,
            } => {
                bits.extend(field_bits(destination));
                // `a = b` never sets `b`; a call's arguments may name registers it writes.
                if let Source::Call {
                    arguments: Some(tokens),
                    ..
                } = source
                {
                    bits.extend(token_bits(tokens));
                }
            }
            Action::Exchange { left, right } => {
                bits.extend(field_bits(left));
                bits.extend(field_bits(right));
            }
            Action::Decrement(field) => bits.extend(field_bits(field)),
            Action::Keyword {
                arguments, block, ..
            } => {
                if let Some(tokens) = arguments {
                    bits.extend(token_bits(tokens));
                }
                if let Some(block) = block {
                    collect_sets(block, bits);
                }
            }
        }
    }
}

/// Every register bit a field reference covers (none for fields that are not registers).
fn field_bits(field: &FieldRef) -> Vec<RegisterBit> {
    match field.slice {
        Some((low, high)) => register_bits(&field.name, low, high.unwrap_or(low)),
        None => register_bits(&field.name, 0, u32::MAX),
    }
}

/// Registers named in raw tokens (`push(reg0)`, `pop(xxreg1)`): all their bits.
fn token_bits(tokens: &[Token]) -> Vec<RegisterBit> {
    tokens
        .iter()
        .filter_map(|token| match token {
            Token::Id(name) => Some(register_bits(name, 0, u32::MAX)),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Bits `low..=high` of register `name` (`regN`: 32 bits; `xregN`: reg(2N) high word and
/// reg(2N+1) low word; `xxregN`: reg(4N)..reg(4N+3), most significant first), as bits of the
/// 32-bit registers; empty for other names.
fn register_bits(name: &str, low: u32, high: u32) -> Vec<RegisterBit> {
    let (words, first) = if let Some(n) = name.strip_prefix("xxreg") {
        (4, n.parse::<u32>().ok().map(|n| n * 4))
    } else if let Some(n) = name.strip_prefix("xreg") {
        (2, n.parse::<u32>().ok().map(|n| n * 2))
    } else if let Some(n) = name.strip_prefix("reg") {
        (1, n.parse::<u32>().ok())
    } else {
        (0, None)
    };
    let Some(first) = first else {
        return Vec::new();
    };
    let width = 32 * words;
    let high = high.min(width - 1);
    (low..=high)
        .filter_map(|bit| {
            // Bit 0 is the least significant bit of the last 32-bit word.
            let word = first + (words - 1 - bit / 32);
            Some((u8::try_from(word).ok()?, u8::try_from(bit % 32).ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lflow::{parse_actions, parse_match};

    #[test]
    fn gates_are_register_bits_required_set() {
        let gate = |m: &str| gates(&parse_match(m).unwrap());
        assert_eq!(gate("reg0[0] == 1"), vec![(0, 0)]);
        assert_eq!(gate("reg0[1] == 1 && reg0[13] == 0"), vec![(0, 1)]);
        assert_eq!(gate("ip && reg0[7]"), vec![(0, 7)]);
        // xxreg0 bit 96 is reg0's bit 0; xreg4 bit 32 is reg8's bit 0.
        assert_eq!(gate("xxreg0[96] == 1"), vec![(0, 0)]);
        assert_eq!(gate("xreg4[32]"), vec![(8, 0)]);
        // Neither a cleared bit, a wider slice nor a disjunction is a gate.
        assert!(gate("reg0[13] == 0").is_empty());
        assert!(gate("reg0[0..1] == 3").is_empty());
        assert!(gate("reg0[0] == 1 || ip6").is_empty());
        assert!(gate("ip4 && tcp").is_empty());
    }

    #[test]
    fn sets_cover_assignments_nested_blocks_and_named_registers() {
        let set = |a: &str| sets(&parse_actions(a).unwrap());
        assert_eq!(set("reg0[2] = 1; next;"), BTreeSet::from([(0, 2)]));
        assert!(set("ct_commit { ct_mark.blocked = 0; ct_label.label = reg3; }; next;").is_empty());
        assert_eq!(
            set("ct_commit { reg0[9] = 1; }; next;"),
            BTreeSet::from([(0, 9)])
        );
        assert_eq!(set("reg8[0..15] = 0; next;").len(), 16);
        assert_eq!(set("reg1 = 10.0.0.1; next;").len(), 32);
        assert_eq!(set("xxreg1 = ip6.dst; next;").len(), 128);
        assert!(set("xxreg1 = ip6.dst; next;").contains(&(7, 31)));
        assert_eq!(set("reg2 <-> reg3; next;").len(), 64);
        assert_eq!(set("push(reg0); next;").len(), 32);
        assert!(set("eth.dst = 0a:00:00:00:00:01; next;").is_empty());
    }
}
