//! The `ovnbpf-cni` binary invoked exactly as a container runtime does (environment + netconf on
//! stdin, a fresh pod namespace) against agents serving CNI in the lab: ADD builds the NIC from
//! the Port_Binding and the switch's router port and returns only once the port is up; the pod
//! then reaches its gateway and a pod on the other node. DEL removes the NIC, the attachment and the claim, also
//! after an agent restart in between. Bad input gets the spec's error codes and leaks nothing.
//! node1's agent runs the socket-level balancer: it knows a1's namespace from its ADD, and
//! after a restart from its record, so a1's connects to a Service VIP go to the backend.

use ovnbpf_tests::scenario;
use ovnbpf_tests::scenario::CniNodes;

use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::Output,
    time::{Duration, Instant},
};

use ovnbpf_tests::{
    bpffs::BpfMount,
    cgroup::Cgroup2Mount,
    cni_runtime::{PodAttachment, Runtime, plugin_dir},
    kubeovn::{Topology, mac_for},
    names::unique_prefix,
    netns::Netns,
    network::Node,
    ovn::{Db, OvnLab},
    process::wait_until,
    workspace_binary,
};
use serde_json::{Value, json};

const A1: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
/// Where each node's agent serves its metrics, inside the node's namespace.
const METRICS: &str = "127.0.0.1:10665";
const A2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);

fn config(socket: &Path, version: &str) -> Value {
    json!({"cniVersion": version, "name": "ovn", "type": "ovnbpf", "server_socket": socket})
}

/// `GET /metrics` of the agent of `node`.
fn scrape(node: &Node) -> String {
    get(node, "/metrics")
}

/// The whole HTTP response to `GET path` from the metrics port of the agent of `node`.
fn get(node: &Node, path: &str) -> String {
    use std::io::{Read, Write};
    ovnbpf_tests::netns::run_in_path(&node.netns().path(), || {
        let mut stream = std::net::TcpStream::connect(METRICS)?;
        write!(stream, "GET {path} HTTP/1.1\r\nHost: agent\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    })
    .unwrap()
}

/// The status line of `GET path` on the agent of `node`.
fn status_of(node: &Node, path: &str) -> String {
    get(node, path)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("plugin printed no JSON ({e}): {output:?}"))
}

fn pod_args(pod: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME={pod}")
}

fn host_interfaces(node: &Node) -> String {
    node.netns().ip(&["-o", "link", "show"]).unwrap()
}

fn chassis_of(lab: &OvnLab, port: &str) -> String {
    scenario::port_chassis(lab, port).unwrap()
}

fn ping(from: &Netns, to: Ipv4Addr) -> bool {
    from.exec(
        "ping",
        &[
            "-n",
            "-q",
            "-c",
            "3",
            "-i",
            "0.1",
            "-W",
            "1",
            &to.to_string(),
        ],
    )
    .is_ok_and(|text| text.contains(" 3 received"))
}

/// A real OVN central, `pods` in subnet-a (10.0.1.0/24, vpc-a) in the NB only, two nodes with
/// an agent each serving CNI, and the plugin installed as type `ovnbpf`.
struct CniLab {
    /// Dropped first: the agents stop before their pins go.
    cni: CniNodes,
    bpffs: BpfMount,
    /// node1's socket-level balancer's cgroup (the root).
    _cgroup: Cgroup2Mount,
    plugins: PathBuf,
}

impl std::ops::Deref for CniLab {
    type Target = CniNodes;
    fn deref(&self) -> &CniNodes {
        &self.cni
    }
}

impl std::ops::DerefMut for CniLab {
    fn deref_mut(&mut self) -> &mut CniNodes {
        &mut self.cni
    }
}

impl CniLab {
    fn start(pods: &[(String, Ipv4Addr)]) -> Self {
        let pods: Vec<(&str, Ipv4Addr)> = pods.iter().map(|(n, ip)| (n.as_str(), *ip)).collect();
        let bpffs = BpfMount::create().unwrap();
        let cgroup = Cgroup2Mount::create().unwrap();
        // Each node is its own namespace: the same port on both. node1's agent re-attaches a
        // removed filter within a second; node2's never does, so that CHECK's report of it can
        // be seen.
        let extra_args = [0, 1].map(|index: usize| {
            let mut args = vec![
                "--metrics-address".to_string(),
                METRICS.into(),
                "--filter-check-interval-s".into(),
                if index == 0 { "1" } else { "0" }.into(),
            ];
            if index == 0 {
                args.extend([
                    "--socket-lb".into(),
                    "--socket-lb-cgroup".into(),
                    cgroup.path().display().to_string(),
                ]);
            }
            args
        });
        let cni = CniNodes::start(&pods, Some(bpffs.path()), extra_args);
        let plugins = plugin_dir(
            &cni.work.path().join("bin"),
            "ovnbpf",
            &workspace_binary("ovnbpf-cni"),
        )
        .unwrap();
        Self {
            cni,
            bpffs,
            _cgroup: cgroup,
            plugins,
        }
    }

    fn runtime(&self, index: usize) -> Runtime<'_> {
        Runtime::new(
            self.nodes[index].netns(),
            vec![self.plugins.clone(), PathBuf::from("/usr/lib/cni")],
        )
    }

    /// Runs the plugin alone, as a runtime would, on node `index`.
    fn invoke(
        &self,
        index: usize,
        command: &str,
        attachment: &PodAttachment,
        config: &Value,
    ) -> Output {
        self.runtime(index)
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
        self.invoke(
            index,
            "STATUS",
            &attachment,
            &config(&self.socket(index), "1.1.0"),
        )
        .status
        .success()
    }
}

fn attachment(container_id: &str, netns: &Netns, pod: &str) -> PodAttachment {
    PodAttachment {
        container_id: container_id.to_string(),
        netns: netns.path().display().to_string(),
        if_name: "eth0".into(),
        args: pod_args(pod),
    }
}

#[test]
fn the_plugin_attaches_and_detaches_pods_through_the_agent() {
    let pods = [("a1".to_string(), A1), ("a2".to_string(), A2)];
    let mut lab = CniLab::start(&pods);
    let prefix = unique_prefix();
    let pod_netns = [
        Netns::create(&format!("{prefix}-pa1")).unwrap(),
        Netns::create(&format!("{prefix}-pa2")).unwrap(),
    ];
    let attachments = [
        attachment("c0ffee00123456789", &pod_netns[0], "a1"),
        attachment("c0ffee10123456789", &pod_netns[1], "a2"),
    ];

    status_becomes_ready(&lab);
    let results = add_both_pods(&lab, &pod_netns, &attachments, &pods);
    pods_reach_their_gateway_and_each_other(&lab, &pod_netns);
    let _server = a1_reaches_a_service_balanced_at_the_socket(&lab, &pod_netns);
    let check_config = check_uses_the_add_result(&lab, &pod_netns, &attachments, &results);
    a_restarted_agent_keeps_forwarding(&mut lab, &pod_netns);
    a1_connects_to_the_service_at_the_socket(&lab, &pod_netns[0]);
    del_removes_the_nic_the_record_and_the_claim(&lab, &pod_netns, &attachments);
    bad_input_gets_the_spec_codes_and_leaks_nothing(&lab, &pod_netns);
    garbage_on_the_socket_is_answered(&lab);
    the_metrics_count_what_happened(&lab);
    check_notices_a_removed_filter(&lab, &attachments, &check_config);
    an_unprogrammed_pod_stays_out_of_its_node(&lab, &pod_netns);
    an_unenforced_acl_is_reported(&lab);
    a_southbound_outage_is_reported(&mut lab);
}

/// A ClusterIP of vpc-a balanced to a2.
const SERVICE: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);

