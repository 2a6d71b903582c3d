//! The syntax trees of OVN logical-flow matches and actions. They keep what was written (field
//! slices, masks, sets, raw arguments of the long tail of actions) so that printing and parsing
//! again gives the same tree; meaning is given by the compiler, not here.

use super::lexer::{Constant, Token};

/// A field with an optional bit slice: `reg0`, `eth.dst[40]`, `reg8[0..15]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRef {
    pub name: String,
    /// `[low]` or `[low..high]` (inclusive).
    pub slice: Option<(u32, Option<u32>)>,
}

/// A value on the right of a relation or inside a `{…}` set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Constant(Constant),
    AddressSet(String),
    PortGroup(String),
    Template(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Relation {
    #[must_use]
    pub fn symbol(self) -> &'static str {
        match self {
            Relation::Eq => "==",
            Relation::Ne => "!=",
            Relation::Lt => "<",
            Relation::Le => "<=",
            Relation::Gt => ">",
            Relation::Ge => ">=",
        }
    }

    pub(super) fn from_symbol(symbol: &str) -> Option<Self> {
        Some(match symbol {
            "==" => Relation::Eq,
            "!=" => Relation::Ne,
            "<" => Relation::Lt,
            "<=" => Relation::Le,
            ">" => Relation::Gt,
            ">=" => Relation::Ge,
            _ => return None,
        })
    }
}

/// A match expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// `1` or `0`.
    Bool(bool),
    /// A predicate or 1-bit field used bare: `ip4`, `ct.est`, `reg0[7]`.
    Field(FieldRef),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    /// `field op value` or `field op {v1, v2, …}` (`set` tells which was written).
    Compare {
        field: FieldRef,
        relation: Relation,
        values: Vec<Value>,
        set: bool,
    },
    /// `low op field op high`, e.g. `1024 <= tcp.src <= 49151`.
    Range {
        low: Constant,
        low_relation: Relation,
        field: FieldRef,
        high_relation: Relation,
        high: Constant,
    },
    /// `is_chassis_resident("port")` and other functions.
    Function {
        name: String,
        arguments: Vec<Constant>,
    },
}

/// The right-hand side of an assignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Constant(Constant),
    Field(FieldRef),
    /// `R = lookup_arp(inport, arp.spa, arp.sha);`, `reg0 = ct_snat_to_vip;` (no parentheses).
    Call {
        name: String,
        arguments: Option<Vec<Token>>,
    },
}

/// One action statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `dst = src;`
    Assign {
        destination: FieldRef,
        source: Source,
    },
    /// `a <-> b;`
    Exchange { left: FieldRef, right: FieldRef },
    /// `ip.ttl--;`
    Decrement(FieldRef),
    /// Any keyword action: `next;`, `output;`, `drop;`, `next(pipeline=egress, table=1);`,
    /// `ct_lb_mark(backends=…);`, `clone { … };`, `arp { … };`, `ct_commit { … };`, …
    /// `arguments` are the raw tokens between the parentheses; `block` the nested actions.
    Keyword {
        name: String,
        arguments: Option<Vec<Token>>,
        block: Option<Vec<Action>>,
    },
}
