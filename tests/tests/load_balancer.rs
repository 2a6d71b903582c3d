//! Kubernetes Services through OVN's switch load balancers, in the agents' eBPF datapath on two
//! nodes, built through ovn-nbctl as kube-ovn-controller builds them (`vpc-<vpc>-tcp-load` and
//! `vpc-<vpc>-udp-load`, attached to every subnet of the VPC, VIPs written from the
//! EndpointSlices). vpc-a: subnet-a holds client and b1 on node1, b2 on node2; subnet-a2 holds
//! b3 on node2.
//!
//! - a TCP ClusterIP with three backends (both nodes, both subnets): 100 connections reach every
//!   backend, each stays on one backend for its whole life, the client sees the VIP as the
//!   source of every reply and the backend sees the client's own address;
//! - a UDP Service, DNS-shaped (a new socket per request): answers come from the VIP, from both
//!   of its backends;
//! - a UDP Service whose backends listen on nothing there: their port unreachable reaches the
//!   client about the datagram it sent to the VIP, from the VIP, and refuses its socket; the
//!   client's own port unreachable for an answer come too late reaches the backend about the
//!   answer as the backend sent it;
//! - a client that reset its connection to the VIP reuses its port to reach each backend
//!   directly: those connections are not mistaken for the balanced one;
//! - a backend taken out of the Service while a connection to it runs: the connection goes on,
//!   new connections avoid it;
//! - a backend reaching its own Service (hairpin) is answered, and sees the VIP as its peer;
//! - a Service with session affinity (Kube-OVN's session balancer): all of a client's
//!   connections land on one backend, on another one once that one is taken out, and stay
//!   there when it comes back;
//! - NetworkPolicies on the backends and on the client judge the backend: the client is
//!   admitted through the VIP, another pod is not, even balanced to itself;
//! - the Service deleted, its VIP answers nothing;
//! - a SwitchLBRule Service with health checks, as Kube-OVN writes them: each backend probed by
//!   the chassis that hosts it and online; one backend's server stopped, it goes offline and
//!   new connections avoid it; started again, it comes back.

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{BufRead, BufReader, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

use ovnbpf_agent::netns::run_in;
use ovnbpf_tests::{
    bpffs::BpfMount,
    cgroup::Cgroup2Mount,
    icmp,
    kubeovn::{PolicyPort, PolicyRule, Topology},
    network::Pod,
    process::wait_until,
    scenario::{self, PodPlan, TwoNodes},
};

const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 10);
const B1: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
const B2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);
const B3: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
const VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
const DNS_VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 11);
const STICKY: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 20);
/// A UDP Service on port 9 (discard) whose backends listen on nothing there.
const REFUSING: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 12);
/// A UDP Service whose backend (b2) answers late, on `LATE_TARGET_PORT`.
const LATE: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 13);
const LATE_TARGET_PORT: u16 = 5354;
const SERVICE_PORT: u16 = 80;
const TARGET_PORT: u16 = 8080;
const DNS_PORT: u16 = 53;
const DNS_TARGET_PORT: u16 = 5353;
const SUBNETS: [&str; 2] = ["subnet-a", "subnet-a2"];

const PODS: [PodPlan; 4] = [
    ("client", "subnet-a", 0, CLIENT),
    ("b1", "subnet-a", 0, B1),
    ("b2", "subnet-a", 1, B2),
    ("b3", "subnet-a2", 1, B3),
];

/// A backend's TCP server on `TARGET_PORT`: every line it reads is answered with
/// "<name> <peer address>", for as long as the connection lasts.
fn serve_tcp(pod: &Pod) {
    let _server = serve_tcp_until(pod, Arc::new(AtomicBool::new(false)));
}

/// [`serve_tcp`] until `stop` is set: then the listener closes (the port resets new
/// connections; the running ones go on). The thread ends once it has closed it.
fn serve_tcp_until(pod: &Pod, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    let name = pod.name().to_string();
    let listener = run_in(&pod.netns().path(), || {
        TcpListener::bind(("0.0.0.0", TARGET_PORT))
    })
    .unwrap()
    .unwrap();
    listener.set_nonblocking(true).unwrap();
    thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                    thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(_) => continue,
            };
            stream.set_nonblocking(false).unwrap();
            let name = name.clone();
            thread::spawn(move || {
                let peer = stream.peer_addr().map(|a| a.ip().to_string());
                let peer = peer.unwrap_or_default();
                let mut writer = stream.try_clone().unwrap();
                for line in BufReader::new(stream).lines() {
                    if line.is_err() || writeln!(writer, "{name} {peer}").is_err() {
                        return;
                    }
                }
            });
        }
    })
}

