//! The load-balancer family of the L2 maps: each switch's VIPs (`LB_VIPS`, with the session
//! affinity timeout where the flows give one), the switches that have VIPs (`LB_SWITCHES`:
//! deliveries to their ports translate replies back), the addresses that are VIPs
//! (`LB_ADDRESSES`, one entry per (switch, address) however many ports it has), and the backend
//! groups (`LB_BACKENDS` by index, `LB_MEMBERS` by address): one group per distinct backend
//! list (its id a hash of the list, so a restarted agent finds each list where the kernel holds
//! it), shared by every switch and VIP with that list (Kube-OVN attaches a VPC's balancers to
//! all its subnets, so a Service's backends are written once, not once per subnet). The
//! connection table (`LB_CONNECTIONS`) and clients' affinities (`LB_AFFINITIES`) are the
//! kernel's: established connections keep their backend when the list changes, as OVN's
//! conntrack entries do; new ones see the new list. With `--socket-lb`, the pods plugged here
//! whose network namespace is known are listed by its cookie (`SOCK_LB_CLIENTS`: their switch
//! and address), for the socket-level balancer.
//!
//! Incremental: a VIP's change writes its own key, its address and switch and, when its backend
//! list is new, that group's entries: O(its backends).

use std::{
    collections::{HashMap, HashSet},
    net::Ipv4Addr,
};

use ovnbpf_common::{
    lb::{
        LB_VIP_HAIRPIN, LB_VIP_REJECT, LbAddressKey, LbBackend as KernelBackend, LbBackendKey,
        LbMemberKey, LbVip as KernelVip, LbVipKey, SockLbClient,
    },
    maps::{LbAddresses, LbBackends, LbMembers, LbSwitches, LbVips, SockLbClients},
};

use super::{
    super::{
        EbpfError, Maps,
        maps::Slot,
        tables::{Pass, Table, TableKey, flush_from, flush_from_with},
    },
    L2State,
};
use crate::pipeline::ir::{LbBackend, LbProtocol, LbVip};

impl TableKey<LbVips> for LbVipKey {
    fn slot(&self) -> Slot<LbVips> {
        *self
    }
}

impl TableKey<LbSwitches> for u32 {
    fn slot(&self) -> Slot<LbSwitches> {
        *self
    }
}

impl TableKey<LbAddresses> for LbAddressKey {
    fn slot(&self) -> Slot<LbAddresses> {
        *self
    }
}

impl TableKey<LbBackends> for LbBackendKey {
    fn slot(&self) -> Slot<LbBackends> {
        *self
    }
}

impl TableKey<SockLbClients> for u64 {
    fn slot(&self) -> Slot<SockLbClients> {
        *self
    }
}

impl TableKey<LbMembers> for LbMemberKey {
    fn slot(&self) -> Slot<LbMembers> {
        *self
    }
}

/// A backend group: an id and the VIPs using it.
#[derive(Debug)]
struct Group {
    id: u32,
    users: usize,
}

/// The family's state: the IR's VIPs, the groups, and what is installed.
#[derive(Debug, Default)]
pub(super) struct LbState {
    vips: HashMap<LbVipKey, LbVip>,
    /// VIPs per (switch, address).
    addresses: HashMap<LbAddressKey, usize>,
    /// VIPs per switch: a switch with any has its ports flagged.
    vips_per_switch: HashMap<u32, usize>,
    hairpin_switches: HashSet<u32>,
    /// VIPs with session affinity: their timeout in seconds.
    affinities: HashMap<LbVipKey, u32>,
    groups: HashMap<Vec<LbBackend>, Group>,
    group_backends: HashMap<u32, Vec<LbBackend>>,
    switch_table: Table<LbSwitches, u32>,
    vip_table: Table<LbVips, LbVipKey>,
    address_table: Table<LbAddresses, LbAddressKey>,
    backend_table: Table<LbBackends, LbBackendKey>,
    member_table: Table<LbMembers, LbMemberKey>,
    /// The socket-level balancer (`--socket-lb`): whether it serves pods, and each plugged
    /// pod's network namespace cookie, both ways.
    socket_lb: bool,
    netns_of_port: HashMap<String, u64>,
    port_of_netns: HashMap<u64, String>,
    client_table: Table<SockLbClients, u64>,
}

