//! Answers built in place of the packet they answer, as ovn-controller's pinctrl builds them
//! (`pinctrl_handle_tcp_reset`, `pinctrl_handle_icmp`), for two askers:
//! - a logical router, for traffic to its own addresses other than a ping (OVN's
//!   `lr_in_ip_input` rejects, routed back to the sender): TCP gets a reset, UDP ICMP port
//!   unreachable, other protocols ICMP protocol unreachable, each only where the address's
//!   flags say the router answers so;
//! - a switch's `reject` ACL (the `acl_reject` stage, [`acl_stage`]): TCP gets a reset, UDP ICMP
//!   port unreachable, other IPv4 ICMP host unreachable (`pinctrl_handle_reject`); a reset or an
//!   ICMP destination unreachable is never answered (pinctrl ignores them), nor SCTP (OVN's
//!   `sctp_abort` is not built), IPv4 with options or a later fragment. From the ingress stage
//!   the answer goes straight back to the sender; from the egress stage it enters the switch's L2
//!   lookup from the port the packet was for, as OVN's `next(pipeline=ingress,
//!   table=ls_in_l2_lkup)`, and so meets the sender's egress ACLs, a tunnel or a router.
//!
//! - a logical router, for IPv6 to its own addresses (the IPv6 stage hands it over,
//!   [`ROUTER_ANSWER6_REQUEST_MAGIC`], with the sender's MAC from the router's neighbours): TCP
//!   gets a reset (hop limit 63 routed back: 62, traffic class and flow label 0), UDP ICMPv6
//!   port unreachable, other protocols address unreachable (northd's codes 4 and 3; hop limit
//!   255 routed back: 254, quoting as below), each only where the address's flags say so;
//! - a logical router, for IPv6 whose hop limit runs out on entering it from a port whose
//!   network holds the sender (OVN's `icmp6 { … icmp6.type = 3; … }` in `lr_in_ip_input`): the
//!   IPv6 stage hands it here ([`TIME_EXCEEDED6_REQUEST_MAGIC`], it has no stack left), and it
//!   gets ICMPv6 time exceeded from the port's address in `TIME_EXCEEDED6`, hop limit 254, the
//!   packet's traffic class and flow label, quoting the packet as far as the answer stays within
//!   1280 bytes (pinctrl's room: 1280 − 14 − 40 − 8, Ethernet counted), back to the sender;
//!   later fragments and senders outside the port's networks are dropped (`ttl_expired`). A
//!   transport checksum the sender's stack left to offload stays the seed in the quote.
//!
//! Replies are counted by kind (`ROUTER_REPLIES`). Touches only the frame and that counter.
//! The checksums are computed whole over what is written: an answer never leaves through a
//! device that would complete an offloaded checksum (it goes back to a local pod's veth, or is
//! built from a frame that came from another node, whose checksums are complete).

use aya_ebpf::{
    bindings::bpf_adj_room_mode::{BPF_ADJ_ROOM_MAC, BPF_ADJ_ROOM_NET},
    helpers::{bpf_csum_diff, bpf_skb_change_tail, bpf_skb_load_bytes},
    maps::lpm_trie::Key,
    programs::TcContext,
};
use ovnbpf_common::{
    ACL_REQUEST_MAGIC, DropReason, ROUTER_ADDRESS_PORT_UNREACHABLE,
    ROUTER_ADDRESS_PROTOCOL_UNREACHABLE, ROUTER_ADDRESS_TCP_RESET, ROUTER_ANSWER6_REQUEST_MAGIC,
    TIME_EXCEEDED6_KEY_PREFIX_BITS, TIME_EXCEEDED6_REQUEST_MAGIC, TimeExceeded6Key, drop_reason,
    router_reply,
    stage::{self as slot, REJECT_FROM_EGRESS},
};

use crate::csum;
use crate::{
    TIME_EXCEEDED6, count_reply,
    headers::{
        ETH_HEADER_LEN, ETH_P_IPV4, EthHeader, IPPROTO_ICMPV6, IPPROTO_UDP, Ipv4Frame, Ipv4Header,
        UdpHeader,
    },
    output::reply_to_sender,
    stages,
};

