//! The agent's Southbound claims against a real OVN central (issue 27): a pod deleted and added
//! again 200 times through the CNI plugin, with gaps of 0–500 ms (a quarter of them ADDs issued
//! while the previous DEL runs), alone and with other pods churning, through a Southbound restart
//! and a Southbound that refuses writes for a while (ovsdb-server in backup mode: "not allowed …
//! read only mode"), always ends claimed and `up` after ADD and released after DEL; with
//! conditional monitoring, `ovn-nbctl --wait=hv` returns only once a new switch's port forwards
//! here; a `requested_chassis` moved to another chassis moves the claim without two agents
//! fighting over it (OVN's rule).

use ovnbpf_tests::scenario;
use ovnbpf_tests::scenario::{NODES, TwoNodes};

use std::{
    net::Ipv4Addr,
    path::PathBuf,
    process::Output,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use ovnbpf_tests::{
    agent::AgentSpec,
    bpffs::BpfMount,
    cni_runtime::{PodAttachment, Runtime, plugin_dir},
    kubeovn::{Topology, mac_for},
    names::unique_prefix,
    netns::Netns,
    network::{Node, PodSpec},
    ovn::{Db, OvnLab},
    process::{Child, run, wait_until},
    workspace_binary,
};
use serde_json::json;

/// Where each node's agent serves its metrics, inside the node's namespace.
const METRICS: &str = "127.0.0.1:10665";

/// How long after an ADD returns its Port_Binding must show claimed here and `up`, and after a
/// DEL released (the agent writes at once; the bound covers a retried write, 1 s after a failure).
const SETTLE: Duration = Duration::from_secs(5);

/// `GET /metrics` of the agent of `node`.
fn scrape(node: &Node) -> String {
    use std::io::{Read, Write};
    ovnbpf_tests::netns::run_in_path(&node.netns().path(), || {
        let mut stream = std::net::TcpStream::connect(METRICS)?;
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    })
    .unwrap()
}

/// The value of the metric line `name` (with its labels) in `text`.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing in\n{text}"))
}

/// The Chassis row uuid of `chassis`.
fn chassis_uuid(lab: &OvnLab, chassis: &str) -> String {
    let name = format!("name={chassis}");
    lab.sbctl(&["--bare", "--columns=_uuid", "find", "Chassis", &name])
        .unwrap()
        .trim()
        .to_string()
}

/// (`chassis`, `up`) of `port`'s Port_Binding as the Southbound has them.
fn binding(lab: &OvnLab, port: &str) -> (String, String) {
    let selector = format!("logical_port={port}");
    let text = lab
        .sbctl(&[
            "--format=csv",
            "--data=bare",
            "--no-headings",
            "--columns=chassis,up",
            "find",
            "Port_Binding",
            &selector,
        ])
        .unwrap_or_default();
    let mut fields = text.trim().splitn(2, ',');
    let chassis = fields.next().unwrap_or_default().to_string();
    let up = fields.next().unwrap_or_default().to_string();
    (chassis, up)
}

fn claimed_up(lab: &OvnLab, port: &str, chassis: &str) -> bool {
    binding(lab, port) == (chassis.to_string(), "true".to_string())
}

fn released(lab: &OvnLab, port: &str) -> bool {
    binding(lab, port) == (String::new(), "false".to_string())
}

/// A tiny deterministic generator for the gaps (no dependency for that).
struct Gaps(u64);

