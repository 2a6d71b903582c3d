//! `cargo xtask bench datapath [--runs 3] [--seconds 5] [--paths abcdefghi]`: pod↔pod across two
//! nodes, measured in one run: (a) a raw veth pair between two namespaces (the limit), (b) the
//! same node/pod topology with plain kernel routing and no encapsulation, (c) ovnbpf: two agents,
//! Geneve in eBPF, one switch; (d) ovnbpf routed between two subnets of a VPC; (e) ovnbpf routed
//! across a VPC peering; (f) ovnbpf on an underlay switch (VLAN 100 through a physical switch,
//! MTU 1500); (h) ovnbpf routed between two subnets of the default VPC as Kube-OVN builds it (its
//! node, gateway and subnet policies in the path), next to (d); (i) the node's own namespace to
//! that pod through `ovn0` (kubelet's probe path), next to (h); (j) (c)'s pair again once the
//! receiver has a NetworkPolicy of 100 allow-related ACLs naming a 1000-address set (conntrack
//! on both pods' switch), next to (c), with both paths' new connections per second. TCP
//! throughput (iperf3, one
//! stream, median of the runs) and TCP
//! request/response latency (sockperf ping-pong, 14-byte messages, full round trip, `--runs`
//! runs of `--seconds`; the median over runs of each run's p50 and p99). Pod MTU is 1442 on (b)
//! and (c), so both carry the same payload per packet.
//!
//! (g) broadcast: one ARP broadcast from a pod of a switch with 64 other pods on the node and
//! pods on 32 other chassis, through the real `from_pod` under BPF_PROG_TEST_RUN (the
//! `flood_large::flood_cost` driver: 64 veth clones and 32 Geneve copies per broadcast, checked
//! once, then `--flood-runs` runs): the kernel's mean time per broadcast and per copy, next to
//! the programs' verified instruction counts. Its baseline, in the same fixture and run: one
//! unicast to a local pod and one to another chassis, and the broadcast's copies priced as such
//! unicasts (`broadcast / unicasts`). `--broadcast-only` measures just this case.

use std::{net::Ipv4Addr, path::Path};

use anyhow::{Context, Result};
use ovnbpf_tests::{
    agent::AgentSpec,
    bpffs::BpfMount,
    kubeovn::{DEFAULT_VPC, PolicyPort, PolicyRule, Topology, mac_for},
    names::unique_prefix,
    netns::Netns,
    network::{Node, PhysicalSwitch, PodSpec, Underlay},
    ovn::OvnLab,
    process,
};
use serde_json::{Value, json};

use super::stats::{median, write_json};
use crate::{
    args::option,
    cmd,
    demo::agents::{stop_agents, wait_all_up},
};

/// What one path measured.
struct PathResult {
    name: &'static str,
    gbits: Vec<f64>,
    /// Per run: sockperf's round-trip p50 and p99 (µs).
    rtt_us: Vec<(f64, f64)>,
    /// Per run: new TCP connections per second (connect, then close), where measured.
    connections_per_s: Vec<f64>,
}

impl PathResult {
    fn gbit_median(&self) -> f64 {
        median(self.gbits.clone())
    }
    /// The median over runs of the p50 (`p99 == false`) or p99.
    fn rtt(&self, p99: bool) -> f64 {
        median(
            self.rtt_us
                .iter()
                .map(|(p50, p99_value)| if p99 { *p99_value } else { *p50 })
                .collect(),
        )
    }
}