const IPPROTO_ICMP: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_SCTP: u8 = 132;
/// IPv4 flags: don't fragment (pinctrl sets it on what it builds).
const DONT_FRAGMENT: u16 = 0x4000;
/// pinctrl builds a reset with TTL 63 and an ICMP error with 255.
const PINCTRL_TCP_RESET_TTL: u8 = 63;
const PINCTRL_UNREACHABLE_TTL: u8 = 255;
/// A router's answers are routed back to the sender, which decrements their TTL.
const TCP_RESET_TTL: u8 = PINCTRL_TCP_RESET_TTL - 1;
const UNREACHABLE_TTL: u8 = PINCTRL_UNREACHABLE_TTL - 1;
/// TCP's RST flag, in the flags byte.
const TCP_RST: u8 = 0x04;
/// RST and ACK, with a 5-word header.
const TCP_RESET_FLAGS: u16 = 5 << 12 | 0x04 | 0x10;
/// ICMP destination unreachable and its codes.
const ICMP_UNREACHABLE: u8 = 3;
const CODE_HOST: u8 = 1;
const CODE_PROTOCOL: u8 = 2;
const CODE_PORT: u8 = 3;
/// pinctrl quotes the offending datagram up to a 576-byte frame: 576 − 14 − 20 − 8.
const MAX_QUOTE: u32 = 534;
/// Bytes an ICMP error adds in front of the quoted datagram: IPv4 and ICMP headers.
const ICMP_ERROR_ROOM: u32 = 28;
/// pinctrl quotes the packet an ICMPv6 error answers up to a 1280-byte answer, its Ethernet
/// header counted: 1280 − 14 − 40 − 8.
const MAX_QUOTE6: u32 = 1218;
/// Bytes an ICMPv6 error adds in front of the quoted packet: IPv6 and ICMPv6 headers.
const ICMPV6_ERROR_ROOM: u32 = 48;
/// ICMPv6 time exceeded (code 0: hop limit exceeded in transit).
const ICMPV6_TIME_EXCEEDED: u8 = 3;
/// OVN sets `ip.ttl = 254` on its time exceeded and outputs it without routing it.
const TIME_EXCEEDED6_HOP_LIMIT: u8 = 254;
/// ICMPv6 destination unreachable, and its port unreachable code (address unreachable, 3,
/// for other protocols).
const ICMPV6_UNREACHABLE: u8 = 1;
const CODE6_PORT: u8 = 4;
/// IPv6's fragment header, and the offset bits of its second word.
const IPPROTO_FRAGMENT: u8 = 44;
const FRAGMENT_OFFSET_MASK: u16 = 0xfff8;
/// The checksum is summed in chunks of this many bytes (a stack buffer; from_pod has no room
/// for 64).
const CHUNK: u32 = 32;

/// The reset's TCP header (no options); Ethernet and IPv4 headers come before it.
#[repr(C, packed)]
#[derive(Clone, Copy)]
struct TcpResetHeader {
    source: u16,
    destination: u16,
    seq: u32,
    ack: u32,
    flags: u16,
    window: u16,
    checksum: u16,
    urgent: u16,
}

impl TcpResetHeader {
    /// pinctrl's reset of the segment starting with `segment`: RST|ACK back to its source
    /// port, sequence 0, acknowledging its sequence + 1, window 0, with `checksum`.
    #[inline(always)]
    fn answering(segment: &TcpStart, checksum: u16) -> Self {
        Self {
            source: segment.destination,
            destination: segment.source,
            seq: 0,
            ack: u32::from_be(segment.seq).wrapping_add(1).to_be(),
            flags: TCP_RESET_FLAGS.to_be(),
            window: 0,
            checksum: checksum.to_be(),
            urgent: 0,
        }
    }
}

/// The start of the segment a reset answers: ports and sequence number.
#[repr(C, packed)]
#[derive(Clone, Copy)]
struct TcpStart {
    source: u16,
    destination: u16,
    seq: u32,
}

/// Ethernet, IPv4 and ICMP headers of an ICMP error; the quoted datagram follows.
#[repr(C, packed)]
#[derive(Clone, Copy)]
struct IcmpErrorHead {
    eth: EthHeader,
    ip: Ipv4Header,
    kind: u8,
    code: u8,
    checksum: u16,
    unused: u32,
}

