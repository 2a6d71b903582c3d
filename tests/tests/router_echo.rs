//! The kernel's answers for a router's own addresses under BPF_PROG_TEST_RUN: a pod's ICMP echo
//! request to its gateway (the router port's MAC and address) comes back as the reply OVN's
//! `lr_in_ip_input` builds (MACs and addresses swapped, TTL 255 routed back to 254, type 0,
//! valid checksums), out
//! of the same veth. A packet whose TTL expires there gets ICMP time exceeded from the router
//! port's address. TCP to a router address gets the reset ovn-controller's `tcp_reset` builds,
//! UDP ICMP port unreachable and other protocols ICMP protocol unreachable as its `icmp4` builds
//! them (both routed back: TTL 62 and 254), byte for byte; later fragments, SCTP and addresses
//! without answers are dropped and counted. Other IPv4 to the router's MAC is routed; what the
//! router cannot route is dropped and counted. Non-IPv4 passes untouched. IPv6, byte for byte as
//! pinctrl builds it: time exceeded from the port's address for a sender in its network (the
//! packet's class and flow label, the quote cut at 1218 bytes), none for another sender; TCP
//! to the router's address gets a reset (hop limit 62), UDP ICMPv6 port unreachable. A router
//! solicitation on a switch whose router port advertises gets the port's advertisement (as
//! ovn-controller's `put_nd_ra_opts` and the response flow make it: the solicitation's class,
//! flow label and hop limit, from the port's MAC and link-local address, to the solicitor, or
//! `ff02::1` for one from `::`); one with another hop limit, or on another switch, is not
//! answered. (ovn-trace 23.03 aborts on `put_nd_ra_opts`: this is the oracle instead.)

mod common;

use ovnbpf_agent::dataplane::ebpf::{Hook, KernelPrograms, Maps};
use ovnbpf_common::maps::{L2Fib, RouterAddresses, Routers};
use ovnbpf_common::{
    FIB_ROUTER, FibEntry, FibKey, NeighbourKey, PodPort, ROUTER_ADDRESS_ECHO,
    ROUTER_ADDRESS_PORT_UNREACHABLE, ROUTER_ADDRESS_PROTOCOL_UNREACHABLE, ROUTER_ADDRESS_TCP_RESET,
    ROUTER_FORWARDS, RouterAddress, RouterInfo,
};
use ovnbpf_tests::frames::{
    link_local,
    verdict::{TC_ACT_REDIRECT, TC_ACT_SHOT, TCX_NEXT},
};
use ovnbpf_tests::{icmp::checksum, require_root};

const POD_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0, 1, 2];
const POD_IP: [u8; 4] = [10, 0, 1, 2];
const ROUTER_MAC: [u8; 6] = [0x00, 0x00, 0x00, 0x5e, 0x01, 0x01];
const GATEWAY: [u8; 4] = [10, 0, 1, 1];
/// An address of the router it does not answer pings for (no echo flag).
const SILENT: [u8; 4] = [10, 0, 1, 254];
/// The router's datapath key.
const ROUTER: u32 = 9;

/// Ethernet + IPv4 + ICMP with valid checksums.
fn icmp(eth: ([u8; 6], [u8; 6]), ttl: u8, addresses: ([u8; 4], [u8; 4]), kind: u8) -> Vec<u8> {
    let payload = b"ovnbpf-echo-payload!";
    let mut icmp = vec![kind, 0, 0, 0, 0x12, 0x34, 0, 1];
    icmp.extend_from_slice(payload);
    let icmp_sum = checksum(&icmp);
    icmp[2..4].copy_from_slice(&icmp_sum.to_be_bytes());
    let total = (20 + icmp.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0xab, 0xcd, 0x40, 0, ttl, 1, 0, 0]);
    ip.extend_from_slice(&addresses.0);
    ip.extend_from_slice(&addresses.1);
    let ip_sum = checksum(&ip);
    ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    let mut frame = eth.0.to_vec();
    frame.extend_from_slice(&eth.1);
    frame.extend_from_slice(&[0x08, 0x00]);
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(&icmp);
    frame
}

/// Ethernet + IPv4 (ID 0xabcd, fragment word `fragment`) around `payload` of `protocol`, with a
/// valid IPv4 checksum.
fn ipv4(
    eth: ([u8; 6], [u8; 6]),
    ttl: u8,
    addresses: ([u8; 4], [u8; 4]),
    protocol: u8,
    fragment: u16,
    payload: &[u8],
) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0xab, 0xcd]);
    ip.extend_from_slice(&fragment.to_be_bytes());
    ip.extend_from_slice(&[ttl, protocol, 0, 0]);
    ip.extend_from_slice(&addresses.0);
    ip.extend_from_slice(&addresses.1);
    let ip_sum = checksum(&ip);
    ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    let mut frame = eth.0.to_vec();
    frame.extend_from_slice(&eth.1);
    frame.extend_from_slice(&[0x08, 0x00]);
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(payload);
    frame
}

