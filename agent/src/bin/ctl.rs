//! `ovnbpfctl`: inspection and measurement tools. `datapath counters` reads a running
//! datapath's per-interface and per-drop-reason counters through its pins. `lflow coverage`
//! shows, per pipeline stage,
//! how much of the Southbound's logical flows the compiler handles. `sb-sync` replicates a Southbound DB the way the
//! agent does (all tables ovnbpf monitors, every row) and reports how long the initial sync took,
//! how many rows arrived and how long each later update took to apply (replica + indexes), as
//! one JSON object on stdout; `cargo xtask bench sb` drives it.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use ovnbpf_agent::{
    ovsdb::{
        remote::Remote,
        session::{self, SessionConfig, SessionEvent},
    },
    pipeline::{
        Compiler, IrDiff, StageCoverage,
        eval::{Evaluator, packet::Packet},
    },
    sb::{DATABASE, Southbound, monitor, rows::LogicalFlow},
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
    /// Logical-flow tools.
    Lflow {
        #[command(subcommand)]
        command: LflowCommand,
    },
    /// Print the pipeline IR compiled from the Southbound DB, one entry per line.
    Ir {
        /// Southbound remotes (tcp:HOST:PORT[,…] or unix:PATH).
        #[arg(long)]
        remote: String,
        /// Only this datapath (tunnel key).
        #[arg(long)]
        datapath: Option<u32>,
    },
    /// Evaluate the pipeline IR for one packet, like ovn-trace: each step, then what is output.
    Trace {
        /// Southbound remotes (tcp:HOST:PORT[,…] or unix:PATH).
        #[arg(long)]
        remote: String,
        /// The packet, as ovn-trace takes it: `inport == "pod.ns" && eth.src == … && ip4.dst == …`.
        microflow: String,
        /// Print the steps, the outputs, the load balancers' decisions and the unsupported flows
        /// on the path as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Follow a running agent's drop events live (through its control socket): reason, pod,
    /// the switch or router the frame entered, interface and the frame's addresses, one line
    /// each.
    Monitor {
        /// The agent's --control-socket.
        #[arg(long, default_value = "/run/ovnbpf/control.sock")]
        socket: std::path::PathBuf,
        /// Only this pod's events: its logical port `POD.NAMESPACE`, or `POD` in any namespace.
        #[arg(long)]
        pod: Option<String>,
        /// Print each event as the agent's JSON line.
        #[arg(long)]
        json: bool,
        /// Stop after this many events.
        #[arg(long)]
        count: Option<usize>,
    },
    /// The running agent's datapath: which one (ebpf, openflow), ready, writes waiting, and
    /// the datapaths it does not translate whole.
    Status {
        /// The agent's --control-socket.
        #[arg(long, default_value = "/run/ovnbpf/control.sock")]
        socket: std::path::PathBuf,
        /// Print the agent's JSON line.
        #[arg(long)]
        json: bool,
    },
    /// Inspect a running eBPF datapath through its pins.
    Datapath {
        #[command(subcommand)]
        command: DatapathCommand,
    },
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
        /// Also compile the replica into the pipeline IR and time that (full and per update).
        #[arg(long)]
        compile: bool,
        /// Also write each IR diff into a freshly loaded eBPF datapath (attached nowhere) and
        /// time the map writes (implies `--compile`; needs root).
        #[arg(long)]
        program: bool,
    },
}

