//! Geneve in the kernel programs, under BPF_PROG_TEST_RUN with filled maps. Decapsulation in
//! `from_uplink`: frames in OVN's layout (built here field by field as RFC 8926 and OVN define
//! them) addressed to this node come out as the inner frame, redirected; wrong VNI, unknown port
//! keys, foreign options and truncated frames are dropped and counted; other traffic passes
//! untouched. Switching in `from_pod`: frames to a MAC on another chassis leave in exactly that
//! layout (decapsulated again by the peer's program), to a local MAC are redirected as they are,
//! and anything unknown passes untouched.

mod common;

use ovnbpf_agent::dataplane::ebpf::Maps;
use ovnbpf_common::maps::{L2Fib, RemoteEncaps, TunnelPorts};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ovnbpf_agent::dataplane::ebpf::{Hook, KernelPrograms};
use ovnbpf_agent::netns::run_in;
use ovnbpf_common::{
    FIB_LOCAL, FIB_REMOTE, FibEntry, FibKey, LOCAL_PORT_VETH_PEER, LocalPort, PodPort,
    REMOTE_ENCAP_CSUM, RemoteEncap, TunnelPortKey,
};
use ovnbpf_tests::frames::verdict::{TC_ACT_REDIRECT, TC_ACT_SHOT, TCX_NEXT};
use ovnbpf_tests::frames::{ipv4_frame, tcp_syn, transport_checksum, udp};
use ovnbpf_tests::{icmp::checksum, names::unique_prefix, netns::Netns, require_root};

const NODE_IP: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 2);
const DATAPATH: u32 = 5;
const PORT: u32 = 2;

/// The inner frame: pod 10.0.1.3 pings pod 10.0.1.2 (ICMP echo, 8 bytes of payload).
fn inner_frame() -> Vec<u8> {
    let mut frame = vec![
        0x0a, 0x58, 0x0a, 0, 1, 2, // destination pod MAC
        0x0a, 0x58, 0x0a, 0, 1, 3, // source pod MAC
        0x08, 0x00,
    ];
    let mut ip = vec![0x45, 0, 0, 36, 0x12, 0x34, 0x40, 0, 64, 1, 0, 0];
    ip.extend_from_slice(&[10, 0, 1, 3, 10, 0, 1, 2]);
    let checksum = checksum(&ip);
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(&[8, 0, 0xf7, 0xfe, 0, 1, 0, 0]);
    frame.extend_from_slice(b"ovnbpf!!");
    frame
}

/// The fields of one encapsulated frame that the tests vary.
#[derive(Clone, Copy)]
struct Encap {
    source: Ipv4Addr,
    destination: Ipv4Addr,
    outer_macs: [u8; 12],
    udp_source_port: u16,
    udp_port: u16,
    vni: u32,
    option_class: u16,
    ingress: u16,
    egress: u16,
}

impl Default for Encap {
    fn default() -> Self {
        Self {
            source: PEER_IP,
            destination: NODE_IP,
            outer_macs: [0x0a, 0x58, 0xac, 0x1f, 0, 1, 0x0a, 0x58, 0xac, 0x1f, 0, 2],
            udp_source_port: 50000,
            udp_port: 6081,
            vni: DATAPATH,
            option_class: 0x0102,
            ingress: 1,
            egress: PORT as u16,
        }
    }
}

