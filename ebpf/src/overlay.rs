//! The overlay's receive side (Cilium's bpf_overlay role): a Geneve frame in OVN's layout
//! addressed to this node's encap IP loses its outer 58 bytes and goes to the local port that
//! (VNI = datapath key, egress port key) names, or to the local members of the flood group it
//! names ([`crate::flood`]); anything else addressed to our Geneve port is dropped, and what is
//! not ours passes. Reads `TUNNEL_PORTS` (and `TUNNEL_CONFIG` through [`crate::geneve`]).

use aya_ebpf::{
    bindings::{
        BPF_F_ADJ_ROOM_DECAP_L3_IPV4, BPF_F_ADJ_ROOM_DECAP_L3_IPV6, BPF_F_ADJ_ROOM_FIXED_GSO,
        bpf_adj_room_mode::BPF_ADJ_ROOM_MAC,
    },
    programs::TcContext,
};
use ovnbpf_common::{DropReason, TunnelPortKey, drop_reason, geneve};

use crate::{
    flood,
    geneve::tunnel_config,
    headers::{ETH_P_IPV4, ETH_P_IPV6, EthHeader, IPPROTO_UDP, OuterHeaders, UdpFrame},
    maps::{TUNNEL_PORTS, get},
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

#[inline(always)]
pub fn decapsulate(ctx: &TcContext) -> Decision {
    let Some(config) = tunnel_config() else {
        return Decision::NotOurs;
    };
    // One copy of the outer headers for every frame long enough to be Geneve; shorter frames
    // only need their UDP part read to tell whether they are truncated Geneve or not ours.
    let outer = ctx.load::<OuterHeaders>(0);
    let frame = match &outer {
        Ok(outer) => outer.udp_frame,
        Err(_) => match ctx.load::<UdpFrame>(0) {
            Ok(frame) => frame,
            Err(_) => return Decision::NotOurs,
        },
    };
    let fragment = u16::from_be(frame.ip.fragment) & 0x3fff;
    if u16::from_be(frame.eth.ether_type) != ETH_P_IPV4
        || frame.ip.version_ihl != 0x45
        || frame.ip.protocol != IPPROTO_UDP
        || frame.ip.destination != config.encap_ip
        || fragment != 0
        || u16::from_be(frame.udp.destination) != geneve::UDP_PORT
    {
        return Decision::NotOurs;
    }
    // From here on the frame is addressed to our Geneve endpoint: anything off is dropped.
    let Ok(outer) = outer else {
        return Decision::Drop(drop_reason::GENEVE_MALFORMED);
    };
    let frame_len = ctx.len() as usize;
    let udp_len = usize::from(u16::from_be(frame.udp.len));
    let option_length = outer.option.length & 0x1f;
    if frame_len < geneve::OVERHEAD + 14
        || udp_len < 8 + 16 + 14
        || 14 + 20 + udp_len > frame_len
        || outer.geneve.version_options != 2
        || u16::from_be(outer.geneve.protocol) != geneve::PROTOCOL_ETHERNET
        || u16::from_be(outer.option.class) != geneve::OVN_OPTION_CLASS
        || outer.option.kind != geneve::OVN_OPTION_TYPE
        || option_length != 1
    {
        return Decision::Drop(drop_reason::GENEVE_MALFORMED);
    }
    let vni = outer.geneve.vni_reserved;
    let key = TunnelPortKey {
        datapath: (u32::from(vni[0]) << 16) | (u32::from(vni[1]) << 8) | u32::from(vni[2]),
        port: u32::from_be(outer.option.data) & 0xffff,
    };
    // OVN's option: the ingress port's key above the egress port's.
    let option_data = u32::from_be(outer.option.data);
    let (port, group) = match get(&TUNNEL_PORTS, key) {
        Some(port) => (Some((port.ifindex, port.flags)), None),
        None => match flood::local_group(key.datapath, key.port) {
            Some(group) => (None, Some(group)),
            None => return Decision::Drop(drop_reason::GENEVE_UNKNOWN_DESTINATION),
        },
    };
    let Ok(inner) = ctx.load::<EthHeader>(geneve::OVERHEAD) else {
        return Decision::Drop(drop_reason::GENEVE_MALFORMED);
    };
    let inner_type = u16::from_be(inner.ether_type);
    let decap_flags = match inner_type {
        ETH_P_IPV4 => BPF_F_ADJ_ROOM_DECAP_L3_IPV4,
        ETH_P_IPV6 => BPF_F_ADJ_ROOM_DECAP_L3_IPV6,
        _ => 0,
    };
    // Remove outer IPv4 + UDP + Geneve + option + inner Ethernet (58 bytes after the outer
    // Ethernet header), then write the inner Ethernet header over the outer one.
    if ctx
        .adjust_room(
            -(geneve::OVERHEAD as i32),
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
        (None, None) => Decision::Drop(drop_reason::GENEVE_UNKNOWN_DESTINATION),
    }
}
