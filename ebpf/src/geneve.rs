//! Geneve as OVN puts it on the wire (outer IPv4 or IPv6, UDP 6081, Geneve with exactly the OVN
//! option): this node's tunnel endpoint, and encapsulation toward another chassis (the 58 bytes
//! in front of the frame, 78 over an IPv6 underlay, out of the uplink with the next hop's MAC
//! resolved by the kernel, or re-addressed for each flood copy), with an outer UDP checksum for
//! chassis that want one ([`crate::encap_checksum`]; zero for the others, which over IPv6 is
//! RFC 6935's tunnel exception, see [`ovnbpf_common::TUNNEL_IPV6`]). Other chassis are named by their endpoint key
//! ([`ovnbpf_common::TunnelConfig`]): their IPv4 address, or over an IPv6 underlay the key of
//! their address in `REMOTE_ENCAPS`. Decapsulation and what follows it are in
//! [`crate::overlay`]. Reads `TUNNEL_CONFIG` and `REMOTE_ENCAPS`.

use aya_ebpf::{
    bindings::bpf_fib_lookup,
    bindings::{
        BPF_F_ADJ_ROOM_ENCAP_L2_ETH, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6,
        BPF_F_ADJ_ROOM_ENCAP_L4_UDP, BPF_F_ADJ_ROOM_FIXED_GSO, bpf_adj_room_mode::BPF_ADJ_ROOM_MAC,
    },
    cty::c_void,
    helpers::{bpf_fib_lookup, bpf_get_hash_recalc, bpf_redirect_neigh, bpf_skb_change_head},
    programs::TcContext,
};
use ovnbpf_common::DropReason;

/// Address families of a FIB lookup.
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
use ovnbpf_common::{REMOTE_ENCAP_CSUM, TUNNEL_IPV6, TunnelConfig, drop_reason, geneve};

use crate::{
    REMOTE_ENCAPS, TUNNEL_CONFIG,
    headers::{
        ETH_P_IPV4, ETH_P_IPV6, EthHeader, GeneveHeader, GeneveOption, IPPROTO_UDP, Ipv4Header,
        UdpHeader,
    },
    maps::get,
};
use crate::{csum, encap_checksum};

/// This node's tunnel endpoint, if configured (the map's value itself: the stages that
/// encapsulate have no stack for a copy).
#[inline(always)]
pub fn tunnel_config() -> Option<&'static TunnelConfig> {
    let config = TUNNEL_CONFIG.get(0)?;
    (config.encap_ip != 0 || ipv6_underlay(config)).then_some(config)
}

/// Whether the node's underlay is IPv6.
#[inline(always)]
pub fn ipv6_underlay(config: &TunnelConfig) -> bool {
    config.flags & TUNNEL_IPV6 != 0
}

/// The IPv6 address of the endpoint with key `endpoint` (IPv6 underlays).
#[inline(always)]
fn endpoint6(endpoint: u32) -> Result<&'static [u8; 16], DropReason> {
    get(&REMOTE_ENCAPS, endpoint)
        .map(|encap| &encap.ip6)
        .ok_or(drop_reason::TUNNEL_ENDPOINT_UNKNOWN)
}

/// Where an encapsulated frame goes: the datapath (VNI), the logical ports it names and the
/// remote chassis's encap IP (network byte order).
pub struct Tunnel {
    pub datapath: u32,
    pub ingress_port: u32,
    pub egress_port: u32,
    pub remote_ip: u32,
}

/// Puts OVN's outer headers in front of the frame and sends it out of the uplink; the verdict
/// of the redirect, or the drop reason.
#[inline(always)]
pub fn encapsulate(
    ctx: &TcContext,
    config: &TunnelConfig,
    tunnel: &Tunnel,
) -> Result<i32, DropReason> {
    if ipv6_underlay(config) {
        encapsulate_over::<true>(ctx, config, tunnel)
    } else {
        encapsulate_over::<false>(ctx, config, tunnel)
    }
}

