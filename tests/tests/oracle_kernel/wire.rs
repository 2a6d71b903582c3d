//! The evaluator's [`Packet`] on the wire and back: frames for `BPF_PROG_TEST_RUN` built from a
//! packet (Ethernet; ARP; IPv4 or IPv6 with ICMP echo, TCP SYN, UDP or neighbour discovery), and
//! the frames the kernel emits read back into a packet, with their IPv4 header and ICMPv6
//! checksums checked.

use std::net::{Ipv4Addr, Ipv6Addr};

use ovnbpf_agent::pipeline::packet::{L3, L4, Packet};
use ovnbpf_tests::icmp::checksum;

const ETH_P_ARP: u16 = 0x0806;
const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;

/// The transport bytes of `l4` between `source` and `destination`, checksummed over the
/// pseudo header (ICMPv4 has none). The IPv4 and IPv6 pseudo headers sum to the same value for
/// segments under 64 KiB: addresses, protocol, length.
fn checksummed(l4: &L4, ipv6: bool, source: &[u8], destination: &[u8]) -> (u8, Vec<u8>) {
    let (protocol, mut segment, at) = transport(l4, ipv6);
    let mut covered = Vec::new();
    if protocol != 1 {
        covered.extend_from_slice(source);
        covered.extend_from_slice(destination);
        covered.extend_from_slice(&[0, protocol]);
        covered.extend_from_slice(&(segment.len() as u16).to_be_bytes());
    }
    covered.extend_from_slice(&segment);
    let value = checksum(&covered);
    segment[at..at + 2].copy_from_slice(&value.to_be_bytes());
    (protocol, segment)
}

/// (IP protocol number, transport bytes with a zero checksum, checksum offset).
fn transport(l4: &L4, ipv6: bool) -> (u8, Vec<u8>, usize) {
    match *l4 {
        L4::Icmp { kind, code } => {
            let protocol = if ipv6 { 58 } else { 1 };
            // Echo identifier 1, sequence 1, 8 bytes of payload.
            let mut bytes = vec![kind, code, 0, 0, 0, 1, 0, 1];
            bytes.extend_from_slice(b"ovnbpf!!");
            (protocol, bytes, 2)
        }
        L4::Tcp {
            source,
            destination,
        }
        | L4::TcpReset {
            source,
            destination,
        } => {
            let flags = if matches!(l4, L4::TcpReset { .. }) {
                0x14
            } else {
                0x02
            };
            let mut bytes = Vec::with_capacity(20);
            bytes.extend_from_slice(&source.to_be_bytes());
            bytes.extend_from_slice(&destination.to_be_bytes());
            bytes.extend_from_slice(&1_u32.to_be_bytes());
            bytes.extend_from_slice(&0_u32.to_be_bytes());
            bytes.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
            (6, bytes, 16)
        }
        L4::Udp {
            source,
            destination,
        } => {
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&source.to_be_bytes());
            bytes.extend_from_slice(&destination.to_be_bytes());
            bytes.extend_from_slice(&16_u16.to_be_bytes());
            bytes.extend_from_slice(&[0, 0]);
            bytes.extend_from_slice(b"ovnbpf!!");
            (17, bytes, 6)
        }
        L4::Nd {
            kind,
            target,
            sll,
            tll,
        } => {
            let flags: u8 = if kind == 136 { 0x20 } else { 0 };
            let mut bytes = vec![kind, 0, 0, 0, flags, 0, 0, 0];
            bytes.extend_from_slice(&target.octets());
            if sll != [0; 6] {
                bytes.extend_from_slice(&[1, 1]);
                bytes.extend_from_slice(&sll);
            }
            if tll != [0; 6] {
                bytes.extend_from_slice(&[2, 1]);
                bytes.extend_from_slice(&tll);
            }
            (58, bytes, 2)
        }
    }
}

