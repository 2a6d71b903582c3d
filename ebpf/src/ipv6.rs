//! The IPv6 stage, a program of its own that `from_pod` tail-calls through `STAGES` with an
//! [`Ipv6Request`] in the skb's control block: for multicast neighbour solicitations, and for
//! IPv6 a pod sends to a router's MAC.
//!
//! The switch's ND responder (`ls_in_arp_rsp`): a solicitation for an address the switch knows
//! (a router port's, with OVN's `nd_na_router`; a pod's, `nd_na`), sent to that address or its
//! solicited-node group by any port but the address's owner, is answered in place with OVN's
//! advertisement (from the target, hop limit 255, S and O set, R for a router, the target's MAC
//! in a target link-layer option) back out of the pod's veth. Solicitations it does not answer
//! go on: multicast ones to the flood stage, unicast ones to the router.
//!
//! The router (`lr_in_ip_input`): other neighbour discovery to it is consumed
//! (`nd_to_router`); an echo request to one of its addresses is answered in place (addresses
//! swapped, type 129, hop limit 254: OVN sets 255 and routes the answer back) to the sender's
//! MAC from the router's neighbours; an unknown sender is solicited instead, as the routed
//! answer would be. Its other answers (reset, port or address unreachable) are composed by the
//! reject stage ([`crate::reject`]); what it does not answer is `to_router_unhandled`. Other IPv6 with hop
//! limit left is routed by the route6 stage ([`crate::router6`], tail-called: routes, peering,
//! neighbours, solicitations; the routed frame's L2 output step is the router stage's). Where a next hop has no MAC, the router
//! solicits it as OVN's `nd_ns` does (from the output port's link-local address, to the next
//! hop's solicited-node group, hop limit 255, a source link-layer option), flooded on the switch
//! like its ARP requests; the packet is dropped. A hop limit of 1 or less gets the router's
//! ICMPv6 time exceeded, composed by the reject stage ([`crate::reject`]: this stage's stack was
//! full), or is dropped as `ttl_expired` where the router sends none; a router whose IPv6 flows are not
//! all compiled (`ROUTER_IPV6_UNSUPPORTED`) has all its IPv6 dropped as `router_unsupported`. The
//! responder's and the router's answers go back out of the sender's veth (the responder's
//! through its egress port security). This stage's stack is at the verifier's 512 bytes: what
//! it adds goes to another stage. Reads `ND_RESPONDER`, `ROUTERS`, `ROUTER_ADDRESSES6`,
//! `NEIGHBOURS6`, `L2_FIB`, `ACL_SWITCHES` (and, through `port_security`, `PORT_SECURITY`; through
//! `router6`, its maps); counts its answers and solicitations in `ROUTER_REPLIES`.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::{
    ARP_ANSWER_ROUTER, DropReason, FibKey, IPV6_REQUEST_MAGIC, Ipv6Key, Ipv6Request,
    ROUTER_ADDRESS_ECHO, ROUTER_ADDRESS_PORT_UNREACHABLE, ROUTER_ADDRESS_PROTOCOL_UNREACHABLE,
    ROUTER_ADDRESS_TCP_RESET, ROUTER_FORWARDS, ROUTER_IPV6_LINK_LOCAL, ROUTER_IPV6_UNSUPPORTED,
    ROUTER_ND_REQUESTS,
    acl::UNCHECKED_EGRESS,
    drop_reason,
    ipv6::{link_local, solicited_node},
    router_reply, stage as slot,
};

use crate::maps::get;
use crate::output::reply_to_sender;
use crate::{
    L2_FIB, ND_RESPONDER, NEIGHBOURS6, PASS, ROUTER_ADDRESSES6, ROUTERS, acl, count_reply, csum,
    flood,
    headers::{
        ETH_HEADER_LEN, ETH_P_IPV6, EthHeader, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP, Ipv6Frame,
        Ipv6Header, NdBody, NdFrame, NdMessage,
    },
    stages,
};

