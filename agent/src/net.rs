//! The agent's network vocabulary: MAC addresses (parsed and printed as `0a:58:0a:00:01:02`),
//! IPv4 and IPv6 prefixes (`contains`, `mask`) and the addresses of a logical switch port as the
//! Southbound writes them (`mac` and `port_security` columns: "MAC [IP[/prefix]…]", as typed
//! [`LspAddress`]es with a clear error for entries that do not parse). Pure
//! values and parsing; imports nothing from the rest of the agent (only the shared contract's
//! address derivations, `ovnbpf_common::ipv6`, which the kernel uses too).

use std::{
    fmt,
    net::{Ipv4Addr, Ipv6Addr},
    str::FromStr,
};

/// A MAC address's octets, as the IR and the kernel maps carry them.
pub type MacOctets = [u8; 6];

/// A MAC address: parsed from and printed as six two-digit hex groups separated by colons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mac(pub MacOctets);

/// Text that is not a MAC address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a MAC address: {0:?}")]
pub struct BadMac(pub String);

impl FromStr for Mac {
    type Err = BadMac;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadMac(text.to_string());
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() != 6 || parts.iter().any(|p| p.len() != 2) {
            return Err(bad());
        }
        let mut octets = [0_u8; 6];
        for (octet, part) in octets.iter_mut().zip(parts) {
            *octet = u8::from_str_radix(part, 16).map_err(|_| bad())?;
        }
        Ok(Mac(octets))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// "0a:58:0a:00:01:02" → octets (exactly six two-digit hex groups).
#[must_use]
pub fn parse_mac(text: &str) -> Option<MacOctets> {
    text.parse::<Mac>().ok().map(|mac| mac.0)
}

/// The EUI-64 link-local address of `mac` (`in6_generate_lla`: what OVN gives router ports and
/// what a pod's kernel derives for its interface).
#[must_use]
pub fn ipv6_link_local(mac: &MacOctets) -> std::net::Ipv6Addr {
    ovnbpf_common::ipv6::link_local(*mac).into()
}

/// Octets → "0a:58:0a:00:01:02".
#[must_use]
pub fn format_mac(mac: &MacOctets) -> String {
    Mac(*mac).to_string()
}

/// An IPv4 prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Prefix {
    pub network: Ipv4Addr,
    pub length: u8,
}

impl Ipv4Prefix {
    /// The netmask of the prefix length (lengths over 32 count as 32).
    #[must_use]
    pub fn mask(&self) -> u32 {
        match self.length {
            0 => 0,
            length => u32::MAX << (32 - u32::from(length.min(32))),
        }
    }

    #[must_use]
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.network) & self.mask()
    }
}

/// An IPv6 prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv6Prefix {
    pub network: Ipv6Addr,
    pub length: u8,
}

impl Ipv6Prefix {
    /// The netmask of the prefix length (lengths over 128 count as 128).
    #[must_use]
    pub fn mask(&self) -> u128 {
        match self.length {
            0 => 0,
            length => u128::MAX << (128 - u32::from(length.min(128))),
        }
    }

    #[must_use]
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        u128::from(ip) & self.mask() == u128::from(self.network) & self.mask()
    }
}

/// "fd00:10:16::/64".
impl fmt::Display for Ipv6Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.length)
    }
}

/// "10.16.0.0/16".
impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.length)
    }
}

/// One entry of a logical switch port's addresses as the Southbound writes them (the
/// Port_Binding `mac` and `port_security` columns): "MAC [IP[/prefix]…]". A bare address is a
/// host prefix (/32, /128); a prefix keeps its address as written (a router port's
/// "10.0.1.1/24" is its address 10.0.1.1 on a /24).
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LspAddress {
    pub mac: MacOctets,
    pub ipv4: Vec<Ipv4Prefix>,
    pub ipv6: Vec<Ipv6Prefix>,
}