/// Answers `frame` (IPv4 without options, to a router address whose flags are `flags`, not an
/// echo request the router answers) from the pod's veth `ifindex`: the verdict, or the drop
/// reason when the router has no answer the kernel builds.
#[inline(always)]
pub fn answer(
    ctx: &TcContext,
    frame: &Ipv4Frame,
    flags: u32,
    ifindex: u32,
) -> Result<i32, DropReason> {
    let fragment = u16::from_be(frame.ip.fragment);
    // Later fragments: OVN's rejects match `!ip.later_frag`; a lower rule drops them.
    if fragment & 0x1fff != 0 {
        return Err(drop_reason::TO_ROUTER_UNHANDLED);
    }
    let protocol = frame.ip.protocol;
    if protocol == IPPROTO_TCP && flags & ROUTER_ADDRESS_TCP_RESET != 0 {
        let Ok(segment) = ctx.load::<TcpStart>(ETH_HEADER_LEN + 20) else {
            return Err(drop_reason::TO_ROUTER_UNHANDLED);
        };
        tcp_reset(
            ctx,
            frame,
            &segment,
            TCP_RESET_TTL,
            drop_reason::ROUTER_REPLY_FAILED,
        )?;
        count_reply(router_reply::TCP_RESET);
        return Ok(reply_to_sender(ctx, ifindex));
    }
    let code = if protocol == IPPROTO_UDP && flags & ROUTER_ADDRESS_PORT_UNREACHABLE != 0 {
        CODE_PORT
    } else if protocol != IPPROTO_SCTP
        // The first fragment of an ICMP message: OVN answers an echo request's with an echo
        // reply, which the kernel does not build; dropped rather than answered differently.
        && !(protocol == IPPROTO_ICMP && fragment & 0x2000 != 0)
        && flags & ROUTER_ADDRESS_PROTOCOL_UNREACHABLE != 0
    {
        // The catch-all rule, for what no protocol rule covers (northd gives SCTP its own).
        CODE_PROTOCOL
    } else {
        return Err(drop_reason::TO_ROUTER_UNHANDLED);
    };
    unreachable(
        ctx,
        frame,
        code,
        UNREACHABLE_TTL,
        drop_reason::ROUTER_REPLY_FAILED,
    )?;
    count_reply(if code == CODE_PORT {
        router_reply::PORT_UNREACHABLE
    } else {
        router_reply::PROTOCOL_UNREACHABLE
    });
    Ok(reply_to_sender(ctx, ifindex))
}

/// The `acl_reject` stage: answers the IPv4 packet an ACL stage rejected (its request as the
/// ACL stage took it, [`REJECT_FROM_EGRESS`] in its flags from the egress stage), or drops it
/// unanswered (`acl_reject`).
#[inline(always)]
pub fn acl_stage(ctx: &TcContext) -> Result<i32, DropReason> {
    let (unanswered, failed) = (drop_reason::ACL_REJECT, drop_reason::ACL_REJECT_FAILED);
    let [datapath, ports, ifindex, flags] = stages::take(ctx, ACL_REQUEST_MAGIC)?;
    let frame = ctx.load::<Ipv4Frame>(0).map_err(|_| unanswered)?;
    let total = u32::from(u16::from_be(frame.ip.total_len));
    if u16::from_be(frame.eth.ether_type) != ETH_P_IPV4
        || frame.ip.version_ihl != 0x45
        || u16::from_be(frame.ip.fragment) & 0x1fff != 0
        || total < 20
        || total > ctx.len().saturating_sub(ETH_HEADER_LEN as u32)
    {
        return Err(unanswered);
    }
    let l4 = ETH_HEADER_LEN + 20;
    match frame.ip.protocol {
        IPPROTO_TCP => {
            let segment = ctx.load::<TcpStart>(l4).map_err(|_| unanswered)?;
            let tcp_flags = ctx.load::<u8>(l4 + 13).map_err(|_| unanswered)?;
            if tcp_flags & TCP_RST != 0 {
                return Err(unanswered);
            }
            tcp_reset(ctx, &frame, &segment, PINCTRL_TCP_RESET_TTL, failed)?;
            count_reply(router_reply::ACL_TCP_RESET);
        }
        IPPROTO_SCTP => return Err(unanswered),
        protocol => {
            if protocol == IPPROTO_ICMP
                && ctx.load::<u8>(l4).map_err(|_| unanswered)? == ICMP_UNREACHABLE
            {
                return Err(unanswered);
            }
            let code = if protocol == IPPROTO_UDP {
                CODE_PORT
            } else {
                CODE_HOST
            };
            unreachable(ctx, &frame, code, PINCTRL_UNREACHABLE_TTL, failed)?;
            count_reply(router_reply::ACL_UNREACHABLE);
        }
    }
    if flags & REJECT_FROM_EGRESS != 0 {
        crate::switching::switch_frame(ctx, datapath, ports & 0xffff, ifindex)
    } else {
        Ok(reply_to_sender(ctx, ifindex))
    }
}

/// The `acl_reject` program's verdict on what [`acl_stage`] answers (the drop reason counted
/// and reported). A function of its own, as [`time_exceeded6_verdict`] is: inlined side by
/// side, their frames overran the stack; returning the verdict, it may tail-call.
#[inline(never)]
pub fn acl_verdict(ctx: &TcContext) -> i32 {
    match acl_stage(ctx) {
        Ok(verdict) => verdict,
        Err(reason) => crate::drop::drop_frame(ctx, reason),
    }
}

