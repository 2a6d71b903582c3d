//! The differential oracle: for generated packets on Kube-OVN-shaped topologies, the verdict of
//! ovnbpf's IR evaluator (the packets output, with their ports and rewritten headers, or a drop)
//! must equal `ovn-trace --minimal` on the same Southbound DB. A disagreement prints both traces.
//! Every flow of the forwarding stages must compile; only stateful stages may stay unsupported.
//!
//! Topology: the default VPC; vpc-a with two subnets; vpc-b whose subnet overlaps vpc-a's
//! (10.0.1.0/24) and is not peered; vpc-c peered with vpc-a (static routes both ways); a static
//! route in vpc-a whose next hop is a pod (a pod acting as a router); an underlay subnet in the
//! default VPC whose localnet port (VLAN 100) takes the frames no pod claims; router policies
//! (allow, reroute to a node over the join switch, drop) and the default VPC's route to the join
//! gateway; source routes (Kube-OVN's per-subnet ones, and a /32 one in vpc-c via a pod); and a
//! dual-stack VPC, vpc-d (two subnets `cidrBlock: "IPv4,IPv6"`, an IPv6 ECMP route via two of
//! its pods, an IPv6 discard route inside a static one), peered over both families with
//! vpc-e; and vpc-x with Kube-OVN's OVN-native external access (a gateway port on an untagged
//! underlay subnet bound to a gateway chassis, SNAT, a centralized FIP, and a distributed FIP of
//! one pod, a `dnat` rule, two `OvnDnatRule`s: router load balancers on one EIP): its NAT cases
//! are compared like the rest (SNAT and both FIPs on the way out, to a host the router learned
//! and to unknown ones; the way in from the external network to the NAT addresses, the load
//! balancers' VIP ports (`--ct=new`; ovn-trace's backends checked, the datapath's pick applied
//! to what it prints, which shows no translation) and their ARP; a FIP's pod reaching its own
//! FIP, OVN's `lr_out_egr_loop`). Replies to the SNAT and to balanced connections need
//! connection state ovn-trace does not model: `vpc_nat_gateway` sends those.
//! Routers carry Kube-OVN's options, `always_learn_from_arp_request` both ways.
//!
//! Three ways: the same packets are then replayed through the kernel's `from_pod` (and a Geneve
//! frame to one pod through that pod's chassis's `from_uplink`), its maps installed from the same
//! IR by the agent's backend ([`oracle_kernel`]); every kernel verdict must equal the evaluator's,
//! or be a drop the backend counts for a router it declines (`router_unsupported`, the reasons
//! printed).
//!
//! Four ways: the same IR translated by the OpenFlow backend into a real Open vSwitch's br-int
//! ([`oracle_openflow`]), every case a pod sends traced there with `ofproto/trace`: what its
//! datapath actions output (ports and rewritten headers) must equal the evaluator's outputs, or
//! be a drop the backend reports (a fenced datapath, a port with port security, IPv6 and the
//! router's own ARP replies on a partial one), or a packet br-int sends to the agent where
//! what the evaluator outputs beyond br-int is answers (the agent's, whose bytes its unit tests
//! and `openflow_dataplane` check); the counts and fenced datapaths printed.

mod common;
mod oracle_kernel;
mod oracle_openflow;

use std::net::{Ipv4Addr, Ipv6Addr};

use ovnbpf_agent::pipeline::eval::{
    Evaluator,
    packet::{L3, L4, Packet, ipv6_multicast_mac, solicited_node},
};
use ovnbpf_tests::{
    kubeovn::{self, Topology, mac_for},
    ovn::OvnLab,
    require_root,
};

use common::trace_oracle::{self, TraceOptions};

struct Pod {
    port: String,
    switch: &'static str,
    vpc: &'static str,
    mac: [u8; 6],
    ip: Ipv4Addr,
    /// A dual-stack pod's IPv6 address.
    ip6: Option<Ipv6Addr>,
}

/// (vpc, subnet, cidr base, pods)
const SUBNETS: &[(&str, &str, [u8; 3], u8)] = &[
    ("ovn-cluster", "ovn-default", [10, 16, 0], 2),
    ("vpc-a", "subnet-a", [10, 0, 1], 3),
    ("vpc-a", "subnet-a2", [10, 0, 2], 2),
    ("vpc-b", "subnet-b", [10, 0, 1], 2),
    ("vpc-c", "subnet-c", [10, 2, 1], 2),
    ("ovn-cluster", "underlay", [192, 168, 100], 2),
    ("vpc-x", "subnet-x", [10, 5, 1], 3),
];

/// vpc-x's external access (Kube-OVN's `enableExternal`, OVN-native NAT): its gateway port's
/// address on the external underlay subnet, the external gateway its default route points at,
/// and the EIP of the FIP of subnet-x's second pod (centralized).
const EXTERNAL_X_PORT: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 10);
const EXTERNAL_X_GATEWAY: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 1);
const EXTERNAL_X_FIP: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 20);
/// The EIP of subnet-x's first pod's distributed FIP (an `OvnFip` of the pod: its MAC as the
/// external MAC), carried on the pod's chassis.
const DISTRIBUTED_X_FIP: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 21);
/// The pod that has it.
const DISTRIBUTED_X_POD: &str = "subnet-x-p0";
/// The address of a `dnat` rule (a DNAT without its SNAT twin) to subnet-x's third pod.
const DNAT_X: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 22);
/// The EIP of vpc-x's `OvnDnatRule`s (router load balancers): TCP port 8080 to subnet-x's third
/// pod's port 80, UDP port 5353 to its second pod's port 53.
const ROUTER_LB_X: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 23);
/// A host on vpc-x's external network its router has learned (a MAC_Binding of the gateway
/// port), and its MAC.
const EXTERNAL_X_HOST: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 60);
const EXTERNAL_X_HOST_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x31, 0x00, 0x60];
/// The localnet port of vpc-x's external switch: where the external host's frames enter.
const EXTERNAL_X_LOCALNET: &str = "localnet.external-x";
/// vpc-x's gateway chassis, and the encap IP it registers.
const GATEWAY_X_CHASSIS: &str = "gw-node";
const GATEWAY_X_CHASSIS_IP: Ipv4Addr = Ipv4Addr::new(172, 31, 250, 1);

/// Dual-stack subnets: (vpc, subnet, IPv4 /24 base, the IPv6 /64's second group: fd00:<g>::,
/// pods). vpc-d's two route between each other; vpc-e is peered with vpc-d.
const DUAL_SUBNETS: &[(&str, &str, [u8; 3], u16, u8)] = &[
    ("vpc-d", "subnet-d1", [10, 3, 1], 0x31, 2),
    ("vpc-d", "subnet-d2", [10, 3, 2], 0x32, 1),
    ("vpc-e", "subnet-e", [10, 4, 1], 0x41, 1),
];

/// vpc-d's IPv6 ECMP route's prefix.
const ECMP6_PREFIX: &str = "fd00:98::/64";

/// The subnet with a localnet port (VLAN 100 on provider network "provider").
const UNDERLAY: &str = "underlay";

fn mac(text: &str) -> [u8; 6] {
    ovnbpf_agent::lflow::parse_mac(text).unwrap()
}

