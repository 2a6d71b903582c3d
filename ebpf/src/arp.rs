//! The switch's ARP responder for frames leaving a pod: a request for an address the datapath
//! knows (a pod's or a router port's) is answered in place and sent back out of the pod's veth,
//! as OVN's `ls_in_arp_rsp` stage does, unless the request comes from the address's own port.
//! Reads `ARP_RESPONDER`.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::{ArpAnswer, ArpKey};

use crate::maps::get;
use crate::{ARP_RESPONDER, headers::ArpFrame, output::reply_to_sender};

/// The verdict if the frame was an ARP request this responder answered.
#[inline(always)]
pub fn respond(ctx: &TcContext, datapath: u32, inport: u32, ifindex: u32) -> Option<i32> {
    answer_in_place(ctx, datapath, |answer| answer.owner_port != inport)?;
    Some(reply_to_sender(ctx, ifindex))
}

/// Turns the frame, if it is an ARP request for an address switch `datapath`'s responder has
/// an answer for that `accepts`, into that answer, in place (to be sent back where the request
/// came from).
#[inline(always)]
pub fn answer_in_place(
    ctx: &TcContext,
    datapath: u32,
    accepts: impl Fn(&ArpAnswer) -> bool,
) -> Option<()> {
    let request = ctx.load::<ArpFrame>(0).ok()?;
    if !request.is_ipv4_over_ethernet() || u16::from_be(request.operation) != 1 {
        return None;
    }
    let key = ArpKey {
        datapath,
        ip: u32::from_ne_bytes(request.target_ip),
    };
    let answer = get(&ARP_RESPONDER, key)?;
    if !accepts(answer) {
        return None;
    }
    let mut reply = request;
    reply.eth.destination = request.eth.source;
    reply.eth.source = answer.mac;
    reply.operation = 2_u16.to_be();
    reply.sender_mac = answer.mac;
    reply.sender_ip = request.target_ip;
    reply.target_mac = request.sender_mac;
    reply.target_ip = request.sender_ip;
    ctx.store(0, &reply, 0).ok()
}
