//! The frames of a health check, as pinctrl composes them (`svc_monitor_send_tcp_health_check__`,
//! `svc_monitor_send_udp_health_check`, `pinctrl_compose_ipv4`): from the Service_Monitor's
//! `src_mac`/`src_ip` to the backend's port MAC and address, IPv4 with DF, ID 0, TTL 63; a TCP
//! SYN (no options, window 65160) or a UDP datagram of 8 zero bytes without a checksum; the
//! reset that ends an answered SYN (24.03's: RST, its sequence the backend's acknowledgement);
//! and the reading of the backend's answers (a SYN+ACK or a reset to the probe, an ICMP port
//! unreachable about it). Written here rather than with a packet crate: three fixed IPv4
//! formats and a parser of the fields pinctrl reads, against a crate for every protocol. Pure.

use std::net::Ipv4Addr;

use super::state::Reply;
use crate::net::internet_checksum as checksum;

const ETH_P_IPV4: [u8; 2] = [0x08, 0x00];
const IPPROTO_ICMP: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;

/// The addresses of one backend's probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoints {
    /// `Service_Monitor.src_mac` (northd's `svc_monitor_mac`) and `src_ip`.
    pub source_mac: [u8; 6],
    pub source_ip: Ipv4Addr,
    /// The backend's port MAC and `Service_Monitor.ip`, `port`.
    pub backend_mac: [u8; 6],
    pub backend_ip: Ipv4Addr,
    pub backend_port: u16,
}

/// An Ethernet + IPv4 frame from the monitor to the backend carrying `payload` of `protocol`.
fn ipv4_frame(endpoints: &Endpoints, protocol: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(34 + payload.len());
    frame.extend_from_slice(&endpoints.backend_mac);
    frame.extend_from_slice(&endpoints.source_mac);
    frame.extend_from_slice(&ETH_P_IPV4);
    let total = u16::try_from(20 + payload.len()).unwrap_or(u16::MAX);
    let mut header = [0_u8; 20];
    header[0] = 0x45;
    header[2..4].copy_from_slice(&total.to_be_bytes());
    header[6] = 0x40; // DF
    header[8] = 63;
    header[9] = protocol;
    header[12..16].copy_from_slice(&endpoints.source_ip.octets());
    header[16..20].copy_from_slice(&endpoints.backend_ip.octets());
    let sum = checksum(&header);
    header[10..12].copy_from_slice(&sum.to_be_bytes());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(payload);
    frame
}

/// A TCP segment without options, checksummed for the monitor's and the backend's addresses.
fn tcp_segment(endpoints: &Endpoints, source_port: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    let mut segment = [0_u8; 20];
    segment[0..2].copy_from_slice(&source_port.to_be_bytes());
    segment[2..4].copy_from_slice(&endpoints.backend_port.to_be_bytes());
    segment[4..8].copy_from_slice(&seq.to_be_bytes());
    segment[8..12].copy_from_slice(&ack.to_be_bytes());
    segment[12] = 5 << 4;
    segment[13] = flags;
    let window: u16 = if flags & TCP_SYN != 0 { 65_160 } else { 0 };
    segment[14..16].copy_from_slice(&window.to_be_bytes());
    let mut pseudo = Vec::with_capacity(32);
    pseudo.extend_from_slice(&endpoints.source_ip.octets());
    pseudo.extend_from_slice(&endpoints.backend_ip.octets());
    pseudo.extend_from_slice(&[0, IPPROTO_TCP, 0, 20]);
    pseudo.extend_from_slice(&segment);
    let sum = checksum(&pseudo);
    segment[16..18].copy_from_slice(&sum.to_be_bytes());
    segment.to_vec()
}

/// The TCP probe: a SYN from `source_port` with sequence `seq`.
#[must_use]
pub fn tcp_syn(endpoints: &Endpoints, source_port: u16, seq: u32) -> Vec<u8> {
    let segment = tcp_segment(endpoints, source_port, seq, 0, TCP_SYN);
    ipv4_frame(endpoints, IPPROTO_TCP, &segment)
}

/// The reset that closes an answered probe: its sequence is what the SYN+ACK acknowledged.
#[must_use]
pub fn tcp_reset(endpoints: &Endpoints, source_port: u16, seq: u32) -> Vec<u8> {
    let segment = tcp_segment(endpoints, source_port, seq, 0, TCP_RST);
    ipv4_frame(endpoints, IPPROTO_TCP, &segment)
}

/// The UDP probe: 8 zero bytes from `source_port`, no checksum (as pinctrl sends it on IPv4).
#[must_use]
pub fn udp_datagram(endpoints: &Endpoints, source_port: u16) -> Vec<u8> {
    let mut datagram = [0_u8; 16];
    datagram[0..2].copy_from_slice(&source_port.to_be_bytes());
    datagram[2..4].copy_from_slice(&endpoints.backend_port.to_be_bytes());
    datagram[4..6].copy_from_slice(&16_u16.to_be_bytes());
    ipv4_frame(endpoints, IPPROTO_UDP, &datagram)
}

/// The backend's answer in `frame`, if it is one to these endpoints' probes: TCP from the
/// backend's port to the monitor (SYN+ACK or reset), or an ICMP port unreachable from the
/// backend about a UDP datagram to its port.
#[must_use]
pub fn read_reply(endpoints: &Endpoints, frame: &[u8]) -> Option<Reply> {
    if frame.get(12..14)? != ETH_P_IPV4 || frame.get(0..6)? != endpoints.source_mac {
        return None;
    }
    let ip = frame.get(14..)?;
    let header_length = usize::from(ip.first()? & 0x0f) * 4;
    if ip[0] >> 4 != 4
        || header_length < 20
        || ip.get(12..16)? != endpoints.backend_ip.octets()
        || ip.get(16..20)? != endpoints.source_ip.octets()
    {
        return None;
    }
    let l4 = ip.get(header_length..)?;
    let port =
        |bytes: &[u8], at: usize| Some(u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]));
    match ip[9] {
        IPPROTO_TCP => {
            if port(l4, 0)? != endpoints.backend_port {
                return None;
            }
            let destination_port = port(l4, 2)?;
            let ack = u32::from_be_bytes(l4.get(8..12)?.try_into().ok()?);
            let flags = *l4.get(13)?;
            if flags & TCP_RST != 0 {
                Some(Reply::Reset {
                    destination_port,
                    ack,
                })
            } else if flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK {
                Some(Reply::SynAck {
                    destination_port,
                    ack,
                })
            } else {
                None
            }
        }
        IPPROTO_ICMP => {
            // Type 3 code 3, about a UDP datagram (20-byte header) from the monitor to the port.
            if l4.get(0..2)? != [3, 3] {
                return None;
            }
            let quoted = l4.get(8..)?;
            if quoted.first()? != &0x45
                || quoted.get(9)? != &IPPROTO_UDP
                || quoted.get(16..20)? != endpoints.backend_ip.octets()
                || port(quoted, 22)? != endpoints.backend_port
            {
                return None;
            }
            Some(Reply::PortUnreachable {
                source_port: port(quoted, 20)?,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
