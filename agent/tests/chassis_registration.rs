//! The agent as a chassis, against a real ovsdb-server + ovn-northd: registration visible in
//! `ovn-sbctl show`, `ovn-nbctl --wait=hv sync` acknowledged, port claims and `up`, row reuse
//! across restarts, `--cleanup`; and ovn-controller-style conditional monitoring.

use std::{collections::HashSet, net::Ipv4Addr, path::Path, process::Command, time::Duration};

use ovnbpf_agent::{
    chassis,
    ovsdb::{
        remote::Remote,
        session::{self, SessionConfig, SessionEvent},
    },
    sb::{
        DATABASE, Southbound,
        monitor::{self, LocalScope},
        rows::{DatapathBinding, LogicalFlow, PortBinding},
    },
};
use ovnbpf_tests::{
    kubeovn::{Topology, mac_for},
    ovn::{Db, OvnLab},
    process::{Child, wait_until},
    require_root,
    sbdump::dump_table,
};
use serde_json::Value;

const AGENT: &str = env!("CARGO_BIN_EXE_ovnbpf-agent");

fn topology(lab: &OvnLab) {
    let mut topology = Topology::new();
    topology
        .peered_vpcs("10.0.1.0/24", &[])
        .unwrap()
        .vpc_with_subnet("vpc-c", "subnet-c", "10.2.1.0/24")
        .unwrap();
    for (subnet, pod, ip) in [
        ("subnet-a", "p1", 2),
        ("subnet-a", "p2", 3),
        ("subnet-b", "p3", 2),
        ("subnet-c", "p4", 2),
    ] {
        let base = match subnet {
            "subnet-a" => [10, 0, 1],
            "subnet-b" => [10, 1, 1],
            _ => [10, 2, 1],
        };
        topology.pod(
            subnet,
            pod,
            "ns",
            &mac_for(pod),
            Ipv4Addr::new(base[0], base[1], base[2], ip),
        );
    }
    topology.apply(lab).unwrap();
}

fn start_agent(lab: &OvnLab, extra: &[&str]) -> Child {
    let mut command = Command::new(AGENT);
    command
        .args([
            "run",
            "--sb-remote",
            &lab.tcp_remote(Db::Southbound),
            "--system-id",
            "node1",
        ])
        .args([
            "--hostname",
            "node1",
            "--encap-ip",
            "172.31.0.10",
            "--probe-interval-s",
            "5",
        ])
        .args(extra);
    Child::spawn(
        "ovnbpf-agent",
        &mut command,
        Some(lab.dir().join("agent.log")),
    )
    .unwrap()
}

fn row_named(
    lab: &OvnLab,
    table: &str,
    column: &str,
    name: &str,
) -> Option<(String, std::collections::BTreeMap<String, Value>)> {
    dump_table(lab, table)
        .unwrap()
        .into_iter()
        .find(|(_, row)| row.get(column).and_then(Value::as_str) == Some(name))
}

fn uuid_of(value: &Value) -> Option<String> {
    value.get(1).and_then(Value::as_str).map(str::to_string)
}

