//! What a logical router does for frames a pod sends to its gateway's MAC, so far: an ICMP echo
//! request to one of the router's addresses on that switch is answered in place (MACs and
//! addresses swapped, TTL 255, type 0) and sent back out of the pod's veth, as OVN's
//! `lr_in_ip_input` does. Everything else goes on untouched (routing comes later). Reads
//! `ARP_RESPONDER`, whose router entries say which addresses the router owns and answers.

use aya_ebpf::{helpers::bpf_redirect, programs::TcContext};
use ovnbpf_common::{ARP_ANSWER_ECHO, ARP_ANSWER_ROUTER, ArpKey, drop_reason};

use crate::{
    ARP_RESPONDER, TCX_NEXT, count_delivered,
    headers::{ETH_HEADER_LEN, ETH_P_IPV4, Ipv4Frame},
};

const IPPROTO_ICMP: u8 = 1;
const ICMP_ECHO_REQUEST: u8 = 8;

/// The ICMP header's first four bytes.
#[repr(C, packed)]
#[derive(Clone, Copy)]
struct IcmpHead {
    kind: u8,
    code: u8,
    checksum: u16,
}

/// Handles a frame addressed to a router port's MAC on `datapath`, sent from host veth
/// `ifindex`: the verdict, or the drop reason.
#[inline(always)]
pub fn handle(ctx: &TcContext, datapath: u32, ifindex: u32) -> Result<i32, u32> {
    let Ok(frame) = ctx.load::<Ipv4Frame>(0) else {
        return Ok(TCX_NEXT);
    };
    let ip = frame.ip;
    if u16::from_be(frame.eth.ether_type) != ETH_P_IPV4
        || ip.version_ihl != 0x45
        || ip.protocol != IPPROTO_ICMP
        || u16::from_be(ip.fragment) & 0x3fff != 0
    {
        return Ok(TCX_NEXT);
    }
    let key = ArpKey {
        datapath,
        ip: ip.destination,
    };
    // SAFETY: a hash map lookup returns a pointer into the map that stays valid for the program.
    let Some(answer) = (unsafe { ARP_RESPONDER.get(key) }) else {
        return Ok(TCX_NEXT);
    };
    let wanted = ARP_ANSWER_ROUTER | ARP_ANSWER_ECHO;
    if answer.flags & wanted != wanted || answer.mac != frame.eth.destination {
        return Ok(TCX_NEXT);
    }
    let icmp_offset = ETH_HEADER_LEN + 20;
    let Ok(icmp) = ctx.load::<IcmpHead>(icmp_offset) else {
        return Ok(TCX_NEXT);
    };
    if icmp.kind != ICMP_ECHO_REQUEST || icmp.code != 0 {
        return Ok(TCX_NEXT);
    }
    let mut reply = frame;
    reply.eth.destination = frame.eth.source;
    reply.eth.source = answer.mac;
    reply.ip.source = ip.destination;
    reply.ip.destination = ip.source;
    reply.ip.ttl = 255;
    reply.ip.checksum = 0;
    reply.ip.checksum = ipv4_header_checksum(&reply.ip).to_be();
    // Type 8 → 0: the one's-complement sum drops by 0x0800 (RFC 1624: HC' = ~(~HC + ~m + m')).
    let old = u32::from(u16::from_be(icmp.checksum));
    let mut sum = u32::from(!old as u16) + u32::from(!0x0800_u16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    let icmp_reply = IcmpHead {
        kind: 0,
        code: 0,
        checksum: (!(sum as u16)).to_be(),
    };
    ctx.store(0, &reply, 0)
        .and_then(|()| ctx.store(icmp_offset, &icmp_reply, 0))
        .map_err(|_| drop_reason::ROUTER_REPLY_FAILED)?;
    count_delivered(ifindex, ctx.len());
    // Back out of the same veth: its egress is the pod's ingress.
    // SAFETY: the helper takes plain integers and only sets the skb's redirect target.
    Ok(unsafe { bpf_redirect(ifindex, 0) } as i32)
}

/// The checksum of a 20-byte IPv4 header whose checksum field is zero.
#[inline(always)]
fn ipv4_header_checksum(header: &crate::headers::Ipv4Header) -> u16 {
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
    let mut sum: u32 = words.iter().sum();
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}
