//! This chassis's L2 kernel maps, derived from the IR: pod ports (host veth → datapath and port
//! key) with their port security, tunnel ports (datapath and port key → host veth), the L2 FIB
//! (a MAC on a datapath → a local veth or another chassis's encap IP and port key), the ARP
//! responder, and flood groups (local members' veths and the chassis with members) with the
//! groups each datapath floods broadcasts and unknown unicast to, with ports located by
//! [`Physical`]. Owns the desired map contents
//! and what it installed for ports, localnets and flood groups; the FIB, ARP responder and flood
//! roles are installed through [`Table`]s. Touches the kernel only through [`Maps`].
//!
//! Incremental: an IR diff or a change of an interface or chassis marks only the map keys it can
//! affect, and [`L2State::flush`] rewrites just those, so one pod costs O(its entries).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    net::Ipv4Addr,
};

use ovnbpf_common::{
    ARP_ANSWER_ROUTER, ArpAnswer, ArpKey, FIB_LOCAL, FIB_REMOTE, FIB_ROUTER, FLOOD_MAX_LOCAL,
    FLOOD_MAX_REMOTE, FibEntry, FibKey, FloodKey, FloodRoles, LOCAL_PORT_VETH_PEER, LocalPort,
    Localnet, PodPort, PortSecurity, ProviderKey, TunnelPortKey,
    maps::{
        ArpResponder, FloodGroups, FloodMembers, FloodRolesMap, L2Fib, Localnets, PodPorts,
        PortSecurityMap, ProviderNetworks, TunnelPorts,
    },
};

use self::flood_slots::InstalledGroup;
use super::{
    EbpfError, Maps,
    physical::{Location, Physical},
    remove_unwanted,
    tables::{Table, TableKey, flush_from},
};
use crate::pipeline::ir::{IrDiff, IrEntry, LspAddress, Mac, PortKind};

/// A logical port as the L2 maps need it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PortInfo {
    datapath: u32,
    key: u32,
    /// The chassis a VIF is bound to; `None` for unbound VIFs and non-VIF ports.
    chassis: Option<String>,
    security: Option<PortSecurity>,
    /// For a patch port (a switch's router port, or a router port): its peer's name.
    peer: Option<String>,
    /// The MAC of its first address (a router port's MAC).
    mac: Option<Mac>,
    /// The first IPv4 of its first address (a router port's address).
    ipv4: Option<Ipv4Addr>,
}

/// The kernel form of Port_Binding.port_security: its first entry's MAC and up to
/// [`ovnbpf_common::PORT_SECURITY_MAX_IPS`] IPv4 single-host addresses (IPv6 is checked by MAC
/// only). `None` when there is no entry.
fn kernel_port_security(entries: &[LspAddress]) -> Option<PortSecurity> {
    let first = entries.first()?;
    let mut security = PortSecurity {
        mac: first.mac,
        ..PortSecurity::default()
    };
    let hosts = first.ipv4.iter().filter(|p| p.length == 32);
    for (slot, prefix) in security.ips.iter_mut().zip(hosts) {
        *slot = u32::from_ne_bytes(prefix.network.octets());
        security.ip_count += 1;
    }
    Some(security)
}

/// How this node reaches one flood group member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MemberTarget {
    /// A local pod behind this veth.
    Local(u32),
    /// A pod on the chassis with this encap IP (network byte order).
    Remote(u32),
    /// Not reachable as a flood target (router, localnet, unbound, unknown chassis).
    Unreachable,
}

/// A map key whose desired value may have changed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Dirty {
    /// The pod-port and tunnel-port entries of a logical port.
    Port(String),
    /// A flood group's targets, by (datapath, group key).
    Group(u32, u32),
    /// An underlay switch's localnet (and its provider network entry).
    Localnet(u32),
}

/// What is installed for one logical port bound here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InstalledPort {
    ifindex: u32,
    datapath: u32,
    key: u32,
    security: Option<PortSecurity>,
}

