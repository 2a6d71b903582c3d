//! The `ovnbpf-cni` binary invoked exactly as a container runtime does (environment + netconf on
//! stdin, a fresh pod namespace) against agents serving CNI in the lab: ADD builds the NIC from
//! the Port_Binding and the switch's router port and returns only once the port is up; the pod
//! then reaches a pod on the other node. DEL removes the NIC, the attachment and the claim, also
//! after an agent restart in between. Bad input gets the spec's error codes and leaks nothing.

mod common;

use std::{net::Ipv4Addr, path::Path, process::Output, time::Duration};

use ovnbpf_tests::{
    agent::AgentSpec,
    bpffs::BpfMount,
    kubeovn::{Topology, mac_for},
    names::unique_prefix,
    netns::Netns,
    network::{Node, Underlay},
    ovn::OvnLab,
    process::{Child, wait_until},
    require_root, workspace_binary,
};
use serde_json::Value;

const A1: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
const A2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);

/// One runtime-style invocation of the plugin.
struct Invocation<'a> {
    command: &'a str,
    container_id: &'a str,
    netns: &'a str,
    args: &'a str,
    config: String,
}

fn config(socket: &Path, version: &str) -> String {
    format!(
        r#"{{"cniVersion":"{version}","name":"ovn","type":"ovnbpf","server_socket":"{}"}}"#,
        socket.display()
    )
}

