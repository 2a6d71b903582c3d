//! Distributed NAT's translation (a FIP on its pod's chassis): one IPv4 address of a packet
//! replaced by another, with the IPv4 header's checksum and, in a first fragment, the TCP or
//! UDP checksum over the pseudo-header (a UDP checksum of zero stays zero; ICMP and other
//! protocols carry none over the addresses). Stateless: a 1:1 rule translates every packet the
//! same way, so no connection is tracked and a rule's change applies to the next packet. An ICMP
//! error's quoted packet is translated too ([`translate_quoted`]), as Linux's NAT translates a
//! related packet: the pod matches an error about what it sent (fragmentation needed on the
//! way out, an external port unreachable) to its socket, and the outside an error the pod sends
//! about what it received. The way in from the provider network: a
//! frame to a rule's external MAC ([`from_provider_to_router`]) and ARP for its external
//! address ([`answer_from_provider`]). Reads `NAT_BY_EXTERNAL` (`ARP_RESPONDER` through [`crate::arp`]).

use aya_ebpf::{
    bindings::{BPF_F_MARK_MANGLED_0, BPF_F_PSEUDO_HDR},
    helpers::{bpf_redirect, bpf_skb_vlan_pop},
    programs::TcContext,
};
use ovnbpf_common::{
    ARP_ANSWER_PROVIDER, DropReason, FIB_ROUTER_GATEWAY, FIB_ROUTER_SNAT, FibEntry,
    NAT_SNAT_ADDRESS, NAT_STATEFUL, NeighbourKey, ROUTER_REQUEST_MAGIC, RouterRequest, drop_reason,
};

use crate::{
    PASS,
    headers::{ETH_HEADER_LEN, ETH_P_ARP, ETH_P_IPV4, EthHeader, Ipv4Frame, Ipv4Header},
    maps::{NAT_BY_EXTERNAL, get},
};

const IP_CHECKSUM: usize = ETH_HEADER_LEN + 10;
/// Offsets of the IPv4 source and destination addresses in the frame.
pub const IP_SOURCE: usize = ETH_HEADER_LEN + 12;
pub const IP_DESTINATION: usize = ETH_HEADER_LEN + 16;
const L4_OFFSET: usize = ETH_HEADER_LEN + 20;
const IPPROTO_ICMP: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
/// The ICMP checksum, and the quoted IPv4 header of an ICMP error (after the ICMP header).
const ICMP_CHECKSUM: usize = L4_OFFSET + 2;
const QUOTED_OFFSET: usize = L4_OFFSET + 8;
/// Offsets of the quoted packet's source and destination addresses.
pub const QUOTED_SOURCE: usize = QUOTED_OFFSET + 12;
pub const QUOTED_DESTINATION: usize = QUOTED_OFFSET + 16;

/// Replaces the address at `offset` ([`IP_SOURCE`] or [`IP_DESTINATION`]) of an IPv4 packet
/// without options, `old` (as in the packet) by `new`; `protocol` and `first_fragment` say
/// whether a transport checksum covers it.
#[inline(always)]
pub fn translate(
    ctx: &TcContext,
    offset: usize,
    (old, new): (u32, u32),
    protocol: u8,
    first_fragment: bool,
) -> Result<(), DropReason> {
    if old == new {
        return Ok(());
    }
    let failed = |_| drop_reason::NAT_FAILED;
    let transport = match protocol {
        IPPROTO_TCP => Some((L4_OFFSET + 16, 0)),
        IPPROTO_UDP => Some((L4_OFFSET + 6, u64::from(BPF_F_MARK_MANGLED_0))),
        _ => None,
    };
    if let Some((checksum, mangled)) = transport.filter(|_| first_fragment) {
        let flags = u64::from(BPF_F_PSEUDO_HDR) | mangled | 4;
        ctx.l4_csum_replace(checksum, u64::from(old), u64::from(new), flags)
            .map_err(failed)?;
    }
    ctx.l3_csum_replace(IP_CHECKSUM, u64::from(old), u64::from(new), 4)
        .map_err(failed)?;
    ctx.store(offset, &new, 0).map_err(failed)
}

