//! Underlay (Kube-OVN VLAN subnets) through the agents' eBPF datapath, and the same through Open
//! vSwitch's br-int programmed with `--dataplane openflow` (the NIC added to br-int): two switches whose
//! localnet ports are tagged with VLAN 100 and VLAN 200 on provider network `physnet1`, bridged
//! (`--bridge-mappings physnet1:eth1`) to each node's `eth1` on a physical switch. Both use
//! 10.100.0.0/24. Pods reach their VLAN's pods on the other node through the physical switch (a
//! capture shows the tags and no Geneve), broadcasts reach the VLAN's pods, and nothing crosses
//! between the VLANs. External hosts on access ports of VLAN 100 and VLAN 200 reach the pods of
//! their VLAN (their ARP answered by the pod) and nothing else, although both VLANs use the same
//! addresses. A third subnet's localnet port has no tag: its frames cross the trunk untagged and
//! an untagged host reaches its pods. VLAN 100's subnet is also routed to an overlay subnet (U2O),
//! which the compiler reports unsupported: that traffic is dropped and counted.

use ovnbpf_tests::scenario;
use std::{net::Ipv4Addr, time::Duration};

use ovnbpf_tests::scenario::{Dataplane, PlannedAgents, PodPlan, TwoNodes};
use ovnbpf_tests::{
    kubeovn::{Topology, mac_for},
    network::PhysicalSwitch,
    process::wait_until,
};

const PODS: [PodPlan; 7] = [
    ("u1", "subnet-u100", 0, Ipv4Addr::new(10, 100, 0, 2)),
    ("u2", "subnet-u100", 1, Ipv4Addr::new(10, 100, 0, 3)),
    ("w1", "subnet-u200", 0, Ipv4Addr::new(10, 100, 0, 3)),
    ("w2", "subnet-u200", 1, Ipv4Addr::new(10, 100, 0, 2)),
    ("o1", "subnet-o", 0, Ipv4Addr::new(10, 16, 0, 2)),
    ("n1", "subnet-n", 0, Ipv4Addr::new(10, 101, 0, 2)),
    ("n2", "subnet-n", 1, Ipv4Addr::new(10, 101, 0, 3)),
];

#[test]
fn vlan_pods_reach_their_vlan_across_nodes_and_nothing_else() {
    vlans_keep_their_pods_apart(Dataplane::Ebpf);
}

/// The same on OpenFlow nodes (issue 19's localnets).
#[test]
fn openflow_nodes_bridge_each_vlan_to_its_pods_only() {
    vlans_keep_their_pods_apart(Dataplane::OpenFlow);
}

