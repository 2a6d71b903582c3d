//! `cargo xtask bench datapath [--runs 5] [--seconds 3] [--paced-pps N] [--paths abcdefghijklmnopqrst]`:
//! pod↔pod across two nodes, every path set up at once and measured **interleaved**: each
//! repetition measures every path once per measure (in a rotated order), so the host's drift
//! over minutes falls on all paths alike, and every ratio is taken per repetition (the two paths' samples of the same
//! repetition) and printed as its median with its spread, min–max over the repetitions.
//!
//! Paths: (a) a raw veth pair between two namespaces (the limit); (b) the same node/pod topology
//! with plain kernel routing, no encapsulation; (c) ovnbpf: two agents, Geneve in eBPF, one
//! switch; (d) ovnbpf routed between two subnets of a VPC; (e) ovnbpf routed across a VPC
//! peering; (f) ovnbpf on an underlay switch (VLAN 100 through a physical switch, MTU 1500);
//! (h) ovnbpf routed between two subnets of the default VPC as Kube-OVN builds it (its node,
//! gateway and subnet policies in the path), next to (d); (i) the node's own namespace to that
//! pod through `ovn0` (kubelet's probe path), next to (h); (j) (c)'s path on a switch of its own
//! whose receiving pod has a NetworkPolicy of 100 allow-related ACLs naming a 1000-address set
//! (conntrack on that switch), next to (c); (k) (c)'s path to a third node whose Encap asks for
//! outer UDP checksums (`--encap-csum=true`, OVN's default; the agent's is false): computed per
//! frame, TCP segmented before it leaves (README, "Geneve on the wire"), next to (c); (l) (c)'s
//! pair, the client dialling a Service VIP balanced to (c)'s server (the `lb` stage, the router
//! hop a VIP outside the subnet takes, the reply's translation back), next to (c), the client
//! dialling the backend directly; (m) (l) with the socket-level balancer (`--socket-lb`, for
//! a client pod of its own, pm: a connect() to the VIP goes to the backend, so the packets are
//! (c)'s), next to (c) and (l); (n) (c)'s pair over IPv6 (subnet-a is dual-stack as Kube-OVN
//! builds one, `cidrBlock: "10.0.1.0/24,fd00:10:1::/64"`, p1 and p2 with both addresses: IPv6
//! port security, the L2 lookup and Geneve), next to (c); Debian 12's sockperf (3.7) takes no
//! IPv6 address, so (n) has no request/response figures; (o) the kernel's own overlay, the
//! best one here: (c)'s shape (two pods of one subnet on two nodes, pod MTU 1442) through a
//! Linux bridge and a VXLAN device on each node (VNI 42, UDP 4789, the other node as its one
//! remote), next to (c), the goal c/o ≥ 1.1 in throughput; (p) real OVN: (c)'s shape on two
//! chassis of ovn-controller with Open vSwitch's userspace (netdev) datapath (no kernel module
//! here), a lab and topology of their own built as Kube-OVN builds them, next to (c), the goal
//! c/p ≥ 20 in throughput; (q) (c)'s shape over an IPv6 underlay (the agents tunnel in IPv6, a
//! lab of its own, pod MTU 1422 for the 78 bytes of outer headers), next to (c); (r) a pod with a
//! distributed FIP (Kube-OVN's `OvnFip`, vpc-r's gateway port on the provider network's
//! `external` subnet, VLAN 200 through the physical switch) to an external host there: out
//! SNATed from the FIP, back DNATed, no Geneve, MTU 1500, next to (f), the same physical path
//! without NAT or routing (the goal r/f ≥ 0.9); (t) (p)'s shape with ovnbpf's OpenFlow backend
//! programming the same userspace Open vSwitch on each node instead of ovn-controller, next to
//! (p) (the goal t/p ≥ 1.0); (s) a pod of the same subnet on node2, vpc-r's
//! gateway chassis, to the same external host through the subnet's centralized SNAT (Kube-OVN's
//! `OvnSnatRule`: the gateway NAT stage, a port per connection), next to (f) (the goal s/f ≥
//! 0.9). vpc-a's subnets carry the Service's balancers, as every
//! Kube-OVN subnet does, so (c) and (k) pay the reply-side lookup too. Pod MTU 1442 on
//! (b)–(e), (h)–(l), so they carry the same payload per packet.
//!
//! Measures, one run of `--seconds` each per path and repetition, clients pinned to CPU 0 and
//! servers to CPU 1 (left to the scheduler, the two placements give request/response times a
//! factor apart from one run to the next):
//! - TCP throughput: iperf3, one stream (GSO super-packets: bound by the sender's copy, not by
//!   the per-packet cost);
//! - TCP request/response: sockperf ping-pong, 14-byte messages, full round trip, p50 and p99;
//! - small packets: iperf3 UDP, 64-byte payloads, four flows, unpaced: the packets per second the
//!   sender's CPU pushes through the path (the whole path runs in its softirq: veths, tc
//!   programs, Geneve, the receiver's stack) and how many arrive;
//! - cost per packet: the same flows paced, all flows together, at `--paced-pps` or by default
//!   at [`PACED_SHARE`] of the slowest path's unpaced rate in the first repetition, rounded down
//!   to 1, 2 or 5 times a power of ten (so every path runs below saturation, the work per
//!   packet outweighs iperf3's pacing, and two invocations pace alike), the same rate for every
//!   path and repetition but Open vSwitch's userspace datapath's ((p), (t): a rate of their
//!   own, and their costs compared only with each other's); the CPU time of the
//!   client and the server (iperf3's `getrusage`, exact run time, with the softirq work done in
//!   their context, which is the whole path; `/proc/stat`'s tick samples miss paced bursts), for
//!   (p) and (t) also the OVS daemons' (its userspace datapath forwards in their threads), and
//!   the kernel time of ovnbpf's programs (BPF run-time statistics,
//!   [`ovnbpf_tests::kernel_time`]), per delivered packet;
//! - new TCP connections per second (connect, then close) on (c), (j) and (l).
//!
//! (g) broadcast: one ARP broadcast from a pod of a switch with 64 other pods on the node and
//! pods on 32 other chassis, through the real `from_pod` under BPF_PROG_TEST_RUN (the
//! `flood_large::flood_cost` driver: 64 veth clones and 32 Geneve copies per broadcast, checked
//! once, then `--flood-runs` runs): the kernel's mean time per broadcast and per copy, next to
//! the programs' verified instruction counts. Its baseline, in the same fixture and run: one
//! unicast to a local pod and one to another chassis, and the broadcast's copies priced as such
//! unicasts (`broadcast / unicasts`). `--broadcast-only` measures just this case.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::Path,
};

use anyhow::{Context, Result};
use ovnbpf_tests::{
    agent::AgentSpec,
    bpffs::BpfMount,
    cgroup::Cgroup2Mount,
    kernel_time::{KernelTime, RunTime},
    kubeovn::{DEFAULT_VPC, PolicyPort, PolicyRule, Topology, mac_for},
    names::unique_prefix,
    netns::Netns,
    network::{ExternalHost, Node, PhysicalSwitch, Pod, PodSpec, Underlay},
    ovn::OvnLab,
    ovs_chassis::{OvsChassis, OvsSwitch, full_checksums},
    process::{self, Child},
};
use serde_json::{Value, json};

use super::stats::{median, percentile, write_json};
use crate::{
    args::option,
    cmd,
    demo::agents::{stop_agents, wait_all_up},
};

/// What each path is measured by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Metric {
    TcpGbits,
    RrP50,
    RrP99,
    UdpSentPps,
    UdpDeliveredPps,
    CpuNsPerPacket,
    EbpfNsPerPacket,
    ConnectionsPerS,
}

impl Metric {
    const ALL: [Metric; 8] = [
        Metric::TcpGbits,
        Metric::RrP50,
        Metric::RrP99,
        Metric::UdpSentPps,
        Metric::UdpDeliveredPps,
        Metric::CpuNsPerPacket,
        Metric::EbpfNsPerPacket,
        Metric::ConnectionsPerS,
    ];
    /// The ratios printed between two paths (delivered packets are receiver-bound, so left out).
    const COMPARED: [Metric; 7] = [
        Metric::TcpGbits,
        Metric::RrP50,
        Metric::RrP99,
        Metric::UdpSentPps,
        Metric::CpuNsPerPacket,
        Metric::EbpfNsPerPacket,
        Metric::ConnectionsPerS,
    ];

