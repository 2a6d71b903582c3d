//! Geneve decapsulation on the uplink: a frame in OVN's layout (outer IPv4, UDP 6081, Geneve
//! with exactly the OVN option) addressed to this node's encap IP loses its outer 58 bytes and
//! goes to the local port that (VNI = datapath key, egress port key) names. Owns the parsing and
//! the decision; reads `TUNNEL_CONFIG` and `TUNNEL_PORTS`, counts into `DROP_COUNTERS`.

use aya_ebpf::{
    bindings::{
        BPF_F_ADJ_ROOM_DECAP_L3_IPV4, BPF_F_ADJ_ROOM_DECAP_L3_IPV6, BPF_F_ADJ_ROOM_FIXED_GSO,
        bpf_adj_room_mode::BPF_ADJ_ROOM_MAC,
    },
    helpers::{bpf_redirect, bpf_redirect_peer},
    programs::TcContext,
};
use ovnbpf_common::{LOCAL_PORT_VETH_PEER, TunnelPortKey, drop_reason, geneve};

use crate::{
    TUNNEL_CONFIG, TUNNEL_PORTS,
    headers::{ETH_P_IPV4, ETH_P_IPV6, EthHeader, IPPROTO_UDP, OuterHeaders, UdpFrame},
};

/// What to do with a frame from the uplink.
pub enum Decision {
    /// Not a tunnel frame for us: the host stack gets it untouched.
    NotOurs,
    /// Ours, but undeliverable: dropped and counted under the reason.
    Drop(u32),
    /// Decapsulated and redirected: the helper's verdict.
    Redirected(i32),
}

#[inline(always)]
pub fn decapsulate(ctx: &TcContext) -> Decision {
    let Some(config) = TUNNEL_CONFIG.get(0) else {
        return Decision::NotOurs;
    };
    if config.encap_ip == 0 {
        return Decision::NotOurs;
    }
    let Ok(frame) = ctx.load::<UdpFrame>(0) else {
        return Decision::NotOurs;
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
    let Ok(outer) = ctx.load::<OuterHeaders>(0) else {
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
    // SAFETY: a hash map lookup returns a pointer into the map that stays valid for the program.
    let Some(port) = (unsafe { TUNNEL_PORTS.get(&key) }) else {
        return Decision::Drop(drop_reason::GENEVE_UNKNOWN_DESTINATION);
    };
    let (ifindex, flags) = (port.ifindex, port.flags);
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
    // redirect_peer enters the pod's netns at once but hands frames to the IP stack: non-IP
    // frames (ARP) take the veth's egress instead.
    let peer = flags & LOCAL_PORT_VETH_PEER != 0 && decap_flags != 0;
    // SAFETY: the redirect helpers take plain integers and only set the skb's redirect target.
    let verdict = unsafe {
        if peer {
            bpf_redirect_peer(ifindex, 0)
        } else {
            bpf_redirect(ifindex, 0)
        }
    };
    Decision::Redirected(verdict as i32)
}
