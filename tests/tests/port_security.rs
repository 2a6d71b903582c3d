//! Kernel port security under BPF_PROG_TEST_RUN. Ingress: a pod with port security "MAC IP" may
//! send IPv4 from its address, ARP as itself and DHCP discovery from 0.0.0.0; a spoofed source
//! MAC, IPv4 source or ARP sender is dropped, counted (per reason and on the interface) and
//! reported on the drop-event ring buffer. Ports without port security are not checked. Egress:
//! a pod with port security receives only frames to its MAC (or multicast) and IPv4 to its
//! address, broadcast or multicast; the rest is dropped and counted `egress_port_security`.
//! IPv6, as ovn-trace's `check_in_port_sec`/`check_out_port_sec` judge it: a dual-stack pod
//! sends from its IPv6 address or its link-local one, its neighbour discovery naming its own
//! MAC (or none) and, in advertisements, its own addresses; it receives IPv6 to them or to
//! multicast. A pod listing only IPv4 sends IPv6 from its link-local address only and
//! receives none; one listing only IPv6 sends no IPv4 but DHCP discovery and receives none;
//! with IPv6 listed, duplicate address detection and MLD reports from `::` pass (as
//! ovn-controller admits them);
//! ARP must name the pod's MAC even without addresses.

mod common;

use ovnbpf_agent::dataplane::ebpf::Maps;
use ovnbpf_agent::dataplane::ebpf::{Hook, KernelPrograms, events::DropReport};
use ovnbpf_common::maps::{L2Fib, PortSecurity6Map, PortSecurityMap};
use ovnbpf_common::{
    FIB_LOCAL, FibEntry, FibKey, LOCAL_PORT_EGRESS_SECURITY, LOCAL_PORT_VETH_PEER,
    PORT_SECURITY_IPV4, PORT_SECURITY_IPV6, PodPort, PortSecurity, PortSecurity6, drop_reason,
};
use ovnbpf_tests::frames::verdict::{TC_ACT_REDIRECT, TC_ACT_SHOT, TCX_NEXT};
use ovnbpf_tests::require_root;

const MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0, 1, 2];
const IP: [u8; 4] = [10, 0, 1, 2];
const SPOOFED_MAC: [u8; 6] = [0x0a, 0x58, 0xde, 0xad, 0xbe, 0xef];

fn programs(secured: bool) -> KernelPrograms {
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
    if secured {
        programs.set::<PortSecurityMap>(1, mac_and_ip()).unwrap();
    }
    programs
}

/// Port security "MAC IP".
fn mac_and_ip() -> PortSecurity {
    let mut ips = [0; 4];
    ips[0] = u32::from_ne_bytes(IP);
    PortSecurity {
        mac: MAC,
        ip_count: 1,
        flags: PORT_SECURITY_IPV4,
        ips,
    }
}

/// Ethernet + IPv4 (no options) + UDP with 4 bytes of payload.
fn udp(eth_source: [u8; 6], source: [u8; 4], destination: [u8; 4], ports: (u16, u16)) -> Vec<u8> {
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&eth_source);
    frame.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    frame.extend_from_slice(&source);
    frame.extend_from_slice(&destination);
    frame.extend_from_slice(&ports.0.to_be_bytes());
    frame.extend_from_slice(&ports.1.to_be_bytes());
    frame.extend_from_slice(&[0, 12, 0, 0, 1, 2, 3, 4]);
    frame
}

fn arp_request(sender_mac: [u8; 6], sender_ip: [u8; 4]) -> Vec<u8> {
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&MAC);
    frame.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    frame.extend_from_slice(&sender_mac);
    frame.extend_from_slice(&sender_ip);
    frame.extend_from_slice(&[0; 6]);
    frame.extend_from_slice(&[10, 0, 1, 99]);
    frame
}

fn drops(programs: &KernelPrograms) -> u64 {
    drops_of(programs, "port_security")
}

