//! A Kube-OVN cluster's day-one traffic on the default VPC, on real packets through the agents'
//! eBPF datapath: `ovn-cluster` as kube-ovn-controller builds it (`ovn-default` and a second
//! subnet, `join`, each node's join port `node-<node>` and its port group, the node policies at
//! priority 30000, the distributed gateways' policies at 29000 by the address set of each node's
//! pods, the subnets' allow policies at 31000 and the route to the join gateway).
//!
//! Each agent builds the node's NIC `ovn0` on the join switch, as kube-ovn-cni does: the join
//! port's MAC and address, one route per default-VPC subnet via the join gateway with the node's
//! InternalIP as source. Then, as kubelet would from the node's own namespace: TCP connects and
//! an HTTP GET to pods on the same and on the other node; pods reach the other node's InternalIP;
//! pods of the two subnets reach each other across nodes; pods reach a host outside the cluster
//! through their own node, masqueraded to its address from the NAT-outgoing subnet only; an
//! external host reaches a pod through NodePorts as kube-proxy serves them (its DNAT on the
//! node: externalTrafficPolicy=Local to the node's own pod, Cluster to the other node's); a third
//! subnet's centralized gateway on both nodes under ECMP (an ECMP reroute) sends its pod's flows
//! out through both nodes, masqueraded there. An agent restart adopts the NIC as it
//! is (same link, probes go on) and removes a stale route; a subnet deleted loses its route;
//! `--cleanup` removes the NIC and the NAT table.

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    time::Duration,
};

use ovnbpf_tests::{
    agent::AgentSpec,
    kubeovn::{self, Topology, mac_for},
    netns::Netns,
    network::{Node, Pod, PodSpec},
    process::{Child, wait_until},
    scenario::{NODES, TwoNodes, port_up},
    workspace_binary,
};

const SECOND_SUBNET: (&str, &str) = ("subnet-x", "10.17.0.0/16");
/// Where each node's agent serves its metrics, in the node's namespace.
const METRICS: &str = "127.0.0.1:10665";
/// A subnet with a centralized gateway on both nodes under ECMP, NAT-outgoing.
const CENTRALIZED_SUBNET: (&str, &str) = ("subnet-c", "10.18.0.0/16");

/// (pod, subnet, node index, address in its /16).
const PODS: [(&str, &str, usize, Ipv4Addr); 5] = [
    ("d1", "ovn-default", 0, Ipv4Addr::new(10, 16, 0, 5)),
    ("d2", "ovn-default", 1, Ipv4Addr::new(10, 16, 0, 6)),
    ("x1", "subnet-x", 0, Ipv4Addr::new(10, 17, 0, 5)),
    ("x2", "subnet-x", 1, Ipv4Addr::new(10, 17, 0, 6)),
    ("c1", "subnet-c", 0, Ipv4Addr::new(10, 18, 0, 5)),
];

fn join_ip(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(100, 64, 0, 2 + node as u8)
}

fn join_mac(node: usize) -> String {
    mac_for(&format!("node-{}", NODES[node]))
}

/// The default VPC with a second subnet, both nodes, their gateways and the pods, as
/// kube-ovn-controller writes them.
fn build(lab: &ovnbpf_tests::ovn::OvnLab, nodes: &[Node; 2]) {
    let mut topology = Topology::new();
    topology
        .default_vpc()
        .unwrap()
        .subnet(kubeovn::DEFAULT_VPC, SECOND_SUBNET.0, SECOND_SUBNET.1)
        .unwrap()
        .subnet(
            kubeovn::DEFAULT_VPC,
            CENTRALIZED_SUBNET.0,
            CENTRALIZED_SUBNET.1,
        )
        .unwrap()
        .centralized_gateway(CENTRALIZED_SUBNET.1, &[join_ip(0), join_ip(1)]);
    for (index, node) in nodes.iter().enumerate() {
        let name = NODES[index];
        topology
            .node_port(name, &join_mac(index), join_ip(index))
            .node_policy(node.ip(), join_ip(index));
        for subnet in [kubeovn::DEFAULT_SUBNET.0, SECOND_SUBNET.0] {
            topology.distributed_gateway(subnet, name, join_ip(index));
        }
    }
    for (pod, subnet, node, ip) in PODS {
        topology.pod(subnet, pod, "ns", &mac_for(pod), ip);
        if subnet != CENTRALIZED_SUBNET.0 {
            topology.pod_on_node(subnet, pod, "ns", NODES[node]);
        }
    }
    topology.apply(lab).unwrap();
}