/// A backend's UDP server on `DNS_TARGET_PORT`: every datagram is answered with its name.
fn serve_udp(pod: &Pod) {
    let name = pod.name().to_string();
    let socket = run_in(&pod.netns().path(), || {
        UdpSocket::bind(("0.0.0.0", DNS_TARGET_PORT))
    })
    .unwrap()
    .unwrap();
    thread::spawn(move || {
        let mut buffer = [0_u8; 512];
        while let Ok((_, from)) = socket.recv_from(&mut buffer) {
            let _ = socket.send_to(name.as_bytes(), from);
        }
    });
}

/// A UDP server on `port` that answers each datagram after `delay`.
fn serve_udp_late(pod: &Pod, port: u16, delay: Duration) {
    let socket = run_in(&pod.netns().path(), || UdpSocket::bind(("0.0.0.0", port)))
        .unwrap()
        .unwrap();
    thread::spawn(move || {
        let mut buffer = [0_u8; 512];
        while let Ok((_, from)) = socket.recv_from(&mut buffer) {
            thread::sleep(delay);
            let _ = socket.send_to(b"late", from);
        }
    });
}

/// A connection from `pod` to `ip:port` that asks its backend who it is.
struct Session {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Session {
    fn open(pod: &Pod, ip: Ipv4Addr, port: u16) -> Option<Self> {
        let address = SocketAddr::from((ip, port));
        let stream = run_in(&pod.netns().path(), || {
            TcpStream::connect_timeout(&address, Duration::from_secs(1))
        })
        .unwrap()
        .ok()?;
        // The handshake completed with the VIP: its replies carried the VIP as source.
        assert_eq!(stream.peer_addr().unwrap(), address);
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        Some(Self {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        })
    }

