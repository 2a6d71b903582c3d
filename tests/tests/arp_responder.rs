//! The kernel ARP responder under BPF_PROG_TEST_RUN: a request from a pod for an address its
//! datapath knows comes back as the reply OVN's `ls_in_arp_rsp` builds, sent out of the same
//! veth; requests from the address's own port, for unknown addresses or on another datapath, and
//! ARP replies, pass untouched. The ND responder likewise, in the IPv6 stage.

mod common;

use ovnbpf_agent::dataplane::ebpf::Maps;
use ovnbpf_agent::dataplane::ebpf::{Hook, KernelPrograms};
use ovnbpf_common::maps::ArpResponder;
use ovnbpf_common::{ArpAnswer, ArpKey, PodPort};
use ovnbpf_tests::frames::verdict::{TC_ACT_REDIRECT, TC_ACT_SHOT, TCX_NEXT};
use ovnbpf_tests::require_root;

const POD_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0, 1, 2];
const POD_IP: [u8; 4] = [10, 0, 1, 2];
const TARGET_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0, 1, 3];
const TARGET_IP: [u8; 4] = [10, 0, 1, 3];

/// An ARP packet: (eth destination, eth source, op, sha, spa, tha, tpa).
fn arp(
    eth: ([u8; 6], [u8; 6]),
    op: u16,
    sender: ([u8; 6], [u8; 4]),
    target: ([u8; 6], [u8; 4]),
) -> Vec<u8> {
    let mut frame = eth.0.to_vec();
    frame.extend_from_slice(&eth.1);
    frame.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4]);
    frame.extend_from_slice(&op.to_be_bytes());
    frame.extend_from_slice(&sender.0);
    frame.extend_from_slice(&sender.1);
    frame.extend_from_slice(&target.0);
    frame.extend_from_slice(&target.1);
    frame
}

fn programs_for_port(inport: u32) -> KernelPrograms {
    require_root();
    let mut programs = common::load_programs();
    // The test-run device (ifindex 1) is port `inport` of datapath 5; 10.0.1.3 is port 2's.
    programs
        .set_pod_port(
            1,
            PodPort {
                datapath: 5,
                port: inport,
            },
        )
        .unwrap();
    programs
        .set::<ArpResponder>(
            ArpKey {
                datapath: 5,
                ip: u32::from_ne_bytes(TARGET_IP),
            },
            ArpAnswer {
                mac: TARGET_MAC,
                flags: 0,
                reserved: 0,
                owner_port: 2,
            },
        )
        .unwrap();
    programs
}

fn request(target_ip: [u8; 4]) -> Vec<u8> {
    arp(
        ([0xff; 6], POD_MAC),
        1,
        (POD_MAC, POD_IP),
        ([0; 6], target_ip),
    )
}

#[test]
fn requests_for_known_addresses_are_answered_in_place() {
    let programs = programs_for_port(1);
    let outcome = programs.test_run(Hook::Pod, &request(TARGET_IP)).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    let reply = arp(
        (POD_MAC, TARGET_MAC),
        2,
        (TARGET_MAC, TARGET_IP),
        (POD_MAC, POD_IP),
    );
    assert_eq!(outcome.frame, reply);
}

#[test]
fn other_arp_frames_are_not_answered() {
    let programs = programs_for_port(1);
    // A broadcast request for an address nobody has goes on (this switch has no flood group).
    let frame = request([10, 0, 1, 99]);
    let outcome = programs.test_run(Hook::Pod, &frame).unwrap();
    assert_eq!((outcome.verdict, &outcome.frame), (TCX_NEXT, &frame));
    // A reply to a MAC the switch does not know is dropped as OVN's `ls_in_l2_unknown` drops it.
    let reply = arp(
        (TARGET_MAC, POD_MAC),
        2,
        (POD_MAC, POD_IP),
        (TARGET_MAC, TARGET_IP),
    );
    let unknown = |programs: &KernelPrograms| {
        let counters = programs.drop_counters().unwrap();
        counters
            .into_iter()
            .find(|(name, _)| *name == "unknown_destination")
            .map(|(_, count)| count)
            .unwrap()
    };
    let before = unknown(&programs);
    let outcome = programs.test_run(Hook::Pod, &reply).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_SHOT);
    assert_eq!(unknown(&programs), before + 1);
    // The owner of the address asks (duplicate address detection): the switch stays silent.
    let owner = programs_for_port(2);
    let frame = request(TARGET_IP);
    let outcome = owner.test_run(Hook::Pod, &frame).unwrap();
    assert_eq!((outcome.verdict, &outcome.frame), (TCX_NEXT, &frame));
    // The same address on another datapath (an overlapping VPC) is not answered.
    let mut other_vpc = programs_for_port(1);
    other_vpc
        .set_pod_port(
            1,
            PodPort {
                datapath: 6,
                port: 1,
            },
        )
        .unwrap();
    let outcome = other_vpc.test_run(Hook::Pod, &frame).unwrap();
    assert_eq!((outcome.verdict, &outcome.frame), (TCX_NEXT, &frame));
}

const ROUTER_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0, 1, 1];
/// The router port's link-local address (EUI-64 of `ROUTER_MAC`).
const ROUTER_LLA: [u8; 16] = [
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x08, 0x58, 0x0a, 0xff, 0xfe, 0, 1, 1,
];
const POD_LLA: [u8; 16] = [
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x08, 0x58, 0x0a, 0xff, 0xfe, 0, 1, 2,
];
const TARGET_IP6: [u8; 16] = [0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3];