impl Gaps {
    fn next_ms(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

/// Node1 with an agent serving CNI and the plugin installed, for `pods` in subnet-a.
struct CniNode {
    two: TwoNodes,
    work: tempfile::TempDir,
    _bpffs: BpfMount,
    plugins: PathBuf,
    agent: Child,
}

impl CniNode {
    fn start(pods: &[(&str, Ipv4Addr)]) -> Self {
        let two = TwoNodes::start();
        let mut topology = Topology::new();
        topology
            .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
            .unwrap();
        for (name, ip) in pods {
            topology.pod("subnet-a", name, "ns", &mac_for(name), *ip);
        }
        topology.apply(&two.lab).unwrap();
        let work = tempfile::tempdir().unwrap();
        let plugins = plugin_dir(
            &work.path().join("bin"),
            "ovnbpf",
            &workspace_binary("ovnbpf-cni"),
        )
        .unwrap();
        let bpffs = BpfMount::create().unwrap();
        let agent = AgentSpec {
            chassis: NODES[0],
            node: &two.nodes[0],
            local_ports: Vec::new(),
            pin_root: Some(bpffs.path().join(NODES[0])),
            cni_dir: Some(work.path().join(NODES[0])),
            extra_args: vec!["--metrics-address".into(), METRICS.into()],
        }
        .spawn(
            &two.lab,
            &workspace_binary("ovnbpf-agent"),
            work.path().join("node1.log"),
        )
        .unwrap();
        let node = Self {
            two,
            work,
            _bpffs: bpffs,
            plugins,
            agent,
        };
        // STATUS: ready once the agent synced and registered.
        let status = PodAttachment {
            container_id: String::new(),
            netns: String::new(),
            if_name: String::new(),
            args: String::new(),
        };
        assert!(
            wait_until(Duration::from_secs(15), || ok(
                &node.invoke("STATUS", &status)
            )),
            "STATUS never ready{}",
            node.log()
        );
        node
    }

    fn socket(&self) -> PathBuf {
        self.work.path().join(NODES[0]).join("cni.sock")
    }

    fn invoke(&self, command: &str, attachment: &PodAttachment) -> Output {
        let config = json!({"cniVersion": "1.1.0", "name": "ovn", "type": "ovnbpf",
            "server_socket": self.socket()});
        Runtime::new(
            self.two.nodes[0].netns(),
            vec![self.plugins.clone(), PathBuf::from("/usr/lib/cni")],
        )
        .exec(command, attachment, &config)
        .unwrap()
    }

    fn log(&self) -> String {
        self.agent.log_tail()
    }
}

fn attachment(container_id: &str, netns: &Netns, pod: &str) -> PodAttachment {
    PodAttachment {
        container_id: container_id.to_string(),
        netns: netns.path().display().to_string(),
        if_name: "eth0".into(),
        args: format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME={pod}"),
    }
}

fn ok(output: &Output) -> bool {
    output.status.success()
}

/// `ovs-appctl` on the lab's Southbound ovsdb-server.
fn sb_appctl(lab: &OvnLab, args: &[&str]) {
    let target = lab.dir().join("sb.ctl").display().to_string();
    let mut all = vec!["-t", target.as_str()];
    all.extend(args);
    run("ovs-appctl", &all).unwrap();
}

/// Other pods ADDed and DELeted on the same node until `stop`; returns the failures.
fn churn(
    node: &CniNode,
    pods: &[(&str, Ipv4Addr)],
    netns: &[Netns],
    stop: &AtomicBool,
) -> Vec<String> {
    let mut failures = Vec::new();
    let mut round = 0_u32;
    while !stop.load(Ordering::Relaxed) {
        for (index, (pod, _)) in pods.iter().enumerate() {
            let pod_attachment =
                attachment(&format!("ch{index}{round:07}abcdef"), &netns[index], pod);
            for command in ["ADD", "DEL"] {
                let output = node.invoke(command, &pod_attachment);
                if !ok(&output) {
                    failures.push(format!("{command} {pod} round {round}: {output:?}"));
                }
            }
        }
        round += 1;
    }
    failures
}

#[test]
fn a_pod_deleted_and_added_again_ends_claimed_and_up() {
    const POD: &str = "r0";
    const PORT: &str = "r0.ns";
    const ITERATIONS: u32 = 200;
    let others = [
        ("o1", Ipv4Addr::new(10, 0, 1, 11)),
        ("o2", Ipv4Addr::new(10, 0, 1, 12)),
        ("o3", Ipv4Addr::new(10, 0, 1, 13)),
    ];
    let mut pods = vec![(POD, Ipv4Addr::new(10, 0, 1, 10))];
    pods.extend(others);
    let mut node = CniNode::start(&pods);
    let prefix = unique_prefix();
    // Each sandbox has its own namespace: two alternate for r0 (a DEL may still run in the old).
    let sandboxes = [
        Netns::create(&format!("{prefix}-r0a")).unwrap(),
        Netns::create(&format!("{prefix}-r0b")).unwrap(),
    ];
    let other_netns: Vec<Netns> = others
        .iter()
        .map(|(name, _)| Netns::create(&format!("{prefix}-{name}")).unwrap())
        .collect();
    let sandbox = |i: u32| {
        attachment(
            &format!("r0{i:06}abcdef0123"),
            &sandboxes[i as usize % 2],
            POD,
        )
    };

    let first = node.invoke("ADD", &sandbox(0));
    assert!(ok(&first), "first ADD: {first:?}{}", node.log());
    let here = chassis_uuid(&node.two.lab, NODES[0]);
    assert!(!here.is_empty());
    let mut gaps = Gaps(27);
    // The first half alone, with the Southbound restarted at #50.
    for i in 1..=ITERATIONS / 2 {
        if i == 50 {
            restart_southbound_between(&mut node, &sandbox(i - 1), &sandbox(i), &here);
        } else {
            delete_and_add(&node, i, &sandbox(i - 1), &sandbox(i), &mut gaps, &here);
        }
    }
    // The second half with other pods coming and going on the node, and writes refused for a
    // while at #150.
    let stop = AtomicBool::new(false);
    let churn_failures = std::thread::scope(|scope| {
        let (node, others, netns, stop) = (&node, &others, &other_netns, &stop);
        let churner = scope.spawn(move || churn(node, others, netns, stop));
        for i in ITERATIONS / 2 + 1..=ITERATIONS {
            if i == 150 {
                refuse_writes_between(node, &sandbox(i - 1), &sandbox(i), &here);
            } else {
                delete_and_add(node, i, &sandbox(i - 1), &sandbox(i), &mut gaps, &here);
            }
        }
        stop.store(true, Ordering::Relaxed);
        churner.join().unwrap()
    });
    assert!(churn_failures.is_empty(), "{churn_failures:#?}");
    let lab = &node.two.lab;
    assert!(claimed_up(lab, PORT, &here), "{:?}", binding(lab, PORT));

    // ADD then DEL at once ends released.
    let last = sandbox(ITERATIONS);
    let del = node.invoke("DEL", &last);
    assert!(ok(&del), "{del:?}");
    assert!(
        wait_until(SETTLE, || released(lab, PORT)),
        "{:?}{}",
        binding(lab, PORT),
        node.log()
    );

    // The faults were seen: the refused writes were counted and retried.
    let text = scrape(&node.two.nodes[0]);
    let counters: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("ovnbpf_southbound_") && !line.starts_with('#'))
        .collect();
    eprintln!("node1's Southbound counters:\n{}", counters.join("\n"));
    assert!(
        metric(&text, "ovnbpf_southbound_failed_transactions_total") > 0,
        "{text}"
    );
    assert!(
        metric(&text, "ovnbpf_southbound_write_retries_total") > 0,
        "{text}"
    );
    assert!(
        metric(&text, r#"ovnbpf_southbound_writes_total{purpose="claim"}"#)
            >= u64::from(ITERATIONS)
    );
    assert!(
        metric(
            &text,
            r#"ovnbpf_southbound_writes_total{purpose="release"}"#
        ) >= u64::from(ITERATIONS)
    );
    let log = std::fs::read_to_string(node.work.path().join("node1.log")).unwrap();
    assert!(
        log.contains("read only mode"),
        "no write was refused by the read-only server"
    );
}

/// Nothing undid the previous ADD's claim or `up` meanwhile (checked before each DEL).
fn assert_still_claimed_up(node: &CniNode, i: u32, here: &str) {
    let lab = &node.two.lab;
    assert!(
        claimed_up(lab, "r0.ns", here),
        "before DEL #{i}: {:?}{}",
        binding(lab, "r0.ns"),
        node.log()
    );
}

/// After ADD #`i`: claimed here and up within [`SETTLE`].
fn assert_claimed_up_after_add(node: &CniNode, i: u32, here: &str) {
    let lab = &node.two.lab;
    assert!(
        wait_until(SETTLE, || claimed_up(lab, "r0.ns", here)),
        "not claimed and up after ADD #{i}: {:?}{}",
        binding(lab, "r0.ns"),
        node.log()
    );
}

/// DEL of the `previous` sandbox, then ADD of the `next` after a gap of 0–500 ms; every fourth
/// time the ADD is issued 0–50 ms after the DEL started, while it runs.
fn delete_and_add(
    node: &CniNode,
    i: u32,
    previous: &PodAttachment,
    next: &PodAttachment,
    gaps: &mut Gaps,
    here: &str,
) {
    assert_still_claimed_up(node, i, here);
    let lab = &node.two.lab;
    if i.is_multiple_of(4) {
        let overlap = Duration::from_millis(gaps.next_ms(50));
        let (add, del) = std::thread::scope(|scope| {
            let del = scope.spawn(move || node.invoke("DEL", previous));
            std::thread::sleep(overlap);
            (node.invoke("ADD", next), del.join().unwrap())
        });
        assert!(ok(&del), "overlapped DEL #{i}: {del:?}{}", node.log());
        assert!(ok(&add), "overlapped ADD #{i}: {add:?}{}", node.log());
    } else {
        let gap = Duration::from_millis(gaps.next_ms(501));
        let del = node.invoke("DEL", previous);
        assert!(ok(&del), "DEL #{i}: {del:?}{}", node.log());
        assert!(
            wait_until(SETTLE, || released(lab, "r0.ns")),
            "not released after DEL #{i}: {:?}{}",
            binding(lab, "r0.ns"),
            node.log()
        );
        std::thread::sleep(gap);
        let add = node.invoke("ADD", next);
        assert!(ok(&add), "ADD #{i} after {gap:?}: {add:?}{}", node.log());
    }
    assert_claimed_up_after_add(node, i, here);
}

/// The Southbound stops during DEL and starts again 0.5 s later; the release is written once it
/// is back, then ADD.
fn restart_southbound_between(
    node: &mut CniNode,
    previous: &PodAttachment,
    next: &PodAttachment,
    here: &str,
) {
    assert_still_claimed_up(node, 50, here);
    node.two.lab.stop_database(Db::Southbound);
    let del = node.invoke("DEL", previous);
    assert!(
        ok(&del),
        "DEL with the Southbound down: {del:?}{}",
        node.log()
    );
    std::thread::sleep(Duration::from_millis(500));
    node.two.lab.start_database(Db::Southbound).unwrap();
    let lab = &node.two.lab;
    assert!(
        wait_until(SETTLE, || released(lab, "r0.ns")),
        "not released after the Southbound came back: {:?}{}",
        binding(lab, "r0.ns"),
        node.log()
    );
    let add = node.invoke("ADD", next);
    assert!(ok(&add), "ADD after the restart: {add:?}{}", node.log());
    assert_claimed_up_after_add(node, 50, here);
}

/// The Southbound refuses every write (ovsdb-server in backup mode, following an active server
/// that does not exist) from before DEL until 1.5 s into the ADD that follows it.
fn refuse_writes_between(
    node: &CniNode,
    previous: &PodAttachment,
    next: &PodAttachment,
    here: &str,
) {
    assert_still_claimed_up(node, 150, here);
    let lab = &node.two.lab;
    let nowhere = format!("unix:{}", lab.dir().join("no-active.sock").display());
    sb_appctl(lab, &["ovsdb-server/set-active-ovsdb-server", &nowhere]);
    sb_appctl(lab, &["ovsdb-server/connect-active-ovsdb-server"]);
    let del = node.invoke("DEL", previous);
    assert!(ok(&del), "DEL with writes refused: {del:?}{}", node.log());
    let add = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(1500));
            sb_appctl(lab, &["ovsdb-server/disconnect-active-ovsdb-server"]);
        });
        node.invoke("ADD", next)
    });
    assert!(ok(&add), "ADD across refused writes: {add:?}{}", node.log());
    assert_claimed_up_after_add(node, 150, here);
}

