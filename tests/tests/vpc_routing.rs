//! L3 through the agents' eBPF datapath, routed on the sending node as OVN does: vpc-a has two
//! subnets (pods on the same node and across nodes), is peered with vpc-b (static routes both
//! ways), and routes 192.168.50.0/24 via a pod acting as a router; vpc-c, unpeered, reuses
//! vpc-a's second subnet. Routed pings and TCP work both ways with the TTL decremented per
//! router; the gateway answers pings, refuses TCP (reset) and UDP (ICMP port unreachable) on
//! its addresses; vpc-c reaches nothing of vpc-a. The routers carry Kube-OVN's options (learning
//! from ARP requests on the peered vpc-a/vpc-b, off on vpc-c), and a second test routes a custom
//! VPC as kube-ovn-controller builds one without peering (`always_learn_from_arp_request=false`):
//! across subnets and nodes and via a pod, through eBPF and, the same routing, through Open
//! vSwitch's br-int programmed with `--dataplane openflow` (what the OpenFlow translation does
//! not do yet, the router's ARP requests for unresolved next hops and its resets, and the eBPF
//! counters, are checked on eBPF only).

use ovnbpf_tests::scenario;
use std::{net::Ipv4Addr, time::Duration};

use ovnbpf_tests::scenario::{Dataplane, PlannedAgents, PodPlan, TwoNodes};
use ovnbpf_tests::{
    frames::FrameSocket,
    kubeovn::{self, Topology, mac_for},
    netns::Netns,
    network::{Node, Pod},
    process::wait_until,
};

/// Every pod's gateway is its subnet's first address.
const PODS: [PodPlan; 6] = [
    ("a1", "subnet-a", 0, Ipv4Addr::new(10, 0, 1, 2)),
    ("a2", "subnet-a2", 0, Ipv4Addr::new(10, 0, 2, 2)),
    ("a3", "subnet-a2", 1, Ipv4Addr::new(10, 0, 2, 3)),
    ("b1", "subnet-b", 1, Ipv4Addr::new(10, 1, 1, 2)),
    ("c1", "subnet-c", 0, Ipv4Addr::new(10, 0, 2, 4)),
    ("r1", "subnet-a", 1, Ipv4Addr::new(10, 0, 1, 10)),
];