/// Outer Ethernet / IPv4 (DF, TTL 64) / UDP / Geneve with the C flag and one OVN option / inner.
fn encapsulate(encap: Encap, inner: &[u8]) -> Vec<u8> {
    let mut geneve = vec![0x02, 0x40, 0x65, 0x58];
    geneve.extend_from_slice(&(encap.vni << 8).to_be_bytes());
    geneve.extend_from_slice(&encap.option_class.to_be_bytes());
    geneve.extend_from_slice(&[0x80, 0x01]);
    let data = (u32::from(encap.ingress & 0x7fff) << 16) | u32::from(encap.egress);
    geneve.extend_from_slice(&data.to_be_bytes());
    let udp_len = (8 + geneve.len() + inner.len()) as u16;
    let mut udp = encap.udp_source_port.to_be_bytes().to_vec();
    udp.extend_from_slice(&encap.udp_port.to_be_bytes());
    udp.extend_from_slice(&udp_len.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&(20 + udp_len).to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    ip.extend_from_slice(&encap.source.octets());
    ip.extend_from_slice(&encap.destination.octets());
    let checksum = checksum(&ip);
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    let mut frame = encap.outer_macs.to_vec();
    frame.extend_from_slice(&[0x08, 0]);
    for part in [ip, udp, geneve] {
        frame.extend_from_slice(&part);
    }
    frame.extend_from_slice(inner);
    assert_eq!(frame.len(), 58 + inner.len());
    frame
}

fn programs() -> KernelPrograms {
    require_root();
    let mut programs = common::load_programs();
    programs.set_tunnel_endpoint(NODE_IP.into(), 1).unwrap();
    programs
        .set::<TunnelPorts>(
            TunnelPortKey {
                datapath: DATAPATH,
                port: PORT,
            },
            LocalPort {
                ifindex: 1,
                flags: LOCAL_PORT_VETH_PEER,
            },
        )
        .unwrap();
    programs
}

fn drops(programs: &KernelPrograms, reason: &str) -> u64 {
    programs
        .drop_counters()
        .unwrap()
        .into_iter()
        .find(|(name, _)| *name == reason)
        .map(|(_, count)| count)
        .unwrap()
}

#[test]
fn ovn_frames_for_local_ports_are_decapsulated_and_redirected() {
    let programs = programs();
    let inner = inner_frame();
    let outcome = programs
        .test_run(Hook::Uplink, &encapsulate(Encap::default(), &inner))
        .unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    assert_eq!(outcome.frame, inner, "the inner frame, byte for byte");
    // The ingress port key does not matter for delivery.
    let other_ingress = Encap {
        ingress: 0x7fff,
        ..Encap::default()
    };
    let outcome = programs
        .test_run(Hook::Uplink, &encapsulate(other_ingress, &inner))
        .unwrap();
    assert_eq!(
        (outcome.verdict, outcome.frame),
        (TC_ACT_REDIRECT, inner.clone())
    );
    // Once the port is gone, its frames are not delivered.
    let mut programs = programs;
    programs
        .remove::<TunnelPorts>(TunnelPortKey {
            datapath: DATAPATH,
            port: PORT,
        })
        .unwrap();
    let outcome = programs
        .test_run(Hook::Uplink, &encapsulate(Encap::default(), &inner))
        .unwrap();
    assert_eq!(outcome.verdict, TC_ACT_SHOT);
}

#[test]
fn undeliverable_tunnel_frames_are_dropped_and_counted() {
    let programs = programs();
    let inner = inner_frame();
    let cases = [
        (
            "wrong VNI",
            encapsulate(
                Encap {
                    vni: DATAPATH + 1,
                    ..Encap::default()
                },
                &inner,
            ),
            "geneve_unknown_destination",
        ),
        (
            "unknown egress port key",
            encapsulate(
                Encap {
                    egress: 9,
                    ..Encap::default()
                },
                &inner,
            ),
            "geneve_unknown_destination",
        ),
        (
            "a critical option of another class",
            encapsulate(
                Encap {
                    option_class: 0x0103,
                    ..Encap::default()
                },
                &inner,
            ),
            "geneve_malformed",
        ),
        (
            "truncated inside the Geneve header",
            encapsulate(Encap::default(), &inner)[..50].to_vec(),
            "geneve_malformed",
        ),
        (
            "UDP length beyond the frame",
            encapsulate(Encap::default(), &inner)[..80].to_vec(),
            "geneve_malformed",
        ),
    ];
    for (what, frame, reason) in cases {
        let before = drops(&programs, reason);
        let outcome = programs.test_run(Hook::Uplink, &frame).unwrap();
        assert_eq!(outcome.verdict, TC_ACT_SHOT, "{what}");
        assert_eq!(drops(&programs, reason), before + 1, "{what}: {reason}");
    }
}

#[test]
fn traffic_that_is_not_ours_passes_untouched() {
    let programs = programs();
    let inner = inner_frame();
    let cases = [
        (
            "Geneve to another address",
            encapsulate(
                Encap {
                    destination: Ipv4Addr::new(172, 31, 0, 9),
                    ..Encap::default()
                },
                &inner,
            ),
        ),
        (
            "UDP to another port",
            encapsulate(
                Encap {
                    udp_port: 53,
                    ..Encap::default()
                },
                &inner,
            ),
        ),
        ("a plain IPv4 frame", inner.clone()),
        ("a frame that is not IPv4", {
            let mut frame = inner.clone();
            frame[12..14].copy_from_slice(&[0x08, 0x06]);
            frame
        }),
    ];
    for (what, frame) in cases {
        let outcome = programs.test_run(Hook::Uplink, &frame).unwrap();
        assert_eq!(
            (outcome.verdict, &outcome.frame),
            (TCX_NEXT, &frame),
            "{what}"
        );
    }
}

/// The pod behind the test-run device (ifindex 1) is port 1 of datapath 5; MAC …:02 (the inner
/// frame's destination) is port 2 on the chassis at PEER_IP, MAC …:09 is a local port.
fn switching_programs() -> KernelPrograms {
    let mut programs = programs();
    programs
        .set_pod_port(
            1,
            PodPort {
                datapath: DATAPATH,
                port: 1,
            },
        )
        .unwrap();
    let key = |mac: [u8; 6]| FibKey {
        datapath: DATAPATH,
        mac,
        padding: [0; 2],
    };
    programs
        .set::<L2Fib>(
            key([0x0a, 0x58, 0x0a, 0, 1, 2]),
            FibEntry {
                kind: FIB_REMOTE,
                remote_ip: u32::from_ne_bytes(PEER_IP.octets()),
                port: PORT,
                ..FibEntry::default()
            },
        )
        .unwrap();
    programs
        .set::<L2Fib>(
            key([0x0a, 0x58, 0x0a, 0, 1, 9]),
            FibEntry {
                kind: FIB_LOCAL,
                // Not the sending port (1): OVN never sends a frame back where it came from.
                ifindex: 99,
                flags: LOCAL_PORT_VETH_PEER,
                ..FibEntry::default()
            },
        )
        .unwrap();
    programs
}

/// What `from_pod` must send for `inner` to the peer: OVN's layout from NODE_IP to PEER_IP,
/// ingress key 1, egress key 2, outer MACs left to the kernel's next-hop resolution (zero under
/// test runs), and the UDP source port the program chose (checked to be in the flow-hash range).
fn expected_encapsulation(inner: &[u8], sent: &[u8]) -> Vec<u8> {
    let source_port = u16::from_be_bytes([sent[34], sent[35]]);
    assert!(source_port >= 32768, "UDP source port {source_port}");
    encapsulate(
        Encap {
            source: NODE_IP,
            destination: PEER_IP,
            outer_macs: [0; 12],
            udp_source_port: source_port,
            ingress: 1,
            ..Encap::default()
        },
        inner,
    )
}

/// The unicast ARP reply of `inner`'s pods (not IP: it takes the encapsulation path whose outer
/// MACs come from the kernel's FIB and neighbour table, as its neighbour redirect only handles
/// IP).
fn arp_reply(inner: &[u8]) -> Vec<u8> {
    let mut arp = inner[..14].to_vec();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]);
    arp.extend_from_slice(&[0x0a, 0x58, 0x0a, 0, 1, 3, 10, 0, 1, 3]);
    arp.extend_from_slice(&[0x0a, 0x58, 0x0a, 0, 1, 2, 10, 0, 1, 2]);
    arp
}

