//! `cargo xtask test`: the project's whole test suite, exactly what CI runs. Prepares the machine
//! (setup), removes leftovers of crashed test runs, checks formatting and lints, runs every test
//! as root, and verifies that nothing (namespaces, pin directories) was left behind.

use std::process::Command;

use anyhow::{Result, bail};
use ovnbpf_tests::{names, netns};

use crate::cmd::run_checked;

pub fn run(extra_args: &[String]) -> Result<()> {
    if !crate::setup::is_root() {
        bail!("the test suite needs root (network namespaces, eBPF, OVN daemons)");
    }
    reap("before");

    println!("== test: cargo fmt --check");
    run_checked(Command::new("cargo").args(["fmt", "--all", "--check"]))?;

    println!("== test: cargo clippy (AYA_BUILD_SKIP=1), warnings are errors");
    run_checked(Command::new("cargo").env("AYA_BUILD_SKIP", "1").args([
        "clippy",
        "--quiet",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;

    println!("== test: cargo test (unit, eBPF, netns and real-OVN integration tests)");
    let status = Command::new("cargo")
        .args(["test", "--workspace", "--exclude", "ovnbpf-ebpf"])
        .args(extra_args)
        .status()?;

    let leftovers: Vec<String> = netns::list_named()
        .into_iter()
        .filter(|name| names::owner_pid(name).is_some())
        .collect();
    reap("after");
    if !status.success() {
        bail!("tests failed ({status})");
    }
    if !leftovers.is_empty() {
        bail!("tests left network namespaces behind: {leftovers:?}");
    }
    println!("== test: all passed, nothing left behind");
    Ok(())
}

fn reap(when: &str) {
    let reaped = names::reap_stale();
    if !reaped.namespaces.is_empty() || !reaped.pin_dirs.is_empty() {
        println!("== test: removed leftovers of dead test runs {when} the suite: {reaped:?}");
    }
}