impl LbState {
    pub(super) fn pending(&self) -> usize {
        self.vip_table.pending()
            + self.switch_table.pending()
            + self.address_table.pending()
            + self.backend_table.pending()
            + self.member_table.pending()
            + self.client_table.pending()
    }

    fn key(datapath: u32, vip: &LbVip) -> LbVipKey {
        vip_key(datapath, vip.vip, vip.port, vip.protocol)
    }

    /// Takes VIP `vip` of datapath `datapath` in (or out, while it is still that VIP), with
    /// its backend group, and marks its entry. `None` when nothing changed; else whether the
    /// VIP's key came or went (`false`: a VIP replaced by another of the same key).
    fn take_vip(&mut self, datapath: u32, vip: &LbVip, added: bool) -> Option<bool> {
        let key = Self::key(datapath, vip);
        let counted = if added {
            let old = self.vips.insert(key, vip.clone());
            if let Some(old) = &old {
                self.release(&old.backends);
            }
            self.acquire(&vip.backends);
            old.is_none()
        } else {
            if self.vips.get(&key) != Some(vip) {
                return None;
            }
            self.vips.remove(&key);
            self.release(&vip.backends);
            true
        };
        self.vip_table.mark(key);
        Some(counted)
    }

    /// Takes the group of `backends` (a new one gets an id and its entries marked).
    fn acquire(&mut self, backends: &[LbBackend]) {
        if backends.is_empty() {
            return;
        }
        if let Some(group) = self.groups.get_mut(backends) {
            group.users += 1;
            return;
        }
        let id = self.free_id(backends);
        self.mark_group(id, backends);
        self.group_backends.insert(id, backends.to_vec());
        self.groups
            .insert(backends.to_vec(), Group { id, users: 1 });
    }

    /// Gives the group of `backends` back (its entries go when no VIP uses it).
    fn release(&mut self, backends: &[LbBackend]) {
        let Some(group) = self.groups.get_mut(backends) else {
            return;
        };
        group.users -= 1;
        if group.users > 0 {
            return;
        }
        let id = group.id;
        self.groups.remove(backends);
        self.group_backends.remove(&id);
        self.mark_group(id, backends);
    }

    /// The id of a new group of `backends`: a hash of the list, the next free one on a
    /// collision (never 0). Derived from the list, not from the order groups came in, so an
    /// agent that restarts over a running datapath gives each list the id the kernel already
    /// holds it under, and no VIP sees another VIP's backends while the new agent rewrites
    /// the groups.
    fn free_id(&self, backends: &[LbBackend]) -> u32 {
        let mut hash: u32 = 0x811c_9dc5;
        for backend in backends {
            let port = backend.port.unwrap_or(0).to_be_bytes();
            for byte in backend.ip.octets().into_iter().chain(port) {
                hash = (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193);
            }
        }
        let mut id = hash.max(1);
        while self.group_backends.contains_key(&id) {
            id = id.wrapping_add(1).max(1);
        }
        id
    }

    /// Marks group `id`'s entries of `backends` (by index and by address).
    fn mark_group(&mut self, id: u32, backends: &[LbBackend]) {
        for (index, backend) in backends.iter().enumerate() {
            self.backend_table.mark(LbBackendKey {
                group: id,
                index: index as u32,
            });
            self.member_table.mark(member_key(id, backend));
        }
    }

    fn desired_vip(&self, key: &LbVipKey) -> Option<KernelVip> {
        let vip = self.vips.get(key)?;
        let group = self.groups.get(&vip.backends).map_or(0, |group| group.id);
        let hash = vip.hash_flags();
        let reject = if vip.reject { LB_VIP_REJECT } else { 0 };
        let hairpin = if self.hairpin_switches.contains(&key.datapath) {
            LB_VIP_HAIRPIN
        } else {
            0
        };
        Some(KernelVip {
            group,
            count: vip.backends.len() as u32,
            flags: hash | reject | hairpin,
            affinity_seconds: self.affinities.get(key).copied().unwrap_or(0),
        })
    }

