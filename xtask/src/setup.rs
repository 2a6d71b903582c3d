//! `cargo xtask setup`: brings a fresh Debian 12 machine (as root) to the state the project needs,
//! idempotently: Debian packages, the nightly `rust-src` component, `bpf-linker` built against
//! LLVM 22, `kubernetes-validate` and the CRI client's `grpcio-tools` in a virtualenv. Every step first checks, and only acts when
//! something is missing; it prints what it found and what it did. Touches: apt/dpkg, rustup,
//! `cargo install`, `$HOME/.cache/ovnbpf/venv`, the bpffs mount.

use std::process::Command;

use anyhow::{Context, Result, bail};

use ovnbpf_tests::process;

use crate::cmd::run_checked;

/// Debian packages, grouped by why we need them.
pub const APT_PACKAGES: &[(&str, &str)] = &[
    (
        "llvm-22-dev",
        "bpf-linker links eBPF objects with LLVM 22 (nightly's LLVM)",
    ),
    (
        "libpolly-22-dev",
        "required by llvm-22-dev's cmake config when linking bpf-linker",
    ),
    (
        "ovn-central",
        "real ovn-northd and the OVN NB/SB schemas for the lab",
    ),
    ("ovn-host", "real ovn-controller, the interop peer"),
    (
        "openvswitch-switch",
        "ovsdb-server and ovs-vswitchd (userspace datapath)",
    ),
    ("iproute2", "ip netns / ip link in tests"),
    ("iputils-ping", "ping in tests"),
    (
        "nftables",
        "nft: the agent masquerades NAT-outgoing subnets with it (and the tests check it)",
    ),
    ("iperf3", "throughput benchmarks"),
    ("sockperf", "TCP request/response latency benchmarks"),
    (
        "containernetworking-plugins",
        "reference CNI plugins (tuning, portmap, bandwidth) chained after ovnbpf in tests",
    ),
    (
        "containerd",
        "a real container runtime (with runc) driving the CNI plugin through its CRI in tests",
    ),
    (
        "podman",
        "loads and runs the image `cargo xtask image` writes (the second runtime it is checked with)",
    ),
    (
        "gcc",
        "compiles the static pause binary of the tests' locally built sandbox image",
    ),
    ("libc6-dev", "the static C library the pause binary links"),
    ("tcpdump", "captures in tests"),
    ("ethtool", "offload settings on veths"),
    ("bpftool", "inspecting loaded programs"),
    (
        "python3-venv",
        "a virtualenv for kubernetes-validate (deploy/ manifests checked in tests) and the CRI client",
    ),
];

const BPF_LINKER_VERSION: &str = "0.13";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

pub struct Options {
    /// Only report; fail if anything is missing instead of installing it.
    pub check_only: bool,
}

pub fn run(options: &Options) -> Result<()> {
    println!(
        "== setup: checking the machine ({} mode)",
        mode_name(options)
    );
    let missing_packages = missing_apt_packages()?;
    if missing_packages.is_empty() {
        println!("ok   apt packages: all {} present", APT_PACKAGES.len());
    } else {
        install_apt_packages(options, &missing_packages)?;
    }
    ensure_rust_src(options)?;
    ensure_bpf_linker(options)?;
    ensure_cargo_fuzz(options)?;
    ensure_manifest_validator(options)?;
    ensure_cri_client(options)?;
    ensure_bpffs(options)?;
    check_kernel()?;
    println!("== setup: done");
    Ok(())
}

fn mode_name(options: &Options) -> &'static str {
    if options.check_only {
        "check"
    } else {
        "install"
    }
}

fn require_root(what: &str) -> Result<()> {
    if !is_root() {
        bail!("{what} needs root; run `cargo xtask setup` as root");
    }
    Ok(())
}

pub use ovnbpf_tests::is_root;

fn missing_apt_packages() -> Result<Vec<&'static str>> {
    let mut missing = Vec::new();
    for (package, _) in APT_PACKAGES {
        let output = Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", package])
            .output()
            .context("running dpkg-query (is this Debian?)")?;
        let status = String::from_utf8_lossy(&output.stdout);
        if !(output.status.success() && status.contains("install ok installed")) {
            missing.push(*package);
        }
    }
    Ok(missing)
}

fn install_apt_packages(options: &Options, missing: &[&str]) -> Result<()> {
    for package in missing {
        let why = APT_PACKAGES
            .iter()
            .find(|(name, _)| name == package)
            .map_or("", |(_, why)| why);
        println!("miss apt package {package}: {why}");
    }
    if options.check_only {
        bail!(
            "missing apt packages: {} (run `cargo xtask setup`)",
            missing.join(" ")
        );
    }
    require_root("installing apt packages")?;
    println!("do   apt-get update");
    run_checked(Command::new("apt-get").args(["update", "-q"]))?;
    println!("do   apt-get install {}", missing.join(" "));
    run_checked(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-q"])
            .args(missing),
    )?;
    let still_missing = missing_apt_packages()?;
    if !still_missing.is_empty() {
        bail!(
            "apt-get install finished but these are still missing: {}",
            still_missing.join(" ")
        );
    }
    println!("done apt packages installed");
    Ok(())
}

