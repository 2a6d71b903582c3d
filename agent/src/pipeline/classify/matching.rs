//! Small pattern helpers over parsed logical flows (fields, relations, constants, action
//! shapes) shared by the classifiers. Pure functions over the syntax trees.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::lflow::{
    ast::{Action, Expr, FieldRef, Relation, Source, Value},
    lexer::{Constant, Mask, Token},
};
use crate::pipeline::ir::{Mac, Prefix, Prefix6};

pub(super) fn conjuncts(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::And(terms) => terms.iter().flat_map(conjuncts).collect(),
        other => vec![other],
    }
}

pub(super) fn plain(field: &FieldRef, name: &str) -> bool {
    field.name == name && field.slice.is_none()
}

/// The whole field `name` (no slice).
pub(super) fn field(name: &str) -> FieldRef {
    FieldRef {
        name: name.to_string(),
        slice: None,
    }
}

pub(super) fn bit(name: &str, bit: u32) -> FieldRef {
    FieldRef {
        name: name.to_string(),
        slice: Some((bit, None)),
    }
}

pub(super) fn slice(name: &str, low: u32, high: u32) -> FieldRef {
    FieldRef {
        name: name.to_string(),
        slice: Some((low, Some(high))),
    }
}

pub(super) fn mentions(expr: &Expr, name: &str) -> bool {
    match expr {
        Expr::Field(field) | Expr::Compare { field, .. } | Expr::Range { field, .. } => {
            field.name == name
        }
        Expr::Not(inner) => mentions(inner, name),
        Expr::And(terms) | Expr::Or(terms) => terms.iter().any(|t| mentions(t, name)),
        Expr::Bool(_) | Expr::Function { .. } => false,
    }
}

/// Whether the expression tests a field of one of the `families` (`ip6` matches `ip6`, `ip6.*`
/// and `ip6_*`).
pub(super) fn mentions_family(expr: &Expr, families: &[&str]) -> bool {
    match expr {
        Expr::Field(field) | Expr::Compare { field, .. } | Expr::Range { field, .. } => {
            let name = field.name.as_str();
            families.iter().any(|family| {
                name == *family
                    || name.starts_with(&format!("{family}."))
                    || name.starts_with(&format!("{family}_"))
            })
        }
        Expr::Not(inner) => mentions_family(inner, families),
        Expr::And(terms) | Expr::Or(terms) => terms.iter().any(|t| mentions_family(t, families)),
        Expr::Bool(_) | Expr::Function { .. } => false,
    }
}

pub(super) const IPV6_FIELDS: &[&str] = &["ip6", "nd", "icmp6", "mld"];
pub(super) const IPV4_FIELDS: &[&str] = &["ip4", "arp", "icmp4", "rarp"];

/// Whether the expression tests any IPv6-only field or predicate.
pub(super) fn mentions_ipv6(expr: &Expr) -> bool {
    mentions_family(expr, IPV6_FIELDS)
}

/// Whether the expression compares a field (e.g. the `xxreg0` next hop) with IPv6 addresses.
fn compares_with_ipv6(expr: &Expr) -> bool {
    match expr {
        Expr::Compare { values, .. } => values
            .iter()
            .any(|v| matches!(v, Value::Constant(Constant::Ipv6 { .. }))),
        Expr::Not(inner) => compares_with_ipv6(inner),
        Expr::And(terms) | Expr::Or(terms) => terms.iter().any(compares_with_ipv6),
        Expr::Bool(_) | Expr::Field(_) | Expr::Range { .. } | Expr::Function { .. } => false,
    }
}

/// A match only IPv6 packets can satisfy (mixed IPv4/IPv6 rules compile for their IPv4 part).
pub(super) fn ipv6_only(terms: &[&Expr]) -> bool {
    terms
        .iter()
        .any(|t| mentions_ipv6(t) || compares_with_ipv6(t))
        && !terms.iter().any(|t| mentions_family(t, IPV4_FIELDS))
}