#[derive(Subcommand)]
enum DatapathCommand {
    /// Per-interface counters (per port, for pods' veths) and drops per reason.
    Counters {
        /// The agent's --pin-dir.
        #[arg(long, default_value = ovnbpf_common::DEFAULT_PIN_ROOT)]
        pin_dir: std::path::PathBuf,
        /// Print as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum LflowCommand {
    /// Per stage: how many logical flows the compiler turns into IR entries (compiled), can
    /// ignore (neutral), forwards correctly but with a side duty the datapath does not do
    /// (side-duty, e.g. MAC learning; the datapath still forwards), or cannot forward correctly
    /// (unsupported: the datapath is not forwarded; with the top reasons).
    Coverage {
        /// Southbound remotes (tcp:HOST:PORT[,…] or unix:PATH).
        #[arg(long)]
        remote: String,
        /// Print as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also list every unsupported flow, then every flow with a side duty not done, with its
        /// match, actions and reason.
        #[arg(long)]
        unsupported: bool,
    },
}

fn main() -> anyhow::Result<()> {
    // As the agent: `sb-sync`'s numbers stand for its.
    ovnbpf_agent::allocator::cap_arenas();
    match Cli::parse().command {
        Command::Monitor {
            socket,
            pod,
            json,
            count,
        } => monitor(&socket, pod.as_deref(), json, count),
        Command::Status { socket, json } => status(&socket, json),
        Command::Datapath {
            command: DatapathCommand::Counters { pin_dir, json },
        } => print_counters(&pin_dir, json),
        Command::Lflow {
            command:
                LflowCommand::Coverage {
                    remote,
                    json,
                    unsupported,
                },
        } => {
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let coverage = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(120), coverage(&remote)).await
            });
            let (sb, compiler) =
                coverage.map_err(|_| anyhow::anyhow!("timed out reading the Southbound DB"))??;
            print_coverage(&compiler.coverage(), json);
            if unsupported {
                let unsupported = compiler.unsupported_flows().into_iter();
                let side_duties = compiler.side_duty_flows().into_iter();
                for (kind, (uuid, stage, reason)) in unsupported
                    .map(|flow| ("unsupported", flow))
                    .chain(side_duties.map(|flow| ("side duty not done", flow)))
                {
                    let flow = sb.row::<LogicalFlow>(&uuid);
                    let (match_, actions) =
                        flow.map_or_else(Default::default, |f| (f.match_, f.actions));
                    println!(
                        "{stage} {uuid}: {kind}: {reason}\n    match=({match_})\n    actions=({actions})"
                    );
                }
            }
            Ok(())
        }
        Command::Ir { remote, datapath } => {
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let compiled = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(120), coverage(&remote)).await
            });
            let (_, compiler) =
                compiled.map_err(|_| anyhow::anyhow!("timed out reading the Southbound DB"))??;
            let mut entries: Vec<_> = compiler
                .entries()
                .filter(|e| datapath.is_none_or(|d| e.datapath() == d))
                .collect();
            entries.sort();
            for entry in entries {
                println!("{entry:?}");
            }
            Ok(())
        }
        Command::Trace {
            remote,
            microflow,
            json,
        } => {
            let expression =
                ovnbpf_agent::lflow::parse_match(&microflow).context("parsing the microflow")?;
            let (inport, packet) =
                Packet::from_microflow(&expression).map_err(|e| anyhow::anyhow!(e))?;
            let inport = inport.context("the microflow must name its inport (inport == \"…\")")?;
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let compiled = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(120), coverage(&remote)).await
            });
            let (_, compiler) =
                compiled.map_err(|_| anyhow::anyhow!("timed out reading the Southbound DB"))??;
            let trace = Evaluator::new(compiler.entries())
                .trace(&inport, packet)
                .map_err(|e| anyhow::anyhow!(e))?;
            print_trace(&trace, &compiler, json);
            Ok(())
        }
        Command::SbSync {
            remote,
            updates,
            timeout_s,
            compile,
            program,
        } => {
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let report = runtime.block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(timeout_s),
                    sb_sync(&remote, updates, compile || program, program),
                )
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

/// Replicates the SB once and compiles it.
async fn coverage(remote: &str) -> anyhow::Result<(Southbound, Compiler)> {
    let tables = monitor::monitored_tables(true, "", &monitor::LocalScope::default());
    let (_handle, mut events) = session::start(SessionConfig::new(
        Remote::parse_list(remote)?,
        DATABASE,
        tables,
    ));
    let mut sb = Southbound::new();
    while let Some(event) = events.recv().await {
        let changes = sb.apply(&event);
        match event {
            SessionEvent::Snapshot { .. } => {
                let mut compiler = Compiler::new();
                compiler.compile(&sb, &changes);
                return Ok((sb, compiler));
            }
            SessionEvent::Disconnected { reason, .. } => {
                bail!("cannot read the Southbound DB: {reason}")
            }
            SessionEvent::Update { .. }
            | SessionEvent::Transacted { .. }
            | SessionEvent::ConditionChanged { .. } => {}
        }
    }
    bail!("the session ended before the first snapshot")
}

