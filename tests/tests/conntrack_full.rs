//! A connection table that fills up degrades by its policy, counted, and never fails a packet:
//! a switch whose ingress ACL stage tracks its pod's IP and commits every new connection takes
//! more UDP connections than the table holds (`MAX_CONNECTIONS`). Every commit succeeded
//! (`inserted` counts each one, `insert_failed` none), the table holds no more than its capacity,
//! the newest connections are in it and the oldest were evicted (least recently used first), and
//! every packet went on to its destination. The agent's sweep counts the full table live (its
//! `ovnbpf_conntrack_entries` gauge) and, once the entries expire, deletes them all.
//! BPF_PROG_TEST_RUN on the loaded programs, the maps filled by hand.

mod common;

use ovnbpf_agent::dataplane::ebpf::{Hook, KernelPrograms, Maps};
use ovnbpf_common::{
    FIB_LOCAL, FibEntry, FibKey, PodPort,
    acl::{
        AclRule, AclRuleKey, AclSwitch, COMMIT_INGRESS, MAX_CONNECTIONS, SWITCH_INGRESS,
        TRACK_INGRESS_ACL, action, list,
    },
    ct::States,
    maps::{AclRules, AclSwitches, L2Fib},
};
use ovnbpf_tests::frames::{ipv4_frame, udp, verdict::TC_ACT_REDIRECT};

const DATAPATH: u32 = 5;
const SOURCE_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0, 1, 2];
const DESTINATION_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0, 1, 3];
const SOURCE: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 0, 1, 2);
const DESTINATION: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 0, 1, 3);
/// Destination ports × source ports: a quarter more connections than the table holds.
const DESTINATION_PORTS: u16 = 5;

fn programs() -> KernelPrograms {
    let mut programs = common::load_programs();
    programs
        .set_pod_port(
            1,
            PodPort {
                datapath: DATAPATH,
                port: 1,
            },
        )
        .unwrap();
    // The destination: a local pod behind interface 2.
    programs
        .set::<L2Fib>(
            FibKey {
                datapath: DATAPATH,
                mac: DESTINATION_MAC,
                padding: [0; 2],
            },
            FibEntry {
                kind: FIB_LOCAL,
                ifindex: 2,
                port: 2,
                ..FibEntry::default()
            },
        )
        .unwrap();
    // One ingress rule: allow and commit every IP packet in every state, tracked.
    let mut counts = [0_u16; 8];
    counts[list::INGRESS as usize] = 1;
    programs
        .set::<AclSwitches>(
            DATAPATH,
            AclSwitch {
                flags: SWITCH_INGRESS | TRACK_INGRESS_ACL | COMMIT_INGRESS,
                counts,
            },
        )
        .unwrap();
    programs
        .set::<AclRules>(
            AclRuleKey {
                datapath: DATAPATH,
                list: list::INGRESS,
                index: 0,
            },
            AclRule {
                states: States::ALL,
                priority: 1,
                action: action::ALLOW_COMMIT,
                ..AclRule::default()
            },
        )
        .unwrap();
    programs
}

fn datagram(source_port: u16, destination_port: u16) -> Vec<u8> {
    let payload = udp((SOURCE, DESTINATION), source_port, destination_port, b"ct");
    ipv4_frame(
        DESTINATION_MAC,
        SOURCE_MAC,
        (SOURCE, DESTINATION),
        17,
        &payload,
    )
}

fn counter(programs: &KernelPrograms, name: &str) -> u64 {
    programs
        .conntrack_counters()
        .unwrap()
        .into_iter()
        .find(|(counter, _)| *counter == name)
        .map(|(_, count)| count)
        .unwrap()
}

/// Whether the table holds the connection from `source_port` to `destination_port`.
fn held(
    connections: &[(ovnbpf_common::acl::CtKey, ovnbpf_common::acl::CtEntry)],
    ports: (u16, u16),
) -> bool {
    connections.iter().any(|(key, _)| {
        let (a, b) = (key.port_a, key.port_b);
        (a, b) == ports || (b, a) == ports
    })
}

#[test]
fn a_full_table_evicts_the_least_recently_used_and_counts_every_commit() {
    let mut programs = programs();
    let source_ports =
        u16::try_from(MAX_CONNECTIONS / u32::from(DESTINATION_PORTS) * 5 / 4).unwrap_or(u16::MAX);
    let mut sent = 0_u64;
    let mut not_delivered = 0_u64;
    for destination_port in 1..=DESTINATION_PORTS {
        for source_port in 1..=source_ports {
            let outcome = programs
                .test_run(Hook::Pod, &datagram(source_port, destination_port))
                .unwrap();
            sent += 1;
            not_delivered += u64::from(outcome.verdict != TC_ACT_REDIRECT);
        }
    }
    assert!(
        sent > u64::from(MAX_CONNECTIONS),
        "{sent} connections do not overfill {MAX_CONNECTIONS}"
    );
    assert_eq!(not_delivered, 0, "packets refused while the table was full");
    assert_eq!(counter(&programs, "inserted"), sent, "every commit counted");
    assert_eq!(counter(&programs, "insert_failed"), 0);
    let connections = programs.connections().unwrap();
    let live = connections.len() as u64;
    println!(
        "{sent} connections committed, {live} held (capacity {MAX_CONNECTIONS}), {} evicted",
        sent - live
    );
    assert!(live <= u64::from(MAX_CONNECTIONS), "{live} entries");
    assert!(
        live >= u64::from(MAX_CONNECTIONS) * 9 / 10,
        "only {live} entries: the table did not fill"
    );
    let newest = (source_ports, DESTINATION_PORTS);
    let oldest = (1, 1);
    assert!(
        held(&connections, newest),
        "the newest connection was evicted"
    );
    assert!(
        !held(&connections, oldest),
        "the oldest connection is still held"
    );
    // The agent's sweep reports the table's fill (ovnbpf_conntrack_entries and _capacity):
    // now nothing has expired; once every lifetime has run out, all of it goes.
    let sweep = programs
        .sweep_connections(ovnbpf_agent::dataplane::ebpf::conntrack::monotonic_now())
        .unwrap();
    assert_eq!(
        (sweep.removed, sweep.live, sweep.capacity),
        (0, connections.len(), MAX_CONNECTIONS as usize),
        "{sweep:?}"
    );
    let sweep = programs.sweep_connections(u64::MAX).unwrap();
    assert_eq!(
        (sweep.removed, sweep.live),
        (connections.len(), 0),
        "{sweep:?}"
    );
    assert!(programs.connections().unwrap().is_empty());
}