/// node1's count of connects the socket-level balancer sent to a backend.
fn socket_connects(node: &Node) -> u64 {
    let metrics = scrape(node);
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(r#"ovnbpf_socket_lb_total{kind="connect"} "#))
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no socket connect count in\n{metrics}"))
}

/// A Service balanced to a2 (a listener there): a1's connect to it goes to a2 at connect(),
/// its peer shown as the VIP. Returns the listener.
fn a1_reaches_a_service_balanced_at_the_socket(
    lab: &CniLab,
    pod_netns: &[Netns; 2],
) -> std::net::TcpListener {
    let listener = pod_netns[1]
        .run_in(|| Ok(std::net::TcpListener::bind(("0.0.0.0", 8080))?))
        .unwrap();
    let mut topology = Topology::new();
    topology.service(
        "vpc-a",
        &["subnet-a"],
        "tcp",
        &format!("{SERVICE}:80"),
        &format!("{A2}:8080"),
    );
    topology.apply(&lab.lab).unwrap();
    let connects = |netns: &Netns| {
        netns
            .run_in(|| {
                Ok(std::net::TcpStream::connect_timeout(
                    &(SERVICE, 80).into(),
                    Duration::from_millis(500),
                )?)
            })
            .is_ok()
    };
    assert!(
        wait_until(Duration::from_secs(10), || connects(&pod_netns[0])),
        "a1 never reached the Service{}",
        lab.logs()
    );
    a1_connects_to_the_service_at_the_socket(lab, &pod_netns[0]);
    listener
}

/// One connect of a1 to the Service: balanced at the socket (counted), its peer the VIP.
fn a1_connects_to_the_service_at_the_socket(lab: &CniLab, a1: &Netns) {
    let before = socket_connects(&lab.nodes[0]);
    let peer = a1
        .run_in(|| {
            let stream = std::net::TcpStream::connect_timeout(
                &(SERVICE, 80).into(),
                Duration::from_secs(2),
            )?;
            Ok(stream.peer_addr()?)
        })
        .unwrap();
    assert_eq!(peer, (SERVICE, 80).into());
    assert_eq!(
        socket_connects(&lab.nodes[0]),
        before + 1,
        "a1's connect was not balanced at the socket{}",
        lab.logs()
    );
}

/// The host end of a2's veth (from its container ID).
const A2_HOST: &str = "c0ffee101234_h";

fn status_becomes_ready(lab: &CniLab) {
    // STATUS: ready once the agent synced.
    assert!(
        wait_until(Duration::from_secs(10), || lab.ready(0) && lab.ready(1)),
        "STATUS never ready{}",
        lab.logs()
    );
}

fn add_both_pods(
    lab: &CniLab,
    pod_netns: &[Netns; 2],
    attachments: &[PodAttachment; 2],
    pods: &[(String, Ipv4Addr)],
) -> Vec<Value> {
    // ADD both pods, as a runtime would (0.3.1 like Kube-OVN's conflist, and 1.1.0).
    let mut results = Vec::new();
    let arp_log = lab.work.path().join("a1-arp.txt");
    let mut arp_capture = None;
    for (index, version) in ["0.3.1", "1.1.0"].iter().enumerate() {
        if index == 1 {
            // a1 hears a2's gratuitous ARP, sent through the datapath once a2 forwards.
            arp_capture = Some(
                pod_netns[0]
                    .spawn(
                        "tcpdump",
                        "tcpdump",
                        &["-i", "eth0", "-nn", "-l", "arp"],
                        Some(arp_log.clone()),
                    )
                    .unwrap(),
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        let mut conf = config(&lab.socket(index), version);
        if index == 1 {
            // The network configuration's routes come after the default route.
            conf["routes"] = json!([{"dst": "192.168.50.0/24", "gw": "10.0.1.254"}]);
        }
        let output = lab.invoke(index, "ADD", &attachments[index], &conf);
        let pod = &pods[index].0;
        assert!(
            output.status.success(),
            "ADD {pod}: {output:?}{}",
            lab.logs()
        );
        results.push(stdout_json(&output));
        // Only then: the Port_Binding is bound and up.
        assert!(
            scenario::port_up(&lab.lab, &format!("{pod}.ns")),
            "{pod} not up after ADD"
        );
    }
    let announced = wait_until(Duration::from_secs(3), || {
        std::fs::read_to_string(&arp_log).is_ok_and(|text| {
            text.lines()
                .any(|line| line.contains("who-has 10.0.1.3") && line.contains("tell 10.0.1.3"))
        })
    });
    drop(arp_capture);
    assert!(
        announced,
        "no gratuitous ARP from a2: {}{}",
        std::fs::read_to_string(&arp_log).unwrap_or_default(),
        lab.logs()
    );
    let a1_result = &results[0];
    assert_eq!(a1_result["cniVersion"], "0.3.1");
    assert_eq!(a1_result["ips"][0]["address"], "10.0.1.2/24");
    assert_eq!(a1_result["ips"][0]["gateway"], "10.0.1.1");
    assert_eq!(a1_result["ips"][0]["version"], "4");
    // The host end of the veth first, then the pod's interface, which the address names.
    assert_eq!(a1_result["interfaces"][0]["name"], "c0ffee001234_h");
    assert_eq!(a1_result["interfaces"][1]["mac"], mac_for("a1"));
    assert_eq!(a1_result["ips"][0]["interface"], 1);
    assert_eq!(results[1]["interfaces"][1]["mtu"], 1400);
    assert_eq!(
        results[1]["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.0.1.1"}, {"dst": "192.168.50.0/24", "gw": "10.0.1.254"}])
    );
    let extra = pod_netns[1]
        .ip(&["route", "show", "192.168.50.0/24"])
        .unwrap();
    assert!(extra.contains("via 10.0.1.254 dev eth0"), "{extra}");
    assert!(host_interfaces(&lab.nodes[0]).contains("c0ffee001234_h"));
    let inside = pod_netns[0]
        .ip(&["-o", "addr", "show", "dev", "eth0"])
        .unwrap();
    assert!(inside.contains("10.0.1.2/24"), "{inside}");
    let route = pod_netns[0].ip(&["route", "show", "default"]).unwrap();
    assert!(route.contains("via 10.0.1.1"), "{route}");
    results
}

fn pods_reach_their_gateway_and_each_other(lab: &CniLab, pod_netns: &[Netns; 2]) {
    // The pods reach their gateway (the router port, answered by the kernel) and each other
    // across nodes.
    let gateway = Ipv4Addr::new(10, 0, 1, 1);
    assert!(
        ping(&pod_netns[0], gateway),
        "a1 → its gateway{}",
        lab.logs()
    );
    assert!(ping(&pod_netns[1], gateway), "a2 → its gateway");
    assert!(ping(&pod_netns[0], A2), "a1 → a2{}", lab.logs());
    assert!(ping(&pod_netns[1], A1), "a2 → a1");
}

/// Returns the CHECK configuration (the ADD result as prevResult).
fn check_uses_the_add_result(
    lab: &CniLab,
    pod_netns: &[Netns; 2],
    attachments: &[PodAttachment; 2],
    results: &[Value],
) -> Value {
    // CHECK with the ADD result as prevResult.
    let mut check_config = config(&lab.socket(1), "1.1.0");
    check_config["routes"] = json!([{"dst": "192.168.50.0/24", "gw": "10.0.1.254"}]);
    check_config["prevResult"] = results[1].clone();
    let check = lab.invoke(1, "CHECK", &attachments[1], &check_config);
    assert!(check.status.success(), "CHECK: {check:?}");
    // CHECK finds a configured route that is gone.
    pod_netns[1]
        .ip(&["route", "del", "192.168.50.0/24"])
        .unwrap();
    let check = lab.invoke(1, "CHECK", &attachments[1], &check_config);
    let details = stdout_json(&check)["details"].to_string();
    assert!(
        details.contains("no route to 192.168.50.0/24 via 10.0.1.254"),
        "{check:?}"
    );
    check_config
}

fn a_restarted_agent_keeps_forwarding(lab: &mut CniLab, pod_netns: &[Netns; 2]) {
    // The agent on node1 restarts (SIGKILL) between ADD and DEL: it keeps forwarding for a1.
    lab.agents[0].kill();
    let restarted = lab.start_agent(0);
    lab.agents[0] = restarted;
    assert!(
        wait_until(Duration::from_secs(10), || lab.ready(0)),
        "STATUS after the restart"
    );
    assert!(
        ping(&pod_netns[0], A2),
        "a1 → a2 after the agent restart{}",
        lab.logs()
    );
}

fn del_removes_the_nic_the_record_and_the_claim(
    lab: &CniLab,
    pod_netns: &[Netns; 2],
    attachments: &[PodAttachment; 2],
) {
    // DEL a1: NIC, record and claim gone; DEL again is fine.
    let del_config = config(&lab.socket(0), "0.3.1");
    for round in 0..2 {
        let output = lab.invoke(0, "DEL", &attachments[0], &del_config);
        assert!(output.status.success(), "DEL round {round}: {output:?}");
        assert!(output.stdout.is_empty(), "DEL prints nothing: {output:?}");
    }
    assert!(!host_interfaces(&lab.nodes[0]).contains("c0ffee001234_h"));
    assert!(
        pod_netns[0]
            .ip(&["-o", "link", "show", "dev", "eth0"])
            .is_err()
    );
    assert!(
        wait_until(Duration::from_secs(5), || chassis_of(&lab.lab, "a1.ns")
            .is_empty()),
        "a1.ns still claimed"
    );
    let records = std::fs::read_dir(lab.work.path().join("node1/state/attachments"))
        .unwrap()
        .count();
    assert_eq!(records, 0, "the attachment record is gone");
    assert!(!ping(&pod_netns[1], A1), "a1 still reachable after DEL");
}

fn bad_input_gets_the_spec_codes_and_leaks_nothing(lab: &CniLab, pod_netns: &[Netns; 2]) {
    // Bad input: the spec's codes, nothing leaked.
    let before = host_interfaces(&lab.nodes[0]);
    let code = |output: &Output| {
        assert!(!output.status.success(), "{output:?}");
        stdout_json(output)["code"].as_u64().unwrap()
    };
    let good = config(&lab.socket(0), "1.0.0");
    let a1 = attachment("c1", &pod_netns[0], "a1");
    let malformed = json!({"cniVersion": "1.0.0", "type": "ovnbpf", "server_socket": 5});
    assert_eq!(code(&lab.invoke(0, "ADD", &a1, &malformed)), 7);
    let no_args = PodAttachment {
        args: "IgnoreUnknown=1".into(),
        ..a1.clone()
    };
    assert_eq!(code(&lab.invoke(0, "ADD", &no_args, &good)), 4);
    let no_container = PodAttachment {
        container_id: String::new(),
        ..a1.clone()
    };
    assert_eq!(code(&lab.invoke(0, "ADD", &no_container, &good)), 4);
    let missing_agent = config(&lab.work.path().join("nowhere.sock"), "1.0.0");
    assert_eq!(code(&lab.invoke(0, "ADD", &a1, &missing_agent)), 11);
    let unknown_netns = PodAttachment {
        netns: "/run/netns/does-not-exist".into(),
        ..a1.clone()
    };
    let output = lab.invoke(0, "ADD", &unknown_netns, &good);
    assert_eq!(code(&output), 11);
    assert!(
        stdout_json(&output)["details"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{output:?}"
    );
    let ghost = attachment("c2", &pod_netns[0], "ghost");
    assert_eq!(code(&lab.invoke(0, "ADD", &ghost, &good)), 11);
    // A pod of an underlay subnet without a logical gateway: refused at once, with the reason.
    let mut underlay = Topology::new();
    underlay
        .plain_switch("subnet-u", "10.100.0.0/24")
        .unwrap()
        .localnet("subnet-u", "physnet1", 100)
        .pod(
            "subnet-u",
            "u1",
            "ns",
            &mac_for("u1"),
            Ipv4Addr::new(10, 100, 0, 2),
        );
    underlay.apply(&lab.lab).unwrap();
    let started = std::time::Instant::now();
    let output = lab.invoke(0, "ADD", &attachment("c3", &pod_netns[0], "u1"), &good);
    assert_eq!(code(&output), 100, "not servable: retrying does not help");
    let details = stdout_json(&output)["details"].to_string();
    assert!(details.contains("without a logical gateway"), "{output:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not refused at once"
    );
    // A configured route the kernel refuses (its gateway is not on-link): a configuration error,
    // not one to retry.
    let mut off_link = good.clone();
    off_link["routes"] = json!([{"dst": "192.168.60.0/24", "gw": "10.99.0.1"}]);
    let output = lab.invoke(0, "ADD", &a1, &off_link);
    assert_eq!(code(&output), 100, "{output:?}");
    let details = stdout_json(&output)["details"].to_string();
    assert!(
        details.contains("configured route 192.168.60.0/24"),
        "{output:?}"
    );
    assert_eq!(host_interfaces(&lab.nodes[0]), before, "no veth leaked");
    assert!(
        wait_until(Duration::from_secs(5), || chassis_of(&lab.lab, "a1.ns")
            .is_empty()),
        "the failed ADDs left a1.ns claimed"
    );
    let del_without_add = PodAttachment {
        netns: String::new(),
        ..attachment("never-added", &pod_netns[0], "nobody")
    };
    let output = lab.invoke(0, "DEL", &del_without_add, &good);
    assert!(output.status.success(), "{output:?}");
}

fn garbage_on_the_socket_is_answered(lab: &CniLab) {
    // Garbage on the socket is answered (400) and counted, and the agent serves on.
    use std::io::{Read, Write};
    let mut raw = std::os::unix::net::UnixStream::connect(lab.socket(0)).unwrap();
    raw.write_all(b"GARBAGE\r\n\r\n").unwrap();
    let mut answer = String::new();
    raw.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(lab.ready(0), "the agent still serves");
}

fn the_metrics_count_what_happened(lab: &CniLab) {
    // The metrics of node1's agent (restarted after a1's ADD): the DELs, the refused ADDs, the
    // garbage, the Southbound state and the datapath's drop counters.
    let metrics = scrape(&lab.nodes[0]);
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    for line in [
        r#"ovnbpf_cni_op_latency_seconds_count{op="del",code="204"} 3"#,
        // The refused underlay pod and the refused route.
        r#"ovnbpf_cni_op_latency_seconds_count{op="add",code="422"} 2"#,
        "ovnbpf_cni_bad_requests_total 1",
        "ovnbpf_daemon_up 1",
        "ovnbpf_southbound_synced 1",
        "ovnbpf_southbound_connected 1",
        "ovnbpf_ready 1",
        r#"ovnbpf_datapath_drops_total{reason="port_security"} 0"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} missing in\n{metrics}"
        );
    }
}

fn check_notices_a_removed_filter(
    lab: &CniLab,
    attachments: &[PodAttachment; 2],
    check_config: &Value,
) {
    // CHECK notices a2's veth without from_pod (someone removed the filter).
    let filters = |node: &Node| {
        node.netns()
            .exec("tc", &["filter", "show", "dev", A2_HOST, "ingress"])
            .unwrap()
    };
    assert!(filters(&lab.nodes[1]).contains("ovnbpf_from_pod"));
    lab.nodes[1]
        .netns()
        .exec(
            "tc",
            &[
                "filter", "del", "dev", A2_HOST, "ingress", "pref", "1", "handle", "1", "bpf",
            ],
        )
        .unwrap();
    assert!(!filters(&lab.nodes[1]).contains("ovnbpf_from_pod"));
    let check = lab.invoke(1, "CHECK", &attachments[1], check_config);
    assert!(!check.status.success(), "{check:?}");
    let details = stdout_json(&check)["details"].to_string();
    assert!(details.contains("from_pod is not attached"), "{check:?}");
}

fn an_unprogrammed_pod_stays_out_of_its_node(lab: &CniLab, pod_netns: &[Netns; 2]) {
    // a2's frames now reach node2's own stack, as a pod's do whose port is not programmed. The
    // host end keeps them out of the node's networking: no forwarding, no ARP answered, no IPv6
    // address for neighbour discovery to give away its MAC. A pod trying its node's address
    // gets no answer.
    let host_sysctl = |key: &str| {
        lab.nodes[1]
            .netns()
            .exec("cat", &[format!("/proc/sys/net/ipv4/conf/{A2_HOST}/{key}")])
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(host_sysctl("forwarding"), "0");
    assert_eq!(host_sysctl("arp_ignore"), "8");
    let inet6 = lab.nodes[1]
        .netns()
        .ip(&["-6", "addr", "show", "dev", A2_HOST])
        .unwrap();
    assert!(!inet6.contains("inet6"), "{inet6}");
    let node2_ip = lab.nodes[1].ip().to_string();
    pod_netns[1]
        .ip(&["route", "add", &format!("{node2_ip}/32"), "dev", "eth0"])
        .unwrap();
    assert!(
        !ping(&pod_netns[1], lab.nodes[1].ip()),
        "a2 reached its node"
    );
    let neighbour = pod_netns[1].ip(&["neigh", "show", &node2_ip]).unwrap();
    assert!(
        !neighbour.contains("lladdr"),
        "the node answered a2's ARP: {neighbour}"
    );
}

fn an_unenforced_acl_is_reported(lab: &CniLab) {
    // An ACL on a2's switch the datapath cannot translate (a match on the TTL): the switch fails
    // closed, and the agent says so (log and metrics) until the ACL is gone. One it translates
    // is enforced and not reported.
    let has_on = |node: usize, line: &str| scrape(&lab.nodes[node]).lines().any(|l| l == line);
    Topology::new()
        .acl("subnet-a", "to-lport", 1001, "ip4.src == 10.0.1.99", "drop")
        .apply(&lab.lab)
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        has_on(1, "ovnbpf_acl_unenforced_switches 0"),
        "{}",
        scrape(&lab.nodes[1])
    );
    Topology::new()
        .acl(
            "subnet-a",
            "to-lport",
            1000,
            "ip4.src == 10.0.1.99 && ip.ttl == 1",
            "drop",
        )
        .apply(&lab.lab)
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || has_on(
            1,
            "ovnbpf_acl_unenforced_switches 1"
        )),
        "{}",
        scrape(&lab.nodes[1])
    );
    let node2_log = std::fs::read_to_string(lab.work.path().join("node2.log")).unwrap();
    assert!(
        node2_log.contains("cannot translate")
            && node2_log.contains("fails closed")
            && node2_log.contains("subnet-a"),
        "{node2_log}"
    );
    lab.lab.nbctl(&["acl-del", "subnet-a"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || has_on(
            1,
            "ovnbpf_acl_unenforced_switches 0"
        )),
        "{}",
        scrape(&lab.nodes[1])
    );
}

