//! Kernel programs, for real: the verifier gate (every program in the object must load), their
//! classification under BPF_PROG_TEST_RUN, and counting of real packets on tcx-attached veths in
//! test namespaces.

mod common;

use std::net::Ipv4Addr;

use ovnbpf_agent::dataplane::ebpf::{Hook, VERIFIED_INSTRUCTIONS_BUDGET, stack::STACK_LIMIT};
use ovnbpf_common::{InterfaceCounters, program};
use ovnbpf_tests::frames::verdict::TCX_NEXT;
use ovnbpf_tests::{
    names::unique_prefix,
    network::{PodSpec, Underlay},
};

/// skb->ifindex under BPF_PROG_TEST_RUN (the loopback device).
const TEST_RUN_IFINDEX: u32 = 1;

#[test]
fn verifier_accepts_every_program() {
    let programs = common::load_programs();
    let loaded = programs.programs().unwrap();
    let names: Vec<_> = loaded.iter().map(|p| p.name).collect();
    assert_eq!(names, program::ALL);
    for program in &loaded {
        assert!(program.id > 0, "{program:?}");
        assert!(
            program.verified_instructions.unwrap_or(0) > 0,
            "{program:?}"
        );
        println!("verifier accepted {program:?}");
    }
}

/// Hash maps allocate their elements as they are inserted (`BPF_F_NO_PREALLOC`): preallocated,
/// an agent's maps held 514 MiB whatever the node ran. LRU maps cannot be, and are not.
#[test]
fn hash_maps_are_not_preallocated() {
    const NO_PREALLOC: u32 = 1;
    let _programs = common::load_programs();
    let mut seen = std::collections::BTreeMap::new();
    for map in aya::maps::loaded_maps() {
        let map = map.unwrap();
        let (Some(name), Ok(kind)) = (map.name_as_str(), map.map_type()) else {
            continue;
        };
        // Names as the kernel keeps them: 15 characters.
        if [
            "L2_FIB",
            "ARP_RESPONDER",
            "INTERFACE_COUNT",
            "CONNTRACK",
            "SNAT_SESSIONS",
        ]
        .contains(&name)
        {
            seen.insert(
                name.to_string(),
                (format!("{kind:?}"), map.map_flags() & NO_PREALLOC != 0),
            );
        }
    }
    let expected: std::collections::BTreeMap<String, (String, bool)> = [
        ("ARP_RESPONDER", ("Hash", true)),
        ("CONNTRACK", ("LruHash", false)),
        ("INTERFACE_COUNT", ("PerCpuHash", true)),
        ("L2_FIB", ("Hash", true)),
        ("SNAT_SESSIONS", ("LruHash", false)),
    ]
    .into_iter()
    .map(|(name, (kind, lazy))| (name.to_string(), (kind.to_string(), lazy)))
    .collect();
    assert_eq!(
        seen, expected,
        "map kind and whether its elements are allocated lazily"
    );
}

/// `--connection-table-entries` sizes every connection table the programs are loaded with (the
/// affinities to half), and nothing else.
#[test]
fn connection_tables_take_the_size_asked_for() {
    use ovnbpf_agent::dataplane::ebpf::{CONNECTION_TABLES, KernelPrograms, kernel_log};
    ovnbpf_tests::require_root();
    const ENTRIES: u32 = 4_096;
    let _programs =
        KernelPrograms::load_with(None, kernel_log::BpfLogLevel::Off, Some(ENTRIES)).unwrap();
    // Other tests load programs at the default sizes meanwhile: look for maps of this size.
    let sized: Vec<(String, u32)> = aya::maps::loaded_maps()
        .filter_map(Result::ok)
        .filter_map(|map| Some((map.name_as_str()?.to_string(), map.max_entries())))
        .filter(|(_, entries)| [ENTRIES, ENTRIES / 2].contains(entries))
        .collect();
    for (name, divisor) in CONNECTION_TABLES {
        // The kernel keeps 15 characters of a name.
        let kept: String = name.chars().take(15).collect();
        assert!(
            sized.contains(&(kept.clone(), ENTRIES / divisor)),
            "{name} was not created with {} entries: {sized:?}",
            ENTRIES / divisor
        );
    }
    assert!(
        !sized
            .iter()
            .any(|(name, _)| name == "L2_FIB" || name == "ACL_VERDICTS"),
        "only the connection tables are sized: {sized:?}"
    );
}

/// Each program stays under ovnbpf's verifier budget (a quarter of the kernel's 1M-instruction
/// limit), so a new feature sees in this suite when a stage must move behind a tail call; and the
/// stack measured from the object is one the verifier accepts (at most 512 bytes per chain).
#[test]
fn every_program_stays_within_the_verifier_budget() {
    let programs = common::load_programs();
    for program in programs.programs().unwrap() {
        let verified = program
            .verified_instructions
            .expect("the kernel reports verified instructions (≥ 5.16)");
        println!(
            "{}: {verified} verified instructions, stack {:?}",
            program.name, program.stack
        );
        assert!(
            verified < VERIFIED_INSTRUCTIONS_BUDGET,
            "{} needs {verified} verified instructions, over the budget of {VERIFIED_INSTRUCTIONS_BUDGET}",
            program.name
        );
        let stack = program
            .stack
            .expect("the object's stack frames are readable");
        // Some frame has a stack (the object's frames were read; an entry that only hands
        // over to functions of its own, as `acl_reject`'s, may have none itself).
        assert!(
            stack.deepest_chain <= STACK_LIMIT && stack.frames.iter().any(|&frame| frame > 0),
            "{}: {stack:?}",
            program.name
        );
    }
}