fn build(lab: &OvnLab) -> Vec<Pod> {
    let mut topology = Topology::new();
    topology.default_vpc().unwrap();
    let mut pods = Vec::new();
    for (vpc, subnet, [a, b, c], count) in SUBNETS {
        if *subnet == UNDERLAY {
            topology
                .subnet(vpc, subnet, &format!("{a}.{b}.{c}.0/24"))
                .unwrap()
                .localnet(subnet, "provider", 100);
        } else if *vpc != "ovn-cluster" {
            topology
                .vpc(vpc)
                .subnet(vpc, subnet, &format!("{a}.{b}.{c}.0/24"))
                .unwrap();
        }
        for index in 0..*count {
            let name = format!("{subnet}-p{index}");
            let ip = Ipv4Addr::new(*a, *b, *c, 10 + index);
            topology.pod(subnet, &name, "ns", &mac_for(&name), ip);
            pods.push(Pod {
                port: format!("{name}.ns"),
                switch: subnet,
                vpc,
                mac: mac(&mac_for(&name)),
                ip,
                ip6: None,
            });
        }
    }
    for (vpc, subnet, [a, b, c], group, count) in DUAL_SUBNETS {
        let cidr = format!("{a}.{b}.{c}.0/24,fd00:{group:x}::/64");
        topology.vpc(vpc).subnet(vpc, subnet, &cidr).unwrap();
        for index in 0..*count {
            let name = format!("{subnet}-p{index}");
            let ip = Ipv4Addr::new(*a, *b, *c, 10 + index);
            let ip6 = Ipv6Addr::new(0xfd00, *group, 0, 0, 0, 0, 0, 0x10 + u16::from(index));
            topology.dual_stack_pod(subnet, &name, "ns", &mac_for(&name), (ip, ip6));
            pods.push(Pod {
                port: format!("{name}.ns"),
                switch: subnet,
                vpc,
                mac: mac(&mac_for(&name)),
                ip,
                ip6: Some(ip6),
            });
        }
    }
    // Kube-OVN's dual-stack peering (`localConnectIP` of both families), a route per family
    // each way.
    topology
        .peering(
            "vpc-d",
            "10.255.1.1/30,fd00:ff::1/126",
            "vpc-e",
            "10.255.1.2/30,fd00:ff::2/126",
        )
        .static_route("vpc-d", "10.4.1.0/24", Ipv4Addr::new(10, 255, 1, 2))
        .static_route("vpc-e", "10.3.1.0/24", Ipv4Addr::new(10, 255, 1, 1))
        .static_route(
            "vpc-d",
            "fd00:41::/64",
            "fd00:ff::2".parse::<Ipv6Addr>().unwrap(),
        )
        .static_route(
            "vpc-e",
            "fd00:31::/64",
            "fd00:ff::1".parse::<Ipv6Addr>().unwrap(),
        );
    topology
        .peering("vpc-a", "10.255.0.1/30", "vpc-c", "10.255.0.2/30")
        .static_route("vpc-a", "10.2.1.0/24", Ipv4Addr::new(10, 255, 0, 2))
        .static_route("vpc-c", "10.0.1.0/24", Ipv4Addr::new(10, 255, 0, 1))
        .static_route("vpc-a", "192.168.50.0/24", Ipv4Addr::new(10, 0, 1, 12))
        // A `policySrc` VPC route that beats every destination route (/32: priority 96): one
        // pod's routed traffic goes through its neighbour, beside the builder's per-subnet
        // source routes (/24: 72, below the connected and static /24 routes).
        .source_route("vpc-c", "10.2.1.10/32", Ipv4Addr::new(10, 2, 1, 11))
        // Kube-OVN's default-VPC policies: in-cluster destinations keep their routes (the
        // builder's per-subnet allow policies); traffic to a node's InternalIP goes to its join
        // port; a pod's other traffic is rerouted to its own node over the join switch, by the
        // address set of the node's pods (distributed gateways).
        .node_port("node1", NODE1_MAC, NODE1_IP)
        .node_port("node2", NODE2_MAC, NODE2_IP)
        .node_policy(NODE1_INTERNAL_IP, NODE1_IP)
        .node_policy(NODE2_INTERNAL_IP, NODE2_IP)
        .distributed_gateway("ovn-default", "node1", NODE1_IP)
        .pod_on_node("ovn-default", "ovn-default-p1", "ns", "node1")
        // The other pod's traffic goes to both nodes under ECMP, as a centralized gateway
        // with two gateway nodes and `enableEcmp`.
        .centralized_gateway("10.16.0.10/32", &[NODE1_IP, NODE2_IP])
        // subnet-a2 routes with a route table of its own (`Subnet.spec.routeTable`): its route
        // to 192.168.50.0/24 goes via another pod than the main table's; the main table's
        // static routes (the peering, the ECMP route) are not in it.
        .table_route(
            "vpc-a",
            "rtb1",
            "192.168.50.0/24",
            Ipv4Addr::new(10, 0, 1, 11),
        )
        // A discard route inside a wider static route: what it covers is dropped.
        .static_route("vpc-a", "192.168.0.0/16", Ipv4Addr::new(10, 0, 1, 12))
        .discard_route("vpc-a", "192.168.60.0/24")
        // An ECMP static route in vpc-a via two of its pods.
        .ecmp_route("vpc-a", "198.51.100.0/24", Ipv4Addr::new(10, 0, 1, 11))
        .ecmp_route("vpc-a", "198.51.100.0/24", Ipv4Addr::new(10, 0, 1, 12))
        // And an IPv6 one in vpc-d via subnet-d1's two pods.
        .ecmp_route(
            "vpc-d",
            ECMP6_PREFIX,
            Ipv6Addr::new(0xfd00, 0x31, 0, 0, 0, 0, 0, 0x10),
        )
        .ecmp_route(
            "vpc-d",
            ECMP6_PREFIX,
            Ipv6Addr::new(0xfd00, 0x31, 0, 0, 0, 0, 0, 0x11),
        )
        // An IPv6 discard route inside a wider static route: what it covers is dropped (its
        // prefix longer than the subnets' /64: their `src-ip` routes, OVN priority 192, beat
        // any destination route shorter than that).
        .static_route(
            "vpc-d",
            "fd00:96::/32",
            Ipv6Addr::new(0xfd00, 0x31, 0, 0, 0, 0, 0, 0x10),
        )
        .discard_route("vpc-d", "fd00:96:1::/80")
        // A policy that drops one destination across the peering.
        .policy("vpc-a", 1000, "ip4.dst == 10.2.1.11", "drop", None)
        // Policies on both a source and a destination prefix (`Vpc.spec.policyRoutes`): one
        // pod of vpc-c cannot reach subnet-a; subnet-a2's traffic to the ECMP route's prefix
        // is rerouted via a pod instead.
        .policy(
            "vpc-c",
            2000,
            "ip4.src == 10.2.1.11 && ip4.dst == 10.0.1.0/24",
            "drop",
            None,
        )
        .policy(
            "vpc-a",
            3000,
            "ip4.src == 10.0.2.0/24 && ip4.dst == 198.51.100.0/25",
            "reroute",
            Some(Ipv4Addr::new(10, 0, 1, 10)),
        )
        // Policies on transport ports: vpc-c drops DNS to subnet-a; vpc-a reroutes two source
        // ports' flows out of the VPC via a pod.
        .policy(
            "vpc-c",
            2500,
            "ip4.dst == 10.0.1.0/24 && udp.dst == 53",
            "drop",
            None,
        )
        .policy(
            "vpc-a",
            2800,
            "ip4.dst == 198.51.100.0/24 && 40000 <= tcp.src <= 40001",
            "reroute",
            Some(Ipv4Addr::new(10, 0, 1, 10)),
        );
    topology
        .subnet_route_table("vpc-a", "subnet-a2", "10.0.2.0/24", "rtb1")
        .unwrap();
    // vpc-x reaches the outside through a gateway port (bound to a gateway chassis no test
    // runs): SNAT for its subnet and a centralized FIP; ovnbpf fences its traffic.
    topology
        .plain_switch("external-x", "172.31.0.0/24")
        .unwrap()
        // Untagged, as Kube-OVN's external network usually is (a Vlan of ID 0): the kernel's
        // test runs cannot hand a program a tagged frame's tag.
        .localnet("external-x", "provider", 0)
        .external_access("vpc-x", "external-x", "172.31.0.10/24", &["gw-node"])
        .static_route("vpc-x", "0.0.0.0/0", EXTERNAL_X_GATEWAY)
        .nat("vpc-x", "snat", &EXTERNAL_X_PORT.to_string(), "10.5.1.0/24")
        .nat(
            "vpc-x",
            "dnat_and_snat",
            &EXTERNAL_X_FIP.to_string(),
            "10.5.1.11",
        )
        .nat("vpc-x", "dnat", &DNAT_X.to_string(), "10.5.1.12")
        .ovn_dnat_rule(
            "vpc-x",
            "dnat-x-tcp",
            (ROUTER_LB_X, 8080),
            (Ipv4Addr::new(10, 5, 1, 12), 80),
            "tcp",
        )
        .ovn_dnat_rule(
            "vpc-x",
            "dnat-x-udp",
            (ROUTER_LB_X, 5353),
            (Ipv4Addr::new(10, 5, 1, 11), 53),
            "udp",
        );
    topology.apply(lab).unwrap();
    lab.sbctl(&[
        "chassis-add",
        GATEWAY_X_CHASSIS,
        "geneve",
        &GATEWAY_X_CHASSIS_IP.to_string(),
    ])
    .unwrap();
    lab.sbctl(&["lsp-bind", "cr-vpc-x-external-x", GATEWAY_X_CHASSIS])
        .unwrap();
    learn(
        lab,
        "vpc-x",
        "vpc-x-external-x",
        &EXTERNAL_X_HOST.to_string(),
        EXTERNAL_X_HOST_MAC,
    );
    Topology::new()
        .distributed_fip(
            "vpc-x",
            &DISTRIBUTED_X_FIP.to_string(),
            Ipv4Addr::new(10, 5, 1, 10),
            &format!("{DISTRIBUTED_X_POD}.ns"),
            &mac_for(DISTRIBUTED_X_POD),
        )
        .apply(lab)
        .unwrap();
    // The routers carry Kube-OVN's options, learning from ARP requests both ways: on where the
    // VPC is peered (vpc-a, vpc-c) or has a U2O subnet (ovn-cluster), off elsewhere (vpc-b).
    // Learning routers have no `always_learn_from_arp_request` key (northd's default, true).
    for (vpc, learn) in [
        ("ovn-cluster", None),
        ("vpc-a", None),
        ("vpc-b", Some("false")),
        ("vpc-c", None),
        ("vpc-d", None),
        ("vpc-e", None),
        ("vpc-x", None),
    ] {
        let option = |key: &str| kubeovn::router_option(lab, vpc, key).unwrap();
        assert_eq!(
            option("always_learn_from_arp_request").as_deref(),
            learn,
            "{vpc}"
        );
        assert_eq!(
            option("dynamic_neigh_routers").as_deref(),
            Some("true"),
            "{vpc}"
        );
        assert_eq!(
            option("mac_binding_age_threshold").as_deref(),
            Some("300"),
            "{vpc}"
        );
    }
    // The node's port group, as kube-ovn-controller makes it, holds the node's join port, and
    // northd carried it to the Southbound.
    let node_port = lab
        .nbctl(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "logical_switch_port",
            "name=node-node1",
        ])
        .unwrap();
    let group_ports = lab
        .nbctl(&[
            "--bare",
            "--columns=ports",
            "find",
            "port_group",
            "name=node.node1",
        ])
        .unwrap();
    assert_eq!(group_ports.trim(), node_port.trim());
    let sb_groups = lab
        .sbctl(&["--bare", "--columns=name,ports", "list", "Port_Group"])
        .unwrap();
    assert!(
        sb_groups.contains("node.node1") && sb_groups.contains("node-node1"),
        "{sb_groups}"
    );
    // northd derives the address set of each node's pods from their port group, which the
    // distributed gateway's policy names.
    let node1_pods = lab
        .sbctl(&[
            "--bare",
            "--columns=addresses",
            "find",
            "Address_Set",
            "name=ovn.default.node1_ip4",
        ])
        .unwrap();
    assert_eq!(node1_pods.trim(), "10.16.0.11");
    // One pod with port security, as Kube-OVN sets it for pods with `port_security: true`.
    let secured = &pods
        .iter()
        .find(|p| p.switch == "subnet-a2")
        .expect("a subnet-a2 pod");
    let entry = format!(
        "{} {}",
        ovnbpf_agent::net::format_mac(&secured.mac),
        secured.ip
    );
    lab.nbctl(&["--wait=sb", "lsp-set-port-security", &secured.port, &entry])
        .unwrap();
    // A dual-stack one: port security "MAC IPv4 IPv6", as Kube-OVN writes it for a pod of a
    // dual-stack subnet.
    let dual = pods
        .iter()
        .find(|p| p.port == DUAL_PORT)
        .expect("the dual-stack pod");
    let entry = format!(
        "{} {} {DUAL_IP6}",
        ovnbpf_agent::net::format_mac(&dual.mac),
        dual.ip
    );
    lab.nbctl(&["--wait=sb", "lsp-set-port-security", &dual.port, &entry])
        .unwrap();
    // A neighbour a chassis learned (MAC_Binding is written by chassis, not northd): a second
    // address of the first subnet-a pod; and an IPv6 one, a second address of subnet-d1's
    // first pod, learned on vpc-d's port.
    let owner = pods
        .iter()
        .find(|p| p.switch == "subnet-a")
        .expect("a subnet-a pod");
    learn(
        lab,
        "vpc-a",
        "vpc-a-subnet-a",
        &LEARNED.to_string(),
        owner.mac,
    );
    let owner6 = pods
        .iter()
        .find(|p| p.switch == "subnet-d1")
        .expect("a subnet-d1 pod");
    learn(
        lab,
        "vpc-d",
        "vpc-d-subnet-d1",
        &LEARNED6.to_string(),
        owner6.mac,
    );
    pods
}

