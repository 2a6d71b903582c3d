//! `ovnbpfctl`: inspection and measurement tools. `sb-sync` replicates a Southbound DB the way the
//! agent does (all tables ovnbpf monitors, every row) and reports how long the initial sync took,
//! how many rows arrived and how long each later update took to apply (replica + indexes), as
//! one JSON object on stdout; `cargo xtask bench sb` drives it.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use ovnbpf_agent::{
    ovsdb::{
        remote::Remote,
        session::{self, SessionConfig, SessionEvent},
    },
    sb::{DATABASE, Southbound, monitor},
};
use serde_json::json;

#[derive(Parser)]
#[command(name = "ovnbpfctl", version, about = "ovnbpf inspection tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replicate the Southbound DB and report sync time and per-update apply latency.
    SbSync {
        /// Southbound remotes (tcp:HOST:PORT[,…] or unix:PATH).
        #[arg(long)]
        remote: String,
        /// After the initial sync, wait for this many updates and time their application.
        #[arg(long, default_value_t = 0)]
        updates: usize,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout_s: u64,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::SbSync {
            remote,
            updates,
            timeout_s,
        } => {
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let report = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(timeout_s), sb_sync(&remote, updates))
                    .await
            });
            match report {
                Ok(report) => {
                    println!("{}", report?);
                    Ok(())
                }
                Err(_) => bail!("timed out after {timeout_s} s"),
            }
        }
    }
}

async fn sb_sync(remote: &str, updates: usize) -> anyhow::Result<serde_json::Value> {
    let tables = monitor::monitored_tables(true, "", &monitor::LocalScope::default());
    let config = SessionConfig::new(Remote::parse_list(remote)?, DATABASE, tables);
    let started = Instant::now();
    let (_handle, mut events) = session::start(config);
    let mut sb = Southbound::new();
    let mut sync_ms = None;
    let mut apply_us = Vec::new();
    while let Some(event) = events.recv().await {
        let received = Instant::now();
        let changes = sb.apply(&event);
        let applied = received.elapsed();
        if !changes.rejected.is_empty() {
            bail!("rejected rows: {:?}", changes.rejected);
        }
        match event {
            SessionEvent::Snapshot { .. } if sync_ms.is_none() => {
                sync_ms = Some(started.elapsed().as_secs_f64() * 1000.0);
                // Tell a driving process that the initial sync is done.
                eprintln!("synced");
            }
            SessionEvent::Update { .. } => apply_us.push(applied.as_secs_f64() * 1e6),
            SessionEvent::Disconnected { reason, .. } => bail!("disconnected: {reason}"),
            SessionEvent::Snapshot { .. } => {}
        }
        if sync_ms.is_some() && apply_us.len() >= updates {
            break;
        }
    }
    let rows: usize = sb.replica().tables().map(|(_, table)| table.len()).sum();
    Ok(json!({"sync_ms": sync_ms, "rows": rows, "apply_us": apply_us}))
}
