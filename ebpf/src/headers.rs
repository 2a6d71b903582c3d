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

/// Ethernet, IPv4 without options, UDP: what a DHCP discovery looks like.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct Ipv4Frame {
    pub eth: EthHeader,
    pub ip: Ipv4Header,
}
