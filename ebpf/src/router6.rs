//! IPv6 routing, the route6 stage: a program of its own, which the IPv6 stage
//! ([`crate::ipv6`]) tail-calls ([`request`]) once it has found a packet is not for the router
//! itself, its hop limit lasts and the pod's switch lets it go (its stack was full): as the
//! IPv4 router,
//! the longest-prefix route by destination in `ROUTES6`, or by source in `SOURCE_ROUTES6`
//! where the router has `src-ip` routes and OVN's priority says so, following router-to-router
//! links (VPC peering) up to `MAX_ROUTER_HOPS`, the hop limit decremented per router (one that
//! runs out at a later router is dropped as `ttl_expired`: OVN answers there only senders in
//! the entering port's own networks, which a sender behind an earlier router is not); an ECMP
//! route's member chosen by the flow's 5-tuple hash (`ECMP_MEMBERS6`, [`ecmp::flow_hash6`]), a
//! discard route's packets dropped (`route_discard`); a
//! link-local destination goes back out of the port it came in on (northd's per-port
//! `fe80::/64` routes). Then the next hop's MAC from `NEIGHBOURS6` and the output
//! port's MAC as source; the destination switch's L2 step is the router stage's (the IPv6
//! stage has no stack left for it): the rewritten frame goes there with a
//! [`ovnbpf_common::ROUTED6_REQUEST_MAGIC`] request naming the switch and the port it enters
//! through. A next hop without a MAC gets the router's neighbour solicitation instead (flooded
//! on that switch). Into a switch whose from-lport ACLs the kernel would have to run on it (for
//! IPv6 it runs none), the packet is dropped (fails closed). Reads `ROUTERS`, `ROUTES6`,
//! `SOURCE_ROUTES6`, `NEIGHBOURS6`, `L2_FIB`, `ACL_SWITCHES`.

use aya_ebpf::{maps::lpm_trie::Key, programs::TcContext};
use ovnbpf_common::{
    DropReason, EcmpKey, FibKey, Ipv6Key, Ipv6Request, MAX_ROUTER_HOPS, ROUTE_DISCARD, ROUTE_ECMP,
    ROUTE_GATEWAY, ROUTE_TO_ROUTER, ROUTE_TO_SWITCH, ROUTE6_REQUEST_MAGIC, ROUTED6_REQUEST_MAGIC,
    ROUTER_FORWARDS, ROUTER_IPV6_UNSUPPORTED, ROUTER_ND_REQUESTS, ROUTER_SOURCE_ROUTES6, Route6Key,
    RouteEntry6,
    acl::{UNCHECKED_INGRESS, USER_RULES_INGRESS},
    drop_reason, ecmp, stage as slot,
};

use crate::headers::{ETH_HEADER_LEN, Ipv6Header};
use crate::maps::get;
use crate::output::Output;
use crate::router::Routed;
use crate::{
    ECMP_MEMBERS6, L2_FIB, NEIGHBOURS6, ROUTERS, ROUTES6, SOURCE_ROUTES6, acl, flood, ipv6, stages,
};

/// Hands the IPv6 packet of `request` to the route6 stage (a tail call: on success this never
/// returns). Returns the reason to drop the packet when the stage is not there.
#[inline(always)]
pub fn request(ctx: &TcContext, request: &Ipv6Request) -> DropReason {
    let [datapath, router, ingress_port, ifindex, _] = request.words();
    stages::jump(
        ctx,
        slot::ROUTE6,
        [
            datapath,
            router,
            ingress_port,
            ifindex,
            ROUTE6_REQUEST_MAGIC,
        ],
    )
}

/// The route6 stage: routes the IPv6 packet its request names (see the module doc).
#[inline(always)]
pub fn stage(ctx: &TcContext) -> Result<i32, DropReason> {
    let request = Ipv6Request::from_words(stages::take(ctx, ROUTE6_REQUEST_MAGIC)?);
    let ip = ctx
        .load::<Ipv6Header>(ETH_HEADER_LEN)
        .map_err(|_| drop_reason::ROUTED_MALFORMED)?;
    route(ctx, &ip, &request)
}

/// Routes the IPv6 packet of `request` (see the module doc), whose IPv6 header is `ip`.
#[inline(always)]
fn route(ctx: &TcContext, ip: &Ipv6Header, request: &Ipv6Request) -> Result<i32, DropReason> {
    let (last_router, route, hops) = if ipv6::is_link_local(&ip.destination) {
        (request.router, back_out(ctx, request)?, 1)
    } else {
        lookup(request.router, ip, flow_hash(ctx, ip))?
    };
    let next_hop = if route.nexthop != [0; 16] {
        route.nexthop
    } else {
        ip.destination
    };
    forward(ctx, ip.hop_limit, (last_router, &route, hops), next_hop)
}