fn add_pods(nodes: &[Node; 2]) -> Vec<Pod> {
    PODS.iter()
        .map(|(name, _, node, ip)| {
            let [a, b, ..] = ip.octets();
            nodes[*node]
                .add_pod(&PodSpec {
                    name,
                    host_interface: &format!("{name}_h"),
                    mac: Some(&mac_for(name)),
                    address: Some(&format!("{ip}/16")),
                    gateway: Some(Ipv4Addr::new(a, b, 0, 1)),
                    mtu: Some(1400),
                })
                .unwrap()
        })
        .collect()
}

fn agent<'a>(nodes: &'a [Node; 2], index: usize, pin_root: &std::path::Path) -> AgentSpec<'a> {
    AgentSpec {
        chassis: NODES[index],
        node: &nodes[index],
        local_ports: PODS
            .iter()
            .filter(|pod| pod.2 == index)
            .map(|(name, ..)| format!("{name}.ns={name}_h"))
            .collect(),
        pin_root: Some(pin_root.join(NODES[index])),
        cni_dir: None,
        extra_args: vec![
            "--pod-mtu".into(),
            "1400".into(),
            // Kube-OVN's ovn-default has natOutgoing; the second subnet does not.
            "--nat-outgoing-subnet".into(),
            kubeovn::DEFAULT_SUBNET.0.into(),
            "--nat-outgoing-subnet".into(),
            CENTRALIZED_SUBNET.0.into(),
            // On the node's own loopback.
            "--metrics-address".into(),
            METRICS.to_string(),
        ],
    }
}

fn start(
    lab: &ovnbpf_tests::ovn::OvnLab,
    spec: &AgentSpec<'_>,
    log_dir: &std::path::Path,
) -> Child {
    spec.spawn(
        lab,
        &workspace_binary("ovnbpf-agent"),
        log_dir.join(format!("{}.log", spec.chassis)),
    )
    .unwrap()
}

