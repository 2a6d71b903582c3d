//! Match fields as OpenFlow 1.5 carries them: OXM TLVs (`class u16 | field u7 | hasmask u1 |
//! length u8`, then the value and, with `hasmask`, the mask), in the OpenFlow basic class and
//! Nicira's NXM_1 class (registers, tunnel ID and metadata), inside an `ofp_match` of type OXM
//! padded to 8 bytes.
//!
//! Open vSwitch checks each field's prerequisites against the fields before it (an IPv4
//! address needs `eth_type=0x0800` earlier in the match), so [`Match`] keeps its fields in an
//! order that puts every prerequisite first, whatever order they were added in.

/// The OpenFlow basic class.
const OFPXMC_OPENFLOW_BASIC: u16 = 0x8000;
/// Nicira's extension class 1 (`NXM_NX_*`).
const NXM_1: u16 = 0x0001;

/// NXM headers (`class << 16 | field << 9 | length`) of the fields Nicira's `move` action
/// copies bits between: the logical input and output ports (`reg14`, `reg15`), the tunnel ID,
/// the first tunnel metadata field (its maximum length, as OVS writes it in actions) and the
/// pipeline metadata.
pub const NXM_REG14: u32 = 0x0001_0000 | 14 << 9 | 4;
pub const NXM_REG15: u32 = 0x0001_0000 | 15 << 9 | 4;
pub const NXM_TUN_ID: u32 = 0x0001_0000 | 16 << 9 | 8;
pub const NXM_TUN_METADATA0: u32 = 0x0001_0000 | 40 << 9 | 124;
pub const OXM_METADATA: u32 = 0x8000_0000 | 2 << 9 | 8;
/// `reg0` and `reg1` (the routers' next hop, and a scratch register for swapping addresses).
pub const NXM_REG0: u32 = 0x0001_0000 | 4;
pub const NXM_REG1: u32 = 0x0001_0000 | 1 << 9 | 4;
/// `reg2` and `reg3`: with `reg0` and `reg1`, an IPv6 next hop (`xxreg0`, `reg0` its most
/// significant word).
pub const NXM_REG2: u32 = 0x0001_0000 | 2 << 9 | 4;
pub const NXM_REG3: u32 = 0x0001_0000 | 3 << 9 | 4;
/// `reg8` and `reg9`: an ECMP group's member index and the group.
pub const NXM_REG8: u32 = 0x0001_0000 | 8 << 9 | 4;
pub const OXM_IPV6_SRC: u32 = 0x8000_0000 | 26 << 9 | 16;
pub const OXM_IPV6_DST: u32 = 0x8000_0000 | 27 << 9 | 16;
/// The OXM headers of the header fields the routers' and switches' replies copy between.
pub const OXM_ETH_DST: u32 = 0x8000_0000 | 3 << 9 | 6;
pub const OXM_ETH_SRC: u32 = 0x8000_0000 | 4 << 9 | 6;
pub const OXM_IPV4_SRC: u32 = 0x8000_0000 | 11 << 9 | 4;
pub const OXM_IPV4_DST: u32 = 0x8000_0000 | 12 << 9 | 4;
pub const OXM_ARP_SPA: u32 = 0x8000_0000 | 22 << 9 | 4;
pub const OXM_ARP_TPA: u32 = 0x8000_0000 | 23 << 9 | 4;
pub const OXM_ARP_SHA: u32 = 0x8000_0000 | 24 << 9 | 6;
pub const OXM_ARP_THA: u32 = 0x8000_0000 | 25 << 9 | 6;

/// One match field: its class, field number and value bytes, with an optional mask of the same
/// length.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Field {
    /// Where it goes in a match: prerequisites first (see [`Match`]).
    rank: u8,
    class: u16,
    field: u8,
    value: Vec<u8>,
    mask: Option<Vec<u8>>,
}

impl Field {
    fn new(rank: u8, class: u16, field: u8, value: &[u8]) -> Self {
        Self {
            rank,
            class,
            field,
            value: value.to_vec(),
            mask: None,
        }
    }

