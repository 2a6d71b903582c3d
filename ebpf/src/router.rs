//! The router stage, a program of its own that `from_pod` tail-calls through `STAGES` with a
//! [`RouterRequest`] in the skb's control block: what a logical router does for frames (but IPv6) a
//! pod sends to its gateway's MAC. An ICMP echo request to any of the router's addresses is
//! answered in place (MACs and addresses swapped, TTL 255 decremented by the routing back to the
//! sender as in OVN: 254, type 0) and sent back out of the pod's veth, as OVN's `lr_in_ip_input`
//! does; other traffic to the router's addresses gets OVN's reset or ICMP unreachable
//! ([`crate::reject`]). Other IPv4 is routed as the sending chassis does in OVN: the longest-prefix
//! route by destination in the router (in the ingress port's route table, where the router's
//! ports have some), or, where the router has `src-ip` routes and OVN's priority says so, by
//! source (following router-to-router links, e.g. VPC peering, up to `MAX_ROUTER_HOPS`); a
//! discard route drops; then the router's policies (the two tries, and the short list of
//! policies on both prefixes or on ports; drop, or reroute to another next hop and port),
//! an ECMP route's or reroute's member chosen by the flow's 5-tuple hash
//! ([`ovnbpf_common::ecmp`]), TTL decremented per router, source MAC of the output port, the next hop's MAC from the
//! neighbours, then the destination switch's L2 step: a local pod, or Geneve with that switch's
//! VNI; a next hop without a MAC gets the router's ARP request instead (flooded by the flood
//! stage). Out of a gateway port ([`ROUTE_GATEWAY`]): a local pod's distributed NAT rule's
//! SNAT, else on to the switch where the gateway's chassisredirect port is active here, or
//! tunnelled to the chassis where it is ([`redirect`], with the ARP request for an unknown next
//! hop), else dropped. What a router cannot do in the kernel is dropped and counted, never half-forwarded. ARP
//! the responder left unanswered (OVN's router consumes it) is dropped and counted, its sender
//! reported for MAC learning ([`crate::neighbour_learning`]); IPv6 is the
//! IPv6 stage's ([`crate::ipv6`]), which hands what it routed here for the same output step
//! ([`crate::router6::output`]); other protocols go on untouched. Reads `ROUTER_ADDRESSES`,
//! `ROUTERS`, `ROUTE_TABLES`, `ROUTES`, `SOURCE_ROUTES`, `POLICIES_BY_*`, `POLICY_PAIRS`,
//! `ECMP_MEMBERS`, `NEIGHBOURS`, `L2_FIB`, `NAT_BY_*`, `GATEWAY_REDIRECTS`, `GATEWAY_INPORTS`;
//! counts its
//! answers in `ROUTER_REPLIES`.

use aya_ebpf::{maps::lpm_trie::Key, programs::TcContext};
use ovnbpf_common::DropReason;
use ovnbpf_common::{
    EcmpKey, FIB_REMOTE, FibEntry, FibKey, FloodRequest, GATEWAY_SNAT, GatewayKey, GatewayRedirect,
    MAX_PAIR_POLICIES, MAX_ROUTER_HOPS, NatTarget, NeighbourKey, POLICY_ALLOW, POLICY_REROUTE,
    PairPolicyKey, PolicyEntry, ROUTE_DISCARD, ROUTE_ECMP, ROUTE_GATEWAY, ROUTE_GATEWAY_SNAT,
    ROUTE_TO_ROUTER, ROUTE_TO_SWITCH, ROUTED6_REQUEST_MAGIC, ROUTER_ADDRESS_ECHO,
    ROUTER_ARP_REQUESTS, ROUTER_FORWARDS, ROUTER_POLICIES, ROUTER_REQUEST_MAGIC,
    ROUTER_ROUTE_TABLES, ROUTER_SOURCE_ROUTES, RouteEntry, RouteKey, RouterRequest, drop_reason,
    ecmp, route_key_datapath, router_reply, stage as slot,
};

use crate::csum;
use crate::maps::{GATEWAY_INPORTS, GATEWAY_REDIRECTS, NAT_BY_LOGICAL, get};
use crate::output::{Output, output, reply_to_sender};
use crate::{
    ECMP_MEMBERS, L2_FIB, NEIGHBOURS, PASS, POLICIES_BY_DESTINATION, POLICIES_BY_SOURCE,
    POLICY_PAIRS, ROUTE_TABLES, ROUTER_ADDRESSES, ROUTERS, ROUTES, SOURCE_ROUTES, count_reply,
    flood,
    headers::{
        ArpFrame, ETH_HEADER_LEN, ETH_P_ARP, ETH_P_IPV4, ETH_P_IPV6, EthHeader, Ipv4Frame,
        Ipv4Header,
    },
    reject, stages,
};

