//! The eBPF L2 datapath on real packets: two nodes on an underlay, one program set per node (as
//! one agent per node would load), pods of two VPCs whose subnets overlap (10.0.1.0/24). Maps are
//! filled here the way the agent will fill them from the Southbound DB. Same-VPC pods reach each
//! other across nodes through Geneve (ping and TCP), a capture on the underlay shows OVN's
//! layout with the datapath key and port keys, and nothing crosses between the VPCs. Pods learn
//! their peers' MACs from the kernel ARP responder.

mod common;

use ovnbpf_agent::dataplane::ebpf::Maps;
use ovnbpf_common::maps::{ArpResponder, L2Fib, TunnelPorts};
use std::{net::Ipv4Addr, time::Duration};

use ovnbpf_agent::dataplane::ebpf::{Hook, KernelPrograms};
use ovnbpf_common::{
    ArpAnswer, ArpKey, FIB_REMOTE, FibEntry, FibKey, LOCAL_PORT_VETH_PEER, LocalPort, PodPort,
    TunnelPortKey,
};
use ovnbpf_tests::{
    geneve_capture,
    names::unique_prefix,
    network::{Node, Pod, PodSpec, Underlay},
    process::wait_until,
    require_root,
};

/// Underlay MTU 1500 minus OVN's 58 bytes of encapsulation.
const POD_MTU: u32 = 1442;

struct PodPlan {
    name: &'static str,
    node: usize,
    datapath: u32,
    port: u32,
    mac: &'static str,
    ip: Ipv4Addr,
}

/// vpc-a (datapath 5): a1 on node1, a2 on node2. vpc-b (datapath 6) reuses the addresses the
/// other way round: b1 (10.0.1.3, like a2) on node1, b2 (10.0.1.2, like a1) on node2.
const PODS: [PodPlan; 4] = [
    PodPlan {
        name: "a1",
        node: 0,
        datapath: 5,
        port: 1,
        mac: "0a:58:0a:00:01:02",
        ip: Ipv4Addr::new(10, 0, 1, 2),
    },
    PodPlan {
        name: "a2",
        node: 1,
        datapath: 5,
        port: 2,
        mac: "0a:58:0a:00:01:03",
        ip: Ipv4Addr::new(10, 0, 1, 3),
    },
    PodPlan {
        name: "b1",
        node: 0,
        datapath: 6,
        port: 1,
        mac: "0a:58:0b:00:01:03",
        ip: Ipv4Addr::new(10, 0, 1, 3),
    },
    PodPlan {
        name: "b2",
        node: 1,
        datapath: 6,
        port: 2,
        mac: "0a:58:0b:00:01:02",
        ip: Ipv4Addr::new(10, 0, 1, 2),
    },
];

fn mac_bytes(text: &str) -> [u8; 6] {
    ovnbpf_agent::lflow::parse_mac(text).unwrap()
}

/// Attaches and fills one node's programs: its pods, the tunnel endpoint, and for every pod of
/// the same VPC on the other node a remote FIB entry.
fn program_node(programs: &mut KernelPrograms, nodes: &[Node], index: usize, pods: &[Pod]) {
    let node = &nodes[index];
    let netns = node.netns();
    let uplink = netns.ifindex("eth0").unwrap();
    programs
        .set_tunnel_endpoint(node.ip().into(), uplink)
        .unwrap();
    programs
        .attach_in_netns(&netns.path(), Hook::Uplink, "eth0")
        .unwrap();
    for (plan, pod) in PODS.iter().zip(pods) {
        programs
            .set::<ArpResponder>(
                ArpKey {
                    datapath: plan.datapath,
                    ip: u32::from_ne_bytes(plan.ip.octets()),
                },
                ArpAnswer {
                    mac: mac_bytes(plan.mac),
                    owner_port: plan.port,
                    ..ArpAnswer::default()
                },
            )
            .unwrap();
        if plan.node == index {
            let ifindex = netns.ifindex(pod.host_interface()).unwrap();
            programs
                .set_pod_port(
                    ifindex,
                    PodPort {
                        datapath: plan.datapath,
                        port: plan.port,
                    },
                )
                .unwrap();
            programs
                .set::<TunnelPorts>(
                    TunnelPortKey {
                        datapath: plan.datapath,
                        port: plan.port,
                    },
                    LocalPort {
                        ifindex,
                        flags: LOCAL_PORT_VETH_PEER,
                    },
                )
                .unwrap();
            programs
                .attach_in_netns(&netns.path(), Hook::Pod, pod.host_interface())
                .unwrap();
        } else {
            programs
                .set::<L2Fib>(
                    FibKey {
                        datapath: plan.datapath,
                        mac: mac_bytes(plan.mac),
                        padding: [0; 2],
                    },
                    FibEntry {
                        kind: FIB_REMOTE,
                        remote_ip: u32::from_ne_bytes(nodes[plan.node].ip().octets()),
                        port: plan.port,
                        ..FibEntry::default()
                    },
                )
                .unwrap();
        }
    }
}