fn drops_of(programs: &KernelPrograms, reason: &str) -> u64 {
    programs
        .drop_counters()
        .unwrap()
        .into_iter()
        .find(|(name, _)| *name == reason)
        .map(|(_, count)| count)
        .unwrap()
}

#[test]
fn spoofed_frames_are_dropped_counted_and_reported() {
    let mut programs = programs(true);
    let mut events = programs.take_drop_events().unwrap();
    let other = [10, 0, 1, 3];
    for (what, frame) in [
        (
            "spoofed source MAC",
            udp(SPOOFED_MAC, IP, other, (5000, 53)),
        ),
        (
            "spoofed IPv4 source",
            udp(MAC, [10, 0, 1, 66], other, (5000, 53)),
        ),
        (
            "ARP with a spoofed sender IP",
            arp_request(MAC, [10, 0, 1, 66]),
        ),
        (
            "ARP with a spoofed sender MAC",
            arp_request(SPOOFED_MAC, IP),
        ),
        (
            "DHCP-shaped but to another port",
            udp(MAC, [0; 4], [255; 4], (68, 68)),
        ),
    ] {
        let before = drops(&programs);
        let interface_before = programs.interface_counters(1).unwrap().unwrap_or_default();
        let outcome = programs.test_run(Hook::Pod, &frame).unwrap();
        assert_eq!(outcome.verdict, TC_ACT_SHOT, "{what}");
        assert_eq!(drops(&programs), before + 1, "{what}");
        let interface = programs
            .interface_counters(1)
            .unwrap()
            .unwrap()
            .since(interface_before);
        assert_eq!((interface.packets, interface.dropped), (1, 1), "{what}");
        // One event on the ring buffer, carrying the frame's start.
        let reported = events.drain();
        assert_eq!(reported.len(), 1, "{what}: {reported:?}");
        let event = reported[0];
        assert_eq!(event.reason, drop_reason::PORT_SECURITY.0, "{what}");
        assert_eq!(event.length as usize, frame.len(), "{what}");
        let captured = event.captured as usize;
        assert!(captured >= 14, "{what}: {captured}");
        assert_eq!(&event.header[..captured], &frame[..captured], "{what}");
        let report = DropReport::decode(&event);
        assert_eq!(
            report.source_mac,
            Some(frame[6..12].try_into().unwrap()),
            "{what}"
        );
    }
}

#[test]
fn allowed_frames_and_unsecured_ports_pass() {
    let secured = programs(true);
    let unsecured = programs(false);
    for (what, frame) in [
        ("its own address", udp(MAC, IP, [10, 0, 1, 3], (5000, 53))),
        ("DHCP discovery", udp(MAC, [0; 4], [255; 4], (68, 67))),
        ("ARP as itself", arp_request(MAC, IP)),
    ] {
        let outcome = secured.test_run(Hook::Pod, &frame).unwrap();
        assert_eq!(
            (outcome.verdict, &outcome.frame),
            (TCX_NEXT, &frame),
            "{what}"
        );
    }
    let spoofed = udp(SPOOFED_MAC, [10, 0, 1, 66], [10, 0, 1, 3], (5000, 53));
    let outcome = unsecured.test_run(Hook::Pod, &spoofed).unwrap();
    assert_eq!(outcome.verdict, TCX_NEXT, "no port security, no check");
}

/// Sends `frame` from pod 1: `delivered` to the local pod it is for, or dropped and counted
/// `egress_port_security`.
fn delivered_or_dropped(programs: &KernelPrograms, what: &str, frame: &[u8], delivered: bool) {
    let before = drops_of(programs, "egress_port_security");
    let outcome = programs.test_run(Hook::Pod, frame).unwrap();
    let dropped = drops_of(programs, "egress_port_security") - before;
    if delivered {
        assert_eq!((outcome.verdict, dropped), (TC_ACT_REDIRECT, 0), "{what}");
    } else {
        assert_eq!((outcome.verdict, dropped), (TC_ACT_SHOT, 1), "{what}");
    }
}