/// The L2 maps of one chassis: what the IR and the local interfaces ask for, and what is in the
/// kernel.
#[derive(Debug, Default)]
pub struct L2State {
    /// Where ports are on this node's network.
    physical: Physical,
    ports: HashMap<String, PortInfo>,
    /// Each chassis's Geneve endpoints, from the IR.
    encap_ips: HashMap<String, BTreeSet<Ipv4Addr>>,
    /// Ports per chassis, to re-resolve them when the chassis's encap IP changes.
    ports_by_chassis: HashMap<String, HashSet<String>>,
    fib: HashMap<(u32, Mac), String>,
    /// FIB keys per port name.
    fib_by_port: HashMap<String, HashSet<(u32, Mac)>>,
    arp: HashMap<(u32, Ipv4Addr), Mac>,
    arp_owner: HashMap<(u32, Ipv4Addr), String>,
    arp_by_owner: HashMap<String, HashSet<(u32, Ipv4Addr)>>,
    /// (datapath, port key) → port name, to resolve flood group members.
    port_names: HashMap<(u32, u32), String>,
    /// (datapath, group key) → member port keys, and the reverse index.
    group_members: HashMap<(u32, u32), HashSet<u32>>,
    groups_of_port: HashMap<(u32, u32), HashSet<u32>>,
    /// (datapath, group name) → group key.
    group_keys: HashMap<(u32, String), u32>,
    /// Underlay switch → (localnet port name, network name, VLAN tag).
    localnets: HashMap<u32, (String, String, Option<u16>)>,
    installed_localnets: HashMap<u32, Localnet>,
    /// Datapath → the names of its broadcast and unknown-unicast groups.
    roles: HashMap<u32, (Option<String>, Option<String>)>,
    /// Groups with more local members or chassis than the agent installs, as last flushed.
    truncated_groups: HashSet<(u32, u32)>,
    /// How each flood group member is reached from here, kept current as ports change, so a
    /// group's targets are updated per member, never rebuilt from all members.
    member_targets: HashMap<(u32, u32), MemberTarget>,
    /// Per group: local members (member key → veth index) and chassis (encap IP → members).
    group_local: HashMap<(u32, u32), BTreeMap<u32, u32>>,
    group_remote: HashMap<(u32, u32), BTreeMap<u32, usize>>,
    /// ARP requests for a router's address on a switch: (switch, address) → the switch's
    /// router port, and the reverse index.
    router_arp: HashMap<(u32, Ipv4Addr), String>,
    router_arp_by_port: HashMap<String, HashSet<(u32, Ipv4Addr)>>,
    /// Router port → the switch port it is patched to (to re-resolve its MAC).
    patch_by_peer: HashMap<String, String>,
    dirty: HashSet<Dirty>,
    installed_ports: HashMap<String, InstalledPort>,
    installed_groups: HashMap<(u32, u32), InstalledGroup>,
    roles_table: Table<FloodRolesMap, u32>,
    fib_table: Table<L2Fib, (u32, Mac)>,
    arp_table: Table<ArpResponder, (u32, Ipv4Addr)>,
}

impl TableKey<FloodRolesMap> for u32 {
    fn slot(&self) -> u32 {
        *self
    }
}

impl TableKey<L2Fib> for (u32, Mac) {
    fn slot(&self) -> FibKey {
        FibKey {
            datapath: self.0,
            mac: self.1,
            padding: [0; 2],
        }
    }
}

impl TableKey<ArpResponder> for (u32, Ipv4Addr) {
    fn slot(&self) -> ArpKey {
        ArpKey {
            datapath: self.0,
            ip: u32::from_ne_bytes(self.1.octets()),
        }
    }
}

impl L2State {
    /// The maps of chassis `chassis` (its name in the Chassis table).
    #[must_use]
    pub fn new(chassis: &str) -> Self {
        Self {
            physical: Physical::new(chassis),
            ..Self::default()
        }
    }

    /// Logical port `port` is plugged into host veth `ifindex` (`None`: unplugged).
    pub fn set_interface(&mut self, port: &str, ifindex: Option<u32>) {
        self.physical.set_interface(port, ifindex);
        self.mark_port(port);
    }

    /// The provider networks of this node (bridge mappings): network name → NIC index.
    pub fn set_providers(&mut self, providers: HashMap<String, u32>) {
        self.physical.set_providers(providers);
        let datapaths: Vec<u32> = self.localnets.keys().copied().collect();
        self.dirty
            .extend(datapaths.into_iter().map(Dirty::Localnet));
    }

