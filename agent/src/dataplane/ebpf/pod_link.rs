//! Attaching `from_pod` to a pod's host veth away from the daemon loop. A tcx attach waits for
//! an RCU grace period while it holds the kernel's rtnl lock (about 15 ms on the lab's kernel):
//! done by the CNI server's blocking task with a duplicate of the program's descriptor, it never
//! stalls the loop that serves the Southbound and the other pods. Owns the raw
//! `BPF_LINK_CREATE` and `BPF_OBJ_PIN` calls (aya attaches only through `&mut` of its program
//! object, which the loop owns); touches only the interface and pin path it is given.

use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::PathBuf,
    sync::Arc,
};

use super::{Hook, pins::PinLayout};

const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_TCX_INGRESS: u32 = 46;

/// Why a pod's program could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum PodLinkError {
    #[error("attaching from_pod to interface index {ifindex}: {source}")]
    Attach { ifindex: u32, source: io::Error },
    #[error("pinning the link of interface index {ifindex} at {pin}: {source}")]
    Pin {
        ifindex: u32,
        pin: String,
        source: io::Error,
    },
}

/// Attaches `from_pod` from any thread. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PodLinker {
    program: Arc<OwnedFd>,
    pins: Option<PinLayout>,
}

/// A tcx link of `from_pod` on one interface: pinned (it stays when this is dropped), or held
/// by this descriptor (dropping it detaches the program).
#[derive(Debug)]
pub struct PodLink {
    pub ifindex: u32,
    pub pinned: bool,
    fd: OwnedFd,
}

impl PodLink {
    /// The link's descriptor, for those who keep an unpinned link alive.
    #[must_use]
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

/// `bpf(2)` with an attribute buffer (zero-filled beyond what the command reads).
fn bpf(command: libc::c_long, attr: &mut [u64; 8]) -> io::Result<libc::c_long> {
    // SAFETY: `attr` outlives the call and is larger than both commands' attribute structs;
    // pointers stored in it point to buffers the caller keeps alive for the call.
    let result = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr),
        )
    };
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

impl PodLinker {
    /// `program` is a descriptor of the loaded `from_pod`.
    #[must_use]
    pub fn new(program: OwnedFd, pins: Option<PinLayout>) -> Self {
        Self {
            program: Arc::new(program),
            pins,
        }
    }

    /// Where the link of interface `ifindex` is pinned, when pinning.
    #[must_use]
    pub fn pin_path(&self, ifindex: u32) -> Option<PathBuf> {
        self.pins
            .as_ref()
            .map(|pins| pins.link_path(Hook::Pod, ifindex))
    }

    /// Attaches `from_pod` on tcx ingress of interface `ifindex` (of the caller's namespace) and
    /// pins the link when pinning. Blocking (a grace period): call from a blocking task.
    pub fn attach(&self, ifindex: u32) -> Result<PodLink, PodLinkError> {
        let mut attr = [0u64; 8];
        // BPF_LINK_CREATE: prog_fd, target_ifindex, attach_type, flags (no relative order).
        attr[0] = self.program.as_raw_fd() as u64 | (u64::from(ifindex) << 32);
        attr[1] = u64::from(BPF_TCX_INGRESS);
        let fd = bpf(BPF_LINK_CREATE, &mut attr)
            .map_err(|source| PodLinkError::Attach { ifindex, source })?;
        // SAFETY: the kernel returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let Some(pin) = self.pin_path(ifindex) else {
            return Ok(PodLink {
                ifindex,
                pinned: false,
                fd,
            });
        };
        let pin_error = |source| PodLinkError::Pin {
            ifindex,
            pin: pin.display().to_string(),
            source,
        };
        // A pin at this path belongs to a deleted interface whose index the kernel reused: its
        // link is defunct.
        match std::fs::remove_file(&pin) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(pin_error(error)),
            _ => {}
        }
        let path = CString::new(pin.as_os_str().as_encoded_bytes())
            .map_err(|e| pin_error(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
        let mut attr = [0u64; 8];
        // BPF_OBJ_PIN: pathname, bpf_fd, file_flags.
        attr[0] = path.as_ptr() as u64;
        attr[1] = fd.as_raw_fd() as u64;
        bpf(BPF_OBJ_PIN, &mut attr).map_err(pin_error)?;
        Ok(PodLink {
            ifindex,
            pinned: true,
            fd,
        })
    }
}
