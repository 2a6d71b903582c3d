//! The router advertisements switches' router ports answer router solicitations with
//! (`ROUTER_ADVERTS`, keyed by the switch): each router port's message
//! ([`IrEntry::RouterAdvertisement`]) under the switch its peer port is on (the patch ports'
//! [`IrEntry::Port`] entries), with the checksum's sum over what the kernel does not change.
//! A switch with several advertising router ports answers with the first by name. Owns that
//! bookkeeping and its [`Table`]; touches the kernel only through the table.

use std::collections::{BTreeMap, HashMap};

use ovnbpf_common::{ROUTER_ADVERT_MAX, RouterAdvert, ipv6::link_local, maps::RouterAdverts};

use super::super::tables::{Table, TableKey};
use crate::pipeline::ir::{IrEntry, Mac, PortKind};

impl TableKey<RouterAdverts> for u32 {
    fn slot(&self) -> u32 {
        *self
    }
}

/// The advertisements of this chassis's switches.
#[derive(Debug, Default)]
pub(super) struct RouterAdvertState {
    /// Router port → its MAC and message.
    adverts: BTreeMap<String, (Mac, Vec<u8>)>,
    /// Patch port → (its datapath, its peer port).
    patches: HashMap<String, (u32, String)>,
    pub(super) table: Table<RouterAdverts, u32>,
}

impl RouterAdvertState {
    /// Takes in an entry this family reads (`RouterAdvertisement`, patch `Port`s); others are
    /// ignored.
    pub(super) fn take(&mut self, entry: &IrEntry, added: bool) {
        match entry {
            IrEntry::RouterAdvertisement {
                port, mac, message, ..
            } => {
                self.mark_switch_of(port);
                if added {
                    self.adverts.insert(port.clone(), (*mac, message.clone()));
                } else {
                    self.adverts.remove(port);
                }
                self.mark_switch_of(port);
            }
            IrEntry::Port {
                datapath,
                name,
                kind: PortKind::Patch { peer },
                ..
            } => {
                // The port may be an advertising router port, or the switch side of one.
                let affected = [name.clone(), peer.clone()];
                affected.iter().for_each(|port| self.mark_switch_of(port));
                if added {
                    self.patches.insert(name.clone(), (*datapath, peer.clone()));
                } else {
                    self.patches.remove(name);
                }
                affected.iter().for_each(|port| self.mark_switch_of(port));
            }
            _ => {}
        }
    }

    /// The switch router port `port` leads to, if its patch ports are known.
    fn switch_of(&self, port: &str) -> Option<u32> {
        let (_, peer) = self.patches.get(port)?;
        let (switch, back) = self.patches.get(peer)?;
        (back == port).then_some(*switch)
    }

    fn mark_switch_of(&mut self, port: &str) {
        if self.adverts.contains_key(port)
            && let Some(switch) = self.switch_of(port)
        {
            self.table.mark(switch);
        }
    }

    /// The advertisement `switch` answers with (its first advertising router port's), if any.
    /// O(the chassis's advertising ports).
    pub(super) fn desired(&self, &switch: &u32) -> Option<RouterAdvert> {
        let (mac, message) = self
            .adverts
            .iter()
            .find(|(port, _)| self.switch_of(port) == Some(switch))
            .map(|(_, advert)| advert)?;
        Some(value(*mac, message))
    }
}

/// The kernel's value for `message` from `mac`: the message zero-padded, and its checksum's
/// partial sum (message, source address, length, next header).
fn value(mac: Mac, message: &[u8]) -> RouterAdvert {
    let mut advert = RouterAdvert {
        mac,
        ..RouterAdvert::default()
    };
    let length = message.len().min(ROUTER_ADVERT_MAX);
    advert.message[..length].copy_from_slice(&message[..length]);
    advert.length = length as u16;
    let words = |bytes: &[u8]| -> u32 {
        bytes
            .chunks(2)
            .map(|pair| u32::from(pair[0]) << 8 | u32::from(*pair.get(1).unwrap_or(&0)))
            .sum()
    };
    let sum = words(&advert.message[..length]) + words(&link_local(mac)) + length as u32 + 58;
    // Folded once so the kernel's additions (a destination's eight words) cannot overflow.
    advert.partial_sum = (sum & 0xffff) + (sum >> 16);
    advert
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: Mac = [0x0a, 0x58, 0, 0, 0, 1];

    fn advertisement(port: &str, byte: u8) -> IrEntry {
        IrEntry::RouterAdvertisement {
            datapath: 9,
            port: port.into(),
            mac: MAC,
            message: vec![134, 0, 0, 0, 255, byte, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0],
        }
    }

    fn patch(datapath: u32, name: &str, peer: &str) -> IrEntry {
        IrEntry::Port {
            datapath,
            key: 1,
            name: name.into(),
            kind: PortKind::Patch { peer: peer.into() },
            addresses: Vec::new(),
            port_security: Vec::new(),
        }
    }

    #[test]
    fn the_advertisement_lives_under_the_router_ports_switch_in_any_order() {
        let mut state = RouterAdvertState::default();
        state.take(&advertisement("rp", 0x80), true);
        assert_eq!(state.desired(&5), None, "no switch known yet");
        state.take(&patch(9, "rp", "sp"), true);
        state.take(&patch(5, "sp", "rp"), true);
        assert!(state.table.pending() > 0, "the switch is marked");
        let advert = state.desired(&5).unwrap();
        assert_eq!(advert.mac, MAC);
        assert_eq!(advert.length, 16);
        assert_eq!(advert.message[5], 0x80);
        assert_eq!(state.desired(&9), None, "not under the router");
        // A changed message replaces the old one.
        state.take(&advertisement("rp", 0x80), false);
        state.take(&advertisement("rp", 0x40), true);
        assert_eq!(state.desired(&5).unwrap().message[5], 0x40);
        // The switch side's port goes: nothing answers there.
        state.take(&patch(5, "sp", "rp"), false);
        assert_eq!(state.desired(&5), None);
        state.take(&patch(5, "sp", "rp"), true);
        state.take(&advertisement("rp", 0x40), false);
        assert_eq!(state.desired(&5), None);
    }

    #[test]
    fn the_partial_sum_completes_to_the_checksum_over_any_destination() {
        let message = [
            134, 0, 0, 0, 255, 0x80, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0x0a, 0x58, 0, 0, 0,
            1,
        ];
        let advert = value(MAC, &message);
        let destination: [u8; 16] = "fe80::858:aff:fe00:2"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets();
        // The checksum as the kernel completes it…
        let mut sum = advert.partial_sum;
        for pair in destination.chunks(2) {
            sum += u32::from(pair[0]) << 8 | u32::from(pair[1]);
        }
        sum = (sum & 0xffff) + (sum >> 16);
        sum = (sum & 0xffff) + (sum >> 16);
        let checksum = !(sum as u16);
        // …makes the whole pseudo header and message sum to 0xffff, summed independently.
        let mut whole = Vec::new();
        whole.extend(link_local(MAC));
        whole.extend(destination);
        whole.extend((message.len() as u32).to_be_bytes());
        whole.extend([0, 0, 0, 58]);
        let mut answered = message.to_vec();
        answered[2..4].copy_from_slice(&checksum.to_be_bytes());
        whole.extend(answered);
        let mut total: u64 = whole
            .chunks(2)
            .map(|pair| u64::from(pair[0]) << 8 | u64::from(pair[1]))
            .sum();
        while total > 0xffff {
            total = (total & 0xffff) + (total >> 16);
        }
        assert_eq!(total, 0xffff);
    }
}