/// Writes the MAC_Binding a chassis writes when router `router`'s port `port` learns `ip` at
/// `mac`, stamped now as ovn-controller stamps it: northd ages rows out after the router's
/// `mac_binding_age_threshold` (Kube-OVN's 300 s) from their timestamp, so an unstamped row
/// would be gone at once.
fn learn(lab: &OvnLab, router: &str, port: &str, ip: &str, mac: [u8; 6]) {
    let datapath = lab
        .sbctl(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "Datapath_Binding",
            &format!("external_ids:name={router}"),
        ])
        .unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    lab.sbctl(&[
        "create",
        "MAC_Binding",
        &format!("logical_port={port}"),
        &format!("ip=\"{ip}\""),
        &format!("mac=\"{}\"", ovnbpf_agent::net::format_mac(&mac)),
        &format!("datapath={}", datapath.trim()),
        &format!("timestamp={now_ms}"),
    ])
    .unwrap();
}

/// The nodes' ports on the join switch that the default VPC's reroute policies send to, and
/// the nodes' InternalIPs.
const NODE1_IP: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 2);
const NODE1_MAC: &str = "0a:58:64:40:00:02";
const NODE2_IP: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 3);
const NODE2_MAC: &str = "0a:58:64:40:00:03";
const NODE1_INTERNAL_IP: Ipv4Addr = Ipv4Addr::new(172, 18, 0, 2);
const NODE2_INTERNAL_IP: Ipv4Addr = Ipv4Addr::new(172, 18, 0, 3);