/// Prints a trace: its steps and outputs, then every unsupported flow a packet can reach on the
/// datapaths it crossed (by datapath, stage and reason, with the flows' UUIDs), so an answer
/// given through them is never mistaken for OVN's.
fn print_trace(trace: &ovnbpf_agent::pipeline::eval::Trace, compiler: &Compiler, json: bool) {
    // Each crossed datapath's reachable unsupported flows, asked once (a datapath has a
    // report per stage and reason).
    let mut on_datapath = BTreeMap::new();
    for report in &trace.unsupported {
        on_datapath
            .entry(report.datapath)
            .or_insert_with(|| compiler.unsupported_flows_on(report.datapath));
    }
    let unsupported: Vec<(
        &ovnbpf_agent::pipeline::eval::UnsupportedOnPath,
        Vec<String>,
    )> = trace
        .unsupported
        .iter()
        .map(|report| {
            let flows: Vec<String> = on_datapath[&report.datapath]
                .iter()
                .filter(|(_, stage, reason)| *stage == report.stage && *reason == report.reason)
                .map(|(uuid, _, _)| uuid.to_string())
                .collect();
            (report, flows)
        })
        // A report whose flows no packet can reach (they need register bits no flow of the
        // datapath sets) is not a reason to doubt the answer.
        .filter(|(_, flows)| !flows.is_empty())
        .collect();
    if json {
        let outputs: Vec<_> = trace
            .outputs
            .iter()
            .map(|(port, packet)| json!({"port": port, "packet": packet.to_string()}))
            .collect();
        let unsupported: Vec<_> = unsupported
            .iter()
            .map(|(report, flows)| {
                json!({
                    "datapath": report.datapath,
                    "datapath_name": report.datapath_name,
                    "stage": report.stage,
                    "reason": report.reason,
                    "flows": flows,
                })
            })
            .collect();
        let backend = |b: &ovnbpf_agent::pipeline::ir::LbBackend| match b.port {
            Some(port) => format!("{}:{port}", b.ip),
            None => b.ip.to_string(),
        };
        let balanced: Vec<_> = trace
            .balanced
            .iter()
            .map(|decision| {
                json!({
                    "vip": decision.vip.to_string(),
                    "port": decision.port,
                    "backends": decision.backends.iter().map(backend).collect::<Vec<_>>(),
                    "chosen": decision.chosen.as_ref().map(backend),
                })
            })
            .collect();
        let document = json!({
            "steps": trace.steps,
            "outputs": outputs,
            "dropped": trace.outputs.is_empty(),
            "balanced": balanced,
            "unsupported": unsupported,
        });
        println!("{document}");
        return;
    }
    for step in &trace.steps {
        println!("{step}");
    }
    if trace.outputs.is_empty() {
        println!("=> dropped");
    }
    for (port, packet) in &trace.outputs {
        println!("=> output to {port}: {packet}");
    }
    if !unsupported.is_empty() {
        println!(
            "!! not certain to be OVN's answer: the path crosses flows ovnbpf does not compile \
             (the datapath forwards none of its traffic where they stop it)"
        );
        for (report, flows) in &unsupported {
            println!(
                "!!   [{}] {}: {} ({} flow{}: {})",
                report.datapath_name,
                report.stage,
                report.reason,
                flows.len(),
                if flows.len() == 1 { "" } else { "s" },
                flows.join(", ")
            );
        }
    }
}

fn print_coverage(coverage: &BTreeMap<String, StageCoverage>, as_json: bool) {
    if as_json {
        let stages: serde_json::Map<String, serde_json::Value> = coverage
            .iter()
            .map(|(stage, c)| {
                (
                    stage.clone(),
                    json!({"flows": c.flows, "compiled": c.compiled, "neutral": c.neutral,
                    "side_duty": c.side_duty, "side_duties": c.side_duties,
                    "unsupported": c.unsupported, "reasons": c.reasons}),
                )
            })
            .collect();
        println!("{}", serde_json::Value::Object(stages));
        return;
    }
    println!(
        "{:<26} {:>6} {:>9} {:>8} {:>9} {:>12}  top reasons (unsupported, then side duties)",
        "stage", "flows", "compiled", "neutral", "side-duty", "unsupported"
    );
    let mut totals = StageCoverage::default();
    for (stage, c) in coverage {
        let mut reasons: Vec<(&String, &usize)> = c.reasons.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1));
        let mut top: Vec<String> = reasons
            .iter()
            .take(2)
            .map(|(r, n)| format!("{r} ({n})"))
            .collect();
        top.extend(
            c.side_duties
                .iter()
                .map(|(duty, n)| format!("side duty: {duty} ({n})")),
        );
        println!(
            "{stage:<26} {:>6} {:>9} {:>8} {:>9} {:>12}  {}",
            c.flows,
            c.compiled,
            c.neutral,
            c.side_duty,
            c.unsupported,
            top.join("; ")
        );
        totals.flows += c.flows;
        totals.compiled += c.compiled;
        totals.neutral += c.neutral;
        totals.side_duty += c.side_duty;
        totals.unsupported += c.unsupported;
    }
    println!(
        "{:<26} {:>6} {:>9} {:>8} {:>9} {:>12}",
        "total",
        totals.flows,
        totals.compiled,
        totals.neutral,
        totals.side_duty,
        totals.unsupported
    );
}

