//! This chassis's L3 kernel maps, derived from the IR: the routers the kernel forwards for (those
//! without flows it cannot run), their routes (per destination prefix, and per source prefix for
//! `src-ip` routes in a map of their own; per route table, the table in the key's datapath field,
//! with the port → table map `ROUTE_TABLES`; ECMP routes by group, discard routes as such), the
//! highest-priority route of each table, with OVN's priority so the kernel picks
//! between the two lookups as `lr_in_ip_routing` does, and the datapath behind the output port: a
//! switch, with the port's own address for the router's ARP requests, or a peer router), their
//! neighbours (static from the flows; learned from MAC_Binding where the router looks them up), and
//! their own addresses (and what they answer there: pings, TCP resets, ICMP port/protocol
//! unreachable). IPv6: addresses and neighbours in maps of their own (`ROUTER_ADDRESSES6`,
//! `NEIGHBOURS6`), and the router flags for the kernel's IPv6 stage (northd's per-port link-local
//! routes, solicitations for next hops), and where a router port answers an expired hop limit
//! with ICMPv6 time exceeded (`TIME_EXCEEDED6`, [`time_exceeded6`]); the router advertisements
//! switches' router ports answer solicitations with (`ROUTER_ADVERTS`, [`router_adverts`]).
//! Owns the desired contents
//! (the `desired_*` functions); what is installed is kept by one [`Table`] per map, which
//! touches the kernel only through [`Maps`]. Incremental like [`super::l2`]: changes mark keys,
//! [`L3State::flush`] writes just those.