    fn desired_member(&self, key: &LbMemberKey) -> Option<u32> {
        let backends = self.group_backends.get(&key.group)?;
        let index = backends
            .iter()
            .position(|backend| member_key(key.group, backend) == *key)?;
        Some(index as u32)
    }

    fn desired_backend(&self, key: &LbBackendKey) -> Option<KernelBackend> {
        let backend = self
            .group_backends
            .get(&key.group)?
            .get(key.index as usize)?;
        Some(KernelBackend {
            ip: u32::from_ne_bytes(backend.ip.octets()),
            port: backend.port.unwrap_or(0),
            padding: 0,
        })
    }
}

impl L2State {
    /// A VIP of switch `datapath` is added or removed.
    pub(super) fn take_lb_vip(&mut self, datapath: u32, vip: &LbVip, added: bool) {
        let Some(counted) = self.lb.take_vip(datapath, vip, added) else {
            return;
        };
        let address = LbAddressKey {
            datapath,
            ip: LbState::key(datapath, vip).vip,
        };
        let lb = &mut self.lb;
        match (counted, added) {
            (true, true) => {
                *lb.addresses.entry(address).or_default() += 1;
                *lb.vips_per_switch.entry(datapath).or_default() += 1;
            }
            (true, false) => {
                decrement(&mut lb.addresses, address);
                decrement(&mut lb.vips_per_switch, datapath);
            }
            (false, _) => {}
        }
        lb.address_table.mark(address);
        lb.switch_table.mark(datapath);
    }

    /// A VIP of router `datapath` (balanced by the gateway NAT stage where its gateway is
    /// active) is added or removed: its `LB_VIPS` entry and backend group only (no switch
    /// balances it).
    pub(super) fn take_router_lb_vip(&mut self, datapath: u32, vip: &LbVip, added: bool) {
        self.lb.take_vip(datapath, vip, added);
    }

    /// Switch `datapath` has the hairpin stages (or no longer has).
    pub(super) fn take_lb_hairpin(&mut self, datapath: u32, added: bool) {
        let lb = &mut self.lb;
        let changed = if added {
            lb.hairpin_switches.insert(datapath)
        } else {
            lb.hairpin_switches.remove(&datapath)
        };
        if changed {
            let keys: Vec<LbVipKey> = lb
                .vips
                .keys()
                .filter(|key| key.datapath == datapath)
                .copied()
                .collect();
            for key in keys {
                lb.vip_table.mark(key);
            }
        }
    }

    /// Switch `datapath`'s VIP keeps clients on their backend for `timeout` seconds (or no
    /// longer does).
    pub(super) fn take_lb_affinity(&mut self, key: LbVipKey, timeout: u32, added: bool) {
        if added {
            self.lb.affinities.insert(key, timeout);
        } else if self.lb.affinities.get(&key) == Some(&timeout) {
            self.lb.affinities.remove(&key);
        }
        self.lb.vip_table.mark(key);
    }

    /// Marks every port of `datapath` (its delivery flags changed).
    pub(super) fn mark_ports_of(&mut self, datapath: u32) {
        let ports: Vec<String> = self
            .ports
            .iter()
            .filter(|(_, info)| info.datapath == datapath)
            .map(|(name, _)| name.clone())
            .collect();
        for port in ports {
            self.mark_port(&port);
        }
    }

    /// Writes the marked keys: new backends before the VIPs that point at them, the VIPs,
    /// then the backends no VIP points at any more (so a new connection always finds its
    /// backend), the addresses last.
    pub(super) fn flush_lbs(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        let mut writes = flush_from_with(
            self,
            maps,
            |s| &mut s.lb.backend_table,
            Pass::SetsOnly,
            |s, key| s.lb.desired_backend(key),
            |_, _, _| Ok(()),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.lb.vip_table,
            |s, key| s.lb.desired_vip(key),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.lb.backend_table,
            |s, key| s.lb.desired_backend(key),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.lb.member_table,
            |s, key| s.lb.desired_member(key),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.lb.switch_table,
            |s, datapath| {
                let vips = s.lb.vips_per_switch.get(datapath)?;
                Some(u32::try_from(*vips).unwrap_or(u32::MAX))
            },
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.lb.address_table,
            |s, key| s.lb.addresses.contains_key(key).then_some(1),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.lb.client_table,
            |s, netns| s.desired_socket_client(*netns),
        )?;
        Ok(writes)
    }