    fn key(self) -> &'static str {
        match self {
            Metric::TcpGbits => "tcp_gbit_per_s",
            Metric::RrP50 => "tcp_rr_p50_us",
            Metric::RrP99 => "tcp_rr_p99_us",
            Metric::UdpSentPps => "udp_sent_packets_per_s",
            Metric::UdpDeliveredPps => "udp_delivered_packets_per_s",
            Metric::CpuNsPerPacket => "cpu_ns_per_packet",
            Metric::EbpfNsPerPacket => "ebpf_ns_per_packet",
            Metric::ConnectionsPerS => "connections_per_s",
        }
    }

    fn heading(self) -> &'static str {
        match self {
            Metric::TcpGbits => "TCP Gbit/s",
            Metric::RrP50 => "RR p50 µs",
            Metric::RrP99 => "RR p99 µs",
            Metric::UdpSentPps => "UDP kpps sent",
            Metric::UdpDeliveredPps => "kpps delivered",
            Metric::CpuNsPerPacket => "CPU ns/pkt",
            Metric::EbpfNsPerPacket => "eBPF ns/pkt",
            Metric::ConnectionsPerS => "conn/s",
        }
    }

    /// Whether it is measured by the paced runs (compared only between paths paced alike).
    fn is_per_paced_packet(self) -> bool {
        matches!(self, Metric::CpuNsPerPacket | Metric::EbpfNsPerPacket)
    }

    /// The value as printed in the per-path table (packets per second in thousands).
    fn shown(self, value: f64) -> f64 {
        match self {
            Metric::UdpSentPps | Metric::UdpDeliveredPps => value / 1e3,
            _ => value,
        }
    }
}

/// A median and the range of the samples it summarises.
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Option<Spread> {
        (!values.is_empty()).then(|| Spread {
            median: median(values.to_vec()),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// One path: who sends to whom.
struct BenchPath<'f> {
    letter: char,
    name: &'static str,
    client: &'f Netns,
    server: &'f Netns,
    /// Where the servers listen.
    server_ip: IpAddr,
    /// What the client dials: `server_ip`, or a Service VIP balanced to it ((l)).
    target: IpAddr,
    /// Processes outside the client and server that forward the path's packets, whose CPU
    /// time counts in its cost per packet ((p): the OVS daemons; the kernel paths forward in
    /// the senders' softirq, which iperf3's own figures hold).
    forwarders: Vec<u32>,
}

impl<'f> BenchPath<'f> {
    /// A baseline pair's path: `client` dials `server` at `server_ip` directly, nothing but
    /// `forwarders` besides the two forwarding for it.
    fn pair(
        (letter, name): (char, &'static str),
        (client, server): (&'f Netns, &'f Netns),
        server_ip: Ipv4Addr,
        forwarders: Vec<u32>,
    ) -> Self {
        BenchPath {
            letter,
            name,
            client,
            server,
            server_ip: server_ip.into(),
            target: server_ip.into(),
            forwarders,
        }
    }

    /// Whether ovnbpf's programs carry it (its eBPF time is measured).
    fn is_ovnbpf(&self) -> bool {
        !matches!(self.letter, 'a' | 'b' | 'o' | 'p' | 't')
    }
    /// Which paced rate it takes: 1 for Open vSwitch's userspace datapath, 0 for the rest.
    fn pacing(&self) -> usize {
        usize::from(matches!(self.letter, 'p' | 't'))
    }
    /// Whether its connection rate is measured ((j) against (c)).
    fn measures_connections(&self) -> bool {
        matches!(self.letter, 'c' | 'j' | 'l' | 'm')
    }
    /// Whether sockperf can measure its request/response (Debian's 3.7 takes IPv4 only).
    fn measures_request_response(&self) -> bool {
        self.target.is_ipv4()
    }
}

/// Where the bench's clients and servers run.
struct Cpus {
    client: String,
    server: String,
}

impl Cpus {
    fn of_host() -> Cpus {
        let two = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
        Cpus {
            client: "0".into(),
            server: if two { "1" } else { "0" }.into(),
        }
    }
}

/// `program args…` in `netns`, on CPU `cpu`; its standard output.
fn pinned(netns: &Netns, cpu: &str, program: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["-c", cpu, program];
    all.extend_from_slice(args);
    netns.exec("taskset", &all)
}

/// The port of the request/response server.
const RR_PORT: &str = "11111";
/// Connections a client opens and closes one after the other in each run.
const CONNECTIONS: u32 = 2_000;
/// The port of the connection-rate server.
const CONNECTION_PORT: u16 = 12_345;
/// The small-packet flows: payload bytes and number of flows.
const UDP_PAYLOAD: u32 = 64;
const UDP_FLOWS: u32 = 4;
/// The paced rate of the cost-per-packet runs, unless `--paced-pps` sets one: this share of
/// the slowest path's unpaced delivered rate in the first repetition, below what every path
/// carries (the CPU time measured is then the cost of the packets, not of a saturated path),
/// rounded down to 1, 2 or 5 times a power of ten ([`round_rate`]), so that two invocations on
/// one host pace at the same rate although their first repetitions differ by a few per cent. A
/// slower rate costs more per packet (the CPUs idle and go cold between packets), so costs are
/// compared only between paths paced at the same rate. Open vSwitch's userspace datapath ((p),
/// (t)) carries a fraction of what the kernel paths carry, so it is paced on its own
/// ([`BenchPath::pacing`]).
const PACED_SHARE: f64 = 0.6;

/// `rate` rounded down to 1, 2 or 5 times a power of ten (at least [`UDP_FLOWS`]).
fn round_rate(rate: f64) -> u32 {
    let power = 10f64.powi(rate.max(1.0).log10().floor() as i32);
    let step = [5.0, 2.0, 1.0]
        .into_iter()
        .find(|step| step * power <= rate)
        .unwrap_or(1.0);
    ((step * power) as u32).max(UDP_FLOWS)
}

/// How much each path is measured.
struct Settings {
    /// Repetitions (each measures every path once per measure).
    runs: u32,
    /// Seconds of each run.
    seconds: u32,
    /// Packets per second of the paced runs, all flows together (`None`: [`PACED_SHARE`]).
    paced_pps: Option<u32>,
}

/// The servers of one target pod: iperf3 (TCP and UDP), sockperf, and where measured the
/// connection-rate listener. Stopped when dropped.
struct Servers {
    _children: Vec<Child>,
}

fn start_servers(server: &Netns, address: IpAddr, cpu: &str, connections: bool) -> Result<Servers> {
    let ip = address.to_string();
    let mut children = vec![server.spawn(
        "iperf3",
        "taskset",
        &["-c", cpu, "iperf3", "-s", "-B", &ip],
        None,
    )?];
    if address.is_ipv4() {
        children.push(server.spawn(
            "sockperf",
            "taskset",
            &[
                "-c", cpu, "sockperf", "server", "--tcp", "-i", &ip, "-p", RR_PORT,
            ],
            None,
        )?);
    }
    if connections {
        let family = if address.is_ipv4() {
            "AF_INET"
        } else {
            "AF_INET6"
        };
        let listener = [
            "import socket".to_string(),
            format!("s = socket.socket(socket.{family})"),
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)".into(),
            format!("s.bind(('{ip}', {CONNECTION_PORT}))"),
            "s.listen(4096)".into(),
            "while True:".into(),
            "    c, _ = s.accept()".into(),
            "    c.close()".into(),
        ]
        .join("\n");
        children.push(server.spawn(
            "python3",
            "taskset",
            &["-c", cpu, "python3", "-c", &listener],
            None,
        )?);
    }
    Ok(Servers {
        _children: children,
    })
}

/// One iperf3 TCP run: Gbit/s received.
fn tcp_throughput(path: &BenchPath, cpus: &Cpus, seconds: &str) -> Result<f64> {
    let ip = path.target.to_string();
    let text = pinned(
        path.client,
        &cpus.client,
        "iperf3",
        &["-c", &ip, "-t", seconds, "-J"],
    )?;
    let report: Value = serde_json::from_str(&text).context("iperf3 -J output")?;
    let bits = report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3 report without sum_received")?;
    Ok(bits / 1e9)
}

/// One sockperf ping-pong run: every round trip it logged, in µs, sorted.
fn request_response(path: &BenchPath, cpus: &Cpus, seconds: &str) -> Result<Vec<f64>> {
    let ip = path.target.to_string();
    let log = tempfile_path("sockperf-rtt");
    let text = pinned(
        path.client,
        &cpus.client,
        "sockperf",
        &[
            "ping-pong",
            "--tcp",
            "-i",
            &ip,
            "-p",
            RR_PORT,
            "-t",
            seconds,
            "-m",
            "14",
            "--full-rtt",
            "--full-log",
            &log,
        ],
    )?;
    let logged = std::fs::read_to_string(&log).with_context(|| format!("reading {log}"));
    let _ = std::fs::remove_file(&log);
    let round_trips = round_trips(&logged?);
    anyhow::ensure!(
        !round_trips.is_empty(),
        "sockperf logged no round trip:\n{text}"
    );
    Ok(round_trips)
}

/// The round trips (µs, sorted) of a sockperf `--full-log`: after its header, one line per
/// observation, `index, sent at, received at, round trip`.
fn round_trips(log: &str) -> Vec<f64> {
    let mut round_trips: Vec<f64> = log
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            match fields[..] {
                [index, _, _, rtt] if index.parse::<u64>().is_ok() => rtt.parse().ok(),
                _ => None,
            }
        })
        .collect();
    round_trips.sort_by(f64::total_cmp);
    round_trips
}