/// A UDP datagram from port 40000 to `port` (checksum left 0: not checked by the router).
fn udp(port: u16, payload: &[u8]) -> Vec<u8> {
    let mut udp = 40000_u16.to_be_bytes().to_vec();
    udp.extend_from_slice(&port.to_be_bytes());
    udp.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    udp
}

/// A TCP segment from `addresses.0`:40000 to `addresses.1`:`port` with `flags`, sequence
/// `seq` and an MSS option, with a valid checksum.
fn tcp(addresses: ([u8; 4], [u8; 4]), port: u16, seq: u32, flags: u8) -> Vec<u8> {
    let mut tcp = 40000_u16.to_be_bytes().to_vec();
    tcp.extend_from_slice(&port.to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&[0, 0, 0, 0, 0x60, flags, 0xfa, 0xf0, 0, 0, 0, 0]);
    tcp.extend_from_slice(&[2, 4, 0x05, 0xb4]);
    let sum = transport_checksum(addresses, 6, &tcp);
    tcp[16..18].copy_from_slice(&sum.to_be_bytes());
    tcp
}

/// The TCP/UDP checksum of `segment` with its IPv4 pseudo-header.
fn transport_checksum(addresses: ([u8; 4], [u8; 4]), protocol: u8, segment: &[u8]) -> u16 {
    let mut pseudo = addresses.0.to_vec();
    pseudo.extend_from_slice(&addresses.1);
    pseudo.extend_from_slice(&[0, protocol]);
    pseudo.extend_from_slice(&(segment.len() as u16).to_be_bytes());
    pseudo.extend_from_slice(segment);
    checksum(&pseudo)
}

