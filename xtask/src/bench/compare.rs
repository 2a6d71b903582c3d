//! `cargo xtask bench compare A.json B.json [--within 0.05]`: two `bench datapath` reports side
//! by side, ratio by ratio: each printed ratio of both, their difference, and whether it is
//! within `--within` (default 0.05, the repeatability the bench aims at): absolutely, and scaled
//! for a ratio far above 1 (±5 % of it: c/p, near 30, cannot repeat within ±0.05 while its
//! baseline, Open vSwitch's userspace datapath, moves by a few per cent). Then each path's
//! request/response p50 and p99, within 10 % or not. Says whether a change between two
//! invocations is more than the bench's own spread. Reads only the two files.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::args::option;

/// `ratio label → metric → the printed value` of one report.
type Ratios = BTreeMap<String, BTreeMap<String, f64>>;

fn ratios(report: &Value) -> Ratios {
    let mut ratios = Ratios::new();
    for result in report["results"].as_array().into_iter().flatten() {
        let (Some(label), Some(metrics)) =
            (result["ratio"].as_str(), result["metrics"].as_object())
        else {
            continue;
        };
        let printed = metrics.iter().filter_map(|(metric, spread)| {
            // The printed ratio: the median of the per-repetition ratios.
            Some((metric.clone(), spread["median"].as_f64()?))
        });
        ratios.entry(label.to_string()).or_default().extend(printed);
    }
    ratios
}

/// The ratios of `first` and `second` both hold: `(label, metric, first, second)`.
fn paired(first: &Ratios, second: &Ratios) -> Vec<(String, String, f64, f64)> {
    first
        .iter()
        .flat_map(|(label, metrics)| {
            metrics.iter().filter_map(move |(metric, a)| {
                let b = second.get(label)?.get(metric)?;
                Some((label.clone(), metric.clone(), *a, *b))
            })
        })
        .collect()
}

/// `path → (RR p50, RR p99)` of one report: pooled over its repetitions where it has them,
/// otherwise the medians.
fn latencies(report: &Value) -> BTreeMap<String, (f64, f64)> {
    report["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|result| {
            let path = result["path"].as_str()?;
            let of = |key: &str| {
                result["pooled"][key]
                    .as_f64()
                    .or_else(|| result["median"][key].as_f64())
            };
            Some((
                path.to_string(),
                (of("tcp_rr_p50_us")?, of("tcp_rr_p99_us")?),
            ))
        })
        .collect()
}

fn load(path: &str) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let report: Value = serde_json::from_str(&text).with_context(|| format!("parsing {path}"))?;
    anyhow::ensure!(
        report["bench"] == "datapath",
        "{path} is not a `bench datapath` report"
    );
    Ok(report)
}

/// Whether `a` and `b`, one ratio of two invocations, repeat within `within`: absolutely, and
/// scaled (relative to the larger ratio when it is above 1).
fn repeats(a: f64, b: f64, within: f64) -> (bool, bool) {
    let diff = (a - b).abs();
    (diff <= within, diff <= within * a.max(b).max(1.0))
}

/// The relative difference of two positive values, against their mean.
fn relative(a: f64, b: f64) -> f64 {
    (a - b).abs() / ((a + b) / 2.0)
}

pub fn run(args: &[String]) -> Result<()> {
    let files: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && (*i == 0 || args[i - 1] != "--within"))
        .map(|(_, a)| a)
        .collect();
    let [first, second] = files[..] else {
        anyhow::bail!("usage: cargo xtask bench compare A.json B.json [--within 0.05]");
    };
    let within: f64 = option(args, "--within").unwrap_or("0.05").parse()?;
    let (first, second) = (load(first)?, load(second)?);
    let pairs = paired(&ratios(&first), &ratios(&second));
    println!(
        "{:<8} {:<28} {:>8} {:>8} {:>8}",
        "ratio", "metric", "first", "second", "diff"
    );
    let (mut absolute, mut scaled) = (0, 0);
    for (label, metric, a, b) in &pairs {
        let (holds_absolute, holds_scaled) = repeats(*a, *b, within);
        absolute += usize::from(holds_absolute);
        scaled += usize::from(holds_scaled);
        let mark = match (holds_absolute, holds_scaled) {
            (true, _) => "",
            (false, true) => "  outside ±abs, within scaled",
            (false, false) => "  outside",
        };
        println!(
            "{label:<8} {metric:<28} {a:>8.3} {b:>8.3} {:>+8.3}{mark}",
            b - a
        );
    }
    println!(
        "{absolute} of {} ratios within ±{within}; {scaled} within ±{within} scaled to ratios above 1",
        pairs.len()
    );
    let later = latencies(&second);
    println!(
        "\n{:<40} {:>16} {:>16}",
        "path: RR first → second", "p50 µs", "p99 µs"
    );
    let mut steady = (0, 0);
    for (path, (p50, p99)) in latencies(&first) {
        let Some((p50_later, p99_later)) = later.get(&path).copied() else {
            continue;
        };
        let (moved50, moved99) = (relative(p50, p50_later), relative(p99, p99_later));
        steady.0 += usize::from(moved50 <= 0.1) + usize::from(moved99 <= 0.1);
        steady.1 += 2;
        println!(
            "{path:<40} {p50:>6.1}→{p50_later:<6.1}{:>3.0}% {p99:>6.1}→{p99_later:<6.1}{:>3.0}%",
            moved50 * 100.0,
            moved99 * 100.0
        );
    }
    println!(
        "{} of {} request/response percentiles within 10 %",
        steady.0, steady.1
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pairs_the_printed_value_of_each_ratio_both_reports_hold() {
        let first = json!({"bench": "datapath", "results": [
            {"path": "(a) raw", "median": {}},
            {"ratio": "c/a", "metrics": {
                "tcp_gbit_per_s": {"median": 0.8, "min": 0.7, "max": 0.9},
                "tcp_rr_p99_us": {"median": 1.2}}},
            {"ratio": "d/a", "metrics": {"tcp_gbit_per_s": {"median": 0.5}}},
        ]});
        let second = json!({"bench": "datapath", "results": [
            {"ratio": "c/a", "metrics": {
                "tcp_gbit_per_s": {"median": 0.86},
                "tcp_rr_p99_us": {"median": 1.1}}},
        ]});
        let pairs = paired(&ratios(&first), &ratios(&second));
        assert_eq!(
            pairs,
            vec![
                ("c/a".into(), "tcp_gbit_per_s".into(), 0.8, 0.86),
                ("c/a".into(), "tcp_rr_p99_us".into(), 1.2, 1.1),
            ]
        );
    }

    #[test]
    fn a_ratio_far_above_one_repeats_within_its_share() {
        assert_eq!(repeats(0.98, 1.02, 0.05), (true, true));
        assert_eq!(repeats(0.90, 0.96, 0.05), (false, false));
        // 30 and 31: 1.0 apart, within 5 % of 31.
        assert_eq!(repeats(30.0, 31.0, 0.05), (false, true));
        assert_eq!(repeats(30.0, 33.0, 0.05), (false, false));
    }
}
