//! The remote-endpoint family of the L2 maps: other chassis's Geneve endpoints as the kernel
//! names them (endpoint keys, see `ovnbpf_common::TunnelConfig`) and what each asks of the
//! frames sent to it (`REMOTE_ENCAPS`): an outer UDP checksum when its Encap row says
//! `options:csum=true`.
//!
//! Over an IPv4 underlay an endpoint's key is its address, and endpoints asking nothing have no
//! entry. Over an IPv6 one the key is derived from the address (the XOR of its four 32-bit
//! words, the next free value on a collision, never 0), so a restarted agent, which rebuilds the
//! registry from the same rows, gives each endpoint the key its predecessor gave it in all but
//! colliding cases, and the FIB entries it adopts keep pointing at the right chassis; every
//! registered endpoint has an entry holding its address. Endpoints of the other family are not
//! reachable from this node (OVN's tunnels do not cross families either). Owns its desired
//! values; installs through the state's [`Table`](super::super::tables::Table).

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv6Addr},
};

use ovnbpf_common::{REMOTE_ENCAP_CSUM, RemoteEncap, maps::RemoteEncaps};

use super::{
    super::{
        EbpfError, Maps,
        tables::{TableKey, flush_from},
    },
    L2State,
};

impl TableKey<RemoteEncaps> for u32 {
    fn slot(&self) -> u32 {
        *self
    }
}

/// The other chassis's endpoints this node tunnels to, by address and by key.
#[derive(Debug, Default)]
pub(super) struct Endpoints {
    /// This node's underlay is IPv6.
    ipv6: bool,
    /// Each endpoint's wish for outer checksums (its Encap's `options:csum`).
    checksums: HashMap<IpAddr, bool>,
    /// IPv6 underlays: each endpoint's key, and back.
    keys: HashMap<Ipv6Addr, u32>,
    addresses: HashMap<u32, Ipv6Addr>,
}

impl Endpoints {
    /// The key of the endpoint at `ip`, if this node's underlay reaches it (an IPv6 endpoint
    /// must be registered first).
    pub(super) fn key(&self, ip: IpAddr) -> Option<u32> {
        match (ip, self.ipv6) {
            (IpAddr::V4(ip), false) => Some(u32::from_ne_bytes(ip.octets())),
            (IpAddr::V6(ip), true) => self.keys.get(&ip).copied(),
            _ => None,
        }
    }

    /// Endpoint `ip` wants outer checksums (`csum`), or is gone (`None`); its key, whose
    /// `REMOTE_ENCAPS` entry may have changed, if this node's underlay reaches it.
    fn set(&mut self, ip: IpAddr, csum: Option<bool>) -> Option<u32> {
        let key = match (ip, csum) {
            (IpAddr::V6(ip6), Some(_)) if self.ipv6 => Some(self.register(ip6)),
            _ => self.key(ip),
        };
        match csum {
            Some(csum) => {
                self.checksums.insert(ip, csum);
            }
            None => {
                self.checksums.remove(&ip);
                if let (IpAddr::V6(ip6), Some(key)) = (ip, key) {
                    self.keys.remove(&ip6);
                    self.addresses.remove(&key);
                }
            }
        }
        key
    }

    /// The key of IPv6 endpoint `ip`, given it now if it has none.
    fn register(&mut self, ip: Ipv6Addr) -> u32 {
        if let Some(&key) = self.keys.get(&ip) {
            return key;
        }
        let mut key = derived_key(ip);
        while key == 0 || self.addresses.contains_key(&key) {
            key = key.wrapping_add(1);
        }
        self.keys.insert(ip, key);
        self.addresses.insert(key, ip);
        key
    }

    /// The `REMOTE_ENCAPS` entry of the endpoint with key `key`.
    fn desired(&self, key: u32) -> Option<RemoteEncap> {
        let (ip, ip6) = if self.ipv6 {
            let ip6 = *self.addresses.get(&key)?;
            (IpAddr::V6(ip6), ip6.octets())
        } else {
            (IpAddr::from(key.to_ne_bytes()), [0; 16])
        };
        let flags = match self.checksums.get(&ip) {
            Some(true) => REMOTE_ENCAP_CSUM,
            Some(false) => 0,
            None => return None,
        };
        // Over IPv4 an endpoint asking nothing needs no entry; over IPv6 the entry holds the
        // address the kernel sends to.
        (flags != 0 || self.ipv6).then_some(RemoteEncap { flags, ip6 })
    }
}

