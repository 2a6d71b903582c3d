//! `bench scale [--pods 1000,10000] [--agent PATH] [--baseline-agent PATH] [--local-ports 50]
//! [--changes 100] [--no-ovn-controller]`: one chassis of a large Southbound (a real OVN central
//! with `bench sb`'s topology), as each of these runs it, interleaved in one invocation (dump,
//! agent, baseline agent, ovn-controller; twice):
//! - `ovsdb-client dump` of the Southbound: what the server takes to hand the tables over, and
//!   what a bare client holds of them (the snapshot limit);
//! - ovnbpf-agent (the release build, or the binary at PATH; with `--baseline-agent`, another
//!   build, e.g. another commit's), on a simulated node with its eBPF datapath on the node's
//!   uplink and `--local-ports` of the pods bound to it (`--local-port NAME=VETH`), following
//!   the Southbound with `--monitor-all`;
//! - a real ovn-controller with Open vSwitch (userspace datapath) on a second node, also
//!   `ovn-monitor-all`, with as many local ports (internal ports with their `iface-id`).
//!
//! Each is measured the same way: from its start until it is **programmed**: it has
//! acknowledged the Southbound's `nb_cfg` (bumped before each run; both write
//! `Chassis_Private.nb_cfg` once that configuration is in their datapath) and holds every local
//! port, `up` (and, for ovn-controller, `ovn-installed`); both chassis are deleted from the
//! Southbound before each run, so nothing is left from the last. The agent's "compiled" (its
//! metrics first say `ovnbpf_southbound_synced 1`) is shown beside it. Peak RSS (`VmHWM`) and the
//! RSS settled 3 s after programming: the agent's, and ovn-controller's and ovs-vswitchd's
//! together. Then `--changes` Port_Binding changes (half in each repetition), each timed by a
//! packet ([`super::change_probe`]): NB → packet and SB → packet, p50 and p99.

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use ovnbpf_tests::{
    kubeovn::{mac_for, pod_port_name},
    names::unique_prefix,
    netns::Netns,
    network::{Node, Pod, PodSpec, Underlay},
    ovn::{Db, OvnLab},
    ovs_chassis::{OvsSwitch, full_checksums},
};
use serde_json::{Value, json};

use super::{
    change_probe::{ChangeProbe, ProbePort, Sample},
    ovsdb_watch::SbWatch,
    sb::{measure, pod_address, populate},
    stats::{median, numbers, percentile, sizes, write_json},
};
use crate::{args::option, cmd};

/// Where the measured agent serves its metrics (in its node's namespace).
const METRICS: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 19_665);
/// How long a chassis may take to be programmed.
const SYNC_LIMIT: Duration = Duration::from_secs(600);
/// How long a chassis runs after it was programmed before its settled RSS is read.
const SETTLE: Duration = Duration::from_secs(3);
/// How often the agent's start is looked at.
const POLL: Duration = Duration::from_millis(20);
/// The agent's chassis name.
const AGENT_CHASSIS: &str = "bench-scale";
/// ovn-controller's chassis name.
const OVN_CHASSIS: &str = "bench-ovn";
/// The namespace of the bench's pods.
const NAMESPACE: &str = "bench";
/// The probe pod of [`ChangeProbe`]: in `ovn-default` (10.16.0.0/16), beyond every populated pod.
const PROBE_POD: &str = "probe";
const PROBE_IP: Ipv4Addr = Ipv4Addr::new(10, 16, 250, 250);

