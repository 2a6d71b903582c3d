//! The pieces of an ICMPv6 router advertisement as OVN writes them (`lib/actions.c`'s
//! `encode_put_nd_ra_option` for `put_nd_ra_opts`, `controller/pinctrl.c`'s `packet_put_ra_*`
//! and OVS's `compose_nd_ra` for periodic ones: the same layouts, RFC 4861, 4191 and 8106):
//! the header, and one function per option. Pure functions over bytes.
//!
//! Hand-written: these are OVN's own choices of values (infinite lifetimes, router lifetime
//! 0xffff, hop limit 255); no crate encodes them so.

use std::net::Ipv6Addr;

use crate::pipeline::ir::Mac;

/// The header's managed (M) flag: addresses from stateful DHCPv6.
pub const MANAGED: u8 = 0x80;
/// The header's other-configuration (O) flag: stateless DHCPv6.
pub const OTHER: u8 = 0x40;
/// A prefix's on-link (L) flag.
pub const ON_LINK: u8 = 0x80;
/// A prefix's autonomous (A) flag: SLAAC from it.
pub const AUTONOMOUS: u8 = 0x40;
/// Lifetimes OVN writes: infinite.
const INFINITE: [u8; 4] = [0xff; 4];

/// The header flags of an address mode (`dhcpv6_stateful`, `dhcpv6_stateless`, `slaac`), and
/// its prefixes' flags; `None` for another mode.
#[must_use]
pub fn mode_flags(mode: &str) -> Option<(u8, u8)> {
    match mode {
        "dhcpv6_stateful" => Some((MANAGED, ON_LINK)),
        "dhcpv6_stateless" => Some((OTHER, ON_LINK | AUTONOMOUS)),
        "slaac" => Some((0, ON_LINK | AUTONOMOUS)),
        _ => None,
    }
}

/// The header flags of a router preference (`HIGH`, `LOW`; anything else medium).
#[must_use]
pub fn preference(name: &str) -> u8 {
    match name {
        "HIGH" => 0x08,
        "LOW" => 0x18,
        _ => 0,
    }
}

/// The 16-byte header: type 134, checksum 0, current hop limit 255, `flags`, router lifetime
/// 0xffff, reachable time and retransmission timer 0.
#[must_use]
pub fn header(flags: u8) -> Vec<u8> {
    vec![134, 0, 0, 0, 255, flags, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0]
}

/// The source link-layer address option.
#[must_use]
pub fn source_link_layer(mac: Mac) -> [u8; 8] {
    [1, 1, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]]
}

/// The MTU option.
#[must_use]
pub fn mtu(mtu: u32) -> [u8; 8] {
    let [a, b, c, d] = mtu.to_be_bytes();
    [5, 1, 0, 0, a, b, c, d]
}

/// A prefix information option, `flags` L and A as the mode says, infinite lifetimes.
#[must_use]
pub fn prefix(address: Ipv6Addr, length: u8, flags: u8) -> Vec<u8> {
    let mut option = vec![3, 4, length, flags];
    option.extend(INFINITE);
    option.extend(INFINITE);
    option.extend([0; 4]);
    option.extend(address.octets());
    option
}

/// The recursive DNS server option (one server, infinite lifetime).
#[must_use]
pub fn dns_server(server: Ipv6Addr) -> Vec<u8> {
    let mut option = vec![0x19, 3, 0, 0];
    option.extend(INFINITE);
    option.extend(server.octets());
    option
}

/// The DNS search list option of `domains` (comma-separated), as OVN encodes it: each name in
/// labels, the option zero-padded to 8 bytes.
pub fn search_list(domains: &str) -> Result<Vec<u8>, String> {
    let mut names = Vec::new();
    for domain in domains.split(',') {
        for label in domain.split('.').filter(|label| !label.is_empty()) {
            let length = u8::try_from(label.len())
                .ok()
                .filter(|length| *length < 64)
                .ok_or_else(|| format!("DNS label {label:?}"))?;
            names.push(length);
            names.extend(label.bytes());
        }
        names.push(0);
    }
    let total = (8 + names.len()).div_ceil(8) * 8;
    let units = u8::try_from(total / 8).map_err(|_| "search list too long".to_string())?;
    let mut option = vec![0x1f, units, 0, 0];
    option.extend(INFINITE);
    option.extend(names);
    option.resize(total, 0);
    Ok(option)
}

/// The route information options of `routes`, comma-separated `PREFERENCE-prefix/length`
/// (`HIGH-fd05::/64`): the network, not the address given, as OVN copies it.
pub fn route_information(routes: &str) -> Result<Vec<u8>, String> {
    let mut options = Vec::new();
    for route in routes.split(',') {
        let (preference_name, prefix) = route
            .split_once('-')
            .ok_or_else(|| format!("route {route:?}"))?;
        let (address, length) = prefix
            .split_once('/')
            .ok_or_else(|| format!("route {route:?} without a length"))?;
        let address: Ipv6Addr = address.parse().map_err(|_| format!("route {route:?}"))?;
        let length: u8 = length
            .parse()
            .ok()
            .filter(|length| *length <= 128)
            .ok_or_else(|| format!("route {route:?}"))?;
        let words = usize::from(length).div_ceil(64);
        options.extend([0x18, 1 + words as u8, length, preference(preference_name)]);
        options.extend(INFINITE);
        let mask = u128::MAX.checked_shl(128 - u32::from(length)).unwrap_or(0);
        let network = (u128::from(address) & mask).to_be_bytes();
        options.extend(&network[..words * 8]);
    }
    Ok(options)
}

/// The ICMPv6 checksum of `message` (its checksum field 0) from `source` to `destination`.
#[must_use]
pub fn checksum(source: Ipv6Addr, destination: Ipv6Addr, message: &[u8]) -> u16 {
    let words = |bytes: &[u8]| -> u32 {
        bytes
            .chunks(2)
            .map(|pair| u32::from(pair[0]) << 8 | u32::from(*pair.get(1).unwrap_or(&0)))
            .sum()
    };
    let mut sum = words(&source.octets())
        + words(&destination.octets())
        + words(message)
        + message.len() as u32
        + 58;
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