/// iperf3 from `client` to `server_ip` (served from `server`), `runs` times; Gbit/s per run.
fn throughput(
    client: &Netns,
    server: &Netns,
    server_ip: Ipv4Addr,
    runs: u32,
    seconds: u32,
) -> Result<Vec<f64>> {
    let ip = server_ip.to_string();
    let _server = server.spawn("iperf3", "iperf3", &["-s", "-B", &ip], None)?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut results = Vec::new();
    for _ in 0..runs {
        let text = client.exec("iperf3", &["-c", &ip, "-t", &seconds.to_string(), "-J"])?;
        let report: Value = serde_json::from_str(&text).context("iperf3 -J output")?;
        let bits = report["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .context("iperf3 report without sum_received")?;
        results.push(bits / 1e9);
    }
    Ok(results)
}

/// sockperf TCP ping-pong from `client` to `server_ip` (served from `server`), `runs` runs of
/// `seconds`: each run's round-trip p50 and p99 in µs.
fn latency(
    client: &Netns,
    server: &Netns,
    server_ip: Ipv4Addr,
    runs: u32,
    seconds: u32,
) -> Result<Vec<(f64, f64)>> {
    let ip = server_ip.to_string();
    let _server = server.spawn(
        "sockperf",
        "sockperf",
        &["server", "--tcp", "-i", &ip, "-p", "11111"],
        None,
    )?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut results = Vec::new();
    for _ in 0..runs {
        let text = client.exec(
            "sockperf",
            &[
                "ping-pong",
                "--tcp",
                "-i",
                &ip,
                "-p",
                "11111",
                "-t",
                &seconds.to_string(),
                "-m",
                "14",
                "--full-rtt",
            ],
        )?;
        let percentile = |which: &str| {
            text.lines()
                .find(|line| line.contains(&format!("percentile {which} =")))
                .and_then(|line| line.rsplit('=').next()?.trim().parse::<f64>().ok())
                .with_context(|| format!("sockperf printed no percentile {which}:\n{text}"))
        };
        results.push((percentile("50.000")?, percentile("99.000")?));
    }
    Ok(results)
}

fn measure(
    name: &'static str,
    client: &Netns,
    server: &Netns,
    server_ip: Ipv4Addr,
    runs: u32,
    seconds: u32,
) -> Result<PathResult> {
    println!("== bench datapath: {name}");
    Ok(PathResult {
        name,
        gbits: throughput(client, server, server_ip, runs, seconds)?,
        rtt_us: latency(client, server, server_ip, runs, seconds)?,
        connections_per_s: Vec::new(),
    })
}

/// Connections a client opens and closes one after the other in each run.
const CONNECTIONS: u32 = 2_000;
/// The port of the connection-rate server.
const CONNECTION_PORT: u16 = 12_345;

/// New TCP connections per second from `client` to `server_ip` (a Python listener in `server`
/// accepting and closing), `runs` runs of [`CONNECTIONS`] connect-and-close each: what each
/// connection's setup costs on the path (conntrack commits, ACL walks of new connections).
fn connection_rate(
    client: &Netns,
    server: &Netns,
    server_ip: Ipv4Addr,
    runs: u32,
) -> Result<Vec<f64>> {
    let ip = server_ip.to_string();
    let listener = [
        "import socket".to_string(),
        "s = socket.socket()".into(),
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)".into(),
        format!("s.bind(('{ip}', {CONNECTION_PORT}))"),
        "s.listen(4096)".into(),
        "while True:".into(),
        "    c, _ = s.accept()".into(),
        "    c.close()".into(),
    ]
    .join("\n");
    let _server = server.spawn("python3", "python3", &["-c", &listener], None)?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    // Closed with a reset (linger 0), so the client keeps no TIME_WAIT and never runs out of
    // ports.
    let dialer = [
        "import socket, struct, time".to_string(),
        "start = time.monotonic()".into(),
        format!("for _ in range({CONNECTIONS}):"),
        format!("    c = socket.create_connection(('{ip}', {CONNECTION_PORT}), 2)"),
        "    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))".into(),
        "    c.close()".into(),
        format!("print({CONNECTIONS} / (time.monotonic() - start))"),
    ]
    .join("\n");
    let mut results = Vec::new();
    for _ in 0..runs {
        let text = client.exec("python3", &["-c", &dialer])?;
        results.push(
            text.trim()
                .parse::<f64>()
                .with_context(|| format!("the dialer printed {text:?}"))?,
        );
    }
    Ok(results)
}