/// One chassis run: start → programmed, its memory, its changes' latencies.
struct Run {
    /// The agent's start → first view compiled (`None` for ovn-controller).
    compiled: Option<Duration>,
    programmed: Duration,
    peak_kib: u64,
    settled_kib: u64,
    changes: Vec<Sample>,
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

/// The sum over `pids` of [`memory_kib`].
fn memory_of(pids: &[u32]) -> Result<(u64, u64)> {
    pids.iter().try_fold((0, 0), |(peak, rss), &pid| {
        let (p, r) = memory_kib(pid)?;
        Ok((peak + p, rss + r))
    })
}

/// Whether the agent's metrics (served in `netns`) say it has synced (the snapshot compiled).
fn synced(netns: &Netns) -> bool {
    netns
        .run_in(|| {
            let mut stream = TcpStream::connect_timeout(&METRICS, Duration::from_millis(200))?;
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
            let mut text = String::new();
            stream.read_to_string(&mut text)?;
            Ok(text
                .lines()
                .any(|line| line == "ovnbpf_southbound_synced 1"))
        })
        .unwrap_or(false)
}

/// The first `local` pods' logical ports: the ports bound to the chassis measured.
fn local_ports(local: u32) -> Vec<String> {
    (0..local)
        .map(|index| pod_port_name(&format!("pod-{index}"), NAMESPACE))
        .collect()
}

/// Deletes both chassis from the Southbound (their bindings' chassis go with them) and bumps
/// `nb_cfg`: the configuration the next chassis must acknowledge.
fn fresh_configuration(lab: &OvnLab) -> Result<i64> {
    for chassis in [AGENT_CHASSIS, OVN_CHASSIS] {
        lab.sbctl(&["--if-exists", "chassis-del", chassis])?;
    }
    lab.nbctl(&["--wait=sb", "sync"])?;
    lab.sbctl(&["--bare", "--columns=nb_cfg", "list", "SB_Global"])?
        .trim()
        .parse()
        .context("SB_Global's nb_cfg")
}

/// A node's two pods of the change probe: the sender, which is `pod-0` (a local port in
/// `ovn-default`), and the probe, whose port the changes insert and delete.
struct ProbePods {
    sender: Pod,
    probe: Pod,
    probe_mac: String,
}

impl ProbePods {
    fn create(node: &Node) -> Result<Self> {
        // A pod on `ovn-default` (a /16) with its logical port's MAC and address.
        let pod = |name: &str, host_interface: &str, mac: &str, ip: Ipv4Addr| {
            node.add_pod(&PodSpec {
                name,
                host_interface,
                mac: Some(mac),
                address: Some(&format!("{ip}/16")),
                gateway: None,
                mtu: None,
            })
        };
        let (_, sender_ip) = pod_address(0);
        let sender = pod("sender", "snd_h", &mac_for("pod-0"), sender_ip)?;
        let probe_mac = mac_for(PROBE_POD);
        let probe = pod(PROBE_POD, "prb_h", &probe_mac, PROBE_IP)?;
        Ok(Self {
            sender,
            probe,
            probe_mac,
        })
    }

    fn port(&self) -> ProbePort<'_> {
        ProbePort {
            switch: "ovn-default",
            pod: PROBE_POD,
            namespace: NAMESPACE,
            mac: &self.probe_mac,
            ip: PROBE_IP,
        }
    }

    /// `changes` Port_Binding changes, each timed by a packet.
    fn changes(&self, lab: &OvnLab, watch: &SbWatch, changes: usize) -> Result<Vec<Sample>> {
        let port = self.port();
        let mut probe = ChangeProbe::start(
            self.sender.netns(),
            self.probe.netns(),
            &port,
            &lab.unix_remote(Db::Northbound),
        )?;
        (0..changes)
            .map(|index| {
                probe
                    .sample(watch, &port)
                    .with_context(|| format!("change {index}"))
            })
            .collect()
    }
}

/// The simulated node of the agent: its uplink on an underlay bridge, the probe's pods, and a
/// veth pair `lp<i>`/`lp<i>p` for each other local port.
struct AgentNode {
    node: Node,
    pods: ProbePods,
    local: u32,
}

impl AgentNode {
    fn create(underlay: &mut Underlay, local: u32) -> Result<Self> {
        let node = underlay.add_node("agent")?;
        let pods = ProbePods::create(&node)?;
        let mut batch = String::new();
        for index in 1..local {
            batch.push_str(&format!(
                "link add lp{index} type veth peer name lp{index}p\nlink set lp{index} up\nlink set lp{index}p up\n"
            ));
        }
        let file = tempfile::NamedTempFile::new()?;
        std::fs::write(file.path(), batch)?;
        node.netns()
            .exec("ip", &["-batch", &file.path().display().to_string()])?;
        Ok(Self { node, pods, local })
    }