/// A file name of its own under the temporary directory (the bench runs once per host).
fn tempfile_path(stem: &str) -> String {
    std::env::temp_dir()
        .join(format!("ovnbpf-bench-{stem}-{}", std::process::id()))
        .display()
        .to_string()
}

/// One small-packet run.
struct UdpRun {
    sent_per_s: f64,
    delivered_per_s: f64,
    delivered: f64,
    /// The client's and the server's CPU time over the run (iperf3's own `getrusage` figures,
    /// which include the softirq work done in their context: here the whole path), in ns.
    cpu_ns: f64,
}

/// iperf3 UDP, [`UDP_FLOWS`] flows of [`UDP_PAYLOAD`]-byte datagrams, unpaced or at `paced`
/// packets per second over all flows.
fn udp_flows(path: &BenchPath, cpus: &Cpus, seconds: &str, paced: Option<u32>) -> Result<UdpRun> {
    let ip = path.target.to_string();
    // iperf3 paces each stream at -b bits of payload per second; 0 is unpaced.
    let bits_per_stream = paced.map_or(0, |rate| rate / UDP_FLOWS * UDP_PAYLOAD * 8);
    let text = pinned(
        path.client,
        &cpus.client,
        "iperf3",
        &[
            "-c",
            &ip,
            "-u",
            "-b",
            &bits_per_stream.to_string(),
            "-l",
            &UDP_PAYLOAD.to_string(),
            "-P",
            &UDP_FLOWS.to_string(),
            "-t",
            seconds,
            "-J",
        ],
    )?;
    let report: Value = serde_json::from_str(&text).context("iperf3 -J output")?;
    let sum = &report["end"]["sum"];
    let field = |name: &str| {
        sum[name]
            .as_f64()
            .with_context(|| format!("iperf3 UDP report without end.sum.{name}:\n{text}"))
    };
    let (packets, lost, elapsed) = (field("packets")?, field("lost_packets")?, field("seconds")?);
    anyhow::ensure!(elapsed > 0.0, "iperf3 reported a run of {elapsed} s");
    let cpu = &report["end"]["cpu_utilization_percent"];
    let percent = |name: &str| {
        cpu[name]
            .as_f64()
            .with_context(|| format!("iperf3 report without cpu_utilization_percent.{name}"))
    };
    let cpu_percent = percent("host_total")? + percent("remote_total")?;
    Ok(UdpRun {
        sent_per_s: packets / elapsed,
        delivered_per_s: (packets - lost) / elapsed,
        delivered: packets - lost,
        cpu_ns: cpu_percent / 100.0 * elapsed * 1e9,
    })
}

/// The paced run: busy CPU (the client's, the server's and the path's forwarders') and ovnbpf
/// kernel time per delivered packet.
fn cost_per_packet(
    path: &BenchPath,
    cpus: &Cpus,
    (seconds, paced_pps): (&str, u32),
    kernel: &KernelTime,
) -> Result<(f64, f64)> {
    let before = kernel.sample()?;
    let forwarders_before = cpu_time_ns(&path.forwarders)?;
    let mut run = udp_flows(path, cpus, seconds, Some(paced_pps))?;
    run.cpu_ns += cpu_time_ns(&path.forwarders)? - forwarders_before;
    let ebpf: RunTime = kernel.sample()?.since(before);
    anyhow::ensure!(
        run.delivered > 0.0,
        "{}: no paced packet arrived",
        path.name
    );
    Ok((
        run.cpu_ns / run.delivered,
        ebpf.nanoseconds as f64 / run.delivered,
    ))
}

/// The CPU time (user and system, all threads) the processes `pids` have used, in ns, from
/// `/proc/<pid>/stat` (clock ticks).
fn cpu_time_ns(pids: &[u32]) -> Result<f64> {
    // SAFETY: sysconf only reads a configuration value.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut ticks = 0.0;
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        // After the command name's closing parenthesis: state is field 3, utime 14, stime 15.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        for index in [11, 12] {
            ticks += fields
                .get(index)
                .and_then(|field| field.parse::<f64>().ok())
                .with_context(|| format!("/proc/{pid}/stat without utime and stime: {stat}"))?;
        }
    }
    Ok(ticks / ticks_per_s * 1e9)
}

/// New TCP connections per second from the path's client (connect, then close with a reset,
/// so no TIME_WAIT runs the client out of ports), [`CONNECTIONS`] of them: what each
/// connection's setup costs on the path (conntrack commits, ACL walks of new connections).
fn connection_rate(path: &BenchPath, cpus: &Cpus) -> Result<f64> {
    let ip = path.target;
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
    let text = pinned(path.client, &cpus.client, "python3", &["-c", &dialer])?;
    text.trim()
        .parse::<f64>()
        .with_context(|| format!("the dialer printed {text:?}"))
}

/// The NetworkPolicy of path (j) on the pod with port `port` (namespace `bench`): one ingress
/// rule whose peer is an address set of 1000 addresses (`peer` among them) and 100 ports, so 100
/// allow-related ACLs, the ones the bench's tools use (iperf3 over TCP and UDP, sockperf, the
/// connection-rate server) last: every packet of a connection walks past the other 96.
fn hundred_acls(port: &str, peer: Ipv4Addr) -> Topology {
    let mut addresses: Vec<String> = (0..999u32)
        .map(|i| Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 200, 0, 0)) + i).to_string())
        .collect();
    addresses.push(peer.to_string());
    let allow: Vec<&str> = addresses.iter().map(String::as_str).collect();
    let mut ports: Vec<PolicyPort> = (0..96u16)
        .map(|i| PolicyPort::Port("tcp", 20_000 + i))
        .collect();
    ports.extend([
        PolicyPort::Port("tcp", 5201),
        PolicyPort::Port("udp", 5201),
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

/// (a): two namespaces joined by one veth pair.
struct RawPair {
    left: Netns,
    right: Netns,
}

impl RawPair {
    fn create(prefix: &str) -> Result<RawPair> {
        let left = Netns::create(&format!("{prefix}-raw1"))?;
        let right = Netns::create(&format!("{prefix}-raw2"))?;
        left.veth_to("eth0", "eth0", &right)?;
        for (netns, address) in [(&left, "10.99.0.1/24"), (&right, "10.99.0.2/24")] {
            netns.ip(&["addr", "add", address, "dev", "eth0"])?;
            netns.ip(&["link", "set", "eth0", "up"])?;
        }
        Ok(RawPair { left, right })
    }

    fn path(&self) -> BenchPath<'_> {
        BenchPath::pair(
            ('a', "(a) raw veth"),
            (&self.left, &self.right),
            Ipv4Addr::new(10, 99, 0, 2),
            Vec::new(),
        )
    }
}

/// (b): pods behind veths on two nodes; the nodes route the pod subnets to each other.
/// (Fields drop in order: pods, then nodes, then their underlay.)
struct RoutedPair {
    pods: Vec<Pod>,
    _nodes: [Node; 2],
    _underlay: Underlay,
}

impl RoutedPair {
    fn create(prefix: &str) -> Result<RoutedPair> {
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
        Ok(RoutedPair {
            pods,
            _nodes: nodes,
            _underlay: underlay,
        })
    }

    fn path(&self) -> BenchPath<'_> {
        BenchPath::pair(
            ('b', "(b) kernel routing"),
            (self.pods[0].netns(), self.pods[1].netns()),
            Ipv4Addr::new(10, 1, 2, 2),
            Vec::new(),
        )
    }
}