/// An IPv6 endpoint's preferred key: the XOR of its address's four 32-bit words.
fn derived_key(ip: Ipv6Addr) -> u32 {
    let octets = ip.octets();
    octets
        .chunks_exact(4)
        .map(|word| u32::from_be_bytes([word[0], word[1], word[2], word[3]]))
        .fold(0, |key, word| key ^ word)
}

impl L2State {
    /// This node's underlay is IPv6 (`true`) or IPv4: which endpoints it reaches and how the
    /// kernel names them. Set before the first IR diff.
    pub fn set_ipv6_underlay(&mut self, ipv6: bool) {
        self.endpoints.ipv6 = ipv6;
    }

    /// Endpoint `ip` wants outer checksums (`csum`), or is gone (`None`).
    pub(super) fn set_endpoint(&mut self, ip: IpAddr, csum: Option<bool>) {
        if let Some(key) = self.endpoints.set(ip, csum) {
            self.remote_encap_table.mark(key);
        }
    }

    /// Writes the marked endpoints.
    pub(super) fn flush_remote_encaps(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        flush_from(
            self,
            maps,
            |s| &mut s.remote_encap_table,
            |s, &key| s.endpoints.desired(key),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(text: &str) -> IpAddr {
        IpAddr::V6(text.parse().unwrap())
    }

    #[test]
    fn ipv6_endpoints_get_derived_keys_that_never_collide_and_entries_holding_their_address() {
        let mut endpoints = Endpoints {
            ipv6: true,
            ..Endpoints::default()
        };
        let first = endpoints.set(v6("fd00:172::a"), Some(true)).unwrap();
        assert_eq!(first, 0xfd00_0172 ^ 0xa);
        // The same XOR of words: the next free key.
        let second = endpoints.set(v6("fd00:172:0:a::"), Some(false));
        assert_eq!(
            derived_key("fd00:172:0:a::".parse().unwrap()),
            first,
            "the test's two addresses collide"
        );
        assert_eq!(second, Some(first + 1));
        assert_eq!(
            endpoints.desired(first),
            Some(RemoteEncap {
                flags: REMOTE_ENCAP_CSUM,
                ip6: "fd00:172::a".parse::<Ipv6Addr>().unwrap().octets(),
            })
        );
        assert_eq!(
            endpoints.desired(first + 1).map(|encap| encap.flags),
            Some(0),
            "over IPv6 an endpoint asking nothing still has its address installed"
        );
        // An address whose words cancel out never gets key 0 (the kernel's "none").
        let zero = endpoints.set(v6("::"), Some(false)).unwrap();
        assert_ne!(zero, 0);
        // Re-registered: the same key.
        assert_eq!(endpoints.set(v6("fd00:172::a"), Some(false)), Some(first));
        // Gone: its key is free and has no entry.
        assert_eq!(endpoints.set(v6("fd00:172::a"), None), Some(first));
        assert_eq!(endpoints.desired(first), None);
        assert_eq!(endpoints.key(v6("fd00:172::a")), None);
        // IPv4 endpoints are not reached over an IPv6 underlay.
        assert_eq!(
            endpoints.set("172.18.0.3".parse().unwrap(), Some(true)),
            None
        );
    }

    #[test]
    fn ipv4_endpoints_are_keyed_by_address_with_entries_only_for_checksums() {
        let mut endpoints = Endpoints::default();
        let ip: IpAddr = "172.18.0.3".parse().unwrap();
        let key = u32::from_ne_bytes([172, 18, 0, 3]);
        assert_eq!(endpoints.set(ip, Some(false)), Some(key));
        assert_eq!(endpoints.desired(key), None);
        assert_eq!(endpoints.set(ip, Some(true)), Some(key));
        assert_eq!(
            endpoints.desired(key),
            Some(RemoteEncap {
                flags: REMOTE_ENCAP_CSUM,
                ip6: [0; 16]
            })
        );
        assert_eq!(endpoints.set(v6("fd00:172::a"), Some(true)), None);
        assert_eq!(endpoints.key(v6("fd00:172::a")), None);
    }
}