    /// `--local-port NAME=INTERFACE` for every local port.
    fn local_port_args(&self) -> Vec<String> {
        let interface = |index: u32| match index {
            0 => self.pods.sender.host_interface().to_string(),
            _ => format!("lp{index}"),
        };
        let mut args: Vec<String> = local_ports(self.local)
            .into_iter()
            .zip(0..)
            .flat_map(|(port, index)| {
                [
                    "--local-port".to_string(),
                    format!("{port}={}", interface(index)),
                ]
            })
            .collect();
        let probe = self.pods.port().logical_port();
        args.extend([
            "--local-port".into(),
            format!("{probe}={}", self.pods.probe.host_interface()),
        ]);
        args
    }
}

/// Starts the agent on `node`, waits until it is programmed, reads its memory, times `changes`
/// changes, and stops it (by its PID: only the process started here).
fn run_agent(
    agent: &Path,
    lab: &OvnLab,
    watch: &SbWatch,
    node: &AgentNode,
    changes: usize,
) -> Result<Run> {
    let target = fresh_configuration(lab)?;
    let state = tempfile::tempdir()?;
    let path = |name: &str| state.path().join(name).display().to_string();
    // `ip netns exec` (which execs the agent: its PID is the agent's), for the namespace's
    // /sys, where the agent finds its interfaces.
    let mut command = node.node.netns().command(&agent.display().to_string());
    command
        .args(["run", "--sb-remote", &lab.unix_remote(Db::Southbound)])
        .args([
            "--encap-ip",
            &node.node.ip().to_string(),
            "--uplink",
            "auto",
        ])
        .args(["--system-id", AGENT_CHASSIS, "--hostname", AGENT_CHASSIS])
        .args(["--monitor-all", "--no-cni", "--no-node-nic", "--no-pins"])
        .args(["--metrics-address", &METRICS.to_string()])
        .args(["--state-dir", &path("state")])
        .args(["--control-socket", &path("control.sock")])
        .args(node.local_port_args())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(path("agent.log"))?);
    let ports = local_ports(node.local);
    let started = Instant::now();
    let mut child = command.spawn().context("starting ovnbpf-agent")?;
    let result = (|| {
        let mut compiled = None;
        loop {
            if let Some(status) = child.try_wait()? {
                bail!("ovnbpf-agent ended before it was programmed: {status}");
            }
            if compiled.is_none() && synced(node.node.netns()) {
                compiled = Some(started.elapsed());
            }
            if watch.wait_programmed(AGENT_CHASSIS, target, &ports, POLL)? {
                break;
            }
            if started.elapsed() > SYNC_LIMIT {
                bail!(
                    "ovnbpf-agent was not programmed within {SYNC_LIMIT:?} ({}); its log ends:\n{}",
                    watch.describe(AGENT_CHASSIS, target, &ports),
                    log_tail(&path("agent.log"))
                );
            }
        }
        let programmed = started.elapsed();
        if compiled.is_none() && synced(node.node.netns()) {
            compiled = Some(programmed);
        }
        let (peak_kib, settled_kib, changes) =
            settle_and_probe(&[child.id()], || node.pods.changes(lab, watch, changes))?;
        Ok(Run {
            compiled,
            programmed,
            peak_kib,
            settled_kib,
            changes,
        })
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// The last lines of the log at `path`.
fn log_tail(path: &str) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// After a chassis was programmed: waits [`SETTLE`], reads the RSS of `pids`, times the changes,
/// then reads their peak RSS (which the changes may have raised).
fn settle_and_probe(
    pids: &[u32],
    changes: impl FnOnce() -> Result<Vec<Sample>>,
) -> Result<(u64, u64, Vec<Sample>)> {
    std::thread::sleep(SETTLE);
    let (_, settled_kib) = memory_of(pids)?;
    let changes = changes()?;
    let (peak_kib, _) = memory_of(pids)?;
    Ok((peak_kib, settled_kib, changes))
}

/// Starts a real ovn-controller (and Open vSwitch under it) on `node` as chassis
/// [`OVN_CHASSIS`] with the first `local` pods bound to it (the sender pod's veth and internal
/// ports), waits until it is programmed and every local port `ovn-installed`, reads the memory
/// of ovn-controller and ovs-vswitchd, times `changes` changes, and stops them (by PID, on
/// drop).
fn run_ovn_controller(
    lab: &OvnLab,
    watch: &SbWatch,
    node: &Node,
    pods: &ProbePods,
    local: u32,
    changes: usize,
) -> Result<Run> {
    let mut switch = OvsSwitch::start(node.netns())?;
    // The local ports first, in one transaction: the probe's pods' veths, internal ports for
    // the others, each bound by its iface-id.
    let mut ports = Vec::new();
    let plugged = [
        (
            pods.sender.host_interface().to_string(),
            pod_port_name("pod-0", NAMESPACE),
            false,
        ),
        (
            pods.probe.host_interface().to_string(),
            pods.port().logical_port(),
            false,
        ),
    ];
    let internal = (1..local).map(|index| {
        (
            format!("lp{index}"),
            pod_port_name(&format!("pod-{index}"), NAMESPACE),
            true,
        )
    });
    for (name, binding, internal) in plugged.into_iter().chain(internal) {
        ports.extend(
            [
                "--",
                "add-port",
                "br-int",
                &name,
                "--",
                "set",
                "interface",
                &name,
            ]
            .map(String::from),
        );
        if internal {
            ports.push("type=internal".into());
        }
        ports.push(format!("external_ids:iface-id={binding}"));
    }
    let ports: Vec<&str> = ports.iter().map(String::as_str).collect();
    switch.vsctl(&ports)?;
    let target = fresh_configuration(lab)?;
    switch.vsctl(&[
        "set",
        "open",
        ".",
        &format!("external_ids:system-id={OVN_CHASSIS}"),
        &format!("external_ids:hostname={OVN_CHASSIS}"),
        &format!(
            "external_ids:ovn-remote={}",
            lab.unix_remote(Db::Southbound)
        ),
        "external_ids:ovn-encap-type=geneve",
        "external_ids:ovn-encap-ip=192.0.2.11",
        "external_ids:ovn-bridge-datapath-type=netdev",
        "external_ids:ovn-monitor-all=true",
    ])?;
    let bound = local_ports(local);
    let started = Instant::now();
    switch.spawn("ovn-controller", &[switch.db_remote()])?;
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
        if watch.wait_programmed(OVN_CHASSIS, target, &bound, POLL)? && installed() >= bound.len() {
            break;
        }
        if started.elapsed() > SYNC_LIMIT {
            bail!(
                "ovn-controller was not programmed within {SYNC_LIMIT:?} ({}){}",
                watch.describe(OVN_CHASSIS, target, &bound),
                switch.log_tails()
            );
        }
    }
    let programmed = started.elapsed();
    let pids = ["ovn-controller", "ovs-vswitchd"]
        .into_iter()
        .map(|program| {
            switch
                .daemon_pid(program)
                .with_context(|| format!("{program} is not running"))
        })
        .collect::<Result<Vec<u32>>>()?;
    let (peak_kib, settled_kib, changes) =
        settle_and_probe(&pids, || pods.changes(lab, watch, changes))?;
    Ok(Run {
        compiled: None,
        programmed,
        peak_kib,
        settled_kib,
        changes,
    })
}

pub fn run(args: &[String]) -> Result<()> {
    let sizes = sizes(args)?;
    let local: u32 = option(args, "--local-ports").unwrap_or("50").parse()?;
    anyhow::ensure!(
        local >= 1,
        "--local-ports: at least 1 (the change probe's sender)"
    );
    let changes: usize = option(args, "--changes").unwrap_or("100").parse()?;
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
        let local = local.min(pods);
        println!("== bench scale: {pods} pods: building the topology");
        let lab = OvnLab::start()?;
        populate(&lab, pods)?;
        let remote = lab.unix_remote(Db::Southbound);
        let watch = SbWatch::start(&remote)?;
        let mut underlay = Underlay::create(&unique_prefix())?;
        let agent_node = AgentNode::create(&mut underlay, local)?;
        let ovn_node = match with_ovn_controller {
            true => {
                let node = underlay.add_node("ovn")?;
                let pods = ProbePods::create(&node)?;
                for pod in [&pods.sender, &pods.probe] {
                    full_checksums(node.netns(), pod.host_interface(), pod.netns())?;
                }
                Some((node, pods))
            }
            false => None,
        };
        // Interleaved: dump, agent, the baseline agent, ovn-controller, twice; half the changes
        // in each repetition.
        let (mut dump_ms, mut dump_rss) = (Vec::new(), 0);
        let (mut runs, mut baseline_runs, mut ovn_runs) = (Vec::new(), Vec::new(), Vec::new());
        for repetition in 0..2 {
            let changes = (changes + 1 - repetition) / 2;
            println!("== bench scale: {pods} pods: repetition {}", repetition + 1);
            let dump =
                measure(Command::new("ovsdb-client").args(["dump", &remote, "OVN_Southbound"]))?;
            dump_ms.push(dump.wall.as_secs_f64() * 1000.0);
            dump_rss = dump_rss.max(dump.max_rss_kib);
            runs.push(run_agent(&agent, &lab, &watch, &agent_node, changes).context("the agent")?);
            if let Some(baseline) = &baseline_agent {
                baseline_runs.push(
                    run_agent(baseline, &lab, &watch, &agent_node, changes)
                        .context("the baseline agent")?,
                );
            }
            if let Some((node, pods)) = &ovn_node {
                ovn_runs.push(
                    run_ovn_controller(&lab, &watch, node, pods, local, changes)
                        .context("ovn-controller")?,
                );
            }
        }
        let mut result = json!({
            "pods": pods,
            "local_ports": local,
            "baseline_dump_ms": median(dump_ms), "baseline_dump_max_rss_kib": dump_rss,
        });
        summarize(&mut result, "agent", &runs);
        if let Some(baseline) = &baseline_agent {
            result["baseline_agent_binary"] = json!(baseline.display().to_string());
            summarize(&mut result, "baseline_agent", &baseline_runs);
        }
        if with_ovn_controller {
            summarize(&mut result, "ovn_controller", &ovn_runs);
        }
        results.push(result);
    }
    print_table(&results);
    write_json("scale", &results)
}

