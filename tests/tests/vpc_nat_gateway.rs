//! Kube-OVN's VPC NAT gateway (`VpcNatGateway`, the iptables pattern) through the agents'
//! datapath. A custom VPC's subnet holds a NAT gateway pod at its `lanIp`; the VPC's default
//! route points at it (the user's `staticRoutes` `0.0.0.0/0 → lanIp`, as Kube-OVN's e2e writes
//! it); the pod's second NIC `net1` is a macvlan on the node's provider NIC (Multus on NAD
//! `ovn-vpc-external-network`), on the physical network an external host sits on; inside the
//! pod, iptables does what `nat-gateway.sh` does: the subnet SNATed to a shared EIP, one pod's
//! FIP (DNAT in, SNAT out). The agents' part is routing to the pod next hop (across nodes and on
//! its own node) and leaving the macvlan's frames alone on a provider NIC they also serve (an
//! underlay subnet bridged to it): the external host sees the shared EIP or the FIP as source,
//! reaches the FIP's pod, and still reaches the underlay pod on the same NIC.
//!
//! The VPC is built as Kube-OVN 1.12–1.14 builds it: 1.15's per-subnet source route outranks the
//! default route, on real OVN as here (see `Topology::without_subnet_source_routes`).

use ovnbpf_tests::scenario;
use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket},
    time::Duration,
};

use ovnbpf_tests::scenario::{PlannedAgents, PodPlan, TwoNodes};
use ovnbpf_tests::{
    kubeovn::Topology,
    netns::Netns,
    network::{ExternalHost, Node, PhysicalSwitch, Pod},
    ovn::OvnLab,
    process::wait_until,
};

const LAN_IP: Ipv4Addr = Ipv4Addr::new(10, 50, 0, 254);
/// The external host: the external subnet's gateway.
const EXTERNAL_HOST: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 1);
/// `net1`'s own address (the NAD's IPAM).
const NET1_IP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 10);
/// The EIP of the subnet's shared SNAT rule.
const SNAT_EIP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 100);
/// The EIP of a2's FIP.
const FIP_EIP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 101);
/// The port the external host answers UDP "who are you" datagrams on.
const WHO_PORT: u16 = 7070;
/// The port a2 listens on behind its FIP.
const FIP_TCP_PORT: u16 = 8080;

/// a1 is on the other node than the NAT gateway, a2 on its node; u1 is an underlay pod on the
/// provider network the gateway's net1 is on.
const PODS: [PodPlan; 4] = [
    ("a1", "subnet-nat", 0, Ipv4Addr::new(10, 50, 0, 2)),
    ("a2", "subnet-nat", 1, Ipv4Addr::new(10, 50, 0, 3)),
    ("natgw", "subnet-nat", 1, LAN_IP),
    ("u1", "external", 1, Ipv4Addr::new(172, 30, 0, 20)),
];

#[test]
fn vpc_reaches_the_outside_through_a_nat_gateway_pod() {
    let TwoNodes {
        lab, nodes, prefix, ..
    } = &TwoNodes::start();
    let (_physical, external) = external_network(prefix, nodes);
    let mut topology = Topology::new();
    topology
        .without_subnet_source_routes()
        .vpc_with_subnet("vpc-nat", "subnet-nat", "10.50.0.0/24")
        .unwrap()
        .static_route("vpc-nat", "0.0.0.0/0", LAN_IP)
        .plain_switch("external", "172.30.0.0/24")
        .unwrap()
        .localnet("external", "physnet1", 0);
    let pods = scenario::build_planned_pods(lab, nodes, topology, &PODS, true, 1400);
    scenario::silence_ipv6(&pods.iter().collect::<Vec<_>>());
    let (a1, a2, natgw, u1) = (&pods[0], &pods[1], &pods[2], &pods[3]);
    nat_gateway_pod(natgw, nodes[1].netns());

    let agents = start_agents(lab, nodes, &PODS);
    let logs = || agents.logs();
    let _who = WhoAreYou::start(external.netns());

    // Out through the gateway pod, from the other node and from its own: routed by the VPC to
    // the pod next hop, SNATed by the pod to the shared EIP (a1) or a2's FIP.
    let reached = wait_until(Duration::from_secs(10), || {
        a1.ping(EXTERNAL_HOST, 1).is_ok_and(|n| n == 1)
    });
    assert!(reached, "a1 → the external host{}", logs());
    assert_eq!(
        a2.ping(EXTERNAL_HOST, 3).unwrap(),
        3,
        "a2 → the external host"
    );
    assert_eq!(
        source_seen_from(a1),
        Some(SNAT_EIP),
        "a1 leaves as the shared EIP{}",
        logs()
    );
    assert_eq!(
        source_seen_from(a2),
        Some(FIP_EIP),
        "a2 leaves as its FIP{}",
        logs()
    );

    // In through the FIP: the pod sees the external host itself (DNAT only).
    assert_eq!(
        external.ping(FIP_EIP, 3).unwrap(),
        3,
        "the external host → a2's FIP{}",
        logs()
    );
    assert_eq!(
        peer_of_connection_through_fip(a2, external.netns(), FIP_EIP),
        Some(EXTERNAL_HOST),
        "a TCP connection to the FIP reaches a2 from the external host{}",
        logs()
    );

    // The underlay pod on the same provider NIC is still reached, both ways.
    assert_eq!(
        external.ping(PODS[3].3, 3).unwrap(),
        3,
        "the external host → the underlay pod{}",
        logs()
    );
    assert_eq!(
        u1.ping(EXTERNAL_HOST, 3).unwrap(),
        3,
        "the underlay pod → out"
    );
}

/// The external network: a physical switch with a trunk to each node's provider NIC `eth1`,
/// and the external host (the external subnet's gateway) on it.
fn external_network(prefix: &str, nodes: &[Node]) -> (PhysicalSwitch, ExternalHost) {
    let physical = PhysicalSwitch::with_trunks(prefix, nodes, "eth1").unwrap();
    let external = physical
        .add_host("ext", None, &format!("{EXTERNAL_HOST}/24"))
        .unwrap();
    (physical, external)
}

/// Kube-OVN's OVN-native external access for `vpc` (a custom VPC with its first subnet
/// `subnet`, `cidr`), as 1.13 builds it (1.15's per-subnet source routes outrank the default
/// route): the underlay subnet `external` (172.30.0.0/24, provider network `physnet1`,
/// untagged), the VPC's gateway port on it at 172.30.0.10 bound to gateway chassis node1, and
/// the VPC's default route to the external host.
fn external_access(vpc: &str, subnet: &str, cidr: &str) -> Topology {
    let mut topology = Topology::new();
    topology
        .without_subnet_source_routes()
        .vpc_with_subnet(vpc, subnet, cidr)
        .unwrap()
        .plain_switch("external", "172.30.0.0/24")
        .unwrap()
        .localnet("external", "physnet1", 0)
        .external_access(vpc, "external", "172.30.0.10/24", &[scenario::NODES[0]])
        .static_route(vpc, "0.0.0.0/0", EXTERNAL_HOST);
    topology
}

/// A VPC with OVN-native external access ([`external_access`]) and its subnet's SNAT to
/// [`SNAT_EIP`], on `two`'s nodes: the external network, `plans`' pods, the agents, and the
/// external host's "who are you" server.
struct SnatVpc {
    _who: WhoAreYou,
    pods: Vec<Pod>,
    agents: PlannedAgents,
    external: ExternalHost,
    _physical: PhysicalSwitch,
}

fn snat_vpc(two: &TwoNodes, (vpc, subnet, cidr): (&str, &str, &str), plans: &[PodPlan]) -> SnatVpc {
    let (physical, external) = external_network(&two.prefix, &two.nodes);
    let mut topology = external_access(vpc, subnet, cidr);
    topology.nat(vpc, "snat", &SNAT_EIP.to_string(), cidr);
    let pods = scenario::build_planned_pods(&two.lab, &two.nodes, topology, plans, true, 1400);
    scenario::silence_ipv6(&pods.iter().collect::<Vec<_>>());
    let agents = start_agents(&two.lab, &two.nodes, plans);
    SnatVpc {
        _who: WhoAreYou::start(external.netns()),
        pods,
        agents,
        external,
        _physical: physical,
    }
}

