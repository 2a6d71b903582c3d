//! A concrete packet as the IR evaluator and `ovn-trace` see it (Ethernet + ARP or IPv4 with
//! ICMP/TCP/UDP), built from a microflow description (`eth.src == … && ip4.dst == …`, the syntax
//! ovn-trace takes), printed back to one, and changed by action statements (`field = value;`,
//! `ip.ttl--;`, `arp { … };`, `icmp4 { … };`, `output("port");`) as `ovn-trace --minimal` prints
//! them.

use std::{fmt, net::Ipv4Addr};

use super::ir::Mac;
use crate::lflow::{
    ast::{Action, Expr, Relation, Source, Value},
    lexer::{Constant, Token},
};

/// Layer 4 of an IPv4 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum L4 {
    Icmp { kind: u8, code: u8 },
    Tcp { source: u16, destination: u16 },
    Udp { source: u16, destination: u16 },
}

/// Layer 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum L3 {
    Arp {
        op: u16,
        sha: Mac,
        spa: Ipv4Addr,
        tha: Mac,
        tpa: Ipv4Addr,
    },
    Ipv4 {
        source: Ipv4Addr,
        destination: Ipv4Addr,
        ttl: u8,
        l4: L4,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Packet {
    pub eth_src: Mac,
    pub eth_dst: Mac,
    pub l3: L3,
}

#[must_use]
pub fn format_mac(mac: &Mac) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn as_mac(constant: &Constant) -> Option<Mac> {
    match constant {
        Constant::Mac {
            address,
            mask: None,
        } => Some(*address),
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

fn as_integer<T: TryFrom<u128>>(constant: &Constant) -> Option<T> {
    match constant {
        Constant::Integer {
            value, mask: None, ..
        } => T::try_from(*value).ok(),
        _ => None,
    }
}

impl Packet {
    /// Builds a packet and its inport from a conjunction of equalities and predicates.
    pub fn from_microflow(expr: &Expr) -> Result<(Option<String>, Packet), String> {
        let mut terms = Vec::new();
        flatten(expr, &mut terms);
        let mut fields: Vec<(&str, &Constant)> = Vec::new();
        let mut predicates: Vec<&str> = Vec::new();
        for term in terms {
            match term {
                Expr::Compare {
                    field,
                    relation: Relation::Eq,
                    values,
                    set: false,
                } if field.slice.is_none() => match values.as_slice() {
                    [Value::Constant(constant)] => fields.push((&field.name, constant)),
                    _ => return Err(format!("unsupported value for {}", field.name)),
                },
                Expr::Field(field) if field.slice.is_none() => predicates.push(&field.name),
                other => return Err(format!("unsupported microflow term {other}")),
            }
        }
        let get = |name: &str| fields.iter().find(|(n, _)| *n == name).map(|(_, c)| *c);
        let mac = |name: &str| {
            get(name).map_or(Ok([0; 6]), |c| {
                as_mac(c).ok_or(format!("{name} is not a MAC"))
            })
        };
        let ip = |name: &str| {
            get(name).map_or(Ok(Ipv4Addr::UNSPECIFIED), |c| {
                as_ipv4(c).ok_or(format!("{name} is not an IPv4 address"))
            })
        };
        let number = |name: &str, default: u16| {
            get(name).map_or(Ok(default), |c| {
                as_integer(c).ok_or(format!("{name} is not a number"))
            })
        };
        let inport = match get("inport") {
            Some(Constant::String(port)) => Some(port.clone()),
            Some(_) => return Err("inport must be a string".into()),
            None => None,
        };
        let eth_src = mac("eth.src")?;
        let eth_dst = mac("eth.dst")?;
        let l3 = if get("arp.op").is_some() || predicates.contains(&"arp") {
            L3::Arp {
                op: number("arp.op", 1)?,
                sha: mac("arp.sha")?,
                spa: ip("arp.spa")?,
                tha: mac("arp.tha")?,
                tpa: ip("arp.tpa")?,
            }
        } else {
            let ttl = u8::try_from(number("ip.ttl", 64)?).map_err(|_| "ip.ttl is out of range")?;
            let l4 = if predicates.contains(&"tcp") || get("tcp.dst").is_some() {
                L4::Tcp {
                    source: number("tcp.src", 0)?,
                    destination: number("tcp.dst", 0)?,
                }
            } else if predicates.contains(&"udp") || get("udp.dst").is_some() {
                L4::Udp {
                    source: number("udp.src", 0)?,
                    destination: number("udp.dst", 0)?,
                }
            } else {
                let kind = u8::try_from(number("icmp4.type", 8)?)
                    .map_err(|_| "icmp4.type is out of range")?;
                let code = u8::try_from(number("icmp4.code", 0)?)
                    .map_err(|_| "icmp4.code is out of range")?;
                L4::Icmp { kind, code }
            };
            L3::Ipv4 {
                source: ip("ip4.src")?,
                destination: ip("ip4.dst")?,
                ttl,
                l4,
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
                match l4 {
                    L4::Icmp { kind, code } => terms.extend([
                        format!("icmp4.type == {kind}"),
                        format!("icmp4.code == {code}"),
                    ]),
                    L4::Tcp {
                        source,
                        destination,
                    } => terms.extend([
                        format!("tcp.src == {source}"),
                        format!("tcp.dst == {destination}"),
                    ]),
                    L4::Udp {
                        source,
                        destination,
                    } => terms.extend([
                        format!("udp.src == {source}"),
                        format!("udp.dst == {destination}"),
                    ]),
                }
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
            ("ip.ttl", L3::Ipv4 { ttl, .. }) => *ttl = as_integer(value).ok_or_else(bad)?,
            (
                "icmp4.type",
                L3::Ipv4 {
                    l4: L4::Icmp { kind, .. },
                    ..
                },
            ) => *kind = as_integer(value).ok_or_else(bad)?,
            (
                "icmp4.code",
                L3::Ipv4 {
                    l4: L4::Icmp { code, .. },
                    ..
                },
            ) => *code = as_integer(value).ok_or_else(bad)?,
            _ => return Err(bad()),
        }
        Ok(())
    }

    /// `ip.ttl--`.
    pub fn decrement_ttl(&mut self) {
        if let L3::Ipv4 { ttl, .. } = &mut self.l3 {
            *ttl = ttl.saturating_sub(1);
        }
    }

    /// The packet OVN's `arp { … }` action starts from: an ARP request for the IPv4 destination.
    #[must_use]
    pub fn arp_request_template(&self) -> Packet {
        let (spa, tpa) = match self.l3 {
            L3::Ipv4 {
                source,
                destination,
                ..
            } => (source, destination),
            L3::Arp { spa, tpa, .. } => (spa, tpa),
        };
        Packet {
            l3: L3::Arp {
                op: 1,
                sha: self.eth_src,
                spa,
                tha: [0; 6],
                tpa,
            },
            ..*self
        }
    }

    /// The packet OVN's `icmp4 { … }` action starts from (an ICMP error about this packet).
    #[must_use]
    pub fn icmp_template(&self) -> Packet {
        match self.l3 {
            L3::Ipv4 {
                source,
                destination,
                ttl,
                ..
            } => Packet {
                l3: L3::Ipv4 {
                    source,
                    destination,
                    ttl,
                    l4: L4::Icmp { kind: 3, code: 1 },
                },
                ..*self
            },
            L3::Arp { .. } => *self,
        }
    }
}

fn flatten<'a>(expr: &'a Expr, out: &mut Vec<&'a Expr>) {
    match expr {
        Expr::And(terms) => terms.iter().for_each(|t| flatten(t, out)),
        other => out.push(other),
    }
}

impl fmt::Display for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} > {} ",
            format_mac(&self.eth_src),
            format_mac(&self.eth_dst)
        )?;
        match self.l3 {
            L3::Arp {
                op,
                sha,
                spa,
                tha,
                tpa,
            } => {
                write!(
                    f,
                    "ARP op {op} {spa} ({}) → {tpa} ({})",
                    format_mac(&sha),
                    format_mac(&tha)
                )
            }
            L3::Ipv4 {
                source,
                destination,
                ttl,
                l4,
            } => {
                write!(f, "IPv4 {source} → {destination} ttl {ttl} ")?;
                match l4 {
                    L4::Icmp { kind, code } => write!(f, "ICMP {kind}/{code}"),
                    L4::Tcp {
                        source,
                        destination,
                    } => write!(f, "TCP {source} → {destination}"),
                    L4::Udp {
                        source,
                        destination,
                    } => write!(f, "UDP {source} → {destination}"),
                }
            }
        }
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
                ("icmp4", None, Some(block)) => {
                    outputs.extend(apply_statements(&current.icmp_template(), block)?)
                }
                ("clone", None, Some(block)) => outputs.extend(apply_statements(&current, block)?),
                _ => {}
            },
        }
    }
    Ok(outputs)
}
