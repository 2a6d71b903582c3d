//! Router advertisements: a pod's router solicitation on a switch whose router port advertises
//! (OVN's `lr_in_nd_ra_options` flow with `put_nd_ra_opts`, then `lr_in_nd_ra_response`) is
//! answered with that port's advertisement, back out of the pod's veth. `from_pod` asks
//! [`wants`] (an ICMPv6 router solicitation, code 0, hop limit 255, to `ff02::2`, without
//! extension headers, on a switch in `ROUTER_ADVERTS`) and hands the frame to the reject stage
//! ([`request`]: the IPv6 stage's stack is full), whose program runs [`answer`].
//!
//! The answer is the solicitation's Ethernet and IPv6 headers, as ovn-controller keeps them
//! (traffic class, flow label, hop limit 255), from the port's MAC and link-local address to
//! the solicitor (to `ff02::1` where it sent from `::`, as OVN 23.03.3 on: 23.03.1 kept `::`),
//! with the message the agent encoded from the flow (`RouterAdvert`). Its checksum is the
//! agent's partial sum plus the destination's words. Through the pod's egress port security,
//! as OVN's `outport = inport; output;` goes.
//!
//! Unlike OVN, the answered solicitation is not also flooded to the switch's other ports: hosts
//! discard router solicitations (RFC 4861, 6.2.6), and the frame becomes the answer. Reads
//! `ROUTER_ADVERTS`; counts `router_replies{kind="router_advertisement"}`.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::{
    DropReason, ROUTER_ADVERT_MAX, ROUTER_ADVERT_REQUEST_MAGIC, drop_reason, ipv6::link_local,
    router_reply, stage as slot,
};

use crate::maps::get;
use crate::output::reply_to_sender;
use crate::{
    ROUTER_ADVERTS, count_reply, csum,
    headers::{ETH_HEADER_LEN, EthHeader, IPPROTO_ICMPV6, Ipv6Frame, Ipv6Header},
    stages,
};

/// ICMPv6 router solicitation.
const ROUTER_SOLICITATION: u8 = 133;
/// Offset of the ICMPv6 header in a frame without extension headers.
const ICMPV6_OFFSET: usize = ETH_HEADER_LEN + 40;
/// `ff02::2`, all routers: where solicitations go.
const ALL_ROUTERS: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
/// `ff02::1`, all nodes: where the answer to a solicitation from `::` goes.
const ALL_NODES: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// Whether the IPv6 frame is a router solicitation that switch `datapath`'s router port
/// answers (see the module doc).
#[inline(always)]
pub fn wants(ctx: &TcContext, datapath: u32) -> bool {
    let Ok(head) = ctx.load::<[u8; 2]>(ETH_HEADER_LEN + 6) else {
        return false;
    };
    let Ok(icmp) = ctx.load::<[u8; 2]>(ICMPV6_OFFSET) else {
        return false;
    };
    head == [IPPROTO_ICMPV6, 255]
        && icmp == [ROUTER_SOLICITATION, 0]
        && ctx
            .load::<[u8; 16]>(ETH_HEADER_LEN + 24)
            .is_ok_and(|destination| destination == ALL_ROUTERS)
        && get(&ROUTER_ADVERTS, datapath).is_some()
}

/// Hands the solicitation from host interface `ifindex` on switch `datapath` to the reject
/// stage (a tail call: on success this never returns). Returns the reason to drop the frame
/// when the stage is not there.
#[inline(always)]
pub fn request(ctx: &TcContext, datapath: u32, ifindex: u32) -> DropReason {
    stages::jump(
        ctx,
        slot::ACL_REJECT,
        [datapath, ifindex, 0, 0, ROUTER_ADVERT_REQUEST_MAGIC],
    )
}

/// Makes the solicitation the switch's router advertisement and sends it back to the solicitor
/// (see the module doc).
#[inline(always)]
pub fn answer(ctx: &TcContext) -> Result<i32, DropReason> {
    let failed = drop_reason::ROUTER_REPLY_FAILED;
    let [datapath, ifindex, ..] = stages::take(ctx, ROUTER_ADVERT_REQUEST_MAGIC)?;
    // The advertisement went since `from_pod` found it: the router no longer answers.
    let advert = ROUTER_ADVERTS
        .get_ptr(datapath)
        .ok_or(drop_reason::ND_TO_ROUTER)?;
    // SAFETY: a map value the lookup just returned; the agent replaces it whole.
    let (mac, length, partial_sum) =
        unsafe { ((*advert).mac, (*advert).length, (*advert).partial_sum) };
    let length = u32::from(length);
    if length == 0 || length > ROUTER_ADVERT_MAX as u32 {
        return Err(failed);
    }
    let solicitation = ctx.load::<Ipv6Frame>(0).map_err(|_| failed)?;
    let destination = if solicitation.ip.source == [0; 16] {
        ALL_NODES
    } else {
        solicitation.ip.source
    };
    let header = Ipv6Frame {
        eth: EthHeader {
            destination: solicitation.eth.source,
            source: mac,
            ether_type: solicitation.eth.ether_type,
        },
        ip: Ipv6Header {
            version_class_flow: solicitation.ip.version_class_flow,
            payload_len: (length as u16).to_be(),
            next_header: IPPROTO_ICMPV6,
            hop_limit: solicitation.ip.hop_limit,
            source: link_local(mac),
            destination,
        },
    };
    let checksum = csum::fold(partial_sum + csum::word_sum(&destination)).to_be_bytes();
    // SAFETY: the helper takes the skb pointer the context holds and plain integers.
    let resized = unsafe {
        aya_ebpf::helpers::bpf_skb_change_tail(ctx.skb.skb, ICMPV6_OFFSET as u32 + length, 0)
    };
    if resized != 0 {
        return Err(failed);
    }
    ctx.store(0, &header, 0).map_err(|_| failed)?;
    // SAFETY: `advert` points at a map value of ROUTER_ADVERT_MAX message bytes, and `length`
    // is at most that (checked above); the helper copies them into the skb, which is that long.
    let stored = unsafe {
        aya_ebpf::helpers::bpf_skb_store_bytes(
            ctx.skb.skb,
            ICMPV6_OFFSET as u32,
            (*advert).message.as_ptr().cast(),
            length,
            0,
        )
    };
    if stored != 0 {
        return Err(failed);
    }
    ctx.store(ICMPV6_OFFSET + 2, &checksum, 0)
        .map_err(|_| failed)?;
    if !crate::port_security::egress_allows(ctx, ifindex) {
        return Err(drop_reason::EGRESS_PORT_SECURITY);
    }
    count_reply(router_reply::ROUTER_ADVERTISEMENT);
    Ok(reply_to_sender(ctx, ifindex))
}

/// The `acl_reject` program's verdict on a router solicitation ([`answer`]); see
/// [`crate::reject::acl_verdict`].
#[inline(never)]
pub fn verdict(ctx: &TcContext) -> i32 {
    match answer(ctx) {
        Ok(verdict) => verdict,
        Err(reason) => crate::drop::drop_frame(ctx, reason),
    }
}