#[test]
fn wait_hv_returns_once_a_new_switch_forwards_here() {
    let two = TwoNodes::start();
    let lab = &two.lab;
    let mac = mac_for("mover");
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-m", "m0", "10.100.0.0/24")
        .unwrap()
        .pod("m0", "mover", "ns", &mac, Ipv4Addr::new(10, 100, 0, 2));
    topology.apply(lab).unwrap();
    let pod = two.nodes[0]
        .add_pod(&PodSpec {
            name: "mover",
            host_interface: "mover_h",
            mac: Some(&mac),
            address: Some("10.100.0.2/24"),
            gateway: Some(Ipv4Addr::new(10, 100, 0, 1)),
            mtu: Some(1400),
        })
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    // Conditional monitoring (no --monitor-all): each new switch's rows come with a condition
    // change.
    let agent = AgentSpec {
        chassis: NODES[0],
        node: &two.nodes[0],
        local_ports: vec!["mover.ns=mover_h".into()],
        pin_root: None,
        cni_dir: None,
        extra_args: Vec::new(),
    }
    .spawn(
        lab,
        &workspace_binary("ovnbpf-agent"),
        work.path().join("node1.log"),
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || scenario::port_up(
            lab, "mover.ns"
        )),
        "mover never up{}",
        agent.log_tail()
    );
    for i in 1..=50_u8 {
        // The port moves to a new switch: the old one goes, the pod takes its new address.
        let (old_switch, new_switch) = (format!("m{}", i - 1), format!("m{i}"));
        let old_cidr = format!("10.100.{}.0/24", i - 1);
        let mut removal = Topology::new();
        removal
            .remove_subnet("vpc-m", &old_switch, &old_cidr)
            .unwrap();
        let mut args = removal.take_args();
        args.remove(0); // no --wait: the new subnet's transaction waits for the chassis
        lab.nbctl(&args).unwrap();
        let (address, gateway) = (Ipv4Addr::new(10, 100, i, 2), Ipv4Addr::new(10, 100, i, 1));
        let netns = pod.netns();
        netns.ip(&["addr", "flush", "dev", "eth0"]).unwrap();
        netns
            .ip(&["addr", "add", &format!("{address}/24"), "dev", "eth0"])
            .unwrap();
        netns
            .ip(&["route", "replace", "default", "via", &gateway.to_string()])
            .unwrap();
        topology
            .subnet("vpc-m", &new_switch, &format!("10.100.{i}.0/24"))
            .unwrap()
            .pod(&new_switch, "mover", "ns", &mac, address);
        let mut args = topology.take_args();
        args[0] = "--wait=hv".into();
        lab.nbctl(&args).unwrap();
        // Once --wait=hv returned: one ARP and one echo, no retransmission (1 s deadline).
        let replies = netns
            .exec(
                "ping",
                &["-n", "-q", "-c", "1", "-W", "1", &gateway.to_string()],
            )
            .unwrap_or_default();
        assert!(
            replies.contains(" 1 received"),
            "round {i}: the gateway of the new switch did not answer right after --wait=hv: \
             {replies}{}",
            agent.log_tail()
        );
    }
}

