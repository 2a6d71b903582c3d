//! ovnbpf kernel programs, built for `bpfel-unknown-none` and embedded in the agent: the entry
//! points only, each counting the frame and handing it to its first stage.
//!
//! `from_pod` runs as a cls_bpf filter (direct action) on ingress of each pod's host-side veth and
//! runs the pod's logical switch pipeline ([`switching`]: port security, ARP responder, L2 FIB,
//! flood groups, routers, underlay). `from_uplink` runs on a tcx link on ingress of the node's
//! uplink and decapsulates OVN Geneve frames addressed to this node ([`overlay`]); `from_provider`
//! on a tcx link on ingress of a provider NIC takes underlay VLAN traffic for local pods
//! ([`underlay`]); `from_segmenter` on a tcx link on ingress of the segmenter's receiving end
//! checksums encapsulated segments and sends them out of the uplink ([`encap_checksum`]).
//! `flood`, `ipv6` and `router` are later stages of `from_pod`, tail-called
//! through the `STAGES` program array ([`flood`], [`ipv6`], [`router`]). `sock_connect4`,
//! `sock_sendmsg4`, `sock_recvmsg4`, `sock_getpeername4` and `sock_release` are cgroup hooks, the socket-level
//! balancer ([`socket_lb`]). Traffic that is not theirs leaves unchanged
//! ([`output::PASS`]). Maps are declared in `ovnbpf_common::maps` ([`maps`]); drops go through
//! [`drop`], local delivery through [`output`].
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

mod acl;
mod arp;
mod conntrack;
mod counters;
mod csum;
mod drop;
mod encap_checksum;
mod flood;
mod gateway;
mod geneve;
mod headers;
mod ipv6;
mod lb;
mod maps;
mod nat;
mod neighbour_learning;
mod output;
mod overlay;
mod port_security;
mod reject;
mod router;
mod router6;
mod router_advert;
mod snat;
mod socket_lb;
mod stages;
mod switching;
mod underlay;

use aya_ebpf::{
    macros::{cgroup_sock, cgroup_sock_addr, classifier},
    programs::{SockAddrContext, SockContext, TcContext},
};

pub(crate) use counters::count_reply;
use counters::{classify, count};
pub(crate) use drop::count_drop;
use drop::drop_frame;
pub(crate) use maps::*;
pub(crate) use output::{PASS, TC_ACT_SHOT, deliver_local};

#[classifier]
pub fn from_pod(ctx: TcContext) -> i32 {
    let class = classify(&ctx);
    count(&ctx, class);
    match switching::forward(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(&ctx, reason),
    }
}

#[classifier]
pub fn from_uplink(ctx: TcContext) -> i32 {
    let class = classify(&ctx);
    count(&ctx, class);
    match overlay::decapsulate(&ctx) {
        overlay::Decision::NotOurs => PASS,
        overlay::Decision::Drop(reason) => drop_frame(&ctx, reason),
        overlay::Decision::Redirected(verdict) => verdict,
    }
}

#[classifier]
pub fn from_provider(ctx: TcContext) -> i32 {
    let class = classify(&ctx);
    count(&ctx, class);
    underlay::from_provider(&ctx)
}

/// Encapsulated segments from the node's segmenter (see [`encap_checksum`]): checksummed and
/// sent out of the uplink.
#[classifier]
pub fn from_segmenter(ctx: TcContext) -> i32 {
    let class = classify(&ctx);
    count(&ctx, class);
    match encap_checksum::from_segmenter(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(&ctx, reason),
    }
}

/// The flood stage, tail-called from `from_pod` (see [`flood`]); attached to no interface.
#[classifier]
pub fn flood(ctx: TcContext) -> i32 {
    match flood::stage(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(&ctx, reason),
    }
}

/// The IPv6 stage, tail-called from `from_pod` (see [`ipv6`]); attached to no interface.
#[classifier]
pub fn ipv6(ctx: TcContext) -> i32 {
    match ipv6::stage(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(&ctx, reason),
    }
}

/// The ingress ACL stage, tail-called from `from_pod` (see [`acl`]); attached to no interface.
#[classifier]
pub fn acl_ingress(ctx: TcContext) -> i32 {
    match acl::ingress_stage(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(&ctx, acl::answered(&ctx, reason, 0)),
    }
}

