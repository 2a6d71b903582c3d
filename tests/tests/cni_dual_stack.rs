//! Dual-stack pods through the `ovnbpf-cni` binary, invoked as a container runtime does, on a
//! subnet Kube-OVN builds with `cidrBlock: 10.0.1.0/24,fd00:10:1::/64` (both gateways on the
//! router port, policies and source routes per family): ADD gives each pod both addresses, a
//! default route per family and a result listing both, with the IPv6 address usable at once (no
//! duplicate address detection left to run) and router advertisements off as kube-ovn-cni sets
//! them. The pods, on different nodes, then ping each other and talk TCP over IPv6 across the
//! nodes' Geneve tunnel; the VPC's router, whose IPv6 flows are compiled beside its IPv4 ones,
//! answers pings to both its gateways (the IPv6 answer with OVN's hop limit 254), refuses TCP
//! and UDP to its IPv6 gateway (a reset, ICMPv6 port unreachable) and routes IPv6
//! in the kernel: to a pod of another subnet on the other node (ping and TCP, the hop limit
//! decremented once), and across a VPC peering to a pod of the peer VPC (twice); a hop limit
//! that runs out at the first router gets its ICMPv6 time exceeded, one that runs out at the
//! peer router is dropped and counted; a source address d1's port security
//! does not list is dropped and counted. subnet-a advertises (`enableIPv6RA`): a router
//! solicitation from d1 gets the router port's advertisement, which d1's stack takes when
//! told to, and each node's agent sends periodic ones to its own pods of subnet-a (none to
//! subnet-b's). CHECK verifies both families; DEL removes the NICs. All of it runs twice: with
//! the nodes tunnelling over IPv4, and over an IPv6 underlay (IPv6 Encap rows, Geneve in IPv6
//! between the nodes, whose IPv4 addresses are removed).

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use ovnbpf_tests::{
    cni_runtime::{PodAttachment, Runtime, plugin_dir},
    frames::link_local,
    kubeovn::mac_for,
    names::unique_prefix,
    netns::Netns,
    network::Node,
    process::wait_until,
    require_root,
    scenario::{self, CniNodes},
    workspace_binary,
};
use serde_json::{Value, json};

/// Where each node's agent serves its metrics, inside the node's namespace.
const METRICS: &str = "127.0.0.1:10665";
const SUBNET: &str = "10.0.1.0/24,fd00:10:1::/64";
/// A second subnet of vpc-a.
const SUBNET_B: &str = "10.0.2.0/24,fd00:10:2::/64";
/// vpc-b's subnet, peered with vpc-a.
const SUBNET_C: &str = "10.1.0.0/24,fd00:20:1::/64";
const GATEWAY6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 1, 0, 0, 0, 0, 1);
/// One pod: name, subnet, the node (index) whose plugin attaches it, addresses, gateway.
type Pod = (
    &'static str,
    &'static str,
    usize,
    Ipv4Addr,
    Ipv6Addr,
    Ipv6Addr,
);
/// d1 (node1), d2 (node2) on subnet-a; d3 on subnet-b and d4 on vpc-b's subnet-c (node2).
const PODS: [Pod; 4] = [
    (
        "d1",
        "subnet-a",
        0,
        Ipv4Addr::new(10, 0, 1, 2),
        Ipv6Addr::new(0xfd00, 0x10, 1, 0, 0, 0, 0, 2),
        GATEWAY6,
    ),
    (
        "d2",
        "subnet-a",
        1,
        Ipv4Addr::new(10, 0, 1, 3),
        Ipv6Addr::new(0xfd00, 0x10, 1, 0, 0, 0, 0, 3),
        GATEWAY6,
    ),
    (
        "d3",
        "subnet-b",
        1,
        Ipv4Addr::new(10, 0, 2, 2),
        Ipv6Addr::new(0xfd00, 0x10, 2, 0, 0, 0, 0, 2),
        Ipv6Addr::new(0xfd00, 0x10, 2, 0, 0, 0, 0, 1),
    ),
    (
        "d4",
        "subnet-c",
        1,
        Ipv4Addr::new(10, 1, 0, 2),
        Ipv6Addr::new(0xfd00, 0x20, 1, 0, 0, 0, 0, 2),
        Ipv6Addr::new(0xfd00, 0x20, 1, 0, 0, 0, 0, 1),
    ),
];
/// subnet-a's `ipv6RAConfigs`: Kube-OVN's default but sent every 3 to 4 s (northd's shortest).
const RA_CONFIGS: &str =
    "address_mode=dhcpv6_stateful,max_interval=4,min_interval=3,send_periodic=true";