/// The NetworkPolicy of path (j) on the pod with port `port` (namespace `bench`): one ingress
/// rule whose peer is an address set of 1000 addresses (`peer` among them) and 100 ports, so 100
/// allow-related ACLs, the ones the bench's tools use (iperf3, sockperf, the connection-rate
/// server) last: every packet of a connection walks past the other 97.
fn hundred_acls(port: &str, peer: Ipv4Addr) -> Topology {
    let mut addresses: Vec<String> = (0..999u32)
        .map(|i| Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 200, 0, 0)) + i).to_string())
        .collect();
    addresses.push(peer.to_string());
    let allow: Vec<&str> = addresses.iter().map(String::as_str).collect();
    let mut ports: Vec<PolicyPort> = (0..97u16)
        .map(|i| PolicyPort::Port("tcp", 20_000 + i))
        .collect();
    ports.extend([
        PolicyPort::Port("tcp", 5201),
        PolicyPort::Port("tcp", 11111),
        PolicyPort::Port("tcp", CONNECTION_PORT),
    ]);
    let mut topology = Topology::new();
    topology.network_policy(
        "bench",
        "bench",
        &[port],
        Some(&[PolicyRule {
            allow: &allow,
            except: &[],
            ports: &ports,
        }]),
        None,
    );
    topology
}

/// (a) Two namespaces joined by one veth pair.
fn raw(prefix: &str, runs: u32, seconds: u32) -> Result<PathResult> {
    let left = Netns::create(&format!("{prefix}-raw1"))?;
    let right = Netns::create(&format!("{prefix}-raw2"))?;
    left.veth_to("eth0", "eth0", &right)?;
    for (netns, address) in [(&left, "10.99.0.1/24"), (&right, "10.99.0.2/24")] {
        netns.ip(&["addr", "add", address, "dev", "eth0"])?;
        netns.ip(&["link", "set", "eth0", "up"])?;
    }
    measure(
        "raw veth",
        &left,
        &right,
        Ipv4Addr::new(10, 99, 0, 2),
        runs,
        seconds,
    )
}

/// (b) Pods behind veths on two nodes; the nodes route the pod subnets to each other.
fn routed(prefix: &str, runs: u32, seconds: u32) -> Result<PathResult> {
    let mut underlay = Underlay::create(&format!("{prefix}r"))?;
    let nodes = [underlay.add_node("node1")?, underlay.add_node("node2")?];
    let mut pods = Vec::new();
    for (index, node) in nodes.iter().enumerate() {
        let subnet = index + 1;
        let pod = node.add_pod(&PodSpec {
            name: "pod",
            host_interface: "pod_h",
            mac: None,
            address: Some(&format!("10.1.{subnet}.2/24")),
            gateway: Some(Ipv4Addr::new(10, 1, subnet as u8, 1)),
            mtu: Some(1442),
        })?;
        node.netns().ip(&[
            "addr",
            "add",
            &format!("10.1.{subnet}.1/24"),
            "dev",
            "pod_h",
        ])?;
        node.netns()
            .exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
        pods.push(pod);
    }
    for (index, node) in nodes.iter().enumerate() {
        let other = &nodes[1 - index];
        let subnet = format!("10.1.{}.0/24", 2 - index);
        node.netns()
            .ip(&["route", "add", &subnet, "via", &other.ip().to_string()])?;
    }
    measure(
        "kernel routing",
        pods[0].netns(),
        pods[1].netns(),
        Ipv4Addr::new(10, 1, 2, 2),
        runs,
        seconds,
    )
}

