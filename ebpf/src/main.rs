//! ovnbpf kernel programs: tcx classifiers built for `bpfel-unknown-none` and embedded in the agent.
//!
//! `from_pod` runs on tcx ingress of each pod's host-side veth, `from_uplink` on tcx ingress of the
//! node's uplink. Both parse Ethernet/IPv4 and count into the per-CPU `INTERFACE_COUNTERS` map.
//! `from_uplink` decapsulates OVN Geneve frames addressed to this node ([`geneve`]) and delivers
//! them to local ports; everything else, and everything `from_pod` sees for now, goes on
//! unchanged (`TCX_NEXT`): traffic that is not theirs is never dropped or altered. Map and
//! program names come from `ovnbpf-common`.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

mod arp;
mod flood;
mod geneve;
mod headers;
mod maps;
mod port_security;
mod reject;
mod router;
mod switching;
mod underlay;

use aya_ebpf::helpers::{bpf_redirect, bpf_redirect_peer};
use aya_ebpf::{macros::classifier, programs::TcContext};
use ovnbpf_common::{DROP_EVENT_HEADER, DropEvent, InterfaceCounters, LOCAL_PORT_VETH_PEER};

pub(crate) use maps::*;

use headers::{ETH_HEADER_LEN, ETH_P_IPV4, EthHeader, Ipv4Header};

/// tcx verdict "continue with the next program, or the stack if none": the programs only observe.
pub(crate) const TCX_NEXT: i32 = -1;
/// tc verdict "drop".
pub(crate) const TC_ACT_SHOT: i32 = 2;

/// What the parser found in a frame; selects the counter to increment.
enum FrameClass {
    Ipv4,
    Other,
    Malformed,
}

#[classifier]
pub fn from_pod(ctx: TcContext) -> i32 {
    let class = classify(&ctx);
    count(&ctx, class);
    match switching::forward(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => drop_frame(&ctx, reason),
    }
}

/// Hands a frame to a port on this node and counts it there. `redirect_peer` enters the pod's
/// netns at once but gives frames to the IP stack, so non-IP frames (ARP) take the veth's egress
/// instead.
#[inline(always)]
fn deliver_local(ctx: &TcContext, ifindex: u32, flags: u32, ip: bool) -> i32 {
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

#[classifier]
pub fn from_uplink(ctx: TcContext) -> i32 {
    let class = classify(&ctx);
    count(&ctx, class);
    match geneve::decapsulate(&ctx) {
        geneve::Decision::NotOurs => TCX_NEXT,
        geneve::Decision::Drop(reason) => drop_frame(&ctx, reason),
        geneve::Decision::Redirected(verdict) => verdict,
    }
}

/// Drops the frame: counted by reason and on its interface, and reported on the ring buffer
/// with its first bytes (when the buffer has room; the counters always count).
#[inline(always)]
fn drop_frame(ctx: &TcContext, reason: u32) -> i32 {
    count_drop(reason);
    // SAFETY: reading ifindex from the skb context is always allowed for tc programs.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    if let Some(counters) = interface_counters(ifindex) {
        // SAFETY: a per-CPU slot from a successful lookup (see `count`).
        unsafe { (*counters).dropped += 1 };
    }
    if let Some(mut entry) = DROP_EVENTS.reserve::<DropEvent>(0) {
        let (captured, header) = match ctx.load::<[u8; DROP_EVENT_HEADER]>(0) {
            Ok(header) => (DROP_EVENT_HEADER as u32, header),
            Err(_) => match ctx.load::<[u8; 14]>(0) {
                Ok(start) => {
                    let mut header = [0_u8; DROP_EVENT_HEADER];
                    header[..14].copy_from_slice(&start);
                    (14, header)
                }
                Err(_) => (0, [0_u8; DROP_EVENT_HEADER]),
            },
        };
        entry.write(DropEvent {
            reason,
            ifindex,
            length: ctx.len(),
            captured,
            header,
        });
        entry.submit(0);
    }
    TC_ACT_SHOT
}