const ND_SOLICITATION: u8 = 135;
const ND_ADVERTISEMENT: u8 = 136;
const ECHO_REQUEST: u8 = 128;
/// ICMPv6 destination unreachable codes of the router's answers: port unreachable for UDP,
/// address unreachable for other protocols (northd's).
const CODE_PORT: u8 = 4;
const CODE_ADDRESS: u8 = 3;
/// IPv6 extension headers (hop-by-hop, routing, fragment, destination options): what follows
/// them is not read here.
const EXTENSION_HEADERS: [u8; 4] = [0, 43, 44, 60];
/// ICMPv6 types of neighbour discovery (router solicitation … redirect).
const ND_TYPES: core::ops::RangeInclusive<u8> = 133..=137;
/// Offset of the ICMPv6 header in a frame without extension headers.
const ICMPV6_OFFSET: usize = ETH_HEADER_LEN + 40;
/// Length of the frames this stage composes ([`NdFrame`]).
const ND_FRAME_LEN: u32 = core::mem::size_of::<NdFrame>() as u32;

/// Whether the frame is an ICMPv6 neighbour solicitation (no extension headers).
#[inline(always)]
pub fn is_solicitation(ctx: &TcContext) -> bool {
    ctx.load::<u8>(ETH_HEADER_LEN + 6)
        .is_ok_and(|h| h == IPPROTO_ICMPV6)
        && ctx
            .load::<u8>(ICMPV6_OFFSET)
            .is_ok_and(|kind| kind == ND_SOLICITATION)
}

/// Hands the frame to the IPv6 stage (a tail call: on success this never returns). Returns the
/// reason to drop the frame when the stage is not there.
#[inline(always)]
pub fn request(ctx: &TcContext, request: &Ipv6Request) -> DropReason {
    stages::jump(ctx, slot::IPV6, request.words())
}

/// The IPv6 stage (see the module doc).
#[inline(always)]
pub fn stage(ctx: &TcContext) -> Result<i32, DropReason> {
    let request = Ipv6Request::from_words(stages::take(ctx, IPV6_REQUEST_MAGIC)?);
    let Ok(frame) = ctx.load::<Ipv6Frame>(0) else {
        return Err(drop_reason::ROUTED_MALFORMED);
    };
    if u32::from_be(frame.ip.version_class_flow) >> 28 != 6 {
        return Err(drop_reason::ROUTED_MALFORMED);
    }
    let icmp_type = if frame.ip.next_header == IPPROTO_ICMPV6 {
        ctx.load::<u8>(ICMPV6_OFFSET).ok()
    } else {
        None
    };
    let message = if icmp_type == Some(ND_SOLICITATION) {
        ctx.load::<NdMessage>(ICMPV6_OFFSET).ok()
    } else {
        None
    };
    if let Some(message) = message
        && message.kind == ND_SOLICITATION
        && message.code == 0
        && let Some(verdict) = advertise(ctx, &frame, &message, &request)?
    {
        return Ok(verdict);
    }
    if request.router == 0 {
        // A multicast solicitation nobody here answers: flooded as `from_pod` floods.
        return match flood::group_of(request.datapath, true) {
            Some(group) => Err(flood::request(
                ctx,
                &group.request(request.ingress_port, request.ifindex),
            )),
            None => Ok(PASS),
        };
    }
    if icmp_type.is_some_and(|kind| ND_TYPES.contains(&kind)) {
        return Err(drop_reason::ND_TO_ROUTER);
    }
    to_router(ctx, &frame, icmp_type, &request)
}

