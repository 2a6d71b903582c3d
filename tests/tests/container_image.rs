//! ovnbpf's image, both ways it is made. `deploy/Containerfile` needs a registry's base images
//! and a build engine, neither of which this machine has, so it is read here as a build tool
//! reads it (instructions, stages, exec-form entrypoint) and held to what `cargo xtask image`
//! ships: the same binaries at the same paths, built the same way, the same entrypoint and PATH,
//! the Debian packages of every shared library and system program the archive carries, the
//! toolchain versions `cargo xtask setup` installs. The archive itself is loaded and run by
//! podman (no daemon, storage in a scratch directory); containerd runs it in `containerd_cri`.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

use ovnbpf_tests::{oci, process, require_root, workspace_binary};
use serde_json::Value;

fn workspace_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// One instruction of a Containerfile: its keyword (upper case) and its arguments, continuation
/// lines joined.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    args: String,
}

/// A Containerfile's instructions; an unknown keyword or a lower-case one is an error.
fn instructions(text: &str) -> Vec<Instruction> {
    const KEYWORDS: &[&str] = &[
        "FROM",
        "ARG",
        "ENV",
        "RUN",
        "COPY",
        "WORKDIR",
        "ENTRYPOINT",
        "CMD",
        "LABEL",
        "USER",
        "EXPOSE",
    ];
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(start) => {
                current.push_str(start);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                logical.push(std::mem::take(&mut current));
            }
        }
    }
    assert!(current.is_empty(), "a continuation at the end: {current}");
    logical
        .into_iter()
        .map(|line| {
            let (keyword, args) = line.split_once(' ').unwrap_or((&line, ""));
            assert!(
                KEYWORDS.contains(&keyword),
                "unknown or lower-case instruction {keyword:?} in {line:?}"
            );
            Instruction {
                keyword: keyword.to_string(),
                args: args.split_whitespace().collect::<Vec<_>>().join(" "),
            }
        })
        .collect()
}

/// A build stage: its base image, name and instructions after `FROM`.
#[derive(Debug)]
struct Stage {
    base: String,
    name: Option<String>,
    instructions: Vec<Instruction>,
}