/// The pod on ifindex 1 sends to a pod on this node (host veth 40) with port security "MAC IP"
/// (the receiving pod's MAC is also in the FIB under `OTHER_MAC`, as a stale entry would be).
#[test]
fn egress_port_security_drops_what_the_receiving_port_does_not_list() {
    const RECEIVER: u32 = 40;
    const OTHER_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0, 1, 9];
    let mut programs = programs(false);
    programs
        .set::<PortSecurityMap>(RECEIVER, mac_and_ip())
        .unwrap();
    for mac in [MAC, OTHER_MAC] {
        let key = FibKey {
            datapath: 5,
            mac,
            padding: [0; 2],
        };
        let entry = FibEntry {
            kind: FIB_LOCAL,
            ifindex: RECEIVER,
            flags: LOCAL_PORT_VETH_PEER | LOCAL_PORT_EGRESS_SECURITY,
            ..FibEntry::default()
        };
        programs.set::<L2Fib>(key, entry).unwrap();
    }
    let to = |mac: [u8; 6], destination: [u8; 4]| {
        let mut frame = udp(SPOOFED_MAC, [10, 0, 1, 3], destination, (5000, 53));
        frame[..6].copy_from_slice(&mac);
        frame
    };
    for (what, frame, delivered) in [
        ("to its MAC and address", to(MAC, IP), true),
        ("to its MAC, IPv4 broadcast", to(MAC, [255; 4]), true),
        (
            "to its MAC, IPv4 multicast",
            to(MAC, [224, 0, 0, 251]),
            true,
        ),
        (
            "to its MAC, another address",
            to(MAC, [10, 0, 1, 66]),
            false,
        ),
        ("to another MAC it does not list", to(OTHER_MAC, IP), false),
    ] {
        delivered_or_dropped(&programs, what, &frame, delivered);
    }
    // Without the flag (a port with no port security) nothing is checked.
    let key = FibKey {
        datapath: 5,
        mac: OTHER_MAC,
        padding: [0; 2],
    };
    let unchecked = FibEntry {
        kind: FIB_LOCAL,
        ifindex: RECEIVER,
        flags: LOCAL_PORT_VETH_PEER,
        ..FibEntry::default()
    };
    programs.set::<L2Fib>(key, unchecked).unwrap();
    let outcome = programs
        .test_run(Hook::Pod, &to(OTHER_MAC, [10, 0, 1, 66]))
        .unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
}

const IP6: [u8; 16] = [0xfd, 0, 0x10, 0x16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const OTHER_IP6: [u8; 16] = [0xfd, 0, 0x10, 0x16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3];
const SPOOFED_IP6: [u8; 16] = [0xfd, 0, 0x10, 0x16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x66];
const LINK_LOCAL: [u8; 16] = ovnbpf_common::ipv6::link_local(MAC);
/// A unicast MAC the frames are sent to (no FIB entry: allowed frames are passed on).
const PEER_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0, 1, 3];
const ICMPV6: u8 = 58;

/// Port security of `flags` with IPv4 `IP` (when listed) and IPv6 `IP6` (when listed), on
/// ifindex `ifindex`.
fn secure(programs: &mut KernelPrograms, ifindex: u32, flags: u8) {
    let mut security = PortSecurity {
        mac: MAC,
        flags,
        ..PortSecurity::default()
    };
    if flags & PORT_SECURITY_IPV4 != 0 {
        security.ips[0] = u32::from_ne_bytes(IP);
        security.ip_count = 1;
    }
    programs.set::<PortSecurityMap>(ifindex, security).unwrap();
    if flags & PORT_SECURITY_IPV6 != 0 {
        let mut security6 = PortSecurity6::default();
        security6.ips[0] = IP6;
        security6.ip_count = 1;
        programs
            .set::<PortSecurity6Map>(ifindex, security6)
            .unwrap();
    }
}

