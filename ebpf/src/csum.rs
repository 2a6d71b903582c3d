//! Internet checksums the programs compute whole (the incremental updates use the kernel's
//! `l3_csum_replace`/`bpf_csum_diff` where they are): IPv4 headers, the outer header of a Geneve
//! frame, ICMPv6 neighbour discovery, and the folding, complement and UDP steps they (and the
//! outer UDP checksum, `encap_checksum`) share. Pure functions; touches nothing.

use crate::headers::{IPPROTO_UDP, Ipv4Header};

/// A 32-bit sum of 16-bit words folded to 16 bits (one's complement addition).
#[inline(always)]
pub(crate) fn ones_fold(mut sum: u32) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// The checksum of words summing to `sum`: the complement of its fold.
#[inline(always)]
pub(crate) fn fold(sum: u32) -> u16 {
    !ones_fold(sum)
}

/// The one's complement of a sum, folded: what adds to `sum` to make 0xffff (a transport
/// segment whose checksum is right sums to the complement of its pseudo header).
#[inline(always)]
pub(crate) fn complement(sum: u32) -> u32 {
    u32::from(fold(sum))
}

/// The UDP checksum of words summing to `sum`: 0 goes out as 0xffff (RFC 768: a zero field
/// means no checksum).
#[inline(always)]
pub(crate) fn udp_checksum(sum: u32) -> u16 {
    match fold(sum) {
        0 => 0xffff,
        checksum => checksum,
    }
}

/// The sum of `bytes` read as big-endian 16-bit words (`N` even).
#[inline(always)]
pub(crate) fn word_sum<const N: usize>(bytes: &[u8; N]) -> u32 {
    let mut sum = 0_u32;
    let mut index = 0;
    while index + 1 < N {
        sum += u32::from(bytes[index]) << 8 | u32::from(bytes[index + 1]);
        index += 2;
    }
    sum
}

/// The ICMPv6 checksum of the 32-byte `message` (its checksum field zero) from `source` to
/// `destination`: over the pseudo header (both addresses, the upper-layer length, next header
/// 58) and the message.
#[inline(always)]
pub(crate) fn icmpv6_32(source: &[u8; 16], destination: &[u8; 16], message: &[u8; 32]) -> u16 {
    fold(32 + 58 + word_sum(source) + word_sum(destination) + word_sum(message))
}

/// The checksum of a 20-byte IPv4 header whose checksum field is zero.
#[inline(always)]
pub(crate) fn ipv4_header(header: &Ipv4Header) -> u16 {
    let words = [
        u32::from(header.version_ihl) << 8 | u32::from(header.tos),
        u32::from(u16::from_be(header.total_len)),
        u32::from(u16::from_be(header.id)),
        u32::from(u16::from_be(header.fragment)),
        u32::from(header.ttl) << 8 | u32::from(header.protocol),
        u32::from_be(header.source) >> 16,
        u32::from_be(header.source) & 0xffff,
        u32::from_be(header.destination) >> 16,
        u32::from_be(header.destination) & 0xffff,
    ];
    fold(words.iter().sum())
}

/// The outer IPv4 header checksum (DF set, TTL 64, UDP, id 0); addresses in network byte order.
#[inline(always)]
pub(crate) fn outer_ipv4(total_len: u16, source: u32, destination: u32) -> u16 {
    let (source, destination) = (u32::from_be(source), u32::from_be(destination));
    let sum: u32 = 0x4500
        + u32::from(total_len)
        + 0x4000
        + ((64 << 8) | u32::from(IPPROTO_UDP))
        + (source >> 16)
        + (source & 0xffff)
        + (destination >> 16)
        + (destination & 0xffff);
    fold(sum)
}
