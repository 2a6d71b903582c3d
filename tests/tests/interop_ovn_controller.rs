//! Wire compatibility with real OVN: node1 forwards with ovnbpf (agent + eBPF), node2 is a real
//! ovn-controller chassis on the OVS userspace datapath, both bound in the same Southbound.
//! Pods on the two nodes reach each other with ping and TCP in both directions, and broadcasts
//! cross in both directions (ovnbpf's copy for `_MC_flood` is delivered by OVS, OVS's by ovnbpf).
//! Routed traffic between two subnets crosses both ways too: each sender runs the router and
//! tunnels with the destination switch's VNI, which the other side takes.
//! The router's answers for its own address (ping, TCP reset, ICMP port and protocol
//! unreachable) are the same bytes from ovnbpf as from ovn-controller: the same hand-built
//! probes from a pod on each side, replies compared in every byte but the pod's own MAC and
//! address and the checksums these change (those are checked valid on both sides). So are the
//! answers to what a subnet's `reject` ACLs refuse (TCP reset, ICMP port and host unreachable),
//! from the switch's ingress (for its own pod) and from its egress (for the other side's pod,
//! through the tunnel). Outer UDP checksums follow what the real node's Encap asks for: valid
//! on every frame ovnbpf sends it (TCP segments included) while it says `csum=true`, none once
//! it says `csum=false`; OVS takes both. Over an IPv6 underlay the two tunnel to each other in
//! IPv6, with the outer headers OVS writes, the checksums following the Encap as over IPv4.
//! Each is the other's gateway chassis: what one routes out of a VPC's gateway port is
//! tunnelled to the other, which SNATs it onto the provider network; in one HA group, the two
//! elect by BFD sessions between ovnbpf and Open vSwitch.

use ovnbpf_tests::scenario;
use std::{net::Ipv4Addr, path::PathBuf, time::Duration};

use ovnbpf_tests::scenario::{PodPlan, TwoNodes};
use ovnbpf_tests::{
    agent::AgentSpec,
    frames::{FrameSocket, ipv4_frame, tcp_syn, transport_checksum, udp},
    geneve_capture::{self, capture},
    icmp::checksum,
    kubeovn::{SubnetAcl, Topology, mac_for},
    network::Pod,
    ovs_chassis::OvsChassis,
    process::{Child, wait_until},
    workspace_binary,
};

const A1: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
const A2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);
/// A pod of vpc-a's second subnet, on the real OVN node.
const A3: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
/// vpc-a's address on subnet-a.
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);
/// An address of subnet-a nobody has, which a `reject` ACL covers.
const REJECTED: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 200);
/// a1 on the ovnbpf node; a2 and a3 on the real OVN node.
const PODS: [PodPlan; 3] = [
    ("a1", "subnet-a", 0, A1),
    ("a2", "subnet-a", 1, A2),
    ("a3", "subnet-a2", 1, A3),
];

/// ovnbpf's frames to the real OVN node carry the outer checksums that node's Encap asks for,
/// and get through both ways: pings and a TCP stream from a1, captured on node2's uplink, first
/// with ovn-controller's default `csum=true`, then with `ovn-encap-csum=false`.
fn checksums_as_the_peer_asks(
    lab: &ovnbpf_tests::ovn::OvnLab,
    nodes: &[ovnbpf_tests::network::Node; 2],
    peer: &OvsChassis,
    a1: &Pod,
    a2: &Pod,
    logs: &dyn Fn() -> String,
) {
    let traffic = || {
        assert_eq!(a1.ping(A2, 3).unwrap(), 3, "a1 → a2{}", logs());
        let report = a1.tcp_stream_to(a2, A2);
        assert!(report.is_ok(), "{report:?}{}", logs());
    };
    let prefix = ovnbpf_tests::names::unique_prefix();
    let frames = capture(
        nodes[1].netns(),
        "eth0",
        nodes[0].encap_ip(),
        &prefix,
        traffic,
    );
    let tcp = frames
        .iter()
        .filter(|frame| frame.inner.is_some_and(|(protocol, _)| protocol == 6))
        .count();
    let invalid = frames
        .iter()
        .filter(|frame| frame.checksum == 0 || !frame.checksum_valid)
        .count();
    assert!(tcp > 100, "{tcp} TCP frames captured of {}", frames.len());
    assert_eq!(
        invalid,
        0,
        "{invalid} of {} frames without a valid checksum",
        frames.len()
    );
    let longest = frames.iter().map(|frame| frame.len).max().unwrap_or(0);
    assert!(
        longest <= 1514,
        "a {longest}-byte frame crossed unsegmented"
    );

    peer.vsctl(&["set", "open", ".", "external_ids:ovn-encap-csum=false"])
        .unwrap();
    let asked_off = geneve_capture::wait_for_encap_csum(lab, "node2", false);
    assert!(
        asked_off,
        "node2's Encap still asks for checksums{}",
        logs()
    );
    // The agent follows the Encap row; the first frames after it may still carry one.
    std::thread::sleep(Duration::from_secs(1));
    let frames = capture(
        nodes[1].netns(),
        "eth0",
        nodes[0].encap_ip(),
        &prefix,
        traffic,
    );
    let checksummed = frames.iter().filter(|frame| frame.checksum != 0).count();
    assert!(frames.len() > 100, "{} frames captured", frames.len());
    assert_eq!(
        checksummed,
        0,
        "{checksummed} of {} frames carry a checksum node2 no longer asks for",
        frames.len()
    );
}

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
    let ping = from.ping_broadcast(Ipv4Addr::new(10, 0, 1, 255)).unwrap();
    assert!(
        String::from_utf8_lossy(&ping.stdout).contains("3 packets transmitted"),
        "{ping:?}"
    );
}