#[test]
fn pods_of_one_vpc_talk_across_nodes_and_vpcs_stay_apart() {
    require_root();
    let prefix = unique_prefix();
    let mut underlay = Underlay::create(&prefix).unwrap();
    let nodes = vec![
        underlay.add_node("node1").unwrap(),
        underlay.add_node("node2").unwrap(),
    ];
    let pods: Vec<Pod> = PODS
        .iter()
        .map(|plan| {
            let address = format!("{}/24", plan.ip);
            let host = format!("{}_h", plan.name);
            nodes[plan.node]
                .add_pod(&PodSpec {
                    name: plan.name,
                    host_interface: &host,
                    mac: Some(plan.mac),
                    address: Some(&address),
                    gateway: None,
                    mtu: Some(POD_MTU),
                })
                .unwrap()
        })
        .collect();
    let mut node_programs = [common::load_programs(), common::load_programs()];
    for (index, programs) in node_programs.iter_mut().enumerate() {
        program_node(programs, &nodes, index, &pods);
    }

    // A capture on node2's uplink sees one encapsulated echo request from a1 to a2.
    let capture_log = std::env::temp_dir().join(format!("{prefix}-capture.txt"));
    let mut capture = nodes[1]
        .netns()
        .spawn(
            "tcpdump",
            "tcpdump",
            &[
                "-i", "eth0", "-nn", "-vv", "-l", "-c", "1", "udp", "port", "6081",
            ],
            Some(capture_log.clone()),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));

    let (a1, a2, b1, b2) = (&pods[0], &pods[1], &pods[2], &pods[3]);
    assert_eq!(a1.ping(PODS[1].ip, 5).unwrap(), 5, "a1 → a2 across nodes");
    let learned = a1.netns().ip(&["neigh", "show", "10.0.1.3"]).unwrap();
    assert!(
        learned.contains(PODS[1].mac),
        "a1 resolved a2 by ARP: {learned}"
    );
    assert_eq!(b2.ping(PODS[2].ip, 5).unwrap(), 5, "b2 → b1 across nodes");

    let captured = wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(&capture_log).is_ok_and(|t| t.contains("Geneve"))
    });
    let text = std::fs::read_to_string(&capture_log).unwrap_or_default();
    capture.stop();
    let _ = std::fs::remove_file(&capture_log);
    assert!(captured, "no Geneve frame captured: {text}");
    assert!(text.contains("vni 0x5"), "{text}");
    assert!(
        text.contains("(0x102) type 0x80(C) len 8 data 00010002"),
        "ingress key 1, egress key 2: {text}"
    );
    assert!(
        text.contains(&format!("{} > {}", PODS[0].ip, PODS[1].ip)),
        "{text}"
    );

    // TCP across nodes, through the tunnel (GSO super-packets included).
    let report = a1.tcp_stream_to(a2, PODS[1].ip).unwrap();
    println!("{report}");

    outer_source_ports_follow_the_inner_flow(&prefix, &nodes, a1);

    // a1 trying b1's MAC (vpc-b) at a2's address: vpc-a's FIB has no such MAC, so the frame
    // never reaches vpc-b. And b1 → a-side: nothing answers.
    a1.netns()
        .ip(&[
            "neigh",
            "replace",
            "10.0.1.3",
            "lladdr",
            PODS[2].mac,
            "dev",
            "eth0",
        ])
        .unwrap();
    assert_eq!(a1.ping(PODS[1].ip, 3).unwrap(), 0, "a1 reached into vpc-b");
    b1.netns()
        .ip(&[
            "neigh",
            "replace",
            "10.0.1.2",
            "lladdr",
            PODS[0].mac,
            "dev",
            "eth0",
        ])
        .unwrap();
    assert_eq!(b1.ping(PODS[0].ip, 3).unwrap(), 0, "b1 reached into vpc-a");
    // …while the right MAC still works: the failures above were the isolation, not a breakage.
    a1.netns()
        .ip(&[
            "neigh",
            "replace",
            "10.0.1.3",
            "lladdr",
            PODS[1].mac,
            "dev",
            "eth0",
        ])
        .unwrap();
    assert_eq!(a1.ping(PODS[1].ip, 3).unwrap(), 3);
}