fn ensure_rust_src(options: &Options) -> Result<()> {
    let installed = process::output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))
    .context("listing nightly components (is the nightly toolchain installed?)")?;
    if installed.lines().any(|line| line.starts_with("rust-src")) {
        println!("ok   rust-src for nightly");
        return Ok(());
    }
    if options.check_only {
        bail!("rust-src is missing for the nightly toolchain (run `cargo xtask setup`)");
    }
    println!("do   rustup component add rust-src --toolchain nightly");
    run_checked(Command::new("rustup").args([
        "component",
        "add",
        "rust-src",
        "--toolchain",
        "nightly",
    ]))
}

fn bpf_linker_version() -> Option<String> {
    let output = Command::new("bpf-linker").arg("--version").output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn ensure_bpf_linker(options: &Options) -> Result<()> {
    if let Some(version) = bpf_linker_version() {
        if version.contains(&format!(" {BPF_LINKER_VERSION}.")) {
            println!("ok   {version}");
            return Ok(());
        }
        println!("miss bpf-linker {BPF_LINKER_VERSION}.x (found: {version})");
    } else {
        println!("miss bpf-linker (not on PATH)");
    }
    if options.check_only {
        bail!("bpf-linker {BPF_LINKER_VERSION} is missing (run `cargo xtask setup`)");
    }
    println!(
        "do   cargo install bpf-linker@{BPF_LINKER_VERSION} against {LLVM_PREFIX} (takes ~2 min)"
    );
    run_checked(
        Command::new("cargo")
            .env("LLVM_PREFIX", LLVM_PREFIX)
            .args([
                "install",
                "bpf-linker",
                "--version",
                &format!("~{BPF_LINKER_VERSION}"),
            ])
            .args(["--no-default-features", "--features", "llvm-22"]),
    )?;
    match bpf_linker_version() {
        Some(version) => {
            println!("done {version}");
            Ok(())
        }
        None => bail!(
            "bpf-linker was installed but is not on PATH; add $CARGO_HOME/bin (usually ~/.cargo/bin) to PATH"
        ),
    }
}

/// cargo-fuzz drives the fuzz targets (libFuzzer, nightly) that the test suite runs briefly.
fn ensure_cargo_fuzz(options: &Options) -> Result<()> {
    let installed = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|out| out.status.success());
    if installed {
        println!("ok   cargo-fuzz");
        return Ok(());
    }
    if options.check_only {
        bail!("cargo-fuzz is missing (run `cargo xtask setup`)");
    }
    println!("do   cargo install cargo-fuzz --locked (takes ~1 min)");
    run_checked(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
}

/// `kubernetes-validate` in its own virtualenv (Debian's Python refuses system-wide pip).
fn ensure_manifest_validator(options: &Options) -> Result<()> {
    use ovnbpf_tests::manifests::{VALIDATOR_VERSION, validator, venv};
    let installed = Command::new(validator())
        .arg("--version")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(VALIDATOR_VERSION));
    if installed {
        println!("ok   kubernetes-validate {VALIDATOR_VERSION}");
        return Ok(());
    }
    if options.check_only {
        bail!("kubernetes-validate is missing (run `cargo xtask setup`)");
    }
    let venv = venv();
    println!(
        "do   python3 -m venv {0}; {0}/bin/pip install kubernetes-validate=={VALIDATOR_VERSION}",
        venv.display()
    );
    run_checked(
        Command::new("/usr/bin/python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv),
    )?;
    run_checked(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet"])
            .arg(format!("kubernetes-validate=={VALIDATOR_VERSION}")),
    )
}

/// `grpcio-tools` in the same virtualenv: the tests' CRI client (`tests/cri/cri.py`) loads its
/// `.proto` with it and talks gRPC to containerd (Debian has no crictl).
fn ensure_cri_client(options: &Options) -> Result<()> {
    use ovnbpf_tests::manifests::venv;
    const GRPCIO_TOOLS_VERSION: &str = "1.85.1";
    let python = venv().join("bin/python");
    let installed = Command::new(&python)
        .args(["-c", "import grpc, grpc_tools; print(grpc_tools.__name__)"])
        .output()
        .is_ok_and(|out| out.status.success());
    if installed {
        println!("ok   grpcio-tools (CRI client)");
        return Ok(());
    }
    if options.check_only {
        bail!("grpcio-tools is missing from the venv (run `cargo xtask setup`)");
    }
    println!(
        "do   {}/bin/pip install grpcio-tools=={GRPCIO_TOOLS_VERSION}",
        venv().display()
    );
    run_checked(
        Command::new(venv().join("bin/pip"))
            .args(["install", "--quiet"])
            .arg(format!("grpcio-tools=={GRPCIO_TOOLS_VERSION}")),
    )
}

fn ensure_bpffs(options: &Options) -> Result<()> {
    let mounts = std::fs::read_to_string("/proc/mounts").context("reading /proc/mounts")?;
    if mounts
        .lines()
        .any(|line| line.split_whitespace().nth(2) == Some("bpf"))
    {
        println!("ok   bpffs mounted");
        return Ok(());
    }
    if options.check_only {
        bail!("no bpf filesystem is mounted at /sys/fs/bpf (run `cargo xtask setup`)");
    }
    require_root("mounting bpffs")?;
    println!("do   mount -t bpf bpf /sys/fs/bpf");
    run_checked(Command::new("mount").args(["-t", "bpf", "bpf", "/sys/fs/bpf"]))
}

fn check_kernel() -> Result<()> {
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!(
            "the kernel exposes no BTF (/sys/kernel/btf/vmlinux); ovnbpf needs CONFIG_DEBUG_INFO_BTF"
        );
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("ok   kernel {} with BTF", release.trim());
    Ok(())
}
