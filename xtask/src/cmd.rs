//! Running external commands from xtask: echo-free helpers that turn a non-zero exit into an error
//! naming the command. Touches nothing but the processes it starts.

use std::process::Command;

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

/// Builds the agent's binaries (with the kernel programs) and returns the agent's path.
pub fn build_agent() -> Result<std::path::PathBuf> {
    run_checked(Command::new("cargo").args(["build", "--quiet", "--package", "ovnbpf-agent"]))?;
    Ok(std::path::PathBuf::from("target/debug/ovnbpf-agent"))
}

/// Runs `command` and returns its stdout; fails if it exits non-zero (stderr is included).
pub fn output(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("starting `{}`", describe(command)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}\n{}",
            describe(command),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
