//! Packets to and from ovn-trace's language: built from a microflow description
//! (`eth.src == … && ip4.dst == …`, the syntax ovn-trace takes), printed back to one, and changed
//! by action statements (`field = value;`, `ip.ttl--;`, `arp { … };`, `nd_ns { … };`,
//! `icmp4 { … };`, `clone { … };`, NAT blocks `ct_snat(ip4.src=E) { … };`, `output("port");`)
//! as `ovn-trace --minimal` prints them.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::packet::{L3, L4, Packet};
use crate::{
    lflow::{
        ast::{Action, Expr, Relation, Source, Value},
        lexer::{Constant, Token},
    },
    net::format_mac,
    pipeline::ir::Mac,
};

fn as_mac(constant: &Constant) -> Option<Mac> {
    match constant {
        Constant::Mac {
            address,
            mask: None,
        } => Some(*address),
        // A MAC copied from a register (`eth.src = xreg0[0..47]`), which ovn-trace prints as
        // the register's value: 48 bits, most significant first.
        Constant::Integer {
            value, mask: None, ..
        } if *value >> 48 == 0 => {
            let bytes = value.to_be_bytes();
            bytes[10..16].try_into().ok()
        }
        _ => None,
    }
}

fn as_ipv4(constant: &Constant) -> Option<Ipv4Addr> {
    match constant {
        Constant::Ipv4 {
            address,
            mask: None,
        } => Some(*address),
        // ovn-trace prints some generated addresses as integers (arp.spa = 0xa000101).
        Constant::Integer {
            value, mask: None, ..
        } => u32::try_from(*value).ok().map(Ipv4Addr::from),
        _ => None,
    }
}

fn as_ipv6(constant: &Constant) -> Option<Ipv6Addr> {
    match constant {
        Constant::Ipv6 {
            address,
            mask: None,
        } => Some(*address),
        Constant::Integer {
            value, mask: None, ..
        } => Some(Ipv6Addr::from(*value)),
        _ => None,
    }
}

fn as_integer<T: TryFrom<u128>>(constant: &Constant) -> Option<T> {
    match constant {
        Constant::Integer {
            value, mask: None, ..
        } => T::try_from(*value).ok(),
        _ => None,
    }
}

/// The equalities and bare predicates of a microflow.
struct Microflow<'a> {
    fields: Vec<(&'a str, &'a Constant)>,
    predicates: Vec<&'a str>,
}

impl<'a> Microflow<'a> {
    fn get(&self, name: &str) -> Option<&'a Constant> {
        self.fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
    }

    fn has(&self, predicate: &str) -> bool {
        self.predicates.contains(&predicate)
    }

    fn mac(&self, name: &str) -> Result<Mac, String> {
        self.get(name).map_or(Ok([0; 6]), |c| {
            as_mac(c).ok_or(format!("{name} is not a MAC"))
        })
    }

    fn ipv4(&self, name: &str) -> Result<Ipv4Addr, String> {
        self.get(name).map_or(Ok(Ipv4Addr::UNSPECIFIED), |c| {
            as_ipv4(c).ok_or(format!("{name} is not an IPv4 address"))
        })
    }

    fn ipv6(&self, name: &str) -> Result<Ipv6Addr, String> {
        self.get(name).map_or(Ok(Ipv6Addr::UNSPECIFIED), |c| {
            as_ipv6(c).ok_or(format!("{name} is not an IPv6 address"))
        })
    }

    fn number<T: TryFrom<u128>>(&self, name: &str, default: T) -> Result<T, String> {
        self.get(name).map_or(Ok(default), |c| {
            as_integer(c).ok_or(format!("{name} is not a number in range"))
        })
    }

    /// Transport of an IP packet; `icmp_prefix` is `icmp4` or `icmp6`.
    fn l4(&self, icmp_prefix: &str) -> Result<L4, String> {
        if self.has("tcp") || self.get("tcp.dst").is_some() {
            return Ok(L4::Tcp {
                source: self.number("tcp.src", 0)?,
                destination: self.number("tcp.dst", 0)?,
            });
        }
        if self.has("udp") || self.get("udp.dst").is_some() {
            return Ok(L4::Udp {
                source: self.number("udp.src", 0)?,
                destination: self.number("udp.dst", 0)?,
            });
        }
        if self.has("nd_ns") || self.has("nd_na") {
            return Ok(L4::Nd {
                kind: if self.has("nd_ns") { 135 } else { 136 },
                target: self.ipv6("nd.target")?,
                sll: self.mac("nd.sll")?,
                tll: self.mac("nd.tll")?,
            });
        }
        let default_kind = if icmp_prefix == "icmp6" { 128 } else { 8 };
        Ok(L4::Icmp {
            kind: self.number(&format!("{icmp_prefix}.type"), default_kind)?,
            code: self.number(&format!("{icmp_prefix}.code"), 0)?,
        })
    }
}

