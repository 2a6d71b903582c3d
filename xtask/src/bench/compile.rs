//! `bench compile [--pods …] [--updates 20] [--ctl PATH]`: the full SB → IR compile (time, IR
//! entries, RSS it adds) and the compile cost of each single-pod change, next to the replica's own
//! sync and apply cost in the same run as the baseline (`--ctl`: another build's `ovnbpfctl`,
//! e.g. another commit's, to compare). For the slowest update it also prints the compiling
//! thread's CPU time, page faults and preemptions (a slow compile's own work, or a wait) and the
//! rows it changed. `bench compile --acls` instead: 1000 pods under 100
//! NetworkPolicies of 100 ports each (10,100 ACLs) whose peers are address sets of 500 addresses
//! (50,000 members), built as kube-ovn-controller builds them; the changes are one address
//! joining a set each (a pod matching a policy's selector). `bench compile --services`: 5000
//! Services of 10 backends each in the default VPC's TCP balancer, as kube-ovn-controller writes
//! them (on `ovn-default` and on a second subnet); the changes are one Service's backend list
//! (an endpoint replaced), what a rolling update does, each compiled and written into a loaded
//! eBPF datapath's maps (attached nowhere), from the update's arrival to the last map write.

use std::net::Ipv4Addr;

use anyhow::Result;
use ovnbpf_tests::{
    kubeovn::{DEFAULT_VPC, PolicyPort, PolicyRule, Topology},
    ovn::{Db, OvnLab},
};
use serde_json::json;

use super::{
    sb::{populate, sync_and_change, sync_and_update},
    stats::{numbers, percentile, sizes, write_json},
};
use crate::{args::option, cmd};

/// `bench compile`: full SB → IR compile time and IR memory, and the cost of one pod change,
/// against the replica's own sync and apply cost in the same run as the baseline.
pub fn run(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--acls") {
        return acls(args);
    }
    if args.iter().any(|a| a == "--services") {
        return services(args);
    }
    let sizes = sizes(args)?;
    let updates: usize = option(args, "--updates").unwrap_or("20").parse()?;
    let ctl = match option(args, "--ctl") {
        Some(path) => std::fs::canonicalize(path)?,
        None => {
            println!("== bench compile: building ovnbpfctl (release)");
            cmd::build_binaries(cmd::Profile::Release)?.ctl
        }
    };
    let mut results = Vec::new();
    for pods in sizes {
        println!("== bench compile: {pods} pods: building the topology");
        let lab = OvnLab::start()?;
        populate(&lab, pods)?;
        let remote = lab.unix_remote(Db::Southbound);
        let report = sync_and_update(&lab, &ctl, &remote, updates, &["--compile"])?;
        let mut apply = numbers(&report, "apply_us");
        let mut compile = numbers(&report, "compile_us");
        let slowest = slowest_update(&report);
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
            "slowest_update": slowest,
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
    for r in &results {
        let slowest = &r["slowest_update"];
        println!(
            "{} pods: the slowest update, #{}: {:.0} µs, of which the compiling thread ran {:.0} µs (page faults {}, preempted {} times); its rows {}; the next update's {}",
            r["pods"],
            slowest["index"],
            slowest["wall_us"].as_f64().unwrap_or(f64::NAN),
            slowest["cpu_us"].as_f64().unwrap_or(f64::NAN),
            slowest["page_faults"],
            slowest["preempted"],
            slowest["rows"],
            slowest["next_rows"],
        );
    }
    write_json("compile", &results)
}

/// The update whose compile took longest, with the compiling thread's CPU time, page faults
/// and preemptions during it (`ovnbpfctl sb-sync`'s report): whether a slow compile was its own
/// work or waited.
fn slowest_update(report: &serde_json::Value) -> serde_json::Value {
    let wall = numbers(report, "compile_us");
    let cpu = numbers(report, "compile_cpu_us");
    let faults = numbers(report, "compile_page_faults");
    let preempted = numbers(report, "compile_preempted");
    let Some((index, wall_us)) = wall
        .iter()
        .copied()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(&b.1))
    else {
        return serde_json::Value::Null;
    };
    json!({
        "index": index, "wall_us": wall_us, "cpu_us": cpu.get(index),
        "page_faults": faults.get(index), "preempted": preempted.get(index),
        "rows": report["update_rows"].get(index), "next_rows": report["update_rows"].get(index + 1),
    })
}

/// Policies, ports per policy (one ACL each), pods per policy and addresses per policy's set.
const POLICIES: usize = 100;
const PORTS_PER_POLICY: u16 = 100;
const PODS_PER_POLICY: usize = 10;
const ADDRESSES_PER_SET: u32 = 500;