/// An HTTP server in `pod` on port 8080 answering every GET with its name, until the test ends.
fn serve_http(pod: &Pod) {
    let listener = pod
        .netns()
        .run_in(|| Ok(TcpListener::bind("0.0.0.0:8080")?))
        .unwrap();
    let name = pod.name().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            let body = format!("pod {name}\n");
            let _ = write!(
                stream,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

/// An HTTP GET from `netns` (the node's own, as kubelet's probes) to `ip:8080`: the body.
fn http_get(netns: &Netns, ip: Ipv4Addr) -> std::io::Result<String> {
    http_get_from(netns, SocketAddr::from((ip, 8080)), "/")
}

/// An HTTP GET of `path` from `netns` to `server`: the response.
fn http_get_from(netns: &Netns, server: SocketAddr, path: &str) -> std::io::Result<String> {
    netns
        .run_in(|| {
            let mut stream = TcpStream::connect_timeout(&server, Duration::from_secs(2))?;
            stream.set_read_timeout(Some(Duration::from_secs(2)))?;
            write!(stream, "GET {path} HTTP/1.0\r\n\r\n")?;
            let mut response = String::new();
            stream.read_to_string(&mut response)?;
            Ok(response)
        })
        .map_err(std::io::Error::other)
}

/// Retried for up to 10 s while the path comes up.
fn http_get_eventually(netns: &Netns, ip: Ipv4Addr) -> String {
    let mut last = Err(std::io::Error::other("never tried"));
    wait_until(Duration::from_secs(10), || {
        last = http_get(netns, ip);
        last.as_ref().is_ok_and(|body| body.contains("200 OK"))
    });
    last.unwrap_or_else(|e| panic!("GET http://{ip}:8080 from {}: {e}", netns.name()))
}

/// The routes through `ovn0` in `netns`, as `ip route` prints them.
fn node_routes(netns: &Netns) -> String {
    netns
        .ip(&["route", "show", "dev", "ovn0"])
        .unwrap_or_default()
}

#[test]
fn the_node_reaches_its_pods_and_the_other_nodes_through_ovn0() {
    let mut two = TwoNodes::start();
    // A host outside the cluster, on the nodes' network; it routes the non-NATed subnet back
    // through node1.
    let external = two.underlay.add_node("ext").unwrap();
    let (lab, nodes) = (&two.lab, &two.nodes);
    external
        .netns()
        .ip(&[
            "route",
            "add",
            SECOND_SUBNET.1,
            "via",
            &nodes[0].ip().to_string(),
        ])
        .unwrap();
    build(lab, nodes);
    let pods = add_pods(nodes);
    let work = tempfile::tempdir().unwrap();
    let pins = ovnbpf_tests::bpffs::BpfMount::create().unwrap();
    let mut agents: Vec<Child> = (0..2)
        .map(|index| start(lab, &agent(nodes, index, pins.path()), work.path()))
        .collect();
    let tails = |agents: &[Child]| ovnbpf_tests::scenario::log_tails(agents);

    // ovn0 as kube-ovn-cni builds it, its port bound and up, the subnets routed.
    for (index, node) in nodes.iter().enumerate() {
        let port = format!("node-{}", NODES[index]);
        assert!(
            wait_until(Duration::from_secs(30), || port_up(lab, &port)),
            "{port} never up\n{}",
            tails(&agents)
        );
        let address = node.netns().ip(&["-4", "addr", "show", "ovn0"]).unwrap();
        assert!(
            address.contains(&format!("inet {}/16", join_ip(index))),
            "{address}"
        );
        assert_eq!(
            node.netns().mac("ovn0").unwrap(),
            join_mac(index),
            "ovn0 has the join port's MAC"
        );
        let src = node.ip().to_string();
        assert!(
            wait_until(Duration::from_secs(10), || {
                let routes = node_routes(node.netns());
                ["10.16.0.0/16", "10.17.0.0/16", "10.18.0.0/16"]
                    .iter()
                    .all(|subnet| {
                        routes.contains(&format!("{subnet} via 100.64.0.1 proto static src {src}"))
                    })
            }),
            "{}\n{}",
            node_routes(node.netns()),
            tails(&agents)
        );
        assert!(
            !node_routes(node.netns()).contains("100.64.0.0/16 via"),
            "the join subnet is on-link, not routed"
        );
    }
    // Each agent pinged the join gateway through its NIC and got the router's answer (Kube-OVN's
    // JoinSubnetGatewayReachable), and says so in its metrics with the NIC's other facts.
    for (node, agent) in nodes.iter().zip(&agents) {
        let expected = [
            "ovnbpf_node_nic_plugged 1",
            "ovnbpf_node_join_gateway_reachable 1",
            "ovnbpf_node_routes 3",
            "ovnbpf_node_nat_outgoing_subnets 2",
            "ovnbpf_node_network_failures_total 0",
        ];
        let mut metrics = String::new();
        let reported = wait_until(Duration::from_secs(15), || {
            metrics = http_get_from(node.netns(), METRICS.parse().unwrap(), "/metrics")
                .unwrap_or_default();
            expected
                .iter()
                .all(|line| metrics.lines().any(|l| l == *line))
        });
        assert!(
            reported,
            "{}\n{}",
            metrics
                .lines()
                .filter(|l| l.starts_with("ovnbpf_node_"))
                .collect::<Vec<_>>()
                .join("\n"),
            agent.log_tail()
        );
    }

    // As kubelet: TCP and HTTP from the node to its own pods and to the other node's.
    for pod in &pods {
        serve_http(pod);
    }
    for (index, node) in nodes.iter().enumerate() {
        for (pod, (name, _, on, ip)) in pods.iter().zip(PODS) {
            let body = http_get_eventually(node.netns(), ip);
            assert!(
                body.ends_with(&format!("pod {name}\n")),
                "{} → {} (on node {}): {body}",
                NODES[index],
                pod.name(),
                NODES[on]
            );
        }
    }
    // A hostNetwork process pings a pod on the other node, which answers from its address.
    let pings = pings_from_node(&nodes[0], PODS[1].3);
    assert_eq!(pings, 3, "node1 → d2\n{}", tails(&agents));

    // Pods reach the other node's InternalIP (the 30000 policy), and each other across
    // subnets and nodes (the 31000 allow policies keep in-cluster traffic on its route).
    for (pod, (name, _, on, _)) in pods.iter().zip(PODS) {
        let other = &nodes[1 - on];
        assert_eq!(
            pod.ping(other.ip(), 3).unwrap(),
            3,
            "{name} → {}'s InternalIP\n{}",
            NODES[1 - on],
            tails(&agents)
        );
    }
    for (from, to) in [(0, 3), (2, 1), (1, 2)] {
        assert_eq!(
            pods[from].ping(PODS[to].3, 3).unwrap(),
            3,
            "{} → {}\n{}",
            PODS[from].0,
            PODS[to].0,
            tails(&agents)
        );
    }

    // Out of the cluster through the pod's own node (distributed gateways): masqueraded to the
    // node's address from the NAT-outgoing subnet, not from the other; replies come back.
    let seen = source_seen_by(&external);
    for (pod, expected) in [
        (&pods[0], nodes[0].ip()),
        (&pods[1], nodes[1].ip()),
        (&pods[2], PODS[2].3),
    ] {
        assert_eq!(
            seen(pod),
            Some(expected),
            "{} → the external host\n{}",
            pod.name(),
            tails(&agents)
        );
    }
    // A centralized gateway on both nodes under ECMP: the flows of the pod on node1 leave
    // through both nodes (by the hash of each flow), masqueraded there.
    let mut gateways = std::collections::BTreeSet::new();
    for _ in 0..16 {
        gateways.insert(seen(&pods[4]));
    }
    assert_eq!(
        gateways,
        [Some(nodes[0].ip()), Some(nodes[1].ip())].into(),
        "c1's flows out through the gateway nodes\n{}",
        tails(&agents)
    );
    let table = nodes[0]
        .netns()
        .exec("nft", &["list", "table", "ip", "ovnbpf"])
        .unwrap();
    assert!(
        table.contains("10.16.0.0/16") && table.contains("masquerade"),
        "{table}"
    );

    // NodePort Services, which kube-proxy serves on Kube-OVN's nodes (its DNAT in the node's
    // netfilter; pods then reach the endpoint through ovn0): the external host reaches d2's
    // HTTP through node2's port 30081 (externalTrafficPolicy=Local: the node's own endpoint,
    // the client's address kept) and through node1's port 30080 (Cluster: the endpoint on the
    // other node, masqueraded as kube-proxy does). The replies find their way back through the
    // node that translated them: the distributed gateway's policy, and the node policy.
    let endpoint = format!("{}:8080", PODS[1].3);
    for (node, port, masquerade) in [(&nodes[1], 30081, false), (&nodes[0], 30080, true)] {
        let mut rules = format!(
            "table ip obt_kube_proxy {{\n\
             chain prerouting {{ type nat hook prerouting priority dstnat; \
             tcp dport {port} dnat to {endpoint}; }}\n"
        );
        if masquerade {
            rules.push_str(
                "chain postrouting { type nat hook postrouting priority srcnat; \
                 ct status dnat oifname \"ovn0\" masquerade; }\n",
            );
        }
        rules.push_str("}\n");
        let file = work.path().join(format!("kube-proxy-{port}.nft"));
        std::fs::write(&file, rules).unwrap();
        node.netns()
            .exec("nft", &["-f", &file.to_string_lossy()])
            .unwrap();
        let server = SocketAddr::from((node.ip(), port));
        let mut last = Err(std::io::Error::other("never tried"));
        let answered = wait_until(Duration::from_secs(10), || {
            last = http_get_from(external.netns(), server, "/");
            last.as_ref().is_ok_and(|body| body.ends_with("pod d2\n"))
        });
        assert!(
            answered,
            "the external host → NodePort {server} → d2: {last:?}\n{}",
            tails(&agents)
        );
    }

    // A restart adopts ovn0 as it is: the same link, probes going on; a stale static route
    // through it goes.
    let ovn0 = nodes[0].netns().ifindex("ovn0").unwrap();
    nodes[0]
        .netns()
        .ip(&[
            "route",
            "add",
            "10.99.0.0/16",
            "via",
            "100.64.0.1",
            "dev",
            "ovn0",
            "proto",
            "static",
        ])
        .unwrap();
    agents[0].stop();
    agents[0] = start(lab, &agent(nodes, 0, pins.path()), work.path());
    assert!(
        wait_until(Duration::from_secs(20), || !node_routes(nodes[0].netns())
            .contains("10.99.0.0/16")),
        "the stale route stays: {}\n{}",
        node_routes(nodes[0].netns()),
        tails(&agents)
    );
    assert_eq!(
        nodes[0].netns().ifindex("ovn0").unwrap(),
        ovn0,
        "ovn0 rebuilt"
    );
    assert!(http_get_eventually(nodes[0].netns(), PODS[1].3).ends_with("pod d2\n"));

    // The second subnet deleted (its pods first): its route goes from both nodes.
    let mut topology = Topology::new();
    for (pod, ..) in PODS.iter().filter(|p| p.1 == SECOND_SUBNET.0) {
        topology.remove_pod(pod, "ns");
    }
    topology
        .remove_subnet(kubeovn::DEFAULT_VPC, SECOND_SUBNET.0, SECOND_SUBNET.1)
        .unwrap()
        .apply(lab)
        .unwrap();
    for node in nodes {
        assert!(
            wait_until(Duration::from_secs(10), || {
                let routes = node_routes(node.netns());
                !routes.contains("10.17.0.0/16") && routes.contains("10.16.0.0/16")
            }),
            "{}",
            node_routes(node.netns())
        );
    }

    // --cleanup removes the NIC with its routes.
    for agent in &mut agents {
        agent.stop();
    }
    let mut args = agent(nodes, 0, pins.path()).args(lab);
    args.push("--cleanup".into());
    nodes[0]
        .netns()
        .exec(&workspace_binary("ovnbpf-agent").to_string_lossy(), &args)
        .unwrap();
    assert!(
        nodes[0].netns().ifindex("ovn0").is_err(),
        "ovn0 left behind"
    );
    assert!(nodes[0].netns().ifindex("ovn0_h").is_err());
    assert!(
        nodes[0]
            .netns()
            .exec("nft", &["list", "table", "ip", "ovnbpf"])
            .is_err(),
        "the NAT table left behind"
    );
}

/// A TCP server on `host` (port 9000) that writes each client the address it connects from;
/// the returned function connects from a pod (retried for up to 10 s) and returns that address.
fn source_seen_by(host: &Node) -> impl Fn(&Pod) -> Option<Ipv4Addr> {
    let listener = host
        .netns()
        .run_in(|| Ok(TcpListener::bind("0.0.0.0:9000")?))
        .unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            if let Ok(peer) = stream.peer_addr() {
                let _ = write!(stream, "{}", peer.ip());
            }
        }
    });
    let server = SocketAddr::from((host.ip(), 9000));
    move |pod: &Pod| {
        let mut seen = None;
        wait_until(Duration::from_secs(10), || {
            seen = pod
                .netns()
                .run_in(|| {
                    let mut stream = TcpStream::connect_timeout(&server, Duration::from_secs(2))?;
                    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
                    let mut text = String::new();
                    stream.read_to_string(&mut text)?;
                    Ok(text.parse().ok())
                })
                .ok()
                .flatten();
            seen.is_some()
        });
        seen
    }
}

/// Pings `target` 3 times from the node's own namespace; the replies.
fn pings_from_node(node: &Node, target: Ipv4Addr) -> u32 {
    let text = node
        .netns()
        .exec(
            "ping",
            &["-n", "-c", "3", "-i", "0.1", "-W", "1", &target.to_string()],
        )
        .unwrap_or_default();
    text.split(" received")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}