/// What OVN sends back for `datagram` (its IPv4 packet, as sent): pinctrl's ICMP destination
/// unreachable with `code` (ID 0, DF, TOS 0, TTL 255 routed back to 254, quoting the datagram
/// up to a 576-byte frame), from the gateway to the pod.
fn unreachable(code: u8, datagram: &[u8]) -> Vec<u8> {
    let quoted = &datagram[..datagram.len().min(576 - 14 - 20 - 8)];
    let mut icmp = vec![3, code, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(quoted);
    let icmp_sum = checksum(&icmp);
    icmp[2..4].copy_from_slice(&icmp_sum.to_be_bytes());
    let mut frame = ipv4(
        (POD_MAC, ROUTER_MAC),
        254,
        (GATEWAY, POD_IP),
        1,
        0x4000,
        &icmp,
    );
    frame[18..20].copy_from_slice(&[0, 0]);
    frame[24..26].copy_from_slice(&[0, 0]);
    let ip_sum = checksum(&frame[14..34]);
    frame[24..26].copy_from_slice(&ip_sum.to_be_bytes());
    frame
}

/// How many answers of `kind` the routers sent.
fn replies(programs: &KernelPrograms, kind: &str) -> u64 {
    programs
        .router_replies()
        .unwrap()
        .into_iter()
        .find(|(name, _)| *name == kind)
        .unwrap()
        .1
}

fn programs() -> KernelPrograms {
    require_root();
    let mut programs = common::load_programs();
    programs
        .set_pod_port(
            1,
            PodPort {
                datapath: 5,
                port: 1,
            },
        )
        .unwrap();
    programs
        .set::<L2Fib>(
            FibKey {
                datapath: 5,
                mac: ROUTER_MAC,
                padding: [0; 2],
            },
            FibEntry {
                kind: FIB_ROUTER,
                ifindex: ROUTER,
                remote_ip: u32::from_ne_bytes(GATEWAY),
                port: 3,
                ..FibEntry::default()
            },
        )
        .unwrap();
    programs
        .set::<Routers>(
            ROUTER,
            RouterInfo {
                flags: ROUTER_FORWARDS,
                pair_policies: 0,
            },
        )
        .unwrap();
    let answers = ROUTER_ADDRESS_ECHO
        | ROUTER_ADDRESS_TCP_RESET
        | ROUTER_ADDRESS_PORT_UNREACHABLE
        | ROUTER_ADDRESS_PROTOCOL_UNREACHABLE;
    for (ip, flags) in [(GATEWAY, answers), (SILENT, 0)] {
        programs
            .set::<RouterAddresses>(
                NeighbourKey {
                    datapath: ROUTER,
                    ip: u32::from_ne_bytes(ip),
                },
                RouterAddress { flags },
            )
            .unwrap();
    }
    programs
}

#[test]
fn a_ping_to_the_gateway_is_answered_by_the_router() {
    let programs = programs();
    let request = icmp((ROUTER_MAC, POD_MAC), 64, (POD_IP, GATEWAY), 8);
    let outcome = programs.test_run(Hook::Pod, &request).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    assert_eq!(replies(&programs, "echo_reply"), 1);
    // What OVN's router sends back: built independently here, with full checksums.
    let mut expected = icmp((POD_MAC, ROUTER_MAC), 254, (GATEWAY, POD_IP), 0);
    // The reply keeps the request's IP id and fragment bits.
    expected[18..20].copy_from_slice(&request[18..20]);
    expected[24..26].copy_from_slice(&[0, 0]);
    let ip_sum = checksum(&expected[14..34]);
    expected[24..26].copy_from_slice(&ip_sum.to_be_bytes());
    assert_eq!(outcome.frame, expected);
    assert_eq!(checksum(&outcome.frame[34..]), 0, "ICMP checksum valid");
    assert_eq!(checksum(&outcome.frame[14..34]), 0, "IP checksum valid");
}

#[test]
fn a_packet_expiring_at_the_router_gets_icmp_time_exceeded() {
    let programs = programs();
    // DSCP-marked: the error's TOS is still 0, as pinctrl's.
    let mut expiring = icmp((ROUTER_MAC, POD_MAC), 1, (POD_IP, [10, 0, 2, 5]), 8);
    expiring[15] = 0x28;
    expiring[24..26].copy_from_slice(&[0, 0]);
    let ip_sum = checksum(&expiring[14..34]);
    expiring[24..26].copy_from_slice(&ip_sum.to_be_bytes());
    let outcome = programs.test_run(Hook::Pod, &expiring).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    assert_eq!(replies(&programs, "time_exceeded"), 1);
    // Built independently: from the router port's address, TTL 254, TOS 0 and DF as OVN's, quoting the
    // expired packet's IPv4 header and its first 8 bytes.
    let mut icmp = vec![11, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&expiring[14..42]);
    let icmp_sum = checksum(&icmp);
    icmp[2..4].copy_from_slice(&icmp_sum.to_be_bytes());
    let mut ip = vec![0x45, 0, 0, 56, 0, 0, 0x40, 0, 254, 1, 0, 0];
    ip.extend_from_slice(&GATEWAY);
    ip.extend_from_slice(&POD_IP);
    let ip_sum = checksum(&ip);
    ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    let mut expected = POD_MAC.to_vec();
    expected.extend_from_slice(&ROUTER_MAC);
    expected.extend_from_slice(&[0x08, 0x00]);
    expected.extend_from_slice(&ip);
    expected.extend_from_slice(&icmp);
    assert_eq!(outcome.frame, expected);
}

#[test]
fn other_traffic_to_the_router_is_dropped_and_counted_by_reason() {
    let programs = programs();
    let drops = |reason: &str| {
        programs
            .drop_counters()
            .unwrap()
            .into_iter()
            .find(|(name, _)| *name == reason)
            .unwrap()
            .1
    };
    let replies_before = programs.router_replies().unwrap();
    for (what, frame, reason) in [
        (
            "a ping to an address without echo",
            icmp((ROUTER_MAC, POD_MAC), 64, (POD_IP, SILENT), 8),
            "to_router_unhandled",
        ),
        (
            "SCTP (OVN aborts it; not built)",
            ipv4(
                (ROUTER_MAC, POD_MAC),
                64,
                (POD_IP, GATEWAY),
                132,
                0x4000,
                &[0; 12],
            ),
            "to_router_unhandled",
        ),
        (
            "the first fragment of a ping (OVN answers it; not built)",
            ipv4(
                (ROUTER_MAC, POD_MAC),
                64,
                (POD_IP, GATEWAY),
                1,
                0x2000,
                &[8, 0, 0xf7, 0xff, 0, 0, 0, 0],
            ),
            "to_router_unhandled",
        ),
        (
            "a later fragment of UDP",
            ipv4(
                (ROUTER_MAC, POD_MAC),
                64,
                (POD_IP, GATEWAY),
                17,
                0x0010,
                &[0; 16],
            ),
            "to_router_unhandled",
        ),
        (
            "UDP to an address without answers",
            ipv4(
                (ROUTER_MAC, POD_MAC),
                64,
                (POD_IP, SILENT),
                17,
                0x4000,
                &udp(9, b"x"),
            ),
            "to_router_unhandled",
        ),
        (
            "a ping to an address the router has no route to",
            icmp((ROUTER_MAC, POD_MAC), 64, (POD_IP, [10, 0, 2, 5]), 8),
            "no_route",
        ),
    ] {
        let before = drops(reason);
        let outcome = programs.test_run(Hook::Pod, &frame).unwrap();
        assert_eq!(outcome.verdict, TC_ACT_SHOT, "{what}");
        assert_eq!(drops(reason), before + 1, "{what}");
    }
    assert_eq!(
        programs.router_replies().unwrap(),
        replies_before,
        "no answer counted"
    );
    // IPv6 behind the router's MAC to a destination it has no IPv6 route to is dropped and
    // counted rather than handed to the node, and so is a frame that says IPv6 but is not. ARP the responder did not answer (a reply) is consumed,
    // as OVN's router consumes it. Other protocols go on.
    let mut ipv6 = vec![0; 14 + 40 + 8];
    ipv6[..6].copy_from_slice(&ROUTER_MAC);
    ipv6[6..12].copy_from_slice(&POD_MAC);
    ipv6[12..14].copy_from_slice(&[0x86, 0xdd]);
    // Version 6, 8 bytes of UDP, hop limit 64, fe80::1 → 2001:db8::1.
    ipv6[14..22].copy_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
    ipv6[22..24].copy_from_slice(&[0xfe, 0x80]);
    ipv6[37] = 1;
    ipv6[38..40].copy_from_slice(&[0x20, 0x01]);
    ipv6[40..42].copy_from_slice(&[0x0d, 0xb8]);
    ipv6[53] = 1;
    ipv6[54..62].copy_from_slice(&[0x9c, 0x40, 0, 53, 0, 8, 0, 0]);
    let mut not_ipv6 = icmp((ROUTER_MAC, POD_MAC), 64, (POD_IP, GATEWAY), 8);
    not_ipv6[12..14].copy_from_slice(&[0x86, 0xdd]);
    let mut arp_reply = icmp((ROUTER_MAC, POD_MAC), 64, (POD_IP, GATEWAY), 8);
    arp_reply[12..14].copy_from_slice(&[0x08, 0x06]);
    for (what, frame, reason) in [
        ("IPv6 without a route", ipv6, "no_route"),
        ("IPv4 labelled IPv6", not_ipv6, "routed_malformed"),
        ("ARP", arp_reply, "arp_to_router"),
    ] {
        let before = drops(reason);
        let outcome = programs.test_run(Hook::Pod, &frame).unwrap();
        assert_eq!(outcome.verdict, TC_ACT_SHOT, "{what}");
        assert_eq!(drops(reason), before + 1, "{what}");
    }
    let mut other = icmp((ROUTER_MAC, POD_MAC), 64, (POD_IP, GATEWAY), 8);
    other[12..14].copy_from_slice(&[0x88, 0xb5]);
    let outcome = programs.test_run(Hook::Pod, &other).unwrap();
    assert_eq!((outcome.verdict, outcome.frame), (TCX_NEXT, other));
}

#[test]
fn tcp_to_the_router_gets_the_reset_ovn_builds() {
    let programs = programs();
    let syn = ipv4(
        (ROUTER_MAC, POD_MAC),
        64,
        (POD_IP, GATEWAY),
        6,
        0x4000,
        &tcp((POD_IP, GATEWAY), 22, 0x1122_3344, 0x02),
    );
    let outcome = programs.test_run(Hook::Pod, &syn).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    assert_eq!(replies(&programs, "tcp_reset"), 1);
    // pinctrl's reset: ports swapped, sequence 0, ack = the SYN's sequence + 1, RST|ACK, a
    // 20-byte header, window 0; IPv4 TTL 63 routed back to 62, ID 0, DF.
    let mut reset = 22_u16.to_be_bytes().to_vec();
    reset.extend_from_slice(&40000_u16.to_be_bytes());
    reset.extend_from_slice(&[
        0, 0, 0, 0, 0x11, 0x22, 0x33, 0x45, 0x50, 0x14, 0, 0, 0, 0, 0, 0,
    ]);
    let sum = transport_checksum((GATEWAY, POD_IP), 6, &reset);
    reset[16..18].copy_from_slice(&sum.to_be_bytes());
    let mut expected = ipv4(
        (POD_MAC, ROUTER_MAC),
        62,
        (GATEWAY, POD_IP),
        6,
        0x4000,
        &reset,
    );
    expected[18..20].copy_from_slice(&[0, 0]);
    expected[24..26].copy_from_slice(&[0, 0]);
    let ip_sum = checksum(&expected[14..34]);
    expected[24..26].copy_from_slice(&ip_sum.to_be_bytes());
    assert_eq!(outcome.frame, expected);
    assert_eq!(
        transport_checksum((GATEWAY, POD_IP), 6, &outcome.frame[34..]),
        0,
        "TCP checksum valid"
    );
}

#[test]
fn udp_and_other_protocols_to_the_router_get_the_unreachables_ovn_builds() {
    let programs = programs();
    let long: Vec<u8> = (0..1000_u32).map(|i| (i * 7 % 251) as u8).collect();
    let kinds = ["port_unreachable", "protocol_unreachable"];
    let before = kinds.map(|kind| replies(&programs, kind));
    for (what, datagram_payload, protocol, code) in [
        ("UDP", udp(161, b"hello-router"), 17, 3),
        ("UDP of odd length", udp(53, b"odd-length-13"), 17, 3),
        ("UDP longer than the quote", udp(161, &long), 17, 3),
        ("GRE", vec![0, 0, 0x08, 0, 1, 2, 3, 4], 47, 2),
        (
            "an ICMP echo reply",
            vec![0, 0, 0xff, 0xfe, 0, 1, 0, 1],
            1,
            2,
        ),
    ] {
        let request = ipv4(
            (ROUTER_MAC, POD_MAC),
            64,
            (POD_IP, GATEWAY),
            protocol,
            0x4000,
            &datagram_payload,
        );
        let outcome = programs.test_run(Hook::Pod, &request).unwrap();
        assert_eq!(outcome.verdict, TC_ACT_REDIRECT, "{what}");
        assert_eq!(outcome.frame, unreachable(code, &request[14..]), "{what}");
        assert!(outcome.frame.len() <= 576, "{what}");
        assert_eq!(checksum(&outcome.frame[34..]), 0, "{what}: ICMP checksum");
    }
    // A datagram whose checksum the sender's stack left to offload (only the pseudo-header seed
    // in place): quoted with the checksum completed, as OVN's kernel datapath completes it.
    let mut offloaded = udp(161, b"offloaded");
    let length = offloaded.len() as u16;
    let pseudo = !checksum(&[&POD_IP[..], &GATEWAY[..], &[0, 17], &length.to_be_bytes()].concat());
    offloaded[6..8].copy_from_slice(&pseudo.to_be_bytes());
    let request = ipv4(
        (ROUTER_MAC, POD_MAC),
        64,
        (POD_IP, GATEWAY),
        17,
        0x4000,
        &offloaded,
    );
    let mut complete = offloaded.clone();
    complete[6..8].fill(0);
    let full = transport_checksum((POD_IP, GATEWAY), 17, &complete);
    complete[6..8].copy_from_slice(&full.to_be_bytes());
    let as_completed = ipv4(
        (ROUTER_MAC, POD_MAC),
        64,
        (POD_IP, GATEWAY),
        17,
        0x4000,
        &complete,
    );
    let outcome = programs.test_run(Hook::Pod, &request).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    assert_eq!(outcome.frame, unreachable(3, &as_completed[14..]));
    // A short datagram in a padded frame: only the datagram is quoted.
    let short = ipv4(
        (ROUTER_MAC, POD_MAC),
        64,
        (POD_IP, GATEWAY),
        17,
        0x4000,
        &udp(7, b"hi"),
    );
    let mut padded = short.clone();
    padded.resize(60, 0xee);
    let outcome = programs.test_run(Hook::Pod, &padded).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    assert_eq!(outcome.frame, unreachable(3, &short[14..]));
    // Five UDP datagrams, two other protocols.
    assert_eq!(
        kinds.map(|kind| replies(&programs, kind)),
        [before[0] + 5, before[1] + 2]
    );
}

const POD_IP6: [u8; 16] = [0xfd, 0, 0, 0x10, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const GATEWAY6: [u8; 16] = [0xfd, 0, 0, 0x10, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// A destination in another subnet, through the router.
const FAR6: [u8; 16] = [0xfd, 0, 0, 0x10, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];

/// [`programs`] with the router's IPv6 side: its address `GATEWAY6` answering everything, the
/// pod as a known neighbour, and time exceeded for senders in `fd00:10:1::/64` entering
/// through the port with `ROUTER_MAC`.
fn programs6() -> KernelPrograms {
    use ovnbpf_common::maps::{Neighbours6, RouterAddresses6, TimeExceeded6};
    use ovnbpf_common::{
        Ipv6Key, Neighbour, TIME_EXCEEDED6_KEY_PREFIX_BITS, TimeExceeded6Key, TimeExceeded6Source,
    };
    let mut programs = programs();
    let answers = ROUTER_ADDRESS_ECHO
        | ROUTER_ADDRESS_TCP_RESET
        | ROUTER_ADDRESS_PORT_UNREACHABLE
        | ROUTER_ADDRESS_PROTOCOL_UNREACHABLE;
    let key = |ip| Ipv6Key {
        datapath: ROUTER,
        ip,
    };
    programs
        .set::<RouterAddresses6>(key(GATEWAY6), RouterAddress { flags: answers })
        .unwrap();
    programs
        .set::<Neighbours6>(
            key(POD_IP6),
            Neighbour {
                mac: POD_MAC,
                reserved: [0; 2],
            },
        )
        .unwrap();
    let mut network = [0_u8; 16];
    network[..8].copy_from_slice(&POD_IP6[..8]);
    programs
        .set::<TimeExceeded6>(
            (
                TimeExceeded6Key {
                    router: ROUTER.to_be(),
                    mac: ROUTER_MAC,
                    padding: [0; 2],
                    source: network,
                },
                TIME_EXCEEDED6_KEY_PREFIX_BITS + 64,
            ),
            TimeExceeded6Source { address: GATEWAY6 },
        )
        .unwrap();
    programs
}

/// Ethernet + IPv6 (`class_flow`: the version, traffic class and flow label word) around
/// `payload` of `next_header`.
fn ipv6(
    eth: ([u8; 6], [u8; 6]),
    (class_flow, hop_limit): (u32, u8),
    (source, destination): ([u8; 16], [u8; 16]),
    next_header: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut frame = eth.0.to_vec();
    frame.extend_from_slice(&eth.1);
    frame.extend_from_slice(&[0x86, 0xdd]);
    frame.extend_from_slice(&class_flow.to_be_bytes());
    frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    frame.extend_from_slice(&[next_header, hop_limit]);
    frame.extend_from_slice(&source);
    frame.extend_from_slice(&destination);
    frame.extend_from_slice(payload);
    frame
}

/// `message` of `next_header` from `source` to `destination` with its checksum (at
/// `checksum_at`) computed over the IPv6 pseudo header.
fn checksummed6(
    (source, destination): ([u8; 16], [u8; 16]),
    next_header: u8,
    mut message: Vec<u8>,
    checksum_at: usize,
) -> Vec<u8> {
    let mut covered = source.to_vec();
    covered.extend_from_slice(&destination);
    covered.extend_from_slice(&(message.len() as u32).to_be_bytes());
    covered.extend_from_slice(&[0, 0, 0, next_header]);
    covered.extend_from_slice(&message);
    let sum = checksum(&covered);
    message[checksum_at..checksum_at + 2].copy_from_slice(&sum.to_be_bytes());
    message
}

/// An ICMPv6 echo request of `size` payload bytes, checksummed.
fn echo6(addresses: ([u8; 16], [u8; 16]), size: usize) -> Vec<u8> {
    let mut message = vec![128, 0, 0, 0, 0x12, 0x34, 0, 1];
    message.extend((0..size).map(|i| i as u8));
    checksummed6(addresses, 58, message, 2)
}

/// What the router's pinctrl sends back for `offending` (an IPv6 frame): ICMPv6 `kind`/`code`
/// from `source`, hop limit `hop_limit`, the offending packet's class and flow label, quoting it
/// up to a 1280-byte answer (Ethernet counted).
fn icmp6_error(
    offending: &[u8],
    source: [u8; 16],
    (kind, code, hop_limit): (u8, u8, u8),
) -> Vec<u8> {
    let packet = &offending[14..];
    let quoted = &packet[..packet.len().min(1280 - 14 - 40 - 8)];
    let mut message = vec![kind, code, 0, 0, 0, 0, 0, 0];
    message.extend_from_slice(quoted);
    let message = checksummed6((source, POD_IP6), 58, message, 2);
    let class_flow = u32::from_be_bytes([packet[0], packet[1], packet[2], packet[3]]);
    ipv6(
        (POD_MAC, ROUTER_MAC),
        (class_flow, hop_limit),
        (source, POD_IP6),
        58,
        &message,
    )
}

#[test]
fn ipv6_expiring_at_the_router_gets_ovns_icmpv6_time_exceeded_byte_for_byte() {
    let programs = programs6();
    // Traffic class 0x28 and a flow label: the answer carries both, as pinctrl's.
    let class_flow = 0x6280_abcd;
    for (size, what) in [(56, "whole"), (1400, "cut at 1218 bytes")] {
        let expiring = ipv6(
            (ROUTER_MAC, POD_MAC),
            (class_flow, 1),
            (POD_IP6, FAR6),
            58,
            &echo6((POD_IP6, FAR6), size),
        );
        let outcome = programs.test_run(Hook::Pod, &expiring).unwrap();
        assert_eq!(outcome.verdict, TC_ACT_REDIRECT, "{what}");
        assert_eq!(
            outcome.frame,
            icmp6_error(&expiring, GATEWAY6, (3, 0, 254)),
            "the quote {what}"
        );
    }
    assert_eq!(replies(&programs, "time_exceeded"), 2);
    // A sender outside the port's networks gets none: dropped as expired.
    let stranger = [0xfd, 0, 0, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
    let expiring = ipv6(
        (ROUTER_MAC, POD_MAC),
        (class_flow, 1),
        (stranger, FAR6),
        58,
        &echo6((stranger, FAR6), 56),
    );
    let outcome = programs.test_run(Hook::Pod, &expiring).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_SHOT);
    assert_eq!(replies(&programs, "time_exceeded"), 2);
}

#[test]
fn tcp_and_udp_to_the_routers_ipv6_address_get_the_answers_ovn_builds() {
    let programs = programs6();
    let class_flow = 0x6280_abcd;
    // TCP: RST|ACK from the router's address, seq 0, ack = seq + 1, hop limit 63 routed back
    // to 62, class and flow label 0.
    let mut segment = vec![
        0x9c, 0x40, 0, 80, 0, 0, 0x10, 0, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff,
    ];
    segment.extend_from_slice(&[0, 0, 0, 0]);
    let segment = checksummed6((POD_IP6, GATEWAY6), 6, segment, 16);
    let syn = ipv6(
        (ROUTER_MAC, POD_MAC),
        (class_flow, 64),
        (POD_IP6, GATEWAY6),
        6,
        &segment,
    );
    let outcome = programs.test_run(Hook::Pod, &syn).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    let mut reset = vec![
        0, 80, 0x9c, 0x40, 0, 0, 0, 0, 0, 0, 0x10, 1, 0x50, 0x14, 0, 0,
    ];
    reset.extend_from_slice(&[0, 0, 0, 0]);
    let reset = checksummed6((GATEWAY6, POD_IP6), 6, reset, 16);
    let expected = ipv6(
        (POD_MAC, ROUTER_MAC),
        (0x6000_0000, 62),
        (GATEWAY6, POD_IP6),
        6,
        &reset,
    );
    assert_eq!(outcome.frame, expected);
    assert_eq!(replies(&programs, "tcp_reset"), 1);
    // UDP: ICMPv6 port unreachable (code 4), hop limit 255 routed back to 254, quoting.
    let datagram = checksummed6(
        (POD_IP6, GATEWAY6),
        17,
        vec![0x9c, 0x40, 0, 53, 0, 12, 0, 0, b'o', b'v', b'n', b'!'],
        6,
    );
    let query = ipv6(
        (ROUTER_MAC, POD_MAC),
        (class_flow, 64),
        (POD_IP6, GATEWAY6),
        17,
        &datagram,
    );
    let outcome = programs.test_run(Hook::Pod, &query).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    assert_eq!(outcome.frame, icmp6_error(&query, GATEWAY6, (1, 4, 254)));
    assert_eq!(replies(&programs, "port_unreachable"), 1);
}

/// The advertisement (checksum 0) of Kube-OVN's default `ipv6_ra_configs` for a port with
/// `ROUTER_MAC` and prefix `fd00:10:1::/64` (M set, the prefix on-link only), with `extra`
/// bytes of options after the link-layer one (an MTU option: 5 1 0 0 and 1400).
fn advertisement(mtu: bool) -> Vec<u8> {
    let mut message = vec![
        0x86, 0, 0, 0, 0xff, 0x80, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    message.extend([1, 1]);
    message.extend(ROUTER_MAC);
    if mtu {
        message.extend([5, 1, 0, 0, 0, 0, 0x05, 0x78]);
    }
    message.extend([
        3, 4, 64, 0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0,
    ]);
    let mut prefix = [0_u8; 16];
    prefix[..8].copy_from_slice(&POD_IP6[..8]);
    message.extend(prefix);
    message
}

/// Switch 5's router port advertises `message`.
fn advertise(programs: &mut KernelPrograms, message: &[u8]) {
    use ovnbpf_common::{RouterAdvert, maps::RouterAdverts};
    let mut advert = RouterAdvert {
        mac: ROUTER_MAC,
        length: message.len() as u16,
        ..RouterAdvert::default()
    };
    advert.message[..message.len()].copy_from_slice(message);
    // The sum the kernel completes with the destination: message, source, length, 58.
    let mut covered = message.to_vec();
    covered.extend(link_local(ROUTER_MAC));
    let mut sum: u32 = covered
        .chunks(2)
        .map(|pair| u32::from(pair[0]) << 8 | u32::from(pair[1]))
        .sum();
    sum += message.len() as u32 + 58;
    advert.partial_sum = (sum & 0xffff) + (sum >> 16);
    programs.set::<RouterAdverts>(5, advert).unwrap();
}

/// A router solicitation from `source` (with a source link-layer option unless from `::`),
/// hop limit `hop_limit`, to `ff02::2`.
fn solicitation(source: [u8; 16], hop_limit: u8, class_flow: u32) -> Vec<u8> {
    let mut all_routers = [0_u8; 16];
    all_routers[0] = 0xff;
    all_routers[1] = 2;
    all_routers[15] = 2;
    let mut message = vec![133, 0, 0, 0, 0, 0, 0, 0];
    if source != [0; 16] {
        message.extend([1, 1]);
        message.extend(POD_MAC);
    }
    let message = checksummed6((source, all_routers), 58, message, 2);
    ipv6(
        ([0x33, 0x33, 0, 0, 0, 2], POD_MAC),
        (class_flow, hop_limit),
        (source, all_routers),
        58,
        &message,
    )
}

#[test]
fn a_router_solicitation_gets_the_ports_advertisement_byte_for_byte() {
    let mut programs = programs6();
    let pod_link_local = link_local(POD_MAC);
    let class_flow = 0x6280_abcd;
    for mtu in [false, true] {
        let message = advertisement(mtu);
        advertise(&mut programs, &message);
        let outcome = programs
            .test_run(Hook::Pod, &solicitation(pod_link_local, 255, class_flow))
            .unwrap();
        assert_eq!(outcome.verdict, TC_ACT_REDIRECT, "mtu option: {mtu}");
        let source = link_local(ROUTER_MAC);
        let expected = ipv6(
            (POD_MAC, ROUTER_MAC),
            (class_flow, 255),
            (source, pod_link_local),
            58,
            &checksummed6((source, pod_link_local), 58, message, 2),
        );
        assert_eq!(outcome.frame, expected, "mtu option: {mtu}");
    }
    assert_eq!(replies(&programs, "router_advertisement"), 2);
    // From the unspecified address: to all nodes.
    let outcome = programs
        .test_run(Hook::Pod, &solicitation([0; 16], 255, 0x6000_0000))
        .unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    let mut all_nodes = [0_u8; 16];
    all_nodes[0] = 0xff;
    all_nodes[1] = 2;
    all_nodes[15] = 1;
    assert_eq!(&outcome.frame[..6], &POD_MAC);
    assert_eq!(&outcome.frame[38..54], &all_nodes);
    let message = advertisement(true);
    let source = link_local(ROUTER_MAC);
    assert_eq!(
        &outcome.frame[54..],
        &checksummed6((source, all_nodes), 58, message, 2)[..]
    );
    assert_eq!(replies(&programs, "router_advertisement"), 3);
    // A hop limit below 255 is no solicitation to OVN (`nd_rs`): not answered, it goes on as
    // multicast does (this switch has no flood group: on, untouched).
    let outcome = programs
        .test_run(Hook::Pod, &solicitation(pod_link_local, 254, class_flow))
        .unwrap();
    assert_eq!(outcome.verdict, TCX_NEXT);
    // A switch whose router port does not advertise: the same.
    use ovnbpf_common::maps::RouterAdverts;
    programs.remove::<RouterAdverts>(5).unwrap();
    let outcome = programs
        .test_run(Hook::Pod, &solicitation(pod_link_local, 255, class_flow))
        .unwrap();
    assert_eq!(outcome.verdict, TCX_NEXT);
    assert_eq!(replies(&programs, "router_advertisement"), 3);
}
