//! Kube-OVN-shaped topologies, built through `ovn-nbctl` with the names and columns Kube-OVN's
//! controller writes (see ../shared/reference/kube-ovn.md), and read-back of what northd made of
//! them in the Southbound DB. Tunnel keys are always read back, never assumed.
//!
//! - VPC → `Logical_Router` `<vpc>` with Kube-OVN's router options, the whole map as
//!   `createVpcRouter` writes it (`mac_binding_age_threshold=300`, `dynamic_neigh_routers=true`,
//!   and `always_learn_from_arp_request=false` unless the VPC has a peering, external access or a
//!   U2O subnet: then the key is absent and northd's default, true, applies); subnet →
//!   `Logical_Switch` `<subnet>` with only `external_ids:vendor` (Kube-OVN's
//!   `CreateBareLogicalSwitch`: no `other_config`
//!   unless multicast snooping is asked for), linked by LRP `<vpc>-<subnet>` (gateway = first
//!   address) and LSP `<subnet>-<vpc>` (type router, `addresses=router`, `options:router-port`),
//!   and a 31000 `allow` policy `ip4.dst == <cidr>` on the router; a custom VPC's subnet also
//!   gets a `src-ip` static route `<cidr>` via its gateway (Kube-OVN ≥ 1.15's
//!   `addCustomVPCStaticRouteForSubnet`, which shadows any shorter destination route for the
//!   subnet's own traffic); the default VPC has the route `0.0.0.0/0` via the join gateway;
//! - pod → LSP `<pod>.<namespace>` with addresses "MAC IP" (dual stack: "MAC IPv4 IPv6") and
//!   `external_ids` pod/ls/ip; a dual-stack subnet (`cidrBlock` "IPv4,IPv6") has both gateways
//!   on its router port and its policy and source route per family;
//! - underlay → LSP `localnet.<subnet>` (localnet, `network_name`, `tag`,
//!   `external_ids:ipv4_network`);
//! - node → LSP `node-<node>` on `join`, in the port group `node.<node>`; the per-node groups
//!   of the default VPC's distributed subnets (`<subnet>.<node>`) and the 29000 reroute policies
//!   that match their address sets come with the default VPC's node networking (not written);
//! - static route → `lr-route-add`; peering → LRPs `<a>-<b>` / `<b>-<a>` with `peer`.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, Ipv6Addr},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::ovn::OvnLab;

/// The subnet of vpc-b in [`Topology::peered_vpcs`].
pub const PEERED_B_CIDR: &str = "10.1.1.0/24";

/// Kube-OVN's default VPC and its two subnets.
pub const DEFAULT_VPC: &str = "ovn-cluster";
pub const DEFAULT_SUBNET: (&str, &str) = ("ovn-default", "10.16.0.0/16");
pub const JOIN_SUBNET: (&str, &str) = ("join", "100.64.0.0/16");
const VENDOR: &str = "external_ids:vendor=kube-ovn";

/// An IPv4 prefix such as 10.0.1.0/24.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub network: Ipv4Addr,
    pub len: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Self> {
        let (address, len) = text
            .split_once('/')
            .with_context(|| format!("{text:?} is not a CIDR"))?;
        let address: Ipv4Addr = address
            .parse()
            .with_context(|| format!("address in {text:?}"))?;
        let len: u8 = len
            .parse()
            .with_context(|| format!("prefix length in {text:?}"))?;
        if len > 32 {
            bail!("prefix length {len} in {text:?} is over 32");
        }
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        Ok(Self {
            network: Ipv4Addr::from(u32::from(address) & mask),
            len,
        })
    }

    /// The `n`-th address of the prefix (1 is Kube-OVN's default gateway).
    #[must_use]
    pub fn host(&self, n: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + n)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.len)
    }
}

/// An IPv6 prefix such as fd00:10:1::/64 (the IPv6 half of a dual-stack `cidrBlock`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr6 {
    pub network: Ipv6Addr,
    pub len: u8,
}

impl Cidr6 {
    pub fn parse(text: &str) -> Result<Self> {
        let (address, len) = text
            .split_once('/')
            .with_context(|| format!("{text:?} is not a CIDR"))?;
        let address: Ipv6Addr = address
            .parse()
            .with_context(|| format!("address in {text:?}"))?;
        let len: u8 = len
            .parse()
            .ok()
            .filter(|len| *len <= 128)
            .with_context(|| format!("prefix length in {text:?}"))?;
        let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
        Ok(Self {
            network: Ipv6Addr::from(u128::from(address) & mask),
            len,
        })
    }

    /// The `n`-th address of the prefix (1 is Kube-OVN's default gateway).
    #[must_use]
    pub fn host(&self, n: u128) -> Ipv6Addr {
        Ipv6Addr::from(u128::from(self.network) + n)
    }
}

impl std::fmt::Display for Cidr6 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.len)
    }
}