/// [`encapsulate`] over an IPv6 underlay (`V6`) or an IPv4 one. The family is a constant of
/// each function on the way, so the verifier walks each family's path once, not every
/// combination of their branches (the flood stage's walk went from 48,000 verified
/// instructions to 269,000 with the family tested at each step).
#[inline(always)]
fn encapsulate_over<const V6: bool>(
    ctx: &TcContext,
    config: &TunnelConfig,
    tunnel: &Tunnel,
) -> Result<i32, DropReason> {
    let ip = push_outer_headers::<V6>(ctx, config, tunnel)?;
    // One lookup for the endpoint's wish and (over IPv6) its address.
    let endpoint = get(&REMOTE_ENCAPS, tunnel.remote_ip);
    if let Some(encap) = endpoint.filter(|encap| encap.flags & REMOTE_ENCAP_CSUM != 0) {
        if !encap_checksum::segmented_later(ctx) {
            let base = encap_checksum::base::<V6>(ctx)?;
            let checksum = if V6 {
                encap_checksum::toward6(base, &encap.ip6)
            } else {
                encap_checksum::toward(base, tunnel.remote_ip)
            };
            encap_checksum::store::<V6>(ctx, checksum)?;
        } else if ip && let Some(verdict) = encap_checksum::to_segmenter(config) {
            return Ok(verdict);
        }
    }
    if ip {
        Ok(send_to_next_hop(config))
    } else {
        send_resolved::<V6>(ctx, config, tunnel.remote_ip)
    }
}

/// Sends an encapsulated frame whose skb protocol is not IP (an ARP inside: the kernel's
/// neighbour redirect only handles IP) out of the uplink, with the next hop's MACs from the FIB
/// and neighbour table; the redirect verdict.
#[inline(always)]
pub fn send_resolved<const V6: bool>(
    ctx: &TcContext,
    config: &TunnelConfig,
    remote_ip: u32,
) -> Result<i32, DropReason> {
    set_next_hop_macs::<V6>(ctx, config, remote_ip)?;
    // SAFETY: the helper takes plain integers and only sets the skb's redirect target.
    Ok(unsafe { aya_ebpf::helpers::bpf_redirect(config.uplink_ifindex, 0) } as i32)
}

/// Sends an encapsulated frame out of the uplink, the kernel resolving the next hop's MAC for
/// the outer destination (`bpf_redirect_neigh`); the redirect verdict.
#[inline(always)]
pub fn send_to_next_hop(config: &TunnelConfig) -> i32 {
    // SAFETY: a null parameter block asks the kernel to look the next hop up by the outer
    // destination address.
    unsafe { bpf_redirect_neigh(config.uplink_ifindex, core::ptr::null_mut(), 0, 0) as i32 }
}

/// Offset of the outer IPv4 checksum and destination, and of the outer UDP checksum, in an
/// encapsulated frame.
const OUTER_IP_CHECKSUM: usize = 14 + 10;
const OUTER_IP_DESTINATION: usize = 14 + 16;
const OUTER_UDP_CHECKSUM: usize = 14 + 20 + 6;
/// Offsets of the outer IPv6 destination and of the outer UDP checksum in a frame encapsulated
/// over an IPv6 underlay.
const OUTER_IP6_DESTINATION: usize = 14 + 24;
const OUTER_UDP6_CHECKSUM: usize = 14 + 40 + 6;

/// Points an encapsulated frame at another chassis: outer destination and checksums
/// (`udp_base`: see [`Retarget`]).
#[inline(always)]
pub fn retarget<const V6: bool>(
    ctx: &TcContext,
    config: &TunnelConfig,
    remote_ip: u32,
    udp_base: u32,
) -> Result<(), DropReason> {
    let mut fields = Retarget {
        remote_ip,
        checksum: 0,
        udp_checksum: 0,
        udp_base,
    };
    retarget_with::<V6>(ctx, config, &mut fields)
}

/// The outer fields [`retarget_with`] writes, in memory the caller chooses (the flood walk's
/// callback keeps them in a per-CPU map: it has almost no stack).
#[repr(C)]
pub struct Retarget {
    pub remote_ip: u32,
    pub checksum: u16,
    pub udp_checksum: u16,
    /// The frame's [`encap_checksum::base`], for chassis that want outer UDP checksums; 0 when
    /// it has none to give (a GSO frame: its copies leave without).
    pub udp_base: u32,
}

/// The outer UDP checksum base of a frame [`retarget`] re-addresses: see [`Retarget::udp_base`].
#[inline(always)]
pub fn retarget_base<const V6: bool>(ctx: &TcContext) -> Result<u32, DropReason> {
    if encap_checksum::segmented_later(ctx) {
        Ok(0)
    } else {
        encap_checksum::base::<V6>(ctx)
    }
}

