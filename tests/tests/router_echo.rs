//! The kernel's answers for a router's own addresses under BPF_PROG_TEST_RUN: a pod's ICMP echo
//! request to its gateway (the router port's MAC and address) comes back as the reply OVN's
//! `lr_in_ip_input` builds (MACs and addresses swapped, TTL 255, type 0, valid checksums), out
//! of the same veth. A packet whose TTL expires there gets ICMP time exceeded from the router
//! port's address. Other traffic to the router's addresses is dropped and counted; other IPv4
//! to the router's MAC is routed; what the router cannot route is dropped and counted. Non-IPv4 passes untouched.

mod common;

use ovnbpf_agent::dataplane::ebpf::{Hook, KernelPrograms, l3::L3Maps};
use ovnbpf_common::{
    FIB_ROUTER, FibEntry, FibKey, NeighbourKey, PodPort, ROUTER_ADDRESS_ECHO, ROUTER_FORWARDS,
    RouterAddress, RouterInfo,
};
use ovnbpf_tests::{icmp::checksum, require_root};

const TCX_NEXT: i32 = -1;
const TC_ACT_SHOT: i32 = 2;
const TC_ACT_REDIRECT: i32 = 7;
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
        .set_fib_entry(
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
        .set_router(
            ROUTER,
            RouterInfo {
                flags: ROUTER_FORWARDS,
            },
        )
        .unwrap();
    for (ip, flags) in [(GATEWAY, ROUTER_ADDRESS_ECHO), (SILENT, 0)] {
        programs
            .set_router_address(
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
    // What OVN's router sends back: built independently here, with full checksums.
    let mut expected = icmp((POD_MAC, ROUTER_MAC), 255, (GATEWAY, POD_IP), 0);
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
    let expiring = icmp((ROUTER_MAC, POD_MAC), 1, (POD_IP, [10, 0, 2, 5]), 8);
    let outcome = programs.test_run(Hook::Pod, &expiring).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    // Built independently: from the router port's address, TTL 254 and DF as OVN's, quoting the
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
    for (what, frame, reason) in [
        (
            "a ping to an address without echo",
            icmp((ROUTER_MAC, POD_MAC), 64, (POD_IP, SILENT), 8),
            "to_router_unhandled",
        ),
        (
            "an echo reply",
            icmp((ROUTER_MAC, POD_MAC), 64, (POD_IP, GATEWAY), 0),
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
    // Not IPv4 (an IPv6 header behind the router's MAC): untouched.
    let mut ipv6 = icmp((ROUTER_MAC, POD_MAC), 64, (POD_IP, GATEWAY), 8);
    ipv6[12..14].copy_from_slice(&[0x86, 0xdd]);
    let outcome = programs.test_run(Hook::Pod, &ipv6).unwrap();
    assert_eq!(outcome.verdict, TCX_NEXT);
    assert_eq!(outcome.frame, ipv6);
}
