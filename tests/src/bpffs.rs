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
        Ok(Self {
            dir: mount_on_temporary_dir("bpf", "ovnbpf-bpffs-")?,
        })
    }

    /// The mount point (the pin root to give an agent, or a parent of it).
    #[must_use]
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for BpfMount {
    fn drop(&mut self) {
        unmount(self.dir.path());
    }
}

/// A file system of type `fs_type` mounted on a new temporary directory named `prefix…`.
pub(crate) fn mount_on_temporary_dir(fs_type: &str, prefix: &str) -> Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .context("creating a mount point")?;
    let status = std::process::Command::new("mount")
        .args(["-t", fs_type, fs_type])
        .arg(dir.path())
        .status()
        .context("running mount")?;
    anyhow::ensure!(
        status.success(),
        "mount -t {fs_type} on {}: {status}",
        dir.path().display()
    );
    Ok(dir)
}

/// Unmounts `path`, saying so when it cannot (a drop must not panic).
pub(crate) fn unmount(path: &Path) {
    let status = std::process::Command::new("umount").arg(path).status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("warning: could not unmount {}", path.display());
    }
}
