//! The agent against a Southbound served only over TLS (`ssl:` remote), as Kube-OVN's
//! ENABLE_SSL deployments run it: certificates from a throwaway `ovs-pki` CA, the SB's
//! connection under northd's `ovn-controller` RBAC role. The agent registers, claims and reports
//! its pod `up` (forwarding with the eBPF datapath in a simulated node); the
//! server refuses it a write to another chassis's row; a wrong CA and an expired server
//! certificate are refused with an error that says so.

use std::{net::Ipv4Addr, process::Command, time::Duration};

use ovnbpf_tests::{
    agent::AgentSpec,
    kubeovn::{Topology, mac_for},
    names::unique_prefix,
    netns::TcpRelay,
    network::{PodSpec, Underlay},
    ovn::OvnLab,
    pki::{Identity, Pki},
    process::{Child, wait_until},
    require_root,
};

const AGENT: &str = env!("CARGO_BIN_EXE_ovnbpf-agent");

fn tls_args(client: &Identity, ca_cert: &std::path::Path) -> Vec<String> {
    let path = |p: &std::path::Path| p.display().to_string();
    vec![
        "--private-key".into(),
        path(&client.key),
        "--certificate".into(),
        path(&client.cert),
        "--ca-cert".into(),
        path(ca_cert),
    ]
}

/// The agent as a chassis without a datapath (registration and claims only), over `remote`.
fn start_agent(lab: &OvnLab, remote: &str, client: &Identity, ca_cert: &std::path::Path) -> Child {
    let log = lab.dir().join(format!(
        "agent-{}.log",
        ca_cert
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
    ));
    Child::spawn(
        "ovnbpf-agent",
        Command::new(AGENT)
            .args(["run", "--sb-remote", remote])
            .args(["--system-id", "node1", "--hostname", "node1"])
            .args(["--encap-ip", "172.31.0.10", "--local-port", "p1.ns"])
            .args(tls_args(client, ca_cert)),
        Some(log),
    )
    .unwrap()
}

fn lab_with_a_pod() -> OvnLab {
    let lab = OvnLab::start().unwrap();
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .pod(
            "subnet-a",
            "p1",
            "ns",
            &mac_for("p1"),
            Ipv4Addr::new(10, 0, 1, 2),
        );
    topology.apply(&lab).unwrap();
    lab
}

