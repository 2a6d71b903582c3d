//! The agent's pins on the BPF filesystem, which let a restarted agent adopt the running datapath:
//! maps at `<root>/v<LAYOUT_VERSION>/maps/<MAP>`, tcx links at
//! `<root>/v<LAYOUT_VERSION>/links/<hook>-<ifindex>`, the socket-level balancer's cgroup links at
//! `<root>/v<LAYOUT_VERSION>/socket-lb/<cgroup id>-<program>`. Checks that the root is on bpffs, lists and
//! removes link pins, and clears what another layout version left. Touches only files under its
//! root.

use std::{
    ffi::CString,
    io,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

use ovnbpf_common::LAYOUT_VERSION;

use super::Hook;

/// `f_type` of a BPF filesystem in statfs(2).
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Errors preparing the pin directories.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error(
        "{path} is not on a BPF filesystem (mount one with `mount -t bpf bpf /sys/fs/bpf`; in a \
         container, mount the host's /sys/fs/bpf so that pins outlive the agent)"
    )]
    NotBpffs { path: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        source: io::Error,
    },
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PinError + 'a {
    move |source| PinError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}

/// The pin directories of one agent (one node).
#[derive(Clone, Debug)]
pub struct PinLayout {
    root: PathBuf,
    versioned: PathBuf,
}

impl PinLayout {
    /// Checks that `root` is (or would be created) on a BPF filesystem and creates the current
    /// layout's `maps/`, `links/` and `socket-lb/` directories under it.
    pub fn prepare(root: &Path) -> Result<Self, PinError> {
        let existing = root
            .ancestors()
            .find(|path| path.exists())
            .unwrap_or(Path::new("/"));
        if !is_bpffs(existing)? {
            return Err(PinError::NotBpffs {
                path: root.display().to_string(),
            });
        }
        let layout = Self {
            root: root.to_path_buf(),
            versioned: root.join(format!("v{LAYOUT_VERSION}")),
        };
        for dir in [
            layout.versioned.join("maps"),
            layout.versioned.join("links"),
            layout.socket_lb_dir(),
        ] {
            std::fs::create_dir_all(&dir).map_err(io_error("creating", &dir))?;
        }
        Ok(layout)
    }

    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where map `name` is pinned.
    #[must_use]
    pub fn map_path(&self, name: &str) -> PathBuf {
        self.versioned.join("maps").join(name)
    }

    /// Map `name` of a running datapath, opened by its pin (a reader outside the agent, or an
    /// off-loop job of it).
    pub fn open_map(&self, name: &'static str) -> Result<aya::maps::Map, super::EbpfError> {
        let failed = |source| super::EbpfError::Map { name, source };
        let data = aya::maps::MapData::from_pin(self.map_path(name)).map_err(failed)?;
        aya::maps::Map::from_map_data(data).map_err(failed)
    }

    /// Where the link of `hook` on interface `ifindex` is pinned. bpffs forbids dots in names,
    /// so interfaces are named by index; a link whose interface is gone cannot be updated, which
    /// is how an index reused by a new interface is told apart.
    #[must_use]
    pub fn link_path(&self, hook: Hook, ifindex: u32) -> PathBuf {
        let hook = match hook {
            Hook::Pod => "pod",
            Hook::Uplink => "uplink",
            Hook::Provider => "provider",
            Hook::Segmenter => "segmenter",
        };
        self.versioned
            .join("links")
            .join(format!("{hook}-{ifindex}"))
    }

    /// The directory of the socket-level balancer's cgroup links
    /// (`<cgroup id>-<program>`, see [`super::socket_lb`]).
    #[must_use]
    pub fn socket_lb_dir(&self) -> PathBuf {
        self.versioned.join("socket-lb")
    }

    /// Whether any map of this layout is pinned (a previous agent ran).
    #[must_use]
    pub fn has_maps(&self) -> bool {
        std::fs::read_dir(self.versioned.join("maps"))
            .is_ok_and(|mut entries| entries.next().is_some())
    }

    /// Every link pinned under this layout.
    pub fn link_pins(&self) -> Result<Vec<PathBuf>, PinError> {
        let dir = self.versioned.join("links");
        let entries = std::fs::read_dir(&dir).map_err(io_error("listing", &dir))?;
        let mut pins = Vec::new();
        for entry in entries {
            pins.push(entry.map_err(io_error("listing", &dir))?.path());
        }
        pins.sort();
        Ok(pins)
    }

    /// Removes the pins of other layout versions (their links detach once no agent holds them).
    /// Returns the directories removed.
    pub fn remove_other_versions(&self) -> Result<Vec<PathBuf>, PinError> {
        let entries = std::fs::read_dir(&self.root).map_err(io_error("listing", &self.root))?;
        let mut removed = Vec::new();
        for entry in entries {
            let path = entry.map_err(io_error("listing", &self.root))?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let is_layout = name.as_deref().is_some_and(|n| {
                n.strip_prefix('v')
                    .is_some_and(|v| v.parse::<u32>().is_ok())
            });
            if is_layout && path != self.versioned {
                std::fs::remove_dir_all(&path).map_err(io_error("removing", &path))?;
                removed.push(path);
            }
        }
        Ok(removed)
    }
}

/// Removes every pin under `root`: links detach and maps are freed once no agent holds them.
/// A missing root is not an error.
pub fn remove_all(root: &Path) -> Result<(), PinError> {
    match std::fs::remove_dir_all(root) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            Err(io_error("removing", root)(error))
        }
        _ => Ok(()),
    }
}

fn is_bpffs(path: &Path) -> Result<bool, PinError> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|error| PinError::Io {
        what: "checking",
        path: path.display().to_string(),
        source: io::Error::new(io::ErrorKind::InvalidInput, error),
    })?;
    // SAFETY: statfs writes into a zeroed struct we own; the path is a valid C string.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut stat) } != 0 {
        return Err(io_error("checking", path)(io::Error::last_os_error()));
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between architectures
    Ok(stat.f_type as i64 == BPF_FS_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_outside_bpffs_is_refused_with_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        let error = PinLayout::prepare(&dir.path().join("ovnbpf")).unwrap_err();
        assert!(matches!(error, PinError::NotBpffs { .. }), "{error}");
        assert!(error.to_string().contains("mount -t bpf"), "{error}");
        assert!(!dir.path().join("ovnbpf").exists(), "nothing created");
    }

    #[test]
    fn link_pins_are_named_by_hook_and_interface_index() {
        let layout = PinLayout {
            root: PathBuf::from("/sys/fs/bpf/ovnbpf"),
            versioned: PathBuf::from(format!("/sys/fs/bpf/ovnbpf/v{LAYOUT_VERSION}")),
        };
        assert_eq!(
            layout.link_path(Hook::Pod, 17),
            PathBuf::from(format!("/sys/fs/bpf/ovnbpf/v{LAYOUT_VERSION}/links/pod-17"))
        );
        assert_eq!(
            layout.map_path("L2_FIB"),
            PathBuf::from(format!("/sys/fs/bpf/ovnbpf/v{LAYOUT_VERSION}/maps/L2_FIB"))
        );
    }
}
