//! The outer UDP checksum of a Geneve frame, for the chassis whose Encap asks for one
//! (`options:csum=true`, read from `REMOTE_ENCAPS`), and the segmenter's side of it; over an
//! IPv4 or an IPv6 underlay (a const generic `V6` where the offsets differ: the pseudo header's
//! addresses are 16 bytes, the inner frame 20 bytes further).
//!
//! A frame is checksummed after its outer headers are written (their checksum field zero). The
//! sum is taken the way the kernel's own UDP tunnels take it with local checksum offload: over
//! the outer pseudo header, the UDP, Geneve and inner Ethernet headers and the inner IP header,
//! and, for TCP and UDP inside (over IPv4 or IPv6), not over the inner payload: their checksum
//! makes the segment sum to the complement of its pseudo header, whether it is already complete
//! or still to be completed by the NIC (`CHECKSUM_PARTIAL`, the pseudo header's sum in the
//! field). So a full-size TCP segment costs a few dozen additions. The rest (ICMP, whose
//! senders' checksums are not always right, fragments, other protocols, a UDP datagram without
//! a checksum, IPv6 extension headers, non-IP frames such as ARP, Ethernet padding) is summed
//! whole: its first `len % 64` bytes, then 64-byte chunks walked with `bpf_loop`
//! (`CHECKSUM_SCRATCH` holds the chunk). An inner transport checksum that is simply wrong makes
//! the outer one wrong too: the receiver then drops the frame, where it would have dropped the
//! inner packet.
//!
//! A GSO super-packet cannot be given one: the kernel copies the outer checksum into every
//! segment unless the skb is marked `SKB_GSO_UDP_TUNNEL_CSUM`, which `bpf_skb_adjust_room`
//! cannot set. Such frames go out of the segmenter instead ([`to_segmenter`]): the sending end
//! of a veth pair the agent creates with UDP-tunnel segmentation off, so the kernel segments
//! them in software there; `from_segmenter`, on the other end, checksums each segment
//! ([`from_segmenter`]) and sends it out of the uplink. Reads `TUNNEL_CONFIG` and
//! `REMOTE_ENCAPS`; writes the outer UDP checksum field only.

use aya_ebpf::{
    bindings::__sk_buff,
    cty::{c_long, c_void},
    helpers::{bpf_csum_diff, bpf_loop, bpf_redirect, bpf_skb_load_bytes},
    programs::TcContext,
};
use ovnbpf_common::{
    DropReason, REMOTE_ENCAP_CSUM, TunnelConfig, drop_reason, geneve, maps::CHECKSUM_CHUNK_BYTES,
};

use crate::{
    CHECKSUM_SCRATCH, PASS, REMOTE_ENCAPS,
    csum::{complement, ones_fold, udp_checksum},
    headers::{ETH_P_IPV4, ETH_P_IPV6, IPPROTO_TCP, IPPROTO_UDP, Ipv6Frame, UdpFrame, UdpHeader},
    maps::get,
};

/// Offsets in an encapsulated frame: the outer IPv4 source, the outer UDP header and its
/// checksum, the inner frame's network header; and the same over an IPv6 underlay.
const OUTER_IP_SOURCE: usize = 14 + 12;
const OUTER_UDP: usize = 14 + 20;
const OUTER_UDP_CHECKSUM: usize = OUTER_UDP + 6;
const INNER_L3: usize = geneve::OVERHEAD + 14;
const OUTER_IP6_SOURCE: usize = 14 + 8;
const OUTER_UDP6: usize = 14 + 40;
const OUTER_UDP6_CHECKSUM: usize = OUTER_UDP6 + 6;
const INNER_L3_6: usize = geneve::OVERHEAD6 + 14;

/// Whether the chassis at `remote_ip` (network byte order) wants outer UDP checksums.
#[inline(always)]
pub fn wanted(remote_ip: &u32) -> bool {
    get(&REMOTE_ENCAPS, remote_ip).is_some_and(|encap| encap.flags & REMOTE_ENCAP_CSUM != 0)
}

/// Whether the kernel will cut the frame into several segments (GSO) after the program.
#[inline(always)]
pub fn segmented_later(ctx: &TcContext) -> bool {
    let skb: *const __sk_buff = ctx.skb.skb;
    // SAFETY: the context's skb is valid while the program runs; these are readable fields.
    unsafe { (*skb).gso_size != 0 && (*skb).gso_segs != 1 }
}

