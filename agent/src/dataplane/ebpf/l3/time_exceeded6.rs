//! The routers' ICMPv6 time exceeded (`TIME_EXCEEDED6`): per router port, the networks whose
//! senders it answers when their hop limit runs out on entering it, and the port's address in
//! each (northd's priority-31 IPv6 flows of `lr_in_ip_input`, [`IrEntry::TtlExceeded6`]). The
//! kernel finds them by the port's MAC ([`IrEntry::RouterPort`]), which the IPv6 stage sees as
//! the frame's destination, and the sender's address (an LPM lookup). Owns that bookkeeping and
//! its [`Table`]; touches the kernel only through the table.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::Ipv6Addr;

use ovnbpf_common::{
    TIME_EXCEEDED6_KEY_PREFIX_BITS, TimeExceeded6Key, TimeExceeded6Source, maps::TimeExceeded6,
};

use super::super::tables::{Table, TableKey};
use crate::pipeline::ir::{IrEntry, Mac, Prefix6};

/// Where an answer lives: the router, its port's MAC and the sender's network.
pub(super) type Slot6 = (u32, Mac, Prefix6);

impl TableKey<TimeExceeded6> for Slot6 {
    fn slot(&self) -> (TimeExceeded6Key, u32) {
        let (router, mac, network) = *self;
        let masked = u128::from(network.network) & network.mask();
        let key = TimeExceeded6Key {
            router: router.to_be(),
            mac,
            padding: [0; 2],
            source: masked.to_be_bytes(),
        };
        (
            key,
            TIME_EXCEEDED6_KEY_PREFIX_BITS + u32::from(network.length.min(128)),
        )
    }
}

/// The time exceeded answers of this chassis's routers.
#[derive(Debug, Default)]
pub(super) struct TimeExceeded6State {
    /// (router port, router, MAC) → how many `RouterPort` entries say so (northd admits unicast
    /// and multicast in flows of their own).
    port_macs: HashMap<(String, u32, Mac), usize>,
    /// Router port → its (router, MAC) pairs.
    macs_of: HashMap<String, HashSet<(u32, Mac)>>,
    /// (router, MAC) → the ports that have it (one, unless misconfigured: the first name wins).
    ports_by_mac: HashMap<(u32, Mac), BTreeSet<String>>,
    /// Router port → sender network → the address the answer comes from.
    sources: HashMap<String, HashMap<Prefix6, Ipv6Addr>>,
    pub(super) table: Table<TimeExceeded6, Slot6>,
}

impl TimeExceeded6State {
    /// Takes in an entry this family reads (`RouterPort`, `TtlExceeded6`); others are ignored.
    pub(super) fn take(&mut self, entry: &IrEntry, added: bool) {
        match entry {
            IrEntry::RouterPort {
                datapath,
                port,
                mac,
                ..
            } => self.take_mac(port, (*datapath, *mac), added),
            IrEntry::TtlExceeded6 {
                port,
                network,
                source,
                ..
            } => {
                let sources = self.sources.entry(port.clone()).or_default();
                if added {
                    sources.insert(*network, *source);
                } else {
                    sources.remove(network);
                }
                if sources.is_empty() {
                    self.sources.remove(port);
                }
                for &(router, mac) in self.macs_of.get(port).into_iter().flatten() {
                    self.table.mark((router, mac, *network));
                }
            }
            _ => {}
        }
    }

    fn take_mac(&mut self, port: &str, (router, mac): (u32, Mac), added: bool) {
        let key = (port.to_string(), router, mac);
        let count = self.port_macs.entry(key.clone()).or_default();
        let before = *count;
        if added {
            *count += 1;
        } else {
            *count = count.saturating_sub(1);
        }
        let after = *count;
        if after == 0 {
            self.port_macs.remove(&key);
        }
        if (before == 0) == (after == 0) {
            return;
        }
        let macs = self.macs_of.entry(port.to_string()).or_default();
        let ports = self.ports_by_mac.entry((router, mac)).or_default();
        if after > 0 {
            macs.insert((router, mac));
            ports.insert(port.to_string());
        } else {
            macs.remove(&(router, mac));
            ports.remove(port);
        }
        if macs.is_empty() {
            self.macs_of.remove(port);
        }
        if ports.is_empty() {
            self.ports_by_mac.remove(&(router, mac));
        }
        for network in self.sources.get(port).into_iter().flat_map(HashMap::keys) {
            self.table.mark((router, mac, *network));
        }
    }

