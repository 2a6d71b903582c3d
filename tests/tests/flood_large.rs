//! A broadcast on a large switch, through the real kernel programs under BPF_PROG_TEST_RUN inside
//! a namespace the test creates: 200 pods on this node (veth pairs) and one pod on each of 40 other
//! chassis (reached through an uplink veth with a routed, resolved next hop). The group is
//! installed by the agent's own L2 state. A broadcast from one pod reaches every other local pod
//! exactly once and leaves the uplink as one Geneve copy per other chassis (the frame itself
//! being the last one); then one pod leaves and one joins, and the next broadcast follows. The
//! same over an IPv6 underlay: each copy leaves in IPv6 to its chassis's endpoint.
//!
//! `flood_cost` (ignored) is `cargo xtask bench datapath`'s driver for the cost of a broadcast.

mod common;

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use ovnbpf_agent::{
    dataplane::ebpf::{Hook, KernelPrograms, TestRunOutcome, l2::L2State},
    pipeline::{
        IrDiff,
        ir::{IrEntry, PortKind},
        packet::{L3, Packet},
        trace::Evaluator,
    },
};
use ovnbpf_tests::{
    frames::{FrameSocket, verdict::TC_ACT_REDIRECT},
    names::unique_prefix,
    netns::Netns,
};
use serde_json::Value;

const DP: u32 = 7;
const GROUP: u32 = 32768;
const NODE_IP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 1);
/// This node's endpoint over an IPv6 underlay; the other chassis are in `fd00:31::/64`, routed
/// through `fd00:30::2`.
const NODE_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x30, 0, 0, 0, 0, 0, 1);
const NEXT_HOP_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const LOCAL_PODS: u32 = 200;
const CHASSIS: u32 = 40;
/// Outer Ethernet, IPv4 (or IPv6), UDP, Geneve with OVN's option: where the inner frame starts.
const GENEVE_OVERHEAD: usize = 14 + 20 + 8 + 8 + 8;
const GENEVE_OVERHEAD6: usize = 14 + 40 + 8 + 8 + 8;

fn port(name: &str, key: u32, chassis: &str) -> IrEntry {
    IrEntry::Port {
        datapath: DP,
        key,
        name: name.into(),
        kind: PortKind::Vif {
            chassis: Some(chassis.into()),
        },
        addresses: Vec::new(),
        port_security: Vec::new(),
    }
}

fn member(port: u32) -> IrEntry {
    IrEntry::FloodMember {
        datapath: DP,
        group: GROUP,
        port,
    }
}

/// Other chassis `index`'s endpoint, over an IPv6 underlay when `ipv6`.
fn chassis_ip(index: u32, ipv6: bool) -> IpAddr {
    if ipv6 {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0x31, 0, 0, 0, 0, 0, index as u16 + 1))
    } else {
        IpAddr::V4(Ipv4Addr::new(
            172,
            31,
            (index / 200) as u8,
            (index % 200 + 1) as u8,
        ))
    }
}

const SENDER_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0x10, 0, 2];

/// The broadcast as the IR evaluator sees it.
fn broadcast_packet() -> Packet {
    Packet {
        eth_src: SENDER_MAC,
        eth_dst: [0xff; 6],
        l3: L3::Arp {
            op: 1,
            sha: SENDER_MAC,
            spa: Ipv4Addr::new(10, 16, 0, 2),
            tha: [0; 6],
            tpa: Ipv4Addr::new(10, 16, 0, 99),
        },
    }
}

/// An ARP request broadcast by the pod on the test-run device.
fn broadcast() -> Vec<u8> {
    let mac = SENDER_MAC;
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&mac);
    frame.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    frame.extend_from_slice(&mac);
    frame.extend_from_slice(&[10, 16, 0, 2, 0, 0, 0, 0, 0, 0, 10, 16, 0, 99]);
    frame
}

/// A unicast frame from the sender to `mac` (an ARP reply: no responder takes it, so the
/// switch's L2 lookup forwards it, as the unicast baseline of `flood_cost` needs).
fn unicast_to(mac: [u8; 6]) -> Vec<u8> {
    let mut frame = broadcast();
    frame[..6].copy_from_slice(&mac);
    frame[21] = 2;
    frame[32..38].copy_from_slice(&mac);
    frame
}

