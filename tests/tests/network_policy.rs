//! Kubernetes NetworkPolicies enforced by the agents' eBPF datapath on two nodes, built through
//! ovn-nbctl as kube-ovn-controller builds them (port groups, address sets, the default-deny
//! and allow-related ACLs; from-lport ones after the load balancers). vpc-a's subnet-a holds
//! web1 and client on node1, web2 and other on node2.
//!
//! - `web` (web1, web2) admits TCP 5201 from client only: client connects to both (same node and
//!   across), other cannot, nobody pings them; the policy is logged, and web2's node writes
//!   ovn-controller's `acl_log` lines for the drop and the allow; web1's own connections out get their replies,
//!   and an ICMP port unreachable answering web1's UDP reaches it (related);
//! - `isolate` (other) denies other's egress: other can open nothing, yet web1's connection to
//!   other still gets its replies;
//! - an established stream from client to web2 survives both agents restarting and an ACL
//!   change elsewhere: at most one segment lost (client's counters from the stream's start;
//!   about one run in twelve loses one, by a retransmission timeout, not yet found why);
//!   client's datagrams to web1 and web2,
//!   which `web` denies, one a millisecond through the restarts: none delivered (a restarted
//!   agent that wrote its view in steps skipped the to-lport ACLs for about 18 ms);
//! - other (with port security) cannot spoof client's address to get what the policy admits
//!   client: port security holds with ACLs present;
//! - an established connection judged from the kernel's verdict cache stops as soon as its client
//!   leaves the address set the policy admits;
//! - the policies deleted, everything flows again; then a subnet's reject ACLs answer TCP with a
//!   reset (from the receiving node's egress stage, across) and UDP with a port unreachable
//!   (from the sender's ingress), though the targets listen;
//! - a subnet ACL naming no port makes routed traffic into the subnet fail closed (the kernel
//!   runs no from-lport stage for it), until it goes.

mod common;

use std::{
    io::{ErrorKind, Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

use common::stream::{TcpCounters, backlog_drops, paced_stream};
use ovnbpf_agent::{dataplane::ebpf::pins::PinLayout, netns::run_in};
use ovnbpf_common::acl::verdict_cache;
use ovnbpf_tests::{
    bpffs::BpfMount,
    frames::{FrameSocket, ipv4_frame, tcp_syn},
    kubeovn::{PolicyLog, PolicyPort, PolicyRule, SubnetAcl, Topology, mac_for},
    network::Pod,
    process::wait_until,
    scenario::{self, PodPlan, TwoNodes},
};

const WEB1: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
const WEB2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 4);
const OTHER: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 5);
const FAR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);

const PODS: [PodPlan; 5] = [
    ("web1", "subnet-a", 0, WEB1),
    ("web2", "subnet-a", 1, WEB2),
    ("client", "subnet-a", 0, CLIENT),
    ("other", "subnet-a", 1, OTHER),
    ("far", "subnet-a2", 1, FAR),
];

/// The port `web` admits.
const WEB_PORT: u16 = 5201;

/// Whether `from` completes a TCP handshake with `to` (at `ip`, `port`) within a second.
fn connects(from: &Pod, to: &Pod, ip: Ipv4Addr, port: u16) -> bool {
    connection(from, to, ip, port).is_some()
}

/// A TCP connection from `from` to `to` (at `ip`, `port`), if the handshake completes within a
/// second and `to` accepts it within another: the sending end and the accepted one, which reads
/// with a 500 ms timeout. (A connection that completes but never reaches the listener, e.g.
/// answered by something else, is `None` rather than a wait forever.)
fn connection(from: &Pod, to: &Pod, ip: Ipv4Addr, port: u16) -> Option<(TcpStream, TcpStream)> {
    let address = SocketAddr::from((ip, port));
    let listener = run_in(&to.netns().path(), || TcpListener::bind(address))
        .unwrap()
        .unwrap();
    let sent = run_in(&from.netns().path(), || {
        TcpStream::connect_timeout(&address, Duration::from_secs(1))
    })
    .unwrap()
    .ok()?;
    listener.set_nonblocking(true).unwrap();
    let mut accepted = None;
    wait_until(Duration::from_secs(1), || {
        accepted = listener.accept().ok();
        accepted.is_some()
    });
    let (received, _) = accepted?;
    received.set_nonblocking(false).unwrap();
    received
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    Some((sent, received))
}