/// The Southbound's form: "MAC IPv4… IPv6…", host prefixes as bare addresses.
impl fmt::Display for LspAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Mac(self.mac))?;
        for prefix in &self.ipv4 {
            match prefix.length {
                32 => write!(f, " {}", prefix.network)?,
                length => write!(f, " {}/{length}", prefix.network)?,
            }
        }
        for prefix in &self.ipv6 {
            match prefix.length {
                128 => write!(f, " {}", prefix.network)?,
                length => write!(f, " {}/{length}", prefix.network)?,
            }
        }
        Ok(())
    }
}

/// As the Southbound writes it (`ovnbpfctl ir` prints entries with `Debug`).
impl fmt::Debug for LspAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LspAddress(\"{self}\")")
    }
}

/// An address entry that does not parse (OVN ignores such an entry too, with a warning).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadLspAddress {
    #[error("address entry {entry:?} does not start with a MAC address")]
    Mac { entry: String },
    #[error("address entry {entry:?}: {word:?} is not an IPv4 or IPv6 address or prefix")]
    Ip { entry: String, word: String },
}

impl FromStr for LspAddress {
    type Err = BadLspAddress;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        let mut words = entry.split_whitespace();
        let mac = words
            .next()
            .and_then(parse_mac)
            .ok_or_else(|| BadLspAddress::Mac {
                entry: entry.to_string(),
            })?;
        let mut address = LspAddress {
            mac,
            ..LspAddress::default()
        };
        for word in words {
            let bad = || BadLspAddress::Ip {
                entry: entry.to_string(),
                word: word.to_string(),
            };
            let (ip, length) = match word.split_once('/') {
                Some((ip, length)) => (ip, Some(length.parse::<u8>().map_err(|_| bad())?)),
                None => (word, None),
            };
            if let Ok(network) = ip.parse::<Ipv4Addr>() {
                let length = length.unwrap_or(32);
                if length > 32 {
                    return Err(bad());
                }
                address.ipv4.push(Ipv4Prefix { network, length });
            } else if let Ok(network) = ip.parse::<Ipv6Addr>() {
                let length = length.unwrap_or(128);
                if length > 128 {
                    return Err(bad());
                }
                address.ipv6.push(Ipv6Prefix { network, length });
            } else {
                return Err(bad());
            }
        }
        Ok(address)
    }
}

/// The words of a logical switch port's `addresses` that are no address entry: "unknown"
/// (the port accepts unknown MACs), "router" (its router peer's addresses), "dynamic" (northd
/// allocates), optionally followed by an address for "dynamic".
#[must_use]
pub fn is_address_keyword(entry: &str) -> bool {
    matches!(
        entry.split_whitespace().next(),
        Some("unknown" | "router" | "dynamic")
    )
}

/// One logical switch port address entry, "MAC [IP[/prefix]…]": the MAC and its IPv4 prefixes
/// (see [`LspAddress`]). `None` if the entry does not parse.
#[must_use]
pub fn parse_lsp_address(entry: &str) -> Option<(MacOctets, Vec<Ipv4Prefix>)> {
    let address: LspAddress = entry.parse().ok()?;
    Some((address.mac, address.ipv4))
}

