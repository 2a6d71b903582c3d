//! The L2 FIB (`L2_FIB`): where frames to a MAC on a datapath go, by the port the IR names for it
//! located through [`Physical`](super::super::physical): a local veth, another chassis's encap
//! IP and the port's key, or (a switch's router port) the router's datapath; and the switch's
//! service monitor MAC, whose frames (answers to health checks) the agent reads and the
//! datapath drops. Owns the desired values; installs through the state's
//! [`Table`](super::super::tables::Table).

use ovnbpf_common::{
    FIB_LOCAL, FIB_REMOTE, FIB_ROUTER, FIB_SERVICE_MONITOR, FibEntry, FibKey, LOCAL_PORT_VETH_PEER,
    maps::L2Fib,
};

use super::{
    super::{physical::Location, tables::TableKey},
    L2State, remove_from_index,
};
use crate::pipeline::ir::Mac;

impl TableKey<L2Fib> for (u32, Mac) {
    fn slot(&self) -> FibKey {
        FibKey {
            datapath: self.0,
            mac: self.1,
            padding: [0; 2],
        }
    }
}

impl L2State {
    /// Takes in `IrEntry::L2Fib`: `mac` on `datapath` goes to `port`.
    pub(super) fn take_fib(&mut self, datapath: u32, mac: Mac, port: &str, added: bool) {
        let fib_key = (datapath, mac);
        if let Some(old) = self.fib.remove(&fib_key) {
            remove_from_index(&mut self.fib_by_port, &old, &fib_key);
        }
        if added {
            self.fib.insert(fib_key, port.to_string());
            self.fib_by_port
                .entry(port.to_string())
                .or_default()
                .insert(fib_key);
        }
        self.fib_table.mark(fib_key);
    }

    /// Takes in `IrEntry::ServiceMonitorAnswers`: frames to `mac` on `datapath` are the
    /// agent's (a port's entry for the same MAC, which northd never makes, would give way).
    pub(super) fn take_service_monitor_mac(&mut self, datapath: u32, mac: Mac, added: bool) {
        if added {
            self.service_monitor_macs.insert((datapath, mac));
        } else {
            self.service_monitor_macs.remove(&(datapath, mac));
        }
        self.fib_table.mark((datapath, mac));
    }

    pub(super) fn desired_fib(&self, datapath: u32, mac: Mac) -> Option<FibEntry> {
        if self.service_monitor_macs.contains(&(datapath, mac)) {
            return Some(FibEntry {
                kind: FIB_SERVICE_MONITOR,
                ..FibEntry::default()
            });
        }
        if let Some(entry) = self.gateway_fib(datapath, mac) {
            return Some(entry);
        }
        let port = self
            .fib
            .get(&(datapath, mac))
            .map(String::as_str)
            .or_else(|| self.nat_fib_port(datapath, mac))?;
        let key = self.ports.get(port)?.key;
        Some(match self.physical.locate(port) {
            Location::Local(ifindex) => FibEntry {
                kind: FIB_LOCAL,
                ifindex,
                flags: self
                    .local_port(port)
                    .map_or(LOCAL_PORT_VETH_PEER, |local| local.delivery_flags()),
                // The egress ACL stage matches on it.
                port: key,
                ..FibEntry::default()
            },
            Location::Router { datapath, address } => FibEntry {
                kind: FIB_ROUTER,
                ifindex: datapath,
                // The router port's address: the source of its ICMP errors on this switch.
                remote_ip: address.map_or(0, |ip| u32::from_ne_bytes(ip.octets())),
                port: key,
                ..FibEntry::default()
            },
            Location::Remote(endpoint) => FibEntry {
                kind: FIB_REMOTE,
                remote_ip: endpoint,
                port: key,
                ..FibEntry::default()
            },
            Location::Unreachable => return None,
        })
    }
}