const IPPROTO_ICMP: u8 = 1;
const ICMP_ECHO_REQUEST: u8 = 8;

/// The ICMP header's first four bytes.
#[repr(C, packed)]
#[derive(Clone, Copy)]
struct IcmpHead {
    kind: u8,
    code: u8,
    checksum: u16,
}

/// What the router made of a frame from a pod: a verdict, an L2 output to make (a routed frame,
/// rewritten, to the destination switch's port: [`output`], called from one place so it is
/// inlined once), or a frame of its own to flood.
pub enum Routed {
    Verdict(i32),
    Output(Output),
    /// A frame the router made (its ARP request) to flood on a switch: the flood stage's.
    Flood(FloodRequest),
}

/// Hands the frame to the router stage (a tail call: on success this never returns). Returns the
/// reason to drop the frame when the stage is not there.
#[inline(always)]
pub fn request(ctx: &TcContext, request: &RouterRequest) -> DropReason {
    stages::jump(ctx, slot::ROUTER, request.words())
}

/// The router stage: the router's answer, the routed frame's output, or its ARP request's
/// flood.
#[inline(always)]
pub fn stage(ctx: &TcContext) -> Result<i32, DropReason> {
    let routed = if stages::magic(ctx) == ROUTED6_REQUEST_MAGIC {
        let [datapath, ingress_port, ..] = stages::take(ctx, ROUTED6_REQUEST_MAGIC)?;
        crate::router6::output(ctx, datapath, ingress_port)?
    } else {
        let [router, router_ip, ifindex, _] = stages::take(ctx, ROUTER_REQUEST_MAGIC)?;
        handle(ctx, router, router_ip, ifindex)?
    };
    match routed {
        Routed::Verdict(verdict) => Ok(verdict),
        Routed::Flood(request) => Err(flood::request(ctx, &request)),
        // Into a switch whose from-lport ACLs may act on routed traffic: refused (fails
        // closed; IPv6 checks its own before).
        Routed::Output(routed)
            if crate::acl::unchecked(routed.datapath, ovnbpf_common::acl::UNCHECKED_INGRESS) =>
        {
            Err(ovnbpf_common::drop_reason::ACL_FAIL_CLOSED)
        }
        Routed::Output(routed) => output(ctx, &routed),
    }
}

/// Handles a frame addressed to a router port's MAC (of router `router`), sent from host veth
/// `ifindex`: the verdict or flood, or the drop reason.
#[inline(always)]
fn handle(
    ctx: &TcContext,
    router: u32,
    router_ip: u32,
    ifindex: u32,
) -> Result<Routed, DropReason> {
    let Ok(frame) = ctx.load::<Ipv4Frame>(0) else {
        return Ok(Routed::Verdict(PASS));
    };
    match u16::from_be(frame.eth.ether_type) {
        ETH_P_IPV4 => {}
        // What the ARP responder did not answer OVN's router consumes, learning the sender.
        ETH_P_ARP => {
            crate::neighbour_learning::report_arp(ctx, router);
            return Err(drop_reason::ARP_TO_ROUTER);
        }
        // `switching` hands IPv6 to the IPv6 stage; anything else IPv6 here is not handled.
        ETH_P_IPV6 => return Err(drop_reason::IPV6_TO_ROUTER),
        _ => return Ok(Routed::Verdict(PASS)),
    }
    // Only well-formed IPv4 without options is routed or answered.
    let total = usize::from(u16::from_be(frame.ip.total_len));
    if frame.ip.version_ihl != 0x45 || total < 20 || total + ETH_HEADER_LEN > ctx.len() as usize {
        return Err(drop_reason::ROUTED_MALFORMED);
    }
    let key = NeighbourKey {
        datapath: router,
        ip: frame.ip.destination,
    };
    match get(&ROUTER_ADDRESSES, key) {
        // For the router itself: a ping is answered, the rest rejected as OVN does.
        Some(address) => {
            let flags = address.flags;
            match echo_reply(ctx, &frame, flags, ifindex)? {
                Some(verdict) => Ok(Routed::Verdict(verdict)),
                None => reject::answer(ctx, &frame, flags, ifindex).map(Routed::Verdict),
            }
        }
        None if frame.ip.ttl <= 1 => {
            // As OVN: only for routers the kernel forwards for, and first fragments.
            let forwards = get(&ROUTERS, router).is_some_and(|r| r.flags & ROUTER_FORWARDS != 0);
            if !forwards {
                return Err(drop_reason::ROUTER_UNSUPPORTED);
            }
            if u16::from_be(frame.ip.fragment) & 0x1fff != 0 {
                return Err(drop_reason::TTL_EXPIRED);
            }
            time_exceeded(ctx, &frame, router_ip, ifindex).map(Routed::Verdict)
        }
        None => route(ctx, &frame, router, router_ip, ifindex),
    }
}

