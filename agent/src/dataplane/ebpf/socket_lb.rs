//! The socket-level balancer's attachment (`--socket-lb`): its four cgroup `sock_addr`
//! programs and its `sock_release` one (`ebpf/src/socket_lb.rs`) on a cgroup v2 directory (by default the root of the
//! cgroup2 mount, so that every pod's sockets are seen; the programs act only for the pods
//! this agent plugged, by their namespace's cookie). With pins, each link is pinned at
//! `socket-lb/<cgroup id>-<program>` and a restarted agent gives the pinned link its own
//! program atomically (`BPF_LINK_UPDATE`), so connects never miss the hook across a restart;
//! links of another cgroup, or all of them when the balancer is off, are unpinned (detached).
//!
//! Two bpf() commands are made here by hand, `BPF_OBJ_GET` and `BPF_LINK_UPDATE`: aya 0.14
//! updates only tc and XDP links and gives no descriptor of a pinned link to do it with.
//! Touches: the cgroup's BPF attachments and the `socket-lb` pin directory.

use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
        unix::{ffi::OsStrExt, fs::MetadataExt},
    },
    path::{Path, PathBuf},
};

use aya::programs::{
    CgroupAttachMode, CgroupSock, CgroupSockAddr, ProgramError,
    links::{FdLink, LinkError},
};
use ovnbpf_common::program;

use super::{Attachment, EbpfError, KernelPrograms, pins::PinLayout};

/// A bpf_link on a cgroup takes no attach flags (the kernel refuses `BPF_F_ALLOW_MULTI` there
/// with EINVAL) and runs beside every other program attached to it, as with that flag: aya
/// passes no flag for `Single` (kernels ≥ 5.7 attach through links).
const ATTACH_MODE: CgroupAttachMode = CgroupAttachMode::Single;

/// The cgroup v2 mount point (`/sys/fs/cgroup` on a unified host, `/sys/fs/cgroup/unified` on a
/// hybrid one), read from `/proc/self/mountinfo`.
#[must_use]
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    cgroup2_mount_in(&mounts)
}

/// [`cgroup2_mount`] over the text of a mountinfo file.
fn cgroup2_mount_in(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        // "<id> <parent> <dev> <root> <mount point> <options> [optional…] - <fs type> …"
        let (fields, rest) = line.split_once(" - ")?;
        let fs_type = rest.split_whitespace().next()?;
        let mount_point = fields.split_whitespace().nth(4)?;
        (fs_type == "cgroup2").then(|| PathBuf::from(mount_point.replace("\\040", " ")))
    })
}

/// Attaches (or, through pins a previous agent left, replaces) the four programs on `cgroup`.
pub fn attach(
    programs: &mut KernelPrograms,
    cgroup: &Path,
    pins: Option<&PinLayout>,
) -> Result<Vec<(&'static str, Attachment)>, EbpfError> {
    let failed = |source| EbpfError::Cgroup {
        path: cgroup.display().to_string(),
        source,
    };
    let directory = std::fs::File::open(cgroup).map_err(failed)?;
    let id = directory.metadata().map_err(failed)?.ino();
    let mut done = Vec::new();
    let mut kept = Vec::new();
    for name in program::SOCKET_LB {
        let pin = pins.map(|pins| pins.socket_lb_dir().join(format!("{id}-{name}")));
        let program = hook(programs, name)?;
        let attach_error = |source| EbpfError::Attach {
            name,
            interface: cgroup.display().to_string(),
            source,
        };
        let how = match &pin {
            Some(pin) if replace_pinned(program, pin, name) => Attachment::Replaced,
            Some(pin) => {
                let link = program
                    .attach_taken(&directory)
                    .map_err(|error| match error {
                        Taken::Attach(source) => attach_error(source),
                        Taken::Link(source) => EbpfError::Link {
                            name,
                            interface: cgroup.display().to_string(),
                            source,
                        },
                    })?;
                link.pin(pin).map_err(|source| EbpfError::PinLink {
                    name,
                    interface: cgroup.display().to_string(),
                    source,
                })?;
                Attachment::Attached
            }
            None => {
                // Held by the program: detached when the agent's programs are dropped.
                program.attach_held(&directory).map_err(attach_error)?;
                Attachment::Attached
            }
        };
        kept.extend(pin);
        tracing::info!(program = name, cgroup = %cgroup.display(), ?how, "socket balancer attached");
        done.push((name, how));
    }
    if let Some(pins) = pins {
        unpin_others(pins, &kept);
    }
    Ok(done)
}

/// Unpins (detaches) every socket-balancer link pinned under `pins` (the balancer is off).
pub fn detach_pinned(pins: &PinLayout) -> usize {
    unpin_others(pins, &[])
}

/// Unpins the links under `pins`' socket-lb directory but `kept`; returns how many went.
fn unpin_others(pins: &PinLayout, kept: &[PathBuf]) -> usize {
    let Ok(entries) = std::fs::read_dir(pins.socket_lb_dir()) else {
        return 0;
    };
    let mut removed = 0;
    for pin in entries.filter_map(|entry| entry.ok().map(|entry| entry.path())) {
        if kept.contains(&pin) {
            continue;
        }
        match std::fs::remove_file(&pin) {
            Ok(()) => {
                removed += 1;
                tracing::info!(pin = %pin.display(), "socket balancer link unpinned");
            }
            Err(error) => tracing::warn!(pin = %pin.display(), %error, "cannot unpin"),
        }
    }
    removed
}

