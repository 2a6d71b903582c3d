//! What the Southbound asks of this node's own network ([`NodeNetworkWanted`]): the facts of the
//! node's port on the join switch (`node-<node>`, which kube-ovn-controller's `handleAddNode`
//! creates) and the default VPC's subnets the node routes to through it, as kube-ovn-cni's
//! `reconcileRouters` picks them: every subnet of the cluster router but the join subnet and the
//! subnets that hold the node's own IP; and, for the masquerading of traffic out of the cluster,
//! all the default VPC's subnets and the configured NAT-outgoing ones. The loop publishes it after each change set that touched
//! ports or datapaths; [`crate::node_network`] makes it so. Reads the SB replica only.

use std::net::Ipv4Addr;

use super::ports::{FamilyFacts, port_facts};
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
    /// The default-VPC subnets (switch names) whose traffic out of the cluster is masqueraded
    /// to the node's address (Kube-OVN's `natOutgoing`, a Subnet field the OVN databases do not
    /// carry).
    pub nat_outgoing: Vec<String>,
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
    pub port: Option<JoinPort>,
    /// Why the join port cannot be served as configured (no static address), if so.
    pub problem: Option<String>,
    /// The default VPC's subnets to route through the join gateway, sorted.
    pub subnets: Vec<Ipv4Prefix>,
    /// Every subnet of the default VPC, the join subnet included (destinations never
    /// masqueraded to), sorted.
    pub cluster: Vec<Ipv4Prefix>,
    /// The subnets of [`NodePortConfig::nat_outgoing`] found in the default VPC, sorted.
    pub nat_outgoing: Vec<Ipv4Prefix>,
}

/// The node's port on the join switch: its MAC and IPv4 address (the node network is IPv4:
/// an IPv6 join address is not used).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinPort {
    /// `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    pub ipv4: FamilyFacts<Ipv4Addr>,
}

/// Computes [`NodeNetworkWanted`] from `sb`: O(the cluster router's ports).
#[must_use]
pub fn wanted(sb: &Southbound, config: &NodePortConfig) -> NodeNetworkWanted {
    let (port, problem) = match port_facts(sb, &config.port()) {
        Ok(Some(facts)) => match facts.ipv4 {
            Some(ipv4) => (
                Some(JoinPort {
                    mac: facts.mac,
                    ipv4,
                }),
                None,
            ),
            None => (
                None,
                Some(format!(
                    "the join port {} has no IPv4 address: the node network needs one",
                    config.port()
                )),
            ),
        },
        Ok(None) => (None, None),
        Err(problem) => (None, Some(problem)),
    };
    let Some(facts) = port else {
        return NodeNetworkWanted {
            problem,
            ..NodeNetworkWanted::default()
        };
    };
    let join = Ipv4Prefix {
        network: facts.ipv4.ip,
        length: facts.ipv4.prefix_len,
    };
    let all = sb
        .datapath_by_name(&config.cluster_router)
        .map(|router| subnets_of(sb, &router))
        .unwrap_or_default();
    let sorted = |prefixes: &mut dyn Iterator<Item = Ipv4Prefix>| {
        let mut prefixes: Vec<Ipv4Prefix> = prefixes.collect();
        prefixes.sort();
        prefixes.dedup();
        prefixes
    };
    NodeNetworkWanted {
        port: Some(facts),
        problem: None,
        subnets: sorted(
            &mut all.iter().map(|(_, subnet)| *subnet).filter(|subnet| {
                !subnet.contains(join.network) && !subnet.contains(config.node_ip)
            }),
        ),
        cluster: sorted(&mut all.iter().map(|(_, subnet)| *subnet)),
        nat_outgoing: sorted(
            &mut all
                .iter()
                .filter(|(switch, _)| config.nat_outgoing.contains(switch))
                .map(|(_, subnet)| *subnet),
        ),
    }
}

/// The networks of `router`'s ports that lead to a switch (a subnet's gateway port; not a
/// peering with another router), normalised to their network address, with the switch's name.
fn subnets_of(sb: &Southbound, router: &DatapathBinding) -> Vec<(String, Ipv4Prefix)> {
    sb.typed_ports_on_datapath(router.uuid)
        .filter(|port| port.kind == "patch")
        .filter_map(|port| Some((switch_behind(sb, &port)?, port.mac)))
        .flat_map(|(switch, entries)| {
            entries
                .into_iter()
                .filter_map(|entry| parse_lsp_address(&entry).map(|(_, networks)| networks))
                .flatten()
                .map(move |network| {
                    let subnet = Ipv4Prefix {
                        network: Ipv4Addr::from(u32::from(network.network) & network.mask()),
                        length: network.length,
                    };
                    (switch.clone(), subnet)
                })
        })
        .collect()
}

/// The name of the switch a router port is patched to (none for a peering with a router).
fn switch_behind(sb: &Southbound, router_port: &PortBinding) -> Option<String> {
    let peer = sb.port_by_name(router_port.options.get("peer")?)?;
    let datapath = sb.row::<DatapathBinding>(&peer.datapath?)?;
    datapath
        .external_ids
        .contains_key("logical-switch")
        .then(|| datapath.external_ids.get("name").cloned())
        .flatten()
}