/// The switch's advertisement for a solicitation it answers, sent back to the solicitor; `None`
/// when it does not answer (unknown target, the owner asking, another destination).
#[inline(always)]
fn advertise(
    ctx: &TcContext,
    frame: &Ipv6Frame,
    solicitation: &NdMessage,
    request: &Ipv6Request,
) -> Result<Option<i32>, DropReason> {
    let key = Ipv6Key {
        datapath: request.datapath,
        ip: solicitation.target,
    };
    let Some(answer) = get(&ND_RESPONDER, key).copied() else {
        return Ok(None);
    };
    let target = solicitation.target;
    if answer.owner_port == request.ingress_port
        || (frame.ip.destination != target && frame.ip.destination != solicited_node(target))
    {
        return Ok(None);
    }
    // R (for a router's address: `nd_na_router`), S, O.
    let flags = if answer.flags & ARP_ANSWER_ROUTER != 0 {
        0xe0
    } else {
        0x60
    };
    let advertisement = nd_frame(
        EthHeader {
            destination: frame.eth.source,
            source: answer.mac,
            ether_type: ETH_P_IPV6.to_be(),
        },
        (target, frame.ip.source),
        (ND_ADVERTISEMENT, flags, target),
        // Target link-layer address.
        (2, answer.mac),
    );
    write(ctx, &advertisement)?;
    // Back through the solicitor's egress port security, as OVN's `outport = inport; output;`
    // goes (a pod whose port security lists IPv4 only receives no IPv6, this answer neither).
    if !crate::port_security::egress_allows(ctx, request.ifindex) {
        return Err(drop_reason::EGRESS_PORT_SECURITY);
    }
    Ok(Some(reply_to_sender(ctx, request.ifindex)))
}

/// IPv6 to router `request.router`'s MAC (see the module doc).
#[inline(always)]
fn to_router(
    ctx: &TcContext,
    frame: &Ipv6Frame,
    icmp_type: Option<u8>,
    request: &Ipv6Request,
) -> Result<i32, DropReason> {
    let router = request.router;
    let flags = get(&ROUTERS, router).map_or(0, |r| r.flags);
    if flags & ROUTER_FORWARDS == 0 || flags & ROUTER_IPV6_UNSUPPORTED != 0 {
        return Err(drop_reason::ROUTER_UNSUPPORTED);
    }
    let ip = frame.ip;
    if ip.destination[0] == 0xff {
        return Err(drop_reason::IPV6_TO_ROUTER);
    }
    let own = Ipv6Key {
        datapath: router,
        ip: ip.destination,
    };
    if let Some(address) = get(&ROUTER_ADDRESSES6, own) {
        return to_router_address(ctx, frame, (icmp_type, address.flags), request);
    }
    if ip.hop_limit <= 1 {
        // The router's time exceeded, composed by the reject stage.
        return Err(crate::reject::time_exceeded6_request(
            ctx,
            router,
            request.ifindex,
        ));
    }
    // Leaving the pod's switch for the router: where its to-lport ACLs may act on that, the
    // kernel has no stage to run them (fails closed, as for IPv4).
    if acl::unchecked(request.datapath, UNCHECKED_EGRESS) {
        return Err(drop_reason::ACL_FAIL_CLOSED);
    }
    if is_link_local(&ip.destination) && flags & ROUTER_IPV6_LINK_LOCAL == 0 {
        return Err(drop_reason::NO_ROUTE);
    }
    Err(crate::router6::request(ctx, request))
}