/// Ethernet (`eth_source` → `eth_destination`) + IPv6 (`source` → `destination`, hop limit
/// 255) + `payload` of protocol `next_header`.
fn ipv6(
    eth_source: [u8; 6],
    eth_destination: [u8; 6],
    source: [u8; 16],
    destination: [u8; 16],
    next_header: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut frame = eth_destination.to_vec();
    frame.extend_from_slice(&eth_source);
    frame.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    frame.extend_from_slice(&[next_header, 255]);
    frame.extend_from_slice(&source);
    frame.extend_from_slice(&destination);
    frame.extend_from_slice(payload);
    frame
}

fn udp6(source: [u8; 16], destination: [u8; 16]) -> Vec<u8> {
    ipv6(
        MAC,
        PEER_MAC,
        source,
        destination,
        17,
        &[0x13, 0x88, 0, 53, 0, 12, 0, 0, 1, 2, 3, 4],
    )
}

/// A neighbour solicitation (135) or advertisement (136) from `source` about `target`, with a
/// link-layer address option (source for a solicitation, target for an advertisement) when
/// `option` names one.
fn nd(kind: u8, source: [u8; 16], target: [u8; 16], option: Option<[u8; 6]>) -> Vec<u8> {
    let mut message = vec![kind, 0, 0, 0, if kind == 136 { 0x60 } else { 0 }, 0, 0, 0];
    message.extend_from_slice(&target);
    if let Some(mac) = option {
        message.extend_from_slice(&[if kind == 135 { 1 } else { 2 }, 1]);
        message.extend_from_slice(&mac);
    }
    ipv6(MAC, PEER_MAC, source, OTHER_IP6, ICMPV6, &message)
}

/// Each (what, frame, allowed) sent by the pod on ifindex 1: allowed ones get past port
/// security (what the switch then does with them is not this test's), the rest are dropped and
/// counted `port_security`.
fn judge(programs: &KernelPrograms, cases: &[(&str, Vec<u8>, bool)]) {
    for (what, frame, allowed) in cases {
        let before = drops(programs);
        let outcome = programs.test_run(Hook::Pod, frame).unwrap();
        if *allowed {
            assert_eq!(drops(programs), before, "{what}");
        } else {
            assert_eq!(
                (outcome.verdict, drops(programs)),
                (TC_ACT_SHOT, before + 1),
                "{what}"
            );
        }
    }
}

#[test]
fn a_dual_stack_pod_sends_ipv6_only_as_itself() {
    let mut programs = programs(false);
    secure(&mut programs, 1, PORT_SECURITY_IPV4 | PORT_SECURITY_IPV6);
    judge(
        &programs,
        &[
            ("from its IPv6 address", udp6(IP6, OTHER_IP6), true),
            (
                "from its link-local address",
                udp6(LINK_LOCAL, OTHER_IP6),
                true,
            ),
            (
                "from another IPv6 address",
                udp6(SPOOFED_IP6, OTHER_IP6),
                false,
            ),
            (
                "its IPv4 still",
                udp(MAC, IP, [10, 0, 1, 3], (5000, 53)),
                true,
            ),
            (
                "a solicitation as itself",
                nd(135, IP6, OTHER_IP6, Some(MAC)),
                true,
            ),
            (
                "a solicitation naming no MAC",
                nd(135, IP6, OTHER_IP6, None),
                true,
            ),
            (
                "a solicitation naming another MAC",
                nd(135, IP6, OTHER_IP6, Some(SPOOFED_MAC)),
                false,
            ),
            (
                "an advertisement of itself",
                nd(136, IP6, IP6, Some(MAC)),
                true,
            ),
            (
                "an advertisement of its link-local address",
                nd(136, LINK_LOCAL, LINK_LOCAL, None),
                true,
            ),
            (
                "an advertisement naming another MAC",
                nd(136, IP6, IP6, Some(SPOOFED_MAC)),
                false,
            ),
            (
                "an advertisement of another address",
                nd(136, IP6, SPOOFED_IP6, Some(MAC)),
                false,
            ),
        ],
    );
}