/// `packet` as an Ethernet frame.
pub fn encode(packet: &Packet) -> Vec<u8> {
    let mut frame = Vec::with_capacity(128);
    frame.extend_from_slice(&packet.eth_dst);
    frame.extend_from_slice(&packet.eth_src);
    match packet.l3 {
        L3::Arp {
            op,
            sha,
            spa,
            tha,
            tpa,
        } => {
            frame.extend_from_slice(&ETH_P_ARP.to_be_bytes());
            frame.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
            frame.extend_from_slice(&op.to_be_bytes());
            frame.extend_from_slice(&sha);
            frame.extend_from_slice(&spa.octets());
            frame.extend_from_slice(&tha);
            frame.extend_from_slice(&tpa.octets());
        }
        L3::Ipv4 {
            source,
            destination,
            ttl,
            ref l4,
        } => {
            let (protocol, segment) =
                checksummed(l4, false, &source.octets(), &destination.octets());
            frame.extend_from_slice(&ETH_P_IPV4.to_be_bytes());
            let total = (20 + segment.len()) as u16;
            let mut header = vec![0x45, 0];
            header.extend_from_slice(&total.to_be_bytes());
            header.extend_from_slice(&[0, 1, 0x40, 0, ttl, protocol, 0, 0]);
            header.extend_from_slice(&source.octets());
            header.extend_from_slice(&destination.octets());
            let value = checksum(&header);
            header[10..12].copy_from_slice(&value.to_be_bytes());
            frame.extend_from_slice(&header);
            frame.extend_from_slice(&segment);
        }
        L3::Ipv6 {
            source,
            destination,
            ttl,
            ref l4,
        } => {
            let (protocol, segment) =
                checksummed(l4, true, &source.octets(), &destination.octets());
            frame.extend_from_slice(&ETH_P_IPV6.to_be_bytes());
            frame.extend_from_slice(&[0x60, 0, 0, 0]);
            frame.extend_from_slice(&(segment.len() as u16).to_be_bytes());
            frame.extend_from_slice(&[protocol, ttl]);
            frame.extend_from_slice(&source.octets());
            frame.extend_from_slice(&destination.octets());
            frame.extend_from_slice(&segment);
        }
    }
    frame
}

fn mac_at(frame: &[u8], at: usize) -> [u8; 6] {
    frame[at..at + 6].try_into().unwrap()
}

fn ipv4_at(frame: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(frame[at], frame[at + 1], frame[at + 2], frame[at + 3])
}

fn ipv6_at(frame: &[u8], at: usize) -> Ipv6Addr {
    let octets: [u8; 16] = frame[at..at + 16].try_into().unwrap();
    Ipv6Addr::from(octets)
}

fn need(frame: &[u8], length: usize, what: &str) -> Result<(), String> {
    if frame.len() < length {
        return Err(format!("{what}: {} bytes, want {length}", frame.len()));
    }
    Ok(())
}

/// Reads a transport header at `at` of `protocol`.
fn read_transport(frame: &[u8], at: usize, protocol: u8) -> Result<L4, String> {
    match protocol {
        1 | 58 => {
            need(frame, at + 8, "ICMP")?;
            let (kind, code) = (frame[at], frame[at + 1]);
            if protocol == 58 && (kind == 135 || kind == 136) {
                need(frame, at + 24, "ND")?;
                let target = ipv6_at(frame, at + 8);
                let (mut sll, mut tll) = ([0; 6], [0; 6]);
                let mut option = at + 24;
                while option + 8 <= frame.len() && frame[option + 1] != 0 {
                    match frame[option] {
                        1 => sll = mac_at(frame, option + 2),
                        2 => tll = mac_at(frame, option + 2),
                        _ => {}
                    }
                    option += usize::from(frame[option + 1]) * 8;
                }
                return Ok(L4::Nd {
                    kind,
                    target,
                    sll,
                    tll,
                });
            }
            Ok(L4::Icmp { kind, code })
        }
        6 => {
            need(frame, at + 14, "TCP")?;
            let source = u16::from_be_bytes([frame[at], frame[at + 1]]);
            let destination = u16::from_be_bytes([frame[at + 2], frame[at + 3]]);
            if frame[at + 13] & 0x04 != 0 {
                Ok(L4::TcpReset {
                    source,
                    destination,
                })
            } else {
                Ok(L4::Tcp {
                    source,
                    destination,
                })
            }
        }
        17 => {
            need(frame, at + 8, "UDP")?;
            Ok(L4::Udp {
                source: u16::from_be_bytes([frame[at], frame[at + 1]]),
                destination: u16::from_be_bytes([frame[at + 2], frame[at + 3]]),
            })
        }
        other => Err(format!("IP protocol {other}")),
    }
}

