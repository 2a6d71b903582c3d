//! The drop path: a dropped frame is counted by [`DropReason`] and on its interface, and reported
//! on the `DROP_EVENTS` ring buffer with its first bytes. Every program drops only through
//! [`drop_frame`]. Touches `DROP_COUNTERS`, `DROP_EVENTS` and `INTERFACE_COUNTERS`.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::{DROP_EVENT_HEADER, DropEvent, DropReason};

use crate::{
    counters::interface_counters,
    maps::{DROP_COUNTERS, DROP_EVENTS},
    output::TC_ACT_SHOT,
};

/// Drops the frame: counted by reason and on its interface, and reported on the ring buffer
/// with its first bytes (when the buffer has room; the counters always count).
#[inline(always)]
pub(crate) fn drop_frame(ctx: &TcContext, reason: DropReason) -> i32 {
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
            reason: reason.0,
            ifindex,
            length: ctx.len(),
            captured,
            header,
        });
        entry.submit(0);
    }
    TC_ACT_SHOT
}

/// Counts one frame dropped for `reason` (without an event: the flood walk's copies).
#[inline(always)]
pub(crate) fn count_drop(reason: DropReason) {
    crate::counters::bump(&DROP_COUNTERS, reason.0);
}
