//! Geneve on the wire between two ovnbpf nodes, judged on captures of node1's frames on node2's
//! underlay link: 16 UDP flows, pings, broadcasts (flood copies) and a TCP stream (GSO
//! super-packets in the pod) from a1 on node1 to a2 on node2.
//! - Each flow leaves with one outer UDP source port, and the flows spread over at least 12
//!   (RFC 8926 §3.3: ECMP and the receiver's RSS hash on it), over IPv4 and over IPv6 (16 more
//!   flows to a2's link-local address).
//! - node2's agent runs with `--encap-csum=true` (ovn-controller's default), so its Encap asks
//!   for outer checksums: every frame carries a valid one, every TCP segment too, each at most
//!   one MTU (GSO super-packets were segmented before they left, through node1's segmenter,
//!   whose counters show it).
//! - node2's agent restarted with the agent's default (`--encap-csum=false`): its Encap says
//!   `csum=false`, and node1's frames leave with checksum 0, while traffic still flows.
//!
//! node1's uplink has TX checksum offload off, so the kernel completes the pods' partial inner
//! checksums before the frame leaves, as a NIC would on the wire; a capture then sees the bytes
//! a peer receives (on a veth with offload on, the inner checksum would still be pending).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
    path::Path,
    time::Duration,
};

use ovnbpf_tests::{
    bpffs::BpfMount,
    geneve_capture::{self, Captured},
    network::{Node, Pod},
    process::{Child, wait_until},
    scenario::{self, PodPlan, TwoNodes},
};

const A1: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
const A2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);
const PODS: [PodPlan; 2] = [("a1", "subnet-a", 0, A1), ("a2", "subnet-a", 1, A2)];
const FLOWS: u16 = 16;
/// The underlay's MTU (the pods' is 58 less).
const UNDERLAY_MTU: usize = 1500;

/// Runs `traffic` while capturing node1's Geneve frames on node2's uplink; the frames.
fn capture(nodes: &[Node; 2], prefix: &str, traffic: impl FnOnce()) -> Vec<Captured> {
    geneve_capture::capture(
        nodes[1].netns(),
        "eth0",
        nodes[0].encap_ip(),
        prefix,
        traffic,
    )
}

/// The link-local address of `pod`'s eth0.
fn link_local(pod: &Pod) -> std::net::Ipv6Addr {
    let text = pod
        .netns()
        .ip(&["-6", "-o", "addr", "show", "dev", "eth0", "scope", "link"])
        .unwrap();
    text.split_whitespace()
        .skip_while(|word| *word != "inet6")
        .nth(1)
        .and_then(|address| address.split('/').next())
        .and_then(|address| address.parse().ok())
        .unwrap_or_else(|| panic!("no link-local address: {text}"))
}