/// The `acl_reject` program's verdict on an IPv6 packet whose hop limit ran out
/// ([`time_exceeded6`]); see [`acl_verdict`].
#[inline(never)]
pub fn time_exceeded6_verdict(ctx: &TcContext) -> i32 {
    match time_exceeded6(ctx) {
        Ok(verdict) => verdict,
        Err(reason) => crate::drop::drop_frame(ctx, reason),
    }
}

/// Hands an IPv6 packet whose hop limit ran out on entering `router` (from the pod behind host
/// interface `ifindex`) to this stage for the router's time exceeded (a tail call: on success
/// this never returns). Returns the reason to drop the packet when the stage is not there.
#[inline(always)]
pub fn time_exceeded6_request(ctx: &TcContext, router: u32, ifindex: u32) -> DropReason {
    stages::jump(
        ctx,
        slot::ACL_REJECT,
        [router, ifindex, 0, 0, TIME_EXCEEDED6_REQUEST_MAGIC],
    )
}

/// The router's ICMPv6 time exceeded in place of the IPv6 packet the IPv6 stage handed over
/// (see the module doc), back out of the sender's veth; `ttl_expired` where the router sends
/// none.
#[inline(always)]
pub fn time_exceeded6(ctx: &TcContext) -> Result<i32, DropReason> {
    let expired = drop_reason::TTL_EXPIRED;
    let [router, ifindex, ..] = stages::take(ctx, TIME_EXCEEDED6_REQUEST_MAGIC)?;
    let packet = Ipv6Start::load(ctx).ok_or(expired)?;
    // OVN's flow matches `!ip.later_frag`.
    if packet.is_later_fragment(ctx) {
        return Err(expired);
    }
    let key = Key::new(
        TIME_EXCEEDED6_KEY_PREFIX_BITS + 128,
        TimeExceeded6Key {
            router: router.to_be(),
            mac: packet.eth.destination,
            padding: [0; 2],
            source: packet.sender,
        },
    );
    let Some(entry) = TIME_EXCEEDED6.get(key) else {
        return Err(expired);
    };
    let reply_eth = EthHeader {
        destination: packet.eth.source,
        source: packet.eth.destination,
        ether_type: packet.eth.ether_type,
    };
    icmp6_error(
        ctx,
        &packet,
        (reply_eth, entry.address),
        (ICMPV6_TIME_EXCEEDED, 0, TIME_EXCEEDED6_HOP_LIMIT),
        expired,
    )?;
    count_reply(router_reply::TIME_EXCEEDED);
    Ok(reply_to_sender(ctx, ifindex))
}

/// Hands IPv6 to one of `router`'s own addresses that the router answers (a TCP reset or an
/// ICMPv6 unreachable: `RouterAddress` flags checked by the IPv6 stage) to this stage, with the
/// sender's MAC from the router's neighbours, `sender_mac` (a tail call: on success this never
/// returns). Returns the reason to drop the packet when the stage is not there.
#[inline(always)]
pub fn router_answer6_request(
    ctx: &TcContext,
    ifindex: u32,
    sender_mac: [u8; 6],
    code: u8,
) -> DropReason {
    let [a, b, c, d, e, f] = sender_mac;
    stages::jump(
        ctx,
        slot::ACL_REJECT,
        [
            ifindex,
            u32::from_ne_bytes([a, b, c, d]),
            u32::from_ne_bytes([e, f, 0, 0]),
            u32::from(code),
            ROUTER_ANSWER6_REQUEST_MAGIC,
        ],
    )
}

/// The router's answer to IPv6 for one of its own addresses (see the module doc), routed back
/// toward the sender: out of its veth from the router port's MAC to the sender's.
#[inline(always)]
pub fn router_answer6(ctx: &TcContext) -> Result<i32, DropReason> {
    let failed = drop_reason::ROUTER_REPLY_FAILED;
    let [ifindex, mac_start, mac_end, code] = stages::take(ctx, ROUTER_ANSWER6_REQUEST_MAGIC)?;
    let packet = Ipv6Start::load(ctx).ok_or(drop_reason::TO_ROUTER_UNHANDLED)?;
    let (start, end) = (mac_start.to_ne_bytes(), mac_end.to_ne_bytes());
    let reply_eth = EthHeader {
        destination: [start[0], start[1], start[2], start[3], end[0], end[1]],
        source: packet.eth.destination,
        ether_type: packet.eth.ether_type,
    };
    if packet.start[6] == IPPROTO_TCP {
        tcp_reset6(ctx, &packet, &reply_eth)?;
        count_reply(router_reply::TCP_RESET);
    } else {
        let address = ctx
            .load::<[u8; 16]>(ETH_HEADER_LEN + 24)
            .map_err(|_| failed)?;
        icmp6_error(
            ctx,
            &packet,
            (reply_eth, address),
            (ICMPV6_UNREACHABLE, code as u8, UNREACHABLE_TTL),
            drop_reason::TO_ROUTER_UNHANDLED,
        )?;
        count_reply(if code as u8 == CODE6_PORT {
            router_reply::PORT_UNREACHABLE
        } else {
            router_reply::PROTOCOL_UNREACHABLE
        });
    }
    Ok(reply_to_sender(ctx, ifindex))
}