/// Gives the link pinned at `pin` `program` (true), or removes an unusable pin (false: none
/// there, or one the kernel refuses to update).
fn replace_pinned(program: &dyn CgroupHook, pin: &Path, name: &str) -> bool {
    let link = match object_get(pin) {
        Ok(link) => link,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return false,
        Err(error) => {
            tracing::warn!(pin = %pin.display(), %error, "discarding an unreadable pinned link");
            let _ = std::fs::remove_file(pin);
            return false;
        }
    };
    let updated = program
        .program_fd()
        .map_err(|error| io::Error::other(error.to_string()))
        .and_then(|fd| link_update(link.as_fd(), fd));
    match updated {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(program = name, pin = %pin.display(), %error, "discarding a pinned link that cannot take the program");
            let _ = std::fs::remove_file(pin);
            false
        }
    }
}

/// The loaded program `name` of the socket balancer, of whichever cgroup program type.
fn hook<'a>(
    programs: &'a mut KernelPrograms,
    name: &'static str,
) -> Result<&'a mut dyn CgroupHook, EbpfError> {
    Ok(if name == program::SOCK_RELEASE {
        super::cgroup_sock(&mut programs.ebpf, name)?
    } else {
        super::sock_addr(&mut programs.ebpf, name)?
    })
}

/// Why a link to take could not be had.
enum Taken {
    Attach(ProgramError),
    Link(LinkError),
}

/// What the balancer does with a cgroup program, of either of aya's types (`sock_addr` hooks,
/// the `sock` release hook), which share no trait.
trait CgroupHook {
    fn program_fd(&self) -> Result<BorrowedFd<'_>, ProgramError>;
    /// Attaches it to `cgroup`, the program holding the link (detached with the programs).
    fn attach_held(&mut self, cgroup: &std::fs::File) -> Result<(), ProgramError>;
    /// Attaches it to `cgroup` and hands the link over (to be pinned).
    fn attach_taken(&mut self, cgroup: &std::fs::File) -> Result<FdLink, Taken>;
}

macro_rules! cgroup_hook {
    ($program:ty) => {
        impl CgroupHook for $program {
            fn program_fd(&self) -> Result<BorrowedFd<'_>, ProgramError> {
                Ok(self.fd()?.as_fd())
            }

            fn attach_held(&mut self, cgroup: &std::fs::File) -> Result<(), ProgramError> {
                self.attach(cgroup, ATTACH_MODE).map(drop)
            }

            fn attach_taken(&mut self, cgroup: &std::fs::File) -> Result<FdLink, Taken> {
                let id = self.attach(cgroup, ATTACH_MODE).map_err(Taken::Attach)?;
                let link = self.take_link(id).map_err(Taken::Attach)?;
                FdLink::try_from(link).map_err(Taken::Link)
            }
        }
    };
}

cgroup_hook!(CgroupSockAddr);
cgroup_hook!(CgroupSock);

/// `bpf(BPF_OBJ_GET)`: a descriptor of the object pinned at `path`.
fn object_get(path: &Path) -> io::Result<OwnedFd> {
    const BPF_OBJ_GET: libc::c_long = 7;
    #[repr(C)]
    struct ObjGet {
        pathname: u64,
        bpf_fd: u32,
        file_flags: u32,
    }
    let path = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let attr = ObjGet {
        pathname: path.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: 0,
    };
    // SAFETY: `attr` is a valid `bpf_attr` prefix for BPF_OBJ_GET and outlives the call; the
    // path it points to is NUL-terminated.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            &raw const attr,
            std::mem::size_of::<ObjGet>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `bpf(BPF_LINK_UPDATE)`: link `link` runs `program` from now on (atomically).
fn link_update(link: BorrowedFd<'_>, program: BorrowedFd<'_>) -> io::Result<()> {
    const BPF_LINK_UPDATE: libc::c_long = 29;
    #[repr(C)]
    struct LinkUpdate {
        link_fd: u32,
        new_prog_fd: u32,
        flags: u32,
        old_prog_fd: u32,
    }
    let attr = LinkUpdate {
        link_fd: link.as_raw_fd() as u32,
        new_prog_fd: program.as_raw_fd() as u32,
        flags: 0,
        old_prog_fd: 0,
    };
    // SAFETY: `attr` is a valid `bpf_attr` prefix for BPF_LINK_UPDATE and outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_UPDATE,
            &raw const attr,
            std::mem::size_of::<LinkUpdate>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_on_hybrid_and_unified_hosts() {
        let hybrid = "25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw\n\
                      27 25 0:24 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(
            cgroup2_mount_in(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let unified = "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec shared:9 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            cgroup2_mount_in(unified),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(
            cgroup2_mount_in("27 25 0:24 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"),
            None
        );
    }
}