/// Received packets per interface of the namespace.
fn rx_packets(ns: &Netns) -> std::collections::HashMap<String, u64> {
    let text = ns.ip(&["-s", "-j", "link", "show"]).unwrap();
    let links: Value = serde_json::from_str(&text).unwrap();
    links
        .as_array()
        .unwrap()
        .iter()
        .map(|link| {
            (
                link["ifname"].as_str().unwrap().to_string(),
                link["stats64"]["rx"]["packets"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Every Geneve frame waiting on the socket (IPv4 or IPv6, UDP to 6081).
fn drain(socket: &FrameSocket) -> Vec<Vec<u8>> {
    socket
        .drain()
        .into_iter()
        .filter(|frame| {
            let ipv4 = frame.len() > GENEVE_OVERHEAD
                && frame[12..14] == [0x08, 0x00]
                && frame[23] == 17
                && frame[36..38] == 6081_u16.to_be_bytes();
            let ipv6 = frame.len() > GENEVE_OVERHEAD6
                && frame[12..14] == [0x86, 0xdd]
                && frame[20] == 17
                && frame[56..58] == 6081_u16.to_be_bytes();
            ipv4 || ipv6
        })
        .collect()
}

fn outer_destination(frame: &[u8]) -> IpAddr {
    if frame[12..14] == [0x86, 0xdd] {
        IpAddr::V6(<[u8; 16]>::try_from(&frame[38..54]).unwrap().into())
    } else {
        IpAddr::V4(Ipv4Addr::new(frame[30], frame[31], frame[32], frame[33]))
    }
}

/// The namespace: `lo` is the sending pod (the test-run device), `fNh`/`fNp` the local pods'
/// veths (one pair more than the pods, for a pod that joins later), `uph`/`upp` the uplink with
/// 172.31.0.0/16 routed through a permanent neighbour (`ipv6`: fd00:31::/64 likewise).
fn build(ns: &Netns, local: u32, ipv6: bool) {
    let batch = tempfile::NamedTempFile::new().unwrap();
    // No IPv6: no neighbour discovery frames on the veths to miscount.
    for key in ["all", "default"] {
        ns.exec(
            "sysctl",
            &["-qw", &format!("net.ipv6.conf.{key}.disable_ipv6=1")],
        )
        .unwrap();
    }
    let mut commands = String::from("link set lo up\n");
    for i in 0..=local {
        commands.push_str(&format!(
            "link add f{i}h type veth peer name f{i}p\nlink set f{i}h up\nlink set f{i}p up\n"
        ));
    }
    commands.push_str(&format!(
        "link add uph type veth peer name upp\nlink set uph up\nlink set upp up\n\
         addr add {NODE_IP}/24 dev uph\n\
         neigh add 172.30.0.2 lladdr 02:00:00:00:00:02 dev uph nud permanent\n\
         route add 172.31.0.0/16 via 172.30.0.2 dev uph\n"
    ));

    std::fs::write(batch.path(), commands).unwrap();
    ns.ip(&["-batch", batch.path().to_str().unwrap()]).unwrap();
    ns.exec("sysctl", &["-qw", "net.ipv4.conf.all.forwarding=1"])
        .unwrap();
    if ipv6 {
        // IPv6 on the uplink only (the pods' veths stay without: see above), forwarding as
        // the agent makes an IPv6 uplink forward.
        for setting in ["disable_ipv6=0", "forwarding=1"] {
            ns.exec("sysctl", &["-qw", &format!("net.ipv6.conf.uph.{setting}")])
                .unwrap();
        }
        let address = format!("{NODE_IP6}/64");
        ns.ip(&["addr", "add", &address, "dev", "uph", "nodad"])
            .unwrap();
        ns.ip(&[
            "neigh",
            "add",
            "fd00:30::2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "uph",
            "nud",
            "permanent",
        ])
        .unwrap();
        ns.ip(&[
            "route",
            "add",
            "fd00:31::/64",
            "via",
            "fd00:30::2",
            "dev",
            "uph",
        ])
        .unwrap();
    }
}

/// A switch of `local` pods here plus the sender, and one pod on each of `chassis` other
/// chassis, all in its broadcast group, installed by the agent's L2 state.
struct Fixture {
    ns: Netns,
    state: L2State,
    programs: KernelPrograms,
    uplink_capture: FrameSocket,
    local: u32,
    chassis: BTreeSet<IpAddr>,
    /// The IR the state was given (for the evaluator).
    entries: Vec<IrEntry>,
    /// The underlay is IPv6.
    ipv6: bool,
}

impl Fixture {
    /// The switch, the node tunnelling over IPv6 when `ipv6`.
    fn build(local: u32, chassis: u32, ipv6: bool) -> Self {
        ovnbpf_tests::require_root();
        let ns = Netns::create(&format!("{}-flood", unique_prefix())).unwrap();
        build(&ns, local, ipv6);
        let veths: Vec<u32> = (0..local)
            .map(|i| ns.ifindex(&format!("f{i}h")).unwrap())
            .collect();
        let uplink = ns.ifindex("uph").unwrap();
        let uplink_capture = FrameSocket::open_in(&ns, "upp").unwrap();
        let mut state = L2State::new("node1");
        state.set_ipv6_underlay(ipv6);
        let mut entries = vec![
            IrEntry::Datapath {
                datapath: DP,
                name: "subnet".into(),
                router: false,
            },
            IrEntry::FloodGroup {
                datapath: DP,
                key: GROUP,
                name: "_MC_flood".into(),
            },
            IrEntry::FloodMulticast {
                datapath: DP,
                group: "_MC_flood".into(),
            },
            port("sender", 1, "node1"),
            member(1),
        ];
        state.set_interface("sender", Some(1));
        for (i, &ifindex) in veths.iter().enumerate() {
            let (name, key) = (format!("pod{i}"), 100 + i as u32);
            state.set_interface(&name, Some(ifindex));
            entries.push(port(&name, key, "node1"));
            entries.push(member(key));
        }
        for index in 0..chassis {
            let (name, node, key) = (
                format!("remote{index}"),
                format!("node-{index}"),
                10_000 + index,
            );
            entries.push(IrEntry::ChassisEncap {
                chassis: node.clone(),
                ip: chassis_ip(index, ipv6),
                csum: false,
            });
            entries.push(port(&name, key, &node));
            entries.push(member(key));
        }
        state.apply(&IrDiff {
            added: entries.clone(),
            removed: Vec::new(),
        });
        let programs = ns
            .run_in(|| {
                let mut programs = common::load_programs();
                let endpoint = if ipv6 {
                    IpAddr::V6(NODE_IP6)
                } else {
                    IpAddr::V4(NODE_IP)
                };
                programs.set_tunnel_endpoint(endpoint, uplink).unwrap();
                state.flush(&mut programs).unwrap();
                Ok(programs)
            })
            .unwrap();
        Self {
            ns,
            state,
            programs,
            uplink_capture,
            local,
            chassis: (0..chassis).map(|index| chassis_ip(index, ipv6)).collect(),
            entries,
            ipv6,
        }
    }

    /// Flushes the agent's pending changes, then one broadcast from the sender: its outcome and
    /// how long the kernel ran the program.
    fn broadcast(&mut self, frame: &[u8]) -> (TestRunOutcome, std::time::Duration) {
        let (state, programs) = (&mut self.state, &mut self.programs);
        self.ns
            .run_in(|| {
                state.flush(programs).unwrap();
                Ok(programs.test_run_repeated(Hook::Pod, frame, 1).unwrap())
            })
            .unwrap()
    }

    /// One broadcast, checked: `reached` pods got it once, `not` none, each chassis one copy.
    /// Returns the local pods (by veth pair number) and chassis the kernel sent it to.
    fn broadcast_checked(
        &mut self,
        frame: &[u8],
        reached: &[u32],
        not: &[u32],
    ) -> (BTreeSet<u32>, BTreeSet<IpAddr>) {
        let before = rx_packets(&self.ns);
        let (outcome, _) = self.broadcast(frame);
        let after = rx_packets(&self.ns);
        check_local(&before, &after, reached, not);
        let copies = drain(&self.uplink_capture);
        check_remote(&copies, &outcome, frame, &self.chassis, self.ipv6);
        let local = (0..=self.local)
            .filter(|i| after[&format!("f{i}p")] > before[&format!("f{i}p")])
            .collect();
        let remote = copies
            .iter()
            .chain(std::iter::once(&outcome.frame))
            .map(|c| outer_destination(c))
            .collect();
        (local, remote)
    }
}

#[test]
fn a_broadcast_reaches_every_local_pod_once_and_each_other_chassis_once() {
    broadcast_to_every_member(false);
}

#[test]
fn over_an_ipv6_underlay_a_broadcast_reaches_each_other_chassis_once_in_ipv6() {
    broadcast_to_every_member(true);
}

fn broadcast_to_every_member(ipv6: bool) {
    let mut fixture = Fixture::build(LOCAL_PODS, CHASSIS, ipv6);
    let frame = broadcast();
    let all: Vec<u32> = (0..LOCAL_PODS).collect();
    let (local, remote) = fixture.broadcast_checked(&frame, &all, &[LOCAL_PODS]);

    // Three ways: the IR evaluator (the semantic reference the ovn-trace oracle checks) sends
    // the same broadcast to exactly the ports the kernel reached.
    let evaluator = Evaluator::new(fixture.entries.iter());
    let trace = evaluator.trace("sender", broadcast_packet()).unwrap();
    let mut expected_local = BTreeSet::new();
    let mut expected_remote = BTreeSet::new();
    for (port, _) in &trace.outputs {
        if let Some(i) = port.strip_prefix("pod") {
            expected_local.insert(i.parse::<u32>().unwrap());
        } else if let Some(index) = port.strip_prefix("remote") {
            expected_remote.insert(chassis_ip(index.parse().unwrap(), ipv6));
        } else {
            panic!("the evaluator output to {port}");
        }
    }
    assert_eq!(trace.outputs.len(), (LOCAL_PODS + CHASSIS) as usize);
    assert_eq!(local, expected_local);
    assert_eq!(remote, expected_remote);

    // pod7 leaves, a new pod joins on its own veth: the next broadcast reaches the new set.
    fixture.state.set_interface("pod7", None);
    let joined = fixture.ns.ifindex(&format!("f{LOCAL_PODS}h")).unwrap();
    fixture.state.set_interface("late", Some(joined));
    fixture.state.apply(&IrDiff {
        added: vec![port("late", 900, "node1"), member(900)],
        removed: Vec::new(),
    });
    let reached: Vec<u32> = (0..=LOCAL_PODS).filter(|&i| i != 7).collect();
    fixture.broadcast_checked(&frame, &reached, &[7]);
}

/// The driver of `cargo xtask bench datapath`'s broadcast case (sizes and runs from
/// `FLOOD_BENCH_LOCAL`, `FLOOD_BENCH_CHASSIS`, `FLOOD_BENCH_RUNS`): checks one broadcast like the
/// test above, then runs `runs` more, each once, and prints the kernel's mean time per broadcast
/// and per copy as one JSON line (a measurement, never asserted), with its baseline from the
/// same fixture: the mean time of one unicast to a local pod and of one to another chassis,
/// and what the broadcast's copies would cost sent that way.
#[test]
#[ignore = "benchmark driver, run by cargo xtask bench datapath"]
fn flood_cost() {
    let env = |name: &str, default: u32| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (local, chassis) = (env("FLOOD_BENCH_LOCAL", 64), env("FLOOD_BENCH_CHASSIS", 32));
    let runs = env("FLOOD_BENCH_RUNS", 2_000);
    let mut fixture = Fixture::build(local, chassis, false);
    let frame = broadcast();
    let all: Vec<u32> = (0..fixture.local).collect();
    fixture.broadcast_checked(&frame, &all, &[local]);
    let mut total = std::time::Duration::ZERO;
    for _ in 0..runs {
        total += fixture.broadcast(&frame).1;
        drain(&fixture.uplink_capture);
    }
    let per_broadcast = total.as_nanos() as f64 / f64::from(runs);
    let copies = f64::from(local + chassis);

    // The baseline, same fixture and run: the same copies sent as unicasts, one to a local pod
    // (a veth redirect) and one to a pod on another chassis (a Geneve encapsulation), each
    // checked once to go where it should.
    let (local_mac, remote_mac) = ([0x0a, 0x58, 0, 0, 0, 1], [0x0a, 0x58, 0, 0, 0, 2]);
    fixture.state.apply(&IrDiff {
        added: vec![
            IrEntry::L2Fib {
                datapath: DP,
                mac: local_mac,
                port: "pod0".into(),
            },
            IrEntry::L2Fib {
                datapath: DP,
                mac: remote_mac,
                port: "remote0".into(),
            },
        ],
        removed: Vec::new(),
    });
    // A test run does not perform a single redirect (only the flood's clones leave): the
    // kernel's delivered counter of pod0's veth shows where the unicast went.
    let to_local = unicast_to(local_mac);
    let pod0 = fixture.ns.ifindex("f0h").unwrap();
    let delivered = |fixture: &Fixture| {
        let counters = fixture.programs.interface_counters(pod0).unwrap();
        counters.map_or(0, |c| c.delivered_packets)
    };
    let before = delivered(&fixture);
    let (outcome, _) = fixture.broadcast(&to_local);
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    assert_eq!(outcome.frame, to_local);
    assert_eq!(delivered(&fixture), before + 1);
    let to_remote = unicast_to(remote_mac);
    let (outcome, _) = fixture.broadcast(&to_remote);
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    assert_eq!(outer_destination(&outcome.frame), chassis_ip(0, false));
    drain(&fixture.uplink_capture);
    let mut mean = |frame: &[u8]| {
        let mut total = std::time::Duration::ZERO;
        for _ in 0..runs {
            total += fixture.broadcast(frame).1;
            drain(&fixture.uplink_capture);
        }
        total.as_nanos() as f64 / f64::from(runs)
    };
    let (unicast_local, unicast_remote) = (mean(&to_local), mean(&to_remote));
    let as_unicasts = f64::from(local) * unicast_local + f64::from(chassis) * unicast_remote;
    println!(
        "FLOOD_BENCH {}",
        serde_json::json!({
            "local": local,
            "chassis": chassis,
            "runs": runs,
            "ns_per_broadcast": per_broadcast.round(),
            "ns_per_copy": (per_broadcast / copies).round(),
            "ns_per_unicast_local": unicast_local.round(),
            "ns_per_unicast_remote": unicast_remote.round(),
            "ns_as_unicasts": as_unicasts.round(),
            "broadcast_over_unicasts": (per_broadcast / as_unicasts * 100.0).round() / 100.0,
        })
    );
}

/// Each of `reached`'s veth peers received exactly one frame more, each of `not` none.
fn check_local(
    before: &std::collections::HashMap<String, u64>,
    after: &std::collections::HashMap<String, u64>,
    reached: &[u32],
    not: &[u32],
) {
    let received = |i: &u32| {
        let name = format!("f{i}p");
        (after[&name] - before[&name], name)
    };
    for (got, name) in reached.iter().map(received) {
        assert_eq!(got, 1, "{name} received {got} frames");
    }
    for (got, name) in not.iter().map(received) {
        assert_eq!(got, 0, "{name} is no member but received {got} frames");
    }
}

/// One copy per other chassis: the clones on the uplink and the frame itself (redirected, the
/// test run's output) name each chassis once; each carries the broadcast unchanged inside.
fn check_remote(
    copies: &[Vec<u8>],
    outcome: &TestRunOutcome,
    frame: &[u8],
    chassis: &BTreeSet<IpAddr>,
    ipv6: bool,
) {
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    let mut seen: Vec<IpAddr> = copies.iter().map(|c| outer_destination(c)).collect();
    seen.push(outer_destination(&outcome.frame));
    let overhead = if ipv6 {
        GENEVE_OVERHEAD6
    } else {
        GENEVE_OVERHEAD
    };
    for copy in copies.iter().chain(std::iter::once(&outcome.frame)) {
        assert_eq!(&copy[overhead..], frame, "the inner frame is the broadcast");
        assert_eq!(copy[..6], NEXT_HOP_MAC, "to the resolved next hop");
    }
    let distinct: BTreeSet<IpAddr> = seen.iter().copied().collect();
    assert_eq!(seen.len(), chassis.len(), "one copy per chassis: {seen:?}");
    assert_eq!(&distinct, chassis);
}
