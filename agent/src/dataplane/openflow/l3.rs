//! The IR's routers as flows on br-int (IPv4 and IPv6), and the patches between datapaths:
//! - table [`l2::OUTPUT`]: a logical output port that is one end of a patch (switch–router,
//!   router–router) goes on in its peer's datapath: metadata and logical input port set to the
//!   peer's, inside a `clone` so the actions after it (a flood's next member) see the packet as
//!   it was, then the router's admission or the switch's L2 lookup (a switch's frame never back
//!   into the patch it came by: a flood from the router leaves the router out);
//! - table [`ADMISSION`]: a router port takes frames to its MAC (and multicast) that enter by it
//!   (`RouterPort`), and sets the route table they are routed with (`reg7`: the port's
//!   `RouteTableOfPort`, else 0);
//! - table [`IP_INPUT`]: the router's drop rules (martian, multicast and broadcast, spoofed
//!   sources, traffic to its own addresses, TTL 0 or 1, IPv6 reserved multicast and neighbour
//!   discovery not for it: `RouterDrop`), echo replies for its addresses (`RouterEchoReply`,
//!   `RouterEchoReply6`: source and destination swapped, TTL 255); the answers the agent makes
//!   ([`super::answer`]: time exceeded, resets and unreachables, its ARP reply and its
//!   neighbour advertisements, MAC learning from the ARP it hears) sent up by cookie; the rest
//!   of IPv4 and IPv6 on to routing; anything else dropped as untranslated (counted);
//! - table [`ROUTING`]: routes by destination or source prefix at northd's priorities
//!   (`Route`, `DiscardRoute`, `Route6`, `DiscardRoute6`; a route of a table only for packets
//!   routed with it): TTL decremented, the next hop in `reg0` (IPv6: `xxreg0`, `reg0`–`reg3`)
//!   and the source address in `reg1` (IPv4), the output port's MAC as source, the logical
//!   output port in `reg15`;
//! - table [`POLICY`]: the router's policies (`RouterPolicy`: allow, drop, reroute; a port
//!   range as the masked blocks that cover it);
//! - table [`ECMP`]: an ECMP route's or reroute policy's member (`EcmpRoute`, `EcmpRoute6`,
//!   `EcmpMember`, `EcmpMember6`): the route or policy puts the group in `reg9` and the
//!   member's index in `reg8` (Nicira's `multipath`, a symmetric hash of the addresses,
//!   protocol and ports: one member per flow, both ways; it hashes otherwise than the eBPF
//!   datapath, so a flow may take another member there), the member sets the next hop,
//!   source and output port;
//! - table [`RESOLVE`]: the next hop's MAC (`Neighbour`, `Neighbour6`, then the learned ones),
//!   then the output table, where the patch carries the packet to the switch; an unresolved
//!   IPv4 next hop is asked for by the agent (`ArpRequestForNextHop`).
//!
//! What a router does not route is dropped (a table miss); what the translation leaves out is
//! accounted by [`super::untranslated`], and a fenced router's admission drops and counts what
//! crosses into it. Flows are changed per datapath, as [`super::l2`]'s.
//! Owns the routers' state and their installed flows; touches nothing else.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLock};

use super::{
    action::{Action, Instruction, PORT_CONTROLLER},
    answer::{
        Adverts, COOKIE_ARP_REQUEST, COOKIE_LEARN, COOKIE_ND_ROUTER_ADVERTISEMENT,
        COOKIE_ROUTER_ADVERTISEMENT, COOKIE_TCP_RESET, COOKIE_TIME_EXCEEDED, COOKIE_UNREACHABLE,
        PARAMETER, PARAMETER6,
    },
    l2::{self, COOKIE, LOOKUP, OUTPUT},
    message::FlowMod,
    oxm::{
        Field, Match, NXM_REG0, NXM_REG1, NXM_REG2, NXM_REG3, NXM_REG8, OXM_IPV4_DST, OXM_IPV4_SRC,
        OXM_IPV6_DST, OXM_IPV6_SRC,
    },
    table::{DatapathFlows, Flows, insert, on_datapath},
};
use crate::pipeline::ir::{
    EcmpStage, IrDiff, IrEntry, L4Match, PolicyVerdict, PortKind, RejectProtocol, RejectResponse,
    RouteSelector, RouterDropRule,
};

/// Table of the routers' admission.
pub const ADMISSION: u8 = 20;
/// Table of the routers' IP input (drops, echo replies).
pub const IP_INPUT: u8 = 21;
/// Table of the routes.
pub const ROUTING: u8 = 22;
/// Table of the router policies.
pub const POLICY: u8 = 23;
/// Table of the next hops' MACs.
pub const RESOLVE: u8 = 24;
/// Table of the ECMP groups' members (routes and reroute policies).
pub const ECMP: u8 = 25;

const IPV4: u16 = 0x0800;
const ARP: u16 = 0x0806;
const IPV6: u16 = 0x86dd;

/// A patch port: its datapath, key and peer.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PortInfo {
    datapath: u32,
    key: u32,
    peer: Option<String>,
}

/// The routers' state and what is installed.
#[derive(Debug, Default)]
pub struct RouterFlows {
    /// Logical port → where it is (every port: routes name their output ports).
    ports: HashMap<String, PortInfo>,
    /// Datapath → its patch ports.
    patches: HashMap<u32, BTreeSet<String>>,
    /// Port → the patch ports that name it their peer (its change changes their crossings).
    peered_by: HashMap<String, BTreeSet<String>>,
    /// The datapaths that are routers.
    routers: BTreeSet<u32>,
    /// The routers whose IPv6 is fenced ([`super::untranslated::Effect::Ipv6Fenced`]).
    ipv6_fenced: BTreeSet<u32>,
    /// Router → its entries this part translates.
    entries: HashMap<u32, BTreeSet<IrEntry>>,
    /// Per datapath: installed flows, changes since the last write, the fence.
    flows: DatapathFlows,
    /// The router ports' advertisements, for the agent's answers (written as each router's
    /// flows are computed).
    adverts: Arc<RwLock<Adverts>>,
}

impl RouterFlows {
    /// The router ports' advertisements, as the answering controller reads them.
    #[must_use]
    pub fn adverts(&self) -> Arc<RwLock<Adverts>> {
        Arc::clone(&self.adverts)
    }