/// The peer's MAC in [`uplink_with_peer`]'s neighbour table.
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x42];

/// A namespace whose uplink `up0` (a veth) holds `node` with `peer` a permanent neighbour at
/// [`PEER_MAC`], forwarding IP of that family (as the agent makes a node's uplink: the FIB
/// lookup is a forwarding one); the uplink's MAC.
fn uplink_with_peer(node: IpAddr, peer: IpAddr) -> (Netns, [u8; 6]) {
    let netns = Netns::create(&format!("{}-arp", unique_prefix())).unwrap();
    netns
        .ip(&["link", "add", "up0", "type", "veth", "peer", "name", "up1"])
        .unwrap();
    let (address, forwarding) = match node {
        IpAddr::V4(_) => (format!("{node}/24"), "net.ipv4.ip_forward=1"),
        IpAddr::V6(_) => (format!("{node}/64"), "net.ipv6.conf.all.forwarding=1"),
    };
    netns
        .ip(&["addr", "add", &address, "dev", "up0", "nodad"])
        .unwrap();
    for link in ["up0", "up1"] {
        netns.ip(&["link", "set", link, "up"]).unwrap();
    }
    netns.exec("sysctl", &["-qw", forwarding]).unwrap();
    netns
        .ip(&[
            "neigh",
            "add",
            &peer.to_string(),
            "lladdr",
            "02:00:00:00:00:42",
            "dev",
            "up0",
            "nud",
            "permanent",
        ])
        .unwrap();
    let uplink_mac = ovnbpf_agent::lflow::parse_mac(&netns.mac("up0").unwrap()).unwrap();
    (netns, uplink_mac)
}

