//! Flooding through the agents' eBPF datapath: a broadcast from a pod reaches every other pod of
//! its switch, on its own node (a clone into the local member's veth) and on the other node (one
//! Geneve copy carrying `_MC_flood`'s key, delivered there to the local members), and no pod of
//! the other VPC, whose subnet uses the same addresses.

mod common;

use std::{net::Ipv4Addr, path::PathBuf, time::Duration};

use ovnbpf_tests::{
    agent::AgentSpec,
    kubeovn::{Topology, mac_for},
    names::unique_prefix,
    network::{Pod, PodSpec, Underlay},
    ovn::OvnLab,
    process::{Child, wait_until},
    require_root, workspace_binary,
};

/// (pod, subnet, node index, address): a1 and a3 share node1, a2 is on node2; vpc-b reuses the
/// addresses on both nodes.
const PODS: [(&str, &str, usize, Ipv4Addr); 5] = [
    ("a1", "subnet-a", 0, Ipv4Addr::new(10, 0, 1, 2)),
    ("a2", "subnet-a", 1, Ipv4Addr::new(10, 0, 1, 3)),
    ("a3", "subnet-a", 0, Ipv4Addr::new(10, 0, 1, 4)),
    ("b1", "subnet-b", 0, Ipv4Addr::new(10, 0, 1, 3)),
    ("b2", "subnet-b", 1, Ipv4Addr::new(10, 0, 1, 2)),
];

#[test]
fn a_broadcast_reaches_every_pod_of_its_switch_on_every_node_and_no_other() {
    require_root();
    let lab = OvnLab::start().unwrap();
    let prefix = unique_prefix();
    let mut underlay = Underlay::create(&prefix).unwrap();
    let nodes = [
        underlay.add_node("node1").unwrap(),
        underlay.add_node("node2").unwrap(),
    ];
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .vpc_with_subnet("vpc-b", "subnet-b", "10.0.1.0/24")
        .unwrap();
    for (name, subnet, _, ip) in PODS {
        topology.pod(subnet, name, "ns", &mac_for(name), ip);
    }
    topology.apply(&lab).unwrap();
    let pods: Vec<Pod> = PODS
        .iter()
        .map(|(name, _, node, ip)| {
            nodes[*node]
                .add_pod(&PodSpec {
                    name,
                    host_interface: &format!("{name}_h"),
                    mac: Some(&mac_for(name)),
                    address: Some(&format!("{ip}/24")),
                    gateway: None,
                    mtu: Some(1442),
                })
                .unwrap()
        })
        .collect();

    let log_dir = tempfile::tempdir().unwrap();
    let agents: Vec<Child> = nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            let chassis = common::NODES[index];
            AgentSpec {
                chassis,
                node,
                local_ports: PODS
                    .iter()
                    .filter(|(_, _, node_index, _)| *node_index == index)
                    .map(|(name, ..)| format!("{name}.ns={name}_h"))
                    .collect(),
                pin_root: None,
            }
            .spawn(
                &lab,
                &workspace_binary("ovnbpf-agent"),
                log_dir.path().join(format!("{chassis}.log")),
            )
            .unwrap()
        })
        .collect();
    let logs = || common::log_tails(&agents);
    let all_up = wait_until(Duration::from_secs(20), || {
        PODS.iter()
            .all(|(name, ..)| common::port_up(&lab, &format!("{name}.ns")))
    });
    assert!(all_up, "not every pod came up{}", logs());

    // Every other pod listens for broadcast echo requests.
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
        .netns()
        .command("ping")
        .args(["-b", "-n", "-c", "3", "-i", "0.2", "-W", "1", "10.0.1.255"])
        .output()
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