    /// Takes in an IR diff's router and patch entries.
    pub fn apply<E: Borrow<IrEntry>>(&mut self, diff: &IrDiff<E>) {
        for (entry, added) in diff.in_order() {
            self.take(entry, added);
        }
    }

    fn take(&mut self, entry: &IrEntry, added: bool) {
        match entry {
            IrEntry::Datapath {
                datapath, router, ..
            } => {
                if added && *router {
                    self.routers.insert(*datapath);
                } else {
                    self.routers.remove(datapath);
                }
                self.flows.mark(*datapath);
            }
            IrEntry::Port {
                datapath,
                key,
                name,
                kind,
                ..
            } => {
                let peer = match kind {
                    PortKind::Patch { peer } => Some(peer.clone()),
                    _ => None,
                };
                let info = PortInfo {
                    datapath: *datapath,
                    key: *key,
                    peer: peer.clone(),
                };
                if added {
                    self.ports.insert(name.clone(), info);
                    if let Some(peer) = &peer {
                        self.patches
                            .entry(*datapath)
                            .or_default()
                            .insert(name.clone());
                        self.peered_by
                            .entry(peer.clone())
                            .or_default()
                            .insert(name.clone());
                    }
                } else if self.ports.get(name) == Some(&info) {
                    self.ports.remove(name);
                    if let Some(patches) = self.patches.get_mut(datapath) {
                        patches.remove(name);
                        if patches.is_empty() {
                            self.patches.remove(datapath);
                        }
                    }
                    if let Some(peer) = &peer
                        && let Some(named) = self.peered_by.get_mut(peer)
                    {
                        named.remove(name);
                        if named.is_empty() {
                            self.peered_by.remove(peer);
                        }
                    }
                }
                self.flows.mark(*datapath);
                // The peer's crossing names this port's key.
                if let Some(other) = peer.and_then(|peer| self.ports.get(&peer)) {
                    self.flows.mark(other.datapath);
                }
                // Patches of other datapaths whose peer this is (by index, not a scan of every
                // port: one change costs O(that change)).
                let crossing: Vec<u32> = self
                    .peered_by
                    .get(name)
                    .into_iter()
                    .flatten()
                    .filter_map(|patch| self.ports.get(patch))
                    .map(|other| other.datapath)
                    .collect();
                for datapath in crossing {
                    self.flows.mark(datapath);
                }
            }
            IrEntry::RouterPort { datapath, .. }
            | IrEntry::RouteTableOfPort { datapath, .. }
            | IrEntry::Route { datapath, .. }
            | IrEntry::DiscardRoute { datapath, .. }
            | IrEntry::RouterPolicy { datapath, .. }
            | IrEntry::Neighbour { datapath, .. }
            | IrEntry::LearnedNeighbour { datapath, .. }
            | IrEntry::RouterDrop { datapath, .. }
            | IrEntry::RouterEchoReply { datapath, .. }
            | IrEntry::RouterReject { datapath, .. }
            | IrEntry::TtlExceeded { datapath, .. }
            | IrEntry::ArpRequestForNextHop { datapath }
            | IrEntry::NeighbourLearning { datapath, .. }
            | IrEntry::RouterArpReply { datapath, .. }
            | IrEntry::Route6 { datapath, .. }
            | IrEntry::DiscardRoute6 { datapath, .. }
            | IrEntry::Neighbour6 { datapath, .. }
            | IrEntry::LearnedNeighbour6 { datapath, .. }
            | IrEntry::RouterEchoReply6 { datapath, .. }
            | IrEntry::RouterNdReply { datapath, .. }
            | IrEntry::RouterReject6 { datapath, .. }
            | IrEntry::TtlExceeded6 { datapath, .. }
            | IrEntry::NsForNextHop { datapath }
            | IrEntry::EcmpRoute { datapath, .. }
            | IrEntry::EcmpMember { datapath, .. }
            | IrEntry::EcmpRoute6 { datapath, .. }
            | IrEntry::EcmpMember6 { datapath, .. }
            | IrEntry::RouterAdvertisement { datapath, .. } => {
                let entries = self.entries.entry(*datapath).or_default();
                if added {
                    entries.insert(entry.clone());
                } else {
                    entries.remove(entry);
                }
                if entries.is_empty() {
                    self.entries.remove(datapath);
                }
                self.flows.mark(*datapath);
            }
            _ => {}
        }
    }

    /// Datapath `datapath` goes without flows (`fenced`) or has them again.
    pub fn set_fenced(&mut self, datapath: u32, fenced: bool) {
        self.flows.set_fenced(datapath, fenced);
    }

    /// Router `datapath`'s IPv6 goes unrouted (`fenced`: dropped and counted as it enters) or
    /// is routed again.
    pub fn set_ipv6_fenced(&mut self, datapath: u32, fenced: bool) {
        let changed = if fenced {
            self.ipv6_fenced.insert(datapath)
        } else {
            self.ipv6_fenced.remove(&datapath)
        };
        if changed {
            self.flows.mark(datapath);
        }
    }

    /// Whether a change waits for [`Self::changes`].
    #[must_use]
    pub fn has_changes(&self) -> bool {
        self.flows.has_changes()
    }

    /// The flow mods that bring the marked datapaths' flows to the desired ones (deletes first).
    pub fn changes(&mut self) -> Vec<FlowMod> {
        let desired = self
            .flows
            .take_marked()
            .into_iter()
            .map(|datapath| (datapath, self.desired(datapath)))
            .collect();
        self.flows.diff(desired)
    }

    /// Every desired flow, recorded as installed (the caller deletes the cookie's flows first).
    pub fn resync(&mut self) -> Vec<FlowMod> {
        let datapaths: BTreeSet<u32> = self.patches.keys().chain(&self.routers).copied().collect();
        self.flows.reset();
        let desired = datapaths
            .into_iter()
            .map(|datapath| (datapath, self.desired(datapath)))
            .collect();
        self.flows.diff(desired)
    }

    fn key(&self, port: &str) -> Option<u32> {
        self.ports.get(port).map(|info| info.key)
    }

