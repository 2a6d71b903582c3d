//! The cgroup v2 hierarchy mounted on a temporary directory for one test, unmounted on drop.
//! Agents that run in a node's namespace through `ip netns exec` do not see the host's cgroup
//! mounts (the command remounts /sys), but they see this one: the same hierarchy (its root is
//! the root cgroup), to attach the socket-level balancer to (`--socket-lb-cgroup`).

use std::path::Path;

use anyhow::Result;

use crate::bpffs::{mount_on_temporary_dir, unmount};

/// A mount of the cgroup2 file system owned by one test.
#[derive(Debug)]
pub struct Cgroup2Mount {
    dir: tempfile::TempDir,
}

impl Cgroup2Mount {
    pub fn create() -> Result<Self> {
        Ok(Self {
            dir: mount_on_temporary_dir("cgroup2", "ovnbpf-cgroup2-")?,
        })
    }

    /// The mount point: the root cgroup.
    #[must_use]
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Cgroup2Mount {
    fn drop(&mut self) {
        unmount(self.dir.path());
    }
}
