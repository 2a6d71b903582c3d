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

    bpf_log_build()?;

    println!("== test: cargo test (unit, eBPF, netns and real-OVN integration tests)");
    let (status, counts) = run_cargo_test(extra_args)?;

    let fuzzed = if status.success() { fuzz() } else { Ok(()) };

    let leftovers: Vec<String> = netns::list_named()
        .into_iter()
        .filter(|name| names::owner_pid(name).is_some())
        .collect();
    reap("after");
    if !status.success() {
        println!(
            "tests: {} passed, {} failed",
            counts.passed,
            counts.failed.max(1)
        );
        bail!("tests failed ({status})");
    }
    fuzzed?;
    if !leftovers.is_empty() {
        bail!("tests left network namespaces behind: {leftovers:?}");
    }
    println!("== test: all passed, nothing left behind");
    // The plain summary CI reads: every test the suite ran (fuzz targets not counted).
    println!("tests: {} passed, {} failed", counts.passed, counts.failed);
    Ok(())
}

/// The agent built with its kernel programs' log statements (`--features bpf-log`, in a target
/// directory of its own so the suite's default build stays as it is) loads every program
/// through the verifier with logging on: a log statement that grows a program past the
/// verifier's limits (its stack, above all) fails here rather than for a developer.
fn bpf_log_build() -> Result<()> {
    println!("== test: the bpf-log build's programs pass the verifier with logs on");
    let target = crate::cmd::workspace_root().join("target/bpf-log");
    run_checked(
        Command::new("cargo")
            .args([
                "build",
                "--quiet",
                "-p",
                "ovnbpf-agent",
                "--bin",
                "ovnbpf-agent",
                "--features",
                "bpf-log",
                "--target-dir",
            ])
            .arg(&target),
    )?;
    run_checked(Command::new(target.join("debug/ovnbpf-agent")).args([
        "verify",
        "--bpf-log-level",
        "debug",
    ]))
}

#[derive(Default)]
struct Counts {
    passed: u64,
    failed: u64,
}

/// Runs `cargo test`, echoing its output, and sums its `test result:` lines.
fn run_cargo_test(extra_args: &[String]) -> Result<(std::process::ExitStatus, Counts)> {
    use std::io::{BufRead, BufReader};
    // The integration tests run the workspace's binaries (agent, ctl, CNI plugin); `cargo test`
    // builds a package's binaries only for that package's own integration tests.
    let built = Command::new("cargo")
        .args(["build", "--workspace", "--exclude", "ovnbpf-ebpf", "--bins"])
        .status()?;
    if !built.success() {
        return Ok((built, Counts::default()));
    }
    let mut child = Command::new("cargo")
        .args(["test", "--workspace", "--exclude", "ovnbpf-ebpf"])
        .args(extra_args)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut counts = Counts::default();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            println!("{line}");
            if let Some(summary) = line.strip_prefix("test result: ") {
                counts.passed += count_before(summary, " passed");
                counts.failed += count_before(summary, " failed");
            }
        }
    }
    Ok((child.wait()?, counts))
}

/// The number just before `label` in a `test result:` line (`ok. 3 passed; 0 failed; …`).
fn count_before(summary: &str, label: &str) -> u64 {
    summary
        .find(label)
        .and_then(|end| summary[..end].rsplit(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(0)
}

/// Fuzz targets and the seeds they start from.
const FUZZ_TARGETS: &[(&str, &str)] = &[
    ("ovsdb_stream", "agent/fuzz/seeds/ovsdb_stream"),
    ("lflow_round_trip", "agent/fuzz/seeds/lflow_round_trip"),
];

/// Runs every fuzz target for a bounded time (OVNBPF_FUZZ_SECONDS, default 30) from its seeds; a
/// crash fails the suite and leaves the reproducer under agent/fuzz/artifacts.
fn fuzz() -> Result<()> {
    let seconds = std::env::var("OVNBPF_FUZZ_SECONDS").unwrap_or_else(|_| "30".into());
    for (target, seeds) in FUZZ_TARGETS {
        println!("== test: fuzzing {target} for {seconds} s");
        let corpus = tempfile_dir(target)?;
        run_checked(
            Command::new("cargo")
                .env("AYA_BUILD_SKIP", "1")
                .args([
                    "+nightly",
                    "fuzz",
                    "run",
                    target,
                    "--fuzz-dir",
                    "agent/fuzz",
                ])
                .arg(&corpus)
                .arg(seeds)
                .args([
                    "--",
                    &format!("-max_total_time={seconds}"),
                    "-print_final_stats=1",
                ]),
        )?;
        let _ = std::fs::remove_dir_all(&corpus);
    }
    Ok(())
}

/// A fresh scratch corpus directory (libFuzzer writes new inputs into the first corpus dir).
fn tempfile_dir(target: &str) -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("ovnbpf-fuzz-{target}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn reap(when: &str) {
    let reaped = names::reap_stale();
    if !reaped.namespaces.is_empty() || !reaped.pin_dirs.is_empty() {
        println!("== test: removed leftovers of dead test runs {when} the suite: {reaped:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::count_before;

    #[test]
    fn result_lines_are_summed_field_by_field() {
        let line =
            "ok. 12 passed; 3 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.12s";
        assert_eq!(count_before(line, " passed"), 12);
        assert_eq!(count_before(line, " failed"), 3);
        assert_eq!(count_before("FAILED. 0 passed; 1 failed;", " failed"), 1);
        assert_eq!(count_before("garbage", " passed"), 0);
    }
}