/// `field == values` (a single equality term) as (field, values).
pub(super) fn compare_eq(expr: &Expr) -> Option<(&FieldRef, &[Value])> {
    match expr {
        Expr::Compare {
            field,
            relation: Relation::Eq,
            values,
            ..
        } => Some((field, values)),
        _ => None,
    }
}

/// The fields of northd's ingress sanity drops: `vlan.present` and `eth.src[40]` (multicast
/// source).
pub(super) fn is_sanity_field(field: &FieldRef) -> bool {
    plain(field, "vlan.present") || field == &bit("eth.src", 40)
}

/// A single drop action.
pub(super) fn is_drop_only(actions: &[Action]) -> bool {
    matches!(actions, [Action::Keyword { name, .. }] if is_drop(name))
}

/// A bare `output;` (to the outport already chosen).
pub(super) fn is_bare_output(actions: &[Action]) -> bool {
    matches!(
        actions,
        [Action::Keyword { name, arguments: None, block: None }] if name == "output"
    )
}

/// `expr` is the bare field `name` (a predicate such as `eth.mcast`).
pub(super) fn is_field(expr: &Expr, name: &str) -> bool {
    matches!(expr, Expr::Field(f) if plain(f, name))
}

/// `field = MAC; next;` → MAC.
pub(super) fn sets_mac_then_next(actions: &[Action], field: &FieldRef) -> Option<Mac> {
    match actions {
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
        ] if destination == field && is_next(next) => Some(*address),
        _ => None,
    }
}

/// `field = function(…);`
pub(super) fn calls_into(action: &Action, field: &str, function: &str) -> bool {
    matches!(action, Action::Assign { destination, .. } if plain(destination, field))
        && calls(action, function)
}

/// One of `actions` is `left <-> right;`.
pub(super) fn exchanges(actions: &[Action], left: &str, right: &str) -> bool {
    actions.iter().any(|a| {
        matches!(a, Action::Exchange { left: l, right: r }
            if plain(l, left) && plain(r, right))
    })
}

/// One of `actions` is a keyword action (`tcp_reset {…}`, `icmp4 {…}`, …) named in `names`.
pub(super) fn uses_keyword(actions: &[Action], names: &[&str]) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::Keyword { name, .. } if names.contains(&name.as_str())))
}

pub(super) fn is_drop(name: &str) -> bool {
    name == "drop"
}

pub(super) fn is_next(action: &Action) -> bool {
    matches!(action, Action::Keyword { name, arguments: None, block: None } if name == "next")
}

/// `field = 0; next;`
pub(super) fn zeroes_then_next(actions: &[Action], field: &FieldRef) -> bool {
    let zero = |source: &Source| {
        matches!(
            source,
            Source::Constant(Constant::Integer {
                value: 0,
                mask: None,
                ..
            })
        )
    };
    matches!(actions, [Action::Assign { destination, source }, next]
        if destination == field && zero(source) && is_next(next))
}

pub(super) fn is_next_only(actions: &[Action]) -> bool {
    matches!(actions, [next] if is_next(next))
}

/// `next;`, or `ct_clear; next;`: what a stage the datapath does not compile does anyway (the
/// datapath keeps no connection state for `ct_clear` to clear).
pub(super) fn passes_on(actions: &[Action]) -> bool {
    match actions {
        [next] => is_next(next),
        [
            Action::Keyword {
                name,
                arguments: None,
                block: None,
            },
            next,
        ] => name == "ct_clear" && is_next(next),
        _ => false,
    }
}

pub(super) fn calls(action: &Action, function: &str) -> bool {
    matches!(action, Action::Assign { source: Source::Call { name, .. }, .. } if name == function)
}

pub(super) fn is_one(values: &[Value]) -> bool {
    matches!(
        values,
        [Value::Constant(Constant::Integer {
            value: 1,
            mask: None,
            ..
        })]
    )
}