    /// Chassis `chassis` is reached at `encap_ip` (`None`: gone).
    fn set_encap(&mut self, chassis: &str, encap_ip: Option<Ipv4Addr>) {
        if self.physical.set_encap(chassis, encap_ip) {
            let ports: Vec<String> = self
                .ports_by_chassis
                .get(chassis)
                .into_iter()
                .flatten()
                .cloned()
                .collect();
            for port in ports {
                self.mark_port(&port);
            }
        }
    }

    /// Whether `port` has its pod and tunnel entries installed.
    #[must_use]
    pub fn programmed(&self, port: &str) -> bool {
        self.installed_ports.contains_key(port)
    }

    /// Takes in one IR diff.
    pub fn apply(&mut self, diff: &IrDiff) {
        for entry in &diff.removed {
            self.take(entry, false);
        }
        for entry in &diff.added {
            self.take(entry, true);
        }
    }

    fn take(&mut self, entry: &IrEntry, added: bool) {
        match entry {
            IrEntry::ChassisEncap { chassis, ip } => {
                // A chassis with several Geneve endpoints is reached at its lowest.
                let ips = self.encap_ips.entry(chassis.clone()).or_default();
                if added {
                    ips.insert(*ip);
                } else {
                    ips.remove(ip);
                }
                let chosen = ips.first().copied();
                if chosen.is_none() {
                    self.encap_ips.remove(chassis);
                }
                self.set_encap(chassis, chosen);
            }
            IrEntry::Port {
                datapath,
                key,
                name,
                kind,
                addresses,
                port_security,
            } => {
                let chassis = match kind {
                    PortKind::Vif { chassis } => chassis.clone(),
                    _ => None,
                };
                let peer = match kind {
                    PortKind::Patch { peer } => Some(peer.clone()),
                    _ => None,
                };
                if let PortKind::Localnet { network_name, tag } = kind {
                    if added {
                        self.localnets
                            .insert(*datapath, (name.clone(), network_name.clone(), *tag));
                    } else if self.localnets.get(datapath).is_some_and(|l| l.0 == *name) {
                        self.localnets.remove(datapath);
                    }
                    self.dirty.insert(Dirty::Localnet(*datapath));
                }
                if let Some(old) = self.ports.remove(name) {
                    if let Some(old_chassis) = &old.chassis {
                        remove_from_index(&mut self.ports_by_chassis, old_chassis, name);
                    }
                    if let Some(old_peer) = &old.peer
                        && self.patch_by_peer.get(old_peer) == Some(name)
                    {
                        self.patch_by_peer.remove(old_peer);
                    }
                    if self.port_names.get(&(old.datapath, old.key)) == Some(name) {
                        self.port_names.remove(&(old.datapath, old.key));
                    }
                    self.mark_groups_of(old.datapath, old.key);
                }
                if added {
                    if let Some(chassis) = &chassis {
                        self.ports_by_chassis
                            .entry(chassis.clone())
                            .or_default()
                            .insert(name.clone());
                    }
                    if let Some(peer) = &peer {
                        self.patch_by_peer.insert(peer.clone(), name.clone());
                    }
                    let info = PortInfo {
                        datapath: *datapath,
                        key: *key,
                        chassis,
                        security: kernel_port_security(port_security),
                        peer,
                        mac: addresses.first().map(|a| a.mac),
                        ipv4: addresses
                            .first()
                            .and_then(|a| a.ipv4.first())
                            .map(|p| p.network),
                    };
                    self.ports.insert(name.clone(), info);
                    self.port_names.insert((*datapath, *key), name.clone());
                    self.mark_groups_of(*datapath, *key);
                }
                self.mark_port(name);
            }
            IrEntry::ArpForRouterIp {
                datapath,
                ip,
                router_port,
                ..
            } => {
                let arp_key = (*datapath, *ip);
                if let Some(old) = self.router_arp.remove(&arp_key) {
                    remove_from_index(&mut self.router_arp_by_port, &old, &arp_key);
                }
                if added {
                    self.router_arp.insert(arp_key, router_port.clone());
                    self.router_arp_by_port
                        .entry(router_port.clone())
                        .or_default()
                        .insert(arp_key);
                }
                self.arp_table.mark((*datapath, *ip));
            }
            IrEntry::FloodGroup {
                datapath,
                key,
                name,
            } => {
                if added {
                    self.group_keys.insert((*datapath, name.clone()), *key);
                } else if self.group_keys.get(&(*datapath, name.clone())) == Some(key) {
                    self.group_keys.remove(&(*datapath, name.clone()));
                }
                self.dirty.insert(Dirty::Group(*datapath, *key));
                self.roles_table.mark(*datapath);
            }
            IrEntry::FloodMember {
                datapath,
                group,
                port,
            } => {
                let (group_key, port_key) = ((*datapath, *group), (*datapath, *port));
                if added {
                    self.group_members
                        .entry(group_key)
                        .or_default()
                        .insert(*port);
                    self.groups_of_port
                        .entry(port_key)
                        .or_default()
                        .insert(*group);
                    let target = match self.member_targets.get(&port_key) {
                        Some(target) => *target,
                        None => {
                            let target = self.resolve_member(*datapath, *port);
                            self.member_targets.insert(port_key, target);
                            target
                        }
                    };
                    self.add_to_group(group_key, *port, target);
                } else {
                    if let Some(target) = self.member_targets.get(&port_key).copied() {
                        self.remove_from_group(group_key, *port, target);
                    }
                    remove_member(&mut self.group_members, group_key, *port);
                    remove_member(&mut self.groups_of_port, port_key, *group);
                    if !self.groups_of_port.contains_key(&port_key) {
                        self.member_targets.remove(&port_key);
                    }
                }
                self.dirty.insert(Dirty::Group(*datapath, *group));
            }
            IrEntry::FloodMulticast { datapath, group } => {
                let roles = self.roles.entry(*datapath).or_default();
                roles.0 = added.then(|| group.clone());
                self.roles_table.mark(*datapath);
            }
            IrEntry::FloodUnknown { datapath, group } => {
                let roles = self.roles.entry(*datapath).or_default();
                roles.1 = added.then(|| group.clone());
                self.roles_table.mark(*datapath);
            }
            IrEntry::L2Fib {
                datapath,
                mac,
                port,
            } => {
                let fib_key = (*datapath, *mac);
                if let Some(old) = self.fib.remove(&fib_key) {
                    remove_from_index(&mut self.fib_by_port, &old, &fib_key);
                }
                if added {
                    self.fib.insert(fib_key, port.clone());
                    self.fib_by_port
                        .entry(port.clone())
                        .or_default()
                        .insert(fib_key);
                }
                self.fib_table.mark((*datapath, *mac));
            }
            IrEntry::ArpReply { datapath, ip, mac } => {
                if added {
                    self.arp.insert((*datapath, *ip), *mac);
                } else if self.arp.get(&(*datapath, *ip)) == Some(mac) {
                    self.arp.remove(&(*datapath, *ip));
                }
                self.arp_table.mark((*datapath, *ip));
            }
            IrEntry::ArpReplySkip {
                datapath,
                ip,
                inport,
            } => {
                let arp_key = (*datapath, *ip);
                if let Some(old) = self.arp_owner.remove(&arp_key) {
                    remove_from_index(&mut self.arp_by_owner, &old, &arp_key);
                }
                if added {
                    self.arp_owner.insert(arp_key, inport.clone());
                    self.arp_by_owner
                        .entry(inport.clone())
                        .or_default()
                        .insert(arp_key);
                }
                self.arp_table.mark((*datapath, *ip));
            }
            _ => {}
        }
    }