use std::{
    borrow::Borrow,
    collections::{HashMap, HashSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use ovnbpf_common::{
    ROUTE_GATEWAY, ROUTE_TO_ROUTER, ROUTE_TO_SWITCH, ROUTER_ADDRESS_ECHO,
    ROUTER_ADDRESS_PORT_UNREACHABLE, ROUTER_ADDRESS_PROTOCOL_UNREACHABLE, ROUTER_ADDRESS_TCP_RESET,
    ROUTER_ARP_REQUESTS, ROUTER_FORWARDS, ROUTER_IPV6_LINK_LOCAL, ROUTER_IPV6_UNSUPPORTED,
    ROUTER_ND_REQUESTS, ROUTER_POLICIES, ROUTER_ROUTE_TABLES, ROUTER_SOURCE_ROUTES,
    ROUTER_SOURCE_ROUTES6, RouteEntry, RouterAddress, RouterInfo,
    maps::{
        Neighbours, Neighbours6, RouteTables, RouterAddresses, RouterAddresses6, Routers, Routes,
        Routes6, SourceRoutes, SourceRoutes6,
    },
};

use super::{
    EbpfError, Maps,
    tables::{Pass, Table, flush_from},
};
use crate::pipeline::ir::{
    EcmpStage, IrDiff, IrEntry, Mac, PolicyVerdict, PortKind, Prefix, Prefix6, RejectProtocol,
    RejectResponse, RouteSelector, Unforwardable,
};

/// Where the state keeps a router's routes: the router, what the prefix is matched against, and
/// the prefix (one kernel slot, in ROUTES or SOURCE_ROUTES).
type RouteSlot = (u32, RouteSelector, Prefix);

/// One route of the main table.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Candidate {
    /// OVN's priority (fits the kernel's byte: see [`L3State::take`]).
    priority: u8,
    /// A discard route: the kernel drops what it routes (the other fields are empty).
    discard: bool,
    /// The route table it belongs to (`None`: every table, as OVN's connected routes and the
    /// main table's source routes; `Some(0)`: the main table only).
    table: Option<u32>,
    /// An ECMP route: its group ([`ecmp::group_id`]) and member count; the other fields are
    /// then empty (each member has its own, in [`ecmp::Groups`]).
    ecmp: Option<(u32, usize)>,
    nexthop: Option<Ipv4Addr>,
    /// The output port's address (`reg1`).
    source_ip: Ipv4Addr,
    source_mac: Mac,
    port: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct PortInfo {
    datapath: u32,
    key: u32,
    peer: Option<String>,
    /// The first IPv4 of its addresses (a router port's).
    ipv4: Option<Ipv4Addr>,
}

/// The L3 maps of one chassis.
#[derive(Debug, Default)]
pub struct L3State {
    /// Datapath key → whether it is a router.
    routers: HashMap<u32, bool>,
    /// Patch ports (router ports and their switch-side peers).
    ports: HashMap<String, PortInfo>,
    /// Port name → the patch ports whose peer it is.
    patch_by_peer: HashMap<String, HashSet<String>>,
    /// Gateway ports ([`IrEntry::GatewayPort`]): routes out of them are `ROUTE_GATEWAY` (the
    /// kernel asks `GATEWAY_REDIRECTS`, the L2 gateway family's, where they go).
    gateway_ports: HashSet<String>,
    routes: HashMap<RouteSlot, HashSet<Candidate>>,
    routes_by_port: HashMap<String, HashSet<RouteSlot>>,
    /// Per router: how many source prefixes have routes (the kernel looks the source up only
    /// for routers that have some).
    source_prefixes: HashMap<u32, usize>,
    /// (router, next hop) → (MAC from the flows, MAC learned), both families.
    neighbours: HashMap<(u32, IpAddr), (Option<Mac>, Option<Mac>)>,
    /// Routers that look next hops up in MAC_Binding, per family (true: IPv6).
    neighbour_lookup: HashSet<(u32, bool)>,
    /// Routers that ARP for next hops they have no MAC for.
    arp_requests: HashSet<u32>,
    /// Routers that solicit IPv6 next hops they have no MAC for.
    nd_requests: HashSet<u32>,
    /// IPv6 routes per slot ([`routes6`]).
    routes6: HashMap<routes6::RouteSlot6, HashSet<routes6::Candidate6>>,
    routes6_by_port: HashMap<String, HashSet<routes6::RouteSlot6>>,
    /// Per router: how many IPv6 prefixes have routes, and how many source prefixes.
    slots6: HashMap<u32, usize>,
    source_prefixes6: HashMap<u32, usize>,
    route6_table: Table<Routes6, (u32, Prefix6)>,
    source_route6_table: Table<SourceRoutes6, (u32, Prefix6)>,
    /// Per router: its per-port link-local routes (`fe80::/64` with an inport).
    link_local_routes: HashMap<u32, HashSet<String>>,
    /// Per router: entries that keep the kernel from forwarding for it (drop/reroute policies,
    /// unsupported flows).
    blockers: HashMap<u32, HashSet<String>>,
    /// Per router: entries that keep the kernel from forwarding its IPv6 only (unsupported
    /// flows only IPv6 can match).
    ipv6_blockers: HashMap<u32, HashSet<String>>,
    /// A router's own addresses: (router, address) → how many ARP entries name it, and what
    /// the router answers there (`RouterAddress` flags), both families.
    addresses: HashMap<(u32, IpAddr), (usize, u32)>,
    route_table: Table<Routes, (u32, Prefix)>,
    source_route_table: Table<SourceRoutes, (u32, Prefix)>,
    neighbour_table: Table<Neighbours, (u32, Ipv4Addr)>,
    neighbour6_table: Table<Neighbours6, (u32, Ipv6Addr)>,
    address_table: Table<RouterAddresses, (u32, Ipv4Addr)>,
    address6_table: Table<RouterAddresses6, (u32, Ipv6Addr)>,
    router_table: Table<Routers, u32>,
    policies: policies::Policies,
    ecmp: ecmp::Groups4,
    /// The IPv6 ECMP routes' groups.
    ecmp6: ecmp::Groups6,
    /// Router port → (its router, the route table it selects).
    port_tables: HashMap<String, (u32, u32)>,
    /// Per router: the route tables its ports select, and by how many ports.
    tables_of: HashMap<u32, std::collections::BTreeMap<u32, usize>>,
    port_table_table: Table<RouteTables, (u32, Ipv4Addr)>,
    /// The routers' ICMPv6 time exceeded sources ([`time_exceeded6`]).
    time_exceeded6: time_exceeded6::TimeExceeded6State,
    /// The switches' router advertisements ([`router_adverts`]).
    router_adverts: router_adverts::RouterAdvertState,
}

impl L3State {
    /// Takes in one IR diff.
    pub fn apply<E: Borrow<IrEntry>>(&mut self, diff: &IrDiff<E>) {
        for (entry, added) in diff.in_order() {
            self.take(entry, added);
        }
    }

    fn block(&mut self, datapath: u32, reason: String, added: bool) {
        Self::take_blocker(&mut self.blockers, datapath, reason, added);
        self.router_table.mark(datapath);
    }

    fn take_blocker(
        blockers: &mut HashMap<u32, HashSet<String>>,
        datapath: u32,
        reason: String,
        added: bool,
    ) {
        let set = blockers.entry(datapath).or_default();
        if added {
            set.insert(reason);
        } else {
            set.remove(&reason);
        }
        if set.is_empty() {
            blockers.remove(&datapath);
        }
    }

    /// Keeps [`Self::source_prefixes`] when slot `key` (a source slot) gained its first route or
    /// lost its last; the router's flags follow.
    fn count_source_prefix(&mut self, key: RouteSlot, had_routes: bool) {
        let (datapath, selector, _) = key;
        let has_routes = self.routes.contains_key(&key);
        if selector != RouteSelector::Source || had_routes == has_routes {
            return;
        }
        let count = self.source_prefixes.entry(datapath).or_default();
        if has_routes {
            *count += 1;
        } else {
            *count = count.saturating_sub(1);
        }
        if *count == 0 {
            self.source_prefixes.remove(&datapath);
        }
        self.router_table.mark(datapath);
    }

    fn take(&mut self, entry: &IrEntry, added: bool) {
        match entry {
            IrEntry::Datapath {
                datapath, router, ..
            } => {
                if added {
                    self.routers.insert(*datapath, *router);
                } else {
                    self.routers.remove(datapath);
                }
                self.router_table.mark(*datapath);
                // Routes into this datapath may change kind.
                let keys: Vec<RouteSlot> = self.routes.keys().copied().collect();
                keys.into_iter().for_each(|key| self.mark_route(key));
                self.mark_all_routes6();
            }
            IrEntry::Port {
                datapath,
                key,
                name,
                kind,
                addresses,
                ..
            } => {
                self.router_adverts.take(entry, added);
                // Only patch ports (router ports and their switch-side peers) matter to routes;
                // pods are skipped, so a pod costs nothing here.
                let PortKind::Patch { peer } = kind else {
                    return;
                };
                if let Some(&(router, _)) = self.port_tables.get(name)
                    && let Some(ip) = self.ports.get(name).and_then(|p| p.ipv4)
                {
                    self.port_table_table.mark((router, ip));
                }
                if self.ports.remove(name).is_some() {
                    remove_patch(&mut self.patch_by_peer, peer, name);
                }
                if added {
                    self.ports.insert(
                        name.clone(),
                        PortInfo {
                            datapath: *datapath,
                            key: *key,
                            peer: Some(peer.clone()),
                            ipv4: addresses
                                .first()
                                .and_then(|a| a.ipv4.first())
                                .map(|p| p.network),
                        },
                    );
                    self.patch_by_peer
                        .entry(peer.clone())
                        .or_default()
                        .insert(name.clone());
                    if let Some(&(router, _)) = self.port_tables.get(name)
                        && let Some(ip) = self.ports.get(name).and_then(|p| p.ipv4)
                    {
                        self.port_table_table.mark((router, ip));
                    }
                }
                // Routes out of this port, and out of the ports patched to it, resolve through
                // it.
                let around: Vec<String> = self
                    .patch_by_peer
                    .get(name)
                    .into_iter()
                    .flatten()
                    .cloned()
                    .collect();
                self.mark_routes_out_of(name);
                around.iter().for_each(|port| self.mark_routes_out_of(port));
            }
            IrEntry::GatewayPort { port, .. } => {
                if added {
                    self.gateway_ports.insert(port.clone());
                } else {
                    self.gateway_ports.remove(port);
                }
                self.mark_routes_out_of(port);
            }
            IrEntry::Route { .. }
            | IrEntry::EcmpRoute { .. }
            | IrEntry::DiscardRoute { .. }
            | IrEntry::RouteTableOfPort { .. } => self.take_route(entry, added),
            IrEntry::Neighbour {
                datapath, ip, mac, ..
            } => self.take_neighbour(*datapath, (*ip).into(), (Some(*mac), None), added),
            IrEntry::Neighbour6 {
                datapath, ip, mac, ..
            } => self.take_neighbour(*datapath, (*ip).into(), (Some(*mac), None), added),
            IrEntry::LearnedNeighbour {
                datapath, ip, mac, ..
            } => self.take_neighbour(*datapath, (*ip).into(), (None, Some(*mac)), added),
            IrEntry::LearnedNeighbour6 {
                datapath, ip, mac, ..
            } => self.take_neighbour(*datapath, (*ip).into(), (None, Some(*mac)), added),
            IrEntry::NeighbourLookup { datapath } => self.take_lookup(*datapath, false, added),
            IrEntry::NeighbourLookup6 { datapath } => self.take_lookup(*datapath, true, added),
            IrEntry::NsForNextHop { datapath } => {
                if added {
                    self.nd_requests.insert(*datapath);
                } else {
                    self.nd_requests.remove(datapath);
                }
                self.router_table.mark(*datapath);
            }
            IrEntry::Route6 {
                datapath,
                selector: RouteSelector::Destination,
                prefix,
                inport: Some(inport),
                nexthop: None,
                port,
                ..
            } if inport == port && is_link_local_prefix(prefix) => {
                let ports = self.link_local_routes.entry(*datapath).or_default();
                if added {
                    ports.insert(port.clone());
                } else {
                    ports.remove(port);
                }
                if ports.is_empty() {
                    self.link_local_routes.remove(datapath);
                }
                self.router_table.mark(*datapath);
            }
            IrEntry::Route6 { .. } | IrEntry::EcmpRoute6 { .. } | IrEntry::DiscardRoute6 { .. } => {
                self.take_route6(entry, added);
            }
            IrEntry::EcmpMember6 {
                datapath,
                group,
                member,
                nexthop,
                source_ip,
                source_mac,
                port,
            } => {
                let target = ecmp::Member::new(nexthop, source_ip, source_mac, port);
                let key = (*datapath, ecmp::group_id(EcmpStage::Route, *group));
                self.ecmp6.take_member(key, *member, &target, added);
            }
            IrEntry::RouterPort { .. } | IrEntry::TtlExceeded6 { .. } => {
                self.time_exceeded6.take(entry, added);
            }
            IrEntry::RouterAdvertisement { .. } => self.router_adverts.take(entry, added),
            IrEntry::RouterEchoReply6 { datapath, ip } => {
                self.answer(*datapath, (*ip).into(), ROUTER_ADDRESS_ECHO, added);
            }
            IrEntry::RouterReject6 {
                datapath,
                ip,
                protocol,
                response,
            } => {
                if let Some(flag) = reject_flag(*protocol, *response, true) {
                    self.answer(*datapath, (*ip).into(), flag, added);
                }
            }
            IrEntry::ArpRequestForNextHop { datapath } => {
                if added {
                    self.arp_requests.insert(*datapath);
                } else {
                    self.arp_requests.remove(datapath);
                }
                self.router_table.mark(*datapath);
            }
            IrEntry::RouterArpReply { datapath, ip, .. } => {
                let key = (*datapath, IpAddr::V4(*ip));
                let slot = self.addresses.entry(key).or_default();
                if added {
                    slot.0 += 1;
                } else {
                    slot.0 = slot.0.saturating_sub(1);
                }
                self.address_changed(key);
            }
            IrEntry::RouterEchoReply { datapath, ip } => {
                self.answer(*datapath, (*ip).into(), ROUTER_ADDRESS_ECHO, added);
            }
            IrEntry::RouterReject {
                datapath,
                ip,
                protocol,
                response,
            } => {
                if let Some(flag) = reject_flag(*protocol, *response, false) {
                    self.answer(*datapath, (*ip).into(), flag, added);
                }
            }
            // Policies by one prefix go to the kernel's tries; one matching both a source and
            // a destination prefix fits neither, and keeps its router out.
            IrEntry::RouterPolicy {
                datapath,
                priority,
                source,
                destination,
                l4,
                verdict,
            } => {
                let policy = (*priority, verdict.clone());
                let anywhere = Prefix {
                    network: Ipv4Addr::UNSPECIFIED,
                    length: 0,
                };
                match (source, destination) {
                    // Transport ports: the pair list (the tries hold prefixes only).
                    _ if l4.is_some() => self.take_pair_policy(
                        *datapath,
                        (
                            source.unwrap_or(anywhere),
                            destination.unwrap_or(anywhere),
                            *l4,
                        ),
                        &policy,
                        added,
                    ),
                    (Some(source), None) => self.policies.take(
                        (*datapath, RouteSelector::Source, *source),
                        &policy,
                        added,
                    ),
                    (None, Some(destination)) => self.policies.take(
                        (*datapath, RouteSelector::Destination, *destination),
                        &policy,
                        added,
                    ),
                    (Some(source), Some(destination)) => self.take_pair_policy(
                        *datapath,
                        (*source, *destination, None),
                        &policy,
                        added,
                    ),
                    // A policy matching neither (`1`, or only what the compiler lets through
                    // without a prefix) is not compiled to this entry.
                    (None, None) => {}
                }
                if let PolicyVerdict::RerouteEcmp { group, members } = verdict {
                    let key = (*datapath, ecmp::group_id(EcmpStage::Policy, *group));
                    self.take_ecmp_select(key, members, added);
                }
                self.router_table.mark(*datapath);
            }
            IrEntry::EcmpMember {
                datapath,
                stage,
                group,
                member,
                nexthop,
                source_ip,
                source_mac,
                port,
            } => {
                let target = ecmp::Member::new(nexthop, source_ip, source_mac, port);
                let key = (*datapath, ecmp::group_id(*stage, *group));
                self.ecmp.take_member(key, *member, &target, added);
            }
            // The compiler decides which gaps stop forwarding (an unsupported routing flow, U2O
            // routing); the backend obeys. Unsupported flows it lets through, and side duties
            // left undone (e.g. MAC learning), are only reported.
            IrEntry::NotForwardable {
                datapath,
                reason: reason @ Unforwardable::UnsupportedIpv6Flow { .. },
            } => {
                Self::take_blocker(
                    &mut self.ipv6_blockers,
                    *datapath,
                    reason.to_string(),
                    added,
                );
                self.router_table.mark(*datapath);
            }
            IrEntry::NotForwardable { datapath, reason } => {
                self.block(*datapath, reason.to_string(), added);
            }
            IrEntry::Unsupported { .. } | IrEntry::SideDutyNotDone { .. } => {}
            _ => {}
        }
    }

    /// A policy for the router's pair list; more than the kernel scans keep the router out.
    fn take_pair_policy(
        &mut self,
        router: u32,
        matched: (Prefix, Prefix, Option<crate::pipeline::ir::L4Match>),
        policy: &(u16, PolicyVerdict),
        added: bool,
    ) {
        let reason = format!(
            "more than {} policies matching both a source and a destination prefix, or ports",
            ovnbpf_common::MAX_PAIR_POLICIES
        );
        let before = self.policies.too_many_pairs(router);
        self.policies.take_pair(router, matched, policy, added);
        let after = self.policies.too_many_pairs(router);
        if before != after {
            self.block(router, reason, after);
        }
    }

    /// A route or policy of the group's router selects among `members`; a group larger than
    /// the kernel takes keeps its router out.
    fn take_ecmp_select(&mut self, key: ecmp::GroupKey, members: &[u16], added: bool) {
        let reason = |count: usize| {
            format!(
                "an ECMP group of {count} members (the kernel takes {})",
                ovnbpf_common::ecmp::MAX_MEMBERS
            )
        };
        if let Some(count) = self.ecmp.oversized(key) {
            self.block(key.0, reason(count), false);
        }
        self.ecmp.take_select(key, members, added);
        if let Some(count) = self.ecmp.oversized(key) {
            self.block(key.0, reason(count), true);
        }
    }

    /// Sets or clears what the router answers at its address `ip`.
    /// Marks every route, policy and ECMP member (both families) out of router port `port`:
    /// where they lead was resolved through it.
    fn mark_routes_out_of(&mut self, port: &str) {
        let marks: Vec<RouteSlot> = self
            .routes_by_port
            .get(port)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        marks.into_iter().for_each(|key| self.mark_route(key));
        self.policies.mark_port(port);
        self.ecmp.mark_port(port);
        self.ecmp6.mark_port(port);
        self.mark_routes6_of_port(port);
    }

    /// The route kind out of router port `port` toward the datapath behind it: a gateway
    /// port's, or to a router or a switch.
    fn output_kind(&self, port: &str, behind: u32) -> Option<u8> {
        if self.gateway_ports.contains(port) {
            return Some(ROUTE_GATEWAY);
        }
        Some(match self.routers.get(&behind)? {
            true => ROUTE_TO_ROUTER,
            false => ROUTE_TO_SWITCH,
        })
    }

    fn answer(&mut self, datapath: u32, ip: IpAddr, flag: u32, added: bool) {
        let flags = &mut self.addresses.entry((datapath, ip)).or_default().1;
        if added {
            *flags |= flag;
        } else {
            *flags &= !flag;
        }
        self.address_changed((datapath, ip));
    }

    fn address_changed(&mut self, key: (u32, IpAddr)) {
        if self.addresses.get(&key) == Some(&(0, 0)) {
            self.addresses.remove(&key);
        }
        match key {
            (datapath, IpAddr::V4(ip)) => self.address_table.mark((datapath, ip)),
            (datapath, IpAddr::V6(ip)) => self.address6_table.mark((datapath, ip)),
        }
    }

    /// Why the kernel does not forward for `router`, or not its IPv6 (those reasons say "IPv6
    /// only"; empty when it forwards both).
    #[must_use]
    pub fn blocked(&self, router: u32) -> Vec<String> {
        let mut reasons: Vec<String> = self
            .blockers
            .get(&router)
            .into_iter()
            .chain(self.ipv6_blockers.get(&router))
            .flatten()
            .cloned()
            .chain(
                self.ipv6_beyond_tables(router)
                    .map(|reason| format!("{reason} (IPv6 only)")),
            )
            .collect();
        reasons.sort();
        reasons
    }

    /// Number of keys waiting for [`Self::flush`].
    #[must_use]
    pub fn pending(&self) -> usize {
        self.route_table.pending()
            + self.source_route_table.pending()
            + self.route6_table.pending()
            + self.source_route6_table.pending()
            + self.policies.pending()
            + self.ecmp.pending()
            + self.ecmp6.pending()
            + self.port_table_table.pending()
            + self.neighbour_table.pending()
            + self.neighbour6_table.pending()
            + self.address_table.pending()
            + self.address6_table.pending()
            + self.router_table.pending()
            + self.time_exceeded6.table.pending()
            + self.router_adverts.table.pending()
    }

    /// Where a packet routed out of router port `port` toward `nexthop` (`None`: the
    /// destination itself) goes: the datapath behind the port and how the kernel gets there.
    fn resolve_output(
        &self,
        port: &str,
        nexthop: Option<Ipv4Addr>,
        source_ip: Ipv4Addr,
        source_mac: Mac,
    ) -> Option<RouteEntry> {
        let out = self.ports.get(port)?;
        let peer = self.ports.get(out.peer.as_ref()?)?;
        let kind = self.output_kind(port, peer.datapath)?;
        let ingress_ip = if kind == ROUTE_TO_ROUTER {
            peer.ipv4
        } else {
            Some(source_ip)
        };
        Some(RouteEntry {
            nexthop: nexthop.map_or(0, |ip| u32::from_ne_bytes(ip.octets())),
            source_mac,
            kind,
            priority: 0,
            next_datapath: peer.datapath,
            ingress_port: peer.key,
            ingress_ip: ingress_ip.map_or(0, |ip| u32::from_ne_bytes(ip.octets())),
        })
    }

    fn desired_address(&self, datapath: u32, ip: IpAddr) -> Option<RouterAddress> {
        let (_, flags) = self.addresses.get(&(datapath, ip))?;
        Some(RouterAddress { flags: *flags })
    }

    fn desired_router(&self, datapath: u32) -> Option<RouterInfo> {
        let flag = |on: bool, flag: u32| if on { flag } else { 0 };
        let flags = ROUTER_FORWARDS
            | flag(
                self.source_prefixes.contains_key(&datapath),
                ROUTER_SOURCE_ROUTES,
            )
            | flag(self.arp_requests.contains(&datapath), ROUTER_ARP_REQUESTS)
            | flag(self.nd_requests.contains(&datapath), ROUTER_ND_REQUESTS)
            | flag(self.policies.any(datapath), ROUTER_POLICIES)
            | flag(self.tables_of.contains_key(&datapath), ROUTER_ROUTE_TABLES)
            | flag(
                self.link_local_routes.contains_key(&datapath),
                ROUTER_IPV6_LINK_LOCAL,
            )
            | flag(
                self.ipv6_blockers.contains_key(&datapath)
                    || self.ipv6_beyond_tables(datapath).is_some(),
                ROUTER_IPV6_UNSUPPORTED,
            )
            | flag(self.has_source_routes6(datapath), ROUTER_SOURCE_ROUTES6);
        (self.routers.get(&datapath) == Some(&true) && !self.blockers.contains_key(&datapath))
            .then_some(RouterInfo {
                flags,
                pair_policies: self.policies.pair_count(datapath) as u32,
            })
    }

    /// Writes every marked key whose desired value differs from the installed one; failed keys
    /// stay marked.
    pub fn flush(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        let mut writes = flush_from(
            self,
            maps,
            |s| &mut s.route_table,
            |s, &(dp, prefix)| s.desired_route((dp, RouteSelector::Destination, prefix)),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.source_route_table,
            |s, &(dp, prefix)| s.desired_route((dp, RouteSelector::Source, prefix)),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.route6_table,
            |s, &(dp, prefix)| s.desired_route6((dp, RouteSelector::Destination, prefix)),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.source_route6_table,
            |s, &(dp, prefix)| s.desired_route6((dp, RouteSelector::Source, prefix)),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.policies.destination_table,
            |s, &(dp, prefix)| s.desired_policy((dp, RouteSelector::Destination, prefix)),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.policies.source_table,
            |s, &(dp, prefix)| s.desired_policy((dp, RouteSelector::Source, prefix)),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.port_table_table,
            |s, &(router, ip)| s.desired_port_table(router, ip),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.policies.pair_table,
            |s, key| s.desired_pair(key),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.ecmp.table,
            |s, key| s.desired_ecmp_member(key),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.ecmp6.table,
            |s, key| s.desired_ecmp_member6(key),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.neighbour_table,
            |s, &(dp, ip)| s.desired_neighbour(dp, IpAddr::V4(ip)),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.neighbour6_table,
            |s, &(dp, ip)| s.desired_neighbour(dp, IpAddr::V6(ip)),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.address_table,
            |s, &(dp, ip)| s.desired_address(dp, IpAddr::V4(ip)),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.address6_table,
            |s, &(dp, ip)| s.desired_address(dp, IpAddr::V6(ip)),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.time_exceeded6.table,
            |s, slot| s.time_exceeded6.desired(slot),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.router_adverts.table,
            |s, switch| s.router_adverts.desired(switch),
        )?;
        // Routers through the hook that logs why one goes.
        let mut routers = std::mem::take(&mut self.router_table);
        let written = routers.flush_with(
            maps,
            Pass::All,
            |&datapath| self.desired_router(datapath),
            |_, &datapath, desired| {
                // Only for the log when the router goes, or its IPv6.
                match desired {
                    None => {
                        let reasons = self.blocked(datapath);
                        if !reasons.is_empty() {
                            tracing::info!(
                                router = datapath,
                                ?reasons,
                                "the kernel does not route for this router; its traffic is dropped and counted"
                            );
                        }
                    }
                    Some(info) if info.flags & ROUTER_IPV6_UNSUPPORTED != 0 => {
                        tracing::info!(
                            router = datapath,
                            reasons = ?self.blocked(datapath),
                            "the kernel routes this router's IPv4 but not its IPv6; its IPv6 is dropped and counted"
                        );
                    }
                    Some(_) => {}
                }
                Ok(())
            },
        );
        self.router_table = routers;
        Ok(writes + written?)
    }

    /// Removes every L3 key this state did not install (see [`super::l2::L2State::sweep`]).
    pub fn sweep(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        Ok(self.route_table.sweep(maps)?
            + self.source_route_table.sweep(maps)?
            + self.route6_table.sweep(maps)?
            + self.source_route6_table.sweep(maps)?
            + self.policies.destination_table.sweep(maps)?
            + self.policies.source_table.sweep(maps)?
            + self.ecmp.table.sweep(maps)?
            + self.ecmp6.table.sweep(maps)?
            + self.policies.pair_table.sweep(maps)?
            + self.port_table_table.sweep(maps)?
            + self.neighbour_table.sweep(maps)?
            + self.neighbour6_table.sweep(maps)?
            + self.router_table.sweep(maps)?
            + self.address_table.sweep(maps)?
            + self.address6_table.sweep(maps)?
            + self.time_exceeded6.table.sweep(maps)?
            + self.router_adverts.table.sweep(maps)?)
    }
}

/// `fe80::/64`: northd's per-port link-local route.
fn is_link_local_prefix(prefix: &Prefix6) -> bool {
    prefix.length == 64 && prefix.network.segments()[..4] == [0xfe80, 0, 0, 0]
}

/// The `RouterAddress` flag of an answer northd gives at a router address and the kernel
/// knows (IPv4: port unreachable is ICMP code 3, protocol unreachable code 2; IPv6: any
/// destination unreachable). Others (SCTP abort) leave the traffic counted as unhandled.
fn reject_flag(
    protocol: Option<RejectProtocol>,
    response: RejectResponse,
    ipv6: bool,
) -> Option<u32> {
    match (protocol, response) {
        (Some(RejectProtocol::Tcp), RejectResponse::TcpReset) => Some(ROUTER_ADDRESS_TCP_RESET),
        (Some(RejectProtocol::Udp), RejectResponse::IcmpUnreachable { code })
            if ipv6 || code == 3 =>
        {
            Some(ROUTER_ADDRESS_PORT_UNREACHABLE)
        }
        (None, RejectResponse::IcmpUnreachable { code }) if ipv6 || code == 2 => {
            Some(ROUTER_ADDRESS_PROTOCOL_UNREACHABLE)
        }
        _ => None,
    }
}

/// Drops `name` from the patch ports peering with `peer`.
fn remove_patch(index: &mut HashMap<String, HashSet<String>>, peer: &str, name: &str) {
    if let Some(names) = index.get_mut(peer) {
        names.remove(name);
        if names.is_empty() {
            index.remove(peer);
        }
    }
}

mod ecmp;
mod keys;
mod neighbours;
mod policies;
mod router_adverts;
mod routes;
mod routes6;
mod time_exceeded6;
pub use keys::route_slot;

#[cfg(test)]
mod tests;