    /// Datapath `datapath`'s desired flows: its patches' crossings and, for a router, its
    /// pipeline.
    fn desired(&self, datapath: u32) -> Flows {
        // The router ports' advertisements, for the agent (this router's, afresh).
        let adverts: HashMap<u32, ([u8; 6], Vec<u8>)> = self
            .entries
            .get(&datapath)
            .into_iter()
            .flatten()
            .filter_map(|entry| match entry {
                IrEntry::RouterAdvertisement {
                    port, mac, message, ..
                } => Some((self.key(port)?, (*mac, message.clone()))),
                _ => None,
            })
            .collect();
        if let Ok(mut all) = self.adverts.write() {
            if adverts.is_empty() {
                all.remove(&datapath);
            } else {
                all.insert(datapath, adverts);
            }
        }
        let mut flows = BTreeMap::new();
        if self.flows.is_fenced(datapath) {
            // What crosses into a fenced router is dropped and counted.
            if self.routers.contains(&datapath) {
                insert(
                    &mut flows,
                    l2::untranslated_drop(ADMISSION, 1, on_datapath(datapath)),
                );
            }
            return flows;
        }
        let mut add = |table: u8, priority: u16, matching: Match, actions: Vec<Action>| {
            insert(
                &mut flows,
                FlowMod::add(
                    COOKIE,
                    table,
                    priority,
                    matching,
                    vec![Instruction::ApplyActions(actions)],
                ),
            );
        };
        let on = || on_datapath(datapath);
        for name in self.patches.get(&datapath).into_iter().flatten() {
            let Some(info) = self.ports.get(name) else {
                continue;
            };
            let Some(peer) = info.peer.as_ref().and_then(|peer| self.ports.get(peer)) else {
                continue;
            };
            let next = if self.routers.contains(&peer.datapath) {
                ADMISSION
            } else {
                LOOKUP
            };
            // A switch never sends a frame back to the port it came from (a flood that came
            // from the router leaves out the router); a router routes back out of its input
            // port (OVN's routing sets `flags.loopback`).
            if !self.routers.contains(&datapath) {
                add(
                    OUTPUT,
                    110,
                    on().with(Field::register(15, info.key))
                        .with(Field::register(14, info.key)),
                    Vec::new(),
                );
            }
            add(
                OUTPUT,
                100,
                on().with(Field::register(15, info.key)),
                vec![Action::Clone(vec![
                    Action::SetField(Field::metadata(u64::from(peer.datapath))),
                    Action::SetField(Field::register(14, peer.key)),
                    Action::SetField(Field::register(15, 0)),
                    Action::SetField(Field::register(0, 0)),
                    Action::Resubmit(next),
                ])],
            );
        }
        if !self.routers.contains(&datapath) {
            return flows;
        }
        let ipv4 = || on().with(Field::eth_type(IPV4));
        let ipv6 = || on().with(Field::eth_type(IPV6));
        // The route table of each port that has one (`reg7`, as northd's
        // `lr_in_ip_routing_pre`); the others route with table 0.
        let route_tables: HashMap<&String, u32> = self
            .entries
            .get(&datapath)
            .into_iter()
            .flatten()
            .filter_map(|entry| match entry {
                IrEntry::RouteTableOfPort { port, table, .. } => Some((port, *table)),
                _ => None,
            })
            .collect();
        // Each ECMP group's members, in the order its choice indexes them: (stage tag, group)
        // → member ids.
        let groups: HashMap<(u32, u16), &[u16]> = self
            .entries
            .get(&datapath)
            .into_iter()
            .flatten()
            .filter_map(|entry| match entry {
                IrEntry::EcmpRoute { group, members, .. } => {
                    Some(((ECMP_ROUTE, *group), members.as_slice()))
                }
                IrEntry::EcmpRoute6 { group, members, .. } => {
                    Some(((ECMP_ROUTE6, *group), members.as_slice()))
                }
                IrEntry::RouterPolicy {
                    verdict: PolicyVerdict::RerouteEcmp { group, members },
                    ..
                } => Some(((ECMP_POLICY, *group), members.as_slice())),
                _ => None,
            })
            .collect();
        // Each router port's MAC.
        let router_macs: HashMap<&String, &[u8; 6]> = self
            .entries
            .get(&datapath)
            .into_iter()
            .flatten()
            .filter_map(|entry| match entry {
                IrEntry::RouterPort { port, mac, .. } => Some((port, mac)),
                _ => None,
            })
            .collect();
        // A route of a table matches only packets routed with that table.
        let in_table = |matching: Match, table: &Option<u32>| match table {
            Some(table) => matching.with(Field::register(7, *table)),
            None => matching,
        };
        // A route's match: its family, its prefix on the destination or source, its table.
        let route4 = |selector: RouteSelector, prefix: &crate::pipeline::ir::Prefix, table| {
            in_table(
                ipv4().with(prefix_field(selector, prefix.network, prefix.length)),
                table,
            )
        };
        let route6 = |selector: RouteSelector, prefix: &crate::pipeline::ir::Prefix6, table| {
            in_table(
                ipv6().with(prefix6_field(selector, prefix.network, prefix.length)),
                table,
            )
        };
        add(IP_INPUT, 1, ipv4(), vec![Action::Resubmit(ROUTING)]);
        add(IP_INPUT, 1, ipv6(), vec![Action::Resubmit(ROUTING)]);
        // The rest (IPv6, ARP to the router) is not translated: dropped and counted.
        let untranslated = l2::untranslated_drop(IP_INPUT, 0, on());
        add(POLICY, 0, on(), vec![Action::Resubmit(RESOLVE)]);
        // No route: dropped, as OVN drops it, and counted; a next hop without a known MAC is
        // asked for by the agent (`lr_in_arp_request`'s `arp`: the next hop in `reg0`, the
        // source address in `reg1`), where the router does so.
        let no_route = FlowMod::add(l2::COOKIE_NO_ROUTE, ROUTING, 0, on(), Vec::new());
        let asks = self
            .entries
            .get(&datapath)
            .is_some_and(|entries| entries.contains(&IrEntry::ArpRequestForNextHop { datapath }));
        let unresolved = if asks {
            FlowMod::add(
                COOKIE_ARP_REQUEST,
                RESOLVE,
                0,
                on().with(Field::eth_type(IPV4)),
                vec![Instruction::ApplyActions(vec![Action::Output(
                    PORT_CONTROLLER,
                )])],
            )
        } else {
            l2::untranslated_drop(RESOLVE, 0, on())
        };
        // The flows that send packets to the agent for its answers.
        let mut answers = Vec::new();
        // IPv6 whose hop limit runs out here (time exceeded where the router sends it: below),
        // dropped and counted.
        for hop_limit in [0, 1] {
            answers.push(dropped(
                l2::COOKIE_TTL_EXPIRED,
                IP_INPUT,
                30,
                ipv6().with(Field::ip_ttl(hop_limit)),
            ));
        }
        for entry in self.entries.get(&datapath).into_iter().flatten() {
            match entry {
                IrEntry::RouterPort {
                    port,
                    mac,
                    multicast,
                    ..
                } => {
                    let Some(key) = self.key(port) else { continue };
                    let destination = if *multicast {
                        let group_bit = [1, 0, 0, 0, 0, 0];
                        Field::eth_destination(group_bit).masked(&group_bit)
                    } else {
                        Field::eth_destination(*mac)
                    };
                    let table = route_tables.get(port).copied().unwrap_or(0);
                    add(
                        ADMISSION,
                        100,
                        on().with(Field::register(14, key)).with(destination),
                        vec![
                            Action::SetField(Field::register(7, table)),
                            Action::Resubmit(IP_INPUT),
                        ],
                    );
                }
                IrEntry::RouterDrop { rule, .. } => {
                    // Counted where the eBPF datapath has the reason.
                    let cookie = match rule {
                        RouterDropRule::TtlExpired => l2::COOKIE_TTL_EXPIRED,
                        RouterDropRule::ToRouter(_) | RouterDropRule::ToRouter6(_) => {
                            l2::COOKIE_TO_ROUTER_UNHANDLED
                        }
                        _ => COOKIE,
                    };
                    for (priority, matching) in drop_matches(rule, &ipv4, &ipv6) {
                        answers.push(dropped(cookie, IP_INPUT, priority, matching));
                    }
                }
                IrEntry::RouterEchoReply { ip, .. } => add(
                    IP_INPUT,
                    90,
                    ipv4()
                        .with(Field::ip_protocol(1))
                        .with(Field::ipv4_destination(*ip))
                        .with(Field::icmpv4_type(8)),
                    vec![
                        moved(OXM_IPV4_DST, NXM_REG1, 32),
                        moved(OXM_IPV4_SRC, OXM_IPV4_DST, 32),
                        moved(NXM_REG1, OXM_IPV4_SRC, 32),
                        Action::SetTtl(255),
                        Action::SetField(Field::icmpv4_type(0)),
                        Action::Resubmit(ROUTING),
                    ],
                ),
                IrEntry::Route {
                    selector,
                    prefix,
                    priority,
                    route_table,
                    nexthop,
                    source_ip,
                    source_mac,
                    port,
                    ..
                } => {
                    let Some(key) = self.key(port) else { continue };
                    let next_hop = match nexthop {
                        Some(nexthop) => Action::SetField(Field::register(0, u32::from(*nexthop))),
                        None => moved(OXM_IPV4_DST, NXM_REG0, 32),
                    };
                    add(
                        ROUTING,
                        *priority,
                        route4(*selector, prefix, route_table),
                        vec![
                            Action::DecrementTtl,
                            next_hop,
                            Action::SetField(Field::register(1, u32::from(*source_ip))),
                            Action::SetField(Field::eth_source(*source_mac)),
                            Action::SetField(Field::register(15, key)),
                            Action::Resubmit(POLICY),
                        ],
                    );
                }
                IrEntry::DiscardRoute {
                    selector,
                    prefix,
                    priority,
                    route_table,
                    ..
                } => answers.push(dropped(
                    l2::COOKIE_ROUTE_DISCARD,
                    ROUTING,
                    *priority,
                    route4(*selector, prefix, route_table),
                )),
                IrEntry::RouterPolicy {
                    priority,
                    source,
                    destination,
                    l4,
                    verdict,
                    ..
                } => {
                    let mut matching = ipv4();
                    if let Some(source) = source {
                        matching =
                            matching.with(Field::ipv4_source_prefix(source.network, source.length));
                    }
                    if let Some(destination) = destination {
                        matching = matching.with(Field::ipv4_destination_prefix(
                            destination.network,
                            destination.length,
                        ));
                    }
                    // One flow per combination of the port ranges' masked blocks.
                    let alternatives = match l4 {
                        Some(l4) => {
                            let Some(alternatives) = l4_matches(l4) else {
                                continue;
                            };
                            alternatives
                        }
                        None => vec![Vec::new()],
                    };
                    let actions = match verdict {
                        PolicyVerdict::Allow => vec![Action::Resubmit(RESOLVE)],
                        PolicyVerdict::Drop => Vec::new(),
                        PolicyVerdict::Reroute {
                            nexthop,
                            source_ip,
                            source_mac,
                            port,
                        } => {
                            let Some(key) = self.key(port) else { continue };
                            vec![
                                Action::SetField(Field::register(0, u32::from(*nexthop))),
                                Action::SetField(Field::register(1, u32::from(*source_ip))),
                                Action::SetField(Field::eth_source(*source_mac)),
                                Action::SetField(Field::register(15, key)),
                                Action::Resubmit(RESOLVE),
                            ]
                        }
                        PolicyVerdict::RerouteEcmp { group, members } => {
                            ecmp_choice(ECMP_POLICY, *group, members.len())
                        }
                    };
                    for fields in alternatives {
                        let matching = fields
                            .into_iter()
                            .fold(matching.clone(), |matching, field| matching.with(field));
                        if *verdict == PolicyVerdict::Drop {
                            answers.push(dropped(
                                l2::COOKIE_POLICY_DROP,
                                POLICY,
                                *priority,
                                matching,
                            ));
                        } else {
                            add(POLICY, *priority, matching, actions.clone());
                        }
                    }
                }
                IrEntry::RouterReject {
                    ip,
                    protocol,
                    response,
                    ..
                } => answers.push(reject(
                    ipv4().with(Field::ipv4_destination(*ip)),
                    *protocol,
                    *response,
                )),
                IrEntry::RouterReject6 {
                    ip,
                    protocol,
                    response,
                    ..
                } => answers.push(reject(
                    ipv6().with(Field::ipv6_destination(*ip)),
                    *protocol,
                    *response,
                )),
                IrEntry::TtlExceeded { port, source, .. } => {
                    let Some(key) = self.key(port) else { continue };
                    for ttl in [0, 1] {
                        answers.push(to_controller(
                            COOKIE_TIME_EXCEEDED,
                            31,
                            ipv4()
                                .with(Field::register(14, key))
                                .with(Field::ip_ttl(ttl))
                                .with(Field::not_later_fragment()),
                            vec![Action::SetField(Field::register(
                                PARAMETER,
                                u32::from(*source),
                            ))],
                        ));
                    }
                }
                IrEntry::RouterEchoReply6 { ip, .. } => add(
                    IP_INPUT,
                    90,
                    ipv6()
                        .with(Field::ip_protocol(58))
                        .with(Field::ipv6_destination(*ip))
                        .with(Field::icmpv6_type(128)),
                    {
                        // The source through xxreg0, then the addresses swapped.
                        let mut actions = ipv6_to_xxreg0(OXM_IPV6_DST);
                        actions.push(moved(OXM_IPV6_SRC, OXM_IPV6_DST, 128));
                        actions.extend(xxreg0_to_ipv6(OXM_IPV6_SRC));
                        actions.extend([
                            Action::SetTtl(255),
                            Action::SetField(Field::icmpv6_type(129)),
                            Action::Resubmit(ROUTING),
                        ]);
                        actions
                    },
                ),
                IrEntry::RouterNdReply { port, ip, .. } => {
                    // `nd_na_router`: the agent answers, from the port's MAC.
                    let (Some(key), Some(mac)) = (self.key(port), router_macs.get(port)) else {
                        continue;
                    };
                    let mut actions = l2::to_controller(**mac);
                    actions.pop();
                    answers.push(to_controller(
                        COOKIE_ND_ROUTER_ADVERTISEMENT,
                        95,
                        ipv6()
                            .with(Field::register(14, key))
                            .with(Field::ip_protocol(58))
                            .with(Field::icmpv6_type(135))
                            .with(Field::nd_target(*ip)),
                        actions,
                    ));
                }
                IrEntry::TtlExceeded6 {
                    port,
                    network,
                    source,
                    ..
                } => {
                    // Time exceeded from the port's address (in `xxreg1`), for senders in its
                    // network.
                    let Some(key) = self.key(port) else { continue };
                    let parameter = registers_from(PARAMETER6, *source).to_vec();
                    for hop_limit in [0, 1] {
                        answers.push(to_controller(
                            COOKIE_TIME_EXCEEDED,
                            31,
                            ipv6()
                                .with(Field::register(14, key))
                                .with(Field::ipv6_source_prefix(network.network, network.length))
                                .with(Field::ip_ttl(hop_limit))
                                .with(Field::not_later_fragment()),
                            parameter.clone(),
                        ));
                    }
                }
                IrEntry::EcmpRoute {
                    selector,
                    prefix,
                    priority,
                    route_table,
                    group,
                    members,
                    ..
                } => {
                    let actions = ecmp_route(ECMP_ROUTE, *group, members.len());
                    add(
                        ROUTING,
                        *priority,
                        route4(*selector, prefix, route_table),
                        actions,
                    );
                }
                IrEntry::EcmpRoute6 {
                    selector,
                    prefix,
                    priority,
                    route_table,
                    group,
                    members,
                    ..
                } => {
                    let actions = ecmp_route(ECMP_ROUTE6, *group, members.len());
                    add(
                        ROUTING,
                        *priority,
                        route6(*selector, prefix, route_table),
                        actions,
                    );
                }
                IrEntry::EcmpMember {
                    stage,
                    group,
                    member,
                    nexthop,
                    source_ip,
                    source_mac,
                    port,
                    ..
                } => {
                    let (tag, next) = match stage {
                        EcmpStage::Route => (ECMP_ROUTE, POLICY),
                        EcmpStage::Policy => (ECMP_POLICY, RESOLVE),
                    };
                    let (Some(key), Some(index)) = (
                        self.key(port),
                        member_index(&groups, (tag, *group), *member),
                    ) else {
                        continue;
                    };
                    add(
                        ECMP,
                        100,
                        ecmp_member_match(on(), tag, *group, index),
                        vec![
                            Action::SetField(Field::register(0, u32::from(*nexthop))),
                            Action::SetField(Field::register(1, u32::from(*source_ip))),
                            Action::SetField(Field::eth_source(*source_mac)),
                            Action::SetField(Field::register(15, key)),
                            Action::Resubmit(next),
                        ],
                    );
                }
                IrEntry::EcmpMember6 {
                    group,
                    member,
                    nexthop,
                    source_mac,
                    port,
                    ..
                } => {
                    let (Some(key), Some(index)) = (
                        self.key(port),
                        member_index(&groups, (ECMP_ROUTE6, *group), *member),
                    ) else {
                        continue;
                    };
                    let mut actions = xxreg0(*nexthop).to_vec();
                    actions.extend([
                        Action::SetField(Field::eth_source(*source_mac)),
                        Action::SetField(Field::register(15, key)),
                        Action::Resubmit(POLICY),
                    ]);
                    add(
                        ECMP,
                        100,
                        ecmp_member_match(on(), ECMP_ROUTE6, *group, index),
                        actions,
                    );
                }
                IrEntry::Route6 {
                    selector,
                    prefix,
                    priority,
                    inport,
                    route_table,
                    nexthop,
                    source_mac,
                    port,
                    ..
                } => {
                    let Some(key) = self.key(port) else { continue };
                    let mut matching = route6(*selector, prefix, route_table);
                    if let Some(inport) = inport {
                        let Some(inport) = self.key(inport) else {
                            continue;
                        };
                        matching = matching.with(Field::register(14, inport));
                    }
                    let mut actions = vec![Action::DecrementTtl];
                    match nexthop {
                        Some(nexthop) => actions.extend(xxreg0(*nexthop)),
                        None => actions.extend(ipv6_to_xxreg0(OXM_IPV6_DST)),
                    }
                    actions.extend([
                        Action::SetField(Field::eth_source(*source_mac)),
                        Action::SetField(Field::register(15, key)),
                        Action::Resubmit(POLICY),
                    ]);
                    add(ROUTING, *priority, matching, actions);
                }
                IrEntry::DiscardRoute6 {
                    selector,
                    prefix,
                    priority,
                    route_table,
                    ..
                } => answers.push(dropped(
                    l2::COOKIE_ROUTE_DISCARD,
                    ROUTING,
                    *priority,
                    route6(*selector, prefix, route_table),
                )),
                IrEntry::Neighbour6 { port, ip, mac, .. }
                | IrEntry::LearnedNeighbour6 { port, ip, mac, .. } => {
                    let Some(key) = self.key(port) else { continue };
                    let priority = if matches!(entry, IrEntry::Neighbour6 { .. }) {
                        100
                    } else {
                        50
                    };
                    let matching = xxreg0(*ip)
                        .into_iter()
                        .filter_map(|action| match action {
                            Action::SetField(field) => Some(field),
                            _ => None,
                        })
                        .fold(on().with(Field::register(15, key)), Match::with);
                    add(
                        RESOLVE,
                        priority,
                        matching,
                        vec![
                            Action::SetField(Field::eth_destination(*mac)),
                            Action::Resubmit(OUTPUT),
                        ],
                    );
                }
                IrEntry::RouterAdvertisement { port, .. } => {
                    // `nd_rs` to all routers on the port: answered by the agent with the port's
                    // advertisement (above the drops of reserved multicast and solicitations).
                    let Some(key) = self.key(port) else { continue };
                    answers.push(to_controller(
                        COOKIE_ROUTER_ADVERTISEMENT,
                        110,
                        ipv6()
                            .with(Field::register(14, key))
                            .with(Field::ipv6_destination(std::net::Ipv6Addr::new(
                                0xff02, 0, 0, 0, 0, 0, 0, 2,
                            )))
                            .with(Field::ip_ttl(255))
                            .with(Field::ip_protocol(58))
                            .with(Field::icmpv6_type(133))
                            .with(Field::icmpv6_code(0)),
                        Vec::new(),
                    ));
                }
                IrEntry::RouterArpReply {
                    port, ip, subnet, ..
                } => {
                    // The router's own ARP reply, back out of the port the request came in by
                    // (`outport = inport`); the request goes to the agent first, which hands
                    // its sender to MAC learning (a request only updates a binding).
                    let (Some(key), Some(mac)) = (self.key(port), router_macs.get(port)) else {
                        continue;
                    };
                    let mut actions = l2::to_controller(**mac);
                    actions.extend(l2::arp_request_to_reply(*ip, **mac));
                    actions.extend([
                        Action::SetField(Field::register(15, key)),
                        Action::SetField(Field::register(14, 0)),
                        Action::Resubmit(OUTPUT),
                    ]);
                    answers.push(FlowMod::add(
                        COOKIE_LEARN,
                        IP_INPUT,
                        90,
                        on().with(Field::eth_type(ARP))
                            .with(Field::register(14, key))
                            .with(Field::arp_op(1))
                            .with(Field::arp_target_ip(*ip))
                            .with(Field::arp_source_prefix(subnet.network, subnet.length)),
                        vec![Instruction::ApplyActions(actions)],
                    ));
                }
                IrEntry::NeighbourLearning { port, subnet, .. } => {
                    // The sender of an ARP the router hears goes to the daemon's MAC learning
                    // (`put_arp`); the frame goes no further (the router's own ARP answers are
                    // not translated).
                    let mut matching = on().with(Field::eth_type(ARP));
                    // The port's MAC, for a broadcast (which names none).
                    let mut parameter = Vec::new();
                    if let Some(port) = port {
                        let Some(key) = self.key(port) else { continue };
                        matching = matching.with(Field::register(14, key));
                        if let Some(mac) = router_macs.get(port) {
                            parameter = l2::to_controller(**mac);
                            parameter.pop();
                        }
                    }
                    if let Some(subnet) = subnet {
                        matching =
                            matching.with(Field::arp_source_prefix(subnet.network, subnet.length));
                    }
                    answers.push(to_controller(COOKIE_LEARN, 80, matching, parameter));
                }
                IrEntry::Neighbour { port, ip, mac, .. }
                | IrEntry::LearnedNeighbour { port, ip, mac, .. } => {
                    let Some(key) = self.key(port) else { continue };
                    let priority = if matches!(entry, IrEntry::Neighbour { .. }) {
                        100
                    } else {
                        50
                    };
                    add(
                        RESOLVE,
                        priority,
                        on().with(Field::register(15, key))
                            .with(Field::register(0, u32::from(*ip))),
                        vec![
                            Action::SetField(Field::eth_destination(*mac)),
                            Action::Resubmit(OUTPUT),
                        ],
                    );
                    // An ARP from a neighbour already learned at that MAC teaches nothing
                    // (`lookup_arp` hits): not sent to the agent.
                    if matches!(entry, IrEntry::LearnedNeighbour { .. }) {
                        add(
                            IP_INPUT,
                            85,
                            on().with(Field::eth_type(ARP))
                                .with(Field::register(14, key))
                                .with(Field::arp_source_ip(*ip))
                                .with(Field::arp_source_mac(*mac)),
                            Vec::new(),
                        );
                    }
                }
                _ => {}
            }
        }
        // Neighbour discovery the router does not answer is dropped (OVN learns the sender;
        // IPv6 MAC learning is not done).
        for kind in [135, 136] {
            answers.push(dropped(
                l2::COOKIE_ND_TO_ROUTER,
                IP_INPUT,
                90,
                ipv6()
                    .with(Field::ip_protocol(58))
                    .with(Field::icmpv6_type(kind)),
            ));
        }
        // An IPv6 next hop without a known MAC: the agent's solicitation (`nd_ns`, the next hop
        // in `xxreg0`), where the router asks.
        let solicits = self
            .entries
            .get(&datapath)
            .is_some_and(|entries| entries.contains(&IrEntry::NsForNextHop { datapath }));
        let unresolved6 = if solicits {
            FlowMod::add(
                COOKIE_ARP_REQUEST,
                RESOLVE,
                1,
                ipv6(),
                vec![Instruction::ApplyActions(vec![Action::Output(
                    PORT_CONTROLLER,
                )])],
            )
        } else {
            l2::untranslated_drop(RESOLVE, 1, ipv6())
        };
        if self.ipv6_fenced.contains(&datapath) {
            // Above every IPv6 flow of the IP input.
            answers.push(l2::untranslated_drop(IP_INPUT, 150, ipv6()));
        }
        for flow in answers
            .into_iter()
            .chain([untranslated, no_route, unresolved, unresolved6])
        {
            insert(&mut flows, flow);
        }
        flows
    }
}

