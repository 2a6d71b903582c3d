//! A real container runtime for the tests: Debian's containerd (1.6) run as a test-owned process
//! with its own root, state, sockets, runc root and configuration under a temporary directory,
//! driven through its CRI gRPC socket exactly as kubelet calls it (`tests/cri/cri.py`, a CRI
//! client on the `runtime.v1` messages, in the venv `cargo xtask setup` makes). Its sandbox image
//! is built here (a static `pause` from `tests/cri/pause.c`, packed as an OCI archive) and
//! imported, since no registry is reachable. CNI: `bin_dir()` holds Debian's `loopback` and
//! `portmap`; the test installs its plugin and network configuration there and in `conf_dir()`.
//!
//! Started inside a node's network namespace (entering it with setns only, so mounts stay the
//! machine's): the CNI plugins it executes run there, as on a real node; the pod namespaces it
//! creates are mounted under `/var/run/netns/cni-*`, as containerd does on every node.
//!
//! Dropping it removes every sandbox it made (CRI stop + remove), ends containerd by PID, then
//! whatever a failure may have left: the shims and their children (found by the socket path in
//! their command line), the sandboxes' network namespaces, mounts under its directory and its
//! cgroups.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{
    netns::Netns,
    process::{self, Child, wait_until},
};

/// The image reference of the locally built sandbox image.
pub const PAUSE_IMAGE: &str = "localhost/ovnbpf-pause:test";

/// Debian's reference CNI plugins.
pub const DEBIAN_CNI_PLUGINS: &str = "/usr/lib/cni";

/// `tests/cri/<file>` of the workspace.
fn cri_file(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cri").join(file)
}

/// Builds the sandbox image archive in `dir` (`pause.tar`): `pause.c` compiled statically and
/// packed as a one-layer OCI image named [`PAUSE_IMAGE`].
pub fn build_pause_image(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let binary = dir.join("pause");
    process::output(
        Command::new("gcc")
            .args(["-static", "-Os", "-o"])
            .arg(&binary)
            .arg(cri_file("pause.c")),
    )
    .context("compiling the pause binary (gcc and libc6-dev; run `cargo xtask setup`)")?;
    let archive = dir.join("pause.tar");
    let image = crate::oci::Image {
        name: PAUSE_IMAGE.to_string(),
        entrypoint: vec!["/pause".into()],
        env: Vec::new(),
        files: vec![crate::oci::ImageFile::copy(&binary, "/pause", 0o755)?],
    };
    crate::oci::write_archive(&image, &archive)?;
    Ok(archive)
}

/// Runs `cri.py args…` with the venv's Python; its JSON output.
fn cri<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Result<Value> {
    let text = process::output(
        Command::new(crate::manifests::venv().join("bin/python"))
            .arg(cri_file("cri.py"))
            .args(args),
    )?;
    serde_json::from_str(text.trim()).with_context(|| format!("cri.py printed {text:?}"))
}

/// A pod sandbox as the runtime reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    pub id: String,
    /// The pod's IP (the CNI result's), empty if none.
    pub ip: String,
    /// The sandbox's network namespace path.
    pub netns: String,
    /// `SANDBOX_READY` or `SANDBOX_NOTREADY`.
    pub state: String,
}

impl Sandbox {
    fn from_json(value: &Value) -> Result<Self> {
        let field = |name: &str| {
            value[name]
                .as_str()
                .map(str::to_string)
                .with_context(|| format!("sandbox without {name}: {value}"))
        };
        Ok(Self {
            id: field("id")?,
            ip: field("ip")?,
            netns: field("netns")?,
            state: field("state")?,
        })
    }
}

/// One containerd, its directory and the sandboxes it made.
pub struct Containerd {
    dir: PathBuf,
    /// The cgroup (per controller) the sandboxes' cgroups go under.
    cgroup_parent: String,
    process: Option<Child>,
    /// Sandboxes made and not yet removed, with their namespaces (for the clean-up).
    sandboxes: Mutex<Vec<Sandbox>>,
}

impl Containerd {
    /// Prepares `dir` (CNI directories with Debian's `loopback` and `portmap`, the
    /// configuration); `name` (unique, e.g. from [`crate::names::unique_prefix`]) names its
    /// cgroup parent. Start it with [`Self::start`] once the CNI configuration is in place.
    pub fn prepare(dir: &Path, name: &str) -> Result<Self> {
        let this = Self {
            dir: dir.to_path_buf(),
            cgroup_parent: format!("/{name}"),
            process: None,
            sandboxes: Mutex::new(Vec::new()),
        };
        std::fs::create_dir_all(this.bin_dir())?;
        std::fs::create_dir_all(this.conf_dir())?;
        for plugin in ["loopback", "portmap"] {
            std::fs::copy(
                Path::new(DEBIAN_CNI_PLUGINS).join(plugin),
                this.bin_dir().join(plugin),
            )
            .with_context(|| format!("copying Debian's {plugin} (containernetworking-plugins)"))?;
        }
        std::fs::write(this.dir.join("config.toml"), this.config())?;
        Ok(this)
    }