/// Resident set size of this process, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .to_string();
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// What the calling thread used, from `getrusage(RUSAGE_THREAD)` and its CPU clock: where a
/// slow compile's time went (its own work, page faults, or the scheduler).
#[derive(Clone, Copy, Default)]
struct ThreadUsage {
    cpu_us: f64,
    page_faults: i64,
    preempted: i64,
}

impl ThreadUsage {
    fn since(&self, earlier: &Self) -> Self {
        Self {
            cpu_us: self.cpu_us - earlier.cpu_us,
            page_faults: self.page_faults - earlier.page_faults,
            preempted: self.preempted - earlier.preempted,
        }
    }
}

fn thread_usage() -> ThreadUsage {
    // SAFETY: plain syscalls filling structures we own.
    let (usage, clock) = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        let mut clock: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut clock);
        (usage, clock)
    };
    ThreadUsage {
        cpu_us: clock.tv_sec as f64 * 1e6 + clock.tv_nsec as f64 / 1e3,
        page_faults: usage.ru_minflt + usage.ru_majflt,
        preempted: usage.ru_nivcsw,
    }
}

async fn sb_sync(
    remote: &str,
    updates: usize,
    compile: bool,
    program: bool,
) -> anyhow::Result<serde_json::Value> {
    let mut datapath = if program {
        Some(
            ovnbpf_agent::dataplane::ebpf::node::NodeDatapath::unattached("bench")
                .context("loading the eBPF datapath")?,
        )
    } else {
        None
    };
    let mut program_ms = None;
    let mut program_us = Vec::new();
    let mut map_writes = Vec::new();
    let tables = monitor::monitored_tables(true, "", &monitor::LocalScope::default());
    let config = SessionConfig::new(Remote::parse_list(remote)?, DATABASE, tables);
    let started = Instant::now();
    let (_handle, mut events) = session::start(config);
    let mut sb = Southbound::new();
    let mut compiler = Compiler::new();
    let mut sync_ms = None;
    let mut compile_ms = None;
    let mut ir_rss_kib = 0;
    let mut apply_us = Vec::new();
    let mut compile_us = Vec::new();
    let mut compile_usage_seen: Vec<ThreadUsage> = Vec::new();
    let mut update_rows: Vec<String> = Vec::new();
    let mut diff_entries = Vec::new();
    while let Some(event) = events.recv().await {
        let received = Instant::now();
        let changes = sb.apply(&event);
        let applied = received.elapsed();
        if !changes.rejected.is_empty() {
            bail!("rejected rows: {:?}", changes.rejected);
        }
        let snapshot = matches!(event, SessionEvent::Snapshot { .. });
        let update = matches!(event, SessionEvent::Update { .. });
        if let SessionEvent::Disconnected { reason, .. } = &event {
            bail!("disconnected: {reason}");
        }
        // Held through the compile (the agent drops it before), so that the RSS the compile adds
        // is the IR's and not the reuse of the JSON's freed memory.
        let rss_before = rss_kib();
        let cpu_before = thread_usage();
        let compiling = Instant::now();
        // As the agent: a first view's diff is the IR itself (`None`), read in place.
        let diff = if compile {
            Some(compiler.compile(&sb, &changes))
        } else {
            None
        };
        let compiled = compiling.elapsed();
        let compile_usage = thread_usage().since(&cpu_before);
        let programming = Instant::now();
        let written = match (&mut datapath, &diff) {
            (Some(datapath), Some(diff)) => {
                let view = compiler.view(diff.as_ref());
                Some(datapath.apply(&view).context("writing the maps")?)
            }
            _ => None,
        };
        let programmed = programming.elapsed();
        if snapshot && sync_ms.is_none() {
            sync_ms =
                Some(started.elapsed().as_secs_f64() * 1000.0 - compiled.as_secs_f64() * 1000.0);
            if compile {
                compile_ms = Some(compiled.as_secs_f64() * 1000.0);
                ir_rss_kib = rss_kib().saturating_sub(rss_before);
            }
            if written.is_some() {
                program_ms = Some(programmed.as_secs_f64() * 1000.0);
            }
            // Tell a driving process that the initial sync is done.
            eprintln!("synced");
        } else if update {
            apply_us.push(applied.as_secs_f64() * 1e6);
            if let Some(diff) = &diff {
                compile_us.push(compiled.as_secs_f64() * 1e6);
                compile_usage_seen.push(compile_usage);
                update_rows.push(
                    changes
                        .tables
                        .iter()
                        .map(|(table, change)| {
                            let rows = change.inserted.len()
                                + change.modified.len()
                                + change.deleted.len();
                            format!("{table}:{rows}")
                        })
                        .collect::<Vec<_>>()
                        .join(" "),
                );
                diff_entries.push(diff.as_ref().map_or(0, IrDiff::len));
            }
            if let Some(written) = written {
                program_us.push(programmed.as_secs_f64() * 1e6);
                map_writes.push(written);
            }
        }
        if snapshot {
            // As the agent does once a snapshot is handled.
            drop(diff);
            ovnbpf_agent::allocator::release_freed_memory();
        }
        if sync_ms.is_some() && apply_us.len() >= updates {
            break;
        }
    }
    let rows: usize = sb.replica().tables().map(|(_, table)| table.len()).sum();
    Ok(json!({
        "sync_ms": sync_ms, "rows": rows, "apply_us": apply_us,
        "compile_ms": compile_ms, "ir_entries": compiler.entries().count(), "ir_rss_kib": ir_rss_kib,
        "compile_us": compile_us, "diff_entries": diff_entries,
        "compile_cpu_us": compile_usage_seen.iter().map(|u| u.cpu_us).collect::<Vec<_>>(),
        "compile_page_faults": compile_usage_seen.iter().map(|u| u.page_faults).collect::<Vec<_>>(),
        "compile_preempted": compile_usage_seen.iter().map(|u| u.preempted).collect::<Vec<_>>(),
        "update_rows": update_rows,
        "program_ms": program_ms, "program_us": program_us, "map_writes": map_writes,
    }))
}