/// The sum (16-bit big-endian words, not folded) of everything the outer UDP checksum covers
/// but the outer destination address, for the encapsulated frame in `ctx` (outer IPv4 without
/// options, checksum field zero or not: it is left out). Never 0 (the protocol is in it). Its
/// steps are out of line and read headers into `CHECKSUM_SCRATCH`: the stages that encapsulate
/// have little stack to spare.
/// Over an IPv6 underlay (`V6`) the outer header is IPv6 without extension headers.
#[inline(always)]
pub fn base<const V6: bool>(ctx: &TcContext) -> Result<u32, DropReason> {
    let (outer, inner_l3) = if V6 {
        (outer_headers6(ctx), INNER_L3_6)
    } else {
        (outer_headers(ctx), INNER_L3)
    };
    if outer == 0 {
        return Err(drop_reason::ENCAP_FAILED);
    }
    let inner = match transport_shortcut(ctx, (outer >> 32) as u16, inner_l3) {
        0 => summed_whole(ctx, inner_l3 as u32)?,
        shortcut => shortcut as u32,
    };
    Ok(outer as u32 + inner)
}

/// The outer part of [`base`]: the source address, the UDP header but its checksum, Geneve
/// with its option and the inner Ethernet header, with the pseudo header's protocol and
/// length; the inner EtherType in bits 32..48. 0 if the frame is too short.
#[inline(never)]
fn outer_headers(ctx: &TcContext) -> u64 {
    let Ok(buffer) = scratch() else {
        return 0;
    };
    if load(ctx, OUTER_IP_SOURCE, buffer, INNER_L3 - OUTER_IP_SOURCE).is_err() {
        return 0;
    }
    let udp = OUTER_UDP - OUTER_IP_SOURCE;
    let udp_len = u32::from(be16(buffer, udp + 4));
    let ether_type = be16(buffer, INNER_L3 - OUTER_IP_SOURCE - 2);
    // The destination goes in per chassis ([`toward`]); the checksum field is left out.
    let sum = range_sum(buffer, 0, 4)
        + range_sum(buffer, udp, udp + 6)
        + range_sum(buffer, udp + 8, INNER_L3 - OUTER_IP_SOURCE)
        + u32::from(IPPROTO_UDP)
        + udp_len;
    u64::from(ether_type) << 32 | u64::from(sum)
}

/// [`outer_headers`] over an IPv6 underlay: the 16-byte source, then the UDP header but its
/// checksum, Geneve, its option and the inner Ethernet header (read behind the source into the
/// one buffer: the destination between them is not summed here).
#[inline(never)]
fn outer_headers6(ctx: &TcContext) -> u64 {
    const UDP_AT: usize = 16;
    const END: usize = UDP_AT + INNER_L3_6 - OUTER_UDP6;
    let Ok(buffer) = scratch() else {
        return 0;
    };
    // SAFETY: the helper copies 16 bytes, then END - 16 more behind them, of the skb into the
    // 64-byte slot (END is 54).
    let loaded = unsafe {
        let skb = ctx.skb.skb as *const c_void;
        bpf_skb_load_bytes(skb, OUTER_IP6_SOURCE as u32, buffer.as_mut_ptr().cast(), 16) == 0
            && bpf_skb_load_bytes(
                skb,
                OUTER_UDP6 as u32,
                buffer.as_mut_ptr().add(UDP_AT).cast(),
                (END - UDP_AT) as u32,
            ) == 0
    };
    if !loaded {
        return 0;
    }
    let udp_len = u32::from(be16(buffer, UDP_AT + 4));
    let ether_type = be16(buffer, END - 2);
    let sum = range_sum(buffer, 0, UDP_AT + 6)
        + range_sum(buffer, UDP_AT + 8, END)
        + u32::from(IPPROTO_UDP)
        + udp_len;
    u64::from(ether_type) << 32 | u64::from(sum)
}

/// This CPU's chunk buffer.
#[inline(always)]
fn scratch() -> Result<&'static mut [u8; CHECKSUM_CHUNK_BYTES], DropReason> {
    let buffer = CHECKSUM_SCRATCH
        .get_ptr_mut(0)
        .ok_or(drop_reason::ENCAP_FAILED)?;
    // SAFETY: a per-CPU array slot: only this CPU uses it while the program runs.
    Ok(unsafe { &mut *buffer })
}