/// 16 UDP flows over IPv4 and 16 over IPv6 (three datagrams each), five pings, three broadcast
/// pings and a TCP stream, from a1 to a2.
fn traffic(a1: &Pod, a2: &Pod) {
    let a2_link_local = link_local(a2);
    a1.netns()
        .ip(&[
            "-6",
            "neigh",
            "replace",
            &a2_link_local.to_string(),
            "lladdr",
            &ovnbpf_tests::kubeovn::mac_for("a2"),
            "dev",
            "eth0",
        ])
        .unwrap();
    let eth0 = a1.netns().ifindex("eth0").unwrap();
    // a1 sends from its own link-local address: once duplicate address detection is over
    // (a tentative one cannot be a source: EADDRNOTAVAIL).
    let usable = wait_until(Duration::from_secs(5), || {
        a1.netns()
            .ip(&["-6", "addr", "show", "dev", "eth0", "tentative"])
            .is_ok_and(|text| !text.contains("inet6"))
    });
    assert!(usable, "a1's link-local address stayed tentative");
    a1.netns()
        .run_in(|| {
            for flow in 0..FLOWS {
                let socket = std::net::UdpSocket::bind((A1, 40_000 + flow))?;
                let socket6 = std::net::UdpSocket::bind(std::net::SocketAddrV6::new(
                    std::net::Ipv6Addr::UNSPECIFIED,
                    41_000 + flow,
                    0,
                    eth0,
                ))?;
                for _ in 0..3 {
                    socket.send_to(b"flow", (A2, 9999))?;
                    socket6.send_to(
                        b"flow",
                        std::net::SocketAddrV6::new(a2_link_local, 9999, 0, eth0),
                    )?;
                }
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(a1.ping(A2, 5).unwrap(), 5, "a1 → a2");
    let broadcast = a1.ping_broadcast(Ipv4Addr::new(10, 0, 1, 255)).unwrap();
    assert!(
        broadcast.status.success() || !broadcast.stdout.is_empty(),
        "{broadcast:?}"
    );
    let report = a1.tcp_stream_to(a2, A2);
    assert!(report.is_ok(), "{report:?}");
    println!("{}", report.as_deref().unwrap_or_default());
}

/// Inner UDP source port → outer source ports, for the 16 flows from `first_port` of the
/// family `inner` reads.
fn udp_flows(
    frames: &[Captured],
    first_port: u16,
    inner: impl Fn(&Captured) -> Option<(u8, u16)>,
) -> BTreeMap<u16, BTreeSet<u16>> {
    geneve_capture::udp_flows(frames, inner)
        .into_iter()
        .filter(|(port, _)| (first_port..first_port + FLOWS).contains(port))
        .collect()
}

/// Packets node1's `from_segmenter` has seen.
fn segmented(node: &Node, pin_root: &Path) -> u64 {
    let counters = scenario::datapath_counters(node, pin_root);
    counters["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|interface| interface["name"] == "ovnbpf-segout")
        .and_then(|interface| interface["packets"].as_u64())
        .unwrap_or(0)
}

fn start_agent(
    lab: &ovnbpf_tests::ovn::OvnLab,
    nodes: &[Node; 2],
    index: usize,
    pins: &Path,
    logs: &Path,
    extra: &[&str],
) -> Child {
    let mut spec = scenario::planned_agent(nodes, &PODS, index, Some(pins));
    spec.extra_args = extra.iter().map(|arg| (*arg).to_string()).collect();
    spec.spawn(
        lab,
        &ovnbpf_tests::workspace_binary("ovnbpf-agent"),
        logs.join(format!("{}.log", scenario::NODES[index])),
    )
    .unwrap()
}

#[test]
fn flows_spread_over_source_ports_and_carry_the_checksums_the_receiver_asks_for() {
    let TwoNodes {
        lab, nodes, prefix, ..
    } = &TwoNodes::start();
    let pods = scenario::overlapping_vpcs_with(lab, nodes, &PODS);
    let (a1, a2) = (&pods[0], &pods[1]);
    nodes[0]
        .netns()
        .exec("ethtool", &["-K", "eth0", "tx", "off"])
        .unwrap();
    let log_dir = tempfile::tempdir().unwrap();
    let bpffs = BpfMount::create().unwrap();
    let node1 = start_agent(lab, nodes, 0, bpffs.path(), log_dir.path(), &[]);
    let mut node2 = start_agent(
        lab,
        nodes,
        1,
        bpffs.path(),
        log_dir.path(),
        &["--encap-csum=true"],
    );
    let logs = |agents: &[&Child]| {
        agents
            .iter()
            .map(|agent| agent.log_tail())
            .collect::<String>()
    };
    assert!(
        scenario::planned_pods_up(lab, &PODS),
        "pods not up{}",
        logs(&[&node1, &node2])
    );
    assert!(
        wait_until(Duration::from_secs(10), || a1
            .ping(A2, 1)
            .is_ok_and(|n| n == 1)),
        "a1 → a2{}",
        logs(&[&node1, &node2])
    );

    let segmented_before = segmented(&nodes[0], &bpffs.path().join("node1"));
    let frames = capture(nodes, prefix, || traffic(a1, a2));
    let segmented_after = segmented(&nodes[0], &bpffs.path().join("node1"));

    // One port per flow, spread over at least 12, over either family.
    for (family, flows) in [
        ("IPv4", udp_flows(&frames, 40_000, |frame| frame.inner)),
        ("IPv6", udp_flows(&frames, 41_000, |frame| frame.inner6)),
    ] {
        assert_eq!(flows.len(), usize::from(FLOWS), "{family} flows: {flows:?}");
        for (port, outer) in &flows {
            assert_eq!(
                outer.len(),
                1,
                "{family} flow from {port} used ports {outer:?}"
            );
            assert!(outer.iter().all(|p| *p >= 32768), "{flows:?}");
        }
        let distinct: BTreeSet<u16> = flows.values().flatten().copied().collect();
        println!(
            "{FLOWS} {family} UDP flows, {} distinct outer source ports",
            distinct.len()
        );
        assert!(
            distinct.len() >= 12,
            "{family}: only {} ports: {flows:?}",
            distinct.len()
        );
    }

    // Valid checksums on everything, TCP segments included, each within one MTU.
    let tcp: Vec<&Captured> = frames
        .iter()
        .filter(|frame| frame.inner.is_some_and(|(protocol, _)| protocol == 6))
        .collect();
    let kinds = [
        (
            "UDP",
            frames
                .iter()
                .filter(|f| f.inner.is_some_and(|(p, _)| p == 17))
                .count(),
        ),
        (
            "IPv6 UDP",
            frames
                .iter()
                .filter(|f| f.inner6.is_some_and(|(p, _)| p == 17))
                .count(),
        ),
        (
            "ICMP",
            frames
                .iter()
                .filter(|f| f.inner.is_some_and(|(p, _)| p == 1) && !f.broadcast)
                .count(),
        ),
        ("broadcast", frames.iter().filter(|f| f.broadcast).count()),
        ("TCP", tcp.len()),
    ];
    println!("captured {} frames: {kinds:?}", frames.len());
    for (kind, count) in kinds {
        assert!(count > 0, "no {kind} frame captured: {kinds:?}");
    }
    let invalid: Vec<&Captured> = frames
        .iter()
        .filter(|frame| frame.checksum == 0 || !frame.checksum_valid)
        .collect();
    assert!(
        invalid.is_empty(),
        "{} of {} frames without a valid outer checksum, e.g. {:?}",
        invalid.len(),
        frames.len(),
        invalid.first()
    );
    let longest = tcp.iter().map(|frame| frame.len).max().unwrap_or(0);
    assert!(
        longest <= UNDERLAY_MTU + 14,
        "a TCP frame of {longest} bytes crossed the underlay unsegmented"
    );
    // A TCP connection is a flow too: its segments, cut by the segmenter, keep its one port.
    let mut connections = BTreeMap::<u16, BTreeSet<u16>>::new();
    for frame in &tcp {
        if let Some((_, port)) = frame.inner {
            connections
                .entry(port)
                .or_default()
                .insert(frame.source_port);
        }
    }
    for (port, outer) in &connections {
        assert_eq!(
            outer.len(),
            1,
            "TCP from port {port} used outer ports {outer:?}"
        );
    }
    println!(
        "{} TCP frames, longest {longest} bytes; segmenter saw {} packets",
        tcp.len(),
        segmented_after - segmented_before
    );
    assert!(
        segmented_after > segmented_before,
        "no GSO frame went through node1's segmenter"
    );

    // node2 no longer asks: node1's frames leave without checksums, and still arrive.
    node2.stop();
    node2 = start_agent(lab, nodes, 1, bpffs.path(), log_dir.path(), &[]);
    let csum_off = geneve_capture::wait_for_encap_csum(lab, "node2", false);
    assert!(
        csum_off,
        "node2's Encap still asks for checksums{}",
        logs(&[&node2])
    );
    assert!(
        wait_until(Duration::from_secs(10), || a1
            .ping(A2, 1)
            .is_ok_and(|n| n == 1)),
        "a1 → a2 after node2's restart{}",
        logs(&[&node1, &node2])
    );
    let frames = capture(nodes, prefix, || traffic(a1, a2));
    assert!(!frames.is_empty());
    let checksummed = frames.iter().filter(|frame| frame.checksum != 0).count();
    assert_eq!(
        checksummed,
        0,
        "{checksummed} of {} frames carry a checksum node2 did not ask for",
        frames.len()
    );
    drop(node1);
}