/// Length of an ICMP time exceeded frame: Ethernet, IPv4, ICMP header, the expired packet's IPv4
/// header and its first 8 bytes.
const TIME_EXCEEDED_LEN: u32 = 14 + 20 + 8 + 28;

/// The ICMP part of a time exceeded message: header and the quoted start of the expired packet.
#[repr(C, packed)]
#[derive(Clone, Copy)]
struct TimeExceeded {
    kind: u8,
    code: u8,
    checksum: u16,
    unused: u32,
    quoted: [u8; 28],
}

/// Turns a packet whose TTL expires at a router into the ICMP time exceeded OVN's router sends
/// back (`TtlExceeded`): from that router's ingress port address `router_ip`, TTL 254, DF,
/// quoting the packet's IPv4 header and first 8 bytes (OVN quotes more of longer packets); out
/// of the pod's veth, from the gateway's MAC.
#[inline(always)]
fn time_exceeded(
    ctx: &TcContext,
    frame: &Ipv4Frame,
    router_ip: u32,
    ifindex: u32,
) -> Result<i32, DropReason> {
    if router_ip == 0 || frame.ip.version_ihl != 0x45 {
        return Err(drop_reason::TTL_EXPIRED);
    }
    let Ok(quoted) = ctx.load::<[u8; 28]>(ETH_HEADER_LEN) else {
        return Err(drop_reason::TTL_EXPIRED);
    };
    // SAFETY: the helper takes the skb pointer the context holds and plain integers.
    if unsafe { aya_ebpf::helpers::bpf_skb_change_tail(ctx.skb.skb, TIME_EXCEEDED_LEN, 0) } != 0 {
        return Err(drop_reason::ROUTER_REPLY_FAILED);
    }
    let mut reply = *frame;
    reply.eth.destination = frame.eth.source;
    reply.eth.source = frame.eth.destination;
    reply.ip.total_len = ((TIME_EXCEEDED_LEN - 14) as u16).to_be();
    reply.ip.id = 0;
    // pinctrl composes with TOS CS6, then `packet_set_ipv4` sets the TOS it is given: 0.
    reply.ip.tos = 0;
    reply.ip.fragment = 0x4000_u16.to_be();
    reply.ip.ttl = 254;
    reply.ip.protocol = IPPROTO_ICMP;
    reply.ip.source = router_ip;
    reply.ip.destination = frame.ip.source;
    reply.ip.checksum = 0;
    reply.ip.checksum = csum::ipv4_header(&reply.ip).to_be();
    let mut icmp = TimeExceeded {
        kind: 11,
        code: 0,
        checksum: 0,
        unused: 0,
        quoted,
    };
    let mut sum: u32 = 11 << 8;
    let mut index = 0;
    while index < 28 {
        sum += u32::from(quoted[index]) << 8 | u32::from(quoted[index + 1]);
        index += 2;
    }
    icmp.checksum = csum::fold(sum).to_be();
    ctx.store(0, &reply, 0)
        .and_then(|()| ctx.store(ETH_HEADER_LEN + 20, &icmp, 0))
        .map_err(|_| drop_reason::ROUTER_REPLY_FAILED)?;
    count_reply(router_reply::TIME_EXCEEDED);
    Ok(reply_to_sender(ctx, ifindex))
}

