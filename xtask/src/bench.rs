//! `cargo xtask bench …`: measurements that compare ovnbpf with a baseline taken in the same run,
//! print a table and write JSON under target/bench/. Never part of the test suite.
//!
//! `bench compile [--pods …] [--updates 20]`: the full SB → IR compile (time, IR entries, RSS it
//! adds) and the compile cost of each single-pod change, next to the replica's own sync and apply
//! cost in the same run as the baseline.
//!
//! `bench datapath`: see [`crate::bench_datapath`]. `bench cni`: see [`crate::bench_cni`].
//!
//! `bench sb [--pods 1000,10000,50000] [--updates 20]`: for each size, a real OVN central with a
//! Kube-OVN-like topology of that many pod ports; baseline = `ovsdb-client dump` of the SB (wall
//! time, peak RSS); ovnbpf = `ovnbpfctl sb-sync` (initial sync wall time, peak RSS, and the time
//! to apply each of `--updates` single-pod NB changes to the replica and its indexes).

use std::{
    io::{BufRead, BufReader, Read},
    net::Ipv4Addr,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use ovnbpf_tests::{
    kubeovn::{Topology, mac_for},
    ovn::{Db, OvnLab},
};
use serde_json::{Value, json};

use crate::cmd;

pub fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("sb") => bench_sb(&args[1..]),
        Some("compile") => bench_compile(&args[1..]),
        Some("datapath") => crate::bench_datapath::run(&args[1..]),
        Some("cni") => crate::bench_cni::run(&args[1..]),
        _ => bail!(
            "usage: cargo xtask bench sb|compile [--pods 1000,10000,50000] [--updates 20] | datapath [--runs 3] [--seconds 5] [--flood-runs 5000] [--broadcast-only] | cni [--pods 100] [--concurrency 10]"
        ),
    }
}

pub(crate) fn option<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// What one measured child process cost.
struct Measured {
    wall: Duration,
    max_rss_kib: u64,
    stdout: String,
}

/// Waits for `pid` with wait4(2) to get its peak RSS.
fn wait_measured(pid: u32) -> Result<u64> {
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child `pid`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = i32::try_from(pid)?;
    // SAFETY: waiting for our own child; pointers are valid for the call.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if rc != pid {
        bail!("wait4({pid}) failed: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("measured process {pid} failed (status {status})");
    }
    Ok(u64::try_from(usage.ru_maxrss).unwrap_or(0))
}

fn measure(command: &mut Command) -> Result<Measured> {
    let started = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut stdout)?;
    }
    let max_rss_kib = wait_measured(child.id())?;
    Ok(Measured {
        wall: started.elapsed(),
        max_rss_kib,
        stdout,
    })
}

/// Default VPC plus three custom VPCs, `pods` pod ports spread over four /16 subnets.
fn populate(lab: &OvnLab, pods: u32) -> Result<()> {
    let subnets = [
        ("ovn-cluster", "ovn-default", [10, 16]),
        ("vpc-a", "subnet-a", [10, 0]),
        ("vpc-b", "subnet-b", [10, 1]),
        ("vpc-c", "subnet-c", [10, 0]),
    ];
    let mut topology = Topology::new();
    topology.default_vpc()?;
    for (vpc, subnet, [a, b]) in subnets.iter().skip(1) {
        topology.vpc_with_subnet(vpc, subnet, &format!("{a}.{b}.0.0/16"))?;
    }
    topology.apply(lab)?;
    // Pods are written like Kube-OVN's controller writes them (libovsdb transactions: insert the
    // LSPs, add them to their switch), in batches that keep each `ovsdb-client transact` argument
    // under the kernel's 128 KiB limit. ovn-nbctl would re-read the whole NB on every call.
    let nb = lab.unix_remote(Db::Northbound);
    for batch in (0..pods).collect::<Vec<_>>().chunks(250) {
        let mut operations = vec![json!("OVN_Northbound")];
        let mut members: Vec<Vec<Value>> = vec![Vec::new(); subnets.len()];
        for &index in batch {
            let which = (index % 4) as usize;
            let (_, subnet, [a, b]) = subnets[which];
            let host = 2 + index / 4;
            let ip = Ipv4Addr::new(a, b, (host >> 8) as u8, (host & 0xff) as u8);
            let pod = format!("pod-{index}");
            let handle = format!("lsp{index}");
            operations.push(json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": handle,
                "row": {"name": format!("{pod}.bench"), "addresses": format!("{} {ip}", mac_for(&pod)),
                        "external_ids": ["map", [["pod", format!("bench/{pod}")], ["ls", subnet], ["ip", ip.to_string()], ["vendor", "kube-ovn"]]]}}));
            members[which].push(json!(["named-uuid", handle]));
        }
        for ((_, subnet, _), ports) in subnets.iter().zip(members) {
            if !ports.is_empty() {
                operations.push(json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", subnet]],
                    "mutations": [["ports", "insert", ["set", ports]]]}));
            }
        }
        let transaction = Value::Array(operations).to_string();
        cmd::output(Command::new("ovsdb-client").args(["transact", &nb, &transaction]))
            .context("inserting pods into the NB")?;
    }
    lab.nbctl(&["--timeout=1800", "--wait=sb", "sync"])?;
    Ok(())
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile(&values, 50.0)
}