fn vlans_keep_their_pods_apart(dataplane: Dataplane) {
    let TwoNodes {
        lab, nodes, prefix, ..
    } = &TwoNodes::start();
    let physical = PhysicalSwitch::with_trunks(prefix, nodes, "eth1").unwrap();
    let external_100 = physical
        .add_host("x100", Some(100), "10.100.0.200/24")
        .unwrap();
    let external_200 = physical
        .add_host("x200", Some(200), "10.100.0.201/24")
        .unwrap();
    let external_untagged = physical.add_host("xn", None, "10.101.0.200/24").unwrap();
    let mut topology = Topology::new();
    // Kube-OVN's underlay subnets have no logical gateway: the switches are on no router.
    // VLAN 100's is also routed to an overlay subnet of vpc-o (U2O), which is not compiled.
    topology
        .plain_switch("subnet-u100", "10.100.0.0/24")
        .unwrap()
        .plain_switch("subnet-u200", "10.100.0.0/24")
        .unwrap()
        .localnet("subnet-u100", "physnet1", 100)
        .localnet("subnet-u200", "physnet1", 200)
        .plain_switch("subnet-n", "10.101.0.0/24")
        .unwrap()
        .localnet("subnet-n", "physnet1", 0)
        .vpc_with_subnet("vpc-o", "subnet-o", "10.16.0.0/24")
        .unwrap()
        .subnet("vpc-o", "subnet-u100", "10.100.0.0/24")
        .unwrap();
    let pods = scenario::build_planned_pods(lab, nodes, topology, &PODS, true, 1500);
    scenario::silence_ipv6(&pods.iter().collect::<Vec<_>>());

    let log_dir = tempfile::tempdir().unwrap();
    let agents = PlannedAgents::start_on(
        lab,
        nodes,
        &PODS,
        &pods,
        (dataplane, &["--bridge-mappings", "physnet1:eth1"]),
    );
    let logs = || agents.logs();

    // Pod to pod across nodes in each VLAN, through the physical switch with the VLAN's tag.
    let capture_log = log_dir.path().join("trunk.txt");
    let mut capture = physical
        .netns()
        .spawn(
            "tcpdump",
            "tcpdump",
            &["-i", "t-node1", "-nn", "-e", "-l"],
            Some(capture_log.clone()),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (u1, u2, w1, w2, o1, n1) = (&pods[0], &pods[1], &pods[2], &pods[3], &pods[4], &pods[5]);
    let reached = wait_until(Duration::from_secs(5), || {
        u1.ping(PODS[1].3, 1).is_ok_and(|n| n == 1)
    });
    assert!(reached, "u1 → u2 (VLAN 100){}", logs());
    assert_eq!(u2.ping(PODS[0].3, 3).unwrap(), 3, "u2 → u1");
    assert_eq!(
        w1.ping(PODS[3].3, 3).unwrap(),
        3,
        "w1 → w2 (VLAN 200){}",
        logs()
    );
    // The untagged localnet's pods: untagged frames on the trunk.
    assert_eq!(
        n1.ping(PODS[6].3, 3).unwrap(),
        3,
        "n1 → n2 (untagged){}",
        logs()
    );
    let untagged_echo = |text: &str| {
        text.lines()
            .any(|line| line.contains("10.101.0.2 > 10.101.0.3") && !line.contains("vlan"))
    };
    let seen = wait_until(Duration::from_secs(3), || {
        std::fs::read_to_string(&capture_log).is_ok_and(|text| {
            text.contains("vlan 100")
                && text.contains("vlan 200")
                && text.contains("ICMP echo")
                && untagged_echo(&text)
        })
    });
    capture.stop();
    let text = std::fs::read_to_string(&capture_log).unwrap_or_default();
    assert!(seen, "no tagged and untagged echoes on the trunk: {text}");
    assert!(
        !text
            .lines()
            .any(|line| line.contains("10.101.0.") && line.contains("vlan")),
        "the untagged subnet's frames carry a tag: {text}"
    );
    // A Geneve datagram shows as `ADDRESS.6081:`; a timestamp may hold ".6081" too.
    assert!(
        !text.contains(".6081:"),
        "Geneve on an underlay switch: {text}"
    );

    // The same address in the other VLAN is another pod: u1 resolved 10.100.0.3 to u2.
    let neighbour = u1.netns().ip(&["neigh", "show", "10.100.0.3"]).unwrap();
    assert!(neighbour.contains(&mac_for("u2")), "{neighbour}");

    // External hosts: their ARP for a pod address is answered by that VLAN's pod (10.100.0.2 is
    // u1 in VLAN 100 and w2 in VLAN 200), and pods reach the host of their VLAN only.
    let external_neighbour = |host: &ovnbpf_tests::network::ExternalHost, ip: &str| {
        host.netns()
            .ip(&["neigh", "show", ip, "dev", "eth0"])
            .unwrap()
    };
    for (host, what, pod) in [
        (&external_100, "VLAN 100 host", PODS[0]),
        (&external_200, "VLAN 200 host", PODS[3]),
        (&external_untagged, "untagged host", PODS[6]),
    ] {
        let (name, .., ip) = pod;
        assert_eq!(host.ping(ip, 3).unwrap(), 3, "{what} → {name}{}", logs());
        let resolved = external_neighbour(host, &ip.to_string());
        assert!(resolved.contains(&mac_for(name)), "{resolved}");
    }
    let external_100_ip = Ipv4Addr::new(10, 100, 0, 200);
    let external_200_ip = Ipv4Addr::new(10, 100, 0, 201);
    assert_eq!(
        u2.ping(external_100_ip, 3).unwrap(),
        3,
        "u2 → VLAN 100 host"
    );
    assert_eq!(
        w1.ping(external_200_ip, 3).unwrap(),
        3,
        "w1 → VLAN 200 host"
    );
    assert_eq!(
        u1.ping(external_200_ip, 2).unwrap(),
        0,
        "u1 → VLAN 200 host"
    );
    assert_eq!(
        w2.ping(external_100_ip, 2).unwrap(),
        0,
        "w2 → VLAN 100 host"
    );
    assert_eq!(
        external_100.ping(external_200_ip, 2).unwrap(),
        0,
        "the hosts are in different VLANs"
    );

    // A broadcast in VLAN 100 reaches u2 (other node) and no pod of VLAN 200.
    let listen = |pod: &ovnbpf_tests::network::Pod, name: &str| {
        let log = log_dir.path().join(format!("{name}.txt"));
        let child = pod
            .netns()
            .spawn(
                "tcpdump",
                "tcpdump",
                &["-i", "eth0", "-nn", "-l", "icmp and ether broadcast"],
                Some(log.clone()),
            )
            .unwrap();
        (child, log)
    };
    let listeners = [listen(u2, "u2"), listen(w1, "w1"), listen(w2, "w2")];
    std::thread::sleep(Duration::from_millis(700));
    let ping = u1
        .netns()
        .command("ping")
        .args([
            "-b",
            "-n",
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "1",
            "10.100.0.255",
        ])
        .output()
        .unwrap();
    assert!(ping.status.code().is_some(), "{ping:?}");
    let count = |log: &std::path::Path| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .matches("ICMP echo request")
            .count()
    };
    let arrived = wait_until(Duration::from_secs(5), || count(&listeners[0].1) >= 3);
    std::thread::sleep(Duration::from_millis(300));
    let counts: Vec<usize> = listeners.iter().map(|(_, log)| count(log)).collect();
    drop(listeners);
    assert!(
        arrived,
        "u2 got the VLAN 100 broadcasts: {counts:?}{}",
        logs()
    );
    assert_eq!(
        &counts[1..],
        &[0, 0],
        "VLAN 200 pods got VLAN 100 broadcasts"
    );
    assert_eq!(w2.ping(PODS[2].3, 2).unwrap(), 2, "w2 → w1 still fine");

    // U2O: the compiler reports vpc-o unsupported, so the datapath routes nothing between the
    // underlay and the overlay subnet: dropped (on eBPF, counted), not sent where OVN would not.
    let unsupported = |node: usize| {
        let pins = agents.bpffs.path().join(scenario::NODES[node]);
        scenario::datapath_counters(&nodes[node], &pins)["drops"]["router_unsupported"]
            .as_u64()
            .unwrap_or_default()
    };
    let ebpf = dataplane == Dataplane::Ebpf;
    let before = if ebpf { unsupported(0) } else { 0 };
    assert_eq!(u1.ping(PODS[4].3, 2).unwrap(), 0, "u1 → o1 through vpc-o");
    assert_eq!(o1.ping(PODS[0].3, 2).unwrap(), 0, "o1 → u1 through vpc-o");
    if ebpf {
        assert!(
            unsupported(0) >= before + 4,
            "routed underlay traffic not counted as router_unsupported{}",
            logs()
        );
    }
}