#[test]
fn a_requested_chassis_moved_elsewhere_moves_the_claim_without_a_fight() {
    let two = TwoNodes::start();
    let lab = &two.lab;
    let mac = mac_for("vm");
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .pod("subnet-a", "vm", "ns", &mac, Ipv4Addr::new(10, 0, 1, 20));
    topology.apply(lab).unwrap();
    Topology::new()
        .requested_chassis("vm.ns", "node1")
        .apply(lab)
        .unwrap();
    // A live migration's shape: the VM's port exists on both nodes.
    let _pods: Vec<_> = two
        .nodes
        .iter()
        .map(|node| {
            node.add_pod(&PodSpec {
                name: "vm",
                host_interface: "vm_h",
                mac: Some(&mac),
                address: Some("10.0.1.20/24"),
                gateway: None,
                mtu: Some(1400),
            })
            .unwrap()
        })
        .collect();
    let work = tempfile::tempdir().unwrap();
    let agents: Vec<Child> = (0..2)
        .map(|index| {
            AgentSpec {
                chassis: NODES[index],
                node: &two.nodes[index],
                local_ports: vec!["vm.ns=vm_h".into()],
                pin_root: None,
                cni_dir: None,
                extra_args: vec!["--metrics-address".into(), METRICS.into()],
            }
            .spawn(
                lab,
                &workspace_binary("ovnbpf-agent"),
                work.path().join(format!("{}.log", NODES[index])),
            )
            .unwrap()
        })
        .collect();
    let logs = || scenario::log_tails(&agents);
    let chassis: Vec<String> = NODES
        .iter()
        .map(|name| {
            let mut uuid = String::new();
            assert!(
                wait_until(Duration::from_secs(20), || {
                    uuid = chassis_uuid(lab, name);
                    !uuid.is_empty()
                }),
                "{name} never registered{}",
                logs()
            );
            uuid
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(20), || claimed_up(
            lab,
            "vm.ns",
            &chassis[0]
        )),
        "vm not claimed by node1: {:?}{}",
        binding(lab, "vm.ns"),
        logs()
    );
    let claims = |index: usize| {
        metric(
            &scrape(&two.nodes[index]),
            r#"ovnbpf_southbound_writes_total{purpose="claim"}"#,
        )
    };
    assert_eq!(claims(1), 0, "node2 claimed a port requested by node1");

    Topology::new()
        .requested_chassis("vm.ns", "node2")
        .apply(lab)
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || claimed_up(
            lab,
            "vm.ns",
            &chassis[1]
        )),
        "vm not moved to node2: {:?}{}",
        binding(lab, "vm.ns"),
        logs()
    );
    // Settled: node1 released once and claims no more, node2 keeps it.
    let before = (claims(0), claims(1));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        (claims(0), claims(1)),
        before,
        "the agents still fight{}",
        logs()
    );
    assert_eq!(before.0, 1, "node1 claimed only before the move");
    assert!(
        claimed_up(lab, "vm.ns", &chassis[1]),
        "{:?}",
        binding(lab, "vm.ns")
    );
    let releases = metric(
        &scrape(&two.nodes[0]),
        r#"ovnbpf_southbound_writes_total{purpose="release"}"#,
    );
    // Once, or never when node1 saw the new requested_chassis and node2's claim in one update
    // (ovsdb-server merges the changes of a client that reads slowly).
    assert!(releases <= 1, "node1 released the port {releases} times");
}