/// The `acl_reject` program's verdict on IPv6 for a router's own address
/// ([`router_answer6`]); see [`acl_verdict`].
#[inline(never)]
pub fn router_answer6_verdict(ctx: &TcContext) -> i32 {
    match router_answer6(ctx) {
        Ok(verdict) => verdict,
        Err(reason) => crate::drop::drop_frame(ctx, reason),
    }
}

/// The start of an IPv6 packet the stage answers, read piecewise (whole headers on the stack
/// overran it): Ethernet, the IPv6 header's first 8 bytes (version, class and flow label;
/// payload length; next header; hop limit) and its source.
struct Ipv6Start {
    eth: EthHeader,
    start: [u8; 8],
    sender: [u8; 16],
}

impl Ipv6Start {
    #[inline(always)]
    fn load(ctx: &TcContext) -> Option<Self> {
        Some(Self {
            eth: ctx.load::<EthHeader>(0).ok()?,
            start: ctx.load::<[u8; 8]>(ETH_HEADER_LEN).ok()?,
            sender: ctx.load::<[u8; 16]>(ETH_HEADER_LEN + 8).ok()?,
        })
    }

    /// Whether it is a fragment other than the first (a fragment header right after the IPv6
    /// header with an offset).
    #[inline(always)]
    fn is_later_fragment(&self, ctx: &TcContext) -> bool {
        self.start[6] == IPPROTO_FRAGMENT
            && ctx
                .load::<[u8; 4]>(ETH_HEADER_LEN + 40)
                .is_ok_and(|f| u16::from_be_bytes([f[2], f[3]]) & FRAGMENT_OFFSET_MASK != 0)
    }

    /// The IPv6 packet's length as its header gives it (40 and more).
    #[inline(always)]
    fn length(&self) -> u32 {
        40 + u32::from(u16::from_be_bytes([self.start[4], self.start[5]]))
    }
}

/// pinctrl's `icmp6` error in place of `packet`: `kind` and `code`, from `source` to the
/// packet's sender with `eth`, hop limit `hop_limit`, the packet's traffic class and flow
/// label, quoting the packet up to a 1280-byte answer (Ethernet counted), checksummed. A
/// packet it cannot quote (a jumbogram, or one longer than its frame) is dropped for
/// `unquotable`, the caller's reason.
#[inline(always)]
fn icmp6_error(
    ctx: &TcContext,
    packet: &Ipv6Start,
    (eth, source): (EthHeader, [u8; 16]),
    (kind, code, hop_limit): (u8, u8, u8),
    unquotable: DropReason,
) -> Result<(), DropReason> {
    let failed = drop_reason::ROUTER_REPLY_FAILED;
    let length = packet.length();
    if length == 40 || length > ctx.len().saturating_sub(ETH_HEADER_LEN as u32) {
        return Err(unquotable);
    }
    let quoted = if length > MAX_QUOTE6 {
        MAX_QUOTE6
    } else {
        length
    };
    // Cut to the quoted part, then open room for the new IPv6 and ICMPv6 headers between the
    // Ethernet header and the quoted packet.
    if !resize(ctx, ETH_HEADER_LEN as u32 + quoted)
        || ctx
            .adjust_room(ICMPV6_ERROR_ROOM as i32, BPF_ADJ_ROOM_MAC, 0)
            .is_err()
    {
        return Err(failed);
    }
    let message = 8 + quoted;
    let message_bytes = (message as u16).to_be_bytes();
    let start = packet.start;
    let ip_start = [
        start[0],
        start[1],
        start[2],
        start[3],
        message_bytes[0],
        message_bytes[1],
        IPPROTO_ICMPV6,
        hop_limit,
    ];
    // Type, code, checksum (0 while summed), unused.
    let icmp_head = [kind, code, 0, 0, 0, 0, 0, 0];
    let icmp_offset = ETH_HEADER_LEN + 40;
    ctx.store(0, &eth, 0)
        .and_then(|()| ctx.store(ETH_HEADER_LEN, &ip_start, 0))
        .and_then(|()| ctx.store(ETH_HEADER_LEN + 8, &source, 0))
        .and_then(|()| ctx.store(ETH_HEADER_LEN + 24, &packet.sender, 0))
        .and_then(|()| ctx.store(icmp_offset, &icmp_head, 0))
        .map_err(|_| failed)?;
    // The pseudo header's addresses lie just before the message: one sum over both, then its
    // length and next header.
    let addresses_and_message =
        region_sum::<{ 32 + 8 + MAX_QUOTE6 }>(ctx, ETH_HEADER_LEN as u32 + 8, 32 + message)?;
    let checksum =
        csum::fold(u32::from(addresses_and_message) + message + u32::from(IPPROTO_ICMPV6));
    ctx.store(icmp_offset + 2, &checksum.to_be(), 0)
        .map_err(|_| failed)
}