/// Answers an ICMP echo request to one of the router's addresses (whose flags are `flags`),
/// from the router port's MAC the pod addressed; `None` when the frame is not one or the router
/// does not answer pings there.
#[inline(always)]
fn echo_reply(
    ctx: &TcContext,
    frame: &Ipv4Frame,
    flags: u32,
    ifindex: u32,
) -> Result<Option<i32>, DropReason> {
    let ip = frame.ip;
    if flags & ROUTER_ADDRESS_ECHO == 0
        || ip.version_ihl != 0x45
        || ip.protocol != IPPROTO_ICMP
        || u16::from_be(ip.fragment) & 0x3fff != 0
    {
        return Ok(None);
    }
    let icmp_offset = ETH_HEADER_LEN + 20;
    let Ok(icmp) = ctx.load::<IcmpHead>(icmp_offset) else {
        return Ok(None);
    };
    if icmp.kind != ICMP_ECHO_REQUEST || icmp.code != 0 {
        return Ok(None);
    }
    let mut reply = *frame;
    reply.eth.destination = frame.eth.source;
    reply.eth.source = frame.eth.destination;
    reply.ip.source = ip.destination;
    reply.ip.destination = ip.source;
    // `ip.ttl = 255`, then routed back to the sender: OVN's `lr_in_ip_routing` decrements it.
    reply.ip.ttl = 254;
    reply.ip.checksum = 0;
    reply.ip.checksum = csum::ipv4_header(&reply.ip).to_be();
    // Type 8 → 0: the one's-complement sum drops by 0x0800 (RFC 1624: HC' = ~(~HC + ~m + m')).
    let old = u32::from(u16::from_be(icmp.checksum));
    let sum = u32::from(!old as u16) + u32::from(!0x0800_u16);
    let icmp_reply = IcmpHead {
        kind: 0,
        code: 0,
        checksum: csum::fold(sum).to_be(),
    };
    ctx.store(0, &reply, 0)
        .and_then(|()| ctx.store(icmp_offset, &icmp_reply, 0))
        .map_err(|_| drop_reason::ROUTER_REPLY_FAILED)?;
    count_reply(router_reply::ECHO_REPLY);
    Ok(Some(reply_to_sender(ctx, ifindex)))
}

/// Length of a router's ARP request: Ethernet's minimum frame (the 42 bytes of the request, then
/// zeros, as a NIC pads it), which also keeps a checksum offload still pending on the packet it
/// replaces (a TCP or UDP checksum within its first 54 bytes) inside the frame.
const ARP_REQUEST_LEN: u32 = 60;

/// Turns a packet whose next hop `nexthop` has no MAC into the ARP request OVN's router sends for
/// it (`lr_in_arp_request`: `arp { eth.dst = ff:ff:ff:ff:ff:ff; arp.spa = reg1; arp.tpa = reg0;
/// arp.op = 1; output; }`), from the output port's MAC and address, flooded on the next hop's
/// switch from the router's port there (an underlay switch without members here: out of the
/// provider NIC only); the packet itself is dropped, as ovn-trace shows it (ovn-controller
/// buffers it until the reply). Routers without the stage, or switches without a group to
/// flood to, drop and count it (`next_hop_unresolved`).
#[inline(always)]
fn arp_request(
    ctx: &TcContext,
    router: u32,
    route: &RouteEntry,
    nexthop: u32,
) -> Result<Routed, DropReason> {
    if !asks_for_next_hops(router, route) {
        return Err(drop_reason::NEXT_HOP_UNRESOLVED);
    }
    // The group to flood to, or (`Err`) an underlay switch without members here (no group
    // installed): its physical network.
    let flood_to = match flood::router_group(route.next_datapath) {
        Some(group) => Ok(group),
        None => Err(crate::underlay::localnet(route.next_datapath)
            .ok_or(drop_reason::NEXT_HOP_UNRESOLVED)?),
    };
    write_arp_request(ctx, route, nexthop)?;
    match flood_to {
        Ok(group) => Ok(Routed::Flood(group.request(route.ingress_port, 0))),
        Err(localnet) => crate::underlay::to_provider(ctx, &localnet).map(Routed::Verdict),
    }
}

/// Rewrites the frame into the router's ARP request for `nexthop` out of `route`'s port.
#[inline(always)]
fn write_arp_request(ctx: &TcContext, route: &RouteEntry, nexthop: u32) -> Result<(), DropReason> {
    // SAFETY: the helper takes the skb pointer the context holds and plain integers.
    if unsafe { aya_ebpf::helpers::bpf_skb_change_tail(ctx.skb.skb, ARP_REQUEST_LEN, 0) } != 0 {
        return Err(drop_reason::ROUTER_REPLY_FAILED);
    }
    let request = ArpFrame {
        eth: EthHeader {
            destination: [0xff; 6],
            source: route.source_mac,
            ether_type: ETH_P_ARP.to_be(),
        },
        hardware_type: 1_u16.to_be(),
        protocol_type: ETH_P_IPV4.to_be(),
        hardware_len: 6,
        protocol_len: 4,
        operation: 1_u16.to_be(),
        sender_mac: route.source_mac,
        sender_ip: route.ingress_ip.to_ne_bytes(),
        target_mac: [0; 6],
        target_ip: nexthop.to_ne_bytes(),
    };
    let padding = [0_u8; ARP_REQUEST_LEN as usize - core::mem::size_of::<ArpFrame>()];
    ctx.store(0, &request, 0)
        .and_then(|()| ctx.store(core::mem::size_of::<ArpFrame>(), &padding, 0))
        .map_err(|_| drop_reason::ROUTER_REPLY_FAILED)?;
    count_reply(router_reply::ARP_REQUEST);
    Ok(())
}

