//! The agent's side of the kernel's connection table (`CONNTRACK`, see `ebpf/src/conntrack.rs`):
//! listing it, sweeping the entries whose lifetime ran out (the kernel treats them as absent, but
//! they hold their slot until the LRU evicts them), and emptying it. The kernel alone writes
//! entries; the agent only reads and deletes, on the loaded programs or on the pinned map a
//! running datapath uses (an off-loop job opens it by its pin). Touches that one map, and has
//! [`lb_connections`] sweep the load balancers' table in the same pass.

use std::path::Path;

use aya::maps::{HashMap, IterableMap, Map};
use ovnbpf_common::{
    acl::{CtEntry, CtKey},
    map,
};

use super::{EbpfError, KernelPrograms, lb_connections, pins::PinLayout};
use crate::dataplane::ConnectionSweep;

/// The monotonic clock the kernel stamps entries with (`bpf_ktime_get_ns`), in nanoseconds.
#[must_use]
pub fn monotonic_now() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) };
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}

/// The table's `max_entries`, as the kernel created it.
fn map_capacity(map: &Map) -> Result<usize, EbpfError> {
    let name = map::CONNTRACK;
    let table: HashMap<_, CtKey, CtEntry> =
        HashMap::try_from(map).map_err(|source| EbpfError::Map { name, source })?;
    let info = table
        .map()
        .info()
        .map_err(|source| EbpfError::Map { name, source })?;
    Ok(info.max_entries() as usize)
}

fn entries(map: &Map) -> Result<Vec<(CtKey, CtEntry)>, EbpfError> {
    let name = map::CONNTRACK;
    let table: HashMap<_, CtKey, CtEntry> =
        HashMap::try_from(map).map_err(|source| EbpfError::Map { name, source })?;
    table
        .iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| EbpfError::Map { name, source })
}

/// Deletes the entries of `map` expired at `now`, or all of them; returns how many went and how
/// many live on (as listed before the deletions: entries the kernel adds meanwhile count at
/// the next sweep).
fn remove(map: &mut Map, now: Option<u64>) -> Result<ConnectionSweep, EbpfError> {
    let name = map::CONNTRACK;
    let listed = entries(map)?;
    let total = listed.len();
    let gone: Vec<CtKey> = listed
        .into_iter()
        .filter(|(_, entry)| now.is_none_or(|now| entry.expires <= now))
        .map(|(key, _)| key)
        .collect();
    let live = total - gone.len();
    let capacity = map_capacity(map)?;
    let mut table: HashMap<_, CtKey, CtEntry> =
        HashMap::try_from(map).map_err(|source| EbpfError::Map { name, source })?;
    let mut removed = 0;
    for key in gone {
        match table.remove(&key) {
            Ok(()) => removed += 1,
            // Evicted or swept meanwhile.
            Err(error) if super::maps::absent(&error) => {}
            Err(source) => return Err(EbpfError::Map { name, source }),
        }
    }
    Ok(ConnectionSweep {
        removed,
        live,
        capacity,
        ..ConnectionSweep::default()
    })
}

impl KernelPrograms {
    /// The committed connections.
    pub fn connections(&self) -> Result<Vec<(CtKey, CtEntry)>, EbpfError> {
        let name = map::CONNTRACK;
        entries(self.ebpf.map(name).ok_or(EbpfError::MissingMap { name })?)
    }

    /// Forgets every connection, balanced ones too (tests replay packets from empty tables).
    pub fn clear_connections(&mut self) -> Result<usize, EbpfError> {
        let (balanced, _) = lb_connections::sweep(self.map_mut(map::LB_CONNECTIONS)?, None)?;
        Ok(remove(self.map_mut(map::CONNTRACK)?, None)?.removed + balanced)
    }

    /// Deletes the connections expired at `now` ([`monotonic_now`]), and the translations of
    /// balanced connections that are over.
    pub fn sweep_connections(&mut self, now: u64) -> Result<ConnectionSweep, EbpfError> {
        let mut sweep = remove(self.map_mut(map::CONNTRACK)?, Some(now))?;
        (sweep.balanced_removed, sweep.balanced_live) =
            lb_connections::sweep(self.map_mut(map::LB_CONNECTIONS)?, Some(now))?;
        Ok(sweep)
    }
}

/// Deletes the expired connections of the table pinned under `root` (a running datapath's);
/// returns how many went and how many live on.
pub fn sweep_pinned(root: &Path) -> Result<ConnectionSweep, EbpfError> {
    let pins = PinLayout::prepare(root)?;
    let now = monotonic_now();
    let mut sweep = remove(&mut pins.open_map(map::CONNTRACK)?, Some(now))?;
    (sweep.balanced_removed, sweep.balanced_live) =
        lb_connections::sweep(&mut pins.open_map(map::LB_CONNECTIONS)?, Some(now))?;
    Ok(sweep)
}