pub(super) fn string_value(values: &[Value]) -> Option<&str> {
    match values {
        [Value::Constant(Constant::String(text))] => Some(text),
        _ => None,
    }
}

pub(super) fn is_zero(values: &[Value]) -> bool {
    matches!(
        values,
        [Value::Constant(Constant::Integer {
            value: 0,
            mask: None,
            ..
        })]
    )
}

pub(super) fn value_ipv4(value: &Value) -> Option<Ipv4Addr> {
    match value {
        Value::Constant(Constant::Ipv4 {
            address,
            mask: None,
        }) => Some(*address),
        _ => None,
    }
}

pub(super) fn value_mac(value: &Value) -> Option<Mac> {
    match value {
        Value::Constant(Constant::Mac {
            address,
            mask: None,
        }) => Some(*address),
        _ => None,
    }
}

pub(super) fn single_mac(values: &[Value]) -> Option<Mac> {
    match values {
        [value] => value_mac(value),
        _ => None,
    }
}

pub(super) fn compare_values<'a>(expr: &'a Expr, name: &str) -> Option<&'a [Value]> {
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

pub(super) fn compare_string<'a>(expr: &'a Expr, name: &str) -> Option<&'a str> {
    string_value(compare_values(expr, name)?)
}

pub(super) fn compare_integer(expr: &Expr, name: &str) -> Option<u128> {
    match compare_values(expr, name)? {
        [
            Value::Constant(Constant::Integer {
                value, mask: None, ..
            }),
        ] => Some(*value),
        _ => None,
    }
}

pub(super) fn compare_mac(expr: &Expr, name: &str) -> Option<Mac> {
    single_mac(compare_values(expr, name)?)
}

pub(super) fn compare_ipv4(expr: &Expr, name: &str) -> Option<Ipv4Addr> {
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

pub(super) fn compare_prefix(expr: &Expr, name: &str) -> Option<Prefix> {
    match compare_values(expr, name)? {
        [value] => ipv4_prefix(value),
        _ => None,
    }
}

/// `name == P` or `name == {P1, P2, …}` (also an expanded address set, possibly empty) → the
/// IPv4 prefixes, when every value is one.
pub(super) fn compare_prefixes(expr: &Expr, name: &str) -> Option<Vec<Prefix>> {
    compare_values(expr, name)?
        .iter()
        .map(ipv4_prefix)
        .collect()
}

fn ipv4_prefix(value: &Value) -> Option<Prefix> {
    match value {
        Value::Constant(Constant::Ipv4 {
            address,
            mask: None,
        }) => Some(Prefix {
            network: *address,
            length: 32,
        }),
        Value::Constant(Constant::Ipv4 {
            address,
            mask: Some(Mask::Prefix(length)),
        }) => Some(Prefix {
            network: *address,
            length: *length,
        }),
        _ => None,
    }
}

pub(super) fn assigned<'a>(actions: &'a [Action], name: &str) -> Option<&'a Source> {
    actions.iter().find_map(|action| match action {
        Action::Assign {
            destination,
            source,
        } if plain(destination, name) => Some(source),
        _ => None,
    })
}

/// The source assigned to exactly `field` (a slice included).
pub(super) fn assigned_to<'a>(actions: &'a [Action], field: &FieldRef) -> Option<&'a Source> {
    actions.iter().find_map(|action| match action {
        Action::Assign {
            destination,
            source,
        } if destination == field => Some(source),
        _ => None,
    })
}

/// `field == N` (a slice included) → N.
pub(super) fn compare_field_integer(expr: &Expr, field: &FieldRef) -> Option<u128> {
    match compare_eq(expr)? {
        (
            compared,
            [
                Value::Constant(Constant::Integer {
                    value, mask: None, ..
                }),
            ],
        ) if compared == field => Some(*value),
        _ => None,
    }
}