#[test]
fn frames_to_another_chassis_leave_in_ovn_layout() {
    let mut programs = switching_programs();
    let inner = inner_frame();
    let outcome = programs.test_run(Hook::Pod, &inner).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    assert_eq!(
        outcome.frame,
        expected_encapsulation(&inner, &outcome.frame),
        "outer IPv4 (with checksum), UDP, Geneve, OVN option, inner frame"
    );

    // A unicast ARP reply (not IP) takes the other encapsulation path, same layout; the kernel's
    // neighbour redirect only handles IP, so its outer MACs come from the neighbour table: run
    // it where the peer is a known neighbour of the uplink.
    let arp = arp_reply(&inner);
    let (netns, uplink_mac) = uplink_with_peer(NODE_IP.into(), PEER_IP.into());
    programs
        .set_tunnel_endpoint(NODE_IP.into(), netns.ifindex("up0").unwrap())
        .unwrap();
    let outcome = run_in(&netns.path(), || programs.test_run(Hook::Pod, &arp))
        .unwrap()
        .unwrap();
    assert_eq!(
        outcome.verdict,
        TC_ACT_REDIRECT,
        "{:?}",
        programs.drop_counters().unwrap()
    );
    let mut expected = expected_encapsulation(&arp, &outcome.frame);
    expected[..6].copy_from_slice(&PEER_MAC);
    expected[6..12].copy_from_slice(&uplink_mac);
    assert_eq!(
        outcome.frame, expected,
        "outer MACs from the neighbour table"
    );
    programs.set_tunnel_endpoint(NODE_IP.into(), 1).unwrap();

    // The peer's uplink program takes the frame back to the original.
    let sent = programs.test_run(Hook::Pod, &inner).unwrap().frame;
    programs.set_tunnel_endpoint(PEER_IP.into(), 1).unwrap();
    let received = programs.test_run(Hook::Uplink, &sent).unwrap();
    assert_eq!((received.verdict, received.frame), (TC_ACT_REDIRECT, inner));
}

