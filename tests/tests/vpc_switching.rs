//! L2 inside VPCs, two VPCs whose subnets both use 10.0.1.0/24 on two nodes, through the
//! agents' eBPF datapath and, the same scenario, through Open vSwitch's br-int programmed by the
//! agents with `--dataplane openflow`. Unicast (ping and TCP) reaches the same VPC's pods on the
//! same node (eBPF: a redirect into the peer veth) and on the other node (Geneve); the other
//! VPC's pods receive nothing meanwhile (their interfaces' counters). A broadcast reaches every
//! other pod of its switch, on its own node and on the other node (one Geneve copy carrying
//! `_MC_flood`'s key, delivered there to the local members), and no pod of the other VPC.

use ovnbpf_tests::scenario;
use std::{net::Ipv4Addr, path::PathBuf, time::Duration};

use ovnbpf_tests::process::{Child, wait_until};
use ovnbpf_tests::scenario::{Dataplane, PlannedAgents, PodPlan, TwoNodes};

/// (pod, subnet, node index, address): a1 and a3 share node1, a2 is on node2; vpc-b reuses the
/// addresses on both nodes.
const PODS: [PodPlan; 5] = [
    ("a1", "subnet-a", 0, Ipv4Addr::new(10, 0, 1, 2)),
    ("a2", "subnet-a", 1, Ipv4Addr::new(10, 0, 1, 3)),
    ("a3", "subnet-a", 0, Ipv4Addr::new(10, 0, 1, 4)),
    ("b1", "subnet-b", 0, Ipv4Addr::new(10, 0, 1, 3)),
    ("b2", "subnet-b", 1, Ipv4Addr::new(10, 0, 1, 2)),
];

#[test]
fn pods_reach_their_vpc_on_every_node_by_unicast_and_broadcast_and_nothing_else() {
    vpcs_switch_their_pods_apart(Dataplane::Ebpf);
}

/// The same through Open vSwitch on both nodes (issue 19's L2, isolation and flooding).
#[test]
fn openflow_nodes_switch_each_vpc_apart_by_unicast_and_broadcast() {
    vpcs_switch_their_pods_apart(Dataplane::OpenFlow);
}

fn vpcs_switch_their_pods_apart(dataplane: Dataplane) {
    let TwoNodes { lab, nodes, .. } = &TwoNodes::start();
    let pods = scenario::overlapping_vpcs_with(lab, nodes, &PODS);
    let log_dir = tempfile::tempdir().unwrap();
    let agents = PlannedAgents::start_on(lab, nodes, &PODS, &pods, (dataplane, &[]));
    let logs = || agents.logs();

    // Unicast: vpc-b's pods stay quiet (no IPv6 chatter) while vpc-a talks, same node and across;
    // their veths' host ends too (the node's kernel would send them its own solicitations).
    for (node, interface) in [(0, "b1_h"), (1, "b2_h")] {
        let setting = format!("net.ipv6.conf.{interface}.disable_ipv6=1");
        nodes[node]
            .netns()
            .exec("sysctl", &["-qw", &setting])
            .unwrap();
    }
    scenario::silence_ipv6(&[&pods[3], &pods[4]]);
    let counters = || {
        pods.iter()
            .map(scenario::received_packets)
            .collect::<Vec<_>>()
    };
    let before = counters();
    let (a1, a2, a3) = (&pods[0], &pods[1], &pods[2]);
    for (from, to, ip, what) in [
        (a1, a3, PODS[2].3, "a1 → a3, same node"),
        (a1, a2, PODS[1].3, "a1 → a2, across nodes"),
        (a2, a3, PODS[2].3, "a2 → a3, across nodes"),
    ] {
        assert_eq!(from.ping(ip, 3).unwrap(), 3, "{what}{}", logs());
        let report = from.tcp_stream_to(to, ip);
        assert!(report.is_ok(), "{what}: {report:?}{}", logs());
    }
    let after = counters();
    let received = |index: usize| after[index] - before[index];
    assert!(received(2) > 1000, "a3 got the TCP streams: {after:?}");
    assert!(received(1) > 1000, "a2 got the TCP stream: {after:?}");
    assert_eq!(received(3), 0, "b1: {before:?} {after:?}");
    assert_eq!(received(4), 0, "b2: {before:?} {after:?}");

    // Broadcast: every other pod listens for broadcast echo requests.
    let captures: Vec<(&str, Child, PathBuf)> = pods
        .iter()
        .zip(PODS)
        .skip(1)
        .map(|(pod, (name, ..))| {
            let log = log_dir.path().join(format!("{name}-capture.txt"));
            let capture = pod
                .netns()
                .spawn(
                    "tcpdump",
                    "tcpdump",
                    &["-i", "eth0", "-nn", "-e", "-l", "icmp and ether broadcast"],
                    Some(log.clone()),
                )
                .unwrap();
            (name, capture, log)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    let ping = pods[0]
        .ping_broadcast(Ipv4Addr::new(10, 0, 1, 255))
        .unwrap();
    assert!(
        String::from_utf8_lossy(&ping.stdout).contains("3 packets transmitted"),
        "{ping:?}"
    );
    let seen = |log: &PathBuf| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .matches("ICMP echo request")
            .count()
    };
    let reached = wait_until(Duration::from_secs(5), || {
        captures
            .iter()
            .filter(|(name, ..)| name.starts_with('a'))
            .all(|(_, _, log)| seen(log) >= 3)
    });
    std::thread::sleep(Duration::from_millis(300));
    let counts: Vec<(&str, usize)> = captures
        .iter()
        .map(|(name, _, log)| (*name, seen(log)))
        .collect();
    drop(captures);
    assert!(
        reached,
        "a2 (other node) and a3 (same node) got the broadcasts: {counts:?}{}",
        logs()
    );
    for (name, count) in &counts {
        let expected = if name.starts_with('a') { 3 } else { 0 };
        assert_eq!(*count, expected, "{name}: {counts:?}");
    }
    drop(agents);
}
