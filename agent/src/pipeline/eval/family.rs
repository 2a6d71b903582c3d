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
use crate::net::format_mac;
use crate::pipeline::ir::{
    EcmpStage, IrEntry, Mac, RejectProtocol, RejectResponse, RouteSelector, RouterDropRule,
};

/// A route that matches a destination.
#[derive(Clone, Copy)]
pub(super) struct Route<'e, A> {
    pub priority: u16,
    /// Matched on the packet's source (a `src-ip` static route).
    pub by_source: bool,
    pub network: A,
    pub length: u8,
    pub nexthop: Option<A>,
    pub source_ip: A,
    pub source_mac: Mac,
    pub port: &'e str,
    /// An ECMP route: its group and the members its `select` chooses from (the next hop, source
    /// and port are then the chosen member's).
    pub ecmp: Option<(u16, &'e [u16])>,
    /// A discard route: the packet is dropped.
    pub discard: bool,
}

impl<'e> Route<'e, Ipv6Addr> {
    /// An IPv6 route without a hop of its own: an ECMP group's (`ecmp`), or else a discard
    /// route.
    fn without_hop(
        selector: RouteSelector,
        prefix: &crate::pipeline::ir::Prefix6,
        priority: u16,
        ecmp: Option<(u16, &'e [u16])>,
    ) -> Self {
        Self {
            priority,
            by_source: selector == RouteSelector::Source,
            network: prefix.network,
            length: prefix.length,
            nexthop: None,
            source_ip: Ipv6Addr::UNSPECIFIED,
            source_mac: [0; 6],
            port: "",
            discard: ecmp.is_none(),
            ecmp,
        }
    }
}

/// Where the chosen route sends a packet.
pub(super) struct Hop<'e, A> {
    pub nexthop: A,
    pub source_ip: A,
    pub source_mac: Mac,
    pub port: &'e str,
}

/// What the router input stage does with a packet for an address of the router.
pub(super) enum Input {
    Dropped,
    /// The router answers (echo reply, TCP reset, ICMP unreachable): the answer is routed.
    Answered(Packet),
    /// Not for the router: on to TTL handling and routing.
    Forward,
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

    /// The route `entry` offers to a packet from `source` to `destination` that came in on
    /// `inport` and is routed with route table `table`.
    fn route<'e>(
        entry: &'e IrEntry,
        addresses: (Self, Self),
        inport: &str,
        table: u32,
    ) -> Option<Route<'e, Self>>;

    /// Where member `member` of ECMP group `group` of `stage` leads, if `entry` says so.
    fn ecmp_member<'e>(entry: &'e IrEntry, member: (EcmpStage, u16, u16)) -> Option<Hop<'e, Self>>;

    /// What the router sends for an unknown next hop ("ARP request", "neighbour solicitation").
    const NEXT_HOP_REQUEST: &'static str;

    /// Whether `entry` says the router asks for unknown next hops.
    fn requests_next_hop(entry: &IrEntry) -> bool;

    /// The request for `hop`'s next hop, for routed `packet`.
    fn next_hop_request(packet: &Packet, hop: &Hop<'_, Self>) -> Packet;

    /// Whether `entry` says next hops are looked up among the learned neighbours.
    fn is_neighbour_lookup(entry: &IrEntry) -> bool;

    /// ICMP echo request and reply types (8 and 0 in ICMPv4, 128 and 129 in ICMPv6).
    const ECHO_REQUEST: u8;
    const ECHO_REPLY: u8;

    /// Whether `entry` says the router answers pings to `ip`.
    fn answers_ping(entry: &IrEntry, ip: Self) -> bool;

    /// Whether `rule` drops traffic to `ip` as the router's own address.
    fn is_own(rule: &RouterDropRule, ip: Self) -> bool;

    fn is_multicast_address(self) -> bool;

    /// The L3 header of a packet from `source` to `destination`.
    fn l3(source: Self, destination: Self, ttl: u8, l4: L4) -> L3;
}