/// (o): two pods of one subnet (10.2.0.0/24) on two nodes, bridged on each node to a VXLAN
/// device whose one remote is the other node: the kernel's own L2 overlay, (c)'s shape.
/// (Fields drop in order: pods, then nodes, then their underlay.)
struct VxlanPair {
    pods: Vec<Pod>,
    _nodes: [Node; 2],
    _underlay: Underlay,
}

impl VxlanPair {
    fn create(prefix: &str) -> Result<VxlanPair> {
        let mut underlay = Underlay::create(&format!("{prefix}v"))?;
        let nodes = [underlay.add_node("node1")?, underlay.add_node("node2")?];
        let mut pods = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            let other = &nodes[1 - index];
            let ip = |args: &[&str]| node.netns().ip(args).map(drop);
            ip(&["link", "add", "br0", "type", "bridge"])?;
            ip(&[
                "link",
                "add",
                "vx0",
                "type",
                "vxlan",
                "id",
                "42",
                "local",
                &node.ip().to_string(),
                "remote",
                &other.ip().to_string(),
                "dstport",
                "4789",
                "dev",
                ovnbpf_tests::network::UPLINK,
            ])?;
            ip(&["link", "set", "vx0", "master", "br0", "up"])?;
            ip(&["link", "set", "br0", "up"])?;
            let pod = node.add_pod(&PodSpec {
                name: "pod",
                host_interface: "pod_h",
                mac: None,
                address: Some(&format!("10.2.0.{}/24", index + 2)),
                gateway: None,
                // As (c)'s pods, so both carry the same payload per packet.
                mtu: Some(1442),
            })?;
            ip(&["link", "set", "pod_h", "master", "br0"])?;
            pods.push(pod);
        }
        Ok(VxlanPair {
            pods,
            _nodes: nodes,
            _underlay: underlay,
        })
    }

    fn path(&self) -> BenchPath<'_> {
        BenchPath::pair(
            ('o', "(o) kernel VXLAN"),
            (self.pods[0].netns(), self.pods[1].netns()),
            Ipv4Addr::new(10, 2, 0, 3),
            Vec::new(),
        )
    }
}

/// (p): two pods of one subnet (10.5.0.0/24, a VPC built as Kube-OVN builds one) on two real OVN
/// chassis (ovn-controller, ovs-vswitchd with the userspace datapath), a lab of their own.
/// (Fields drop in order: the chassis first, then pods, nodes, underlay and the lab.)
struct RealOvnPair {
    chassis: Vec<OvsChassis>,
    pods: Vec<Pod>,
    _nodes: [Node; 2],
    _underlay: Underlay,
    _lab: OvnLab,
}

impl RealOvnPair {
    const PODS: [(&'static str, Ipv4Addr); 2] = [
        ("po1", Ipv4Addr::new(10, 5, 0, 2)),
        ("po2", Ipv4Addr::new(10, 5, 0, 3)),
    ];

    fn create(prefix: &str) -> Result<RealOvnPair> {
        let lab = OvnLab::start()?;
        let mut topology = Topology::new();
        topology.vpc_with_subnet("vpc-p", "subnet-p", "10.5.0.0/24")?;
        for (name, ip) in Self::PODS {
            topology.pod("subnet-p", name, "bench", &mac_for(name), ip);
        }
        topology.apply(&lab)?;
        let mut underlay = Underlay::create(&format!("{prefix}p"))?;
        let nodes = [underlay.add_node("node1")?, underlay.add_node("node2")?];
        let mut pods = Vec::new();
        let mut chassis = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            let (name, ip) = Self::PODS[index];
            let host = format!("{name}_h");
            let pod = node.add_pod(&PodSpec {
                name,
                host_interface: &host,
                mac: Some(&mac_for(name)),
                address: Some(&format!("{ip}/24")),
                gateway: Some(Ipv4Addr::new(10, 5, 0, 1)),
                // As (c)'s pods, so both carry the same payload per packet.
                mtu: Some(1442),
            })?;
            let ovs = OvsChassis::start(&lab, node, ["node1", "node2"][index])?;
            ovs.plug(&host, pod.netns(), &format!("{name}.bench"))?;
            pods.push(pod);
            chassis.push(ovs);
        }
        // ovn-controller sets `up` once it has programmed a port.
        wait_all_up(&lab, Self::PODS.len(), &[])?;
        Ok(RealOvnPair {
            chassis,
            pods,
            _nodes: nodes,
            _underlay: underlay,
            _lab: lab,
        })
    }

    fn path(&self) -> BenchPath<'_> {
        BenchPath::pair(
            ('p', "(p) real OVN (OVS netdev)"),
            (self.pods[0].netns(), self.pods[1].netns()),
            Self::PODS[1].1,
            self.chassis
                .iter()
                .flat_map(OvsChassis::daemon_pids)
                .collect(),
        )
    }
}

/// (t): (p)'s shape, the same Open vSwitch (userspace datapath) on each node, programmed by
/// ovnbpf's agent with `--dataplane openflow` instead of ovn-controller, a lab of its own:
/// next to (p), the goal t/p ≥ 1.0 in throughput (the same switch, other flows).
/// (Fields drop in order: the agents first, then the switches, pods, nodes, underlay and lab.)
struct OpenFlowPair {
    agents: Vec<Child>,
    switches: Vec<OvsSwitch>,
    pods: Vec<Pod>,
    nodes: [Node; 2],
    _underlay: Underlay,
    lab: OvnLab,
}

impl Drop for OpenFlowPair {
    fn drop(&mut self) {
        stop_agents(std::mem::take(&mut self.agents));
    }
}

impl OpenFlowPair {
    const PODS: [(&'static str, Ipv4Addr); 2] = [
        ("pt1", Ipv4Addr::new(10, 7, 0, 2)),
        ("pt2", Ipv4Addr::new(10, 7, 0, 3)),
    ];

    fn create(prefix: &str, agent: &Path) -> Result<OpenFlowPair> {
        let lab = OvnLab::start()?;
        let mut topology = Topology::new();
        topology.vpc_with_subnet("vpc-t", "subnet-t", "10.7.0.0/24")?;
        for (name, ip) in Self::PODS {
            topology.pod("subnet-t", name, "bench", &mac_for(name), ip);
        }
        topology.apply(&lab)?;
        let mut underlay = Underlay::create(&format!("{prefix}t"))?;
        let nodes = [underlay.add_node("node1")?, underlay.add_node("node2")?];
        let mut pair = OpenFlowPair {
            agents: Vec::new(),
            switches: Vec::new(),
            pods: Vec::new(),
            nodes,
            _underlay: underlay,
            lab,
        };
        for (index, (name, ip)) in Self::PODS.into_iter().enumerate() {
            let host = format!("{name}_h");
            let node = &pair.nodes[index];
            let pod = node.add_pod(&PodSpec {
                name,
                host_interface: &host,
                mac: Some(&mac_for(name)),
                address: Some(&format!("{ip}/24")),
                gateway: Some(Ipv4Addr::new(10, 7, 0, 1)),
                // As (p)'s pods.
                mtu: Some(1442),
            })?;
            // The userspace datapath reads frames whole, as (p)'s chassis have them.
            full_checksums(node.netns(), &host, pod.netns())?;
            let switch = OvsSwitch::start(node.netns())?;
            switch.underlay(node)?;
            let chassis = ["node1", "node2"][index];
            let spec = AgentSpec {
                chassis,
                node,
                local_ports: vec![format!("{name}.bench={host}")],
                pin_root: None,
                cni_dir: None,
                extra_args: [vec!["--no-node-nic".into()], switch.agent_args()].concat(),
            };
            let log = std::env::temp_dir().join(format!("{prefix}-t-{chassis}.log"));
            let child = spec.spawn(&pair.lab, agent, log)?;
            pair.agents.push(child);
            pair.switches.push(switch);
            pair.pods.push(pod);
        }
        wait_all_up(&pair.lab, Self::PODS.len(), &pair.agents)?;
        Ok(pair)
    }

    fn path(&self) -> BenchPath<'_> {
        BenchPath::pair(
            ('t', "(t) ovnbpf OpenFlow (OVS netdev)"),
            (self.pods[0].netns(), self.pods[1].netns()),
            Self::PODS[1].1,
            self.switches
                .iter()
                .flat_map(OvsSwitch::daemon_pids)
                .collect(),
        )
    }
}

