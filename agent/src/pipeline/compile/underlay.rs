//! Underlay routing (Kube-OVN's U2O interconnection): routers with a port on a switch that has a
//! localnet port are reported as Unsupported entries and made NotForwardable, recomputed per
//! switch when a localnet, patch or chassisredirect port changes; a gateway port there is a
//! gateway, not U2O (`gateway.rs`). Touches the SB replica (read) and the compiler's underlay
//! state.

use uuid::Uuid;

use super::{Compiler, Delta};
use crate::{
    pipeline::ir::{IrEntry, PortKind, Unforwardable},
    sb::{
        Southbound,
        rows::{DatapathBinding, PortBinding},
    },
};

impl Compiler {
    /// The switches (tunnel keys) whose U2O state a Port_Binding row can change: a localnet or
    /// patch port's own datapath, and a patch port's peer's. From the row's compiled entry, so
    /// that a deleted row still names them.
    pub(super) fn underlay_candidates(&self, sb: &Southbound, row: Uuid) -> Vec<u32> {
        let Some(ids) = self.rows.get(&row) else {
            return Vec::new();
        };
        let mut switches = Vec::new();
        for entry in self.ir.resolve(ids) {
            match entry {
                IrEntry::Port {
                    datapath,
                    kind: PortKind::Localnet { .. },
                    ..
                } => switches.push(*datapath),
                // A gateway port's switch: its router's ports there stop (or start) being U2O.
                IrEntry::GatewayPort { port, .. } => switches.extend(
                    super::gateway::switch_behind(sb, port).map(|switch| switch.tunnel_key),
                ),
                IrEntry::Port {
                    datapath,
                    kind: PortKind::Patch { peer },
                    ..
                } => {
                    switches.push(*datapath);
                    switches.extend(
                        sb.port_by_name(peer)
                            .and_then(|port| sb.row::<DatapathBinding>(&port.datapath?))
                            .map(|datapath| datapath.tunnel_key),
                    );
                }
                _ => {}
            }
        }
        switches
    }

    /// Recomputes which routers route onto `switch` while it has a localnet port.
    pub(super) fn refresh_underlay_routing(
        &mut self,
        sb: &Southbound,
        switch: u32,
        delta: &mut Delta,
    ) {
        let entries = self.add_all(underlay_routing_entries(sb, switch), delta);
        for entry in self.underlay_routing.remove(&switch).unwrap_or_default() {
            self.remove(entry, delta);
        }
        if !entries.is_empty() {
            self.underlay_routing.insert(switch, entries);
        }
    }
}

/// The stage name under which routers that route onto an underlay switch are reported.
pub const UNDERLAY_ROUTING_STAGE: &str = "u2o (router ports on underlay switches)";

/// One Unsupported and one NotForwardable entry per router with a port on `switch`, if `switch` has a localnet port:
/// routing between an underlay and an overlay subnet (Kube-OVN's U2O interconnection) is not
/// compiled. OVN sends such routed traffic through the localnet port, with per-chassis MACs
/// (`ovn-chassis-mac-mappings`), which the kernel programs do not do.
pub(super) fn underlay_routing_entries(sb: &Southbound, switch: u32) -> Vec<IrEntry> {
    let Some(datapath) = sb.datapath_by_key(switch) else {
        return Vec::new();
    };
    if datapath.external_ids.contains_key("logical-router") {
        return Vec::new();
    }
    let ports: Vec<PortBinding> = sb.typed_ports_on_datapath(datapath.uuid).collect();
    let Some(localnet) = ports.iter().find(|port| port.kind == "localnet") else {
        return Vec::new();
    };
    let name = datapath
        .external_ids
        .get("name")
        .cloned()
        .unwrap_or_default();
    let mut routers: Vec<u32> = ports
        .iter()
        .filter(|port| port.kind == "patch")
        .filter_map(|port| sb.port_by_name(port.options.get("peer")?))
        // A gateway port on the switch is a gateway, not U2O (see `gateway.rs`).
        .filter(|router_port| !super::gateway::is_gateway_port(sb, router_port))
        .filter_map(|router_port| sb.row::<DatapathBinding>(&router_port.datapath?))
        .filter(|router| router.external_ids.contains_key("logical-router"))
        .map(|router| router.tunnel_key)
        .collect();
    routers.sort_unstable();
    routers.dedup();
    let reason = Unforwardable::UnderlayRouting {
        switch: name,
        localnet: localnet.logical_port.clone(),
    };
    routers
        .into_iter()
        .flat_map(|router| {
            [
                IrEntry::Unsupported {
                    datapath: router,
                    stage: UNDERLAY_ROUTING_STAGE.to_string(),
                    reason: reason.to_string(),
                },
                IrEntry::NotForwardable {
                    datapath: router,
                    reason: reason.clone(),
                },
            ]
        })
        .collect()
}
