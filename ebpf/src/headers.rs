//! Wire headers the kernel programs parse, as packed network-order structs. Owns layouts only.

pub const ETH_HEADER_LEN: usize = 14;
pub const ETH_P_IPV4: u16 = 0x0800;

#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct EthHeader {
    pub destination: [u8; 6],
    pub source: [u8; 6],
    /// Network byte order.
    pub ether_type: u16,
}

#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct Ipv4Header {
    pub version_ihl: u8,
    pub tos: u8,
    /// Network byte order.
    pub total_len: u16,
    pub id: u16,
    pub fragment: u16,
    pub ttl: u8,
    pub protocol: u8,
    pub checksum: u16,
    pub source: u32,
    pub destination: u32,
}

pub const ETH_P_IPV6: u16 = 0x86dd;
pub const ETH_P_ARP: u16 = 0x0806;
pub const IPPROTO_UDP: u8 = 17;

#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct UdpHeader {
    /// Network byte order (all fields).
    pub source: u16,
    pub destination: u16,
    pub len: u16,
    pub checksum: u16,
}

/// Geneve base header (RFC 8926 §3.4).
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct GeneveHeader {
    /// Version (2 bits) and length of the options in 4-byte words (6 bits).
    pub version_options: u8,
    /// O (control), C (critical options present), reserved.
    pub flags: u8,
    /// Network byte order.
    pub protocol: u16,
    /// VNI (24 bits) and a reserved byte.
    pub vni_reserved: [u8; 4],
}

/// One Geneve option with 4 bytes of data, the shape of OVN's.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct GeneveOption {
    /// Network byte order.
    pub class: u16,
    pub kind: u8,
    /// Reserved (3 bits) and data length in 4-byte words (5 bits).
    pub length: u8,
    /// Network byte order.
    pub data: u32,
}

/// Outer Ethernet, IPv4 (without options) and UDP: enough to tell whether a frame is ours.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct UdpFrame {
    pub eth: EthHeader,
    pub ip: Ipv4Header,
    pub udp: UdpHeader,
}

/// Everything OVN puts in front of the inner frame, read in one go.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct OuterHeaders {
    pub udp_frame: UdpFrame,
    pub geneve: GeneveHeader,
    pub option: GeneveOption,
}

/// An Ethernet frame carrying an IPv4-over-Ethernet ARP packet.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct ArpFrame {
    pub eth: EthHeader,
    /// Network byte order (hardware type, protocol type, operation).
    pub hardware_type: u16,
    pub protocol_type: u16,
    pub hardware_len: u8,
    pub protocol_len: u8,
    pub operation: u16,
    pub sender_mac: [u8; 6],
    pub sender_ip: [u8; 4],
    pub target_mac: [u8; 6],
    pub target_ip: [u8; 4],
}

impl ArpFrame {
    /// Whether it is ARP for IPv4 over Ethernet (the only kind the datapath reads).
    #[inline(always)]
    pub fn is_ipv4_over_ethernet(&self) -> bool {
        u16::from_be(self.hardware_type) == 1
            && u16::from_be(self.protocol_type) == ETH_P_IPV4
            && self.hardware_len == 6
            && self.protocol_len == 4
    }
}

/// Ethernet, IPv4 without options, UDP: what a DHCP discovery looks like.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct Ipv4Frame {
    pub eth: EthHeader,
    pub ip: Ipv4Header,
}

pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_ICMPV6: u8 = 58;

#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct Ipv6Header {
    /// Version, traffic class and flow label (network byte order).
    pub version_class_flow: u32,
    /// Network byte order.
    pub payload_len: u16,
    pub next_header: u8,
    pub hop_limit: u8,
    pub source: [u8; 16],
    pub destination: [u8; 16],
}

/// Ethernet and IPv6 without extension headers.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct Ipv6Frame {
    pub eth: EthHeader,
    pub ip: Ipv6Header,
}

/// Everything OVN puts in front of the inner frame over an IPv6 underlay (outer IPv6 without
/// extension headers), read or written in one go.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct OuterHeaders6 {
    pub frame: Ipv6Frame,
    pub udp: UdpHeader,
    pub geneve: GeneveHeader,
    pub option: GeneveOption,
}

/// An ICMPv6 neighbour solicitation or advertisement up to its target.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct NdMessage {
    pub kind: u8,
    pub code: u8,
    /// Network byte order.
    pub checksum: u16,
    /// R, S, O flags (advertisements) and reserved bits.
    pub flags: [u8; 4],
    pub target: [u8; 16],
}

/// An ND message with one link-layer address option (source for a solicitation, target for an
/// advertisement): what OVN's `nd_ns` and `nd_na` compose (32 bytes).
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct NdBody {
    pub message: NdMessage,
    pub option_kind: u8,
    /// In units of 8 bytes.
    pub option_len: u8,
    pub option_mac: [u8; 6],
}

/// An [`NdBody`] in its IPv6 frame (86 bytes).
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct NdFrame {
    pub frame: Ipv6Frame,
    pub body: NdBody,
}
