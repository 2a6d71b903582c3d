//! `bench sb [--pods 1000,10000,50000] [--updates 20]`: for each size, a real OVN central with a
//! Kube-OVN-like topology of that many pod ports; baseline = `ovsdb-client dump` of the SB (wall
//! time, peak RSS); ovnbpf = `ovnbpfctl sb-sync` (initial sync wall time, peak RSS, and the time
//! to apply each of `--updates` single-pod NB changes to the replica and its indexes). Also the
//! topology and the sync run `bench compile` shares.

use std::{
    io::{BufRead, BufReader, Read},
    net::Ipv4Addr,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use ovnbpf_tests::{
    kubeovn::{self, Topology, mac_for},
    ovn::{Db, OvnLab},
    process,
};
use serde_json::{Value, json};

use super::stats::{median, numbers, percentile, sizes, write_json};
use crate::{args::option, cmd};

/// What one measured child process cost.
pub(super) struct Measured {
    pub(super) wall: Duration,
    pub(super) max_rss_kib: u64,
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

/// Runs `command` to its end: its wall time, peak RSS and output.
pub(super) fn measure(command: &mut Command) -> Result<Measured> {
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

/// The VPCs and subnets [`populate`] spreads pods over: (VPC, switch, the /16's first octets).
const SUBNETS: [(&str, &str, [u8; 2]); 4] = [
    ("ovn-cluster", "ovn-default", [10, 16]),
    ("vpc-a", "subnet-a", [10, 0]),
    ("vpc-b", "subnet-b", [10, 1]),
    ("vpc-c", "subnet-c", [10, 0]),
];

/// Pod `pod-<index>`'s switch and address as [`populate`] writes them: round robin over the
/// four subnets, hosts from .2 up.
pub fn pod_address(index: u32) -> (&'static str, Ipv4Addr) {
    let (_, subnet, [a, b]) = SUBNETS[(index % 4) as usize];
    let host = 2 + index / 4;
    (
        subnet,
        Ipv4Addr::new(a, b, (host >> 8) as u8, (host & 0xff) as u8),
    )
}

/// Default VPC plus three custom VPCs, `pods` pod ports spread over four /16 subnets.
pub fn populate(lab: &OvnLab, pods: u32) -> Result<()> {
    let mut topology = Topology::new();
    topology.default_vpc()?;
    for (vpc, subnet, [a, b]) in SUBNETS.iter().skip(1) {
        topology.vpc_with_subnet(vpc, subnet, &format!("{a}.{b}.0.0/16"))?;
    }
    topology.apply(lab)?;
    // Pods are written like Kube-OVN's controller writes them (libovsdb transactions: insert the
    // LSPs, add them to their switch), in batches that keep each `ovsdb-client transact` argument
    // under the kernel's 128 KiB limit. ovn-nbctl would re-read the whole NB on every call.
    let nb = lab.unix_remote(Db::Northbound);
    for batch in (0..pods).collect::<Vec<_>>().chunks(250) {
        let mut operations = vec![json!("OVN_Northbound")];
        let mut members: Vec<Vec<Value>> = vec![Vec::new(); SUBNETS.len()];
        for &index in batch {
            let which = (index % 4) as usize;
            let (subnet, ip) = pod_address(index);
            let pod = format!("pod-{index}");
            let handle = format!("lsp{index}");
            let row = kubeovn::pod_port_row(subnet, &pod, "bench", &mac_for(&pod), ip);
            operations.push(
                json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": handle,
                "row": row}),
            );
            members[which].push(json!(["named-uuid", handle]));
        }
        for ((_, subnet, _), ports) in SUBNETS.iter().zip(members) {
            if !ports.is_empty() {
                operations.push(json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", subnet]],
                    "mutations": [["ports", "insert", ["set", ports]]]}));
            }
        }
        let transaction = Value::Array(operations).to_string();
        process::output(Command::new("ovsdb-client").args(["transact", &nb, &transaction]))
            .context("inserting pods into the NB")?;
    }
    lab.nbctl(&["--timeout=1800", "--wait=sb", "sync"])?;
    Ok(())
}

pub fn run(args: &[String]) -> Result<()> {
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

/// Runs `ovnbpfctl sb-sync` (with `extra` arguments), makes `updates` single-pod NB changes once
/// it has synced (each one SB transaction by northd), and returns its JSON report.
pub fn sync_and_update(
    lab: &OvnLab,
    ctl: &std::path::Path,
    remote: &str,
    updates: usize,
    extra: &[&str],
) -> Result<Value> {
    sync_and_change(lab, ctl, remote, updates, extra, &pod_change)
}

/// The `i`-th single-pod NB change: a new pod on subnet-a (ovn-nbctl arguments).
fn pod_change(i: usize) -> Result<Vec<String>> {
    let pod = format!("bench-update-{i}");
    let ip = Ipv4Addr::new(10, 0, 255, u8::try_from(10 + i % 200)?);
    Ok(Topology::new()
        .pod("subnet-a", &pod, "bench", &mac_for(&pod), ip)
        .take_args())
}

/// [`sync_and_update`] with `updates` NB changes of `change`'s making (ovn-nbctl arguments
/// for the `i`-th, each run as one transaction).
pub fn sync_and_change(
    lab: &OvnLab,
    ctl: &std::path::Path,
    remote: &str,
    updates: usize,
    extra: &[&str],
    change: &dyn Fn(usize) -> Result<Vec<String>>,
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
        let mut args = vec!["--timeout=600".to_string()];
        args.extend(change(i)?);
        lab.nbctl(&args)?;
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