    /// Marks everything that depends on `port`: its own entries, the FIB entries pointing to it
    /// and the ARP answers it owns (its key may have changed).
    fn mark_port(&mut self, port: &str) {
        self.dirty.insert(Dirty::Port(port.to_string()));
        for (datapath, mac) in self.fib_by_port.get(port).into_iter().flatten() {
            self.fib_table.mark((*datapath, *mac));
        }
        for (datapath, ip) in self.arp_by_owner.get(port).into_iter().flatten() {
            self.arp_table.mark((*datapath, *ip));
        }
        // A router port's MAC is what its switch port's router entries answer with, and its
        // datapath is where the switch port's FIB entry hands frames over.
        let switch_port = self.patch_by_peer.get(port).cloned();
        for name in std::iter::once(port).chain(switch_port.as_deref()) {
            for (datapath, ip) in self.router_arp_by_port.get(name).into_iter().flatten() {
                self.arp_table.mark((*datapath, *ip));
            }
        }
        if let Some(switch_port) = &switch_port {
            for (datapath, mac) in self.fib_by_port.get(switch_port).into_iter().flatten() {
                self.fib_table.mark((*datapath, *mac));
            }
        }
        if let Some(info) = self.ports.get(port) {
            let (datapath, key) = (info.datapath, info.key);
            self.mark_groups_of(datapath, key);
        }
    }