/// Implements [`Family`] for an address type from the names of its IR variants (the IPv4 and
/// IPv6 variants have the same fields) and what differs (route entries, next-hop requests).
macro_rules! family {
    (
        $address:ty, $l3:ident, unreachable: $unreachable:literal, echo: ($request:literal,
        $reply:literal, $echo:ident), own: $own:ident, reject: $reject:ident,
        neighbour: $neighbour:ident, learned: $learned:ident, lookup: $lookup:ident,
        specific: { $($specific:tt)* }
    ) => {
        impl Family for $address {
            const UNREACHABLE: u8 = $unreachable;
            const ECHO_REQUEST: u8 = $request;
            const ECHO_REPLY: u8 = $reply;

            fn answers_ping(entry: &IrEntry, ip: Self) -> bool {
                matches!(entry, IrEntry::$echo { ip: echo_ip, .. } if *echo_ip == ip)
            }

            fn is_own(rule: &RouterDropRule, ip: Self) -> bool {
                matches!(rule, RouterDropRule::$own(list) if list.contains(&ip))
            }

            fn is_multicast_address(self) -> bool {
                self.is_multicast()
            }

            fn reject_rule(
                entry: &IrEntry,
                ip: Self,
            ) -> Option<(Option<RejectProtocol>, RejectResponse)> {
                match entry {
                    IrEntry::$reject {
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
                    IrEntry::$neighbour { port: p, ip: i, mac, .. } if p == port && *i == ip => {
                        Some(*mac)
                    }
                    _ => None,
                }
            }

            fn learned_neighbour(entry: &IrEntry, port: &str, ip: Self) -> Option<Mac> {
                match entry {
                    IrEntry::$learned { port: p, ip: i, mac, .. } if p == port && *i == ip => {
                        Some(*mac)
                    }
                    _ => None,
                }
            }

            fn is_neighbour_lookup(entry: &IrEntry) -> bool {
                matches!(entry, IrEntry::$lookup { .. })
            }

            fn l3(source: Self, destination: Self, ttl: u8, l4: L4) -> L3 {
                L3::$l3 {
                    source,
                    destination,
                    ttl,
                    l4,
                }
            }

            $($specific)*
        }
    };
}

family! {
    Ipv4Addr, Ipv4, unreachable: 3, echo: (8, 0, RouterEchoReply), own: ToRouter,
    reject: RouterReject,
    neighbour: Neighbour, learned: LearnedNeighbour, lookup: NeighbourLookup,
    specific: {
        const NEXT_HOP_REQUEST: &'static str = "ARP request";

        fn requests_next_hop(entry: &IrEntry) -> bool {
            matches!(entry, IrEntry::ArpRequestForNextHop { .. })
        }

        fn next_hop_request(_: &Packet, hop: &Hop<'_, Self>) -> Packet {
            Packet {
                eth_src: hop.source_mac,
                eth_dst: [0xff; 6],
                l3: L3::Arp {
                    op: 1,
                    sha: hop.source_mac,
                    spa: hop.source_ip,
                    tha: [0; 6],
                    tpa: hop.nexthop,
                },
            }
        }

        fn route<'e>(
            entry: &'e IrEntry,
            (source, destination): (Self, Self),
            _: &str,
            table: u32,
        ) -> Option<Route<'e, Self>> {
            // What differs between the route kinds: the hop, an ECMP group, or a discard.
            let (selector, prefix, priority, route_table, hop, ecmp, discard) = match entry {
                IrEntry::Route {
                    selector,
                    prefix,
                    priority,
                    route_table,
                    nexthop,
                    source_ip,
                    source_mac,
                    port,
                    ..
                } => (
                    selector,
                    prefix,
                    priority,
                    route_table,
                    (*nexthop, *source_ip, *source_mac, port.as_str()),
                    None,
                    false,
                ),
                IrEntry::EcmpRoute {
                    selector,
                    prefix,
                    priority,
                    route_table,
                    group,
                    members,
                    ..
                } => (
                    selector,
                    prefix,
                    priority,
                    route_table,
                    (None, Ipv4Addr::UNSPECIFIED, [0; 6], ""),
                    Some((*group, members.as_slice())),
                    false,
                ),
                IrEntry::DiscardRoute {
                    selector,
                    prefix,
                    priority,
                    route_table,
                    ..
                } => (
                    selector,
                    prefix,
                    priority,
                    route_table,
                    (None, Ipv4Addr::UNSPECIFIED, [0; 6], ""),
                    None,
                    true,
                ),
                _ => return None,
            };
            // A route of no table applies to every table (OVN writes no `reg7` term for it).
            let in_table = route_table.is_none_or(|t| t == table);
            let matched = match selector {
                RouteSelector::Destination => destination,
                RouteSelector::Source => source,
            };
            if !in_table || !prefix.contains(matched) {
                return None;
            }
            let (nexthop, source_ip, source_mac, port) = hop;
            Some(Route {
                priority: *priority,
                by_source: *selector == RouteSelector::Source,
                network: prefix.network,
                length: prefix.length,
                nexthop,
                source_ip,
                source_mac,
                port,
                ecmp,
                discard,
            })
        }

        fn ecmp_member<'e>(
            entry: &'e IrEntry,
            (stage, group, member): (EcmpStage, u16, u16),
        ) -> Option<Hop<'e, Self>> {
            match entry {
                IrEntry::EcmpMember {
                    stage: s,
                    group: g,
                    member: m,
                    nexthop,
                    source_ip,
                    source_mac,
                    port,
                    ..
                } if (*s, *g, *m) == (stage, group, member) => Some(Hop {
                    nexthop: *nexthop,
                    source_ip: *source_ip,
                    source_mac: *source_mac,
                    port,
                }),
                _ => None,
            }
        }
    }
}