/// What the router does with a packet to its own address (whose `RouterAddress` flags are
/// `address_flags`): an echo request it answers is answered toward the sender; TCP, UDP and
/// other protocols it answers (reset, port or address unreachable) are handed to the reject
/// stage, which composes the answer ([`crate::reject::router_answer6`]); what it does not
/// answer is consumed (`to_router_unhandled`), as are ICMPv6 other than echo and packets behind
/// extension headers (the kernel does not read through them). The answer goes to the sender's
/// MAC from the router's neighbours; an unknown sender is solicited instead, as the routed
/// answer would be.
#[inline(always)]
fn to_router_address(
    ctx: &TcContext,
    frame: &Ipv6Frame,
    (icmp_type, address_flags): (Option<u8>, u32),
    request: &Ipv6Request,
) -> Result<i32, DropReason> {
    let ip = frame.ip;
    // None: an echo request; else the reject stage's answer (the ICMPv6 code, TCP's unused).
    let answer = match ip.next_header {
        IPPROTO_ICMPV6 => {
            let echo = icmp_type == Some(ECHO_REQUEST) && address_flags & ROUTER_ADDRESS_ECHO != 0;
            if !echo {
                return Err(drop_reason::TO_ROUTER_UNHANDLED);
            }
            None
        }
        IPPROTO_TCP if address_flags & ROUTER_ADDRESS_TCP_RESET != 0 => Some(0),
        IPPROTO_UDP if address_flags & ROUTER_ADDRESS_PORT_UNREACHABLE != 0 => Some(CODE_PORT),
        IPPROTO_TCP | IPPROTO_UDP => return Err(drop_reason::TO_ROUTER_UNHANDLED),
        header if EXTENSION_HEADERS.contains(&header) => {
            return Err(drop_reason::TO_ROUTER_UNHANDLED);
        }
        _ if address_flags & ROUTER_ADDRESS_PROTOCOL_UNREACHABLE != 0 => Some(CODE_ADDRESS),
        _ => return Err(drop_reason::TO_ROUTER_UNHANDLED),
    };
    let sender = Ipv6Key {
        datapath: request.router,
        ip: ip.source,
    };
    let Some(neighbour) = get(&NEIGHBOURS6, sender).copied() else {
        return solicit(ctx, &frame.eth, ip.source, request);
    };
    if let Some(code) = answer {
        return Err(crate::reject::router_answer6_request(
            ctx,
            request.ifindex,
            neighbour.mac,
            code,
        ));
    }
    echo_reply(ctx, frame, neighbour.mac, request.ifindex)
}

/// Answers an echo request to the router in place: addresses swapped, from the router port's
/// MAC the pod addressed to `sender_mac`, hop limit 254 (OVN sets 255, then routes the answer
/// back: `lr_in_ip_routing` decrements it), type 129; back out of the pod's veth.
#[inline(always)]
fn echo_reply(
    ctx: &TcContext,
    frame: &Ipv6Frame,
    sender_mac: [u8; 6],
    ifindex: u32,
) -> Result<i32, DropReason> {
    let Ok(echo) = ctx.load::<[u8; 4]>(ICMPV6_OFFSET) else {
        return Err(drop_reason::ROUTED_MALFORMED);
    };
    if echo[1] != 0 {
        return Err(drop_reason::TO_ROUTER_UNHANDLED);
    }
    let mut reply = *frame;
    reply.eth.destination = sender_mac;
    reply.eth.source = frame.eth.destination;
    reply.ip.source = frame.ip.destination;
    reply.ip.destination = frame.ip.source;
    reply.ip.hop_limit = 254;
    // Type 128 → 129 (the pseudo header's sum is unchanged by the swap): RFC 1624,
    // HC' = ~(~HC + ~m + m').
    let old = u32::from(u16::from_be_bytes([echo[2], echo[3]]));
    let sum = u32::from(!old as u16) + u32::from(!0x8000_u16) + 0x8100;
    let checksum = csum::fold(sum).to_be_bytes();
    let head = [129, 0, checksum[0], checksum[1]];
    ctx.store(0, &reply, 0)
        .and_then(|()| ctx.store(ICMPV6_OFFSET, &head, 0))
        .map_err(|_| drop_reason::ROUTER_REPLY_FAILED)?;
    count_reply(router_reply::ECHO_REPLY);
    Ok(reply_to_sender(ctx, ifindex))
}

