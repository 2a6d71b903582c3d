//! The cgroup v2 hierarchy mounted on a temporary directory for one test, unmounted on drop.
//! Agents that run in a node's namespace through `ip netns exec` do not see the host's cgroup
//! mounts (the command remounts /sys), but they see this one: the same hierarchy (its root is
//! the root cgroup), to attach the socket-level balancer to (`--socket-lb-cgroup`).

use std::path::Path;

use anyhow::{Context, Result};

/// A mount of the cgroup2 file system owned by one test.
#[derive(Debug)]
pub struct Cgroup2Mount {
    dir: tempfile::TempDir,
}

impl Cgroup2Mount {
    pub fn create() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("ovnbpf-cgroup2-")
            .tempdir()
            .context("creating a mount point")?;
        let status = std::process::Command::new("mount")
            .args(["-t", "cgroup2", "cgroup2"])
            .arg(dir.path())
            .status()
            .context("running mount")?;
        anyhow::ensure!(
            status.success(),
            "mount -t cgroup2 on {}: {status}",
            dir.path().display()
        );
        Ok(Self { dir })
    }

    /// The mount point: the root cgroup.
    #[must_use]
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Cgroup2Mount {
    fn drop(&mut self) {
        let status = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("warning: could not unmount {}", self.dir.path().display());
        }
    }
}