fn stages(instructions: Vec<Instruction>) -> (Vec<Instruction>, Vec<Stage>) {
    let mut global_args = Vec::new();
    let mut stages: Vec<Stage> = Vec::new();
    for instruction in instructions {
        if instruction.keyword == "FROM" {
            let words: Vec<&str> = instruction.args.split(' ').collect();
            let (base, name) = match words.as_slice() {
                [base] => (*base, None),
                [base, r#as, name] if r#as.eq_ignore_ascii_case("as") => (*base, Some(*name)),
                _ => panic!("FROM {}", instruction.args),
            };
            stages.push(Stage {
                base: base.to_string(),
                name: name.map(str::to_string),
                instructions: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage.instructions.push(instruction);
        } else {
            assert_eq!(instruction.keyword, "ARG", "only ARG may precede FROM");
            global_args.push(instruction);
        }
    }
    (global_args, stages)
}

impl Stage {
    fn all<'a>(&'a self, keyword: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.instructions
            .iter()
            .filter(move |i| i.keyword == keyword)
            .map(|i| i.args.as_str())
    }

    /// `ARG NAME=VALUE`'s value.
    fn arg(&self, name: &str) -> Option<String> {
        self.all("ARG")
            .find_map(|args| args.strip_prefix(&format!("{name}=")).map(str::to_string))
    }

    /// The packages of its `apt-get install` commands.
    fn apt_packages(&self) -> BTreeSet<String> {
        let mut packages = BTreeSet::new();
        for run in self.all("RUN") {
            for command in run.split("&&") {
                let words: Vec<&str> = command.split_whitespace().collect();
                if words.starts_with(&["apt-get", "install"]) {
                    packages.extend(
                        words[2..]
                            .iter()
                            .filter(|w| !w.starts_with('-'))
                            .map(|w| w.to_string()),
                    );
                }
            }
        }
        packages
    }
}

/// The Debian package that installed `path` (usr-merged paths tried both ways).
fn debian_package(path: &Path) -> String {
    let text = path.display().to_string();
    let mut candidates = vec![text.clone()];
    if let Some(rest) = text.strip_prefix("/usr") {
        candidates.push(rest.to_string());
    } else {
        candidates.push(format!("/usr{text}"));
    }
    for candidate in &candidates {
        if let Ok(found) = process::output(Command::new("dpkg").args(["-S", candidate])) {
            let package = found.split(':').next().unwrap_or_default().trim();
            return package.to_string();
        }
    }
    panic!("no Debian package has {text}");
}

#[test]
fn the_containerfile_ships_what_xtask_image_ships() {
    let text = std::fs::read_to_string(workspace_file("deploy/Containerfile")).unwrap();
    let (global_args, stages) = stages(instructions(&text));
    assert!(global_args.is_empty(), "{global_args:?}");
    let [build, runtime] = stages.as_slice() else {
        panic!("two stages (build, runtime): {stages:?}");
    };

    // Built as `cargo xtask image` builds: release, the agent's and the CNI plugin's binaries,
    // with the toolchain `cargo xtask setup` installs.
    let cargo_toml = std::fs::read_to_string(workspace_file("Cargo.toml")).unwrap();
    let rust_version = cargo_toml
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"');
    assert_eq!(
        build.base,
        format!("docker.io/library/rust:{rust_version}-bookworm")
    );
    let setup = std::fs::read_to_string(workspace_file("xtask/src/setup.rs")).unwrap();
    let linker = build.arg("BPF_LINKER_VERSION").unwrap();
    assert!(
        setup.contains(&format!("const BPF_LINKER_VERSION: &str = \"{linker}\";")),
        "bpf-linker {linker} is not the one setup installs"
    );
    let llvm = build.arg("LLVM_VERSION").unwrap();
    assert!(setup.contains(&format!(
        "const LLVM_PREFIX: &str = \"/usr/lib/llvm-{llvm}\";"
    )));
    assert!(
        build
            .all("RUN")
            .any(|run| run.contains("--component rust-src"))
    );
    let cargo_build = build
        .all("RUN")
        .find(|run| run.starts_with("cargo build"))
        .expect("a cargo build");
    for part in [
        "--release",
        "--locked",
        "--package ovnbpf-agent",
        "--package ovnbpf-cni",
        "--bins",
    ] {
        assert!(cargo_build.contains(part), "{cargo_build}: no {part}");
    }
    let workdir = build.all("WORKDIR").last().expect("the build's WORKDIR");

    // The runtime holds the archive's binaries at its paths, its entrypoint and PATH.
    let stage_names: Vec<&str> = stages.iter().filter_map(|s| s.name.as_deref()).collect();
    let mut copied = BTreeSet::new();
    for copy in runtime.all("COPY") {
        let words: Vec<&str> = copy.split(' ').collect();
        let [from, source, destination] = words.as_slice() else {
            panic!("COPY --from=STAGE SOURCE DESTINATION: {copy}");
        };
        let stage = from.strip_prefix("--from=").expect("COPY --from=");
        assert!(stage_names.contains(&stage), "no stage {stage}");
        let binary = destination.rsplit('/').next().unwrap();
        assert_eq!(*source, format!("{workdir}/target/release/{binary}"));
        copied.insert(destination.to_string());
    }
    let bin_dir = workspace_binary("ovnbpf-agent")
        .parent()
        .unwrap()
        .to_path_buf();
    let image = oci::ovnbpf_image(&bin_dir, "localhost/ovnbpf:test").unwrap();
    let shipped: BTreeSet<String> = image
        .files
        .iter()
        .filter(|f| f.path.starts_with("/usr/local/bin/"))
        .map(|f| f.path.clone())
        .collect();
    assert_eq!(copied, shipped);
    let entrypoint: Vec<String> =
        serde_json::from_str(runtime.all("ENTRYPOINT").last().unwrap()).expect("exec form");
    assert_eq!(entrypoint, image.entrypoint);
    let env: Vec<String> = runtime.all("ENV").map(str::to_string).collect();
    assert_eq!(env, image.env);

    // The archive's shared libraries and system programs come from this Debian 12's packages:
    // the runtime is Debian 12 and installs each of those packages.
    let debian = std::fs::read_to_string("/etc/debian_version").unwrap();
    assert!(debian.starts_with("12."), "this machine is Debian {debian}");
    assert_eq!(runtime.base, "docker.io/library/debian:12-slim");
    let installed = runtime.apt_packages();
    let mut needed = BTreeSet::new();
    for binary in oci::OVNBPF_BINARIES {
        for library in oci::shared_libraries(&bin_dir.join(binary)).unwrap() {
            needed.insert(debian_package(&library));
        }
    }
    for program in oci::SYSTEM_PROGRAMS {
        assert!(image.files.iter().any(|f| f.path == *program));
        needed.insert(debian_package(Path::new(program)));
    }
    let missing: Vec<_> = needed.difference(&installed).collect();
    assert!(
        missing.is_empty(),
        "the runtime stage does not install {missing:?}"
    );
}

/// podman with its storage and state in a scratch directory, everything it made removed on
/// drop.
struct Podman {
    dir: tempfile::TempDir,
}

impl Podman {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self) -> Command {
        let path = |name: &str| self.dir.path().join(name);
        let mut command = Command::new("podman");
        command
            .arg("--root")
            .arg(path("root"))
            .arg("--runroot")
            .arg(path("run"))
            .arg("--tmpdir")
            .arg(path("tmp"))
            .args([
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "none",
            ]);
        command
    }

    fn run(&self, args: &[&str]) -> String {
        process::output(self.command().args(args))
            .unwrap_or_else(|error| panic!("podman {args:?}: {error:#}"))
    }

    /// Runs `image` without a network (its own namespace with only `lo`). The limits are
    /// explicit: podman's defaults for root (1048576 open files and processes) are above the
    /// caller's hard limits, and raising those needs CAP_SYS_RESOURCE, which a sandbox may lack.
    fn run_image(&self, image: &str, entrypoint: &str, args: &[&str]) -> String {
        let mut all = vec![
            "run",
            "--rm",
            "--network",
            "none",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            "--entrypoint",
            entrypoint,
            image,
        ];
        all.extend_from_slice(args);
        self.run(&all)
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        for args in [["rm", "--all", "--force"], ["rmi", "--all", "--force"]] {
            let _ = self.command().args(args).output();
        }
    }
}

#[test]
fn podman_loads_and_runs_the_archive() {
    require_root();
    assert!(
        Command::new("podman").arg("--version").output().is_ok(),
        "podman is missing (run `cargo xtask setup`)"
    );
    let work = tempfile::tempdir().unwrap();
    let bin = work.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for binary in oci::OVNBPF_BINARIES {
        process::output(
            Command::new("objcopy")
                .arg("--strip-debug")
                .arg(workspace_binary(binary))
                .arg(bin.join(binary)),
        )
        .unwrap();
    }
    let name = "localhost/ovnbpf:test";
    let archive = work.path().join("ovnbpf.oci.tar");
    let image = oci::ovnbpf_image(&bin, name).unwrap();
    oci::write_archive(&image, &archive).unwrap();

    let podman = Podman::new();
    let loaded = podman.run(&["load", "--input", &archive.display().to_string()]);
    assert!(loaded.contains(name), "{loaded}");
    let inspected: Value = serde_json::from_str(&podman.run(&["image", "inspect", name])).unwrap();
    let config = &inspected[0]["Config"];
    assert_eq!(config["Entrypoint"], serde_json::json!(image.entrypoint));
    assert_eq!(config["Env"], serde_json::json!(image.env));

    let version = podman.run_image(name, oci::ENTRYPOINT, &["--version"]);
    assert!(version.starts_with("ovnbpf-agent "), "{version}");
    let ctl = podman.run_image(name, "/usr/local/bin/ovnbpfctl", &["--version"]);
    assert!(ctl.starts_with("ovnbpfctl "), "{ctl}");
    // The CNI's CHECK reads a pod's NIC with `ip`: it runs in the image.
    let links = podman.run_image(name, "/usr/bin/ip", &["-o", "link", "show", "dev", "lo"]);
    assert!(links.contains(": lo: <LOOPBACK"), "{links}");
    // The agent masquerades NAT-outgoing subnets with `nft`: it runs in the image.
    let nft = podman.run_image(name, "/usr/sbin/nft", &["--version"]);
    assert!(nft.starts_with("nftables v"), "{nft}");
}