/// What `from` hears back for a UDP datagram to a port nobody listens on at `ip`: refused (the
/// peer's ICMP port unreachable reached the socket) or silence.
fn udp_refused(from: &Pod, ip: Ipv4Addr) -> bool {
    run_in(&from.netns().path(), || {
        let socket = UdpSocket::bind("0.0.0.0:0")?;
        socket.connect((ip, 9))?;
        socket.set_read_timeout(Some(Duration::from_secs(1)))?;
        socket.send(b"anyone?")?;
        let mut buffer = [0_u8; 16];
        Ok::<bool, std::io::Error>(matches!(
            socket.recv(&mut buffer),
            Err(error) if error.kind() == ErrorKind::ConnectionRefused
        ))
    })
    .unwrap()
    .unwrap()
}

/// Datagrams from `from` to `targets`' port 7777, one to each every millisecond until `stop`,
/// and what each target received meanwhile (its socket read until `stop`): the policies deny
/// them, so any that arrives went past an ACL.
fn denied_datagrams(
    from: &Pod,
    targets: &[(&Pod, Ipv4Addr)],
    stop: &Arc<AtomicBool>,
) -> thread::JoinHandle<(u64, Vec<u64>)> {
    let receivers: Vec<thread::JoinHandle<u64>> = targets
        .iter()
        .map(|(pod, _)| {
            let socket = run_in(&pod.netns().path(), || UdpSocket::bind(("0.0.0.0", 7777)))
                .unwrap()
                .unwrap();
            socket
                .set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            let stop = Arc::clone(stop);
            thread::spawn(move || {
                let mut received = 0;
                let mut buffer = [0_u8; 64];
                while !stop.load(Ordering::Relaxed) {
                    if socket.recv(&mut buffer).is_ok() {
                        received += 1;
                    }
                }
                received
            })
        })
        .collect();
    let sender = run_in(&from.netns().path(), || UdpSocket::bind("0.0.0.0:0"))
        .unwrap()
        .unwrap();
    let addresses: Vec<SocketAddr> = targets
        .iter()
        .map(|(_, ip)| SocketAddr::from((*ip, 7777)))
        .collect();
    let stop = Arc::clone(stop);
    thread::spawn(move || {
        let mut sent = 0;
        while !stop.load(Ordering::Relaxed) {
            for address in &addresses {
                if sender.send_to(b"denied", address).is_ok() {
                    sent += 1;
                }
            }
            thread::sleep(Duration::from_millis(1));
        }
        let received = receivers
            .into_iter()
            .map(|receiver| receiver.join().unwrap())
            .collect();
        (sent, received)
    })
}

/// Whether a SYN to `to`'s port `WEB_PORT` from client's address, sent as a raw frame out of
/// `from`'s eth0 with `from`'s own MAC, reaches `to`'s eth0.
fn syn_arrives(from: &Pod, to: &Pod, to_ip: Ipv4Addr) -> bool {
    let socket = FrameSocket::open_in(to.netns(), "eth0").unwrap();
    let sender = FrameSocket::open_in(from.netns(), "eth0").unwrap();
    let segment = tcp_syn((CLIENT, to_ip), 40123, WEB_PORT, 0x0102_0304);
    let frame = ipv4_frame(
        mac(to.name()),
        mac(from.name()),
        (CLIENT, to_ip),
        6,
        &segment,
    );
    let is_it = |frame: &[u8]| {
        frame.len() >= 54 && frame[23] == 6 && frame[34..36] == 40123_u16.to_be_bytes()
    };
    (0..3).any(|_| {
        sender.send(&frame).unwrap();
        socket
            .receive(Duration::from_millis(500), is_it)
            .unwrap()
            .is_some()
    })
}

/// Whether a few bytes written to `sent` arrive at `received`.
fn carries(sent: &mut TcpStream, received: &mut TcpStream) -> bool {
    if sent.write_all(b"ping").is_err() {
        return false;
    }
    let mut buffer = [0_u8; 4];
    received.read_exact(&mut buffer).is_ok()
}

/// Node `node`'s count `index` of the kernel's verdict cache (`ACL_VERDICT_CACHE`), from its
/// agent's pinned map under `pins`.
fn verdict_cache(pins: &std::path::Path, node: usize, index: u32) -> u64 {
    let layout = PinLayout::prepare(&pins.join(scenario::NODES[node])).unwrap();
    let path = layout.map_path(ovnbpf_common::map::ACL_VERDICT_CACHE);
    let map = aya::maps::Map::PerCpuArray(aya::maps::MapData::from_pin(path).unwrap());
    let counters: aya::maps::PerCpuArray<_, u64> = map.try_into().unwrap();
    counters.get(&index, 0).unwrap().iter().sum()
}