    /// (backend name, the address the backend saw as its peer).
    fn ask(&mut self) -> Option<(String, String)> {
        writeln!(self.writer, "who").ok()?;
        let mut line = String::new();
        self.reader.read_line(&mut line).ok()?;
        let (name, peer) = line.trim().split_once(' ')?;
        Some((name.to_string(), peer.to_string()))
    }
}

/// A DNS-shaped exchange from `pod`: a new socket, one datagram to the VIP, the answer (only
/// datagrams from the VIP reach a connected socket).
fn ask_udp(pod: &Pod, ip: Ipv4Addr, port: u16) -> Option<String> {
    run_in(&pod.netns().path(), || {
        let socket = UdpSocket::bind("0.0.0.0:0")?;
        socket.connect((ip, port))?;
        socket.set_read_timeout(Some(Duration::from_secs(1)))?;
        socket.send(b"who")?;
        let mut buffer = [0_u8; 64];
        let length = socket.recv(&mut buffer)?;
        Ok::<String, std::io::Error>(String::from_utf8_lossy(&buffer[..length]).into_owned())
    })
    .unwrap()
    .ok()
}

fn tcp_service(backends: &[Ipv4Addr]) -> Topology {
    let list: Vec<String> = backends
        .iter()
        .map(|ip| format!("{ip}:{TARGET_PORT}"))
        .collect();
    let mut topology = Topology::new();
    topology.service(
        "vpc-a",
        &SUBNETS,
        "tcp",
        &format!("{VIP}:{SERVICE_PORT}"),
        &list.join(","),
    );
    topology
}

#[test]
fn services_balance_connections_over_backends_on_both_nodes() {
    services(false);
}

/// The same with the socket-level balancer on: the same results; the client's connections to
/// the VIP are sent to their backend at connect(), none balanced per packet.
#[test]
fn services_balance_the_same_at_the_socket() {
    services(true);
}

/// Starts the two agents, pinned under `pins`; with `socket_lb`, the socket-level balancer on
/// that cgroup2 mount's root, each pod's namespace named.
fn start_agents(
    lab: &ovnbpf_tests::ovn::OvnLab,
    nodes: &[ovnbpf_tests::network::Node],
    pods: &[Pod],
    socket_lb: Option<&Cgroup2Mount>,
    pins: &std::path::Path,
    log_dir: &std::path::Path,
) -> Vec<ovnbpf_tests::process::Child> {
    (0..nodes.len())
        .map(|index| start_agent(lab, nodes, pods, index, socket_lb, pins, log_dir))
        .collect()
}

/// Starts node `index`'s agent (see [`start_agents`]).
fn start_agent(
    lab: &ovnbpf_tests::ovn::OvnLab,
    nodes: &[ovnbpf_tests::network::Node],
    pods: &[Pod],
    index: usize,
    socket_lb: Option<&Cgroup2Mount>,
    pins: &std::path::Path,
    log_dir: &std::path::Path,
) -> ovnbpf_tests::process::Child {
    {
        {
            let mut spec = scenario::planned_agent(nodes, &PODS, index, Some(pins));
            if let Some(cgroup) = socket_lb {
                spec.local_ports = PODS
                    .iter()
                    .zip(pods)
                    .filter(|(plan, _)| plan.2 == index)
                    .map(|((name, ..), pod)| {
                        format!("{name}.ns={name}_h,netns={}", pod.netns().path().display())
                    })
                    .collect();
                spec.extra_args.extend([
                    "--socket-lb".into(),
                    "--socket-lb-cgroup".into(),
                    cgroup.path().display().to_string(),
                ]);
            }
            let log = log_dir.join(format!("{}.log", scenario::NODES[index]));
            spec.spawn(lab, &ovnbpf_tests::workspace_binary("ovnbpf-agent"), log)
                .unwrap()
        }
    }
}

/// Counter `kind` of family `family` (`lb`, `socket_lb`) on node `index`'s datapath.
fn lb_counter(
    nodes: &[ovnbpf_tests::network::Node],
    pins: &std::path::Path,
    index: usize,
    family: &str,
    kind: &str,
) -> u64 {
    let counters = scenario::datapath_counters(&nodes[index], &pins.join(scenario::NODES[index]));
    counters[family][kind]
        .as_u64()
        .unwrap_or_else(|| panic!("no {family} counter {kind}: {counters}"))
}

/// The last lines of both agents' logs under `log_dir`.
fn log_tails(log_dir: &std::path::Path) -> String {
    scenario::NODES
        .iter()
        .map(|node| {
            let text =
                std::fs::read_to_string(log_dir.join(format!("{node}.log"))).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            format!(
                "\n--- {node} ---\n{}",
                lines[lines.len().saturating_sub(12)..].join("\n")
            )
        })
        .collect()
}

/// The sockets node1's socket-level balancer shows a VIP back to (`SOCK_LB_REVERSE`).
fn reverse_entries(pins: &std::path::Path) -> usize {
    let layout =
        ovnbpf_agent::dataplane::ebpf::pins::PinLayout::prepare(&pins.join(scenario::NODES[0]))
            .unwrap();
    let path = layout.map_path(ovnbpf_common::map::SOCK_LB_REVERSE);
    let map = aya::maps::Map::LruHashMap(aya::maps::MapData::from_pin(path).unwrap());
    let entries: aya::maps::HashMap<
        _,
        ovnbpf_common::lb::SockLbReverseKey,
        ovnbpf_common::lb::SockLbReverse,
    > = map.try_into().unwrap();
    entries.keys().count()
}

fn services(socket_lb: bool) {
    let TwoNodes { lab, nodes, .. } = &TwoNodes::start();
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .subnet("vpc-a", "subnet-a2", "10.0.2.0/24")
        .unwrap()
        .service(
            "vpc-a",
            &SUBNETS,
            "udp",
            &format!("{DNS_VIP}:{DNS_PORT}"),
            &format!("{B1}:{DNS_TARGET_PORT},{B3}:{DNS_TARGET_PORT}"),
        )
        .service(
            "vpc-a",
            &SUBNETS,
            "udp",
            &format!("{REFUSING}:9"),
            &format!("{B1}:9,{B2}:9"),
        )
        .service(
            "vpc-a",
            &SUBNETS,
            "udp",
            &format!("{LATE}:{DNS_PORT}"),
            &format!("{B2}:{LATE_TARGET_PORT}"),
        );
    let pods = scenario::build_planned_pods(lab, nodes, topology, &PODS, true, 1442);
    tcp_service(&[B1, B2, B3]).apply(lab).unwrap();
    let (client, b1, b2, b3) = (&pods[0], &pods[1], &pods[2], &pods[3]);
    for backend in [b1, b2, b3] {
        serve_tcp(backend);
    }
    serve_udp(b1);
    serve_udp(b3);
    serve_udp_late(b2, LATE_TARGET_PORT, Duration::from_millis(300));
    let bpffs = BpfMount::create().unwrap();
    let log_dir = tempfile::tempdir().unwrap();
    let cgroup = socket_lb.then(|| Cgroup2Mount::create().unwrap());
    let mut agents = start_agents(
        lab,
        nodes,
        &pods,
        cgroup.as_ref(),
        bpffs.path(),
        log_dir.path(),
    );
    let logs = || log_tails(log_dir.path());
    assert!(scenario::planned_pods_up(lab, &PODS), "{}", logs());
    let reachable = wait_until(Duration::from_secs(10), || {
        Session::open(client, VIP, SERVICE_PORT).is_some()
    });
    assert!(reachable, "the VIP never answered{}", logs());
    let counter = |family, kind| lb_counter(nodes, bpffs.path(), 0, family, kind);
    let (balanced_before, connects_before, reversed_before) = (
        counter("lb", "balanced"),
        counter("socket_lb", "connect"),
        counter("socket_lb", "reversed"),
    );

    // 100 connections: every backend is reached; each connection keeps its backend; the
    // backend sees the client's own address.
    let mut reached: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..100 {
        let mut session = Session::open(client, VIP, SERVICE_PORT).expect("connect to the VIP");
        let (first, peer) = session.ask().expect("an answer");
        assert_eq!(peer, CLIENT.to_string(), "the backend saw another source");
        for _ in 0..3 {
            assert_eq!(
                session.ask().expect("an answer").0,
                first,
                "backend changed"
            );
        }
        *reached.entry(first).or_default() += 1;
    }
    assert_eq!(
        reached.keys().cloned().collect::<Vec<_>>(),
        ["b1", "b2", "b3"],
        "{reached:?}"
    );
    assert!(reached.values().all(|&n| n >= 10), "{reached:?}");
    // Where the balancing happened: at connect() (each connection's peer shown as the VIP), or
    // per packet, and never both.
    let (balanced, connects, reversed) = (
        counter("lb", "balanced") - balanced_before,
        counter("socket_lb", "connect") - connects_before,
        counter("socket_lb", "reversed") - reversed_before,
    );
    if socket_lb {
        assert_eq!((balanced, connects), (0, 100), "{}", logs());
        assert!(reversed >= 100, "{reversed} peers shown as the VIP");
        // A connected socket's reverse entry lives as long as the socket.
        assert_eq!(
            reverse_entries(bpffs.path()),
            0,
            "the closed sockets' entries stay"
        );
        let open = Session::open(client, VIP, SERVICE_PORT).expect("connect to the VIP");
        assert_eq!(reverse_entries(bpffs.path()), 1);
        drop(open);
        assert_eq!(reverse_entries(bpffs.path()), 0);
    } else {
        assert_eq!((balanced, connects, reversed), (100, 0, 0));
    }

    // DNS-shaped UDP: a new socket each time; answers from the VIP, from both backends.
    let answers: BTreeSet<String> = (0..20)
        .map(|_| ask_udp(client, DNS_VIP, DNS_PORT).expect("a UDP answer from the VIP"))
        .collect();
    assert_eq!(
        answers.into_iter().collect::<Vec<_>>(),
        ["b1", "b3"],
        "{}",
        logs()
    );

    // The backends' port unreachable reaches the client as the VIP's, about the datagram the
    // client sent to the VIP (checksums right): its connected socket is refused, as through
    // OVN's conntrack. Each datagram from a new port, so both backends (both nodes) answer
    // (every time: their kernels' ICMP rate limit off).
    for backend in [b1, b2] {
        backend
            .netns()
            .exec("sysctl", &["-qw", "net.ipv4.icmp_ratelimit=0"])
            .unwrap();
    }
    let mut quoted_sources = BTreeSet::new();
    // (At the socket, the datagrams go to the backends' own addresses: their errors need no
    // translation, and only the socket's outcome below is the same.)
    for _ in 0..if socket_lb { 0 } else { 12 } {
        let frame = scenario::unreachable_for_socket_datagram(client, CLIENT, REFUSING);
        let icmp = &frame[34..];
        assert_eq!(icmp::checksum(icmp), 0, "ICMP checksum: {frame:02x?}");
        let quoted = &icmp[8..];
        assert_eq!(icmp::checksum(&quoted[..20]), 0, "quoted IPv4 checksum");
        assert_eq!(quoted[12..16], CLIENT.octets(), "quoted source");
        assert_eq!(quoted[16..20], REFUSING.octets(), "quoted destination");
        assert_eq!(
            quoted[22..24],
            9_u16.to_be_bytes(),
            "quoted destination port"
        );
        quoted_sources.insert(u16::from_be_bytes([quoted[20], quoted[21]]));
    }
    assert!(
        socket_lb || quoted_sources.len() > 1,
        "one source port: {quoted_sources:?}"
    );
    for _ in 0..5 {
        let refused = run_in(&client.netns().path(), || {
            let socket = UdpSocket::bind("0.0.0.0:0")?;
            socket.connect((REFUSING, 9))?;
            socket.set_read_timeout(Some(Duration::from_secs(2)))?;
            socket.send(b"who")?;
            socket.recv(&mut [0_u8; 16])
        })
        .unwrap();
        assert_eq!(
            refused.expect_err("an answer from nothing").kind(),
            std::io::ErrorKind::ConnectionRefused
        );
    }

    // The other way: the client's own port unreachable, for an answer that came after its
    // socket closed, reaches the backend about the answer as the backend sent it, from the
    // client (checksums right).
    client
        .netns()
        .exec("sysctl", &["-qw", "net.ipv4.icmp_ratelimit=0"])
        .unwrap();
    let at_b2 = ovnbpf_tests::frames::FrameSocket::open_in(b2.netns(), "eth0").unwrap();
    run_in(&client.netns().path(), || {
        let socket = UdpSocket::bind(("0.0.0.0", 47_000))?;
        socket.send_to(b"who", (LATE, DNS_PORT))
    })
    .unwrap()
    .unwrap();
    let frame = at_b2
        .receive(Duration::from_secs(3), |frame| {
            frame.len() > 42 && frame[12..14] == [0x08, 0x00] && frame[23] == 1 && frame[34] == 3
        })
        .unwrap()
        .expect("the client's port unreachable at b2");
    assert_eq!(frame[26..30], CLIENT.octets(), "from the client");
    assert_eq!(frame[30..34], B2.octets(), "to the backend: {frame:02x?}");
    let icmp = &frame[34..];
    assert_eq!(icmp::checksum(icmp), 0, "ICMP checksum: {frame:02x?}");
    let quoted = &icmp[8..];
    assert_eq!(icmp::checksum(&quoted[..20]), 0, "quoted IPv4 checksum");
    assert_eq!(quoted[12..16], B2.octets(), "the answer as b2 sent it");
    assert_eq!(quoted[16..20], CLIENT.octets());
    assert_eq!(quoted[20..22], LATE_TARGET_PORT.to_be_bytes());
    assert_eq!(quoted[22..24], 47_000_u16.to_be_bytes());

    // Hairpin: b1 reaching its own Service is answered whichever backend it lands on, and
    // when it lands on itself it sees the VIP as its peer.
    let mut hairpins = 0;
    for _ in 0..30 {
        let mut session = Session::open(b1, VIP, SERVICE_PORT).expect("b1 → VIP");
        let (backend, peer) = session.ask().expect("an answer");
        if backend == "b1" {
            assert_eq!(peer, VIP.to_string(), "a hairpin's peer is the VIP");
            hairpins += 1;
        } else {
            assert_eq!(peer, B1.to_string());
        }
    }
    assert!(hairpins > 0, "b1 never landed on itself in 30 connections");

    // A client closes its connection to the VIP with a reset and, from the same port, opens
    // one to each backend directly: the old connection's reply translation must not turn the
    // backend's answers into the VIP's.
    let reuse = format!(
        "import socket, struct\n\
         def ask(ip, port):\n    \
             s = socket.socket()\n    \
             s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n    \
             s.bind(('{CLIENT}', 45000))\n    \
             s.settimeout(2)\n    \
             s.connect((ip, port))\n    \
             s.sendall(b'who\\n')\n    \
             answer = s.recv(64).decode().split()[0]\n    \
             s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n    \
             s.close()\n    \
             return answer\n\
         print(ask('{VIP}', {SERVICE_PORT}), *[ask(ip, {TARGET_PORT}) for ip in ('{B1}', '{B2}', '{B3}')])\n"
    );
    let answers = client.netns().exec("python3", &["-c", &reuse]).unwrap();
    let answers: Vec<&str> = answers.split_whitespace().collect();
    assert_eq!(answers.len(), 4, "{answers:?}");
    assert_eq!(answers[1..], ["b1", "b2", "b3"], "{answers:?}");

    // A backend taken out: its running connection goes on, new connections avoid it.
    let mut running = Session::open(client, VIP, SERVICE_PORT).unwrap();
    let (pinned, _) = running.ask().unwrap();
    let remaining: Vec<Ipv4Addr> = [("b1", B1), ("b2", B2), ("b3", B3)]
        .into_iter()
        .filter(|(name, _)| *name != pinned)
        .map(|(_, ip)| ip)
        .collect();
    tcp_service(&remaining).apply(lab).unwrap();
    // The agents have the change once a new connection can no longer land on it: give them a
    // moment, then count.
    thread::sleep(Duration::from_millis(500));
    for _ in 0..30 {
        let mut session = Session::open(client, VIP, SERVICE_PORT).unwrap();
        assert_ne!(
            session.ask().unwrap().0,
            pinned,
            "a new connection reached {pinned}"
        );
    }
    for _ in 0..5 {
        assert_eq!(running.ask().expect("the running connection").0, pinned);
    }

    // A Service with `sessionAffinity: ClientIP`: every connection of the client lands on one
    // backend; that backend taken out, the client moves to another and stays there.
    let sticky_service = |backends: &[String]| {
        let mut session = Topology::new();
        session.session_service(
            "vpc-a",
            &SUBNETS,
            "tcp",
            &format!("{STICKY}:{SERVICE_PORT}"),
            &backends.join(","),
        );
        session.apply(lab).unwrap();
    };
    let all: Vec<String> = [B1, B2, B3]
        .iter()
        .map(|ip| format!("{ip}:{TARGET_PORT}"))
        .collect();
    sticky_service(&all);
    let sticky_backends = |count| {
        (0..count)
            .map(|_| {
                let ready = wait_until(Duration::from_secs(5), || {
                    Session::open(client, STICKY, SERVICE_PORT).is_some()
                });
                assert!(ready, "the session VIP never answered{}", logs());
                let mut session = Session::open(client, STICKY, SERVICE_PORT).unwrap();
                session.ask().unwrap().0
            })
            .collect::<BTreeSet<String>>()
    };
    let first = sticky_backends(20);
    assert_eq!(
        first.len(),
        1,
        "the client moved between backends: {first:?}"
    );
    let sticky = first.into_iter().next().unwrap();
    let others: Vec<String> = [("b1", B1), ("b2", B2), ("b3", B3)]
        .into_iter()
        .filter(|(name, _)| *name != sticky)
        .map(|(_, ip)| format!("{ip}:{TARGET_PORT}"))
        .collect();
    sticky_service(&others);
    thread::sleep(Duration::from_millis(500));
    let then = sticky_backends(20);
    assert_eq!(then.len(), 1, "the client moved between backends: {then:?}");
    assert!(!then.contains(&sticky), "{sticky} was taken out: {then:?}");
    // The backend back in the list: the client stays where its affinity is (a hash of its
    // address alone would send it back), as OVN's per-backend affinity flows keep it.
    sticky_service(&all);
    thread::sleep(Duration::from_millis(500));
    assert_eq!(sticky_backends(10), then, "the client left its affinity");

    // NetworkPolicies judge the backend, as Kubernetes says: the backends admit the client
    // only, on their target port; the client may reach only the pods' subnets on it. Through the
    // VIP, the client is admitted; b1 is not, whichever backend it lands on (itself included:
    // a hairpin's source is the VIP).
    let mut policies = Topology::new();
    policies
        .network_policy(
            "backends",
            "ns",
            &["b1.ns", "b2.ns", "b3.ns"],
            Some(&[PolicyRule {
                allow: &["10.0.1.10"],
                except: &[],
                ports: &[PolicyPort::Port("tcp", TARGET_PORT)],
            }]),
            None,
        )
        .network_policy(
            "client",
            "ns",
            &["client.ns"],
            None,
            Some(&[PolicyRule {
                allow: &["10.0.1.0/24", "10.0.2.0/24"],
                except: &[],
                ports: &[PolicyPort::Port("tcp", TARGET_PORT)],
            }]),
        );
    policies.apply(lab).unwrap();
    let b1_refused = wait_until(Duration::from_secs(10), || {
        (0..5).all(|_| Session::open(b1, VIP, SERVICE_PORT).is_none())
    });
    assert!(b1_refused, "b1 still reaches the backends{}", logs());
    for _ in 0..10 {
        let mut session =
            Session::open(client, VIP, SERVICE_PORT).expect("the client, through the policies");
        assert_eq!(session.ask().expect("an answer").1, CLIENT.to_string());
    }

    // Restarts under the policies (socket mode only: per packet, `hitless_restart` has them).
    if let Some(cgroup) = &cgroup {
        socket_balancer_restarts(
            lab,
            nodes,
            &pods,
            &mut agents,
            cgroup,
            bpffs.path(),
            log_dir.path(),
        );
    }
    // The Service deleted: its VIP answers nothing.
    let mut topology = Topology::new();
    topology.remove_service("vpc-a", "tcp", &format!("{VIP}:{SERVICE_PORT}"));
    topology.apply(lab).unwrap();
    let gone = wait_until(Duration::from_secs(5), || {
        Session::open(client, VIP, SERVICE_PORT).is_none()
    });
    assert!(gone, "the deleted Service still answers{}", logs());
    drop(agents);
}

/// node1's agent killed and started again: its programs take over the pinned cgroup links and
/// the client's connects go on being balanced at the socket; started once more without
/// `--socket-lb`, it detaches them and they are balanced per packet again; started with it
/// again, it attaches afresh (for the rest of the test). Run with the NetworkPolicies in
/// place: connections opened while a restarted agent holds its writes, some routed to b3,
/// must live on once they land (they were cut, `acl_drop` both ways, in about a third of the
/// runs while address and port set ids went by order of first use).
fn socket_balancer_restarts(
    lab: &ovnbpf_tests::ovn::OvnLab,
    nodes: &[ovnbpf_tests::network::Node],
    pods: &[Pod],
    agents: &mut [ovnbpf_tests::process::Child],
    cgroup: &Cgroup2Mount,
    pins: &std::path::Path,
    log_dir: &std::path::Path,
) {
    let client = &pods[0];
    let counter = |family, kind| lb_counter(nodes, pins, 0, family, kind);
    let ten_connections = |phase: &str| {
        let before = (counter("lb", "balanced"), counter("socket_lb", "connect"));
        for attempt in 0..10 {
            let mut session = Session::open(client, VIP, SERVICE_PORT)
                .unwrap_or_else(|| panic!("{phase}: connection {attempt} to the VIP"));
            let answer = session.ask().unwrap_or_else(|| {
                panic!(
                    "{phase}: no answer on connection {attempt} ({:?} → {:?}){}",
                    session.writer.local_addr(),
                    session.writer.peer_addr(),
                    log_tails(log_dir)
                )
            });
            assert_eq!(answer.1, CLIENT.to_string());
        }
        (
            counter("lb", "balanced") - before.0,
            counter("socket_lb", "connect") - before.1,
        )
    };
    agents[0].kill();
    agents[0] = start_agent(lab, nodes, pods, 0, Some(cgroup), pins, log_dir);
    let log_path = agents[0].log_path().unwrap().to_path_buf();
    let log = || std::fs::read_to_string(&log_path).unwrap();
    let replaced = wait_until(Duration::from_secs(10), || {
        log()
            .lines()
            .filter(|line| {
                line.contains("socket balancer attached") && line.contains("how=Replaced")
            })
            .count()
            == ovnbpf_common::program::SOCKET_LB.len()
    });
    assert!(replaced, "{}", agents[0].log_tail());
    let up = wait_until(Duration::from_secs(10), || {
        Session::open(client, VIP, SERVICE_PORT).is_some()
    });
    assert!(up, "{}", agents[0].log_tail());
    assert_eq!(ten_connections("after a restart"), (0, 10));

    agents[0].stop();
    agents[0] = start_agent(lab, nodes, pods, 0, None, pins, log_dir);
    let off = wait_until(Duration::from_secs(10), || {
        log().contains("socket-level balancer off")
    });
    assert!(off, "{}", agents[0].log_tail());
    let up = wait_until(Duration::from_secs(10), || {
        Session::open(client, VIP, SERVICE_PORT).is_some()
    });
    assert!(up, "{}", agents[0].log_tail());
    assert_eq!(ten_connections("without --socket-lb"), (10, 0));

    // And on again, for the rest of the test: attached afresh.
    agents[0].stop();
    agents[0] = start_agent(lab, nodes, pods, 0, Some(cgroup), pins, log_dir);
    let attached = wait_until(Duration::from_secs(10), || {
        log()
            .lines()
            .filter(|line| {
                line.contains("socket balancer attached") && line.contains("how=Attached")
            })
            .count()
            == 2 * ovnbpf_common::program::SOCKET_LB.len()
    });
    assert!(attached, "{}", agents[0].log_tail());
    let up = wait_until(Duration::from_secs(10), || {
        Session::open(client, VIP, SERVICE_PORT).is_some()
    });
    assert!(up, "{}", agents[0].log_tail());
    assert_eq!(ten_connections("on again"), (0, 10));
}

#[test]
fn health_checks_take_a_dead_backend_out_and_bring_it_back() {
    const CHECKED: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 40);
    let TwoNodes { lab, nodes, .. } = &TwoNodes::start();
    let plans = &PODS[..3];
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .health_checked_service(
            "vpc-a",
            &["subnet-a"],
            "tcp",
            &format!("{CHECKED}:{SERVICE_PORT}"),
            &[
                (&format!("{B1}:{TARGET_PORT}"), "b1.ns"),
                (&format!("{B2}:{TARGET_PORT}"), "b2.ns"),
            ],
            ("subnet-a", "10.0.1.250"),
        );
    let pods = scenario::build_planned_pods(lab, nodes, topology, plans, true, 1442);
    let (client, b1, b2) = (&pods[0], &pods[1], &pods[2]);
    serve_tcp(b1);
    let mut b2_stop = Arc::new(AtomicBool::new(false));
    let b2_server = serve_tcp_until(b2, b2_stop.clone());
    let bpffs = BpfMount::create().unwrap();
    let log_dir = tempfile::tempdir().unwrap();
    let agents =
        scenario::start_planned_agents(lab, nodes, plans, Some(bpffs.path()), log_dir.path());
    let logs = || scenario::log_tails(&agents);
    assert!(scenario::planned_pods_up(lab, plans), "{}", logs());
    let status = |port: &str| {
        let row = format!("logical_port={port}");
        lab.sbctl(&[
            "--bare",
            "--columns=status",
            "find",
            "Service_Monitor",
            &row,
        ])
        .unwrap()
        .trim()
        .to_string()
    };
    let statuses = || format!("b1 {:?}, b2 {:?}", status("b1.ns"), status("b2.ns"));
    // The backends each connection of `count` reached (those that failed left out).
    let reached = |count| -> BTreeSet<String> {
        (0..count)
            .filter_map(|_| Session::open(client, CHECKED, SERVICE_PORT)?.ask())
            .map(|(name, _)| name)
            .collect()
    };
    let both: BTreeSet<String> = ["b1", "b2"].map(String::from).into();
    let only_b1: BTreeSet<String> = ["b1"].map(String::from).into();

