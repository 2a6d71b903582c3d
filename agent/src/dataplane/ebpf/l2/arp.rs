//! The ARP responder (`ARP_RESPONDER`): the MAC a switch answers with for an IPv4 address, the
//! port that owns it (whose own requests are not answered), and whether the address is a
//! router's (answered with the router port's MAC). Owns the desired values; installs through
//! the state's [`Table`](super::super::tables::Table).

use std::net::Ipv4Addr;

use ovnbpf_common::{ARP_ANSWER_ROUTER, ArpAnswer, ArpKey, maps::ArpResponder};

use super::{super::tables::TableKey, L2State, remove_from_index};
use crate::pipeline::ir::{IrEntry, Mac};

impl TableKey<ArpResponder> for (u32, Ipv4Addr) {
    fn slot(&self) -> ArpKey {
        ArpKey {
            datapath: self.0,
            ip: u32::from_ne_bytes(self.1.octets()),
        }
    }
}

impl L2State {
    /// Takes in an ARP entry of the IR: an answer, its owner, or a router's address.
    pub(super) fn take_arp(&mut self, entry: &IrEntry, added: bool) {
        match entry {
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
                self.arp_table.mark(arp_key);
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
                self.arp_table.mark(arp_key);
            }
            _ => {}
        }
    }

    pub(super) fn desired_arp(&self, datapath: u32, ip: Ipv4Addr) -> Option<ArpAnswer> {
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
        let peer = self.physical.binding(switch_port)?.peer.as_ref()?;
        let router_port = self.ports.get(peer)?;
        Some((router_port.mac?, ARP_ANSWER_ROUTER))
    }
}