/// Checks the ICMPv6 checksum of the IPv6 packet `packet` (no extension headers): over the
/// pseudo header (addresses, upper-layer length, next header) and the message.
fn icmpv6_checksum_holds(packet: &[u8]) -> Result<(), String> {
    transport6_checksum_holds(packet, 58, "ICMPv6")
}

/// Whether the checksum of the IPv6 `packet`'s transport (next header `protocol`, right after
/// the IPv6 header) holds over its pseudo header.
fn transport6_checksum_holds(packet: &[u8], protocol: u8, what: &str) -> Result<(), String> {
    let length = usize::from(u16::from_be_bytes([packet[4], packet[5]]));
    need(packet, 40 + length, what)?;
    let mut covered = Vec::with_capacity(40 + length);
    covered.extend_from_slice(&packet[8..40]);
    covered.extend_from_slice(&(length as u32).to_be_bytes());
    covered.extend_from_slice(&[0, 0, 0, protocol]);
    covered.extend_from_slice(&packet[40..40 + length]);
    if checksum(&covered) != 0 {
        return Err(format!("{what} checksum is wrong"));
    }
    Ok(())
}

/// A frame read back: the packet, and the VLAN it carried in its data (if any).
pub fn decode(frame: &[u8]) -> Result<(Packet, Option<u16>), String> {
    need(frame, 14, "Ethernet")?;
    let (eth_dst, eth_src) = (mac_at(frame, 0), mac_at(frame, 6));
    let mut at = 12;
    let mut vlan = None;
    let mut ethertype = u16::from_be_bytes([frame[at], frame[at + 1]]);
    if ethertype == ETH_P_8021Q {
        need(frame, 18, "802.1Q")?;
        vlan = Some(u16::from_be_bytes([frame[14], frame[15]]) & 0x0fff);
        at += 4;
        ethertype = u16::from_be_bytes([frame[at], frame[at + 1]]);
    }
    at += 2;
    let l3 = match ethertype {
        ETH_P_ARP => {
            need(frame, at + 28, "ARP")?;
            L3::Arp {
                op: u16::from_be_bytes([frame[at + 6], frame[at + 7]]),
                sha: mac_at(frame, at + 8),
                spa: ipv4_at(frame, at + 14),
                tha: mac_at(frame, at + 18),
                tpa: ipv4_at(frame, at + 24),
            }
        }
        ETH_P_IPV4 => {
            need(frame, at + 20, "IPv4")?;
            let length = usize::from(frame[at] & 0x0f) * 4;
            need(frame, at + length, "IPv4 options")?;
            if checksum(&frame[at..at + length]) != 0 {
                return Err("IPv4 header checksum is wrong".into());
            }
            L3::Ipv4 {
                source: ipv4_at(frame, at + 12),
                destination: ipv4_at(frame, at + 16),
                ttl: frame[at + 8],
                l4: read_transport(frame, at + length, frame[at + 9])?,
            }
        }
        ETH_P_IPV6 => {
            need(frame, at + 40, "IPv6")?;
            if frame[at + 6] == 58 {
                icmpv6_checksum_holds(&frame[at..])?;
            }
            // A TCP reset: the router's answer, which the kernel composed.
            if frame[at + 6] == 6
                && frame
                    .get(at + 40 + 13)
                    .is_some_and(|flags| flags & 0x04 != 0)
            {
                transport6_checksum_holds(&frame[at..], 6, "TCP reset")?;
            }
            L3::Ipv6 {
                source: ipv6_at(frame, at + 8),
                destination: ipv6_at(frame, at + 24),
                ttl: frame[at + 7],
                l4: read_transport(frame, at + 40, frame[at + 6])?,
            }
        }
        other => return Err(format!("ethertype {other:#06x}")),
    };
    Ok((
        Packet {
            eth_src,
            eth_dst,
            l3,
        },
        vlan,
    ))
}