/// Node `node`'s datapath drop counters by reason (summed over CPUs), from its pins.
fn drop_counts(pins: &std::path::Path, node: usize) -> Vec<u64> {
    let layout = PinLayout::prepare(&pins.join(scenario::NODES[node])).unwrap();
    let path = layout.map_path(ovnbpf_common::map::DROP_COUNTERS);
    let map = aya::maps::Map::PerCpuArray(aya::maps::MapData::from_pin(path).unwrap());
    let counters: aya::maps::PerCpuArray<_, u64> = map.try_into().unwrap();
    (0..ovnbpf_common::drop_reason::COUNT)
        .map(|index| counters.get(&index, 0).map_or(0, |c| c.iter().sum()))
        .collect()
}

/// The reasons whose counts grew from `before` to `after`, `reason=+n` apart by spaces.
fn drops_grown(before: &[u64], after: &[u64]) -> String {
    let names = ovnbpf_common::drop_reason::NAMES;
    let grown: Vec<String> = names
        .iter()
        .zip(before.iter().zip(after))
        .filter(|(_, (b, a))| a > b)
        .map(|(name, (b, a))| format!("{name}=+{}", a - b))
        .collect();
    grown.join(" ")
}

fn mac(name: &str) -> [u8; 6] {
    ovnbpf_agent::lflow::parse_mac(&mac_for(name)).unwrap()
}

/// `web`, logged (Kube-OVN's `enable_log: "true"` and `log_acl_actions: "allow,drop"`).
fn web_policy() -> Topology {
    let mut topology = Topology::new();
    topology.logged_network_policy(
        "web",
        "ns",
        &["web1.ns", "web2.ns"],
        Some(&[PolicyRule {
            allow: &["10.0.1.4"],
            except: &[],
            ports: &[PolicyPort::Port("tcp", WEB_PORT)],
        }]),
        None,
        PolicyLog::AllowAndDrop,
    );
    topology
}

/// The lines of `agent`'s log (its predecessors' too) holding every one of `parts`.
fn log_lines_with(agent: &ovnbpf_tests::process::Child, parts: &[&str]) -> usize {
    let text = agent
        .log_path()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .unwrap_or_default();
    text.lines()
        .filter(|line| parts.iter().all(|part| line.contains(part)))
        .count()
}

/// Whether `agent`'s log has a line holding every one of `parts`.
fn logged(agent: &ovnbpf_tests::process::Child, parts: &[&str]) -> bool {
    log_lines_with(agent, parts) > 0
}

/// The lines of `agent`'s log (its predecessors' too) holding `part`.
fn log_lines(agent: &ovnbpf_tests::process::Child, part: &str) -> usize {
    log_lines_with(agent, &[part])
}

