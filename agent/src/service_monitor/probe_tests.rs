use std::net::Ipv4Addr;

use super::{Endpoints, checksum, read_reply, tcp_reset, tcp_syn, udp_datagram};
use crate::service_monitor::state::Reply;

const ENDPOINTS: Endpoints = Endpoints {
    source_mac: [0xb2, 0xfb, 0x7f, 0x27, 0x57, 0x01],
    source_ip: Ipv4Addr::new(10, 0, 1, 250),
    backend_mac: [0x0a, 0x58, 0x0a, 0x00, 0x01, 0x02],
    backend_ip: Ipv4Addr::new(10, 0, 1, 2),
    backend_port: 8080,
};

/// The transport checksum of `segment` over its pseudo header: 0 when right.
fn transport_residue(source: Ipv4Addr, destination: Ipv4Addr, protocol: u8, segment: &[u8]) -> u16 {
    let mut pseudo = source.octets().to_vec();
    pseudo.extend_from_slice(&destination.octets());
    pseudo.extend_from_slice(&[0, protocol]);
    pseudo.extend_from_slice(&u16::try_from(segment.len()).unwrap().to_be_bytes());
    pseudo.extend_from_slice(segment);
    checksum(&pseudo)
}

#[test]
fn the_syn_probe_is_pinctrls() {
    let frame = tcp_syn(&ENDPOINTS, 40_000, 0x0102_0304);
    assert_eq!(frame.len(), 54);
    assert_eq!(frame[0..6], ENDPOINTS.backend_mac);
    assert_eq!(frame[6..12], ENDPOINTS.source_mac);
    let ip = &frame[14..34];
    assert_eq!(
        [ip[0], ip[1], ip[6], ip[8], ip[9]],
        [0x45, 0, 0x40, 63, 6],
        "version, TOS, DF, TTL, protocol"
    );
    assert_eq!(ip[4..6], [0, 0], "ID 0");
    assert_eq!(checksum(ip), 0, "IPv4 checksum");
    assert_eq!(ip[12..16], [10, 0, 1, 250]);
    assert_eq!(ip[16..20], [10, 0, 1, 2]);
    let tcp = &frame[34..];
    assert_eq!(tcp[0..4], [0x9c, 0x40, 0x1f, 0x90], "ports 40000 → 8080");
    assert_eq!(tcp[4..8], [1, 2, 3, 4]);
    assert_eq!(tcp[8..12], [0; 4], "no ack");
    assert_eq!([tcp[12], tcp[13]], [0x50, 0x02], "20-byte header, SYN");
    assert_eq!(u16::from_be_bytes([tcp[14], tcp[15]]), 65_160);
    assert_eq!(
        transport_residue(ENDPOINTS.source_ip, ENDPOINTS.backend_ip, 6, tcp),
        0
    );
}

#[test]
fn the_reset_and_the_udp_probe_are_pinctrls() {
    let reset = tcp_reset(&ENDPOINTS, 40_000, 99);
    let tcp = &reset[34..];
    assert_eq!(tcp[4..8], 99_u32.to_be_bytes());
    assert_eq!(tcp[13], 0x04, "RST alone");
    assert_eq!(
        transport_residue(ENDPOINTS.source_ip, ENDPOINTS.backend_ip, 6, tcp),
        0
    );
    let udp = udp_datagram(&ENDPOINTS, 33_000);
    assert_eq!(udp.len(), 14 + 20 + 16);
    assert_eq!(udp[23], 17);
    assert_eq!(checksum(&udp[14..34]), 0);
    assert_eq!(
        udp[34..42],
        [0x80, 0xe8, 0x1f, 0x90, 0, 16, 0, 0],
        "no checksum"
    );
    assert_eq!(udp[42..], [0; 8]);
}

/// The backend's answer to `probe`: addresses and ports swapped, with `flags` and `ack`.
fn answer(probe: &[u8], flags: u8, ack: u32) -> Vec<u8> {
    let mut frame = probe.to_vec();
    frame.copy_within(0..6, 6);
    frame[0..6].copy_from_slice(&ENDPOINTS.source_mac);
    frame[6..12].copy_from_slice(&ENDPOINTS.backend_mac);
    frame[26..30].copy_from_slice(&ENDPOINTS.backend_ip.octets());
    frame[30..34].copy_from_slice(&ENDPOINTS.source_ip.octets());
    let (source, destination) = ([probe[34], probe[35]], [probe[36], probe[37]]);
    frame[34..36].copy_from_slice(&destination);
    frame[36..38].copy_from_slice(&source);
    frame[42..46].copy_from_slice(&ack.to_be_bytes());
    frame[47] = flags;
    frame
}

#[test]
fn answers_to_the_probe_are_read() {
    let probe = tcp_syn(&ENDPOINTS, 40_000, 7);
    assert_eq!(
        read_reply(&ENDPOINTS, &answer(&probe, 0x12, 8)),
        Some(Reply::SynAck {
            destination_port: 40_000,
            ack: 8
        })
    );
    assert_eq!(
        read_reply(&ENDPOINTS, &answer(&probe, 0x14, 8)),
        Some(Reply::Reset {
            destination_port: 40_000,
            ack: 8
        })
    );
    // A plain ACK, the probe itself, another backend port: none is an answer.
    assert_eq!(read_reply(&ENDPOINTS, &answer(&probe, 0x10, 8)), None);
    assert_eq!(read_reply(&ENDPOINTS, &probe), None);
    let mut other_port = answer(&probe, 0x12, 8);
    other_port[34..36].copy_from_slice(&8081_u16.to_be_bytes());
    assert_eq!(read_reply(&ENDPOINTS, &other_port), None);
    assert_eq!(read_reply(&ENDPOINTS, &[0; 20]), None, "short");
}

#[test]
fn a_port_unreachable_about_the_udp_probe_is_read() {
    let probe = udp_datagram(&ENDPOINTS, 33_000);
    let mut frame = Vec::new();
    frame.extend_from_slice(&ENDPOINTS.source_mac);
    frame.extend_from_slice(&ENDPOINTS.backend_mac);
    frame.extend_from_slice(&[0x08, 0x00]);
    let mut ip = vec![0x45, 0xc0, 0, 64, 0, 0, 0, 0, 64, 1, 0, 0];
    ip.extend_from_slice(&ENDPOINTS.backend_ip.octets());
    ip.extend_from_slice(&ENDPOINTS.source_ip.octets());
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(&[3, 3, 0, 0, 0, 0, 0, 0]);
    frame.extend_from_slice(&probe[14..]);
    assert_eq!(
        read_reply(&ENDPOINTS, &frame),
        Some(Reply::PortUnreachable {
            source_port: 33_000
        })
    );
    frame[34] = 3;
    frame[35] = 1; // host unreachable
    assert_eq!(read_reply(&ENDPOINTS, &frame), None);
}