/// One agent per node, provider network `physnet1` bridged to `eth1`, once every planned pod
/// is up.
fn start_agents(lab: &OvnLab, nodes: &[Node], plans: &[PodPlan]) -> PlannedAgents {
    PlannedAgents::start(lab, nodes, plans, &["--bridge-mappings", "physnet1:eth1"])
}

/// Makes `pod` the NAT gateway as Kube-OVN's StatefulSet and `nat-gateway.sh` make it: `net1`
/// a macvlan (bridge mode) on `node`'s provider NIC `eth1` with its own address, the default
/// route through it (eth0 keeps the VPC's subnet), forwarding on, the EIPs on net1, the shared
/// SNAT for the subnet and a2's FIP (its DNAT and its SNAT before the shared one).
fn nat_gateway_pod(pod: &Pod, node: &Netns) {
    let netns = pod.netns();
    node.ip(&[
        "link",
        "add",
        "link",
        "eth1",
        "name",
        "natgw-net1",
        "type",
        "macvlan",
        "mode",
        "bridge",
    ])
    .unwrap();
    node.ip(&["link", "set", "natgw-net1", "netns", netns.name()])
        .unwrap();
    netns
        .ip(&["link", "set", "natgw-net1", "name", "net1"])
        .unwrap();
    netns
        .ip(&["addr", "add", &format!("{NET1_IP}/24"), "dev", "net1"])
        .unwrap();
    netns.ip(&["link", "set", "net1", "up"]).unwrap();
    netns
        .ip(&[
            "route",
            "replace",
            "default",
            "via",
            &EXTERNAL_HOST.to_string(),
            "dev",
            "net1",
        ])
        .unwrap();
    netns
        .exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])
        .unwrap();
    for eip in [SNAT_EIP, FIP_EIP] {
        netns
            .ip(&["addr", "replace", &format!("{eip}/24"), "dev", "net1"])
            .unwrap();
    }
    let (fip_pod, fip, snat) = (
        PODS[1].3.to_string(),
        FIP_EIP.to_string(),
        SNAT_EIP.to_string(),
    );
    for rule in [
        vec!["-A", "PREROUTING", "-d", &fip, "-j", "DNAT"],
        vec![
            "-A",
            "POSTROUTING",
            "-s",
            &fip_pod,
            "-o",
            "net1",
            "-j",
            "SNAT",
        ],
        vec![
            "-A",
            "POSTROUTING",
            "-s",
            "10.50.0.0/24",
            "-o",
            "net1",
            "-j",
            "SNAT",
        ],
    ] {
        let mut args = vec!["-t", "nat"];
        args.extend(rule);
        match args[3] {
            "PREROUTING" => args.extend(["--to-destination", &fip_pod]),
            _ if args[5] == fip_pod => args.extend(["--to-source", &fip]),
            _ => args.extend(["--to-source", &snat, "--random-fully"]),
        }
        netns.exec("iptables", &args).unwrap();
    }
}

/// A UDP server on the external host that answers each datagram with the address it came from.
struct WhoAreYou {
    socket: UdpSocket,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WhoAreYou {
    fn start(netns: &Netns) -> Self {
        let socket = netns
            .run_in(|| Ok(UdpSocket::bind((Ipv4Addr::UNSPECIFIED, WHO_PORT))?))
            .unwrap();
        let serving = socket.try_clone().unwrap();
        let thread = std::thread::spawn(move || {
            let mut buffer = [0u8; 64];
            while let Ok((length, peer)) = serving.recv_from(&mut buffer) {
                if &buffer[..length] == b"stop" {
                    break;
                }
                let _ = serving.send_to(peer.ip().to_string().as_bytes(), peer);
            }
        });
        Self {
            socket,
            thread: Some(thread),
        }
    }
}

impl Drop for WhoAreYou {
    fn drop(&mut self) {
        let local = SocketAddr::from((Ipv4Addr::LOCALHOST, WHO_PORT));
        let _ = self.socket.send_to(b"stop", local);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The source address the external host saw `pod`'s datagram come from (three tries).
fn source_seen_from(pod: &Pod) -> Option<Ipv4Addr> {
    source_seen_by(pod, EXTERNAL_HOST)
}

/// The source address external host `host` saw `pod`'s datagram come from (three tries).
fn source_seen_by(pod: &Pod, host: Ipv4Addr) -> Option<Ipv4Addr> {
    let socket = pod
        .netns()
        .run_in(|| Ok(UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?))
        .ok()?;
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    socket.connect((host, WHO_PORT)).ok()?;
    let mut buffer = [0u8; 64];
    (0..3).find_map(|_| {
        socket.send(b"who").ok()?;
        let length = socket.recv(&mut buffer).ok()?;
        std::str::from_utf8(&buffer[..length]).ok()?.parse().ok()
    })
}

/// One UDP socket in a pod asking the external host who it is, datagram after datagram (a flow
/// that runs across NAT changes).
struct Asker(UdpSocket);

impl Asker {
    fn new(pod: &Pod) -> Self {
        let socket = pod
            .netns()
            .run_in(|| Ok(UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?))
            .unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        socket.connect((EXTERNAL_HOST, WHO_PORT)).unwrap();
        Self(socket)
    }

    /// The source the external host saw this datagram come from; `None` without an answer.
    fn ask(&self) -> Option<Ipv4Addr> {
        let mut buffer = [0u8; 64];
        self.0.send(b"who").ok()?;
        let length = self.0.recv(&mut buffer).ok()?;
        std::str::from_utf8(&buffer[..length]).ok()?.parse().ok()
    }
}

/// Connects from `external` to `fip`'s TCP port, which `pod` listens on; the peer address the
/// pod's side of the connection has, after a byte each way.
fn peer_of_connection_through_fip(pod: &Pod, external: &Netns, fip: Ipv4Addr) -> Option<Ipv4Addr> {
    peer_of_connection_to(
        pod,
        FIP_TCP_PORT,
        external,
        SocketAddr::from((fip, FIP_TCP_PORT)),
    )
}

/// Connects from `external` to `target`, which reaches `pod` listening on TCP port `port`; the
/// peer address the pod's side of the connection has, after a byte each way (`None` when the
/// connection or the exchange failed: the client takes only answers from `target`).
fn peer_of_connection_to(
    pod: &Pod,
    port: u16,
    external: &Netns,
    target: SocketAddr,
) -> Option<Ipv4Addr> {
    let listener = pod
        .netns()
        .run_in(|| Ok(TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))?))
        .ok()?;
    listener.set_nonblocking(true).ok()?;
    let accepting = std::thread::spawn(move || echo_one_byte(&listener));
    let exchanged = exchange_one_byte(external, target);
    let peer = accepting.join().ok()?;
    exchanged.ok()?;
    peer
}

/// Kube-OVN's OVN-native external access (pattern 2): a custom VPC with `enableExternal` (a
/// gateway port on the underlay subnet `external`, bound to gateway chassis node1), its default
/// route out of it, an SNAT rule, a centralized FIP and a distributed one (`OvnFip` of e2, on
/// node2). The VPC's own routing goes on (before, the whole router was dropped as U2O and NAT).
/// The distributed FIP is carried on e2's node, as OVN carries it there: e2 leaves as its FIP
/// from its own node's provider NIC (the router asks for the external gateway's MAC from the
/// FIP and learns it from the reply), the external host reaches e2 through the FIP (ARP for it
/// answered with e2's MAC from e2's node only, DNAT in, e2 seeing the external host itself).
/// Unbinding and binding the FIP again takes effect on a flow that runs on (one UDP socket).
/// What the gateway chassis carries (the SNAT, the centralized FIP) goes through node1 (see
/// also `ovn_native_gateway_chassis_carries_a_vpcs_external_traffic`).
/// e2's distributed FIP.
const DISTRIBUTED_FIP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 11);

