//! Per-test pin directories on the BPF filesystem, removed with their contents on drop, so tests
//! that pin maps or links never collide with each other or with a real agent's /sys/fs/bpf/ovnbpf.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Mount point of the BPF filesystem.
pub const BPFFS: &str = "/sys/fs/bpf";

/// A directory under /sys/fs/bpf owned by one test.
#[derive(Debug)]
pub struct PinDir {
    path: PathBuf,
}

impl PinDir {
    /// Creates `/sys/fs/bpf/<prefix>-pins`.
    pub fn create(prefix: &str) -> Result<Self> {
        let path = Path::new(BPFFS).join(format!("{prefix}-pins"));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path })
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.path) {
            eprintln!("warning: could not remove {}: {error}", self.path.display());
        }
    }
}

/// A BPF filesystem of its own, mounted on a temporary directory and unmounted (its pins and
/// what only they held going with it) on drop. Agents that run in a node's namespace through
/// `ip netns exec` do not see the host's /sys/fs/bpf (the command remounts /sys), but they do
/// see this mount, and it survives their restarts as the host's would.
#[derive(Debug)]
pub struct BpfMount {
    dir: tempfile::TempDir,
}

impl BpfMount {
    pub fn create() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("ovnbpf-bpffs-")
            .tempdir()
            .context("creating a mount point")?;
        let status = std::process::Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(dir.path())
            .status()
            .context("running mount")?;
        anyhow::ensure!(
            status.success(),
            "mount -t bpf on {}: {status}",
            dir.path().display()
        );
        Ok(Self { dir })
    }

    /// The mount point (the pin root to give an agent, or a parent of it).
    #[must_use]
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for BpfMount {
    fn drop(&mut self) {
        let status = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("warning: could not unmount {}", self.dir.path().display());
        }
    }
}
