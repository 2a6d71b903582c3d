//! The OVSDB client and replica against a real ovsdb-server + ovn-northd: the initial sync equals
//! what `ovn-sbctl` lists, NB changes arrive as change sets with exactly the affected rows, and a
//! restarted SB server costs no spurious changes.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
    time::Duration,
};

use ovnbpf_agent::ovsdb::{
    datum::Datum,
    remote::Remote,
    replica::{ChangeSet, Replica},
    session::{self, MonitorMethod, MonitoredTable, SessionConfig, SessionEvent},
};
use ovnbpf_tests::{
    kubeovn::{Topology, mac_for},
    ovn::{Db, OvnLab},
    require_root,
    sbdump::{DumpedRow, dump_table},
};
use tokio::sync::mpsc::UnboundedReceiver;

const SB: &str = "OVN_Southbound";

/// Kube-OVN-like: the default VPC, three custom VPCs (two overlapping), a peering with routes, an
/// ACL, a load balancer and `pods` pods spread over the subnets.
fn build_topology(lab: &OvnLab, pods: u32) {
    let mut topology = Topology::new();
    topology.default_vpc().unwrap();
    let subnets = [
        ("ovn-cluster", "ovn-default", [10, 16, 0]),
        ("vpc-a", "subnet-a", [10, 0, 1]),
        ("vpc-b", "subnet-b", [10, 1, 1]),
        ("vpc-c", "subnet-c", [10, 0, 1]),
    ];
    for (vpc, subnet, [a, b, c]) in subnets.iter().skip(1) {
        topology
            .vpc_with_subnet(vpc, subnet, &format!("{a}.{b}.{c}.0/24"))
            .unwrap();
    }
    topology
        .peering("vpc-a", "10.0.255.1/30", "vpc-b", "10.0.255.2/30")
        .static_route("vpc-a", "10.1.1.0/24", Ipv4Addr::new(10, 0, 255, 2))
        .static_route("vpc-b", "10.0.1.0/24", Ipv4Addr::new(10, 0, 255, 1));
    for index in 0..pods {
        let (_, subnet, [a, b, c]) = subnets[(index % 4) as usize];
        let host = u8::try_from(2 + index / 4).expect("at most 250 pods per subnet");
        let pod = format!("pod-{index}");
        topology.pod(
            subnet,
            &pod,
            "ns",
            &mac_for(&pod),
            Ipv4Addr::new(a, b, c, host),
        );
    }
    topology
        .acl(
            "subnet-a",
            "to-lport",
            1000,
            "ip4.src == 10.1.1.0/24 && tcp.dst == 80",
            "allow-related",
        )
        .load_balancer("lb-a", "10.96.0.100:80", "10.0.1.2:80,10.0.1.3:80", "tcp")
        .switch_load_balancer("subnet-a", "lb-a");
    topology.apply(lab).unwrap();
}

fn all_tables(lab: &OvnLab) -> Vec<MonitoredTable> {
    let schema = std::fs::read_to_string("/usr/share/ovn/ovn-sb.ovsschema").unwrap();
    let schema: serde_json::Value = serde_json::from_str(&schema).unwrap();
    let _ = lab;
    schema["tables"]
        .as_object()
        .unwrap()
        .keys()
        .map(|t| MonitoredTable::all(t))
        .collect()
}

fn start_session(
    lab: &OvnLab,
    remote: &str,
) -> (session::SessionHandle, UnboundedReceiver<SessionEvent>) {
    let mut config = SessionConfig::new(Remote::parse_list(remote).unwrap(), SB, all_tables(lab));
    config.backoff_min = Duration::from_millis(20);
    config.backoff_max = Duration::from_millis(200);
    session::start(config)
}

async fn next_event(events: &mut UnboundedReceiver<SessionEvent>) -> SessionEvent {
    tokio::time::timeout(Duration::from_secs(20), events.recv())
        .await
        .expect("no session event within 20 s")
        .expect("session ended")
}

/// Applies events until a snapshot has been applied; returns its change set.
async fn sync(
    replica: &mut Replica,
    events: &mut UnboundedReceiver<SessionEvent>,
) -> (ChangeSet, SessionEvent) {
    loop {
        let event = next_event(events).await;
        let changes = replica.apply(&event);
        if matches!(event, SessionEvent::Snapshot { .. }) {
            return (changes, event);
        }
    }
}