#[test]
fn network_policies_are_enforced_on_both_nodes_and_spare_established_streams() {
    let TwoNodes { lab, nodes, .. } = &TwoNodes::start();
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .subnet("vpc-a", "subnet-a2", "10.0.2.0/24")
        .unwrap();
    let pods = scenario::build_planned_pods(lab, nodes, topology, &PODS, true, 1442);
    let (web1, web2, client, other, far) = (&pods[0], &pods[1], &pods[2], &pods[3], &pods[4]);
    let bpffs = BpfMount::create().unwrap();
    let log_dir = tempfile::tempdir().unwrap();
    let start = |index| {
        scenario::start_planned_agent(lab, nodes, &PODS, index, Some(bpffs.path()), log_dir.path())
    };
    let mut agents = vec![start(0), start(1)];
    let logs = |agents: &[ovnbpf_tests::process::Child]| scenario::log_tails(agents);
    assert!(scenario::planned_pods_up(lab, &PODS), "{}", logs(&agents));
    // Without policies, everything flows.
    assert_eq!(other.ping(WEB1, 2).unwrap(), 2, "{}", logs(&agents));
    assert!(connects(other, web2, WEB2, WEB_PORT));

    // other has port security (Kube-OVN's `ovn.kubernetes.io/port_security` annotation; without
    // it OVN forwards a pod's packets from any address, and so does ovnbpf).
    let mut policy = web_policy();
    policy.port_security("other.ns", &format!("{} {OTHER}", mac_for("other")));
    policy.apply(lab).unwrap();
    let settled = wait_until(Duration::from_secs(10), || {
        !connects(other, web2, WEB2, WEB_PORT)
    });
    assert!(settled, "other still reaches web2{}", logs(&agents));
    assert!(
        connects(client, web1, WEB1, WEB_PORT),
        "client → web1, same node"
    );
    assert!(
        connects(client, web2, WEB2, WEB_PORT),
        "client → web2, across"
    );
    assert!(!connects(other, web1, WEB1, WEB_PORT), "other → web1");
    // The policy is logged: web2's node writes ovn-controller's acl_log lines for other's
    // refused SYN (the default drop, severity warning) and client's admitted one (info).
    let refused_logged = wait_until(Duration::from_secs(5), || {
        logged(
            &agents[1],
            &[
                "acl_log",
                r#"name="ns/web", verdict=drop, severity=warning, direction=to-lport: tcp,"#,
                "nw_src=10.0.1.5,nw_dst=10.0.1.3,",
                "tp_dst=5201,tcp_flags=syn",
            ],
        )
    });
    assert!(
        refused_logged,
        "no acl_log line for the drop{}",
        logs(&agents)
    );
    assert!(
        logged(
            &agents[1],
            &[
                r#"name="np/web.ns/ingress/IPv4/0", verdict=allow, severity=info, direction=to-lport: tcp,"#,
                "nw_src=10.0.1.4,nw_dst=10.0.1.3,",
                "tp_dst=5201,tcp_flags=syn",
            ],
        ),
        "no acl_log line for the allow{}",
        logs(&agents)
    );
    // As in OVN, the allow ACL's flow for established connections logs too (northd gives it the
    // same `log()`): the handshake's last ACK has its line.
    assert!(
        logged(
            &agents[1],
            &[
                "verdict=allow",
                "nw_src=10.0.1.4,nw_dst=10.0.1.3,",
                "tcp_flags=ack"
            ]
        ),
        "no acl_log line for the established connection's ACK{}",
        logs(&agents)
    );
    assert!(
        !connects(client, web1, WEB1, 8080),
        "client → web1 on another port"
    );
    assert_eq!(client.ping(WEB1, 2).unwrap(), 0, "ping is not admitted");
    // Spoofing does not buy what the policy admits: other's SYN to web2's admitted port with
    // client's address (the one the policy admits) never reaches web2 (other's port security
    // drops it before the ACLs), while the same SYN from client does.
    assert!(
        syn_arrives(client, web2, WEB2),
        "client's own SYN reaches web2"
    );
    assert!(
        !syn_arrives(other, web2, WEB2),
        "other's SYN as client reaches web2"
    );
    // What web1 opens itself is answered (allow-related), and an ICMP error about it too.
    assert!(connects(web1, other, OTHER, 8080), "web1 → other");
    assert!(udp_refused(web1, OTHER), "web1 hears the port unreachable");
    assert!(
        udp_refused(client, OTHER),
        "and so does a pod without policy"
    );

    // other may open nothing; replies to what others open still leave it.
    let mut isolate = Topology::new();
    isolate.network_policy("isolate", "ns", &["other.ns"], None, Some(&[]));
    isolate.apply(lab).unwrap();
    let settled = wait_until(Duration::from_secs(10), || {
        !connects(other, client, CLIENT, 8080)
    });
    assert!(settled, "other still opens connections{}", logs(&agents));
    assert_eq!(other.ping(CLIENT, 2).unwrap(), 0);
    assert!(connects(web1, other, OTHER, 8080), "other still answers");

    // An established stream across the nodes: both agents restart, and a policy elsewhere
    // changes, while it runs.
    let stop = Arc::new(AtomicBool::new(false));
    let stream = paced_stream(client, web2, WEB2, WEB_PORT, Arc::clone(&stop));
    let counters_before = TcpCounters::read(&client.netns().path());
    let backlog_before = backlog_drops();
    let drops_before = [0, 1].map(|node| drop_counts(bpffs.path(), node));
    // Meanwhile client's datagrams to the web pods, which their policy denies (it admits TCP
    // only): a restarted agent must never deliver one, not even before it has the policy.
    let denied = denied_datagrams(client, &[(web1, WEB1), (web2, WEB2)], &stop);
    thread::sleep(Duration::from_millis(500));
    for (index, agent) in agents.iter_mut().enumerate() {
        agent.stop();
        *agent = start(index);
    }
    assert!(scenario::planned_pods_up(lab, &PODS), "{}", logs(&agents));
    let mut unrelated = Topology::new();
    unrelated.network_policy(
        "unrelated",
        "ns",
        &["other.ns"],
        Some(&[PolicyRule {
            allow: &["10.0.1.2"],
            except: &[],
            ports: &[PolicyPort::Port("tcp", 80)],
        }]),
        None,
    );
    unrelated.apply(lab).unwrap();
    thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let report = stream.join().unwrap();
    let (sent, received) = denied.join().unwrap();
    assert!(sent > 1000, "{sent} datagrams sent");
    assert_eq!(
        received,
        [0, 0],
        "denied datagrams delivered across the restarts (of {sent}){}",
        logs(&agents)
    );
    thread::sleep(Duration::from_millis(200));
    let counters = TcpCounters::read(&client.netns().path()).since(&counters_before);
    let backlog = backlog_drops() - backlog_before;
    let drops =
        [0, 1].map(|node| drops_grown(&drops_before[node], &drop_counts(bpffs.path(), node)));
    eprintln!(
        "stream {} bytes, longest pause {:?}; client's TCP counters: {counters}; frames dropped \
         for backlog room meanwhile: {backlog}; datapath drops meanwhile: node1 [{}], node2 [{}]",
        report.bytes, report.longest_pause, drops[0], drops[1]
    );
    assert!(report.bytes > 10 * 1024 * 1024, "{} bytes", report.bytes);
    // At most one segment lost: about one run in twelve loses one across the restarts, by a
    // retransmission timeout (TCPTimeouts=1, TCPLostRetransmit=1: more than one frame went,
    // or the ACKs did), with no drop counted by the datapath (a known open defect; the
    // backlog drops printed above tell whether the host's CPUs lost it); more than one, or a
    // reset stream, fails.
    assert!(
        counters.lost_segments() <= 1,
        "segments lost across the restarts ({counters}; backlog drops {backlog}; datapath \
         drops node1 [{}], node2 [{}]){}",
        drops[0],
        drops[1],
        logs(&agents)
    );
    // The restarted agents enforce the same policies.
    assert!(
        !connects(other, web2, WEB2, WEB_PORT),
        "other → web2 after the restart"
    );

    // The kernel remembers the walks' outcomes (its verdict cache) and still follows the
    // policy's changes at once: client's established connection to web2 carries data (its later
    // segments judged from the cache), until client leaves the address set the policy admits
    // (kube-ovn-controller updates the set when client's labels change). From then on, as in
    // OVN, the connection's packets match only the default drop.
    // (After the restarted agent's sweep of what its predecessor left, which also stales the
    // cache: what follows sees only the set's change.)
    let swept = wait_until(Duration::from_secs(30), || {
        log_lines(&agents[1], "datapath swept of stale entries") >= 2
    });
    assert!(swept, "node2's agent never swept{}", logs(&agents));
    let hits_before = verdict_cache(bpffs.path(), 1, verdict_cache::HIT);
    let (mut sent, mut received) =
        connection(client, web2, WEB2, WEB_PORT).expect("client → web2, admitted");
    for _ in 0..20 {
        assert!(carries(&mut sent, &mut received), "client → web2, held");
    }
    let hits = verdict_cache(bpffs.path(), 1, verdict_cache::HIT) - hits_before;
    assert!(
        hits >= 19,
        "{hits} of web2's node's walks answered from the cache"
    );
    // (The set keeps a member: only its members change, not which rules can match.)
    let set = "web.ns.ingress.allow.IPv4.0";
    lab.nbctl(&["add", "address_set", set, "addresses", "\"10.0.1.9\""])
        .unwrap();
    assert!(carries(&mut sent, &mut received), "client → web2, held");
    lab.nbctl(&["remove", "address_set", set, "addresses", "\"10.0.1.4\""])
        .unwrap();
    let cut = wait_until(Duration::from_secs(10), || {
        !carries(&mut sent, &mut received)
    });
    assert!(
        cut,
        "the held connection outlives the policy{}",
        logs(&agents)
    );
    assert!(
        !connects(client, web2, WEB2, WEB_PORT),
        "client → web2, new"
    );

    // The policies go (kube-ovn-controller deletes their port groups, and the ACLs with them):
    // everything flows again, once both agents have programmed it (web1's to-lport ACLs are
    // judged on node1, other's on node2: each agent applies the deletion on its own time). Until
    // then a packet may meet a state between two deletions (a switch's rule list half rewritten,
    // as ovn-controller's flows are between two flow mods): `--wait=hv` returns once every
    // chassis has acknowledged the last one.
    for group in ["web.ns", "isolate.ns", "unrelated.ns"] {
        lab.nbctl(&["--wait=hv", "--timeout=30", "pg-del", group])
            .unwrap();
    }
    let open = wait_until(Duration::from_secs(10), || {
        connects(other, web2, WEB2, WEB_PORT) && connects(other, web1, WEB1, WEB_PORT)
    });
    assert!(
        open,
        "other → web1 and web2 once the policies are gone{}",
        logs(&agents)
    );
    assert_eq!(other.ping(WEB1, 2).unwrap(), 2, "{}", logs(&agents));
    assert_eq!(client.ping(WEB1, 2).unwrap(), 2, "{}", logs(&agents));

    // A subnet's reject ACLs (Kube-OVN's `spec.acls`): TCP gets a reset from the receiving
    // node's egress stage (client → web2, across), UDP a port unreachable from the sender's
    // ingress (client → web1); both targets listen, so the refusals are the ACLs'.
    let mut rejects = Topology::new();
    rejects.subnet_acls(
        "subnet-a",
        &[
            SubnetAcl {
                direction: "to-lport",
                priority: 2500,
                match_: "outport == \"web2.ns\" && tcp.dst == 8080",
                action: "reject",
            },
            SubnetAcl {
                direction: "from-lport",
                priority: 2500,
                match_: "inport == \"client.ns\" && udp.dst == 8081",
                action: "reject",
            },
        ],
    );
    rejects.apply(lab).unwrap();
    let tcp_listener = run_in(&web2.netns().path(), || {
        TcpListener::bind(SocketAddr::from((WEB2, 8080)))
    })
    .unwrap()
    .unwrap();
    let udp_listener = run_in(&web1.netns().path(), || {
        UdpSocket::bind(SocketAddr::from((WEB1, 8081)))
    })
    .unwrap()
    .unwrap();
    let refused = wait_until(Duration::from_secs(10), || {
        let (tcp, _) = scenario::socket_outcomes(client, WEB2, 8080);
        tcp.is_err_and(|e| e.kind() == ErrorKind::ConnectionRefused)
    });
    assert!(refused, "client → web2:8080 not reset{}", logs(&agents));
    // web1 is on the other node, whose agent applies the same policy on its own time.
    let udp_refused = wait_until(Duration::from_secs(10), || {
        let (_, udp) = scenario::socket_outcomes(client, WEB1, 8081);
        udp.is_err_and(|e| e.kind() == ErrorKind::ConnectionRefused)
    });
    assert!(
        udp_refused,
        "client's UDP to web1:8081 not refused{}",
        logs(&agents)
    );
    assert!(
        connects(other, web2, WEB2, 8082),
        "other ports still reach web2"
    );
    drop((tcp_listener, udp_listener));

    // A subnet ACL naming no port: what is routed into the switch could match it, and the
    // kernel runs no from-lport ACL stage for it there, so routed IPv4 into subnet-a is refused
    // (fails closed) until the ACL goes; switched traffic is judged by it as usual.
    assert_eq!(far.ping(CLIENT, 2).unwrap(), 2, "far → client, routed");
    lab.nbctl(&[
        "acl-add",
        "subnet-a",
        "from-lport",
        "1000",
        "ip4.src == 10.9.9.9",
        "drop",
    ])
    .unwrap();
    let refused = wait_until(Duration::from_secs(10), || {
        far.ping(CLIENT, 1).unwrap_or(1) == 0
    });
    assert!(
        refused,
        "routed traffic still enters subnet-a{}",
        logs(&agents)
    );
    assert_eq!(
        client.ping(OTHER, 2).unwrap(),
        2,
        "switched traffic is checked"
    );
    lab.nbctl(&["acl-del", "subnet-a"]).unwrap();
    let back = wait_until(Duration::from_secs(10), || {
        far.ping(CLIENT, 1).unwrap_or(0) == 1
    });
    assert!(back, "routed traffic not back{}", logs(&agents));
}
