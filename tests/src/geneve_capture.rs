//! Captures of Geneve frames on an underlay link, read back frame by frame: what the wire
//! tests judge (outer source port, outer UDP checksum and whether it sums, length, the inner
//! flow). Frames in OVN's layout: outer Ethernet, IPv4 without options (or IPv6 without
//! extension headers), UDP, Geneve with the one 8-byte OVN option, inner Ethernet. Also waits
//! for a chassis's Encap to ask for (or not) outer checksums.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
    time::Duration,
};

use crate::{
    frames::{pcap_frames, transport_checksum},
    netns::Netns,
    ovn::OvnLab,
    process::wait_until,
};

/// Where the outer UDP header starts after an outer IPv4 header; the inner IP header, after the
/// UDP, Geneve (with OVN's option) and inner Ethernet headers.
const OUTER_UDP: usize = 14 + 20;
const INNER_IP: usize = OUTER_UDP + 8 + 16 + 14;
/// After an outer IPv6 header: how much further everything is.
const IPV6_SHIFT: usize = 20;

fn be16(frame: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([frame[at], frame[at + 1]])
}

/// One captured Geneve frame.
#[derive(Debug)]
pub struct Captured {
    pub len: usize,
    pub source_port: u16,
    pub checksum: u16,
    /// The outer UDP checksum sums to zero over the pseudo header and the datagram.
    pub checksum_valid: bool,
    /// Inner IPv4 protocol and source port (TCP/UDP), if the inner frame is IPv4.
    pub inner: Option<(u8, u16)>,
    /// Inner IPv6 next header and source port (TCP/UDP), if the inner frame is IPv6.
    pub inner6: Option<(u8, u16)>,
    /// The inner destination MAC is broadcast.
    pub broadcast: bool,
}

/// The Geneve frames of a pcap file, over either family.
#[must_use]
pub fn read(pcap: &[u8]) -> Vec<Captured> {
    pcap_frames(pcap)
        .into_iter()
        .filter_map(|frame| {
            let ipv6_outer = frame.len() > 14 && frame[12..14] == [0x86, 0xdd];
            let shift = if ipv6_outer { IPV6_SHIFT } else { 0 };
            let (udp, inner_ip) = (OUTER_UDP + shift, INNER_IP + shift);
            if frame.len() <= inner_ip + 24 {
                return None;
            }
            let checksum_valid = if ipv6_outer {
                // The IPv6 pseudo header (RFC 8200 §8.1), then the datagram.
                let datagram = &frame[udp..];
                let mut summed = frame[22..54].to_vec();
                summed.extend_from_slice(&(datagram.len() as u32).to_be_bytes());
                summed.extend_from_slice(&[0, 0, 0, 17]);
                summed.extend_from_slice(datagram);
                crate::icmp::checksum(&summed) == 0
            } else {
                let addresses = (
                    Ipv4Addr::new(frame[26], frame[27], frame[28], frame[29]),
                    Ipv4Addr::new(frame[30], frame[31], frame[32], frame[33]),
                );
                transport_checksum(addresses, 17, &frame[udp..]) == 0
            };
            let ipv4 = be16(frame, inner_ip - 2) == 0x0800;
            let ipv6 = be16(frame, inner_ip - 2) == 0x86dd && frame.len() >= inner_ip + 42;
            let header_len = usize::from(frame[inner_ip] & 0xf) * 4;
            Some(Captured {
                len: frame.len(),
                source_port: be16(frame, udp),
                checksum: be16(frame, udp + 6),
                checksum_valid,
                inner: ipv4.then(|| (frame[inner_ip + 9], be16(frame, inner_ip + header_len))),
                inner6: ipv6.then(|| (frame[inner_ip + 6], be16(frame, inner_ip + 40))),
                broadcast: frame[udp + 8 + 16..udp + 8 + 16 + 6] == [0xff; 6],
            })
        })
        .collect()
}

/// Runs `traffic` while capturing, on `interface` in `netns`, the Geneve frames `from` sends
/// (the pcap lives under the temp dir with `prefix` and is removed); the frames.
pub fn capture(
    netns: &Netns,
    interface: &str,
    from: std::net::IpAddr,
    prefix: &str,
    traffic: impl FnOnce(),
) -> Vec<Captured> {
    let pcap = std::env::temp_dir().join(format!("{prefix}-{interface}-geneve.pcap"));
    let filter = format!("udp dst port 6081 and src host {from}");
    let pcap_text = pcap.to_string_lossy().into_owned();
    let mut tcpdump = netns
        .spawn(
            "tcpdump",
            "tcpdump",
            &[
                "-i", interface, "-nn", "-U", "-s", "0", "-w", &pcap_text, &filter,
            ],
            None,
        )
        .expect("tcpdump starts");
    std::thread::sleep(Duration::from_millis(500));
    traffic();
    std::thread::sleep(Duration::from_millis(500));
    tcpdump.stop();
    let bytes = std::fs::read(&pcap).unwrap_or_default();
    let _ = std::fs::remove_file(&pcap);
    read(&bytes)
}

/// Waits up to 20 s until `chassis`'s Encap row says `options:csum=<csum>`; whether it did.
pub fn wait_for_encap_csum(lab: &OvnLab, chassis: &str, csum: bool) -> bool {
    let wanted = format!("csum={csum}");
    let row = format!("chassis_name={chassis}");
    wait_until(Duration::from_secs(20), || {
        lab.sbctl(&["--bare", "--columns=options", "find", "Encap", &row])
            .is_ok_and(|options| options.contains(&wanted))
    })
}

/// Inner UDP source port → the outer source ports its frames left with, over the frames whose
/// inner packet `inner` reads (protocol, source port) as UDP.
#[must_use]
pub fn udp_flows(
    frames: &[Captured],
    inner: impl Fn(&Captured) -> Option<(u8, u16)>,
) -> BTreeMap<u16, BTreeSet<u16>> {
    let mut flows = BTreeMap::<u16, BTreeSet<u16>>::new();
    for frame in frames {
        if let Some((17, port)) = inner(frame) {
            flows.entry(port).or_default().insert(frame.source_port);
        }
    }
    flows
}
