//! Geneve decapsulation in `from_uplink`, under BPF_PROG_TEST_RUN with filled maps: frames in
//! OVN's layout (built here field by field as RFC 8926 and OVN define them) addressed to this
//! node come out as the inner frame, redirected; wrong VNI, unknown port keys, foreign options and
//! truncated frames are dropped and counted; other traffic passes untouched.

use std::net::Ipv4Addr;

use ovnbpf_agent::dataplane::ebpf::{Hook, KernelPrograms};
use ovnbpf_common::{LOCAL_PORT_VETH_PEER, LocalPort, TunnelPortKey};
use ovnbpf_tests::require_root;

const TCX_NEXT: i32 = -1;
const TC_ACT_SHOT: i32 = 2;
const TC_ACT_REDIRECT: i32 = 7;

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
    let checksum = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(&[8, 0, 0xf7, 0xfe, 0, 1, 0, 0]);
    frame.extend_from_slice(b"ovnbpf!!");
    frame
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], pair[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The fields of one encapsulated frame that the tests vary.
#[derive(Clone, Copy)]
struct Encap {
    destination: Ipv4Addr,
    udp_port: u16,
    vni: u32,
    option_class: u16,
    ingress: u16,
    egress: u16,
}

impl Default for Encap {
    fn default() -> Self {
        Self {
            destination: NODE_IP,
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
    let mut udp = vec![0xc3, 0x50];
    udp.extend_from_slice(&encap.udp_port.to_be_bytes());
    udp.extend_from_slice(&udp_len.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&(20 + udp_len).to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    ip.extend_from_slice(&PEER_IP.octets());
    ip.extend_from_slice(&encap.destination.octets());
    let checksum = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    let mut frame = vec![
        0x0a, 0x58, 0xac, 0x1f, 0, 1, 0x0a, 0x58, 0xac, 0x1f, 0, 2, 0x08, 0,
    ];
    for part in [ip, udp, geneve] {
        frame.extend_from_slice(&part);
    }
    frame.extend_from_slice(inner);
    assert_eq!(frame.len(), 58 + inner.len());
    frame
}

fn programs() -> KernelPrograms {
    require_root();
    let mut programs = match KernelPrograms::load() {
        Ok(programs) => programs,
        Err(error) => panic!("kernel programs failed to load:\n{error}"),
    };
    programs.set_encap_ip(NODE_IP).unwrap();
    programs
        .set_tunnel_port(
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
        .remove_tunnel_port(TunnelPortKey {
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
