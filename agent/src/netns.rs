//! Running a piece of code inside another network namespace. Namespace switches happen only on a
//! dedicated short-lived thread, never on the caller's thread (which may be a tokio worker), so the
//! rest of the process stays in its own namespace. Touches: the spawned thread's netns only.

use std::{fs::File, io, os::fd::AsRawFd, path::Path};

/// Errors entering a network namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("opening network namespace {path}: {source}")]
    Open { path: String, source: io::Error },
    #[error("entering network namespace {path}: {source}")]
    Enter { path: String, source: io::Error },
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
