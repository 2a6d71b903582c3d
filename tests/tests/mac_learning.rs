//! MAC learning (OVN's `put_arp`): a custom VPC built as Kube-OVN builds it routes
//! 192.168.77.0/24 via an address no logical port has (an appliance's address a pod holds
//! besides its own, as a keepalived VIP is held). Northd gives the router no neighbour for it,
//! so the router ARPs for it (`lr_in_arp_request`); the pod's reply teaches the router its MAC:
//! the kernel on the pod's node reports the sender, that node's agent writes the MAC_Binding row
//! ovn-controller writes, and both nodes route through it, the other node included (which heard
//! nothing itself). When the address moves to another pod, the row ages out (the router's
//! `mac_binding_age_threshold`, lowered here from Kube-OVN's 300 s to 2 s so the test is quick),
//! the router ARPs again and learns the new holder.

use std::{net::Ipv4Addr, time::Duration};

use ovnbpf_tests::{
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

#[test]
fn a_router_learns_a_next_hop_no_port_has_and_every_node_routes_through_it() {
    let TwoNodes { lab, nodes, .. } = &TwoNodes::start();
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
    lab.nbctl(&[
        "set",
        "logical_router",
        "vpc-l",
        "options:mac_binding_age_threshold=2",
    ])
    .unwrap();
    let pods = scenario::add_planned_pods(nodes, &PODS, true, 1400);
    scenario::silence_ipv6(&pods.iter().collect::<Vec<_>>());
    let (l1, l2, l3) = (&pods[0], &pods[1], &pods[2]);
    hold_appliance(l1);

    let agents = PlannedAgents::start(lab, nodes, &PODS, &[]);
    let logs = || agents.logs();
    assert_eq!(bindings(lab), Vec::<(String, String)>::new());

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
    // From node1 too (the same row; node1's router heard the reply itself).
    assert_eq!(l3.ping(BEHIND, 3).unwrap(), 3, "l3 → behind l1");
    let reported = |node: usize| {
        agents.counters(nodes, node)["router_replies"]["neighbour_reported"]
            .as_u64()
            .unwrap_or_default()
    };
    assert!(reported(0) >= 1, "node1 reported the reply{}", logs());
    assert_eq!(reported(1), 0, "node2 heard no reply");

    // The address moves to l3 (node2): the binding ages out, the router asks again, l3 answers
    // and is learned; l1 no longer holds it, so only l3 can answer the pings now.
    release_appliance(l1);
    hold_appliance(l3);
    // Traffic makes the router ask once the row is gone (each ARP request stands for a
    // dropped packet, as in OVN).
    let moved = wait_until(Duration::from_secs(20), || {
        let _ = l2.ping(BEHIND, 1);
        bindings(lab) == [(PORT.to_string(), mac_for("l3"))]
    });
    assert!(
        moved,
        "the binding follows the address to l3: {:?}{}",
        bindings(lab),
        logs()
    );
    assert!(
        wait_until(Duration::from_secs(5), || l2
            .ping(BEHIND, 1)
            .is_ok_and(|n| n == 1)),
        "l2 → behind l3{}",
        logs()
    );
    assert!(reported(1) >= 1, "node2 reported l3's reply{}", logs());
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