/// Milliseconds.
fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Per run (`…_runs`) and summarized: `<who>_programmed_ms` and `<who>_compiled_ms` (medians),
/// `<who>_peak_rss_kib` and `<who>_settled_rss_kib` (the largest: the settled size is bimodal
/// here, one build settled at 112 and at 145 MiB in two runs of one invocation at 10,000
/// pods), and over every change of both runs `<who>_change_{nb,sb}_ms_{p50,p99}` and the
/// samples.
fn summarize(result: &mut Value, who: &str, runs: &[Run]) {
    let programmed: Vec<f64> = runs.iter().map(|r| ms(r.programmed)).collect();
    result[format!("{who}_programmed_ms")] = json!(median(programmed.clone()));
    result[format!("{who}_programmed_ms_runs")] = json!(programmed);
    let compiled: Vec<f64> = runs.iter().filter_map(|r| r.compiled.map(ms)).collect();
    if !compiled.is_empty() {
        result[format!("{who}_compiled_ms")] = json!(median(compiled.clone()));
        result[format!("{who}_compiled_ms_runs")] = json!(compiled);
    }
    let peaks: Vec<u64> = runs.iter().map(|r| r.peak_kib).collect();
    let settled: Vec<u64> = runs.iter().map(|r| r.settled_kib).collect();
    result[format!("{who}_peak_rss_kib")] = json!(peaks.iter().max());
    result[format!("{who}_settled_rss_kib")] = json!(settled.iter().max());
    result[format!("{who}_peak_rss_kib_runs")] = json!(peaks);
    result[format!("{who}_settled_rss_kib_runs")] = json!(settled);
    for (kind, of) in [
        (
            "nb",
            (|s: &Sample| s.nb_to_packet) as fn(&Sample) -> Duration,
        ),
        ("sb", |s: &Sample| s.sb_to_packet),
    ] {
        let mut samples: Vec<f64> = runs
            .iter()
            .flat_map(|r| &r.changes)
            .map(|s| ms(of(s)))
            .collect();
        result[format!("{who}_change_{kind}_ms_samples")] = json!(samples.clone());
        samples.sort_by(f64::total_cmp);
        result[format!("{who}_change_{kind}_ms_p50")] = json!(percentile(&samples, 50.0));
        result[format!("{who}_change_{kind}_ms_p99")] = json!(percentile(&samples, 99.0));
    }
}