/// (q): (c)'s shape over an IPv6 underlay: two pods of one subnet (10.6.0.0/24, a VPC built as
/// Kube-OVN builds one) on two nodes whose agents tunnel in IPv6 (`--encap-ip` the nodes'
/// `fd00:172:31::/64` addresses), a lab of their own. The pods' MTU is 1422 (78 bytes of outer
/// headers), so each packet carries 20 bytes less than (c)'s.
/// (Fields drop in order: the agents first, then pods, nodes, underlay and the lab.)
struct Ipv6UnderlayPair {
    agents: Vec<Child>,
    pods: Vec<Pod>,
    nodes: [Node; 2],
    _underlay: Underlay,
    lab: OvnLab,
}

impl Drop for Ipv6UnderlayPair {
    fn drop(&mut self) {
        stop_agents(std::mem::take(&mut self.agents));
    }
}

impl Ipv6UnderlayPair {
    const PODS: [(&'static str, Ipv4Addr); 2] = [
        ("pq1", Ipv4Addr::new(10, 6, 0, 2)),
        ("pq2", Ipv4Addr::new(10, 6, 0, 3)),
    ];

    fn create(prefix: &str, agent: &Path) -> Result<Ipv6UnderlayPair> {
        let lab = OvnLab::start()?;
        let mut topology = Topology::new();
        topology.vpc_with_subnet("vpc-q", "subnet-q", "10.6.0.0/24")?;
        for (name, ip) in Self::PODS {
            topology.pod("subnet-q", name, "bench", &mac_for(name), ip);
        }
        topology.apply(&lab)?;
        let mut underlay = Underlay::create_ipv6(&format!("{prefix}q"))?;
        let nodes = [underlay.add_node("node1")?, underlay.add_node("node2")?];
        let mut pair = Ipv6UnderlayPair {
            agents: Vec::new(),
            pods: Vec::new(),
            nodes,
            _underlay: underlay,
            lab,
        };
        for (index, (name, ip)) in Self::PODS.into_iter().enumerate() {
            let host = format!("{name}_h");
            pair.pods.push(pair.nodes[index].add_pod(&PodSpec {
                name,
                host_interface: &host,
                mac: Some(&mac_for(name)),
                address: Some(&format!("{ip}/24")),
                gateway: Some(Ipv4Addr::new(10, 6, 0, 1)),
                mtu: Some(1422),
            })?);
            let chassis = ["node1", "node2"][index];
            let spec = AgentSpec {
                chassis,
                node: &pair.nodes[index],
                local_ports: vec![format!("{name}.bench={host}")],
                pin_root: None,
                cni_dir: None,
                extra_args: vec!["--no-node-nic".into()],
            };
            let log = std::env::temp_dir().join(format!("{prefix}-q-{chassis}.log"));
            let child = spec.spawn(&pair.lab, agent, log)?;
            pair.agents.push(child);
        }
        wait_all_up(&pair.lab, Self::PODS.len(), &pair.agents)?;
        Ok(pair)
    }

    fn path(&self) -> BenchPath<'_> {
        BenchPath::pair(
            ('q', "(q) ovnbpf L2, IPv6 underlay"),
            (self.pods[0].netns(), self.pods[1].netns()),
            Self::PODS[1].1,
            Vec::new(),
        )
    }
}

/// A pod of the ovnbpf fixture: name, subnet, address, gateway, node index.
type PodPlan = (&'static str, &'static str, Ipv4Addr, Ipv4Addr, usize);

const fn ip(a: u8, b: u8, c: u8, d: u8) -> Ipv4Addr {
    Ipv4Addr::new(a, b, c, d)
}

/// The ovnbpf fixture's pods.
const PLAN: [PodPlan; 14] = [
    ("p1", "subnet-a", ip(10, 0, 1, 2), ip(10, 0, 1, 1), 0),
    ("p2", "subnet-a", ip(10, 0, 1, 3), ip(10, 0, 1, 1), 1),
    ("p3", "subnet-a2", ip(10, 0, 2, 3), ip(10, 0, 2, 1), 1),
    ("p4", "subnet-b", ip(10, 1, 1, 3), ip(10, 1, 1, 1), 1),
    // The underlay pair: VLAN 100 through a physical switch, no Geneve.
    ("p5", "subnet-u", ip(10, 100, 0, 2), ip(10, 100, 0, 1), 0),
    ("p6", "subnet-u", ip(10, 100, 0, 3), ip(10, 100, 0, 1), 1),
    // The default VPC's pair, across its two subnets.
    ("p7", "ovn-default", ip(10, 16, 0, 2), ip(10, 16, 0, 1), 0),
    ("p8", "subnet-x", ip(10, 17, 0, 3), ip(10, 17, 0, 1), 1),
    // (j)'s pair, on a switch of its own: its ACLs give that switch conntrack.
    ("pj1", "subnet-j", ip(10, 3, 1, 2), ip(10, 3, 1, 1), 0),
    ("pj2", "subnet-j", ip(10, 3, 1, 3), ip(10, 3, 1, 1), 1),
    // (k)'s server, on node3, which asks for outer checksums.
    ("p9", "subnet-a", ip(10, 0, 1, 9), ip(10, 0, 1, 1), 2),
    // (m)'s client, next to p1: the one pod whose namespace node1's agent is told (its
    // sockets balanced at connect()).
    ("pm", "subnet-a", ip(10, 0, 1, 12), ip(10, 0, 1, 1), 0),
    // (r)'s client: the pod with the distributed FIP.
    ("pr", "subnet-r", ip(10, 5, 1, 2), ip(10, 5, 1, 1), 0),
    // (s)'s client: a pod of subnet-r on vpc-r's gateway chassis, under the subnet's SNAT.
    ("ps", "subnet-r", ip(10, 5, 1, 3), ip(10, 5, 1, 1), 1),
];

/// [`PLAN`]'s index of (r)'s client, its FIP, and the external host it talks to.
const FIP_CLIENT: usize = 12;
const FIP: Ipv4Addr = ip(172, 30, 0, 11);
const EXTERNAL_HOST: Ipv4Addr = ip(172, 30, 0, 1);

/// [`PLAN`]'s index of (s)'s client, and subnet-r's SNAT address.
const SNAT_CLIENT: usize = 13;
const SNAT_EIP: Ipv4Addr = ip(172, 30, 0, 12);

/// [`PLAN`]'s index of (m)'s client.
const SOCKET_CLIENT: usize = 11;

/// The ovnbpf paths: letter, name, client pod (`None`: node1's own namespace), server pod.
const OVNBPF_PATHS: [(char, &str, Option<usize>, usize); 11] = [
    ('c', "(c) ovnbpf L2 (Geneve)", Some(0), 1),
    ('d', "(d) ovnbpf routed, subnets", Some(0), 2),
    ('e', "(e) ovnbpf routed, peering", Some(0), 3),
    ('f', "(f) ovnbpf underlay VLAN", Some(4), 5),
    ('h', "(h) ovnbpf default VPC", Some(6), 7),
    // From node1's own namespace (no pod): kubelet's probe path through ovn0.
    ('i', "(i) ovnbpf node to pod", None, 7),
    ('j', "(j) ovnbpf L2, 100 ACLs", Some(8), 9),
    ('k', "(k) ovnbpf L2, outer checksums", Some(0), 10),
    // (c)'s pair, the client dialling a Service VIP balanced to (c)'s server.
    ('l', "(l) ovnbpf Service VIP", Some(0), 1),
    // The same VIP from pm, balanced at the socket.
    ('m', "(m) ovnbpf VIP, socket LB", Some(SOCKET_CLIENT), 1),
    // (c)'s pair over IPv6.
    ('n', "(n) ovnbpf L2, IPv6", Some(0), 1),
];

/// (n)'s addresses: p1's and p2's IPv6 ones, in subnet-a's `fd00:10:1::/64`.
const IPV6_PAIR: [Ipv6Addr; 2] = [
    Ipv6Addr::new(0xfd00, 0x10, 1, 0, 0, 0, 0, 2),
    Ipv6Addr::new(0xfd00, 0x10, 1, 0, 0, 0, 0, 3),
];
/// subnet-a's IPv6 gateway.
const IPV6_GATEWAY: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 1, 0, 0, 0, 0, 1);

/// (l)'s ClusterIP: one backend, (c)'s server, on every port the measures use, in vpc-a's
/// balancers as kube-ovn-controller writes them (on both of its subnets).
const SERVICE_VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 100);

