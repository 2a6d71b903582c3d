//! An ACL flow's conditions on the packet → [`AclMatch`] clauses (disjunctive normal form, at
//! most [`MAX_CLAUSES`]): ports and port groups (`@name` → the SB group `<datapath key>_name`),
//! the network family, IPv4 addresses and address sets (kept by name), transport protocol and
//! port ranges, ICMP types, `eth.mcast` and single MACs. Any other term is an error naming it.
//! Pure functions over the syntax tree.

use super::matching::{PortSide, port_ranges, value_mac};
use crate::{
    lflow::{
        ast::{Expr, Relation, Value},
        lexer::{Constant, Mask},
    },
    pipeline::ir::{
        AclClause, AclFamily, AclMatch, AddressTerm, AddressValue, Mac, PortRef, Prefix,
    },
};

/// Clauses one flow may expand to.
const MAX_CLAUSES: usize = 64;

/// The conditions on the packet → clauses (disjunctive normal form).
pub(super) fn packet_match(dp: u32, terms: &[&Expr]) -> Result<AclMatch, String> {
    let mut clauses = vec![AclClause::default()];
    for term in terms {
        let alternatives = disjuncts(term)?;
        let mut next = Vec::new();
        for clause in &clauses {
            for alternative in &alternatives {
                let mut extended = clause.clone();
                let mut satisfiable = true;
                for atom in alternative {
                    satisfiable &= add_atom(dp, &mut extended, atom)?;
                }
                if satisfiable {
                    next.push(extended);
                }
            }
        }
        if next.len() > MAX_CLAUSES {
            return Err(format!("ACL match with over {MAX_CLAUSES} alternatives"));
        }
        clauses = next;
    }
    Ok(AclMatch(clauses))
}

/// `expr` as alternatives, each a conjunction of atoms.
fn disjuncts(expr: &Expr) -> Result<Vec<Vec<&Expr>>, String> {
    Ok(match expr {
        Expr::Or(terms) => {
            let mut all = Vec::new();
            for term in terms {
                all.extend(disjuncts(term)?);
            }
            all
        }
        Expr::And(terms) => {
            let mut product = vec![Vec::new()];
            for term in terms {
                let alternatives = disjuncts(term)?;
                let mut next = Vec::new();
                for partial in &product {
                    for alternative in &alternatives {
                        let mut joined: Vec<&Expr> = partial.clone();
                        joined.extend(alternative.iter().copied());
                        next.push(joined);
                    }
                }
                if next.len() > MAX_CLAUSES {
                    return Err(format!("ACL match with over {MAX_CLAUSES} alternatives"));
                }
                product = next;
            }
            product
        }
        other => vec![vec![other]],
    })
}

