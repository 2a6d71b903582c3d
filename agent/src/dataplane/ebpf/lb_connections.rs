//! The agent's side of the kernel's table of balanced connections (`LB_CONNECTIONS`, see
//! `ebpf/src/lb.rs`): sweeping the translations of connections that are over, and emptying
//! the table. The kernel alone writes entries; the agent only reads and deletes. Touches that
//! one map.
//!
//! A connection has two entries (the client's packets, and the replies: at delivery, or back
//! from the same port for a hairpin), and each entry's partner is found from the entry itself:
//! it is keyed by the reply of the packet the entry makes. A connection is over when neither
//! entry saw a packet for the lifetime the kernel gives it (Linux conntrack's: one clock for
//! both directions), so a server that talks while its client is silent keeps the pair.

use std::collections::HashMap;

use aya::maps::{HashMap as AyaHashMap, Map};
use ovnbpf_common::{
    lb::{FROM_PORT, LB_NAT_CLOSING, LB_NAT_HAIRPIN, LbNat, LbNatKey, TO_PORT, lifetime},
    map,
};

use super::EbpfError;

/// The key of `key`'s partner: the reply of the packet `nat` makes of it, looked up where the
/// reply goes (delivered to the client, or, for a hairpin or the reply side, from it).
#[must_use]
pub fn partner(key: &LbNatKey, nat: &LbNat) -> LbNatKey {
    let direction = if key.direction == FROM_PORT && nat.flags & LB_NAT_HAIRPIN == 0 {
        TO_PORT
    } else {
        FROM_PORT
    };
    LbNatKey {
        source: nat.destination,
        destination: nat.source,
        source_port: nat.destination_port,
        destination_port: nat.source_port,
        direction,
        ..*key
    }
}

/// The entries of `entries` whose connection is over at `now` ([`super::conntrack::monotonic_now`]).
#[must_use]
pub fn over(entries: &[(LbNatKey, LbNat)], now: u64) -> Vec<LbNatKey> {
    let by_key: HashMap<LbNatKey, LbNat> = entries.iter().copied().collect();
    entries
        .iter()
        .filter(|(key, nat)| {
            let other = by_key.get(&partner(key, nat));
            let last_seen = other.map_or(nat.last_seen, |o| o.last_seen.max(nat.last_seen));
            let flags = nat.flags | other.map_or(0, |o| o.flags & LB_NAT_CLOSING);
            now.saturating_sub(last_seen) >= lifetime(key.protocol, flags)
        })
        .map(|(key, _)| *key)
        .collect()
}

fn table(map: &mut Map) -> Result<AyaHashMap<&mut aya::maps::MapData, LbNatKey, LbNat>, EbpfError> {
    let name = map::LB_CONNECTIONS;
    AyaHashMap::try_from(map).map_err(|source| EbpfError::Map { name, source })
}

/// Deletes the translations of connections over at `now`, or all of them; returns how many
/// entries went and how many live on.
pub fn sweep(map: &mut Map, now: Option<u64>) -> Result<(usize, usize), EbpfError> {
    let name = map::LB_CONNECTIONS;
    let mut table = table(map)?;
    let listed = table
        .iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| EbpfError::Map { name, source })?;
    let gone = match now {
        Some(now) => over(&listed, now),
        None => listed.iter().map(|(key, _)| *key).collect(),
    };
    let mut removed = 0;
    for key in &gone {
        match table.remove(key) {
            Ok(()) => removed += 1,
            // Evicted meanwhile.
            Err(error) if super::maps::absent(&error) => {}
            Err(source) => return Err(EbpfError::Map { name, source }),
        }
    }
    Ok((removed, listed.len() - gone.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovnbpf_common::lb::{CLOSING_LIFETIME_NS, UDP_LIFETIME_NS};

    const SECOND: u64 = 1_000_000_000;

    /// A connection from 10.0.1.10:40000 to VIP 10.96.0.10:53 balanced to 10.0.1.2:5353:
    /// its entry for the client's packets and its entry for the replies.
    fn pair(protocol: u8, forward_seen: u64, reply_seen: u64) -> Vec<(LbNatKey, LbNat)> {
        let (client, vip, backend) = (0x0a01_000a, 0x0a00_600a, 0x0201_000a);
        let key = LbNatKey {
            datapath: 5,
            port: 3,
            source: client,
            destination: vip,
            source_port: 40000,
            destination_port: 53,
            protocol,
            direction: FROM_PORT,
            padding: 0,
        };
        let forward = LbNat {
            source: client,
            destination: backend,
            source_port: 40000,
            destination_port: 5353,
            flags: 0,
            last_seen: forward_seen,
        };
        let reply_key = LbNatKey {
            source: backend,
            destination: client,
            source_port: 5353,
            destination_port: 40000,
            direction: TO_PORT,
            ..key
        };
        let reply = LbNat {
            source: vip,
            destination: client,
            source_port: 53,
            destination_port: 40000,
            flags: 0,
            last_seen: reply_seen,
        };
        assert_eq!(partner(&key, &forward), reply_key);
        assert_eq!(partner(&reply_key, &reply), key);
        vec![(key, forward), (reply_key, reply)]
    }

    #[test]
    fn a_connection_is_over_when_neither_side_spoke_for_its_lifetime() {
        let now = 1_000 * SECOND;
        assert!(over(&pair(17, now - SECOND, now - SECOND), now).is_empty());
        // The client silent, the server still talking: the pair stays.
        assert!(over(&pair(17, now - UDP_LIFETIME_NS - SECOND, now - SECOND), now).is_empty());
        assert_eq!(
            over(&pair(17, now - UDP_LIFETIME_NS, now - UDP_LIFETIME_NS), now).len(),
            2
        );
        // TCP lives longer.
        assert!(over(&pair(6, now - UDP_LIFETIME_NS, now - UDP_LIFETIME_NS), now).is_empty());
        // A reset or FIN on either side: 10 s.
        let mut closing = pair(6, now - CLOSING_LIFETIME_NS, now - CLOSING_LIFETIME_NS);
        closing[1].1.flags |= LB_NAT_CLOSING;
        assert_eq!(over(&closing, now).len(), 2);
        // An entry without its partner (evicted) lives by its own clock.
        let lone = &pair(17, now - UDP_LIFETIME_NS, now)[..1];
        assert_eq!(over(lone, now).len(), 1);
    }

    #[test]
    fn a_hairpins_entries_are_each_others_partners() {
        // The client 10.0.1.2 balanced to itself: its packets become VIP:40000 → client:8080,
        // the replies client:8080 → VIP:40000 become VIP:80 → client:40000.
        let (client, vip) = (0x0201_000a, 0x0a00_600a);
        let key = LbNatKey {
            datapath: 5,
            port: 3,
            source: client,
            destination: vip,
            source_port: 40000,
            destination_port: 80,
            protocol: 6,
            direction: FROM_PORT,
            padding: 0,
        };
        let forward = LbNat {
            source: vip,
            destination: client,
            source_port: 40000,
            destination_port: 8080,
            flags: LB_NAT_HAIRPIN,
            last_seen: 0,
        };
        let back = LbNatKey {
            source: client,
            destination: vip,
            source_port: 8080,
            destination_port: 40000,
            ..key
        };
        let reply = LbNat {
            source: vip,
            destination: client,
            source_port: 80,
            destination_port: 40000,
            flags: LB_NAT_HAIRPIN,
            last_seen: 0,
        };
        assert_eq!(partner(&key, &forward), back);
        assert_eq!(partner(&back, &reply), key);
    }
}
