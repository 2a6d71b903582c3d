//! `bench compile [--pods …] [--updates 20]`: the full SB → IR compile (time, IR entries, RSS it
//! adds) and the compile cost of each single-pod change, next to the replica's own sync and apply
//! cost in the same run as the baseline.

use anyhow::Result;
use ovnbpf_tests::ovn::{Db, OvnLab};
use serde_json::json;

use super::{
    sb::{populate, sync_and_update},
    stats::{numbers, percentile, sizes, write_json},
};
use crate::{args::option, cmd};

/// `bench compile`: full SB → IR compile time and IR memory, and the cost of one pod change,
/// against the replica's own sync and apply cost in the same run as the baseline.
pub fn run(args: &[String]) -> Result<()> {
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