/// Applies every event that arrives within `quiet` of the previous one; returns the merged changes
/// as (inserted, modified, deleted) UUID sets per table.
async fn settle(
    replica: &mut Replica,
    events: &mut UnboundedReceiver<SessionEvent>,
    quiet: Duration,
) -> Changes {
    let mut merged = Changes::default();
    while let Ok(Some(event)) = tokio::time::timeout(quiet, events.recv()).await {
        let changes = replica.apply(&event);
        assert!(
            changes.rejected.is_empty(),
            "rejected row updates: {:?}",
            changes.rejected
        );
        merged.merge(&changes);
    }
    merged
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Changes(BTreeMap<String, RowSets>);

/// UUIDs of the rows a table gained, changed and lost.
#[derive(Debug, Default, PartialEq, Eq)]
struct RowSets {
    inserted: BTreeSet<String>,
    modified: BTreeSet<String>,
    deleted: BTreeSet<String>,
}

impl RowSets {
    fn is_empty(&self) -> bool {
        self.inserted.is_empty() && self.modified.is_empty() && self.deleted.is_empty()
    }
}

impl Changes {
    fn merge(&mut self, changes: &ChangeSet) {
        for (table, change) in &changes.tables {
            let RowSets {
                inserted,
                modified,
                deleted,
            } = self.0.entry(table.clone()).or_default();
            for uuid in &change.inserted {
                inserted.insert(uuid.to_string());
            }
            for (uuid, _) in &change.modified {
                if !inserted.contains(&uuid.to_string()) {
                    modified.insert(uuid.to_string());
                }
            }
            for (uuid, _) in &change.deleted {
                let uuid = uuid.to_string();
                modified.remove(&uuid);
                if !inserted.remove(&uuid) {
                    deleted.insert(uuid);
                }
            }
        }
        self.0.retain(|_, sets| !sets.is_empty());
    }
}

fn dump_all(lab: &OvnLab, replica: &Replica) -> BTreeMap<String, BTreeMap<String, DumpedRow>> {
    replica
        .tables()
        .map(|(name, _)| (name.to_string(), dump_table(lab, name).unwrap()))
        .collect()
}

/// What changed between two dumps, compared as typed values.
fn expected_changes(
    replica: &Replica,
    before: &BTreeMap<String, BTreeMap<String, DumpedRow>>,
    after: &BTreeMap<String, BTreeMap<String, DumpedRow>>,
) -> Changes {
    let mut changes = Changes::default();
    for (table, rows) in after {
        let old_rows = &before[table];
        let RowSets {
            inserted,
            modified,
            deleted,
        } = changes.0.entry(table.clone()).or_default();
        for (uuid, row) in rows {
            match old_rows.get(uuid) {
                None => {
                    inserted.insert(uuid.clone());
                }
                Some(old) if typed(replica, table, old) != typed(replica, table, row) => {
                    modified.insert(uuid.clone());
                }
                Some(_) => {}
            }
        }
        for uuid in old_rows.keys().filter(|u| !rows.contains_key(*u)) {
            deleted.insert(uuid.clone());
        }
    }
    changes.0.retain(|_, sets| !sets.is_empty());
    changes
}

fn typed(replica: &Replica, table: &str, row: &DumpedRow) -> Vec<Datum> {
    let layout = replica.table(table).unwrap().layout();
    layout
        .columns
        .iter()
        .map(|(column, column_type)| {
            let value = row
                .get(column)
                .unwrap_or_else(|| panic!("ovn-sbctl lacks {table}.{column}"));
            Datum::decode(value, column_type).unwrap_or_else(|e| panic!("{table}.{column}: {e}"))
        })
        .collect()
}

/// The replica holds exactly the rows and values `ovn-sbctl` lists, for every table.
fn assert_replica_matches(lab: &OvnLab, replica: &Replica) -> usize {
    let mut rows_checked = 0;
    for (name, table) in replica.tables() {
        let dumped = dump_table(lab, name).unwrap();
        let ours: BTreeSet<String> = table.rows().map(|r| r.uuid.to_string()).collect();
        let theirs: BTreeSet<String> = dumped.keys().cloned().collect();
        assert_eq!(ours, theirs, "table {name}: row sets differ");
        for (uuid, row) in &dumped {
            let replica_row = table.row(&uuid.parse().unwrap()).unwrap();
            assert_eq!(
                replica_row.values(),
                typed(replica, name, row),
                "{name} {uuid}"
            );
            rows_checked += 1;
        }
    }
    rows_checked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_sync_equals_ovn_sbctl_for_every_table_at_1000_pods() {
    require_root();
    let lab = OvnLab::start().unwrap();
    build_topology(&lab, 1000);
    let (_handle, mut events) = start_session(&lab, &lab.unix_remote(Db::Southbound));
    let mut replica = Replica::new();
    let (changes, snapshot) = sync(&mut replica, &mut events).await;
    let SessionEvent::Snapshot {
        method, resumed, ..
    } = snapshot
    else {
        unreachable!()
    };
    assert_eq!(method, MonitorMethod::MonitorCondSince);
    assert!(!resumed);
    assert!(changes.rejected.is_empty(), "{:?}", changes.rejected);
    assert_eq!(
        replica.table("Port_Binding").unwrap().len(),
        1000 + 5 * 2 + 2
    );
    let rows = assert_replica_matches(&lab, &replica);
    println!(
        "initial sync: {rows} rows in {} tables equal ovn-sbctl",
        replica.tables().count()
    );
    assert!(rows > 5000, "{rows}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nb_changes_arrive_as_change_sets_with_exactly_the_affected_rows() {
    require_root();
    let lab = OvnLab::start().unwrap();
    build_topology(&lab, 40);
    let (_handle, mut events) = start_session(&lab, &lab.tcp_remote(Db::Southbound));
    let mut replica = Replica::new();
    sync(&mut replica, &mut events).await;

    // Kube-OVN's objects come from the builder; deletions (which it does not model) are plain
    // ovn-nbctl commands.
    let raw = |commands: &[&[&str]]| -> Vec<String> {
        let mut args = vec!["--wait=sb".to_string()];
        for command in commands {
            args.push("--".into());
            args.extend(command.iter().map(|s| (*s).to_string()));
        }
        args
    };
    let steps: Vec<(&str, Vec<String>)> = vec![
        (
            "add a pod",
            Topology::new()
                .pod(
                    "subnet-a",
                    "new-pod",
                    "ns",
                    "0a:58:0a:00:01:fa",
                    Ipv4Addr::new(10, 0, 1, 250),
                )
                .take_args(),
        ),
        ("remove a pod", raw(&[&["lsp-del", "pod-1.ns"]])),
        (
            "add a subnet",
            Topology::new()
                .subnet("vpc-a", "subnet-d", "10.0.2.0/24")
                .unwrap()
                .take_args(),
        ),
        (
            "add a route",
            Topology::new()
                .static_route("vpc-a", "192.168.0.0/16", Ipv4Addr::new(10, 0, 1, 9))
                .take_args(),
        ),
        (
            "remove a route",
            raw(&[&["lr-route-del", "vpc-a", "192.168.0.0/16"]]),
        ),
        (
            "remove a subnet",
            raw(&[&["lrp-del", "vpc-a-subnet-d"], &["ls-del", "subnet-d"]]),
        ),
    ];
    for (what, args) in steps {
        let before = dump_all(&lab, &replica);
        lab.nbctl(&args).unwrap();
        let got = settle(&mut replica, &mut events, Duration::from_millis(300)).await;
        let after = dump_all(&lab, &replica);
        let expected = expected_changes(&replica, &before, &after);
        assert!(
            !expected.0.is_empty(),
            "{what}: the SB did not change at all"
        );
        assert_eq!(
            got, expected,
            "{what}: change sets differ from the SB's real changes"
        );
        println!(
            "{what}: {:?}",
            got.0
                .iter()
                .map(|(t, sets)| {
                    format!(
                        "{t} +{} ~{} -{}",
                        sets.inserted.len(),
                        sets.modified.len(),
                        sets.deleted.len()
                    )
                })
                .collect::<Vec<_>>()
        );
    }
    assert_replica_matches(&lab, &replica);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_sb_server_resyncs_without_spurious_changes() {
    require_root();
    let mut lab = OvnLab::start().unwrap();
    build_topology(&lab, 20);
    let (_handle, mut events) = start_session(&lab, &lab.tcp_remote(Db::Southbound));
    let mut replica = Replica::new();
    sync(&mut replica, &mut events).await;

    lab.stop_database(Db::Southbound);
    match next_event(&mut events).await {
        SessionEvent::Disconnected { reason, .. } => println!("disconnected: {reason}"),
        other => panic!("expected a disconnect, got {other:?}"),
    }
    lab.start_database(Db::Southbound).unwrap();
    let (changes, snapshot) = sync(&mut replica, &mut events).await;
    let SessionEvent::Snapshot { resumed, .. } = snapshot else {
        unreachable!()
    };
    // A standalone server keeps no history (found=false), so this is a full resync.
    assert!(!resumed);
    assert!(changes.resynced);
    // northd may rewrite SB rows after it reconnects; let that settle, then nothing else may differ.
    let later = settle(&mut replica, &mut events, Duration::from_millis(500)).await;
    assert!(
        changes.is_empty(),
        "a reconnect to an unchanged SB produced changes: {:?}",
        changes.tables.keys().collect::<Vec<_>>()
    );
    assert!(later.0.is_empty(), "{later:?}");
    assert_replica_matches(&lab, &replica);

    // And the session keeps following the SB after the reconnect.
    let before = dump_all(&lab, &replica);
    lab.nbctl(&["--wait=sb", "lsp-add", "subnet-b", "late-pod.ns"])
        .unwrap();
    let got = settle(&mut replica, &mut events, Duration::from_millis(300)).await;
    assert_eq!(
        got,
        expected_changes(&replica, &before, &dump_all(&lab, &replica))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn condition_changes_narrow_and_widen_the_replica() {
    require_root();
    let lab = OvnLab::start().unwrap();
    build_topology(&lab, 12);
    let datapath_of = |name: &str| -> String {
        let dumped = dump_table(&lab, "Datapath_Binding").unwrap();
        dumped
            .into_iter()
            .find(|(_, row)| {
                row["external_ids"]
                    .to_string()
                    .contains(&format!("\"{name}\""))
            })
            .map(|(uuid, _)| uuid)
            .unwrap()
    };
    let subnet_a = datapath_of("subnet-a");
    let subnet_b = datapath_of("subnet-b");
    let only = |uuid: &str| serde_json::json!([["datapath", "==", ["uuid", uuid]]]);
    let tables = vec![MonitoredTable {
        name: "Port_Binding".into(),
        columns: None,
        condition: Some(only(&subnet_a)),
    }];
    let mut config = SessionConfig::new(
        Remote::parse_list(&lab.unix_remote(Db::Southbound)).unwrap(),
        SB,
        tables,
    );
    config.backoff_min = Duration::from_millis(20);
    let (handle, mut events) = session::start(config);
    let mut replica = Replica::new();
    sync(&mut replica, &mut events).await;
    let ports_on = |replica: &Replica| -> BTreeSet<String> {
        replica
            .table("Port_Binding")
            .unwrap()
            .rows()
            .map(|r| {
                r.get("datapath")
                    .unwrap()
                    .single()
                    .unwrap()
                    .as_uuid()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(ports_on(&replica), BTreeSet::from([subnet_a.clone()]));
    let on_a = replica.table("Port_Binding").unwrap().len();

    handle
        .set_condition("Port_Binding", Some(only(&subnet_b)))
        .unwrap();
    let changes = settle(&mut replica, &mut events, Duration::from_millis(300)).await;
    assert_eq!(ports_on(&replica), BTreeSet::from([subnet_b.clone()]));
    let port_changes = &changes.0["Port_Binding"];
    assert_eq!(
        port_changes.deleted.len(),
        on_a,
        "rows leaving the condition are deleted"
    );
    assert!(!port_changes.inserted.is_empty());

    handle.set_condition("Port_Binding", None).unwrap();
    settle(&mut replica, &mut events, Duration::from_millis(300)).await;
    assert_eq!(
        replica.table("Port_Binding").unwrap().len(),
        dump_table(&lab, "Port_Binding").unwrap().len()
    );
}