/// The matches (with their priorities) of a router drop rule, for IPv4 and IPv6 (ARP is not
/// routed at all: nothing takes it past the IP input).
fn drop_matches(
    rule: &RouterDropRule,
    ipv4: &dyn Fn() -> Match,
    ipv6: &dyn Fn() -> Match,
) -> Vec<(u16, Match)> {
    let destination6 = |network: &str, length| {
        let network = network.parse().unwrap_or(std::net::Ipv6Addr::UNSPECIFIED);
        ipv6().with(Field::ipv6_destination_prefix(network, length))
    };
    let source = |network: [u8; 4], length| {
        ipv4().with(prefix_field(RouteSelector::Source, network.into(), length))
    };
    let destination = |network: [u8; 4], length| {
        ipv4().with(prefix_field(
            RouteSelector::Destination,
            network.into(),
            length,
        ))
    };
    match rule {
        // ip4.src_mcast, the limited broadcast, loopback and "this network" either way.
        RouterDropRule::Martian => vec![
            (100, source([224, 0, 0, 0], 4)),
            (100, source([255, 255, 255, 255], 32)),
            (100, source([127, 0, 0, 0], 8)),
            (100, destination([127, 0, 0, 0], 8)),
            (100, source([0, 0, 0, 0], 8)),
            (100, destination([0, 0, 0, 0], 8)),
        ],
        RouterDropRule::Multicast => vec![
            (100, destination([224, 0, 0, 0], 4)),
            (100, destination6("ff00::", 8)),
        ],
        RouterDropRule::Broadcast => vec![
            (100, ipv4().with(Field::eth_destination([0xff; 6]))),
            (100, ipv6().with(Field::eth_destination([0xff; 6]))),
        ],
        // ff00::, ff01:: and ff02:: with only their last 16 bits set.
        RouterDropRule::Ipv6ReservedMulticast => vec![
            (100, destination6("ff00::", 112)),
            (100, destination6("ff01::", 112)),
            (100, destination6("ff02::", 112)),
        ],
        RouterDropRule::ToRouter6(addresses) => addresses
            .iter()
            .map(|address| (60, ipv6().with(Field::ipv6_destination(*address))))
            .collect(),
        RouterDropRule::RouterSolicitationOrAdvertisement => [133, 134]
            .map(|kind| {
                (
                    100,
                    ipv6()
                        .with(Field::ip_protocol(58))
                        .with(Field::icmpv6_type(kind)),
                )
            })
            .to_vec(),
        RouterDropRule::SpoofedSource(addresses) => addresses
            .iter()
            .map(|address| (100, ipv4().with(Field::ipv4_source(*address))))
            .collect(),
        RouterDropRule::ToRouter(addresses) => addresses
            .iter()
            .map(|address| (60, ipv4().with(Field::ipv4_destination(*address))))
            .collect(),
        RouterDropRule::TtlExpired => vec![
            (30, ipv4().with(Field::ip_ttl(0))),
            (30, ipv4().with(Field::ip_ttl(1))),
        ],
        _ => Vec::new(),
    }
}

