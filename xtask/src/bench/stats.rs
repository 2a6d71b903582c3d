//! What every bench shares: the `--pods` sizes, percentiles of measured samples, and the JSON
//! report under target/bench/. Depends on no other bench module.

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::args::option;

/// The `--pods` sizes (default 1000, 10000, 50000).
pub fn sizes(args: &[String]) -> Result<Vec<u32>> {
    option(args, "--pods")
        .unwrap_or("1000,10000,50000")
        .split(',')
        .map(|n| n.trim().parse().context("--pods takes numbers"))
        .collect()
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile(&values, 50.0)
}

/// The numbers of the JSON array `key` of `report`.
pub fn numbers(report: &Value, key: &str) -> Vec<f64> {
    report[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect()
}

/// Writes `results` as target/bench/`bench`.json.
pub fn write_json(bench: &str, results: &[Value]) -> Result<()> {
    std::fs::create_dir_all("target/bench")?;
    let path = format!("target/bench/{bench}.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json!({"bench": bench, "results": results}))?,
    )?;
    println!("wrote {path}");
    Ok(())
}