    /// The field with `mask` (its bits that must match); an all-ones mask is no mask.
    #[must_use]
    pub fn masked(mut self, mask: &[u8]) -> Self {
        if mask.iter().any(|byte| *byte != 0xff) {
            self.mask = Some(mask.to_vec());
        }
        self
    }

    /// The packet's input port (`in_port`, a 32-bit port number).
    #[must_use]
    pub fn in_port(port: u32) -> Self {
        Self::new(0, OFPXMC_OPENFLOW_BASIC, 0, &port.to_be_bytes())
    }

    /// The pipeline's metadata (OVN: the datapath's tunnel key).
    #[must_use]
    pub fn metadata(value: u64) -> Self {
        Self::new(1, OFPXMC_OPENFLOW_BASIC, 2, &value.to_be_bytes())
    }

    /// Register `reg0`–`reg15` (`NXM_NX_REGn`; OVN: reg14 the logical input port, reg15 the
    /// output port).
    ///
    /// # Panics
    /// If `index` is over 15.
    #[must_use]
    pub fn register(index: u8, value: u32) -> Self {
        assert!(index < 16, "reg{index} does not exist");
        Self::new(2, NXM_1, index, &value.to_be_bytes())
    }

    /// The tunnel ID (Geneve's VNI; OVN: the datapath's tunnel key).
    #[must_use]
    pub fn tunnel_id(value: u64) -> Self {
        Self::new(3, NXM_1, 16, &value.to_be_bytes())
    }

    /// Tunnel metadata field `tun_metadata0` (OVN maps its Geneve option to it), `value`'s
    /// bytes as the option carries them.
    #[must_use]
    pub fn tunnel_metadata0(value: &[u8]) -> Self {
        Self::new(3, NXM_1, 40, value)
    }

    #[must_use]
    pub fn eth_destination(mac: [u8; 6]) -> Self {
        Self::new(4, OFPXMC_OPENFLOW_BASIC, 3, &mac)
    }

    #[must_use]
    pub fn eth_source(mac: [u8; 6]) -> Self {
        Self::new(4, OFPXMC_OPENFLOW_BASIC, 4, &mac)
    }

    #[must_use]
    pub fn eth_type(ether_type: u16) -> Self {
        Self::new(5, OFPXMC_OPENFLOW_BASIC, 5, &ether_type.to_be_bytes())
    }

    /// The VLAN ID with OpenFlow's "present" bit (`0x1000 | vid`); `0` matches frames
    /// without a tag.
    #[must_use]
    pub fn vlan_vid(vid_with_present_bit: u16) -> Self {
        Self::new(
            6,
            OFPXMC_OPENFLOW_BASIC,
            6,
            &vid_with_present_bit.to_be_bytes(),
        )
    }

    /// The IP protocol (needs `eth_type` IPv4 or IPv6 before it).
    #[must_use]
    pub fn ip_protocol(protocol: u8) -> Self {
        Self::new(7, OFPXMC_OPENFLOW_BASIC, 10, &[protocol])
    }

    #[must_use]
    pub fn ipv4_source(address: std::net::Ipv4Addr) -> Self {
        Self::new(8, OFPXMC_OPENFLOW_BASIC, 11, &address.octets())
    }

    #[must_use]
    pub fn ipv4_destination(address: std::net::Ipv4Addr) -> Self {
        Self::new(8, OFPXMC_OPENFLOW_BASIC, 12, &address.octets())
    }

    /// An IPv4 destination prefix (`length` bits of `network`).
    #[must_use]
    pub fn ipv4_destination_prefix(network: std::net::Ipv4Addr, length: u8) -> Self {
        Self::ipv4_destination(network).masked(&prefix_mask(length).to_be_bytes())
    }

    /// An IPv4 source prefix (`length` bits of `network`).
    #[must_use]
    pub fn ipv4_source_prefix(network: std::net::Ipv4Addr, length: u8) -> Self {
        Self::ipv4_source(network).masked(&prefix_mask(length).to_be_bytes())
    }

