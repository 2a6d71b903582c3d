//! The routers' next hops (`NEIGHBOURS`, `NEIGHBOURS6`): the MAC of each from the flows
//! (`lr_in_arp_resolve`'s static entries) or learned (MAC_Binding rows, used where the router
//! looks them up), both families in one state. Owns the desired values.

use std::net::IpAddr;

use ovnbpf_common::Neighbour;

use super::L3State;
use crate::pipeline::ir::Mac;

impl L3State {
    /// Sets (or clears) the MAC from the flows or the learned one (whichever is given) of
    /// next hop `ip` of router `datapath`.
    pub(super) fn take_neighbour(
        &mut self,
        datapath: u32,
        ip: IpAddr,
        (fixed, learned): (Option<Mac>, Option<Mac>),
        added: bool,
    ) {
        let slot = self.neighbours.entry((datapath, ip)).or_default();
        if fixed.is_some() {
            slot.0 = fixed.filter(|_| added);
        }
        if learned.is_some() {
            slot.1 = learned.filter(|_| added);
        }
        if slot.0.is_none() && slot.1.is_none() {
            self.neighbours.remove(&(datapath, ip));
        }
        self.mark_neighbour(datapath, ip);
    }

    fn mark_neighbour(&mut self, datapath: u32, ip: IpAddr) {
        match ip {
            IpAddr::V4(ip) => self.neighbour_table.mark((datapath, ip)),
            IpAddr::V6(ip) => self.neighbour6_table.mark((datapath, ip)),
        }
    }

    /// Router `datapath` looks `ipv6` (or IPv4) next hops up in MAC_Binding, or stops.
    pub(super) fn take_lookup(&mut self, datapath: u32, ipv6: bool, added: bool) {
        if added {
            self.neighbour_lookup.insert((datapath, ipv6));
        } else {
            self.neighbour_lookup.remove(&(datapath, ipv6));
        }
        let keys: Vec<IpAddr> = self
            .neighbours
            .keys()
            .filter(|(dp, ip)| *dp == datapath && ip.is_ipv6() == ipv6)
            .map(|(_, ip)| *ip)
            .collect();
        keys.into_iter()
            .for_each(|ip| self.mark_neighbour(datapath, ip));
    }

    pub(super) fn desired_neighbour(&self, datapath: u32, ip: IpAddr) -> Option<Neighbour> {
        let (fixed, learned) = self.neighbours.get(&(datapath, ip))?;
        let looks_up = self.neighbour_lookup.contains(&(datapath, ip.is_ipv6()));
        let mac = fixed.or_else(|| learned.filter(|_| looks_up))?;
        Some(Neighbour {
            mac,
            reserved: [0; 2],
        })
    }
}
