//! The switches' L2 forwarding of the pipeline IR as flows on br-int, for the ports plugged on
//! this node and the tunnels to other chassis (routers are [`super::l3`]'s):
//! - table [`CLASSIFY`]: a plugged port's OpenFlow port sets the pipeline's datapath
//!   (`metadata`, the switch's tunnel key) and logical input port (`reg14`, the port's key),
//!   as OVN's physical stage does, then the ingress table; a tunnel's frames take both ports
//!   from OVN's Geneve option and go to the output table;
//! - table [`INGRESS`]: the sanity checks (`IngressSanity`: tagged frames, multicast sources)
//!   and the ARP responder (`ArpReply`, with `ArpReplySkip` and `ArpReplySkipPort`), then the
//!   L2 lookup; neighbour solicitations the switch's ND responder answers (`NdReply`, an OVN
//!   controller action) go up to the agent, which answers them ([`super::answer`]; with the
//!   router flag for a router port's address, `NdForRouterIp`), but for their owner's
//!   (`NdReplySkip`);
//! - table [`LOOKUP`]: `L2Fib` (a known MAC) sets the logical output port (`reg15`) and
//!   resubmits to the output table; `FloodMulticast` (broadcast and multicast) does so for each
//!   member of the flood group in turn (`FloodGroup`, `FloodMember`), and sends one copy to
//!   each other chassis with members;
//! - table [`OUTPUT`]: a logical output port that is plugged here leaves by its OpenFlow port
//!   (back by the input port when a router answers its own sender; never to the logical port
//!   the frame came from, so a flood leaves out of every member but the sender, as OVN's does);
//!   one bound elsewhere by its chassis's tunnel, or, on a switch with a localnet port, through
//!   the provider network: the localnet port leaves by the provider NIC with its VLAN tag (its
//!   tagged frames enter there), as OVN's bridge mappings do;
//! - unknown destinations flood to `_MC_unknown` (`FloodUnknown`: the localnet port, ports
//!   with "unknown" addresses).
//!
//! A port with port security does not forward (its checks are not translated: see
//! [`super::untranslated`], which also fences whole switches).
//!
//! A frame nothing matches is dropped (br-int's `fail_mode` is secure; a table miss drops in
//! OpenFlow 1.5). Flows are owned by one cookie ([`COOKIE`]).
//!
//! Incremental by switch: a change marks the switches it touches, and [`L2Flows::changes`]
//! compares their desired flows with the installed ones, so one change costs O(its switch's
//! flows). Owns the IR's L2 state and the installed flows; touches nothing else.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use super::{
    action::{Action, Instruction, PORT_CONTROLLER, PORT_IN_PORT},
    answer::{COOKIE_ND_ADVERTISEMENT, COOKIE_ND_ROUTER_ADVERTISEMENT, PARAMETER, PARAMETER_LOW},
    message::FlowMod,
    oxm::{
        Field, Match, NXM_REG14, NXM_REG15, NXM_TUN_ID, NXM_TUN_METADATA0, OXM_ARP_SHA,
        OXM_ARP_SPA, OXM_ARP_THA, OXM_ARP_TPA, OXM_ETH_DST, OXM_ETH_SRC, OXM_METADATA,
    },
    table::{DatapathFlows, Flows, insert, on_datapath},
};
use crate::pipeline::ir::{IrDiff, IrEntry, Mac, PortKind};

/// The cookie of the flows this backend installs (its low 32 bits: the owner).
pub const COOKIE: u64 = 0x0b0f_0001;
/// The cookie of the flows that drop what the translation leaves out (a fenced datapath, a
/// port with port security, what a router does not route): their packets are the count of
/// `openflow_untranslated` drops.
pub const COOKIE_UNTRANSLATED: u64 = COOKIE | 1 << 32;
/// The cookie of the flows that drop what OVN drops too, by reason (the eBPF datapath's
/// names): a destination no route covers, a unicast MAC the switch does not know (and does
/// not flood).
pub const COOKIE_NO_ROUTE: u64 = COOKIE | 2 << 32;
pub const COOKIE_UNKNOWN_DESTINATION: u64 = COOKIE | 3 << 32;
/// A router's: TTL (hop limit) run out, traffic to its own address it does not answer (a
/// later fragment, a protocol without an answer), a policy's drop, a discard route, neighbour
/// discovery it does not answer.
pub const COOKIE_TTL_EXPIRED: u64 = COOKIE | 4 << 32;
pub const COOKIE_TO_ROUTER_UNHANDLED: u64 = COOKIE | 5 << 32;
pub const COOKIE_POLICY_DROP: u64 = COOKIE | 6 << 32;
pub const COOKIE_ROUTE_DISCARD: u64 = COOKIE | 7 << 32;
pub const COOKIE_ND_TO_ROUTER: u64 = COOKIE | 8 << 32;
/// Each counted drop's reason and cookie.
pub const DROP_REASONS: [(&str, u64); 8] = [
    ("openflow_untranslated", COOKIE_UNTRANSLATED),
    ("no_route", COOKIE_NO_ROUTE),
    ("unknown_destination", COOKIE_UNKNOWN_DESTINATION),
    ("ttl_expired", COOKIE_TTL_EXPIRED),
    ("to_router_unhandled", COOKIE_TO_ROUTER_UNHANDLED),
    ("policy_drop", COOKIE_POLICY_DROP),
    ("route_discard", COOKIE_ROUTE_DISCARD),
    ("nd_to_router", COOKIE_ND_TO_ROUTER),
];
/// Table of the ports' classification.
pub const CLASSIFY: u8 = 0;
/// Table of the L2 lookup.
pub const LOOKUP: u8 = 10;
/// Table of the output to local ports.
pub const OUTPUT: u8 = 40;

/// Table of the switches' ingress checks and ARP responder, before the L2 lookup.
pub const INGRESS: u8 = 5;

/// The key under which the tunnel ports' classification flows are kept (no switch has it).
const TUNNELS: u32 = u32::MAX;

/// OVN's Geneve option: class, type, length (its value: 15 bits of logical input port, 16 of
/// logical output port or group, in `tun_metadata0`).
pub const OVN_GENEVE_OPTION: (u16, u8, u8) = (0x0102, 0x80, 4);