impl Packet {
    /// Builds a packet and its inport from a conjunction of equalities and predicates.
    pub fn from_microflow(expr: &Expr) -> Result<(Option<String>, Packet), String> {
        let mut terms = Vec::new();
        flatten(expr, &mut terms);
        let mut flow = Microflow {
            fields: Vec::new(),
            predicates: Vec::new(),
        };
        for term in terms {
            match term {
                Expr::Compare {
                    field,
                    relation: Relation::Eq,
                    values,
                    set: false,
                } if field.slice.is_none() => match values.as_slice() {
                    [Value::Constant(constant)] => flow.fields.push((&field.name, constant)),
                    _ => return Err(format!("unsupported value for {}", field.name)),
                },
                Expr::Field(field) if field.slice.is_none() => flow.predicates.push(&field.name),
                other => return Err(format!("unsupported microflow term {other}")),
            }
        }
        let inport = match flow.get("inport") {
            Some(Constant::String(port)) => Some(port.clone()),
            Some(_) => return Err("inport must be a string".into()),
            None => None,
        };
        let eth_src = flow.mac("eth.src")?;
        let eth_dst = flow.mac("eth.dst")?;
        let ipv6 = flow.get("ip6.src").is_some()
            || flow.get("ip6.dst").is_some()
            || flow.has("ip6")
            || flow.has("nd_ns")
            || flow.has("nd_na");
        let l3 = if flow.get("arp.op").is_some() || flow.has("arp") {
            L3::Arp {
                op: flow.number("arp.op", 1)?,
                sha: flow.mac("arp.sha")?,
                spa: flow.ipv4("arp.spa")?,
                tha: flow.mac("arp.tha")?,
                tpa: flow.ipv4("arp.tpa")?,
            }
        } else if ipv6 {
            L3::Ipv6 {
                source: flow.ipv6("ip6.src")?,
                destination: flow.ipv6("ip6.dst")?,
                ttl: flow.number("ip.ttl", 64)?,
                l4: flow.l4("icmp6")?,
            }
        } else {
            L3::Ipv4 {
                source: flow.ipv4("ip4.src")?,
                destination: flow.ipv4("ip4.dst")?,
                ttl: flow.number("ip.ttl", 64)?,
                l4: flow.l4("icmp4")?,
            }
        };
        Ok((
            inport,
            Packet {
                eth_src,
                eth_dst,
                l3,
            },
        ))
    }

    /// The microflow that describes this packet arriving on `inport` (for ovn-trace).
    #[must_use]
    pub fn to_microflow(&self, inport: &str) -> String {
        let mut terms = vec![
            format!("inport == \"{inport}\""),
            format!("eth.src == {}", format_mac(&self.eth_src)),
            format!("eth.dst == {}", format_mac(&self.eth_dst)),
        ];
        let l4_terms = |l4: L4, icmp: &str| match l4 {
            L4::Icmp { kind, code } => vec![
                format!("{icmp}.type == {kind}"),
                format!("{icmp}.code == {code}"),
            ],
            L4::Tcp {
                source,
                destination,
            }
            | L4::TcpReset {
                source,
                destination,
            } => {
                vec![
                    format!("tcp.src == {source}"),
                    format!("tcp.dst == {destination}"),
                ]
            }
            L4::Udp {
                source,
                destination,
            } => vec![
                format!("udp.src == {source}"),
                format!("udp.dst == {destination}"),
            ],
            L4::Nd {
                kind: 135,
                target,
                sll,
                ..
            } => {
                vec![
                    "nd_ns".into(),
                    format!("nd.target == {target}"),
                    format!("nd.sll == {}", format_mac(&sll)),
                ]
            }
            L4::Nd { target, tll, .. } => {
                vec![
                    "nd_na".into(),
                    format!("nd.target == {target}"),
                    format!("nd.tll == {}", format_mac(&tll)),
                ]
            }
        };
        match self.l3 {
            L3::Arp {
                op,
                sha,
                spa,
                tha,
                tpa,
            } => terms.extend([
                format!("arp.op == {op}"),
                format!("arp.sha == {}", format_mac(&sha)),
                format!("arp.spa == {spa}"),
                format!("arp.tha == {}", format_mac(&tha)),
                format!("arp.tpa == {tpa}"),
            ]),
            L3::Ipv4 {
                source,
                destination,
                ttl,
                l4,
            } => {
                terms.extend([
                    format!("ip4.src == {source}"),
                    format!("ip4.dst == {destination}"),
                    format!("ip.ttl == {ttl}"),
                ]);
                terms.extend(l4_terms(l4, "icmp4"));
            }
            L3::Ipv6 {
                source,
                destination,
                ttl,
                l4,
            } => {
                terms.extend([
                    format!("ip6.src == {source}"),
                    format!("ip6.dst == {destination}"),
                    format!("ip.ttl == {ttl}"),
                ]);
                terms.extend(l4_terms(l4, "icmp6"));
            }
        }
        terms.join(" && ")
    }