/// The pod whose port security lists an IPv6 address too, and that address.
const DUAL_PORT: &str = "subnet-a-p1.ns";
const DUAL_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 1, 0, 0, 0, 0x11);
/// An IPv6 address no port security lists.
const UNLISTED_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 1, 0, 0, 0, 0x99);

/// The address of the learned neighbour, and of the IPv6 one (in subnet-d1).
const LEARNED: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 77);
const LEARNED6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x31, 0, 0, 0, 0, 0, 0x77);

fn gateway(pod: &Pod) -> (Ipv4Addr, [u8; 6]) {
    let [a, b, c, _] = pod.ip.octets();
    (
        Ipv4Addr::new(a, b, c, 1),
        mac(&mac_for(&format!("{}-{}", pod.vpc, pod.switch))),
    )
}

fn ipv4(pod: &Pod, eth_dst: [u8; 6], destination: Ipv4Addr, ttl: u8, l4: L4) -> Packet {
    Packet {
        eth_src: pod.mac,
        eth_dst,
        l3: L3::Ipv4 {
            source: pod.ip,
            destination,
            ttl,
            l4,
        },
    }
}

/// The EUI-64 link-local address of `mac` (what OVN gives router ports).
fn link_local(mac: [u8; 6]) -> Ipv6Addr {
    ovnbpf_agent::net::ipv6_link_local(&mac)
}

fn ipv6(pod: &Pod, eth_dst: [u8; 6], destination: Ipv6Addr, ttl: u8, l4: L4) -> Packet {
    Packet {
        eth_src: pod.mac,
        eth_dst,
        l3: L3::Ipv6 {
            source: link_local(pod.mac),
            destination,
            ttl,
            l4,
        },
    }
}

/// A neighbour solicitation for `target`, to its solicited-node group or to `target` itself.
fn solicitation(pod: &Pod, target: Ipv6Addr, to_group: bool) -> Packet {
    let (destination, eth_dst) = if to_group {
        let group = solicited_node(target);
        (group, ipv6_multicast_mac(group))
    } else {
        (target, [0; 6])
    };
    ipv6(
        pod,
        eth_dst,
        destination,
        255,
        L4::Nd {
            kind: 135,
            target,
            sll: pod.mac,
            tll: [0; 6],
        },
    )
}

fn arp_request(pod: &Pod, target: Ipv4Addr) -> Packet {
    Packet {
        eth_src: pod.mac,
        eth_dst: [0xff; 6],
        l3: L3::Arp {
            op: 1,
            sha: pod.mac,
            spa: pod.ip,
            tha: [0; 6],
            tpa: target,
        },
    }
}

const PING: L4 = L4::Icmp { kind: 8, code: 0 };