const NATIVE_PODS: [PodPlan; 3] = [
    ("e1", "subnet-e1", 0, Ipv4Addr::new(10, 60, 1, 2)),
    ("e2", "subnet-e2", 1, Ipv4Addr::new(10, 60, 2, 3)),
    ("e3", "subnet-e1", 1, Ipv4Addr::new(10, 60, 1, 3)),
];

#[test]
fn ovn_native_external_access_carries_a_distributed_fip_and_the_gateways_nat() {
    let TwoNodes {
        lab, nodes, prefix, ..
    } = &TwoNodes::start();
    let (_physical, external) = external_network(prefix, nodes);
    let mut topology = Topology::new();
    // As 1.13 builds it (1.15's per-subnet source routes outrank the default route).
    topology
        .without_subnet_source_routes()
        .vpc_with_subnet("vpc-ext", "subnet-e1", "10.60.1.0/24")
        .unwrap()
        .subnet("vpc-ext", "subnet-e2", "10.60.2.0/24")
        .unwrap()
        .plain_switch("external", "172.30.0.0/24")
        .unwrap()
        .localnet("external", "physnet1", 0)
        .external_access(
            "vpc-ext",
            "external",
            "172.30.0.10/24",
            &[scenario::NODES[0]],
        )
        .static_route("vpc-ext", "0.0.0.0/0", EXTERNAL_HOST)
        .nat("vpc-ext", "snat", "172.30.0.10", "10.60.1.0/24")
        .nat("vpc-ext", "dnat_and_snat", "172.30.0.12", "10.60.1.3");
    let pods = scenario::build_planned_pods(lab, nodes, topology, &NATIVE_PODS, true, 1400);
    // The distributed FIP names e2's port, which exists now.
    let bind_fip = || {
        Topology::new()
            .distributed_fip(
                "vpc-ext",
                &DISTRIBUTED_FIP.to_string(),
                NATIVE_PODS[1].3,
                "e2.ns",
                &ovnbpf_tests::kubeovn::mac_for("e2"),
            )
            .apply(lab)
            .unwrap();
    };
    bind_fip();
    scenario::silence_ipv6(&pods.iter().collect::<Vec<_>>());
    let (e1, e2, e3) = (&pods[0], &pods[1], &pods[2]);

    let agents = start_agents(lab, nodes, &NATIVE_PODS);
    let logs = || agents.logs();

    // Routed inside the VPC: across subnets and nodes, and on one node.
    let reached = wait_until(Duration::from_secs(10), || {
        e1.ping(NATIVE_PODS[1].3, 1).is_ok_and(|n| n == 1)
    });
    assert!(reached, "e1 → e2 across subnets and nodes{}", logs());
    assert_eq!(e3.ping(NATIVE_PODS[1].3, 3).unwrap(), 3, "e3 → e2 on node2");
    assert_eq!(e2.ping(NATIVE_PODS[0].3, 3).unwrap(), 3, "e2 → e1");
    // The gateway port's address answers, as on every chassis with OVN.
    assert_eq!(
        e1.ping(Ipv4Addr::new(172, 30, 0, 10), 3).unwrap(),
        3,
        "e1 → the gateway port's address{}",
        logs()
    );

    // The distributed FIP, on e2's node: out as the FIP, in through it.
    let _who = WhoAreYou::start(external.netns());
    assert!(
        wait_until(Duration::from_secs(10), || source_seen_from(e2)
            == Some(DISTRIBUTED_FIP)),
        "e2 leaves as its distributed FIP{}",
        logs()
    );
    // A flow running while the FIP is unbound and bound again (one UDP socket, never
    // restarted): without the FIP its datagrams are the gateway chassis's (dropped here), with
    // it they leave as the FIP again, from the next datagram on (no connection state).
    let running = Asker::new(e2);
    assert_eq!(running.ask(), Some(DISTRIBUTED_FIP), "{}", logs());
    lab.nbctl(&[
        "lr-nat-del",
        "vpc-ext",
        "dnat_and_snat",
        &DISTRIBUTED_FIP.to_string(),
    ])
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || running.ask().is_none()),
        "the unbound FIP still carries e2's flow{}",
        logs()
    );
    assert_eq!(
        external.ping(DISTRIBUTED_FIP, 2).unwrap(),
        0,
        "the unbound FIP still answers"
    );
    bind_fip();
    assert!(
        wait_until(Duration::from_secs(10), || running.ask()
            == Some(DISTRIBUTED_FIP)),
        "e2's running flow does not leave as the FIP bound again{}",
        logs()
    );
    assert_eq!(e2.ping(EXTERNAL_HOST, 3).unwrap(), 3, "e2 → out{}", logs());
    // The external host learned the FIP's MAC from the router's ARP request: forgotten, so it
    // asks, and only e2's node answers.
    external.netns().ip(&["neigh", "flush", "all"]).unwrap();
    assert_eq!(
        external.ping(DISTRIBUTED_FIP, 3).unwrap(),
        3,
        "the external host → e2's FIP{}",
        logs()
    );
    assert_eq!(
        peer_of_connection_through_fip(e2, external.netns(), DISTRIBUTED_FIP),
        Some(EXTERNAL_HOST),
        "a TCP connection to the FIP reaches e2 from the external host{}",
        logs()
    );
    // ICMP errors either way quote the packet as its receiver knows it: a closed port refuses
    // TCP (a reset) and UDP (port unreachable) both ways.
    let refused = |(tcp, udp): (std::io::Result<()>, std::io::Result<()>)| {
        let kind = |result: std::io::Result<()>| result.err().map(|error| error.kind());
        (kind(tcp), kind(udp))
    };
    let refused_twice = (
        Some(std::io::ErrorKind::ConnectionRefused),
        Some(std::io::ErrorKind::ConnectionRefused),
    );
    assert_eq!(
        refused(scenario::socket_outcomes(e2, EXTERNAL_HOST, 9)),
        refused_twice,
        "e2 → a closed port outside{}",
        logs()
    );
    assert_eq!(
        refused(scenario::socket_outcomes_in(
            external.netns(),
            SocketAddr::from((DISTRIBUTED_FIP, 9))
        )),
        refused_twice,
        "outside → a closed port of e2 through its FIP{}",
        logs()
    );
    // The external gateway's MAC, learned from its reply to the router's ARP request.
    let learned = lab
        .sbctl(&[
            "--bare",
            "--columns=logical_port,mac",
            "find",
            "MAC_Binding",
            &format!("ip=\"{EXTERNAL_HOST}\""),
        ])
        .unwrap();
    assert!(
        learned.contains("vpc-ext-external") && learned.contains(&external.mac().unwrap()),
        "MAC_Binding of the external gateway: {learned}"
    );
    let fip_answers = |node: usize| {
        agents.counters(nodes, node)["router_replies"]["arp_reply_provider"]
            .as_u64()
            .unwrap_or_default()
    };
    assert_eq!(
        (fip_answers(0), fip_answers(1) > 0),
        (0, true),
        "ARP for the FIP answered by e2's node alone"
    );
    let neighbour = external
        .netns()
        .ip(&["neigh", "show", &DISTRIBUTED_FIP.to_string()])
        .unwrap();
    assert!(
        neighbour.contains(&ovnbpf_tests::kubeovn::mac_for("e2")),
        "the FIP is at e2's MAC (its external MAC): {neighbour}"
    );

    // Out of the gateway port otherwise: through the gateway chassis (node1, e1's), which
    // carries the subnet's SNAT (to the gateway port's own address) and e3's centralized FIP
    // (e3 on node2: tunnelled to node1, and reached through the FIP from outside).
    assert!(
        wait_until(Duration::from_secs(10), || source_seen_from(e1)
            == Some(Ipv4Addr::new(172, 30, 0, 10))),
        "e1 leaves from the subnet's SNAT address{}",
        logs()
    );
    let centralized_fip = Ipv4Addr::new(172, 30, 0, 12);
    assert_eq!(
        source_seen_from(e3),
        Some(centralized_fip),
        "e3 leaves from its centralized FIP{}",
        logs()
    );
    assert_eq!(
        external.ping(centralized_fip, 3).unwrap(),
        3,
        "the external host → e3's centralized FIP{}",
        logs()
    );

    // A from-lport ACL on the external subnet (Kube-OVN's `spec.acls`): what the provider
    // network sends for the FIP meets no ACL stage on its way in, so it is refused there and
    // counted (security fails closed): it never reaches e2.
    let (fail_closed, delivered_to_e2) = (
        || {
            agents.counters(nodes, 1)["drops"]["acl_fail_closed"]
                .as_u64()
                .unwrap_or_default()
        },
        || scenario::delivered(&agents.counters(nodes, 1), "e2_h"),
    );
    Topology::new()
        .subnet_acls(
            "external",
            &[ovnbpf_tests::kubeovn::SubnetAcl {
                direction: "from-lport",
                priority: 1000,
                match_: "ip4.src == 192.0.2.0/24",
                action: "drop",
            }],
        )
        .apply(lab)
        .unwrap();
    // Once the agent has the ACL, the pings stop.
    assert!(
        wait_until(Duration::from_secs(10), || external
            .ping(DISTRIBUTED_FIP, 1)
            .is_ok_and(|n| n == 0)),
        "the FIP still answers under the external subnet's ACL{}",
        logs()
    );
    let before = (fail_closed(), delivered_to_e2());
    assert_eq!(external.ping(DISTRIBUTED_FIP, 3).unwrap(), 0);
    assert!(
        fail_closed() >= before.0 + 3 && delivered_to_e2() == before.1,
        "the FIP's way in is not refused before e2 under the ACL: {before:?} → {:?}{}",
        (fail_closed(), delivered_to_e2()),
        logs()
    );
}

