//! The answers OVN makes in ovn-controller's userspace (pinctrl) rather than in flows, built
//! by the agent from the packets br-int's flows send it ([`PacketIn`]), as pinctrl builds them:
//! - the switch's ND responder (`nd_na`): a neighbour advertisement for the solicited target
//!   from the MAC the flow gives, flags solicited and override, back to the soliciting port;
//!   a router's for its own address (`nd_na_router`) likewise, with the router flag;
//! - a router's time exceeded (`icmp4 { icmp4.type = 11; … ip.ttl = 254; outport = inport;
//!   output; }`): ICMP time exceeded from the port's address the flow gives, quoting the
//!   expired datagram, back out of the port it came in by;
//! - a router's answers for traffic to its own addresses (`tcp_reset`, `icmp4` destination
//!   unreachable with the flow's code), routed back to the sender from the table after the IP
//!   input (`next`): a reset from TTL 63, an unreachable from TTL 255;
//! - a router's ARP request for a next hop without a known MAC (`lr_in_arp_request`'s `arp`):
//!   a broadcast request from the output port's MAC and address for the next hop, out of that
//!   port (the packet that needed it is dropped, as the eBPF datapath drops it); for IPv6 a
//!   neighbour solicitation (`nd_ns`) from the port's link-local address;
//! - the same answers for IPv6: ICMPv6 time exceeded and unreachables (quoting up to a
//!   1280-byte answer), resets;
//! - a router port's router advertisement for a solicitation (`put_nd_ra_opts`): the port's
//!   message as the IR encodes it, from its link-local address, back to the solicitor;
//! - a router's MAC learning (`put_arp`): the sender of an ARP the router heard of, handed to
//!   the daemon, which decides whether to write the MAC_Binding.
//!
//! Each answer's kind comes from the cookie of the flow that sent the packet (the backend's
//! owner in its low 32 bits, the kind above); what the flow knows and the packet does not
//! (the MAC to answer with, the router port's address, the code) it leaves in a register the
//! packet-in carries. The answer goes back into br-int as a packet-out from the controller
//! port, with the datapath and logical ports set as the pipeline had them, resubmitted to the
//! table OVN's action continues at.
//!
//! Written here rather than with a packet crate: the answers are five fixed layouts whose
//! every byte must be pinctrl's (the eBPF datapath builds the same ones in the kernel), and the
//! parsing is the few offsets the flows that send them already matched.
//!
//! Pure: owns no state and touches nothing (the advertisements are handed in);
//! [`super::controller`] runs it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{
    action::Action,
    l2::{COOKIE, OUTPUT},
    l3::ROUTING,
    message::{OWNER_MASK, PacketIn},
    oxm::Field,
};
use crate::{dataplane::HeardNeighbour, net::Mac, net::internet_checksum};

/// The cookies of the flows that send packets to the agent, by what it answers.
pub const COOKIE_ND_ADVERTISEMENT: u64 = COOKIE | 16 << 32;
pub const COOKIE_TIME_EXCEEDED: u64 = COOKIE | 17 << 32;
pub const COOKIE_TCP_RESET: u64 = COOKIE | 18 << 32;
pub const COOKIE_UNREACHABLE: u64 = COOKIE | 19 << 32;
pub const COOKIE_ARP_REQUEST: u64 = COOKIE | 20 << 32;
pub const COOKIE_LEARN: u64 = COOKIE | 21 << 32;
pub const COOKIE_ND_ROUTER_ADVERTISEMENT: u64 = COOKIE | 22 << 32;
pub const COOKIE_ROUTER_ADVERTISEMENT: u64 = COOKIE | 23 << 32;

/// The router advertisements the router ports send: router → port key → the port's MAC and
/// its advertisement (the ICMPv6 message, checksum 0), as the IR gives them
/// (`RouterAdvertisement`); written by the routers' translation, read here.
pub type Adverts =
    std::collections::HashMap<u32, std::collections::HashMap<u32, ([u8; 6], Vec<u8>)>>;

/// The register a flow leaves an answer's parameter in: the MAC's first four bytes (ND), the
/// router port's address (time exceeded), the ICMP code (unreachable).
pub const PARAMETER: u8 = 2;
/// The register with the MAC's last two bytes (in its high half).
pub const PARAMETER_LOW: u8 = 3;
/// The first of the four registers (`xxreg1`) with an IPv6 parameter: the router port's
/// address (ICMPv6 time exceeded).
pub const PARAMETER6: u8 = 4;

