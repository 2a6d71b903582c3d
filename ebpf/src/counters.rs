//! Per-interface and per-kind counters: every frame a program sees is counted on its interface
//! by what the parser found ([`classify`]), frames sent into an interface are counted there, and
//! routers' answers by kind. Touches `INTERFACE_COUNTERS` and `ROUTER_REPLIES`, and the
//! per-kind counter arrays other stages name ([`bump`]).

use aya_ebpf::{maps::PerCpuArray, programs::TcContext};
use ovnbpf_common::InterfaceCounters;

use crate::{
    headers::{ETH_HEADER_LEN, ETH_P_IPV4, EthHeader, Ipv4Header},
    maps::{INTERFACE_COUNTERS, ROUTER_REPLIES},
};

/// What the parser found in a frame; selects the counter to increment.
pub(crate) enum FrameClass {
    Ipv4,
    Other,
    Malformed,
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

/// Counts an answer a router sent (a [`router_reply`] kind).
#[inline(always)]
pub(crate) fn count_reply(kind: u32) {
    bump(&ROUTER_REPLIES, kind);
}

/// Adds one to slot `index` of the per-CPU counter array `counters` (an index out of range
/// counts nothing).
#[inline(always)]
pub(crate) fn bump(counters: &'static PerCpuArray<u64>, index: u32) {
    if let Some(counter) = counters.get_ptr_mut(index) {
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
pub(crate) fn classify(ctx: &TcContext) -> FrameClass {
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
pub(crate) fn count(ctx: &TcContext, class: FrameClass) {
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
pub(crate) fn interface_counters(ifindex: u32) -> Option<*mut InterfaceCounters> {
    if let Some(counters) = INTERFACE_COUNTERS.get_ptr_mut(ifindex) {
        return Some(counters);
    }
    let _ = INTERFACE_COUNTERS.insert(ifindex, InterfaceCounters::default(), 1);
    INTERFACE_COUNTERS.get_ptr_mut(ifindex)
}
