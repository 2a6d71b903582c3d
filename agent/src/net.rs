//! The agent's network vocabulary: MAC addresses (parsed and printed as `0a:58:0a:00:01:02`),
//! IPv4 and IPv6 prefixes (`contains`, `mask`) and the addresses of a logical switch port as the
//! Southbound writes them (`mac` and `port_security` columns: "MAC [IP[/prefix]…]"). Pure
//! values and parsing; imports nothing from the rest of the agent.

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

/// One logical switch port address entry, "MAC [IP[/prefix]…]" (the Port_Binding `mac` and
/// `port_security` columns): the MAC and its IPv4 prefixes (a bare address is a /32; IPv6
/// addresses are skipped). `None` if the MAC does not parse.
#[must_use]
pub fn parse_lsp_address(entry: &str) -> Option<(MacOctets, Vec<Ipv4Prefix>)> {
    let mut words = entry.split_whitespace();
    let mac = parse_mac(words.next()?)?;
    let prefixes = words
        .filter_map(|word| {
            let (address, length) = word.split_once('/').unwrap_or((word, "32"));
            Some(Ipv4Prefix {
                network: address.parse().ok()?,
                length: length.parse().ok().filter(|length| *length <= 32)?,
            })
        })
        .collect();
    Some((mac, prefixes))
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
}