/// [`retarget`] toward `fields.remote_ip`, the checksums computed into `fields`.
#[inline(always)]
pub fn retarget_with<const V6: bool>(
    ctx: &TcContext,
    config: &TunnelConfig,
    fields: &mut Retarget,
) -> Result<(), DropReason> {
    if V6 {
        // One lookup for the address and the wish; IPv6 has no header checksum.
        let encap =
            get(&REMOTE_ENCAPS, fields.remote_ip).ok_or(drop_reason::TUNNEL_ENDPOINT_UNKNOWN)?;
        fields.udp_checksum = if fields.udp_base != 0 && encap.flags & REMOTE_ENCAP_CSUM != 0 {
            encap_checksum::toward6(fields.udp_base, &encap.ip6)
        } else {
            0
        };
        return ctx
            .store(OUTER_IP6_DESTINATION, &encap.ip6, 0)
            .and_then(|()| ctx.store(OUTER_UDP6_CHECKSUM, &fields.udp_checksum, 0))
            .map_err(|_| drop_reason::ENCAP_FAILED);
    }
    fields.udp_checksum = if fields.udp_base != 0 && encap_checksum::wanted(&fields.remote_ip) {
        encap_checksum::toward(fields.udp_base, fields.remote_ip)
    } else {
        0
    };
    let ip_len = (ctx.len() - 14) as u16;
    fields.checksum = csum::outer_ipv4(ip_len, config.encap_ip, fields.remote_ip).to_be();
    ctx.store(OUTER_IP_DESTINATION, &fields.remote_ip, 0)
        .and_then(|()| ctx.store(OUTER_IP_CHECKSUM, &fields.checksum, 0))
        .and_then(|()| ctx.store(OUTER_UDP_CHECKSUM, &fields.udp_checksum, 0))
        .map_err(|_| drop_reason::ENCAP_FAILED)
}

/// Sends a copy of an encapsulated frame out of the uplink, with the outer MACs of the next hop
/// toward `remote_ip` from the kernel's FIB and neighbour table; the frame stays for more.
/// `params` is the caller's scratch for the FIB lookup (the flood walk keeps it in a per-CPU
/// map: its callback has almost no stack), and the MACs are stored from it directly.
#[inline(always)]
pub fn send_copy<const V6: bool>(
    ctx: &TcContext,
    config: &TunnelConfig,
    remote_ip: u32,
    params: &mut bpf_fib_lookup,
) -> Result<(), DropReason> {
    look_up_next_hop::<V6>(ctx, config, remote_ip, params)?;
    if ctx.store(0, &params.dmac, 0).is_err() || ctx.store(6, &params.smac, 0).is_err() {
        return Err(drop_reason::ENCAP_FAILED);
    }
    // Read again rather than kept across the helper calls: a register spill would not fit the
    // flood callback's frame.
    // SAFETY: a plain read of a field of a live reference.
    let uplink = unsafe { core::ptr::read_volatile(&config.uplink_ifindex) };
    ctx.clone_redirect(uplink, 0)
        .map_err(|_| drop_reason::FLOOD_CLONE_FAILED)
}

/// Writes the outer MACs of the next hop toward `remote_ip` (from the kernel's FIB and
/// neighbour table); fails when the neighbour is not resolved.
#[inline(always)]
fn set_next_hop_macs<const V6: bool>(
    ctx: &TcContext,
    config: &TunnelConfig,
    remote_ip: u32,
) -> Result<(), DropReason> {
    // SAFETY: bpf_fib_lookup is plain data; the lookup below sets every field it reads.
    let mut params: bpf_fib_lookup = unsafe { core::mem::zeroed() };
    look_up_next_hop::<V6>(ctx, config, remote_ip, &mut params)?;
    let mut macs = [0_u8; 12];
    macs[..6].copy_from_slice(&params.dmac);
    macs[6..].copy_from_slice(&params.smac);
    ctx.store(0, &macs, 0)
        .map_err(|_| drop_reason::ENCAP_FAILED)
}