family! {
    Ipv6Addr, Ipv6, unreachable: 1, echo: (128, 129, RouterEchoReply6), own: ToRouter6,
    reject: RouterReject6,
    neighbour: Neighbour6, learned: LearnedNeighbour6, lookup: NeighbourLookup6,
    specific: {
        const NEXT_HOP_REQUEST: &'static str = "neighbour solicitation";

        fn requests_next_hop(entry: &IrEntry) -> bool {
            matches!(entry, IrEntry::NsForNextHop { .. })
        }

        /// northd's `nd_ns` flows: a static route's next hop (priority 200, `xxreg0 == <next
        /// hop>`) is solicited at its own solicited-node group (`eth.dst`, `ip6.dst` set), any
        /// other (the destination itself) by the generic flow, which ovn-trace shows with the
        /// packet's destination kept.
        fn next_hop_request(packet: &Packet, hop: &Hop<'_, Self>) -> Packet {
            let mut unresolved = *packet;
            unresolved.eth_dst = [0; 6];
            let mut solicitation = unresolved.nd_ns_template();
            if let L3::Ipv6 {
                destination,
                l4: L4::Nd { target, .. },
                ..
            } = &mut solicitation.l3
            {
                if *destination != hop.nexthop {
                    *destination = super::packet::solicited_node(hop.nexthop);
                    solicitation.eth_dst = super::packet::ipv6_multicast_mac(*destination);
                }
                *target = hop.nexthop;
            }
            solicitation
        }

        fn route<'e>(
            entry: &'e IrEntry,
            (source, destination): (Self, Self),
            inport: &str,
            table: u32,
        ) -> Option<Route<'e, Self>> {
            let from = |needed: &Option<String>| needed.as_deref().is_none_or(|p| p == inport);
            let selected = |selector: &RouteSelector, prefix: &crate::pipeline::ir::Prefix6| {
                prefix.contains(match selector {
                    RouteSelector::Destination => destination,
                    RouteSelector::Source => source,
                })
            };
            let in_table = |route_table: &Option<u32>| route_table.is_none_or(|t| t == table);
            match entry {
                IrEntry::Route6 {
                    selector,
                    prefix,
                    priority,
                    inport: needed,
                    route_table,
                    nexthop,
                    source_ip,
                    source_mac,
                    port,
                    ..
                } if selected(selector, prefix) && from(needed) && in_table(route_table) => {
                    Some(Route {
                        priority: *priority,
                        by_source: *selector == RouteSelector::Source,
                        network: prefix.network,
                        length: prefix.length,
                        nexthop: *nexthop,
                        source_ip: *source_ip,
                        source_mac: *source_mac,
                        port,
                        ecmp: None,
                        discard: false,
                    })
                }
                IrEntry::DiscardRoute6 {
                    selector,
                    prefix,
                    priority,
                    route_table,
                    ..
                } if selected(selector, prefix) && in_table(route_table) => {
                    Some(Route::without_hop(*selector, prefix, *priority, None))
                }
                IrEntry::EcmpRoute6 {
                    selector,
                    prefix,
                    priority,
                    route_table,
                    group,
                    members,
                    ..
                } if selected(selector, prefix) && in_table(route_table) => {
                    let ecmp = Some((*group, members.as_slice()));
                    Some(Route::without_hop(*selector, prefix, *priority, ecmp))
                }
                _ => None,
            }
        }

        fn ecmp_member<'e>(
            entry: &'e IrEntry,
            (stage, group, member): (EcmpStage, u16, u16),
        ) -> Option<Hop<'e, Self>> {
            match entry {
                IrEntry::EcmpMember6 {
                    group: g,
                    member: m,
                    nexthop,
                    source_ip,
                    source_mac,
                    port,
                    ..
                } if stage == EcmpStage::Route && (*g, *m) == (group, member) => Some(Hop {
                    nexthop: *nexthop,
                    source_ip: *source_ip,
                    source_mac: *source_mac,
                    port,
                }),
                _ => None,
            }
        }
    }
}