/// The Internet checksum (RFC 1071) of `bytes` (an odd length padded with a zero byte): what
/// the agent's own packets carry (the node NIC's ping, health-check probes).
#[must_use]
pub fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_and_print_in_ovn_form() {
        let mac: Mac = "0a:58:0A:00:01:ff".parse().unwrap();
        assert_eq!(mac.0, [0x0a, 0x58, 0x0a, 0x00, 0x01, 0xff]);
        assert_eq!(mac.to_string(), "0a:58:0a:00:01:ff");
        for bad in [
            "0a:58:0a:00:01",
            "a:58:0a:00:01:ff",
            "0a:58:0a:00:01:fg",
            "",
        ] {
            assert!(bad.parse::<Mac>().is_err(), "{bad}");
        }
    }

    #[test]
    fn prefixes_contain_their_addresses_only() {
        let subnet = Ipv4Prefix {
            network: Ipv4Addr::new(10, 0, 1, 0),
            length: 24,
        };
        assert!(subnet.contains(Ipv4Addr::new(10, 0, 1, 200)));
        assert!(!subnet.contains(Ipv4Addr::new(10, 0, 2, 1)));
        let default = Ipv4Prefix {
            network: Ipv4Addr::UNSPECIFIED,
            length: 0,
        };
        assert!(default.contains(Ipv4Addr::new(192, 0, 2, 1)));
        let v6 = Ipv6Prefix {
            network: "fd00:10::".parse().unwrap(),
            length: 64,
        };
        assert!(v6.contains("fd00:10::5".parse().unwrap()));
        assert!(!v6.contains("fd00:11::5".parse().unwrap()));
    }

    #[test]
    fn lsp_addresses_give_the_mac_and_ipv4_prefixes() {
        let (mac, prefixes) =
            parse_lsp_address("0a:58:0a:00:01:02 10.0.1.2 10.0.2.0/24 fd00::2").unwrap();
        assert_eq!(mac, [0x0a, 0x58, 0x0a, 0x00, 0x01, 0x02]);
        assert_eq!(
            prefixes,
            [
                Ipv4Prefix {
                    network: Ipv4Addr::new(10, 0, 1, 2),
                    length: 32
                },
                Ipv4Prefix {
                    network: Ipv4Addr::new(10, 0, 2, 0),
                    length: 24
                }
            ]
        );
        assert_eq!(parse_lsp_address("unknown"), None);
    }

    #[test]
    fn lsp_addresses_parse_typed_with_both_families() {
        let address: LspAddress = "0a:58:0a:00:01:01 10.0.1.1/24 fd00:10::1/64 fd00::5"
            .parse()
            .unwrap();
        assert_eq!(address.mac, [0x0a, 0x58, 0x0a, 0x00, 0x01, 0x01]);
        assert_eq!(
            address.ipv4,
            [Ipv4Prefix {
                network: Ipv4Addr::new(10, 0, 1, 1),
                length: 24
            }]
        );
        assert_eq!(
            address.ipv6,
            [
                Ipv6Prefix {
                    network: "fd00:10::1".parse().unwrap(),
                    length: 64
                },
                Ipv6Prefix {
                    network: "fd00::5".parse().unwrap(),
                    length: 128
                }
            ]
        );
        assert_eq!(
            address.to_string(),
            "0a:58:0a:00:01:01 10.0.1.1/24 fd00:10::1/64 fd00::5",
            "printed as the Southbound writes it"
        );
        let mac_only: LspAddress = "0a:58:0a:00:01:01".parse().unwrap();
        assert!(mac_only.ipv4.is_empty() && mac_only.ipv6.is_empty());
        assert_eq!(format!("{mac_only:?}"), "LspAddress(\"0a:58:0a:00:01:01\")");
    }

    #[test]
    fn bad_lsp_addresses_say_which_word_is_wrong() {
        for (entry, error) in [
            (
                "unknown",
                "address entry \"unknown\" does not start with a MAC address",
            ),
            ("", "address entry \"\" does not start with a MAC address"),
            (
                "0a:58:0a:00:01:01 10.0.1.300",
                "address entry \"0a:58:0a:00:01:01 10.0.1.300\": \"10.0.1.300\" is not an IPv4 \
                 or IPv6 address or prefix",
            ),
            (
                "0a:58:0a:00:01:01 10.0.1.1/33",
                "address entry \"0a:58:0a:00:01:01 10.0.1.1/33\": \"10.0.1.1/33\" is not an \
                 IPv4 or IPv6 address or prefix",
            ),
            (
                "0a:58:0a:00:01:01 fd00::1/129",
                "address entry \"0a:58:0a:00:01:01 fd00::1/129\": \"fd00::1/129\" is not an \
                 IPv4 or IPv6 address or prefix",
            ),
        ] {
            let parsed = entry.parse::<LspAddress>();
            assert_eq!(
                parsed.as_ref().map_err(ToString::to_string),
                Err(error.to_string()),
                "{entry}"
            );
        }
        assert!(is_address_keyword("unknown"));
        assert!(is_address_keyword("dynamic 10.0.1.5"));
        assert!(is_address_keyword("router"));
        assert!(!is_address_keyword("0a:58:0a:00:01:01"));
    }
}