    #[must_use]
    pub fn ipv6_source(address: std::net::Ipv6Addr) -> Self {
        Self::new(8, OFPXMC_OPENFLOW_BASIC, 26, &address.octets())
    }

    #[must_use]
    pub fn ipv6_destination(address: std::net::Ipv6Addr) -> Self {
        Self::new(8, OFPXMC_OPENFLOW_BASIC, 27, &address.octets())
    }

    /// An IPv6 destination prefix (`length` bits of `network`).
    #[must_use]
    pub fn ipv6_destination_prefix(network: std::net::Ipv6Addr, length: u8) -> Self {
        Self::ipv6_destination(network).masked(&prefix_mask6(length).to_be_bytes())
    }

    /// An IPv6 source prefix (`length` bits of `network`).
    #[must_use]
    pub fn ipv6_source_prefix(network: std::net::Ipv6Addr, length: u8) -> Self {
        Self::ipv6_source(network).masked(&prefix_mask6(length).to_be_bytes())
    }

    /// The IP TTL (`NXM_NX_IP_TTL`; needs `eth_type` IPv4 or IPv6 before it).
    #[must_use]
    pub fn ip_ttl(ttl: u8) -> Self {
        Self::new(7, NXM_1, 29, &[ttl])
    }

    /// Not a later fragment (`NXM_NX_IP_FRAG`'s "later" bit clear: OVN's `!ip.later_frag`).
    #[must_use]
    pub fn not_later_fragment() -> Self {
        Self::new(7, NXM_1, 26, &[0]).masked(&[2])
    }

    #[must_use]
    pub fn tcp_source(port: u16) -> Self {
        Self::new(9, OFPXMC_OPENFLOW_BASIC, 13, &port.to_be_bytes())
    }

    #[must_use]
    pub fn udp_source(port: u16) -> Self {
        Self::new(9, OFPXMC_OPENFLOW_BASIC, 15, &port.to_be_bytes())
    }

    #[must_use]
    pub fn sctp_source(port: u16) -> Self {
        Self::new(9, OFPXMC_OPENFLOW_BASIC, 17, &port.to_be_bytes())
    }

    #[must_use]
    pub fn sctp_destination(port: u16) -> Self {
        Self::new(9, OFPXMC_OPENFLOW_BASIC, 18, &port.to_be_bytes())
    }

    /// The ICMPv4 type (needs `ip_protocol` 1 before it).
    #[must_use]
    pub fn icmpv4_type(icmp_type: u8) -> Self {
        Self::new(9, OFPXMC_OPENFLOW_BASIC, 19, &[icmp_type])
    }

    /// The ICMPv6 type (needs `ip_protocol` 58 before it).
    #[must_use]
    pub fn icmpv6_type(icmp_type: u8) -> Self {
        Self::new(9, OFPXMC_OPENFLOW_BASIC, 29, &[icmp_type])
    }

    /// The ICMPv6 code (needs `icmpv6_type` before it).
    #[must_use]
    pub fn icmpv6_code(code: u8) -> Self {
        Self::new(10, OFPXMC_OPENFLOW_BASIC, 30, &[code])
    }

    /// A neighbour discovery message's target (needs `icmpv6_type` 135 or 136 before it).
    #[must_use]
    pub fn nd_target(address: std::net::Ipv6Addr) -> Self {
        Self::new(10, OFPXMC_OPENFLOW_BASIC, 31, &address.octets())
    }

    #[must_use]
    pub fn arp_source_ip(address: std::net::Ipv4Addr) -> Self {
        Self::new(9, OFPXMC_OPENFLOW_BASIC, 22, &address.octets())
    }

    /// An ARP sender prefix (`length` bits of `network`).
    #[must_use]
    pub fn arp_source_prefix(network: std::net::Ipv4Addr, length: u8) -> Self {
        Self::arp_source_ip(network).masked(&prefix_mask(length).to_be_bytes())
    }

    #[must_use]
    pub fn arp_source_mac(mac: [u8; 6]) -> Self {
        Self::new(9, OFPXMC_OPENFLOW_BASIC, 24, &mac)
    }

