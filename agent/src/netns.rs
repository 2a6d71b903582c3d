//! Running a piece of code inside another network namespace. Namespace switches happen only on a
//! dedicated short-lived thread, never on the caller's thread (which may be a tokio worker), so the
//! rest of the process stays in its own namespace; and a namespace's cookie, what BPF programs
//! know it by. Touches: the spawned thread's netns only.

use std::{
    fs::File,
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    path::Path,
};

/// Errors entering a network namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("opening network namespace {path}: {source}")]
    Open { path: String, source: io::Error },
    #[error("entering network namespace {path}: {source}")]
    Enter { path: String, source: io::Error },
    #[error("reading the cookie of network namespace {path}: {source}")]
    Cookie { path: String, source: io::Error },
    #[error("the thread running in network namespace {path} panicked")]
    Panicked { path: String },
}

/// Path of a named namespace created by `ip netns add NAME`.
#[must_use]
pub fn named_path(name: &str) -> String {
    format!("/run/netns/{name}")
}

/// Runs `work` on a new thread that has joined the network namespace at `path`, and returns its
/// result. The calling thread's namespace is never changed. `work` may borrow from the caller.
pub fn run_in<T: Send>(path: &Path, work: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
    let display = path.display().to_string();
    let namespace = File::open(path).map_err(|source| NetnsError::Open {
        path: display.clone(),
        source,
    })?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: setns on a valid namespace fd affects only this thread's net namespace.
                let rc = unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) };
                if rc != 0 {
                    return Err(NetnsError::Enter {
                        path: display.clone(),
                        source: io::Error::last_os_error(),
                    });
                }
                Ok(work())
            })
            .join()
            .map_err(|_| NetnsError::Panicked {
                path: display.clone(),
            })?
    })
}

/// The cookie of the network namespace `socket` belongs to (`SO_NETNS_COOKIE`, Linux 5.14): what
/// BPF programs know a namespace by (`bpf_get_netns_cookie`). Unique for the boot.
pub fn cookie_of(socket: BorrowedFd<'_>) -> io::Result<u64> {
    const SO_NETNS_COOKIE: libc::c_int = 71;
    let mut cookie: u64 = 0;
    let mut length = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: the buffer and its length describe `cookie`, which outlives the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&raw mut cookie).cast(),
            &raw mut length,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cookie)
}

/// The cookie of the network namespace at `path` (see [`cookie_of`]), read through a socket
/// made inside it.
pub fn cookie(path: &Path) -> Result<u64, NetnsError> {
    let display = path.display().to_string();
    run_in(path, || {
        // SAFETY: socket(2) has no memory preconditions; the descriptor is owned below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor nothing else owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        cookie_of(socket.as_fd())
    })?
    .map_err(|source| NetnsError::Cookie {
        path: display,
        source,
    })
}
