//! What differs between IPv4 and IPv6 in the router stages the evaluator runs the same way for
//! both: which IR entries hold the reject rules and the neighbours, and how a reply is addressed.
//! The stages themselves ([`Evaluator::reject`], [`Evaluator::resolve_neighbour`]) are written
//! once, generic over the address family.

use std::{
    fmt,
    net::{Ipv4Addr, Ipv6Addr},
};

use super::{
    Evaluator, Trace,
    packet::{L3, L4, Packet},
};
use crate::pipeline::ir::{IrEntry, Mac, RejectProtocol, RejectResponse};

/// A route that matches a destination.
#[derive(Clone, Copy)]
pub(super) struct Route<'e, A> {
    pub priority: u16,
    pub network: A,
    pub length: u8,
    pub nexthop: Option<A>,
    pub source_ip: A,
    pub source_mac: Mac,
    pub port: &'e str,
}

/// Where the chosen route sends a packet.
pub(super) struct Hop<'e, A> {
    pub nexthop: A,
    pub source_ip: A,
    pub source_mac: Mac,
    pub port: &'e str,
}

/// An address family, by its address type.
pub(super) trait Family: Copy + PartialEq + fmt::Display {
    /// The ICMP destination unreachable type (3 in ICMPv4, 1 in ICMPv6).
    const UNREACHABLE: u8;

    /// The reject rule `entry` holds for traffic to the router address `ip`, if any.
    fn reject_rule(entry: &IrEntry, ip: Self) -> Option<(Option<RejectProtocol>, RejectResponse)>;

    /// The static neighbour `entry` gives for `ip` behind `port`, if any.
    fn neighbour(entry: &IrEntry, port: &str, ip: Self) -> Option<Mac>;

    /// The learned neighbour (MAC_Binding) `entry` gives for `ip` behind `port`, if any.
    fn learned_neighbour(entry: &IrEntry, port: &str, ip: Self) -> Option<Mac>;

    /// The route `entry` offers to `destination` for a packet that came in on `inport`.
    fn route<'e>(entry: &'e IrEntry, destination: Self, inport: &str) -> Option<Route<'e, Self>>;

    /// Whether `entry` says next hops are looked up among the learned neighbours.
    fn is_neighbour_lookup(entry: &IrEntry) -> bool;

    /// The L3 header of a packet from `source` to `destination`.
    fn l3(source: Self, destination: Self, ttl: u8, l4: L4) -> L3;
}

impl Family for Ipv4Addr {
    const UNREACHABLE: u8 = 3;

    fn reject_rule(entry: &IrEntry, ip: Self) -> Option<(Option<RejectProtocol>, RejectResponse)> {
        match entry {
            IrEntry::RouterReject {
                ip: rule_ip,
                protocol,
                response,
                ..
            } if *rule_ip == ip => Some((*protocol, *response)),
            _ => None,
        }
    }

    fn neighbour(entry: &IrEntry, port: &str, ip: Self) -> Option<Mac> {
        match entry {
            IrEntry::Neighbour {
                port: p,
                ip: i,
                mac,
                ..
            } if p == port && *i == ip => Some(*mac),
            _ => None,
        }
    }

    fn learned_neighbour(entry: &IrEntry, port: &str, ip: Self) -> Option<Mac> {
        match entry {
            IrEntry::LearnedNeighbour {
                port: p,
                ip: i,
                mac,
                ..
            } if p == port && *i == ip => Some(*mac),
            _ => None,
        }
    }

    fn route<'e>(entry: &'e IrEntry, destination: Self, _: &str) -> Option<Route<'e, Self>> {
        match entry {
            IrEntry::Route {
                prefix,
                priority,
                route_table: None | Some(0),
                nexthop,
                source_ip,
                source_mac,
                port,
                ..
            } if prefix.contains(destination) => Some(Route {
                priority: *priority,
                network: prefix.network,
                length: prefix.length,
                nexthop: *nexthop,
                source_ip: *source_ip,
                source_mac: *source_mac,
                port,
            }),
            _ => None,
        }
    }

    fn is_neighbour_lookup(entry: &IrEntry) -> bool {
        matches!(entry, IrEntry::NeighbourLookup { .. })
    }

    fn l3(source: Self, destination: Self, ttl: u8, l4: L4) -> L3 {
        L3::Ipv4 {
            source,
            destination,
            ttl,
            l4,
        }
    }
}

impl Family for Ipv6Addr {
    const UNREACHABLE: u8 = 1;

    fn reject_rule(entry: &IrEntry, ip: Self) -> Option<(Option<RejectProtocol>, RejectResponse)> {
        match entry {
            IrEntry::RouterReject6 {
                ip: rule_ip,
                protocol,
                response,
                ..
            } if *rule_ip == ip => Some((*protocol, *response)),
            _ => None,
        }
    }

    fn neighbour(entry: &IrEntry, port: &str, ip: Self) -> Option<Mac> {
        match entry {
            IrEntry::Neighbour6 {
                port: p,
                ip: i,
                mac,
                ..
            } if p == port && *i == ip => Some(*mac),
            _ => None,
        }
    }

    fn learned_neighbour(entry: &IrEntry, port: &str, ip: Self) -> Option<Mac> {
        match entry {
            IrEntry::LearnedNeighbour6 {
                port: p,
                ip: i,
                mac,
                ..
            } if p == port && *i == ip => Some(*mac),
            _ => None,
        }
    }