    #[must_use]
    pub fn tcp_destination(port: u16) -> Self {
        Self::new(9, OFPXMC_OPENFLOW_BASIC, 14, &port.to_be_bytes())
    }

    #[must_use]
    pub fn udp_destination(port: u16) -> Self {
        Self::new(9, OFPXMC_OPENFLOW_BASIC, 16, &port.to_be_bytes())
    }

    /// The ARP opcode (needs `eth_type=0x0806` before it).
    #[must_use]
    pub fn arp_op(op: u16) -> Self {
        Self::new(8, OFPXMC_OPENFLOW_BASIC, 21, &op.to_be_bytes())
    }

    #[must_use]
    pub fn arp_target_ip(address: std::net::Ipv4Addr) -> Self {
        Self::new(9, OFPXMC_OPENFLOW_BASIC, 23, &address.octets())
    }

    /// The field's TLV: header, value, mask.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let length = self.value.len() + self.mask.as_ref().map_or(0, Vec::len);
        out.extend(self.class.to_be_bytes());
        out.push(self.field << 1 | u8::from(self.mask.is_some()));
        // Values are at most 124 bytes (tun_metadata), masks the same: always fits.
        out.push(u8::try_from(length).unwrap_or(u8::MAX));
        out.extend(&self.value);
        if let Some(mask) = &self.mask {
            out.extend(mask);
        }
    }
}

/// The mask of an IPv4 prefix of `length` bits.
fn prefix_mask(length: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(length.min(32)))
        .unwrap_or(0)
}

/// The mask of an IPv6 prefix of `length` bits.
fn prefix_mask6(length: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(length.min(128)))
        .unwrap_or(0)
}

/// A flow's match: its fields, encoded prerequisites first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Match {
    fields: Vec<Field>,
}

impl Match {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The match with `field` added (kept in encoding order, so that two matches of the same
    /// fields are equal whatever order they were added in).
    #[must_use]
    pub fn with(mut self, field: Field) -> Self {
        let at = self.fields.partition_point(|other| *other <= field);
        self.fields.insert(at, field);
        self
    }

    /// The `ofp_match`: type OXM, its length (header and fields, not the padding), the fields,
    /// zeros to a multiple of 8 bytes.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let mut body = Vec::new();
        for field in &self.fields {
            field.encode(&mut body);
        }
        let length = 4 + body.len();
        out.extend(1_u16.to_be_bytes());
        out.extend(u16::try_from(length).unwrap_or(u16::MAX).to_be_bytes());
        out.extend(body);
        out.resize(out.len() + padding(length), 0);
    }
}

/// The zeros that bring `length` bytes to a multiple of 8.
pub(super) const fn padding(length: usize) -> usize {
    (8 - length % 8) % 8
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty match is 4 bytes of header and 4 of padding; a field's TLV header carries its
    /// class, number, mask bit and length; prerequisites come first whatever the order added.
    #[test]
    fn matches_encode_as_open_vswitch_reads_them() {
        let mut empty = Vec::new();
        Match::new().encode(&mut empty);
        assert_eq!(empty, [0, 1, 0, 4, 0, 0, 0, 0]);

        let mut out = Vec::new();
        Match::new()
            .with(Field::ipv4_destination_prefix(
                std::net::Ipv4Addr::new(10, 0, 1, 0),
                24,
            ))
            .with(Field::eth_type(0x0800))
            .with(Field::register(14, 1))
            .encode(&mut out);
        assert_eq!(
            out,
            [
                0,
                1,
                0,
                30, // OXM match, 4 + 26 bytes
                0,
                1,
                14 << 1,
                4,
                0,
                0,
                0,
                1, // reg14 = 1
                0x80,
                0,
                5 << 1,
                2,
                8,
                0, // eth_type = 0x0800
                0x80,
                0,
                12 << 1 | 1,
                8,
                10,
                0,
                1,
                0,
                255,
                255,
                255,
                0, // ip4.dst/24
                0,
                0, // to 32 bytes
            ]
        );
        assert_eq!(out.len() % 8, 0);
    }
}
