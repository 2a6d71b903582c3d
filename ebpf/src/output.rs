//! Where frames leave a program: the verdicts, the L2 output step switched and routed frames
//! share ([`output`], [`l2_output`]: a port on this node, or the tunnel to the chassis that has
//! it), and the
//! local delivery of every path: [`reply_to_sender`] for what a stage answered in place,
//! [`deliver_to_port`] for unicast, routed and decapsulated frames
//! (the receiver-side egress pipeline first: to-lport ACLs, then egress port security),
//! [`deliver_local`] for a flood's last copy, [`clone_to_local`] for the other flood copies
//! (multicast, which egress port security lets through; unknown-unicast floods reach only ports
//! with unknown addresses, which carry no port security). Touches `INTERFACE_COUNTERS` (through
//! the counters) and reads `PORT_SECURITY`.

use aya_ebpf::{
    helpers::{bpf_redirect, bpf_redirect_peer},
    programs::TcContext,
};
use ovnbpf_common::{
    DropReason, FIB_LOCAL, FIB_REMOTE, FibEntry, LOCAL_PORT_ACL, LOCAL_PORT_EGRESS_SECURITY,
    LOCAL_PORT_VETH_PEER, drop_reason,
};

use crate::{
    acl,
    counters::count_delivered,
    geneve::{self, Tunnel},
    lb, port_security,
};

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

/// Sends a frame the datapath answered in place (ARP reply, echo reply, ICMP error, TCP reset)
/// back to the sender behind host veth `ifindex`: out of the veth's egress, which is the pod's
/// ingress, whatever the protocol; counted as delivered there.
#[inline(always)]
pub(crate) fn reply_to_sender(ctx: &TcContext, ifindex: u32) -> i32 {
    deliver_local(ctx, ifindex, 0, false)
}

/// The logical ports a delivery is between: (switch, ingress key << 16 | egress key), which the
/// egress ACL stage matches on (ingress key 0: unknown, as from a provider network).
#[derive(Clone, Copy)]
pub(crate) struct Between {
    pub datapath: u32,
    pub ports: u32,
}

/// Hands a frame to the port behind host interface `ifindex` (flags as in
/// [`ovnbpf_common::LocalPort`]) after the egress pipeline OVN runs for it: IP to a port whose
/// switch has to-lport ACLs goes through the egress ACL stage first (tail-called), then egress
/// port security ([`deliver_after_acl`]).
#[inline(always)]
pub(crate) fn deliver_to_port(
    ctx: &TcContext,
    ifindex: u32,
    flags: u32,
    ip: bool,
    between: Between,
) -> Result<i32, DropReason> {
    if ip && flags & LOCAL_PORT_ACL != 0 {
        let request = acl::egress_request(between.datapath, between.ports, ifindex, flags);
        return Err(acl::request(ctx, acl::EGRESS_SLOT, &request));
    }
    deliver_after_acl(ctx, ifindex, flags, ip, between)
}

/// The delivery after the egress ACL stage: a balanced connection's reply gets its VIP back
/// (where the port's switch has load balancers, `LB_SWITCHES`; an ICMP error goes through the
/// load-balancer stage for that, which then delivers it), egress port security, then the port.
#[inline(always)]
pub(crate) fn deliver_after_acl(
    ctx: &TcContext,
    ifindex: u32,
    flags: u32,
    ip: bool,
    between: Between,
) -> Result<i32, DropReason> {
    if ip
        && lb::balances(between.datapath)
        && lb::reverse(ctx, between.datapath, between.ports & 0xffff)?
    {
        return Err(lb::icmp_error_request(ctx, between, ifindex, flags));
    }
    deliver_after_lb(ctx, ifindex, flags, ip)
}

/// The delivery after the load balancers' reverse translation: egress port security, then the
/// port.
#[inline(always)]
pub(crate) fn deliver_after_lb(
    ctx: &TcContext,
    ifindex: u32,
    flags: u32,
    ip: bool,
) -> Result<i32, DropReason> {
    if flags & LOCAL_PORT_EGRESS_SECURITY != 0 && !port_security::egress_allows(ctx, ifindex) {
        return Err(drop_reason::EGRESS_PORT_SECURITY);
    }
    Ok(deliver_local(ctx, ifindex, flags, ip))
}

/// The L2 output step (OVN's local and remote output tables) for a frame on `datapath` that
/// entered through logical port `ingress_port`, to the port `entry` names: delivered here, or
/// encapsulated to the chassis that has it. `None` when `entry` is not a port (a router), or is
/// remote while this node has no tunnel endpoint: the caller decides.
#[inline(always)]
pub(crate) fn l2_output(
    ctx: &TcContext,
    entry: &FibEntry,
    datapath: u32,
    ingress_port: u32,
    ip: bool,
) -> Option<Result<i32, DropReason>> {
    match entry.kind {
        FIB_LOCAL => Some(deliver_to_port(
            ctx,
            entry.ifindex,
            entry.flags,
            ip,
            Between {
                datapath,
                ports: ingress_port << 16 | entry.port,
            },
        )),
        FIB_REMOTE => {
            let config = geneve::tunnel_config()?;
            let tunnel = Tunnel {
                datapath,
                ingress_port,
                egress_port: entry.port,
                remote_ip: entry.remote_ip,
            };
            Some(geneve::encapsulate(ctx, config, &tunnel))
        }
        _ => None,
    }
}

/// An L2 output to make ([`l2_output`]): to `entry`'s port, on `datapath`, entered through
/// logical port `ingress_port`.
pub struct Output {
    pub entry: FibEntry,
    pub datapath: u32,
    pub ingress_port: u32,
    /// The frame is IP (delivered into the pod's netns directly).
    pub ip: bool,
    /// Routed here: an entry that cannot be output is a drop, not a frame to pass on.
    pub routed: bool,
}

/// Makes `output` ([`l2_output`]); what cannot be output is passed on if switched, dropped if
/// routed.
#[inline(always)]
pub(crate) fn output(ctx: &TcContext, output: &Output) -> Result<i32, DropReason> {
    let sent = l2_output(
        ctx,
        &output.entry,
        output.datapath,
        output.ingress_port,
        output.ip,
    );
    match sent {
        Some(result) => result,
        None if !output.routed => Ok(PASS),
        None if output.entry.kind == FIB_REMOTE => Err(drop_reason::ENCAP_FAILED),
        None => Err(drop_reason::ROUTED_UNKNOWN_DESTINATION),
    }
}

/// A copy of the frame for the port behind host interface `ifindex` (a flood group member), out of
/// the interface's egress so the pod receives it whatever its protocol, counted there. Returns
/// whether the copy went (the caller counts a failure under its reason).
#[inline(always)]
pub(crate) fn clone_to_local(ctx: &TcContext, ifindex: u32) -> bool {
    let sent = ctx.clone_redirect(ifindex, 0).is_ok();
    if sent {
        count_delivered(ifindex, ctx.len());
    }
    sent
}