/// Narrows `clause` by one atom; `false` when the clause can no longer match.
fn add_atom(dp: u32, clause: &mut AclClause, atom: &Expr) -> Result<bool, String> {
    let not_compiled = || Err(format!("ACL match term {atom:?} is not compiled"));
    match atom {
        Expr::Bool(value) => Ok(*value),
        Expr::Field(field) if field.slice.is_none() => match field.name.as_str() {
            "ip" => Ok(narrow_family(clause, AclFamily::Ip)),
            "ip4" => Ok(narrow_family(clause, AclFamily::Ipv4)),
            "ip6" => Ok(narrow_family(clause, AclFamily::Ipv6)),
            "eth.mcast" => {
                clause.eth_multicast = true;
                Ok(true)
            }
            "tcp" => Ok(narrow_protocol(clause, 6, AclFamily::Ip)),
            "udp" => Ok(narrow_protocol(clause, 17, AclFamily::Ip)),
            "sctp" => Ok(narrow_protocol(clause, 132, AclFamily::Ip)),
            "icmp4" => Ok(narrow_protocol(clause, 1, AclFamily::Ipv4)),
            "icmp6" => Ok(narrow_protocol(clause, 58, AclFamily::Ipv6)),
            // Neighbour discovery and multicast listener messages by ICMPv6 type (their hop
            // limit and code conditions are not checked).
            "nd" => Ok(narrow_icmp6(clause, &[135, 136])),
            "nd_ns" => Ok(narrow_icmp6(clause, &[135])),
            "nd_na" => Ok(narrow_icmp6(clause, &[136])),
            "nd_rs" => Ok(narrow_icmp6(clause, &[133])),
            "nd_ra" => Ok(narrow_icmp6(clause, &[134])),
            "mldv1" => Ok(narrow_icmp6(clause, &[130, 131, 132])),
            "mldv2" => Ok(narrow_icmp6(clause, &[143])),
            _ => not_compiled(),
        },
        Expr::Compare {
            field,
            relation,
            values,
            ..
        } if field.slice.is_none() => {
            let negated = match relation {
                Relation::Eq => false,
                Relation::Ne => true,
                _ => return port_term(clause, atom).map_or_else(not_compiled, Ok),
            };
            match field.name.as_str() {
                "inport" | "outport" if !negated => {
                    let [value] = values.as_slice() else {
                        return not_compiled();
                    };
                    let port = match value {
                        Value::Constant(Constant::String(name)) => PortRef::Port(name.clone()),
                        Value::PortGroup(name) => PortRef::Group(format!("{dp}_{name}")),
                        _ => return not_compiled(),
                    };
                    let slot = if field.name == "inport" {
                        &mut clause.inport
                    } else {
                        &mut clause.outport
                    };
                    if slot.as_ref().is_some_and(|old| *old != port) {
                        return not_compiled();
                    }
                    *slot = Some(port);
                    Ok(true)
                }
                "ip4.src" | "ip4.dst" => {
                    let values = values.iter().map(address_value).collect::<Option<Vec<_>>>();
                    let Some(values) = values else {
                        return not_compiled();
                    };
                    let term = AddressTerm { negated, values };
                    let ok = narrow_family(clause, AclFamily::Ipv4);
                    if field.name == "ip4.src" {
                        clause.source.push(term);
                    } else {
                        clause.destination.push(term);
                    }
                    Ok(ok)
                }
                "eth.src" | "eth.dst" if !negated => {
                    let macs = values.iter().map(value_mac).collect::<Option<Vec<Mac>>>();
                    let slot = if field.name == "eth.src" {
                        &mut clause.eth_source
                    } else {
                        &mut clause.eth_destination
                    };
                    match (macs.as_deref(), &slot) {
                        (Some([mac]), None) => {
                            *slot = Some(*mac);
                            Ok(true)
                        }
                        _ => not_compiled(),
                    }
                }
                "icmp4.type" | "icmp6.type" if !negated => {
                    let types = values
                        .iter()
                        .map(|v| match v {
                            Value::Constant(Constant::Integer {
                                value, mask: None, ..
                            }) => u8::try_from(*value).ok(),
                            _ => None,
                        })
                        .collect::<Option<Vec<u8>>>();
                    let Some(types) = types else {
                        return not_compiled();
                    };
                    let (protocol, family) = if field.name == "icmp4.type" {
                        (1, AclFamily::Ipv4)
                    } else {
                        (58, AclFamily::Ipv6)
                    };
                    Ok(narrow_protocol(clause, protocol, family) && narrow_types(clause, &types))
                }
                _ => port_term(clause, atom).map_or_else(not_compiled, Ok),
            }
        }
        Expr::Range { .. } => port_term(clause, atom).map_or_else(not_compiled, Ok),
        _ => not_compiled(),
    }
}

/// A transport port term; `None` when `atom` is not one (or conflicts with a port condition
/// already there).
fn port_term(clause: &mut AclClause, atom: &Expr) -> Option<bool> {
    let (protocol, side, ranges) = port_ranges(atom)?;
    let slot = match side {
        PortSide::Source => &mut clause.source_ports,
        PortSide::Destination => &mut clause.destination_ports,
    };
    if slot.is_some() {
        return None;
    }
    *slot = Some(ranges);
    Some(narrow_protocol(clause, protocol, AclFamily::Ip))
}

fn narrow_family(clause: &mut AclClause, family: AclFamily) -> bool {
    use AclFamily::{Any, Ip};
    let narrowed = match (clause.family, family) {
        (Any, other) | (other, Any) => Some(other),
        (Ip, other) | (other, Ip) => Some(other),
        (a, b) if a == b => Some(a),
        _ => None,
    };
    match narrowed {
        Some(family) => {
            clause.family = family;
            true
        }
        None => false,
    }
}

fn narrow_protocol(clause: &mut AclClause, protocol: u8, family: AclFamily) -> bool {
    if clause.protocol.is_some_and(|p| p != protocol) {
        return false;
    }
    clause.protocol = Some(protocol);
    narrow_family(clause, family)
}

fn narrow_types(clause: &mut AclClause, types: &[u8]) -> bool {
    let kept: Vec<u8> = match &clause.icmp_types {
        Some(old) => old.iter().copied().filter(|t| types.contains(t)).collect(),
        None => types.to_vec(),
    };
    let satisfiable = !kept.is_empty();
    clause.icmp_types = Some(kept);
    satisfiable
}

fn narrow_icmp6(clause: &mut AclClause, types: &[u8]) -> bool {
    narrow_protocol(clause, 58, AclFamily::Ipv6) && narrow_types(clause, types)
}

fn address_value(value: &Value) -> Option<AddressValue> {
    match value {
        Value::AddressSet(name) => Some(AddressValue::Set(name.clone())),
        Value::Constant(Constant::Ipv4 { address, mask }) => {
            let length = match mask {
                None => 32,
                Some(Mask::Prefix(length)) => *length,
                Some(Mask::Bits(_)) => return None,
            };
            Some(AddressValue::Prefix(Prefix {
                network: *address,
                length,
            }))
        }
        _ => None,
    }
}