/// The NB of `bench compile --acls`: [`populate`]'s 1000 pods, then the policies, ten per
/// ovn-nbctl transaction.
fn populate_policies(lab: &OvnLab) -> Result<()> {
    populate(lab, 1000)?;
    let ports: Vec<PolicyPort> = (0..PORTS_PER_POLICY)
        .map(|i| PolicyPort::Port("tcp", 1000 + i))
        .collect();
    for batch in (0..POLICIES).collect::<Vec<_>>().chunks(10) {
        let mut topology = Topology::new();
        for &policy in batch {
            // Pods of subnet-a (every fourth of `populate`'s 1000, so 250), ten per policy; a
            // pod may be selected by several policies, as in a cluster.
            let pods: Vec<String> = (0..PODS_PER_POLICY)
                .map(|i| {
                    format!(
                        "pod-{}.bench",
                        4 * ((policy * PODS_PER_POLICY + i) % 250) + 1
                    )
                })
                .collect();
            let pods: Vec<&str> = pods.iter().map(String::as_str).collect();
            let addresses: Vec<String> = (0..ADDRESSES_PER_SET)
                .map(|i| {
                    let host = u32::try_from(policy).unwrap_or(0) * ADDRESSES_PER_SET + i;
                    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 64, 0, 0)) + host).to_string()
                })
                .collect();
            let allow: Vec<&str> = addresses.iter().map(String::as_str).collect();
            topology.network_policy(
                &format!("np{policy}"),
                "bench",
                &pods,
                Some(&[PolicyRule {
                    allow: &allow,
                    except: &[],
                    ports: &ports,
                }]),
                None,
            );
        }
        let mut args = vec!["--timeout=600".to_string()];
        args.extend(topology.take_args());
        lab.nbctl(&args)?;
    }
    Ok(())
}

/// `bench compile --acls`.
fn acls(args: &[String]) -> Result<()> {
    let updates: usize = option(args, "--updates").unwrap_or("50").parse()?;
    println!("== bench compile --acls: building ovnbpfctl (release)");
    let ctl = cmd::build_binaries(cmd::Profile::Release)?.ctl;
    println!(
        "== bench compile --acls: {POLICIES} policies, {} ACLs, {} set members",
        POLICIES * (usize::from(PORTS_PER_POLICY) + 1),
        POLICIES * ADDRESSES_PER_SET as usize
    );
    let lab = OvnLab::start()?;
    populate_policies(&lab)?;
    let remote = lab.unix_remote(Db::Southbound);
    // One new address in one policy's set per change, the policies in turn.
    let join = |i: usize| -> Result<Vec<String>> {
        let set = format!("np{}.bench.ingress.allow.IPv4.0", i % POLICIES);
        let address = Ipv4Addr::new(10, 250, (i / 250) as u8, (i % 250) as u8 + 1);
        Ok(vec![
            "add".into(),
            "address_set".into(),
            set,
            "addresses".into(),
            format!("\"{address}\""),
        ])
    };
    let report = sync_and_change(&lab, &ctl, &remote, updates, &["--compile"], &join)?;
    let mut apply = numbers(&report, "apply_us");
    let mut compile = numbers(&report, "compile_us");
    let diffs = numbers(&report, "diff_entries");
    apply.sort_by(f64::total_cmp);
    compile.sort_by(f64::total_cmp);
    let result = json!({
        "acls": POLICIES * (usize::from(PORTS_PER_POLICY) + 1),
        "set_members": POLICIES * ADDRESSES_PER_SET as usize,
        "sb_rows": report["rows"], "ir_entries": report["ir_entries"],
        "baseline_replica_sync_ms": report["sync_ms"], "full_compile_ms": report["compile_ms"],
        "ir_rss_kib": report["ir_rss_kib"],
        "baseline_replica_apply_p50_us": percentile(&apply, 50.0),
        "member_change_compile_p50_us": percentile(&compile, 50.0),
        "member_change_compile_p99_us": percentile(&compile, 99.0),
        "max_diff_entries": diffs.iter().copied().fold(0.0, f64::max),
        "updates": compile.len(),
    });
    println!();
    println!(
        "| ACLs | set members | SB rows | IR entries | replica sync ms (baseline) | full compile ms | compile / sync | replica apply p50 µs (baseline) | member change compile p50 µs | p99 µs | max IR diff |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let f = |key: &str| result[key].as_f64().unwrap_or(f64::NAN);
    println!(
        "| {} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} |",
        result["acls"],
        result["set_members"],
        result["sb_rows"],
        result["ir_entries"],
        f("baseline_replica_sync_ms"),
        f("full_compile_ms"),
        f("full_compile_ms") / f("baseline_replica_sync_ms"),
        f("baseline_replica_apply_p50_us"),
        f("member_change_compile_p50_us"),
        f("member_change_compile_p99_us"),
        f("max_diff_entries"),
    );
    write_json("compile-acls", &[result])
}

/// Services of `bench compile --services`, and backends each.
const SERVICES: u32 = 5_000;
const BACKENDS_PER_SERVICE: u32 = 10;

/// The backend list of Service `service` in generation `generation` (each change replaces one
/// endpoint: a pod of a rolling update).
fn backends(service: u32, generation: u32) -> String {
    (0..BACKENDS_PER_SERVICE)
        .map(|i| {
            let host = (service * BACKENDS_PER_SERVICE + i + generation * 7) % 60_000;
            let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 16, 0, 0)) + 2 + host);
            format!("{ip}:8080")
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn vip(service: u32) -> String {
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 0)) + 1 + service);
    format!("{ip}:80")
}