/// A custom VPC's external access without NAT, through its gateway chassis (Kube-OVN's
/// `enableExternal` with the external network routing the VPC's subnet back to the gateway
/// port): the ovnbpf agent of the gateway chassis claims the chassisredirect port; what either
/// node's pods send out of the gateway port leaves from the gateway chassis's provider NIC (the
/// other node tunnels it there over Geneve, to the chassisredirect port), with the pod's own
/// address; the external host reaches the pods back through the gateway port, whose address
/// only the gateway chassis answers ARP for. Moving the gateway to the other node moves the
/// claim, and a running flow follows. A centralized SNAT rule translates on the gateway
/// chassis, the running flow moving to it and back off it when it goes; so does a centralized
/// FIP, both ways; so does a `dnat` rule, whose replies alone leave from its address.
const GATEWAY_PODS: [PodPlan; 2] = [
    ("g1", "subnet-g1", 0, Ipv4Addr::new(10, 70, 1, 2)),
    ("g2", "subnet-g1", 1, Ipv4Addr::new(10, 70, 1, 3)),
];
/// The gateway port's address on the external network ([`external_access`]'s).
const GATEWAY_PORT_IP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 10);

#[test]
fn ovn_native_gateway_chassis_carries_a_vpcs_external_traffic() {
    let TwoNodes {
        lab, nodes, prefix, ..
    } = &TwoNodes::start();
    let (_physical, external) = external_network(prefix, nodes);
    let topology = external_access("vpc-gw", "subnet-g1", "10.70.1.0/24");
    let pods = scenario::build_planned_pods(lab, nodes, topology, &GATEWAY_PODS, true, 1400);
    scenario::silence_ipv6(&pods.iter().collect::<Vec<_>>());
    let (g1, g2) = (&pods[0], &pods[1]);
    // The external network routes the VPC's subnet to the gateway port.
    external
        .netns()
        .ip(&[
            "route",
            "add",
            "10.70.0.0/16",
            "via",
            &GATEWAY_PORT_IP.to_string(),
        ])
        .unwrap();

    let agents = start_agents(lab, nodes, &GATEWAY_PODS);
    let logs = || agents.logs();
    let held_by =
        |node: usize| scenario::bound_to(lab, "cr-vpc-gw-external", scenario::NODES[node]);
    assert!(
        wait_until(Duration::from_secs(10), || held_by(0)),
        "node1's agent does not hold the chassisredirect port{}",
        logs()
    );

    // Out from the gateway chassis's pod, and from the other node's through it; the external
    // host sees the pods' own addresses.
    let _who = WhoAreYou::start(external.netns());
    assert!(
        wait_until(Duration::from_secs(10), || source_seen_from(g1)
            == Some(GATEWAY_PODS[0].3)),
        "g1 (on the gateway chassis) does not reach the external host{}",
        logs()
    );
    assert_eq!(
        source_seen_from(g2),
        Some(GATEWAY_PODS[1].3),
        "g2 (off the gateway chassis) does not reach the external host{}",
        logs()
    );
    // g2's traffic leaves by node1's provider NIC, not its own.
    assert_pings_leave_by(nodes, (g2, "g2"), (EXTERNAL_HOST, 0), logs);
    // In through the gateway port: the external host asks for its address (answered by the
    // gateway chassis alone), then reaches both pods and the port itself.
    external.netns().ip(&["neigh", "flush", "all"]).unwrap();
    assert_eq!(
        external.ping(GATEWAY_PODS[1].3, 3).unwrap(),
        3,
        "the external host → g2 through the gateway port{}",
        logs()
    );
    assert_eq!(external.ping(GATEWAY_PODS[0].3, 3).unwrap(), 3, "→ g1");
    assert_eq!(
        external.ping(GATEWAY_PORT_IP, 3).unwrap(),
        3,
        "the external host → the gateway port{}",
        logs()
    );
    // A packet whose TTL runs out entering the gateway port gets OVN's answer: ICMP time
    // exceeded from its own destination.
    let expiring = external
        .netns()
        .command("ping")
        .args(["-n", "-c", "1", "-W", "2", "-t", "1"])
        .arg(GATEWAY_PODS[1].3.to_string())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&expiring.stdout);
    assert!(
        printed.contains(&format!("From {}", GATEWAY_PODS[1].3))
            && printed.contains("Time to live exceeded"),
        "TTL 1 into the gateway port: {printed}{}",
        logs()
    );
    let provider_answers = |node: usize| {
        agents.counters(nodes, node)["router_replies"]["arp_reply_provider"]
            .as_u64()
            .unwrap_or_default()
    };
    assert_eq!(
        (provider_answers(0) > 0, provider_answers(1)),
        (true, 0),
        "ARP for the gateway port answered by the gateway chassis alone"
    );

    // The gateway moves to node2 (the node labels change): node1 releases the port, node2
    // claims it, and a flow that runs on follows.
    let running = Asker::new(g1);
    assert_eq!(running.ask(), Some(GATEWAY_PODS[0].3), "{}", logs());
    lab.nbctl(&[
        "lrp-set-gateway-chassis",
        "vpc-gw-external",
        scenario::NODES[1],
        "100",
    ])
    .unwrap();
    lab.nbctl(&[
        "lrp-del-gateway-chassis",
        "vpc-gw-external",
        scenario::NODES[0],
    ])
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || held_by(1)),
        "node2's agent does not take the chassisredirect port{}",
        logs()
    );
    // Before any pod sends through the new gateway, the physical network (the switch's
    // learned MACs) knows where the gateway port is now: node2's gratuitous ARP.
    assert!(
        wait_until(Duration::from_secs(5), || external
            .ping(GATEWAY_PODS[0].3, 1)
            .is_ok_and(|n| n == 1)),
        "the external host does not reach g1 through the moved gateway before any pod sends{}",
        logs()
    );
    assert!(
        wait_until(Duration::from_secs(10), || running.ask()
            == Some(GATEWAY_PODS[0].3)),
        "g1's running flow does not follow the gateway to node2{}",
        logs()
    );
    assert_pings_leave_by(nodes, (g1, "g1"), (EXTERNAL_HOST, 1), logs);

    // Centralized SNAT (Kube-OVN's `OvnSnatRule` on its own EIP), on the gateway chassis
    // (node2 now): the running flow leaves from the EIP from its next datagram on (g1, off the
    // gateway: tunnelled to it, translated there), and so do g2's pings and a TCP connection
    // (g2, on the gateway); the external network asks for the EIP, which the gateway answers.
    lab.nbctl(&[
        "lr-nat-add",
        "vpc-gw",
        "snat",
        &SNAT_EIP.to_string(),
        "10.70.1.0/24",
    ])
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || running.ask() == Some(SNAT_EIP)),
        "g1's running flow does not leave from the SNAT EIP{}",
        logs()
    );
    assert_eq!(
        source_seen_from(g2),
        Some(SNAT_EIP),
        "g2 → out under SNAT{}",
        logs()
    );
    assert_eq!(
        g1.ping(EXTERNAL_HOST, 3).unwrap(),
        3,
        "g1 pings out under SNAT{}",
        logs()
    );
    assert_eq!(
        g2.ping(EXTERNAL_HOST, 3).unwrap(),
        3,
        "g2 pings out under SNAT{}",
        logs()
    );
    assert_eq!(
        tcp_peer_seen_outside(g2, external.netns()),
        Some(SNAT_EIP),
        "g2's TCP connection out under SNAT{}",
        logs()
    );
    assert_eq!(
        tcp_peer_seen_outside(g1, external.netns()),
        Some(SNAT_EIP),
        "g1's TCP connection out under SNAT{}",
        logs()
    );
    let neighbour = external
        .netns()
        .ip(&["neigh", "show", &SNAT_EIP.to_string()])
        .unwrap();
    assert!(
        neighbour.contains(&ovnbpf_tests::kubeovn::mac_for("vpc-gw-external")),
        "the SNAT EIP is at the gateway port's MAC: {neighbour}"
    );
    // A closed port outside refuses TCP (a reset, a reply) and UDP (ICMP port unreachable,
    // about the packet as it left: translated back so the pod's socket gets it), from both
    // nodes.
    for pod in [g1, g2] {
        let kind = |result: std::io::Result<()>| result.err().map(|error| error.kind());
        let (tcp, udp) = scenario::socket_outcomes(pod, EXTERNAL_HOST, 9);
        assert_eq!(
            (kind(tcp), kind(udp)),
            (
                Some(std::io::ErrorKind::ConnectionRefused),
                Some(std::io::ErrorKind::ConnectionRefused)
            ),
            "{} → a closed port outside under SNAT{}",
            pod.name(),
            logs()
        );
    }
    // `ovnbpfctl trace` agrees: g1's ping leaves the gateway's network from the SNAT address.
    let microflow = format!(
        "inport == \"g1.ns\" && eth.src == {} && eth.dst == {} && ip4.src == {} && \
         ip4.dst == {EXTERNAL_HOST} && ip.ttl == 64 && icmp4.type == 8 && icmp4.code == 0",
        ovnbpf_tests::kubeovn::mac_for("g1"),
        ovnbpf_tests::kubeovn::mac_for("vpc-gw-subnet-g1"),
        GATEWAY_PODS[0].3,
    );
    let traced = trace(lab, &microflow);
    let outputs = traced["outputs"].as_array().cloned().unwrap_or_default();
    assert!(
        outputs.len() == 1
            && outputs[0]["port"] == "localnet.external"
            && outputs[0]["packet"].as_str().is_some_and(
                |packet| packet.contains(&format!("IPv4 {SNAT_EIP} → {EXTERNAL_HOST}"))
            ),
        "the trace of g1's ping under SNAT: {traced:#}"
    );
    // The rule goes: the running flow leaves from g1's own address again, at once.
    lab.nbctl(&["lr-nat-del", "vpc-gw", "snat", "10.70.1.0/24"])
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || running.ask()
            == Some(GATEWAY_PODS[0].3)),
        "g1's running flow does not leave untranslated once the rule is gone{}",
        logs()
    );

    // A centralized FIP (Kube-OVN's `OvnFip` of an IP, without the pod's MAC) for g1, off the
    // gateway chassis: the running flow leaves from the FIP from its next datagram on; the
    // external host reaches g1 through it (ping, TCP); unbound, the flow leaves from g1's own
    // address again.
    let central_fip = Ipv4Addr::new(172, 30, 0, 101);
    lab.nbctl(&[
        "lr-nat-add",
        "vpc-gw",
        "dnat_and_snat",
        &central_fip.to_string(),
        &GATEWAY_PODS[0].3.to_string(),
    ])
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || running.ask()
            == Some(central_fip)),
        "g1's running flow does not leave from its centralized FIP{}",
        logs()
    );
    assert_eq!(
        external.ping(central_fip, 3).unwrap(),
        3,
        "the external host → g1's centralized FIP{}",
        logs()
    );
    assert_eq!(
        peer_of_connection_through_fip(g1, external.netns(), central_fip),
        Some(EXTERNAL_HOST),
        "a TCP connection to the centralized FIP reaches g1{}",
        logs()
    );
    lab.nbctl(&[
        "lr-nat-del",
        "vpc-gw",
        "dnat_and_snat",
        &central_fip.to_string(),
    ])
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || running.ask()
            == Some(GATEWAY_PODS[0].3)),
        "g1's running flow does not leave from its own address once the FIP is unbound{}",
        logs()
    );
    assert_eq!(
        external.ping(central_fip, 2).unwrap(),
        0,
        "the unbound FIP answers"
    );

    // A `dnat` rule (a DNAT without its SNAT twin) beside the subnet's SNAT, for g1 (off the
    // gateway chassis): the external host reaches g1 through the rule's address (ping, TCP: g1
    // sees the external host itself, and the replies come back from the rule's address, or
    // the connection would not open), while what g1 opens itself still leaves from the SNAT
    // EIP, its running flow too; g2 reaches g1 through it from inside the VPC. The rule goes:
    // its address answers no more.
    let dnat_ip = Ipv4Addr::new(172, 30, 0, 102);
    lab.nbctl(&[
        "lr-nat-add",
        "vpc-gw",
        "snat",
        &SNAT_EIP.to_string(),
        "10.70.1.0/24",
    ])
    .unwrap();
    lab.nbctl(&[
        "lr-nat-add",
        "vpc-gw",
        "dnat",
        &dnat_ip.to_string(),
        &GATEWAY_PODS[0].3.to_string(),
    ])
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || external
            .ping(dnat_ip, 1)
            .unwrap_or(0)
            == 1),
        "the external host → g1's DNAT address{}",
        logs()
    );
    assert_eq!(
        external.ping(dnat_ip, 3).unwrap(),
        3,
        "the external host → g1's DNAT address{}",
        logs()
    );
    assert_eq!(
        peer_of_connection_through_fip(g1, external.netns(), dnat_ip),
        Some(EXTERNAL_HOST),
        "a TCP connection to the DNAT address reaches g1{}",
        logs()
    );
    assert_eq!(
        source_seen_from(g1),
        Some(SNAT_EIP),
        "g1's own traffic beside its DNAT rule{}",
        logs()
    );
    assert_eq!(running.ask(), Some(SNAT_EIP), "g1's running flow{}", logs());
    // From inside the VPC (OVN's hairpin, `lr_out_egr_loop`): g2 leaves by the SNAT for the
    // DNAT address and comes back into the router, to g1, which sees the SNAT EIP and whose
    // replies loop back to g2 through the SNAT's connection.
    assert_eq!(
        g2.ping(dnat_ip, 3).unwrap(),
        3,
        "g2 → g1's DNAT address, inside the VPC{}",
        logs()
    );
    assert_eq!(
        peer_of_connection_through_fip(g1, g2.netns(), dnat_ip),
        Some(SNAT_EIP),
        "a TCP connection from g2 to g1's DNAT address{}",
        logs()
    );
    lab.nbctl(&["lr-nat-del", "vpc-gw", "dnat", &dnat_ip.to_string()])
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || external
            .ping(dnat_ip, 1)
            .unwrap_or(1)
            == 0),
        "the removed DNAT address still answers{}",
        logs()
    );
}

