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
pub fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes a plain integer and only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}
