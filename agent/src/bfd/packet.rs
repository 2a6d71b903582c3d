//! BFD control packets (RFC 5880 §4.1, without authentication) as Open vSwitch sends them on an
//! OVN tunnel (`bfd:enable=true` on a Geneve port, which ovn-controller sets toward gateway
//! chassis): inside Geneve with VNI 0 and no options (OVS checks the key, `check_tnl_key`), an
//! Ethernet frame to OVS's default `00:23:20:00:00:01`, IPv4 from 169.254.1.1 to 169.254.1.0
//! with TTL 255, UDP to port 3784. Written here: no crate of the field encodes BFD, and the
//! framing is OVS's own. Pure encoding; owns no state.

/// Geneve's UDP port.
pub const GENEVE_PORT: u16 = 6081;
/// BFD's single-hop control port (RFC 5881).
pub const BFD_PORT: u16 = 3784;
/// Open vSwitch's default destination MAC of its BFD frames (`bfd_dst_mac`).
const BFD_DST_MAC: [u8; 6] = [0x00, 0x23, 0x20, 0x00, 0x00, 0x01];
/// Open vSwitch's default addresses of its BFD packets (`bfd_src_ip`, `bfd_dst_ip`).
const BFD_SRC_IP: [u8; 4] = [169, 254, 1, 1];
const BFD_DST_IP: [u8; 4] = [169, 254, 1, 0];
/// Geneve header, inner Ethernet, IPv4 and UDP before the control packet.
const HEADERS: usize = 8 + 14 + 20 + 8;
/// A control packet without authentication.
const CONTROL_LEN: usize = 24;

/// A session's state (RFC 5880 §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    AdminDown = 0,
    Down = 1,
    Init = 2,
    Up = 3,
}

impl State {
    fn from_bits(bits: u8) -> Self {
        match bits & 3 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }
}

/// The fields of a control packet this implementation reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Control {
    pub diagnostic: u8,
    pub state: State,
    /// P and F (RFC 5880 §6.5).
    pub poll: bool,
    pub final_: bool,
    pub detect_mult: u8,
    pub my_discriminator: u32,
    pub your_discriminator: u32,
    pub desired_min_tx_us: u32,
    pub required_min_rx_us: u32,
}

impl Control {
    /// The 24 bytes of the control packet.
    #[must_use]
    pub fn encode(&self) -> [u8; CONTROL_LEN] {
        let mut bytes = [0u8; CONTROL_LEN];
        bytes[0] = (1 << 5) | (self.diagnostic & 0x1f);
        bytes[1] = (self.state as u8) << 6
            | if self.poll { 0x20 } else { 0 }
            | if self.final_ { 0x10 } else { 0 };
        bytes[2] = self.detect_mult;
        bytes[3] = CONTROL_LEN as u8;
        bytes[4..8].copy_from_slice(&self.my_discriminator.to_be_bytes());
        bytes[8..12].copy_from_slice(&self.your_discriminator.to_be_bytes());
        bytes[12..16].copy_from_slice(&self.desired_min_tx_us.to_be_bytes());
        bytes[16..20].copy_from_slice(&self.required_min_rx_us.to_be_bytes());
        bytes
    }

    /// The control packet in `bytes`, if it is one this implementation takes (version 1, a
    /// length that fits, no authentication, a non-zero multiplier and own discriminator:
    /// RFC 5880 §6.8.6's first checks).
    #[must_use]
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let length = usize::from(*bytes.get(3)?);
        if bytes.len() < CONTROL_LEN || length < CONTROL_LEN || length > bytes.len() {
            return None;
        }
        let word = |at: usize| {
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let authenticated = bytes[1] & 0x04 != 0;
        let control = Control {
            diagnostic: bytes[0] & 0x1f,
            state: State::from_bits(bytes[1] >> 6),
            poll: bytes[1] & 0x20 != 0,
            final_: bytes[1] & 0x10 != 0,
            detect_mult: bytes[2],
            my_discriminator: word(4),
            your_discriminator: word(8),
            desired_min_tx_us: word(12),
            required_min_rx_us: word(16),
        };
        let valid = bytes[0] >> 5 == 1
            && !authenticated
            && control.detect_mult != 0
            && control.my_discriminator != 0;
        valid.then_some(control)
    }
}

