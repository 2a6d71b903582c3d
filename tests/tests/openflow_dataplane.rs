//! The agent with `--dataplane openflow` (issue 19, its first end-to-end part): node1's agent
//! programs a real Open vSwitch's br-int (userspace datapath, in node1's namespace) instead
//! of eBPF. Two pods of subnet-a are added through the CNI plugin as a runtime adds them: the
//! agent adds their host interfaces to br-int, claims their ports, and they come up only once
//! their flows are in; the pods then reach each other (the ARP broadcast through the flood,
//! the rest through the L2 lookup), through flows of the agent's cookie only; the metrics name
//! the datapath (`ovnbpf_dataplane{dataplane="openflow"}`; node2's agent, left to choose with
//! `--dataplane auto`, runs eBPF, which loads here). A pod deleted is taken out of
//! br-int and no longer reached. (Tunnels and routers are not programmed yet:
//! the pods are on one node of one switch.)

use std::{net::Ipv4Addr, path::PathBuf, time::Duration};

use ovnbpf_tests::{
    cni_runtime::{PodAttachment, Runtime, plugin_dir},
    netns::Netns,
    ovs_chassis::OvsSwitch,
    process::wait_until,
    require_root,
    scenario::{self, CniNodes},
    workspace_binary,
};
use serde_json::json;

/// Where node1's agent serves its metrics, inside the node's namespace.
const METRICS: &str = "127.0.0.1:10665";
const A1: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
const A2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);

fn attachment(container_id: &str, netns: &Netns, pod: &str) -> PodAttachment {
    PodAttachment {
        container_id: container_id.to_string(),
        netns: netns.path().display().to_string(),
        if_name: "eth0".into(),
        args: format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME={pod}"),
    }
}

fn pings(from: &Netns, to: Ipv4Addr) -> bool {
    from.exec(
        "ping",
        &["-c", "3", "-i", "0.2", "-W", "1", &to.to_string()],
    )
    .is_ok_and(|text| text.contains(" 3 received"))
}

#[test]
fn pods_of_an_openflow_node_reach_each_other_through_br_int() {
    require_root();
    let state = OvsSwitch::state_dir().unwrap();
    let socket = state.path().join("br-int.mgmt");
    let db = format!("unix:{}", state.path().join("db.sock").display());
    let openflow = vec![
        "--dataplane".to_string(),
        "openflow".into(),
        "--ovs-bridge-socket".into(),
        socket.display().to_string(),
        "--ovs-db".into(),
        db,
        "--metrics-address".into(),
        METRICS.into(),
    ];
    // node2's agent is left to choose (`auto`): eBPF loads here, so eBPF it is.
    let auto = ["--dataplane", "auto", "--metrics-address", METRICS].map(String::from);
    let cni = CniNodes::start(&[("a1", A1), ("a2", A2)], None, [openflow, auto.to_vec()]);
    let logs = || cni.logs();
    let switch = OvsSwitch::start_in(cni.nodes[0].netns(), state).unwrap();
    let plugins = plugin_dir(
        &cni.work.path().join("bin"),
        "ovnbpf",
        &workspace_binary("ovnbpf-cni"),
    )
    .unwrap();
    let runtime = Runtime::new(
        cni.nodes[0].netns(),
        vec![plugins, PathBuf::from("/usr/lib/cni")],
    );
    let config = json!({
        "cniVersion": "1.0.0",
        "name": "ovn",
        "type": "ovnbpf",
        "server_socket": cni.socket(0),
    });
    let pods = [
        Netns::create(&format!("{}-pa1", cni.prefix)).unwrap(),
        Netns::create(&format!("{}-pa2", cni.prefix)).unwrap(),
    ];
    let attachments = [
        attachment("0f0f00000001", &pods[0], "a1"),
        attachment("0f0f00000002", &pods[1], "a2"),
    ];
    for (index, pod) in ["a1", "a2"].iter().enumerate() {
        let output = runtime.exec("ADD", &attachments[index], &config).unwrap();
        assert!(
            output.status.success(),
            "ADD {pod}: {output:?}{}{}",
            logs(),
            switch.log_tails()
        );
        assert!(
            scenario::port_up(&cni.lab, &format!("{pod}.ns")),
            "{pod} not up after ADD"
        );
    }
    let ports = switch.vsctl(&["list-ports", "br-int"]).unwrap();
    assert_eq!(ports.lines().count(), 2, "{ports}");
    assert!(
        wait_until(Duration::from_secs(5), || pings(&pods[0], A2)),
        "a1 → a2 through br-int\n{}{}",
        switch.ofctl(&["dump-flows", "br-int"]).unwrap_or_default(),
        logs()
    );
    assert!(pings(&pods[1], A1), "a2 → a1");
    let flows = switch.ofctl(&["dump-flows", "br-int"]).unwrap();
    assert!(
        flows
            .lines()
            .skip(1)
            .all(|line| line.contains("cookie=0xb0f0001")),
        "a flow not of the agent's cookie: {flows}"
    );
    // Each agent says which datapath it runs.
    for (node, dataplane) in [(0, "openflow"), (1, "ebpf")] {
        let metrics = ovnbpf_tests::netns::run_in_path(&cni.nodes[node].netns().path(), || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(METRICS)?;
            write!(stream, "GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")?;
            let mut text = String::new();
            stream.read_to_string(&mut text)?;
            Ok(text)
        })
        .unwrap();
        let expected = format!(r#"ovnbpf_dataplane{{dataplane="{dataplane}"}} 1"#);
        assert!(
            metrics.lines().any(|line| line == expected),
            "node{}: {expected} missing in\n{metrics}",
            node + 1
        );
    }
    // a2 deleted: out of br-int, no longer reached.
    let output = runtime.exec("DEL", &attachments[1], &config).unwrap();
    assert!(output.status.success(), "DEL a2: {output:?}{}", logs());
    let ports = switch.vsctl(&["list-ports", "br-int"]).unwrap();
    assert_eq!(ports.lines().count(), 1, "{ports}");
    pods[0].ip(&["neigh", "flush", "dev", "eth0"]).unwrap();
    assert!(!pings(&pods[0], A2), "a1 still reaches a deleted a2");
    let _ = runtime.exec("DEL", &attachments[0], &config);
    drop(switch);
}