#[test]
fn agent_registers_acknowledges_claims_and_cleans_up() {
    require_root();
    let lab = OvnLab::start().unwrap();
    topology(&lab);
    let mut agent = start_agent(&lab, &["--local-port", "p1.ns"]);

    let registered = wait_until(Duration::from_secs(15), || {
        row_named(&lab, "Port_Binding", "logical_port", "p1.ns")
            .is_some_and(|(_, pb)| pb["chassis"].get(0) == Some(&Value::from("uuid")))
    });
    agent.check_running().unwrap();
    assert!(
        registered,
        "the agent did not register and claim p1.ns{}",
        agent.log_tail()
    );

    let show = lab.sbctl(&["show"]).unwrap();
    assert!(show.contains("Chassis node1"), "{show}");
    assert!(
        show.contains("172.31.0.10") && show.contains("geneve"),
        "{show}"
    );
    assert!(
        show.contains("Port_Binding \"p1.ns\"") || show.contains("Port_Binding p1.ns"),
        "{show}"
    );
    let (chassis_uuid, chassis_row) = row_named(&lab, "Chassis", "name", "node1").unwrap();
    assert!(
        chassis_row["other_config"]
            .to_string()
            .contains("port-up-notif")
    );
    let (private_uuid, _) = row_named(&lab, "Chassis_Private", "name", "node1").unwrap();
    // The agent asks for no outer checksums unless told to (it never reads them).
    let (_, encap) = row_named(&lab, "Encap", "chassis_name", "node1").unwrap();
    assert_eq!(
        encap["options"],
        serde_json::json!(["map", [["csum", "false"]]])
    );

    // northd waits for every chassis to acknowledge nb_cfg: the agent is the only one.
    lab.nbctl(&["--wait=hv", "--timeout=15", "sync"])
        .expect("ovn-nbctl --wait=hv sync did not return");
    let (_, pb) = row_named(&lab, "Port_Binding", "logical_port", "p1.ns").unwrap();
    assert_eq!(uuid_of(&pb["chassis"]), Some(chassis_uuid.clone()));
    assert_eq!(
        pb["up"],
        Value::Bool(false),
        "up must wait for the datapath"
    );
    // The daemon narrowed its monitor to p1's datapaths: subnet-a, vpc-a, and through the
    // peering vpc-b and subnet-b (not vpc-c/subnet-c).
    let log = std::fs::read_to_string(agent.log_path().unwrap()).unwrap_or_default();
    let scope = log
        .lines()
        .rfind(|l| l.contains("local datapaths changed"))
        .unwrap_or_default();
    assert!(
        scope.ends_with("datapaths=4"),
        "scope: {scope:?}{}",
        agent.log_tail()
    );
    let (_, other) = row_named(&lab, "Port_Binding", "logical_port", "p2.ns").unwrap();
    assert_eq!(
        other["chassis"],
        serde_json::json!(["set", []]),
        "p2 is not local"
    );

    // A graceful restart keeps and reuses the rows.
    agent.stop();
    assert!(
        row_named(&lab, "Chassis", "name", "node1").is_some(),
        "SIGTERM must keep the chassis"
    );
    let mut agent = start_agent(&lab, &["--local-port", "p1.ns"]);
    lab.nbctl(&["--wait=hv", "--timeout=15", "sync"]).unwrap();
    agent.check_running().unwrap();
    assert_eq!(
        row_named(&lab, "Chassis", "name", "node1").unwrap().0,
        chassis_uuid
    );
    assert_eq!(
        row_named(&lab, "Chassis_Private", "name", "node1")
            .unwrap()
            .0,
        private_uuid
    );
    assert_eq!(dump_table(&lab, "Chassis").unwrap().len(), 1);
    assert_eq!(dump_table(&lab, "Encap").unwrap().len(), 1);
    agent.stop();

    let status = Command::new(AGENT)
        .args([
            "run",
            "--sb-remote",
            &lab.unix_remote(Db::Southbound),
            "--system-id",
            "node1",
        ])
        .args(["--encap-ip", "172.31.0.10", "--cleanup"])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(row_named(&lab, "Chassis", "name", "node1").is_none());
    assert!(row_named(&lab, "Chassis_Private", "name", "node1").is_none());
    let (_, pb) = row_named(&lab, "Port_Binding", "logical_port", "p1.ns").unwrap();
    assert_eq!(
        pb["chassis"],
        serde_json::json!(["set", []]),
        "the claim goes with the chassis"
    );
}