/// Inner frames from pod 10.0.1.3 to the remote pod 10.0.1.2 that cover each way the outer
/// UDP checksum is summed: transports whose own checksum stands for their payload (ICMP, UDP,
/// TCP, over IPv4 and IPv6), and what is summed byte by byte (a UDP datagram without checksum,
/// a fragment, another protocol, Ethernet padding, an IPv6 extension header), at odd and even
/// lengths, short and MTU-sized.
fn checksum_cases() -> Vec<(&'static str, Vec<u8>)> {
    let (to_mac, from_mac) = ([0x0a, 0x58, 0x0a, 0, 1, 2], [0x0a, 0x58, 0x0a, 0, 1, 3]);
    let addresses = (Ipv4Addr::new(10, 0, 1, 3), Ipv4Addr::new(10, 0, 1, 2));
    let ipv4 =
        |protocol: u8, payload: &[u8]| ipv4_frame(to_mac, from_mac, addresses, protocol, payload);
    let payload = |len: usize| (0..len).map(|i| (i * 7 + 3) as u8).collect::<Vec<u8>>();
    let mut tcp_data = tcp_syn(addresses, 40000, 80, 7);
    tcp_data[13] = 0x18; // PSH, ACK
    tcp_data.extend_from_slice(&payload(1001));
    tcp_data[16..18].copy_from_slice(&[0, 0]);
    let sum = transport_checksum(addresses, 6, &tcp_data);
    tcp_data[16..18].copy_from_slice(&sum.to_be_bytes());
    let mut no_checksum = udp(addresses, 40001, 53, &payload(33));
    no_checksum[6..8].copy_from_slice(&[0, 0]);
    let mut fragment = ipv4(17, &payload(1400));
    fragment[20] = 0x20; // more fragments
    fragment[24..26].copy_from_slice(&[0, 0]);
    let sum = checksum(&fragment[14..34]);
    fragment[24..26].copy_from_slice(&sum.to_be_bytes());
    let mut padded = ipv4(17, &udp(addresses, 40002, 53, b"pad"));
    padded.extend_from_slice(&[0; 17]);
    let ipv6 = |next_header: u8, payload: &[u8]| {
        let mut frame = to_mac.to_vec();
        frame.extend_from_slice(&from_mac);
        frame.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        frame.extend_from_slice(&[next_header, 64]);
        frame.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]);
        frame.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        frame.extend_from_slice(payload);
        frame
    };
    // TCP over IPv6 with a valid checksum (the pseudo header of RFC 8200 §8.1).
    let mut tcp6 = tcp_syn(addresses, 40003, 443, 9);
    tcp6.extend_from_slice(&payload(77));
    tcp6[16..18].copy_from_slice(&[0, 0]);
    let mut pseudo = ipv6(6, &tcp6)[22..54].to_vec();
    pseudo.extend_from_slice(&(tcp6.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 6]);
    pseudo.extend_from_slice(&tcp6);
    let sum = checksum(&pseudo);
    tcp6[16..18].copy_from_slice(&sum.to_be_bytes());
    let mut hop_by_hop = vec![59, 0, 1, 4, 0, 0, 0, 0];
    hop_by_hop.extend_from_slice(&payload(21));
    vec![
        ("ICMP echo", inner_frame()),
        ("UDP", ipv4(17, &udp(addresses, 40004, 53, &payload(100)))),
        ("UDP without checksum, odd length", ipv4(17, &no_checksum)),
        ("TCP SYN", ipv4(6, &tcp_syn(addresses, 40005, 80, 1))),
        ("TCP with 1001 bytes of data", ipv4(6, &tcp_data)),
        ("an IPv4 fragment of 1400 bytes", fragment),
        ("another protocol, odd length", ipv4(253, &payload(101))),
        ("Ethernet padding", padded),
        ("TCP over IPv6", ipv6(6, &tcp6)),
        ("an IPv6 hop-by-hop header", ipv6(0, &hop_by_hop)),
    ]
}