/// In an ICMP error (destination unreachable, time exceeded, parameter problem) of `protocol`,
/// replaces the quoted packet's address at `offset` ([`QUOTED_SOURCE`] or
/// [`QUOTED_DESTINATION`]) if it is `old`, by `new`: with the quoted IPv4 header's checksum,
/// the quoted TCP or UDP checksum where the quote holds it (a zero UDP checksum stays zero),
/// and the ICMP checksum over them. Other packets are left alone.
#[inline(always)]
pub fn translate_quoted(
    ctx: &TcContext,
    protocol: u8,
    offset: usize,
    old: u32,
    new: u32,
) -> Result<(), DropReason> {
    if protocol != IPPROTO_ICMP || old == new {
        return Ok(());
    }
    match quoted(ctx, offset, old, new) {
        0 => Ok(()),
        reason => Err(DropReason(reason)),
    }
}

/// [`translate_quoted`] for an ICMP packet: 0, or the drop reason. Out of line (the router
/// stage has little stack to spare), so with arguments and a result a BPF call can pass.
#[inline(never)]
fn quoted(ctx: &TcContext, offset: usize, old: u32, new: u32) -> u32 {
    match translate_quoted_icmp(ctx, offset, old, new) {
        Ok(()) => 0,
        Err(reason) => reason.0,
    }
}

/// The checksum arithmetic is the kernel's: each checksum field is updated in place by the
/// difference of what it covers (the helpers' plain incremental update), then the ICMP
/// checksum by the differences of the fields it covers, read back; few values live on the
/// stack.
#[inline(always)]
fn translate_quoted_icmp(
    ctx: &TcContext,
    offset: usize,
    old: u32,
    new: u32,
) -> Result<(), DropReason> {
    let kind = ctx.load::<u8>(L4_OFFSET).unwrap_or(0);
    let address = ctx.load::<u32>(offset).unwrap_or(0);
    if !matches!(kind, 3 | 11 | 12) || address != old {
        return Ok(());
    }
    let failed = |_| drop_reason::NAT_FAILED;
    // The quoted header: its address and checksum (their changes cancel out in ICMP's sum).
    ctx.store(offset, &new, 0).map_err(failed)?;
    ctx.l4_csum_replace(ICMP_CHECKSUM, u64::from(old), u64::from(new), 4)
        .map_err(failed)?;
    let header_checksum = ctx.load::<u16>(QUOTED_OFFSET + 10).map_err(failed)?;
    ctx.l3_csum_replace(QUOTED_OFFSET + 10, u64::from(old), u64::from(new), 4)
        .map_err(failed)?;
    let updated = ctx.load::<u16>(QUOTED_OFFSET + 10).map_err(failed)?;
    ctx.l4_csum_replace(
        ICMP_CHECKSUM,
        u64::from(header_checksum),
        u64::from(updated),
        2,
    )
    .map_err(failed)?;
    // The quoted transport checksum, where the quote holds it (a first fragment without
    // options; a zero UDP checksum stays zero).
    let layout = ctx.load::<u8>(QUOTED_OFFSET).unwrap_or(0);
    let fragment = ctx.load::<u16>(QUOTED_OFFSET + 6).map_or(1, u16::from_be);
    let at = match ctx.load::<u8>(QUOTED_OFFSET + 9).unwrap_or(0) {
        IPPROTO_TCP => QUOTED_OFFSET + 20 + 16,
        IPPROTO_UDP => QUOTED_OFFSET + 20 + 6,
        _ => return Ok(()),
    };
    if layout != 0x45 || fragment & 0x1fff != 0 {
        return Ok(());
    }
    let Ok(transport) = ctx.load::<u16>(at) else {
        return Ok(());
    };
    if transport == 0 {
        return Ok(());
    }
    ctx.l3_csum_replace(at, u64::from(old), u64::from(new), 4)
        .map_err(failed)?;
    let updated = ctx.load::<u16>(at).map_err(failed)?;
    ctx.l4_csum_replace(ICMP_CHECKSUM, u64::from(transport), u64::from(updated), 2)
        .map_err(failed)
}