/// (c)–(k): one OVN lab, three nodes (the third for (k) only), one agent each, every pair of
/// [`PLAN`] plugged. Dropping it stops the agents first, then removes pins, pods, switch, nodes
/// and the lab.
struct OvnbpfNodes {
    agents: Vec<Child>,
    bpffs: BpfMount,
    /// The cgroup2 hierarchy node1's socket-level balancer attaches to (its root).
    cgroup: Cgroup2Mount,
    pods: Vec<Pod>,
    /// (r)'s server, on the physical switch.
    external: ExternalHost,
    _physical: PhysicalSwitch,
    nodes: [Node; 3],
    _underlay: Underlay,
    lab: OvnLab,
}

impl Drop for OvnbpfNodes {
    fn drop(&mut self) {
        stop_agents(std::mem::take(&mut self.agents));
    }
}

impl OvnbpfNodes {
    fn create(prefix: &str, agent: &Path) -> Result<OvnbpfNodes> {
        let lab = OvnLab::start()?;
        let mut underlay = Underlay::create(&format!("{prefix}o"))?;
        let nodes: [Node; 3] = [
            underlay.add_node("node1")?,
            underlay.add_node("node2")?,
            underlay.add_node("node3")?,
        ];
        let mut topology = Topology::new();
        // The default VPC as kube-ovn-controller builds it: two subnets, each node's join port
        // and policies (30000 to its InternalIP, 29000 from its pods of each subnet).
        topology
            .default_vpc()?
            .subnet(DEFAULT_VPC, "subnet-x", "10.17.0.0/16")?;
        for (index, node) in nodes[..2].iter().enumerate() {
            let name = ["node1", "node2"][index];
            let join_ip = Ipv4Addr::new(100, 64, 0, 2 + index as u8);
            topology
                .node_port(name, &mac_for(&format!("node-{name}")), join_ip)
                .node_policy(node.ip(), join_ip)
                .distributed_gateway("ovn-default", name, join_ip)
                .distributed_gateway("subnet-x", name, join_ip);
        }
        topology
            .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24,fd00:10:1::/64")?
            .subnet("vpc-a", "subnet-a2", "10.0.2.0/24")?
            .vpc_with_subnet("vpc-b", "subnet-b", "10.1.1.0/24")?
            .peering("vpc-a", "10.0.255.1/30", "vpc-b", "10.0.255.2/30")
            .static_route("vpc-a", "10.1.1.0/24", Ipv4Addr::new(10, 0, 255, 2))
            // Back to both of vpc-a's subnets: one /16 would lose to the source route Kube-OVN
            // gives subnet-b (10.1.1.0/24 via its gateway, priority 72 over the /16's 49), as on
            // real OVN.
            .static_route("vpc-b", "10.0.1.0/24", Ipv4Addr::new(10, 0, 255, 1))
            .static_route("vpc-b", "10.0.2.0/24", Ipv4Addr::new(10, 0, 255, 1))
            .vpc_with_subnet("vpc-u", "subnet-u", "10.100.0.0/24")?
            .localnet("subnet-u", "physnet1", 100)
            .vpc_with_subnet("vpc-j", "subnet-j", "10.3.1.0/24")?
            // (r): vpc-r's external access on the provider network, its default route out
            // of it (the external host in the connected subnet is what (r) talks to).
            .vpc_with_subnet("vpc-r", "subnet-r", "10.5.1.0/24")?
            .plain_switch("external", "172.30.0.0/24")?
            .localnet("external", "physnet1", 200)
            .external_access("vpc-r", "external", "172.30.0.10/24", &["node2"])
            .static_route("vpc-r", "0.0.0.0/0", EXTERNAL_HOST)
            // (s): the subnet's SNAT (pr's distributed FIP takes precedence for pr).
            .nat("vpc-r", "snat", &SNAT_EIP.to_string(), "10.5.1.0/24");
        let backend = PLAN[1].2;
        for (protocol, port) in [
            ("tcp", 5201),
            ("udp", 5201),
            ("tcp", RR_PORT.parse::<u16>()?),
            ("tcp", CONNECTION_PORT),
        ] {
            topology.service(
                "vpc-a",
                &["subnet-a", "subnet-a2"],
                protocol,
                &format!("{SERVICE_VIP}:{port}"),
                &format!("{backend}:{port}"),
            );
        }
        for (index, (name, subnet, ip, _, node)) in PLAN.into_iter().enumerate() {
            match IPV6_PAIR.get(index) {
                Some(&ip6) => {
                    topology.dual_stack_pod(subnet, name, "bench", &mac_for(name), (ip, ip6))
                }
                None => topology.pod(subnet, name, "bench", &mac_for(name), ip),
            };
            if matches!(subnet, "ovn-default" | "subnet-x") {
                topology.pod_on_node(subnet, name, "bench", ["node1", "node2"][node]);
            }
        }
        topology.apply(&lab)?;
        hundred_acls("pj2.bench", PLAN[8].2).apply(&lab)?;
        // (r)'s FIP names its pod's port, which exists now.
        let (fip_pod, _, fip_pod_ip, ..) = PLAN[FIP_CLIENT];
        Topology::new()
            .distributed_fip(
                "vpc-r",
                &FIP.to_string(),
                fip_pod_ip,
                &format!("{fip_pod}.bench"),
                &mac_for(fip_pod),
            )
            .apply(&lab)?;
        let physical = PhysicalSwitch::create(&format!("{prefix}o"))?;
        for node in &nodes[..2] {
            physical.add_trunk(node, "eth1")?;
        }
        let external = physical.add_host("ext", Some(200), &format!("{EXTERNAL_HOST}/24"))?;
        let mut pods = Vec::new();
        let mut local_ports: [Vec<String>; 3] = [Vec::new(), Vec::new(), Vec::new()];
        for (name, subnet, ip, gateway, node) in PLAN {
            let host = format!("{name}_h");
            let default_vpc = matches!(subnet, "ovn-default" | "subnet-x");
            pods.push(nodes[node].add_pod(&PodSpec {
                name,
                host_interface: &host,
                mac: Some(&mac_for(name)),
                address: Some(&format!("{ip}/{}", if default_vpc { 16 } else { 24 })),
                gateway: Some(gateway),
                // Geneve costs 58 bytes; the underlay and the provider network (r) carry full
                // frames.
                mtu: Some(if matches!(subnet, "subnet-u" | "subnet-r") {
                    1500
                } else {
                    1442
                }),
            })?);
            if let (Some(ip6), Some(pod)) = (IPV6_PAIR.get(pods.len() - 1), pods.last()) {
                // As kube-ovn-cni configures a dual-stack pod: no duplicate address detection
                // left to run, the gateway as the default route.
                let netns = pod.netns();
                netns.ip(&[
                    "-6",
                    "addr",
                    "add",
                    &format!("{ip6}/64"),
                    "dev",
                    "eth0",
                    "nodad",
                ])?;
                netns.ip(&[
                    "-6",
                    "route",
                    "add",
                    "default",
                    "via",
                    &IPV6_GATEWAY.to_string(),
                    "dev",
                    "eth0",
                ])?;
            }
            local_ports[node].push(match pods.last() {
                Some(pod) if name == PLAN[SOCKET_CLIENT].0 => {
                    format!("{name}.bench={host},netns={}", pod.netns().path().display())
                }
                _ => format!("{name}.bench={host}"),
            });
        }
        let bpffs = BpfMount::create()?;
        let mut fixture = OvnbpfNodes {
            agents: Vec::new(),
            bpffs,
            cgroup: Cgroup2Mount::create()?,
            pods,
            external,
            _physical: physical,
            nodes,
            _underlay: underlay,
            lab,
        };
        for (index, (chassis, ports)) in ["node1", "node2", "node3"]
            .into_iter()
            .zip(local_ports)
            .enumerate()
        {
            let log = std::env::temp_dir().join(format!("{prefix}-{chassis}.log"));
            // node3 carries (k)'s server only: no provider network, no node NIC, and it asks
            // for outer checksums.
            let extra_args = if index == 2 {
                vec!["--encap-csum=true".into(), "--no-node-nic".into()]
            } else {
                // ovn0 gets the pods' MTU, so (i) carries what (h) does per packet.
                let mut args = vec![
                    "--bridge-mappings".into(),
                    "physnet1:eth1".into(),
                    "--pod-mtu".into(),
                    "1442".into(),
                ];
                if index == 0 {
                    args.extend([
                        "--socket-lb".into(),
                        "--socket-lb-cgroup".into(),
                        fixture.cgroup.path().display().to_string(),
                    ]);
                }
                args
            };
            let spec = AgentSpec {
                chassis,
                node: &fixture.nodes[index],
                local_ports: ports,
                pin_root: Some(fixture.bpffs.path().join(chassis)),
                cni_dir: None,
                extra_args,
            };
            let child = spec.spawn(&fixture.lab, agent, log)?;
            fixture.agents.push(child);
        }
        // The pods and both nodes' join ports (their ovn0, for (i)).
        wait_all_up(&fixture.lab, PLAN.len() + 2, &fixture.agents)?;
        Ok(fixture)
    }