/// The chassis p1.ns is bound to, by name ("" while unbound).
fn bound_to(lab: &OvnLab) -> String {
    let uuid = lab
        .sbctl(&[
            "--bare",
            "--columns=chassis",
            "find",
            "Port_Binding",
            "logical_port=p1.ns",
        ])
        .unwrap_or_default();
    if uuid.trim().is_empty() {
        return String::new();
    }
    lab.sbctl(&["--bare", "--columns=name", "list", "Chassis", uuid.trim()])
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn the_agent_registers_and_claims_over_tls_under_the_ovn_controller_role() {
    require_root();
    let lab = lab_with_a_pod();
    let pki = Pki::create().unwrap();
    let server = pki.sign("ovnsb").unwrap();
    let client = pki.sign("node1").unwrap();
    let remote = lab
        .serve_southbound_ssl(&server, &pki.ca_cert(), Some("ovn-controller"))
        .unwrap();
    // Over the network, the Southbound now speaks TLS only.
    lab.stop_southbound_tcp().unwrap();
    // A node forwarding for p1 with the eBPF datapath, so that the agent also reports `up`;
    // its only way to the Southbound is TLS.
    let mut underlay = Underlay::create(&unique_prefix()).unwrap();
    let node = underlay.add_node("node1").unwrap();
    let _pod = node
        .add_pod(&PodSpec {
            name: "p1",
            host_interface: "p1_h",
            mac: Some(&mac_for("p1")),
            address: Some("10.0.1.2/24"),
            gateway: None,
            mtu: None,
        })
        .unwrap();
    let spec = AgentSpec {
        chassis: "node1",
        node: &node,
        local_ports: vec!["p1.ns=p1_h".into()],
        pin_root: None,
        cni_dir: None,
        extra_args: tls_args(&client, &pki.ca_cert()),
    };
    // The SB's TLS port is on the host's loopback; the node reaches it through a relay on its
    // own loopback (TLS end to end: the relay only copies bytes).
    let sb_port: u16 = remote.rsplit(':').next().unwrap().parse().unwrap();
    let relay = TcpRelay::start(
        node.netns(),
        std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, sb_port)),
    )
    .unwrap();
    let mut args = spec.args(&lab);
    let remote_at = args.iter().position(|a| a == "--sb-remote").unwrap() + 1;
    args[remote_at] = format!("ssl:127.0.0.1:{}", relay.port());
    let spawn = |log: &str| {
        node.netns()
            .spawn("ovnbpf-agent", AGENT, &args, Some(lab.dir().join(log)))
            .unwrap()
    };
    let mut agent = spawn("agent-datapath.log");
    let up = wait_until(Duration::from_secs(20), || {
        bound_to(&lab) == "node1"
            && lab
                .sbctl(&[
                    "--bare",
                    "--columns=up",
                    "find",
                    "Port_Binding",
                    "logical_port=p1.ns",
                ])
                .is_ok_and(|up| up.trim() == "true")
    });
    agent.check_running().unwrap();
    assert!(up, "not claimed and up over TLS{}", agent.log_tail());
    let show = lab.sbctl(&["show"]).unwrap();
    assert!(show.contains("Chassis node1"), "{show}");
    assert!(
        !agent.log_tail().contains("permission"),
        "the ovn-controller role refused a write:{}",
        agent.log_tail()
    );
    // Restarted, the agent takes its rows over again within what the role allows.
    agent.kill();
    let mut agent = spawn("agent-datapath-2.log");
    let acknowledged = wait_until(Duration::from_secs(20), || {
        lab.nbctl(&["--timeout=1", "--wait=hv", "sync"]).is_ok()
    });
    agent.check_running().unwrap();
    assert!(
        acknowledged,
        "nb_cfg not acknowledged after the restart{}",
        agent.log_tail()
    );
    assert_eq!(bound_to(&lab), "node1");
    assert!(
        !agent.log_tail().contains("permission"),
        "the ovn-controller role refused a write after the restart:{}",
        agent.log_tail()
    );

    // Another chassis's row: the server refuses node1's identity a write to it.
    lab.sbctl(&["chassis-add", "node2", "geneve", "172.31.0.11"])
        .unwrap();
    let transaction = r#"["OVN_Southbound",{"op":"update","table":"Chassis","where":[["name","==","node2"]],"row":{"hostname":"taken-over"}}]"#;
    let answer = ovnbpf_tests::process::output(
        Command::new("ovsdb-client")
            .arg(format!("--private-key={}", client.key.display()))
            .arg(format!("--certificate={}", client.cert.display()))
            .arg(format!("--ca-cert={}", pki.ca_cert().display()))
            .args(["transact", &remote, transaction]),
    )
    .unwrap_or_else(|e| e.to_string());
    assert!(answer.contains("permission"), "{answer}");
    let hostname = lab
        .sbctl(&["--bare", "--columns=hostname", "list", "Chassis", "node2"])
        .unwrap();
    assert_ne!(hostname.trim(), "taken-over");
    agent.stop();
}

#[test]
fn a_wrong_ca_or_an_expired_server_certificate_is_refused_with_a_clear_error() {
    require_root();
    let lab = lab_with_a_pod();
    let pki = Pki::create().unwrap();
    let other = Pki::create().unwrap();
    let client = pki.sign("node1").unwrap();

    // The server's certificate does not lead to the CA the agent was given.
    let remote = lab
        .serve_southbound_ssl(&pki.sign("ovnsb").unwrap(), &pki.ca_cert(), None)
        .unwrap();
    lab.stop_southbound_tcp().unwrap();
    let mut agent = start_agent(&lab, &remote, &client, &other.ca_cert());
    let said = wait_until(Duration::from_secs(15), || {
        agent.log_tail().contains("invalid peer certificate")
    });
    agent.check_running().unwrap();
    assert!(said, "{}", agent.log_tail());
    assert_eq!(bound_to(&lab), "", "claimed through an untrusted server");
    agent.stop();

    // The server's certificate has expired.
    let remote = lab
        .serve_southbound_ssl(&pki.sign_expired("stale").unwrap(), &pki.ca_cert(), None)
        .unwrap();
    let mut agent = start_agent(&lab, &remote, &client, &pki.ca_cert());
    let said = wait_until(Duration::from_secs(15), || {
        agent.log_tail().contains("Expired")
    });
    assert!(said, "{}", agent.log_tail());
    assert_eq!(bound_to(&lab), "", "claimed through an expired certificate");
    agent.stop();
}
