//! The agent with `--dataplane openflow` (issue 19, its first end-to-end part): node1's agent
//! programs a real Open vSwitch's br-int (userspace datapath, in node1's namespace, its underlay
//! address on `br-phy`) instead of eBPF; node2's agent runs eBPF. Three pods of subnet-a are
//! added through the CNI plugin as a runtime adds them (a1 and a3 on node1, a2 on node2): node1's
//! agent adds their host interfaces and a Geneve port to node2 to br-int, claims their ports,
//! and they come up only once their flows are in. The pods of node1 reach each other through
//! br-int (the ARP broadcast through the flood, the rest through the L2 lookup), and a1 and a2
//! reach each other across the nodes: Open vSwitch's Geneve with OVN's option (through the TLV
//! map, the logical ports moved in and out of `tun_metadata0`) and ovnbpf's eBPF Geneve
//! understand each other. Only flows of the agent's cookie are on br-int; the metrics name the
//! datapath (`ovnbpf_dataplane{dataplane="openflow"}`; node2's agent, left to choose with
//! `--dataplane auto`, runs eBPF, which loads here). A pod deleted is taken out of br-int and
//! no longer reached, and only its own flows changed; added again, the same. An OpenFlow node,
//! an eBPF node and a real ovn-controller chassis forward and route for each other; an OpenFlow
//! node routes a VPC and fences a switch it cannot enforce, and answers what OVN answers in
//! userspace.

use std::{net::Ipv4Addr, path::PathBuf, time::Duration};

use ovnbpf_tests::{
    cni_runtime::{PodAttachment, Runtime, plugin_dir},
    netns::Netns,
    ovs_chassis::{OvsSwitch, full_checksums},
    process::wait_until,
    require_root,
    scenario::{self, CniNodes},
    workspace_binary,
};
use serde_json::json;

/// Where node1's agent serves its metrics, inside the node's namespace.
const METRICS: &str = "127.0.0.1:10665";
const A1: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
const A2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);
const A3: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 4);

fn attachment(container_id: &str, netns: &Netns, pod: &str) -> PodAttachment {
    PodAttachment {
        container_id: container_id.to_string(),
        netns: netns.path().display().to_string(),
        if_name: "eth0".into(),
        args: format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME={pod}"),
    }
}

fn pings(from: &Netns, to: Ipv4Addr) -> bool {
    from.exec(
        "ping",
        &["-c", "3", "-i", "0.2", "-W", "1", &to.to_string()],
    )
    .is_ok_and(|text| text.contains(" 3 received"))
}