/// A TCP connection from `pod` to the external host's `port` (a byte each way once open), and
/// the external host's end, held open.
fn tcp_connection_out(pod: &Pod, external: &Netns, port: u16) -> (TcpStream, TcpStream) {
    let listener = external
        .run_in(|| Ok(TcpListener::bind((EXTERNAL_HOST, port))?))
        .unwrap();
    let accepting = std::thread::spawn(move || -> std::io::Result<TcpStream> {
        let (mut stream, _) = listener.accept()?;
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte)?;
        stream.write_all(&byte)?;
        Ok(stream)
    });
    let target = SocketAddr::from((EXTERNAL_HOST, port));
    let mut stream = pod
        .netns()
        .run_in(|| Ok(TcpStream::connect_timeout(&target, Duration::from_secs(3))?))
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    stream.write_all(b"x").unwrap();
    let mut echoed = [0u8; 1];
    stream.read_exact(&mut echoed).unwrap();
    (stream, accepting.join().unwrap().unwrap())
}

/// The address the external host sees a TCP connection from `pod` come from (a byte each
/// way on port [`FIP_TCP_PORT`] of the external host).
fn tcp_peer_seen_outside(pod: &Pod, external: &Netns) -> Option<Ipv4Addr> {
    let listener = external
        .run_in(|| Ok(TcpListener::bind((EXTERNAL_HOST, FIP_TCP_PORT))?))
        .ok()?;
    listener.set_nonblocking(true).ok()?;
    let accepting = std::thread::spawn(move || echo_one_byte(&listener));
    let exchanged = exchange_one_byte(pod.netns(), SocketAddr::from((EXTERNAL_HOST, FIP_TCP_PORT)));
    let peer = accepting.join().ok()?;
    exchanged.ok()?;
    peer
}