/// (c) ovnbpf: a subnet of one VPC, one pod per node, one agent per node.
/// (c) ovnbpf, and its routed variants in the same setup: (d) two subnets of one VPC,
/// (e) two peered VPCs; every pair crosses the nodes (the sender on node1).
fn ovnbpf(
    prefix: &str,
    agent: &Path,
    (runs, seconds): (u32, u32),
    paths: &str,
) -> Result<Vec<PathResult>> {
    let lab = OvnLab::start()?;
    let mut underlay = Underlay::create(&format!("{prefix}o"))?;
    let nodes: [Node; 2] = [underlay.add_node("node1")?, underlay.add_node("node2")?];
    let mut topology = Topology::new();
    // The default VPC as kube-ovn-controller builds it: two subnets, each node's join port and
    // policies (30000 to its InternalIP, 29000 from its pods of each subnet).
    topology
        .default_vpc()?
        .subnet(DEFAULT_VPC, "subnet-x", "10.17.0.0/16")?;
    for (index, node) in nodes.iter().enumerate() {
        let name = ["node1", "node2"][index];
        let join_ip = Ipv4Addr::new(100, 64, 0, 2 + index as u8);
        topology
            .node_port(name, &mac_for(&format!("node-{name}")), join_ip)
            .node_policy(node.ip(), join_ip)
            .distributed_gateway("ovn-default", name, join_ip)
            .distributed_gateway("subnet-x", name, join_ip);
    }
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")?
        .subnet("vpc-a", "subnet-a2", "10.0.2.0/24")?
        .vpc_with_subnet("vpc-b", "subnet-b", "10.1.1.0/24")?
        .peering("vpc-a", "10.0.255.1/30", "vpc-b", "10.0.255.2/30")
        .static_route("vpc-a", "10.1.1.0/24", Ipv4Addr::new(10, 0, 255, 2))
        // Back to both of vpc-a's subnets: one /16 would lose to the source route Kube-OVN gives
        // subnet-b (10.1.1.0/24 via its gateway, priority 72 over the /16's 49), as on real OVN.
        .static_route("vpc-b", "10.0.1.0/24", Ipv4Addr::new(10, 0, 255, 1))
        .static_route("vpc-b", "10.0.2.0/24", Ipv4Addr::new(10, 0, 255, 1))
        .vpc_with_subnet("vpc-u", "subnet-u", "10.100.0.0/24")?
        .localnet("subnet-u", "physnet1", 100);
    // (pod, subnet, address, gateway, node index)
    let plan = [
        (
            "p1",
            "subnet-a",
            Ipv4Addr::new(10, 0, 1, 2),
            Ipv4Addr::new(10, 0, 1, 1),
            0,
        ),
        (
            "p2",
            "subnet-a",
            Ipv4Addr::new(10, 0, 1, 3),
            Ipv4Addr::new(10, 0, 1, 1),
            1,
        ),
        (
            "p3",
            "subnet-a2",
            Ipv4Addr::new(10, 0, 2, 3),
            Ipv4Addr::new(10, 0, 2, 1),
            1,
        ),
        (
            "p4",
            "subnet-b",
            Ipv4Addr::new(10, 1, 1, 3),
            Ipv4Addr::new(10, 1, 1, 1),
            1,
        ),
        // The underlay pair: VLAN 100 through a physical switch, no Geneve.
        (
            "p5",
            "subnet-u",
            Ipv4Addr::new(10, 100, 0, 2),
            Ipv4Addr::new(10, 100, 0, 1),
            0,
        ),
        (
            "p6",
            "subnet-u",
            Ipv4Addr::new(10, 100, 0, 3),
            Ipv4Addr::new(10, 100, 0, 1),
            1,
        ),
        // The default VPC's pair, across its two subnets.
        (
            "p7",
            "ovn-default",
            Ipv4Addr::new(10, 16, 0, 2),
            Ipv4Addr::new(10, 16, 0, 1),
            0,
        ),
        (
            "p8",
            "subnet-x",
            Ipv4Addr::new(10, 17, 0, 3),
            Ipv4Addr::new(10, 17, 0, 1),
            1,
        ),
    ];
    for (name, subnet, ip, _, node) in plan {
        topology.pod(subnet, name, "bench", &mac_for(name), ip);
        if matches!(subnet, "ovn-default" | "subnet-x") {
            topology.pod_on_node(subnet, name, "bench", ["node1", "node2"][node]);
        }
    }
    topology.apply(&lab)?;
    let physical = PhysicalSwitch::create(&format!("{prefix}o"))?;
    for node in &nodes {
        physical.add_trunk(node, "eth1")?;
    }
    let mut pods = Vec::new();
    let mut local_ports: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    for (name, subnet, ip, gateway, node) in plan {
        let host = format!("{name}_h");
        pods.push(nodes[node].add_pod(&PodSpec {
            name,
            host_interface: &host,
            mac: Some(&mac_for(name)),
            address: Some(&format!(
                "{ip}/{}",
                if matches!(subnet, "ovn-default" | "subnet-x") {
                    16
                } else {
                    24
                }
            )),
            gateway: Some(gateway),
            // Geneve costs 58 bytes; the underlay carries full frames.
            mtu: Some(if subnet == "subnet-u" { 1500 } else { 1442 }),
        })?);
        local_ports[node].push(format!("{name}.bench={host}"));
    }
    let bpffs = BpfMount::create()?;
    let mut agents = Vec::new();
    for ((node, chassis), ports) in nodes.iter().zip(["node1", "node2"]).zip(local_ports) {
        let log = std::env::temp_dir().join(format!("{prefix}-{chassis}.log"));
        let spec = AgentSpec {
            chassis,
            node,
            local_ports: ports,
            pin_root: Some(bpffs.path().join(chassis)),
            cni_dir: None,
            // ovn0 gets the pods' MTU, so (i) carries what (h) does per packet.
            extra_args: vec![
                "--bridge-mappings".into(),
                "physnet1:eth1".into(),
                "--pod-mtu".into(),
                "1442".into(),
            ],
        };
        agents.push(spec.spawn(&lab, agent, log)?);
    }
    // The pods and both nodes' join ports (their ovn0, for (i)).
    wait_all_up(&lab, plan.len() + nodes.len(), &agents)?;
    let mut results = Vec::new();
    for (letter, name, source, target) in [
        ('c', "(c) ovnbpf L2 (Geneve)", Some(0), 1),
        ('d', "(d) ovnbpf routed, subnets", Some(0), 2),
        ('e', "(e) ovnbpf routed, peering", Some(0), 3),
        ('f', "(f) ovnbpf underlay VLAN", Some(4), 5),
        ('h', "(h) ovnbpf default VPC", Some(6), 7),
        // From node1's own namespace (no pod): kubelet's probe path through ovn0.
        ('i', "(i) ovnbpf node to pod", None, 7),
    ] {
        if !paths.contains(letter) {
            continue;
        }
        let client = source.map_or(nodes[0].netns(), |source| pods[source].netns());
        match measure(
            name,
            client,
            pods[target].netns(),
            plan[target].2,
            runs,
            seconds,
        ) {
            Ok(result) => results.push(result),
            Err(error) => {
                stop_agents(agents);
                return Err(error);
            }
        }
    }
    // (c)'s pair again with conntrack and 100 ACLs on the receiver, and both paths' connection
    // rates, measured one after the other in this run.
    if paths.contains('j') {
        let outcome = (|| -> Result<()> {
            let (client, server, server_ip) = (pods[0].netns(), pods[1].netns(), plan[1].2);
            let plain = connection_rate(client, server, server_ip, runs)?;
            if let Some(c) = results.iter_mut().find(|r| r.name.starts_with("(c)")) {
                c.connections_per_s = plain;
            }
            hundred_acls("p2.bench", plan[0].2).apply(&lab)?;
            // The agents install the policy; then only its allowed ports pass.
            std::thread::sleep(std::time::Duration::from_secs(2));
            let mut result = measure(
                "(j) ovnbpf L2, 100 ACLs",
                client,
                server,
                server_ip,
                runs,
                seconds,
            )?;
            result.connections_per_s = connection_rate(client, server, server_ip, runs)?;
            results.push(result);
            Ok(())
        })();
        if let Err(error) = outcome {
            stop_agents(agents);
            return Err(error);
        }
    }
    stop_agents(agents);
    Ok(results)
}