/// An IPv6 ND frame with one link-layer option, checksummed here, independently of the kernel:
/// (eth destination, eth source), (IPv6 source, destination), (type, first flags byte, target),
/// (option type, MAC).
fn nd(
    eth: ([u8; 6], [u8; 6]),
    ip: ([u8; 16], [u8; 16]),
    message: (u8, u8, [u8; 16]),
    option: (u8, [u8; 6]),
) -> Vec<u8> {
    let mut body = vec![message.0, 0, 0, 0, message.1, 0, 0, 0];
    body.extend_from_slice(&message.2);
    body.extend_from_slice(&[option.0, 1]);
    body.extend_from_slice(&option.1);
    let mut covered = ip.0.to_vec();
    covered.extend_from_slice(&ip.1);
    covered.extend_from_slice(&[0, 0, 0, 32, 0, 0, 0, 58]);
    covered.extend_from_slice(&body);
    let checksum = ovnbpf_tests::icmp::checksum(&covered);
    body[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut frame = eth.0.to_vec();
    frame.extend_from_slice(&eth.1);
    frame.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 32, 58, 255]);
    frame.extend_from_slice(&ip.0);
    frame.extend_from_slice(&ip.1);
    frame.extend_from_slice(&body);
    frame
}

/// `address`'s solicited-node group and its MAC.
fn solicited_node(address: [u8; 16]) -> ([u8; 16], [u8; 6]) {
    let mut group = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
    group[13..].copy_from_slice(&address[13..]);
    let mac = [0x33, 0x33, 0xff, address[13], address[14], address[15]];
    (group, mac)
}

/// Datapath 5's ND responder answers `ip` with `mac` (`flags`), but not for port `owner_port`.
fn set_nd_answer(
    programs: &mut KernelPrograms,
    ip: [u8; 16],
    mac: [u8; 6],
    flags: u8,
    owner_port: u32,
) {
    programs
        .set::<ovnbpf_common::maps::NdResponder>(
            ovnbpf_common::Ipv6Key { datapath: 5, ip },
            ArpAnswer {
                mac,
                flags,
                reserved: 0,
                owner_port,
            },
        )
        .unwrap();
}

/// A solicitation from the pod (port 1 of datapath 5 on the test-run device) for `target`.
fn solicitation(target: [u8; 16]) -> Vec<u8> {
    let (group, group_mac) = solicited_node(target);
    nd(
        (group_mac, POD_MAC),
        (POD_LLA, group),
        (135, 0, target),
        (1, POD_MAC),
    )
}

/// The switch's ND responder (`ls_in_arp_rsp`): a solicitation for a router port's address
/// comes back as OVN's `nd_na_router` (R, S, O; from the target; the router's MAC in a target
/// link-layer option; hop limit 255), for a pod's address as `nd_na` (S, O); the address's own
/// port gets no answer, and a solicitation nobody answers goes on.
#[test]
fn solicitations_for_known_ipv6_addresses_get_ovns_advertisement() {
    let mut programs = programs_for_port(1);
    set_nd_answer(
        &mut programs,
        ROUTER_LLA,
        ROUTER_MAC,
        ovnbpf_common::ARP_ANSWER_ROUTER,
        0,
    );
    set_nd_answer(&mut programs, TARGET_IP6, TARGET_MAC, 0, 2);
    for (target, mac, flags) in [
        (ROUTER_LLA, ROUTER_MAC, 0xe0),
        (TARGET_IP6, TARGET_MAC, 0x60),
    ] {
        let outcome = programs.test_run(Hook::Pod, &solicitation(target)).unwrap();
        assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
        let advertisement = nd(
            (POD_MAC, mac),
            (target, POD_LLA),
            (136, flags, target),
            (2, mac),
        );
        assert_eq!(outcome.frame, advertisement);
    }
    // Unicast to the router port's own address (at the router's MAC) is answered alike.
    let unicast = nd(
        (ROUTER_MAC, POD_MAC),
        (POD_LLA, ROUTER_LLA),
        (135, 0, ROUTER_LLA),
        (1, POD_MAC),
    );
    programs
        .set::<ovnbpf_common::maps::L2Fib>(
            ovnbpf_common::FibKey {
                datapath: 5,
                mac: ROUTER_MAC,
                padding: [0; 2],
            },
            ovnbpf_common::FibEntry {
                kind: ovnbpf_common::FIB_ROUTER,
                ifindex: 9,
                port: 3,
                ..ovnbpf_common::FibEntry::default()
            },
        )
        .unwrap();
    let outcome = programs.test_run(Hook::Pod, &unicast).unwrap();
    assert_eq!(outcome.verdict, TC_ACT_REDIRECT);
    assert_eq!(
        outcome.frame,
        nd(
            (POD_MAC, ROUTER_MAC),
            (ROUTER_LLA, POD_LLA),
            (136, 0xe0, ROUTER_LLA),
            (2, ROUTER_MAC)
        )
    );
    // The owner asks for its own address (duplicate address detection): no answer; nobody
    // else answers either, and this switch has no flood group: it goes on unchanged.
    let mut owner = programs_for_port(2);
    set_nd_answer(&mut owner, TARGET_IP6, TARGET_MAC, 0, 2);
    let frame = solicitation(TARGET_IP6);
    let outcome = owner.test_run(Hook::Pod, &frame).unwrap();
    assert_eq!((outcome.verdict, &outcome.frame), (TCX_NEXT, &frame));
    let unknown = solicitation([0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x99]);
    let outcome = programs.test_run(Hook::Pod, &unknown).unwrap();
    assert_eq!((outcome.verdict, &outcome.frame), (TCX_NEXT, &unknown));
}