/// Counts a frame sent into interface `ifindex`, once the interface has an entry (its first
/// frame out creates it; a lookup alone keeps the flood loop cheap to verify).
#[inline(always)]
pub(crate) fn count_delivered(ifindex: u32, length: u32) {
    if let Some(counters) = INTERFACE_COUNTERS.get_ptr_mut(ifindex) {
        // SAFETY: a per-CPU slot from a successful lookup (see `count`).
        unsafe {
            (*counters).delivered_packets += 1;
            (*counters).delivered_bytes += u64::from(length);
        }
    }
}

#[classifier]
pub fn from_provider(ctx: TcContext) -> i32 {
    let class = classify(&ctx);
    count(&ctx, class);
    underlay::from_provider(&ctx)
}

/// Counts an answer a router sent (a [`router_reply`] kind).
#[inline(always)]
pub(crate) fn count_reply(kind: u32) {
    if let Some(counter) = ROUTER_REPLIES.get_ptr_mut(kind) {
        // SAFETY: a per-CPU array slot: only this CPU writes it while the program runs.
        unsafe { *counter += 1 };
    }
}

#[inline(always)]
pub(crate) fn count_drop(reason: u32) {
    if let Some(counter) = DROP_COUNTERS.get_ptr_mut(reason) {
        // SAFETY: a per-CPU array slot: only this CPU writes it while the program runs.
        unsafe { *counter += 1 };
    }
}

/// Returns a bounds-checked pointer to a `T` at `offset` in the linear packet data, pulling
/// non-linear data in when the packet is long enough but its head is short.
#[inline(always)]
fn header<T>(ctx: &TcContext, offset: usize) -> Option<*const T> {
    let needed = offset + core::mem::size_of::<T>();
    if ctx.data() + needed > ctx.data_end()
        && ((ctx.len() as usize) < needed || ctx.pull_data(needed as u32).is_err())
    {
        return None;
    }
    let start = ctx.data();
    if start + needed > ctx.data_end() {
        return None;
    }
    Some((start + offset) as *const T)
}

#[inline(always)]
fn classify(ctx: &TcContext) -> FrameClass {
    let Some(eth) = header::<EthHeader>(ctx, 0) else {
        return FrameClass::Malformed;
    };
    // SAFETY: `header` checked that the Ethernet header lies inside the packet.
    let ether_type = u16::from_be(unsafe { (*eth).ether_type });
    if ether_type != ETH_P_IPV4 {
        return FrameClass::Other;
    }
    let Some(ip) = header::<Ipv4Header>(ctx, ETH_HEADER_LEN) else {
        return FrameClass::Malformed;
    };
    // SAFETY: `header` checked that the fixed IPv4 header lies inside the packet.
    let (version_ihl, total_len) = unsafe { ((*ip).version_ihl, u16::from_be((*ip).total_len)) };
    let header_len = usize::from(version_ihl & 0x0f) * 4;
    let ip_len = ctx.len() as usize - ETH_HEADER_LEN;
    if version_ihl >> 4 != 4 || header_len < 20 || usize::from(total_len) < header_len {
        return FrameClass::Malformed;
    }
    if usize::from(total_len) > ip_len {
        return FrameClass::Malformed;
    }
    FrameClass::Ipv4
}

#[inline(always)]
fn count(ctx: &TcContext, class: FrameClass) {
    // SAFETY: reading ifindex from the skb context is always allowed for tc programs.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let Some(counters) = interface_counters(ifindex) else {
        return;
    };
    // SAFETY: the pointer comes from a successful lookup in a per-CPU map, so no other CPU writes
    // this slot and it stays valid for the rest of the program.
    unsafe {
        (*counters).packets += 1;
        (*counters).bytes += u64::from(ctx.len());
        match class {
            FrameClass::Ipv4 => (*counters).ipv4 += 1,
            FrameClass::Other => (*counters).other += 1,
            FrameClass::Malformed => (*counters).malformed += 1,
        }
    }
}

/// This CPU's counters of interface `ifindex`, created on first use. A concurrent insert by
/// another CPU is harmless (BPF_NOEXIST fails, the lookup after it finds the entry).
#[inline(always)]
fn interface_counters(ifindex: u32) -> Option<*mut InterfaceCounters> {
    if let Some(counters) = INTERFACE_COUNTERS.get_ptr_mut(ifindex) {
        return Some(counters);
    }
    let _ = INTERFACE_COUNTERS.insert(ifindex, InterfaceCounters::default(), 1);
    INTERFACE_COUNTERS.get_ptr_mut(ifindex)
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