/// An address of the subnet no port has.
const SPOOFED6: &str = "fd00:10:1::99";

fn config(socket: &Path, version: &str) -> Value {
    json!({"cniVersion": version, "name": "ovn", "type": "ovnbpf", "server_socket": socket})
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("plugin printed no JSON ({e}): {output:?}"))
}

/// `GET /metrics` of the agent of `node`.
fn scrape(node: &Node) -> String {
    ovnbpf_tests::netns::run_in_path(&node.netns().path(), || {
        let mut stream = TcpStream::connect(METRICS)?;
        write!(stream, "GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    })
    .unwrap()
}

/// The drop counters of `node`'s agent that are not 0, for failure messages.
fn drops(node: &Node) -> String {
    scrape(node)
        .lines()
        .filter(|line| line.starts_with("ovnbpf_datapath_drops_total{") && !line.ends_with(" 0"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The value of the sample line starting with `sample` (name and labels), 0 without one.
fn metric(text: &str, sample: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or(0)
}

fn ping6(from: &Netns, to: &str, source: Option<&str>) -> bool {
    let mut args = vec!["-6", "-n", "-q", "-c", "3", "-i", "0.1", "-W", "1"];
    if let Some(source) = source {
        args.extend(["-I", source]);
    }
    args.push(to);
    from.exec("ping", &args)
        .is_ok_and(|text| text.contains(" 3 received"))
}

/// The hop limit of the answer to one ping of `to` (`None`: no answer).
fn answer_hop_limit(from: &Netns, to: &str) -> Option<u8> {
    let text = from
        .exec("ping", &["-6", "-n", "-c", "1", "-W", "1", to])
        .ok()?;
    let (_, rest) = text.split_once(" ttl=")?;
    rest.split_whitespace().next()?.parse().ok()
}

/// Who answered 3 pings of `to` with `size` bytes of payload sent with hop limit 1 with ICMPv6
/// time exceeded (`ping` prints `From <address> icmp_seq=<n> Time exceeded: Hop limit` for each
/// answer whose checksum the pod's stack accepted); empty when none did.
fn time_exceeded_from(from: &Netns, to: &str, size: u16) -> Vec<String> {
    let size = size.to_string();
    let output = from
        .command("ping")
        .args([
            "-6", "-n", "-c", "3", "-i", "0.1", "-W", "1", "-t", "1", "-s", &size, to,
        ])
        .output()
        .expect("ping runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.contains("Time exceeded"))
        .filter_map(|line| line.strip_prefix("From "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Whether pings of `to` sent with hop limit `hops` all go unanswered.
fn unanswered_with_hop_limit(from: &Netns, to: &str, hops: u8) -> bool {
    let hops = hops.to_string();
    let args = [
        "-6", "-n", "-q", "-c", "3", "-i", "0.1", "-W", "1", "-t", &hops, to,
    ];
    // ping fails without a single answer.
    from.exec("ping", &args).is_err()
}

struct DualStackLab {
    cni: CniNodes,
    plugins: PathBuf,
}

impl DualStackLab {
    /// The lab, its nodes tunnelling over IPv6 when `ipv6_underlay`.
    fn start(ipv6_underlay: bool) -> Self {
        let extra_args = [0, 1].map(|_| vec!["--metrics-address".to_string(), METRICS.into()]);
        let cni = CniNodes::start_on(
            ipv6_underlay,
            |topology| {
                topology
                    .vpc_with_subnet("vpc-a", "subnet-a", SUBNET)
                    .unwrap()
                    // subnet-a's `enableIPv6RA`, with `ipv6RAConfigs` sending every 3 to 4 s:
                    // the router's IPv6 is routed beside the advertisement's flows, a
                    // solicitation is answered, and advertisements come unasked.
                    .ipv6_router_advertisements("vpc-a", "subnet-a", 64, RA_CONFIGS)
                    .subnet("vpc-a", "subnet-b", SUBNET_B)
                    .unwrap()
                    .vpc_with_subnet("vpc-b", "subnet-c", SUBNET_C)
                    .unwrap()
                    // Kube-OVN's dual-stack VPC peering: both families on each side, a route
                    // per family each way.
                    .peering(
                        "vpc-a",
                        "10.0.255.1/30,fd00:255::1/126",
                        "vpc-b",
                        "10.0.255.2/30,fd00:255::2/126",
                    )
                    .static_route(
                        "vpc-a",
                        "fd00:20:1::/64",
                        "fd00:255::2".parse::<Ipv6Addr>().unwrap(),
                    )
                    .static_route(
                        "vpc-b",
                        "fd00:10:1::/64",
                        "fd00:255::1".parse::<Ipv6Addr>().unwrap(),
                    )
                    .static_route("vpc-a", "10.1.0.0/24", Ipv4Addr::new(10, 0, 255, 2))
                    .static_route("vpc-b", "10.0.1.0/24", Ipv4Addr::new(10, 0, 255, 1));
                for (name, subnet, _, ip, ip6, _) in PODS {
                    topology.dual_stack_pod(subnet, name, "ns", &mac_for(name), (ip, ip6));
                }
                // kube-ovn-controller's port security for d1 (`ovn.kubernetes.io/port_security`):
                // its MAC and both addresses.
                let (name, _, _, ip, ip6, _) = PODS[0];
                topology.port_security("d1.ns", &format!("{} {ip} {ip6}", mac_for(name)));
            },
            None,
            extra_args,
        );
        let plugins = plugin_dir(
            &cni.work.path().join("bin"),
            "ovnbpf",
            &workspace_binary("ovnbpf-cni"),
        )
        .unwrap();
        Self { cni, plugins }
    }

    fn invoke(
        &self,
        index: usize,
        command: &str,
        attachment: &PodAttachment,
        config: &Value,
    ) -> Output {
        Runtime::new(
            self.cni.nodes[index].netns(),
            vec![self.plugins.clone(), PathBuf::from("/usr/lib/cni")],
        )
        .exec(command, attachment, config)
        .unwrap()
    }

    fn ready(&self, index: usize) -> bool {
        let attachment = PodAttachment {
            container_id: String::new(),
            netns: String::new(),
            if_name: String::new(),
            args: String::new(),
        };
        let config = config(&self.cni.socket(index), "1.1.0");
        self.invoke(index, "STATUS", &attachment, &config)
            .status
            .success()
    }
}

#[test]
fn dual_stack_pods_get_both_families_and_talk_ipv6_across_nodes() {
    dual_stack_pods_across_nodes(false);
}

/// The same over an IPv6 underlay: the nodes register IPv6 Geneve endpoints and tunnel to each
/// other over IPv6 (their IPv4 underlay addresses gone once the agents run, so nothing can
/// take an IPv4 way).
#[test]
fn dual_stack_pods_talk_across_nodes_over_an_ipv6_underlay() {
    dual_stack_pods_across_nodes(true);
}

fn dual_stack_pods_across_nodes(ipv6_underlay: bool) {
    require_root();
    let lab = DualStackLab::start(ipv6_underlay);
    if ipv6_underlay {
        let encaps = || {
            let listed = lab
                .cni
                .lab
                .sbctl(&["--bare", "--columns=ip", "list", "Encap"])
                .unwrap();
            let mut ips: Vec<String> = listed.split_whitespace().map(str::to_string).collect();
            ips.sort_unstable();
            ips
        };
        let expected: Vec<String> = lab
            .cni
            .nodes
            .iter()
            .map(|node| node.encap_ip().to_string())
            .collect();
        wait_until(Duration::from_secs(10), || encaps() == expected);
        assert_eq!(
            encaps(),
            expected,
            "each chassis's Encap is its IPv6 endpoint"
        );
        for node in &lab.cni.nodes {
            node.netns()
                .ip(&["-4", "addr", "flush", "dev", "eth0"])
                .unwrap();
        }
    }
    let prefix = unique_prefix();
    let pod_netns = PODS.map(|(name, ..)| Netns::create(&format!("{prefix}-p{name}")).unwrap());
    let attachments: Vec<PodAttachment> = PODS
        .iter()
        .zip(&pod_netns)
        .enumerate()
        .map(|(index, ((name, ..), netns))| PodAttachment {
            container_id: format!("d0a1{index}0123456789"),
            netns: netns.path().display().to_string(),
            if_name: "eth0".into(),
            args: format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME={name}"),
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(10), || lab.ready(0) && lab.ready(1)),
        "STATUS never ready{}",
        lab.cni.logs()
    );

    // ADD: d2 with Kube-OVN's 0.3.1 configuration, the others with 1.0.0.
    let mut results = Vec::new();
    for (index, version) in ["1.0.0", "0.3.1", "1.0.0", "1.0.0"].into_iter().enumerate() {
        let node = PODS[index].2;
        let conf = config(&lab.cni.socket(node), version);
        let output = lab.invoke(node, "ADD", &attachments[index], &conf);
        assert!(
            output.status.success(),
            "ADD {}: {output:?}{}",
            PODS[index].0,
            lab.cni.logs()
        );
        results.push(stdout_json(&output));
        // Right away, before any traffic: the IPv6 address is usable, not tentative.
        let addresses = pod_netns[index]
            .ip(&["-6", "-o", "addr", "show", "dev", "eth0", "scope", "global"])
            .unwrap();
        let wanted = format!("{}/64", PODS[index].4);
        assert!(addresses.contains(&wanted), "{addresses}");
        assert!(!addresses.contains("tentative"), "{addresses}");
        assert!(
            scenario::port_up(&lab.cni.lab, &format!("{}.ns", PODS[index].0)),
            "{} not up after ADD",
            PODS[index].0
        );
    }
    let d1 = &results[0];
    assert_eq!(
        (
            &d1["ips"][0]["address"],
            &d1["ips"][0]["gateway"],
            &d1["ips"][1]["address"],
            &d1["ips"][1]["gateway"],
        ),
        (
            &json!("10.0.1.2/24"),
            &json!("10.0.1.1"),
            &json!("fd00:10:1::2/64"),
            &json!("fd00:10:1::1"),
        ),
        "{d1}"
    );
    assert_eq!(
        d1["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.0.1.1"}, {"dst": "::/0", "gw": "fd00:10:1::1"}])
    );
    // 0.3.1 results name each address's version.
    assert_eq!(results[1]["ips"][1]["version"], "6", "{}", results[1]);
    assert_eq!(results[1]["ips"][1]["address"], "fd00:10:1::3/64");
    for ((.., gateway), netns) in PODS.iter().zip(&pod_netns) {
        let route = netns.ip(&["-6", "route", "show", "default"]).unwrap();
        assert!(
            route.contains(&format!("via {gateway} dev eth0")),
            "{route}"
        );
        let accept_ra = netns
            .exec("sysctl", &["-n", "net.ipv6.conf.eth0.accept_ra"])
            .unwrap();
        assert_eq!(accept_ra.trim(), "0", "router advertisements accepted");
    }

    // IPv6 across the nodes, and to the gateway (the router answers).
    let [d1_ip6, d2_ip6, d3_ip6, d4_ip6] = PODS.map(|pod| pod.4.to_string());
    assert!(
        ping6(&pod_netns[0], &d2_ip6, None),
        "d1 → d2 over IPv6{}",
        lab.cni.logs()
    );
    assert!(ping6(&pod_netns[1], &d1_ip6, None), "d2 → d1 over IPv6");
    tcp_over_ipv6(&pod_netns, (0, 1));
    // The VPC's router still routes IPv4 beside its IPv6 flows: it answers d1's ping.
    assert!(
        pod_netns[0]
            .exec(
                "ping",
                &["-n", "-q", "-c", "3", "-i", "0.1", "-W", "1", "10.0.1.1"]
            )
            .is_ok_and(|text| text.contains(" 3 received")),
        "d1 → its IPv4 gateway{}",
        lab.cni.logs()
    );
    // And its IPv6 gateway: the answer leaves the router with hop limit 255 and is routed back
    // to d1 (254), as OVN's.
    assert_eq!(
        answer_hop_limit(&pod_netns[0], &GATEWAY6.to_string()),
        Some(254),
        "d1 → its IPv6 gateway; drops:\n{}{}",
        drops(&lab.cni.nodes[0]),
        lab.cni.logs()
    );
    assert!(ping6(&pod_netns[0], &GATEWAY6.to_string(), None));
    // TCP and UDP to the IPv6 gateway are refused as OVN refuses them (a reset, ICMPv6 port
    // unreachable), checksums right for d1's stack to take them, each answer counted.
    let replies = |kind: &str| {
        metric(
            &scrape(&lab.cni.nodes[0]),
            &format!(r#"ovnbpf_datapath_router_replies_total{{kind="{kind}"}}"#),
        )
    };
    let (resets, unreachables) = (replies("tcp_reset"), replies("port_unreachable"));
    let (tcp, udp) = scenario::socket_outcomes_in(&pod_netns[0], SocketAddr::from((GATEWAY6, 80)));
    for (what, outcome) in [("TCP", tcp), ("UDP", udp)] {
        assert_eq!(
            outcome.as_ref().map_err(std::io::Error::kind).err(),
            Some(std::io::ErrorKind::ConnectionRefused),
            "{what} to the IPv6 gateway: {outcome:?}{}",
            lab.cni.logs()
        );
    }
    assert_eq!(replies("tcp_reset"), resets + 1);
    assert_eq!(replies("port_unreachable"), unreachables + 1);

    // Router advertisements (subnet-a's `enableIPv6RA`): a solicitation from d1, as a VM's
    // stack sends one, gets the router port's advertisement as ovn-controller builds it (from
    // the port's MAC and link-local address, M set, the subnet's prefix on-link), counted once.
    let advertisements = replies("router_advertisement");
    let advertisement =
        ovnbpf_tests::frames::solicit_router(&pod_netns[0], mac_bytes(&mac_for("d1")));
    let router_mac = mac_bytes(&mac_for("vpc-a-subnet-a"));
    let Some(advertisement) = advertisement else {
        panic!(
            "no router advertisement; drops:\n{}{}",
            drops(&lab.cni.nodes[0]),
            lab.cni.logs()
        );
    };
    assert_eq!(&advertisement[6..12], &router_mac);
    assert_eq!(advertisement[21], 255, "hop limit");
    assert_eq!(&advertisement[22..38], &link_local(router_mac));
    assert_eq!(
        &advertisement[38..54],
        &link_local(mac_bytes(&mac_for("d1")))
    );
    let message = &advertisement[54..];
    // M (stateful DHCPv6), router lifetime 0xffff; a prefix information option for
    // fd00:10:1::/64, on-link only (L: addresses come from DHCPv6).
    assert_eq!(
        &message[..8],
        &[134, 0, message[2], message[3], 255, 0x80, 0xff, 0xff]
    );
    let mut prefix_option = vec![3, 4, 64, 0x80];
    prefix_option.extend([0xff; 8]);
    prefix_option.extend([0; 4]);
    prefix_option.extend(Ipv6Addr::new(0xfd00, 0x10, 1, 0, 0, 0, 0, 0).octets());
    assert!(
        message.windows(32).any(|window| window == prefix_option),
        "{message:02x?}"
    );
    assert_eq!(replies("router_advertisement"), advertisements + 1);
    // d1's own stack, told to accept advertisements for the while, takes one (the answer to
    // the solicitation the kernel sends when accept_ra is turned on, or a periodic one): a
    // default route from it. Turned on only now, as that solicitation is the kernel's, not
    // the one counted above.
    pod_netns[0]
        .exec("sysctl", &["-w", "net.ipv6.conf.eth0.accept_ra=2"])
        .unwrap();
    let learned = wait_until(Duration::from_secs(10), || {
        pod_netns[0]
            .ip(&["-6", "route", "show", "default", "proto", "ra"])
            .is_ok_and(|routes| routes.contains("via fe80::"))
    });
    assert!(learned, "d1's stack did not take the advertisement");
    pod_netns[0]
        .exec("sysctl", &["-w", "net.ipv6.conf.eth0.accept_ra=0"])
        .unwrap();
    pod_netns[0]
        .ip(&["-6", "route", "flush", "proto", "ra"])
        .unwrap();
    // Periodic advertisements (`send_periodic=true`): each node's agent sends them to its own
    // ports of subnet-a (d1 on node1, d2 on node2) every 3 to 4 s, from the port's MAC and
    // link-local address to all nodes; d3, on subnet-b, which does not advertise, gets none.
    let sockets = [0, 1, 2].map(|index| {
        ovnbpf_tests::frames::FrameSocket::open_in(&pod_netns[index], "eth0").unwrap()
    });
    let periodic = |frame: &[u8]| {
        frame.len() > 54
            && frame[..6] == [0x33, 0x33, 0, 0, 0, 1]
            && frame[20] == 58
            && frame[54] == 134
    };
    for (index, socket) in sockets.iter().take(2).enumerate() {
        let advertisement = socket.receive(Duration::from_secs(6), periodic).unwrap();
        let Some(advertisement) = advertisement else {
            panic!(
                "{}: no periodic advertisement{}",
                PODS[index].0,
                lab.cni.logs()
            );
        };
        assert_eq!(&advertisement[6..12], &router_mac);
        assert_eq!(&advertisement[22..38], &link_local(router_mac));
        assert_eq!(
            &advertisement[38..54],
            &Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1).octets()
        );
        assert!(
            advertisement[54..]
                .windows(32)
                .any(|window| window == prefix_option)
        );
        assert_eq!(
            ovnbpf_tests::frames::checksum6(&advertisement),
            0,
            "{}: the periodic advertisement's checksum",
            PODS[index].0
        );
    }
    assert!(
        !sockets[2].drain().iter().any(|frame| periodic(frame)),
        "d3's subnet does not advertise"
    );
    for node in &lab.cni.nodes {
        let sent = metric(
            &scrape(node),
            r#"ovnbpf_router_advertisements_total{result="sent"}"#,
        );
        assert!(sent >= 1, "{sent} periodic advertisements counted");
    }

    // Routed IPv6: d1 to d3, another subnet of the VPC on the other node, and back; each way
    // one router decrements the hop limit (d3 answers with 64).
    assert!(
        ping6(&pod_netns[0], &d3_ip6, None),
        "d1 → d3, routed{}",
        lab.cni.logs()
    );
    assert_eq!(answer_hop_limit(&pod_netns[0], &d3_ip6), Some(63));
    assert!(ping6(&pod_netns[2], &d1_ip6, None), "d3 → d1, routed");
    tcp_over_ipv6(&pod_netns, (0, 2));
    // Across the peering to vpc-b's d4 (vpc-a's route, then vpc-b's connected one): two
    // routers each way.
    assert!(
        ping6(&pod_netns[0], &d4_ip6, None),
        "d1 → d4 across the peering{}",
        lab.cni.logs()
    );
    assert_eq!(answer_hop_limit(&pod_netns[0], &d4_ip6), Some(62));
    assert!(
        ping6(&pod_netns[3], &d1_ip6, None),
        "d4 → d1 across the peering"
    );
    // A hop limit that runs out at the first router (1) gets OVN's ICMPv6 time exceeded from
    // the gateway, checksummed so that the pod's stack takes it, for both destinations; one that
    // runs out at the peer router (2) is dropped and counted there, on d1's node (OVN answers
    // only senders in the entering port's networks).
    let metric_of = |node: &Node, series: &str| metric(&scrape(node), series);
    let expired = r#"ovnbpf_datapath_drops_total{reason="ttl_expired"}"#;
    let answered = r#"ovnbpf_datapath_router_replies_total{kind="time_exceeded"}"#;
    let answers_before = metric_of(&lab.cni.nodes[0], answered);
    // The second size is more than the answer quotes (it stays within 1280 bytes).
    for (destination, size) in [(&d3_ip6, 56), (&d4_ip6, 56), (&d3_ip6, 1300)] {
        assert_eq!(
            time_exceeded_from(&pod_netns[0], destination, size),
            vec![GATEWAY6.to_string(); 3],
            "hop limit 1 to {destination}, {size} bytes: time exceeded from the gateway"
        );
    }
    assert!(metric_of(&lab.cni.nodes[0], answered) >= answers_before + 9);
    let before = metric_of(&lab.cni.nodes[0], expired);
    assert!(unanswered_with_hop_limit(&pod_netns[0], &d4_ip6, 2));
    let after = metric_of(&lab.cni.nodes[0], expired);
    assert!(after >= before + 3, "ttl_expired drops {before} → {after}");
    // d4 is two routers away: hop limit 3 reaches it.
    assert!(!unanswered_with_hop_limit(&pod_netns[0], &d4_ip6, 3));

    // A source address d1's port security does not list is dropped at d1's port, and counted.
    let before = metric(
        &scrape(&lab.cni.nodes[0]),
        r#"ovnbpf_datapath_drops_total{reason="port_security"}"#,
    );
    let spoofed = format!("{SPOOFED6}/64");
    pod_netns[0]
        .ip(&["addr", "add", &spoofed, "dev", "eth0", "nodad"])
        .unwrap();
    assert!(
        !ping6(&pod_netns[0], &d2_ip6, Some(SPOOFED6)),
        "d1 reached d2 from an address that is not its own"
    );
    let after = metric(
        &scrape(&lab.cni.nodes[0]),
        r#"ovnbpf_datapath_drops_total{reason="port_security"}"#,
    );
    assert!(
        after >= before + 3,
        "port security drops {before} → {after}"
    );
    pod_netns[0]
        .ip(&["addr", "del", &spoofed, "dev", "eth0"])
        .unwrap();
    assert!(
        ping6(&pod_netns[0], &d2_ip6, None),
        "d1 → d2 as itself again"
    );

    // CHECK with the ADD result verifies both families, and notices a lost IPv6 route.
    let mut check_config = config(&lab.cni.socket(0), "1.1.0");
    check_config["prevResult"] = d1.clone();
    let check = lab.invoke(0, "CHECK", &attachments[0], &check_config);
    assert!(check.status.success(), "CHECK: {check:?}");
    pod_netns[0].ip(&["-6", "route", "del", "default"]).unwrap();
    let check = lab.invoke(0, "CHECK", &attachments[0], &check_config);
    let details = stdout_json(&check)["details"].to_string();
    assert!(
        details.contains("IPv6 default route is via nothing instead of fd00:10:1::1"),
        "{check:?}"
    );

    // DEL removes the NICs.
    for (index, pod) in PODS.iter().enumerate() {
        let conf = config(&lab.cni.socket(pod.2), "1.0.0");
        let output = lab.invoke(pod.2, "DEL", &attachments[index], &conf);
        assert!(output.status.success(), "DEL: {output:?}");
        let links = pod_netns[index].ip(&["-o", "link", "show"]).unwrap();
        assert!(!links.contains("eth0"), "{links}");
    }
}

/// Pod `client` connects to a listener of pod `server`'s over IPv6; bytes go both ways.
fn tcp_over_ipv6(pod_netns: &[Netns], (client, server): (usize, usize)) {
    let server_address = SocketAddr::from((PODS[server].4, 8080));
    let listener = pod_netns[server]
        .run_in(|| Ok(TcpListener::bind(server_address)?))
        .unwrap();
    let accepting = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
        let (mut stream, peer) = listener.accept()?;
        let mut request = [0; 5];
        stream.read_exact(&mut request)?;
        stream.write_all(peer.ip().to_string().as_bytes())?;
        Ok(request.to_vec())
    });
    let answer = pod_netns[client]
        .run_in(|| {
            let mut stream = TcpStream::connect_timeout(&server_address, Duration::from_secs(5))?;
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            stream.write_all(b"hello")?;
            stream.shutdown(std::net::Shutdown::Write)?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer)?;
            Ok(answer)
        })
        .unwrap_or_else(|e| {
            panic!(
                "{} connects to {} over IPv6: {e}",
                PODS[client].0, PODS[server].0
            )
        });
    let request = accepting.join().unwrap().unwrap();
    assert_eq!(request, b"hello");
    assert_eq!(
        answer,
        PODS[client].4.to_string(),
        "the server sees the client's IPv6 address"
    );
}

/// "0a:58:…" → bytes.
fn mac_bytes(mac: &str) -> [u8; 6] {
    ovnbpf_agent::lflow::parse_mac(mac).unwrap()
}
