//! Gateway ports (a router port northd gave a `chassisredirect` companion: a distributed
//! gateway port, where Kube-OVN's OVN-native NAT, EIPs and a VPC's external access live). The
//! compiler stays chassis-agnostic: what the gateway chassis does for the port is the
//! backend's, from [`IrEntry::GatewayPort`] and where the companion's binding says it is active.
//! So:
//! - a flow that requires a chassisredirect port to reside here (`is_chassis_resident("cr-…")`)
//!   is neutral: its admission, ARP answer and switch lookup are what the backend does for an
//!   active gateway; but a centralized SNAT or DNAT rule's and a router load balancer's VIP are
//!   carried ([`IrEntry::CentralizedSnat`], [`IrEntry::CentralizedDnat`],
//!   [`IrEntry::RouterLoadBalancer`], `classify::classify_resident`), and one that translates
//!   through conntrack otherwise (other centralized NAT, which the datapath does not carry yet)
//!   fences the gateway
//!   ([`IrEntry::CentralizedNat`]), so that no chassis forwards the gateway's traffic un-NATed;
//! - an unsupported router flow confined to a gateway port's traffic (its match pins `inport` or
//!   `outport` to the port; `lr_out_chk_dnat_local`, whose register only the gateway port's SNAT
//!   flows read; the ARP answers for NAT addresses, and the drop of routed traffic to them,
//!   traffic to which is the gateway's: the connected route sends it out of the port) is reported,
//!   and the router goes on being routed: routes out of the port drop their packets
//!   (`gateway_unsupported`, see [`IrEntry::GatewayPort`]);
//! - a router port on a switch with a localnet port is a gateway, not U2O, when it is a gateway
//!   port (see `underlay.rs`).
//!
//! Reads the SB replica; touches nothing else.

use uuid::Uuid;

use crate::{
    pipeline::ir::IrEntry,
    sb::{
        Southbound,
        rows::{DatapathBinding, PortBinding},
    },
};

/// The Port_Binding type northd gives a distributed gateway port's companion.
const CHASSIS_REDIRECT: &str = "chassisredirect";
/// The companion's option naming its gateway port.
const DISTRIBUTED_PORT: &str = "distributed-port";

/// The gateway port entry of a chassisredirect Port_Binding row.
pub(super) fn gateway_port_entry(sb: &Southbound, port: &PortBinding) -> Option<IrEntry> {
    if port.kind != CHASSIS_REDIRECT {
        return None;
    }
    let router = sb.row::<DatapathBinding>(&port.datapath?)?;
    Some(IrEntry::GatewayPort {
        datapath: router.tunnel_key,
        port: port.options.get(DISTRIBUTED_PORT)?.clone(),
        redirect: port.logical_port.clone(),
    })
}

/// The gateway ports of the router with tunnel key `router`.
pub(super) fn gateway_ports(sb: &Southbound, router: u32) -> Vec<String> {
    let Some(datapath) = sb.datapath_by_key(router) else {
        return Vec::new();
    };
    sb.typed_ports_on_datapath(datapath.uuid)
        .filter(|port| port.kind == CHASSIS_REDIRECT)
        .filter_map(|port| port.options.get(DISTRIBUTED_PORT).cloned())
        .collect()
}

/// Whether router port `port` (a Port_Binding of a router) is a gateway port.
pub(super) fn is_gateway_port(sb: &Southbound, port: &PortBinding) -> bool {
    port.datapath.is_some_and(|datapath| {
        sb.typed_ports_on_datapath(datapath).any(|other| {
            other.kind == CHASSIS_REDIRECT
                && other.options.get(DISTRIBUTED_PORT) == Some(&port.logical_port)
        })
    })
}

/// The first port of `resident` (a flow's `is_chassis_resident` arguments) that is a
/// chassisredirect port: the flow applies only on the chassis where that port is active.
pub(super) fn redirect_port<'a>(sb: &Southbound, resident: &[&'a str]) -> Option<&'a str> {
    resident.iter().copied().find(|name| {
        sb.port_by_name(name)
            .is_some_and(|port| port.kind == CHASSIS_REDIRECT)
    })
}

/// Whether an unsupported flow of router stage `stage` is confined to the traffic of one of
/// `gateways` (see the module doc); `pinned` are the ports its match pins `inport` or `outport`
/// to; `bare` whether it tests one thing (in `lr_in_ip_input`: an ARP request for one address;
/// in `lr_in_arp_resolve`: the destination).
pub(super) fn confined_to_gateway(
    gateways: &[String],
    stage: &str,
    pinned: &[&str],
    bare: bool,
) -> Option<String> {
    let first = gateways.first()?;
    if let Some(port) = pinned
        .iter()
        .find(|port| gateways.iter().any(|gateway| gateway == *port))
    {
        return Some((*port).to_string());
    }
    let confined = stage == "lr_out_chk_dnat_local"
        || (bare && (stage == "lr_in_ip_input" || stage == "lr_in_arp_resolve"));
    confined.then(|| first.clone())
}

/// The flows whose verdict a chassisredirect row's change can turn: those of its router and of
/// the switch behind its gateway port (either may test whether it resides here), from the row's
/// gateway port entry (so that a deleted row still names them).
pub(super) fn dependent_flows(sb: &Southbound, entries: &[IrEntry]) -> Vec<Uuid> {
    let mut datapaths = Vec::new();
    for entry in entries {
        let IrEntry::GatewayPort { datapath, port, .. } = entry else {
            continue;
        };
        datapaths.extend(sb.indexes().datapath_by_key.get(datapath).copied());
        datapaths.extend(switch_behind(sb, port).map(|switch| switch.uuid));
    }
    datapaths
        .into_iter()
        .flat_map(|datapath| sb.flow_uuids_for_datapath(datapath))
        .collect()
}

/// The switch behind router port `port` (its peer's datapath).
pub(super) fn switch_behind(sb: &Southbound, port: &str) -> Option<DatapathBinding> {
    let peer = sb.port_by_name(sb.port_by_name(port)?.options.get("peer")?)?;
    sb.row::<DatapathBinding>(&peer.datapath?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_pinned_to_a_gateway_port_is_confined_to_it() {
        let gateways = vec!["vpc1-external".to_string()];
        assert_eq!(
            confined_to_gateway(&gateways, "lr_in_unsnat", &["vpc1-external"], false),
            Some("vpc1-external".to_string())
        );
        // Pinned to another port of the router: not the gateway's.
        assert_eq!(
            confined_to_gateway(&gateways, "lr_in_unsnat", &["vpc1-net1"], false),
            None
        );
        // A router without a gateway port confines nothing.
        assert_eq!(
            confined_to_gateway(&[], "lr_in_unsnat", &["vpc1-external"], false),
            None
        );
        assert_eq!(
            confined_to_gateway(&gateways, "lr_out_chk_dnat_local", &[], false),
            Some("vpc1-external".to_string())
        );
        assert_eq!(
            confined_to_gateway(&gateways, "lr_in_ip_input", &[], true),
            Some("vpc1-external".to_string())
        );
        // An unpinned flow elsewhere (a router load balancer's DNAT) is not confined.
        assert_eq!(
            confined_to_gateway(&gateways, "lr_in_dnat", &[], false),
            None
        );
    }
}