/// The kernel's FIB and neighbour lookup of the next hop toward `remote_ip`, into `params`;
/// fails when the neighbour is not resolved.
#[inline(always)]
fn look_up_next_hop<const V6: bool>(
    ctx: &TcContext,
    config: &TunnelConfig,
    remote_ip: u32,
    params: &mut bpf_fib_lookup,
) -> Result<(), DropReason> {
    // Cleared a word at a time, volatile: LLVM would make a byte-wise memset of it, which the
    // verifier walks byte by byte in every flood callback state.
    let words = core::ptr::from_mut(params).cast::<u32>();
    for word in 0..core::mem::size_of::<bpf_fib_lookup>() / 4 {
        // SAFETY: within `params`, which is plain data, 4-aligned.
        unsafe { words.add(word).write_volatile(0) };
    }
    params.ifindex = config.uplink_ifindex;
    if V6 {
        params.family = AF_INET6;
        // SAFETY: both are plain 16-byte addresses; the union fields are [u32; 4].
        unsafe {
            params.__bindgen_anon_3.ipv6_src =
                core::mem::transmute::<[u8; 16], [u32; 4]>(config.encap_ip6);
            params.__bindgen_anon_4.ipv6_dst =
                core::mem::transmute::<[u8; 16], [u32; 4]>(*endpoint6(remote_ip)?);
        }
    } else {
        params.family = AF_INET;
        params.__bindgen_anon_3.ipv4_src = config.encap_ip;
        params.__bindgen_anon_4.ipv4_dst = remote_ip;
    }
    // SAFETY: the helper reads and writes the parameter block we own, of the size we pass.
    let result = unsafe {
        bpf_fib_lookup(
            ctx.skb.skb as *mut c_void,
            params,
            core::mem::size_of::<bpf_fib_lookup>() as i32,
            // As a forwarded packet: the node forwards IP (Kubernetes nodes do, and the agent
            // makes sure at start).
            0,
        )
    };
    if result != 0 {
        return Err(drop_reason::FLOOD_NEXT_HOP_UNRESOLVED);
    }
    Ok(())
}

/// Puts OVN's outer headers (toward `tunnel.remote_ip`, outer MACs zero) in front of the frame.
/// Returns whether the skb is now an IP packet to the kernel (IP inside: the room is made with
/// the encapsulation flags, which also set the outer protocol); other payloads (ARP), and IP the
/// kernel refuses to encapsulate again, are prepended and keep their protocol.
#[inline(always)]
pub fn push_outer_headers<const V6: bool>(
    ctx: &TcContext,
    config: &TunnelConfig,
    tunnel: &Tunnel,
) -> Result<bool, DropReason> {
    let inner = ctx
        .load::<EthHeader>(0)
        .map_err(|_| drop_reason::ENCAP_FAILED)?;
    let inner_type = u16::from_be(inner.ether_type);
    let ip_inner = inner_type == ETH_P_IPV4 || inner_type == ETH_P_IPV6;
    // The flow hash of the inner frame (the socket's hash, or the kernel's dissection of its
    // addresses and ports), taken before the outer room exists: a hash of the still-empty outer
    // headers would give every flow the same source port.
    // SAFETY: the helper takes the skb pointer the context holds.
    let mut hash = unsafe { bpf_get_hash_recalc(ctx.skb.skb) };
    if !ip_inner {
        // The kernel's dissector hashes ARP (and other non-IP frames) by protocol alone: mix in
        // the inner MACs, which identify such a conversation.
        hash ^= mac_hash(ctx);
    }
    let (overhead, outer_l3) = if V6 {
        (geneve::OVERHEAD6, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6)
    } else {
        (geneve::OVERHEAD, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4)
    };
    // Room after the Ethernet header, marked as UDP-tunnelled Ethernet so GSO segments the
    // inner packet and fixes every segment's outer lengths.
    let flags = BPF_F_ADJ_ROOM_FIXED_GSO
        | outer_l3
        | BPF_F_ADJ_ROOM_ENCAP_L4_UDP
        | BPF_F_ADJ_ROOM_ENCAP_L2_ETH;
    let inner_l2 = (14_u64 & 0xff) << 56;
    let encapsulated = ip_inner
        && ctx
            .adjust_room(
                overhead as i32,
                BPF_ADJ_ROOM_MAC,
                u64::from(flags) | inner_l2,
            )
            .is_ok();
    if encapsulated {
        ctx.store(overhead, &inner, 0)
            .map_err(|_| drop_reason::ENCAP_FAILED)?;
    } else {
        // adjust_room refuses non-IP payloads (ARP), and an skb the kernel still marks
        // encapsulated (decapsulated here from a node it reached over a veth, then answered by
        // a `reject` ACL): prepend instead.
        // SAFETY: the helper takes the skb pointer the context holds and plain integers.
        let result = unsafe { bpf_skb_change_head(ctx.skb.skb, overhead as u32, 0) };
        if result != 0 {
            return Err(drop_reason::ENCAP_FAILED);
        }
    }
    let frame_len = ctx.len();
    // Written in pieces, each small on the stack (the stages that encapsulate have little to
    // spare), the addresses of an IPv6 underlay straight from their maps.
    let udp_len = frame_len - (overhead as u32 - 24);
    let tail = GeneveTail {
        udp: UdpHeader {
            // A flow hash in 32768..=65535 so ECMP and RSS spread flows (RFC 8926 §3.3).
            source: (0x8000 | (hash & 0x7fff) as u16).to_be(),
            destination: geneve::UDP_PORT.to_be(),
            len: (udp_len as u16).to_be(),
            checksum: 0,
        },
        geneve: GeneveHeader {
            version_options: 2,
            // C: a critical option is present.
            flags: 0x40,
            protocol: geneve::PROTOCOL_ETHERNET.to_be(),
            vni_reserved: [
                (tunnel.datapath >> 16) as u8,
                (tunnel.datapath >> 8) as u8,
                tunnel.datapath as u8,
                0,
            ],
        },
        option: GeneveOption {
            class: geneve::OVN_OPTION_CLASS.to_be(),
            kind: geneve::OVN_OPTION_TYPE,
            length: 1,
            data: (((tunnel.ingress_port & 0x7fff) << 16) | (tunnel.egress_port & 0xffff)).to_be(),
        },
    };
    ctx.store(overhead - 24, &tail, 0)
        .map_err(|_| drop_reason::ENCAP_FAILED)?;
    if V6 {
        store_outer_ipv6(ctx, config, tunnel.remote_ip, udp_len)?;
    } else {
        let ip_len = (frame_len - 14) as u16;
        let outer = Ipv4Outer {
            // The kernel fills in the MACs when it resolves the next hop (bpf_redirect_neigh).
            eth: EthHeader {
                destination: [0; 6],
                source: [0; 6],
                ether_type: ETH_P_IPV4.to_be(),
            },
            ip: Ipv4Header {
                version_ihl: 0x45,
                tos: 0,
                total_len: ip_len.to_be(),
                id: 0,
                fragment: 0x4000_u16.to_be(),
                ttl: 64,
                protocol: IPPROTO_UDP,
                checksum: csum::outer_ipv4(ip_len, config.encap_ip, tunnel.remote_ip).to_be(),
                source: config.encap_ip,
                destination: tunnel.remote_ip,
            },
        };
        ctx.store(0, &outer, 0)
            .map_err(|_| drop_reason::ENCAP_FAILED)?;
    }
    Ok(encapsulated)
}