/// An IPv6 route's prefix match: on the destination, or the source.
fn prefix6_field(selector: RouteSelector, network: std::net::Ipv6Addr, length: u8) -> Field {
    match selector {
        RouteSelector::Destination => Field::ipv6_destination_prefix(network, length),
        RouteSelector::Source => Field::ipv6_source_prefix(network, length),
    }
}

/// `xxreg0` (`reg0`–`reg3`, `reg0` the most significant word) set to `address`.
fn xxreg0(address: std::net::Ipv6Addr) -> [Action; 4] {
    registers_from(0, address)
}

/// The four registers from `first` (`first` the most significant) set to `address`.
fn registers_from(first: u8, address: std::net::Ipv6Addr) -> [Action; 4] {
    let octets = address.octets();
    [0_u8, 1, 2, 3].map(|index| {
        let at = usize::from(index) * 4;
        let word = u32::from_be_bytes([octets[at], octets[at + 1], octets[at + 2], octets[at + 3]]);
        Action::SetField(Field::register(first + index, word))
    })
}

/// The IPv6 address field `field` (an OXM header) copied into `xxreg0`.
fn ipv6_to_xxreg0(field: u32) -> Vec<Action> {
    XXREG0
        .iter()
        .zip([96, 64, 32, 0])
        .map(|(register, offset)| Action::Move {
            source: field,
            source_offset: offset,
            destination: *register,
            destination_offset: 0,
            bits: 32,
        })
        .collect()
}

