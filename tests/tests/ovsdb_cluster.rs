//! The OVSDB session against a 3-member RAFT Southbound cluster: killing the leader the client is
//! connected to makes it move to another member and resume from its last transaction; the replica
//! keeps following northd through the leader change with no row lost or duplicated.

use std::{collections::BTreeSet, net::Ipv4Addr, time::Duration};

use ovnbpf_agent::{
    ovsdb::{
        datum::Datum,
        remote::Remote,
        replica::Replica,
        session::{self, MonitoredTable, SessionConfig, SessionEvent},
    },
    sb::{DATABASE, rows},
};
use ovnbpf_tests::{
    cluster::ClusterLab,
    kubeovn::{Topology, mac_for},
    require_root,
    sbdump::dump_table_with,
};
use tokio::sync::mpsc::UnboundedReceiver;

async fn next(events: &mut UnboundedReceiver<SessionEvent>) -> SessionEvent {
    tokio::time::timeout(Duration::from_secs(30), events.recv())
        .await
        .expect("no event in 30 s")
        .expect("session ended")
}

/// Applies events until no new one arrives for `quiet`.
async fn settle(
    replica: &mut Replica,
    events: &mut UnboundedReceiver<SessionEvent>,
    quiet: Duration,
) {
    while let Ok(Some(event)) = tokio::time::timeout(quiet, events.recv()).await {
        let changes = replica.apply(&event);
        assert!(changes.rejected.is_empty(), "{:?}", changes.rejected);
    }
}

fn assert_matches_cluster(lab: &ClusterLab, replica: &Replica) -> usize {
    let mut rows = 0;
    for (name, table) in replica.tables() {
        let dumped = dump_table_with(|args| lab.sbctl(args), name).unwrap();
        let ours: BTreeSet<String> = table.rows().map(|r| r.uuid.to_string()).collect();
        let theirs: BTreeSet<String> = dumped.keys().cloned().collect();
        assert_eq!(ours, theirs, "{name}: rows differ after the leader change");
        for (uuid, row) in &dumped {
            let values: Vec<Datum> = table
                .layout()
                .columns
                .iter()
                .map(|(column, column_type)| Datum::decode(&row[column], column_type).unwrap())
                .collect();
            assert_eq!(
                table.row(&uuid.parse().unwrap()).unwrap().values(),
                values,
                "{name} {uuid}"
            );
            rows += 1;
        }
    }
    rows
}

fn pods(range: std::ops::Range<u8>) -> Vec<String> {
    let mut topology = Topology::new();
    for i in range {
        let pod = format!("pod-{i}");
        topology.pod(
            "subnet-a",
            &pod,
            "ns",
            &mac_for(&pod),
            Ipv4Addr::new(10, 0, 1, i),
        );
    }
    topology.take_args()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_moves_the_client_and_loses_nothing() {
    require_root();
    let mut lab = ClusterLab::start(3).unwrap();
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap();
    lab.nbctl(&topology.take_args()).unwrap();
    lab.nbctl(&pods(2..12)).unwrap();

    // Put the leader first so the client connects to it.
    let leader = lab.leader().expect("the cluster has a leader");
    let mut remotes = Remote::parse_list(&lab.sb_tcp_remotes()).unwrap();
    remotes.rotate_left(leader);
    let tables = rows::MONITORED
        .iter()
        .map(|(table, _)| MonitoredTable::all(table))
        .collect();
    let mut config = SessionConfig::new(remotes.clone(), DATABASE, tables);
    config.backoff_min = Duration::from_millis(50);
    config.backoff_max = Duration::from_millis(500);
    let (_handle, mut events) = session::start(config);
    let mut replica = Replica::new();
    let first = next(&mut events).await;
    let SessionEvent::Snapshot { remote, .. } = &first else {
        panic!("{first:?}")
    };
    assert_eq!(
        *remote,
        remotes[0].to_string(),
        "the client is on the leader"
    );
    replica.apply(&first);
    settle(&mut replica, &mut events, Duration::from_millis(300)).await;
    assert_matches_cluster(&lab, &replica);

    lab.kill(leader);
    let SessionEvent::Disconnected { reason, .. } = next(&mut events).await else {
        panic!("expected a disconnect")
    };
    println!("leader killed: {reason}");
    // Changes committed through the new leader while the client reconnects.
    lab.nbctl(&pods(12..22)).unwrap();
    let snapshot = loop {
        let event = next(&mut events).await;
        let changes = replica.apply(&event);
        assert!(changes.rejected.is_empty());
        if let SessionEvent::Snapshot {
            remote, resumed, ..
        } = &event
        {
            assert_ne!(*remote, remotes[0].to_string());
            break (*resumed, changes);
        }
    };
    let (resumed, changes) = snapshot;
    println!(
        "reconnected, resumed from the last transaction: {resumed}; {} tables changed",
        changes.tables.len()
    );
    assert!(
        resumed,
        "a cluster member keeps history: monitor_cond_since must resume"
    );
    let new_leader = lab.leader();
    assert!(
        new_leader.is_some_and(|l| l != leader),
        "a new leader was elected"
    );
    lab.nbctl(&pods(22..32)).unwrap();
    settle(&mut replica, &mut events, Duration::from_millis(500)).await;
    let rows = assert_matches_cluster(&lab, &replica);
    assert_eq!(
        replica
            .table("Port_Binding")
            .unwrap()
            .rows()
            .filter(|r| r
                .get("logical_port")
                .and_then(|d| d.single())
                .and_then(|a| a.as_str())
                .is_some_and(|p| p.starts_with("pod-")))
            .count(),
        30
    );
    println!("{rows} rows equal the cluster after the leader change");

    // The old leader comes back as a follower and the client keeps following.
    lab.restart(leader).unwrap();
    lab.nbctl(&["--wait=sb", "lsp-del", "pod-2.ns"]).unwrap();
    settle(&mut replica, &mut events, Duration::from_millis(500)).await;
    assert_matches_cluster(&lab, &replica);
    assert!(lab.northd_running());
}
