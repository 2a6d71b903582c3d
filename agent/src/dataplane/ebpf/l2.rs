//! This chassis's L2 kernel maps, derived from the IR: pod ports (host veth → datapath and port
//! key) with their port security, tunnel ports (datapath and port key → host veth), the L2 FIB
//! (a MAC on a datapath → a local veth or another chassis's endpoint key and port key), the ARP and
//! ND responders, flood groups (local members' veths and the chassis with members) with the groups
//! each datapath floods broadcasts and unknown unicast to, and underlay switches' localnets.
//! Ports are located by [`Physical`] (OVN's physical.c role). This module holds the state and
//! routes IR entries to the map families, one module each, which own their desired values:
//! - `ports`: `POD_PORTS`, `TUNNEL_PORTS`, `PORT_SECURITY`;
//! - `fib`: `L2_FIB`; `arp`: `ARP_RESPONDER` and `ND_RESPONDER`;
//! - `flood`: `FLOOD_GROUPS`/`FLOOD_MEMBERS` (slot by slot, `flood_slots`), `FLOOD_ROLES`;
//! - `localnet`: `LOCALNETS`, `PROVIDER_NETWORKS`;
//! - `switch_routers`: `SWITCH_ROUTERS` (the router a switch's broadcast ARP reaches);
//! - `encaps`: `REMOTE_ENCAPS` (other chassis's endpoints: their keys, what they ask for, and
//!   their addresses over an IPv6 underlay);
//! - `lb`: `LB_VIPS`, `LB_ADDRESSES`, `LB_BACKENDS` (the connection table is the kernel's);
//! - `nat`: `NAT_BY_LOGICAL`, `NAT_BY_EXTERNAL` (distributed NAT rules of local pods), and their
//!   answers and FIB entries on the gateway's switch;
//! - `acl` (rules translated by `acl_rules`): `ACL_SWITCHES`, `ACL_RULES`, `ACL_ADDRESSES`,
//!   `ACL_PORT_SETS` (the connection table is the kernel's; the agent only sweeps it).
//!
//! What is installed is kept by one [`Table`] per map (OVN's ofctrl role), except the flood
//! slots, whose installer writes O(changed members) per group; each family module holds its
//! tables, so a map added to a family is declared, computed, flushed and swept in that module
//! alone. Touches the kernel only through [`Maps`].
//!
//! Incremental: an IR diff or a change of an interface or chassis marks only the map keys it can
//! affect, and [`L2State::flush`] rewrites just those, so one pod costs O(its entries).

use std::{
    borrow::Borrow,
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    net::IpAddr,
};

use ovnbpf_common::{
    PortSecurity, PortSecurity6,
    maps::{L2Fib, RemoteEncaps, SwitchRouters},
};

use self::{
    flood::{FloodTables, MemberTarget},
    localnet::LocalnetTables,
    ports::{PortEntry, PortTables},
};
use super::{
    EbpfError, Maps,
    physical::Physical,
    tables::{Table, flush_from},
};
use crate::pipeline::ir::{IrDiff, IrEntry, Mac};

mod acl;
mod acl_rules;
mod arp;
mod encaps;
mod fib;
mod flood;
mod flood_slots;
mod gateway;
mod lb;
mod localnet;
mod nat;
mod ports;
mod switch_routers;

/// A logical port as the L2 maps need it (where it leads is [`Physical`]'s).
#[derive(Clone, Debug, PartialEq, Eq)]
struct PortInfo {
    datapath: u32,
    key: u32,
    security: Option<PortSecurity>,
    /// Its port security's IPv6 addresses, when it lists some.
    security6: Option<PortSecurity6>,
    /// The MAC of its first address (a router port's MAC).
    mac: Option<Mac>,
}