fn mac(name: &str) -> [u8; 6] {
    let text = mac_for(name);
    let mut mac = [0_u8; 6];
    for (byte, part) in mac.iter_mut().zip(text.split(':')) {
        *byte = u8::from_str_radix(part, 16).unwrap();
    }
    mac
}

/// A probe to the gateway: what it is, its IPv4 TOS, the IP protocol and payload, and how to
/// recognise the answer's L4 part (IPv4 protocol, and a test on the bytes after the IPv4 header).
type Probe = (&'static str, u8, u8, Vec<u8>, u8, fn(&[u8]) -> bool);

fn probes(pod_ip: Ipv4Addr) -> Vec<Probe> {
    let addresses = (pod_ip, GATEWAY);
    let long: Vec<u8> = (0..1000_u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut ping = vec![8, 0, 0, 0, 0x42, 0x42, 0, 1];
    ping.extend_from_slice(b"ovnbpf-router-probe");
    let sum = checksum(&ping);
    ping[2..4].copy_from_slice(&sum.to_be_bytes());
    // An ICMP error quoting a datagram from `port`.
    fn quoting(l4: &[u8], port: u16) -> bool {
        l4[0] == 3 && l4.get(28..30) == Some(&port.to_be_bytes()[..])
    }
    vec![
        ("ping", 0, 1, ping, 1, |l4| {
            l4[0] == 0 && l4[4..6] == [0x42, 0x42]
        }),
        (
            "TCP SYN",
            0,
            6,
            tcp_syn(addresses, 40000, 22, 0x1122_3344),
            6,
            |l4| l4[2..4] == 40000_u16.to_be_bytes(),
        ),
        (
            "UDP",
            0,
            17,
            udp(addresses, 40001, 161, b"ovnbpf-udp-probe"),
            1,
            |l4| quoting(l4, 40001),
        ),
        (
            "DSCP-marked UDP",
            0x28,
            17,
            udp(addresses, 40003, 161, b"ovnbpf-udp-probe"),
            1,
            |l4| quoting(l4, 40003),
        ),
        (
            "UDP longer than the quote",
            0,
            17,
            udp(addresses, 40002, 161, &long),
            1,
            |l4| quoting(l4, 40002),
        ),
        ("GRE", 0, 47, vec![0, 0, 0x08, 0, 1, 2, 3, 4], 1, |l4| {
            l4[0] == 3 && l4[1] == 2
        }),
    ]
}

/// Probes to `to` that a `reject` ACL answers (its port 23 for TCP and UDP), and how to
/// recognise each answer: a reset, ICMP port unreachable for UDP, host unreachable otherwise.
fn reject_probes(pod_ip: Ipv4Addr, to: Ipv4Addr) -> Vec<Probe> {
    let addresses = (pod_ip, to);
    let long: Vec<u8> = (0..1000_u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut ping = vec![8, 0, 0, 0, 0x42, 0x43, 0, 1];
    ping.extend_from_slice(b"ovnbpf-reject-probe");
    let sum = checksum(&ping);
    ping[2..4].copy_from_slice(&sum.to_be_bytes());
    // An ICMP error with `code` quoting a datagram from `port`.
    fn quoting(l4: &[u8], code: u8, port: u16) -> bool {
        l4[0] == 3 && l4[1] == code && l4.get(28..30) == Some(&port.to_be_bytes()[..])
    }
    vec![
        // The quoted echo request's identifier is 4 bytes into its ICMP header.
        ("ping", 0, 1, ping, 1, |l4| {
            l4[0] == 3 && l4[1] == 1 && l4.get(32..34) == Some(&[0x42, 0x43][..])
        }),
        (
            "TCP SYN",
            0,
            6,
            tcp_syn(addresses, 40010, 23, 0x5566_7788),
            6,
            |l4| l4[2..4] == 40010_u16.to_be_bytes(),
        ),
        (
            "UDP",
            0,
            17,
            udp(addresses, 40011, 23, b"ovnbpf-udp-probe"),
            1,
            |l4| quoting(l4, 3, 40011),
        ),
        (
            "DSCP-marked UDP",
            0x28,
            17,
            udp(addresses, 40012, 23, b"ovnbpf-udp-probe"),
            1,
            |l4| quoting(l4, 3, 40012),
        ),
        (
            "UDP longer than the quote",
            0,
            17,
            udp(addresses, 40013, 23, &long),
            1,
            |l4| quoting(l4, 3, 40013),
        ),
        ("GRE", 0, 47, vec![0, 0, 0x08, 0, 1, 2, 3, 4], 1, |l4| {
            l4[0] == 3 && l4[1] == 1
        }),
    ]
}

/// Sends each probe from `pod` (MAC `pod_mac`, address `pod_ip`) to the gateway's MAC and
/// address, and returns each answer with the pod's MAC and address and the checksums zeroed
/// (after checking them) and an ICMP error's quote replaced by its length (after checking it
/// quotes the probe as sent, up to a 576-byte frame).
fn router_answers(pod: &Pod, pod_mac: [u8; 6], pod_ip: Ipv4Addr) -> Vec<(&'static str, Vec<u8>)> {
    let router_mac = mac("vpc-a-subnet-a");
    answers(
        pod,
        (pod_mac, pod_ip),
        (router_mac, GATEWAY),
        probes(pod_ip),
        false,
    )
}

/// [`router_answers`] for `probes` to `to` (a MAC and an address); `any_peer`: the answers' source
/// MAC and address are zeroed too (the answers of one side are then comparable with the other's,
/// where each answers for the other's pod).
fn answers(
    pod: &Pod,
    (pod_mac, pod_ip): ([u8; 6], Ipv4Addr),
    (to_mac, to_ip): ([u8; 6], Ipv4Addr),
    probes: Vec<Probe>,
    any_peer: bool,
) -> Vec<(&'static str, Vec<u8>)> {
    let socket = FrameSocket::open_in(pod.netns(), "eth0").unwrap();
    probes
        .into_iter()
        .map(|(what, tos, protocol, payload, answer_protocol, matches)| {
            let mut probe = ipv4_frame(to_mac, pod_mac, (pod_ip, to_ip), protocol, &payload);
            probe[15] = tos;
            probe[24..26].fill(0);
            let sum = checksum(&probe[14..34]);
            probe[24..26].copy_from_slice(&sum.to_be_bytes());
            let accept = |frame: &[u8]| {
                frame.len() > 42
                    && frame[12..14] == [0x08, 0x00]
                    && frame[23] == answer_protocol
                    && frame[26..30] == to_ip.octets()
                    && frame[30..34] == pod_ip.octets()
                    && matches(&frame[34..])
            };
            let mut answer = None;
            for _ in 0..3 {
                socket.send(&probe).unwrap();
                answer = socket.receive(Duration::from_secs(1), accept).unwrap();
                if answer.is_some() {
                    break;
                }
            }
            let mut answer =
                answer.unwrap_or_else(|| panic!("{}: no answer to {what}", pod.name()));
            assert_eq!(answer[..6], pod_mac, "{what}");
            assert_eq!(checksum(&answer[14..34]), 0, "{what}: IPv4 checksum");
            answer[..6].fill(0);
            answer[30..34].fill(0);
            answer[24..26].fill(0);
            if any_peer {
                answer[6..12].fill(0);
                answer[26..30].fill(0);
            }
            if answer_protocol == 6 {
                let segment = &answer[34..];
                assert_eq!(transport_checksum((to_ip, pod_ip), 6, segment), 0, "{what}");
                answer[34 + 16..34 + 18].fill(0);
            } else {
                assert_eq!(checksum(&answer[34..]), 0, "{what}: ICMP checksum");
                answer[36..38].fill(0);
                if answer[34] == 3 {
                    let quoted = answer.split_off(42);
                    let sent = &probe[14..];
                    assert_eq!(quoted, sent[..sent.len().min(534)], "{what}: quote");
                    answer.extend_from_slice(&(quoted.len() as u16).to_be_bytes());
                } else {
                    // The echo reply carries the request's data, which holds no address.
                    assert_eq!(answer[42..], probe[42..], "{what}: echo data");
                }
            }
            (what, answer)
        })
        .collect()
}

fn echo_requests(log: &PathBuf) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches("ICMP echo request")
        .count()
}

/// The two nodes, node1 forwarding with ovnbpf (a1), node2 a real OVN chassis (a2, a3), vpc-a's
/// subnet-a and subnet-a2 as Kube-OVN builds them, every port up. Dropped agent first, then
/// the chassis, then the pods and nodes.
struct Interop {
    agent: Child,
    peer: OvsChassis,
    pods: Vec<Pod>,
    log_dir: tempfile::TempDir,
    two: TwoNodes,
}

impl Interop {
    /// The nodes tunnelling over IPv6 when `ipv6_underlay`.
    fn start(ipv6_underlay: bool) -> Self {
        let two = TwoNodes::start_on(ipv6_underlay);
        let (lab, nodes) = (&two.lab, &two.nodes);
        let mut topology = Topology::new();
        topology
            .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
            .unwrap()
            .subnet("vpc-a", "subnet-a2", "10.0.2.0/24")
            .unwrap();
        // Room for the outer headers within the nodes' 1500: 58 bytes, 78 over IPv6.
        let mtu = if ipv6_underlay { 1400 } else { 1442 };
        let pods = scenario::build_planned_pods(lab, nodes, topology, &PODS, true, mtu);
        let peer = OvsChassis::start(lab, &nodes[1], "node2").unwrap();
        peer.plug("a2_h", pods[1].netns(), "a2.ns").unwrap();
        peer.plug("a3_h", pods[2].netns(), "a3.ns").unwrap();
        // OVS's userspace datapath reads frames whole: what leaves node1 must carry no partial
        // inner checksum (a kernel OVS peer would take it). node1's uplink completes them, as a
        // NIC does on the wire (TX checksum offload off on the veth: the kernel fills them in
        // before the frame leaves). a1 itself sends GSO super-packets with partial checksums,
        // as pods do.
        nodes[0]
            .netns()
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
        let this = Self {
            agent,
            peer,
            pods,
            log_dir,
            two,
        };
        let up = wait_until(Duration::from_secs(30), || {
            ["a1.ns", "a2.ns", "a3.ns"]
                .iter()
                .all(|port| scenario::port_up(&this.two.lab, port))
        });
        assert!(up, "ports not up{}", this.logs());
        this
    }

    /// Both sides' log tails, for assertion messages.
    fn logs(&self) -> String {
        format!("{}{}", self.agent.log_tail(), self.peer.log_tails())
    }
}

/// Broadcasts both ways: each side's flood copy is delivered by the other.
fn broadcasts_cross(a1: &Pod, a2: &Pod, log_dir: &std::path::Path, logs: &dyn Fn() -> String) {
    for (sender, receiver, name) in [(a1, a2, "a2"), (a2, a1, "a1")] {
        let log = log_dir.join(format!("{name}-capture.txt"));
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
}

#[test]
fn ovnbpf_and_a_real_ovn_controller_forward_for_each_other() {
    let interop = Interop::start(false);
    let (lab, nodes, peer) = (&interop.two.lab, &interop.two.nodes, &interop.peer);
    let (a1, a2, a3) = (&interop.pods[0], &interop.pods[1], &interop.pods[2]);
    let log_dir = &interop.log_dir;
    let logs = || interop.logs();

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

    // Outer checksums as the receiver's Encap asks: ovn-controller's default (`csum=true`)
    // gets a valid one on every frame (OVS checks them: a wrong one is dropped), GSO segments
    // included; with `ovn-encap-csum=false`, none, and OVS takes those too.
    checksums_as_the_peer_asks(lab, nodes, peer, a1, a2, &logs);

    // The router's answers for its own address: the same from ovnbpf (a1) as from real OVN (a2).
    let ovn = router_answers(a2, mac("a2"), A2);
    let ours = router_answers(a1, mac("a1"), A1);
    for ((what, real), (_, answer)) in ovn.iter().zip(&ours) {
        assert_eq!(
            answer,
            real,
            "{what}: ovnbpf's answer (left) differs from OVN's{}",
            logs()
        );
    }
    // And what the pods' sockets make of them: TCP refused, UDP ECONNREFUSED, on both sides.
    for pod in [a1, a2] {
        let (tcp, udp) = scenario::socket_outcomes(pod, GATEWAY, 22);
        for (what, outcome) in [("TCP", tcp), ("UDP", udp)] {
            assert_eq!(
                outcome.as_ref().map_err(std::io::Error::kind).err(),
                Some(std::io::ErrorKind::ConnectionRefused),
                "{} {what} to the gateway: {outcome:?}",
                pod.name()
            );
        }
    }

    // Broadcasts both ways: each side's flood copy is delivered by the other.
    // (Before the reject ACLs below: with users' to-lport ACLs on subnet-a, ovnbpf refuses IPv4
    // floods there, as it runs no egress ACL stage for them.)
    broadcasts_cross(a1, a2, log_dir.path(), &logs);
    // A subnet's `reject` ACLs (Kube-OVN's `spec.acls`): the answers are the same bytes from
    // ovnbpf as from ovn-controller. From-lport, for an address nobody has: each side's switch
    // ingress answers its own pod. To-lport, for port 23 of the pods: each side's egress stage
    // answers the other side's pod, back through the tunnel.
    let mut rejects = Topology::new();
    rejects.subnet_acls(
        "subnet-a",
        &[
            SubnetAcl {
                direction: "from-lport",
                priority: 2500,
                match_: "ip4.dst == 10.0.1.200",
                action: "reject",
            },
            SubnetAcl {
                direction: "to-lport",
                priority: 2500,
                match_: "ip4.dst == {10.0.1.2, 10.0.1.3} && (tcp.dst == 23 || udp.dst == 23 || icmp4.type == 8)",
                action: "reject",
            },
        ],
    );
    rejects.apply(lab).unwrap();
    let nobody = ([0x0a, 0x58, 0x0a, 0, 1, 0xc8], REJECTED);
    // The pods' sockets to each other's port 23, where both listen: refused by the ACLs.
    for (pod, peer, peer_ip) in [(a1, a2, A2), (a2, a1, A1)] {
        let _listening = peer
            .netns()
            .run_in(|| {
                Ok((
                    std::net::TcpListener::bind("0.0.0.0:23")?,
                    std::net::UdpSocket::bind("0.0.0.0:23")?,
                ))
            })
            .unwrap();
        let refused = wait_until(Duration::from_secs(10), || {
            let (tcp, udp) = scenario::socket_outcomes(pod, peer_ip, 23);
            [tcp, udp].iter().all(|o| {
                o.as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
            })
        });
        assert!(
            refused,
            "{} → {}:23 not refused{}",
            pod.name(),
            peer.name(),
            logs()
        );
    }
    let ovn = answers(
        a2,
        (mac("a2"), A2),
        nobody,
        reject_probes(A2, REJECTED),
        false,
    );
    let ours = answers(
        a1,
        (mac("a1"), A1),
        nobody,
        reject_probes(A1, REJECTED),
        false,
    );
    let to_a1 = (mac("a1"), A1);
    let to_a2 = (mac("a2"), A2);
    // (Not the GRE probe: the to-lport ACL names what an answer is not, TCP and UDP port 23 and
    // echo requests, so that the answers pass the receiving side's egress.)
    let without_gre = |probes: Vec<Probe>| -> Vec<Probe> {
        probes
            .into_iter()
            .filter(|probe| probe.0 != "GRE")
            .collect()
    };
    let ovn_egress = answers(a1, to_a1, to_a2, without_gre(reject_probes(A1, A2)), true);
    let our_egress = answers(a2, to_a2, to_a1, without_gre(reject_probes(A2, A1)), true);
    for (side, ovn, ours) in [
        ("ingress", &ovn, &ours),
        ("egress", &ovn_egress, &our_egress),
    ] {
        assert_eq!(ovn.len(), ours.len());
        for ((what, real), (_, answer)) in ovn.iter().zip(ours) {
            assert_eq!(
                answer,
                real,
                "{side} reject, {what}: ovnbpf's answer (left) differs from OVN's{}",
                logs()
            );
        }
    }
}

/// Over an IPv6 underlay: ovnbpf (node1) and ovn-controller (node2) each register an IPv6
/// Encap and tunnel to each other in IPv6. Pings both ways, switched and routed, TCP both ways
/// and broadcasts both ways go through; on the wire, the outer IPv6 header ovnbpf writes for an
/// echo request is the one OVS writes for the echo reply (version, traffic class, flow label,
/// payload length, next header, hop limit), and so are the Geneve header and the OVN option's
/// class, type and length; ovnbpf's outer UDP checksum is there as OVS's Encap asks, valid on
/// every frame (TCP segments too), and gone once it stops asking.
#[test]
fn ovnbpf_and_a_real_ovn_controller_tunnel_to_each_other_over_ipv6() {
    let interop = Interop::start(true);
    let (lab, nodes, peer) = (&interop.two.lab, &interop.two.nodes, &interop.peer);
    let (a1, a2, a3) = (&interop.pods[0], &interop.pods[1], &interop.pods[2]);
    let log_dir = &interop.log_dir;
    let logs = || interop.logs();
    let encaps = lab
        .sbctl(&["--bare", "--columns=ip", "list", "Encap"])
        .unwrap();
    for node in nodes {
        assert!(
            encaps.contains(&node.encap_ip().to_string()),
            "{encaps}: no IPv6 Encap for {}",
            node.name()
        );
    }

    let reached = wait_until(Duration::from_secs(10), || {
        a1.ping(A2, 1).is_ok_and(|n| n == 1)
    });
    assert!(reached, "a1 (ovnbpf) → a2 (ovn-controller){}", logs());
    // One echo each way on the wire, captured on node1's uplink: request from ovnbpf, reply
    // from OVS.
    let pcap = log_dir.path().join("ipv6-underlay.pcap");
    let mut tcpdump = nodes[0]
        .netns()
        .spawn(
            "tcpdump",
            "tcpdump",
            &[
                "-i",
                "eth0",
                "-nn",
                "-U",
                "-s",
                "0",
                "-w",
                &pcap.to_string_lossy(),
                "ip6 and udp dst port 6081",
            ],
            None,
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(a1.ping(A2, 5).unwrap(), 5, "a1 → a2{}", logs());
    std::thread::sleep(Duration::from_millis(300));
    tcpdump.stop();
    let pcap = std::fs::read(&pcap).unwrap();
    let frames = ovnbpf_tests::frames::pcap_frames(&pcap);
    // The first frame from `node` whose inner packet is an IPv4 ICMP echo of `kind` (the pods'
    // own neighbour discovery crosses too).
    let from = |node: usize, kind: u8| {
        let source = match nodes[node].encap_ip() {
            std::net::IpAddr::V6(ip) => ip.octets(),
            std::net::IpAddr::V4(_) => unreachable!("an IPv6 underlay"),
        };
        let inner_ip = 78 + 14;
        frames
            .iter()
            .find(|frame| {
                frame.len() > inner_ip + 20
                    && frame[22..38] == source
                    && frame[inner_ip - 2..inner_ip] == [0x08, 0x00]
                    && frame[inner_ip + 9] == 1
                    && frame[inner_ip + 20] == kind
            })
            .unwrap_or_else(|| panic!("no echo {kind} from node{} captured", node + 1))
    };
    let (ours, theirs) = (from(0, 8), from(1, 0));
    assert_eq!(ours.len(), theirs.len(), "an echo request and its reply");
    assert_eq!(
        (&ours[12..22], &ours[56..58], &ours[58..60]),
        (&theirs[12..22], &theirs[56..58], &theirs[58..60]),
        "outer EtherType and IPv6 header up to the addresses, UDP port and length"
    );
    assert_eq!(
        (&ours[62..70], &ours[70..74]),
        (&theirs[62..70], &theirs[70..74]),
        "Geneve header (VNI included) and the OVN option's class, type and length"
    );
    // OVS's Encap asks for outer checksums (ovn-controller's default): ovnbpf's frames carry
    // one. OVS's carry one too though ovnbpf's Encap says `csum=false` (ovn-controller passes
    // that on to its tunnel port; OVS 3.1's userspace datapath, as observed here, checksums
    // IPv6 tunnels anyway). ovnbpf follows the receiver's Encap over both families.
    assert_ne!(&ours[60..62], &[0, 0], "ovnbpf's UDP checksum");
    assert_ne!(&theirs[60..62], &[0, 0], "OVS's UDP checksum");

    assert_eq!(a2.ping(A1, 5).unwrap(), 5, "a2 → a1{}", logs());
    assert_eq!(a1.ping(A3, 5).unwrap(), 5, "a1 → a3 (routed){}", logs());
    assert_eq!(a3.ping(A1, 5).unwrap(), 5, "a3 → a1 (routed){}", logs());
    for (client, server, server_ip) in [(a1, a2, A2), (a2, a1, A1)] {
        let report = client.tcp_stream_to(server, server_ip);
        assert!(report.is_ok(), "{report:?}{}", logs());
    }
    broadcasts_cross(a1, a2, log_dir.path(), &logs);
    // Outer checksums as the receiver's Encap asks, over IPv6 too: valid on every frame (TCP
    // segments included: the segmenter's path), none once it stops asking.
    checksums_as_the_peer_asks(lab, nodes, peer, a1, a2, &logs);
}

/// A mixed cluster's gateway, both ways (the migration keeps gateway nodes on ovn-controller
/// for a while): a custom VPC with OVN-native external access and its subnet's SNAT, x1 on the
/// ovnbpf node, x2 on the real OVN node, an external host on the provider network (bridged by
/// each side as it bridges it: the agent's bridge mappings, ovn-controller's `br-ex`). With the
/// real node as the gateway chassis, x1's traffic out of the gateway port is tunnelled to it in
/// OVN's layout and leaves SNATed there; with the ovnbpf node as the gateway, x2's is tunnelled
/// by OVS to ovnbpf, which SNATs it. The external host has no route to the VPC: only the SNAT
/// brings the replies back.
#[test]
fn ovnbpf_and_a_real_ovn_controller_are_each_others_gateway_chassis() {
    const X1: Ipv4Addr = Ipv4Addr::new(10, 90, 1, 2);
    const X2: Ipv4Addr = Ipv4Addr::new(10, 90, 1, 3);
    const EXTERNAL_HOST: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 1);
    const PLAN: [PodPlan; 2] = [("x1", "subnet-x", 0, X1), ("x2", "subnet-x", 1, X2)];
    let two = TwoNodes::start();
    let (lab, nodes) = (&two.lab, &two.nodes);
    let physical =
        ovnbpf_tests::network::PhysicalSwitch::with_trunks(&two.prefix, nodes, "eth1").unwrap();
    let external = physical
        .add_host("ext", None, &format!("{EXTERNAL_HOST}/24"))
        .unwrap();
    // OVS's userspace datapath reads frames whole (see `Interop::start`).
    external
        .netns()
        .exec("ethtool", &["-K", "eth0", "tx", "off"])
        .unwrap();
    nodes[0]
        .netns()
        .exec("ethtool", &["-K", "eth0", "tx", "off"])
        .unwrap();
    let mut topology = Topology::new();
    topology
        .without_subnet_source_routes()
        .vpc_with_subnet("vpc-x", "subnet-x", "10.90.1.0/24")
        .unwrap()
        .plain_switch("external", "172.30.0.0/24")
        .unwrap()
        .localnet("external", "physnet1", 0)
        .external_access("vpc-x", "external", "172.30.0.10/24", &[scenario::NODES[1]])
        .static_route("vpc-x", "0.0.0.0/0", EXTERNAL_HOST)
        .nat("vpc-x", "snat", "172.30.0.100", "10.90.1.0/24");
    let pods = scenario::build_planned_pods(lab, nodes, topology, &PLAN, true, 1442);
    let (x1, x2) = (&pods[0], &pods[1]);
    let peer = OvsChassis::start(lab, &nodes[1], "node2").unwrap();
    peer.plug("x2_h", x2.netns(), "x2.ns").unwrap();
    peer.provider_network("physnet1", "eth1").unwrap();
    let log_dir = tempfile::tempdir().unwrap();
    let agent = AgentSpec {
        chassis: "node1",
        node: &nodes[0],
        local_ports: vec!["x1.ns=x1_h".into()],
        pin_root: None,
        cni_dir: None,
        extra_args: vec!["--bridge-mappings".into(), "physnet1:eth1".into()],
    }
    .spawn(
        lab,
        &workspace_binary("ovnbpf-agent"),
        log_dir.path().join("node1.log"),
    )
    .unwrap();
    let logs = || format!("{}{}", agent.log_tail(), peer.log_tails());
    let up = wait_until(Duration::from_secs(30), || {
        ["x1.ns", "x2.ns"]
            .iter()
            .all(|port| scenario::port_up(lab, port))
    });
    assert!(up, "ports not up{}", logs());
    let held_by = |chassis: &str| scenario::bound_to(lab, "cr-vpc-x-external", chassis);

    // ovn-controller's gateway: x1 (ovnbpf) out through it, and x2 from its own node.
    assert!(
        wait_until(Duration::from_secs(20), || held_by("node2")),
        "ovn-controller does not hold the chassisredirect port{}",
        logs()
    );
    assert!(
        wait_until(Duration::from_secs(15), || x2
            .ping(EXTERNAL_HOST, 1)
            .is_ok_and(|n| n == 1)),
        "x2 (ovn-controller's own pod) does not reach the external host{}",
        logs()
    );
    assert!(
        wait_until(Duration::from_secs(10), || x1
            .ping(EXTERNAL_HOST, 1)
            .is_ok_and(|n| n == 1)),
        "x1 (ovnbpf) does not reach the external host through ovn-controller's gateway{}",
        logs()
    );
    assert_eq!(x1.ping(EXTERNAL_HOST, 5).unwrap(), 5, "x1 → out{}", logs());

    // The ovnbpf node becomes the gateway: x2 (ovn-controller's) out through it.
    lab.nbctl(&["lrp-set-gateway-chassis", "vpc-x-external", "node1", "100"])
        .unwrap();
    lab.nbctl(&["lrp-del-gateway-chassis", "vpc-x-external", "node2"])
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || held_by("node1")),
        "the ovnbpf agent does not take the chassisredirect port{}",
        logs()
    );
    assert!(
        wait_until(Duration::from_secs(15), || x2
            .ping(EXTERNAL_HOST, 1)
            .is_ok_and(|n| n == 1)),
        "x2 (ovn-controller) does not reach the external host through ovnbpf's gateway{}",
        logs()
    );
    assert_eq!(x2.ping(EXTERNAL_HOST, 5).unwrap(), 5, "x2 → out{}", logs());
    assert_eq!(x1.ping(EXTERNAL_HOST, 5).unwrap(), 5, "x1 → out{}", logs());

    // Both in one group (node1 100, node2 90): with two live chassis, each side elects by its
    // BFD sessions, so the ovnbpf agent keeps the port only while its session with Open
    // vSwitch is up; with node2 raised over node1, ovn-controller takes the port only once its
    // session with the ovnbpf agent is up. BFD between the two, both ways.
    lab.nbctl(&["lrp-set-gateway-chassis", "vpc-x-external", "node2", "90"])
        .unwrap();
    // Open vSwitch's side of the session: its tunnel to node1 says up.
    let ovs_bfd = || {
        peer.vsctl(&[
            "--bare",
            "--columns=bfd_status",
            "find",
            "interface",
            "type=geneve",
        ])
        .unwrap_or_default()
    };
    assert!(
        wait_until(Duration::from_secs(15), || ovs_bfd().contains("state=up")),
        "Open vSwitch's BFD session with the ovnbpf node is not up: {}{}",
        ovs_bfd(),
        logs()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        held_by("node1") && x2.ping(EXTERNAL_HOST, 3).is_ok_and(|n| n == 3),
        "the ovnbpf agent lost the gateway beside ovn-controller (no BFD session up?){}",
        logs()
    );
    lab.nbctl(&["lrp-set-gateway-chassis", "vpc-x-external", "node2", "110"])
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || held_by("node2")),
        "ovn-controller does not take the gateway of higher priority (no BFD session up with \
         the ovnbpf node?){}",
        logs()
    );
    assert!(
        wait_until(Duration::from_secs(15), || x1
            .ping(EXTERNAL_HOST, 1)
            .is_ok_and(|n| n == 1)),
        "x1 does not reach the external host through ovn-controller's gateway again{}",
        logs()
    );
}
