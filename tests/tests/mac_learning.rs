//! MAC learning (OVN's `put_arp`): a custom VPC built as Kube-OVN builds it routes
//! 192.168.77.0/24 via an address no logical port has (an appliance's address a pod holds
//! besides its own, as a keepalived VIP is held). Northd gives the router no neighbour for it,
//! so the router ARPs for it (`lr_in_arp_request`); the pod's reply teaches the router its MAC:
//! the kernel on the pod's node reports the sender, that node's agent writes the MAC_Binding row
//! ovn-controller writes, and both nodes route through it, the other node included (which heard
//! nothing itself). When the address moves to another pod, whose gratuitous ARP announces it,
//! the router updates the row to the new MAC at once. A learned row ages out by the router's
//! `mac_binding_age_threshold`, and the router asks again and learns the holder anew.

use std::{net::Ipv4Addr, time::Duration};

use ovnbpf_tests::{
    frames::FrameSocket,
    kubeovn::{Topology, mac_for},
    network::Pod,
    ovn::OvnLab,
    process::wait_until,
    scenario::{self, PlannedAgents, PodPlan, TwoNodes},
};

const PODS: [PodPlan; 3] = [
    // Holds the appliance's address first.
    ("l1", "subnet-l1", 0, Ipv4Addr::new(10, 62, 1, 2)),
    ("l2", "subnet-l2", 1, Ipv4Addr::new(10, 62, 2, 2)),
    // Takes the appliance's address over.
    ("l3", "subnet-l1", 1, Ipv4Addr::new(10, 62, 1, 3)),
];

/// The static route's next hop: in subnet-l1, no port's address.
const APPLIANCE: Ipv4Addr = Ipv4Addr::new(10, 62, 1, 100);
/// An address behind the appliance (on its holder's loopback).
const BEHIND: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 1);

/// The router port the appliance is learned on.
const PORT: &str = "vpc-l-subnet-l1";

/// vpc-l with its pods, l1 holding the appliance's address, and the agents; the router's
/// `mac_binding_age_threshold` is `threshold` (Kube-OVN's 300 when `None`).
fn appliance_vpc(
    lab: &OvnLab,
    nodes: &[ovnbpf_tests::network::Node],
    threshold: Option<u32>,
) -> (Vec<Pod>, PlannedAgents) {
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-l", "subnet-l1", "10.62.1.0/24")
        .unwrap()
        .subnet("vpc-l", "subnet-l2", "10.62.2.0/24")
        .unwrap()
        .static_route("vpc-l", "192.168.77.0/24", APPLIANCE);
    for (name, subnet, _, ip) in &PODS {
        topology.pod(subnet, name, "ns", &mac_for(name), *ip);
    }
    topology.apply(lab).unwrap();
    if let Some(threshold) = threshold {
        let option = format!("options:mac_binding_age_threshold={threshold}");
        lab.nbctl(&["set", "logical_router", "vpc-l", &option])
            .unwrap();
    }
    let pods = scenario::add_planned_pods(nodes, &PODS, true, 1400);
    scenario::silence_ipv6(&pods.iter().collect::<Vec<_>>());
    hold_appliance(&pods[0]);
    let agents = PlannedAgents::start(lab, nodes, &PODS, &[]);
    assert_eq!(bindings(lab), Vec::<(String, String)>::new());
    (pods, agents)
}

/// The router learns the appliance from its holder's reply (node1 writes the row) and routes
/// through it from node2, which heard nothing itself; the address moves to l3 (node2), whose
/// gratuitous ARP (as keepalived sends on taking a VIP over), flooded, reaches the router,
/// which updates the row at once: no traffic lost to a stale MAC until the row ages out.
#[test]
fn a_router_learns_a_next_hop_no_port_has_and_follows_it_when_it_moves() {
    let TwoNodes { lab, nodes, .. } = &TwoNodes::start();
    let (pods, agents) = appliance_vpc(lab, nodes, None);
    let (l1, l2, l3) = (&pods[0], &pods[1], &pods[2]);
    let logs = || agents.logs();

    // From node2: its router ARPs; l1 answers on node1, whose agent writes the binding; node2
    // routes through it.
    let reached = wait_until(Duration::from_secs(10), || {
        l2.ping(BEHIND, 1).is_ok_and(|n| n == 1)
    });
    assert!(reached, "l2 → behind the appliance{}", logs());
    assert_eq!(
        bindings(lab),
        [(PORT.to_string(), mac_for("l1"))],
        "one binding, on the port the reply came in by{}",
        logs()
    );
    assert_eq!(l2.ping(BEHIND, 5).unwrap(), 5, "l2 → behind, learned");
    // From l1's own subnet too (l3, on node2: routed through the same row).
    assert_eq!(l3.ping(BEHIND, 3).unwrap(), 3, "l3 → behind l1");
    let reported = |node: usize| {
        agents.counters(nodes, node)["router_replies"]["neighbour_reported"]
            .as_u64()
            .unwrap_or_default()
    };
    assert!(reported(0) >= 1, "node1 reported the reply{}", logs());
    assert_eq!(reported(1), 0, "node2 heard no reply");

    release_appliance(l1);
    hold_appliance(l3);
    gratuitous_arp(l3);
    assert!(
        wait_until(Duration::from_secs(5), || bindings(lab)
            == [(PORT.to_string(), mac_for("l3"))]),
        "the binding follows the address to l3: {:?}{}",
        bindings(lab),
        logs()
    );
    assert_eq!(l2.ping(BEHIND, 3).unwrap(), 3, "l2 → behind l3{}", logs());
    assert!(
        reported(1) >= 1,
        "node2 reported the announcement{}",
        logs()
    );
}