/// Turns the packet into `router`'s solicitation for `next_hop`, from the router port whose
/// MAC the pod addressed (source: its link-local address, as pinctrl's `nd_ns` derives it from
/// `eth.src`), and floods it on the pod's switch (`_MC_flood_l2`). Routers without the stage
/// drop and count the packet (`next_hop_unresolved`).
#[inline(always)]
fn solicit(
    ctx: &TcContext,
    eth: &EthHeader,
    next_hop: [u8; 16],
    request: &Ipv6Request,
) -> Result<i32, DropReason> {
    let asks = get(&ROUTERS, request.router).is_some_and(|r| r.flags & ROUTER_ND_REQUESTS != 0);
    if !asks {
        return Err(drop_reason::NEXT_HOP_UNRESOLVED);
    }
    let Some(group) = flood::router_group(request.datapath) else {
        return Err(drop_reason::NEXT_HOP_UNRESOLVED);
    };
    let fib = FibKey {
        datapath: request.datapath,
        mac: eth.destination,
        padding: [0; 2],
    };
    let router_port = get(&L2_FIB, fib).map_or(0, |entry| entry.port);
    write_solicitation(ctx, eth.destination, next_hop)?;
    Err(flood::request(ctx, &group.request(router_port, 0)))
}

/// Makes the skb a router's neighbour solicitation for `next_hop` from its port with MAC
/// `router_mac` (from that port's link-local address, to the next hop's solicited-node group,
/// hop limit 255, a source link-layer option), and counts it.
#[inline(always)]
pub(crate) fn write_solicitation(
    ctx: &TcContext,
    router_mac: [u8; 6],
    next_hop: [u8; 16],
) -> Result<(), DropReason> {
    let group_address = solicited_node(next_hop);
    let solicitation = nd_frame(
        EthHeader {
            destination: [
                0x33,
                0x33,
                group_address[12],
                group_address[13],
                group_address[14],
                group_address[15],
            ],
            source: router_mac,
            ether_type: ETH_P_IPV6.to_be(),
        },
        (link_local(router_mac), group_address),
        (ND_SOLICITATION, 0, next_hop),
        // Source link-layer address.
        (1, router_mac),
    );
    write(ctx, &solicitation)?;
    count_reply(router_reply::ND_SOLICITATION);
    Ok(())
}

/// An ND frame: `eth`, IPv6 (`source`, `destination`) with hop limit 255, the ND message
/// (`kind`, first flags byte, target) and one link-layer option (`kind`, MAC), checksummed.
#[inline(always)]
fn nd_frame(
    eth: EthHeader,
    (source, destination): ([u8; 16], [u8; 16]),
    (kind, flags, target): (u8, u8, [u8; 16]),
    (option_kind, option_mac): (u8, [u8; 6]),
) -> NdFrame {
    let mut body = NdBody {
        message: NdMessage {
            kind,
            code: 0,
            checksum: 0,
            flags: [flags, 0, 0, 0],
            target,
        },
        option_kind,
        option_len: 1,
        option_mac,
    };
    // SAFETY: NdBody is 32 packed bytes, every one of them initialised.
    let bytes: [u8; 32] = unsafe { core::mem::transmute(body) };
    body.message.checksum = csum::icmpv6_32(&source, &destination, &bytes).to_be();
    NdFrame {
        frame: Ipv6Frame {
            eth,
            ip: Ipv6Header {
                version_class_flow: 0x6000_0000_u32.to_be(),
                payload_len: 32_u16.to_be(),
                next_header: IPPROTO_ICMPV6,
                hop_limit: 255,
                source,
                destination,
            },
        },
        body,
    }
}

/// Makes the skb exactly `frame`.
#[inline(always)]
fn write(ctx: &TcContext, frame: &NdFrame) -> Result<(), DropReason> {
    // SAFETY: the helper takes the skb pointer the context holds and plain integers.
    if unsafe { aya_ebpf::helpers::bpf_skb_change_tail(ctx.skb.skb, ND_FRAME_LEN, 0) } != 0 {
        return Err(drop_reason::ROUTER_REPLY_FAILED);
    }
    ctx.store(0, frame, 0)
        .map_err(|_| drop_reason::ROUTER_REPLY_FAILED)
}

/// `fe80::/64`, where northd's per-port routes send a packet back out of its inport.
#[inline(always)]
pub(crate) fn is_link_local(ip: &[u8; 16]) -> bool {
    ip[0] == 0xfe && ip[1] == 0x80 && ip[2..8] == [0; 6]
}
