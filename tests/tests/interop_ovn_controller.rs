//! Wire compatibility with real OVN: node1 forwards with ovnbpf (agent + eBPF), node2 is a real
//! ovn-controller chassis on the OVS userspace datapath, both bound in the same Southbound.
//! Pods on the two nodes reach each other with ping and TCP in both directions, and broadcasts
//! cross in both directions (ovnbpf's copy for `_MC_flood` is delivered by OVS, OVS's by ovnbpf).
//! Routed traffic between two subnets crosses both ways too: each sender runs the router and
//! tunnels with the destination switch's VNI, which the other side takes.

mod common;

use std::{net::Ipv4Addr, path::PathBuf, time::Duration};

use common::{PodPlan, TwoNodes};
use ovnbpf_tests::{
    agent::AgentSpec,
    kubeovn::{Topology, mac_for},
    network::Pod,
    ovs_chassis::OvsChassis,
    process::{Child, wait_until},
    workspace_binary,
};

const A1: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
const A2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);
/// A pod of vpc-a's second subnet, on the real OVN node.
const A3: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
/// a1 on the ovnbpf node; a2 and a3 on the real OVN node.
const PODS: [PodPlan; 3] = [
    ("a1", "subnet-a", 0, A1),
    ("a2", "subnet-a", 1, A2),
    ("a3", "subnet-a2", 1, A3),
];

/// Starts a capture of broadcast echo requests on `pod`'s eth0, logging to `log`.
fn capture_broadcasts(pod: &Pod, log: PathBuf) -> Child {
    pod.netns()
        .spawn(
            "tcpdump",
            "tcpdump",
            &["-i", "eth0", "-nn", "-l", "icmp and ether broadcast"],
            Some(log),
        )
        .unwrap()
}

fn broadcast_ping(from: &Pod) {
    let ping = from
        .netns()
        .command("ping")
        .args(["-b", "-n", "-c", "3", "-i", "0.2", "-W", "1", "10.0.1.255"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&ping.stdout).contains("3 packets transmitted"),
        "{ping:?}"
    );
}

fn echo_requests(log: &PathBuf) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches("ICMP echo request")
        .count()
}

#[test]
fn ovnbpf_and_a_real_ovn_controller_forward_for_each_other() {
    let TwoNodes { lab, nodes, .. } = &TwoNodes::start();
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .subnet("vpc-a", "subnet-a2", "10.0.2.0/24")
        .unwrap();
    for (name, subnet, _, ip) in PODS {
        topology.pod(subnet, name, "ns", &mac_for(name), ip);
    }
    topology.apply(lab).unwrap();
    let pods = common::add_planned_pods(nodes, &PODS, true, 1442);
    let (a1, a2, a3) = (&pods[0], &pods[1], &pods[2]);

    let peer = OvsChassis::start(lab, &nodes[1], "node2").unwrap();
    peer.plug("a2_h", a2.netns(), "a2.ns").unwrap();
    peer.plug("a3_h", a3.netns(), "a3.ns").unwrap();
    // OVS's userspace datapath reads frames whole: a1 must not hand it partial checksums or
    // GSO super-packets inside the tunnel (a kernel OVS peer would take both).
    a1.netns()
        .exec("ethtool", &["-K", "eth0", "tx", "off"])
        .unwrap();
    let log_dir = tempfile::tempdir().unwrap();
    let agent = AgentSpec {
        chassis: "node1",
        node: &nodes[0],
        local_ports: vec!["a1.ns=a1_h".into()],
        pin_root: None,
        cni_dir: None,
        extra_args: Vec::new(),
    }
    .spawn(
        lab,
        &workspace_binary("ovnbpf-agent"),
        log_dir.path().join("node1.log"),
    )
    .unwrap();
    let logs = || format!("{}{}", agent.log_tail(), peer.log_tails());
    let up = wait_until(Duration::from_secs(30), || {
        ["a1.ns", "a2.ns", "a3.ns"]
            .iter()
            .all(|port| common::port_up(lab, port))
    });
    assert!(up, "ports not up{}", logs());

    // Unicast both ways: ovnbpf's Geneve into OVS, OVS's into ovnbpf.
    let reached = wait_until(Duration::from_secs(10), || {
        a1.ping(A2, 1).is_ok_and(|n| n == 1)
    });
    assert!(reached, "a1 (ovnbpf) → a2 (ovn-controller){}", logs());
    assert_eq!(a1.ping(A2, 5).unwrap(), 5, "a1 → a2{}", logs());
    assert_eq!(a2.ping(A1, 5).unwrap(), 5, "a2 → a1{}", logs());

    // Routed both ways: ovnbpf runs vpc-a for a1's packets, OVS for a3's.
    assert_eq!(a1.ping(A3, 5).unwrap(), 5, "a1 → a3 (routed){}", logs());
    assert_eq!(a3.ping(A1, 5).unwrap(), 5, "a3 → a1 (routed){}", logs());

    // TCP both ways.
    for (client, server, server_ip) in [(a1, a2, A2), (a2, a1, A1)] {
        let report = client.tcp_stream_to(server, server_ip);
        assert!(report.is_ok(), "{report:?}{}", logs());
    }

    // Broadcasts both ways: each side's flood copy is delivered by the other.
    for (sender, receiver, name) in [(a1, a2, "a2"), (a2, a1, "a1")] {
        let log = log_dir.path().join(format!("{name}-capture.txt"));
        let capture = capture_broadcasts(receiver, log.clone());
        std::thread::sleep(Duration::from_millis(700));
        broadcast_ping(sender);
        let seen = wait_until(Duration::from_secs(5), || echo_requests(&log) >= 3);
        drop(capture);
        assert!(
            seen,
            "{name} got {} broadcasts{}",
            echo_requests(&log),
            logs()
        );
    }
    drop(agent);
    drop(peer);
}