/// Toward a chassis whose Encap asks for outer checksums (`REMOTE_ENCAPS`), every frame leaves
/// with a valid one, and otherwise in exactly the layout it has without; toward one that does
/// not ask, with checksum 0.
#[test]
fn frames_to_a_chassis_that_asks_carry_a_valid_outer_udp_checksum() {
    let mut programs = switching_programs();
    let peer = u32::from_ne_bytes(PEER_IP.octets());
    for asked in [true, false] {
        if asked {
            programs
                .set::<RemoteEncaps>(
                    peer,
                    RemoteEncap {
                        flags: REMOTE_ENCAP_CSUM,
                        ip6: [0; 16],
                    },
                )
                .unwrap();
        } else {
            programs.remove::<RemoteEncaps>(peer).unwrap();
        }
        for (what, inner) in checksum_cases() {
            let outcome = programs.test_run(Hook::Pod, &inner).unwrap();
            assert_eq!(
                outcome.verdict,
                TC_ACT_REDIRECT,
                "{what}: {:?}",
                programs.drop_counters().unwrap()
            );
            let sent = outcome.frame;
            let field = u16::from_be_bytes([sent[40], sent[41]]);
            if asked {
                assert_ne!(field, 0, "{what}: no outer checksum");
                assert_eq!(
                    transport_checksum((NODE_IP, PEER_IP), 17, &sent[34..]),
                    0,
                    "{what}: outer UDP checksum {field:#06x} does not sum: {}",
                    sent.iter().map(|b| format!("{b:02x}")).collect::<String>()
                );
            } else {
                assert_eq!(field, 0, "{what}: a checksum nobody asked for");
            }
            let mut unsummed = sent.clone();
            unsummed[40..42].copy_from_slice(&[0, 0]);
            assert_eq!(unsummed, expected_encapsulation(&inner, &sent), "{what}");
        }
    }
}

#[test]
fn frames_to_local_ports_are_redirected_unknown_ones_dropped_and_foreign_ones_passed() {
    let programs = switching_programs();
    let mut local = inner_frame();
    local[..6].copy_from_slice(&[0x0a, 0x58, 0x0a, 0, 1, 9]);
    // (The local port is the test-run device's neighbour at ifindex 99.)
    let outcome = programs.test_run(Hook::Pod, &local).unwrap();
    assert_eq!((outcome.verdict, &outcome.frame), (TC_ACT_REDIRECT, &local));

    let mut unknown = inner_frame();
    unknown[..6].copy_from_slice(&[0x0a, 0x58, 0x0a, 0, 1, 77]);
    let outcome = programs.test_run(Hook::Pod, &unknown).unwrap();
    // OVN drops unicast to a MAC its switch does not know (no "unknown" port here).
    assert_eq!(outcome.verdict, TC_ACT_SHOT);

    // A port the agent has not configured: not ours.
    let mut programs = programs;
    programs.remove_pod_port(1).unwrap();
    let inner = inner_frame();
    let outcome = programs.test_run(Hook::Pod, &inner).unwrap();
    assert_eq!((outcome.verdict, &outcome.frame), (TCX_NEXT, &inner));
}

/// This node's and the peer's endpoints over an IPv6 underlay.
const NODE_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x172, 0, 0, 0, 0, 0, 1);
const PEER_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x172, 0, 0, 0, 0, 0, 2);
/// The peer's endpoint key (any value the agent could give it).
const PEER_KEY6: u32 = 0x0417_2002;

/// OVN's layout over an IPv6 underlay, as Open vSwitch sends Geneve there: outer Ethernet /
/// IPv6 (traffic class and flow label 0, hop limit 64, no extension header) / UDP with a zero
/// checksum / Geneve with the C flag and one OVN option / inner.
fn encapsulate6(
    (source, destination): (Ipv6Addr, Ipv6Addr),
    outer_macs: [u8; 12],
    udp_source_port: u16,
    inner: &[u8],
) -> Vec<u8> {
    let mut geneve = vec![0x02, 0x40, 0x65, 0x58];
    geneve.extend_from_slice(&(DATAPATH << 8).to_be_bytes());
    geneve.extend_from_slice(&[0x01, 0x02, 0x80, 0x01]);
    geneve.extend_from_slice(&((1_u32 << 16) | PORT).to_be_bytes());
    let udp_len = (8 + geneve.len() + inner.len()) as u16;
    let mut frame = outer_macs.to_vec();
    frame.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    frame.extend_from_slice(&udp_len.to_be_bytes());
    frame.extend_from_slice(&[17, 64]);
    frame.extend_from_slice(&source.octets());
    frame.extend_from_slice(&destination.octets());
    frame.extend_from_slice(&udp_source_port.to_be_bytes());
    frame.extend_from_slice(&6081_u16.to_be_bytes());
    frame.extend_from_slice(&udp_len.to_be_bytes());
    frame.extend_from_slice(&[0, 0]);
    frame.extend_from_slice(&geneve);
    frame.extend_from_slice(inner);
    assert_eq!(frame.len(), 78 + inner.len());
    frame
}