/// What the agent sent or reported, as the metric names it (the eBPF datapath's names where
/// it has the kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    NdAdvertisement,
    TimeExceeded,
    TcpReset,
    PortUnreachable,
    ProtocolUnreachable,
    ArpRequest,
    NdSolicitation,
    RouterAdvertisement,
    NeighbourReported,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::NdAdvertisement,
        Kind::TimeExceeded,
        Kind::TcpReset,
        Kind::PortUnreachable,
        Kind::ProtocolUnreachable,
        Kind::ArpRequest,
        Kind::NdSolicitation,
        Kind::RouterAdvertisement,
        Kind::NeighbourReported,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Kind::NdAdvertisement => "nd_advertisement",
            Kind::TimeExceeded => "time_exceeded",
            Kind::TcpReset => "tcp_reset",
            Kind::PortUnreachable => "port_unreachable",
            Kind::ProtocolUnreachable => "protocol_unreachable",
            Kind::ArpRequest => "arp_request",
            Kind::NdSolicitation => "nd_solicitation",
            Kind::RouterAdvertisement => "router_advertisement",
            Kind::NeighbourReported => "neighbour_reported",
        }
    }
}

/// An answer to send: its kind, the frame, and the packet-out's actions (pipeline fields set,
/// then the table it continues at).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub kind: Kind,
    pub frame: Vec<u8>,
    pub actions: Vec<Action>,
}

/// What a packet-in comes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Reply(Reply),
    /// An ARP sender for the daemon's MAC learning.
    Heard(HeardNeighbour),
}

/// Why a packet-in gets no answer (counted by this name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
pub enum Unanswered {
    /// Not from a flow of ours that asks for an answer.
    #[error("not from a flow that asks the agent")]
    UnknownCookie,
    /// The packet is not what its flow matched (cut short, or another layout).
    #[error("the packet is not what its flow sends")]
    Malformed,
    /// pinctrl does not answer it either (a later fragment, an ICMP error, a reset).
    #[error("OVN does not answer it")]
    NotAnswered,
    /// An ARP broadcast from a flow that names no router port either (a request teaching a new
    /// address is not learned anyway).
    #[error("a broadcast ARP names no router port")]
    NoRouterPort,
}

impl Unanswered {
    pub const ALL: [Unanswered; 4] = [
        Unanswered::UnknownCookie,
        Unanswered::Malformed,
        Unanswered::NotAnswered,
        Unanswered::NoRouterPort,
    ];

    /// The drop reason it is counted as.
    #[must_use]
    pub fn drop_reason(self) -> &'static str {
        match self {
            Unanswered::UnknownCookie => "answer_unknown_cookie",
            Unanswered::Malformed => "answer_malformed",
            Unanswered::NotAnswered => "answer_not_answered",
            Unanswered::NoRouterPort => "answer_no_router_port",
        }
    }
}

const ETH: usize = 14;
const IPV4: u16 = 0x0800;
const IPV6: u16 = 0x86dd;
const ARP: u16 = 0x0806;
const ICMP: u8 = 1;
const TCP: u8 = 6;
const ICMPV6: u8 = 58;
/// pinctrl quotes the datagram an ICMP error answers up to a 576-byte frame: 576 − 14 − 20 − 8.
const MAX_QUOTE: usize = 534;
/// IPv4's don't-fragment flag, which pinctrl sets on what it builds.
const DONT_FRAGMENT: u16 = 0x4000;

