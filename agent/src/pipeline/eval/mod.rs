//! Evaluates the IR for one packet, the way the datapath will: the sender runs the whole ingress
//! pipeline, switch and router hops included, and the result is the set of packets output to
//! logical ports. Each step is recorded in words, so `ovnbpfctl trace` can show a person what
//! happened and why. This is the semantic reference the differential tests compare with
//! `ovn-trace`; it reads only IR entries.
//!
//! - `switch`: the logical switch, stage by stage (`port_security`, `arp`, `switching`,
//!   `flood`, delivery with egress port security), named like the kernel modules in `ebpf/src`;
//! - `router`: the logical router (admission, input, IPv4 routing and policies);
//! - `lb`: the switch's load balancers (VIP → backend, hairpin);
//! - `ipv6`: neighbour discovery and what only IPv6 does in the router;
//! - `family`: the router stages both families share (input, reject, route lookup, next-hop
//!   resolution and forwarding), generic over the address family;
//! - [`packet`]: the packet model; [`microflow`]: packets to and from ovn-trace's language.
//!
//! The evaluator never answers silently through what it does not model: a trace records every
//! datapath it crossed, and the flows of those datapaths the compiler could not compile (their
//! [`IrEntry::Unsupported`] reports) come with the result ([`Trace::unsupported`]), because its
//! answer there may not be OVN's.

mod acl;
mod family;
mod ipv6;
mod lb;
pub mod microflow;
pub mod packet;
mod router;
mod switch;

use std::collections::{BTreeSet, HashMap};

use crate::pipeline::ir::{IrEntry, LspAddress, Mac, PortKind};
pub use acl::CtAssumptions;
pub use lb::Balanced;
use packet::Packet;

/// What happened to a packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    pub steps: Vec<String>,
    /// Packets output to logical ports, with the port name.
    pub outputs: Vec<(String, Packet)>,
    /// The datapaths (tunnel keys) the packet and its copies crossed, in the order first met.
    pub crossed: Vec<u32>,
    /// What the compiler reported unsupported on the crossed datapaths: the evaluator follows
    /// only what was compiled, so where these flows would have matched OVN may answer otherwise.
    pub unsupported: Vec<UnsupportedOnPath>,
    /// The ECMP members OVN's `select` chose on the way, in order (by the flow's hash, as the
    /// kernel chooses; `ovn-trace --select-id` makes the same choice).
    pub selected: Vec<u16>,
    /// The ECMP member index every `select` takes instead of the flow hash's choice (modulo
    /// its group's size): for a datapath that hashes differently (Open vSwitch's `multipath`),
    /// every member's outcome can be traced.
    pub ecmp_index: Option<usize>,
    /// The conntrack states the trace assumes (and how many it used).
    pub ct: CtAssumptions,
    /// The load balancers' decisions on the way, in order.
    pub balanced: Vec<Balanced>,
}

/// An unsupported report ([`IrEntry::Unsupported`]) of a datapath a trace crossed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnsupportedOnPath {
    pub datapath: u32,
    pub datapath_name: String,
    pub stage: String,
    pub reason: String,
}

/// The IR, indexed for evaluation.
pub struct Evaluator<'a> {
    datapaths: HashMap<u32, (&'a str, bool)>,
    ports: HashMap<&'a str, (u32, u32, &'a PortKind)>,
    port_security: HashMap<&'a str, &'a [LspAddress]>,
    port_names: HashMap<(u32, u32), &'a str>,
    groups: HashMap<(u32, &'a str), Vec<u32>>,
    by_datapath: HashMap<u32, Vec<&'a IrEntry>>,
    acl: acl::AclIndex<'a>,
}

/// Hops allowed before a packet is considered looping.
const MAX_HOPS: usize = 16;

pub(super) fn is_multicast(mac: &Mac) -> bool {
    mac[0] & 1 == 1
}

