//! The switches' routers (`SWITCH_ROUTERS`): for each switch, the router a broadcast ARP on it
//! also reaches (OVN floods it to the switch's router port) and that router port's MAC, so the
//! kernel reports a gratuitous ARP's sender to that router (MAC learning: a moved address's new
//! MAC). A switch with several router ports names the first, by its switch-side port's name.
//! Owns the desired values; installs through the state's
//! [`Table`](super::super::tables::Table).

use ovnbpf_common::{SwitchRouter, maps::SwitchRouters};

use super::{
    super::{
        EbpfError, Maps,
        tables::{TableKey, flush_from},
    },
    L2State,
};

impl TableKey<SwitchRouters> for u32 {
    fn slot(&self) -> u32 {
        *self
    }
}

impl L2State {
    /// Takes in (or out) patch port `port` of datapath `datapath` (a switch's router port, or a
    /// router's own).
    pub(super) fn take_patch_port(&mut self, datapath: u32, port: &str, added: bool) {
        if added {
            self.patch_ports
                .entry(datapath)
                .or_default()
                .insert(port.to_string());
        } else if let Some(ports) = self.patch_ports.get_mut(&datapath) {
            ports.remove(port);
            if ports.is_empty() {
                self.patch_ports.remove(&datapath);
            }
        }
        self.switch_router_table.mark(datapath);
    }

    /// Marks the router slot of the switch switch-side port `port` is on (its peer changed).
    pub(super) fn mark_switch_router_of(&mut self, port: &str) {
        if let Some(info) = self.ports.get(port) {
            let datapath = info.datapath;
            self.switch_router_table.mark(datapath);
        }
    }

    /// The router switch `switch` floods broadcast ARP to, and its port's MAC.
    pub(super) fn desired_switch_router(&self, switch: u32) -> Option<SwitchRouter> {
        self.patch_ports.get(&switch)?.iter().find_map(|port| {
            // A switch's router port has no address of its own ("router"); a router's has one.
            if self.ports.get(port)?.mac.is_some() {
                return None;
            }
            let peer = self.physical.binding(port)?.peer.as_ref()?;
            let router_port = self.ports.get(peer)?;
            Some(SwitchRouter {
                router: router_port.datapath,
                mac: router_port.mac?,
                reserved: [0; 2],
            })
        })
    }

    /// Writes the marked switches' routers; returns the writes made.
    pub(super) fn flush_switch_routers(
        &mut self,
        maps: &mut impl Maps,
    ) -> Result<usize, EbpfError> {
        flush_from(
            self,
            maps,
            |s| &mut s.switch_router_table,
            |s, &switch| s.desired_switch_router(switch),
        )
    }
}