/// The answer to `packet_in` (`adverts`: the router ports' advertisements).
///
/// # Errors
/// Why there is none.
pub fn answer(packet_in: &PacketIn, adverts: &Adverts) -> Result<Outcome, Unanswered> {
    let frame = packet_in.data.as_slice();
    let registers = &packet_in.registers;
    let cookie = packet_in.cookie;
    if cookie & OWNER_MASK != COOKIE & OWNER_MASK {
        return Err(Unanswered::UnknownCookie);
    }
    match cookie {
        COOKIE_ND_ADVERTISEMENT | COOKIE_ND_ROUTER_ADVERTISEMENT => {
            // A router's (`nd_na_router`) has the router flag too.
            let flags = if cookie == COOKIE_ND_ROUTER_ADVERTISEMENT {
                0xe0
            } else {
                0x60
            };
            let frame = nd_advertisement(frame, parameter_mac(registers), flags)?;
            Ok(Outcome::Reply(Reply {
                kind: Kind::NdAdvertisement,
                frame,
                actions: back_to_sender(packet_in),
            }))
        }
        COOKIE_TIME_EXCEEDED if is_ipv6(frame) => {
            let source = parameter_ipv6(registers);
            let frame = icmp6_error(frame, (3, 0, 254), source, Ipv6View::parse(frame)?)?;
            Ok(Outcome::Reply(Reply {
                kind: Kind::TimeExceeded,
                frame,
                actions: back_to_sender(packet_in),
            }))
        }
        COOKIE_TIME_EXCEEDED => {
            let source = Ipv4Addr::from(registers[usize::from(PARAMETER)]);
            let frame = icmp_error(frame, 11, 0, source, 254)?;
            Ok(Outcome::Reply(Reply {
                kind: Kind::TimeExceeded,
                frame,
                actions: back_to_sender(packet_in),
            }))
        }
        COOKIE_TCP_RESET => Ok(Outcome::Reply(Reply {
            kind: Kind::TcpReset,
            frame: if is_ipv6(frame) {
                tcp_reset6(frame)?
            } else {
                tcp_reset(frame)?
            },
            actions: routed(packet_in),
        })),
        COOKIE_UNREACHABLE if is_ipv6(frame) => {
            let code = u8::try_from(registers[usize::from(PARAMETER)])
                .map_err(|_| Unanswered::Malformed)?;
            let ip = Ipv6View::parse(frame)?;
            let frame = icmp6_error(frame, (1, code, 255), ip.destination, ip)?;
            Ok(Outcome::Reply(Reply {
                // ICMPv6's port unreachable is code 4 (address unreachable, 3, for the rest).
                kind: if code == 4 {
                    Kind::PortUnreachable
                } else {
                    Kind::ProtocolUnreachable
                },
                frame,
                actions: routed(packet_in),
            }))
        }
        COOKIE_UNREACHABLE => {
            let code = u8::try_from(registers[usize::from(PARAMETER)])
                .map_err(|_| Unanswered::Malformed)?;
            let ip = Ipv4View::parse(frame)?;
            // The first fragment of an ICMP message: as the eBPF datapath, not answered (OVN
            // would answer an echo request's with an echo reply).
            if ip.protocol == ICMP && ip.fragment & 0x2000 != 0 {
                return Err(Unanswered::NotAnswered);
            }
            let frame = icmp_error(frame, 3, code, ip.destination, 255)?;
            Ok(Outcome::Reply(Reply {
                kind: if code == 3 {
                    Kind::PortUnreachable
                } else {
                    Kind::ProtocolUnreachable
                },
                frame,
                actions: routed(packet_in),
            }))
        }
        COOKIE_ARP_REQUEST => {
            let source_mac = mac_at(frame, 6)?;
            let (kind, frame) = if is_ipv6(frame) {
                (
                    Kind::NdSolicitation,
                    nd_solicitation(source_mac, parameter_ipv6_at(registers, 0)),
                )
            } else {
                (
                    Kind::ArpRequest,
                    arp_request(
                        source_mac,
                        Ipv4Addr::from(registers[1]),
                        Ipv4Addr::from(registers[0]),
                    ),
                )
            };
            Ok(Outcome::Reply(Reply {
                kind,
                frame,
                actions: vec![
                    Action::SetField(Field::metadata(packet_in.metadata)),
                    Action::SetField(Field::register(14, registers[14])),
                    Action::SetField(Field::register(15, registers[15])),
                    Action::Resubmit(OUTPUT),
                ],
            }))
        }
        COOKIE_ROUTER_ADVERTISEMENT => {
            let router = u32::try_from(packet_in.metadata).map_err(|_| Unanswered::Malformed)?;
            let (mac, message) = adverts
                .get(&router)
                .and_then(|ports| ports.get(&registers[14]))
                .ok_or(Unanswered::NotAnswered)?;
            Ok(Outcome::Reply(Reply {
                kind: Kind::RouterAdvertisement,
                frame: router_advertisement(frame, Mac(*mac), message)?,
                actions: back_to_sender(packet_in),
            }))
        }
        COOKIE_LEARN => heard(packet_in).map(Outcome::Heard),
        _ => Err(Unanswered::UnknownCookie),
    }
}