/// The L2 maps of one chassis: what the IR and the local interfaces ask for, and what is in the
/// kernel.
#[derive(Debug, Default)]
pub struct L2State {
    /// Where ports are on this node's network.
    physical: Physical,
    /// Host veths whose peer is in this namespace too (the node's own NIC): frames are
    /// redirected to the veth's egress, not into the peer's namespace.
    same_namespace_peers: HashSet<u32>,
    /// Each chassis's Geneve endpoints, from the IR.
    encap_ips: HashMap<String, BTreeSet<IpAddr>>,
    /// The endpoints this node tunnels to: their keys and what they ask for.
    endpoints: encaps::Endpoints,
    ports: HashMap<String, PortInfo>,
    /// Ports per chassis, to re-resolve them when the chassis's encap IP changes.
    ports_by_chassis: HashMap<String, HashSet<String>>,
    fib: HashMap<(u32, Mac), String>,
    /// Switches' service monitor MACs: their frames are the agent's (`FIB_SERVICE_MONITOR`).
    service_monitor_macs: HashSet<(u32, Mac)>,
    /// FIB keys per port name.
    fib_by_port: HashMap<String, HashSet<(u32, Mac)>>,
    /// The responders' answers (both families), their owners and the reverse index.
    arp: HashMap<arp::AnswerKey, Mac>,
    arp_owner: HashMap<arp::AnswerKey, String>,
    arp_by_owner: HashMap<String, HashSet<arp::AnswerKey>>,
    /// (datapath, port key) → port name, to resolve flood group members.
    port_names: HashMap<(u32, u32), String>,
    /// (datapath, group key) → member port keys, and the reverse index.
    group_members: HashMap<(u32, u32), HashSet<u32>>,
    groups_of_port: HashMap<(u32, u32), HashSet<u32>>,
    /// (datapath, group name) → group key.
    group_keys: HashMap<(u32, String), u32>,
    /// Underlay switch → (localnet port name, network name, VLAN tag).
    localnets: HashMap<u32, (String, String, Option<u16>)>,
    /// Datapath → the names of its flood groups by role.
    roles: HashMap<u32, flood::RoleNames>,
    /// Groups with more local members or chassis than the agent installs, as last flushed.
    truncated_groups: HashSet<(u32, u32)>,
    /// How each flood group member is reached from here, kept current as ports change, so a
    /// group's targets are updated per member, never rebuilt from all members.
    member_targets: HashMap<(u32, u32), MemberTarget>,
    /// Per group: local members (member key → veth index) and chassis (encap IP → members).
    group_local: HashMap<(u32, u32), BTreeMap<u32, u32>>,
    group_remote: HashMap<(u32, u32), BTreeMap<u32, usize>>,
    /// ARP requests and solicitations for a router's address on a switch: (switch, address) →
    /// the switch's router port, and the reverse index.
    router_arp: HashMap<arp::AnswerKey, String>,
    router_arp_by_port: HashMap<String, HashSet<arp::AnswerKey>>,
    /// Router port → the switch port it is patched to (to re-resolve its MAC).
    patch_by_peer: HashMap<String, String>,
    /// Datapath → its patch ports (a switch's router ports, a router's own), by name.
    patch_ports: HashMap<u32, BTreeSet<String>>,
    /// What is installed, per map family.
    port_tables: PortTables,
    fib_table: Table<L2Fib, (u32, Mac)>,
    responder_tables: arp::ResponderTables,
    flood_tables: FloodTables,
    localnet_tables: LocalnetTables,
    remote_encap_table: Table<RemoteEncaps, u32>,
    switch_router_table: Table<SwitchRouters, u32>,
    /// The ACL family: rules, sets and switches, and what is installed.
    acl: acl::AclState,
    /// The load-balancer family: VIPs, backend groups, and what is installed.
    lb: lb::LbState,
    /// The distributed NAT family: this chassis's pods' FIPs, and what is installed.
    nat: nat::NatState,
    /// The gateway family: routers' gateway ports as this chassis carries them.
    gateway: gateway::GatewayState,
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
    /// Whether host veth `ifindex`'s peer is in this namespace (see
    /// [`L2State::same_namespace_peers`]); set before the port is plugged into it.
    pub fn set_peer_in_namespace(&mut self, ifindex: u32, here: bool) {
        if here {
            self.same_namespace_peers.insert(ifindex);
        } else {
            self.same_namespace_peers.remove(&ifindex);
        }
    }

    pub fn set_interface(&mut self, port: &str, ifindex: Option<u32>) {
        self.mark_port_slots(port);
        self.physical.set_interface(port, ifindex);
        self.mark_port(port);
    }

    /// The provider networks of this node (bridge mappings): network name → NIC index.
    pub fn set_providers(&mut self, providers: HashMap<String, u32>) {
        let datapaths: Vec<u32> = self.localnets.keys().copied().collect();
        // The provider slots they have, then the ones they want.
        for &datapath in &datapaths {
            self.mark_localnet(datapath);
        }
        self.physical.set_providers(providers);
        for datapath in datapaths {
            self.mark_localnet(datapath);
        }
    }