    /// Re-resolves port `key` of `datapath` as a flood group member and, if that changed, updates
    /// and marks the groups it belongs to: O(its groups).
    fn mark_groups_of(&mut self, datapath: u32, key: u32) {
        let Some(groups) = self.groups_of_port.get(&(datapath, key)).cloned() else {
            return;
        };
        let new = self.resolve_member(datapath, key);
        let old = self.member_targets.insert((datapath, key), new);
        if old == Some(new) {
            return;
        }
        for group in groups {
            if let Some(old) = old {
                self.remove_from_group((datapath, group), key, old);
            }
            self.add_to_group((datapath, group), key, new);
            self.dirty.insert(Dirty::Group(datapath, group));
        }
    }

    /// How this node reaches port `key` of `datapath` as a flood target.
    fn resolve_member(&self, datapath: u32, key: u32) -> MemberTarget {
        let Some(name) = self.port_names.get(&(datapath, key)) else {
            return MemberTarget::Unreachable;
        };
        let bound_to = self
            .ports
            .get(name)
            .and_then(|info| info.chassis.as_deref());
        match self.physical.locate(name, bound_to) {
            Location::Local(ifindex) => MemberTarget::Local(ifindex),
            Location::Remote(ip) => MemberTarget::Remote(u32::from_ne_bytes(ip.octets())),
            Location::Unreachable => MemberTarget::Unreachable,
        }
    }

    fn add_to_group(&mut self, group: (u32, u32), member: u32, target: MemberTarget) {
        match target {
            MemberTarget::Local(ifindex) => {
                self.group_local
                    .entry(group)
                    .or_default()
                    .insert(member, ifindex);
            }
            MemberTarget::Remote(ip) => {
                *self
                    .group_remote
                    .entry(group)
                    .or_default()
                    .entry(ip)
                    .or_default() += 1;
            }
            MemberTarget::Unreachable => {}
        }
    }

    fn remove_from_group(&mut self, group: (u32, u32), member: u32, target: MemberTarget) {
        match target {
            MemberTarget::Local(_) => {
                if let Some(local) = self.group_local.get_mut(&group) {
                    local.remove(&member);
                    if local.is_empty() {
                        self.group_local.remove(&group);
                    }
                }
            }
            MemberTarget::Remote(ip) => {
                if let Some(remote) = self.group_remote.get_mut(&group) {
                    if let Some(count) = remote.get_mut(&ip) {
                        *count -= 1;
                        if *count == 0 {
                            remote.remove(&ip);
                        }
                    }
                    if remote.is_empty() {
                        self.group_remote.remove(&group);
                    }
                }
            }
            MemberTarget::Unreachable => {}
        }
    }

    /// Flood groups whose members did not all fit the kernel's entry, as of the last flush.
    #[must_use]
    pub fn truncated_groups(&self) -> usize {
        self.truncated_groups.len()
    }

    /// Number of map keys waiting for [`Self::flush`].
    #[must_use]
    pub fn pending(&self) -> usize {
        self.dirty.len()
            + self.roles_table.pending()
            + self.fib_table.pending()
            + self.arp_table.pending()
    }

    /// Writes every marked key whose desired value differs from the installed one. On an error
    /// the key stays marked, so the next flush retries it.
    pub fn flush(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        let mut writes = 0;
        let dirty: Vec<Dirty> = self.dirty.iter().cloned().collect();
        for key in dirty {
            writes += match &key {
                Dirty::Port(port) => self.flush_port(maps, port)?,
                Dirty::Group(datapath, group) => self.flush_group(maps, *datapath, *group)?,
                Dirty::Localnet(datapath) => self.flush_localnet(maps, *datapath)?,
            };
            self.dirty.remove(&key);
        }
        writes += flush_from(
            self,
            maps,
            |s| &mut s.fib_table,
            |s, &(dp, mac)| s.desired_fib(dp, mac),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.arp_table,
            |s, &(dp, ip)| s.desired_arp(dp, ip),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.roles_table,
            |s, &dp| s.desired_roles(dp),
        )?;
        Ok(writes)
    }

