//! `cargo xtask`: the project's developer entry points. `setup` prepares the machine, `test` runs the
//! whole suite (what CI runs), `demo` shows the product on a built-in topology, `lab` keeps a real OVN
//! central running for manual work. This crate must build without bpf-linker or nightly, because it
//! is what installs them.

mod args;
mod bench;
mod cmd;
mod demo;
mod image;
mod lab;
mod setup;
mod test;

use anyhow::{Result, bail};

const USAGE: &str = "usage: cargo xtask <command>

commands:
  setup [--check]        install (or only check) what the project needs on this machine
  test [-- ARGS]         the whole suite as CI runs it (root); ARGS go to `cargo test`
  demo                   real OVN + a two-VPC Kube-OVN topology + ovnbpf's verified programs,
                         two simulated nodes, CNI pods, traffic, a hitless restart
  bench sb [--pods N,…] [--updates K]
                         Southbound sync/apply cost vs ovsdb-client dump (same run)
  bench compile [--pods N,…] [--updates K]
                         logical-flow compile cost vs the replica's sync/apply (same run)
  bench datapath [--runs N] [--seconds S] [--flood-runs K] [--broadcast-only] [--paths abcdefg]
                         pod-to-pod TCP throughput and request/response latency across two
                         nodes vs a raw veth and plain kernel routing (same run), and the
                         kernel cost of a broadcast to 64 local pods and 32 chassis
  bench cni [--pods N] [--concurrency C] [--one-node]
                         CNI ADD/DEL latency vs building the same NIC with `ip` (same run)
  bench compare A.json B.json [--within 0.05]
                         two `bench datapath` reports ratio by ratio: which moved by more
                         than --within between them
  image [--debug] [--name REF] [--output FILE]
                         ovnbpf's container image as an OCI archive (default
                         target/image/ovnbpf-<version>.oci.tar, localhost/ovnbpf:<version>)
  lab up [--demo]|down|status
                         keep a real OVN central running for manual work (builds the
                         binaries and prints how to point them at it)
  help                   this text

Every command installs or builds what it uses (setup is idempotent); results of benches go to
target/bench/*.json.
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(command) = args.first() else {
        print!("{USAGE}");
        return Ok(());
    };
    let rest = &args[1..];
    let setup = || setup::run(&setup::Options { check_only: false });
    match command.as_str() {
        "setup" => setup::run(&setup::Options {
            check_only: rest.iter().any(|a| a == "--check"),
        }),
        "test" => {
            setup()?;
            let passthrough = rest
                .iter()
                .skip_while(|a| *a != "--")
                .skip(1)
                .cloned()
                .collect::<Vec<_>>();
            test::run(&passthrough)
        }
        "demo" => {
            setup()?;
            demo::run()
        }
        "bench" => {
            setup()?;
            bench::run(rest)
        }
        "image" => {
            setup()?;
            image::run(rest)
        }
        "lab" => {
            // `up` runs OVN and builds the binaries; `down` and `status` only read the lab's state.
            if rest.first().map(String::as_str) == Some("up") {
                setup()?;
            }
            lab::run(rest)
        }
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown command `{other}`\n{USAGE}"),
    }
}