/// [`switching_programs`] on an IPv6 underlay: the remote MAC's chassis is the endpoint with
/// key [`PEER_KEY6`], whose `REMOTE_ENCAPS` entry holds its address.
fn switching_programs6() -> KernelPrograms {
    let mut programs = switching_programs();
    programs.set_tunnel_endpoint(NODE_IP6.into(), 1).unwrap();
    programs
        .set::<L2Fib>(
            FibKey {
                datapath: DATAPATH,
                mac: [0x0a, 0x58, 0x0a, 0, 1, 2],
                padding: [0; 2],
            },
            FibEntry {
                kind: FIB_REMOTE,
                remote_ip: PEER_KEY6,
                port: PORT,
                ..FibEntry::default()
            },
        )
        .unwrap();
    programs
        .set::<RemoteEncaps>(
            PEER_KEY6,
            RemoteEncap {
                flags: 0,
                ip6: PEER_IP6.octets(),
            },
        )
        .unwrap();
    programs
}

/// Over an IPv6 underlay a frame to a remote pod leaves in OVN's layout with the outer IPv6
/// header, byte for byte (the peer's address from its endpoint's entry), with and without IP
/// inside (ARP: outer MACs from the kernel's IPv6 FIB and neighbour table); the peer's uplink
/// program takes it back to the inner frame; an endpoint key without an address is dropped and
/// counted, and IPv6 that is not Geneve to this endpoint passes untouched.
#[test]
fn frames_over_an_ipv6_underlay_leave_and_arrive_in_ovn_layout() {
    let mut programs = switching_programs6();
    let inner = inner_frame();
    let outcome = programs.test_run(Hook::Pod, &inner).unwrap();
    assert_eq!(
        outcome.verdict,
        TC_ACT_REDIRECT,
        "{:?}",
        programs.drop_counters().unwrap()
    );
    let source_port = u16::from_be_bytes([outcome.frame[54], outcome.frame[55]]);
    assert!(source_port >= 32768, "UDP source port {source_port}");
    let expected = encapsulate6((NODE_IP6, PEER_IP6), [0; 12], source_port, &inner);
    assert_eq!(
        outcome.frame, expected,
        "outer IPv6, UDP, Geneve, OVN option"
    );

    // The peer's uplink program decapsulates it; what is not Geneve to its endpoint passes.
    programs.set_tunnel_endpoint(PEER_IP6.into(), 1).unwrap();
    let received = programs.test_run(Hook::Uplink, &expected).unwrap();
    assert_eq!(
        (received.verdict, &received.frame),
        (TC_ACT_REDIRECT, &inner)
    );
    let elsewhere = encapsulate6((NODE_IP6, NODE_IP6), [0; 12], source_port, &inner);
    let passed = programs.test_run(Hook::Uplink, &elsewhere).unwrap();
    assert_eq!((passed.verdict, &passed.frame), (TCX_NEXT, &elsewhere));
    let ipv4_geneve = encapsulate(Encap::default(), &inner);
    let passed = programs.test_run(Hook::Uplink, &ipv4_geneve).unwrap();
    assert_eq!(
        (passed.verdict, &passed.frame),
        (TCX_NEXT, &ipv4_geneve),
        "Geneve over IPv4 is not this IPv6 endpoint's"
    );
    let malformed = drops(&programs, "geneve_malformed");
    let truncated = &expected[..78 + 6];
    let outcome = programs.test_run(Hook::Uplink, truncated).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_SHOT, "a truncated frame to us");
    assert_eq!(drops(&programs, "geneve_malformed"), malformed + 1);

    // An endpoint the agent has not given an address: dropped, counted.
    programs.set_tunnel_endpoint(NODE_IP6.into(), 1).unwrap();
    programs.remove::<RemoteEncaps>(PEER_KEY6).unwrap();
    let unknown = drops(&programs, "tunnel_endpoint_unknown");
    let outcome = programs.test_run(Hook::Pod, &inner).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_SHOT);
    assert_eq!(drops(&programs, "tunnel_endpoint_unknown"), unknown + 1);
    programs
        .set::<RemoteEncaps>(
            PEER_KEY6,
            RemoteEncap {
                flags: 0,
                ip6: PEER_IP6.octets(),
            },
        )
        .unwrap();

    // ARP inside: the outer MACs come from the IPv6 neighbour of the uplink.
    let arp = arp_reply(&inner);
    let (netns, uplink_mac) = uplink_with_peer(NODE_IP6.into(), PEER_IP6.into());
    programs
        .set_tunnel_endpoint(NODE_IP6.into(), netns.ifindex("up0").unwrap())
        .unwrap();
    let outcome = run_in(&netns.path(), || programs.test_run(Hook::Pod, &arp))
        .unwrap()
        .unwrap();
    assert_eq!(
        outcome.verdict,
        TC_ACT_REDIRECT,
        "{:?}",
        programs.drop_counters().unwrap()
    );
    let mut macs = [0_u8; 12];
    macs[..6].copy_from_slice(&PEER_MAC);
    macs[6..].copy_from_slice(&uplink_mac);
    let source_port = u16::from_be_bytes([outcome.frame[54], outcome.frame[55]]);
    assert_eq!(
        outcome.frame,
        encapsulate6((NODE_IP6, PEER_IP6), macs, source_port, &arp),
        "outer MACs from the IPv6 neighbour table"
    );
}