    /// Removes every map key this state did not install: what a previous agent left for ports,
    /// MACs or addresses that are gone. Run it only once the state is complete (the Southbound
    /// snapshot and the local scope are in, nothing is pending), or it removes live entries.
    /// Returns the number of keys removed.
    pub fn sweep(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        let pods: HashSet<u32> = self.installed_ports.values().map(|p| p.ifindex).collect();
        let secured: HashSet<u32> = self
            .installed_ports
            .values()
            .filter(|p| p.security.is_some())
            .map(|p| p.ifindex)
            .collect();
        let tunnels: HashSet<(u32, u32)> = self
            .installed_ports
            .values()
            .map(|p| (p.datapath, p.key))
            .collect();
        let provider_keys: HashSet<ProviderKey> = self
            .installed_localnets
            .values()
            .map(|l| ProviderKey {
                ifindex: l.ifindex,
                vlan: l.vlan,
            })
            .collect();
        let removed = remove_unwanted(
            maps.keys::<PodPorts>()?,
            |i| pods.contains(i),
            |i| {
                maps.remove::<PodPorts>(i)?;
                maps.close_counters(i)
            },
        )? + remove_unwanted(
            maps.keys::<PortSecurityMap>()?,
            |i| secured.contains(i),
            |i| maps.remove::<PortSecurityMap>(i),
        )? + remove_unwanted(
            maps.keys::<TunnelPorts>()?,
            |key| tunnels.contains(&(key.datapath, key.port)),
            |key| maps.remove::<TunnelPorts>(key),
        )? + remove_unwanted(
            maps.keys::<Localnets>()?,
            |datapath| self.installed_localnets.contains_key(datapath),
            |datapath| maps.remove::<Localnets>(datapath),
        )? + remove_unwanted(
            maps.keys::<ProviderNetworks>()?,
            |key| provider_keys.contains(key),
            |key| maps.remove::<ProviderNetworks>(key),
        )? + remove_unwanted(
            maps.keys::<FloodGroups>()?,
            |key| {
                self.installed_groups
                    .get(&(key.datapath, key.group))
                    .is_some_and(|group| group.header.is_some())
            },
            |key| maps.remove::<FloodGroups>(key),
        )? + remove_unwanted(
            maps.keys::<FloodMembers>()?,
            |key| {
                self.installed_groups
                    .get(&(key.datapath, key.group))
                    .is_some_and(|group| group.holds(key.slot))
            },
            |key| maps.remove::<FloodMembers>(key),
        )? + self.fib_table.sweep(maps)?
            + self.roles_table.sweep(maps)?
            + self.arp_table.sweep(maps)?;
        Ok(removed)
    }

    /// A port bound here with a known veth.
    fn local_port(&self, port: &str) -> Option<InstalledPort> {
        let info = self.ports.get(port)?;
        let Location::Local(ifindex) = self.physical.locate(port, info.chassis.as_deref()) else {
            return None;
        };
        Some(InstalledPort {
            ifindex,
            datapath: info.datapath,
            key: info.key,
            security: info.security,
        })
    }

    fn flush_port(&mut self, maps: &mut impl Maps, port: &str) -> Result<usize, EbpfError> {
        let desired = self.local_port(port);
        let installed = self.installed_ports.get(port).copied();
        if desired == installed {
            return Ok(0);
        }
        let mut writes = 0;
        if let Some(old) = installed {
            maps.remove::<PodPorts>(old.ifindex)?;
            maps.close_counters(old.ifindex)?;
            maps.remove::<TunnelPorts>(tunnel_key(old))?;
            maps.remove::<PortSecurityMap>(old.ifindex)?;
            self.installed_ports.remove(port);
            writes += 3;
        }
        if let Some(new) = desired {
            let pod_port = PodPort {
                datapath: new.datapath,
                port: new.key,
            };
            let local = LocalPort {
                ifindex: new.ifindex,
                flags: LOCAL_PORT_VETH_PEER,
            };
            // Security first, so the port never forwards unchecked.
            if let Some(security) = new.security {
                maps.set::<PortSecurityMap>(new.ifindex, security)?;
                writes += 1;
            }
            maps.open_counters(new.ifindex)?;
            maps.set::<PodPorts>(new.ifindex, pod_port)?;
            maps.set::<TunnelPorts>(tunnel_key(new), local)?;
            self.installed_ports.insert(port.to_string(), new);
            writes += 2;
        }
        Ok(writes)
    }