/// A MAC in Kube-OVN's `0a:58:` style, derived from a name so rebuilds give the same value.
#[must_use]
pub fn mac_for(name: &str) -> String {
    // FNV-1a: a stable, dependency-free hash; only needs to spread names over 32 bits.
    let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let b = hash.to_be_bytes();
    format!("0a:58:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3])
}

/// Kube-OVN's MAC_Binding age threshold on every VPC router, in seconds.
pub const MAC_BINDING_AGE_THRESHOLD: u32 = 300;

/// An NB change built up from Kube-OVN-style steps and applied as one `ovn-nbctl` transaction.
///
/// Router options follow kube-ovn-controller: every VPC created here gets
/// `mac_binding_age_threshold=300` and `dynamic_neigh_routers=true`, and
/// `always_learn_from_arp_request=false` unless the VPC has a peering or a U2O subnet (a subnet
/// of the VPC with a localnet port) in this topology, which turns it to `true` (also on a VPC
/// created by an earlier topology).
#[derive(Debug, Default)]
pub struct Topology {
    commands: Vec<Vec<String>>,
    /// VPCs created by [`Self::vpc`] in this topology.
    created_vpcs: BTreeSet<String>,
    /// VPCs peered or given external access in this topology (they learn from ARP requests).
    learning_vpcs: BTreeSet<String>,
    /// Subnet → VPC, for the subnets linked to a router in this topology.
    subnet_vpcs: BTreeMap<String, String>,
    /// Switches given a localnet port in this topology.
    underlay_switches: BTreeSet<String>,
    /// Switch → CIDR, for the switches created in this topology.
    switch_cidrs: BTreeMap<String, Cidr>,
    /// Leaves NB_Global's options as plain OVN has them (see [`Self::plain_ovn_globals`]).
    plain_ovn_globals: bool,
    /// Custom-VPC subnets get no `policySrc` route, as before Kube-OVN 1.15 (see
    /// [`Self::without_subnet_source_routes`]).
    no_subnet_source_routes: bool,
}

/// The NB_Global options kube-ovn-controller's `Run` writes at start, with its defaults
/// (`--ls-dnat-mod-dl-dst=true`, `--ls-ct-skip-dst-lport-ips=true`): `use_ct_inv_match=false`
/// takes `ct.inv` out of northd's ACL flows; the other two are read only by Kube-OVN's patched
/// northd (Debian's ignores them).
const KUBE_OVN_NB_GLOBALS: &[&str] = &[
    "options:use_ct_inv_match=false",
    "options:ls_dnat_mod_dl_dst=true",
    "options:ls_ct_skip_dst_lport_ips=true",
];

impl Topology {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// NB_Global's options as plain OVN has them (`use_ct_inv_match` true), instead of what
    /// kube-ovn-controller writes (every topology's default, [`KUBE_OVN_NB_GLOBALS`]).
    pub fn plain_ovn_globals(&mut self) -> &mut Self {
        self.plain_ovn_globals = true;
        self
    }

    /// Custom-VPC subnets built as Kube-OVN 1.12–1.14 builds them: without the per-subnet
    /// `policySrc` route `<cidr>` via its gateway that 1.15 adds (see [`Self::subnet`]). That
    /// route outranks every destination route shorter than the subnet's own prefix (northd ranks
    /// a source /24 at 72, a destination /0 at 1, in 23.03 as in later OVN), so a VPC whose
    /// default route points at a NAT gateway pod sends its subnet's outbound traffic to the
    /// subnet's own gateway address instead: the router asks ARP for its own address, on real
    /// OVN (ovn-trace) as on ovnbpf.
    pub fn without_subnet_source_routes(&mut self) -> &mut Self {
        self.no_subnet_source_routes = true;
        self
    }

    fn add(&mut self, command: &[&str]) -> &mut Self {
        self.commands
            .push(command.iter().map(|s| (*s).to_string()).collect());
        self
    }

    /// The default VPC `ovn-cluster` with `ovn-default` (10.16.0.0/16) and `join` (100.64.0.0/16),
    /// and what kube-ovn-controller writes on it: the static route `0.0.0.0/0` via the join
    /// gateway and, per subnet, an `allow` policy for its CIDR (see [`Self::subnet`]). Nodes'
    /// reroute policies (distributed gateways) are not written here.
    pub fn default_vpc(&mut self) -> Result<&mut Self> {
        self.vpc(DEFAULT_VPC);
        self.subnet(DEFAULT_VPC, DEFAULT_SUBNET.0, DEFAULT_SUBNET.1)?;
        self.subnet(DEFAULT_VPC, JOIN_SUBNET.0, JOIN_SUBNET.1)?;
        let join_gateway = Cidr::parse(JOIN_SUBNET.1)?.host(1);
        Ok(self.static_route(DEFAULT_VPC, "0.0.0.0/0", join_gateway))
    }

    /// A VPC: logical router `<vpc>` (its options are written by [`Self::take_args`]).
    pub fn vpc(&mut self, vpc: &str) -> &mut Self {
        self.created_vpcs.insert(vpc.to_string());
        self.add(&["--may-exist", "lr-add", vpc])
            .add(&["set", "logical_router", vpc, VENDOR])
    }

    /// Whether kube-ovn-controller turns `always_learn_from_arp_request` on for `vpc`: it has a
    /// peering, external access or a U2O subnet.
    fn learns_from_arp_requests(&self, vpc: &str) -> bool {
        self.learning_vpcs.contains(vpc)
            || self
                .subnet_vpcs
                .iter()
                .any(|(subnet, of)| of == vpc && self.underlay_switches.contains(subnet))
    }

    /// The `set logical_router` commands for the router options, as kube-ovn-controller's
    /// `createVpcRouter` writes them on every reconcile: the whole `options` map replaced by
    /// `mac_binding_age_threshold=300`, `dynamic_neigh_routers=true` and, unless the VPC learns
    /// from ARP requests, `always_learn_from_arp_request=false` (when it learns, the key is
    /// absent and northd's default, true, applies).
    fn router_option_commands(&self) -> Vec<Vec<String>> {
        let touched: BTreeSet<&String> =
            self.created_vpcs
                .iter()
                .chain(&self.learning_vpcs)
                .chain(self.subnet_vpcs.iter().filter_map(|(subnet, vpc)| {
                    self.underlay_switches.contains(subnet).then_some(vpc)
                }))
                .collect();
        touched
            .into_iter()
            .map(|vpc| {
                let mut options = vec![
                    format!("mac_binding_age_threshold=\"{MAC_BINDING_AGE_THRESHOLD}\""),
                    "dynamic_neigh_routers=\"true\"".to_string(),
                ];
                if !self.learns_from_arp_requests(vpc) {
                    options.push("always_learn_from_arp_request=\"false\"".to_string());
                }
                vec![
                    "set".to_string(),
                    "logical_router".to_string(),
                    vpc.clone(),
                    format!("options={{{}}}", options.join(",")),
                ]
            })
            .collect()
    }

    /// A VPC with one subnet (the common case in tests).
    pub fn vpc_with_subnet(&mut self, vpc: &str, subnet: &str, cidr: &str) -> Result<&mut Self> {
        self.vpc(vpc).subnet(vpc, subnet, cidr)
    }

    /// A switch `<subnet>` on no router: an underlay subnet without a logical gateway, whose
    /// gateway is on the physical network (give it a [`Self::localnet`] port). Like Kube-OVN,
    /// the switch itself carries only the vendor; its CIDR goes on its localnet port.
    pub fn plain_switch(&mut self, subnet: &str, cidr: &str) -> Result<&mut Self> {
        let cidr = Cidr::parse(cidr)?;
        self.switch_cidrs.insert(subnet.to_string(), cidr);
        Ok(self.add(&["--may-exist", "ls-add", subnet]).add(&[
            "set",
            "logical_switch",
            subnet,
            VENDOR,
        ]))
    }

    /// A subnet of `vpc`: switch `<subnet>` linked to the router with gateway = first address.
    /// Kube-OVN also keeps traffic to the subnet on its route, in the default VPC and in custom
    /// ones alike: a priority 31000 `allow` policy `ip4.dst == <cidr>` (`addCommonRoutesForSubnet`,
    /// from `reconcileOvnDefaultVpcRoute` and `reconcileCustomVpcStaticRoute`). In a custom VPC
    /// it adds the `policySrc` route `<cidr>` via the gateway (`addCustomVPCStaticRouteForSubnet`,
    /// since Kube-OVN 1.15: every subnet of a custom VPC, overlay or U2O).
    ///
    /// A dual-stack subnet's `cidr` is Kube-OVN's `cidrBlock` "IPv4 CIDR,IPv6 CIDR": the router
    /// port gets both gateways ("10.0.1.1/24 fd00:10:1::1/64", as `CreateLogicalPatchPort`
    /// writes them), and the allow policy and the source route come per family
    /// (`ip6.dst == <cidr6>`, `<cidr6>` via the IPv6 gateway).
    pub fn subnet(&mut self, vpc: &str, subnet: &str, cidr: &str) -> Result<&mut Self> {
        let (cidr, cidr6) = match cidr.split_once(',') {
            Some((cidr, cidr6)) => (cidr, Some(Cidr6::parse(cidr6)?)),
            None => (cidr, None),
        };
        self.plain_switch(subnet, cidr)?;
        let cidr = Cidr::parse(cidr)?;
        self.subnet_vpcs.insert(subnet.to_string(), vpc.to_string());
        let router_port = format!("{vpc}-{subnet}");
        let switch_port = format!("{subnet}-{vpc}");
        let gateway = format!("{}/{}", cidr.host(1), cidr.len);
        let gateway6 = cidr6.map(|cidr6| format!("{}/{}", cidr6.host(1), cidr6.len));
        let router_port_option = format!("router-port={router_port}");
        let mac = mac_for(&router_port);
        let mut lrp_add = vec!["--may-exist", "lrp-add", vpc, &router_port, &mac, &gateway];
        lrp_add.extend(gateway6.as_deref());
        self.add(&lrp_add)
            .add(&["--may-exist", "lsp-add", subnet, &switch_port])
            .add(&["lsp-set-type", &switch_port, "router"])
            .add(&["lsp-set-addresses", &switch_port, "router"])
            .add(&["lsp-set-options", &switch_port, &router_port_option])
            .add(&["set", "logical_switch_port", &switch_port, VENDOR])
            .subnet_policy(vpc, cidr);
        if vpc != DEFAULT_VPC && !self.no_subnet_source_routes {
            self.source_route(vpc, &cidr.to_string(), cidr.host(1));
        }
        if let Some(cidr6) = cidr6 {
            let match_ = format!("ip6.dst == {cidr6}");
            self.policy(vpc, Self::SUBNET_ALLOW_PRIORITY, &match_, "allow", None);
            if vpc != DEFAULT_VPC && !self.no_subnet_source_routes {
                self.add(&[
                    "--may-exist",
                    "--policy=src-ip",
                    "lr-route-add",
                    vpc,
                    &cidr6.to_string(),
                    &cidr6.host(1).to_string(),
                ]);
            }
        }
        Ok(self)
    }

    /// Router advertisements on dual-stack subnet `subnet` of `vpc` (`spec.enableIPv6RA`), as
    /// kube-ovn-controller's `UpdateLogicalRouterPortRA` writes them on the router port:
    /// `ipv6_ra_configs` from `configs` (the subnet's `ipv6RAConfigs`, "key=value,…"; empty:
    /// Kube-OVN's default, stateful DHCPv6 sent every 5 to 30 s) and `ipv6_prefix`, the
    /// network's prefix length.
    pub fn ipv6_router_advertisements(
        &mut self,
        vpc: &str,
        subnet: &str,
        length: u8,
        configs: &str,
    ) -> &mut Self {
        let configs = if configs.is_empty() {
            "address_mode=dhcpv6_stateful,max_interval=30,min_interval=5,send_periodic=true"
        } else {
            configs
        };
        let router_port = format!("{vpc}-{subnet}");
        let mut command = vec!["set".to_string(), "logical_router_port".into(), router_port];
        command.extend(
            configs
                .split(',')
                .map(|pair| format!("ipv6_ra_configs:{pair}")),
        );
        command.push(format!("ipv6_prefix=\"{length}\""));
        self.commands.push(command);
        self
    }

    /// Deletes subnet `subnet` (`cidr`) of `vpc` with what [`Self::subnet`] wrote for it: the
    /// switch (and its ports), the router port, the allow policy and, in a custom VPC, the
    /// source route, as kube-ovn-controller's subnet deletion does.
    pub fn remove_subnet(&mut self, vpc: &str, subnet: &str, cidr: &str) -> Result<&mut Self> {
        let cidr = Cidr::parse(cidr)?;
        let priority = Self::SUBNET_ALLOW_PRIORITY.to_string();
        let match_ = format!("ip4.dst == {cidr}");
        let cidr_text = cidr.to_string();
        self.add(&["--if-exists", "ls-del", subnet])
            .add(&["--if-exists", "lrp-del", &format!("{vpc}-{subnet}")])
            .add(&["--if-exists", "lr-policy-del", vpc, &priority, &match_]);
        if vpc != DEFAULT_VPC {
            self.add(&[
                "--if-exists",
                "--policy=src-ip",
                "lr-route-del",
                vpc,
                &cidr_text,
            ]);
        }
        Ok(self)
    }

    /// Kube-OVN's priority of the per-subnet `allow` policies (`SubnetRouterPolicyPriority`).
    const SUBNET_ALLOW_PRIORITY: u16 = 31000;

    fn subnet_policy(&mut self, vpc: &str, cidr: Cidr) -> &mut Self {
        let match_ = format!("ip4.dst == {cidr}");
        self.policy(vpc, Self::SUBNET_ALLOW_PRIORITY, &match_, "allow", None)
    }

    /// A pod: LSP `<pod>.<namespace>` on `subnet` with addresses "MAC IP" and the
    /// `external_ids` of [`pod_external_ids`].
    pub fn pod(
        &mut self,
        subnet: &str,
        pod: &str,
        namespace: &str,
        mac: &str,
        ip: Ipv4Addr,
    ) -> &mut Self {
        self.pod_with_addresses(subnet, pod, namespace, mac, &ip.to_string())
    }

    /// A pod of a dual-stack subnet: addresses "MAC IPv4 IPv6", `external_ids:ip` "IPv4,IPv6"
    /// (Kube-OVN's `ip_address` annotation).
    pub fn dual_stack_pod(
        &mut self,
        subnet: &str,
        pod: &str,
        namespace: &str,
        mac: &str,
        ips: (Ipv4Addr, Ipv6Addr),
    ) -> &mut Self {
        let ips = format!("{} {}", ips.0, ips.1);
        self.pod_with_addresses(subnet, pod, namespace, mac, &ips)
    }

    /// `ips`: the pod's addresses, space-separated.
    fn pod_with_addresses(
        &mut self,
        subnet: &str,
        pod: &str,
        namespace: &str,
        mac: &str,
        ips: &str,
    ) -> &mut Self {
        let port = pod_port_name(pod, namespace);
        let addresses = format!("{mac} {ips}");
        let mut command = vec![
            "set".to_string(),
            "logical_switch_port".to_string(),
            port.clone(),
        ];
        command.extend(
            pod_external_ids(subnet, pod, namespace, ips.replace(' ', ","))
                .iter()
                .map(|(key, value)| format!("external_ids:{key}={value}")),
        );
        self.add(&["--may-exist", "lsp-add", subnet, &port]).add(&[
            "lsp-set-addresses",
            &port,
            &addresses,
        ]);
        self.commands.push(command);
        self
    }

    /// Deletes pod `<pod>.<namespace>`'s logical port, as kube-ovn-controller does when the pod
    /// goes (its port groups lose it with it).
    pub fn remove_pod(&mut self, pod: &str, namespace: &str) -> &mut Self {
        let port = pod_port_name(pod, namespace);
        self.add(&["--if-exists", "lsp-del", &port])
    }

    /// An underlay subnet's uplink, as Kube-OVN creates it: LSP `localnet.<subnet>` of type
    /// localnet with addresses "unknown", bound to the provider network `provider`, tagged with
    /// `vlan` (0 = untagged), with the subnet's CIDR as `external_ids:ipv4_network` (when the
    /// switch was created by this topology).
    pub fn localnet(&mut self, subnet: &str, provider: &str, vlan: u16) -> &mut Self {
        self.underlay_switches.insert(subnet.to_string());
        if let Some(cidr) = self.switch_cidrs.get(subnet) {
            let network = format!("external_ids:ipv4_network={cidr}");
            let port = format!("localnet.{subnet}");
            self.add(&["--may-exist", "lsp-add", subnet, &port]).add(&[
                "set",
                "logical_switch_port",
                &port,
                &network,
            ]);
        }
        let port = format!("localnet.{subnet}");
        let network = format!("network_name={provider}");
        self.add(&["--may-exist", "lsp-add", subnet, &port])
            .add(&["lsp-set-type", &port, "localnet"])
            .add(&["lsp-set-addresses", &port, "unknown"])
            .add(&["lsp-set-options", &port, &network])
            .add(&["set", "logical_switch_port", &port, VENDOR]);
        if vlan != 0 {
            let tag = format!("tag={vlan}");
            self.add(&["set", "logical_switch_port", &port, &tag]);
        }
        self
    }

    /// A node's port on `join`: LSP `node-<node>`, and the node's port group `node.<node>`
    /// (every `-` of the name a `.`) holding it, as kube-ovn-controller's `handleAddNode` makes
    /// them. The port group is created here, so a node is added by one topology only.
    pub fn node_port(&mut self, node: &str, mac: &str, ip: Ipv4Addr) -> &mut Self {
        let port = format!("node-{node}");
        let addresses = format!("{mac} {ip}");
        let node_id = format!("external_ids:node={node}");
        let group = format!("node.{}", node.replace('-', "."));
        let group_ids = format!("external_ids:node={node}");
        self.add(&["--may-exist", "lsp-add", JOIN_SUBNET.0, &port])
            .add(&["lsp-set-addresses", &port, &addresses])
            .add(&["set", "logical_switch_port", &port, VENDOR, &node_id])
            .add(&["pg-add", &group, &port])
            .add(&["set", "port_group", &group, VENDOR, &group_ids])
    }

    /// Kube-OVN's priority of a node's reroute policy (`NodeRouterPolicyPriority`).
    pub const NODE_POLICY_PRIORITY: u16 = 30000;
    /// Kube-OVN's priority of the distributed gateways' reroutes (`GatewayRouterPolicyPriority`).
    pub const GATEWAY_POLICY_PRIORITY: u16 = 29000;

    /// What kube-ovn-controller's `handleAddNode` adds to the default VPC for a node beside its
    /// join port ([`Self::node_port`]): the priority-30000 policy that reroutes traffic to the
    /// node's InternalIP `node_ip` to its join IP `join_ip` (replies to kubelet's probes).
    pub fn node_policy(&mut self, node_ip: Ipv4Addr, join_ip: Ipv4Addr) -> &mut Self {
        let match_ = format!("ip4.dst == {node_ip}");
        self.policy(
            DEFAULT_VPC,
            Self::NODE_POLICY_PRIORITY,
            &match_,
            "reroute",
            Some(join_ip),
        )
    }

    /// The port group of `subnet`'s pods on `node`, as `createPortGroupForDistributedSubnet`
    /// names it (`<subnet>.<node>`, every `-` a `.`).
    #[must_use]
    pub fn node_pods_group(subnet: &str, node: &str) -> String {
        format!("{subnet}.{node}").replace('-', ".")
    }

    /// A distributed gateway for default-VPC subnet `subnet` on `node`, as kube-ovn-controller
    /// makes it: the port group of the subnet's pods on the node ([`Self::node_pods_group`]) and
    /// the priority-29000 policy that reroutes traffic from its address set
    /// (`$<group>_ip4`, which northd derives from the group) to the node's join IP.
    pub fn distributed_gateway(
        &mut self,
        subnet: &str,
        node: &str,
        join_ip: Ipv4Addr,
    ) -> &mut Self {
        let group = Self::node_pods_group(subnet, node);
        let ids = [
            format!("external_ids:subnet={subnet}"),
            format!("external_ids:node={node}"),
            format!("external_ids:np=\"{subnet}/{node}\""),
        ];
        let match_ = format!("ip4.src == ${group}_ip4");
        self.add(&["pg-add", &group])
            .add(&[
                "set",
                "port_group",
                &group,
                VENDOR,
                &ids[0],
                &ids[1],
                &ids[2],
            ])
            .policy(
                DEFAULT_VPC,
                Self::GATEWAY_POLICY_PRIORITY,
                &match_,
                "reroute",
                Some(join_ip),
            )
    }

    /// A centralized gateway for default-VPC subnet `cidr`, as kube-ovn-controller's
    /// `updatePolicyRouteForCentralizedSubnet` makes it: the priority-29000 policy that
    /// reroutes traffic from the subnet to the gateway nodes' join IPs, several of them with
    /// `enableEcmp` (an ECMP reroute).
    pub fn centralized_gateway(&mut self, cidr: &str, gateways: &[Ipv4Addr]) -> &mut Self {
        let priority = Self::GATEWAY_POLICY_PRIORITY.to_string();
        let match_ = format!("ip4.src == {cidr}");
        let nexthops: Vec<String> = gateways.iter().map(Ipv4Addr::to_string).collect();
        let nexthops = nexthops.join(",");
        self.add(&[
            "--may-exist",
            "lr-policy-add",
            DEFAULT_VPC,
            &priority,
            &match_,
            "reroute",
            &nexthops,
        ])
    }

    /// Subnet `subnet` (`cidr`) of custom VPC `vpc` routed with route table `table`
    /// (`Subnet.spec.routeTable`): kube-ovn-controller sets the router port's
    /// `options:route_table` and puts the subnet's `policySrc` route into that table.
    pub fn subnet_route_table(
        &mut self,
        vpc: &str,
        subnet: &str,
        cidr: &str,
        table: &str,
    ) -> Result<&mut Self> {
        let cidr = Cidr::parse(cidr)?;
        let option = format!("options:route_table={table}");
        let route_table = format!("--route-table={table}");
        let (prefix, gateway) = (cidr.to_string(), cidr.host(1).to_string());
        Ok(self
            .add(&[
                "set",
                "logical_router_port",
                &format!("{vpc}-{subnet}"),
                &option,
            ])
            .add(&[
                "--if-exists",
                "--policy=src-ip",
                "lr-route-del",
                vpc,
                &prefix,
            ])
            .add(&[
                "--may-exist",
                &route_table,
                "--policy=src-ip",
                "lr-route-add",
                vpc,
                &prefix,
                &gateway,
            ]))
    }

    /// A discard (blackhole) route: what it routes is dropped (`lr-route-add … discard`).
    pub fn discard_route(&mut self, vpc: &str, prefix: &str) -> &mut Self {
        self.add(&["--may-exist", "lr-route-add", vpc, prefix, "discard"])
    }

    /// A static route of VPC `vpc`'s route table `table` (`Vpc.spec.staticRoutes[].routeTable`).
    pub fn table_route(
        &mut self,
        vpc: &str,
        table: &str,
        prefix: &str,
        nexthop: Ipv4Addr,
    ) -> &mut Self {
        let route_table = format!("--route-table={table}");
        self.add(&[
            "--may-exist",
            &route_table,
            "lr-route-add",
            vpc,
            prefix,
            &nexthop.to_string(),
        ])
    }

    /// One of several static routes to `prefix` (`lr-route-add --ecmp`): with more than one
    /// next hop, northd makes them an ECMP group (Kube-OVN's VPC static routes with several
    /// next hops for one CIDR).
    pub fn ecmp_route(
        &mut self,
        vpc: &str,
        prefix: &str,
        nexthop: impl Into<std::net::IpAddr>,
    ) -> &mut Self {
        let nexthop = nexthop.into();
        self.add(&["--ecmp", "lr-route-add", vpc, prefix, &nexthop.to_string()])
    }

    /// Pod `<pod>.<namespace>` of `subnet` scheduled on `node`: kube-ovn-controller adds its
    /// port to the node's group of the subnet's pods (`PortGroupAddPorts`), so that the
    /// distributed gateway's address set holds its IP.
    pub fn pod_on_node(
        &mut self,
        subnet: &str,
        pod: &str,
        namespace: &str,
        node: &str,
    ) -> &mut Self {
        let port = pod_port_name(pod, namespace);
        let id = format!("--id=@{}", port.replace(['.', '-'], "_"));
        let reference = &id["--id=".len()..].to_string();
        let group = Self::node_pods_group(subnet, node);
        self.add(&[&id, "get", "logical_switch_port", &port, "_uuid"])
            .add(&["add", "port_group", &group, "ports", reference])
    }

    /// A router policy, as Kube-OVN writes them: `action` is allow, drop or reroute (with
    /// `nexthop`).
    pub fn policy(
        &mut self,
        vpc: &str,
        priority: u16,
        match_: &str,
        action: &str,
        nexthop: Option<Ipv4Addr>,
    ) -> &mut Self {
        let priority = priority.to_string();
        let mut args = vec![
            "--may-exist",
            "lr-policy-add",
            vpc,
            &priority,
            match_,
            action,
        ];
        let nexthop = nexthop.map(|ip| ip.to_string());
        if let Some(nexthop) = &nexthop {
            args.push(nexthop);
        }
        self.add(&args)
    }

    /// A `src-ip` static route (Kube-OVN's `policySrc`): packets from `prefix` via `nexthop`.
    pub fn source_route(&mut self, vpc: &str, prefix: &str, nexthop: Ipv4Addr) -> &mut Self {
        self.add(&[
            "--may-exist",
            "--policy=src-ip",
            "lr-route-add",
            vpc,
            prefix,
            &nexthop.to_string(),
        ])
    }

    /// A VPC static route `prefix` via `nexthop` (either family: `IpAddr`, or an `Ipv4Addr` or
    /// `Ipv6Addr`).
    pub fn static_route(
        &mut self,
        vpc: &str,
        prefix: &str,
        nexthop: impl Into<std::net::IpAddr>,
    ) -> &mut Self {
        self.add(&[
            "--may-exist",
            "lr-route-add",
            vpc,
            prefix,
            &nexthop.into().to_string(),
        ])
    }

    /// The two peered VPCs many tests share: vpc-a (subnet-a, `a_cidr`) and vpc-b (subnet-b,
    /// [`PEERED_B_CIDR`]), peered over 10.0.255.0/30 (vpc-a .1, vpc-b .2), and in each VPC of
    /// `routes_from` a static route to the other VPC's subnet via its side of the peering.
    pub fn peered_vpcs(&mut self, a_cidr: &str, routes_from: &[&str]) -> Result<&mut Self> {
        self.vpc_with_subnet("vpc-a", "subnet-a", a_cidr)?
            .vpc_with_subnet("vpc-b", "subnet-b", PEERED_B_CIDR)?
            .peering("vpc-a", "10.0.255.1/30", "vpc-b", "10.0.255.2/30");
        for vpc in routes_from {
            match *vpc {
                "vpc-a" => self.static_route("vpc-a", PEERED_B_CIDR, Ipv4Addr::new(10, 0, 255, 2)),
                "vpc-b" => self.static_route("vpc-b", a_cidr, Ipv4Addr::new(10, 0, 255, 1)),
                other => bail!("{other} is not one of the peered VPCs"),
            };
        }
        Ok(self)
    }

    /// A VPC peering: router ports `<a>-<b>` (address `a_ip`, e.g. 10.0.255.1/30, or both
    /// families comma-separated as Kube-OVN's `localConnectIP`, each a network of the port) and
    /// `<b>-<a>`, each the other's peer. Like Kube-OVN, routes over the peering are separate
    /// static routes, and both routers learn from ARP requests (no
    /// `always_learn_from_arp_request=false`).
    pub fn peering(&mut self, a: &str, a_ip: &str, b: &str, b_ip: &str) -> &mut Self {
        self.learning_vpcs.insert(a.to_string());
        self.learning_vpcs.insert(b.to_string());
        let a_port = format!("{a}-{b}");
        let b_port = format!("{b}-{a}");
        let a_peer = format!("peer={b_port}");
        let b_peer = format!("peer={a_port}");
        let (a_mac, b_mac) = (mac_for(&a_port), mac_for(&b_port));
        let mut a_args = vec!["--may-exist", "lrp-add", a, &a_port, &a_mac];
        a_args.extend(a_ip.split(','));
        a_args.push(&a_peer);
        let mut b_args = vec!["--may-exist", "lrp-add", b, &b_port, &b_mac];
        b_args.extend(b_ip.split(','));
        b_args.push(&b_peer);
        self.add(&a_args).add(&b_args)
    }

    /// External access for `vpc`, as Kube-OVN's OVN-native EIP/SNAT gives it: router port
    /// `port` with address `network` (e.g. 172.20.0.1/24), bound to gateway chassis `chassis`.
    /// The VPC then learns from ARP requests.
    pub fn gateway_port(
        &mut self,
        vpc: &str,
        port: &str,
        network: &str,
        chassis: &str,
    ) -> &mut Self {
        self.learning_vpcs.insert(vpc.to_string());
        self.add(&["--may-exist", "lrp-add", vpc, port, &mac_for(port), network])
            .add(&["lrp-set-gateway-chassis", port, chassis, "10"])
    }

    /// A custom VPC's external access as kube-ovn-controller 1.13 gives it (`spec.enableExternal`,
    /// `handleAddVpcExternalSubnet`) on the underlay subnet `external` (a switch with a
    /// localnet port, see [`Self::plain_switch`] and [`Self::localnet`]): router port
    /// `<vpc>-<external>` with `network` (its OvnEip of type lrp, e.g. 172.30.0.10/24), switch
    /// port `<external>-<vpc>` of type router, and a Gateway_Chassis per chassis of `gateways`
    /// (the nodes labelled `ovn.kubernetes.io/external-gw=true`), priorities 100, 99, … in their
    /// order. The VPC then learns from ARP requests.
    pub fn external_access(
        &mut self,
        vpc: &str,
        external: &str,
        network: &str,
        gateways: &[&str],
    ) -> &mut Self {
        self.learning_vpcs.insert(vpc.to_string());
        let router_port = format!("{vpc}-{external}");
        let switch_port = format!("{external}-{vpc}");
        let router_port_option = format!("router-port={router_port}");
        let (lr, ls) = (
            format!("external_ids:lr={vpc}"),
            format!("external_ids:ls={external}"),
        );
        self.add(&[
            "--may-exist",
            "lrp-add",
            vpc,
            &router_port,
            &mac_for(&router_port),
            network,
        ])
        .add(&["set", "logical_router_port", &router_port, &lr, VENDOR])
        .add(&["--may-exist", "lsp-add", external, &switch_port])
        .add(&["lsp-set-type", &switch_port, "router"])
        .add(&["lsp-set-addresses", &switch_port, "router"])
        .add(&["lsp-set-options", &switch_port, &router_port_option])
        .add(&["set", "logical_switch_port", &switch_port, &ls, VENDOR]);
        for (index, chassis) in gateways.iter().enumerate() {
            let priority = (100 - index).to_string();
            self.add(&["lrp-set-gateway-chassis", &router_port, chassis, &priority]);
        }
        self
    }

    /// A distributed FIP on router `vpc` (an `OvnFip` naming the pod's IP CR): `dnat_and_snat`
    /// from `external` to the pod's `logical` IP, with the pod's port and MAC as `logical_port`
    /// and `external_mac` (Kube-OVN also writes `options:staleless=false`, a misspelling OVN
    /// ignores, left out here).
    pub fn distributed_fip(
        &mut self,
        vpc: &str,
        external: &str,
        logical: Ipv4Addr,
        port: &str,
        mac: &str,
    ) -> &mut Self {
        let logical = logical.to_string();
        self.add(&[
            "--may-exist",
            "lr-nat-add",
            vpc,
            "dnat_and_snat",
            external,
            &logical,
            port,
            mac,
        ])
    }

    /// Port security on a pod's LSP (Kube-OVN's `ovn.kubernetes.io/port_security` annotation):
    /// `entry` is "MAC IP…".
    pub fn port_security(&mut self, port: &str, entry: &str) -> &mut Self {
        self.add(&["lsp-set-port-security", port, entry])
    }

    /// The chassis a pod's LSP is bound on (`options:requested-chassis`, the pod's node; a
    /// KubeVirt live migration names the target this way).
    pub fn requested_chassis(&mut self, port: &str, chassis: &str) -> &mut Self {
        let option = format!("requested-chassis={chassis}");
        self.add(&["lsp-set-options", port, &option])
    }

    /// A port group holding `ports` (Kube-OVN's NetworkPolicy groups `<policy>.<namespace>`).
    pub fn port_group(&mut self, name: &str, ports: &[&str]) -> &mut Self {
        let mut command = vec!["pg-add", name];
        command.extend_from_slice(ports);
        self.add(&command).add(&["set", "port_group", name, VENDOR])
    }

    /// An address set (a NetworkPolicy peer's addresses, `<group>.<direction>…ipv4`).
    pub fn address_set(&mut self, name: &str, addresses: &[&str]) -> &mut Self {
        let name = format!("name={name}");
        let quoted: Vec<String> = addresses.iter().map(|a| format!("\"{a}\"")).collect();
        let addresses = format!("addresses={}", quoted.join(","));
        self.add(&["create", "address_set", &name, &addresses, VENDOR])
    }

    /// An ACL on a switch or a port group (`entity`), `direction` `from-lport` or `to-lport`.
    /// Not yet the exact rows Kube-OVN's NetworkPolicy controller writes (names, tiers, the
    /// default-deny pair): the ACL issue brings those.
    pub fn acl(
        &mut self,
        entity: &str,
        direction: &str,
        priority: u16,
        match_: &str,
        action: &str,
    ) -> &mut Self {
        let priority = priority.to_string();
        self.add(&["acl-add", entity, direction, &priority, match_, action])
    }

    /// A Kubernetes NetworkPolicy `name` in `namespace` selecting the pods whose ports are
    /// `ports`, as kube-ovn-controller's `handleUpdateNp` writes it for IPv4: the port group
    /// `<name>.<namespace>` (every `-` a `.`); for ingress, the priority-2000 default drop
    /// `outport == @<group> && ip` and, per rule `idx`, the address sets
    /// `<group>.ingress.allow.IPv4.<idx>` / `….except.…` and one allow-related ACL at 2001 per
    /// port (`outport == @<group> && ip && ip4.src == $allow && ip4.src != $except[ && tcp.dst
    /// == 80]`); for egress the same with `inport`, `ip4.dst` and `apply-after-lb`. `None`: the
    /// policy has no rules of that direction (no default drop either).
    pub fn network_policy(
        &mut self,
        name: &str,
        namespace: &str,
        ports: &[&str],
        ingress: Option<&[PolicyRule<'_>]>,
        egress: Option<&[PolicyRule<'_>]>,
    ) -> &mut Self {
        self.logged_network_policy(name, namespace, ports, ingress, egress, PolicyLog::Off)
    }

    /// [`Self::network_policy`] with Kube-OVN's log annotations: `ovn.kubernetes.io/enable_log:
    /// "true"` logs the default drops (`log=true`, severity warning), and
    /// `ovn.kubernetes.io/log_acl_actions: "allow,drop"` the allow ACLs too (`log=true`, no
    /// severity: northd's default, info).
    pub fn logged_network_policy(
        &mut self,
        name: &str,
        namespace: &str,
        ports: &[&str],
        ingress: Option<&[PolicyRule<'_>]>,
        egress: Option<&[PolicyRule<'_>]>,
        log: PolicyLog,
    ) -> &mut Self {
        let drop_log = (log != PolicyLog::Off).then_some(Some("warning"));
        let allow_log = (log == PolicyLog::AllowAndDrop).then_some(None);
        let group = format!("{name}.{namespace}").replace('-', ".");
        let policy_id = format!("external_ids:np=\"{namespace}/{name}\"");
        let mut command = vec!["pg-add", group.as_str()];
        command.extend_from_slice(ports);
        self.add(&command)
            .add(&["set", "port_group", &group, VENDOR, &policy_id]);
        for (direction, rules) in [("ingress", ingress), ("egress", egress)] {
            let Some(rules) = rules else {
                continue;
            };
            let (acl_direction, port, address) = if direction == "ingress" {
                ("to-lport", "outport", "ip4.src")
            } else {
                ("from-lport", "inport", "ip4.dst")
            };
            let key = format!("{namespace}/{name}");
            let all_ip = format!("{port} == @{group} && ip");
            self.port_group_acl(
                acl_direction,
                &group,
                (2000, &all_ip, "drop"),
                Some(&key),
                drop_log,
            );
            for (idx, rule) in rules.iter().enumerate() {
                let allow = format!("{group}.{direction}.allow.IPv4.{idx}");
                let except = format!("{group}.{direction}.except.IPv4.{idx}");
                let set_id = format!("external_ids:np=\"{namespace}/{name}/{direction}\"");
                for (set, addresses) in [(&allow, rule.allow), (&except, rule.except)] {
                    let set_name = format!("name={set}");
                    let quoted: Vec<String> =
                        addresses.iter().map(|a| format!("\"{a}\"")).collect();
                    let members = format!("addresses={}", quoted.join(","));
                    let mut create = vec!["create", "address_set", &set_name, VENDOR, &set_id];
                    if !addresses.is_empty() {
                        create.push(&members);
                    }
                    self.add(&create);
                }
                let allowed =
                    format!("{all_ip} && {address} == ${allow} && {address} != ${except}");
                let acl_name = format!("np/{group}/{direction}/IPv4/{idx}");
                let matches: Vec<String> = if rule.ports.is_empty() {
                    vec![allowed]
                } else {
                    rule.ports
                        .iter()
                        .map(|port| match port {
                            PolicyPort::Protocol(protocol) => format!("{allowed} && {protocol}"),
                            PolicyPort::Port(protocol, number) => {
                                format!("{allowed} && {protocol}.dst == {number}")
                            }
                            PolicyPort::Range(protocol, low, high) => {
                                format!("{allowed} && {low} <= {protocol}.dst <= {high}")
                            }
                        })
                        .collect()
                };
                for match_ in matches {
                    self.port_group_acl(
                        acl_direction,
                        &group,
                        (2001, &match_, "allow-related"),
                        Some(&acl_name),
                        allow_log,
                    );
                }
            }
        }
        self
    }

    /// One ACL of port group `group` as kube-ovn-controller writes it (a row of its own, not
    /// `acl-add`, which would turn logging on with the name): (priority, match, action), `name`
    /// (none for the node's), `external_ids` parent and vendor, from-lport ones applied after
    /// the load balancers (`apply-after-lb`); `log`: logged, with the severity if one is set.
    fn port_group_acl(
        &mut self,
        direction: &str,
        group: &str,
        (priority, match_, action): (u16, &str, &str),
        name: Option<&str>,
        log: Option<Option<&str>>,
    ) -> &mut Self {
        let id = format!("@acl{}", self.commands.len());
        let mut row = vec![
            format!("--id={id}"),
            "create".into(),
            "acl".into(),
            format!("direction={direction}"),
            format!("priority={priority}"),
            format!("match=\"{}\"", match_.replace('"', "\\\"")),
            format!("action={action}"),
            format!("external_ids:parent={group}"),
            VENDOR.into(),
        ];
        if let Some(name) = name {
            row.push(format!("name=\"{name}\""));
        }
        if direction == "from-lport" {
            row.push("options:apply-after-lb=true".into());
        }
        if let Some(severity) = log {
            row.push("log=true".into());
            if let Some(severity) = severity {
                row.push(format!("severity={severity}"));
            }
        }
        self.commands.push(row);
        self.add(&["add", "port_group", group, "acls", &id])
    }

    /// A subnet's `spec.acls` as kube-ovn-controller's `UpdateLogicalSwitchACL` writes them:
    /// ACL rows of the logical switch `subnet` (direction, priority, match and action as the
    /// user wrote them), `external_ids` parent, vendor and `subnet=<subnet>`, no name and no
    /// `apply-after-lb`.
    pub fn subnet_acls(&mut self, subnet: &str, acls: &[SubnetAcl<'_>]) -> &mut Self {
        for acl in acls {
            let id = format!("@acl{}", self.commands.len());
            self.commands.push(vec![
                format!("--id={id}"),
                "create".into(),
                "acl".into(),
                format!("direction={}", acl.direction),
                format!("priority={}", acl.priority),
                format!("match=\"{}\"", acl.match_.replace('"', "\\\"")),
                format!("action={}", acl.action),
                format!("external_ids:parent={subnet}"),
                VENDOR.into(),
                format!("external_ids:subnet={subnet}"),
            ]);
            self.add(&["add", "logical_switch", subnet, "acls", &id]);
        }
        self
    }

    /// What kube-ovn-controller's `handleUpdateNode` writes for `node` once NetworkPolicies
    /// exist: its port group `node.<node>` holds the node's pods (`ports`), and two
    /// priority-3000 allow-related ACLs let the node (`node_ip`) reach them and them answer
    /// (kubelet's probes): `ip4.src == <node_ip> && ip4.dst == $node.<node>_ip4` to-lport and
    /// its mirror from-lport (after the load balancers).
    pub fn node_acls(&mut self, node: &str, node_ip: Ipv4Addr, ports: &[&str]) -> &mut Self {
        let group = format!("node.{}", node.replace('-', "."));
        let mut command = vec!["pg-set-ports", group.as_str()];
        command.extend_from_slice(ports);
        self.add(&command);
        let to_pods = format!("ip4.src == {node_ip} && ip4.dst == ${group}_ip4");
        let from_pods = format!("ip4.dst == {node_ip} && ip4.src == ${group}_ip4");
        self.port_group_acl(
            "to-lport",
            &group,
            (3000, &to_pods, "allow-related"),
            None,
            None,
        )
        .port_group_acl(
            "from-lport",
            &group,
            (3000, &from_pods, "allow-related"),
            None,
            None,
        )
    }

    /// A load balancer `name` for `vip` ("IP:port") with `backends` ("IP:port,…"), as Kube-OVN
    /// writes a Service's (`protocol` tcp or udp).
    pub fn load_balancer(
        &mut self,
        name: &str,
        vip: &str,
        backends: &str,
        protocol: &str,
    ) -> &mut Self {
        self.add(&["--may-exist", "lb-add", name, vip, backends, protocol])
    }

    /// The name of the load balancer kube-ovn-controller keeps `vpc`'s Services of `protocol`
    /// in (tcp, udp; `GenVpcLoadBalancer`): `cluster-<protocol>-loadbalancer` in the default
    /// VPC, `vpc-<vpc>-<protocol>-load` in a custom one.
    #[must_use]
    pub fn service_load_balancer(vpc: &str, protocol: &str) -> String {
        if vpc == DEFAULT_VPC {
            format!("cluster-{protocol}-loadbalancer")
        } else {
            format!("vpc-{vpc}-{protocol}-load")
        }
    }

    /// A Service's port as kube-ovn-controller writes it from its EndpointSlice
    /// (`handleUpdateEndpointSlice`): VIP `vip` ("ClusterIP:port") → `backends` ("IP:port,…",
    /// sorted) in `vpc`'s balancer for `protocol`, which is attached to each of `subnets`
    /// (Kube-OVN attaches its VPC's balancers to every subnet with `enableLb`). Written again
    /// with other backends, the VIP's backends are replaced.
    pub fn service(
        &mut self,
        vpc: &str,
        subnets: &[&str],
        protocol: &str,
        vip: &str,
        backends: &str,
    ) -> &mut Self {
        let name = Self::service_load_balancer(vpc, protocol);
        self.balancer_vip(&name, subnets, protocol, vip, backends, &[])
    }

    /// A SwitchLBRule's Service port with health checks, as kube-ovn-controller writes it
    /// (`handleUpdateEndpoint`, release-1.13; only Services with the `switch_lb_vip`
    /// annotation, i.e. SwitchLBRules, get them): the VIP as [`Self::service`] writes it, an
    /// `ip_port_mappings` entry per backend, `"<ip>" = "<pod>.<ns>:<check ip>"` (the check IP is
    /// the backend subnet's `Vip` reservation), and a `Load_Balancer_Health_Check` for the VIP
    /// (`newLoadBalancerHealthCheck`: interval 5, timeout 20, success and failure counts 3,
    /// `external_ids:switch_lb_subnet`) in the balancer's `health_check`. `backends` are
    /// ("IP:port", logical port). The health check is created once per VIP, as Kube-OVN does.
    pub fn health_checked_service(
        &mut self,
        vpc: &str,
        subnets: &[&str],
        protocol: &str,
        vip: &str,
        backends: &[(&str, &str)],
        check: (&str, &str),
    ) -> &mut Self {
        let (subnet, check_ip) = check;
        let name = Self::service_load_balancer(vpc, protocol);
        let list: Vec<&str> = backends.iter().map(|(backend, _)| *backend).collect();
        self.balancer_vip(&name, subnets, protocol, vip, &list.join(","), &[]);
        for (backend, port) in backends {
            let ip = backend.rsplit_once(':').map_or(*backend, |(ip, _)| ip);
            let mapping = format!("ip_port_mappings:\"{ip}\"=\"{port}:{check_ip}\"");
            self.add(&["set", "load_balancer", &name, &mapping]);
        }
        let vip_column = format!("vip=\"{vip}\"");
        let subnet_id = format!("external_ids:switch_lb_subnet={subnet}");
        self.add(&[
            "--id=@hc",
            "create",
            "Load_Balancer_Health_Check",
            &vip_column,
            "options:interval=5",
            "options:timeout=20",
            "options:success_count=3",
            "options:failure_count=3",
            &subnet_id,
        ])
        .add(&["add", "load_balancer", &name, "health_check", "@hc"])
    }

    /// [`Self::service`] for a Service with `sessionAffinity: ClientIP`: its VIP goes to the
    /// VPC's session balancer (`vpc-<vpc>-<protocol>-sess-load`, in the default VPC
    /// `cluster-<protocol>-session-loadbalancer`), which kube-ovn-controller creates with
    /// `selection_fields=ip_src` and `options:affinity_timeout=10800` (`CreateLoadBalancer`,
    /// `SetLoadBalancerAffinityTimeout`; the Service's own timeout is not used).
    pub fn session_service(
        &mut self,
        vpc: &str,
        subnets: &[&str],
        protocol: &str,
        vip: &str,
        backends: &str,
    ) -> &mut Self {
        let name = if vpc == DEFAULT_VPC {
            format!("cluster-{protocol}-session-loadbalancer")
        } else {
            format!("vpc-{vpc}-{protocol}-sess-load")
        };
        let session = ["selection_fields=ip_src", "options:affinity_timeout=10800"];
        self.balancer_vip(&name, subnets, protocol, vip, backends, &session)
    }

    /// VIP `vip` → `backends` in balancer `name` (created if new, with `settings` set on it),
    /// attached to `subnets`.
    fn balancer_vip(
        &mut self,
        name: &str,
        subnets: &[&str],
        protocol: &str,
        vip: &str,
        backends: &str,
        settings: &[&str],
    ) -> &mut Self {
        self.add(&["--may-exist", "lb-add", name, vip, backends, protocol]);
        if !settings.is_empty() {
            let mut command = vec!["set", "load_balancer", name];
            command.extend_from_slice(settings);
            self.add(&command);
        }
        for subnet in subnets {
            self.add(&["--may-exist", "ls-lb-add", subnet, name]);
        }
        self
    }

    /// A Service port's VIP gone (its Service deleted, or its endpoints all gone: Kube-OVN then
    /// deletes the VIP rather than keep it without backends).
    pub fn remove_service(&mut self, vpc: &str, protocol: &str, vip: &str) -> &mut Self {
        let name = Self::service_load_balancer(vpc, protocol);
        self.add(&["--if-exists", "lb-del", &name, vip])
    }

    /// Attaches load balancer `name` to switch `subnet`.
    pub fn switch_load_balancer(&mut self, subnet: &str, name: &str) -> &mut Self {
        self.add(&["--may-exist", "ls-lb-add", subnet, name])
    }

    /// Attaches load balancer `name` to router `vpc`.
    pub fn router_load_balancer(&mut self, vpc: &str, name: &str) -> &mut Self {
        self.add(&["--may-exist", "lr-lb-add", vpc, name])
    }

    /// An `OvnDnatRule` `name` on router `vpc`, as kube-ovn-controller's `AddDnatRule` writes
    /// it: a load balancer of its own, named after the rule, of `protocol` (tcp, udp), with VIP
    /// `eip:external_port` → `ip:internal_port`, attached to the router (`lr-lb-add`).
    pub fn ovn_dnat_rule(
        &mut self,
        vpc: &str,
        name: &str,
        (eip, external_port): (Ipv4Addr, u16),
        (ip, internal_port): (Ipv4Addr, u16),
        protocol: &str,
    ) -> &mut Self {
        let vip = format!("{eip}:{external_port}");
        let backend = format!("{ip}:{internal_port}");
        self.load_balancer(name, &vip, &backend, protocol)
            .router_load_balancer(vpc, name)
    }

    /// A NAT rule on router `vpc` (Kube-OVN's OVN-native SNAT / EIP): `kind` snat, dnat or
    /// dnat_and_snat, from `logical` (an IP or, for SNAT, a CIDR) to `external`.
    pub fn nat(&mut self, vpc: &str, kind: &str, external: &str, logical: &str) -> &mut Self {
        self.add(&["--may-exist", "lr-nat-add", vpc, kind, external, logical])
    }

    /// Applies everything as one NB transaction and waits until northd has updated the SB.
    pub fn apply(&mut self, lab: &OvnLab) -> Result<()> {
        lab.nbctl(&self.take_args())
            .map(drop)
            .context("applying the topology through ovn-nbctl")
    }

    /// The `ovn-nbctl` arguments of everything added so far (one `--wait=sb` transaction), for
    /// labs other than [`OvnLab`]; the topology is empty afterwards.
    pub fn take_args(&mut self) -> Vec<String> {
        let options = self.router_option_commands();
        self.commands.extend(options);
        self.created_vpcs.clear();
        self.learning_vpcs.clear();
        self.subnet_vpcs.clear();
        self.underlay_switches.clear();
        self.switch_cidrs.clear();
        let mut args = vec!["--wait=sb".to_string(), "--".to_string()];
        if self.plain_ovn_globals {
            args.extend(
                ["remove", "nb_global", ".", "options", "use_ct_inv_match"].map(String::from),
            );
        } else {
            args.extend(["set", "nb_global", "."].map(String::from));
            args.extend(
                KUBE_OVN_NB_GLOBALS
                    .iter()
                    .map(|option| (*option).to_string()),
            );
        }
        for command in self.commands.drain(..) {
            args.push("--".to_string());
            args.extend(command);
        }
        args
    }
}

/// Which of a NetworkPolicy's ACLs are logged (Kube-OVN's `enable_log` and `log_acl_actions`
/// annotations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyLog {
    Off,
    /// `enable_log: "true"`: the default drops.
    Drops,
    /// And `log_acl_actions: "allow,drop"`: the allow ACLs too.
    AllowAndDrop,
}

/// One entry of a Kube-OVN subnet's `spec.acls`.
#[derive(Clone, Copy, Debug)]
pub struct SubnetAcl<'a> {
    /// `from-lport` or `to-lport`.
    pub direction: &'a str,
    pub priority: u16,
    pub match_: &'a str,
    /// `allow`, `allow-related`, `allow-stateless`, `drop` or `reject`.
    pub action: &'a str,
}

/// One ingress (`from`) or egress (`to`) rule of a NetworkPolicy: the peers' addresses (pods
/// selected and ipBlocks, the allow set), the ipBlocks' `except` and the ports (none: all).
#[derive(Clone, Copy, Debug)]
pub struct PolicyRule<'a> {
    pub allow: &'a [&'a str],
    pub except: &'a [&'a str],
    pub ports: &'a [PolicyPort],
}

/// A NetworkPolicy port: a protocol (`tcp`, `udp`, `sctp`) with no port, one port, or a range
/// (`endPort`).
#[derive(Clone, Copy, Debug)]
pub enum PolicyPort {
    Protocol(&'static str),
    Port(&'static str, u16),
    Range(&'static str, u16, u16),
}

/// A pod's LSP name, as Kube-OVN names it: `<pod>.<namespace>`.
#[must_use]
pub fn pod_port_name(pod: &str, namespace: &str) -> String {
    format!("{pod}.{namespace}")
}

/// The `external_ids` kube-ovn-controller writes on a pod's LSP: `pod=<namespace>/<pod>`,
/// `ls=<subnet>`, `ip=<ip>`, `vendor=kube-ovn`.
#[must_use]
pub fn pod_external_ids(
    subnet: &str,
    pod: &str,
    namespace: &str,
    ip: impl std::fmt::Display,
) -> [(&'static str, String); 4] {
    [
        ("pod", format!("{namespace}/{pod}")),
        ("ls", subnet.to_string()),
        ("ip", ip.to_string()),
        ("vendor", "kube-ovn".to_string()),
    ]
}

/// A pod's Logical_Switch_Port row as an OVSDB `insert` row (the columns [`Topology::pod`]
/// writes), for writers that batch thousands of pods in raw transactions as kube-ovn-controller's
/// libovsdb client does.
#[must_use]
pub fn pod_port_row(subnet: &str, pod: &str, namespace: &str, mac: &str, ip: Ipv4Addr) -> Value {
    let ids: Vec<Value> = pod_external_ids(subnet, pod, namespace, ip)
        .into_iter()
        .map(|(key, value)| serde_json::json!([key, value]))
        .collect();
    serde_json::json!({
        "name": pod_port_name(pod, namespace),
        "addresses": format!("{mac} {ip}"),
        "external_ids": ["map", ids],
    })
}

/// Router `vpc`'s NB option `key`, `None` when the key is absent (northd's default applies).
pub fn router_option(lab: &OvnLab, vpc: &str, key: &str) -> Result<Option<String>> {
    let option = format!("options:{key}");
    let value = lab.nbctl(&["--if-exists", "get", "logical_router", vpc, &option])?;
    let value = value.trim().trim_matches('"');
    Ok((!value.is_empty()).then(|| value.to_string()))
}

/// Kind of a Southbound datapath.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatapathKind {
    Switch,
    Router,
}

/// A Datapath_Binding as northd wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbDatapath {
    pub name: String,
    pub kind: DatapathKind,
    pub tunnel_key: u32,
}

/// A Port_Binding as northd wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbPort {
    pub logical_port: String,
    /// Port_Binding.type ("" for a VIF, "patch", "l3gateway", …).
    pub kind: String,
    pub tunnel_key: u32,
    /// Tunnel key of the port's datapath.
    pub datapath_key: u32,
    /// The port's MAC (first word of its first address), empty for ports without one.
    pub mac: String,
}

/// Every Datapath_Binding in the lab's SB, sorted by name.
pub fn sb_datapaths(lab: &OvnLab) -> Result<Vec<SbDatapath>> {
    let table = sbctl_json(lab, "Datapath_Binding", "tunnel_key,external_ids")?;
    let mut datapaths = table
        .iter()
        .map(|row| {
            let tunnel_key = as_u32(&row[0])?;
            let ids = ovsdb_map(&row[1]);
            let name = lookup(&ids, "name").context("datapath without external_ids:name")?;
            let kind = if lookup(&ids, "logical-router").is_some() {
                DatapathKind::Router
            } else {
                DatapathKind::Switch
            };
            Ok(SbDatapath {
                name: name.to_string(),
                kind,
                tunnel_key,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    datapaths.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(datapaths)
}

/// Every Port_Binding in the lab's SB, sorted by logical port.
pub fn sb_ports(lab: &OvnLab) -> Result<Vec<SbPort>> {
    let keys: Vec<(String, u32)> = sbctl_json(lab, "Datapath_Binding", "_uuid,tunnel_key")?
        .iter()
        .map(|row| Ok((uuid(&row[0])?, as_u32(&row[1])?)))
        .collect::<Result<_>>()?;
    let table = sbctl_json(
        lab,
        "Port_Binding",
        "logical_port,type,tunnel_key,datapath,mac",
    )?;
    let mut ports = table
        .iter()
        .map(|row| {
            let datapath = uuid(&row[3])?;
            let datapath_key = keys
                .iter()
                .find(|(id, _)| *id == datapath)
                .map(|(_, key)| *key)
                .with_context(|| format!("port binding on unknown datapath {datapath}"))?;
            Ok(SbPort {
                logical_port: row[0].as_str().context("logical_port")?.to_string(),
                kind: row[1].as_str().context("type")?.to_string(),
                tunnel_key: as_u32(&row[2])?,
                datapath_key,
                mac: first_mac(&row[4]),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    ports.sort_by(|a, b| a.logical_port.cmp(&b.logical_port));
    Ok(ports)
}

/// Rows of `ovn-sbctl --format=json --columns=… list <table>`.
fn sbctl_json(lab: &OvnLab, table: &str, columns: &str) -> Result<Vec<Vec<Value>>> {
    let text = lab.sbctl(&[
        "--format=json",
        &format!("--columns={columns}"),
        "list",
        table,
    ])?;
    let json: Value =
        serde_json::from_str(&text).with_context(|| format!("ovn-sbctl output for {table}"))?;
    let rows = json["data"]
        .as_array()
        .with_context(|| format!("no data in {table} output"))?;
    rows.iter()
        .map(|row| {
            row.as_array()
                .cloned()
                .with_context(|| format!("malformed {table} row"))
        })
        .collect()
}

fn as_u32(value: &Value) -> Result<u32> {
    value
        .as_u64()
        .and_then(|v| u32::try_from(v).ok())
        .with_context(|| format!("{value} is not a u32"))
}

/// The first word of the first address of a Port_Binding `mac` column ("MAC IP…" strings).
fn first_mac(value: &Value) -> String {
    let first = match value {
        Value::String(address) => Some(address.as_str()),
        Value::Array(parts) => parts
            .get(1)
            .and_then(Value::as_array)
            .and_then(|set| set.first())
            .and_then(Value::as_str),
        _ => None,
    };
    first
        .and_then(|address| address.split_whitespace().next())
        .unwrap_or_default()
        .to_string()
}

/// `["uuid", "…"]` → the uuid string.
fn uuid(value: &Value) -> Result<String> {
    match value.as_array().map(Vec::as_slice) {
        Some([tag, Value::String(id)]) if tag == "uuid" => Ok(id.clone()),
        _ => bail!("{value} is not an OVSDB uuid"),
    }
}

/// `["map", [[k, v], …]]` → pairs (non-string entries are skipped).
fn ovsdb_map(value: &Value) -> Vec<(String, String)> {
    let Some([tag, Value::Array(pairs)]) = value.as_array().map(Vec::as_slice) else {
        return vec![];
    };
    if tag != "map" {
        return vec![];
    }
    pairs
        .iter()
        .filter_map(|pair| match pair.as_array().map(Vec::as_slice) {
            Some([Value::String(k), Value::String(v)]) => Some((k.clone(), v.clone())),
            _ => None,
        })
        .collect()
}

fn lookup<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parses_normalises_and_finds_the_gateway() {
        let cidr = Cidr::parse("10.0.1.7/24").unwrap();
        assert_eq!(cidr.to_string(), "10.0.1.0/24");
        assert_eq!(cidr.host(1), Ipv4Addr::new(10, 0, 1, 1));
        assert_eq!(
            Cidr::parse("0.0.0.0/0").unwrap().host(1),
            Ipv4Addr::new(0, 0, 0, 1)
        );
        assert!(Cidr::parse("10.0.1.0/33").is_err());
        assert!(Cidr::parse("10.0.1.0").is_err());
    }

    #[test]
    fn macs_are_stable_local_and_distinct() {
        assert_eq!(mac_for("vpc-a-subnet-a"), mac_for("vpc-a-subnet-a"));
        assert_ne!(mac_for("vpc-a-subnet-a"), mac_for("vpc-c-subnet-c"));
        assert!(mac_for("x").starts_with("0a:58:"));
    }

    #[test]
    fn ovsdb_json_values_decode() {
        let map = serde_json::json!(["map", [["name", "vpc-a"], ["logical-router", "1234"]]]);
        let pairs = ovsdb_map(&map);
        assert_eq!(lookup(&pairs, "name"), Some("vpc-a"));
        assert_eq!(lookup(&pairs, "logical-router"), Some("1234"));
        assert_eq!(uuid(&serde_json::json!(["uuid", "abc"])).unwrap(), "abc");
        assert!(uuid(&serde_json::json!(["set", []])).is_err());
    }

    /// The `options={…}` words of the `set logical_router <vpc>` commands in `args`, per VPC.
    fn router_options(args: &[String]) -> BTreeMap<String, Vec<String>> {
        let mut options: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for command in args.split(|word| word == "--") {
            if let [set, table, vpc, rest @ ..] = command
                && set == "set"
                && table == "logical_router"
            {
                options.entry(vpc.clone()).or_default().extend(
                    rest.iter()
                        .filter(|word| word.starts_with("options="))
                        .cloned(),
                );
            }
        }
        options
    }

    #[test]
    fn routers_get_kube_ovns_options_and_learn_from_arp_requests_only_when_peered_or_u2o() {
        let mut topology = Topology::new();
        topology
            .vpc_with_subnet("vpc-a", "a", "10.0.1.0/24")
            .unwrap();
        topology
            .vpc_with_subnet("vpc-b", "b", "10.0.2.0/24")
            .unwrap();
        topology
            .vpc_with_subnet("vpc-c", "c", "10.0.3.0/24")
            .unwrap();
        topology
            .vpc_with_subnet("vpc-u", "u", "10.0.4.0/24")
            .unwrap();
        topology.localnet("u", "provider", 0);
        topology.peering("vpc-a", "10.255.0.1/30", "vpc-b", "10.255.0.2/30");
        let options = router_options(&topology.take_args());
        let expected = |learn: bool| {
            let no_learning = if learn {
                ""
            } else {
                r#",always_learn_from_arp_request="false""#
            };
            vec![format!(
                r#"options={{mac_binding_age_threshold="300",dynamic_neigh_routers="true"{no_learning}}}"#
            )]
        };
        assert_eq!(options["vpc-a"], expected(true));
        assert_eq!(options["vpc-b"], expected(true));
        assert_eq!(options["vpc-c"], expected(false));
        assert_eq!(options["vpc-u"], expected(true));

        // A later peering of existing VPCs rewrites the options of both, learning.
        topology.peering("vpc-c", "10.255.0.5/30", "vpc-d", "10.255.0.6/30");
        let options = router_options(&topology.take_args());
        assert_eq!(options.len(), 2, "{options:?}");
        assert_eq!(options["vpc-c"], expected(true));
        assert_eq!(options["vpc-d"], expected(true));
        let left = topology.take_args();
        assert_eq!(
            left.iter().filter(|arg| *arg == "--").count(),
            1,
            "nothing but NB_Global's options left after take_args: {left:?}"
        );
    }

    #[test]
    fn vpcs_get_kube_ovns_subnet_policies_and_routes() {
        let mut topology = Topology::new();
        topology.default_vpc().unwrap();
        topology
            .subnet(DEFAULT_VPC, "underlay", "192.168.100.0/24")
            .unwrap();
        topology
            .vpc_with_subnet("vpc-a", "a", "10.0.1.0/24")
            .unwrap();
        let args = topology.take_args();
        let commands: Vec<&[String]> = args.split(|word| word == "--").collect();
        let has = |expected: &[&str]| commands.iter().any(|command| *command == expected);
        assert!(has(&[
            "--may-exist",
            "lr-route-add",
            DEFAULT_VPC,
            "0.0.0.0/0",
            "100.64.0.1"
        ]));
        for cidr in ["10.16.0.0/16", "100.64.0.0/16", "192.168.100.0/24"] {
            let match_ = format!("ip4.dst == {cidr}");
            assert!(
                has(&[
                    "--may-exist",
                    "lr-policy-add",
                    DEFAULT_VPC,
                    "31000",
                    &match_,
                    "allow"
                ]),
                "{cidr}: {commands:?}"
            );
        }
        // Custom VPCs get the subnet policies, not the default route.
        assert!(has(&[
            "--may-exist",
            "lr-policy-add",
            "vpc-a",
            "31000",
            "ip4.dst == 10.0.1.0/24",
            "allow"
        ]));
        assert!(!commands.iter().any(
            |command| command.get(1).is_some_and(|w| w == "lr-route-add")
                && command.get(2).is_some_and(|w| w == "vpc-a")
        ));
        // …but, per subnet, the source route to the subnet's gateway (only custom VPCs).
        let source_routes: Vec<&&[String]> = commands
            .iter()
            .filter(|command| command.get(1).is_some_and(|w| w == "--policy=src-ip"))
            .collect();
        assert_eq!(source_routes.len(), 1, "{source_routes:?}");
        assert!(has(&[
            "--may-exist",
            "--policy=src-ip",
            "lr-route-add",
            "vpc-a",
            "10.0.1.0/24",
            "10.0.1.1"
        ]));
    }
}