/// Accepts one connection on `listener` (non-blocking; 5 s), echoes one byte on it and
/// returns the peer's address.
fn echo_one_byte(listener: &TcpListener) -> Option<Ipv4Addr> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let (mut stream, peer) = loop {
        match listener.accept() {
            Ok(accepted) => break accepted,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => return None,
        }
    };
    stream.set_nonblocking(false).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    let mut byte = [0u8; 1];
    stream.read_exact(&mut byte).ok()?;
    stream.write_all(&byte).ok()?;
    match peer.ip() {
        std::net::IpAddr::V4(address) => Some(address),
        std::net::IpAddr::V6(_) => None,
    }
}

/// Connects from `netns` to `target` and has one byte echoed.
fn exchange_one_byte(netns: &Netns, target: SocketAddr) -> std::io::Result<()> {
    netns
        .run_in(|| Ok(TcpStream::connect_timeout(&target, Duration::from_secs(3))?))
        .map_err(std::io::Error::other)
        .and_then(|mut stream| {
            stream.set_read_timeout(Some(Duration::from_secs(3)))?;
            stream.write_all(b"x")?;
            let mut echoed = [0u8; 1];
            stream.read_exact(&mut echoed)
        })
}

/// `ovnbpfctl trace --json MICROFLOW` against `lab`'s Southbound.
fn trace(lab: &OvnLab, microflow: &str) -> serde_json::Value {
    let remote = lab.unix_remote(ovnbpf_tests::ovn::Db::Southbound);
    let output = std::process::Command::new(ovnbpf_tests::workspace_binary("ovnbpfctl"))
        .args(["trace", "--json", microflow, "--remote", &remote])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "ovnbpfctl trace failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// `pod` (with its name) pings external host `to` 20 times; the pings leave by node
/// `gateway`'s provider NIC (it sends at least 20 more packets), not by the other node's.
fn assert_pings_leave_by(
    nodes: &[Node; 2],
    (pod, name): (&Pod, &str),
    (to, gateway): (Ipv4Addr, usize),
    logs: impl Fn() -> String,
) {
    let sent = || nodes.each_ref().map(provider_tx_packets);
    let before = sent();
    assert_eq!(pod.ping(to, 20).unwrap(), 20, "{name} → out{}", logs());
    let after = sent();
    let grew_by_20 = |node: usize| after[node] >= before[node] + 20;
    assert!(
        grew_by_20(gateway) && !grew_by_20(1 - gateway),
        "{name}'s pings did not leave by node{}'s provider NIC (node1, node2 sent): \
         {before:?} → {after:?}{}",
        gateway + 1,
        logs()
    );
}

/// Packets `node`'s provider NIC `eth1` has sent.
fn provider_tx_packets(node: &Node) -> u64 {
    let shown = node.netns().ip(&["-s", "-j", "link", "show", "eth1"]);
    shown
        .ok()
        .and_then(|json| serde_json::from_str::<serde_json::Value>(&json).ok())
        .and_then(|links| links[0]["stats64"]["tx"]["packets"].as_u64())
        .unwrap_or_default()
}

/// Issue 25's user report, in all four placements: a pod pings the outside and runs a UDP flow
/// through its subnet's SNAT; a FIP is bound to it (distributed or centralized; the pod on or
/// off the gateway chassis) and unbound again, neither flow restarted. Each change applies
/// within a second to the running UDP flow (it leaves from the FIP, then from the SNAT address
/// again), and the running ping loses at most half a second of replies across both changes. A
/// TCP connection opened under the SNAT address is reset once the FIP is bound (its next
/// segment leaves from the FIP; the external host resets it), not black-holed.
const PLACEMENT_PODS: [PodPlan; 2] = [
    ("l1", "subnet-l", 0, Ipv4Addr::new(10, 80, 1, 2)),
    ("l2", "subnet-l", 1, Ipv4Addr::new(10, 80, 1, 3)),
];

#[test]
fn nat_changes_take_effect_on_running_flows_in_every_placement() {
    let two = &TwoNodes::start();
    let lab = &two.lab;
    let SnatVpc {
        pods,
        agents,
        external,
        ..
    } = &snat_vpc(two, ("vpc-l", "subnet-l", "10.80.1.0/24"), &PLACEMENT_PODS);
    let logs = || agents.logs();

    for (case, (pod_index, distributed)) in [(0, true), (0, false), (1, true), (1, false)]
        .into_iter()
        .enumerate()
    {
        let (name, _, _, address) = PLACEMENT_PODS[pod_index];
        let pod = &pods[pod_index];
        let placement = format!(
            "{} FIP of {name} ({} the gateway chassis)",
            if distributed {
                "distributed"
            } else {
                "centralized"
            },
            if pod_index == 0 { "on" } else { "off" }
        );
        let fip = Ipv4Addr::new(172, 30, 0, 110 + case as u8).to_string();
        let running = Asker::new(pod);
        assert!(
            wait_until(Duration::from_secs(10), || running.ask() == Some(SNAT_EIP)),
            "{placement}: the flow does not leave from the SNAT address first{}",
            logs()
        );
        // A TCP connection through the SNAT address, open across the binding.
        let (mut connection, _held) = tcp_connection_out(pod, external.netns(), 9090 + case as u16);
        std::thread::scope(|scope| {
            // Five seconds of pings, ten a second, across both changes.
            let pinging = scope.spawn(|| pod.ping_every(EXTERNAL_HOST, 50, "0.1"));
            std::thread::sleep(Duration::from_secs(1));
            let bind = if distributed {
                vec![
                    "lr-nat-add".to_string(),
                    "vpc-l".into(),
                    "dnat_and_snat".into(),
                    fip.clone(),
                    address.to_string(),
                    format!("{name}.ns"),
                    ovnbpf_tests::kubeovn::mac_for(name),
                ]
            } else {
                vec![
                    "lr-nat-add".to_string(),
                    "vpc-l".into(),
                    "dnat_and_snat".into(),
                    fip.clone(),
                    address.to_string(),
                ]
            };
            lab.nbctl(&bind.iter().map(String::as_str).collect::<Vec<_>>())
                .unwrap();
            let bound = std::time::Instant::now();
            assert!(
                wait_until(Duration::from_secs(5), || running.ask()
                    == Some(fip.parse().unwrap())),
                "{placement}: the running flow does not leave from the FIP{}",
                logs()
            );
            let switched = bound.elapsed();
            assert!(
                switched < Duration::from_secs(1),
                "{placement}: the running flow took {switched:?} to leave from the FIP"
            );
            // The TCP connection's next segment leaves from the FIP too: the external host
            // knows no such connection and resets it, and the reset reaches the pod (reset,
            // not black-holed).
            let mut answer = [0u8; 1];
            let outcome = connection
                .write_all(b"x")
                .and_then(|()| connection.read(&mut answer));
            assert_eq!(
                outcome.map_err(|error| error.kind()),
                Err(std::io::ErrorKind::ConnectionReset),
                "{placement}: the TCP connection opened under SNAT{}",
                logs()
            );
            std::thread::sleep(Duration::from_secs(1));
            lab.nbctl(&["lr-nat-del", "vpc-l", "dnat_and_snat", &fip])
                .unwrap();
            let unbound = std::time::Instant::now();
            assert!(
                wait_until(Duration::from_secs(5), || running.ask() == Some(SNAT_EIP)),
                "{placement}: the running flow does not leave from the SNAT address again{}",
                logs()
            );
            let switched = unbound.elapsed();
            assert!(
                switched < Duration::from_secs(1),
                "{placement}: the running flow took {switched:?} to go back to the SNAT address"
            );
            let replies = pinging.join().unwrap().unwrap();
            assert!(
                replies >= 45,
                "{placement}: the running ping got {replies} of 50 replies across binding and \
                 unbinding{}",
                logs()
            );
        });
    }
}

/// Kube-OVN's `extraExternalSubnets`: a VPC with a gateway port on each of two external
/// subnets, `external` (untagged, gateway chassis node1) and `external2` (VLAN 20 of the same
/// provider network, gateway chassis node2), each with an SNAT EIP of its own for the VPC's
/// subnet (northd applies a rule at the port whose network holds its address). Both pods reach
/// both external hosts, each through the gateway port on the host's network, from that port's
/// EIP, by that port's gateway chassis. Before, a router with several gateway ports was carried
/// for the first only, and what it routed out of the others was dropped.
const TWO_GATEWAY_PODS: [PodPlan; 2] = [
    ("t1", "subnet-t1", 0, Ipv4Addr::new(10, 80, 1, 2)),
    ("t2", "subnet-t1", 1, Ipv4Addr::new(10, 80, 1, 3)),
];
/// The second external network's host and the VPC's SNAT EIP there.
const EXTERNAL2_HOST: Ipv4Addr = Ipv4Addr::new(172, 30, 20, 1);
const SNAT2_EIP: Ipv4Addr = Ipv4Addr::new(172, 30, 20, 100);

#[test]
fn a_vpc_with_two_gateway_ports_leaves_by_each() {
    let TwoNodes {
        lab, nodes, prefix, ..
    } = &TwoNodes::start();
    let (physical, external) = external_network(prefix, nodes);
    let external2 = physical
        .add_host("ext2", Some(20), &format!("{EXTERNAL2_HOST}/24"))
        .unwrap();
    let cidr = "10.80.1.0/24";
    let mut topology = external_access("vpc-two", "subnet-t1", cidr);
    topology
        .plain_switch("external2", "172.30.20.0/24")
        .unwrap()
        .localnet("external2", "physnet1", 20)
        .external_access(
            "vpc-two",
            "external2",
            "172.30.20.10/24",
            &[scenario::NODES[1]],
        )
        .nat("vpc-two", "snat", &SNAT_EIP.to_string(), cidr)
        .nat("vpc-two", "snat", &SNAT2_EIP.to_string(), cidr);
    let pods = scenario::build_planned_pods(lab, nodes, topology, &TWO_GATEWAY_PODS, true, 1400);
    scenario::silence_ipv6(&pods.iter().collect::<Vec<_>>());
    let agents = start_agents(lab, nodes, &TWO_GATEWAY_PODS);
    let logs = || agents.logs();
    let _who = WhoAreYou::start(external.netns());
    let _who2 = WhoAreYou::start(external2.netns());
    for (redirect, node) in [("cr-vpc-two-external", 0), ("cr-vpc-two-external2", 1)] {
        assert!(
            wait_until(Duration::from_secs(10), || scenario::bound_to(
                lab,
                redirect,
                scenario::NODES[node]
            )),
            "{redirect} is not held by node{}{}",
            node + 1,
            logs()
        );
    }
    for (pod, name) in pods.iter().zip(["t1", "t2"]) {
        for (host, eip) in [(EXTERNAL_HOST, SNAT_EIP), (EXTERNAL2_HOST, SNAT2_EIP)] {
            assert!(
                wait_until(Duration::from_secs(10), || source_seen_by(pod, host)
                    == Some(eip)),
                "{name} does not reach {host} from {eip}{}",
                logs()
            );
        }
        assert_pings_leave_by(nodes, (pod, name), (EXTERNAL_HOST, 0), logs);
        assert_pings_leave_by(nodes, (pod, name), (EXTERNAL2_HOST, 1), logs);
    }
}

/// Kube-OVN's `OvnDnatRule`s: a load balancer per rule on the VPC's router (`lr-lb-add`), its VIP
/// an EIP's port, balanced by the gateway chassis (node1; OVN's `lr_in_dnat` `ct_lb_mark` where
/// the chassisredirect port resides). The external host reaches l1 (on the gateway node) and
/// l2 (on node2, its replies tunnelled to the gateway) through the EIP's ports, TCP and UDP:
/// each pod sees the external host itself, the host's connected sockets take the answers only
/// from the EIP and the port it dialled (the replies translated back, port included). A port
/// no rule names is not answered; the subnet's SNAT goes on beside the rules on the same
/// gateway. A rule removed takes its VIP away: new connections are no longer answered.
const DNAT_PODS: [PodPlan; 2] = [
    ("l1", "subnet-l", 0, Ipv4Addr::new(10, 86, 1, 2)),
    ("l2", "subnet-l", 1, Ipv4Addr::new(10, 86, 1, 3)),
];
/// The EIP the rules publish the pods' ports on.
const DNAT_EIP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 110);