/// pinctrl's `tcp_reset` for IPv6 in place of `packet`: RST|ACK from the address it was for
/// to its sender's port, sequence 0, acknowledging the segment's sequence + 1, window 0; hop
/// limit 63 routed back (62), traffic class and flow label 0 (`pinctrl_compose_ipv6`).
#[inline(always)]
fn tcp_reset6(ctx: &TcContext, packet: &Ipv6Start, eth: &EthHeader) -> Result<(), DropReason> {
    let failed = drop_reason::ROUTER_REPLY_FAILED;
    let segment = ctx
        .load::<TcpStart>(ETH_HEADER_LEN + 40)
        .map_err(|_| drop_reason::TO_ROUTER_UNHANDLED)?;
    let address = ctx
        .load::<[u8; 16]>(ETH_HEADER_LEN + 24)
        .map_err(|_| failed)?;
    if !resize(ctx, (ETH_HEADER_LEN + 40 + 20) as u32) {
        return Err(failed);
    }
    let tcp = TcpResetHeader::answering(&segment, 0);
    let ip_start = [0x60, 0, 0, 0, 0, 20, IPPROTO_TCP, TCP_RESET_TTL];
    let tcp_offset = ETH_HEADER_LEN + 40;
    ctx.store(0, eth, 0)
        .and_then(|()| ctx.store(ETH_HEADER_LEN, &ip_start, 0))
        .and_then(|()| ctx.store(ETH_HEADER_LEN + 8, &address, 0))
        .and_then(|()| ctx.store(ETH_HEADER_LEN + 24, &packet.sender, 0))
        .and_then(|()| ctx.store(tcp_offset, &tcp, 0))
        .map_err(|_| failed)?;
    let addresses_and_segment = region_sum::<{ 32 + 20 }>(ctx, ETH_HEADER_LEN as u32 + 8, 52)?;
    let checksum = csum::fold(u32::from(addresses_and_segment) + 20 + u32::from(IPPROTO_TCP));
    ctx.store(tcp_offset + 16, &checksum.to_be(), 0)
        .map_err(|_| failed)
}

/// pinctrl's `tcp_reset` in place of `frame` (whose TCP segment starts with `segment`): RST|ACK
/// from the address it was for to its sender's port, sequence 0, acknowledging the segment's
/// sequence + 1, window 0; IPv4 ID 0, DF, TOS 0, TTL `ttl`. `failed`: the reason if it cannot be
/// built.
#[inline(always)]
fn tcp_reset(
    ctx: &TcContext,
    frame: &Ipv4Frame,
    segment: &TcpStart,
    ttl: u8,
    failed: DropReason,
) -> Result<(), DropReason> {
    let length = (ETH_HEADER_LEN + 20 + core::mem::size_of::<TcpResetHeader>()) as u32;
    if !resize(ctx, length) {
        return Err(failed);
    }
    let ip = reply_ip(frame, 40, ttl, IPPROTO_TCP);
    let ack = u32::from_be(segment.seq).wrapping_add(1);
    // Pseudo-header (addresses, protocol, TCP length) and the header's 16-bit words, summed as
    // they come (no array: this path's stack is from_pod's peak).
    let sum = (u32::from_be(ip.source) >> 16)
        + (u32::from_be(ip.source) & 0xffff)
        + (u32::from_be(ip.destination) >> 16)
        + (u32::from_be(ip.destination) & 0xffff)
        + u32::from(IPPROTO_TCP)
        + 20
        + u32::from(u16::from_be(segment.destination))
        + u32::from(u16::from_be(segment.source))
        + (ack >> 16)
        + (ack & 0xffff)
        + u32::from(TCP_RESET_FLAGS);
    let tcp = TcpResetHeader::answering(segment, csum::fold(sum));
    // Ethernet, IPv4, TCP: three stores, no whole frame on the stack.
    ctx.store(0, &reply_eth(frame), 0)
        .and_then(|()| ctx.store(ETH_HEADER_LEN, &ip, 0))
        .and_then(|()| ctx.store(ETH_HEADER_LEN + 20, &tcp, 0))
        .map_err(|_| failed)
}