/// Whether `router` sends ARP requests for next hops out of `route`'s port.
#[inline(always)]
fn asks_for_next_hops(router: u32, route: &RouteEntry) -> bool {
    let asks = get(&ROUTERS, router).is_some_and(|r| r.flags & ROUTER_ARP_REQUESTS != 0);
    asks && route.ingress_ip != 0
}

/// The output of a packet `router` routes out of its gateway port while the gateway's
/// chassisredirect port is active on another chassis (`lr_in_gw_redirect`, then the output to
/// that port): MACs and TTL rewritten as for any routed packet, then tunnelled to the gateway
/// chassis on the router's VNI, from the port the packet entered by (`lookup` put its key in
/// the route); a next hop without a MAC gets the router's ARP request, tunnelled there too,
/// which the gateway chassis sends out on the gateway port's network. A path of its own, apart
/// from [`route`]'s switch output, so that the verifier walks it once.
#[inline(always)]
fn redirect(
    ctx: &TcContext,
    ip: &Ipv4Header,
    router: u32,
    route: &RouteEntry,
    hops: u8,
) -> Result<Routed, DropReason> {
    let port = GatewayKey {
        router,
        switch: route.next_datapath,
    };
    let gateway = get(&GATEWAY_REDIRECTS, port).ok_or(drop_reason::GATEWAY_UNSUPPORTED)?;
    let key = next_hop(router, route, ip.destination);
    let nexthop = key.ip;
    let neighbour = get(&NEIGHBOURS, key).map(|neighbour| neighbour.mac);
    match neighbour {
        Some(mac) => rewrite(ctx, ip, mac, route.source_mac, hops)?,
        None if asks_for_next_hops(router, route) => write_arp_request(ctx, route, nexthop)?,
        None => return Err(drop_reason::NEXT_HOP_UNRESOLVED),
    }
    Ok(Routed::Output(Output {
        entry: to_gateway(gateway),
        datapath: router,
        ingress_port: route.ingress_port,
        ip: neighbour.is_some(),
        routed: true,
    }))
}

/// The next hop `route` of `router` takes a packet to `destination` to, as `NEIGHBOURS` keys it.
#[inline(always)]
fn next_hop(router: u32, route: &RouteEntry, destination: u32) -> NeighbourKey {
    NeighbourKey {
        datapath: router,
        ip: if route.nexthop != 0 {
            route.nexthop
        } else {
            destination
        },
    }
}

/// A routed packet's MACs (to `mac`, from `source_mac`) and TTL (`hops` routers passed), with
/// the IPv4 checksum.
#[inline(always)]
fn rewrite(
    ctx: &TcContext,
    ip: &Ipv4Header,
    mac: [u8; 6],
    source_mac: [u8; 6],
    hops: u8,
) -> Result<(), DropReason> {
    // TTL and its checksum word (TTL is the high byte of the word it shares with the protocol).
    let old_word = (u16::from(ip.ttl) << 8 | u16::from(ip.protocol)).to_be();
    let new_ttl = ip.ttl - hops;
    let new_word = (u16::from(new_ttl) << 8 | u16::from(ip.protocol)).to_be();
    let mut macs = [0_u8; 12];
    macs[..6].copy_from_slice(&mac);
    macs[6..].copy_from_slice(&source_mac);
    ctx.store(0, &macs, 0)
        .and_then(|()| ctx.store(ETH_HEADER_LEN + 8, &new_ttl, 0))
        .and_then(|()| {
            ctx.l3_csum_replace(
                ETH_HEADER_LEN + 10,
                u64::from(old_word),
                u64::from(new_word),
                2,
            )
        })
        .map_err(|_| drop_reason::ROUTER_REPLY_FAILED)
}