/// The after-LB half of the ingress ACL stage, tail-called from `acl_ingress` (see [`acl`]);
/// attached to no interface.
#[classifier]
pub fn acl_after_lb(ctx: TcContext) -> i32 {
    match acl::after_lb_stage(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(&ctx, acl::answered(&ctx, reason, 0)),
    }
}

/// The egress ACL stage, tail-called by the deliveries to ports whose switch has to-lport ACLs
/// (see [`acl`]); attached to no interface.
#[classifier]
pub fn acl_egress(ctx: TcContext) -> i32 {
    match acl::egress_stage(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(
            &ctx,
            acl::answered(&ctx, reason, ovnbpf_common::stage::REJECT_FROM_EGRESS),
        ),
    }
}

/// The reject stage, tail-called by the ACL stages for what a `reject` ACL refused (see
/// [`reject::acl_stage`]), and by the IPv6 stage for IPv6 whose hop limit ran out at a router
/// (see [`reject::time_exceeded6`]) and IPv6 for a router's address that it answers (see
/// [`reject::router_answer6`]), and by `from_pod` for router solicitations a switch's router
/// port answers (see [`router_advert`]); attached to no interface.
#[classifier]
pub fn acl_reject(ctx: TcContext) -> i32 {
    match stages::magic(&ctx) {
        ovnbpf_common::TIME_EXCEEDED6_REQUEST_MAGIC => reject::time_exceeded6_verdict(&ctx),
        ovnbpf_common::ROUTER_ANSWER6_REQUEST_MAGIC => reject::router_answer6_verdict(&ctx),
        ovnbpf_common::ROUTER_ADVERT_REQUEST_MAGIC => router_advert::verdict(&ctx),
        _ => reject::acl_verdict(&ctx),
    }
}

/// The load-balancer stage, tail-called from `from_pod` for packets to a VIP (see [`lb`]);
/// attached to no interface. A VIP without backends whose balancer rejects is answered by the
/// reject stage, as an ACL's reject.
#[classifier]
pub fn lb(ctx: TcContext) -> i32 {
    match lb::stage(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(&ctx, acl::answered(&ctx, reason, 0)),
    }
}

/// The IPv6 routing stage, tail-called from the IPv6 stage (see [`router6`]); attached to no
/// interface.
#[classifier]
pub fn route6(ctx: TcContext) -> i32 {
    match router6::stage(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(&ctx, reason),
    }
}

/// The active gateway chassis's NAT stage, tail-called by the router stage, `from_uplink` and
/// `from_provider` (see [`snat`]); attached to no interface.
#[classifier]
pub fn gateway_nat(ctx: TcContext) -> i32 {
    match snat::stage(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(&ctx, reason),
    }
}

/// The router stage, tail-called from `from_pod` (see [`router`]); attached to no interface.
#[classifier]
pub fn router(ctx: TcContext) -> i32 {
    match router::stage(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(&ctx, reason),
    }
}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: eBPF programs cannot panic at run time; the verifier rejects unreachable code paths
    // that would lead here, so this is never executed.
    unsafe { core::hint::unreachable_unchecked() }
}

#[cfg(not(target_arch = "bpf"))]
fn main() {
    eprintln!("ovnbpf-ebpf holds kernel programs; the agent embeds them (built by aya-build)");
    std::process::exit(2);
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

#[cgroup_sock_addr(connect4)]
pub fn sock_connect4(ctx: SockAddrContext) -> i32 {
    socket_lb::redirect(&ctx, ovnbpf_common::lb::socket_counter::CONNECT);
    socket_lb::ALLOW
}

#[cgroup_sock_addr(sendmsg4)]
pub fn sock_sendmsg4(ctx: SockAddrContext) -> i32 {
    socket_lb::redirect(&ctx, ovnbpf_common::lb::socket_counter::SENDMSG);
    socket_lb::ALLOW
}

#[cgroup_sock_addr(recvmsg4)]
pub fn sock_recvmsg4(ctx: SockAddrContext) -> i32 {
    socket_lb::reverse(&ctx);
    socket_lb::ALLOW
}

#[cgroup_sock_addr(getpeername4)]
pub fn sock_getpeername4(ctx: SockAddrContext) -> i32 {
    socket_lb::reverse(&ctx);
    socket_lb::ALLOW
}

#[cgroup_sock(sock_release)]
pub fn sock_release(ctx: SockContext) -> i32 {
    socket_lb::forget(&ctx);
    socket_lb::ALLOW
}