/// A frame from the provider network (NIC `ifindex`, VLAN `vlan`) to a router's MAC on the
/// provider network's switch `switch`: an ARP packet's sender is reported for learning
/// ([`crate::neighbour_learning`]: the external gateway's reply to the router's request); IPv4
/// to a rule's external address (the rule's external MAC, on its pod's chassis: `ls_in_l2_lkup`
/// hands it to the router, which admits it on the gateway port) gets the pod's address
/// (`lr_in_dnat`), and other IPv4 to the MAC of a gateway port active here
/// ([`FIB_ROUTER_GATEWAY`]: OVN's resident admission) keeps its own; either goes to the router
/// stage as entering through the gateway port, untagged. The rest goes on untouched, as before
/// (the datapath carries no other traffic from a provider network into a router). An expiring
/// TTL is answered with ICMP time exceeded from the packet's destination, untranslated, as
/// OVN's `lr_in_ip_input` answers for the gateway port (dropped, `ttl_expired`, off a VLAN).
/// The switch runs no ACL stage here: a FIP's IPv4 is refused where its from-lport ACLs may act
/// on it (fails closed, as for its pods).
#[inline(always)]
pub fn from_provider_to_router(
    ctx: &TcContext,
    switch: u32,
    entry: &FibEntry,
    (ifindex, vlan): (u32, u32),
) -> i32 {
    let router = entry.ifindex;
    let Ok(eth) = ctx.load::<EthHeader>(0) else {
        return PASS;
    };
    match u16::from_be(eth.ether_type) {
        ETH_P_ARP => {
            crate::neighbour_learning::report_arp(ctx, router);
            return PASS;
        }
        ETH_P_IPV4 => {}
        _ => return PASS,
    }
    let Ok(frame) = ctx.load::<Ipv4Frame>(0) else {
        return PASS;
    };
    let ip = frame.ip;
    let to = NeighbourKey {
        datapath: router,
        ip: ip.destination,
    };
    // A FIP's address becomes its pod's; to the active gateway's own port, it stays, and so
    // do a `dnat` rule's, which the gateway NAT stage translates, recording the connection,
    // and an SNAT rule's, whose replies that stage translates.
    let (pod, stateful) = match get(&NAT_BY_EXTERNAL, to) {
        Some(target) if target.flags & (NAT_STATEFUL | NAT_SNAT_ADDRESS) != 0 => {
            (ip.destination, true)
        }
        Some(target) => (target.ip, false),
        None if entry.flags & FIB_ROUTER_GATEWAY != 0 => (ip.destination, false),
        None => return PASS,
    };
    let reason = if crate::acl::unchecked(switch, ovnbpf_common::acl::UNCHECKED_INGRESS) {
        drop_reason::ACL_FAIL_CLOSED
    } else {
        let snat = stateful || entry.flags & FIB_ROUTER_SNAT != 0;
        match enter_router(
            ctx,
            &ip,
            pod,
            (router, entry.remote_ip, snat),
            (ifindex, vlan),
        ) {
            Ok(reason) | Err(reason) => reason,
        }
    };
    crate::drop::drop_frame(ctx, reason)
}