    /// Sets `field` to `value`.
    pub fn set(&mut self, field: &str, value: &Constant) -> Result<(), String> {
        let bad = || format!("cannot set {field} to {value}");
        match (field, &mut self.l3) {
            ("eth.src", _) => self.eth_src = as_mac(value).ok_or_else(bad)?,
            ("eth.dst", _) => self.eth_dst = as_mac(value).ok_or_else(bad)?,
            ("arp.op", L3::Arp { op, .. }) => *op = as_integer(value).ok_or_else(bad)?,
            ("arp.sha", L3::Arp { sha, .. }) => *sha = as_mac(value).ok_or_else(bad)?,
            ("arp.tha", L3::Arp { tha, .. }) => *tha = as_mac(value).ok_or_else(bad)?,
            ("arp.spa", L3::Arp { spa, .. }) => *spa = as_ipv4(value).ok_or_else(bad)?,
            ("arp.tpa", L3::Arp { tpa, .. }) => *tpa = as_ipv4(value).ok_or_else(bad)?,
            ("ip4.src", L3::Ipv4 { source, .. }) => *source = as_ipv4(value).ok_or_else(bad)?,
            ("ip4.dst", L3::Ipv4 { destination, .. }) => {
                *destination = as_ipv4(value).ok_or_else(bad)?
            }
            ("ip6.src", L3::Ipv6 { source, .. }) => *source = as_ipv6(value).ok_or_else(bad)?,
            ("ip6.dst", L3::Ipv6 { destination, .. }) => {
                *destination = as_ipv6(value).ok_or_else(bad)?
            }
            ("ip.ttl", L3::Ipv4 { ttl, .. } | L3::Ipv6 { ttl, .. }) => {
                *ttl = as_integer(value).ok_or_else(bad)?
            }
            (
                "icmp4.type",
                L3::Ipv4 {
                    l4: L4::Icmp { kind, .. },
                    ..
                },
            )
            | (
                "icmp6.type",
                L3::Ipv6 {
                    l4: L4::Icmp { kind, .. } | L4::Nd { kind, .. },
                    ..
                },
            ) => {
                *kind = as_integer(value).ok_or_else(bad)?;
            }
            (
                "icmp4.code",
                L3::Ipv4 {
                    l4: L4::Icmp { code, .. },
                    ..
                },
            )
            | (
                "icmp6.code",
                L3::Ipv6 {
                    l4: L4::Icmp { code, .. },
                    ..
                },
            ) => {
                *code = as_integer(value).ok_or_else(bad)?;
            }
            (
                "nd.target",
                L3::Ipv6 {
                    l4: L4::Nd { target, .. },
                    ..
                },
            ) => *target = as_ipv6(value).ok_or_else(bad)?,
            (
                "nd.sll",
                L3::Ipv6 {
                    l4: L4::Nd { sll, .. },
                    ..
                },
            ) => *sll = as_mac(value).ok_or_else(bad)?,
            (
                "nd.tll",
                L3::Ipv6 {
                    l4: L4::Nd { tll, .. },
                    ..
                },
            ) => *tll = as_mac(value).ok_or_else(bad)?,
            _ => return Err(bad()),
        }
        Ok(())
    }
}

fn flatten<'a>(expr: &'a Expr, out: &mut Vec<&'a Expr>) {
    match expr {
        Expr::And(terms) => terms.iter().for_each(|t| flatten(t, out)),
        other => out.push(other),
    }
}

/// `template` as an ACL's `reject` sends it when `block` is one: ovn-trace prints the statements
/// of a `tcp_reset`/`icmp4`/`icmp6` block, and a router's (`eth.dst <-> eth.src; ip4.dst <->
/// ip4.src; …`) show as assignments to the IP destination, while `reject` swaps the Ethernet
/// and IP addresses implicitly (its `loopback`), printing no such assignment.
fn loopback(template: Packet, block: &[Action]) -> Packet {
    let assigns_ip_destination = block.iter().any(|action| {
        matches!(action, Action::Assign { destination, .. }
            if matches!(destination.name.as_str(), "ip4.dst" | "ip6.dst"))
    });
    if assigns_ip_destination {
        template
    } else {
        template.swapped()
    }
}