/// (g): the broadcast cost measured by the `flood_cost` driver, and `ovnbpf-agent verify`'s
/// verified instruction counts, as one JSON object.
fn broadcast(agent: &Path, flood_runs: u32) -> Result<Value> {
    let text = process::output(
        std::process::Command::new("cargo")
            .args([
                "test",
                "--quiet",
                "--package",
                "ovnbpf-tests",
                "--test",
                "flood_large",
                "--",
                "--ignored",
                "--exact",
                "flood_cost",
                "--nocapture",
            ])
            .env("FLOOD_BENCH_LOCAL", "64")
            .env("FLOOD_BENCH_CHASSIS", "32")
            .env("FLOOD_BENCH_RUNS", flood_runs.to_string()),
    )?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("FLOOD_BENCH "))
        .context("flood_cost printed no FLOOD_BENCH line")?;
    let mut result: Value = serde_json::from_str(line).context("flood_cost's JSON")?;
    let verified = process::output(std::process::Command::new(agent).arg("verify"))?;
    let (mut programs, mut stacks) = (serde_json::Map::new(), serde_json::Map::new());
    for line in verified.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [name, _, insns, _, frames, chain] = fields[..] {
            programs.insert(name.to_string(), json!(insns.parse::<u64>().ok()));
            let frames = frames.trim_end_matches(';');
            stacks.insert(
                name.to_string(),
                json!({"frames": frames, "deepest_chain": chain.parse::<u64>().ok()}),
            );
        }
    }
    result["verified_insns"] = Value::Object(programs);
    result["stack_bytes"] = Value::Object(stacks);
    Ok(result)
}

