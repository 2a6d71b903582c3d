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