/// `xxreg0` copied into the IPv6 address field `field`.
fn xxreg0_to_ipv6(field: u32) -> Vec<Action> {
    XXREG0
        .iter()
        .zip([96, 64, 32, 0])
        .map(|(register, offset)| Action::Move {
            source: *register,
            source_offset: 0,
            destination: field,
            destination_offset: offset,
            bits: 32,
        })
        .collect()
}

/// `xxreg0`'s registers, most significant first.
const XXREG0: [u32; 4] = [NXM_REG0, NXM_REG1, NXM_REG2, NXM_REG3];

/// The prefix match of a route or rule: on the destination, or the source.
fn prefix_field(selector: RouteSelector, network: Ipv4Addr, length: u8) -> Field {
    match selector {
        RouteSelector::Destination => Field::ipv4_destination_prefix(network, length),
        RouteSelector::Source => Field::ipv4_source_prefix(network, length),
    }
}

/// A policy's transport match as alternative sets of fields: its protocol, and each inclusive
/// port range as the masked blocks that cover it exactly (one set per combination of a source
/// and a destination block). `None` for a protocol without ports here.
fn l4_matches(l4: &L4Match) -> Option<Vec<Vec<Field>>> {
    type PortField = fn(u16) -> Field;
    let (source_field, destination_field): (PortField, PortField) = match l4.protocol {
        6 => (Field::tcp_source, Field::tcp_destination),
        17 => (Field::udp_source, Field::udp_destination),
        132 => (Field::sctp_source, Field::sctp_destination),
        _ => return None,
    };
    let blocks = |range: Option<(u16, u16)>, field: PortField| -> Vec<Option<Field>> {
        match range {
            None => vec![None],
            Some((low, high)) => port_blocks(low, high)
                .into_iter()
                .map(|(value, mask)| Some(field(value).masked(&mask.to_be_bytes())))
                .collect(),
        }
    };
    let sources = blocks(l4.source_ports, source_field);
    let destinations = blocks(l4.destination_ports, destination_field);
    let mut alternatives = Vec::new();
    for source in &sources {
        for destination in &destinations {
            let mut fields = vec![Field::ip_protocol(l4.protocol)];
            fields.extend(source.clone());
            fields.extend(destination.clone());
            alternatives.push(fields);
        }
    }
    Some(alternatives)
}