/// pinctrl's `icmp4` destination unreachable with `code` in place of `frame`: IPv4 ID 0, DF, TOS
/// 0, TTL `ttl`,
/// quoting the datagram from its IPv4 header on, up to a 576-byte frame. A UDP checksum the
/// pod's stack left to offload (only the pseudo-header seed in place) is completed in the quote,
/// as OVN's kernel datapath completes it before ovn-controller sees the packet; for datagrams
/// longer than the quote it stays the seed (a known deviation).
#[inline(always)]
fn unreachable(
    ctx: &TcContext,
    frame: &Ipv4Frame,
    code: u8,
    ttl: u8,
    failed: DropReason,
) -> Result<(), DropReason> {
    // The caller checked 20 ≤ total length ≤ frame length.
    let total = u32::from(u16::from_be(frame.ip.total_len));
    let quoted = if total > MAX_QUOTE { MAX_QUOTE } else { total };
    // A whole UDP datagram whose checksum field holds the offload seed: (seed, pseudo-header).
    let mut offloaded = None;
    if frame.ip.protocol == IPPROTO_UDP
        && total == quoted
        && total >= 28
        && let Ok(udp) = ctx.load::<UdpHeader>(ETH_HEADER_LEN + 20)
    {
        let pseudo = csum::ones_fold(
            (u32::from_be(frame.ip.source) >> 16)
                + (u32::from_be(frame.ip.source) & 0xffff)
                + (u32::from_be(frame.ip.destination) >> 16)
                + (u32::from_be(frame.ip.destination) & 0xffff)
                + u32::from(IPPROTO_UDP)
                + u32::from(u16::from_be(udp.len)),
        );
        let field = u16::from_be(udp.checksum);
        if field != 0 && field == pseudo {
            offloaded = Some((field, pseudo));
        }
    }
    // Cut to the quoted part (dropping any Ethernet padding), then open room for the new IPv4
    // and ICMP headers between the Ethernet header and the quoted datagram.
    if !resize(ctx, ETH_HEADER_LEN as u32 + quoted)
        || ctx
            .adjust_room(ICMP_ERROR_ROOM as i32, BPF_ADJ_ROOM_MAC, 0)
            .is_err()
    {
        return Err(failed);
    }
    let head = IcmpErrorHead {
        eth: reply_eth(frame),
        ip: reply_ip(frame, (ICMP_ERROR_ROOM + quoted) as u16, ttl, IPPROTO_ICMP),
        kind: ICMP_UNREACHABLE,
        code,
        checksum: 0,
        unused: 0,
    };
    ctx.store(0, &head, 0).map_err(|_| failed)?;
    let icmp_offset = ETH_HEADER_LEN as u32 + 20;
    // The message's sum (checksum field 0), in network order.
    let mut sum =
        region_sum::<{ 8 + MAX_QUOTE }>(ctx, icmp_offset, 8 + quoted).map_err(|_| failed)?;
    if let Some((seed, pseudo)) = offloaded {
        // The datagram's own sum: the message's minus the ICMP header's and the quoted IPv4
        // header's (all its words, checksum included).
        let ip_words = ones_add(
            !csum::ipv4_header(&frame.ip),
            u16::from_be(frame.ip.checksum),
        );
        let icmp_word = u16::from(ICMP_UNREACHABLE) << 8 | u16::from(code);
        let datagram = ones_add(ones_add(sum, !icmp_word), !ip_words);
        // Not already a valid checksum: complete it as the kernel's checksum help does.
        if ones_add(datagram, pseudo) != 0xffff {
            let complete = match !datagram {
                0 => 0xffff,
                value => value,
            };
            ctx.store(icmp_offset as usize + 8 + 20 + 6, &complete.to_be(), 0)
                .map_err(|_| failed)?;
            sum = ones_add(ones_add(sum, !seed), complete);
        }
    }
    ctx.store(icmp_offset as usize + 2, &(!sum).to_be(), 0)
        .map_err(|_| failed)
}