fn a_southbound_outage_is_reported(lab: &mut CniLab) {
    // The Southbound goes away and comes back: the metrics and the readiness probe say so; the
    // agent stays alive (liveness does not depend on the Southbound).
    let node1 = &lab.cni.nodes[0];
    let ok = "HTTP/1.1 200 OK";
    for path in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(status_of(node1, path), ok, "{path}: {}", get(node1, path));
    }
    assert!(status_of(node1, "/nothing").starts_with("HTTP/1.1 404"));
    let has = |line: &str| scrape(node1).lines().any(|l| l == line);
    lab.cni.lab.stop_database(Db::Southbound);
    assert!(
        wait_until(Duration::from_secs(10), || has(
            "ovnbpf_southbound_connected 0"
        ) && has(
            "ovnbpf_southbound_disconnects_total 1"
        )),
        "{}",
        scrape(node1)
    );
    let not_ready = get(node1, "/readyz");
    assert!(
        not_ready.starts_with("HTTP/1.1 503 Service Unavailable")
            && not_ready.ends_with("not connected to the Southbound DB\n"),
        "{not_ready}"
    );
    assert_eq!(status_of(node1, "/livez"), ok, "{}", get(node1, "/livez"));
    lab.cni.lab.start_database(Db::Southbound).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || has(
            "ovnbpf_southbound_connected 1"
        )),
        "{}",
        scrape(node1)
    );
    assert!(
        wait_until(Duration::from_secs(10), || status_of(node1, "/readyz")
            == ok),
        "{}",
        get(node1, "/readyz")
    );
}

