//! Named network namespaces (`ip netns add`), owned by a guard that deletes them on drop, and
//! commands run inside them. Deleting a namespace also removes every interface inside it and the
//! veth peers of those interfaces, wherever they are.

use std::{
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::process::{self, Child};

/// Names of the namespaces in /run/netns.
#[must_use]
pub fn list_named() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes the named namespace (`ip netns delete`).
pub fn delete_named(name: &str) -> Result<()> {
    process::run("ip", &["netns", "delete", name]).map(drop)
}

/// Runs `work` on a short-lived thread that entered the network namespace at `path`; the caller's
/// thread stays where it is. Interface indexes `work` sees, and sockets it opens (for their whole
/// life, whichever thread uses them later), are the namespace's.
pub fn run_in_path<T: Send>(path: &Path, work: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let netns = std::fs::File::open(path)
        .with_context(|| format!("opening namespace {}", path.display()))?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: setns on this short-lived thread only.
                if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    bail!("setns: {}", std::io::Error::last_os_error());
                }
                work()
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the thread in {} panicked", path.display()))?
    })
}

/// A network namespace created by the harness, deleted when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates namespace `name` with its loopback up.
    pub fn create(name: &str) -> Result<Self> {
        process::run("ip", &["netns", "add", name])
            .with_context(|| format!("creating network namespace {name}"))?;
        let netns = Self {
            name: name.to_string(),
        };
        netns.ip(&["link", "set", "lo", "up"])?;
        Ok(netns)
    }

    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/<name>`, for setns(2).
    #[must_use]
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    /// Runs `work` inside this namespace (see [`run_in_path`]).
    pub fn run_in<T: Send>(&self, work: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        run_in_path(&self.path(), work)
    }

    /// A command that runs `program` inside this namespace.
    #[must_use]
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name, program]);
        command
    }

    /// A command that runs `program` inside this namespace the way a process living there would
    /// start it: the child enters the namespace (setns) just before exec. Unlike
    /// [`Self::command`] (`ip netns exec`) there is no mount namespace and no sysfs remount per
    /// process, so `/sys` shows the caller's namespace; netlink, sockets and `/proc/sys/net` are
    /// this namespace's. For programs timed under concurrency (CNI plugins as a runtime starts
    /// them).
    pub fn command_entering(&self, program: &std::ffi::OsStr) -> Result<Command> {
        use std::os::unix::process::CommandExt;
        let path = self.path();
        let netns = std::fs::File::open(&path)
            .with_context(|| format!("opening namespace {}", path.display()))?;
        let mut command = Command::new(program);
        // SAFETY: between fork and exec the child only makes the setns system call (async-signal
        // safe); the descriptor stays open in the parent until the command is dropped.
        unsafe {
            command.pre_exec(move || {
                if libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        Ok(command)
    }

    /// Runs `program args…` inside the namespace and returns stdout.
    pub fn exec<S: AsRef<std::ffi::OsStr>>(&self, program: &str, args: &[S]) -> Result<String> {
        process::output(self.command(program).args(args))
    }

    /// A veth pair: `name` in this namespace, its peer `peer` in `peer_netns`.
    pub fn veth_to(&self, name: &str, peer: &str, peer_netns: &Netns) -> Result<()> {
        self.ip(&[
            "link",
            "add",
            name,
            "type",
            "veth",
            "peer",
            "name",
            peer,
            "netns",
            peer_netns.name(),
        ])
        .map(drop)
    }

    /// Runs `ip args…` against this namespace.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut command = Command::new("ip");
        command.args(["-n", &self.name]).args(args);
        process::output(&mut command)
    }

    /// Starts a long-running `program args…` inside the namespace. `ip netns exec` execs the
    /// program, so the returned guard's PID is the program's own.
    pub fn spawn<S: AsRef<std::ffi::OsStr>>(
        &self,
        label: &str,
        program: &str,
        args: &[S],
        log: Option<PathBuf>,
    ) -> Result<Child> {
        Child::spawn(label, self.command(program).args(args), log)
    }

    /// Index of interface `name` inside this namespace.
    pub fn ifindex(&self, interface: &str) -> Result<u32> {
        let text = self.exec("cat", &[format!("/sys/class/net/{interface}/ifindex")])?;
        text.trim()
            .parse()
            .with_context(|| format!("ifindex of {interface} in {}: {text:?}", self.name))
    }

    /// MAC address of interface `name` inside this namespace.
    pub fn mac(&self, interface: &str) -> Result<String> {
        Ok(self
            .exec("cat", &[format!("/sys/class/net/{interface}/address")])?
            .trim()
            .to_string())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(error) = delete_named(&self.name) {
            eprintln!(
                "warning: could not delete network namespace {}: {error:#}",
                self.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::unique_prefix;

    #[test]
    fn namespace_exists_until_dropped() {
        crate::require_root();
        let name = format!("{}-solo", unique_prefix());
        let netns = Netns::create(&name).unwrap();
        assert!(list_named().contains(&name));
        let links = netns.ip(&["-o", "link", "show"]).unwrap();
        assert!(links.contains("lo:") && links.contains("UP"), "{links}");
        drop(netns);
        assert!(!list_named().contains(&name));
    }
}

/// Forwards TCP connections made to `127.0.0.1:<port>` inside a namespace to an address of the
/// caller's namespace (e.g. a lab server on the host's loopback, for an agent in a node's
/// namespace). The listening socket is made inside the namespace and keeps it; connections out
/// are made from the caller's. Stops accepting when dropped; open connections end with their
/// peers.
#[derive(Debug)]
pub struct TcpRelay {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TcpRelay {
    /// Listens on a free loopback port in `netns`, relaying to `target`.
    pub fn start(netns: &Netns, target: std::net::SocketAddr) -> Result<Self> {
        use std::sync::atomic::Ordering;
        let listener = netns.run_in(|| {
            let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })?;
        let port = listener.local_addr()?.port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        if let Ok(server) = std::net::TcpStream::connect(target) {
                            let _ = client.set_nonblocking(false);
                            pipe(client, server);
                        }
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
                }
            }
        });
        Ok(Self {
            port,
            stop,
            thread: Some(thread),
        })
    }

    /// The port to connect to inside the namespace.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Copies bytes both ways between two connected streams, each way on its own thread.
fn pipe(a: std::net::TcpStream, b: std::net::TcpStream) {
    let copy = |mut from: std::net::TcpStream, mut to: std::net::TcpStream| {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(std::net::Shutdown::Write);
        });
    };
    if let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) {
        copy(a, b2);
        copy(b, a2);
    }
}

impl Drop for TcpRelay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