/// Streams the agent's drop events until `count` have been printed (or forever).
/// Asks the agent at `socket` for its status and prints it.
fn status(socket: &std::path::Path, as_json: bool) -> anyhow::Result<()> {
    use std::io::{BufRead, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket).with_context(|| {
        format!(
            "connecting to the agent's control socket {}",
            socket.display()
        )
    })?;
    writeln!(stream, "{}", json!({"status": {}}))?;
    let mut line = String::new();
    std::io::BufReader::new(stream)
        .read_line(&mut line)
        .context("reading from the agent")?;
    let status: serde_json::Value =
        serde_json::from_str(line.trim()).with_context(|| format!("the agent sent {line:?}"))?;
    if let Some(error) = status.get("error") {
        anyhow::bail!("the agent refused: {error}");
    }
    if as_json {
        println!("{}", line.trim());
        return Ok(());
    }
    println!(
        "dataplane: {}",
        status["dataplane"].as_str().unwrap_or("none")
    );
    println!("ready: {}", status["ready"]);
    println!("local ports: {}", status["local_ports"]);
    println!("writes waiting for a retry: {}", status["pending_writes"]);
    if let Some(untranslated) = status["untranslated_datapaths"].as_object() {
        for (effect, count) in untranslated {
            println!("datapaths not translated whole ({effect}): {count}");
        }
    }
    Ok(())
}

