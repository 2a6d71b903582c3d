//! Captures of Geneve frames on an underlay link, read back frame by frame: what the wire
//! tests judge (outer source port, outer UDP checksum and whether it sums, length, the inner
//! flow). Frames in OVN's layout: outer Ethernet, IPv4 without options, UDP, Geneve with the
//! one 8-byte OVN option, inner Ethernet. Also waits for a chassis's Encap to ask for (or not)
//! outer checksums.

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

/// Where the outer UDP header starts; the inner IPv4 header, after the UDP, Geneve (with OVN's
/// option) and inner Ethernet headers.
const OUTER_UDP: usize = 14 + 20;
const INNER_IP: usize = OUTER_UDP + 8 + 16 + 14;

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

/// The Geneve frames of a pcap file.
#[must_use]
pub fn read(pcap: &[u8]) -> Vec<Captured> {
    pcap_frames(pcap)
        .into_iter()
        .filter(|frame| frame.len() > INNER_IP + 24)
        .map(|frame| {
            let addresses = (
                Ipv4Addr::new(frame[26], frame[27], frame[28], frame[29]),
                Ipv4Addr::new(frame[30], frame[31], frame[32], frame[33]),
            );
            let ipv4 = be16(frame, INNER_IP - 2) == 0x0800;
            let ipv6 = be16(frame, INNER_IP - 2) == 0x86dd && frame.len() >= INNER_IP + 42;
            let header_len = usize::from(frame[INNER_IP] & 0xf) * 4;
            Captured {
                len: frame.len(),
                source_port: be16(frame, OUTER_UDP),
                checksum: be16(frame, OUTER_UDP + 6),
                checksum_valid: transport_checksum(addresses, 17, &frame[OUTER_UDP..]) == 0,
                inner: ipv4.then(|| (frame[INNER_IP + 9], be16(frame, INNER_IP + header_len))),
                inner6: ipv6.then(|| (frame[INNER_IP + 6], be16(frame, INNER_IP + 40))),
                broadcast: frame[OUTER_UDP + 8 + 16..OUTER_UDP + 8 + 16 + 6] == [0xff; 6],
            }
        })
        .collect()
}

/// Runs `traffic` while capturing, on `interface` in `netns`, the Geneve frames `from` sends
/// (the pcap lives under the temp dir with `prefix` and is removed); the frames.
pub fn capture(
    netns: &Netns,
    interface: &str,
    from: Ipv4Addr,
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
