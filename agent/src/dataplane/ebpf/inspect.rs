//! Reading a running datapath from outside its agent, through the pinned maps: per-interface
//! counters (for pods' veths, the port's: interfaces are shown by name), drops per reason and the
//! routers' answers per kind, what the load balancers did (per packet and at the socket).
//! Used by `ovnbpfctl datapath`; reads the pins (creating the layout's directories if absent,
//! like the agent) and writes nothing else.

use std::{collections::BTreeMap, path::Path};

use aya::maps::{PerCpuArray, PerCpuHashMap};
use ovnbpf_common::{InterfaceCounters, drop_reason, lb, map, router_reply};

use super::{EbpfError, events::interface_names, pins::PinLayout};

/// The counters of one pinned datapath.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DatapathCounters {
    /// By ifindex: the interface's name in the reader's namespace (if any) and its counters.
    pub interfaces: BTreeMap<u32, (Option<String>, InterfaceCounters)>,
    /// By drop reason name.
    pub drops: BTreeMap<&'static str, u64>,
    /// Answers the routers sent, by kind name.
    pub router_replies: BTreeMap<&'static str, u64>,
    /// What the per-packet load balancer did, by counter name.
    pub lb: BTreeMap<&'static str, u64>,
    /// What the socket-level balancer did, by counter name.
    pub socket_lb: BTreeMap<&'static str, u64>,
}

/// Reads the counters pinned under `root` (the agent's `--pin-dir`).
pub fn read_counters(root: &Path) -> Result<DatapathCounters, EbpfError> {
    let pins = PinLayout::prepare(root)?;
    let name = map::INTERFACE_COUNTERS;
    let interfaces: PerCpuHashMap<_, u32, InterfaceCounters> =
        PerCpuHashMap::try_from(pins.open_map(name)?)
            .map_err(|source| EbpfError::Map { name, source })?;
    let mut names = interface_names();
    let mut counters = DatapathCounters::default();
    for entry in interfaces.iter() {
        let (ifindex, per_cpu) = entry.map_err(|source| EbpfError::Map { name, source })?;
        let total = per_cpu
            .iter()
            .fold(InterfaceCounters::default(), |sum, c| sum.sum(*c));
        counters
            .interfaces
            .insert(ifindex, (names.remove(&ifindex), total));
    }
    counters.drops = named_totals(&pins, map::DROP_COUNTERS, &drop_reason::NAMES)?;
    counters.router_replies = named_totals(&pins, map::ROUTER_REPLIES, &router_reply::NAMES)?;
    counters.lb = named_totals(&pins, map::LB_COUNTERS, &lb::counter::NAMES)?;
    counters.socket_lb = named_totals(&pins, map::SOCK_LB_COUNTERS, &lb::socket_counter::NAMES)?;
    Ok(counters)
}

/// The pinned per-CPU `u64` array `name`, summed over CPUs, its indexes named by `names`.
fn named_totals(
    pins: &PinLayout,
    name: &'static str,
    names: &[&'static str],
) -> Result<BTreeMap<&'static str, u64>, EbpfError> {
    let array: PerCpuArray<_, u64> = PerCpuArray::try_from(pins.open_map(name)?)
        .map_err(|source| EbpfError::Map { name, source })?;
    (0_u32..)
        .zip(names)
        .map(|(index, label)| {
            let per_cpu = array
                .get(&index, 0)
                .map_err(|source| EbpfError::Map { name, source })?;
            Ok((*label, per_cpu.iter().sum()))
        })
        .collect()
}