/// OVN's ECMP group id register (`REG_ECMP_GROUP_ID`) and member id register
/// (`REG_ECMP_MEMBER_ID`).
pub(super) fn ecmp_group_register() -> FieldRef {
    slice("reg8", 0, 15)
}

pub(super) fn ecmp_member_register() -> FieldRef {
    slice("reg8", 16, 31)
}

/// `reg8[0..15] = G; reg8[16..31] = select(M1, M2, …);` (unweighted) → (G, the members).
pub(super) fn ecmp_selection(actions: &[Action]) -> Option<(u16, Vec<u16>)> {
    let group = match assigned_to(actions, &ecmp_group_register())? {
        Source::Constant(Constant::Integer {
            value, mask: None, ..
        }) => u16::try_from(*value).ok()?,
        _ => return None,
    };
    let Source::Call {
        name,
        arguments: Some(arguments),
    } = assigned_to(actions, &ecmp_member_register())?
    else {
        return None;
    };
    if name != "select" {
        return None;
    }
    let mut members = Vec::new();
    for (index, token) in arguments.iter().enumerate() {
        match token {
            Token::Constant(Constant::Integer {
                value, mask: None, ..
            }) if index % 2 == 0 => members.push(u16::try_from(*value).ok()?),
            Token::Punct(",") if index % 2 == 1 => {}
            _ => return None,
        }
    }
    (!members.is_empty()).then_some((group, members))
}

pub(super) fn assigned_mac(actions: &[Action], name: &str) -> Option<Mac> {
    match assigned(actions, name)? {
        Source::Constant(Constant::Mac {
            address,
            mask: None,
        }) => Some(*address),
        _ => None,
    }
}

pub(super) fn assigned_integer(actions: &[Action], name: &str) -> Option<u128> {
    match assigned(actions, name)? {
        Source::Constant(Constant::Integer {
            value, mask: None, ..
        }) => Some(*value),
        _ => None,
    }
}

pub(super) fn assigned_string<'a>(actions: &'a [Action], name: &str) -> Option<&'a str> {
    match assigned(actions, name)? {
        Source::Constant(Constant::String(text)) => Some(text),
        _ => None,
    }
}

pub(super) fn ends_with_output(actions: &[Action]) -> bool {
    actions
        .last()
        .is_some_and(|last| is_bare_output(std::slice::from_ref(last)))
}

/// `outport = "P"; output;` → P.
pub(super) fn output_to(actions: &[Action]) -> Option<&str> {
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

pub(super) fn value_ipv6(value: &Value) -> Option<Ipv6Addr> {
    match value {
        Value::Constant(Constant::Ipv6 {
            address,
            mask: None,
        }) => Some(*address),
        _ => None,
    }
}

pub(super) fn compare_ipv6(expr: &Expr, name: &str) -> Option<Ipv6Addr> {
    match compare_values(expr, name)? {
        [value] => value_ipv6(value),
        _ => None,
    }
}

/// `name == {A, B, …}` (or a single value) as IPv6 addresses.
pub(super) fn compare_ipv6_set(expr: &Expr, name: &str) -> Option<Vec<Ipv6Addr>> {
    compare_values(expr, name)?.iter().map(value_ipv6).collect()
}

pub(super) fn compare_prefix6(expr: &Expr, name: &str) -> Option<Prefix6> {
    match compare_values(expr, name)? {
        [
            Value::Constant(Constant::Ipv6 {
                address,
                mask: None,
            }),
        ] => Some(Prefix6 {
            network: *address,
            length: 128,
        }),
        [
            Value::Constant(Constant::Ipv6 {
                address,
                mask: Some(Mask::Prefix(length)),
            }),
        ] => Some(Prefix6 {
            network: *address,
            length: *length,
        }),
        _ => None,
    }
}

/// `name = A.B.C.D;` → the address.
pub(super) fn assigned_ipv4(actions: &[Action], name: &str) -> Option<Ipv4Addr> {
    match assigned(actions, name)? {
        Source::Constant(Constant::Ipv4 {
            address,
            mask: None,
        }) => Some(*address),
        _ => None,
    }
}

pub(super) fn assigned_ipv6(actions: &[Action], name: &str) -> Option<Ipv6Addr> {
    match assigned(actions, name)? {
        Source::Constant(Constant::Ipv6 {
            address,
            mask: None,
        }) => Some(*address),
        _ => None,
    }
}

/// Whether the expression is exactly the bare predicate `name`.
/// The transport protocols a policy may match, with their IP protocol numbers.
pub(super) const L4_PROTOCOLS: [(&str, u8); 3] = [("tcp", 6), ("udp", 17), ("sctp", 132)];

/// Which port of a transport header a term matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PortSide {
    Source,
    Destination,
}

