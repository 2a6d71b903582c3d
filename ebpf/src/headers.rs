//! Wire headers the kernel programs parse, as packed network-order structs. Owns layouts only.

pub const ETH_HEADER_LEN: usize = 14;
pub const ETH_P_IPV4: u16 = 0x0800;

#[repr(C, packed)]
pub struct EthHeader {
    pub destination: [u8; 6],
    pub source: [u8; 6],
    /// Network byte order.
    pub ether_type: u16,
}

#[repr(C, packed)]
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