/// The MAC a flow left in the parameter registers.
fn parameter_mac(registers: &[u32; 16]) -> [u8; 6] {
    let mut mac = [0; 6];
    mac[..4].copy_from_slice(&registers[usize::from(PARAMETER)].to_be_bytes());
    mac[4..].copy_from_slice(&registers[usize::from(PARAMETER_LOW)].to_be_bytes()[..2]);
    mac
}

/// Whether `frame` is IPv6 (the flows that send both families up share their cookie).
fn is_ipv6(frame: &[u8]) -> bool {
    u16_at(frame, 12).is_ok_and(|ether_type| ether_type == IPV6)
}

/// The IPv6 address a flow left in `xxreg1` (`reg4`–`reg7`): a router port's address.
fn parameter_ipv6(registers: &[u32; 16]) -> Ipv6Addr {
    parameter_ipv6_at(registers, usize::from(PARAMETER6))
}

/// The IPv6 address in the four registers from `first` (`first` the most significant).
fn parameter_ipv6_at(registers: &[u32; 16], first: usize) -> Ipv6Addr {
    let mut octets = [0; 16];
    for (index, chunk) in octets.chunks_exact_mut(4).enumerate() {
        chunk.copy_from_slice(&registers[first + index].to_be_bytes());
    }
    Ipv6Addr::from(octets)
}

/// Back out of the logical port the packet came in by (`outport = inport; flags.loopback = 1;
/// output;`): the output table, with no input port (so that the port is not its own source).
fn back_to_sender(packet_in: &PacketIn) -> Vec<Action> {
    vec![
        Action::SetField(Field::metadata(packet_in.metadata)),
        Action::SetField(Field::register(14, 0)),
        Action::SetField(Field::register(15, packet_in.registers[14])),
        Action::Resubmit(OUTPUT),
    ]
}

/// On through the router's routing (`next` after its IP input), with the registers as the
/// pipeline had them (the input port, the route table).
fn routed(packet_in: &PacketIn) -> Vec<Action> {
    let mut actions = vec![Action::SetField(Field::metadata(packet_in.metadata))];
    for (index, value) in (0_u8..).zip(packet_in.registers) {
        if value != 0 {
            actions.push(Action::SetField(Field::register(index, value)));
        }
    }
    actions.push(Action::Resubmit(ROUTING));
    actions
}

fn u16_at(frame: &[u8], at: usize) -> Result<u16, Unanswered> {
    frame
        .get(at..at + 2)
        .map(|bytes| u16::from_be_bytes([bytes[0], bytes[1]]))
        .ok_or(Unanswered::Malformed)
}

fn mac_at(frame: &[u8], at: usize) -> Result<Mac, Unanswered> {
    frame
        .get(at..at + 6)
        .and_then(|bytes| bytes.try_into().ok())
        .map(Mac)
        .ok_or(Unanswered::Malformed)
}

fn octets<const N: usize>(frame: &[u8], at: usize) -> Result<[u8; N], Unanswered> {
    frame
        .get(at..at + N)
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or(Unanswered::Malformed)
}

/// The one's complement sum of `bytes` (not yet folded or inverted).
fn sum(bytes: &[u8]) -> u32 {
    bytes
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)])))
        .sum()
}

/// The checksum of a sum.
fn finish(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    // The fold leaves at most 16 bits.
    !u16::try_from(sum).unwrap_or(u16::MAX)
}

/// An IPv4 frame's fields the answers use.
struct Ipv4View {
    header_len: usize,
    total_len: usize,
    fragment: u16,
    protocol: u8,
    source: Ipv4Addr,
    destination: Ipv4Addr,
}

