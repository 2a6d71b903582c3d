//! The switches' ARP and ND responders (`ARP_RESPONDER` for IPv4, `ND_RESPONDER` for IPv6): the
//! MAC a switch answers with for an address, the port that owns it (whose own requests are not
//! answered), and whether the address is a router's (answered with the router port's MAC; an
//! IPv6 answer then carries the R flag, as `nd_na_router`). Both families share the state, keyed
//! by `IpAddr`, and differ only in their table. Owns the desired values; installs through the
//! state's [`Table`](super::super::tables::Table)s.

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use ovnbpf_common::{
    ARP_ANSWER_ROUTER, ArpAnswer, ArpKey, Ipv6Key,
    maps::{ArpResponder, NdResponder},
};

use super::{
    super::{
        EbpfError, Maps,
        tables::{Table, TableKey, flush_from},
    },
    L2State, remove_from_index,
};
use crate::pipeline::ir::{IrEntry, Mac};

impl TableKey<ArpResponder> for (u32, Ipv4Addr) {
    fn slot(&self) -> ArpKey {
        ArpKey {
            datapath: self.0,
            ip: u32::from_ne_bytes(self.1.octets()),
        }
    }
}

impl TableKey<NdResponder> for (u32, Ipv6Addr) {
    fn slot(&self) -> Ipv6Key {
        Ipv6Key {
            datapath: self.0,
            ip: self.1.octets(),
        }
    }
}

/// Sets (`Some`) or clears the port named for `key` in `names`, keeping the reverse `index`.
fn name_port(
    (names, index): (
        &mut HashMap<AnswerKey, String>,
        &mut HashMap<String, HashSet<AnswerKey>>,
    ),
    key: AnswerKey,
    port: Option<&str>,
) {
    if let Some(old) = names.remove(&key) {
        remove_from_index(index, &old, &key);
    }
    if let Some(port) = port {
        names.insert(key, port.to_string());
        index.entry(port.to_string()).or_default().insert(key);
    }
}

/// A responder's key: an address on a switch.
pub(super) type AnswerKey = (u32, IpAddr);

/// What the responders installed, one table per family.
#[derive(Debug, Default)]
pub(super) struct ResponderTables {
    arp: Table<ArpResponder, (u32, Ipv4Addr)>,
    nd: Table<NdResponder, (u32, Ipv6Addr)>,
}

impl ResponderTables {
    pub(super) fn pending(&self) -> usize {
        self.arp.pending() + self.nd.pending()
    }
}

impl L2State {
    /// Takes in a responder entry of the IR: an answer, its owner, or a router's address.
    pub(super) fn take_arp(&mut self, entry: &IrEntry, added: bool) {
        match *entry {
            IrEntry::ArpForRouterIp {
                datapath,
                ip,
                ref router_port,
                ..
            } => self.take_router_address((datapath, ip.into()), router_port, added),
            IrEntry::NdForRouterIp {
                datapath,
                ip,
                ref router_port,
                ..
            } => self.take_router_address((datapath, ip.into()), router_port, added),
            IrEntry::ArpReply { datapath, ip, mac } => {
                self.take_answer((datapath, ip.into()), mac, added);
            }
            IrEntry::NdReply { datapath, ip, mac } => {
                self.take_answer((datapath, ip.into()), mac, added);
            }
            IrEntry::ArpReplySkip {
                datapath,
                ip,
                ref inport,
            } => self.take_owner((datapath, ip.into()), inport, added),
            IrEntry::NdReplySkip {
                datapath,
                ip,
                ref inport,
            } => self.take_owner((datapath, ip.into()), inport, added),
            _ => {}
        }
    }

    fn take_router_address(&mut self, key: AnswerKey, router_port: &str, added: bool) {
        name_port(
            (&mut self.router_arp, &mut self.router_arp_by_port),
            key,
            added.then_some(router_port),
        );
        self.mark_answer(key);
    }

    fn take_answer(&mut self, key: AnswerKey, mac: Mac, added: bool) {
        if added {
            self.arp.insert(key, mac);
        } else if self.arp.get(&key) == Some(&mac) {
            self.arp.remove(&key);
        }
        self.mark_answer(key);
    }

    fn take_owner(&mut self, key: AnswerKey, inport: &str, added: bool) {
        name_port(
            (&mut self.arp_owner, &mut self.arp_by_owner),
            key,
            added.then_some(inport),
        );
        self.mark_answer(key);
    }

    /// Marks `key` in the table of its family.
    pub(super) fn mark_answer(&mut self, (datapath, ip): AnswerKey) {
        match ip {
            IpAddr::V4(ip) => self.responder_tables.arp.mark((datapath, ip)),
            IpAddr::V6(ip) => self.responder_tables.nd.mark((datapath, ip)),
        }
    }

    /// Writes the marked answers of both families; returns the writes made.
    pub(super) fn flush_responders(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        let writes = flush_from(
            self,
            maps,
            |s| &mut s.responder_tables.arp,
            |s, &(dp, ip)| s.desired_answer(dp, IpAddr::V4(ip)),
        )?;
        Ok(writes
            + flush_from(
                self,
                maps,
                |s| &mut s.responder_tables.nd,
                |s, &(dp, ip)| s.desired_answer(dp, IpAddr::V6(ip)),
            )?)
    }

    /// Removes the answers this state did not install; returns how many went.
    pub(super) fn sweep_responders(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        Ok(self.responder_tables.arp.sweep(maps)? + self.responder_tables.nd.sweep(maps)?)
    }

    /// What the responder of switch `datapath` answers for `ip`.
    fn desired_answer(&self, datapath: u32, ip: IpAddr) -> Option<ArpAnswer> {
        let key = (datapath, ip);
        // A distributed NAT rule's address: answered where its pod is, nowhere else.
        if let Some(answer) = self.nat_answer(key) {
            return answer;
        }
        let router = self.router_flags(key);
        // A gateway port's address active here: answered to the provider network too.
        let gateway = self.gateway_answer_flags(key);
        let Some(mac) = self.arp.get(&key) else {
            return router
                .map(|(mac, flags)| ArpAnswer {
                    mac,
                    flags: flags | gateway,
                    ..ArpAnswer::default()
                })
                .or_else(|| self.gateway_answer(key));
        };
        let owner_port = self
            .arp_owner
            .get(&key)
            .and_then(|owner| self.ports.get(owner))
            .map_or(0, |info| info.key);
        Some(ArpAnswer {
            mac: *mac,
            flags: router.map_or(0, |(_, flags)| flags) | gateway,
            owner_port,
            ..ArpAnswer::default()
        })
    }

    /// For a router's address on a switch: the router port's MAC and the flag telling the
    /// kernel the address is the router's.
    fn router_flags(&self, key: AnswerKey) -> Option<(Mac, u8)> {
        let switch_port = self.router_arp.get(&key)?;
        let peer = self.physical.binding(switch_port)?.peer.as_ref()?;
        let router_port = self.ports.get(peer)?;
        Some((router_port.mac?, ARP_ANSWER_ROUTER))
    }
}