/// The TTL of the replies of a 3-echo ping, if all came back.
fn ping_ttl(from: &Pod, to: Ipv4Addr) -> Option<u8> {
    let text = from
        .netns()
        .exec(
            "ping",
            &["-n", "-c", "3", "-i", "0.1", "-W", "1", &to.to_string()],
        )
        .ok()?;
    if !text.contains(" 3 received") {
        return None;
    }
    text.split("ttl=")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[test]
fn pods_are_routed_across_subnets_peerings_and_a_pod_router() {
    let TwoNodes {
        lab, nodes, prefix, ..
    } = &TwoNodes::start();
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .subnet("vpc-a", "subnet-a2", "10.0.2.0/24")
        .unwrap()
        .vpc_with_subnet("vpc-b", "subnet-b", "10.1.1.0/24")
        .unwrap()
        .vpc_with_subnet("vpc-c", "subnet-c", "10.0.2.0/24")
        .unwrap()
        .peering("vpc-a", "10.0.255.1/30", "vpc-b", "10.0.255.2/30")
        .static_route("vpc-a", "10.1.1.0/24", Ipv4Addr::new(10, 0, 255, 2))
        // Back to both of vpc-a's subnets: one /16 would lose to the source route Kube-OVN gives
        // subnet-b (10.1.1.0/24 via its gateway, priority 72 over the /16's 49), as on real OVN.
        .static_route("vpc-b", "10.0.1.0/24", Ipv4Addr::new(10, 0, 255, 1))
        .static_route("vpc-b", "10.0.2.0/24", Ipv4Addr::new(10, 0, 255, 1))
        .static_route("vpc-a", "192.168.50.0/24", PODS[5].3);
    let pods = scenario::build_planned_pods(lab, nodes, topology, &PODS, true, 1400);
    let pod = |name: &str| &pods[PODS.iter().position(|p| p.0 == name).unwrap()];
    let address = |name: &str| PODS.iter().find(|p| p.0 == name).unwrap().3;

    // r1 routes for 192.168.50.0/24: a namespace behind it holds 192.168.50.2.
    let _behind = network_behind(pod("r1").netns(), prefix, "192.168.50");

    let log_dir = tempfile::tempdir().unwrap();
    let bpffs = ovnbpf_tests::bpffs::BpfMount::create().unwrap();
    let agents =
        scenario::start_planned_agents(lab, nodes, &PODS, Some(bpffs.path()), log_dir.path());
    let logs = || scenario::log_tails(&agents);
    assert!(
        scenario::planned_pods_up(lab, &PODS),
        "not every pod came up{}",
        logs()
    );

    let a1 = pod("a1");
    assert!(
        wait_until(Duration::from_secs(5), || ping_ttl(
            a1,
            Ipv4Addr::new(10, 0, 1, 1)
        )
        .is_some()),
        "a1 → its gateway{}",
        logs()
    );
    // The router answers on all its addresses, not only the one on the pod's switch.
    assert_eq!(
        ping_ttl(a1, Ipv4Addr::new(10, 0, 2, 1)),
        Some(254),
        "a1 → vpc-a's address on subnet-a2{}",
        logs()
    );

    router_refuses_tcp_and_udp(
        (a1, &nodes[0], &bpffs.path().join("node1")),
        &[Ipv4Addr::new(10, 0, 1, 1), Ipv4Addr::new(10, 0, 2, 1)],
        &logs,
    );
    // The unreachable quotes the datagram as sent on the wire, its UDP checksum complete (as
    // OVN's kernel datapath completes a checksum the pod's stack left to offload).
    let frame =
        scenario::unreachable_for_socket_datagram(a1, address("a1"), Ipv4Addr::new(10, 0, 1, 1));
    let quoted_udp = &frame[42 + 20..];
    assert_eq!(
        ovnbpf_tests::frames::transport_checksum(
            (address("a1"), Ipv4Addr::new(10, 0, 1, 1)),
            17,
            quoted_udp
        ),
        0,
        "quoted UDP checksum of {frame:02x?}"
    );
    assert_eq!(
        ovnbpf_tests::icmp::checksum(&frame[34..]),
        0,
        "ICMP checksum of {frame:02x?}"
    );

    // A packet whose TTL runs out comes back as ICMP time exceeded from the router where it
    // does: the gateway for TTL 1, vpc-b's peering port for TTL 2 over the peering.
    for (to, ttl, router) in [("a3", "1", "10.0.1.1"), ("b1", "2", "10.0.255.2")] {
        let expired = a1
            .netns()
            .command("ping")
            .args([
                "-n",
                "-c",
                "1",
                "-t",
                ttl,
                "-W",
                "1",
                &address(to).to_string(),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&expired.stdout);
        assert!(
            text.contains(&format!("From {router}")) && text.contains("Time to live exceeded"),
            "TTL {ttl} to {to}: {text}{}",
            logs()
        );
    }

    // On the wire, a routed packet carries the destination switch's VNI, the switch's router
    // port as ingress and the destination pod as egress (the sending node ran the router).
    let key = |table: &str, column: &str, name: &str| -> u32 {
        lab.sbctl(&[
            "--bare",
            "--columns=tunnel_key",
            "find",
            table,
            &format!("{column}={name}"),
        ])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
    };
    let vni = key("Datapath_Binding", "external_ids:name", "subnet-a2");
    let option = format!(
        "data {:04x}{:04x}",
        key("Port_Binding", "logical_port", "subnet-a2-vpc-a"),
        key("Port_Binding", "logical_port", "a3.ns")
    );
    let capture_log = log_dir.path().join("capture.txt");
    let mut capture = nodes[1]
        .netns()
        .spawn(
            "tcpdump",
            "tcpdump",
            &[
                "-i",
                "eth0",
                "-nn",
                "-vv",
                "-l",
                "udp",
                "port",
                "6081",
                "and",
                "src",
                "host",
                &nodes[0].ip().to_string(),
            ],
            Some(capture_log.clone()),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // Other frames (IPv6 chatter of other switches) may cross too: look for ours, pinging until
    // the capture has one (it may start late).
    let ours = |text: &str| {
        text.contains(&format!("vni {vni:#x}"))
            && text.contains(&option)
            && text.contains(&format!("{} > {}", address("a1"), address("a3")))
    };
    let captured = wait_until(Duration::from_secs(10), || {
        ping_ttl(a1, address("a3")).is_some()
            && std::fs::read_to_string(&capture_log).is_ok_and(|t| ours(&t))
    });
    capture.stop();
    let text = std::fs::read_to_string(&capture_log).unwrap_or_default();
    assert!(
        captured,
        "no routed Geneve frame with VNI {vni} and {option}: {text}"
    );

    // One router between the subnets: replies arrive with TTL 63, on the same node and across.
    for (from, to) in [("a1", "a2"), ("a2", "a1"), ("a1", "a3"), ("a3", "a1")] {
        let ttl = ping_ttl(pod(from), address(to));
        assert_eq!(ttl, Some(63), "{from} → {to}{}", logs());
    }
    for (from, to) in [("a1", "a2"), ("a3", "a1")] {
        let report = pod(from).tcp_stream_to(pod(to), address(to));
        assert!(report.is_ok(), "TCP {from} → {to}: {report:?}{}", logs());
    }
    // Over the peering: two routers.
    assert_eq!(ping_ttl(a1, address("b1")), Some(62), "a1 → b1{}", logs());
    assert_eq!(ping_ttl(pod("b1"), address("a1")), Some(62), "b1 → a1");
    // Through the pod router r1: out via vpc-a's static route and r1's kernel; replies come
    // back from r1 to a1 on their shared subnet, so only r1 decrements their TTL.
    let behind_ip = Ipv4Addr::new(192, 168, 50, 2);
    assert_eq!(
        ping_ttl(a1, behind_ip),
        Some(63),
        "a1 → behind r1{}",
        logs()
    );
    // vpc-c shares 10.0.2.0/24 with vpc-a but is not peered: nothing of vpc-a is reachable
    // from it, and vpc-a's 10.0.2.4 is not c1.
    assert_eq!(ping_ttl(pod("c1"), address("a1")), None, "c1 reached a1");
    assert_eq!(ping_ttl(a1, address("c1")), None, "a1 reached c1 in vpc-c");
    assert!(
        ping_ttl(pod("c1"), Ipv4Addr::new(10, 0, 2, 1)).is_some(),
        "c1 → its own gateway"
    );
    drop(agents);
}

/// Pods of the custom VPC built as kube-ovn-controller builds one without peering, external
/// access or U2O: Kube-OVN's router options, `always_learn_from_arp_request=false` among them.
/// k4's routed traffic goes through kr by a source route.
const KUBE_OVN_VPC_PODS: [PodPlan; 5] = [
    ("k1", "subnet-k1", 0, Ipv4Addr::new(10, 3, 1, 2)),
    ("k2", "subnet-k2", 1, Ipv4Addr::new(10, 3, 2, 2)),
    ("k3", "subnet-k2", 0, Ipv4Addr::new(10, 3, 2, 3)),
    ("kr", "subnet-k1", 1, Ipv4Addr::new(10, 3, 1, 10)),
    ("k4", "subnet-k2", 0, Ipv4Addr::new(10, 3, 2, 4)),
];

/// Such a VPC routes: pod → pod across subnets on one node and across two, TCP too, through a
/// static route whose next hop is a pod, and by source (the per-subnet routes Kube-OVN writes,
/// and a VPC `policySrc` route via a pod), and by its policy routes (drop, reroute via a pod);
/// the router refuses TCP and UDP to its addresses as
/// OVN does; it is forwarded (nothing counted as `router_unsupported`), its MAC learning from
/// ND reported as a side duty (from ARP it is done), not as unsupported.
#[test]
fn a_custom_vpc_built_as_kube_ovn_builds_it_routes() {
    kube_ovn_vpc_routes(Dataplane::Ebpf);
}

/// The same VPC routed by OpenFlow nodes (issue 19's L3).
#[test]
fn openflow_nodes_route_a_custom_vpc_built_as_kube_ovn_builds_it() {
    kube_ovn_vpc_routes(Dataplane::OpenFlow);
}

fn kube_ovn_vpc_routes(dataplane: Dataplane) {
    let ebpf = dataplane == Dataplane::Ebpf;
    let TwoNodes {
        lab, nodes, prefix, ..
    } = &TwoNodes::start();
    let plans = &KUBE_OVN_VPC_PODS;
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-k", "subnet-k1", "10.3.1.0/24")
        .unwrap()
        .subnet("vpc-k", "subnet-k2", "10.3.2.0/24")
        .unwrap()
        .static_route("vpc-k", "192.168.60.0/24", plans[3].3)
        // A VPC `policySrc` route: all of k4's routed traffic goes through kr (/32: priority
        // 96, above every destination route).
        .source_route("vpc-k", "10.3.2.4/32", plans[3].3);
    for (name, subnet, _, ip) in plans {
        topology.pod(subnet, name, "ns", &mac_for(name), *ip);
    }
    topology.apply(lab).unwrap();
    assert_eq!(
        kubeovn::router_option(lab, "vpc-k", "always_learn_from_arp_request")
            .unwrap()
            .as_deref(),
        Some("false")
    );
    let pods = scenario::add_planned_pods(nodes, plans, true, 1400);
    let pod = |name: &str| &pods[plans.iter().position(|p| p.0 == name).unwrap()];
    let address = |name: &str| plans.iter().find(|p| p.0 == name).unwrap().3;

    // kr routes for 192.168.60.0/24: a namespace behind it holds 192.168.60.2. It also holds
    // 192.168.61.1 itself, which only the source route leads to.
    let behind = network_behind(pod("kr").netns(), prefix, "192.168.60");
    if !ebpf {
        // Open vSwitch's userspace datapath reads what kr forwards whole.
        behind
            .exec("ethtool", &["-K", "eth0", "tx", "off"])
            .unwrap();
    }
    let kr_netns = pod("kr").netns();
    kr_netns.ip(&["link", "set", "lo", "up"]).unwrap();
    kr_netns
        .ip(&["addr", "add", "192.168.61.1/32", "dev", "lo"])
        .unwrap();

    let agents = PlannedAgents::start_on(lab, nodes, plans, &pods, (dataplane, &[]));
    let bpffs = &agents.bpffs;
    let logs = || agents.logs();

    let k1 = pod("k1");
    assert!(
        wait_until(Duration::from_secs(5), || ping_ttl(k1, address("k2"))
            .is_some()),
        "k1 → k2 across subnets and nodes{}",
        logs()
    );
    for (from, to) in [
        ("k1", "k2"),
        ("k2", "k1"),
        ("k1", "k3"),
        ("k3", "k1"),
        ("k2", "kr"),
    ] {
        assert_eq!(
            ping_ttl(pod(from), address(to)),
            Some(63),
            "{from} → {to}{}",
            logs()
        );
    }
    for (from, to) in [("k1", "k2"), ("k2", "k1")] {
        let report = pod(from).tcp_stream_to(pod(to), address(to));
        assert!(report.is_ok(), "TCP {from} → {to}: {report:?}{}", logs());
    }
    // Through the pod router kr (on the other node): out via the static route and kr's kernel;
    // replies come back from kr to k1 on their shared subnet, so only kr decrements their TTL.
    assert_eq!(
        ping_ttl(k1, Ipv4Addr::new(192, 168, 60, 2)),
        Some(63),
        "k1 → behind kr{}",
        logs()
    );
    // Source routes: k4's traffic to a destination no destination route covers reaches kr
    // (one router hop each way); k1's goes where its subnet's source route sends it, to its own
    // gateway, whose address no one resolves: the router broadcasts an ARP request for it on
    // subnet-k1 from its port there, as OVN does (`lr_in_arp_request`), which reaches kr on the
    // other node; nothing else arrives.
    let k4_to_kr_address = ping_ttl(pod("k4"), Ipv4Addr::new(192, 168, 61, 1));
    assert_eq!(k4_to_kr_address, Some(63), "k4 → 192.168.61.1{}", logs());
    let k1_node_pins = bpffs.path().join(scenario::NODES[0]);
    if ebpf {
        router_asks_for_unresolved_next_hops_and_refuses(
            (lab, nodes, &pods, plans),
            bpffs.path(),
            &logs,
        );
    } else {
        assert_eq!(
            ping_ttl(k1, Ipv4Addr::new(192, 168, 61, 1)),
            None,
            "k1 → 192.168.61.1{}",
            logs()
        );
    }

    // `Vpc.spec.policyRoutes`, in the kernel: a drop above Kube-OVN's per-subnet allow (31000)
    // for k2, and a reroute of k3's traffic via kr. k3 → 192.168.61.1 (kr's own address, which
    // only k4's source route reached) now arrives; the reply comes back through the router.
    let mut policies = Topology::new();
    policies
        .policy("vpc-k", 31500, "ip4.dst == 10.3.2.2", "drop", None)
        .policy(
            "vpc-k",
            31400,
            "ip4.src == 10.3.2.3",
            "reroute",
            Some(address("kr")),
        );
    policies.apply(lab).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || ping_ttl(
            pod("k3"),
            Ipv4Addr::new(192, 168, 61, 1)
        )
        .is_some()),
        "k3 → 192.168.61.1 rerouted via kr{}",
        logs()
    );
    let policy_drops = || {
        scenario::datapath_counters(&nodes[0], &k1_node_pins)["drops"]["policy_drop"]
            .as_u64()
            .unwrap_or_default()
    };
    let drops_before = if ebpf { policy_drops() } else { 0 };
    assert_eq!(
        ping_ttl(k1, address("k2")),
        None,
        "k1 → k2 dropped by policy{}",
        logs()
    );
    if ebpf {
        assert!(policy_drops() > drops_before, "{}", logs());
    }
    // k2's own subnet is not routed: the policy leaves k3 → k2 alone.
    assert!(ping_ttl(pod("k3"), address("k2")).is_some(), "{}", logs());
    drop(agents);
}

/// The eBPF datapath's part of [`kube_ovn_vpc_routes`]: k1's traffic to kr's own address goes
/// where its subnet's source route sends it, to its own gateway, whose address no one resolves:
/// the router broadcasts an ARP request for it on subnet-k1 from its port there, as OVN does
/// (`lr_in_arp_request`), which reaches kr on the other node; nothing else arrives. The router
/// refuses TCP and UDP to its addresses; nothing is counted `router_unsupported`; the compiler
/// reports ND learning as a side duty, nothing as unsupported.
fn router_asks_for_unresolved_next_hops_and_refuses(
    (lab, nodes, pods, plans): (&ovnbpf_tests::ovn::OvnLab, &[Node], &[Pod], &[PodPlan]),
    pins: &std::path::Path,
    logs: &dyn Fn() -> String,
) {
    let pod = |name: &str| &pods[plans.iter().position(|p| p.0 == name).unwrap()];
    let (k1, kr_netns) = (pod("k1"), pod("kr").netns());
    let k1_node_pins = pins.join(scenario::NODES[0]);
    let kr_capture = FrameSocket::open_in(kr_netns, "eth0").unwrap();
    let arp_requests = || {
        scenario::datapath_counters(&nodes[0], &k1_node_pins)["router_replies"]["arp_request"]
            .as_u64()
            .unwrap_or_default()
    };
    let requests_before = arp_requests();
    let k1_to_kr_address = ping_ttl(k1, Ipv4Addr::new(192, 168, 61, 1));
    assert_eq!(k1_to_kr_address, None, "k1 → 192.168.61.1{}", logs());
    let gateway = Ipv4Addr::new(10, 3, 1, 1);
    let request = kr_capture
        .receive(Duration::from_secs(2), |frame| {
            frame.len() >= 42
                && frame[..6] == [0xff; 6]
                && frame[12..14] == [0x08, 0x06]
                && frame[20..22] == [0, 1]
                && frame[28..32] == gateway.octets()
                && frame[38..42] == gateway.octets()
        })
        .unwrap();
    let request = request.unwrap_or_else(|| {
        panic!(
            "kr saw no ARP request for {gateway} from the router{}",
            logs()
        )
    });
    assert_eq!(request[6..12], request[22..28], "sender MAC is eth.src");
    assert!(arp_requests() > requests_before, "{}", logs());
    router_refuses_tcp_and_udp(
        (k1, &nodes[0], &k1_node_pins),
        &[Ipv4Addr::new(10, 3, 1, 1), Ipv4Addr::new(10, 3, 2, 1)],
        &logs,
    );
    for (node, chassis) in nodes.iter().zip(scenario::NODES) {
        let counters = scenario::datapath_counters(node, &pins.join(chassis));
        assert_eq!(
            counters["drops"]["router_unsupported"]
                .as_u64()
                .unwrap_or_default(),
            0,
            "{chassis}: {counters}"
        );
    }
    // The compiler's verdict on the router: ND learning is a side duty, nothing is unsupported.
    let coverage = ovnbpf_tests::process::output(
        std::process::Command::new(ovnbpf_tests::workspace_binary("ovnbpfctl")).args([
            "lflow",
            "coverage",
            "--json",
            "--remote",
            &lab.unix_remote(ovnbpf_tests::ovn::Db::Southbound),
        ]),
    )
    .unwrap();
    let coverage: serde_json::Value = serde_json::from_str(coverage.trim()).unwrap();
    for stage in ["lr_in_lookup_neighbor", "lr_in_learn_neighbor"] {
        assert_eq!(
            coverage[stage]["unsupported"], 0,
            "{stage}: {}",
            coverage[stage]
        );
        assert!(
            coverage[stage]["side_duty"].as_u64() > Some(0),
            "{stage}: {}",
            coverage[stage]
        );
    }
}

/// TCP and UDP from `pod` (on `node`, whose agent pins under `pins`) to the router addresses
/// `gateways` are refused as OVN refuses them: a reset, and ICMP port unreachable (the connected
/// UDP socket's receive fails with ECONNREFUSED), each answer counted on the pod's node.
fn router_refuses_tcp_and_udp(
    (pod, node, pins): (&Pod, &Node, &std::path::Path),
    gateways: &[Ipv4Addr],
    logs: &dyn Fn() -> String,
) {
    let replies = |kind: &str| {
        let counters = scenario::datapath_counters(node, pins);
        counters["router_replies"][kind]
            .as_u64()
            .unwrap_or_else(|| panic!("no {kind} in {counters}"))
    };
    let (resets, unreachables) = (replies("tcp_reset"), replies("port_unreachable"));
    for gateway in gateways {
        let (tcp, udp) = scenario::socket_outcomes(pod, *gateway, 80);
        for (what, outcome) in [("TCP", tcp), ("UDP", udp)] {
            assert_eq!(
                outcome.as_ref().map_err(std::io::Error::kind).err(),
                Some(std::io::ErrorKind::ConnectionRefused),
                "{what} to {gateway}: {outcome:?}{}",
                logs()
            );
        }
    }
    // One answer per connect and per datagram.
    let sent = u64::try_from(gateways.len()).unwrap();
    assert_eq!(replies("tcp_reset"), resets + sent, "{}", logs());
    assert_eq!(
        replies("port_unreachable"),
        unreachables + sent,
        "{}",
        logs()
    );
}

/// A namespace behind pod `router`, reached through a veth: `<net>.1/24` on the pod's side (IPv4
/// forwarding on), `<net>.2/24` with a default route back through it on the other.
fn network_behind(router: &Netns, prefix: &str, net: &str) -> Netns {
    let behind = Netns::create(&format!("{prefix}-behind")).unwrap();
    router.veth_to("back", "eth0", &behind).unwrap();
    router
        .ip(&["addr", "add", &format!("{net}.1/24"), "dev", "back"])
        .unwrap();
    router.ip(&["link", "set", "back", "up"]).unwrap();
    router
        .exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])
        .unwrap();
    behind
        .ip(&["addr", "add", &format!("{net}.2/24"), "dev", "eth0"])
        .unwrap();
    behind.ip(&["link", "set", "eth0", "up"]).unwrap();
    behind
        .ip(&["route", "add", "default", "via", &format!("{net}.1")])
        .unwrap();
    behind
}