impl Ipv4View {
    fn parse(frame: &[u8]) -> Result<Self, Unanswered> {
        if u16_at(frame, 12)? != IPV4 {
            return Err(Unanswered::Malformed);
        }
        let version_ihl = *frame.get(ETH).ok_or(Unanswered::Malformed)?;
        let header_len = usize::from(version_ihl & 0x0f) * 4;
        let total_len = usize::from(u16_at(frame, ETH + 2)?);
        if version_ihl >> 4 != 4 || header_len < 20 || total_len < header_len {
            return Err(Unanswered::Malformed);
        }
        if frame.len() < ETH + total_len {
            return Err(Unanswered::Malformed);
        }
        Ok(Self {
            header_len,
            total_len,
            fragment: u16_at(frame, ETH + 6)?,
            protocol: frame[ETH + 9],
            source: Ipv4Addr::from(octets::<4>(frame, ETH + 12)?),
            destination: Ipv4Addr::from(octets::<4>(frame, ETH + 16)?),
        })
    }

    fn is_later_fragment(&self) -> bool {
        self.fragment & 0x1fff != 0
    }
}

/// Ethernet back to the sender: to the MAC that sent `frame`, from the one it was sent to.
fn reply_ethernet(frame: &[u8], ether_type: u16) -> Result<Vec<u8>, Unanswered> {
    let mut out = Vec::with_capacity(128);
    out.extend(octets::<6>(frame, 6)?);
    out.extend(octets::<6>(frame, 0)?);
    out.extend(ether_type.to_be_bytes());
    Ok(out)
}

/// An IPv4 header as pinctrl composes it: ID 0, DF, TOS 0.
fn ipv4_header(
    total_len: usize,
    ttl: u8,
    protocol: u8,
    source: Ipv4Addr,
    destination: Ipv4Addr,
) -> [u8; 20] {
    let mut header = [0; 20];
    header[0] = 0x45;
    header[2..4].copy_from_slice(&u16::try_from(total_len).unwrap_or(u16::MAX).to_be_bytes());
    header[6..8].copy_from_slice(&DONT_FRAGMENT.to_be_bytes());
    header[8] = ttl;
    header[9] = protocol;
    header[12..16].copy_from_slice(&source.octets());
    header[16..20].copy_from_slice(&destination.octets());
    let checksum = internet_checksum(&header);
    header[10..12].copy_from_slice(&checksum.to_be_bytes());
    header
}