/// A frame from `::` to `destination` (a multicast group) at `MAC`'s multicast MAC: `payload`
/// after a hop-by-hop header with a router alert (`hop_by_hop`) or directly.
fn from_unspecified(destination: [u8; 16], hop_by_hop: bool, payload: &[u8]) -> Vec<u8> {
    let mut eth_destination = [0x33, 0x33, 0, 0, 0, 0];
    eth_destination[2..].copy_from_slice(&destination[12..]);
    if !hop_by_hop {
        return ipv6(MAC, eth_destination, [0; 16], destination, ICMPV6, payload);
    }
    // Next header ICMPv6, length 0 (8 bytes): router alert (MLD), PadN.
    let mut message = vec![ICMPV6, 0, 5, 2, 0, 0, 1, 0];
    message.extend_from_slice(payload);
    ipv6(MAC, eth_destination, [0; 16], destination, 0, &message)
}

#[test]
fn duplicate_address_detection_and_mld_from_the_unspecified_address_pass_as_ovn_controller_admits_them()
 {
    let all_mld_routers = {
        let mut group = [0; 16];
        group[..2].copy_from_slice(&[0xff, 0x02]);
        group[15] = 0x16;
        group
    };
    let solicited_node = {
        let mut group = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
        group[13..].copy_from_slice(&IP6[13..]);
        group
    };
    let mld2_report = [143, 0, 0, 0, 0, 0, 0, 1, 4, 0, 0, 0];
    let mld1_report = [131, 0, 0, 0, 0, 0, 0, 0];
    let dad = |target: [u8; 16], option: Option<[u8; 6]>| {
        let mut message = vec![135, 0, 0, 0, 0, 0, 0, 0];
        message.extend_from_slice(&target);
        if let Some(mac) = option {
            message.extend_from_slice(&[1, 1]);
            message.extend_from_slice(&mac);
        }
        message
    };
    let mut programs = programs(false);
    secure(&mut programs, 1, PORT_SECURITY_IPV4 | PORT_SECURITY_IPV6);
    judge(
        &programs,
        &[
            (
                "an MLDv2 report behind a router alert",
                from_unspecified(all_mld_routers, true, &mld2_report),
                true,
            ),
            (
                "an MLDv1 report",
                from_unspecified(all_mld_routers, false, &mld1_report),
                true,
            ),
            (
                "duplicate address detection of its link-local address",
                from_unspecified(solicited_node, false, &dad(LINK_LOCAL, None)),
                true,
            ),
            (
                "duplicate address detection naming another MAC",
                from_unspecified(solicited_node, false, &dad(IP6, Some(SPOOFED_MAC))),
                false,
            ),
            (
                "an echo request from ::",
                from_unspecified(all_mld_routers, false, &[128, 0, 0, 0, 0, 1, 0, 1]),
                false,
            ),
            (
                "an MLD report from :: to a group beyond ff02::/16",
                ipv6(
                    MAC,
                    [0x33, 0x33, 0, 0, 0, 0x16],
                    [0; 16],
                    {
                        let mut group = all_mld_routers;
                        group[1] = 0x05;
                        group
                    },
                    ICMPV6,
                    &mld2_report,
                ),
                false,
            ),
        ],
    );
    // Without IPv6 listed, nothing comes from ::, as from any address but the link-local one.
    let mut programs = self::programs(false);
    secure(&mut programs, 1, PORT_SECURITY_IPV4);
    judge(
        &programs,
        &[(
            "IPv4-only: an MLDv2 report from ::",
            from_unspecified(all_mld_routers, true, &mld2_report),
            false,
        )],
    );
}

