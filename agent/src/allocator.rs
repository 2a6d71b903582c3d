//! The process's use of glibc's allocator, which keeps what is freed: capping its per-thread
//! arenas at start, and handing back what a snapshot's handling freed. Shared by the agent and
//! `ovnbpfctl sb-sync` (whose bench numbers stand for the agent's). Touches nothing else; on
//! other C libraries both do nothing.

/// glibc gives each thread that allocates an arena of its own (up to eight per core) and keeps
/// what they freed: the runtime's workers each held the snapshot's peak. Two arenas are enough
/// for one loop and a few blocking tasks. Call before any thread starts.
pub fn cap_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt takes two integers; the caller starts no thread before this.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Hands the memory a snapshot's handling freed back to the system: its JSON tree, the
/// compile's transient diff and change set were the process's peak, and the allocator would
/// keep them (the resident size stayed at that peak).
///
/// First it has glibc sort what was freed. glibc puts freed blocks in an "unsorted" list and
/// sorts them into its bins lazily, at most 10,000 per allocation that its caches cannot serve.
/// After a snapshot's handling freed millions of blocks, that sorting fell on the first update's
/// compile: 20-29 ms of it at 50,000 pods (perf: the whole time in `_int_malloc`), in most runs
/// of `bench compile`. [`SORTING_ALLOCATIONS`] such allocations do it here instead, on the
/// calling thread's arena (the one its next work allocates from); with nothing to sort they take
/// microseconds.
pub fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: blocks malloc returned are freed once each (free takes null too); malloc_trim
    // takes a plain integer and only returns free memory to the system.
    unsafe {
        let mut blocks = [std::ptr::null_mut(); SORTING_ALLOCATIONS];
        for block in &mut blocks {
            *block = libc::malloc(SORTING_BLOCK);
        }
        for block in blocks {
            libc::free(block);
        }
        libc::malloc_trim(0);
    }
}

/// Allocations that make glibc sort its unsorted list: up to 10,000 blocks each
/// (`MAX_ITERS`), so 10 million blocks in all.
const SORTING_ALLOCATIONS: usize = 1000;
/// A size above the thread cache's (1,032 bytes) and the small bins', which an allocation must
/// then look for by sorting; uncommon, so a freed block of exactly this size rarely ends the
/// sorting early.
const SORTING_BLOCK: usize = 3000;