#[test]
fn an_openflow_node_forwards_for_its_pods_and_tunnels_to_an_ebpf_node() {
    require_root();
    let state = OvsSwitch::state_dir().unwrap();
    let mut openflow = OvsSwitch::agent_args_in(state.path());
    openflow.extend(["--metrics-address".into(), METRICS.into()]);
    // node2's agent is left to choose (`auto`): eBPF loads here, so eBPF it is.
    let auto = ["--dataplane", "auto", "--metrics-address", METRICS].map(String::from);
    let cni = CniNodes::start(
        &[("a1", A1), ("a2", A2), ("a3", A3)],
        None,
        [openflow, auto.to_vec()],
    );
    let logs = || cni.logs();
    let switch = OvsSwitch::start_in(cni.nodes[0].netns(), state).unwrap();
    // Open vSwitch tunnels from br-phy, which takes node1's underlay address.
    switch.underlay(&cni.nodes[0]).unwrap();
    switch.know_tunnel_peers(&[&cni.nodes[1]]).unwrap();
    let plugins = plugin_dir(
        &cni.work.path().join("bin"),
        "ovnbpf",
        &workspace_binary("ovnbpf-cni"),
    )
    .unwrap();
    let runtimes = [0, 1].map(|node| {
        Runtime::new(
            cni.nodes[node].netns(),
            vec![plugins.clone(), PathBuf::from("/usr/lib/cni")],
        )
    });
    let config = |node: usize| {
        json!({
            "cniVersion": "1.0.0",
            "name": "ovn",
            "type": "ovnbpf",
            "server_socket": cni.socket(node),
        })
    };
    // a1 and a3 on node1 (OpenFlow), a2 on node2 (eBPF).
    let placement = [("a1", 0), ("a3", 0), ("a2", 1)];
    let pods = placement.map(|(pod, _)| Netns::create(&format!("{}-p{pod}", cni.prefix)).unwrap());
    let attachments = [0, 1, 2].map(|index| {
        attachment(
            &format!("0f0f0000000{index}"),
            &pods[index],
            placement[index].0,
        )
    });
    for (index, (pod, node)) in placement.iter().enumerate() {
        let output = runtimes[*node]
            .exec("ADD", &attachments[index], &config(*node))
            .unwrap();
        assert!(
            output.status.success(),
            "ADD {pod}: {output:?}{}{}",
            logs(),
            switch.log_tails()
        );
        assert!(
            scenario::port_up(&cni.lab, &format!("{pod}.ns")),
            "{pod} not up after ADD"
        );
    }
    // Two pods and the tunnel to node2 on br-int, the pods' named as Kube-OVN names them.
    let ports = switch.vsctl(&["list-ports", "br-int"]).unwrap();
    assert_eq!(ports.lines().count(), 3, "{ports}");
    let iface_ids = switch
        .vsctl(&["--bare", "--columns=external_ids", "list", "interface"])
        .unwrap();
    for pod in ["a1.ns", "a3.ns"] {
        assert!(
            iface_ids.contains(&format!("iface-id={pod}")),
            "{pod}: {iface_ids}"
        );
    }
    assert!(
        wait_until(Duration::from_secs(5), || pings(&pods[0], A3)),
        "a1 → a3 through br-int\n{}{}",
        switch.ofctl(&["dump-flows", "br-int"]).unwrap_or_default(),
        logs()
    );
    assert!(pings(&pods[1], A1), "a3 → a1");
    // Across: OVS's Geneve (OVN's option through the TLV map) to and from the eBPF node.
    assert!(
        wait_until(Duration::from_secs(5), || pings(&pods[0], A2)),
        "a1 (OpenFlow) → a2 (eBPF)\n{}{}{}",
        switch.ofctl(&["dump-flows", "br-int"]).unwrap_or_default(),
        logs(),
        switch.log_tails()
    );
    assert!(pings(&pods[2], A3), "a2 (eBPF) → a3 (OpenFlow)");
    // Every flow is the agent's: its cookie's low 32 bits (the high ones name a drop's reason).
    let flows = switch.ofctl(&["dump-flows", "br-int"]).unwrap();
    let all = flows.lines().skip(1).count();
    assert_eq!(
        our_flows(&switch).len(),
        all,
        "a flow not of the agent's cookie: {flows}"
    );
    // Each agent says which datapath it runs.
    for (node, dataplane) in [(0, "openflow"), (1, "ebpf")] {
        let metrics = metrics(&cni.nodes[node]);
        let expected = format!(r#"ovnbpf_dataplane{{dataplane="{dataplane}"}} 1"#);
        assert!(
            metrics.lines().any(|line| line == expected),
            "node{}: {expected} missing in\n{metrics}",
            node + 1
        );
    }
    // a3 deleted: out of br-int, no longer reached; only its own flows changed (its
    // classification and outputs, by its OpenFlow port and logical key).
    let a3_key = cni
        .lab
        .sbctl(&[
            "--bare",
            "--columns=tunnel_key",
            "find",
            "Port_Binding",
            "logical_port=a3.ns",
        ])
        .unwrap();
    let a3_key: u32 = a3_key.trim().parse().unwrap();
    let ports_before: Vec<String> = ports.lines().map(str::to_string).collect();
    let ofports_before: Vec<String> = ports_before
        .iter()
        .map(|port| switch.vsctl(&["get", "interface", port, "ofport"]).unwrap())
        .collect();
    let flows_before = our_flows(&switch);
    let output = runtimes[0]
        .exec("DEL", &attachments[1], &config(0))
        .unwrap();
    assert!(output.status.success(), "DEL a3: {output:?}{}", logs());
    let ports = switch.vsctl(&["list-ports", "br-int"]).unwrap();
    assert_eq!(ports.lines().count(), 2, "{ports}");
    let a3_ofport = ports_before
        .iter()
        .zip(&ofports_before)
        .find(|(port, _)| !ports.lines().any(|left| left == port.as_str()))
        .map(|(_, ofport)| ofport.trim().to_string())
        .unwrap();
    let flows_after = our_flows(&switch);
    let changed = changed_flows(&flows_before, &flows_after);
    let key = format!("{a3_key:#x}");
    // a3's flows: by its OpenFlow port (`ofport`) or its logical key.
    let own = |ofport: &str, flow: &str| {
        flow.contains(&format!("in_port={ofport},"))
            || flow.contains(&format!("in_port={ofport} "))
            || flow.contains(&format!("output:{ofport}"))
            || flow.contains(&format!("reg15={key},"))
    };
    assert!(!changed.is_empty(), "a3's DEL changed no flow");
    assert!(
        changed.iter().all(|flow| own(&a3_ofport, flow)),
        "a3's DEL (OpenFlow port {a3_ofport}, key {key}) changed other flows: {changed:#?}"
    );
    pods[0].ip(&["neigh", "flush", "dev", "eth0"]).unwrap();
    assert!(!pings(&pods[0], A3), "a1 still reaches a deleted a3");
    // a3 added again: back on br-int (a new OpenFlow port), reached again, and again only its
    // own flows changed.
    let output = runtimes[0]
        .exec("ADD", &attachments[1], &config(0))
        .unwrap();
    assert!(
        output.status.success(),
        "ADD a3 again: {output:?}{}",
        logs()
    );
    let readded = switch.vsctl(&["list-ports", "br-int"]).unwrap();
    let a3_port = readded
        .lines()
        .find(|port| !ports.lines().any(|left| left == *port))
        .unwrap_or_else(|| panic!("a3 not back on br-int: {readded}"));
    let a3_ofport = switch
        .vsctl(&["get", "interface", a3_port, "ofport"])
        .unwrap()
        .trim()
        .to_string();
    assert!(
        wait_until(Duration::from_secs(5), || pings(&pods[0], A3)),
        "a1 → a3 added again{}",
        logs()
    );
    let flows_readded = our_flows(&switch);
    let changed = changed_flows(&flows_after, &flows_readded);
    assert!(!changed.is_empty(), "a3's ADD changed no flow");
    assert!(
        changed.iter().all(|flow| own(&a3_ofport, flow)),
        "a3's ADD (OpenFlow port {a3_ofport}, key {key}) changed other flows: {changed:#?}"
    );
    for (index, (_, node)) in placement.iter().enumerate() {
        let _ = runtimes[*node].exec("DEL", &attachments[index], &config(*node));
    }
    drop(switch);
}

/// Three kinds of node in one cluster (issue 19's mixed cluster): node1 an agent with
/// `--dataplane openflow`, node2 a real OVN chassis (ovn-controller 23.03 with Open vSwitch 3.1's
/// userspace datapath, Debian's), node3 an agent on eBPF. vpc-a's subnet-a has a1 (node1) and a2
/// (node2), subnet-b has b1 (node1) and b3 (node3); each node routes what its pods send and
/// tunnels it to the destination's node (Geneve with OVN's option, three implementations of it).
/// Pings all ways: same subnet across OpenFlow and ovn-controller, and routed between each pair
/// of node kinds.
#[test]
fn an_openflow_node_an_ebpf_node_and_a_real_ovn_controller_forward_for_each_other() {
    use ovnbpf_tests::{
        agent::AgentSpec,
        kubeovn::{Topology, mac_for},
        network::PodSpec,
        ovs_chassis::OvsChassis,
        scenario::{PodPlan, TwoNodes},
    };
    require_root();
    const B1: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
    const B3: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
    const PLAN: [PodPlan; 3] = [
        ("a1", "subnet-a", 0, A1),
        ("a2", "subnet-a", 1, A2),
        ("b1", "subnet-b", 0, B1),
    ];
    let mut two = TwoNodes::start();
    let node3 = two.underlay.add_node("node3").unwrap();
    let (lab, nodes) = (&two.lab, &two.nodes);
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .subnet("vpc-a", "subnet-b", "10.0.2.0/24")
        .unwrap()
        .pod("subnet-b", "b3", "ns", &mac_for("b3"), B3);
    // Room for Geneve's 58 bytes within the nodes' 1500.
    let pods = scenario::build_planned_pods(lab, nodes, topology, &PLAN, true, 1442);
    let b3 = node3
        .add_pod(&PodSpec {
            name: "b3",
            host_interface: "b3_h",
            mac: Some(&mac_for("b3")),
            address: Some("10.0.2.3/24"),
            gateway: Some(Ipv4Addr::new(10, 0, 2, 1)),
            mtu: Some(1442),
        })
        .unwrap();
    let peer = OvsChassis::start(lab, &nodes[1], "node2").unwrap();
    peer.plug("a2_h", pods[1].netns(), "a2.ns").unwrap();
    // node1: Open vSwitch under the agent, whose userspace datapath reads frames whole (TX
    // checksum offload off on its pods' veths, as on node2's).
    let switch = OvsSwitch::start(nodes[0].netns()).unwrap();
    switch.underlay(&nodes[0]).unwrap();
    switch.know_tunnel_peers(&[&nodes[1]]).unwrap();
    peer.know_tunnel_peers(&[&nodes[0]]).unwrap();
    for (index, interface) in [(0, "a1_h"), (2, "b1_h")] {
        full_checksums(nodes[0].netns(), interface, pods[index].netns()).unwrap();
    }
    let log_dir = tempfile::tempdir().unwrap();
    let mut openflow = AgentSpec {
        chassis: "node1",
        node: &nodes[0],
        local_ports: vec!["a1.ns=a1_h".into(), "b1.ns=b1_h".into()],
        pin_root: None,
        cni_dir: None,
        extra_args: switch.agent_args(),
    }
    .spawn(
        lab,
        &workspace_binary("ovnbpf-agent"),
        log_dir.path().join("node1.log"),
    )
    .unwrap();
    let bpffs = ovnbpf_tests::bpffs::BpfMount::create().unwrap();
    let mut ebpf = AgentSpec {
        chassis: "node3",
        node: &node3,
        local_ports: vec!["b3.ns=b3_h".into()],
        pin_root: Some(bpffs.path().join("node3")),
        cni_dir: None,
        extra_args: Vec::new(),
    }
    .spawn(
        lab,
        &workspace_binary("ovnbpf-agent"),
        log_dir.path().join("node3.log"),
    )
    .unwrap();
    let logs = || {
        format!(
            "{}{}{}{}",
            openflow.log_tail(),
            ebpf.log_tail(),
            peer.log_tails(),
            switch.ofctl(&["dump-flows", "br-int"]).unwrap_or_default()
        )
    };
    let up = wait_until(Duration::from_secs(30), || {
        ["a1.ns", "a2.ns", "b1.ns", "b3.ns"]
            .iter()
            .all(|port| scenario::port_up(lab, port))
    });
    assert!(up, "ports not up{}", logs());
    let (a1, a2, b1) = (pods[0].netns(), pods[1].netns(), pods[2].netns());
    let b3 = b3.netns();
    assert!(
        wait_until(Duration::from_secs(10), || pings(a1, A2)),
        "a1 (OpenFlow) → a2 (ovn-controller){}",
        logs()
    );
    for (from, to, what) in [
        (a2, A1, "a2 (ovn-controller) → a1 (OpenFlow)"),
        (a1, B3, "a1 (OpenFlow) → b3 (eBPF), routed on node1"),
        (b3, A1, "b3 (eBPF) → a1 (OpenFlow), routed on node3"),
        (a2, B3, "a2 (ovn-controller) → b3 (eBPF), routed on node2"),
        (b3, A2, "b3 (eBPF) → a2 (ovn-controller), routed on node3"),
        (
            b1,
            A2,
            "b1 (OpenFlow) → a2 (ovn-controller), routed on node1",
        ),
        (
            a2,
            B1,
            "a2 (ovn-controller) → b1 (OpenFlow), routed on node2",
        ),
    ] {
        assert!(
            wait_until(Duration::from_secs(5), || pings(from, to)),
            "{what}{}",
            logs()
        );
    }
    openflow.stop();
    ebpf.stop();
}

/// An OpenFlow node routes (issue 19's routers): vpc-a with subnets a (10.0.1.0/24) and b
/// (10.0.2.0/24), peered with vpc-c (10.1.1.0/24), as kube-ovn-controller builds them (router
/// options, the subnets' allow policies and source routes, static routes across the peering).
/// a1, b1 and c1 on node1 (the agent with `--dataplane openflow`), b2 on node2 (eBPF). On br-int:
/// the switch answers ARP for the gateway, the router its pings; a1 and b1 reach each other
/// through the router; a1 reaches b2 (routed on node1, tunnelled in subnet-b) and back (routed
/// by node2's eBPF); a1 reaches c1 through the peering (router to router). A user's ACL on
/// subnet-b, which the OpenFlow translation does not carry, fences the switch: b1 is no longer
/// reached (never forwarded past an ACL the datapath does not enforce), the metrics count the
/// fenced datapath; the ACL removed, b1 is reached again.
#[test]
fn an_openflow_node_routes_a_vpc_and_fences_a_switch_it_cannot_enforce() {
    use ovnbpf_tests::{
        kubeovn::Topology,
        scenario::{PodPlan, TwoNodes},
    };
    require_root();
    const B1: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
    const B2: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
    const C1: Ipv4Addr = Ipv4Addr::new(10, 1, 1, 2);
    const PLAN: [PodPlan; 4] = [
        ("a1", "subnet-a", 0, A1),
        ("b1", "subnet-b", 0, B1),
        ("c1", "subnet-c", 0, C1),
        ("b2", "subnet-b", 1, B2),
    ];
    let two = TwoNodes::start();
    let (lab, nodes) = (&two.lab, &two.nodes);
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .subnet("vpc-a", "subnet-b", "10.0.2.0/24")
        .unwrap()
        .vpc_with_subnet("vpc-c", "subnet-c", "10.1.1.0/24")
        .unwrap()
        .peering("vpc-a", "10.0.255.1/30", "vpc-c", "10.0.255.2/30")
        .static_route("vpc-a", "10.1.1.0/24", Ipv4Addr::new(10, 0, 255, 2))
        .static_route("vpc-c", "10.0.1.0/24", Ipv4Addr::new(10, 0, 255, 1));
    let pods = scenario::build_planned_pods(lab, nodes, topology, &PLAN, true, 1442);
    let switch = OvsSwitch::start(nodes[0].netns()).unwrap();
    switch.underlay(&nodes[0]).unwrap();
    switch.know_tunnel_peers(&[&nodes[1]]).unwrap();
    // Open vSwitch's userspace datapath reads frames whole: TX checksum offload off.
    for (index, (pod, _, node, _)) in PLAN.iter().enumerate() {
        if *node == 0 {
            let interface = format!("{pod}_h");
            full_checksums(nodes[0].netns(), &interface, pods[index].netns()).unwrap();
        }
    }
    let log_dir = tempfile::tempdir().unwrap();
    let mut spec = scenario::planned_agent(nodes, &PLAN, 0, None);
    spec.extra_args = switch.agent_args();
    spec.extra_args.extend([
        "--metrics-address".into(),
        METRICS.into(),
        "--control-socket".into(),
        log_dir.path().join("control.sock").display().to_string(),
    ]);
    // In a cell: the test restarts it while the logs closure reads it.
    let openflow = std::cell::RefCell::new(
        spec.spawn(
            lab,
            &workspace_binary("ovnbpf-agent"),
            log_dir.path().join("node1.log"),
        )
        .unwrap(),
    );
    let bpffs = ovnbpf_tests::bpffs::BpfMount::create().unwrap();
    let mut ebpf =
        scenario::start_planned_agent(lab, nodes, &PLAN, 1, Some(bpffs.path()), log_dir.path());
    let logs = || {
        format!(
            "{}{}{}",
            openflow.borrow().log_tail(),
            ebpf.log_tail(),
            switch.ofctl(&["dump-flows", "br-int"]).unwrap_or_default()
        )
    };
    assert!(
        scenario::planned_pods_up(lab, &PLAN),
        "not every pod came up{}",
        logs()
    );
    let pod = |name: &str| pods[PLAN.iter().position(|plan| plan.0 == name).unwrap()].netns();
    assert!(
        wait_until(Duration::from_secs(5), || pings(
            pod("a1"),
            Ipv4Addr::new(10, 0, 1, 1)
        )),
        "a1 → its gateway (the switch's ARP answer, the router's echo reply){}",
        logs()
    );
    assert!(
        wait_until(Duration::from_secs(5), || pings(pod("a1"), B1)),
        "a1 → b1 through vpc-a on br-int{}",
        logs()
    );
    assert!(pings(pod("b1"), A1), "b1 → a1{}", logs());
    assert!(
        wait_until(Duration::from_secs(5), || pings(pod("a1"), B2)),
        "a1 (OpenFlow) → b2 (eBPF), routed on node1{}",
        logs()
    );
    assert!(
        pings(pod("b2"), A1),
        "b2 (eBPF) → a1 (OpenFlow), routed on node2"
    );
    assert!(
        pings(pod("b2"), B1),
        "b2 → b1 in subnet-b, across the tunnel"
    );
    // The interface counters are br-int's port counts: what a1's host interface took in (a1's
    // echo requests) and delivered (the replies), and the tunnel's.
    let counter = |name: &str, interface: &str| {
        metrics(&nodes[0]).lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(r#"{interface=""#)?;
            let rest = rest.strip_prefix(interface)?;
            rest.rsplit_once(' ')?.1.parse::<u64>().ok()
        })
    };
    let received = || {
        counter(
            "ovnbpf_interface_received_packets_total",
            "a1_h\",port=\"a1.ns\"}",
        )
    };
    let delivered = || {
        counter(
            "ovnbpf_interface_delivered_packets_total",
            "a1_h\",port=\"a1.ns\"}",
        )
    };
    let tunnel_delivered = || counter("ovnbpf_interface_delivered_packets_total", "ovn-");
    let before = (received(), delivered(), tunnel_delivered());
    assert!(pings(pod("a1"), B2), "a1 → b2 again{}", logs());
    let grew = |before: Option<u64>, after: Option<u64>| {
        before.zip(after).is_some_and(|(b, a)| a >= b + 3)
    };
    // A tunnel's counts are Open vSwitch's own, which its revalidators add up from the
    // datapath's flows (about once a second); a veth's are the kernel's, at once.
    let mut after = before;
    let counted = wait_until(Duration::from_secs(5), || {
        after = (received(), delivered(), tunnel_delivered());
        grew(before.0, after.0) && grew(before.1, after.1) && grew(before.2, after.2)
    });
    assert!(
        counted,
        "a1_h's counts (received, delivered) and the tunnel's delivered, before and after 3 \
         echoes: {before:?} {after:?}\n{}",
        metrics(&nodes[0])
    );
    assert!(
        wait_until(Duration::from_secs(5), || pings(pod("a1"), C1)),
        "a1 → c1 through the peering, router to router{}",
        logs()
    );
    assert_eq!(untranslated(&nodes[0], "fenced"), Some(0));
    // ovnbpfctl says which datapath the agent runs, and what it does not translate whole, all
    // partial: the two routers (their own ARP replies) and the three switches (health-check
    // answers are not taken to the agent).
    let status = ovnbpf_tests::process::output(
        std::process::Command::new(workspace_binary("ovnbpfctl")).args([
            "status",
            "--json",
            "--socket",
            &log_dir.path().join("control.sock").display().to_string(),
        ]),
    )
    .unwrap();
    let status: serde_json::Value = serde_json::from_str(status.trim()).unwrap();
    assert_eq!(status["dataplane"], "openflow", "{status}");
    assert_eq!(status["ready"], true, "{status}");
    assert_eq!(status["untranslated_datapaths"]["fenced"], 0, "{status}");
    assert_eq!(status["untranslated_datapaths"]["partial"], 5, "{status}");

    // An address no destination route covers: a1's subnet's source route (Kube-OVN 1.15's
    // `policySrc`) sends it to a1's own gateway address, whose MAC the router asks ARP for (the
    // agent's request, which nobody answers): not forwarded, and never dropped as unrouted.
    let drops = |reason: &str| {
        let prefix = format!(r#"ovnbpf_datapath_drops_total{{reason="{reason}"}} "#);
        metrics(&nodes[0])
            .lines()
            .find_map(|line| line.strip_prefix(&prefix)?.trim().parse::<u64>().ok())
            .unwrap_or_default()
    };
    let arp_requests = || {
        let prefix = r#"ovnbpf_datapath_router_replies_total{kind="arp_request"} "#;
        metrics(&nodes[0])
            .lines()
            .find_map(|line| line.strip_prefix(prefix)?.trim().parse::<u64>().ok())
            .unwrap_or_default()
    };
    let before = arp_requests();
    assert!(
        !pings(pod("a1"), Ipv4Addr::new(192, 0, 2, 1)),
        "a1 → an unrouted address"
    );
    assert!(
        arp_requests() >= before + 3,
        "the unresolved next hop not asked for: {before}, then {}",
        arp_requests()
    );
    assert_eq!(
        drops("no_route"),
        0,
        "every packet of a1's has a (source) route"
    );

    // The agent restarted under traffic: the flows it left forward until the new one's view is
    // complete, which then replaces them in one bundle. Not a packet lost, locally routed or
    // tunnelled.
    let flows_before = our_flows(&switch);
    let restarted = std::thread::scope(|scope| {
        let streams = [B1, B2].map(|to| {
            scope.spawn(move || {
                pod("a1")
                    .exec(
                        "ping",
                        &["-q", "-c", "300", "-i", "0.02", "-W", "1", &to.to_string()],
                    )
                    .unwrap_or_else(|error| format!("{error:#}"))
            })
        });
        std::thread::sleep(Duration::from_millis(500));
        openflow.borrow_mut().stop();
        let restarted = spec
            .spawn(
                lab,
                &workspace_binary("ovnbpf-agent"),
                log_dir.path().join("node1-restarted.log"),
            )
            .unwrap();
        *openflow.borrow_mut() = restarted;
        streams.map(|stream| stream.join().unwrap())
    });
    for (text, to) in restarted.iter().zip(["b1", "b2"]) {
        assert!(
            text.contains("300 packets transmitted, 300 received"),
            "a1 → {to} lost packets across the agent's restart: {text}{}",
            logs()
        );
    }
    assert!(
        wait_until(Duration::from_secs(10), || our_flows(&switch)
            == flows_before),
        "the restarted agent's flows differ: {:#?} before, {:#?} now{}",
        flows_before,
        our_flows(&switch),
        logs()
    );

    // A user's ACL on subnet-b fences it on the OpenFlow node (what enters it dropped and
    // counted); gone, the switch is back.
    let untranslated_drops = || drops("openflow_untranslated");
    let mut acl = Topology::new();
    acl.acl(
        "subnet-b",
        "to-lport",
        1000,
        "ip4.src == 10.0.9.0/24",
        "drop",
    );
    acl.apply(lab).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || !pings(pod("a1"), B1)),
        "a1 still reaches b1 past an ACL the OpenFlow datapath does not enforce{}",
        logs()
    );
    let drops_before = untranslated_drops();
    assert!(
        !pings(pod("b2"), B1),
        "what the tunnel brings into the fenced subnet-b is still delivered{}",
        logs()
    );
    assert!(
        untranslated_drops() >= drops_before + 3,
        "the fenced switch's drops not counted: {drops_before}, then {}",
        untranslated_drops()
    );
    assert!(pings(pod("a1"), C1), "the rest of the VPC still routes");
    assert_eq!(untranslated(&nodes[0], "fenced"), Some(1));
    lab.nbctl(&["--wait=sb", "acl-del", "subnet-b"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || pings(pod("a1"), B1)),
        "b1 not reached again once the ACL is gone{}",
        logs()
    );
    assert_eq!(untranslated(&nodes[0], "fenced"), Some(0));
    openflow.borrow_mut().stop();
    ebpf.stop();
}