fn print_broadcast(result: &Value) {
    println!(
        "\n(g) broadcast to {} local pods + {} chassis: {} ns per broadcast, {} ns per copy (kernel time, mean of {} runs); verified insns {}",
        result["local"],
        result["chassis"],
        result["ns_per_broadcast"],
        result["ns_per_copy"],
        result["runs"],
        result["verified_insns"]
    );
    println!(
        "    baseline, same run: unicast to a local pod {} ns, to another chassis {} ns; the same copies as unicasts {} ns; broadcast / unicasts {}",
        result["ns_per_unicast_local"],
        result["ns_per_unicast_remote"],
        result["ns_as_unicasts"],
        result["broadcast_over_unicasts"]
    );
}

pub fn run(args: &[String]) -> Result<()> {
    let runs: u32 = option(args, "--runs").unwrap_or("3").parse()?;
    let seconds: u32 = option(args, "--seconds").unwrap_or("5").parse()?;
    let flood_runs: u32 = option(args, "--flood-runs").unwrap_or("5000").parse()?;
    println!("== bench datapath: building the agent");
    let agent = cmd::build_binaries(cmd::Profile::Debug)?.agent;
    if args.iter().any(|a| a == "--broadcast-only") {
        let result = broadcast(&agent, flood_runs)?;
        print_broadcast(&result);
        return write_json("datapath-broadcast", &[result]);
    }
    let prefix = unique_prefix();
    // Which paths to measure: letters a–g (all by default), e.g. `--paths af` to compare the
    // underlay with the raw pair alone.
    let paths = option(args, "--paths").unwrap_or("abcdefghij");
    if let Some(bad) = paths.chars().find(|c| !"abcdefghij".contains(*c)) {
        anyhow::bail!("--paths takes letters a to j, not {bad:?}");
    }
    let mut results = Vec::new();
    if paths.contains('a') {
        results.push(raw(&prefix, runs, seconds)?);
    }
    if paths.contains('b') {
        results.push(routed(&prefix, runs, seconds)?);
    }
    if paths.contains(['c', 'd', 'e', 'f', 'h', 'i', 'j']) {
        results.extend(ovnbpf(&prefix, &agent, (runs, seconds), paths)?);
    }
    println!(
        "\n{:<26} {:>22} {:>10} {:>10}",
        "path", "TCP Gbit/s med [min-max]", "RR p50 µs", "RR p99 µs"
    );
    for r in &results {
        let min = r.gbits.iter().copied().fold(f64::INFINITY, f64::min);
        let max = r.gbits.iter().copied().fold(0.0, f64::max);
        println!(
            "{:<26} {:>9.2} [{:.2}-{:.2}] {:>10.1} {:>10.1}",
            r.name,
            r.gbit_median(),
            min,
            max,
            r.rtt(false),
            r.rtt(true)
        );
    }
    let ratio = |x: &PathResult, y: &PathResult| x.gbit_median() / y.gbit_median();
    let path = |prefix: &str| results.iter().find(|r| r.name.starts_with(prefix));
    if let (Some(a), Some(b), Some(c)) = (path("raw"), path("kernel"), path("(c)")) {
        println!(
            "\nthroughput c/a {:.2}, c/b {:.2} (target c/b ≥ 0.8); TCP RR p99 c/a {:.2}, c/b {:.2} (target c/b ≤ 1.2); p50 c/a {:.2}, c/b {:.2}",
            ratio(c, a),
            ratio(c, b),
            c.rtt(true) / a.rtt(true),
            c.rtt(true) / b.rtt(true),
            c.rtt(false) / a.rtt(false),
            c.rtt(false) / b.rtt(false),
        );
    }
    for other in results.iter().filter(|r| {
        ["(d)", "(e)", "(f)"]
            .iter()
            .any(|letter| r.name.starts_with(letter))
    }) {
        if let Some(c) = path("(c)") {
            println!(
                "{} / (c): throughput {:.2}, TCP RR p99 {:.2}, p50 {:.2}",
                other.name,
                ratio(other, c),
                other.rtt(true) / c.rtt(true),
                other.rtt(false) / c.rtt(false),
            );
        }
        if let Some(a) = path("raw") {
            println!(
                "{} / (a) raw: throughput {:.2}",
                other.name,
                ratio(other, a)
            );
        }
    }
    // The default VPC's pair next to a custom VPC's (goal ≥ 0.95), and the probe path next to
    // the pods' (same target pod, same run).
    for (over, under, what) in [
        ("(h)", "(d)", "default VPC / custom VPC routed"),
        ("(i)", "(h)", "node → pod / pod → pod"),
        (
            "(j)",
            "(c)",
            "100 ACLs and conntrack / none (goal ≥ 0.9, p50 ≤ 1.1)",
        ),
    ] {
        if let (Some(x), Some(y)) = (path(over), path(under)) {
            println!(
                "{what} ({over}/{under}): throughput {:.2}, TCP RR p99 {:.2}, p50 {:.2}",
                ratio(x, y),
                x.rtt(true) / y.rtt(true),
                x.rtt(false) / y.rtt(false),
            );
        }
    }
    if let (Some(j), Some(c)) = (path("(j)"), path("(c)"))
        && !j.connections_per_s.is_empty()
        && !c.connections_per_s.is_empty()
    {
        let (with, without) = (
            median(j.connections_per_s.clone()),
            median(c.connections_per_s.clone()),
        );
        println!(
            "new TCP connections/s: {with:.0} through 100 ACLs and conntrack, {without:.0} without (ratio {:.2})",
            with / without
        );
    }
    let mut json_results: Vec<Value> = results
        .iter()
        .map(|r| {
            json!({"path": r.name, "gbit_per_s": r.gbits, "gbit_median": r.gbit_median(),
                   "tcp_rr_us_per_run": r.rtt_us.iter().map(|(p50, p99)| json!({"p50": p50, "p99": p99})).collect::<Vec<_>>(),
                   "tcp_rr_p50_us": r.rtt(false), "tcp_rr_p99_us": r.rtt(true),
                   "connections_per_s": r.connections_per_s})
        })
        .collect();
    if paths.contains('g') {
        let broadcast = broadcast(&agent, flood_runs)?;
        print_broadcast(&broadcast);
        json_results.push(json!({"path": "(g) broadcast", "broadcast": broadcast}));
    }
    write_json("datapath", &json_results)
}
