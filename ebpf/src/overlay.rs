//! The overlay's receive side (Cilium's bpf_overlay role): a Geneve frame in OVN's layout
//! addressed to this node's encap IP (IPv4, or IPv6 over an IPv6 underlay) loses its outer 58
//! bytes (78 over IPv6) and goes to the local port that
//! (VNI = datapath key, egress port key) names, or to the local members of the flood group it
//! names ([`crate::flood`]), or, for a chassisredirect port active here, out of its gateway
//! port ([`crate::gateway`]); a tunnel's BFD control packet (VNI 0, no options) passes to the
//! host's stack, where the agent's BFD sessions read it; anything else addressed to our Geneve
//! port is dropped, and what is not ours passes. Reads `TUNNEL_PORTS`, `GATEWAY_EGRESS` (and `TUNNEL_CONFIG` through
//! [`crate::geneve`]).

use aya_ebpf::{
    bindings::{
        BPF_F_ADJ_ROOM_DECAP_L3_IPV4, BPF_F_ADJ_ROOM_DECAP_L3_IPV6, BPF_F_ADJ_ROOM_FIXED_GSO,
        bpf_adj_room_mode::BPF_ADJ_ROOM_MAC,
    },
    programs::TcContext,
};
use ovnbpf_common::{DropReason, TunnelConfig, TunnelPortKey, drop_reason, geneve};

use crate::{
    flood,
    geneve::{ipv6_underlay, tunnel_config},
    headers::{
        ETH_P_IPV4, ETH_P_IPV6, EthHeader, GeneveHeader, GeneveOption, IPPROTO_UDP, Ipv6Frame,
        OuterHeaders, OuterHeaders6, UdpFrame, UdpHeader,
    },
    maps::{GATEWAY_EGRESS, TUNNEL_PORTS, get},
    output::{Between, deliver_to_port},
};

/// What to do with a frame from the uplink.
pub enum Decision {
    /// Not a tunnel frame for us: the host stack gets it untouched.
    NotOurs,
    /// Ours, but undeliverable: dropped and counted under the reason.
    Drop(DropReason),
    /// Decapsulated and redirected: the helper's verdict.
    Redirected(i32),
}

/// The Geneve part of a frame addressed to this node's endpoint: where the inner frame starts,
/// and what the outer headers say.
struct Outer {
    overhead: usize,
    geneve: GeneveHeader,
    option: GeneveOption,
}

/// Whether the frame is Geneve to our IPv4 endpoint (`None`: not ours), and its outer headers
/// if they are whole and OVN's.
#[inline(always)]
fn outer4(ctx: &TcContext, config: &TunnelConfig) -> Option<Result<Outer, DropReason>> {
    // One copy of the outer headers for every frame long enough to be Geneve; shorter frames
    // only need their UDP part read to tell whether they are truncated Geneve or not ours.
    let outer = ctx.load::<OuterHeaders>(0);
    let frame = match &outer {
        Ok(outer) => outer.udp_frame,
        Err(_) => ctx.load::<UdpFrame>(0).ok()?,
    };
    let fragment = u16::from_be(frame.ip.fragment) & 0x3fff;
    if frame.ip.version_ihl != 0x45
        || frame.ip.protocol != IPPROTO_UDP
        || frame.ip.destination != config.encap_ip
        || fragment != 0
        || u16::from_be(frame.udp.destination) != geneve::UDP_PORT
    {
        return None;
    }
    // From here on the frame is addressed to our Geneve endpoint: anything off is dropped.
    let Ok(outer) = outer else {
        return Some(Err(drop_reason::GENEVE_MALFORMED));
    };
    if is_bfd(&outer.geneve) {
        return None;
    }
    let udp_len = usize::from(u16::from_be(frame.udp.len));
    Some(whole(
        ctx,
        geneve::OVERHEAD,
        udp_len,
        outer.geneve,
        outer.option,
    ))
}

/// [`outer4`] over an IPv6 underlay: Geneve to our IPv6 endpoint, the UDP header right after
/// the IPv6 one (Open vSwitch sends no extension headers).
#[inline(always)]
fn outer6(ctx: &TcContext, config: &TunnelConfig) -> Option<Result<Outer, DropReason>> {
    let frame = ctx.load::<Ipv6Frame>(0).ok()?;
    if frame.ip.next_header != IPPROTO_UDP || frame.ip.destination != config.encap_ip6 {
        return None;
    }
    let udp = ctx.load::<UdpHeader>(14 + 40).ok()?;
    if u16::from_be(udp.destination) != geneve::UDP_PORT {
        return None;
    }
    let Ok(outer) = ctx.load::<OuterHeaders6>(0) else {
        return Some(Err(drop_reason::GENEVE_MALFORMED));
    };
    if is_bfd(&outer.geneve) {
        return None;
    }
    let udp_len = usize::from(u16::from_be(udp.len));
    Some(whole(
        ctx,
        geneve::OVERHEAD6,
        udp_len,
        outer.geneve,
        outer.option,
    ))
}

