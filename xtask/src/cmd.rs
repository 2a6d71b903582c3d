//! Running external commands from xtask: echo-free helpers that turn a non-zero exit into an error
//! naming the command (a command's stdout: the harness's `ovnbpf_tests::process::output`).
//! Touches nothing but the processes it starts.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

fn describe(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Runs `command` with inherited stdio; fails if it cannot start or exits non-zero.
pub fn run_checked(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("starting `{}`", describe(command)))?;
    if !status.success() {
        bail!("`{}` failed: {status}", describe(command));
    }
    Ok(())
}

/// How the workspace binaries are built: `Debug` for the demo and the lab, `Release` for benches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    Debug,
    Release,
}

/// The workspace binaries an xtask command runs, as absolute paths.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// `ovnbpf-agent` (with the kernel programs built in).
    pub agent: PathBuf,
    /// `ovnbpfctl`.
    pub ctl: PathBuf,
    /// `ovnbpf-cni`, the CNI plugin.
    pub cni: PathBuf,
}

/// The workspace's root (xtask lives one level below it), whatever the current directory.
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Builds every workspace binary a command runs (agent, ctl, CNI plugin) in `profile` and returns
/// their absolute paths, checked to exist: no command relies on a binary that another command
/// happened to build.
pub fn build_binaries(profile: Profile) -> Result<Binaries> {
    let root = workspace_root();
    let mut build = Command::new("cargo");
    build
        .current_dir(&root)
        .args(["build", "--quiet", "--package", "ovnbpf-agent"])
        .args(["--package", "ovnbpf-cni", "--bins"]);
    if profile == Profile::Release {
        build.arg("--release");
    }
    run_checked(&mut build)?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let dir = target.join(match profile {
        Profile::Debug => "debug",
        Profile::Release => "release",
    });
    let binary = |name: &str| -> Result<PathBuf> {
        let path = dir.join(name);
        path.canonicalize()
            .with_context(|| format!("{} was not built", path.display()))
    };
    Ok(Binaries {
        agent: binary("ovnbpf-agent")?,
        ctl: binary("ovnbpfctl")?,
        cni: binary("ovnbpf-cni")?,
    })
}