/// The route back out of the port the packet came in on (the router port whose MAC the pod
/// addressed, on the pod's switch).
#[inline(always)]
fn back_out(ctx: &TcContext, request: &Ipv6Request) -> Result<RouteEntry6, DropReason> {
    let Ok(router_mac) = ctx.load::<[u8; 6]>(0) else {
        return Err(drop_reason::ROUTED_MALFORMED);
    };
    let fib = FibKey {
        datapath: request.datapath,
        mac: router_mac,
        padding: [0; 2],
    };
    Ok(RouteEntry6 {
        next_datapath: request.datapath,
        ingress_port: get(&L2_FIB, fib).map_or(0, |entry| entry.port),
        source_mac: router_mac,
        kind: ROUTE_TO_SWITCH,
        ..RouteEntry6::default()
    })
}

/// The route `router` (and the routers it hands over to) picks for the packet whose IPv6 header
/// is `ip`: the last router, its route to a switch (an ECMP route's member, chosen by
/// `flow_hash`) and the number of routers passed.
#[inline(always)]
fn lookup(
    router: u32,
    ip: &Ipv6Header,
    flow_hash: u32,
) -> Result<(u32, RouteEntry6, u8), DropReason> {
    let hop_limit = ip.hop_limit;
    let mut datapath = router;
    let mut hops: u8 = 0;
    let mut route = RouteEntry6::default();
    for _ in 0..MAX_ROUTER_HOPS {
        // Each router decrements: the next one receives `hop_limit - hops`.
        if hops > 0 && hop_limit <= hops + 1 {
            return Err(drop_reason::TTL_EXPIRED);
        }
        let dropped = route_at(datapath, ip, flow_hash, &mut route);
        if dropped != 0 {
            return Err(DropReason(dropped));
        }
        hops += 1;
        if route.kind != ROUTE_TO_ROUTER {
            return Ok((datapath, route, hops));
        }
        datapath = route.next_datapath;
    }
    Err(drop_reason::TOO_MANY_HOPS)
}

/// Writes into `route` what router `datapath` routes the packet with IPv6 header `ip` by (an
/// ECMP route's member for a flow of `flow_hash`); returns 0, or the reason to drop the
/// packet. Out of line: the hops above, unrolled, share one copy of it and its stack.
#[inline(never)]
fn route_at(datapath: u32, ip: &Ipv6Header, flow_hash: u32, route: &mut RouteEntry6) -> u32 {
    let flags = get(&ROUTERS, datapath).map_or(0, |r| r.flags);
    if flags & ROUTER_FORWARDS == 0 || flags & ROUTER_IPV6_UNSUPPORTED != 0 {
        return drop_reason::ROUTER_UNSUPPORTED.0;
    }
    let key = |ip| {
        Key::new(
            160,
            Route6Key {
                datapath: datapath.to_be(),
                ip,
            },
        )
    };
    let by_destination = ROUTES6.get(key(ip.destination));
    // One stage in OVN: the higher priority of the two matches wins.
    let by_source = if flags & ROUTER_SOURCE_ROUTES6 != 0 {
        SOURCE_ROUTES6.get(key(ip.source))
    } else {
        None
    };
    *route = match (by_destination, by_source) {
        (Some(d), Some(s)) if s.priority > d.priority => *s,
        (Some(d), _) => *d,
        (None, Some(s)) => *s,
        (None, None) => return drop_reason::NO_ROUTE.0,
    };
    if route.kind == ROUTE_DISCARD {
        return drop_reason::ROUTE_DISCARD.0;
    }
    if route.kind == ROUTE_ECMP {
        let dropped = ecmp_member(datapath, route, flow_hash);
        if dropped != 0 {
            return dropped;
        }
    }
    if route.kind == ROUTE_GATEWAY {
        return drop_reason::GATEWAY_UNSUPPORTED.0;
    }
    0
}

/// Replaces ECMP route `route` of router `datapath` by the member a flow of `flow_hash` takes;
/// returns 0, or the reason to drop the packet (the member is missing).
#[inline(always)]
fn ecmp_member(datapath: u32, route: &mut RouteEntry6, flow_hash: u32) -> u32 {
    let key = EcmpKey {
        datapath,
        group: route.next_datapath,
        index: ecmp::member_index(flow_hash, route.ingress_port),
    };
    match get(&ECMP_MEMBERS6, key) {
        Some(member) if member.kind != ROUTE_ECMP => {
            *route = *member;
            0
        }
        _ => drop_reason::ECMP_MEMBER_MISSING.0,
    }
}