/// The (value, mask) blocks that cover ports `low..=high` exactly: the largest aligned
/// power-of-two blocks, in order.
fn port_blocks(low: u16, high: u16) -> Vec<(u16, u16)> {
    let (mut low, high) = (u32::from(low), u32::from(high));
    let mut blocks = Vec::new();
    while low <= high {
        let mut size = 1_u32;
        while size < 0x1_0000 && low % (size * 2) == 0 && low + size * 2 - 1 <= high {
            size *= 2;
        }
        // Values and masks of 16-bit ports (`size` is at most 65,536, the whole range).
        let mask = u16::try_from(!(size - 1) & 0xffff).unwrap_or(0);
        blocks.push((u16::try_from(low).unwrap_or(u16::MAX), mask));
        low += size;
    }
    blocks
}

/// The tags of an ECMP group's stage in `reg9`'s high half (routes and policies number their
/// groups apart, as do IPv6 routes).
const ECMP_ROUTE: u32 = 1 << 16;
const ECMP_POLICY: u32 = 2 << 16;
const ECMP_ROUTE6: u32 = 3 << 16;

/// The choice of a member of ECMP group `group` of stage `tag` among `members`: the group in
/// `reg9`, the member's index in `reg8` (a hash of the flow's addresses, protocol and ports,
/// the same both ways), then the group's member table.
fn ecmp_choice(tag: u32, group: u16, members: usize) -> Vec<Action> {
    vec![
        Action::SetField(Field::register(9, tag | u32::from(group))),
        Action::SetField(Field::register(8, 0)),
        Action::Multipath {
            links: u16::try_from(members).unwrap_or(u16::MAX),
            destination: NXM_REG8,
        },
        Action::Resubmit(ECMP),
    ]
}