/// The L2 output to the chassisredirect port of `gateway` on its chassis.
#[inline(always)]
fn to_gateway(gateway: &GatewayRedirect) -> FibEntry {
    FibEntry {
        kind: FIB_REMOTE,
        ifindex: 0,
        flags: 0,
        remote_ip: gateway.remote_ip,
        port: gateway.port,
    }
}

/// Where the routers take a packet.
enum Lookup {
    /// The last router, its route to a switch, and the number of routers passed.
    Route(u32, RouteEntry, u8),
    /// As `Route`, out of the last router's gateway port, from a pod with a distributed NAT
    /// rule here: the packet leaves from the rule's external address and MAC.
    Translated(u32, RouteEntry, u8, NatTarget),
    /// The TTL runs out on entering a later router, whose ingress port has this address.
    Expired(u32),
}

/// The route `router` (and the routers it hands over to) picks for a packet from `source` to
/// `destination` that arrived with `ttl` on the first router's port with address `router_ip`.
#[inline(always)]
fn lookup(
    router: u32,
    (source, destination): (u32, u32),
    ttl: u8,
    router_ip: u32,
    flow: &Flow,
) -> Result<Lookup, DropReason> {
    let mut datapath = router;
    let mut hops: u8 = 0;
    let mut ingress_ip = router_ip;
    for _ in 0..MAX_ROUTER_HOPS {
        // Each router decrements: the next one receives `ttl - hops`, and answers 0 or 1.
        if hops > 0 && ttl <= hops + 1 {
            return Ok(Lookup::Expired(ingress_ip));
        }
        let (flags, pairs) = get(&ROUTERS, datapath).map_or((0, 0), |r| (r.flags, r.pair_policies));
        if flags & ROUTER_FORWARDS == 0 {
            return Err(drop_reason::ROUTER_UNSUPPORTED);
        }
        // The ingress port's route table, for routers whose ports have some.
        let table = if flags & ROUTER_ROUTE_TABLES != 0 {
            let port = NeighbourKey {
                datapath,
                ip: ingress_ip,
            };
            get(&ROUTE_TABLES, port).copied().unwrap_or(0)
        } else {
            0
        };
        let key = |ip| {
            Key::new(
                64,
                RouteKey {
                    datapath: datapath.to_be(),
                    ip,
                },
            )
        };
        let route_key = |ip| {
            Key::new(
                64,
                RouteKey {
                    datapath: route_key_datapath(datapath, table).to_be(),
                    ip,
                },
            )
        };
        let by_destination = ROUTES.get(route_key(destination));
        // One stage in OVN: the higher priority of the two matches wins (they never tie:
        // destination routes are 1 or 2 above a multiple of 3, source routes on one).
        let by_source = if flags & ROUTER_SOURCE_ROUTES != 0 {
            SOURCE_ROUTES.get(route_key(source))
        } else {
            None
        };
        let route = match (by_destination, by_source) {
            (Some(d), Some(s)) if s.priority > d.priority => *s,
            (Some(d), _) => *d,
            (None, Some(s)) => *s,
            (None, None) => return Err(drop_reason::NO_ROUTE),
        };
        if route.kind == ROUTE_DISCARD {
            return Err(drop_reason::ROUTE_DISCARD);
        }
        // Then the router's policies (`lr_in_policy`), which may drop or reroute.
        let route = if flags & ROUTER_POLICIES != 0 {
            let by_destination = POLICIES_BY_DESTINATION.get(key(destination)).copied();
            let by_source = POLICIES_BY_SOURCE.get(key(source)).copied();
            let by_prefix = match (by_destination, by_source) {
                (Some(d), Some(s)) if s.priority > d.priority => Some(s),
                (Some(d), _) => Some(d),
                (None, s) => s,
            };
            let by_pair = pair_policy(datapath, pairs, (source, destination), flow);
            let policy = match (by_prefix, by_pair) {
                (Some(p), Some(q)) if q.priority > p.priority => Some(q),
                (Some(p), _) => Some(p),
                (None, q) => q,
            };
            police(route, policy)?
        } else {
            route
        };
        let route = if route.kind == ROUTE_ECMP {
            ecmp_member(datapath, &route, flow.hash)?
        } else {
            route
        };
        if route.kind == ROUTE_GATEWAY {
            // A pod of this chassis with a distributed NAT rule leaves here (not to one of the
            // router's own NAT addresses: OVN loops that back into the router); the rest of
            // the gateway port's traffic is the gateway chassis's.
            let from = NeighbourKey {
                datapath,
                ip: source,
            };
            let to = NeighbourKey {
                datapath,
                ip: destination,
            };
            if let Some(target) = get(&NAT_BY_LOGICAL, from)
                && !crate::snat::is_fip_address(to)
            {
                return Ok(Lookup::Translated(datapath, route, hops + 1, *target));
            }
            // `lr_in_gw_redirect`: to the chassisredirect port, here (on to the switch) or on
            // the gateway chassis (the route stays a gateway's: [`route`] tunnels it there,
            // from the port the packet entered by).
            let port = GatewayKey {
                router: datapath,
                switch: route.next_datapath,
            };
            let Some(gateway) = get(&GATEWAY_REDIRECTS, port) else {
                return Err(drop_reason::GATEWAY_UNSUPPORTED);
            };
            let mut route = route;
            if gateway.remote_ip == 0 {
                route.kind = if gateway.flags & GATEWAY_SNAT != 0 {
                    ROUTE_GATEWAY_SNAT
                } else {
                    ROUTE_TO_SWITCH
                };
            } else {
                let entered = NeighbourKey {
                    datapath,
                    ip: ingress_ip,
                };
                route.ingress_port = get(&GATEWAY_INPORTS, entered).copied().unwrap_or(0);
            }
            return Ok(Lookup::Route(datapath, route, hops + 1));
        }
        hops += 1;
        if route.kind != ROUTE_TO_ROUTER {
            return Ok(Lookup::Route(datapath, route, hops));
        }
        datapath = route.next_datapath;
        ingress_ip = route.ingress_ip;
    }
    Err(drop_reason::TOO_MANY_HOPS)
}

