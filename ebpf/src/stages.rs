//! Tail calls between stages: a stage's request travels in the skb's control block (`cb[0..5]`,
//! which a tail call keeps), its last word the magic number of the stage it is for; the programs
//! are in `STAGES` (slots in `ovnbpf_common::stage`). Touches `STAGES` and the control block only.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::{DropReason, drop_reason};

use crate::STAGES;

/// Hands the frame to the stage in `slot` with `request` (its four words, then its magic). On
/// success this never returns; it returns the reason to drop the frame when the stage is not
/// there.
#[inline(always)]
pub fn jump(ctx: &TcContext, slot: u32, request: [u32; 5]) -> DropReason {
    // SAFETY: tc programs may write the skb's control block, cb[0..5].
    unsafe { (*ctx.skb.skb).cb = request };
    // SAFETY: the slot holds a program of this object (or nothing: the call then returns).
    unsafe { STAGES.tail_call(ctx, slot) };
    drop_reason::STAGE_MISSING
}

/// The magic number of the request in the control block (which of its requests a stage that
/// takes several was entered with).
#[inline(always)]
pub fn magic(ctx: &TcContext) -> u32 {
    // SAFETY: tc programs may read the skb's control block.
    unsafe { (*ctx.skb.skb).cb[4] }
}

/// The request a stage was entered with: its four words, if the control block carries
/// `magic` (which is cleared, so nothing downstream mistakes the block for a request).
#[inline(always)]
pub fn take(ctx: &TcContext, magic: u32) -> Result<[u32; 4], DropReason> {
    // SAFETY: tc programs may read and write the skb's control block.
    let cb = unsafe { &mut (*ctx.skb.skb).cb };
    if cb[4] != magic {
        return Err(drop_reason::STAGE_REQUEST_INVALID);
    }
    cb[4] = 0;
    Ok([cb[0], cb[1], cb[2], cb[3]])
}