    /// The answer's source for `slot`, if the port with that MAC answers that network.
    pub(super) fn desired(&self, &(router, mac, network): &Slot6) -> Option<TimeExceeded6Source> {
        let port = self.ports_by_mac.get(&(router, mac))?.first()?;
        let address = self.sources.get(port)?.get(&network)?;
        Some(TimeExceeded6Source {
            address: address.octets(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router_port(port: &str, mac: u8, multicast: bool) -> IrEntry {
        IrEntry::RouterPort {
            datapath: 9,
            port: port.into(),
            mac: [0x0a, 0x58, 0, 0, 0, mac],
            multicast,
        }
    }

    fn ttl_exceeded(port: &str, network: &str, source: &str) -> IrEntry {
        IrEntry::TtlExceeded6 {
            datapath: 9,
            port: port.into(),
            network: Prefix6 {
                network: network.parse().unwrap(),
                length: 64,
            },
            source: source.parse().unwrap(),
        }
    }

    fn slot(mac: u8, network: &str) -> Slot6 {
        (
            9,
            [0x0a, 0x58, 0, 0, 0, mac],
            Prefix6 {
                network: network.parse().unwrap(),
                length: 64,
            },
        )
    }

    fn source(state: &TimeExceeded6State, mac: u8, network: &str) -> Option<Ipv6Addr> {
        state
            .desired(&slot(mac, network))
            .map(|s| Ipv6Addr::from(s.address))
    }

    #[test]
    fn answers_follow_the_port_mac_and_its_networks_in_either_order() {
        let mut state = TimeExceeded6State::default();
        // The flow before the port's admission: nothing to key it by yet.
        state.take(&ttl_exceeded("p1", "fd00:31::", "fd00:31::1"), true);
        assert_eq!(source(&state, 1, "fd00:31::"), None);
        state.take(&router_port("p1", 1, false), true);
        state.take(&router_port("p1", 1, true), true);
        assert_eq!(
            source(&state, 1, "fd00:31::"),
            Some("fd00:31::1".parse().unwrap())
        );
        assert!(
            state.table.pending() > 0,
            "the slot is marked for the kernel"
        );
        // Another port's MAC and another network answer nothing.
        assert_eq!(source(&state, 2, "fd00:31::"), None);
        assert_eq!(source(&state, 1, "fd00:32::"), None);
        // One admission flow of two goes: the port keeps its MAC.
        state.take(&router_port("p1", 1, true), false);
        assert!(source(&state, 1, "fd00:31::").is_some());
        state.take(&router_port("p1", 1, false), false);
        assert_eq!(source(&state, 1, "fd00:31::"), None);
        state.take(&router_port("p1", 1, false), true);
        state.take(&ttl_exceeded("p1", "fd00:31::", "fd00:31::1"), false);
        assert_eq!(source(&state, 1, "fd00:31::"), None);
    }

    #[test]
    fn the_kernel_key_is_the_masked_network_after_router_and_mac() {
        let (key, bits) = TableKey::<TimeExceeded6>::slot(&(
            9,
            [1, 2, 3, 4, 5, 6],
            Prefix6 {
                network: "fd00:31::ff".parse().unwrap(),
                length: 64,
            },
        ));
        assert_eq!(bits, 96 + 64);
        assert_eq!(key.router, 9_u32.to_be());
        assert_eq!(key.mac, [1, 2, 3, 4, 5, 6]);
        assert_eq!(
            Ipv6Addr::from(key.source),
            "fd00:31::".parse::<Ipv6Addr>().unwrap()
        );
    }
}