/// The highest-priority policy of router `router`'s `pairs` policies matching both a source and
/// a destination prefix, or transport ports (stored highest priority first), that the packet
/// falls under.
#[inline(always)]
fn pair_policy(
    router: u32,
    pairs: u32,
    (source, destination): (u32, u32),
    flow: &Flow,
) -> Option<PolicyEntry> {
    for index in 0..MAX_PAIR_POLICIES {
        if index >= pairs {
            return None;
        }
        let pair = get(&POLICY_PAIRS, PairPolicyKey { router, index })?;
        let within = |[low, high]: [u16; 2], port: u16| low <= port && port <= high;
        if source & pair.source_mask == pair.source
            && destination & pair.destination_mask == pair.destination
            && (pair.protocol == 0
                || (pair.protocol == flow.protocol
                    && within(pair.source_ports, flow.ports.0)
                    && within(pair.destination_ports, flow.ports.1)))
        {
            return Some(pair.policy);
        }
    }
    None
}

/// The route after the router's policies: the highest-priority of the policy the destination,
/// the one the source falls under (the agent stored at each prefix the best policy containing
/// it) and the first pair policy matching both, its verdict applied to `route`.
#[inline(always)]
fn police(route: RouteEntry, policy: Option<PolicyEntry>) -> Result<RouteEntry, DropReason> {
    let Some(policy) = policy else {
        return Ok(route);
    };
    match policy.verdict {
        POLICY_ALLOW => Ok(route),
        POLICY_REROUTE if policy.route.next_datapath != 0 || policy.route.kind == ROUTE_ECMP => {
            Ok(policy.route)
        }
        POLICY_REROUTE => Err(drop_reason::ROUTED_UNKNOWN_DESTINATION),
        _ => Err(drop_reason::POLICY_DROP),
    }
}

/// The member of ECMP route (or reroute) `route` of router `datapath` that a flow of
/// `flow_hash` takes.
#[inline(always)]
fn ecmp_member(
    datapath: u32,
    route: &RouteEntry,
    flow_hash: u32,
) -> Result<RouteEntry, DropReason> {
    let key = EcmpKey {
        datapath,
        group: route.nexthop,
        index: ecmp::member_index(flow_hash, route.ingress_port),
    };
    match get(&ECMP_MEMBERS, key) {
        Some(member) if member.kind != ROUTE_ECMP => Ok(*member),
        _ => Err(drop_reason::ECMP_MEMBER_MISSING),
    }
}

/// What policies and ECMP see of a packet's transport layer.
struct Flow {
    protocol: u8,
    /// Source and destination ports (host byte order; 0 for protocols without them and for
    /// later fragments).
    ports: (u16, u16),
    /// The 5-tuple hash ECMP members are chosen by.
    hash: u32,
}