/// Copies `len` (at most 64) bytes of the frame from `offset` into `buffer`.
#[inline(always)]
fn load(
    ctx: &TcContext,
    offset: usize,
    buffer: &mut [u8; CHECKSUM_CHUNK_BYTES],
    len: usize,
) -> Result<(), DropReason> {
    // SAFETY: the helper copies `len` bytes (at most the buffer's) of the skb into `buffer`.
    let loaded = unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb as *const c_void,
            offset as u32,
            buffer.as_mut_ptr().cast(),
            len.min(CHECKSUM_CHUNK_BYTES) as u32,
        )
    };
    if loaded == 0 {
        Ok(())
    } else {
        Err(drop_reason::ENCAP_FAILED)
    }
}

/// The sum of `buffer[start..end]` as big-endian 16-bit words (`start` and `end` even), read
/// a word at a time.
#[inline(always)]
fn range_sum(buffer: &[u8; CHECKSUM_CHUNK_BYTES], start: usize, end: usize) -> u32 {
    let words = buffer.as_ptr().cast::<u16>();
    let mut sum = 0_u32;
    let mut index = start / 2;
    while index < end / 2 && index < CHECKSUM_CHUNK_BYTES / 2 {
        // SAFETY: within the 64-byte slot, 2-aligned (map values are 8-aligned).
        sum += u32::from(u16::from_be(unsafe { words.add(index).read() }));
        index += 1;
    }
    sum
}

/// Writes the outer UDP checksum field (`checksum`, network byte order: [`toward`],
/// [`toward6`]) of a frame encapsulated over an IPv6 underlay (`V6`) or an IPv4 one.
#[inline(always)]
pub fn store<const V6: bool>(ctx: &TcContext, checksum: u16) -> Result<(), DropReason> {
    let at = if V6 {
        OUTER_UDP6_CHECKSUM
    } else {
        OUTER_UDP_CHECKSUM
    };
    ctx.store(at, &checksum, 0)
        .map_err(|_| drop_reason::ENCAP_FAILED)
}

/// [`toward`] an IPv6 endpoint at `remote_ip6`.
#[inline(always)]
pub fn toward6(base: u32, remote_ip6: &[u8; 16]) -> u16 {
    let words = remote_ip6.as_ptr().cast::<u16>();
    let mut sum = base;
    for index in 0..8 {
        // SAFETY: within the 16 bytes, read unaligned (the address may sit anywhere).
        sum += u32::from(u16::from_be(unsafe { words.add(index).read_unaligned() }));
    }
    udp_checksum(sum).to_be()
}

/// The outer UDP checksum field (network byte order) for a frame of [`base`] `base` sent to
/// `remote_ip` (network byte order).
#[inline(always)]
pub fn toward(base: u32, remote_ip: u32) -> u16 {
    let destination = u32::from_be(remote_ip);
    udp_checksum(base + (destination >> 16) + (destination & 0xffff)).to_be()
}

/// Sends the encapsulated GSO frame out of the segmenter (see the module doc); `None` when the
/// node has none (the frame then leaves without an outer checksum).
#[inline(always)]
pub fn to_segmenter(config: &TunnelConfig) -> Option<i32> {
    if config.segmenter_ifindex == 0 {
        return None;
    }
    // SAFETY: the helper takes plain integers and only sets the skb's redirect target.
    Some(unsafe { bpf_redirect(config.segmenter_ifindex, 0) } as i32)
}

/// `from_segmenter`: one segment of a frame [`to_segmenter`] sent, checksummed and sent out of
/// the uplink. What is not this node's Geneve is not ours: passed on.
#[inline(always)]
pub fn from_segmenter(ctx: &TcContext) -> Result<i32, DropReason> {
    let Some(config) = crate::geneve::tunnel_config() else {
        return Ok(PASS);
    };
    if crate::geneve::ipv6_underlay(config) {
        return from_segmenter6(ctx, config);
    }
    let Ok(outer) = ctx.load::<UdpFrame>(0) else {
        return Ok(PASS);
    };
    let ours = outer.eth.ether_type == ETH_P_IPV4.to_be()
        && outer.ip.version_ihl == 0x45
        && outer.ip.protocol == IPPROTO_UDP
        && outer.ip.source == config.encap_ip
        && outer.udp.destination == geneve::UDP_PORT.to_be();
    if !ours {
        return Ok(PASS);
    }
    // A segment the kernel left whole (it had nothing to cut) is summed as it is; one still to
    // be cut would carry a wrong checksum into every segment: it leaves with none.
    if !segmented_later(ctx) {
        store::<false>(ctx, toward(base::<false>(ctx)?, outer.ip.destination))?;
    }
    Ok(crate::geneve::send_to_next_hop(config))
}