/// What OVN answers in ovn-controller's userspace, the OpenFlow node's agent answers as br-int's
/// controller (issue 19): vpc-a's subnets are dual-stack, their pods all on the OpenFlow
/// node.
/// - a1 and a2 reach each other over IPv6: their solicitations are answered by the switch's ND
///   responder (the agent's advertisements), not flooded; a1 reaches its IPv6 gateway (the
///   router's advertisement and echo reply) and b1 of subnet-b (routed, hop limit 63 back);
///   hop limit 1 gets ICMPv6 time exceeded, TCP to the gateway's IPv6 is refused; a router
///   solicitation gets subnet-a's advertisement;
/// - a1's packet with TTL 1 to subnet-b gets time exceeded from its gateway;
/// - TCP to the gateway is refused (the router's reset), UDP to it gets port unreachable;
/// - a route whose next hop has no known MAC (10.0.2.9, an address b1 holds besides its own):
///   the router asks ARP for it, learns b1's answer (MAC_Binding, written by the agent), and
///   then forwards a1's pings to b1 (which holds 192.0.2.1 too and answers);
/// - an ECMP route's members (two of b1's addresses) are chosen per flow and reached.
#[test]
fn an_openflow_node_answers_what_ovn_answers_in_userspace() {
    use ovnbpf_tests::{
        kubeovn::{Topology, mac_for},
        scenario::{PodPlan, TwoNodes},
    };
    require_root();
    const A2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);
    const B1: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
    const NEXT_HOP: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 9);
    const BEYOND: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const NEXT_HOP_2: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 10);
    const BEYOND_ECMP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    const PLAN: [PodPlan; 3] = [
        ("a1", "subnet-a", 0, A1),
        ("a2", "subnet-a", 0, A2),
        ("b1", "subnet-b", 0, B1),
    ];
    let a1_6: std::net::Ipv6Addr = "fd00:10:1::2".parse().unwrap();
    let a2_6: std::net::Ipv6Addr = "fd00:10:1::3".parse().unwrap();
    let b1_6: std::net::Ipv6Addr = "fd00:10:2::2".parse().unwrap();
    let two = TwoNodes::start();
    let (lab, nodes) = (&two.lab, &two.nodes);
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24,fd00:10:1::/64")
        .unwrap()
        .subnet("vpc-a", "subnet-b", "10.0.2.0/24,fd00:10:2::/64")
        .unwrap()
        .ipv6_router_advertisements(
            "vpc-a",
            "subnet-a",
            64,
            "address_mode=dhcpv6_stateful,send_periodic=false",
        )
        .static_route("vpc-a", "192.0.2.0/24", NEXT_HOP)
        .ecmp_route("vpc-a", "198.51.100.0/24", NEXT_HOP)
        .ecmp_route("vpc-a", "198.51.100.0/24", NEXT_HOP_2)
        .dual_stack_pod("subnet-a", "a1", "ns", &mac_for("a1"), (A1, a1_6))
        .dual_stack_pod("subnet-a", "a2", "ns", &mac_for("a2"), (A2, a2_6))
        .dual_stack_pod("subnet-b", "b1", "ns", &mac_for("b1"), (B1, b1_6));
    topology.apply(lab).unwrap();
    let pods = scenario::add_planned_pods(nodes, &PLAN, true, 1442);
    let pod = |name: &str| pods[PLAN.iter().position(|plan| plan.0 == name).unwrap()].netns();
    for (name, ip) in [("a1", a1_6), ("a2", a2_6), ("b1", b1_6)] {
        // The pods' stacks take no advertisement: subnet-a's (hop limit 255) would change the
        // hop limit of what they send, and the kernel's own solicitations at link-up are
        // answered or not depending on when the agent's flows come.
        pod(name)
            .exec("sysctl", &["-qw", "net.ipv6.conf.eth0.accept_ra=0"])
            .unwrap();
        pod(name)
            .ip(&[
                "-6",
                "addr",
                "add",
                &format!("{ip}/64"),
                "dev",
                "eth0",
                "nodad",
            ])
            .unwrap();
        let segments = ip.segments();
        let gateway = std::net::Ipv6Addr::new(segments[0], segments[1], segments[2], 0, 0, 0, 0, 1);
        pod(name)
            .ip(&["-6", "route", "add", "default", "via", &gateway.to_string()])
            .unwrap();
    }
    for address in [
        format!("{NEXT_HOP}/24"),
        format!("{NEXT_HOP_2}/24"),
        format!("{BEYOND}/32"),
        format!("{BEYOND_ECMP}/32"),
    ] {
        pod("b1")
            .ip(&["addr", "add", &address, "dev", "eth0"])
            .unwrap();
    }
    let switch = OvsSwitch::start(nodes[0].netns()).unwrap();
    switch.underlay(&nodes[0]).unwrap();
    switch.know_tunnel_peers(&[&nodes[1]]).unwrap();
    for (index, (name, ..)) in PLAN.iter().enumerate() {
        full_checksums(nodes[0].netns(), &format!("{name}_h"), pods[index].netns()).unwrap();
    }
    let log_dir = tempfile::tempdir().unwrap();
    let mut spec = scenario::planned_agent(nodes, &PLAN, 0, None);
    spec.extra_args = switch.agent_args();
    spec.extra_args
        .extend(["--metrics-address".into(), METRICS.into()]);
    let mut agent = spec
        .spawn(
            lab,
            &workspace_binary("ovnbpf-agent"),
            log_dir.path().join("node1.log"),
        )
        .unwrap();
    let logs = || {
        format!(
            "{}{}",
            agent.log_tail(),
            switch.ofctl(&["dump-flows", "br-int"]).unwrap_or_default()
        )
    };
    assert!(
        scenario::planned_pods_up(lab, &PLAN),
        "not every pod came up{}",
        logs()
    );
    let replies = |kind: &str| {
        let prefix = format!(r#"ovnbpf_datapath_router_replies_total{{kind="{kind}"}} "#);
        metrics(&nodes[0])
            .lines()
            .find_map(|line| line.strip_prefix(&prefix)?.trim().parse::<u64>().ok())
            .unwrap_or_default()
    };
    // The command's output, whatever its exit status.
    let said = |from: &str, command: &str| {
        pod(from)
            .exec("sh", &["-c", &format!("{command} 2>&1; true")])
            .unwrap()
    };

    // IPv6 on the switch: the solicitations answered by the agent.
    assert!(
        wait_until(Duration::from_secs(5), || said(
            "a1",
            &format!("ping -6 -c 2 -i 0.2 -W 1 {a2_6}")
        )
        .contains(" 2 received")),
        "a1 → a2 over IPv6{}",
        logs()
    );
    assert!(replies("nd_advertisement") >= 1, "{}", logs());
    let neighbour = pod("a1")
        .ip(&["-6", "neigh", "show", &a2_6.to_string()])
        .unwrap();
    assert!(
        neighbour.contains(&mac_for("a2")),
        "a1 learned a2's MAC from the advertisement: {neighbour}"
    );
    // IPv6 routed: the gateway answers solicitations (the agent's, with the router flag) and
    // pings; a1 and b1 reach each other across vpc-a.
    assert!(
        said("a1", "ping -6 -c 2 -i 0.2 -W 1 fd00:10:1::1").contains(" 2 received"),
        "a1 → its IPv6 gateway{}",
        logs()
    );
    let gateway = pod("a1")
        .ip(&["-6", "neigh", "show", "fd00:10:1::1"])
        .unwrap();
    assert!(
        gateway.contains("router"),
        "the gateway advertised itself a router: {gateway}"
    );
    assert!(
        said("a1", &format!("ping -6 -c 2 -i 0.2 -W 1 {b1_6}")).contains(" 2 received"),
        "a1 → b1 over IPv6, routed{}",
        logs()
    );
    let back = said("b1", &format!("ping -6 -c 1 -W 1 {a1_6}"));
    assert!(
        back.contains("ttl=63"),
        "one router on the way back: {back}"
    );
    let expired = said("a1", &format!("ping -6 -c 1 -t 1 -W 2 {b1_6}"));
    assert!(
        expired.contains("From fd00:10:1::1") && expired.contains("Time exceeded"),
        "{expired}{}",
        logs()
    );
    let refused = said("a1", "timeout 3 bash -c 'exec 3<>/dev/tcp/fd00:10:1::1/80'");
    assert!(refused.contains("refused"), "IPv6: {refused}{}", logs());
    // subnet-a advertises (`enableIPv6RA`): a1's router solicitation gets the router port's
    // advertisement, from its MAC and link-local address, M set.
    let router_mac = ovnbpf_agent::lflow::parse_mac(&mac_for("vpc-a-subnet-a")).unwrap();
    let advertisement = ovnbpf_tests::frames::solicit_router(
        pod("a1"),
        ovnbpf_agent::lflow::parse_mac(&mac_for("a1")).unwrap(),
    )
    .unwrap_or_else(|| panic!("no router advertisement{}", logs()));
    assert_eq!(&advertisement[6..12], &router_mac);
    assert_eq!(
        &advertisement[22..38],
        &ovnbpf_tests::frames::link_local(router_mac)
    );
    assert_eq!((advertisement[54], advertisement[59]), (134, 0x80));
    assert!(replies("router_advertisement") >= 1);

    // Time exceeded from the gateway, for a packet whose TTL runs out entering vpc-a.
    assert!(
        wait_until(Duration::from_secs(5), || pings(pod("a1"), B1)),
        "a1 → b1{}",
        logs()
    );
    let expired = said("a1", &format!("ping -c 1 -t 1 -W 2 {B1}"));
    assert!(
        expired.contains("From 10.0.1.1") && expired.contains("Time to live exceeded"),
        "{expired}{}",
        logs()
    );

    // The router's own address: TCP refused by its reset, UDP answered port unreachable.
    let refused = said("a1", "timeout 3 bash -c 'exec 3<>/dev/tcp/10.0.1.1/80'");
    assert!(refused.contains("refused"), "{refused}{}", logs());
    assert!(replies("tcp_reset") >= 1);
    let before = replies("port_unreachable");
    said("a1", "bash -c 'echo probe > /dev/udp/10.0.1.1/53'");
    assert!(
        wait_until(Duration::from_secs(3), || replies("port_unreachable")
            > before),
        "no port unreachable{}",
        logs()
    );

    // A next hop without a MAC: asked for, learned, then forwarded to.
    assert!(
        wait_until(Duration::from_secs(10), || pings(pod("a1"), BEYOND)),
        "a1 → 192.0.2.1 through the next hop the router had to learn{}",
        logs()
    );
    assert!(replies("arp_request") >= 1);
    assert!(replies("neighbour_reported") >= 1);
    let binding = lab
        .sbctl(&[
            "--bare",
            "--columns=mac",
            "find",
            "MAC_Binding",
            &format!("ip={NEXT_HOP}"),
        ])
        .unwrap();
    assert_eq!(binding.trim(), mac_for("b1"), "the learned MAC_Binding");

    // An ECMP route (two next hops, both b1's): each flow takes one member by its hash
    // (Open vSwitch's `multipath`), asked for and learned as above; several flows (ports) all
    // arrive.
    for port in 40000..40004 {
        assert!(
            wait_until(Duration::from_secs(10), || said(
                "a1",
                &format!("timeout 2 bash -c 'exec 3<>/dev/tcp/{BEYOND_ECMP}/{port}'")
            )
            .contains("refused")),
            "a1 → {BEYOND_ECMP}:{port} through the ECMP route (b1 refuses the port){}",
            logs()
        );
    }
    agent.stop();
}