/// Over an IPv6 underlay too: toward an endpoint that asks, every frame of
/// [`checksum_cases`] leaves with an outer UDP checksum valid over the IPv6 pseudo header, and
/// otherwise in the layout it has without; toward one that does not ask, with checksum 0.
#[test]
fn over_an_ipv6_underlay_frames_to_a_chassis_that_asks_carry_a_valid_outer_udp_checksum() {
    let mut programs = switching_programs6();
    for asked in [true, false] {
        programs
            .set::<RemoteEncaps>(
                PEER_KEY6,
                RemoteEncap {
                    flags: if asked { REMOTE_ENCAP_CSUM } else { 0 },
                    ip6: PEER_IP6.octets(),
                },
            )
            .unwrap();
        for (what, inner) in checksum_cases() {
            let outcome = programs.test_run(Hook::Pod, &inner).unwrap();
            assert_eq!(
                outcome.verdict,
                TC_ACT_REDIRECT,
                "{what}: {:?}",
                programs.drop_counters().unwrap()
            );
            let sent = outcome.frame;
            let field = u16::from_be_bytes([sent[60], sent[61]]);
            if asked {
                assert_ne!(field, 0, "{what}: no outer checksum");
                let datagram = &sent[54..];
                let mut pseudo = sent[22..54].to_vec();
                pseudo.extend_from_slice(&(datagram.len() as u32).to_be_bytes());
                pseudo.extend_from_slice(&[0, 0, 0, 17]);
                pseudo.extend_from_slice(datagram);
                assert_eq!(
                    checksum(&pseudo),
                    0,
                    "{what}: outer UDP checksum {field:#06x} does not sum"
                );
            } else {
                assert_eq!(field, 0, "{what}: a checksum nobody asked for");
            }
            let mut unsummed = sent.clone();
            unsummed[60..62].copy_from_slice(&[0, 0]);
            let source_port = u16::from_be_bytes([sent[54], sent[55]]);
            assert_eq!(
                unsummed,
                encapsulate6((NODE_IP6, PEER_IP6), [0; 12], source_port, &inner),
                "{what}"
            );
        }
    }
}