    fn route<'e>(entry: &'e IrEntry, destination: Self, inport: &str) -> Option<Route<'e, Self>> {
        match entry {
            IrEntry::Route6 {
                prefix,
                priority,
                inport: needed,
                nexthop,
                source_ip,
                source_mac,
                port,
                ..
            } if prefix.contains(destination) && needed.as_deref().is_none_or(|p| p == inport) => {
                Some(Route {
                    priority: *priority,
                    network: prefix.network,
                    length: prefix.length,
                    nexthop: *nexthop,
                    source_ip: *source_ip,
                    source_mac: *source_mac,
                    port,
                })
            }
            _ => None,
        }
    }

    fn is_neighbour_lookup(entry: &IrEntry) -> bool {
        matches!(entry, IrEntry::NeighbourLookup6 { .. })
    }

    fn l3(source: Self, destination: Self, ttl: u8, l4: L4) -> L3 {
        L3::Ipv6 {
            source,
            destination,
            ttl,
            l4,
        }
    }
}

impl<'a> Evaluator<'a> {
    /// `router`'s route lookup: the highest-priority route to `destination` (for a packet that
    /// came in on `inport`), recorded as a step; `None` (the packet dropped) without one.
    pub(super) fn lookup_route<A: Family>(
        &self,
        dp: u32,
        inport: &str,
        destination: A,
        trace: &mut Trace,
    ) -> Option<Hop<'a, A>> {
        let route = self
            .entries(dp)
            .filter_map(|e| A::route(e, destination, inport))
            .max_by_key(|route| route.priority);
        let Some(route) = route else {
            self.step(trace, dp, format!("dropped: no route to {destination}"));
            return None;
        };
        let nexthop = route.nexthop.unwrap_or(destination);
        let (network, length, port) = (route.network, route.length, route.port);
        self.step(
            trace,
            dp,
            format!("route {network}/{length} via {nexthop} out of {port}"),
        );
        Some(Hop {
            nexthop,
            source_ip: route.source_ip,
            source_mac: route.source_mac,
            port,
        })
    }

    /// `reject`: the answer to traffic (`l4`, from `source`) for a router address `destination`
    /// that a reject rule covers (TCP reset or ICMP unreachable, addressed back to the sender),
    /// as OVN builds it before routing it back.
    pub(super) fn reject<A: Family>(
        &self,
        dp: u32,
        packet: &Packet,
        source: A,
        destination: A,
        l4: L4,
    ) -> Option<Packet> {
        let response = self.reject_response(dp, l4, |e| A::reject_rule(e, destination))?;
        reject_reply(packet, response, l4, A::UNREACHABLE, |l4| {
            A::l3(destination, source, 255, l4)
        })
    }

    /// The reject rule of `dp` for traffic with `l4`, among the rules `rule` selects: a
    /// protocol-specific rule (priority 80) wins over the catch-all (priority 70).
    fn reject_response(
        &self,
        dp: u32,
        l4: L4,
        rule: impl Fn(&IrEntry) -> Option<(Option<RejectProtocol>, RejectResponse)>,
    ) -> Option<RejectResponse> {
        let protocol = match l4 {
            L4::Tcp { .. } | L4::TcpReset { .. } => Some(RejectProtocol::Tcp),
            L4::Udp { .. } => Some(RejectProtocol::Udp),
            L4::Icmp { .. } | L4::Nd { .. } => None,
        };
        self.entries(dp)
            .filter_map(rule)
            .filter(|(p, _)| p.is_none() || *p == protocol)
            .max_by_key(|(p, _)| p.is_some())
            .map(|(_, response)| response)
    }

    /// The MAC of `nexthop` behind `port`: a static neighbour, else (when the router looks next
    /// hops up) a learned one.
    pub(super) fn resolve_neighbour<A: Family>(
        &self,
        dp: u32,
        port: &str,
        nexthop: A,
    ) -> Option<Mac> {
        self.entries(dp)
            .find_map(|e| A::neighbour(e, port, nexthop))
            .or_else(|| {
                let lookup = self.entries(dp).any(A::is_neighbour_lookup);
                lookup
                    .then(|| {
                        self.entries(dp)
                            .find_map(|e| A::learned_neighbour(e, port, nexthop))
                    })
                    .flatten()
            })
    }
}

/// The reply a reject response makes to `packet` (whose transport is `l4`): a TCP reset for TCP,
/// or an ICMP destination unreachable of type `unreachable_kind` (3 in ICMPv4, 1 in ICMPv6).
/// `back` builds the reply's L3 header, swapped and with TTL 255 as ovn-trace models OVN's
/// `tcp_reset` and `icmp4`/`icmp6` actions. On the wire ovn-controller's pinctrl starts a reset
/// with TTL 63 (and RST|ACK, where ovn-trace shows RST): the kernel follows pinctrl
/// (`ebpf/src/reject.rs`), this evaluator ovn-trace, its oracle.
fn reject_reply(
    packet: &Packet,
    response: RejectResponse,
    l4: L4,
    unreachable_kind: u8,
    back: impl Fn(L4) -> L3,
) -> Option<Packet> {
    let reply_l4 = match (response, l4) {
        (
            RejectResponse::TcpReset,
            L4::Tcp {
                source,
                destination,
            },
        ) => L4::TcpReset {
            source,
            destination,
        },
        (RejectResponse::IcmpUnreachable { code }, _) => L4::Icmp {
            kind: unreachable_kind,
            code,
        },
        _ => return None,
    };
    Some(Packet {
        eth_src: packet.eth_dst,
        eth_dst: packet.eth_src,
        l3: back(reply_l4),
    })
}