/// Runs the plugin in `node`'s namespace (where a kubelet would) and returns its output.
fn invoke(node: &Node, invocation: &Invocation<'_>) -> Output {
    use std::io::Write;
    let mut child = node
        .netns()
        .command(&workspace_binary("ovnbpf-cni").to_string_lossy())
        .env("CNI_COMMAND", invocation.command)
        .env("CNI_CONTAINERID", invocation.container_id)
        .env("CNI_NETNS", invocation.netns)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_ARGS", invocation.args)
        .env("CNI_PATH", "/opt/cni/bin")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(invocation.config.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
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
    lab.sbctl(&[
        "--bare",
        "--columns=chassis",
        "find",
        "Port_Binding",
        &format!("logical_port={port}"),
    ])
    .unwrap()
    .trim()
    .to_string()
}

#[test]
fn the_plugin_attaches_and_detaches_pods_through_the_agent() {
    require_root();
    let lab = OvnLab::start().unwrap();
    let prefix = unique_prefix();
    let mut underlay = Underlay::create(&prefix).unwrap();
    let nodes = [
        underlay.add_node("node1").unwrap(),
        underlay.add_node("node2").unwrap(),
    ];
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap();
    for (name, ip) in [("a1", A1), ("a2", A2)] {
        topology.pod("subnet-a", name, "ns", &mac_for(name), ip);
    }
    topology.apply(&lab).unwrap();

    let work = tempfile::tempdir().unwrap();
    let bpffs = BpfMount::create().unwrap();
    let start = |index: usize| -> Child {
        let chassis = common::NODES[index];
        AgentSpec {
            chassis,
            node: &nodes[index],
            local_ports: Vec::new(),
            pin_root: Some(bpffs.path().join(chassis)),
            cni_dir: Some(work.path().join(chassis)),
        }
        .spawn(
            &lab,
            &workspace_binary("ovnbpf-agent"),
            work.path().join(format!("{chassis}.log")),
        )
        .unwrap()
    };
    let mut agents = vec![start(0), start(1)];
    let socket = |index: usize| work.path().join(common::NODES[index]).join("cni.sock");
    assert!(
        wait_until(Duration::from_secs(10), || socket(0).exists()
            && socket(1).exists()),
        "no CNI socket{}",
        common::log_tails(&agents)
    );
    let pod_netns = [
        Netns::create(&format!("{prefix}-pa1")).unwrap(),
        Netns::create(&format!("{prefix}-pa2")).unwrap(),
    ];
    let netns_path = |index: usize| pod_netns[index].path().display().to_string();

    // STATUS: ready once the agent synced.
    let status = || {
        invoke(
            &nodes[0],
            &Invocation {
                command: "STATUS",
                container_id: "",
                netns: "",
                args: "",
                config: config(&socket(0), "1.1.0"),
            },
        )
    };
    assert!(
        wait_until(Duration::from_secs(10), || status().status.success()),
        "STATUS never ready: {:?}",
        status()
    );

    // ADD both pods, as a runtime would (0.3.1 like Kube-OVN's conflist, and 1.1.0).
    let mut results = Vec::new();
    for (index, (pod, version)) in [("a1", "0.3.1"), ("a2", "1.1.0")].iter().enumerate() {
        let output = invoke(
            &nodes[index],
            &Invocation {
                command: "ADD",
                container_id: &format!("c0ffee{index}0123456789"),
                netns: &netns_path(index),
                args: &pod_args(pod),
                config: config(&socket(index), version),
            },
        );
        assert!(
            output.status.success(),
            "ADD {pod}: {output:?}{}",
            common::log_tails(&agents)
        );
        results.push(stdout_json(&output));
        // Only then: the Port_Binding is bound and up.
        assert!(
            common::port_up(&lab, &format!("{pod}.ns")),
            "{pod} not up after ADD"
        );
    }
    let a1_result = &results[0];
    assert_eq!(a1_result["cniVersion"], "0.3.1");
    assert_eq!(a1_result["ips"][0]["address"], "10.0.1.2/24");
    assert_eq!(a1_result["ips"][0]["gateway"], "10.0.1.1");
    assert_eq!(a1_result["ips"][0]["version"], "4");
    assert_eq!(a1_result["interfaces"][0]["mac"], mac_for("a1"));
    assert_eq!(results[1]["interfaces"][0]["mtu"], 1400);
    assert!(host_interfaces(&nodes[0]).contains("c0ffee001234_h"));
    let inside = pod_netns[0]
        .ip(&["-o", "addr", "show", "dev", "eth0"])
        .unwrap();
    assert!(inside.contains("10.0.1.2/24"), "{inside}");
    let route = pod_netns[0].ip(&["route", "show", "default"]).unwrap();
    assert!(route.contains("via 10.0.1.1"), "{route}");

    // The pods reach each other across nodes.
    let ping = |from: &Netns, to: Ipv4Addr| {
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
    };
    assert!(
        ping(&pod_netns[0], A2),
        "a1 → a2{}",
        common::log_tails(&agents)
    );
    assert!(ping(&pod_netns[1], A1), "a2 → a1");

    // CHECK with the ADD result as prevResult.
    let check_config = {
        let mut conf: Value = serde_json::from_str(&config(&socket(1), "1.1.0")).unwrap();
        conf["prevResult"] = results[1].clone();
        conf.to_string()
    };
    let check = invoke(
        &nodes[1],
        &Invocation {
            command: "CHECK",
            container_id: "c0ffee10123456789",
            netns: &netns_path(1),
            args: &pod_args("a2"),
            config: check_config,
        },
    );
    assert!(check.status.success(), "CHECK: {check:?}");

    // The agent on node1 restarts (SIGKILL) between ADD and DEL: it keeps forwarding for a1.
    agents[0].kill();
    agents[0] = start(0);
    assert!(
        wait_until(Duration::from_secs(10), || status().status.success()),
        "STATUS after the restart"
    );
    assert!(
        ping(&pod_netns[0], A2),
        "a1 → a2 after the agent restart{}",
        common::log_tails(&agents)
    );

    // DEL a1: NIC, record and claim gone; DEL again is fine.
    for round in 0..2 {
        let output = invoke(
            &nodes[0],
            &Invocation {
                command: "DEL",
                container_id: "c0ffee00123456789",
                netns: &netns_path(0),
                args: &pod_args("a1"),
                config: config(&socket(0), "0.3.1"),
            },
        );
        assert!(output.status.success(), "DEL round {round}: {output:?}");
        assert!(output.stdout.is_empty(), "DEL prints nothing: {output:?}");
    }
    assert!(!host_interfaces(&nodes[0]).contains("c0ffee001234_h"));
    assert!(
        pod_netns[0]
            .ip(&["-o", "link", "show", "dev", "eth0"])
            .is_err()
    );
    assert!(
        wait_until(Duration::from_secs(5), || chassis_of(&lab, "a1.ns")
            .is_empty()),
        "a1.ns still claimed"
    );
    let records = std::fs::read_dir(work.path().join("node1/state/attachments"))
        .unwrap()
        .count();
    assert_eq!(records, 0, "the attachment record is gone");
    assert!(!ping(&pod_netns[1], A1), "a1 still reachable after DEL");

    // Bad input: the spec's codes, nothing leaked.
    let before = host_interfaces(&nodes[0]);
    let code = |output: &Output| {
        assert!(!output.status.success(), "{output:?}");
        stdout_json(output)["code"].as_u64().unwrap()
    };
    let bad = |command, container_id, netns: &str, args: &str, config: String| {
        invoke(
            &nodes[0],
            &Invocation {
                command,
                container_id,
                netns,
                args,
                config,
            },
        )
    };
    let good = config(&socket(0), "1.0.0");
    assert_eq!(
        code(&bad(
            "ADD",
            "c1",
            &netns_path(0),
            &pod_args("a1"),
            "{".into()
        )),
        6
    );
    assert_eq!(
        code(&bad(
            "ADD",
            "c1",
            &netns_path(0),
            "IgnoreUnknown=1",
            good.clone()
        )),
        4
    );
    assert_eq!(
        code(&bad(
            "ADD",
            "",
            &netns_path(0),
            &pod_args("a1"),
            good.clone()
        )),
        4
    );
    let missing_agent = config(&work.path().join("nowhere.sock"), "1.0.0");
    assert_eq!(
        code(&bad(
            "ADD",
            "c1",
            &netns_path(0),
            &pod_args("a1"),
            missing_agent
        )),
        11
    );
    let unknown_netns = bad(
        "ADD",
        "c1",
        "/run/netns/does-not-exist",
        &pod_args("a1"),
        good.clone(),
    );
    assert_eq!(code(&unknown_netns), 11);
    assert!(
        stdout_json(&unknown_netns)["details"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{unknown_netns:?}"
    );
    let no_binding = bad(
        "ADD",
        "c2",
        &netns_path(0),
        &pod_args("ghost"),
        good.clone(),
    );
    assert_eq!(code(&no_binding), 11);
    assert_eq!(host_interfaces(&nodes[0]), before, "no veth leaked");
    assert!(
        wait_until(Duration::from_secs(5), || chassis_of(&lab, "a1.ns")
            .is_empty()),
        "the failed ADDs left a1.ns claimed"
    );
    let del_without_add = bad("DEL", "never-added", "", &pod_args("nobody"), good);
    assert!(del_without_add.status.success(), "{del_without_add:?}");
    drop(agents);
}