/// Whether a Geneve frame to our endpoint is a tunnel's BFD control packet, as Open vSwitch
/// sends one on an OVN tunnel (VNI 0, no options; OVN's frames always carry its option): the
/// agent's BFD sessions read those from the host's stack (`agent/src/bfd`).
#[inline(always)]
fn is_bfd(header: &GeneveHeader) -> bool {
    header.version_options & 0x3f == 0 && header.vni_reserved[..3] == [0, 0, 0]
}

/// The checks every Geneve frame to our endpoint passes, whatever the outer family: lengths
/// (the UDP datagram within the frame, room for the inner Ethernet header) and OVN's layout.
#[inline(always)]
fn whole(
    ctx: &TcContext,
    overhead: usize,
    udp_len: usize,
    header: GeneveHeader,
    option: GeneveOption,
) -> Result<Outer, DropReason> {
    // Where the UDP header starts: the outer Ethernet and IP headers.
    let udp_at = overhead - 24;
    let frame_len = ctx.len() as usize;
    if frame_len < overhead + 14
        || udp_len < 8 + 16 + 14
        || udp_at + udp_len > frame_len
        || header.version_options != 2
        || u16::from_be(header.protocol) != geneve::PROTOCOL_ETHERNET
        || u16::from_be(option.class) != geneve::OVN_OPTION_CLASS
        || option.kind != geneve::OVN_OPTION_TYPE
        || option.length & 0x1f != 1
    {
        return Err(drop_reason::GENEVE_MALFORMED);
    }
    Ok(Outer {
        overhead,
        geneve: header,
        option,
    })
}

#[inline(always)]
pub fn decapsulate(ctx: &TcContext) -> Decision {
    let Some(config) = tunnel_config() else {
        return Decision::NotOurs;
    };
    let Ok(ether_type) = ctx.load::<u16>(12) else {
        return Decision::NotOurs;
    };
    let outer = match (u16::from_be(ether_type), ipv6_underlay(config)) {
        (ETH_P_IPV4, false) => outer4(ctx, config),
        (ETH_P_IPV6, true) => outer6(ctx, config),
        _ => None,
    };
    let outer = match outer {
        None => return Decision::NotOurs,
        Some(Err(reason)) => return Decision::Drop(reason),
        Some(Ok(outer)) => outer,
    };
    let vni = outer.geneve.vni_reserved;
    let key = TunnelPortKey {
        datapath: (u32::from(vni[0]) << 16) | (u32::from(vni[1]) << 8) | u32::from(vni[2]),
        port: u32::from_be(outer.option.data) & 0xffff,
    };
    // OVN's option: the ingress port's key above the egress port's.
    let option_data = u32::from_be(outer.option.data);
    // A local port, a flood group, or (neither) a chassisredirect port active here.
    let (port, group) = match get(&TUNNEL_PORTS, key) {
        Some(port) => (Some((port.ifindex, port.flags)), None),
        None => match flood::local_group(key.datapath, key.port) {
            Some(group) => (None, Some(group)),
            None if get(&GATEWAY_EGRESS, key).is_some() => (None, None),
            None => return Decision::Drop(drop_reason::GENEVE_UNKNOWN_DESTINATION),
        },
    };
    let Ok(inner) = ctx.load::<EthHeader>(outer.overhead) else {
        return Decision::Drop(drop_reason::GENEVE_MALFORMED);
    };
    let inner_type = u16::from_be(inner.ether_type);
    let decap_flags = match inner_type {
        ETH_P_IPV4 => BPF_F_ADJ_ROOM_DECAP_L3_IPV4,
        ETH_P_IPV6 => BPF_F_ADJ_ROOM_DECAP_L3_IPV6,
        _ => 0,
    };
    // Remove outer IP + UDP + Geneve + option + inner Ethernet (58 bytes after the outer
    // Ethernet header, 78 over IPv6), then write the inner Ethernet header over the outer one.
    if ctx
        .adjust_room(
            -(outer.overhead as i32),
            BPF_ADJ_ROOM_MAC,
            u64::from(BPF_F_ADJ_ROOM_FIXED_GSO | decap_flags),
        )
        .is_err()
        || ctx.store(0, &inner, 0).is_err()
    {
        return Decision::Drop(drop_reason::DECAP_FAILED);
    }
    match (port, group) {
        (Some((ifindex, flags)), _) => match deliver_to_port(
            ctx,
            ifindex,
            flags,
            decap_flags != 0,
            Between {
                datapath: key.datapath,
                ports: (option_data >> 16 & 0x7fff) << 16 | key.port,
            },
        ) {
            Ok(verdict) => Decision::Redirected(verdict),
            Err(reason) => Decision::Drop(reason),
        },
        // Flood copies skip the egress ACL stage: refused where the switch's ACLs may act on them.
        (None, Some(_))
            if inner_type == ETH_P_IPV4
                && crate::acl::unchecked(key.datapath, ovnbpf_common::acl::UNCHECKED_FLOOD) =>
        {
            Decision::Drop(drop_reason::ACL_FAIL_CLOSED)
        }
        (None, Some(group)) => Decision::Redirected(flood::deliver_to_members(ctx, &group, 0)),
        (None, None) => match crate::gateway::egress(ctx, key) {
            Ok(verdict) => Decision::Redirected(verdict),
            Err(reason) => Decision::Drop(reason),
        },
    }
}