/// The IR's L2 state, the plugged ports and what is installed.
#[derive(Debug, Default)]
pub struct L2Flows {
    /// Logical port name → (switch, port key).
    ports: HashMap<String, (u32, u32)>,
    /// Logical port name → its OpenFlow port on br-int.
    plugged: HashMap<String, u32>,
    /// Switch → its known MACs and their ports.
    fib: HashMap<u32, BTreeMap<Mac, String>>,
    /// (switch, group name) → the group's key.
    groups: HashMap<(u32, String), u32>,
    /// (switch, group key) → member port keys.
    members: HashMap<(u32, u32), BTreeSet<u32>>,
    /// Switch → the group its broadcast and multicast frames flood to.
    multicast: HashMap<u32, String>,
    /// Per switch: installed flows, changes since the last write, the fence.
    flows: DatapathFlows,
    /// This chassis's name.
    chassis: String,
    /// Switch → its ports bound to other chassis: port key → that chassis.
    remote_ports: HashMap<u32, BTreeMap<u32, String>>,
    /// Other chassis → the OpenFlow port of the Geneve tunnel to it.
    tunnels: BTreeMap<String, u32>,
    /// Ports with port security, which is not translated: they do not forward.
    secured: HashSet<String>,
    /// Switches with the ingress sanity checks.
    sanity: BTreeSet<u32>,
    /// Switch → the addresses its ARP responder answers for, and with what MAC.
    arp_replies: HashMap<u32, BTreeMap<Ipv4Addr, Mac>>,
    /// Switch → (address, port) pairs whose requests are not answered (the owner asking).
    arp_skips: HashMap<u32, BTreeSet<(Ipv4Addr, String)>>,
    /// Switch → ports whose ARP requests are never answered (localnet).
    arp_skip_ports: HashMap<u32, BTreeSet<String>>,
    /// Switch → the IPv6 addresses its ND responder answers for and with what MAC (the agent
    /// answers), and the (address, port) pairs it skips.
    nd_replies: HashMap<u32, BTreeSet<(Ipv6Addr, Mac)>>,
    /// Switch → its router ports' IPv6 addresses (`NdForRouterIp`): answered with the router
    /// flag, as `nd_na_router`.
    nd_router_ips: HashMap<u32, BTreeSet<Ipv6Addr>>,
    nd_skips: HashMap<u32, BTreeSet<(Ipv6Addr, String)>>,
    /// Switches whose IPv6 is not forwarded ([`super::untranslated::Effect::Ipv6Fenced`]).
    ipv6_fenced: BTreeSet<u32>,
    /// Switch → its localnet port: (key, provider network, VLAN tag).
    localnets: HashMap<u32, (u32, String, Option<u16>)>,
    /// Provider network → the OpenFlow port of its NIC on br-int (the bridge mappings).
    providers: HashMap<String, u32>,
    /// Switch → the group its unknown destinations flood to.
    unknown: HashMap<u32, String>,
}

