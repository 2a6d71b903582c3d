//! Where frames leave a program: the verdicts, and the one local delivery every path uses to
//! hand a frame to a port on this node (unicast, routed and decapsulated frames; flood clones
//! count through [`crate::counters::count_delivered`] as they are cloned). The receiver-side
//! egress pipeline (egress port security, to-lport ACLs) belongs here. Touches
//! `INTERFACE_COUNTERS` (through the counters).

use aya_ebpf::{
    helpers::{bpf_redirect, bpf_redirect_peer},
    programs::TcContext,
};
use ovnbpf_common::LOCAL_PORT_VETH_PEER;

use crate::counters::count_delivered;

/// Verdict -1, "hand the frame on unchanged": `TC_ACT_UNSPEC` under the pods' cls_bpf filters
/// (the next filter, or the stack), `PASS` under the tcx links of the uplink and provider
/// NICs (the next program, or the stack). Traffic that is not ours always leaves this way.
pub(crate) const PASS: i32 = -1;
/// tc verdict "drop" (only [`crate::drop::drop_frame`] and the flood walk return it).
pub(crate) const TC_ACT_SHOT: i32 = 2;

/// Hands a frame to a port on this node and counts it there. `redirect_peer` enters the pod's
/// netns at once but gives frames to the IP stack, so non-IP frames (ARP) take the veth's egress
/// instead.
#[inline(always)]
pub(crate) fn deliver_local(ctx: &TcContext, ifindex: u32, flags: u32, ip: bool) -> i32 {
    count_delivered(ifindex, ctx.len());
    // SAFETY: the redirect helpers take plain integers and only set the skb's redirect target.
    let verdict = unsafe {
        if ip && flags & LOCAL_PORT_VETH_PEER != 0 {
            bpf_redirect_peer(ifindex, 0)
        } else {
            bpf_redirect(ifindex, 0)
        }
    };
    verdict as i32
}