/// An ECMP route's actions: the TTL decremented, then the member chosen.
fn ecmp_route(tag: u32, group: u16, members: usize) -> Vec<Action> {
    let mut actions = vec![Action::DecrementTtl];
    actions.extend(ecmp_choice(tag, group, members));
    actions
}

/// The match of member `index` of ECMP group `group` of stage `tag`.
fn ecmp_member_match(on: Match, tag: u32, group: u16, index: u32) -> Match {
    on.with(Field::register(9, tag | u32::from(group)))
        .with(Field::register(8, index))
}

/// The index of member `member` in its group's choice.
fn member_index(
    groups: &HashMap<(u32, u16), &[u16]>,
    group: (u32, u16),
    member: u16,
) -> Option<u32> {
    let index = groups.get(&group)?.iter().position(|id| *id == member)?;
    u32::try_from(index).ok()
}

/// A flow that drops what it matches, owned by `cookie` (a drop reason's, to be counted).
fn dropped(cookie: u64, table: u8, priority: u16, matching: Match) -> FlowMod {
    FlowMod::add(cookie, table, priority, matching, Vec::new())
}

/// The flow of a router's answer to traffic to its own address (`to_address`: the family and
/// the address): a reset for TCP, an unreachable with its code (the protocol's at priority 80,
/// the rest at 70), never for a later fragment; SCTP's abort is not built (nor by the eBPF
/// datapath): dropped, counted.
fn reject(
    to_address: Match,
    protocol: Option<RejectProtocol>,
    response: RejectResponse,
) -> FlowMod {
    let (priority, matching) = match protocol {
        Some(protocol) => (
            80,
            to_address.with(Field::ip_protocol(match protocol {
                RejectProtocol::Tcp => 6,
                RejectProtocol::Udp => 17,
                RejectProtocol::Sctp => 132,
            })),
        ),
        None => (70, to_address),
    };
    let matching = matching.with(Field::not_later_fragment());
    match response {
        RejectResponse::TcpReset => to_controller(COOKIE_TCP_RESET, priority, matching, Vec::new()),
        RejectResponse::IcmpUnreachable { code } => to_controller(
            COOKIE_UNREACHABLE,
            priority,
            matching,
            vec![Action::SetField(Field::register(
                PARAMETER,
                u32::from(code),
            ))],
        ),
        RejectResponse::SctpAbort => l2::untranslated_drop(IP_INPUT, priority, matching),
    }
}

/// A flow of the IP input that sends what it matches to the agent for the answer `cookie`
/// names, after `actions` (its parameter).
fn to_controller(cookie: u64, priority: u16, matching: Match, mut actions: Vec<Action>) -> FlowMod {
    actions.push(Action::Output(PORT_CONTROLLER));
    FlowMod::add(
        cookie,
        IP_INPUT,
        priority,
        matching,
        vec![Instruction::ApplyActions(actions)],
    )
}

/// `move` of a whole `bits`-bit field to another.
fn moved(source: u32, destination: u32, bits: u16) -> Action {
    Action::Move {
        source,
        source_offset: 0,
        destination,
        destination_offset: 0,
        bits,
    }
}

#[cfg(test)]
mod tests;