/// The outer Ethernet and IPv6 headers of a frame encapsulated over an IPv6 underlay, toward
/// the endpoint with key `endpoint`, `payload_len` bytes after them: version 6, traffic class
/// and flow label 0, hop limit 64, as Open vSwitch sends Geneve; the addresses stored straight
/// from the maps.
#[inline(always)]
fn store_outer_ipv6(
    ctx: &TcContext,
    config: &TunnelConfig,
    endpoint: u32,
    payload_len: u32,
) -> Result<(), DropReason> {
    let destination = endpoint6(endpoint)?;
    let head = Ipv6Head {
        eth: EthHeader {
            destination: [0; 6],
            source: [0; 6],
            ether_type: ETH_P_IPV6.to_be(),
        },
        version_class_flow: 0x6000_0000_u32.to_be(),
        payload_len: (payload_len as u16).to_be(),
        next_header: IPPROTO_UDP,
        hop_limit: 64,
    };
    ctx.store(0, &head, 0)
        .and_then(|()| ctx.store(14 + 8, &config.encap_ip6, 0))
        .and_then(|()| ctx.store(14 + 24, destination, 0))
        .map_err(|_| drop_reason::ENCAP_FAILED)
}

/// The outer Ethernet and IPv4 headers.
#[repr(C, packed)]
struct Ipv4Outer {
    eth: EthHeader,
    ip: Ipv4Header,
}

/// The outer Ethernet header and the IPv6 header up to its addresses.
#[repr(C, packed)]
struct Ipv6Head {
    eth: EthHeader,
    version_class_flow: u32,
    payload_len: u16,
    next_header: u8,
    hop_limit: u8,
}

/// What follows the outer IP header, whatever its family: UDP, Geneve and OVN's option.
#[repr(C, packed)]
struct GeneveTail {
    udp: UdpHeader,
    geneve: GeneveHeader,
    option: GeneveOption,
}

/// A 32-bit mix of the frame's two MACs (its first 12 bytes, read as three words): spreads
/// non-IP conversations over source ports.
#[inline(always)]
fn mac_hash(ctx: &TcContext) -> u32 {
    let word = |offset: usize| ctx.load::<u32>(offset).unwrap_or(0);
    (word(0) ^ word(4).rotate_left(11) ^ word(8).rotate_left(22)).wrapping_mul(0x9e37_79b1)
}