/// [`from_segmenter`] over an IPv6 underlay.
#[inline(always)]
fn from_segmenter6(ctx: &TcContext, config: &TunnelConfig) -> Result<i32, DropReason> {
    let (Ok(outer), Ok(udp)) = (ctx.load::<Ipv6Frame>(0), ctx.load::<UdpHeader>(OUTER_UDP6)) else {
        return Ok(PASS);
    };
    let ours = outer.eth.ether_type == ETH_P_IPV6.to_be()
        && outer.ip.next_header == IPPROTO_UDP
        && outer.ip.source == config.encap_ip6
        && udp.destination == geneve::UDP_PORT.to_be();
    if !ours {
        return Ok(PASS);
    }
    if !segmented_later(ctx) {
        store::<true>(ctx, toward6(base::<true>(ctx)?, &outer.ip.destination))?;
    }
    Ok(crate::geneve::send_to_next_hop(config))
}

/// The inner packet's share of the sum without reading its payload (see the module doc), with
/// bit 32 set; 0 when it must be summed whole. Its IP header is read into `CHECKSUM_SCRATCH`.
/// `inner_l3`: where the inner frame's network header starts.
#[inline(never)]
fn transport_shortcut(ctx: &TcContext, ether_type: u16, inner_l3: usize) -> u64 {
    let Ok(buffer) = scratch() else {
        return 0;
    };
    let found = |sum: u32| 1_u64 << 32 | u64::from(sum);
    let frame_len = ctx.len() as usize;
    if ether_type == ETH_P_IPV4 {
        if frame_len < inner_l3 + 20 || load(ctx, inner_l3, buffer, 20).is_err() {
            return 0;
        }
        let total_len = usize::from(be16(buffer, 2));
        // Options, padding or a truncated packet, a fragment.
        if buffer[0] != 0x45 || inner_l3 + total_len != frame_len || be16(buffer, 6) & 0x3fff != 0 {
            return 0;
        }
        let protocol = buffer[9];
        if protocol != IPPROTO_TCP && !has_udp_checksum(ctx, protocol, inner_l3 + 20) {
            return 0;
        }
        let pseudo = range_sum(buffer, 12, 20) + u32::from(protocol) + (total_len as u32 - 20);
        found(range_sum(buffer, 0, 20) + complement(pseudo))
    } else if ether_type == ETH_P_IPV6 {
        if frame_len < inner_l3 + 40 || load(ctx, inner_l3, buffer, 40).is_err() {
            return 0;
        }
        let payload_len = usize::from(be16(buffer, 4));
        if inner_l3 + 40 + payload_len != frame_len {
            return 0;
        }
        let next_header = buffer[6];
        if next_header != IPPROTO_TCP && !has_udp_checksum(ctx, next_header, inner_l3 + 40) {
            return 0;
        }
        let pseudo = range_sum(buffer, 8, 40) + u32::from(next_header) + payload_len as u32;
        found(range_sum(buffer, 0, 40) + complement(pseudo))
    } else {
        0
    }
}

/// Whether `protocol` at `l4` is UDP with a checksum (0 means none, as does an unreadable one).
#[inline(always)]
fn has_udp_checksum(ctx: &TcContext, protocol: u8, l4: usize) -> bool {
    protocol == IPPROTO_UDP && ctx.load::<u16>(l4 + 6).is_ok_and(|checksum| checksum != 0)
}

/// What the chunk walk's callback reads and writes (on the caller's stack).
struct Chunks {
    skb: *mut __sk_buff,
    offset: u32,
    sum: u32,
    failed: u32,
}