/// `bench compile --services`.
fn services(args: &[String]) -> Result<()> {
    let updates: usize = option(args, "--updates").unwrap_or("100").parse()?;
    println!("== bench compile --services: building ovnbpfctl (release)");
    let ctl = cmd::build_binaries(cmd::Profile::Release)?.ctl;
    println!("== bench compile --services: {SERVICES} Services × {BACKENDS_PER_SERVICE} backends");
    let lab = OvnLab::start()?;
    populate(&lab, 1000)?;
    let mut topology = Topology::new();
    topology.subnet(DEFAULT_VPC, "ovn-apps", "10.17.0.0/16")?;
    topology.apply(&lab)?;
    let subnets = ["ovn-default", "ovn-apps"];
    for batch in (0..SERVICES).collect::<Vec<_>>().chunks(500) {
        let mut topology = Topology::new();
        for &service in batch {
            topology.service(
                DEFAULT_VPC,
                &subnets,
                "tcp",
                &vip(service),
                &backends(service, 0),
            );
        }
        let mut args = vec!["--timeout=600".to_string()];
        args.extend(topology.take_args());
        lab.nbctl(&args)?;
    }
    let remote = lab.unix_remote(Db::Southbound);
    // One Service's endpoint replaced per change, the Services in turn.
    let change = |i: usize| -> Result<Vec<String>> {
        let service = (i as u32 * 37) % SERVICES;
        let mut topology = Topology::new();
        topology.service(
            DEFAULT_VPC,
            &subnets,
            "tcp",
            &vip(service),
            &backends(service, 1 + i as u32),
        );
        Ok(topology.take_args())
    };
    let report = sync_and_change(&lab, &ctl, &remote, updates, &["--program"], &change)?;
    let mut apply = numbers(&report, "apply_us");
    let mut compile = numbers(&report, "compile_us");
    let program = numbers(&report, "program_us");
    let diffs = numbers(&report, "diff_entries");
    let writes = numbers(&report, "map_writes");
    // From the update's arrival (applied to the replica) to the last map write.
    let mut to_maps: Vec<f64> = apply
        .iter()
        .zip(&compile)
        .zip(&program)
        .map(|((a, c), p)| a + c + p)
        .collect();
    apply.sort_by(f64::total_cmp);
    compile.sort_by(f64::total_cmp);
    to_maps.sort_by(f64::total_cmp);
    let result = json!({
        "services": SERVICES, "backends_per_service": BACKENDS_PER_SERVICE,
        "subnets": subnets.len(),
        "sb_rows": report["rows"], "ir_entries": report["ir_entries"],
        "baseline_replica_sync_ms": report["sync_ms"], "full_compile_ms": report["compile_ms"],
        "ir_rss_kib": report["ir_rss_kib"],
        "baseline_replica_apply_p50_us": percentile(&apply, 50.0),
        "backend_change_compile_p50_us": percentile(&compile, 50.0),
        "backend_change_compile_p99_us": percentile(&compile, 99.0),
        "full_map_write_ms": report["program_ms"],
        "backend_change_to_map_write_p50_us": percentile(&to_maps, 50.0),
        "backend_change_to_map_write_p99_us": percentile(&to_maps, 99.0),
        "max_map_writes": writes.iter().copied().fold(0.0, f64::max),
        "max_diff_entries": diffs.iter().copied().fold(0.0, f64::max),
        "updates": compile.len(),
    });
    println!();
    println!(
        "| Services × backends | subnets | SB rows | IR entries | replica sync ms (baseline) | full compile ms | compile / sync | full map write ms | replica apply p50 µs (baseline) | backend change compile p50 µs | p99 µs | change → map write p50 µs | p99 µs (goal < 1000) | p50 / apply | max IR diff | max map writes |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let f = |key: &str| result[key].as_f64().unwrap_or(f64::NAN);
    println!(
        "| {SERVICES} × {BACKENDS_PER_SERVICE} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} |",
        result["subnets"],
        result["sb_rows"],
        result["ir_entries"],
        f("baseline_replica_sync_ms"),
        f("full_compile_ms"),
        f("full_compile_ms") / f("baseline_replica_sync_ms"),
        f("full_map_write_ms"),
        f("baseline_replica_apply_p50_us"),
        f("backend_change_compile_p50_us"),
        f("backend_change_compile_p99_us"),
        f("backend_change_to_map_write_p50_us"),
        f("backend_change_to_map_write_p99_us"),
        f("backend_change_to_map_write_p50_us") / f("baseline_replica_apply_p50_us"),
        f("max_diff_entries"),
        f("max_map_writes"),
    );
    write_json("compile-services", &[result])
}
