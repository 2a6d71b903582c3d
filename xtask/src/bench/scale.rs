//! `bench scale [--pods 1000,10000] [--agent PATH] [--baseline-agent PATH] [--local-ports 50]
//! [--no-ovn-controller]`: the agent (the release build, or the binary at PATH; with
//! `--baseline-agent`, another build beside it in the same runs, e.g. another commit's) as one chassis
//! of a large Southbound (a real OVN central with `bench sb`'s topology), from its start until it has compiled its first view:
//! wall time, peak RSS and the RSS it settles at (from the agent's `/proc/<pid>/status`), next to
//! the baseline in the same run, `ovsdb-client dump` of the same Southbound (what the server
//! takes to hand the tables over, and what a bare client holds of them). The agent follows the
//! Southbound with `--monitor-all` (every row: a node's worst case) and without a datapath (no
//! `--uplink`: it compiles, it writes no kernel map), so this is the control plane's cost. The
//! agent has compiled its first view when its metrics first say `ovnbpf_southbound_synced 1`:
//! the daemon loop answers a scrape only between two events, after the snapshot's compile.
//!
//! Beside them in the same run, interleaved (dump, agent, ovn-controller, twice): a real
//! ovn-controller with Open vSwitch (userspace datapath, in a namespace of its own, as the lab's
//! chassis run), also `ovn-monitor-all`, with `--local-ports` of the pods bound to it (internal
//! ports with their `iface-id`): from its start until it has acknowledged the Southbound's
//! `nb_cfg` (ovn-controller writes `Chassis_Private.nb_cfg` once the flows of that configuration
//! are installed) and every local port is `ovn-installed`; its peak RSS is ovn-controller's and
//! ovs-vswitchd's together. The two are not the same work: the agent compiles every datapath
//! and programs nothing, ovn-controller translates the flows of its local ports' datapaths and
//! installs them; the table says so.
//! Not yet (issue 26): a share of local ports bound to the agent, the datapath's programming,
//! one change's end-to-end latency.

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use ovnbpf_tests::{
    kubeovn::pod_port_name,
    names::unique_prefix,
    netns::Netns,
    ovn::{Db, OvnLab},
    ovs_chassis::OvsSwitch,
};
use serde_json::{Value, json};

use super::{
    sb::{measure, populate},
    stats::{median, numbers, sizes, write_json},
};
use crate::{args::option, cmd};

/// Where the measured agent serves its metrics.
const METRICS: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 19_665);
/// How long the agent may take to compile its first view.
const SYNC_LIMIT: Duration = Duration::from_secs(600);
/// How long the agent runs after it synced before its settled RSS is read.
const SETTLE: Duration = Duration::from_secs(3);

/// One agent run: start → first view compiled, and its memory.
struct AgentRun {
    synced: Duration,
    peak_kib: u64,
    settled_kib: u64,
}

/// `VmHWM` and `VmRSS` of `pid`, in KiB.
fn memory_kib(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .with_context(|| format!("{name} missing in /proc/{pid}/status"))
    };
    Ok((field("VmHWM:")?, field("VmRSS:")?))
}

/// Whether the agent's metrics say it has synced (the snapshot compiled).
fn synced() -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&METRICS, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text.lines()
        .any(|line| line == "ovnbpf_southbound_synced 1")
}