/// The packet's [`Flow`] (ports only for TCP, UDP and SCTP first fragments).
#[inline(always)]
fn flow_of(ctx: &TcContext, ip: &Ipv4Header) -> Flow {
    let first_fragment = u16::from_be(ip.fragment) & 0x1fff == 0;
    let ports = match ip.protocol {
        6 | 17 | 132 if first_fragment => ctx
            .load::<[u16; 2]>(ETH_HEADER_LEN + 20)
            .map_or((0, 0), |[source, destination]| {
                (u16::from_be(source), u16::from_be(destination))
            }),
        _ => (0, 0),
    };
    Flow {
        protocol: ip.protocol,
        ports,
        hash: ecmp::flow_hash(
            u32::from_be(ip.source),
            u32::from_be(ip.destination),
            ip.protocol,
            ports.0,
            ports.1,
        ),
    }
}

/// Routes `frame` (IPv4, addressed to a router port of `router`) and hands it to the destination
/// switch's L2 step.
#[inline(always)]
fn route(
    ctx: &TcContext,
    frame: &Ipv4Frame,
    router: u32,
    router_ip: u32,
    ifindex: u32,
) -> Result<Routed, DropReason> {
    let ip = frame.ip;
    let (last_router, mut route, hops, nat) = match lookup(
        router,
        (ip.source, ip.destination),
        ip.ttl,
        router_ip,
        &flow_of(ctx, &ip),
    )? {
        Lookup::Route(last_router, route, hops) => (last_router, route, hops, None),
        Lookup::Translated(last_router, route, hops, target) => {
            (last_router, route, hops, Some(target))
        }
        Lookup::Expired(source) if u16::from_be(ip.fragment) & 0x1fff == 0 => {
            return time_exceeded(ctx, frame, source, ifindex).map(Routed::Verdict);
        }
        Lookup::Expired(_) => return Err(drop_reason::TTL_EXPIRED),
    };
    if let Some(target) = &nat {
        // `lr_in_gw_redirect`: `eth.src = M; reg1 = E;` (also the ARP request's sender); a
        // centralized FIP keeps the gateway port's (its MAC, `reg1` untouched).
        route.source_mac = target.mac;
        if target.flags & ovnbpf_common::NAT_CENTRALIZED == 0 {
            route.ingress_ip = target.ip;
        }
    }
    // Out of a gateway port whose chassisredirect port is another chassis's (see `lookup`).
    if nat.is_none() && route.kind == ROUTE_GATEWAY {
        return redirect(ctx, &ip, last_router, &route, hops);
    }
    let key = next_hop(last_router, &route, ip.destination);
    let nexthop = key.ip;
    let Some(neighbour) = get(&NEIGHBOURS, key) else {
        return arp_request(ctx, last_router, &route, nexthop);
    };
    let mac = neighbour.mac;
    let fib_key = FibKey {
        datapath: route.next_datapath,
        mac,
        padding: [0; 2],
    };
    // A MAC no port of an underlay switch has is the physical network's (`_MC_unknown` holds
    // the localnet port): `Err` with the switch's localnet.
    let entry = match get(&L2_FIB, fib_key) {
        Some(entry) => Ok(*entry),
        None => Err(crate::underlay::localnet(route.next_datapath)
            .ok_or(drop_reason::ROUTED_UNKNOWN_DESTINATION)?),
    };
    rewrite(ctx, &ip, mac, route.source_mac, hops)?;
    // The active gateway's centralized SNAT, in a stage of its own.
    if route.kind == ROUTE_GATEWAY_SNAT {
        return Err(crate::snat::request_out(
            ctx,
            last_router,
            route.next_datapath,
            route.ingress_port,
        ));
    }
    if let Some(target) = &nat {
        crate::nat::from_pod(ctx, &ip, target.ip)?;
    }
    let entry = match entry {
        Ok(entry) => entry,
        // Into a switch whose from-lport ACLs may act on routed traffic: refused, as for its
        // ports (`stage`).
        Err(_)
            if crate::acl::unchecked(
                route.next_datapath,
                ovnbpf_common::acl::UNCHECKED_INGRESS,
            ) =>
        {
            return Err(drop_reason::ACL_FAIL_CLOSED);
        }
        Err(localnet) => return crate::underlay::to_provider(ctx, &localnet).map(Routed::Verdict),
    };
    Ok(Routed::Output(Output {
        entry,
        datapath: route.next_datapath,
        ingress_port: route.ingress_port,
        ip: true,
        routed: true,
    }))
}