#[test]
fn ovn_dnat_rules_publish_pods_ports_through_the_gateway() {
    let two = &TwoNodes::start();
    let lab = &two.lab;
    let SnatVpc {
        pods,
        agents,
        external,
        ..
    } = &snat_vpc(two, ("vpc-l", "subnet-l", "10.86.1.0/24"), &DNAT_PODS);
    let logs = || agents.logs();
    let (l1, l2) = (&pods[0], &pods[1]);
    let (l1_ip, l2_ip) = (DNAT_PODS[0].3, DNAT_PODS[1].3);
    Topology::new()
        .ovn_dnat_rule("vpc-l", "dnat-l1", (DNAT_EIP, 8080), (l1_ip, 80), "tcp")
        .ovn_dnat_rule("vpc-l", "dnat-l2", (DNAT_EIP, 9090), (l2_ip, 90), "tcp")
        .ovn_dnat_rule("vpc-l", "dnat-l2-udp", (DNAT_EIP, 5353), (l2_ip, 53), "udp")
        .apply(lab)
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || scenario::bound_to(
            lab,
            "cr-vpc-l-external",
            scenario::NODES[0]
        )),
        "the gateway is not held by node1{}",
        logs()
    );
    let to = |port| SocketAddr::from((DNAT_EIP, port));
    let reached = wait_until(Duration::from_secs(10), || {
        peer_of_connection_to(l1, 80, external.netns(), to(8080)) == Some(EXTERNAL_HOST)
    });
    assert!(reached, "EIP:8080 does not reach l1:80{}", logs());
    assert_eq!(
        peer_of_connection_to(l2, 90, external.netns(), to(9090)),
        Some(EXTERNAL_HOST),
        "EIP:9090 does not reach l2:90 (on the other node){}",
        logs()
    );
    // UDP: l2 answers on :53 with the address it saw; the host's socket is connected to the
    // EIP's port 5353, so only a reply from there is taken.
    let server = l2
        .netns()
        .run_in(|| Ok(UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 53))?))
        .unwrap();
    let answering = std::thread::spawn(move || {
        server.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut buffer = [0u8; 16];
        let (_, peer) = server.recv_from(&mut buffer).ok()?;
        server.send_to(peer.ip().to_string().as_bytes(), peer).ok()
    });
    let client = external
        .netns()
        .run_in(|| Ok(UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?))
        .unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    client.connect(to(5353)).unwrap();
    client.send(b"who").unwrap();
    let mut answer = [0u8; 64];
    let length = client.recv(&mut answer).unwrap_or(0);
    assert_eq!(
        std::str::from_utf8(&answer[..length]).ok(),
        Some(EXTERNAL_HOST.to_string().as_str()),
        "EIP:5353/udp → l2:53{}",
        logs()
    );
    answering.join().unwrap();
    // A port no rule names is not answered; the SNAT beside the rules still works.
    assert!(
        exchange_one_byte(external.netns(), to(7070)).is_err(),
        "EIP:7070 answered"
    );
    assert_eq!(
        source_seen_from(l2),
        Some(SNAT_EIP),
        "l2 leaves as the SNAT address"
    );
    // The rule removed (kube-ovn-controller's `DelDnatRule`: the VIP out of the balancer).
    lab.nbctl(&["lb-del", "dnat-l1", &to(8080).to_string()])
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || peer_of_connection_to(
            l1,
            80,
            external.netns(),
            to(8080)
        )
        .is_none()),
        "EIP:8080 still reaches l1 after the rule's removal{}",
        logs()
    );
}