/// The 5-tuple hash ECMP members are chosen by: ports for TCP, UDP and SCTP right after the
/// IPv6 header (0 for other protocols and behind extension headers).
#[inline(always)]
fn flow_hash(ctx: &TcContext, ip: &Ipv6Header) -> u32 {
    let ports = match ip.next_header {
        6 | 17 | 132 => ctx
            .load::<[u16; 2]>(ETH_HEADER_LEN + 40)
            .map_or((0, 0), |[source, destination]| {
                (u16::from_be(source), u16::from_be(destination))
            }),
        _ => (0, 0),
    };
    ecmp::flow_hash6(
        &ip.source,
        &ip.destination,
        ip.next_header,
        ports.0,
        ports.1,
    )
}

/// A routed packet to `next_hop` on the route's switch: MACs rewritten (the output port's, the
/// neighbour's), hop limit decremented per router, then to the router stage for that switch's
/// L2 step. A next hop without a MAC is solicited instead.
#[inline(always)]
fn forward(
    ctx: &TcContext,
    hop_limit: u8,
    (last_router, route, hops): (u32, &RouteEntry6, u8),
    next_hop: [u8; 16],
) -> Result<i32, DropReason> {
    let key = Ipv6Key {
        datapath: last_router,
        ip: next_hop,
    };
    let Some(neighbour) = get(&NEIGHBOURS6, key) else {
        return solicit(ctx, last_router, route, next_hop);
    };
    let mac = neighbour.mac;
    let fib = FibKey {
        datapath: route.next_datapath,
        mac,
        padding: [0; 2],
    };
    if get(&L2_FIB, fib).is_none() {
        return Err(drop_reason::ROUTED_UNKNOWN_DESTINATION);
    }
    // Entering the destination switch from its router port: its from-lport ACLs, which the
    // kernel runs neither there nor for IPv6 at all, may act on it.
    if acl::unchecked(route.next_datapath, UNCHECKED_INGRESS) {
        return Err(drop_reason::ACL_FAIL_CLOSED);
    }
    if acl::switch_of(route.next_datapath, USER_RULES_INGRESS).is_some() {
        return Err(drop_reason::ACL_IPV6);
    }
    let mut macs = [0_u8; 12];
    macs[..6].copy_from_slice(&mac);
    macs[6..].copy_from_slice(&route.source_mac);
    let hop_limit = hop_limit - hops;
    ctx.store(0, &macs, 0)
        .and_then(|()| ctx.store(ETH_HEADER_LEN + 7, &hop_limit, 0))
        .map_err(|_| drop_reason::ROUTER_REPLY_FAILED)?;
    let output = [
        route.next_datapath,
        route.ingress_port,
        0,
        0,
        ROUTED6_REQUEST_MAGIC,
    ];
    Err(stages::jump(ctx, slot::ROUTER, output))
}

/// The router stage's part: the L2 output step of a frame the IPv6 stage routed (see the
/// module doc) onto switch `datapath`, entering through its port `ingress_port`, to the MAC it
/// addressed.
#[inline(always)]
pub fn output(ctx: &TcContext, datapath: u32, ingress_port: u32) -> Result<Routed, DropReason> {
    let Ok(mac) = ctx.load::<[u8; 6]>(0) else {
        return Err(drop_reason::ROUTED_MALFORMED);
    };
    let fib = FibKey {
        datapath,
        mac,
        padding: [0; 2],
    };
    let Some(entry) = get(&L2_FIB, fib).copied() else {
        return Err(drop_reason::ROUTED_UNKNOWN_DESTINATION);
    };
    Ok(Routed::Output(Output {
        entry,
        datapath,
        ingress_port,
        ip: true,
        routed: true,
    }))
}

/// Turns the packet into `router`'s solicitation for `next_hop` from the output port of
/// `route`, flooded on the route's switch (`_MC_flood_l2`). Routers without the stage drop
/// and count the packet (`next_hop_unresolved`).
#[inline(always)]
fn solicit(
    ctx: &TcContext,
    router: u32,
    route: &RouteEntry6,
    next_hop: [u8; 16],
) -> Result<i32, DropReason> {
    let asks = get(&ROUTERS, router).is_some_and(|r| r.flags & ROUTER_ND_REQUESTS != 0);
    if !asks {
        return Err(drop_reason::NEXT_HOP_UNRESOLVED);
    }
    let Some(group) = flood::router_group(route.next_datapath) else {
        return Err(drop_reason::NEXT_HOP_UNRESOLVED);
    };
    ipv6::write_solicitation(ctx, route.source_mac, next_hop)?;
    Err(flood::request(ctx, &group.request(route.ingress_port, 0)))
}