fn ethernet(ether_type: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x0a, 0x58, 0, 0, 0, 2, 0x0a, 0x58, 0, 0, 0, 1];
    frame.extend_from_slice(&ether_type.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

fn ipv4_udp(total_len: u16, version_ihl: u8) -> Vec<u8> {
    let mut header = vec![version_ihl, 0];
    header.extend_from_slice(&total_len.to_be_bytes());
    header.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 2, 10, 0, 1, 3]);
    header.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
    header
}

fn delta(before: Option<InterfaceCounters>, after: Option<InterfaceCounters>) -> InterfaceCounters {
    let before = before.unwrap_or_default();
    let after = after.expect("the program created no counter entry");
    after.since(before)
}

/// Picks the counter a frame is expected to land in.
type CounterField = fn(&InterfaceCounters) -> u64;

#[test]
fn frames_are_classified_counted_and_passed_unchanged() {
    let programs = common::load_programs();
    let cases: [(&str, Vec<u8>, CounterField); 5] = [
        ("IPv4/UDP", ethernet(0x0800, &ipv4_udp(28, 0x45)), |c| {
            c.ipv4
        }),
        ("ARP", ethernet(0x0806, &[0_u8; 28]), |c| c.other),
        // (A frame cut inside its IPv4 header cannot be tested here: BPF_PROG_TEST_RUN rejects it.)
        (
            "IPv4 with a header length below 20",
            ethernet(0x0800, &ipv4_udp(28, 0x44)),
            |c| c.malformed,
        ),
        (
            "IPv4 with version 6",
            ethernet(0x0800, &ipv4_udp(28, 0x65)),
            |c| c.malformed,
        ),
        (
            "IPv4 longer than the frame",
            ethernet(0x0800, &ipv4_udp(1400, 0x45)),
            |c| c.malformed,
        ),
    ];
    for hook in [Hook::Pod, Hook::Uplink] {
        for (what, frame, field) in &cases {
            let before = programs.interface_counters(TEST_RUN_IFINDEX).unwrap();
            let outcome = programs
                .test_run(hook, frame)
                .unwrap_or_else(|e| panic!("{hook:?} {what}: {e}"));
            let counted = delta(
                before,
                programs.interface_counters(TEST_RUN_IFINDEX).unwrap(),
            );
            assert_eq!(outcome.verdict, TCX_NEXT, "{hook:?} {what}");
            assert_eq!(&outcome.frame, frame, "{hook:?} altered the {what} frame");
            assert_eq!(counted.packets, 1, "{hook:?} {what}: {counted:?}");
            assert_eq!(
                counted.bytes,
                frame.len() as u64,
                "{hook:?} {what}: {counted:?}"
            );
            assert_eq!(
                field(&counted),
                1,
                "{hook:?} {what} went to the wrong counter: {counted:?}"
            );
        }
    }
}

#[test]
fn attached_programs_count_real_traffic() {
    let mut programs = common::load_programs();
    let prefix = unique_prefix();
    let mut underlay = Underlay::create(&prefix).unwrap();
    let node1 = underlay.add_node("node1").unwrap();
    let node2 = underlay.add_node("node2").unwrap();
    let pod = node1
        .add_pod(&PodSpec {
            name: "pod1",
            host_interface: "pod1_h",
            mac: Some("0a:58:0a:00:01:02"),
            address: Some("10.0.1.2/24"),
            gateway: None,
            mtu: None,
        })
        .unwrap();
    node1
        .netns()
        .ip(&["addr", "add", "10.0.1.1/24", "dev", "pod1_h"])
        .unwrap();

    programs
        .attach_in_netns(&node1.netns().path(), Hook::Pod, pod.host_interface())
        .unwrap();
    programs
        .attach_in_netns(&node1.netns().path(), Hook::Uplink, "eth0")
        .unwrap();
    let pod_ifindex = node1.netns().ifindex(pod.host_interface()).unwrap();
    let uplink_ifindex = node1.netns().ifindex("eth0").unwrap();

    // Pod → its node: 5 echo requests enter the host veth (plus ARP and IPv6 noise, counted as
    // `other`); the replies leave through it and are not seen by an ingress program.
    assert_eq!(pod.ping(Ipv4Addr::new(10, 0, 1, 1), 5).unwrap(), 5);
    let pod_counters = programs
        .interface_counters(pod_ifindex)
        .unwrap()
        .expect("no pod counters");
    assert_eq!(pod_counters.ipv4, 5, "{pod_counters:?}");
    assert_eq!(pod_counters.malformed, 0, "{pod_counters:?}");
    assert_eq!(
        pod_counters.packets,
        pod_counters.ipv4 + pod_counters.other + pod_counters.malformed,
        "{pod_counters:?}"
    );
    assert!(pod_counters.bytes >= 5 * 98, "{pod_counters:?}");

    // node2 → node1 over the underlay: 3 echo requests enter node1's uplink.
    let out = node2
        .netns()
        .exec(
            "ping",
            &["-c", "3", "-i", "0.05", "-W", "1", &node1.ip().to_string()],
        )
        .unwrap();
    assert!(out.contains("3 received"), "{out}");
    let uplink = programs
        .interface_counters(uplink_ifindex)
        .unwrap()
        .expect("no uplink counters");
    assert_eq!(uplink.ipv4, 3, "{uplink:?}");
    assert_eq!(uplink.malformed, 0, "{uplink:?}");

    // The programs pass traffic on: the pod saw all its replies (checked above) and counting
    // stops when the programs are gone.
    drop(programs);
    assert_eq!(pod.ping(Ipv4Addr::new(10, 0, 1, 1), 2).unwrap(), 2);
}