/// pinctrl's `icmp4` error of `kind`/`code` for `frame` (IPv4): from `source` to the
/// datagram's sender with `ttl`, quoting the datagram from its IPv4 header on, up to a
/// 576-byte frame. Later fragments are not answered (northd's flows match `!ip.later_frag`).
fn icmp_error(
    frame: &[u8],
    kind: u8,
    code: u8,
    source: Ipv4Addr,
    ttl: u8,
) -> Result<Vec<u8>, Unanswered> {
    let ip = Ipv4View::parse(frame)?;
    if ip.is_later_fragment() {
        return Err(Unanswered::NotAnswered);
    }
    let quoted = &frame[ETH..ETH + ip.total_len.min(MAX_QUOTE)];
    let mut icmp = vec![kind, code, 0, 0, 0, 0, 0, 0];
    icmp.extend(quoted);
    let checksum = internet_checksum(&icmp);
    icmp[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut out = reply_ethernet(frame, IPV4)?;
    out.extend(ipv4_header(20 + icmp.len(), ttl, ICMP, source, ip.source));
    out.extend(icmp);
    Ok(out)
}

/// pinctrl's `tcp_reset` for the TCP segment in `frame`: RST|ACK from the address and port it
/// was for back to its sender, sequence 0, acknowledging its sequence + 1, window 0, TTL 63. A
/// reset is not answered.
fn tcp_reset(frame: &[u8]) -> Result<Vec<u8>, Unanswered> {
    let ip = Ipv4View::parse(frame)?;
    if ip.protocol != TCP {
        return Err(Unanswered::Malformed);
    }
    if ip.is_later_fragment() {
        return Err(Unanswered::NotAnswered);
    }
    let segment = reset_segment(frame, ETH + ip.header_len, |segment| {
        let mut pseudo = Vec::with_capacity(12);
        pseudo.extend(ip.destination.octets());
        pseudo.extend(ip.source.octets());
        pseudo.extend([0, TCP]);
        pseudo.extend(u16::try_from(segment.len()).unwrap_or(0).to_be_bytes());
        sum(&pseudo)
    })?;
    let mut out = reply_ethernet(frame, IPV4)?;
    out.extend(ipv4_header(40, 63, TCP, ip.destination, ip.source));
    out.extend(segment);
    Ok(out)
}

/// The reset's TCP segment for the segment at `tcp` in `frame`: RST|ACK back to its source
/// port, sequence 0, acknowledging its sequence + 1, window 0, checksummed with `pseudo` (its
/// family's pseudo header's sum). A reset is not answered.
fn reset_segment(
    frame: &[u8],
    tcp: usize,
    pseudo: impl Fn(&[u8]) -> u32,
) -> Result<[u8; 20], Unanswered> {
    let (source_port, destination_port) = (u16_at(frame, tcp)?, u16_at(frame, tcp + 2)?);
    let sequence = u32::from_be_bytes(octets::<4>(frame, tcp + 4)?);
    let flags = *frame.get(tcp + 13).ok_or(Unanswered::Malformed)?;
    if flags & 0x04 != 0 {
        return Err(Unanswered::NotAnswered);
    }
    let mut segment = [0_u8; 20];
    segment[0..2].copy_from_slice(&destination_port.to_be_bytes());
    segment[2..4].copy_from_slice(&source_port.to_be_bytes());
    segment[8..12].copy_from_slice(&sequence.wrapping_add(1).to_be_bytes());
    segment[12..14].copy_from_slice(&(5_u16 << 12 | 0x04 | 0x10).to_be_bytes());
    let checksum = finish(pseudo(&segment) + sum(&segment));
    segment[16..18].copy_from_slice(&checksum.to_be_bytes());
    Ok(segment)
}

/// pinctrl's `arp` request for a next hop: broadcast from `source_mac`, asking for `target`
/// from `source` (42 bytes, as `compose_arp` builds it).
fn arp_request(source_mac: Mac, source: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut out = Vec::with_capacity(42);
    out.extend([0xff; 6]);
    out.extend(source_mac.0);
    out.extend(ARP.to_be_bytes());
    out.extend([0, 1, 8, 0, 6, 4, 0, 1]);
    out.extend(source_mac.0);
    out.extend(source.octets());
    out.extend([0; 6]);
    out.extend(target.octets());
    out
}

/// pinctrl's `nd_na` (and `nd_na_router`) for the neighbour solicitation in `frame`: to its
/// sender from `mac` and the target, hop limit 255, traffic class and flow label 0, `flags`
/// (the first byte: solicited and override, and router for a router's), the target's
/// link-layer address option with `mac`.
fn nd_advertisement(frame: &[u8], mac: [u8; 6], flags: u8) -> Result<Vec<u8>, Unanswered> {
    if u16_at(frame, 12)? != IPV6 || frame.get(ETH + 6) != Some(&ICMPV6) {
        return Err(Unanswered::Malformed);
    }
    let icmp = ETH + 40;
    if frame.get(icmp) != Some(&135) {
        return Err(Unanswered::Malformed);
    }
    let sender = Ipv6Addr::from(octets::<16>(frame, ETH + 8)?);
    let target = Ipv6Addr::from(octets::<16>(frame, icmp + 8)?);
    let mut message = vec![136, 0, 0, 0, flags, 0, 0, 0];
    message.extend(target.octets());
    message.extend([2, 1]);
    message.extend(mac);
    let mut pseudo = Vec::with_capacity(40);
    pseudo.extend(target.octets());
    pseudo.extend(sender.octets());
    pseudo.extend(u32::try_from(message.len()).unwrap_or(0).to_be_bytes());
    pseudo.extend([0, 0, 0, ICMPV6]);
    let checksum = finish(sum(&pseudo) + sum(&message));
    message[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut out = Vec::with_capacity(ETH + 40 + message.len());
    out.extend(octets::<6>(frame, 6)?);
    out.extend(mac);
    out.extend(IPV6.to_be_bytes());
    out.extend([0x60, 0, 0, 0]);
    out.extend(u16::try_from(message.len()).unwrap_or(0).to_be_bytes());
    out.extend([ICMPV6, 255]);
    out.extend(target.octets());
    out.extend(sender.octets());
    out.extend(message);
    Ok(out)
}

/// An IPv6 frame's fields the answers use.
#[derive(Clone, Copy)]
struct Ipv6View {
    /// Version, traffic class and flow label.
    start: [u8; 4],
    /// The packet's length, its header included (from its payload length).
    length: usize,
    next_header: u8,
    source: Ipv6Addr,
    destination: Ipv6Addr,
}

/// IPv6's fragment header, and the offset bits of its second 16-bit word.
const FRAGMENT: u8 = 44;
const FRAGMENT_OFFSET_MASK: u16 = 0xfff8;
/// pinctrl quotes the packet an ICMPv6 error answers up to a 1280-byte answer, its Ethernet
/// header counted: 1280 − 14 − 40 − 8.
const MAX_QUOTE6: usize = 1218;

impl Ipv6View {
    fn parse(frame: &[u8]) -> Result<Self, Unanswered> {
        if !is_ipv6(frame) || frame.get(ETH).is_none_or(|byte| byte >> 4 != 6) {
            return Err(Unanswered::Malformed);
        }
        let length = 40 + usize::from(u16_at(frame, ETH + 4)?);
        if frame.len() < ETH + length {
            return Err(Unanswered::Malformed);
        }
        let view = Self {
            start: octets::<4>(frame, ETH)?,
            length,
            next_header: frame[ETH + 6],
            source: Ipv6Addr::from(octets::<16>(frame, ETH + 8)?),
            destination: Ipv6Addr::from(octets::<16>(frame, ETH + 24)?),
        };
        // A later fragment (a fragment header right after this one, with an offset).
        if view.next_header == FRAGMENT && u16_at(frame, ETH + 42)? & FRAGMENT_OFFSET_MASK != 0 {
            return Err(Unanswered::NotAnswered);
        }
        Ok(view)
    }
}

/// The one's complement sum of IPv6's pseudo header for `length` bytes of `next_header`.
fn pseudo_header6(source: Ipv6Addr, destination: Ipv6Addr, length: usize, next_header: u8) -> u32 {
    let mut pseudo = Vec::with_capacity(40);
    pseudo.extend(source.octets());
    pseudo.extend(destination.octets());
    pseudo.extend(u32::try_from(length).unwrap_or(0).to_be_bytes());
    pseudo.extend([0, 0, 0, next_header]);
    sum(&pseudo)
}

/// An IPv6 header: `start` (version, traffic class, flow label), then the rest.
fn ipv6_header(
    start: [u8; 4],
    payload: usize,
    (next_header, hop_limit): (u8, u8),
    source: Ipv6Addr,
    destination: Ipv6Addr,
) -> Vec<u8> {
    let mut header = Vec::with_capacity(40);
    header.extend(start);
    header.extend(u16::try_from(payload).unwrap_or(u16::MAX).to_be_bytes());
    header.extend([next_header, hop_limit]);
    header.extend(source.octets());
    header.extend(destination.octets());
    header
}

/// pinctrl's `icmp6` error (`kind`, `code`, `hop_limit`) for the IPv6 packet `ip` in `frame`:
/// from `source` to the packet's sender, with its traffic class and flow label, quoting it up
/// to a 1280-byte answer. A packet with no payload length (a jumbogram) is not answered.
fn icmp6_error(
    frame: &[u8],
    (kind, code, hop_limit): (u8, u8, u8),
    source: Ipv6Addr,
    ip: Ipv6View,
) -> Result<Vec<u8>, Unanswered> {
    if ip.length == 40 {
        return Err(Unanswered::NotAnswered);
    }
    let quoted = &frame[ETH..ETH + ip.length.min(MAX_QUOTE6)];
    let mut message = vec![kind, code, 0, 0, 0, 0, 0, 0];
    message.extend(quoted);
    let checksum = finish(pseudo_header6(source, ip.source, message.len(), ICMPV6) + sum(&message));
    message[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut out = reply_ethernet(frame, IPV6)?;
    out.extend(ipv6_header(
        ip.start,
        message.len(),
        (ICMPV6, hop_limit),
        source,
        ip.source,
    ));
    out.extend(message);
    Ok(out)
}

/// pinctrl's `tcp_reset` for IPv6: as [`tcp_reset`]'s segment, hop limit 63, traffic class and
/// flow label 0.
fn tcp_reset6(frame: &[u8]) -> Result<Vec<u8>, Unanswered> {
    let ip = Ipv6View::parse(frame)?;
    if ip.next_header != TCP {
        return Err(Unanswered::Malformed);
    }
    let segment = reset_segment(frame, ETH + 40, |segment| {
        pseudo_header6(ip.destination, ip.source, segment.len(), TCP)
    })?;
    let mut out = reply_ethernet(frame, IPV6)?;
    out.extend(ipv6_header(
        [0x60, 0, 0, 0],
        segment.len(),
        (TCP, 63),
        ip.destination,
        ip.source,
    ));
    out.extend(segment);
    Ok(out)
}

/// A router's solicitation for IPv6 next hop `target` from its port with MAC `mac` (pinctrl's
/// `nd_ns`): from the port's link-local address (derived from the MAC) to the target's
/// solicited-node group, hop limit 255, the source link-layer address option.
fn nd_solicitation(mac: Mac, target: Ipv6Addr) -> Vec<u8> {
    let group = Ipv6Addr::from(ovnbpf_common::ipv6::solicited_node(target.octets()));
    let group_octets = group.octets();
    let m = mac.0;
    let source = link_local(mac);
    let mut message = vec![135, 0, 0, 0, 0, 0, 0, 0];
    message.extend(target.octets());
    message.extend([1, 1]);
    message.extend(m);
    let checksum = finish(pseudo_header6(source, group, message.len(), ICMPV6) + sum(&message));
    message[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut out = Vec::with_capacity(ETH + 40 + message.len());
    out.extend([0x33, 0x33]);
    out.extend(&group_octets[12..]);
    out.extend(m);
    out.extend(IPV6.to_be_bytes());
    out.extend(ipv6_header(
        [0x60, 0, 0, 0],
        message.len(),
        (ICMPV6, 255),
        source,
        group,
    ));
    out.extend(message);
    out
}

/// A router port's answer to the router solicitation in `frame` (`lr_in_nd_ra_response`): the
/// solicitation's IPv6 header as ovn-controller keeps it (traffic class, flow label, hop limit
/// 255), from the port's MAC and link-local address to the solicitor (to `ff02::1` where it
/// sent from `::`, as OVN 23.03.3 on), with the port's `message`, checksummed.
fn router_advertisement(frame: &[u8], mac: Mac, message: &[u8]) -> Result<Vec<u8>, Unanswered> {
    let ip = Ipv6View::parse(frame)?;
    let source = link_local(mac);
    let destination = if ip.source.is_unspecified() {
        Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1)
    } else {
        ip.source
    };
    let mut message = message.to_vec();
    if message.len() < 4 {
        return Err(Unanswered::Malformed);
    }
    message[2..4].copy_from_slice(&[0, 0]);
    let checksum =
        finish(pseudo_header6(source, destination, message.len(), ICMPV6) + sum(&message));
    message[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut out = Vec::with_capacity(ETH + 40 + message.len());
    out.extend(octets::<6>(frame, 6)?);
    out.extend(mac.0);
    out.extend(IPV6.to_be_bytes());
    out.extend(ipv6_header(
        ip.start,
        message.len(),
        (ICMPV6, 255),
        source,
        destination,
    ));
    out.extend(message);
    Ok(out)
}

/// The link-local address of `mac` (EUI-64).
fn link_local(mac: Mac) -> Ipv6Addr {
    Ipv6Addr::from(ovnbpf_common::ipv6::link_local(mac.0))
}

/// The sender of the ARP in `packet_in` the router heard, for MAC learning: the router port is
/// the one the frame was addressed to, or for a broadcast the one whose MAC the flow gives.
fn heard(packet_in: &PacketIn) -> Result<HeardNeighbour, Unanswered> {
    let frame = packet_in.data.as_slice();
    if u16_at(frame, 12)? != ARP || u16_at(frame, ETH + 2)? != IPV4 {
        return Err(Unanswered::Malformed);
    }
    let mut router_mac = mac_at(frame, 0)?;
    if router_mac.0[0] & 1 != 0 {
        router_mac = Mac(parameter_mac(&packet_in.registers));
        if router_mac.0 == [0; 6] {
            return Err(Unanswered::NoRouterPort);
        }
    }
    let op = u16_at(frame, ETH + 6)?;
    Ok(HeardNeighbour {
        router: u32::try_from(packet_in.metadata).map_err(|_| Unanswered::Malformed)?,
        router_mac,
        ip: IpAddr::V4(Ipv4Addr::from(octets::<4>(frame, ETH + 14)?)),
        mac: mac_at(frame, ETH + 8)?,
        request: op == 1,
    })
}

#[cfg(test)]
mod tests;