/// northd removes a learned row once the router's `mac_binding_age_threshold` (lowered from
/// Kube-OVN's 300 s to 2 s here) has passed since the timestamp the agent wrote, which it does
/// only because every chassis advertises `mac-binding-timestamp`; the next packet's ARP request
/// learns the holder again.
#[test]
fn a_learned_neighbour_ages_out_and_is_learned_again() {
    let TwoNodes { lab, nodes, .. } = &TwoNodes::start();
    let (pods, agents) = appliance_vpc(lab, nodes, Some(2));
    let l2 = &pods[1];
    let logs = || agents.logs();
    let learned = || bindings(lab) == [(PORT.to_string(), mac_for("l1"))];
    assert!(
        wait_until(Duration::from_secs(10), || {
            let _ = l2.ping(BEHIND, 1);
            learned()
        }),
        "l1 not learned{}",
        logs()
    );
    assert!(
        wait_until(Duration::from_secs(15), || bindings(lab).is_empty()),
        "the binding did not age out: {:?}{}",
        bindings(lab),
        logs()
    );
    assert!(
        wait_until(Duration::from_secs(10), || {
            let _ = l2.ping(BEHIND, 1);
            learned()
        }),
        "l1 not learned again: {:?}{}",
        bindings(lab),
        logs()
    );
}

/// A gratuitous ARP for the appliance's address from `pod` (what keepalived sends on taking a
/// VIP over): a broadcast request from and for that address.
fn gratuitous_arp(pod: &Pod) {
    let mac: Vec<u8> = mac_for(pod.name())
        .split(':')
        .map(|byte| u8::from_str_radix(byte, 16).unwrap())
        .collect();
    let mut frame = vec![0xff; 6];
    frame.extend(&mac);
    frame.extend([0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    frame.extend(&mac);
    frame.extend(APPLIANCE.octets());
    frame.extend([0; 6]);
    frame.extend(APPLIANCE.octets());
    frame.resize(60, 0);
    FrameSocket::open_in(pod.netns(), "eth0")
        .unwrap()
        .send(&frame)
        .unwrap();
}

/// Gives `pod` the appliance's address on its NIC and the address behind it on its loopback.
fn hold_appliance(pod: &Pod) {
    let netns = pod.netns();
    netns.ip(&["link", "set", "lo", "up"]).unwrap();
    netns
        .ip(&["addr", "add", &format!("{APPLIANCE}/24"), "dev", "eth0"])
        .unwrap();
    netns
        .ip(&["addr", "add", &format!("{BEHIND}/32"), "dev", "lo"])
        .unwrap();
}

fn release_appliance(pod: &Pod) {
    let netns = pod.netns();
    netns
        .ip(&["addr", "del", &format!("{APPLIANCE}/24"), "dev", "eth0"])
        .unwrap();
    netns
        .ip(&["addr", "del", &format!("{BEHIND}/32"), "dev", "lo"])
        .unwrap();
}

/// The MAC_Bindings of the appliance's address: (router port, MAC).
fn bindings(lab: &OvnLab) -> Vec<(String, String)> {
    let text = lab
        .sbctl(&[
            "--bare",
            "--columns=logical_port,mac",
            "--format=csv",
            "--no-headings",
            "find",
            "MAC_Binding",
            &format!("ip=\"{APPLIANCE}\""),
        ])
        .unwrap();
    text.lines()
        .filter_map(|line| {
            let (port, mac) = line.split_once(',')?;
            Some((port.to_string(), mac.to_string()))
        })
        .collect()
}