/// Cuts the frame to `length` bytes (at most its length): `bpf_skb_change_tail`, or, where the
/// kernel refuses it for an skb it still marks encapsulated (decapsulated here after crossing a
/// veth from another node), the bytes after the IPv4 header removed with `bpf_skb_adjust_room`
/// (at most 4095 of them; the tail left is rewritten by the caller whole).
#[inline(always)]
fn resize(ctx: &TcContext, length: u32) -> bool {
    // SAFETY: the helper takes the skb pointer the context holds and plain integers.
    if unsafe { bpf_skb_change_tail(ctx.skb.skb, length, 0) } == 0 {
        return true;
    }
    let cut = ctx.len().saturating_sub(length);
    cut > 0 && cut <= 0xfff && ctx.adjust_room(-(cut as i32), BPF_ADJ_ROOM_NET, 0).is_ok()
}

/// One's complement sum of two 16-bit values.
#[inline(always)]
fn ones_add(a: u16, b: u16) -> u16 {
    csum::ones_fold(u32::from(a) + u32::from(b))
}

/// The one's complement sum of the `length` bytes at `offset` (at most `MAX`), as a
/// network-order value.
#[inline(always)]
fn region_sum<const MAX: u32>(
    ctx: &TcContext,
    offset: u32,
    length: u32,
) -> Result<u16, DropReason> {
    let mut buffer = [0_u64; (CHUNK / 8) as usize];
    let whole = length & !(CHUNK - 1);
    let rest = length & (CHUNK - 1);
    let mut sum: u32 = 0;
    // The part after the whole chunks first, zero-padded: nothing but `sum` is left for the
    // code after the loop, whatever chunk it exits at (the verifier prunes those states).
    if rest > 0 {
        // Volatile, so that it stays plain stores rather than a byte-wise memset call.
        for word in buffer.iter_mut() {
            // SAFETY: `word` is a valid, aligned element of the buffer.
            unsafe { core::ptr::write_volatile(word, 0) };
        }
        sum = chunk_sum(ctx, offset + whole, &mut buffer, rest, sum)?;
    }
    let mut done: u32 = 0;
    for _ in 0..MAX / CHUNK {
        if done >= whole {
            break;
        }
        sum = chunk_sum(ctx, offset + done, &mut buffer, CHUNK, sum)?;
        done += CHUNK;
    }
    // Summed in memory order (little-endian words): swapped, the same sum in network order.
    Ok(u16::from_be(csum::ones_fold(sum)))
}

/// Loads `length` (1..=`CHUNK`) bytes at `offset` into `buffer` and adds the whole buffer to
/// `seed` (its zero tail adds nothing).
#[inline(always)]
fn chunk_sum(
    ctx: &TcContext,
    offset: u32,
    buffer: &mut [u64; (CHUNK / 8) as usize],
    length: u32,
    seed: u32,
) -> Result<u32, DropReason> {
    // SAFETY: the helpers take the skb pointer, a stack buffer of CHUNK bytes and lengths
    // within it.
    unsafe {
        if bpf_skb_load_bytes(
            ctx.skb.skb.cast(),
            offset,
            buffer.as_mut_ptr().cast(),
            length,
        ) != 0
        {
            return Err(drop_reason::ROUTER_REPLY_FAILED);
        }
        let sum = bpf_csum_diff(
            core::ptr::null_mut(),
            0,
            buffer.as_mut_ptr().cast(),
            CHUNK,
            seed,
        );
        if sum < 0 {
            return Err(drop_reason::ROUTER_REPLY_FAILED);
        }
        Ok(sum as u32)
    }
}

/// Back to the sender: from the MAC it addressed (a router port's: the route back leaves there)
/// to the sender's MAC.
#[inline(always)]
fn reply_eth(frame: &Ipv4Frame) -> EthHeader {
    EthHeader {
        destination: frame.eth.source,
        source: frame.eth.destination,
        ether_type: frame.eth.ether_type,
    }
}

/// An IPv4 header as pinctrl composes it (ID 0, DF, TOS 0), from the address the packet was for
/// to its sender, with `ttl`.
#[inline(always)]
fn reply_ip(frame: &Ipv4Frame, total_len: u16, ttl: u8, protocol: u8) -> Ipv4Header {
    let mut ip = Ipv4Header {
        version_ihl: 0x45,
        tos: 0,
        total_len: total_len.to_be(),
        id: 0,
        fragment: DONT_FRAGMENT.to_be(),
        ttl,
        protocol,
        checksum: 0,
        source: frame.ip.destination,
        destination: frame.ip.source,
    };
    ip.checksum = csum::ipv4_header(&ip).to_be();
    ip
}