/// Every case: (description, inport, switch, packet).
fn cases(pods: &[Pod]) -> Vec<(String, &Pod, Packet)> {
    let mut cases = Vec::new();
    for pod in pods {
        let (gateway_ip, router_mac) = gateway(pod);
        let [a, b, c, _] = pod.ip.octets();
        let mut add =
            |what: &str, packet: Packet| cases.push((format!("{} {what}", pod.port), pod, packet));
        add(
            "pings its gateway",
            ipv4(pod, router_mac, gateway_ip, 64, PING),
        );
        add("ARPs for its gateway", arp_request(pod, gateway_ip));
        let tcp = L4::Tcp {
            source: 40000,
            destination: 22,
        };
        add(
            "opens TCP to its gateway",
            ipv4(pod, router_mac, gateway_ip, 64, tcp),
        );
        let udp = L4::Udp {
            source: 40000,
            destination: 161,
        };
        add(
            "sends UDP to its gateway",
            ipv4(pod, router_mac, gateway_ip, 64, udp),
        );
        let timestamp = L4::Icmp { kind: 13, code: 0 };
        add(
            "sends an ICMP timestamp to its gateway",
            ipv4(pod, router_mac, gateway_ip, 64, timestamp),
        );
        add(
            "ARPs for an unknown address",
            arp_request(pod, Ipv4Addr::new(a, b, c, 200)),
        );
        add(
            "sends to an unknown MAC",
            ipv4(
                pod,
                [0x0a, 0x58, 0, 0, 0, 0x99],
                Ipv4Addr::new(a, b, c, 99),
                64,
                PING,
            ),
        );
        add(
            "broadcasts",
            ipv4(
                pod,
                [0xff; 6],
                Ipv4Addr::new(a, b, c, 255),
                64,
                L4::Udp {
                    source: 68,
                    destination: 67,
                },
            ),
        );
        add(
            "routes to an unknown address in its subnet",
            ipv4(pod, router_mac, Ipv4Addr::new(a, b, c, 200), 64, PING),
        );
        add(
            "routes to a VPC without a route",
            ipv4(pod, router_mac, Ipv4Addr::new(172, 16, 9, 9), 64, PING),
        );
        add(
            "routes to node1's InternalIP",
            ipv4(pod, router_mac, NODE1_INTERNAL_IP, 64, PING),
        );
        // Flows that differ in their source port only: ECMP spreads them over its members.
        for port in 40000..40004 {
            add(
                &format!("opens TCP from port {port} out of its VPC"),
                ipv4(
                    pod,
                    router_mac,
                    Ipv4Addr::new(198, 51, 100, 7),
                    64,
                    L4::Tcp {
                        source: port,
                        destination: 443,
                    },
                ),
            );
        }
        for other in pods.iter().filter(|o| o.port != pod.port) {
            let same_switch = other.switch == pod.switch;
            let same_vpc = other.vpc == pod.vpc;
            if same_switch {
                add(
                    &format!("pings {}", other.port),
                    ipv4(pod, other.mac, other.ip, 64, PING),
                );
                add(
                    &format!("ARPs for {}", other.port),
                    arp_request(pod, other.ip),
                );
                add(
                    &format!("sends TCP to {}", other.port),
                    ipv4(
                        pod,
                        other.mac,
                        other.ip,
                        64,
                        L4::Tcp {
                            source: 40000,
                            destination: 80,
                        },
                    ),
                );
            } else {
                // Through the router: same VPC, across the peering, or into an overlapping CIDR.
                let relation = if same_vpc { "same VPC" } else { "other VPC" };
                add(
                    &format!("pings {} ({relation})", other.port),
                    ipv4(pod, router_mac, other.ip, 64, PING),
                );
                add(
                    &format!("sends UDP to {} ({relation})", other.port),
                    ipv4(
                        pod,
                        router_mac,
                        other.ip,
                        64,
                        L4::Udp {
                            source: 5353,
                            destination: 53,
                        },
                    ),
                );
                if same_vpc {
                    add(
                        &format!("reaches {} with TTL 1", other.port),
                        ipv4(pod, router_mac, other.ip, 1, PING),
                    );
                }
            }
        }
        // The router's addresses on its other subnets: answered like the gateway's own.
        let mut other_gateways: Vec<Ipv4Addr> = pods
            .iter()
            .filter(|o| o.vpc == pod.vpc && o.switch != pod.switch)
            .map(|o| gateway(o).0)
            .collect();
        other_gateways.sort_unstable();
        other_gateways.dedup();
        for other_gateway in other_gateways {
            add(
                &format!("opens TCP to the router's {other_gateway}"),
                ipv4(pod, router_mac, other_gateway, 64, tcp),
            );
            add(
                &format!("sends UDP to the router's {other_gateway}"),
                ipv4(pod, router_mac, other_gateway, 64, udp),
            );
        }
        // What the router's neighbour stages learn from (lookup_arp / put_arp, lookup_nd /
        // put_nd; the learning itself is ovn-controller's): an ARP reply to the gateway, a
        // gratuitous ARP, and an unsolicited neighbour advertisement.
        add(
            "answers its gateway's ARP",
            Packet {
                eth_src: pod.mac,
                eth_dst: router_mac,
                l3: L3::Arp {
                    op: 2,
                    sha: pod.mac,
                    spa: pod.ip,
                    tha: router_mac,
                    tpa: gateway_ip,
                },
            },
        );
        add("sends a gratuitous ARP", arp_request(pod, pod.ip));
        add(
            "advertises its link-local address",
            ipv6(
                pod,
                ipv6_multicast_mac("ff02::1".parse().unwrap()),
                "ff02::1".parse().unwrap(),
                255,
                L4::Nd {
                    kind: 136,
                    target: link_local(pod.mac),
                    sll: [0; 6],
                    tll: pod.mac,
                },
            ),
        );
        let spoofed_mac = [0x0a, 0x58, 0xde, 0xad, 0xbe, 0xef];
        let mut spoofed_ip = arp_request(pod, gateway_ip);
        if let L3::Arp { spa, .. } = &mut spoofed_ip.l3 {
            *spa = Ipv4Addr::new(a, b, c, 201);
        }
        add("ARPs with a spoofed sender IP", spoofed_ip);
        for other in pods
            .iter()
            .filter(|o| o.port != pod.port && o.switch == pod.switch)
        {
            let mut packet = ipv4(pod, other.mac, other.ip, 64, PING);
            if let L3::Ipv4 { source, .. } = &mut packet.l3 {
                *source = Ipv4Addr::new(a, b, c, 202);
            }
            add(&format!("pings {} from a spoofed IP", other.port), packet);
            add(
                &format!("pings {} from a spoofed MAC", other.port),
                Packet {
                    eth_src: spoofed_mac,
                    ..ipv4(pod, other.mac, other.ip, 64, PING)
                },
            );
            add(
                &format!("sends to {}'s MAC but another IP", other.port),
                ipv4(pod, other.mac, Ipv4Addr::new(a, b, c, 203), 64, PING),
            );
        }
        // IPv6: the router ports' link-local addresses (pods here send from their own EUI-64
        // link-local address, which port security admits).
        {
            let gateway6 = link_local(router_mac);
            add(
                "solicits its gateway's link-local address",
                solicitation(pod, gateway6, true),
            );
            add(
                "solicits its gateway at its unicast address",
                Packet {
                    eth_dst: router_mac,
                    ..solicitation(pod, gateway6, false)
                },
            );
            add(
                "pings its gateway over IPv6",
                ipv6(
                    pod,
                    router_mac,
                    gateway6,
                    64,
                    L4::Icmp { kind: 128, code: 0 },
                ),
            );
            add(
                "sends UDP to its gateway over IPv6",
                ipv6(
                    pod,
                    router_mac,
                    gateway6,
                    64,
                    L4::Udp {
                        source: 40000,
                        destination: 53,
                    },
                ),
            );
            add(
                "opens TCP to its gateway over IPv6",
                ipv6(
                    pod,
                    router_mac,
                    gateway6,
                    64,
                    L4::Tcp {
                        source: 40000,
                        destination: 22,
                    },
                ),
            );
            add(
                "routes to an unknown link-local address",
                ipv6(
                    pod,
                    router_mac,
                    "fe80::99".parse().unwrap(),
                    64,
                    L4::Icmp { kind: 128, code: 0 },
                ),
            );
            add(
                "routes IPv6 off-link",
                ipv6(
                    pod,
                    router_mac,
                    "2001:db8::1".parse().unwrap(),
                    64,
                    L4::Icmp { kind: 128, code: 0 },
                ),
            );
            add(
                "solicits an unknown address",
                solicitation(pod, "fe80::77".parse().unwrap(), true),
            );
        }
        if pod.vpc == "vpc-a" {
            add(
                "routes to a learned neighbour",
                ipv4(pod, router_mac, LEARNED, 64, PING),
            );
            add(
                "uses the static route via a pod",
                ipv4(pod, router_mac, Ipv4Addr::new(192, 168, 50, 7), 64, PING),
            );
            add(
                "routes into a discard route",
                ipv4(pod, router_mac, Ipv4Addr::new(192, 168, 60, 7), 64, PING),
            );
            add(
                "routes beside the discard route",
                ipv4(pod, router_mac, Ipv4Addr::new(192, 168, 61, 7), 64, PING),
            );
        }
        if pod.vpc == "vpc-x" {
            // The gateway port's address answers on every chassis; what the external subnet's
            // connected route sends out of the gateway port is fenced (a FIP's EIP too), but
            // from the pod with a distributed FIP, which leaves from it (the router asks for
            // the next hop from the FIP: no MAC_Binding of the outside here).
            let out = if pod.port == format!("{DISTRIBUTED_X_POD}.ns") {
                "(distributed FIP)"
            } else {
                "(gateway port)"
            };
            add(
                "pings its VPC's gateway port",
                ipv4(pod, router_mac, EXTERNAL_X_PORT, 64, PING),
            );
            add(
                &format!("pings the external gateway {out}"),
                ipv4(pod, router_mac, EXTERNAL_X_GATEWAY, 64, PING),
            );
            // Not from the distributed FIP's pod: out of the gateway port to the centralized
            // FIP's EIP, OVN loops the packet back into the router where the gateway chassis
            // port resides (`lr_out_egr_loop`), which ovn-trace takes every port to; a chassis
            // of that pod sends it out (the kernel does).
            // (From the centralized FIP's pod: the others leave by the SNAT, whose address is
            // the gateway port's own, which the reply would be for.)
            if pod.port == "subnet-x-p1.ns" {
                add(
                    "pings the FIP's EIP (gateway port)",
                    ipv4(pod, router_mac, EXTERNAL_X_FIP, 64, PING),
                );
            }
            add(
                &format!("opens TCP to an external host {out}"),
                ipv4(
                    pod,
                    router_mac,
                    Ipv4Addr::new(172, 31, 0, 50),
                    64,
                    L4::Tcp {
                        source: 40000,
                        destination: 443,
                    },
                ),
            );
            add(
                "runs out of TTL toward the gateway port",
                ipv4(pod, router_mac, EXTERNAL_X_GATEWAY, 1, PING),
            );
            // To a host the router knows: the packet itself leaves, from the pod's FIP (its
            // distributed one from its own chassis, the centralized one from the gateway).
            add(
                &format!("pings the known external host {out}"),
                ipv4(pod, router_mac, EXTERNAL_X_HOST, 64, PING),
            );
            add(
                &format!("sends UDP to the known external host {out}"),
                ipv4(
                    pod,
                    router_mac,
                    EXTERNAL_X_HOST,
                    64,
                    L4::Udp {
                        source: 40001,
                        destination: 53,
                    },
                ),
            );
        }
    }
    cases.extend(ipv6_port_security_cases(pods));
    cases.extend(dual_stack_cases(pods));
    cases
}