/// One whole 64-byte chunk, added to the walk's sum. Its length is constant, so the verifier
/// need not track the offset exactly (it would then check every iteration apart).
#[inline(never)]
extern "C" fn chunk(_index: u32, walk: *mut c_void) -> c_long {
    // SAFETY: `walk` is the `Chunks` the caller passed to bpf_loop, on its stack.
    let walk = unsafe { &mut *walk.cast::<Chunks>() };
    let Ok(buffer) = scratch() else {
        walk.failed = 1;
        return 1;
    };
    // SAFETY: the helper copies 64 bytes of the skb into the 64-byte slot.
    let loaded = unsafe {
        bpf_skb_load_bytes(
            walk.skb as *const c_void,
            walk.offset,
            buffer.as_mut_ptr().cast(),
            CHECKSUM_CHUNK_BYTES as u32,
        )
    };
    if loaded != 0 {
        walk.failed = 1;
        return 1;
    }
    walk.sum += buffer_sum(buffer);
    walk.offset += CHECKSUM_CHUNK_BYTES as u32;
    0
}

/// The sum of the 64-byte slot in big-endian 16-bit words (folded to 16 bits).
#[inline(always)]
fn buffer_sum(buffer: &mut [u8; CHECKSUM_CHUNK_BYTES]) -> u32 {
    // SAFETY: the helper sums the slot's 64 bytes (a multiple of 4, as it requires).
    let partial = unsafe {
        bpf_csum_diff(
            core::ptr::null_mut(),
            0,
            buffer.as_mut_ptr().cast(),
            CHECKSUM_CHUNK_BYTES as u32,
            0,
        )
    };
    // The helper sums words as they lie in memory (little-endian loads): byte-swapped, the same
    // sum in big-endian words.
    u32::from(ones_fold(partial as u32).swap_bytes())
}

/// The sum of the `head` (1..64) bytes at `offset`, zero-padded.
#[inline(never)]
fn head_sum(ctx: &TcContext, offset: u32, head: u32) -> Result<u32, DropReason> {
    let buffer = scratch()?;
    // Zeroed word by word, volatile (a byte-wise memset costs the verifier 64 steps).
    let words = buffer.as_mut_ptr().cast::<u64>();
    for word in 0..CHECKSUM_CHUNK_BYTES / 8 {
        // SAFETY: the slot is 64 bytes, 8-aligned (map values are).
        unsafe { words.add(word).write_volatile(0) };
    }
    // Through memory, then masked to 1..=64: a length the verifier bounds (LLVM, knowing the
    // caller's range, would fold the mask away).
    // SAFETY: a read of a local.
    let head = unsafe { core::ptr::read_volatile(&raw const head) };
    let len = (head.wrapping_sub(1) & (CHECKSUM_CHUNK_BYTES as u32 - 1)) + 1;
    // SAFETY: the helper copies `len` (1..=64) bytes of the skb into the 64-byte slot.
    let loaded = unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb as *const c_void,
            offset,
            buffer.as_mut_ptr().cast(),
            len,
        )
    };
    if loaded != 0 {
        return Err(drop_reason::ENCAP_FAILED);
    }
    Ok(buffer_sum(buffer))
}

/// The sum of the frame's bytes from `from` (even) to its end: the first `len % 64` bytes, then
/// whole chunks walked with `bpf_loop`. After an odd head the chunks' words straddle the
/// frame's: their sum is byte-swapped into place.
#[inline(always)]
fn summed_whole(ctx: &TcContext, from: u32) -> Result<u32, DropReason> {
    let len = ctx.len().saturating_sub(from);
    let head = len % CHECKSUM_CHUNK_BYTES as u32;
    let head_part = if head == 0 {
        0
    } else {
        head_sum(ctx, from, head)?
    };
    let mut walk = Chunks {
        skb: ctx.skb.skb,
        offset: from + head,
        sum: 0,
        failed: 0,
    };
    // SAFETY: the callback is a static function of this program; `walk` outlives the call.
    unsafe {
        bpf_loop(
            len / CHECKSUM_CHUNK_BYTES as u32,
            chunk as *mut c_void,
            (&raw mut walk).cast(),
            0,
        );
    }
    if walk.failed != 0 {
        return Err(drop_reason::ENCAP_FAILED);
    }
    let chunks = ones_fold(walk.sum);
    let chunks = if head % 2 == 1 {
        chunks.swap_bytes()
    } else {
        chunks
    };
    Ok(head_part + u32::from(chunks))
}

/// The big-endian 16-bit word at `at` of `bytes` (0 past its end).
#[inline(always)]
fn be16(bytes: &[u8; CHECKSUM_CHUNK_BYTES], at: usize) -> u16 {
    match (bytes.get(at), bytes.get(at + 1)) {
        (Some(&high), Some(&low)) => u16::from_be_bytes([high, low]),
        _ => 0,
    }
}