/// Starts the agent on `remote`, waits until it has compiled its first view, reads its memory,
/// and stops it (by its PID: only the process started here).
fn run_agent(agent: &std::path::Path, remote: &str) -> Result<AgentRun> {
    let state = tempfile::tempdir()?;
    let path = |name: &str| state.path().join(name).display().to_string();
    let started = Instant::now();
    let mut child = Command::new(agent)
        .args([
            "run",
            "--sb-remote",
            remote,
            "--encap-ip",
            "192.0.2.10",
            "--system-id",
            "bench-scale",
            "--monitor-all",
            "--no-cni",
            "--no-node-nic",
            "--no-pins",
            "--metrics-address",
            &METRICS.to_string(),
        ])
        .args(["--state-dir", &path("state")])
        .args(["--control-socket", &path("control.sock")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting ovnbpf-agent")?;
    let result = (|| {
        loop {
            if let Some(status) = child.try_wait()? {
                bail!("ovnbpf-agent ended before syncing: {status}");
            }
            if synced() {
                break;
            }
            if started.elapsed() > SYNC_LIMIT {
                bail!("ovnbpf-agent did not sync within {SYNC_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let synced = started.elapsed();
        std::thread::sleep(SETTLE);
        let (peak_kib, settled_kib) = memory_kib(child.id())?;
        Ok(AgentRun {
            synced,
            peak_kib,
            settled_kib,
        })
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// Starts a real ovn-controller (and Open vSwitch under it, in a namespace of its own) as
/// chassis `bench-ovn` of `lab` with the first `local` pods bound to it, waits until it has
/// acknowledged the Southbound's current `nb_cfg` and set every local port `ovn-installed`,
/// reads the memory of ovn-controller and ovs-vswitchd, and stops them (by PID, on drop).
fn run_ovn_controller(lab: &OvnLab, local: u32) -> Result<AgentRun> {
    let netns = Netns::create(&format!("{}-ovn", unique_prefix()))?;
    let mut switch = OvsSwitch::start(&netns)?;
    // The local ports first (internal ports, bound by their iface-id), in one transaction.
    let mut ports = Vec::new();
    for index in 0..local {
        let name = format!("lp{index}");
        let binding = pod_port_name(&format!("pod-{index}"), "bench");
        ports.extend([
            "--".to_string(),
            "add-port".into(),
            "br-int".into(),
            name.clone(),
            "--".into(),
            "set".into(),
            "interface".into(),
            name,
            "type=internal".into(),
            format!("external_ids:iface-id={binding}"),
        ]);
    }
    if !ports.is_empty() {
        let ports: Vec<&str> = ports.iter().map(String::as_str).collect();
        switch.vsctl(&ports)?;
    }
    // A configuration to acknowledge: northd copies NB_Global's nb_cfg to SB_Global.
    lab.nbctl(&["--wait=sb", "sync"])?;
    let target: u64 = lab
        .sbctl(&["--bare", "--columns=nb_cfg", "list", "SB_Global"])?
        .trim()
        .parse()
        .context("SB_Global's nb_cfg")?;
    switch.vsctl(&[
        "set",
        "open",
        ".",
        "external_ids:system-id=bench-ovn",
        "external_ids:hostname=bench-ovn",
        &format!(
            "external_ids:ovn-remote={}",
            lab.unix_remote(Db::Southbound)
        ),
        "external_ids:ovn-encap-type=geneve",
        "external_ids:ovn-encap-ip=192.0.2.11",
        "external_ids:ovn-bridge-datapath-type=netdev",
        "external_ids:ovn-monitor-all=true",
    ])?;
    let started = Instant::now();
    switch.spawn("ovn-controller", &[switch.db_remote()])?;
    let acknowledged = || {
        lab.sbctl(&[
            "--bare",
            "--columns=nb_cfg",
            "find",
            "Chassis_Private",
            "name=bench-ovn",
        ])
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .is_some_and(|cfg| cfg >= target)
    };
    let installed = || {
        switch
            .vsctl(&[
                "--bare",
                "--columns=name",
                "find",
                "interface",
                "external_ids:ovn-installed=\"true\"",
            ])
            .map(|text| text.split_whitespace().count())
            .unwrap_or(0)
    };
    loop {
        if acknowledged() && installed() >= local as usize {
            break;
        }
        if started.elapsed() > SYNC_LIMIT {
            bail!(
                "ovn-controller did not program within {SYNC_LIMIT:?}{}",
                switch.log_tails()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let synced = started.elapsed();
    std::thread::sleep(SETTLE);
    let (mut peak_kib, mut settled_kib) = (0, 0);
    for program in ["ovn-controller", "ovs-vswitchd"] {
        let pid = switch
            .daemon_pid(program)
            .with_context(|| format!("{program} is not running"))?;
        let (peak, settled) = memory_kib(pid)?;
        peak_kib += peak;
        settled_kib += settled;
    }
    Ok(AgentRun {
        synced,
        peak_kib,
        settled_kib,
    })
}

pub fn run(args: &[String]) -> Result<()> {
    let sizes = sizes(args)?;
    let local: u32 = option(args, "--local-ports").unwrap_or("50").parse()?;
    let agent = match option(args, "--agent") {
        Some(path) => std::path::PathBuf::from(path),
        None => {
            println!("== bench scale: building the agent (release)");
            cmd::build_binaries(cmd::Profile::Release)?.agent
        }
    };
    println!("== bench scale: agent {}", agent.display());
    let baseline_agent = option(args, "--baseline-agent").map(std::path::PathBuf::from);
    if let Some(baseline) = &baseline_agent {
        println!("== bench scale: baseline agent {}", baseline.display());
    }
    let with_ovn_controller = !args.iter().any(|a| a == "--no-ovn-controller");
    let mut results = Vec::new();
    for pods in sizes {
        println!("== bench scale: {pods} pods: building the topology");
        let lab = OvnLab::start()?;
        populate(&lab, pods)?;
        let remote = lab.unix_remote(Db::Southbound);
        // Interleaved: dump, agent, the baseline agent, ovn-controller, twice.
        let (mut dump_ms, mut dump_rss) = (Vec::new(), 0);
        let (mut runs, mut baseline_runs, mut ovn_runs) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..2 {
            let dump =
                measure(Command::new("ovsdb-client").args(["dump", &remote, "OVN_Southbound"]))?;
            dump_ms.push(dump.wall.as_secs_f64() * 1000.0);
            dump_rss = dump_rss.max(dump.max_rss_kib);
            runs.push(run_agent(&agent, &remote)?);
            if let Some(baseline) = &baseline_agent {
                baseline_runs.push(run_agent(baseline, &remote)?);
            }
            if with_ovn_controller {
                ovn_runs.push(run_ovn_controller(&lab, local.min(pods))?);
            }
        }
        let mut result = json!({
            "pods": pods,
            "baseline_dump_ms": median(dump_ms), "baseline_dump_max_rss_kib": dump_rss,
        });
        summarize(&mut result, "agent", &runs);
        if let Some(baseline) = &baseline_agent {
            result["baseline_agent_binary"] = json!(baseline.display().to_string());
            summarize(&mut result, "baseline_agent", &baseline_runs);
        }
        if with_ovn_controller {
            result["ovn_controller_local_ports"] = json!(local.min(pods));
            let ovn_ms: Vec<f64> = (ovn_runs.iter())
                .map(|r| r.synced.as_secs_f64() * 1000.0)
                .collect();
            result["ovn_controller_programmed_ms"] = json!(median(ovn_ms.clone()));
            result["ovn_controller_programmed_ms_runs"] = json!(ovn_ms);
            result["ovn_controller_vswitchd_peak_rss_kib"] =
                json!(ovn_runs.iter().map(|r| r.peak_kib).max().unwrap_or(0));
            result["ovn_controller_vswitchd_settled_rss_kib"] =
                json!(ovn_runs.iter().map(|r| r.settled_kib).max().unwrap_or(0));
        }
        results.push(result);
    }
    print_table(&results);
    write_json("scale", &results)
}

/// `<who>_synced_ms` (median), `<who>_peak_rss_kib` and `<who>_settled_rss_kib` (the largest),
/// and each run's (`…_runs`): the settled size is bimodal here (one build settled at 112 and at
/// 145 MiB in two runs of one invocation at 10,000 pods, its [heap] holding the difference).
fn summarize(result: &mut Value, who: &str, runs: &[AgentRun]) {
    let synced_ms: Vec<f64> = runs
        .iter()
        .map(|r| r.synced.as_secs_f64() * 1000.0)
        .collect();
    result[format!("{who}_synced_ms")] = json!(median(synced_ms.clone()));
    result[format!("{who}_synced_ms_runs")] = json!(synced_ms);
    let peaks: Vec<u64> = runs.iter().map(|r| r.peak_kib).collect();
    let settled: Vec<u64> = runs.iter().map(|r| r.settled_kib).collect();
    result[format!("{who}_peak_rss_kib")] = json!(peaks.iter().max());
    result[format!("{who}_settled_rss_kib")] = json!(settled.iter().max());
    result[format!("{who}_peak_rss_kib_runs")] = json!(peaks);
    result[format!("{who}_settled_rss_kib_runs")] = json!(settled);
}

fn print_table(results: &[Value]) {
    print_agent_table(results);
    if results
        .iter()
        .any(|r| r.get("baseline_agent_synced_ms").is_some())
    {
        print_baseline_agent_table(results);
    }
    if results
        .iter()
        .all(|r| r.get("ovn_controller_programmed_ms").is_none())
    {
        return;
    }
    println!();
    println!(
        "real ovn-controller + ovs-vswitchd (userspace datapath), ovn-monitor-all, with local ports bound: start → nb_cfg acknowledged and every local port ovn-installed; the agent: start → first view compiled, every datapath, no datapath programmed"
    );
    println!(
        "| pods | local ports | ovn-controller programmed ms | agent compiled ms | agent / ovn | ovn-controller + vswitchd peak RSS MiB | agent peak RSS MiB | agent / ovn | settled MiB, ovn / agent |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let f = |key: &str| r[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {:.2} | {:.1} / {:.1} |",
            r["pods"],
            r["ovn_controller_local_ports"],
            f("ovn_controller_programmed_ms"),
            f("agent_synced_ms"),
            f("agent_synced_ms") / f("ovn_controller_programmed_ms"),
            f("ovn_controller_vswitchd_peak_rss_kib") / 1024.0,
            f("agent_peak_rss_kib") / 1024.0,
            f("agent_peak_rss_kib") / f("ovn_controller_vswitchd_peak_rss_kib"),
            f("ovn_controller_vswitchd_settled_rss_kib") / 1024.0,
            f("agent_settled_rss_kib") / 1024.0,
        );
    }
}

fn print_baseline_agent_table(results: &[Value]) {
    println!();
    println!(
        "the agent against the baseline agent (--baseline-agent), same runs interleaved: each run's value, the ratio of the medians"
    );
    println!(
        "| pods | start → compiled ms, agent / baseline | ratio | peak RSS MiB, agent / baseline | ratio | settled RSS MiB, agent / baseline | ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let pair = |key: &str, scale: f64| {
            let runs = |who: &str| -> Vec<f64> {
                let values = numbers(r, &format!("{who}_{key}_runs"));
                values.into_iter().map(|v| v / scale).collect()
            };
            let (ours, theirs) = (runs("agent"), runs("baseline_agent"));
            let shown = |values: &[f64]| {
                (values.iter().map(|v| format!("{v:.1}")))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!(
                "{} / {} | {:.2}",
                shown(&ours),
                shown(&theirs),
                median(ours.clone()) / median(theirs.clone())
            )
        };
        println!(
            "| {} | {} | {} | {} |",
            r["pods"],
            pair("synced_ms", 1.0),
            pair("peak_rss_kib", 1024.0),
            pair("settled_rss_kib", 1024.0),
        );
    }
}

fn print_agent_table(results: &[Value]) {
    println!();
    println!(
        "| pods | dump ms | agent start → compiled ms | × dump | dump peak RSS MiB | agent peak RSS MiB | agent settled RSS MiB | peak / dump |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let f = |key: &str| r[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {:.1} | {:.2} |",
            r["pods"],
            f("baseline_dump_ms"),
            f("agent_synced_ms"),
            f("agent_synced_ms") / f("baseline_dump_ms"),
            f("baseline_dump_max_rss_kib") / 1024.0,
            f("agent_peak_rss_kib") / 1024.0,
            f("agent_settled_rss_kib") / 1024.0,
            f("agent_peak_rss_kib") / f("baseline_dump_max_rss_kib"),
        );
    }
}
