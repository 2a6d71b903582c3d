//! L2 inside VPCs through the agents' eBPF datapath, two VPCs whose subnets both use
//! 10.0.1.0/24 on two nodes. Unicast (ping and TCP) reaches the same VPC's pods on the same node
//! (redirect into the peer veth) and on the other node (Geneve); the per-port counters show
//! nothing delivered to the other VPC's pods meanwhile. A broadcast reaches every other pod of
//! its switch, on its own node (a clone into the local member's veth) and on the other node (one
//! Geneve copy carrying `_MC_flood`'s key, delivered there to the local members), and no pod of
//! the other VPC.

use ovnbpf_tests::scenario;
use std::{net::Ipv4Addr, path::PathBuf, time::Duration};

use ovnbpf_tests::scenario::{PodPlan, TwoNodes};
use ovnbpf_tests::{
    bpffs::BpfMount,
    process::{Child, wait_until},
};

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
    let TwoNodes { lab, nodes, .. } = &TwoNodes::start();
    let pods = scenario::overlapping_vpcs_with(lab, nodes, &PODS);
    let log_dir = tempfile::tempdir().unwrap();
    let bpffs = BpfMount::create().unwrap();
    let agents =
        scenario::start_planned_agents(lab, nodes, &PODS, Some(bpffs.path()), log_dir.path());
    let logs = || scenario::log_tails(&agents);
    assert!(
        scenario::planned_pods_up(lab, &PODS),
        "not every pod came up{}",
        logs()
    );

    // Unicast: vpc-b's pods stay quiet (no IPv6 chatter) while vpc-a talks, same node and across.
    scenario::silence_ipv6(&[&pods[3], &pods[4]]);
    let counters = || scenario::both_nodes_counters(nodes, bpffs.path());
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
    let delivered = |node: usize, interface: &str| {
        scenario::delivered(&after[node], interface) - scenario::delivered(&before[node], interface)
    };
    assert!(
        delivered(0, "a3_h") > 1000,
        "a3 got the TCP streams: {after:?}"
    );
    assert!(
        delivered(1, "a2_h") > 1000,
        "a2 got the TCP stream: {after:?}"
    );
    assert_eq!(delivered(0, "b1_h"), 0, "{before:?} {after:?}");
    assert_eq!(delivered(1, "b2_h"), 0, "{before:?} {after:?}");

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