/// What a term on a transport port accepts: the IP protocol, the side, the inclusive ranges.
pub(super) type PortTerm = (u8, PortSide, Vec<(u16, u16)>);

/// A term on a transport port (`tcp.dst == 80`, `udp.src == {53, 5353}`, `1024 <= tcp.dst <=
/// 2048`, `tcp.dst >= 1024`) → the protocol, the side and the inclusive ranges it accepts.
pub(super) fn port_ranges(expr: &Expr) -> Option<PortTerm> {
    let side_of = |field: &FieldRef| {
        if field.slice.is_some() {
            return None;
        }
        let (protocol, side) = field.name.split_once('.')?;
        let protocol = L4_PROTOCOLS.iter().find(|(name, _)| *name == protocol)?.1;
        let side = match side {
            "src" => PortSide::Source,
            "dst" => PortSide::Destination,
            _ => return None,
        };
        Some((protocol, side))
    };
    let port = |constant: &Constant| match constant {
        Constant::Integer {
            value, mask: None, ..
        } => u16::try_from(*value).ok(),
        _ => None,
    };
    match expr {
        Expr::Compare {
            field,
            relation,
            values,
            ..
        } => {
            let (protocol, side) = side_of(field)?;
            let single = || match values.as_slice() {
                [Value::Constant(constant)] => port(constant),
                _ => None,
            };
            let ranges = match relation {
                Relation::Eq => values
                    .iter()
                    .map(|value| match value {
                        Value::Constant(constant) => port(constant).map(|p| (p, p)),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?,
                Relation::Ge => vec![(single()?, u16::MAX)],
                Relation::Gt => vec![(single()?.checked_add(1)?, u16::MAX)],
                Relation::Le => vec![(0, single()?)],
                Relation::Lt => vec![(0, single()?.checked_sub(1)?)],
                Relation::Ne => return None,
            };
            Some((protocol, side, ranges))
        }
        Expr::Range {
            low,
            low_relation,
            field,
            high_relation,
            high,
        } => {
            let (protocol, side) = side_of(field)?;
            let low = match low_relation {
                Relation::Le => port(low)?,
                Relation::Lt => port(low)?.checked_add(1)?,
                _ => return None,
            };
            let high = match high_relation {
                Relation::Le => port(high)?,
                Relation::Lt => port(high)?.checked_sub(1)?,
                _ => return None,
            };
            (low <= high).then(|| (protocol, side, vec![(low, high)]))
        }
        _ => None,
    }
}

pub(super) fn is_predicate(expr: &Expr, name: &str) -> bool {
    matches!(expr, Expr::Field(field) if plain(field, name))
}

/// The nested block of a single keyword action named one of `names`.
pub(super) fn only_block<'a>(
    actions: &'a [Action],
    names: &[&str],
) -> Option<(&'a str, &'a [Action])> {
    match actions {
        [
            Action::Keyword {
                name,
                block: Some(block),
                ..
            },
        ] if names.contains(&name.as_str()) => Some((name, block)),
        _ => None,
    }
}