#[test]
fn a_single_stack_pod_sends_only_its_family() {
    let mut programs = programs(false);
    secure(&mut programs, 1, PORT_SECURITY_IPV4);
    judge(
        &programs,
        &[
            (
                "IPv4-only: from an IPv6 address",
                udp6(IP6, OTHER_IP6),
                false,
            ),
            (
                "IPv4-only: from its link-local address",
                udp6(LINK_LOCAL, OTHER_IP6),
                true,
            ),
            (
                "IPv4-only: an advertisement of another address",
                nd(136, LINK_LOCAL, SPOOFED_IP6, Some(MAC)),
                true,
            ),
        ],
    );
    secure(&mut programs, 1, PORT_SECURITY_IPV6);
    judge(
        &programs,
        &[
            (
                "IPv6-only: IPv4",
                udp(MAC, IP, [10, 0, 1, 3], (5000, 53)),
                false,
            ),
            (
                "IPv6-only: DHCP discovery",
                udp(MAC, [0; 4], [255; 4], (68, 67)),
                true,
            ),
            ("IPv6-only: ARP as itself", arp_request(MAC, IP), true),
            ("IPv6-only: from its address", udp6(IP6, OTHER_IP6), true),
        ],
    );
    secure(&mut programs, 1, 0);
    judge(
        &programs,
        &[
            ("MAC only: any IPv6", udp6(SPOOFED_IP6, OTHER_IP6), true),
            (
                "MAC only: ARP as itself",
                arp_request(MAC, [10, 0, 1, 66]),
                true,
            ),
            (
                "MAC only: ARP naming another MAC",
                arp_request(SPOOFED_MAC, IP),
                false,
            ),
        ],
    );
}

/// Pod 1 (no port security) sends IPv6 to a local pod on veth 40 whose port security is
/// `flags`: what that pod lists (or multicast) is delivered, the rest dropped and counted.
#[test]
fn egress_port_security_checks_ipv6_destinations() {
    const RECEIVER: u32 = 40;
    let mut programs = programs(false);
    let key = FibKey {
        datapath: 5,
        mac: MAC,
        padding: [0; 2],
    };
    let entry = FibEntry {
        kind: FIB_LOCAL,
        ifindex: RECEIVER,
        flags: LOCAL_PORT_VETH_PEER | LOCAL_PORT_EGRESS_SECURITY,
        ..FibEntry::default()
    };
    programs.set::<L2Fib>(key, entry).unwrap();
    let to = |destination: [u8; 16]| {
        ipv6(
            PEER_MAC,
            MAC,
            OTHER_IP6,
            destination,
            17,
            &[0x13, 0x88, 0, 53, 0, 12, 0, 0, 1, 2, 3, 4],
        )
    };
    let all_nodes = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    for (flags, what, frame, delivered) in [
        (
            PORT_SECURITY_IPV4 | PORT_SECURITY_IPV6,
            "to its address",
            to(IP6),
            true,
        ),
        (
            PORT_SECURITY_IPV4 | PORT_SECURITY_IPV6,
            "to its link-local address",
            to(LINK_LOCAL),
            true,
        ),
        (
            PORT_SECURITY_IPV4 | PORT_SECURITY_IPV6,
            "to all nodes",
            to(all_nodes),
            true,
        ),
        (
            PORT_SECURITY_IPV4 | PORT_SECURITY_IPV6,
            "to another address",
            to(SPOOFED_IP6),
            false,
        ),
        (
            PORT_SECURITY_IPV4,
            "IPv4-only, to its link-local address",
            to(LINK_LOCAL),
            false,
        ),
        (0, "MAC only, to any address", to(SPOOFED_IP6), true),
    ] {
        secure(&mut programs, RECEIVER, flags);
        delivered_or_dropped(&programs, what, &frame, delivered);
    }
}