/// The Geneve payload (what a UDP socket to port 6081 sends) carrying `control`, from inner
/// MAC `source_mac` and UDP port `source_port`.
#[must_use]
pub fn frame(control: &Control, source_mac: [u8; 6], source_port: u16) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADERS + CONTROL_LEN);
    // Geneve: version 0, no options, protocol Ethernet, VNI 0.
    frame.extend_from_slice(&[0, 0, 0x65, 0x58, 0, 0, 0, 0]);
    frame.extend_from_slice(&BFD_DST_MAC);
    frame.extend_from_slice(&source_mac);
    frame.extend_from_slice(&0x0800_u16.to_be_bytes());
    let total = (20 + 8 + CONTROL_LEN) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    // Internetwork control precedence, as OVS marks them.
    ip[1] = 0xc0;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 255;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&BFD_SRC_IP);
    ip[16..20].copy_from_slice(&BFD_DST_IP);
    let checksum = crate::net::internet_checksum(&ip);
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(&source_port.to_be_bytes());
    frame.extend_from_slice(&BFD_PORT.to_be_bytes());
    frame.extend_from_slice(&((8 + CONTROL_LEN) as u16).to_be_bytes());
    // No UDP checksum (allowed over IPv4).
    frame.extend_from_slice(&[0, 0]);
    frame.extend_from_slice(&control.encode());
    frame
}

/// The control packet a Geneve payload carries, if it is a tunnel's BFD packet (VNI 0, no
/// options, IPv4 UDP to port 3784).
#[must_use]
pub fn parse(payload: &[u8]) -> Option<Control> {
    let geneve = payload.get(..8)?;
    let options = usize::from(geneve[0] & 0x3f) * 4;
    if geneve[0] >> 6 != 0 || geneve[2..4] != [0x65, 0x58] || geneve[4..7] != [0, 0, 0] {
        return None;
    }
    let inner = payload.get(8 + options..)?;
    if inner.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ip = inner.get(14..34)?;
    let header = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ip[9] != 17 {
        return None;
    }
    let udp = inner.get(14 + header..14 + header + 8)?;
    if u16::from_be_bytes([udp[2], udp[3]]) != BFD_PORT {
        return None;
    }
    Control::decode(inner.get(14 + header + 8..)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control() -> Control {
        Control {
            diagnostic: 0,
            state: State::Init,
            poll: true,
            final_: false,
            detect_mult: 3,
            my_discriminator: 0x1234_5678,
            your_discriminator: 7,
            desired_min_tx_us: 100_000,
            required_min_rx_us: 1_000_000,
        }
    }

    #[test]
    fn a_control_packet_round_trips_through_its_geneve_frame() {
        let frame = frame(&control(), [0x0a, 0x58, 0, 0, 0, 1], 49_152);
        assert_eq!(frame.len(), 8 + 14 + 20 + 8 + 24);
        assert_eq!(&frame[8..14], &BFD_DST_MAC);
        // A valid IPv4 header checksum: the sum over the header is 0xffff.
        assert_eq!(crate::net::internet_checksum(&frame[22..42]), 0);
        assert_eq!(parse(&frame), Some(control()));
        // RFC 5880's layout: version 1, state Init with P set, length 24.
        let encoded = control().encode();
        assert_eq!(&encoded[..4], &[0x20, 0xa0, 3, 24]);
    }

    #[test]
    fn what_is_not_a_tunnels_bfd_packet_is_not_taken() {
        let good = frame(&control(), [0x0a, 0x58, 0, 0, 0, 1], 49_152);
        let mut other_vni = good.clone();
        other_vni[6] = 5;
        assert_eq!(parse(&other_vni), None);
        let mut other_port = good.clone();
        other_port[44] = 0x0f;
        assert_eq!(parse(&other_port), None);
        let mut no_discriminator = good.clone();
        no_discriminator[54..58].copy_from_slice(&[0; 4]);
        assert_eq!(parse(&no_discriminator), None);
        assert_eq!(parse(&good[..40]), None);
    }
}