fn sizes(args: &[String]) -> Result<Vec<u32>> {
    option(args, "--pods")
        .unwrap_or("1000,10000,50000")
        .split(',')
        .map(|n| n.trim().parse().context("--pods takes numbers"))
        .collect()
}

fn numbers(report: &Value, key: &str) -> Vec<f64> {
    report[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect()
}

fn bench_sb(args: &[String]) -> Result<()> {
    let sizes = sizes(args)?;
    let updates: usize = option(args, "--updates").unwrap_or("20").parse()?;
    println!("== bench sb: building ovnbpfctl (release)");
    let ctl = cmd::build_binaries(cmd::Profile::Release)?.ctl;
    let mut results = Vec::new();
    for pods in sizes {
        println!("== bench sb: {pods} pods: building the topology");
        let lab = OvnLab::start()?;
        let started = Instant::now();
        populate(&lab, pods)?;
        println!(
            "   NB + northd took {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let remote = lab.unix_remote(Db::Southbound);

        let mut dump_ms = Vec::new();
        let mut dump_rss = 0;
        for _ in 0..3 {
            let measured =
                measure(Command::new("ovsdb-client").args(["dump", &remote, "OVN_Southbound"]))?;
            dump_ms.push(measured.wall.as_secs_f64() * 1000.0);
            dump_rss = dump_rss.max(measured.max_rss_kib);
        }
        let mut sync_ms = Vec::new();
        let mut sync_rss = 0;
        let mut rows = 0;
        for _ in 0..2 {
            let measured = measure(Command::new(&ctl).args(["sb-sync", "--remote", &remote]))?;
            let report: Value = serde_json::from_str(&measured.stdout)?;
            sync_ms.push(measured.wall.as_secs_f64() * 1000.0);
            sync_rss = sync_rss.max(measured.max_rss_kib);
            rows = report["rows"].as_u64().unwrap_or(0);
        }
        let mut apply_us = numbers(
            &sync_and_update(&lab, &ctl, &remote, updates, &[])?,
            "apply_us",
        );
        apply_us.sort_by(f64::total_cmp);
        results.push(json!({
            "pods": pods, "sb_rows": rows,
            "baseline_dump_ms": median(dump_ms), "baseline_dump_max_rss_kib": dump_rss,
            "ovnbpf_sync_ms": median(sync_ms), "ovnbpf_sync_max_rss_kib": sync_rss,
            "apply_p50_us": percentile(&apply_us, 50.0), "apply_p99_us": percentile(&apply_us, 99.0),
            "updates": apply_us.len(),
        }));
    }
    print_sb_table(&results);
    write_json("sb", &results)
}

pub(crate) fn write_json(bench: &str, results: &[Value]) -> Result<()> {
    std::fs::create_dir_all("target/bench")?;
    let path = format!("target/bench/{bench}.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json!({"bench": bench, "results": results}))?,
    )?;
    println!("wrote {path}");
    Ok(())
}

/// Runs `ovnbpfctl sb-sync` (with `extra` arguments), makes `updates` single-pod NB changes once
/// it has synced (each one SB transaction by northd), and returns its JSON report.
fn sync_and_update(
    lab: &OvnLab,
    ctl: &std::path::Path,
    remote: &str,
    updates: usize,
    extra: &[&str],
) -> Result<Value> {
    let mut child = Command::new(ctl)
        .args([
            "sb-sync",
            "--remote",
            remote,
            "--updates",
            &updates.to_string(),
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().context("stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.trim() == "synced" => break,
            Some(Ok(_)) => {}
            _ => bail!("ovnbpfctl sb-sync ended before syncing"),
        }
    }
    for i in 0..updates {
        let pod = format!("bench-update-{i}");
        let port = format!("{pod}.bench");
        let addresses = format!("{} 10.0.255.{}", mac_for(&pod), 10 + i % 200);
        lab.nbctl(&[
            "--timeout=600",
            "--wait=sb",
            "lsp-add",
            "subnet-a",
            &port,
            "--",
            "lsp-set-addresses",
            &port,
            &addresses,
        ])?;
    }
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .context("stdout")?
        .read_to_string(&mut stdout)?;
    let status = child.wait()?;
    if !status.success() {
        bail!("ovnbpfctl sb-sync failed: {status}");
    }
    Ok(serde_json::from_str(&stdout)?)
}

/// `bench compile`: full SB → IR compile time and IR memory, and the cost of one pod change,
/// against the replica's own sync and apply cost in the same run as the baseline.
fn bench_compile(args: &[String]) -> Result<()> {
    let sizes = sizes(args)?;
    let updates: usize = option(args, "--updates").unwrap_or("20").parse()?;
    println!("== bench compile: building ovnbpfctl (release)");
    let ctl = cmd::build_binaries(cmd::Profile::Release)?.ctl;
    let mut results = Vec::new();
    for pods in sizes {
        println!("== bench compile: {pods} pods: building the topology");
        let lab = OvnLab::start()?;
        populate(&lab, pods)?;
        let remote = lab.unix_remote(Db::Southbound);
        let report = sync_and_update(&lab, &ctl, &remote, updates, &["--compile"])?;
        let mut apply = numbers(&report, "apply_us");
        let mut compile = numbers(&report, "compile_us");
        let diffs = numbers(&report, "diff_entries");
        apply.sort_by(f64::total_cmp);
        compile.sort_by(f64::total_cmp);
        results.push(json!({
            "pods": pods, "sb_rows": report["rows"], "ir_entries": report["ir_entries"],
            "baseline_replica_sync_ms": report["sync_ms"], "full_compile_ms": report["compile_ms"],
            "ir_rss_kib": report["ir_rss_kib"],
            "baseline_replica_apply_p50_us": percentile(&apply, 50.0),
            "compile_p50_us": percentile(&compile, 50.0), "compile_p99_us": percentile(&compile, 99.0),
            "max_diff_entries": diffs.iter().copied().fold(0.0, f64::max),
            "updates": compile.len(),
        }));
    }
    println!();
    println!(
        "| pods | SB rows | IR entries | replica sync ms (baseline) | full compile ms | compile / sync | IR RSS MiB | replica apply p50 µs (baseline) | compile p50 µs | compile p99 µs | compile / apply (p50) | max IR diff per pod |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let f = |key: &str| r[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.1} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} |",
            r["pods"],
            r["sb_rows"],
            r["ir_entries"],
            f("baseline_replica_sync_ms"),
            f("full_compile_ms"),
            f("full_compile_ms") / f("baseline_replica_sync_ms"),
            f("ir_rss_kib") / 1024.0,
            f("baseline_replica_apply_p50_us"),
            f("compile_p50_us"),
            f("compile_p99_us"),
            f("compile_p50_us") / f("baseline_replica_apply_p50_us"),
            f("max_diff_entries"),
        );
    }
    write_json("compile", &results)
}

fn print_sb_table(results: &[Value]) {
    println!();
    println!(
        "| pods | SB rows | ovsdb-client dump ms | ovnbpf sync ms | sync / dump | dump peak RSS MiB | ovnbpf peak RSS MiB | RSS ratio | apply p50 µs | apply p99 µs |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let f = |key: &str| r[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {:.2} | {:.0} | {:.0} |",
            r["pods"],
            r["sb_rows"],
            f("baseline_dump_ms"),
            f("ovnbpf_sync_ms"),
            f("ovnbpf_sync_ms") / f("baseline_dump_ms"),
            f("baseline_dump_max_rss_kib") / 1024.0,
            f("ovnbpf_sync_max_rss_kib") / 1024.0,
            f("ovnbpf_sync_max_rss_kib") / f("baseline_dump_max_rss_kib"),
            f("apply_p50_us"),
            f("apply_p99_us"),
        );
    }
}