    // Kube-OVN's counts: three answered probes, five seconds apart, make a backend online.
    let online = wait_until(Duration::from_secs(40), || {
        status("b1.ns") == "online" && status("b2.ns") == "online"
    });
    assert!(online, "{}{}", statuses(), logs());
    assert_eq!(reached(30), both);
    // The answers went to the agents, which read them from the pods' interfaces; the datapaths
    // forwarded them nowhere and counted them.
    for (node, name) in nodes.iter().zip(scenario::NODES) {
        let counters = scenario::datapath_counters(node, &bpffs.path().join(name));
        assert!(
            counters["drops"]["service_monitor"].as_u64() >= Some(3),
            "{}",
            counters["drops"]
        );
    }

    // b2's server stops: its port resets the probes, three resets make it offline, and northd
    // keeps it out of the VIP's backends.
    b2_stop.store(true, Ordering::Relaxed);
    b2_server.join().unwrap();
    let offline = wait_until(Duration::from_secs(40), || status("b2.ns") == "offline");
    assert!(offline, "{}{}", statuses(), logs());
    assert_eq!(status("b1.ns"), "online");
    let avoided = wait_until(Duration::from_secs(5), || reached(20) == only_b1);
    assert!(avoided, "new connections still reach b2{}", logs());

    // Started again: online after three answered probes, and reached again.
    b2_stop = Arc::new(AtomicBool::new(false));
    let _b2_server = serve_tcp_until(b2, b2_stop.clone());
    let back = wait_until(Duration::from_secs(40), || status("b2.ns") == "online");
    assert!(back, "{}{}", statuses(), logs());
    let returned = wait_until(Duration::from_secs(5), || reached(30) == both);
    assert!(returned, "b2 is online but not reached{}", logs());
    b2_stop.store(true, Ordering::Relaxed);
}