/// The way in from vpc-x's external network (the host OVN learned, on the external switch's
/// localnet port): to the centralized FIP's EIP (to the gateway port's MAC), to the
/// distributed one's (to its pod's MAC, the rule's `external_mac`) and to a `dnat` rule's
/// address, ping, UDP and TCP, which become the pods'; ARP for the three, answered with those
/// MACs; a ping of the gateway port.
/// Replies to the subnet's SNAT need the connection's state, which ovn-trace does not model:
/// the NAT tests send those through the datapath.
fn external_cases<'a>(host: &'a Pod, pods: &[Pod]) -> Vec<(String, &'a Pod, Packet)> {
    let gateway_mac = mac(&mac_for("vpc-x-external-x"));
    let distributed_mac = pods
        .iter()
        .find(|p| p.port == format!("{DISTRIBUTED_X_POD}.ns"))
        .expect("the distributed FIP's pod")
        .mac;
    let udp = L4::Udp {
        source: 5353,
        destination: 53,
    };
    let tcp = L4::Tcp {
        source: 40002,
        destination: 80,
    };
    let mut cases = Vec::new();
    for (fip, eth_dst, which) in [
        (EXTERNAL_X_FIP, gateway_mac, "centralized FIP"),
        (DISTRIBUTED_X_FIP, distributed_mac, "distributed FIP"),
        (DNAT_X, gateway_mac, "DNAT rule's address"),
    ] {
        for (what, l4) in [
            ("pings", PING),
            ("sends UDP to", udp),
            ("opens TCP to", tcp),
        ] {
            cases.push((
                format!("the external host {what} the {which}"),
                host,
                ipv4(host, eth_dst, fip, 64, l4),
            ));
        }
        cases.push((
            format!("the external host ARPs for the {which}"),
            host,
            arp_request(host, fip),
        ));
    }
    cases.push((
        "the external host pings the gateway port".to_string(),
        host,
        ipv4(host, gateway_mac, EXTERNAL_X_PORT, 64, PING),
    ));
    // The router load balancers' VIP: its two ports (balanced where the gateway resides), a
    // port no rule names (routed on as OVN routes it), and ARP for it.
    for (port, l4) in [
        (
            "TCP port 8080",
            L4::Tcp {
                source: 40003,
                destination: 8080,
            },
        ),
        (
            "UDP port 5353",
            L4::Udp {
                source: 5354,
                destination: 5353,
            },
        ),
        (
            "TCP port 7070, which no rule names",
            L4::Tcp {
                source: 40004,
                destination: 7070,
            },
        ),
    ] {
        cases.push((
            format!("the external host reaches the router load balancer's {port}"),
            host,
            ipv4(host, gateway_mac, ROUTER_LB_X, 64, l4),
        ));
    }
    cases.push((
        "the external host ARPs for the router load balancer's VIP".to_string(),
        host,
        arp_request(host, ROUTER_LB_X),
    ));
    cases
}

/// `packet` with its destination address and port `backend`'s: ovn-trace prints a router load
/// balancer's decision but applies no translation to what it prints.
fn to_backend(mut packet: Packet, backend: (Ipv4Addr, u16)) -> Packet {
    if let L3::Ipv4 {
        destination, l4, ..
    } = &mut packet.l3
    {
        *destination = backend.0;
        if let L4::Tcp { destination, .. } | L4::Udp { destination, .. } = l4 {
            *destination = backend.1;
        }
    }
    packet
}

/// IPv6 from the dual-stack pods' global addresses: to the gateway (ping, TCP, UDP), on the
/// switch, routed to the other subnet and across the peering, to an unknown address of the
/// subnet (the router solicits it), to a neighbour learned in MAC_Binding, to no route, over an
/// ECMP route, and with hop limits that
/// run out at the first and second router.
fn dual_stack_cases(pods: &[Pod]) -> Vec<(String, &Pod, Packet)> {
    let dual: Vec<&Pod> = pods.iter().filter(|p| p.ip6.is_some()).collect();
    let in_switch = |name: &str| dual.iter().copied().find(|p| p.switch == name).expect(name);
    let (d1, d2, e) = (
        in_switch("subnet-d1"),
        in_switch("subnet-d2"),
        in_switch("subnet-e"),
    );
    let mut cases = Vec::new();
    for pod in &dual {
        let (_, router_mac) = gateway(pod);
        let source = pod.ip6.expect("a dual-stack pod");
        let group = source.segments()[1];
        let packet = |eth_dst, destination, ttl, l4| Packet {
            eth_src: pod.mac,
            eth_dst,
            l3: L3::Ipv6 {
                source,
                destination,
                ttl,
                l4,
            },
        };
        let ping6 = L4::Icmp { kind: 128, code: 0 };
        let address = |last: u16| Ipv6Addr::new(0xfd00, group, 0, 0, 0, 0, 0, last);
        let mut add = |what: &str, packet: Packet| {
            cases.push((format!("{} {what}", pod.port), *pod, packet));
        };
        add(
            "pings its IPv6 gateway",
            packet(router_mac, address(1), 64, ping6),
        );
        add(
            "opens TCP to its IPv6 gateway",
            packet(
                router_mac,
                address(1),
                64,
                L4::Tcp {
                    source: 40000,
                    destination: 80,
                },
            ),
        );
        add(
            "sends UDP to its IPv6 gateway",
            packet(
                router_mac,
                address(1),
                64,
                L4::Udp {
                    source: 40000,
                    destination: 53,
                },
            ),
        );
        add(
            "routes to an unknown IPv6 address in its subnet",
            packet(router_mac, address(0x99), 64, ping6),
        );
        add(
            "routes IPv6 to a VPC without a route",
            packet(router_mac, "fd00:99::1".parse().unwrap(), 64, ping6),
        );
        add(
            "routes IPv6 with hop limit 1",
            packet(router_mac, e.ip6.unwrap(), 1, ping6),
        );
        add(
            "routes IPv6 to a learned neighbour",
            packet(router_mac, LEARNED6, 64, ping6),
        );
        add(
            "routes IPv6 into vpc-d's discard route",
            packet(router_mac, "fd00:96:1::5".parse().unwrap(), 64, ping6),
        );
        add(
            "routes IPv6 beside vpc-d's discard route",
            packet(router_mac, "fd00:96:2::5".parse().unwrap(), 64, ping6),
        );
        // vpc-d's ECMP route: flows that differ in their source port spread over both next
        // hops, each as the flow's hash picks (vpc-e's pod has no route there).
        for source_port in 40000..40006 {
            add(
                &format!("opens TCP from port {source_port} over vpc-d's IPv6 ECMP route"),
                packet(
                    router_mac,
                    "fd00:98::5".parse().unwrap(),
                    64,
                    L4::Tcp {
                        source: source_port,
                        destination: 80,
                    },
                ),
            );
        }
        let others = [d1, d2, e].into_iter().filter(|p| p.port != pod.port);
        for other in others {
            let destination = other.ip6.unwrap();
            if other.switch == pod.switch {
                add(
                    &format!("pings {} over IPv6 on its switch", other.port),
                    packet(other.mac, destination, 64, ping6),
                );
                continue;
            }
            add(
                &format!("pings {} over IPv6", other.port),
                packet(router_mac, destination, 64, ping6),
            );
            add(
                &format!("opens TCP to {} over IPv6", other.port),
                packet(
                    router_mac,
                    destination,
                    64,
                    L4::Tcp {
                        source: 40000,
                        destination: 80,
                    },
                ),
            );
            if other.vpc != pod.vpc {
                add(
                    &format!("routes IPv6 with hop limit 2 to {}", other.port),
                    packet(router_mac, destination, 2, ping6),
                );
            }
        }
    }
    cases
}