/// The flows only one of `before` and `after` holds (what a change removed or added).
fn changed_flows<'a>(before: &'a [String], after: &'a [String]) -> Vec<&'a String> {
    let removed = before.iter().filter(|flow| !after.contains(flow));
    let added = after.iter().filter(|flow| !before.contains(flow));
    removed.chain(added).collect()
}

/// br-int's flows of the agent (their cookie's low 32 bits), as text without their counters,
/// sorted.
fn our_flows(switch: &OvsSwitch) -> Vec<String> {
    let text = switch
        .ofctl(&[
            "--no-stats",
            "dump-flows",
            "br-int",
            "cookie=0xb0f0001/0xffffffff",
        ])
        .unwrap_or_default();
    let mut flows: Vec<String> = text
        .lines()
        .filter(|line| line.contains("cookie="))
        .map(str::to_string)
        .collect();
    flows.sort();
    flows
}

/// Node `node`'s agent's metrics (served at [`METRICS`] in the node's namespace).
fn metrics(node: &ovnbpf_tests::network::Node) -> String {
    ovnbpf_tests::netns::run_in_path(&node.netns().path(), || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(METRICS)?;
        write!(stream, "GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    })
    .unwrap()
}

/// The agent's count of datapaths with `effect` (`partial`, `fenced`) it does not translate.
fn untranslated(node: &ovnbpf_tests::network::Node, effect: &str) -> Option<u64> {
    let prefix = format!(r#"ovnbpf_dataplane_untranslated_datapaths{{effect="{effect}"}} "#);
    metrics(node)
        .lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}