/// 16 UDP flows from a1 to a2 (source ports 40000..40015, three datagrams each), captured on
/// node2's uplink: each flow leaves with one outer UDP source port, and the flows spread over
/// at least 12 ports (RFC 8926 §3.3: underlay ECMP and the receiver's RSS hash on that port).
fn outer_source_ports_follow_the_inner_flow(prefix: &str, nodes: &[Node], a1: &Pod) {
    const FLOWS: u16 = 16;
    let pcap = std::env::temp_dir().join(format!("{prefix}-flows.pcap"));
    let pcap_text = pcap.to_string_lossy().into_owned();
    let from_node1 = format!("udp dst port 6081 and src host {}", nodes[0].ip());
    let mut capture = nodes[1]
        .netns()
        .spawn(
            "tcpdump",
            "tcpdump",
            &["-i", "eth0", "-nn", "-U", "-w", &pcap_text, &from_node1],
            None,
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    a1.netns()
        .run_in(|| {
            for flow in 0..FLOWS {
                let socket = std::net::UdpSocket::bind((PODS[0].ip, 40_000 + flow))?;
                for _ in 0..3 {
                    socket.send_to(b"flow", (PODS[1].ip, 9999))?;
                }
            }
            Ok(())
        })
        .unwrap();
    let complete = wait_until(Duration::from_secs(5), || {
        std::fs::read(&pcap).is_ok_and(|bytes| inner_udp_flows(&bytes).len() == FLOWS as usize)
    });
    capture.stop();
    let bytes = std::fs::read(&pcap).unwrap_or_default();
    let _ = std::fs::remove_file(&pcap);
    let flows = inner_udp_flows(&bytes);
    assert!(complete, "captured flows: {flows:?}");
    for (inner_port, outer_ports) in &flows {
        assert_eq!(
            outer_ports.len(),
            1,
            "flow from port {inner_port} left with several outer source ports: {outer_ports:?}"
        );
        assert!(outer_ports.iter().all(|port| *port >= 32768), "{flows:?}");
    }
    let distinct: std::collections::BTreeSet<u16> = flows
        .values()
        .flat_map(|ports| ports.iter().copied())
        .collect();
    println!(
        "{FLOWS} UDP flows left with {} distinct outer source ports",
        distinct.len()
    );
    assert!(
        distinct.len() >= 12,
        "{FLOWS} flows left with only {} distinct outer source ports: {flows:?}",
        distinct.len()
    );
}

/// Inner UDP source port → the outer UDP source ports it left with, from a pcap of Geneve
/// frames in OVN's layout.
fn inner_udp_flows(
    pcap: &[u8],
) -> std::collections::BTreeMap<u16, std::collections::BTreeSet<u16>> {
    geneve_capture::udp_flows(&geneve_capture::read(pcap), |frame| frame.inner)
}