/// A dedicated gateway node (Kube-OVN's `external-gw` nodes are often infrastructure nodes):
/// node2 runs no pod, yet as the VPC's gateway chassis its agent, monitoring only what its
/// claims make local, gets the router and its switches and carries the VPC's SNAT for the pods
/// on node1.
const LONE_PODS: [PodPlan; 1] = [("d1", "subnet-d", 0, Ipv4Addr::new(10, 85, 1, 2))];

#[test]
fn a_gateway_chassis_without_pods_of_its_own_carries_the_vpc() {
    let two = &TwoNodes::start();
    let lab = &two.lab;
    let SnatVpc { pods, agents, .. } =
        &snat_vpc(two, ("vpc-d", "subnet-d", "10.85.1.0/24"), &LONE_PODS);
    let logs = || agents.logs();
    lab.nbctl(&[
        "lrp-set-gateway-chassis",
        "vpc-d-external",
        scenario::NODES[1],
        "100",
    ])
    .unwrap();
    lab.nbctl(&[
        "lrp-del-gateway-chassis",
        "vpc-d-external",
        scenario::NODES[0],
    ])
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || source_seen_from(&pods[0])
            == Some(SNAT_EIP)),
        "d1 does not leave from the SNAT address through the pod-less gateway node{}",
        logs()
    );
    assert_eq!(
        pods[0].ping(EXTERNAL_HOST, 3).unwrap(),
        3,
        "d1 → out{}",
        logs()
    );
}

/// Gateway failover (OVN's HA chassis group, BFD between the chassis): a VPC's gateway port on
/// node1 (priority 100) and node2 (99), its pod on node3 (the group's reference chassis), the
/// subnet's SNAT. The agents run BFD with each other as ovn-controller has Open vSwitch do on
/// its tunnels (NB_Global's `bfd-min-rx` 500 ms, `bfd-mult` 3). node1 holds the port; its agent
/// is killed (its datapath goes with it, as a node failing), node2's BFD session with it goes
/// down within a second, node2 elects itself, claims the port and announces it, and the pod's
/// running ping resumes: losses counted and bounded (at most 3 s of a 10/s ping).
#[test]
fn a_gateway_fails_over_when_its_chassis_is_lost() {
    const PLAN: [PodPlan; 1] = [("f3", "subnet-f", 2, Ipv4Addr::new(10, 95, 1, 3))];
    let TwoNodes {
        lab,
        nodes,
        prefix,
        mut underlay,
    } = TwoNodes::start();
    let [node1, node2] = nodes;
    let nodes = [node1, node2, underlay.add_node("node3").unwrap()];
    let (_physical, _external) = external_network(&prefix, &nodes);
    lab.nbctl(&[
        "set",
        "NB_Global",
        ".",
        "options:bfd-min-rx=500",
        "options:bfd-min-tx=100",
        "options:bfd-mult=3",
    ])
    .unwrap();
    let mut topology = Topology::new();
    topology
        .without_subnet_source_routes()
        .vpc_with_subnet("vpc-f", "subnet-f", "10.95.1.0/24")
        .unwrap()
        .plain_switch("external", "172.30.0.0/24")
        .unwrap()
        .localnet("external", "physnet1", 0)
        .external_access("vpc-f", "external", "172.30.0.10/24", &["node1", "node2"])
        .static_route("vpc-f", "0.0.0.0/0", EXTERNAL_HOST)
        .nat("vpc-f", "snat", &SNAT_EIP.to_string(), "10.95.1.0/24");
    let pods = scenario::build_planned_pods(&lab, &nodes, topology, &PLAN, true, 1400);
    scenario::silence_ipv6(&pods.iter().collect::<Vec<_>>());
    let log_dir = tempfile::tempdir().unwrap();
    let mut agents: Vec<ovnbpf_tests::process::Child> = ["node1", "node2", "node3"]
        .iter()
        .zip(&nodes)
        .map(|(chassis, node)| {
            ovnbpf_tests::agent::AgentSpec {
                chassis,
                node,
                local_ports: if *chassis == "node3" {
                    vec!["f3.ns=f3_h".into()]
                } else {
                    Vec::new()
                },
                pin_root: None,
                cni_dir: None,
                extra_args: vec!["--bridge-mappings".into(), "physnet1:eth1".into()],
            }
            .spawn(
                &lab,
                &ovnbpf_tests::workspace_binary("ovnbpf-agent"),
                log_dir.path().join(format!("{chassis}.log")),
            )
            .unwrap()
        })
        .collect();
    let logs = |agents: &[ovnbpf_tests::process::Child]| {
        agents
            .iter()
            .map(ovnbpf_tests::process::Child::log_tail)
            .collect::<String>()
    };
    assert!(
        scenario::planned_pods_up(&lab, &PLAN),
        "f3 not up{}",
        logs(&agents)
    );
    let held_by = |chassis: &str| scenario::bound_to(&lab, "cr-vpc-f-external", chassis);
    let f3 = &pods[0];
    assert!(
        wait_until(Duration::from_secs(30), || held_by("node1")
            && f3.ping(EXTERNAL_HOST, 1).is_ok_and(|n| n == 1)),
        "node1 does not hold the gateway port, or f3 does not reach out through it{}{}",
        lab.sbctl(&["list", "HA_Chassis_Group"]).unwrap_or_default(),
        logs(&agents)
    );
    let replies = std::thread::scope(|scope| {
        // Twelve seconds of pings, ten a second; node1 fails after three.
        let pinging = scope.spawn(|| f3.ping_every(EXTERNAL_HOST, 120, "0.1"));
        std::thread::sleep(Duration::from_secs(3));
        agents[0].kill();
        assert!(
            wait_until(Duration::from_secs(10), || held_by("node2")),
            "node2 does not take the gateway port over{}",
            logs(&agents)
        );
        pinging.join().unwrap().unwrap()
    });
    println!("failover: {replies} of 120 replies");
    assert!(
        replies >= 90,
        "the running ping got {replies} of 120 replies across the failover{}",
        logs(&agents)
    );
}