fn print_table(results: &[Value]) {
    print_agent_table(results);
    if results
        .iter()
        .any(|r| r.get("baseline_agent_programmed_ms").is_some())
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
        "real ovn-controller + ovs-vswitchd (userspace datapath) and the agent (eBPF datapath), each one chassis with the same local ports, ovn-monitor-all: start → programmed (nb_cfg acknowledged, every local port bound and up); one Port_Binding change by a packet, p50 / p99"
    );
    println!(
        "| pods | local ports | programmed ms, ovn / agent | agent / ovn | peak RSS MiB, ovn + vswitchd / agent | agent / ovn | settled MiB, ovn / agent | NB → packet ms, ovn / agent | SB → packet ms, ovn / agent |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let f = |key: &str| r[key].as_f64().unwrap_or(f64::NAN);
        let latency = |kind: &str| {
            format!(
                "{:.2} / {:.2}, {:.2} / {:.2}",
                f(&format!("ovn_controller_change_{kind}_ms_p50")),
                f(&format!("ovn_controller_change_{kind}_ms_p99")),
                f(&format!("agent_change_{kind}_ms_p50")),
                f(&format!("agent_change_{kind}_ms_p99")),
            )
        };
        println!(
            "| {} | {} | {:.0} / {:.0} | {:.2} | {:.1} / {:.1} | {:.2} | {:.1} / {:.1} | {} | {} |",
            r["pods"],
            r["local_ports"],
            f("ovn_controller_programmed_ms"),
            f("agent_programmed_ms"),
            f("agent_programmed_ms") / f("ovn_controller_programmed_ms"),
            f("ovn_controller_peak_rss_kib") / 1024.0,
            f("agent_peak_rss_kib") / 1024.0,
            f("agent_peak_rss_kib") / f("ovn_controller_peak_rss_kib"),
            f("ovn_controller_settled_rss_kib") / 1024.0,
            f("agent_settled_rss_kib") / 1024.0,
            latency("nb"),
            latency("sb"),
        );
    }
}