    fn paths(&self, letters: &str) -> Vec<BenchPath<'_>> {
        let fip = letters.contains('r').then(|| {
            BenchPath::pair(
                ('r', "(r) ovnbpf FIP to outside"),
                (self.pods[FIP_CLIENT].netns(), self.external.netns()),
                EXTERNAL_HOST,
                Vec::new(),
            )
        });
        let snat = letters.contains('s').then(|| {
            BenchPath::pair(
                ('s', "(s) ovnbpf SNAT to outside"),
                (self.pods[SNAT_CLIENT].netns(), self.external.netns()),
                EXTERNAL_HOST,
                Vec::new(),
            )
        });
        OVNBPF_PATHS
            .iter()
            .filter(|(letter, ..)| letters.contains(*letter))
            .map(|&(letter, name, client, server)| BenchPath {
                letter,
                name,
                client: client.map_or(self.nodes[0].netns(), |pod| self.pods[pod].netns()),
                server: self.pods[server].netns(),
                server_ip: match letter {
                    'n' => IPV6_PAIR[server].into(),
                    _ => PLAN[server].2.into(),
                },
                target: match letter {
                    'l' | 'm' => SERVICE_VIP.into(),
                    'n' => IPV6_PAIR[server].into(),
                    _ => PLAN[server].2.into(),
                },
                forwarders: Vec::new(),
            })
            .chain(fip)
            .chain(snat)
            .collect()
    }
}

/// Every path's samples, per metric, one per repetition.
type Samples = BTreeMap<Metric, Vec<f64>>;

/// What [`measure_interleaved`] measured, per path.
struct Measured {
    samples: Vec<Samples>,
    /// The p50 and p99 of all the path's round trips over every repetition.
    pooled: Vec<Option<(f64, f64)>>,
    /// The rate of its paced runs, packets per second.
    paced_rates: Vec<u32>,
}