/// What an OpenFlow port of br-int is to the flows ([`L2Flows::ofports`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortUse<'a> {
    /// A plugged logical port's interface.
    Pod(&'a str),
    /// The NIC of a provider network.
    Provider(&'a str),
    /// The Geneve tunnel to a chassis.
    Tunnel(&'a str),
}

/// A switch's localnet port whose network is mapped here.
struct Localnet {
    key: u32,
    ofport: u32,
    /// Its VLAN (none: untagged).
    tag: Option<u16>,
}

impl Localnet {
    /// Out of the provider NIC, tagged with the port's VLAN.
    fn output(&self) -> Vec<Action> {
        match self.tag {
            Some(tag) => vec![
                Action::PushVlan,
                Action::SetField(Field::vlan_vid(0x1000 | tag)),
                Action::Output(self.ofport),
            ],
            None => vec![Action::Output(self.ofport)],
        }
    }
}

impl L2Flows {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The flows of chassis `chassis` (ports bound to other chassis are reached through their
    /// tunnels).
    #[must_use]
    pub fn for_chassis(chassis: &str) -> Self {
        Self {
            chassis: chassis.to_string(),
            ..Self::default()
        }
    }

    /// The Geneve tunnel to chassis `chassis` is OpenFlow port `ofport` (`None`: gone).
    pub fn set_tunnel(&mut self, chassis: &str, ofport: Option<u32>) {
        match ofport {
            Some(ofport) => self.tunnels.insert(chassis.to_string(), ofport),
            None => self.tunnels.remove(chassis),
        };
        self.flows.mark(TUNNELS);
        let switches: Vec<u32> = self
            .remote_ports
            .iter()
            .filter(|(_, ports)| ports.values().any(|other| other == chassis))
            .map(|(switch, _)| *switch)
            .collect();
        for switch in switches {
            self.flows.mark(switch);
        }
    }

    /// Takes in an IR diff's L2 entries (the others are not this part's).
    pub fn apply<E: Borrow<IrEntry>>(&mut self, diff: &IrDiff<E>) {
        for (entry, added) in diff.in_order() {
            self.take(entry, added);
        }
    }

    fn take(&mut self, entry: &IrEntry, added: bool) {
        match entry {
            IrEntry::Port {
                datapath,
                key,
                name,
                kind,
                port_security,
                ..
            } => {
                let remote = self.remote_ports.entry(*datapath).or_default();
                if added {
                    if port_security.is_empty() {
                        self.secured.remove(name);
                    } else {
                        self.secured.insert(name.clone());
                    }
                    self.ports.insert(name.clone(), (*datapath, *key));
                    match kind {
                        PortKind::Vif {
                            chassis: Some(chassis),
                        } if *chassis != self.chassis => {
                            remote.insert(*key, chassis.clone());
                        }
                        _ => {
                            remote.remove(key);
                        }
                    }
                    if let PortKind::Localnet { network_name, tag } = kind {
                        self.localnets
                            .insert(*datapath, (*key, network_name.clone(), *tag));
                    }
                } else if self.ports.get(name) == Some(&(*datapath, *key)) {
                    self.ports.remove(name);
                    self.secured.remove(name);
                    remote.remove(key);
                    if self
                        .localnets
                        .get(datapath)
                        .is_some_and(|(localnet, ..)| localnet == key)
                    {
                        self.localnets.remove(datapath);
                    }
                }
                if remote.is_empty() {
                    self.remote_ports.remove(datapath);
                }
                self.flows.mark(*datapath);
            }
            IrEntry::L2Fib {
                datapath,
                mac,
                port,
            } => {
                let fib = self.fib.entry(*datapath).or_default();
                if added {
                    fib.insert(*mac, port.clone());
                } else if fib.get(mac) == Some(port) {
                    fib.remove(mac);
                }
                self.flows.mark(*datapath);
            }
            IrEntry::FloodGroup {
                datapath,
                key,
                name,
            } => {
                let slot = (*datapath, name.clone());
                if added {
                    self.groups.insert(slot, *key);
                } else if self.groups.get(&slot) == Some(key) {
                    self.groups.remove(&slot);
                }
                self.flows.mark(*datapath);
            }
            IrEntry::FloodMember {
                datapath,
                group,
                port,
            } => {
                let members = self.members.entry((*datapath, *group)).or_default();
                if added {
                    members.insert(*port);
                } else {
                    members.remove(port);
                }
                self.flows.mark(*datapath);
            }
            IrEntry::FloodUnknown { datapath, group } => {
                if added {
                    self.unknown.insert(*datapath, group.clone());
                } else if self.unknown.get(datapath) == Some(group) {
                    self.unknown.remove(datapath);
                }
                self.flows.mark(*datapath);
            }
            IrEntry::IngressSanity { datapath } => {
                toggle(&mut self.sanity, *datapath, added);
                self.flows.mark(*datapath);
            }
            IrEntry::ArpReply { datapath, ip, mac } => {
                let replies = self.arp_replies.entry(*datapath).or_default();
                if added {
                    replies.insert(*ip, *mac);
                } else if replies.get(ip) == Some(mac) {
                    replies.remove(ip);
                }
                self.flows.mark(*datapath);
            }
            IrEntry::ArpReplySkip {
                datapath,
                ip,
                inport,
            } => {
                let skips = self.arp_skips.entry(*datapath).or_default();
                toggle(skips, (*ip, inport.clone()), added);
                self.flows.mark(*datapath);
            }
            IrEntry::NdReply { datapath, ip, mac } => {
                toggle(
                    self.nd_replies.entry(*datapath).or_default(),
                    (*ip, *mac),
                    added,
                );
                self.flows.mark(*datapath);
            }
            IrEntry::NdForRouterIp { datapath, ip, .. } => {
                toggle(self.nd_router_ips.entry(*datapath).or_default(), *ip, added);
                self.flows.mark(*datapath);
            }
            IrEntry::NdReplySkip {
                datapath,
                ip,
                inport,
            } => {
                let skips = self.nd_skips.entry(*datapath).or_default();
                toggle(skips, (*ip, inport.clone()), added);
                self.flows.mark(*datapath);
            }
            IrEntry::ArpReplySkipPort { datapath, inport } => {
                toggle(
                    self.arp_skip_ports.entry(*datapath).or_default(),
                    inport.clone(),
                    added,
                );
                self.flows.mark(*datapath);
            }
            IrEntry::FloodMulticast { datapath, group } => {
                if added {
                    self.multicast.insert(*datapath, group.clone());
                } else if self.multicast.get(datapath) == Some(group) {
                    self.multicast.remove(datapath);
                }
                self.flows.mark(*datapath);
            }
            _ => {}
        }
    }

    /// Provider network `network`'s NIC is OpenFlow port `ofport` on br-int.
    pub fn set_provider(&mut self, network: &str, ofport: u32) {
        self.providers.insert(network.to_string(), ofport);
        let switches: Vec<u32> = self
            .localnets
            .iter()
            .filter(|(_, (_, on, _))| on == network)
            .map(|(switch, _)| *switch)
            .collect();
        for switch in switches {
            self.flows.mark(switch);
        }
    }

    /// Switch `switch`'s localnet port, if its network is mapped here.
    fn localnet_of(&self, switch: u32) -> Option<Localnet> {
        let (key, network, tag) = self.localnets.get(&switch)?;
        Some(Localnet {
            key: *key,
            ofport: *self.providers.get(network)?,
            tag: tag.filter(|tag| *tag != 0),
        })
    }

    /// Every OpenFlow port the flows use, and what it is.
    pub fn ofports(&self) -> impl Iterator<Item = (u32, PortUse<'_>)> {
        let pods = (self.plugged.iter()).map(|(port, ofport)| (*ofport, PortUse::Pod(port)));
        let providers =
            (self.providers.iter()).map(|(network, ofport)| (*ofport, PortUse::Provider(network)));
        let tunnels =
            (self.tunnels.iter()).map(|(chassis, ofport)| (*ofport, PortUse::Tunnel(chassis)));
        pods.chain(providers).chain(tunnels)
    }

    /// Logical port `port` is plugged here as OpenFlow port `ofport`.
    pub fn plug(&mut self, port: &str, ofport: u32) {
        self.plugged.insert(port.to_string(), ofport);
        if let Some((switch, _)) = self.ports.get(port) {
            self.flows.mark(*switch);
        }
    }

    /// Logical port `port` is no longer plugged here.
    pub fn unplug(&mut self, port: &str) {
        self.plugged.remove(port);
        if let Some((switch, _)) = self.ports.get(port) {
            self.flows.mark(*switch);
        }
    }

    /// Switch `switch` goes without flows (`fenced`) or has them again.
    pub fn set_fenced(&mut self, switch: u32, fenced: bool) {
        self.flows.set_fenced(switch, fenced);
    }

    /// Switch `switch`'s IPv6 is dropped and counted where it enters and leaves (`fenced`), or
    /// forwarded again.
    pub fn set_ipv6_fenced(&mut self, switch: u32, fenced: bool) {
        let changed = if fenced {
            self.ipv6_fenced.insert(switch)
        } else {
            self.ipv6_fenced.remove(&switch)
        };
        if changed {
            self.flows.mark(switch);
        }
    }

    /// Whether a change waits for [`Self::changes`].
    #[must_use]
    pub fn has_changes(&self) -> bool {
        self.flows.has_changes()
    }

    /// The flow mods that bring the marked switches' installed flows to the desired ones
    /// (deletes first, then adds), recorded as installed.
    pub fn changes(&mut self) -> Vec<FlowMod> {
        let desired = self
            .flows
            .take_marked()
            .into_iter()
            .map(|switch| (switch, self.desired(switch)))
            .collect();
        self.flows.diff(desired)
    }

    /// A full resync, for a switch whose flows are not known (a session opened again, an
    /// agent started): our cookie's flows deleted, then every desired flow, recorded as
    /// installed.
    pub fn resync(&mut self) -> Vec<FlowMod> {
        let switches: BTreeSet<u32> = self
            .ports
            .values()
            .map(|(switch, _)| *switch)
            .chain(self.fib.keys().copied())
            .chain(self.multicast.keys().copied())
            .chain(self.sanity.iter().copied())
            .chain(self.arp_replies.keys().copied())
            .chain(self.flows.installed_datapaths())
            .chain([TUNNELS])
            .collect();
        self.flows.reset();
        let desired = switches
            .into_iter()
            .map(|switch| (switch, self.desired(switch)))
            .collect();
        let mut changes = vec![FlowMod::delete_cookie(COOKIE)];
        changes.extend(self.flows.diff(desired));
        changes
    }

    /// What enters by a tunnel: the datapath from the tunnel ID, the logical input and output
    /// ports from OVN's option, then the output table (only local ports and groups there).
    fn tunnel_flows(&self) -> Flows {
        let mut flows = BTreeMap::new();
        for ofport in self.tunnels.values() {
            let flow = FlowMod::add(
                COOKIE,
                CLASSIFY,
                100,
                Match::new().with(Field::in_port(*ofport)),
                vec![Instruction::ApplyActions(vec![
                    moved((NXM_TUN_ID, 0), (OXM_METADATA, 0), 24),
                    moved((NXM_TUN_METADATA0, 16), (NXM_REG14, 0), 15),
                    moved((NXM_TUN_METADATA0, 0), (NXM_REG15, 0), 16),
                    Action::Resubmit(OUTPUT),
                ])],
            );
            insert(&mut flows, flow);
        }
        flows
    }

    /// Switch `switch`'s ingress table: the sanity checks, the ARP responder (a request for an
    /// address it knows is answered from the switch, back out of the port it came in on, as
    /// northd's `ls_in_arp_rsp` does), then the L2 lookup.
    fn ingress_flows(&self, switch: u32) -> Vec<FlowMod> {
        let key_of = |name: &String| {
            self.ports
                .get(name)
                .filter(|(dp, _)| *dp == switch)
                .map(|(_, key)| *key)
        };
        let flow = |priority: u16, matching: Match, actions: Vec<Action>| {
            FlowMod::add(
                COOKIE,
                INGRESS,
                priority,
                matching,
                vec![Instruction::ApplyActions(actions)],
            )
        };
        let lookup = || vec![Action::Resubmit(LOOKUP)];
        let request = || {
            on_datapath(switch)
                .with(Field::eth_type(0x0806))
                .with(Field::arp_op(1))
        };
        let mut flows = vec![flow(0, on_datapath(switch), lookup())];
        if self.sanity.contains(&switch) {
            // Tagged frames, and frames from a multicast source.
            let present = 0x1000_u16.to_be_bytes();
            let group_bit = [1, 0, 0, 0, 0, 0];
            flows.push(flow(
                100,
                on_datapath(switch).with(Field::vlan_vid(0x1000).masked(&present)),
                Vec::new(),
            ));
            flows.push(flow(
                100,
                on_datapath(switch).with(Field::eth_source(group_bit).masked(&group_bit)),
                Vec::new(),
            ));
        }
        for port in self.arp_skip_ports.get(&switch).into_iter().flatten() {
            let Some(key) = key_of(port) else { continue };
            flows.push(flow(95, request().with(Field::register(14, key)), lookup()));
        }
        for (ip, port) in self.arp_skips.get(&switch).into_iter().flatten() {
            let Some(key) = key_of(port) else { continue };
            let matching = request()
                .with(Field::register(14, key))
                .with(Field::arp_target_ip(*ip));
            flows.push(flow(95, matching, lookup()));
        }
        for (ip, mac) in self.arp_replies.get(&switch).into_iter().flatten() {
            flows.push(flow(
                90,
                request().with(Field::arp_target_ip(*ip)),
                arp_reply(*ip, *mac),
            ));
        }
        // OVN answers these solicitations from the switch in userspace (`nd_na`, a controller
        // action): sent up to the agent ([`super::answer`]) with the MAC to answer with, except
        // when the owner asks.
        let solicitation = |target: Ipv6Addr| {
            on_datapath(switch)
                .with(Field::eth_type(0x86dd))
                .with(Field::ip_protocol(58))
                .with(Field::icmpv6_type(135))
                .with(Field::nd_target(target))
        };
        for (ip, port) in self.nd_skips.get(&switch).into_iter().flatten() {
            let Some(key) = key_of(port) else { continue };
            flows.push(flow(
                95,
                solicitation(*ip).with(Field::register(14, key)),
                lookup(),
            ));
        }
        let router_ips = self.nd_router_ips.get(&switch);
        for (ip, mac) in self.nd_replies.get(&switch).into_iter().flatten() {
            let router = router_ips.is_some_and(|ips| ips.contains(ip));
            flows.push(FlowMod::add(
                if router {
                    COOKIE_ND_ROUTER_ADVERTISEMENT
                } else {
                    COOKIE_ND_ADVERTISEMENT
                },
                INGRESS,
                90,
                solicitation(*ip),
                vec![Instruction::ApplyActions(to_controller(*mac))],
            ));
        }
        flows
    }

    /// Switch `switch`'s desired flows.
    fn desired(&self, switch: u32) -> Flows {
        if switch == TUNNELS {
            return self.tunnel_flows();
        }
        let mut flows = BTreeMap::new();
        let on_switch = |name: &String| {
            self.ports
                .get(name)
                .filter(|(dp, _)| *dp == switch)
                .map(|(_, key)| *key)
        };
        // What enters a fenced switch, or by a port with port security, is dropped and counted.
        let fenced = self.flows.is_fenced(switch);
        for (name, ofport) in &self.plugged {
            if on_switch(name).is_some() && (fenced || self.secured.contains(name)) {
                insert(
                    &mut flows,
                    untranslated_drop(CLASSIFY, 100, Match::new().with(Field::in_port(*ofport))),
                );
            }
        }
        if fenced {
            insert(
                &mut flows,
                untranslated_drop(OUTPUT, 1, on_datapath(switch)),
            );
            return flows;
        }
        let mut add = |flow: FlowMod| insert(&mut flows, flow);
        for (name, ofport) in &self.plugged {
            let Some(key) = on_switch(name) else { continue };
            if self.secured.contains(name) {
                continue;
            }
            add(FlowMod::add(
                COOKIE,
                CLASSIFY,
                100,
                Match::new().with(Field::in_port(*ofport)),
                vec![Instruction::ApplyActions(vec![
                    Action::SetField(Field::metadata(u64::from(switch))),
                    Action::SetField(Field::register(14, key)),
                    Action::Resubmit(INGRESS),
                ])],
            ));
            // Out of its port; back out of the port it came in on when a router or responder
            // answers it (Open vSwitch sends nothing out of the input port otherwise); never
            // back to the logical port it came from.
            let to_port = on_datapath(switch).with(Field::register(15, key));
            add(FlowMod::add(
                COOKIE,
                OUTPUT,
                100,
                to_port.clone(),
                vec![Instruction::ApplyActions(vec![Action::Output(*ofport)])],
            ));
            add(FlowMod::add(
                COOKIE,
                OUTPUT,
                105,
                to_port.clone().with(Field::in_port(*ofport)),
                vec![Instruction::ApplyActions(vec![Action::Output(
                    PORT_IN_PORT,
                )])],
            ));
            add(FlowMod::add(
                COOKIE,
                OUTPUT,
                110,
                to_port.with(Field::register(14, key)),
                Vec::new(),
            ));
        }
        for flow in self.ingress_flows(switch) {
            add(flow);
        }
        if self.ipv6_fenced.contains(&switch) {
            // Above every flow of the ingress and output tables.
            for table in [INGRESS, OUTPUT] {
                add(untranslated_drop(
                    table,
                    200,
                    on_datapath(switch).with(Field::eth_type(0x86dd)),
                ));
            }
        }
        // The switch's localnet port, where its provider network is mapped here: frames with
        // its tag (or none) from the provider NIC enter by it, and it is how the switch's ports
        // on other chassis are reached (through the physical network, not Geneve, as OVN does).
        let localnet = self.localnet_of(switch);
        if let Some(localnet) = &localnet {
            let mut classify = vec![
                Action::SetField(Field::metadata(u64::from(switch))),
                Action::SetField(Field::register(14, localnet.key)),
                Action::Resubmit(INGRESS),
            ];
            if localnet.tag.is_some() {
                classify.insert(0, Action::PopVlan);
            }
            let vid = localnet.tag.map_or(0, |tag| 0x1000 | tag);
            add(FlowMod::add(
                COOKIE,
                CLASSIFY,
                100,
                Match::new()
                    .with(Field::in_port(localnet.ofport))
                    .with(Field::vlan_vid(vid)),
                vec![Instruction::ApplyActions(classify)],
            ));
            let to_localnet = on_datapath(switch).with(Field::register(15, localnet.key));
            add(FlowMod::add(
                COOKIE,
                OUTPUT,
                100,
                to_localnet.clone(),
                vec![Instruction::ApplyActions(localnet.output())],
            ));
            add(FlowMod::add(
                COOKIE,
                OUTPUT,
                110,
                to_localnet.with(Field::register(14, localnet.key)),
                Vec::new(),
            ));
        }
        // The switch's ports bound to other chassis, by key: through the localnet port, or
        // their chassis's tunnel.
        let remote: BTreeMap<u32, Option<u32>> = self
            .remote_ports
            .get(&switch)
            .into_iter()
            .flatten()
            .map(|(key, chassis)| (*key, self.tunnels.get(chassis).copied()))
            .collect();
        for (key, tunnel) in &remote {
            let actions = match (&localnet, tunnel) {
                (Some(localnet), _) => localnet.output(),
                (None, Some(tunnel)) => tunnel_out(switch, *key, *tunnel),
                (None, None) => continue,
            };
            add(FlowMod::add(
                COOKIE,
                OUTPUT,
                100,
                on_datapath(switch).with(Field::register(15, *key)),
                vec![Instruction::ApplyActions(actions)],
            ));
        }
        for (mac, port) in self.fib.get(&switch).into_iter().flatten() {
            let Some(key) = on_switch(port) else { continue };
            add(FlowMod::add(
                COOKIE,
                LOOKUP,
                50,
                on_datapath(switch).with(Field::eth_destination(*mac)),
                vec![Instruction::ApplyActions(vec![
                    Action::SetField(Field::register(15, key)),
                    Action::Resubmit(OUTPUT),
                ])],
            ));
        }
        let flood = |name: Option<&String>| {
            let group = *self.groups.get(&(switch, name?.clone()))?;
            let members = self.members.get(&(switch, group))?;
            Some((
                group,
                flood_actions(switch, group, members, &remote, localnet.is_some()),
            ))
        };
        if let Some((group, (actions, local))) = flood(self.multicast.get(&switch)) {
            let group_bit = [1, 0, 0, 0, 0, 0];
            add(FlowMod::add(
                COOKIE,
                LOOKUP,
                70,
                on_datapath(switch).with(Field::eth_destination(group_bit).masked(&group_bit)),
                vec![Instruction::ApplyActions(actions)],
            ));
            // The group's frames another chassis sends here: to the members here only.
            add(FlowMod::add(
                COOKIE,
                OUTPUT,
                100,
                on_datapath(switch).with(Field::register(15, group)),
                vec![Instruction::ApplyActions(local)],
            ));
        }
        // Unknown destinations: to the ports that take them (`_MC_unknown`: a localnet port,
        // ports with "unknown" addresses).
        if let Some((group, (actions, local))) = flood(self.unknown.get(&switch)) {
            add(FlowMod::add(
                COOKIE,
                LOOKUP,
                0,
                on_datapath(switch),
                vec![Instruction::ApplyActions(actions)],
            ));
            add(FlowMod::add(
                COOKIE,
                OUTPUT,
                100,
                on_datapath(switch).with(Field::register(15, group)),
                vec![Instruction::ApplyActions(local)],
            ));
        } else {
            // Otherwise dropped, as OVN drops it, and counted.
            add(FlowMod::add(
                COOKIE_UNKNOWN_DESTINATION,
                LOOKUP,
                0,
                on_datapath(switch),
                Vec::new(),
            ));
        }
        flows
    }
}

/// A flood of group `group` of switch `switch`: each member here in turn, then, unless the
/// switch reaches other chassis through its localnet port (itself a member), one copy to each
/// other chassis with members, for the group (their own local members take it there). Also
/// the part for the members here only (what another chassis sends for the group).
fn flood_actions(
    switch: u32,
    group: u32,
    members: &BTreeSet<u32>,
    remote: &BTreeMap<u32, Option<u32>>,
    through_localnet: bool,
) -> (Vec<Action>, Vec<Action>) {
    let local: Vec<Action> = members
        .iter()
        .filter(|member| !remote.contains_key(member))
        .flat_map(|member| {
            [
                Action::SetField(Field::register(15, *member)),
                Action::Resubmit(OUTPUT),
            ]
        })
        .collect();
    let mut actions = local.clone();
    if !through_localnet {
        let tunnels: BTreeSet<u32> = members
            .iter()
            .filter_map(|member| *remote.get(member)?)
            .collect();
        for tunnel in tunnels {
            actions.extend(tunnel_out(switch, group, tunnel));
        }
    }
    (actions, local)
}

/// Sends the packet to the agent with `mac` in the answer's parameter registers (the MAC the
/// ND responder answers with, the router port that hears an ARP).
pub(super) fn to_controller(mac: Mac) -> Vec<Action> {
    vec![
        Action::SetField(Field::register(
            PARAMETER,
            u32::from_be_bytes([mac[0], mac[1], mac[2], mac[3]]),
        )),
        Action::SetField(Field::register(
            PARAMETER_LOW,
            u32::from_be_bytes([mac[4], mac[5], 0, 0]),
        )),
        Action::Output(PORT_CONTROLLER),
    ]
}

/// A flow of `table` that drops what it matches as untranslated ([`COOKIE_UNTRANSLATED`]).
pub(super) fn untranslated_drop(table: u8, priority: u16, matching: Match) -> FlowMod {
    FlowMod::add(COOKIE_UNTRANSLATED, table, priority, matching, Vec::new())
}

/// `item` in `set` when `added`, out of it otherwise.
fn toggle<T: Ord>(set: &mut BTreeSet<T>, item: T, added: bool) {
    if added {
        set.insert(item);
    } else {
        set.remove(&item);
    }
}

/// The ARP request turned into the answer that `ip` is at `mac`, sent back out of the port it
/// came in on.
fn arp_reply(ip: Ipv4Addr, mac: Mac) -> Vec<Action> {
    let mut actions = arp_request_to_reply(ip, mac);
    actions.push(Action::Output(PORT_IN_PORT));
    actions
}

/// The ARP request turned into the reply for `ip` at `mac` (OVN's responder: `eth.dst =
/// eth.src; eth.src = mac; arp.op = 2; arp.tha = arp.sha; arp.sha = mac; arp.tpa = arp.spa;
/// arp.spa = ip`), to be sent back.
pub(super) fn arp_request_to_reply(ip: Ipv4Addr, mac: Mac) -> Vec<Action> {
    vec![
        moved((OXM_ETH_SRC, 0), (OXM_ETH_DST, 0), 48),
        Action::SetField(Field::eth_source(mac)),
        Action::SetField(Field::arp_op(2)),
        moved((OXM_ARP_SHA, 0), (OXM_ARP_THA, 0), 48),
        Action::SetField(Field::arp_source_mac(mac)),
        moved((OXM_ARP_SPA, 0), (OXM_ARP_TPA, 0), 32),
        Action::SetField(Field::arp_source_ip(ip)),
    ]
}

/// Nicira's `move` of `bits` bits from (field, offset) to (field, offset).
fn moved(source: (u32, u16), destination: (u32, u16), bits: u16) -> Action {
    Action::Move {
        source: source.0,
        source_offset: source.1,
        destination: destination.0,
        destination_offset: destination.1,
        bits,
    }
}

/// Out of tunnel port `tunnel` as OVN's Geneve carries it: the switch's key as VNI, OVN's
/// option with the logical input port (`reg14`) and `egress` (a port or a group).
fn tunnel_out(switch: u32, egress: u32, tunnel: u32) -> Vec<Action> {
    vec![
        Action::SetField(Field::tunnel_id(u64::from(switch))),
        Action::SetField(Field::tunnel_metadata0(&(egress & 0xffff).to_be_bytes())),
        moved((NXM_REG14, 0), (NXM_TUN_METADATA0, 16), 15),
        Action::Output(tunnel),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::openflow::message::Command;
    use crate::pipeline::ir::PortKind;

    fn port(key: u32, name: &str) -> IrEntry {
        IrEntry::Port {
            datapath: 5,
            key,
            name: name.into(),
            kind: PortKind::Vif { chassis: None },
            addresses: Vec::new(),
            port_security: Vec::new(),
        }
    }

    /// Port p3 (key 3) of the switch, bound to chassis node2.
    fn node2_port() -> IrEntry {
        IrEntry::Port {
            datapath: 5,
            key: 3,
            name: "p3".into(),
            kind: PortKind::Vif {
                chassis: Some("node2".into()),
            },
            addresses: Vec::new(),
            port_security: Vec::new(),
        }
    }

    fn switch_entries() -> Vec<IrEntry> {
        vec![
            port(1, "p1"),
            port(2, "p2"),
            IrEntry::L2Fib {
                datapath: 5,
                mac: [2, 0, 0, 0, 0, 1],
                port: "p1".into(),
            },
            IrEntry::L2Fib {
                datapath: 5,
                mac: [2, 0, 0, 0, 0, 2],
                port: "p2".into(),
            },
            IrEntry::FloodGroup {
                datapath: 5,
                key: 32768,
                name: "_MC_flood".into(),
            },
            IrEntry::FloodMember {
                datapath: 5,
                group: 32768,
                port: 1,
            },
            IrEntry::FloodMember {
                datapath: 5,
                group: 32768,
                port: 2,
            },
            IrEntry::FloodMulticast {
                datapath: 5,
                group: "_MC_flood".into(),
            },
        ]
    }

    fn tables(changes: &[FlowMod]) -> Vec<(Command, u8, u16)> {
        changes
            .iter()
            .map(|flow| (flow.command, flow.table, flow.priority))
            .collect()
    }

    /// Two plugged ports of one switch: each classified and output (with its input-port and
    /// same-port variants), the switch's ingress on to the lookup, both MACs looked up (an
    /// unknown one dropped and counted), the flood to both; applied again, nothing changes; one port unplugged, its classification
    /// and outputs go (strictly, our cookie only) and the flood keeps both members (the other
    /// chassis's part is the tunnel's, next); a MAC gone, its lookup goes.
    #[test]
    fn a_switchs_l2_entries_become_flows_and_changes_only_what_changed() {
        let mut flows = L2Flows::new();
        flows.apply(&IrDiff {
            added: switch_entries(),
            removed: Vec::new(),
        });
        flows.plug("p1", 3);
        flows.plug("p2", 4);
        let first = flows.changes();
        let mut shape = tables(&first);
        shape.sort_by_key(|(_, table, priority)| (*table, *priority));
        assert_eq!(
            shape,
            [
                (Command::Add, CLASSIFY, 100),
                (Command::Add, CLASSIFY, 100),
                (Command::Add, INGRESS, 0),
                (Command::Add, LOOKUP, 0),
                (Command::Add, LOOKUP, 50),
                (Command::Add, LOOKUP, 50),
                (Command::Add, LOOKUP, 70),
                (Command::Add, OUTPUT, 100),
                (Command::Add, OUTPUT, 100),
                (Command::Add, OUTPUT, 100),
                (Command::Add, OUTPUT, 105),
                (Command::Add, OUTPUT, 105),
                (Command::Add, OUTPUT, 110),
                (Command::Add, OUTPUT, 110),
            ]
        );
        let unknown = first
            .iter()
            .find(|flow| flow.table == LOOKUP && flow.priority == 0)
            .map(|flow| (flow.cookie, flow.instructions.is_empty()));
        assert_eq!(unknown, Some((COOKIE_UNKNOWN_DESTINATION, true)));
        let flood = first
            .iter()
            .find(|flow| flow.priority == 70)
            .map(|flow| flow.instructions.clone());
        assert_eq!(
            flood,
            Some(vec![Instruction::ApplyActions(vec![
                Action::SetField(Field::register(15, 1)),
                Action::Resubmit(OUTPUT),
                Action::SetField(Field::register(15, 2)),
                Action::Resubmit(OUTPUT),
            ])])
        );
        assert!(flows.changes().is_empty());
        flows.apply(&IrDiff::<IrEntry>::default());
        flows.unplug("p2");
        let unplugged = flows.changes();
        assert_eq!(
            tables(&unplugged),
            [
                (Command::DeleteStrict, CLASSIFY, 100),
                (Command::DeleteStrict, OUTPUT, 100),
                (Command::DeleteStrict, OUTPUT, 105),
                (Command::DeleteStrict, OUTPUT, 110),
            ]
        );
        assert!(
            unplugged
                .iter()
                .all(|flow| flow.cookie == COOKIE && flow.cookie_mask == u64::MAX)
        );
        flows.apply(&IrDiff {
            added: Vec::new(),
            removed: vec![IrEntry::L2Fib {
                datapath: 5,
                mac: [2, 0, 0, 0, 0, 2],
                port: "p2".into(),
            }],
        });
        assert_eq!(
            tables(&flows.changes()),
            [(Command::DeleteStrict, LOOKUP, 50)]
        );
        // A resync: our cookie's flows deleted in every table, then all that is wanted (p1's
        // classification and three outputs, the ingress, its MAC, the unknown MACs' drop, the
        // flood), and nothing more to change after.
        let resync = flows.resync();
        assert_eq!(resync[0], FlowMod::delete_cookie(COOKIE));
        assert_eq!(resync.len(), 1 + 9);
        assert!(flows.changes().is_empty());
    }

    /// A switch whose IPv6 is fenced drops and counts IPv6 where it enters (ingress) and
    /// leaves (output), above every other flow there; unfenced, the drops go.
    #[test]
    fn a_switchs_ipv6_fence_drops_ipv6_in_and_out() {
        let mut flows = L2Flows::new();
        flows.apply(&IrDiff {
            added: switch_entries(),
            removed: Vec::new(),
        });
        flows.changes();
        flows.set_ipv6_fenced(5, true);
        let fence = flows.changes();
        let ipv6 = on_datapath(5).with(Field::eth_type(0x86dd));
        assert_eq!(
            fence
                .iter()
                .map(|flow| (
                    flow.command,
                    flow.table,
                    flow.priority,
                    flow.cookie,
                    flow.matching.clone()
                ))
                .collect::<Vec<_>>(),
            [
                (
                    Command::Add,
                    INGRESS,
                    200,
                    COOKIE_UNTRANSLATED,
                    ipv6.clone()
                ),
                (Command::Add, OUTPUT, 200, COOKIE_UNTRANSLATED, ipv6),
            ]
        );
        flows.set_ipv6_fenced(5, false);
        assert!(
            flows
                .changes()
                .iter()
                .all(|flow| flow.command == Command::DeleteStrict)
        );
    }

    /// The ND responder's solicitations go to the agent with the MAC to answer with, by the
    /// cookie that names the answer: a router port's address (`NdForRouterIp`) with the router
    /// flag, a pod's without; the owner's own solicitation is looked up instead.
    #[test]
    fn solicitations_the_switch_answers_go_to_the_agent() {
        let pod: Ipv6Addr = "fd00::2".parse().unwrap();
        let gateway: Ipv6Addr = "fd00::1".parse().unwrap();
        let mut entries = switch_entries();
        entries.extend([
            IrEntry::NdReply {
                datapath: 5,
                ip: pod,
                mac: [2, 0, 0, 0, 0, 1],
            },
            IrEntry::NdReplySkip {
                datapath: 5,
                ip: pod,
                inport: "p1".into(),
            },
            IrEntry::NdReply {
                datapath: 5,
                ip: gateway,
                mac: [2, 0, 0, 0, 0, 0xfe],
            },
            IrEntry::NdForRouterIp {
                datapath: 5,
                ip: gateway,
                router_port: "lrp".into(),
                group: None,
            },
        ]);
        let mut flows = L2Flows::new();
        flows.apply(&IrDiff {
            added: entries,
            removed: Vec::new(),
        });
        let changes = flows.changes();
        let solicitation = |target: Ipv6Addr| {
            on_datapath(5)
                .with(Field::eth_type(0x86dd))
                .with(Field::ip_protocol(58))
                .with(Field::icmpv6_type(135))
                .with(Field::nd_target(target))
        };
        let flow = |matching: Match| {
            changes
                .iter()
                .find(|flow| flow.table == INGRESS && flow.matching == matching)
                .unwrap_or_else(|| panic!("no flow {matching:?}: {changes:#?}"))
        };
        let answered = flow(solicitation(pod));
        assert_eq!(
            (answered.cookie, answered.priority),
            (COOKIE_ND_ADVERTISEMENT, 90)
        );
        assert_eq!(
            answered.instructions,
            [Instruction::ApplyActions(to_controller([2, 0, 0, 0, 0, 1]))]
        );
        assert_eq!(
            to_controller([2, 0, 0, 0, 0, 1])[..2],
            [
                Action::SetField(Field::register(PARAMETER, 0x0200_0000)),
                Action::SetField(Field::register(PARAMETER_LOW, 0x0001_0000)),
            ]
        );
        assert_eq!(
            flow(solicitation(gateway)).cookie,
            COOKIE_ND_ROUTER_ADVERTISEMENT
        );
        let owner = flow(solicitation(pod).with(Field::register(14, 1)));
        assert_eq!(
            (owner.priority, owner.instructions.clone()),
            (
                95,
                vec![Instruction::ApplyActions(vec![Action::Resubmit(LOOKUP)])]
            )
        );
    }

    /// A port bound to another chassis is reached through that chassis's tunnel once there is
    /// one: the output sets the VNI and OVN's option (the egress key, the ingress port moved
    /// from reg14) and leaves by the tunnel; the flood sends one copy there for the group;
    /// what the tunnel brings in is classified from the VNI and the option.
    #[test]
    fn ports_of_other_chassis_are_reached_through_their_tunnel() {
        let mut flows = L2Flows::for_chassis("node1");
        let mut entries = switch_entries();
        entries.push(node2_port());
        entries.push(IrEntry::FloodMember {
            datapath: 5,
            group: 32768,
            port: 3,
        });
        flows.apply(&IrDiff {
            added: entries,
            removed: Vec::new(),
        });
        flows.plug("p1", 3);
        let before = flows.changes();
        flows.set_tunnel("node2", Some(9));
        let with_tunnel = flows.changes();
        let to_node2 = tunnel_out(5, 3, 9);
        assert!(
            with_tunnel.iter().any(|flow| flow.table == OUTPUT
                && flow.instructions == vec![Instruction::ApplyActions(to_node2.clone())]),
            "{with_tunnel:?}"
        );
        assert!(
            !before
                .iter()
                .any(|flow| flow.instructions == vec![Instruction::ApplyActions(to_node2.clone())])
        );
        let flood = with_tunnel
            .iter()
            .find(|flow| flow.table == LOOKUP && flow.priority == 70)
            .expect("the flood changed");
        let Instruction::ApplyActions(actions) = &flood.instructions[0] else {
            panic!("{flood:?}");
        };
        assert!(actions.ends_with(&tunnel_out(5, 32768, 9)), "{actions:?}");
        assert!(
            with_tunnel.iter().any(|flow| flow.table == CLASSIFY
                && flow.matching == Match::new().with(Field::in_port(9)))
        );
        // The tunnel gone: its flows go.
        flows.set_tunnel("node2", None);
        let gone = flows.changes();
        assert!(
            gone.iter()
                .any(|flow| flow.command == Command::DeleteStrict && flow.table == CLASSIFY)
        );
    }

    /// A switch with a localnet port on a mapped network: frames with its VLAN from the NIC
    /// enter untagged as the localnet port; out of it they leave tagged; the switch's ports on
    /// other chassis are reached through it, not a tunnel, and the flood sends no tunnel copy.
    #[test]
    fn a_localnet_switch_reaches_other_chassis_through_its_vlan() {
        let mut flows = L2Flows::for_chassis("node1");
        let mut entries = switch_entries();
        entries.push(node2_port());
        entries.push(IrEntry::Port {
            datapath: 5,
            key: 4,
            name: "ln".into(),
            kind: PortKind::Localnet {
                network_name: "physnet1".into(),
                tag: Some(100),
            },
            addresses: Vec::new(),
            port_security: Vec::new(),
        });
        for port in [3, 4] {
            entries.push(IrEntry::FloodMember {
                datapath: 5,
                group: 32768,
                port,
            });
        }
        flows.apply(&IrDiff {
            added: entries,
            removed: Vec::new(),
        });
        flows.plug("p1", 3);
        flows.set_tunnel("node2", Some(9));
        flows.set_provider("physnet1", 7);
        let changes = flows.changes();
        let tagged_out = vec![Instruction::ApplyActions(vec![
            Action::PushVlan,
            Action::SetField(Field::vlan_vid(0x1000 | 100)),
            Action::Output(7),
        ])];
        let output_of = |key: u32| {
            changes
                .iter()
                .find(|flow| {
                    flow.table == OUTPUT
                        && flow.priority == 100
                        && flow.matching == on_datapath(5).with(Field::register(15, key))
                })
                .map(|flow| flow.instructions.clone())
        };
        assert_eq!(output_of(4), Some(tagged_out.clone()), "the localnet port");
        assert_eq!(
            output_of(3),
            Some(tagged_out),
            "node2's port, through the VLAN"
        );
        let classify = changes
            .iter()
            .find(|flow| {
                flow.table == CLASSIFY
                    && flow.matching
                        == Match::new()
                            .with(Field::in_port(7))
                            .with(Field::vlan_vid(0x1000 | 100))
            })
            .expect("the VLAN's frames classified");
        assert_eq!(
            classify.instructions,
            vec![Instruction::ApplyActions(vec![
                Action::PopVlan,
                Action::SetField(Field::metadata(5)),
                Action::SetField(Field::register(14, 4)),
                Action::Resubmit(INGRESS),
            ])]
        );
        let flood = changes
            .iter()
            .find(|flow| flow.table == LOOKUP && flow.priority == 70)
            .expect("the flood");
        assert!(
            !format!("{:?}", flood.instructions).contains("Output(9)"),
            "a tunnel copy on a localnet switch: {flood:?}"
        );
    }
}