    /// Whether the socket-level balancer serves this node's pods (their entries in
    /// `SOCK_LB_CLIENTS`); set before the first flush.
    pub fn set_socket_lb(&mut self, enabled: bool) {
        self.lb.socket_lb = enabled;
        let all: Vec<u64> = self.lb.port_of_netns.keys().copied().collect();
        for netns in all {
            self.lb.client_table.mark(netns);
        }
    }

    /// The network namespace (by its cookie) of the pod behind `port`, `None` when it is
    /// unplugged or its namespace is unknown.
    pub fn set_netns(&mut self, port: &str, netns: Option<u64>) {
        if let Some(old) = self.lb.netns_of_port.remove(port) {
            self.lb.port_of_netns.remove(&old);
            self.lb.client_table.mark(old);
        }
        if let Some(netns) = netns {
            // A namespace holds one pod: a port that had it before lets it go.
            if let Some(other) = self.lb.port_of_netns.insert(netns, port.to_string()) {
                self.lb.netns_of_port.remove(&other);
            }
            self.lb.netns_of_port.insert(port.to_string(), netns);
            self.lb.client_table.mark(netns);
        }
    }

    /// Marks the socket-level balancer's entry of `port`'s pod (its switch or address moved).
    pub(super) fn mark_socket_client(&mut self, port: &str) {
        if let Some(netns) = self.lb.netns_of_port.get(port) {
            self.lb.client_table.mark(*netns);
        }
    }

    /// The pod in namespace `netns`, as the socket-level balancer sees it: its switch and
    /// first IPv4 address, while it is plugged here.
    fn desired_socket_client(&self, netns: u64) -> Option<SockLbClient> {
        if !self.lb.socket_lb {
            return None;
        }
        let port = self.lb.port_of_netns.get(&netns)?;
        self.local_port(port)?;
        let binding = self.physical.binding(port)?;
        Some(SockLbClient {
            datapath: binding.datapath,
            ip: u32::from_ne_bytes(binding.address?.octets()),
        })
    }

    /// Removes what this state did not install.
    pub(super) fn sweep_lbs(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        Ok(self.lb.vip_table.sweep(maps)?
            + self.lb.switch_table.sweep(maps)?
            + self.lb.address_table.sweep(maps)?
            + self.lb.backend_table.sweep(maps)?
            + self.lb.member_table.sweep(maps)?
            + self.lb.client_table.sweep(maps)?)
    }
}

/// Counts one user of `key` fewer (the key goes with its last).
fn decrement<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: K) {
    if let Some(count) = counts.get_mut(&key) {
        *count -= 1;
        if *count == 0 {
            counts.remove(&key);
        }
    }
}

/// The kernel's key of `backend` in group `group`.
fn member_key(group: u32, backend: &LbBackend) -> LbMemberKey {
    LbMemberKey {
        group,
        ip: u32::from_ne_bytes(backend.ip.octets()),
        port: backend.port.unwrap_or(0),
        padding: 0,
    }
}

/// The kernel's key of VIP `vip` (`port` of `protocol`) on switch `datapath`.
pub(super) fn vip_key(
    datapath: u32,
    vip: Ipv4Addr,
    port: Option<u16>,
    protocol: Option<LbProtocol>,
) -> LbVipKey {
    LbVipKey {
        datapath,
        vip: u32::from_ne_bytes(vip.octets()),
        port: port.unwrap_or(0),
        protocol: protocol.map_or(0, LbProtocol::number),
        padding: 0,
    }
}

#[cfg(test)]
#[path = "lb_tests.rs"]
mod tests;
