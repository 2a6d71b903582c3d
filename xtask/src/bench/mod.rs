//! `cargo xtask bench …`: measurements that compare ovnbpf with a baseline taken in the same run,
//! print a table and write JSON under target/bench/. Never part of the test suite. One module per
//! bench ([`sb`], [`compile`], [`datapath`], [`cni`], [`conntrack`], [`scale`]), and [`compare`]
//! of two `datapath` reports; what they share is in [`stats`].

mod change_probe;
mod cni;
mod compare;
mod compile;
mod conntrack;
mod datapath;
mod ovsdb_watch;
mod sb;
mod scale;
mod stats;

use anyhow::{Result, bail};

pub fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("sb") => sb::run(&args[1..]),
        Some("compile") => compile::run(&args[1..]),
        Some("datapath") => datapath::run(&args[1..]),
        Some("cni") => cni::run(&args[1..]),
        Some("conntrack") => conntrack::run(&args[1..]),
        Some("scale") => scale::run(&args[1..]),
        Some("compare") => compare::run(&args[1..]),
        _ => bail!(
            "usage: cargo xtask bench sb|compile [--pods 1000,10000,50000] [--updates 20] | datapath [--runs 3] [--seconds 5] [--flood-runs 5000] [--broadcast-only] | cni [--pods 100] [--concurrency 10] [--one-node] | conntrack [--runs 5] [--repeat 200000] | scale [--pods 1000,10000] [--agent PATH] [--baseline-agent PATH] [--local-ports 50] [--changes 100] [--no-ovn-controller] | compare A.json B.json [--within 0.05]"
        ),
    }
}