#[test]
fn chained_reference_plugins_accept_our_result_and_pods_attach_concurrently() {
    let pods: Vec<(String, Ipv4Addr)> = (0..10)
        .map(|i| (format!("p{i}"), Ipv4Addr::new(10, 0, 1, 10 + i)))
        .collect();
    let lab = CniLab::start(&pods);
    assert!(
        wait_until(Duration::from_secs(10), || lab.ready(0) && lab.ready(1)),
        "STATUS never ready{}",
        lab.logs()
    );
    let prefix = unique_prefix();
    let netns: Vec<Netns> = pods
        .iter()
        .map(|(name, _)| Netns::create(&format!("{prefix}-{name}")).unwrap())
        .collect();

    // The conflist deploy/ ships (its version, name, ovnbpf with only the socket changed, then
    // portmap), with more of Debian's reference plugins chained after it: containernetworking-
    // plugins 1.1 refuse configurations newer than 1.0.0, so this fails if the shipped version
    // is one they cannot read.
    let shipped: serde_json::Value =
        serde_json::from_str(include_str!("../../deploy/cni/01-ovnbpf.conflist")).unwrap();
    let conflist = |index: usize| {
        let mut list = shipped.clone();
        list["plugins"][0]["server_socket"] = json!(lab.socket(index));
        let plugins = list["plugins"].as_array_mut().unwrap();
        plugins.insert(
            1,
            json!({"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"}}),
        );
        // Shaping what enters the pod (a tbf on our host veth) needs no ifb device.
        plugins.push(json!({"type": "bandwidth", "ingressRate": 1_000_000_000_u64, "ingressBurst": 100_000_000_u64}));
        list
    };
    let chained = attachment("chain0123456789", &netns[0], "p0");
    let runtime = lab.runtime(0);
    let result = runtime
        .add(&conflist(0), &chained)
        .unwrap_or_else(|e| panic!("{e}{}", lab.logs()));
    assert_eq!(result["ips"][0]["address"], "10.0.1.10/24", "{result}");
    let sysctl = netns[0]
        .exec("sysctl", &["-n", "net.ipv4.conf.eth0.arp_notify"])
        .unwrap();
    assert_eq!(sysctl.trim(), "1", "tuning ran on our interface");
    runtime.check(&conflist(0), &chained, &result).unwrap();

    // The other nine pods ADDed at once, spread over both nodes.
    let started = Instant::now();
    let outcomes: Vec<(usize, Output)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..pods.len())
            .map(|i| {
                let lab = &lab;
                let netns = &netns[i];
                let name = &pods[i].0;
                scope.spawn(move || {
                    let node = i % 2;
                    let attachment = attachment(&format!("conc{i:02}0123456789"), netns, name);
                    (
                        i,
                        lab.invoke(
                            node,
                            "ADD",
                            &attachment,
                            &config(&lab.socket(node), "1.0.0"),
                        ),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, output) in &outcomes {
        assert!(
            output.status.success(),
            "ADD p{i}: {output:?}{}",
            lab.logs()
        );
    }
    eprintln!("9 concurrent ADDs took {:?}", started.elapsed());
    // Every pod reaches p0 (on node1), from either node.
    for (i, pod_netns) in netns.iter().enumerate().skip(1) {
        assert!(ping(pod_netns, pods[0].1), "p{i} → p0{}", lab.logs());
    }

    // Someone removes p0's filter: node1's agent attaches it again, and counts it.
    let p0_filter = || {
        lab.nodes[0]
            .netns()
            .exec(
                "tc",
                &["filter", "show", "dev", "chain0123456_h", "ingress"],
            )
            .unwrap()
            .contains("ovnbpf_from_pod")
    };
    assert!(p0_filter());
    lab.nodes[0]
        .netns()
        .exec("tc", &["qdisc", "del", "dev", "chain0123456_h", "clsact"])
        .unwrap();
    assert!(!p0_filter());
    assert!(
        wait_until(Duration::from_secs(5), p0_filter),
        "the filter was not restored{}",
        lab.logs()
    );
    assert!(ping(&netns[1], pods[0].1), "p1 → p0 after the restore");
    let metrics = scrape(&lab.nodes[0]);
    assert!(
        metrics
            .lines()
            .any(|line| line == "ovnbpf_pod_filters_restored_total 1"),
        "{metrics}"
    );
    // p0's traffic, counted per interface and port.
    for family in [
        "ovnbpf_interface_received_packets_total",
        "ovnbpf_interface_delivered_packets_total",
    ] {
        let prefix = format!(r#"{family}{{interface="chain0123456_h",port="p0.ns"}} "#);
        let count: u64 = metrics
            .lines()
            .find_map(|line| line.strip_prefix(&prefix)?.parse().ok())
            .unwrap_or_else(|| panic!("{prefix} missing in\n{metrics}"));
        assert!(count > 0, "{prefix}{count}");
    }

    // A duplicate ADD (same container and interface) rebuilds the NIC; the pod still works and
    // has one host veth.
    let p1 = attachment("conc010123456789", &netns[1], &pods[1].0);
    let again = lab.invoke(1, "ADD", &p1, &config(&lab.socket(1), "1.0.0"));
    assert!(again.status.success(), "duplicate ADD: {again:?}");
    assert_eq!(
        host_interfaces(&lab.nodes[1])
            .matches("conc01012345_h")
            .count(),
        1
    );
    assert!(ping(&netns[1], pods[0].1), "p1 after the duplicate ADD");

    // GC on node2 with p9 missing from the valid attachments: p9 goes, the others stay.
    let last = pods.len() - 1;
    let valid: Vec<Value> = (1..last)
        .filter(|i| i % 2 == 1)
        .map(|i| json!({"containerID": format!("conc{i:02}0123456789"), "ifname": "eth0"}))
        .collect();
    let mut gc_config = config(&lab.socket(1), "1.1.0");
    gc_config["cni.dev/valid-attachments"] = json!(valid);
    let gc = lab.invoke(1, "GC", &p1, &gc_config);
    assert!(gc.status.success(), "GC: {gc:?}");
    assert!(!host_interfaces(&lab.nodes[1]).contains(&format!("conc{last:02}012345_h")));
    assert!(
        wait_until(Duration::from_secs(5), || chassis_of(
            &lab.lab,
            &format!("p{last}.ns")
        )
        .is_empty()),
        "GC left p{last} claimed"
    );
    assert!(ping(&netns[1], pods[0].1), "p1 survived GC");

    // ADD and DEL of one pod at the same time, again and again: the agent serialises them, so
    // the pod always ends up wholly attached (veth, record, claim, traffic) or wholly detached.
    let p1_conf = config(&lab.socket(1), "1.0.0");
    let p1_recorded = || {
        std::fs::read_dir(lab.work.path().join("node2/state/attachments"))
            .unwrap()
            .flatten()
            .any(|entry| {
                entry
                    .file_name()
                    .to_string_lossy()
                    .contains("conc010123456789")
            })
    };
    let mut outcomes = [0, 0];
    for round in 0..6 {
        let (add, del) = std::thread::scope(|scope| {
            let add = scope.spawn(|| lab.invoke(1, "ADD", &p1, &p1_conf));
            let del = scope.spawn(|| lab.invoke(1, "DEL", &p1, &p1_conf));
            (add.join().unwrap(), del.join().unwrap())
        });
        assert!(add.status.success(), "round {round} ADD: {add:?}");
        assert!(del.status.success(), "round {round} DEL: {del:?}");
        let attached = host_interfaces(&lab.nodes[1]).contains("conc01012345_h");
        outcomes[usize::from(attached)] += 1;
        assert_eq!(p1_recorded(), attached, "round {round}: record vs veth");
        assert!(
            wait_until(Duration::from_secs(5), || chassis_of(&lab.lab, "p1.ns")
                .is_empty()
                != attached),
            "round {round}: claim vs veth (attached: {attached}){}",
            lab.logs()
        );
        if attached {
            assert!(
                ping(&netns[1], pods[0].1),
                "round {round}: p1 attached but cut off"
            );
        }
    }
    eprintln!(
        "concurrent ADD+DEL of p1: {} detached, {} attached",
        outcomes[0], outcomes[1]
    );
    // Attached again for what follows.
    let again = lab.invoke(1, "ADD", &p1, &p1_conf);
    assert!(again.status.success(), "{again:?}");
    assert!(ping(&netns[1], pods[0].1), "p1 after the races");

    // DEL through the chain in reverse order, then the rest concurrently.
    runtime.del(&conflist(0), &chained, Some(&result)).unwrap();
    std::thread::scope(|scope| {
        for i in 1..pods.len() {
            let lab = &lab;
            let netns = &netns[i];
            let name = &pods[i].0;
            scope.spawn(move || {
                let node = i % 2;
                let attachment = attachment(&format!("conc{i:02}0123456789"), netns, name);
                let output = lab.invoke(
                    node,
                    "DEL",
                    &attachment,
                    &config(&lab.socket(node), "1.0.0"),
                );
                assert!(output.status.success(), "DEL p{i}: {output:?}");
            });
        }
    });
    for (index, node) in lab.nodes.iter().enumerate() {
        let links = host_interfaces(node);
        assert!(
            !links.contains("_h"),
            "node {index} kept pod veths: {links}"
        );
    }
    // No map entry is left behind for a deleted pod.
    for chassis in scenario::NODES {
        let pod_ports = lab.bpffs.path().join(format!(
            "{chassis}/v{}/maps/POD_PORTS",
            ovnbpf_common::LAYOUT_VERSION
        ));
        let dump = std::process::Command::new("bpftool")
            .args(["map", "dump", "pinned"])
            .arg(&pod_ports)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&dump.stdout);
        assert!(
            text.contains("Found 0 elements"),
            "{chassis} POD_PORTS: {text}"
        );
    }
    for (name, _) in &pods {
        assert!(
            wait_until(Duration::from_secs(5), || chassis_of(
                &lab.lab,
                &format!("{name}.ns")
            )
            .is_empty()),
            "{name}.ns still claimed"
        );
    }
}