async fn snapshot(
    remote: &str,
    tables: Vec<ovnbpf_agent::ovsdb::session::MonitoredTable>,
) -> Southbound {
    let (handle, mut events) = session::start(SessionConfig::new(
        Remote::parse_list(remote).unwrap(),
        DATABASE,
        tables,
    ));
    let mut sb = Southbound::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .unwrap()
            .unwrap();
        let changes = sb.apply(&event);
        assert!(changes.rejected.is_empty(), "{:?}", changes.rejected);
        if matches!(event, SessionEvent::Snapshot { .. }) {
            std::mem::forget(handle);
            return sb;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_monitoring_replicates_only_local_datapaths_and_claims_set_up() {
    require_root();
    let lab = OvnLab::start().unwrap();
    topology(&lab);
    let remote = lab.unix_remote(Db::Southbound);
    let full = snapshot(
        &remote,
        monitor::monitored_tables(true, "node1", &LocalScope::default()),
    )
    .await;

    // p1 lives on subnet-a; through vpc-a and the peering, vpc-b and subnet-b are local too.
    // vpc-c and subnet-c are not.
    let local_ports: HashSet<String> = ["p1.ns".to_string()].into();
    let scope = monitor::local_scope(&full, None, &local_ports);
    let name_of =
        |uuid: &uuid::Uuid| full.row::<DatapathBinding>(uuid).unwrap().external_ids["name"].clone();
    let mut names: Vec<String> = scope.datapaths.iter().map(name_of).collect();
    names.sort();
    assert_eq!(names, ["subnet-a", "subnet-b", "vpc-a", "vpc-b"]);

    let partial = snapshot(&remote, monitor::monitored_tables(false, "node1", &scope)).await;
    let mut expected_flows = 0;
    for datapath in &scope.datapaths {
        let flows: Vec<LogicalFlow> = full.flows_for_datapath(*datapath).collect();
        let replicated: Vec<LogicalFlow> = partial.flows_for_datapath(*datapath).collect();
        assert_eq!(
            replicated.len(),
            flows.len(),
            "flows of {}",
            name_of(datapath)
        );
        expected_flows += flows
            .iter()
            .filter(|f| f.logical_datapath.is_some())
            .count();
    }
    let direct = partial
        .rows::<LogicalFlow>()
        .filter(|f| f.logical_datapath.is_some())
        .count();
    assert_eq!(
        direct, expected_flows,
        "only local datapaths' own flows are replicated"
    );
    assert!(partial.rows::<LogicalFlow>().count() < full.rows::<LogicalFlow>().count());
    let remote_vif = partial.port_by_name("p4.ns");
    assert!(
        remote_vif.is_none(),
        "a VIF on a non-local datapath was replicated"
    );
    assert!(
        partial.port_by_name("p3.ns").is_some() && partial.port_by_name("subnet-c-vpc-c").is_some()
    );

    // Claims and `up` through the chassis module on a registered chassis.
    let config = chassis::ChassisConfig {
        name: "node1".into(),
        hostname: "node1".into(),
        encap_ip: "172.31.0.10".into(),
        encap_csum: true,
        monitor_all: false,
        bridge_mappings: String::new(),
    };
    let (handle, mut events) = session::start(SessionConfig::new(
        Remote::parse_list(&remote).unwrap(),
        DATABASE,
        monitor::monitored_tables(true, "node1", &LocalScope::default()),
    ));
    let mut sb = Southbound::new();
    let mut step = 0;
    while step < 3 {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .unwrap()
            .unwrap();
        sb.apply(&event);
        let ops = match (step, sb.chassis_by_name("node1"), sb.port_by_name("p2.ns")) {
            (0, None, _) => config.registration_ops(&sb),
            (0 | 1, Some(chassis), Some(port)) if port.chassis != Some(chassis.uuid) => {
                step = 1;
                let write = chassis::bind_op(&port, chassis.uuid, false).unwrap();
                assert!(write.claims && !write.sets_up);
                vec![write.op]
            }
            (1, Some(chassis), Some(port)) => {
                step = 2;
                let write = chassis::bind_op(&port, chassis.uuid, true).unwrap();
                assert!(!write.claims && write.sets_up);
                vec![write.op]
            }
            (2, Some(_), Some(port)) if port.up == Some(true) => {
                step = 3;
                Vec::new()
            }
            _ => Vec::new(),
        };
        if !ops.is_empty() {
            handle.transact(ops).await.unwrap();
        }
    }
    let (_, pb) = row_named(&lab, "Port_Binding", "logical_port", "p2.ns").unwrap();
    assert_eq!(pb["up"], Value::Bool(true));
    let chassis_uuid = row_named(&lab, "Chassis", "name", "node1").unwrap().0;
    assert_eq!(uuid_of(&pb["chassis"]), Some(chassis_uuid));
    let port: PortBinding = sb.port_by_name("p2.ns").unwrap();
    let chassis = sb.chassis_by_name("node1").unwrap();
    handle
        .transact(chassis::release_ops(&port, chassis.uuid))
        .await
        .unwrap();
    let (_, pb) = row_named(&lab, "Port_Binding", "logical_port", "p2.ns").unwrap();
    assert_eq!(pb["chassis"], serde_json::json!(["set", []]));
    assert_eq!(pb["up"], Value::Bool(false));
    let _ = Path::new("unused");
}