/// Measures every path `runs` times, interleaved: in each repetition, each measure over every
/// path (starting one path later than the repetition before).
fn measure_interleaved(paths: &[BenchPath], settings: &Settings) -> Result<Measured> {
    let cpus = Cpus::of_host();
    let (runs, seconds) = (settings.runs, settings.seconds.to_string());
    // One set of servers per target (two paths may share one, as (h) and (i)).
    let mut servers = Vec::new();
    let mut started: Vec<(String, IpAddr)> = Vec::new();
    for path in paths {
        let target = (path.server.name().to_string(), path.server_ip);
        if !started.contains(&target) {
            let connections = paths.iter().any(|other| {
                other.measures_connections()
                    && other.server.name() == path.server.name()
                    && other.server_ip == path.server_ip
            });
            servers.push(start_servers(
                path.server,
                path.server_ip,
                &cpus.server,
                connections,
            )?);
            started.push(target);
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let kernel = KernelTime::enable()?;
    let mut samples: Vec<Samples> = paths.iter().map(|_| Samples::new()).collect();
    let mut pooled: Vec<Vec<f64>> = paths.iter().map(|_| Vec::new()).collect();
    let mut record = |index: usize, metric: Metric, value: f64| {
        samples[index].entry(metric).or_default().push(value);
    };
    // Per pacing group: the rate set, else the slowest delivered rate of the first repetition.
    let mut paced: [Option<u32>; 2] = [settings.paced_pps; 2];
    let mut paced_rates = vec![0; paths.len()];
    for repetition in 0..runs as usize {
        println!("== bench datapath: repetition {} of {runs}", repetition + 1);
        let order: Vec<usize> = (0..paths.len())
            .map(|i| (i + repetition) % paths.len())
            .collect();
        for &i in &order {
            record(
                i,
                Metric::TcpGbits,
                tcp_throughput(&paths[i], &cpus, &seconds)?,
            );
        }
        for &i in order
            .iter()
            .filter(|&&i| paths[i].measures_request_response())
        {
            let round_trips = request_response(&paths[i], &cpus, &seconds)?;
            record(i, Metric::RrP50, percentile(&round_trips, 50.0));
            record(i, Metric::RrP99, percentile(&round_trips, 99.0));
            pooled[i].extend(round_trips);
        }
        let mut slowest = [f64::INFINITY; 2];
        for &i in &order {
            let run = udp_flows(&paths[i], &cpus, &seconds, None)?;
            record(i, Metric::UdpSentPps, run.sent_per_s);
            record(i, Metric::UdpDeliveredPps, run.delivered_per_s);
            let group = &mut slowest[paths[i].pacing()];
            *group = group.min(run.delivered_per_s);
        }
        for (rate, slowest) in paced.iter_mut().zip(slowest) {
            rate.get_or_insert_with(|| round_rate(slowest * PACED_SHARE));
        }
        for &i in &order {
            let rate = paced[paths[i].pacing()].unwrap_or(UDP_FLOWS);
            paced_rates[i] = rate;
            let (cpu, ebpf) = cost_per_packet(&paths[i], &cpus, (&seconds, rate), &kernel)?;
            record(i, Metric::CpuNsPerPacket, cpu);
            if paths[i].is_ovnbpf() {
                record(i, Metric::EbpfNsPerPacket, ebpf);
            }
        }
        for &i in order.iter().filter(|&&i| paths[i].measures_connections()) {
            record(
                i,
                Metric::ConnectionsPerS,
                connection_rate(&paths[i], &cpus)?,
            );
        }
    }
    drop(servers);
    let pooled = pooled
        .into_iter()
        .map(|mut round_trips| {
            round_trips.sort_by(f64::total_cmp);
            (!round_trips.is_empty()).then(|| {
                (
                    percentile(&round_trips, 50.0),
                    percentile(&round_trips, 99.0),
                )
            })
        })
        .collect();
    Ok(Measured {
        samples,
        pooled,
        paced_rates,
    })
}

/// The pairs compared: every ovnbpf path against the raw pair and plain routing, then the
/// ovnbpf paths against each other, with the goals the README states.
fn comparisons(letters: &str) -> Vec<(char, char)> {
    let mut pairs: Vec<(char, char)> = "cdefhijklmr"
        .chars()
        .flat_map(|x| [(x, 'a'), (x, 'b')])
        .collect();
    pairs.extend([
        ('d', 'c'),
        ('e', 'c'),
        ('f', 'c'),
        ('h', 'd'),
        ('i', 'h'),
        ('j', 'c'),
        ('k', 'c'),
        ('l', 'c'),
        ('m', 'c'),
        ('m', 'l'),
        ('n', 'c'),
        ('q', 'c'),
        ('r', 'f'),
        ('s', 'f'),
        ('c', 'o'),
        ('c', 'p'),
        ('t', 'p'),
    ]);
    pairs.retain(|(x, y)| letters.contains(*x) && letters.contains(*y));
    pairs
}

/// Per repetition `x[r] / y[r]`, over the repetitions both measured.
fn ratios(x: &[f64], y: &[f64]) -> Vec<f64> {
    x.iter()
        .zip(y)
        .filter(|(_, under)| **under > 0.0)
        .map(|(over, under)| over / under)
        .collect()
}

fn spread_json(values: &[f64]) -> Value {
    match Spread::of(values) {
        Some(s) => {
            json!({"median": s.median, "min": s.min, "max": s.max, "per_repetition": values})
        }
        None => Value::Null,
    }
}

/// Prints the per-path table and the ratio table; returns their JSON.
fn report(paths: &[BenchPath], measured: &Measured, letters: &str) -> Vec<Value> {
    let samples = &measured.samples;
    print!("\n{:<28}", "path (median ±half-range %)");
    for metric in Metric::ALL {
        print!(" {:>16}", metric.heading());
    }
    println!();
    let mut json_results = Vec::new();
    for (((path, samples), pooled), paced) in paths
        .iter()
        .zip(samples)
        .zip(&measured.pooled)
        .zip(&measured.paced_rates)
    {
        print!("{:<28}", path.name);
        let mut medians = serde_json::Map::new();
        for metric in Metric::ALL {
            match samples.get(&metric).and_then(|values| Spread::of(values)) {
                Some(s) => {
                    let half_range = 50.0 * (s.max - s.min) / s.median.abs().max(f64::MIN_POSITIVE);
                    print!(" {:>10.1} ±{:>3.0}%", metric.shown(s.median), half_range);
                    medians.insert(metric.key().into(), json!(s.median));
                }
                None => print!(" {:>16}", "—"),
            }
        }
        println!();
        let per_run: serde_json::Map<String, Value> = samples
            .iter()
            .map(|(metric, values)| (metric.key().to_string(), json!(values)))
            .collect();
        let pooled = pooled.map(|(p50, p99)| json!({"tcp_rr_p50_us": p50, "tcp_rr_p99_us": p99}));
        json_results.push(json!({"path": path.name, "letter": path.letter.to_string(),
                                 "samples": per_run, "median": medians, "pooled": pooled,
                                 "paced_packets_per_s": paced}));
    }
    let index = |letter: char| paths.iter().position(|p| p.letter == letter);
    print!("\n{:<8}", "ratio");
    for metric in Metric::COMPARED {
        print!(" {:>18}", metric.heading());
    }
    println!(
        "\n{:<8} (median of the per-repetition ratios [min-max])",
        ""
    );
    for (x, y) in comparisons(letters) {
        let (Some(over), Some(under)) = (index(x), index(y)) else {
            continue;
        };
        let label = format!("{x}/{y}");
        print!("{label:<8}");
        let mut metrics = serde_json::Map::new();
        // Costs per packet are compared only at the same paced rate.
        let same_rate = measured.paced_rates[over] == measured.paced_rates[under];
        for metric in Metric::COMPARED {
            let values = match (samples[over].get(&metric), samples[under].get(&metric)) {
                (Some(_), Some(_)) if metric.is_per_paced_packet() && !same_rate => Vec::new(),
                (Some(over), Some(under)) => ratios(over, under),
                _ => Vec::new(),
            };
            match Spread::of(&values) {
                Some(s) => {
                    print!(" {:>6.2} [{:.2}-{:.2}]", s.median, s.min, s.max);
                    metrics.insert(metric.key().into(), spread_json(&values));
                }
                None => print!(" {:>18}", "—"),
            }
        }
        println!();
        json_results.push(json!({"ratio": label, "metrics": metrics}));
    }
    println!(
        "goals: c/b throughput ≥ 0.8 and RR p99 ≤ 1.2; h/d throughput ≥ 0.95; j/c throughput ≥ 0.9 and RR p50 ≤ 1.1; m/c (the VIP balanced at the socket) throughput ≥ 0.95 and RR p50 ≤ 1.05; n/c (IPv6) throughput ≥ 0.95; q/c (IPv6 underlay) shown, no goal; c/o (against the kernel's VXLAN) throughput ≥ 1.1; c/p (against real OVN, userspace datapath) throughput ≥ 20; t/p (ovnbpf's OpenFlow backend against ovn-controller on the same userspace OVS) throughput ≥ 1.0; r/f (a distributed FIP against the same physical path without NAT) throughput ≥ 0.9; s/f (centralized SNAT on the gateway chassis, the same) throughput ≥ 0.9"
    );
    json_results
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
    let runs: u32 = option(args, "--runs").unwrap_or("5").parse()?;
    let seconds: u32 = option(args, "--seconds").unwrap_or("3").parse()?;
    let flood_runs: u32 = option(args, "--flood-runs").unwrap_or("5000").parse()?;
    let paced_pps: Option<u32> = option(args, "--paced-pps").map(str::parse).transpose()?;
    anyhow::ensure!(
        runs > 0 && seconds > 0 && paced_pps.is_none_or(|pps| pps >= UDP_FLOWS),
        "--runs and --seconds take numbers above 0, --paced-pps one of at least {UDP_FLOWS}"
    );
    println!("== bench datapath: building the agent");
    let agent = cmd::build_binaries(cmd::Profile::Debug)?.agent;
    if args.iter().any(|a| a == "--broadcast-only") {
        let result = broadcast(&agent, flood_runs)?;
        print_broadcast(&result);
        return write_json("datapath-broadcast", &[result]);
    }
    let prefix = unique_prefix();
    // Which paths to measure: letters a–t (all by default), e.g. `--paths af` to compare the
    // underlay with the raw pair alone.
    let letters = option(args, "--paths").unwrap_or("abcdefghijklmnopqrst");
    if let Some(bad) = letters
        .chars()
        .find(|c| !"abcdefghijklmnopqrst".contains(*c))
    {
        anyhow::bail!("--paths takes letters a to t, not {bad:?}");
    }
    println!("== bench datapath: setting up every path");
    let raw = letters
        .contains('a')
        .then(|| RawPair::create(&prefix))
        .transpose()?;
    let routed = letters
        .contains('b')
        .then(|| RoutedPair::create(&prefix))
        .transpose()?;
    let vxlan = letters
        .contains('o')
        .then(|| VxlanPair::create(&prefix))
        .transpose()?;
    let real_ovn = letters
        .contains('p')
        .then(|| RealOvnPair::create(&prefix))
        .transpose()?;
    let openflow = letters
        .contains('t')
        .then(|| OpenFlowPair::create(&prefix, &agent))
        .transpose()?;
    let ipv6_underlay = letters
        .contains('q')
        .then(|| Ipv6UnderlayPair::create(&prefix, &agent))
        .transpose()?;
    let ovnbpf = letters
        .contains([
            'c', 'd', 'e', 'f', 'h', 'i', 'j', 'k', 'l', 'm', 'n', 'r', 's',
        ])
        .then(|| OvnbpfNodes::create(&prefix, &agent))
        .transpose()?;
    let mut paths: Vec<BenchPath> = Vec::new();
    paths.extend(raw.as_ref().map(RawPair::path));
    paths.extend(routed.as_ref().map(RoutedPair::path));
    paths.extend(vxlan.as_ref().map(VxlanPair::path));
    paths.extend(real_ovn.as_ref().map(RealOvnPair::path));
    paths.extend(openflow.as_ref().map(OpenFlowPair::path));
    if let Some(ovnbpf) = &ovnbpf {
        paths.extend(ovnbpf.paths(letters));
    }
    paths.extend(ipv6_underlay.as_ref().map(Ipv6UnderlayPair::path));
    let mut json_results = Vec::new();
    if !paths.is_empty() {
        let settings = Settings {
            runs,
            seconds,
            paced_pps,
        };
        let measured = measure_interleaved(&paths, &settings)?;
        let rates: BTreeMap<u32, String> = paths.iter().zip(&measured.paced_rates).fold(
            BTreeMap::new(),
            |mut rates, (path, rate)| {
                rates.entry(*rate).or_default().push(path.letter);
                rates
            },
        );
        let rates: Vec<String> = rates
            .iter()
            .map(|(rate, letters)| format!("{letters} at {rate}"))
            .collect();
        println!(
            "\n(paced runs, packets/s of all flows together: {})",
            rates.join(", ")
        );
        json_results.push(json!({"repetitions": runs, "seconds": seconds,
            "paced_packets_per_s": rates,
            "udp_payload": UDP_PAYLOAD,
            "udp_flows": UDP_FLOWS}));
        json_results.extend(report(&paths, &measured, letters));
    }
    drop(paths);
    drop((
        ipv6_underlay,
        ovnbpf,
        openflow,
        real_ovn,
        vxlan,
        routed,
        raw,
    ));
    if letters.contains('g') {
        let broadcast = broadcast(&agent, flood_runs)?;
        print_broadcast(&broadcast);
        json_results.push(json!({"path": "(g) broadcast", "broadcast": broadcast}));
    }
    write_json("datapath", &json_results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_rates_round_down_to_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(round_rate(23_472.0), 20_000);
        assert_eq!(round_rate(29_950.0), 20_000);
        assert_eq!(round_rate(57_000.0), 50_000);
        assert_eq!(round_rate(150_000.0), 100_000);
        assert_eq!(round_rate(100_000.0), 100_000);
        assert_eq!(round_rate(3.0), UDP_FLOWS);
    }

    #[test]
    fn round_trips_are_read_from_sockperf_s_full_log_sorted() {
        let log = "------------------------------\n\
            test was performed using the following parameters: --mps=600000 --msg-size=14 --full-rtt\n\
            ------------------------------\n\
            978, 2.461088687, 2.461125486, 36.799\n\
            979, 2.461125647, 2.461162085, 16.438\n\
            980, 2.461162265, 2.461198573, 136.308\n\
            ------------------------------\n";
        assert_eq!(round_trips(log), vec![16.438, 36.799, 136.308]);
    }
}