/// Hands `ip` (for a FIP, to become `pod`) to `router`'s stage: the reason to drop the frame
/// (`Ok` once the router stage was called and missed).
#[inline(always)]
fn enter_router(
    ctx: &TcContext,
    ip: &Ipv4Header,
    pod: u32,
    (router, router_ip, snat): (u32, u32, bool),
    (ifindex, vlan): (u32, u32),
) -> Result<DropReason, DropReason> {
    if ip.version_ihl != 0x45 {
        return Err(drop_reason::ROUTED_MALFORMED);
    }
    // SAFETY: the helper takes the skb pointer the context holds.
    if vlan != 0 && unsafe { bpf_skb_vlan_pop(ctx.skb.skb) } != 0 {
        return Err(drop_reason::DECAP_FAILED);
    }
    // The router's own answers (an echo reply from the gateway port) go back out of the
    // provider NIC, when untagged (the tag is gone by then).
    let ifindex = if vlan == 0 { ifindex } else { 0 };
    if ip.ttl <= 1 {
        // `lr_in_ip_input`'s answer for the gateway port, before any translation: ICMP time
        // exceeded from the packet's own destination (OVN swaps the addresses), which the
        // router stage sends when entered "from" that address.
        if ifindex == 0 {
            return Err(drop_reason::TTL_EXPIRED);
        }
        let request = RouterRequest {
            router,
            router_ip: ip.destination,
            ifindex,
            magic: ROUTER_REQUEST_MAGIC,
        };
        return Ok(crate::router::request(ctx, &request));
    }
    if pod != ip.destination {
        to_pod(ctx, ip, pod)?;
    }
    if snat {
        // The active gateway's centralized SNAT first: replies get their pod back.
        return Ok(crate::snat::request_in(ctx, router, router_ip, ifindex));
    }
    let request = RouterRequest {
        router,
        router_ip,
        ifindex,
        magic: ROUTER_REQUEST_MAGIC,
    };
    Ok(crate::router::request(ctx, &request))
}

/// `ip`'s source (a FIP's pod) becomes `external`, and so does the destination of the packet
/// an ICMP error quotes (an error about what the pod received for the external address).
#[inline(always)]
pub fn from_pod(ctx: &TcContext, ip: &Ipv4Header, external: u32) -> Result<(), DropReason> {
    translate_both(
        ctx,
        ip,
        (IP_SOURCE, QUOTED_DESTINATION),
        (ip.source, external),
    )
}

/// `ip`'s destination (a FIP's address) becomes `pod`, and so does the source of the packet an
/// ICMP error quotes (an error about what the pod sent from the external address).
#[inline(always)]
pub fn to_pod(ctx: &TcContext, ip: &Ipv4Header, pod: u32) -> Result<(), DropReason> {
    translate_both(
        ctx,
        ip,
        (IP_DESTINATION, QUOTED_SOURCE),
        (ip.destination, pod),
    )
}

/// Address `old` of `ip` at `offset` becomes `new`, and so does the one at `quoted` of the
/// packet an ICMP error quotes.
#[inline(always)]
fn translate_both(
    ctx: &TcContext,
    ip: &Ipv4Header,
    (offset, quoted): (usize, usize),
    (old, new): (u32, u32),
) -> Result<(), DropReason> {
    let first_fragment = u16::from_be(ip.fragment) & 0x1fff == 0;
    translate(ctx, offset, (old, new), ip.protocol, first_fragment)?;
    translate_quoted(ctx, ip.protocol, quoted, old, new)
}

/// The answer to an ARP request from the provider network for an address the switch's
/// responder answers there too (a distributed NAT rule's external address, on its pod's
/// chassis: the router's `lr_in_ip_input` answer), sent back out of provider NIC `ifindex`.
#[inline(always)]
pub fn answer_from_provider(ctx: &TcContext, datapath: u32, ifindex: u32) -> Option<i32> {
    crate::arp::answer_in_place(ctx, datapath, |answer| {
        answer.flags & ARP_ANSWER_PROVIDER != 0
    })?;
    crate::counters::count_reply(ovnbpf_common::router_reply::ARP_REPLY_PROVIDER);
    // SAFETY: the helper takes plain integers and only sets the skb's redirect target; the
    // frame keeps its VLAN tag (in the skb's metadata) on the way out.
    Some(unsafe { bpf_redirect(ifindex, 0) } as i32)
}