/// Applies action statements (as `ovn-trace --minimal` prints them) to `packet`; returns the
/// packets output, with their port. Statements that do not change the packet are ignored.
pub fn apply_statements(
    packet: &Packet,
    actions: &[Action],
) -> Result<Vec<(String, Packet)>, String> {
    let mut current = *packet;
    let mut outputs = Vec::new();
    for action in actions {
        match action {
            Action::Assign {
                destination,
                source: Source::Constant(value),
            } if destination.slice.is_none() => {
                current.set(&destination.name, value)?;
            }
            Action::Assign { .. } | Action::Exchange { .. } => {
                return Err(format!("unexpected statement in a trace: {action}"));
            }
            Action::Decrement(field) if field.name == "ip.ttl" => current.decrement_ttl(),
            Action::Decrement(field) => return Err(format!("cannot decrement {}", field.name)),
            Action::Keyword {
                name,
                arguments,
                block,
            } => match (name.as_str(), arguments, block) {
                ("output", Some(arguments), None) => match arguments.as_slice() {
                    [Token::Constant(Constant::String(port))] => {
                        outputs.push((port.clone(), current))
                    }
                    _ => return Err(format!("unexpected output arguments in {action}")),
                },
                ("arp", None, Some(block)) => {
                    outputs.extend(apply_statements(&current.arp_request_template(), block)?)
                }
                ("nd_ns", None, Some(block)) => {
                    outputs.extend(apply_statements(&current.nd_ns_template(), block)?)
                }
                ("nd_na" | "nd_na_router", None, Some(block)) => {
                    outputs.extend(apply_statements(&current.nd_na_template(), block)?);
                }
                ("icmp4" | "icmp6", None, Some(block)) => {
                    let template = loopback(current.icmp_template(), block);
                    outputs.extend(apply_statements(&template, block)?)
                }
                ("clone", None, Some(block)) => outputs.extend(apply_statements(&current, block)?),
                // A NAT through conntrack: ovn-trace prints the translation it made as the
                // block's argument (`ct_snat(ip4.src=E) { … }`), none where it assumes no entry.
                (nat, arguments, Some(block))
                    if nat.starts_with("ct_snat") || nat.starts_with("ct_dnat") =>
                {
                    let mut translated = current;
                    match arguments.as_deref() {
                        None | Some([]) => {}
                        Some([Token::Id(field), Token::Punct("="), Token::Constant(value)]) => {
                            translated.set(field, value)?
                        }
                        Some(_) => return Err(format!("unexpected NAT arguments in {action}")),
                    }
                    outputs.extend(apply_statements(&translated, block)?);
                }
                ("tcp_reset", None, Some(block)) => {
                    let template = loopback(current.tcp_reset_template(), block);
                    outputs.extend(apply_statements(&template, block)?)
                }
                _ => {}
            },
        }
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ovn_trace_nat_blocks_and_register_macs_apply_to_the_packet() {
        let packet = Packet {
            eth_src: [0x0a, 0x58, 0, 0, 0, 1],
            eth_dst: [0x0a, 0x58, 0, 0, 0, 2],
            l3: L3::Ipv4 {
                source: Ipv4Addr::new(10, 5, 1, 11),
                destination: Ipv4Addr::new(172, 31, 0, 20),
                ttl: 64,
                l4: L4::Icmp { kind: 8, code: 0 },
            },
        };
        // What ovn-trace 23.03 printed for a FIP's pod pinging its own FIP (the hairpin): a
        // NAT block with no translation, one with, and a MAC from a register.
        let text = r#"ip.ttl--;
            ct_dnatin_czone {
                ct_snat(ip4.src=172.31.0.20) {
                    clone {
                        eth.src = 0xa58879df5fa;
                        ct_dnatin_czone(ip4.dst=10.5.1.11) {
                            ip.ttl--;
                            output("p1");
                        };
                    };
                };
            };"#;
        let actions = crate::lflow::parse_actions(text).unwrap();
        let outputs = apply_statements(&packet, &actions).unwrap();
        let [(port, out)] = outputs.as_slice() else {
            panic!("{outputs:?}");
        };
        assert_eq!(port, "p1");
        assert_eq!(out.eth_src, [0x0a, 0x58, 0x87, 0x9d, 0xf5, 0xfa]);
        assert_eq!(
            out.l3,
            L3::Ipv4 {
                source: Ipv4Addr::new(172, 31, 0, 20),
                destination: Ipv4Addr::new(10, 5, 1, 11),
                ttl: 62,
                l4: L4::Icmp { kind: 8, code: 0 },
            }
        );
        // A register value wider than a MAC is no MAC.
        let wide = crate::lflow::parse_actions("eth.src = 0x1000000000000;").unwrap();
        assert!(apply_statements(&packet, &wide).is_err());
    }
}