    fn desired_fib(&self, datapath: u32, mac: Mac) -> Option<FibEntry> {
        let port = self.fib.get(&(datapath, mac))?;
        if let Some(local) = self.local_port(port) {
            return Some(FibEntry {
                kind: FIB_LOCAL,
                ifindex: local.ifindex,
                flags: LOCAL_PORT_VETH_PEER,
                ..FibEntry::default()
            });
        }
        let info = self.ports.get(port)?;
        if let Some(peer) = &info.peer {
            let router = self.ports.get(peer)?;
            return Some(FibEntry {
                kind: FIB_ROUTER,
                ifindex: router.datapath,
                // The router port's address: the source of its ICMP errors on this switch.
                remote_ip: router.ipv4.map_or(0, |ip| u32::from_ne_bytes(ip.octets())),
                port: info.key,
                ..FibEntry::default()
            });
        }
        let Location::Remote(encap_ip) = self.physical.locate(port, info.chassis.as_deref()) else {
            return None;
        };
        Some(FibEntry {
            kind: FIB_REMOTE,
            remote_ip: u32::from_ne_bytes(encap_ip.octets()),
            port: info.key,
            ..FibEntry::default()
        })
    }

    fn desired_arp(&self, datapath: u32, ip: Ipv4Addr) -> Option<ArpAnswer> {
        let router = self.router_flags(datapath, ip);
        let Some(mac) = self.arp.get(&(datapath, ip)) else {
            return router.map(|(mac, flags)| ArpAnswer {
                mac,
                flags,
                ..ArpAnswer::default()
            });
        };
        let owner_port = self
            .arp_owner
            .get(&(datapath, ip))
            .and_then(|owner| self.ports.get(owner))
            .map_or(0, |info| info.key);
        Some(ArpAnswer {
            mac: *mac,
            flags: router.map_or(0, |(_, flags)| flags),
            owner_port,
            ..ArpAnswer::default()
        })
    }

    /// For a router's address on switch `datapath`: the router port's MAC and the flag telling
    /// the kernel the address is the router's.
    fn router_flags(&self, datapath: u32, ip: Ipv4Addr) -> Option<(Mac, u8)> {
        let switch_port = self.router_arp.get(&(datapath, ip))?;
        let peer = self.ports.get(switch_port)?.peer.as_ref()?;
        let router_port = self.ports.get(peer)?;
        Some((router_port.mac?, ARP_ANSWER_ROUTER))
    }
}

impl L2State {
    /// The members flood group (datapath, group) reaches from here, in the order a new group's
    /// slots take them: local members' veths (lowest member keys first) and the other chassis
    /// with members, each once. A group beyond [`FLOOD_MAX_LOCAL`] or [`FLOOD_MAX_REMOTE`] is an
    /// error, logged once per group (and counted by [`Self::truncated_groups`]): the members
    /// beyond the limit are not installed.
    fn desired_members(&mut self, datapath: u32, group: u32) -> (Vec<u32>, Vec<u32>) {
        let key = (datapath, group);
        let mut seen = HashSet::new();
        let local: Vec<u32> = self
            .group_local
            .get(&key)
            .into_iter()
            .flat_map(|m| m.values())
            .copied()
            .filter(|ifindex| seen.insert(*ifindex))
            .collect();
        let remote: Vec<u32> = self
            .group_remote
            .get(&key)
            .into_iter()
            .flat_map(|m| m.keys())
            .copied()
            .collect();
        let (local_limit, remote_limit) = (FLOOD_MAX_LOCAL as usize, FLOOD_MAX_REMOTE as usize);
        if local.len() > local_limit || remote.len() > remote_limit {
            if self.truncated_groups.insert(key) {
                tracing::error!(
                    datapath,
                    group,
                    local = local.len(),
                    remote = remote.len(),
                    local_limit,
                    remote_limit,
                    "flood group exceeds the members the agent installs; those beyond the limit \
                     get no flooded frames"
                );
            }
        } else {
            self.truncated_groups.remove(&key);
        }
        let mut local = local;
        let mut remote = remote;
        local.truncate(local_limit);
        remote.truncate(remote_limit);
        (local, remote)
    }