impl<'a> Evaluator<'a> {
    #[must_use]
    pub fn new(entries: impl IntoIterator<Item = &'a IrEntry>) -> Self {
        let mut evaluator = Self {
            datapaths: HashMap::new(),
            ports: HashMap::new(),
            port_security: HashMap::new(),
            port_names: HashMap::new(),
            groups: HashMap::new(),
            by_datapath: HashMap::new(),
            acl: acl::AclIndex::default(),
        };
        let mut group_names: HashMap<(u32, u32), &'a str> = HashMap::new();
        let mut members: Vec<(u32, u32, u32)> = Vec::new();
        for entry in entries {
            match entry {
                IrEntry::FloodMember {
                    datapath,
                    group,
                    port,
                } => members.push((*datapath, *group, *port)),
                IrEntry::Datapath {
                    datapath,
                    name,
                    router,
                } => {
                    evaluator.datapaths.insert(*datapath, (name, *router));
                }
                IrEntry::Port {
                    datapath,
                    key,
                    name,
                    kind,
                    port_security,
                    ..
                } => {
                    evaluator.ports.insert(name, (*datapath, *key, kind));
                    evaluator.port_names.insert((*datapath, *key), name);
                    if !port_security.is_empty() {
                        evaluator.port_security.insert(name, port_security);
                    }
                }
                IrEntry::FloodGroup {
                    datapath,
                    key,
                    name,
                } => {
                    group_names.insert((*datapath, *key), name);
                }
                _ => evaluator.acl.add(entry),
            }
            evaluator
                .by_datapath
                .entry(entry.datapath())
                .or_default()
                .push(entry);
        }
        for (datapath, group, port) in members {
            if let Some(name) = group_names.get(&(datapath, group)) {
                evaluator
                    .groups
                    .entry((datapath, name))
                    .or_default()
                    .push(port);
            }
        }
        for ports in evaluator.groups.values_mut() {
            ports.sort_unstable();
        }
        evaluator.acl.finish();
        evaluator
    }

    pub(super) fn entries(&self, datapath: u32) -> impl Iterator<Item = &'a IrEntry> + '_ {
        self.by_datapath
            .get(&datapath)
            .into_iter()
            .flatten()
            .copied()
    }

    pub(super) fn datapath_name(&self, datapath: u32) -> &str {
        self.datapaths.get(&datapath).map_or("?", |(name, _)| name)
    }

    /// Traces `packet` arriving from the VIF `inport`, conntrack reporting established
    /// connections (ovn-trace's default).
    pub fn trace(&self, inport: &str, packet: Packet) -> Result<Trace, String> {
        self.trace_with_ct(inport, packet, CtAssumptions::default())
    }

    /// Traces `packet` arriving from the VIF `inport`, conntrack reporting `ct`'s states in
    /// turn (as `ovn-trace --ct`).
    pub fn trace_with_ct(
        &self,
        inport: &str,
        packet: Packet,
        ct: CtAssumptions,
    ) -> Result<Trace, String> {
        self.trace_from(
            inport,
            packet,
            Trace {
                ct,
                ..Trace::default()
            },
        )
    }

    /// Traces `packet` from `inport` with every ECMP `select` taking member `index` of its
    /// group (modulo the group's size).
    pub fn trace_choosing(
        &self,
        inport: &str,
        packet: Packet,
        index: usize,
    ) -> Result<Trace, String> {
        self.trace_from(
            inport,
            packet,
            Trace {
                ecmp_index: Some(index),
                ..Trace::default()
            },
        )
    }

    fn trace_from(&self, inport: &str, packet: Packet, mut trace: Trace) -> Result<Trace, String> {
        let (datapath, _, _) = self
            .ports
            .get(inport)
            .ok_or_else(|| format!("unknown port {inport:?}"))?;
        self.switch(*datapath, inport, packet, false, &mut trace, 0);
        let unsupported: BTreeSet<UnsupportedOnPath> = trace
            .crossed
            .iter()
            .flat_map(|datapath| self.entries(*datapath))
            .filter_map(|entry| match entry {
                IrEntry::Unsupported {
                    datapath,
                    stage,
                    reason,
                } => Some(UnsupportedOnPath {
                    datapath: *datapath,
                    datapath_name: self.datapath_name(*datapath).to_string(),
                    stage: stage.clone(),
                    reason: reason.clone(),
                }),
                _ => None,
            })
            .collect();
        trace.unsupported = unsupported.into_iter().collect();
        Ok(trace)
    }

    pub(super) fn step(&self, trace: &mut Trace, datapath: u32, text: String) {
        if !trace.crossed.contains(&datapath) {
            trace.crossed.push(datapath);
        }
        trace
            .steps
            .push(format!("[{}] {text}", self.datapath_name(datapath)));
    }
}
