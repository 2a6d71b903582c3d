//! Unique names for test resources, and clean-up of resources left by test processes that died.
//!
//! Every namespace and pin directory a test creates is named `obt-<pid>-<seq>-<role>`: the PID of
//! the test process and a per-process sequence number make names unique across parallel tests and
//! test binaries; the PID also lets [`reap_stale`] recognise leftovers of processes that no longer
//! exist (killed with SIGKILL, say) without touching anything a live process owns.

use std::{
    path::Path,
    sync::atomic::{AtomicU32, Ordering},
};

/// Prefix shared by every resource the harness creates.
pub const PREFIX: &str = "obt";

static SEQUENCE: AtomicU32 = AtomicU32::new(0);

/// A fresh prefix `obt-<pid>-<seq>` for one test's resources.
#[must_use]
pub fn unique_prefix() -> String {
    let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("{PREFIX}-{}-{seq}", std::process::id())
}

/// PID encoded in a harness resource name, if `name` is one.
#[must_use]
pub fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?.strip_prefix('-')?;
    rest.split('-').next()?.parse().ok()
}

fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// What [`reap_stale`] removed.
#[derive(Debug, Default)]
pub struct Reaped {
    pub namespaces: Vec<String>,
    pub pin_dirs: Vec<String>,
}

/// Removes network namespaces and bpffs pin directories named by the harness whose owning process
/// is gone. Resources of live processes (including parallel tests) are left alone.
pub fn reap_stale() -> Reaped {
    let mut reaped = Reaped::default();
    for name in crate::netns::list_named() {
        if owner_pid(&name).is_some_and(|pid| !process_alive(pid))
            && crate::netns::delete_named(&name).is_ok()
        {
            reaped.namespaces.push(name);
        }
    }
    if let Ok(entries) = std::fs::read_dir(crate::bpffs::BPFFS) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if owner_pid(&name).is_some_and(|pid| !process_alive(pid))
                && std::fs::remove_dir_all(entry.path()).is_ok()
            {
                reaped.pin_dirs.push(name);
            }
        }
    }
    reaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_unique_and_carry_the_pid() {
        let a = unique_prefix();
        let b = unique_prefix();
        assert_ne!(a, b);
        assert_eq!(owner_pid(&a), Some(std::process::id()));
        assert_eq!(owner_pid(&format!("{b}-node1")), Some(std::process::id()));
    }

    #[test]
    fn foreign_names_have_no_owner() {
        assert_eq!(owner_pid("ovnbpf"), None);
        assert_eq!(owner_pid("obtx-1-2"), None);
        assert_eq!(owner_pid("obt-notapid-1"), None);
    }
}