fn monitor(
    socket: &std::path::Path,
    pod: Option<&str>,
    as_json: bool,
    count: Option<usize>,
) -> anyhow::Result<()> {
    use std::io::{BufRead, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket).with_context(|| {
        format!(
            "connecting to the agent's control socket {} (is the agent running with --uplink?)",
            socket.display()
        )
    })?;
    writeln!(stream, "{}", json!({"monitor": {"port": pod}}))?;
    let mut printed = 0;
    if count == Some(0) {
        return Ok(());
    }
    for line in std::io::BufReader::new(stream).lines() {
        let line = line.context("reading from the agent")?;
        let event: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("the agent sent {line:?}"))?;
        if let Some(error) = event.get("error") {
            anyhow::bail!("the agent refused: {error}");
        }
        if let Some(missed) = event.get("lagged") {
            eprintln!("({missed} events missed: this client fell behind)");
            continue;
        }
        if as_json {
            println!("{line}");
        } else {
            let text = |key: &str| event[key].as_str().unwrap_or("-").to_string();
            println!(
                "{:<26} pod={} {} interface={} {}",
                text("reason"),
                text("port"),
                datapath_text(&event["datapath"]),
                text("interface"),
                text("frame")
            );
        }
        std::io::stdout().flush()?;
        printed += 1;
        if count.is_some_and(|count| printed >= count) {
            break;
        }
    }
    Ok(())
}

/// An event's datapath for people: `switch=subnet-a`, `router=vpc-a`, `datapath=7` without a
/// name, `datapath=-` when the agent did not know it.
fn datapath_text(datapath: &serde_json::Value) -> String {
    match (
        datapath["type"].as_str(),
        datapath["name"].as_str(),
        datapath["tunnel_key"].as_u64(),
    ) {
        (Some(kind), Some(name), _) => format!("{kind}={name}"),
        (_, None, Some(key)) => format!("datapath={key}"),
        _ => "datapath=-".to_string(),
    }
}

fn print_counters(pin_dir: &std::path::Path, as_json: bool) -> anyhow::Result<()> {
    let counters = ovnbpf_agent::dataplane::ebpf::inspect::read_counters(pin_dir)
        .with_context(|| format!("reading the datapath pinned under {}", pin_dir.display()))?;
    if as_json {
        let interfaces: Vec<_> = counters
            .interfaces
            .iter()
            .map(|(ifindex, (name, c))| {
                json!({
                    "ifindex": ifindex,
                    "name": name,
                    "packets": c.packets,
                    "bytes": c.bytes,
                    "ipv4": c.ipv4,
                    "other": c.other,
                    "malformed": c.malformed,
                    "dropped": c.dropped,
                    "delivered_packets": c.delivered_packets,
                    "delivered_bytes": c.delivered_bytes,
                })
            })
            .collect();
        println!(
            "{}",
            json!({
                "interfaces": interfaces,
                "drops": counters.drops,
                "router_replies": counters.router_replies,
                "lb": counters.lb,
                "socket_lb": counters.socket_lb,
            })
        );
        return Ok(());
    }
    println!(
        "{:<16} {:>10} {:>12} {:>9} {:>10} {:>12}",
        "interface", "in pkts", "in bytes", "dropped", "out pkts", "out bytes"
    );
    for (ifindex, (name, c)) in &counters.interfaces {
        let name = name.clone().unwrap_or_else(|| format!("#{ifindex}"));
        println!(
            "{name:<16} {:>10} {:>12} {:>9} {:>10} {:>12}",
            c.packets, c.bytes, c.dropped, c.delivered_packets, c.delivered_bytes
        );
    }
    // The text table shows what matters: the reasons that counted something (JSON has them all).
    let drops: Vec<_> = counters.drops.iter().filter(|(_, n)| **n > 0).collect();
    if drops.is_empty() {
        println!("drops by reason: no drops");
    } else {
        println!("drops by reason (non-zero):");
        for (reason, count) in drops {
            println!("  {reason:<28} {count}");
        }
    }
    println!("router replies by kind:");
    for (kind, count) in &counters.router_replies {
        println!("  {kind:<28} {count}");
    }
    println!("load balancers, per packet:");
    for (kind, count) in &counters.lb {
        println!("  {kind:<28} {count}");
    }
    println!("load balancers, at the socket:");
    for (kind, count) in &counters.socket_lb {
        println!("  {kind:<28} {count}");
    }
    Ok(())
}