impl<'a> Evaluator<'a> {
    /// `router`'s route lookup: the highest-priority route, by destination or by source, for a
    /// packet from `source` to `destination` that came in on `inport`, recorded as a step;
    /// `None` (the packet dropped) without one.
    pub(super) fn lookup_route<A: Family>(
        &self,
        dp: u32,
        (inport, table): (&str, u32),
        (source, destination): (A, A),
        flow_hash: u32,
        trace: &mut Trace,
    ) -> Option<Hop<'a, A>> {
        let route = self
            .entries(dp)
            .filter_map(|e| A::route(e, (source, destination), inport, table))
            .max_by_key(|route| route.priority);
        let Some(route) = route else {
            self.step(trace, dp, format!("dropped: no route to {destination}"));
            return None;
        };
        if route.discard {
            let (network, length) = (route.network, route.length);
            self.step(
                trace,
                dp,
                format!("dropped: discard route {network}/{length}"),
            );
            return None;
        }
        if let Some((group, members)) = route.ecmp {
            let (network, length) = (route.network, route.length);
            self.step(
                trace,
                dp,
                format!(
                    "ECMP route {}{network}/{length}",
                    if route.by_source { "from " } else { "" }
                ),
            );
            return self.ecmp_member(dp, (EcmpStage::Route, group, members), flow_hash, trace);
        }
        let nexthop = route.nexthop.unwrap_or(destination);
        let (network, length, port) = (route.network, route.length, route.port);
        self.step(
            trace,
            dp,
            format!(
                "route {}{network}/{length} via {nexthop} out of {port}",
                if route.by_source { "from " } else { "" }
            ),
        );
        Some(Hop {
            nexthop,
            source_ip: route.source_ip,
            source_mac: route.source_mac,
            port,
        })
    }

    /// The member of ECMP group `group` of `stage` a flow of `flow_hash` takes among `members`
    /// (as the kernel chooses it), recorded as a step and in `trace.selected`; `None` (dropped)
    /// when that member has no flow.
    pub(super) fn ecmp_member<A: Family>(
        &self,
        dp: u32,
        (stage, group, members): (EcmpStage, u16, &[u16]),
        flow_hash: u32,
        trace: &mut Trace,
    ) -> Option<Hop<'a, A>> {
        let count = u32::try_from(members.len()).unwrap_or(u32::MAX);
        let index = match trace.ecmp_index {
            Some(index) => index % members.len().max(1),
            None => ovnbpf_common::ecmp::member_index(flow_hash, count) as usize,
        };
        let member = *members.get(index)?;
        trace.selected.push(member);
        let hop = self
            .entries(dp)
            .find_map(|e| A::ecmp_member(e, (stage, group, member)));
        match &hop {
            Some(hop) => self.step(
                trace,
                dp,
                format!(
                    "select: ECMP group {group} member {member}: via {} out of {}",
                    hop.nexthop, hop.port
                ),
            ),
            None => self.step(
                trace,
                dp,
                format!("dropped: ECMP group {group} member {member} has no flow"),
            ),
        }
        hop
    }

    /// Whether `dp` has a drop rule `rule` selects.
    pub(super) fn drops(&self, dp: u32, rule: impl Fn(&RouterDropRule) -> bool) -> bool {
        self.entries(dp)
            .any(|e| matches!(e, IrEntry::RouterDrop { rule: r, .. } if rule(r)))
    }

    /// `router` input, the part both families share after their own checks: pings to the
    /// router, IP multicast, rejects, traffic to router addresses, Ethernet broadcast.
    pub(super) fn router_input<A: Family>(
        &self,
        dp: u32,
        packet: &Packet,
        (source, destination): (A, A),
        l4: L4,
        trace: &mut Trace,
    ) -> Input {
        let ping = L4::Icmp {
            kind: A::ECHO_REQUEST,
            code: 0,
        };
        if l4 == ping && self.entries(dp).any(|e| A::answers_ping(e, destination)) {
            self.step(trace, dp, format!("router answers ping to {destination}"));
            let pong = L4::Icmp {
                kind: A::ECHO_REPLY,
                code: 0,
            };
            let mut reply = *packet;
            reply.l3 = A::l3(destination, source, 255, pong);
            return Input::Answered(reply);
        }
        if destination.is_multicast_address()
            && self.drops(dp, |r| matches!(r, RouterDropRule::Multicast))
        {
            self.step(trace, dp, "dropped: IP multicast".into());
            return Input::Dropped;
        }
        if let Some(reply) = self.reject(dp, packet, source, destination, l4) {
            let text = format!("router rejects traffic to its own {destination}");
            self.step(trace, dp, text);
            return Input::Answered(reply);
        }
        if self.drops(dp, |r| A::is_own(r, destination)) {
            let text = format!("dropped: {destination} is the router's own");
            self.step(trace, dp, text);
            return Input::Dropped;
        }
        if packet.eth_dst == [0xff; 6] && self.drops(dp, |r| matches!(r, RouterDropRule::Broadcast))
        {
            self.step(trace, dp, "dropped: Ethernet broadcast".into());
            return Input::Dropped;
        }
        Input::Forward
    }

    /// `router` output to a resolved next hop: `false` (nothing done) if `nexthop`'s MAC is not
    /// known behind `port`.
    fn output_to_neighbour<A: Family>(
        &self,
        dp: u32,
        port: &str,
        nexthop: A,
        mut packet: Packet,
        trace: &mut Trace,
        hops: usize,
    ) -> bool {
        let Some(mac) = self.resolve_neighbour(dp, port, nexthop) else {
            return false;
        };
        packet.eth_dst = mac;
        let text = format!("neighbour {nexthop} is-at {}", format_mac(&mac));
        self.step(trace, dp, text);
        self.router_output(dp, port, packet, trace, hops);
        true
    }

    /// After routing: the TTL, the source MAC, then out to the next hop, or a request for an
    /// unknown one.
    pub(super) fn forward<A: Family>(
        &self,
        dp: u32,
        hop: &Hop<'_, A>,
        packet: Packet,
        trace: &mut Trace,
        hops: usize,
    ) {
        let redirect = self.entries(dp).find_map(|e| match e {
            IrEntry::GatewayPort { port, redirect, .. } if port == hop.port => Some(redirect),
            _ => None,
        });
        let Some(redirect) = redirect else {
            self.forward_unfenced(dp, hop, packet, trace, hops);
            return;
        };
        match self.gateway_fence(dp, redirect) {
            Some(why) => {
                let text = format!(
                    "dropped: out of gateway port {}, {why} (gateway_unsupported)",
                    hop.port
                );
                self.step(trace, dp, text);
            }
            None => {
                let text = format!("to {redirect} (lr_in_gw_redirect), on its chassis");
                self.step(trace, dp, text);
                let packet = self.centralized_snat(dp, hop.port, packet, trace);
                match self.egress_loop(dp, hop, packet, trace) {
                    Some(looped) => self.router(dp, hop.port, looped, trace, hops + 1),
                    None => self.forward_unfenced(dp, hop, packet, trace, hops),
                }
            }
        }
    }

    /// Whether router `dp`'s chassisredirect port `redirect` is bound to a chassis (its gateway
    /// is active somewhere).
    pub(super) fn redirect_bound(&self, dp: u32, redirect: &str) -> bool {
        self.entries(dp).any(|e| {
            matches!(e, IrEntry::Port { name, kind: crate::pipeline::ir::PortKind::ChassisRedirect { chassis: Some(_) }, .. } if name == redirect)
        })
    }

    /// Why the gateway chassis does not carry what router `dp` routes out of the gateway port
    /// of chassisredirect port `redirect`: it is active nowhere, or the router has
    /// centralized NAT the datapath does not carry (as the backend decides); `None` when it
    /// does.
    fn gateway_fence(&self, dp: u32, redirect: &str) -> Option<&'static str> {
        if !self.redirect_bound(dp, redirect) {
            return Some("no active gateway chassis");
        }
        let fenced = self.entries(dp).any(
            |e| matches!(e, IrEntry::CentralizedNat { redirect: fenced, .. } if fenced == redirect),
        );
        fenced.then_some("centralized NAT not carried")
    }

    /// On the gateway chassis, the router's centralized SNAT (or a centralized FIP's /32 SNAT)
    /// of the longest prefix holding the packet's IPv4 source, out of gateway port `port`: the
    /// source becomes the rule's external address (its port kept, as the kernel keeps it where
    /// it is free).
    fn centralized_snat(
        &self,
        dp: u32,
        port: &str,
        mut packet: Packet,
        trace: &mut Trace,
    ) -> Packet {
        let L3::Ipv4 { source, .. } = &mut packet.l3 else {
            return packet;
        };
        let rule = self
            .entries(dp)
            .filter_map(|e| match e {
                IrEntry::CentralizedSnat {
                    gateway_port,
                    logical,
                    external,
                    ..
                } if gateway_port == port && logical.contains(*source) => {
                    Some((logical.length, *external))
                }
                _ => None,
            })
            .max_by_key(|(length, _)| *length);
        if let Some((_, external)) = rule {
            let text = format!("centralized SNAT: {source} leaves as {external}");
            *source = external;
            self.step(trace, dp, text);
        }
        packet
    }

    /// OVN's `lr_out_egr_loop` on the gateway chassis: a packet out of gateway port `hop.port`
    /// to one of the router's centralized DNAT addresses (a FIP's, a `dnat` rule's) is routed (TTL, the port's MAC, which
    /// `lr_in_arp_resolve` gives a NAT address too), then looped back into the router through
    /// that port, its MACs swapped; `None` for any other packet.
    fn egress_loop<A: Family>(
        &self,
        dp: u32,
        hop: &Hop<'_, A>,
        mut packet: Packet,
        trace: &mut Trace,
    ) -> Option<Packet> {
        let L3::Ipv4 { destination, .. } = packet.l3 else {
            return None;
        };
        let to_fip = self.entries(dp).any(|e| {
            matches!(e, IrEntry::CentralizedDnat { gateway_port, external, .. }
                if gateway_port == hop.port && *external == destination)
        });
        if !to_fip {
            return None;
        }
        packet.decrement_ttl();
        packet.eth_src = hop.source_mac;
        packet.eth_dst = hop.source_mac;
        let text = format!(
            "lr_out_egr_loop: {destination} is a NAT address, back into the router from {}",
            hop.port
        );
        self.step(trace, dp, text);
        Some(packet)
    }

    /// OVN's `lr_in_dnat` for what enters gateway port `inport`: a centralized DNAT's address
    /// (a FIP's or a `dnat` rule's, its gateway chassis bound) or a distributed FIP's becomes
    /// its pod's; a new connection to a VIP of the router's load balancers goes to a backend
    /// (`None`: a VIP without backends drops it). (A stateless evaluator: a `dnat` rule's and
    /// a balanced connection's replies are not traced back.)
    pub(super) fn gateway_dnat(
        &self,
        dp: u32,
        inport: &str,
        mut packet: Packet,
        trace: &mut Trace,
    ) -> Option<Packet> {
        if let Some(balanced) = self.router_balance(dp, inport, &packet, trace) {
            return balanced;
        }
        let L3::Ipv4 { destination, .. } = &mut packet.l3 else {
            return Some(packet);
        };
        let pod = self.entries(dp).find_map(|e| match e {
            IrEntry::CentralizedDnat {
                gateway_port,
                external,
                logical,
                ..
            } if gateway_port == inport && external == destination => Some(*logical),
            IrEntry::DistributedNat {
                gateway_port,
                external_ip,
                logical_ip,
                ..
            } if gateway_port == inport && external_ip == destination => Some(*logical_ip),
            _ => None,
        });
        if let Some(pod) = pod {
            let text = format!("lr_in_dnat: {destination} becomes {pod}");
            *destination = pod;
            self.step(trace, dp, text);
        }
        Some(packet)
    }

    /// [`Self::forward`] out of any port, a gateway port included (a distributed NAT rule's
    /// packets).
    pub(super) fn forward_unfenced<A: Family>(
        &self,
        dp: u32,
        hop: &Hop<'_, A>,
        mut packet: Packet,
        trace: &mut Trace,
        hops: usize,
    ) {
        packet.decrement_ttl();
        packet.eth_src = hop.source_mac;
        let (port, nexthop) = (hop.port, hop.nexthop);
        if self.output_to_neighbour(dp, port, nexthop, packet, trace, hops) {
            return;
        }
        if !self.entries(dp).any(A::requests_next_hop) {
            self.step(trace, dp, format!("dropped: next hop {nexthop} unresolved"));
            return;
        }
        let text = format!("next hop {nexthop} unknown: {} for it", A::NEXT_HOP_REQUEST);
        self.step(trace, dp, text);
        let request = A::next_hop_request(&packet, hop);
        self.router_output(dp, port, request, trace, hops);
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