fn print_baseline_agent_table(results: &[Value]) {
    println!();
    println!(
        "the agent against the baseline agent (--baseline-agent), same runs interleaved: each run's value, the ratio of the medians"
    );
    println!(
        "| pods | start → programmed ms, agent / baseline | ratio | peak RSS MiB, agent / baseline | ratio | settled RSS MiB, agent / baseline | ratio |"
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
            pair("programmed_ms", 1.0),
            pair("peak_rss_kib", 1024.0),
            pair("settled_rss_kib", 1024.0),
        );
    }
}

fn print_agent_table(results: &[Value]) {
    println!();
    println!("the agent against the snapshot limit: `ovsdb-client dump` of the same Southbound");
    println!(
        "| pods | dump ms | agent start → compiled ms | start → programmed ms | programmed / dump | dump peak RSS MiB | agent peak RSS MiB | agent settled RSS MiB |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let f = |key: &str| r[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {:.1} |",
            r["pods"],
            f("baseline_dump_ms"),
            f("agent_compiled_ms"),
            f("agent_programmed_ms"),
            f("agent_programmed_ms") / f("baseline_dump_ms"),
            f("baseline_dump_max_rss_kib") / 1024.0,
            f("agent_peak_rss_kib") / 1024.0,
            f("agent_settled_rss_kib") / 1024.0,
        );
    }
}