/// IPv6 through port security, pod to pod on one switch: the dual-stack pod from its listed
/// address and from one it does not hold, its neighbour discovery naming another MAC or
/// advertising another address; its neighbour sending to its listed address and to another;
/// and IPv6 to the pod whose port security lists IPv4 only.
fn ipv6_port_security_cases(pods: &[Pod]) -> Vec<(String, &Pod, Packet)> {
    let find = |port: &str| pods.iter().find(|p| p.port == port).expect(port);
    let (dual, neighbour) = (find(DUAL_PORT), find("subnet-a-p0.ns"));
    let (secured, secured_neighbour) = (find("subnet-a2-p0.ns"), find("subnet-a2-p1.ns"));
    let from = |pod: &Pod, source: Ipv6Addr, to: &Pod, destination: Ipv6Addr, l4: L4| Packet {
        eth_src: pod.mac,
        eth_dst: to.mac,
        l3: L3::Ipv6 {
            source,
            destination,
            // Neighbour discovery travels with hop limit 255 (OVN's `nd` matches say so).
            ttl: if matches!(l4, L4::Nd { .. }) { 255 } else { 64 },
            l4,
        },
    };
    let udp = L4::Udp {
        source: 40000,
        destination: 53,
    };
    let nd = |kind, target, own: [u8; 6]| L4::Nd {
        kind,
        target,
        sll: if kind == 135 { own } else { [0; 6] },
        tll: if kind == 136 { own } else { [0; 6] },
    };
    let neighbour_ll = link_local(neighbour.mac);
    let spoofed_mac = [0x0a, 0x58, 0xde, 0xad, 0xbe, 0xef];
    let cases = [
        (
            dual,
            "sends UDP from its listed IPv6 address",
            from(dual, DUAL_IP6, neighbour, neighbour_ll, udp),
        ),
        (
            dual,
            "sends UDP from an IPv6 address it does not hold",
            from(dual, UNLISTED_IP6, neighbour, neighbour_ll, udp),
        ),
        (
            dual,
            "solicits its neighbour as itself",
            from(
                dual,
                DUAL_IP6,
                neighbour,
                neighbour_ll,
                nd(135, neighbour_ll, dual.mac),
            ),
        ),
        (
            dual,
            "solicits its neighbour naming another MAC",
            from(
                dual,
                DUAL_IP6,
                neighbour,
                neighbour_ll,
                nd(135, neighbour_ll, spoofed_mac),
            ),
        ),
        (
            dual,
            "advertises its listed address",
            from(
                dual,
                DUAL_IP6,
                neighbour,
                neighbour_ll,
                nd(136, DUAL_IP6, dual.mac),
            ),
        ),
        (
            dual,
            "advertises an address it does not hold",
            from(
                dual,
                DUAL_IP6,
                neighbour,
                neighbour_ll,
                nd(136, UNLISTED_IP6, dual.mac),
            ),
        ),
        (
            dual,
            "advertises its address naming another MAC",
            from(
                dual,
                DUAL_IP6,
                neighbour,
                neighbour_ll,
                nd(136, DUAL_IP6, spoofed_mac),
            ),
        ),
        (
            neighbour,
            "sends UDP to the dual-stack pod's listed address",
            from(neighbour, neighbour_ll, dual, DUAL_IP6, udp),
        ),
        (
            neighbour,
            "sends UDP to the dual-stack pod at an address it does not hold",
            from(neighbour, neighbour_ll, dual, UNLISTED_IP6, udp),
        ),
        (
            secured_neighbour,
            "sends UDP to the IPv4-only pod's link-local address",
            from(
                secured_neighbour,
                link_local(secured_neighbour.mac),
                secured,
                link_local(secured.mac),
                udp,
            ),
        ),
        (
            secured,
            "sends UDP from a global IPv6 address (IPv4-only port security)",
            from(
                secured,
                UNLISTED_IP6,
                secured_neighbour,
                link_local(secured_neighbour.mac),
                udp,
            ),
        ),
    ];
    cases
        .into_iter()
        .map(|(pod, what, packet)| (format!("{} {what}", pod.port), pod, packet))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ir_verdicts_equal_ovn_trace() {
    require_root();
    let lab = OvnLab::start().unwrap();
    let pods = build(&lab);

    let common::Replica { sb, compiler, .. } = common::Replica::start(&lab).await;
    // Every flow of the forwarding stages compiles: what stays unsupported is stateful
    // (ACL, load balancing, conntrack, NAT), which this topology leaves at its defaults.
    // Gateway ports' flows are fenced: reported, their traffic dropped (`gateway_unsupported`).
    let forwarding_gaps = common::unsupported_described(&sb, &compiler, |_, reason| {
        !reason.ends_with("is not in the datapath yet") && !reason.ends_with("gateway_unsupported")
    });
    assert!(
        forwarding_gaps.is_empty(),
        "forwarding flows left unsupported:\n{}",
        forwarding_gaps.join("\n")
    );
    let evaluator = Evaluator::new(compiler.entries());

    let external_host = Pod {
        port: EXTERNAL_X_LOCALNET.to_string(),
        switch: "external-x",
        vpc: "",
        mac: EXTERNAL_X_HOST_MAC,
        ip: EXTERNAL_X_HOST,
        ip6: None,
    };
    let mut cases = cases(&pods);
    cases.extend(external_cases(&external_host, &pods));
    let mut disagreements = Vec::new();
    let mut drops = 0;
    let mut compared = 0;
    let mut beyond_ovn_trace = 0;
    let mut nat_cases = 0;
    let mut router_lb_balanced = 0;
    let mut selected = std::collections::BTreeSet::new();
    // The IPv6 ECMP route's flows: the member each took, and whether it left for a pod.
    let mut selected6 = std::collections::BTreeSet::new();
    for (what, pod, packet) in &cases {
        let ours = evaluator.trace(&pod.port, *packet).unwrap();
        selected.extend(ours.selected.iter().copied());
        if what.contains("into vpc-d's discard route") && pod.vpc == "vpc-d" {
            assert!(
                ours.outputs.is_empty()
                    && ours.steps.iter().any(|step| step.contains("discard route")),
                "{what}: not discarded\n{}",
                ours.steps.join("\n")
            );
        }
        // A learned neighbour is routed to, not solicited: the ping itself reaches its owner.
        if what.contains("routes IPv6 to a learned neighbour") {
            assert!(
                matches!(
                    ours.outputs.as_slice(),
                    [(port, Packet { l3: L3::Ipv6 { l4: L4::Icmp { kind: 128, .. }, .. }, .. })]
                        if port == "subnet-d1-p0.ns"
                ),
                "{what}: not to the neighbour MAC_Binding names\n{}",
                ours.steps.join("\n")
            );
        }
        if what.contains("routes to a learned neighbour") {
            assert!(
                matches!(
                    ours.outputs.as_slice(),
                    [(port, Packet { l3: L3::Ipv4 { .. }, .. })] if port == "subnet-a-p0.ns"
                ),
                "{what}: not to the neighbour MAC_Binding names\n{}",
                ours.steps.join("\n")
            );
        }
        // The distributed FIP's pod leaves from its FIP: the router asks for an unknown next
        // hop from the FIP's address and MAC on the external subnet's localnet port, and sends
        // to a known one from them.
        if what.contains("(distributed FIP)") {
            assert!(
                matches!(
                    ours.outputs.as_slice(),
                    [(_, Packet { eth_src, l3: L3::Arp { op: 1, spa: from, .. } | L3::Ipv4 { source: from, .. }, .. })]
                        if *from == DISTRIBUTED_X_FIP && *eth_src == pod.mac
                ),
                "{what}: not from the FIP\n{}",
                ours.steps.join("\n")
            );
        }
        if what.contains("IPv6 ECMP route") {
            assert!(
                !ours.outputs.is_empty(),
                "{what}: dropped\n{}",
                ours.steps.join("\n")
            );
            selected6.extend(ours.selected.iter().copied());
        }
        // vpc-x's gateway is bound to a chassis and its NAT carried: nothing is fenced.
        assert!(
            !ours
                .steps
                .iter()
                .any(|step| step.ends_with("(gateway_unsupported)")),
            "{what}: fenced\n{}",
            ours.steps.join("\n")
        );
        // vpc-x's NAT: what leaves for a known host or enters from one is carried (a FIP's pod
        // reaching its own FIP back to itself), and compared with ovn-trace below.
        let nat_case = what.contains("known external host")
            || pod.port == EXTERNAL_X_LOCALNET
            || what.contains("the FIP's EIP");
        if nat_case {
            assert!(
                !ours.outputs.is_empty(),
                "{what}: dropped\n{}",
                ours.steps.join("\n")
            );
            nat_cases += 1;
        }
        if what.contains("the FIP's EIP") {
            assert!(
                matches!(ours.outputs.as_slice(), [(port, _)] if *port == pod.port),
                "{what}: not back to the pod\n{}",
                ours.steps.join("\n")
            );
        }
        // A router load balancer balances new connections (ovn-trace: `--ct=new`).
        let router_lb = what.contains("router load balancer");
        let Some((mut theirs, their_text)) = trace_oracle::ovn_trace(
            &lab,
            pod.switch,
            &pod.port,
            packet,
            TraceOptions {
                select: ours.selected.first().copied(),
                ct: if router_lb { &["new"; 4] } else { &[] },
            },
        ) else {
            assert!(!nat_case, "{what}: beyond ovn-trace");
            beyond_ovn_trace += 1;
            continue;
        };
        // Its decision: ovn-trace's backends are the VIP's, and the one the datapath picks is
        // applied to what ovn-trace outputs.
        if router_lb && let [decision] = ours.balanced.as_slice() {
            let backends: Vec<String> = decision
                .backends
                .iter()
                .map(|b| format!("{}:{}", b.ip, b.port.unwrap_or(0)))
                .collect();
            assert_eq!(
                trace_oracle::ovn_trace_balancing(&lab, pod.switch, &pod.port, packet),
                Some(backends.join(",")),
                "{what}: the backends"
            );
            if let Some(chosen) = decision.chosen {
                for (_, output) in &mut theirs {
                    *output = to_backend(*output, (chosen.ip, chosen.port.unwrap_or(0)));
                }
            }
            router_lb_balanced += 1;
        }
        compared += 1;
        let what = format!("{what}\n  packet: {packet}");
        let (dropped, disagreement) = trace_oracle::compare(&what, &ours, theirs, &their_text);
        drops += usize::from(dropped);
        disagreements.extend(disagreement);
    }
    println!(
        "{} cases: {compared} compared with ovn-trace ({drops} drops; {nat_cases} through vpc-x's NAT), {beyond_ovn_trace} that ovn-trace 23.03 cannot evaluate, {} disagreements",
        cases.len(),
        disagreements.len()
    );
    assert!(compared >= 200, "only {compared} cases compared");
    // The three vpc-x pods' two cases to the known host, the centralized FIP's pod's hairpin,
    // the 17 from the external network.
    assert_eq!(nat_cases, 3 * 2 + 1 + 17, "NAT cases compared");
    assert_eq!(
        router_lb_balanced, 2,
        "router load balancer decisions compared"
    );
    // The flows that differ in their source port took both members of the ECMP groups.
    assert_eq!(
        selected.into_iter().collect::<Vec<_>>(),
        [1, 2],
        "ECMP members chosen"
    );
    assert_eq!(
        selected6.into_iter().collect::<Vec<_>>(),
        [1, 2],
        "IPv6 ECMP members chosen"
    );
    assert!(
        disagreements.is_empty(),
        "{} of {} cases disagree:\n\n{}",
        disagreements.len(),
        cases.len(),
        disagreements.join("\n\n")
    );

    // The kernel, on every case (those ovn-trace cannot evaluate too: the evaluator is the
    // reference here).
    let entries: Vec<_> = compiler.entries().cloned().collect();
    let mut kernel = oracle_kernel::KernelReplay::new(&entries);
    let mut report = oracle_kernel::Report::default();
    for (router, reasons) in &kernel.blocked {
        println!(
            "  the backend declines router {router}: {}",
            reasons.join("; ")
        );
    }
    let distributed_pod = format!("{DISTRIBUTED_X_POD}.ns");
    for (what, pod, packet) in &cases {
        if pod.port == EXTERNAL_X_LOCALNET {
            // The distributed FIP's traffic enters its pod's chassis; the rest the gateway's.
            let resident = what
                .contains("distributed")
                .then_some(distributed_pod.as_str());
            kernel.check_from_provider(&mut report, &evaluator, what, &pod.port, *packet, resident);
        } else {
            kernel.check(&mut report, &evaluator, what, &pod.port, *packet);
        }
    }
    println!(
        "kernel replay: {} cases, {} dropped by both, {} forwarded alike, {} dropped by the kernel as an unsupported router, {} disagreements",
        report.replayed,
        report.both_drop,
        report.both_forward,
        report.unsupported_router,
        report.disagreements.len()
    );
    assert_eq!(report.replayed, cases.len());
    assert!(
        report.disagreements.is_empty(),
        "{} of {} cases disagree between the kernel and the evaluator:\n\n{}",
        report.disagreements.len(),
        report.replayed,
        report.disagreements.join("\n\n")
    );

    // Open vSwitch, programmed by the OpenFlow backend from the same IR, on every case a pod
    // sends (`ofproto/trace`).
    let openflow = oracle_openflow::OpenFlowReplay::new(&entries);
    let datapaths = entries.iter().filter_map(|entry| match entry {
        ovnbpf_agent::pipeline::ir::IrEntry::Datapath { datapath, name, .. } => {
            Some((*datapath, name.clone()))
        }
        _ => None,
    });
    for fenced in openflow.fenced(datapaths) {
        println!("  the OpenFlow backend fences {fenced}");
    }
    let mut report = oracle_openflow::Report::default();
    for (what, pod, packet) in &cases {
        openflow.check(&mut report, &evaluator, what, &pod.port, *packet);
    }
    println!(
        "ofproto/trace: {} cases traced ({} from the external network not), {} dropped by both, {} forwarded alike, {} through another ECMP member alike, dropped by br-int where the backend reports it does not translate: {:?}, {} disagreements",
        report.traced,
        report.skipped,
        report.both_drop,
        report.both_forward,
        report.ecmp_member,
        report.untranslated,
        report.disagreements.len()
    );
    assert!(
        report.both_forward >= 200,
        "only {} cases forwarded alike",
        report.both_forward
    );
    assert!(
        report.disagreements.is_empty(),
        "{} of {} cases disagree between br-int and the evaluator:\n\n{}",
        report.disagreements.len(),
        report.traced,
        report.disagreements.join("\n\n")
    );
}