    /// The CNI plugin directory containerd executes plugins from.
    #[must_use]
    pub fn bin_dir(&self) -> PathBuf {
        self.dir.join("cni/bin")
    }

    /// The CNI network configuration directory containerd reads.
    #[must_use]
    pub fn conf_dir(&self) -> PathBuf {
        self.dir.join("cni/net.d")
    }

    /// The CRI (and containerd) gRPC socket.
    #[must_use]
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    fn config(&self) -> String {
        let dir = self.dir.display();
        format!(
            r#"version = 2
root = "{dir}/root"
state = "{dir}/state"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.overlayfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{dir}/containerd.sock"

[ttrpc]
  address = "{dir}/containerd.sock.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  # Keeps the sandbox's oom_score_adj at or above containerd's own: lowering it (kubelet's -998)
  # needs CAP_SYS_RESOURCE, which a test machine's root may not have.
  restrict_oom_score_adj = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{dir}/runc"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{dir}/cni/bin"
    conf_dir = "{dir}/cni/net.d"
    max_conf_num = 1
"#
        )
    }

    /// Starts containerd inside `node` (setns only), waits until the CRI answers, and imports
    /// the sandbox image `pause_archive` (from [`build_pause_image`]).
    pub fn start(&mut self, node: &Netns, pause_archive: &Path) -> Result<()> {
        let mut command = node.command_entering("containerd".as_ref())?;
        command.arg("--config").arg(self.dir.join("config.toml"));
        self.process = Some(
            Child::spawn(
                "containerd",
                &mut command,
                Some(self.dir.join("containerd.log")),
            )
            .context("starting containerd (Debian's containerd; run `cargo xtask setup`)")?,
        );
        let socket = self.socket();
        if !wait_until(Duration::from_secs(20), || {
            socket.exists() && cri(&[socket.as_os_str(), "version".as_ref()]).is_ok()
        }) {
            bail!(
                "containerd did not answer on {}{}",
                socket.display(),
                self.log()
            );
        }
        self.import(pause_archive)
    }

    /// Imports an OCI image archive (into the CRI's namespace, as for the sandbox image).
    pub fn import(&self, archive: &Path) -> Result<()> {
        process::output(
            self.ctr()
                .args(["images", "import", "--snapshotter", "native"])
                .arg(archive),
        )
        .with_context(|| format!("importing {}", archive.display()))
        .map(drop)
    }

    /// Runs `args` in a container of `image` to completion (`ctr run --rm`, killed after 60 s:
    /// ctr never closes a container's stdin, so a program that reads it would wait forever),
    /// with `env` and the host directories `mounts` (source, destination) bound read-write; its
    /// output.
    pub fn run_container(
        &self,
        image: &str,
        args: &[&str],
        env: &[&str],
        mounts: &[(&Path, &str)],
    ) -> Result<String> {
        let mut command = Command::new("timeout");
        command.args(["--signal=KILL", "60", "ctr"]);
        command.arg("-a").arg(self.socket()).args(["-n", "k8s.io"]);
        command.args(["run", "--rm", "--snapshotter", "native"]);
        for variable in env {
            command.args(["--env", variable]);
        }
        for (source, destination) in mounts {
            command.arg("--mount").arg(format!(
                "type=bind,src={},dst={destination},options=rbind:rw",
                source.display()
            ));
        }
        let id = format!("run-{}", std::process::id());
        process::output(command.arg(image).arg(id).args(args))
            .with_context(|| format!("running {args:?} in {image}"))
    }

    fn ctr(&self) -> Command {
        let mut command = Command::new("ctr");
        command.arg("-a").arg(self.socket()).args(["-n", "k8s.io"]);
        command
    }

    /// The runtime's name, version and CRI version (`Version`).
    pub fn version(&self) -> Result<Value> {
        cri(&[self.socket().as_os_str(), "version".as_ref()])
    }

    /// `RunPodSandbox` for pod `namespace/name`, as kubelet asks it; the sandbox's status.
    pub fn run_pod_sandbox(&self, name: &str, namespace: &str) -> Result<Sandbox> {
        let uid = format!("uid-{namespace}-{name}");
        let reply = cri(&[
            self.socket().as_os_str(),
            "run".as_ref(),
            name.as_ref(),
            namespace.as_ref(),
            uid.as_ref(),
            self.cgroup_parent.as_ref(),
        ])
        .with_context(|| format!("RunPodSandbox {namespace}/{name}{}", self.log()))?;
        let sandbox = Sandbox::from_json(&reply)?;
        self.remember(|sandboxes| sandboxes.push(sandbox.clone()));
        Ok(sandbox)
    }

