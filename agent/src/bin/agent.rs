//! `ovnbpf-agent`: the node daemon. Today it offers `verify`, which loads every kernel program
//! through the verifier and reports what the kernel accepted; the Southbound-driven daemon mode
//! arrives with the OVSDB client.

use anyhow::Context;
use clap::{Parser, Subcommand};
use ovnbpf_agent::dataplane::ebpf::KernelPrograms;

#[derive(Parser)]
#[command(name = "ovnbpf-agent", version, about = "ovnbpf node datapath agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load every kernel program through the verifier and print what the kernel accepted.
    Verify,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Verify => verify(),
    }
}

fn verify() -> anyhow::Result<()> {
    let programs = KernelPrograms::load().context("loading the kernel programs")?;
    println!(
        "{:<14} {:>8} {:>14} {:>16}",
        "program", "prog id", "verified insns", "translated bytes"
    );
    for program in programs.programs()? {
        println!(
            "{:<14} {:>8} {:>14} {:>16}",
            program.name,
            program.id,
            program
                .verified_instructions
                .map_or("-".into(), |n| n.to_string()),
            program
                .translated_bytes
                .map_or("-".into(), |n| n.to_string()),
        );
    }
    Ok(())
}
