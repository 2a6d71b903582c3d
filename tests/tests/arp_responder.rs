//! The kernel ARP responder under BPF_PROG_TEST_RUN: a request from a pod for an address its
//! datapath knows comes back as the reply OVN's `ls_in_arp_rsp` builds, sent out of the same
//! veth; requests from the address's own port, for unknown addresses or on another datapath, and
//! ARP replies, pass untouched.

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