    /// `PodSandboxStatus` (verbose, for the namespace path).
    pub fn status(&self, id: &str) -> Result<Sandbox> {
        Sandbox::from_json(&cri(&[
            self.socket().as_os_str(),
            "status".as_ref(),
            id.as_ref(),
        ])?)
    }

    /// `ListPodSandbox`: (id, state) of every sandbox.
    pub fn list(&self) -> Result<Vec<(String, String)>> {
        let reply = cri(&[self.socket().as_os_str(), "list".as_ref()])?;
        reply
            .as_array()
            .context("ListPodSandbox printed no list")?
            .iter()
            .map(|item| {
                Ok((
                    item["id"].as_str().context("no id")?.to_string(),
                    item["state"].as_str().context("no state")?.to_string(),
                ))
            })
            .collect()
    }

    /// `StopPodSandbox`: the runtime tears the pod's network down (CNI DEL) and removes its
    /// namespace.
    pub fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        cri(&[self.socket().as_os_str(), "stop".as_ref(), id.as_ref()])
            .with_context(|| format!("StopPodSandbox {id}{}", self.log()))
            .map(drop)
    }

    /// `RemovePodSandbox`.
    pub fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        cri(&[self.socket().as_os_str(), "remove".as_ref(), id.as_ref()])
            .with_context(|| format!("RemovePodSandbox {id}{}", self.log()))?;
        self.remember(|sandboxes| sandboxes.retain(|sandbox| sandbox.id != id));
        Ok(())
    }

    fn remember(&self, change: impl FnOnce(&mut Vec<Sandbox>)) {
        let mut sandboxes = match self.sandboxes.lock() {
            Ok(sandboxes) => sandboxes,
            Err(poisoned) => poisoned.into_inner(),
        };
        change(&mut sandboxes);
    }

    /// The end of containerd's log, for failure messages.
    #[must_use]
    pub fn log(&self) -> String {
        self.process
            .as_ref()
            .map(|process| format!("\ncontainerd log:\n{}", process.log_tail()))
            .unwrap_or_default()
    }

    /// PIDs of the shims serving this containerd (their command line names its socket), and of
    /// their children.
    fn shims_and_children(&self) -> Vec<i32> {
        let socket = self.socket().display().to_string();
        let processes: Vec<(i32, i32, String)> = std::fs::read_dir("/proc")
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|entry| {
                        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
                        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                        let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
                        let parent = status
                            .lines()
                            .find_map(|line| line.strip_prefix("PPid:"))?
                            .trim()
                            .parse()
                            .ok()?;
                        Some((pid, parent, String::from_utf8_lossy(&cmdline).into_owned()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let shims: Vec<i32> = processes
            .iter()
            .filter(|(_, _, cmdline)| {
                cmdline.contains("containerd-shim") && cmdline.contains(socket.as_str())
            })
            .map(|(pid, ..)| *pid)
            .collect();
        let children = processes
            .iter()
            .filter(|(_, parent, _)| shims.contains(parent))
            .map(|(pid, ..)| *pid);
        children.chain(shims.iter().copied()).collect()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let left: Vec<Sandbox> = std::mem::take(
            &mut *self
                .sandboxes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if self.process.is_some() {
            for sandbox in &left {
                let _ = self.stop_pod_sandbox(&sandbox.id);
                let _ = self.remove_pod_sandbox(&sandbox.id);
            }
        }
        if let Some(mut process) = self.process.take() {
            process.stop();
        }
        for pid in self.shims_and_children() {
            // SAFETY: kill(2) of a process this containerd started (found by its socket path).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for sandbox in &left {
            let path = Path::new(&sandbox.netns);
            if !sandbox.netns.is_empty() && path.exists() {
                let _ = process::run("umount", &["-l", &sandbox.netns]);
                let _ = std::fs::remove_file(path);
            }
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let dir = self.dir.display().to_string();
        let mut mounts: Vec<&str> = mountinfo
            .lines()
            .filter_map(|line| line.split_whitespace().nth(4))
            .filter(|point| point.starts_with(dir.as_str()))
            .collect();
        mounts.sort_unstable_by_key(|point| std::cmp::Reverse(point.len()));
        for point in mounts {
            let _ = process::run("umount", &["-l", point]);
        }
        remove_cgroups(&self.cgroup_parent);
    }
}

/// Removes `parent` and the cgroups under it from every cgroup hierarchy.
fn remove_cgroups(parent: &str) {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    let relative = parent.trim_start_matches('/');
    for hierarchy in hierarchies.flatten() {
        let root = hierarchy.path().join(relative);
        if let Ok(children) = std::fs::read_dir(&root) {
            for child in children.flatten() {
                if child.path().is_dir() {
                    let _ = std::fs::remove_dir(child.path());
                }
            }
        }
        let _ = std::fs::remove_dir(&root);
    }
    let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup").join(relative));
}