    /// Brings the kernel's slots of flood group (datapath, group) to its desired members with
    /// O(changed members) map writes (see [`InstalledGroup`]). On an error the group is forgotten
    /// as installed, so the retry rewrites every slot and the count.
    fn flush_group(
        &mut self,
        maps: &mut impl Maps,
        datapath: u32,
        group: u32,
    ) -> Result<usize, EbpfError> {
        let (local, remote) = self.desired_members(datapath, group);
        let mut installed = self
            .installed_groups
            .remove(&(datapath, group))
            .unwrap_or_default();
        let key = FloodKey { datapath, group };
        match installed.update(maps, key, &local, &remote) {
            Ok(writes) => {
                if installed.header.is_some() {
                    self.installed_groups.insert((datapath, group), installed);
                }
                Ok(writes)
            }
            Err(error) => {
                self.installed_groups
                    .insert((datapath, group), InstalledGroup::unknown());
                Err(error)
            }
        }
    }

    fn desired_roles(&self, datapath: u32) -> Option<FloodRoles> {
        let (broadcast, unknown) = self.roles.get(&datapath)?;
        let key_of = |name: &Option<String>| {
            name.as_ref()
                .and_then(|name| self.group_keys.get(&(datapath, name.clone())))
                .copied()
                .unwrap_or(0)
        };
        let roles = FloodRoles {
            broadcast: key_of(broadcast),
            unknown: key_of(unknown),
        };
        (roles != FloodRoles::default()).then_some(roles)
    }
}

/// Removes `value` from the set at `key`, dropping the set when it becomes empty.
fn remove_member(index: &mut HashMap<(u32, u32), HashSet<u32>>, key: (u32, u32), value: u32) {
    if let Some(values) = index.get_mut(&key) {
        values.remove(&value);
        if values.is_empty() {
            index.remove(&key);
        }
    }
}

impl L2State {
    fn desired_localnet(&self, datapath: u32) -> Option<Localnet> {
        let (_, network, tag) = self.localnets.get(&datapath)?;
        Some(Localnet {
            ifindex: self.physical.provider(network)?,
            vlan: u32::from(tag.unwrap_or(0)),
        })
    }

    fn flush_localnet(&mut self, maps: &mut impl Maps, datapath: u32) -> Result<usize, EbpfError> {
        let desired = self.desired_localnet(datapath);
        let installed = self.installed_localnets.get(&datapath).copied();
        if desired == installed {
            return Ok(0);
        }
        let key = |l: Localnet| ProviderKey {
            ifindex: l.ifindex,
            vlan: l.vlan,
        };
        let mut writes = 0;
        if let Some(old) = installed {
            maps.remove::<ProviderNetworks>(key(old))?;
            maps.remove::<Localnets>(datapath)?;
            self.installed_localnets.remove(&datapath);
            writes += 2;
        }
        if let Some(new) = desired {
            maps.set::<ProviderNetworks>(key(new), datapath)?;
            maps.set::<Localnets>(datapath, new)?;
            self.installed_localnets.insert(datapath, new);
            writes += 2;
        }
        Ok(writes)
    }
}

fn tunnel_key(port: InstalledPort) -> TunnelPortKey {
    TunnelPortKey {
        datapath: port.datapath,
        port: port.key,
    }
}

/// Removes `value` from `index[name]`, dropping the set when it becomes empty.
fn remove_from_index<V: std::hash::Hash + Eq>(
    index: &mut HashMap<String, HashSet<V>>,
    name: &str,
    value: &V,
) {
    if let Some(values) = index.get_mut(name) {
        values.remove(value);
        if values.is_empty() {
            index.remove(name);
        }
    }
}

mod flood_slots;
#[cfg(test)]
mod tests;