    /// Chassis `chassis` is reached at `encap_ip` (`None`: gone, or of the other family than
    /// this node's underlay).
    fn set_encap(&mut self, chassis: &str, encap_ip: Option<IpAddr>) {
        let endpoint = encap_ip.and_then(|ip| self.endpoints.key(ip));
        if self.physical.set_encap(chassis, endpoint) {
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

    /// Takes in one IR diff.
    pub fn apply<E: Borrow<IrEntry>>(&mut self, diff: &IrDiff<E>) {
        for (entry, added) in diff.in_order() {
            self.take(entry, added);
        }
    }

    fn take(&mut self, entry: &IrEntry, added: bool) {
        match entry {
            IrEntry::ChassisEncap { chassis, ip, csum } => {
                self.set_endpoint(*ip, added.then_some(*csum));
                // A chassis with several Geneve endpoints is reached at its lowest of this
                // node's underlay family.
                let ips = self.encap_ips.entry(chassis.clone()).or_default();
                if added {
                    ips.insert(*ip);
                } else {
                    ips.remove(ip);
                }
                let endpoints = &self.endpoints;
                let chosen = ips.iter().copied().find(|ip| endpoints.key(*ip).is_some());
                if ips.is_empty() {
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
            } => self.take_port(
                &PortEntry {
                    datapath: *datapath,
                    key: *key,
                    name,
                    kind,
                    addresses,
                    port_security,
                },
                added,
            ),
            IrEntry::L2Fib {
                datapath,
                mac,
                port,
            } => self.take_fib(*datapath, *mac, port, added),
            IrEntry::ServiceMonitorAnswers { datapath, mac } => {
                self.take_service_monitor_mac(*datapath, *mac, added);
            }
            IrEntry::ArpForRouterIp { .. }
            | IrEntry::ArpReply { .. }
            | IrEntry::ArpReplySkip { .. }
            | IrEntry::NdForRouterIp { .. }
            | IrEntry::NdReply { .. }
            | IrEntry::NdReplySkip { .. } => self.take_arp(entry, added),
            IrEntry::FloodGroup { .. }
            | IrEntry::FloodMember { .. }
            | IrEntry::FloodMulticast { .. }
            | IrEntry::FloodUnknown { .. }
            | IrEntry::RouterOriginatedFlood { .. } => self.take_flood(entry, added),
            IrEntry::Acl { .. }
            | IrEntry::AclTracking { .. }
            | IrEntry::AclTrackingBypass { .. }
            | IrEntry::StatelessSkipsLb { .. }
            | IrEntry::AclCommit { .. }
            | IrEntry::AclFailClosed { .. }
            | IrEntry::AddressSetMember { .. }
            | IrEntry::PortGroupMember { .. } => self.take_acl(entry, added),
            IrEntry::LoadBalancer { datapath, vip } => self.take_lb_vip(*datapath, vip, added),
            IrEntry::LbHairpin { datapath } => self.take_lb_hairpin(*datapath, added),
            IrEntry::RouterLoadBalancer {
                datapath,
                redirect,
                vip,
            } => {
                self.take_router_lb_vip(*datapath, vip, added);
                self.take_router_vip(*datapath, redirect, vip.vip, added);
            }
            IrEntry::DistributedNat {
                datapath,
                gateway_port,
                logical_ip,
                external_ip,
                external_mac,
                logical_port,
            } => self.take_distributed_nat(
                *datapath,
                &nat::NatRule {
                    gateway_port: gateway_port.clone(),
                    logical_ip: *logical_ip,
                    external_ip: *external_ip,
                    external_mac: *external_mac,
                    logical_port: logical_port.clone(),
                },
                added,
            ),
            IrEntry::GatewayPort {
                datapath,
                port,
                redirect,
            } => self.take_gateway_port(*datapath, port, redirect, added),
            IrEntry::CentralizedNat { datapath, redirect } => {
                self.take_centralized_nat(*datapath, redirect, added);
            }
            IrEntry::CentralizedSnat {
                datapath,
                gateway_port,
                logical,
                external,
            } => self.take_centralized_snat(*datapath, (gateway_port, *logical), *external, added),
            IrEntry::CentralizedDnat {
                datapath,
                gateway_port,
                external,
                logical,
            } => self.take_centralized_dnat(*datapath, (gateway_port, *external), *logical, added),
            IrEntry::LbAffinity {
                datapath,
                vip,
                port,
                protocol,
                timeout,
            } => self.take_lb_affinity(
                lb::vip_key(*datapath, *vip, *port, *protocol),
                *timeout,
                added,
            ),
            _ => {}
        }
    }

    /// Marks everything that depends on `port`: its own entries, the FIB entries pointing to it
    /// and the ARP answers it owns (its key may have changed).
    fn mark_port(&mut self, port: &str) {
        self.mark_port_slots(port);
        for (datapath, mac) in self.fib_by_port.get(port).into_iter().flatten() {
            self.fib_table.mark((*datapath, *mac));
        }
        let owned: Vec<arp::AnswerKey> = self
            .arp_by_owner
            .get(port)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        owned.into_iter().for_each(|key| self.mark_answer(key));
        // A router port's MAC is what its switch port's router entries answer with, and its
        // datapath is where the switch port's FIB entry hands frames over.
        let switch_port = self.patch_by_peer.get(port).cloned();
        let router_addresses: Vec<arp::AnswerKey> = std::iter::once(port)
            .chain(switch_port.as_deref())
            .flat_map(|name| self.router_arp_by_port.get(name).into_iter().flatten())
            .copied()
            .collect();
        router_addresses
            .into_iter()
            .for_each(|key| self.mark_answer(key));
        if let Some(switch_port) = &switch_port {
            for (datapath, mac) in self.fib_by_port.get(switch_port).into_iter().flatten() {
                self.fib_table.mark((*datapath, *mac));
            }
            self.mark_switch_router_of(switch_port);
        }
        if let Some(info) = self.ports.get(port) {
            let (datapath, key) = (info.datapath, info.key);
            self.mark_groups_of(datapath, key);
        }
        self.mark_socket_client(port);
        self.mark_nat_of_port(port);
        self.mark_gateway_of_port(port);
    }

    /// Number of map keys waiting for [`Self::flush`].
    #[must_use]
    pub fn pending(&self) -> usize {
        self.port_tables.pending()
            + self.fib_table.pending()
            + self.responder_tables.pending()
            + self.flood_tables.pending()
            + self.localnet_tables.pending()
            + self.remote_encap_table.pending()
            + self.switch_router_table.pending()
            + self.acl.pending()
            + self.lb.pending()
            + self.nat.pending()
            + self.gateway.pending()
    }

    /// Writes every marked key whose desired value differs from the installed one. On an error
    /// the key stays marked, so the next flush retries it.
    pub fn flush(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        // A switch's rules before the ports' flags that send their traffic to them.
        let mut writes = self.flush_acls(maps)?;
        // A switch's VIPs before the ports' flags that translate their replies.
        writes += self.flush_lbs(maps)?;
        // The endpoints' addresses (IPv6 underlays) before the entries that send to them.
        writes += self.flush_remote_encaps(maps)?;
        writes += self.flush_ports(maps)?;
        writes += self.flush_flood(maps)?;
        writes += self.flush_localnets(maps)?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.fib_table,
            |s, &(dp, mac)| s.desired_fib(dp, mac),
        )?;
        writes += self.flush_responders(maps)?;
        writes += self.flush_nat(maps)?;
        writes += self.flush_gateways(maps)?;
        writes += self.flush_switch_routers(maps)?;
        Ok(writes)
    }

    /// Removes every map key this state did not install: what a previous agent left for ports,
    /// MACs or addresses that are gone. Run it only once the state is complete (the Southbound
    /// snapshot and the local scope are in, nothing is pending), or it removes live entries.
    /// Returns the number of keys removed.
    pub fn sweep(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        Ok(self.sweep_ports(maps)?
            + self.sweep_localnets(maps)?
            + self.remote_encap_table.sweep(maps)?
            + self.switch_router_table.sweep(maps)?
            + self.sweep_lbs(maps)?
            + self.sweep_flood(maps)?
            + self.fib_table.sweep(maps)?
            + self.sweep_responders(maps)?
            + self.sweep_nat(maps)?
            + self.sweep_gateways(maps)?
            + self.sweep_acls(maps)?)
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

#[cfg(test)]
mod tests;
