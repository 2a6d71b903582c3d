//! What the Southbound asks of this node's own network ([`NodeNetworkWanted`]): the facts of the
//! node's port on the join switch (`node-<node>`, which kube-ovn-controller's `handleAddNode`
//! creates) and the default VPC's subnets the node routes to through it, as kube-ovn-cni's
//! `reconcileRouters` picks them: every subnet of the cluster router but the join subnet and the
//! subnets that hold the node's own IP. The loop publishes it after each change set that touched
//! ports or datapaths; [`crate::node_network`] makes it so. Reads the SB replica only.

use std::net::Ipv4Addr;

use super::ports::{PortFacts, port_facts};
use crate::{
    net::{Ipv4Prefix, parse_lsp_address},
    sb::{
        Southbound,
        rows::{DatapathBinding, PortBinding},
    },
};

/// Where this node's network comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePortConfig {
    /// The Kubernetes node name: the join port is `node-<node>`.
    pub node: String,
    /// The default VPC's router (kube-ovn-controller's `--cluster-router`, `ovn-cluster`).
    pub cluster_router: String,
    /// The node's InternalIP: routes to the subnets prefer it as their source, and subnets
    /// holding it get no route.
    pub node_ip: Ipv4Addr,
}

impl NodePortConfig {
    /// The join switch's port of this node (Kube-OVN's `util.NodeLspName`).
    #[must_use]
    pub fn port(&self) -> String {
        format!("node-{}", self.node)
    }
}

/// What the Southbound asks of the node's network now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeNetworkWanted {
    /// The join port's facts (MAC, join IP and prefix, join gateway), once in the Southbound.
    pub port: Option<PortFacts>,
    /// Why the join port cannot be served as configured (no static address), if so.
    pub problem: Option<String>,
    /// The default VPC's subnets to route through the join gateway, sorted.
    pub subnets: Vec<Ipv4Prefix>,
}

/// Computes [`NodeNetworkWanted`] from `sb`: O(the cluster router's ports).
#[must_use]
pub fn wanted(sb: &Southbound, config: &NodePortConfig) -> NodeNetworkWanted {
    let (port, problem) = match port_facts(sb, &config.port()) {
        Ok(facts) => (facts, None),
        Err(problem) => (None, Some(problem)),
    };
    let Some(facts) = port else {
        return NodeNetworkWanted {
            problem,
            ..NodeNetworkWanted::default()
        };
    };
    let join = Ipv4Prefix {
        network: facts.ip,
        length: facts.prefix_len,
    };
    let mut subnets: Vec<Ipv4Prefix> = sb
        .datapath_by_name(&config.cluster_router)
        .map(|router| subnets_of(sb, &router))
        .unwrap_or_default()
        .into_iter()
        .filter(|subnet| !subnet.contains(join.network) && !subnet.contains(config.node_ip))
        .collect();
    subnets.sort();
    subnets.dedup();
    NodeNetworkWanted {
        port: Some(facts),
        problem: None,
        subnets,
    }
}

/// The networks of `router`'s ports that lead to a switch (a subnet's gateway port; not a
/// peering with another router), normalised to their network address.
fn subnets_of(sb: &Southbound, router: &DatapathBinding) -> Vec<Ipv4Prefix> {
    sb.typed_ports_on_datapath(router.uuid)
        .filter(|port| port.kind == "patch" && leads_to_switch(sb, port))
        .flat_map(|port| port.mac)
        .filter_map(|entry| parse_lsp_address(&entry).map(|(_, networks)| networks))
        .flatten()
        .map(|network| Ipv4Prefix {
            network: Ipv4Addr::from(u32::from(network.network) & network.mask()),
            length: network.length,
        })
        .collect()
}

/// Whether a router port's peer is a switch's port.
fn leads_to_switch(sb: &Southbound, router_port: &PortBinding) -> bool {
    router_port
        .options
        .get("peer")
        .and_then(|peer| sb.port_by_name(peer))
        .and_then(|peer| sb.row::<DatapathBinding>(&peer.datapath?))
        .is_some_and(|datapath| datapath.external_ids.contains_key("logical-switch"))
}
