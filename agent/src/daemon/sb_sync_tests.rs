//! Tests of `sb_sync`: the comparisons and the bookkeeping of writes, against a replica built
//! from update notifications and a session handle that records instead of sending.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::ovsdb::session::{Recorder, SessionEvent, UpdateFormat, recording_handle};

const US: &str = "00000000-0000-0000-0000-0000000000c1";
const OTHER: &str = "00000000-0000-0000-0000-0000000000c2";
const PRIVATE: &str = "00000000-0000-0000-0000-0000000000d1";
const PB: &str = "00000000-0000-0000-0000-0000000000b1";
const MONITOR: &str = "00000000-0000-0000-0000-0000000000e1";
const ROUTER: &str = "00000000-0000-0000-0000-0000000000f1";
const BINDING: &str = "00000000-0000-0000-0000-0000000000f2";
/// The router port neighbours are learned on.
const ROUTER_PORT: &str = "00000000-0000-0000-0000-0000000000f3";
/// The time the tests' writes are stamped with.
const NOW_MS: i64 = 1_700_000_000_000;

fn config() -> ChassisConfig {
    ChassisConfig {
        name: "node1".into(),
        hostname: "node1.example".into(),
        encap_ip: "172.31.0.10".into(),
        encap_csum: true,
        monitor_all: false,
        bridge_mappings: String::new(),
    }
}

fn uuid(text: &str) -> Uuid {
    Uuid::parse_str(text).unwrap()
}

/// A Southbound with this chassis registered (without Encap, so registration is not
/// compared in these tests) and one Port_Binding `pod.ns` as given.
fn southbound(port: Value) -> Southbound {
    let optional = |key: Value| json!({"type": {"key": key, "min": 0, "max": 1}});
    let map = json!({"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}});
    crate::sb::testing::southbound(
        &json!({
            "SB_Global": {"columns": {"nb_cfg": {"type": "integer"}}},
            "Chassis": {"columns": {"name": {"type": "string"}}},
            "Chassis_Private": {"columns": {"name": {"type": "string"},
                "chassis": optional(json!({"type": "uuid"})), "nb_cfg": {"type": "integer"}}},
            "Port_Binding": {"columns": {"logical_port": {"type": "string"},
                "chassis": optional(json!({"type": "uuid"})),
                "encap": optional(json!({"type": "uuid"})),
                "requested_chassis": optional(json!({"type": "uuid"})),
                "up": optional(json!("boolean")), "options": map}},
            "Service_Monitor": {"columns": {"logical_port": {"type": "string"},
                "status": optional(json!("string"))}},
            "Datapath_Binding": {"columns": {"tunnel_key": {"type": "integer"}}},
            "MAC_Binding": {"columns": {"logical_port": {"type": "string"},
                "ip": {"type": "string"}, "mac": {"type": "string"},
                "datapath": optional(json!({"type": "uuid"})), "timestamp": {"type": "integer"}}},
        }),
        json!({
            "SB_Global": {"00000000-0000-0000-0000-0000000000a1": {"initial": {"nb_cfg": 3}}},
            "Chassis": {US: {"initial": {"name": "node1"}}, OTHER: {"initial": {"name": "node2"}}},
            "Chassis_Private": {PRIVATE: {"initial": {"name": "node1", "chassis": ["uuid", US], "nb_cfg": 2}}},
            "Port_Binding": {PB: {"initial": port},
                ROUTER_PORT: {"initial": {"logical_port": "vpc-ext-external"}}},
            "Datapath_Binding": {ROUTER: {"initial": {"tunnel_key": 7}}},
            "Service_Monitor": {MONITOR: {"initial": {"logical_port": "pod.ns"}}},
        }),
    )
}

/// Applies a modification of `pod.ns` and lets `sync` observe it.
fn modify_port(sb: &mut Southbound, sync: &mut SbSync, local: &HashSet<String>, row: Value) {
    let changes = sb.apply(&SessionEvent::Update {
        updates: json!({"Port_Binding": {PB: {"modify": row}}}).into(),
        format: UpdateFormat::Update2,
    });
    sync.observe(sb, &changes, local, Some(uuid(US)));
}

struct Node {
    sync: SbSync,
    local: HashSet<String>,
    /// The chassisredirect ports this node is the active gateway for.
    gateways: HashSet<String>,
    programmed: bool,
    /// What the probes decided for `MONITOR`.
    monitor_status: Option<&'static str>,
    handle: SessionHandle,
    recorder: Recorder,
}

impl Node {
    fn new(local: bool, programmed: bool) -> Self {
        let (handle, recorder) = recording_handle();
        Node {
            sync: SbSync::default(),
            local: if local {
                HashSet::from(["pod.ns".to_string()])
            } else {
                HashSet::new()
            },
            gateways: HashSet::new(),
            programmed,
            monitor_status: None,
            handle,
            recorder,
        }
    }

    /// Applies a modification of `pod.ns` and lets this node observe it.
    fn modify(&mut self, sb: &mut Southbound, row: Value) {
        modify_port(sb, &mut self.sync, &self.local, row);
    }

    /// Reconciles; returns the transactions submitted.
    fn reconcile(&mut self, sb: &Southbound) -> Vec<(RequestId, Vec<Value>)> {
        let config = config();
        let programmed = self.programmed;
        let is_programmed = move |_: &str| programmed;
        let status = self.monitor_status;
        let monitor_status = move |monitor: &Uuid| status.filter(|_| *monitor == uuid(MONITOR));
        let wanted = Wanted {
            config: &config,
            chassis: uuid(US),
            local_ports: &self.local,
            gateways: &self.gateways,
            programmed: &is_programmed,
            monitor_status: &monitor_status,
            now_ms: NOW_MS,
        };
        self.sync
            .reconcile(sb, &self.handle, &config, Some(&wanted));
        self.recorder.transactions()
    }
}

fn row(ops: &[Value]) -> &Value {
    assert_eq!(ops.len(), 1, "one operation: {ops:?}");
    &ops[0]["row"]
}

#[test]
fn a_claim_carries_up_and_a_release_in_flight_holds_the_next_claim() {
    // Claimed and up; the pod is deleted (release in flight), then added again at once.
    let mut sb = southbound(json!({"logical_port": "pod.ns", "chassis": ["uuid", US], "up": true}));
    let mut node = Node::new(true, true);
    node.local.clear();
    node.sync.release("pod.ns");
    let released = node.reconcile(&sb);
    assert_eq!(released.len(), 1);
    assert_eq!(row(&released[0].1)["chassis"], json!(["set", []]));
    assert_eq!(row(&released[0].1)["up"], json!(false));
    node.local.insert("pod.ns".into());
    node.sync.keep("pod.ns");
    assert!(
        node.reconcile(&sb).is_empty(),
        "no write on a row a transaction holds"
    );
    // The release's update, then its reply: the claim follows, with `up` in it.
    node.modify(&mut sb, json!({"chassis": ["set", []], "up": false}));
    assert!(node.reconcile(&sb).is_empty(), "still held until the reply");
    node.sync.finished(&sb, released[0].0, Ok(()));
    let claimed = node.reconcile(&sb);
    assert_eq!(claimed.len(), 1);
    assert_eq!(row(&claimed[0].1)["chassis"], json!(["uuid", US]));
    assert_eq!(
        row(&claimed[0].1)["up"],
        json!(true),
        "claim and up in one operation"
    );
    assert_eq!(
        node.sync.stats().transactions,
        BTreeMap::from([(Purpose::Claim, 1), (Purpose::Up, 1), (Purpose::Release, 1)])
    );
    node.modify(&mut sb, json!({"chassis": ["uuid", US], "up": true}));
    node.sync.finished(&sb, claimed[0].0, Ok(()));
    assert!(
        node.reconcile(&sb).is_empty(),
        "claimed and up: nothing to write"
    );
    assert_eq!(node.sync.outstanding(), 0);
}

#[test]
fn a_reply_before_its_update_keeps_the_row_held_until_the_update() {
    let mut sb = southbound(json!({"logical_port": "pod.ns", "up": false}));
    let mut node = Node::new(true, false);
    node.sync.mark("pod.ns");
    let claimed = node.reconcile(&sb);
    assert_eq!(row(&claimed[0].1)["up"], json!(false));
    node.sync.finished(&sb, claimed[0].0, Ok(()));
    // The datapath forwards now; the claim's update has not arrived.
    node.programmed = true;
    node.sync.mark("pod.ns");
    assert!(
        node.reconcile(&sb).is_empty(),
        "held until the claim's update"
    );
    node.modify(&mut sb, json!({"chassis": ["uuid", US]}));
    let up = node.reconcile(&sb);
    assert_eq!(row(&up[0].1), &json!({"up": true}));
}

#[test]
fn a_failed_write_is_compared_again_when_due_and_counted_as_a_retry() {
    let sb = southbound(json!({"logical_port": "pod.ns", "up": false}));
    let mut node = Node::new(true, true);
    node.sync.mark("pod.ns");
    let first = node.reconcile(&sb);
    node.sync
        .finished(&sb, first[0].0, Err("constraint violation".into()));
    assert!(node.sync.wake_at().is_some());
    assert!(
        node.reconcile(&sb).is_empty(),
        "not before the retry is due"
    );
    node.sync.wake(node.sync.wake_at().unwrap());
    let again = node.reconcile(&sb);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].1, first[0].1, "the same write again");
    let stats = node.sync.stats();
    assert_eq!(
        (stats.failures, stats.retries, stats.out_of_date),
        (1, 1, 2)
    );
}

#[test]
fn an_add_then_del_ends_released_after_the_claim() {
    let mut sb = southbound(json!({"logical_port": "pod.ns", "up": false}));
    let mut node = Node::new(true, true);
    node.sync.mark("pod.ns");
    let claimed = node.reconcile(&sb);
    node.local.clear();
    node.sync.release("pod.ns");
    assert!(node.reconcile(&sb).is_empty());
    node.modify(&mut sb, json!({"chassis": ["uuid", US], "up": true}));
    node.sync.finished(&sb, claimed[0].0, Ok(()));
    let released = node.reconcile(&sb);
    assert_eq!(row(&released[0].1)["chassis"], json!(["set", []]));
    node.modify(&mut sb, json!({"chassis": ["set", []], "up": false}));
    node.sync.finished(&sb, released[0].0, Ok(()));
    assert!(node.reconcile(&sb).is_empty());
    assert!(node.sync.releasing().is_empty());
}

#[test]
fn requested_chassis_elsewhere_releases_and_never_claims_back() {
    let other = json!(["uuid", OTHER]);
    let options = json!(["map", [["requested-chassis", "node2"]]]);
    let mut sb = southbound(json!({"logical_port": "pod.ns", "chassis": ["uuid", US],
        "up": true, "requested_chassis": other, "options": options}));
    let mut node = Node::new(true, true);
    node.sync.mark("pod.ns");
    let released = node.reconcile(&sb);
    assert_eq!(row(&released[0].1)["chassis"], json!(["set", []]));
    // The other chassis claims it: nothing more from us.
    node.modify(&mut sb, json!({"chassis": ["uuid", OTHER]}));
    node.sync.finished(&sb, released[0].0, Ok(()));
    assert!(node.reconcile(&sb).is_empty());
    // Requested back here (by hostname): claimed again.
    node.modify(
        &mut sb,
        json!({"requested_chassis": ["uuid", US],
        "options": ["map", [["requested-chassis", "node1.example"]]]}),
    );
    let claimed = node.reconcile(&sb);
    assert_eq!(row(&claimed[0].1)["chassis"], json!(["uuid", US]));
}

#[test]
fn nb_cfg_is_acknowledged_once_and_waits_for_its_rows() {
    let sb = southbound(json!({"logical_port": "pod.ns"}));
    let mut node = Node::new(false, false);
    node.sync.acknowledge(&sb, &node.handle, &config(), 1);
    let acked = node.recorder.transactions();
    assert_eq!(row(&acked[0].1)["nb_cfg"], json!(3));
    node.sync.acknowledge(&sb, &node.handle, &config(), 2);
    assert!(node.recorder.transactions().is_empty(), "one in flight");
    node.sync.finished(&sb, acked[0].0, Err("lost".into()));
    node.sync.acknowledge(&sb, &node.handle, &config(), 3);
    assert_eq!(
        node.recorder.transactions().len(),
        1,
        "a lost ack is made again"
    );
}

#[test]
fn a_resync_frees_answered_writes_and_compares_every_local_port_again() {
    let mut sb = southbound(json!({"logical_port": "pod.ns", "up": false}));
    let mut node = Node::new(true, false);
    node.sync.mark("pod.ns");
    let claimed = node.reconcile(&sb);
    // Answered, but its update never comes on this connection (it was lost).
    node.sync.finished(&sb, claimed[0].0, Ok(()));
    node.sync.mark("pod.ns");
    assert!(node.reconcile(&sb).is_empty(), "held until its update");
    // The snapshot after the reconnection: the server never got the claim.
    let mut changes = sb.apply(&SessionEvent::Update {
        updates: json!({}).into(),
        format: UpdateFormat::Update2,
    });
    changes.resynced = true;
    node.sync
        .observe(&sb, &changes, &node.local, Some(uuid(US)));
    // (The registration is compared too: this replica has no Encap, so it is written.)
    let again: Vec<_> = node
        .reconcile(&sb)
        .into_iter()
        .filter(|(_, ops)| ops[0]["table"] == "Port_Binding")
        .collect();
    assert_eq!(row(&again[0].1)["chassis"], json!(["uuid", US]));
    assert_eq!(node.sync.stats().transactions[&Purpose::Claim], 2);
}

#[test]
fn a_port_another_chassis_takes_is_claimed_back_at_most_every_claim_interval() {
    let mut sb = southbound(json!({"logical_port": "pod.ns", "up": false}));
    let mut node = Node::new(true, false);
    node.sync.mark("pod.ns");
    let claimed = node.reconcile(&sb);
    node.modify(&mut sb, json!({"chassis": ["uuid", US]}));
    node.sync.finished(&sb, claimed[0].0, Ok(()));
    // Another chassis takes it (no requested-chassis: both may bind it, as in OVN).
    node.modify(&mut sb, json!({"chassis": ["uuid", OTHER]}));
    assert!(node.reconcile(&sb).is_empty(), "not within CLAIM_INTERVAL");
    assert_eq!(node.sync.stats().claims_postponed, 1);
    let due = node.sync.wake_at().expect("a postponed claim is due later");
    node.sync.claims.last_claimed.insert(
        "pod.ns".into(),
        tokio::time::Instant::now() - CLAIM_INTERVAL,
    );
    node.sync.wake(due);
    let again = node.reconcile(&sb);
    assert_eq!(row(&again[0].1)["chassis"], json!(["uuid", US]));
    assert_eq!(node.sync.wake_at(), None);
}

#[test]
fn a_port_bound_here_that_no_one_plugged_is_released_on_the_next_snapshot() {
    // An agent restarted between a DEL's reply and its release: the port is still bound here,
    // up, and nothing here plugs it any more.
    let sb = southbound(json!({"logical_port": "pod.ns", "chassis": ["uuid", US], "up": true}));
    let mut node = Node::new(false, false);
    let changes = ChangeSet {
        resynced: true,
        ..ChangeSet::default()
    };
    node.sync
        .observe(&sb, &changes, &node.local, Some(uuid(US)));
    let released: Vec<_> = node
        .reconcile(&sb)
        .into_iter()
        .filter(|(_, ops)| ops[0]["table"] == "Port_Binding")
        .collect();
    let row = row(&released[0].1);
    assert_eq!(row["chassis"], json!(["set", []]));
    assert_eq!(row["up"], json!(false));
    assert_eq!(node.sync.stats().transactions[&Purpose::Release], 1);
}

#[test]
fn a_port_that_becomes_bound_here_without_being_plugged_here_is_released() {
    let mut sb = southbound(json!({"logical_port": "pod.ns", "up": false}));
    let mut node = Node::new(false, false);
    assert!(node.reconcile(&sb).is_empty());
    // Someone binds it to this chassis (another agent with this chassis's name, a stale
    // transaction): this agent does not serve it, so it gives it back.
    node.modify(&mut sb, json!({"chassis": ["uuid", US]}));
    let released = node.reconcile(&sb);
    assert_eq!(row(&released[0].1)["chassis"], json!(["set", []]));
    // Ports of other chassis are none of its business.
    node.modify(&mut sb, json!({"chassis": ["uuid", OTHER]}));
    node.sync.finished(&sb, released[0].0, Ok(()));
    assert!(node.reconcile(&sb).is_empty());
}

/// Applies a modification of `MONITOR` and lets `node` observe it.
fn modify_monitor(sb: &mut Southbound, node: &mut Node, row: Value) {
    let changes = sb.apply(&SessionEvent::Update {
        updates: json!({"Service_Monitor": {MONITOR: {"modify": row}}}).into(),
        format: UpdateFormat::Update2,
    });
    node.sync.observe(sb, &changes, &node.local, Some(uuid(US)));
}

#[test]
fn a_decided_backend_status_is_written_once_and_written_back_when_changed_under_it() {
    let mut sb = southbound(json!({"logical_port": "pod.ns", "chassis": ["uuid", US], "up": true}));
    let mut node = Node::new(true, true);
    node.sync.mark_monitor(uuid(MONITOR));
    assert!(
        node.reconcile(&sb).is_empty(),
        "nothing decided: nothing written"
    );
    node.monitor_status = Some("online");
    node.sync.mark_monitor(uuid(MONITOR));
    let written = node.reconcile(&sb);
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].1[0]["table"], json!("Service_Monitor"));
    assert_eq!(row(&written[0].1), &json!({"status": "online"}));
    // Decided again before the write is carried: held.
    node.monitor_status = Some("offline");
    node.sync.mark_monitor(uuid(MONITOR));
    assert!(
        node.reconcile(&sb).is_empty(),
        "held by the write in flight"
    );
    modify_monitor(&mut sb, &mut node, json!({"status": "online"}));
    node.sync.finished(&sb, written[0].0, Ok(()));
    let offline = node.reconcile(&sb);
    assert_eq!(row(&offline[0].1), &json!({"status": "offline"}));
    modify_monitor(&mut sb, &mut node, json!({"status": "offline"}));
    node.sync.finished(&sb, offline[0].0, Ok(()));
    assert!(
        node.reconcile(&sb).is_empty(),
        "the row says it: nothing to write"
    );
    // Northd (or anyone) writes another status: this chassis's probes are written back.
    modify_monitor(&mut sb, &mut node, json!({"status": "online"}));
    let back = node.reconcile(&sb);
    assert_eq!(row(&back[0].1), &json!({"status": "offline"}));
    assert_eq!(
        node.sync.stats().transactions.get(&Purpose::ServiceMonitor),
        Some(&3)
    );
}

/// Applies a MAC_Binding update (`BINDING`: insert, modify or delete) and lets `node` observe it.
fn update_binding(sb: &mut Southbound, node: &mut Node, update: Value) {
    let changes = sb.apply(&SessionEvent::Update {
        updates: json!({"MAC_Binding": {BINDING: update}}).into(),
        format: UpdateFormat::Update2,
    });
    node.sync.observe(sb, &changes, &node.local, Some(uuid(US)));
}

fn learned(mac: &str, update_only: bool) -> Learned {
    Learned {
        port: "vpc-ext-external".into(),
        ip: "172.30.0.1".into(),
        mac: mac.into(),
        datapath: uuid(ROUTER),
        update_only,
    }
}

/// A learned neighbour is inserted as pinctrl inserts it, a newer MAC for the same address
/// waits for the write in flight and then updates the row, and the neighbour is forgotten once
/// the replica shows it.
#[test]
fn a_learned_neighbour_is_inserted_then_updated_and_forgotten_once_shown() {
    let mut sb = southbound(json!({"logical_port": "pod.ns", "chassis": ["uuid", US], "up": true}));
    let mut node = Node::new(true, true);
    node.sync.learn(learned("02:00:00:00:00:01", false));
    let inserted = node.reconcile(&sb);
    assert_eq!(inserted.len(), 1);
    assert_eq!(
        inserted[0].1,
        [json!({"op": "insert", "table": "MAC_Binding", "row": {
            "logical_port": "vpc-ext-external", "ip": "172.30.0.1", "mac": "02:00:00:00:00:01",
            "datapath": ["uuid", ROUTER], "timestamp": NOW_MS}})]
    );
    // The neighbour answers from another MAC before the insert is carried: held.
    node.sync.learn(learned("02:00:00:00:00:02", false));
    assert!(
        node.reconcile(&sb).is_empty(),
        "held by the insert in flight"
    );
    update_binding(
        &mut sb,
        &mut node,
        json!({"insert": {"logical_port": "vpc-ext-external", "ip": "172.30.0.1",
            "mac": "02:00:00:00:00:01", "datapath": ["uuid", ROUTER], "timestamp": NOW_MS}}),
    );
    node.sync.finished(&sb, inserted[0].0, Ok(()));
    let updated = node.reconcile(&sb);
    assert_eq!(
        updated[0].1,
        [json!({"op": "update", "table": "MAC_Binding",
            "where": [["_uuid", "==", ["uuid", BINDING]]],
            "row": {"mac": "02:00:00:00:00:02", "timestamp": NOW_MS}})]
    );
    update_binding(
        &mut sb,
        &mut node,
        json!({"modify": {"mac": "02:00:00:00:00:02"}}),
    );
    node.sync.finished(&sb, updated[0].0, Ok(()));
    assert!(node.reconcile(&sb).is_empty(), "the row says it");
    assert_eq!(node.sync.learning(), 0, "forgotten once shown");
    // Heard again at the MAC the row has: nothing to write.
    node.sync.learn(learned("02:00:00:00:00:02", false));
    assert!(node.reconcile(&sb).is_empty());
    assert_eq!(node.sync.learning(), 0);
    assert_eq!(
        node.sync.stats().transactions.get(&Purpose::MacBinding),
        Some(&2)
    );
}

/// A request updates only a binding the port has: without one nothing is written; with one
/// (another MAC), the row is updated.
#[test]
fn a_request_only_updates_a_binding_the_port_has() {
    let mut sb = southbound(json!({"logical_port": "pod.ns", "chassis": ["uuid", US], "up": true}));
    let mut node = Node::new(true, true);
    node.sync.learn(learned("02:00:00:00:00:01", true));
    assert!(node.reconcile(&sb).is_empty(), "no binding to update");
    assert_eq!(node.sync.learning(), 0);
    update_binding(
        &mut sb,
        &mut node,
        json!({"insert": {"logical_port": "vpc-ext-external", "ip": "172.30.0.1",
            "mac": "02:00:00:00:00:01", "datapath": ["uuid", ROUTER], "timestamp": 1}}),
    );
    node.sync.learn(learned("02:00:00:00:00:03", true));
    let updated = node.reconcile(&sb);
    assert_eq!(
        row(&updated[0].1),
        &json!({"mac": "02:00:00:00:00:03", "timestamp": NOW_MS})
    );
}

/// A refused insert is compared again when due; once the row another chassis inserted first
/// (the schema's index) is in, the write updates that row if its MAC differs.
#[test]
fn a_refused_insert_is_compared_again_and_updates_the_row_that_won() {
    let mut sb = southbound(json!({"logical_port": "pod.ns", "chassis": ["uuid", US], "up": true}));
    let mut node = Node::new(true, true);
    node.sync.learn(learned("02:00:00:00:00:01", false));
    let inserted = node.reconcile(&sb);
    node.sync
        .finished(&sb, inserted[0].0, Err("constraint violation".into()));
    assert!(
        node.reconcile(&sb).is_empty(),
        "not before the retry is due"
    );
    node.sync.wake(node.sync.wake_at().unwrap());
    let again = node.reconcile(&sb);
    assert_eq!(again[0].1, inserted[0].1, "the same insert again");
    update_binding(
        &mut sb,
        &mut node,
        json!({"insert": {"logical_port": "vpc-ext-external", "ip": "172.30.0.1",
            "mac": "02:00:00:00:00:09", "datapath": ["uuid", ROUTER], "timestamp": 1}}),
    );
    node.sync
        .finished(&sb, again[0].0, Err("constraint violation".into()));
    let updated = node.reconcile(&sb);
    assert_eq!(
        row(&updated[0].1),
        &json!({"mac": "02:00:00:00:00:01", "timestamp": NOW_MS})
    );
    assert_eq!(node.sync.stats().retries, 2);
}

/// A neighbour learned on a port (or router) gone meanwhile is forgotten unwritten; at most
/// `MAX_LEARNING` wait, one more new address is dropped and counted.
#[test]
fn learned_neighbours_are_bounded_and_forgotten_with_their_port() {
    let sb = southbound(json!({"logical_port": "pod.ns", "chassis": ["uuid", US], "up": true}));
    let mut node = Node::new(true, true);
    node.sync.learn(Learned {
        port: "gone".into(),
        ..learned("02:00:00:00:00:01", false)
    });
    assert!(node.reconcile(&sb).is_empty());
    assert_eq!(node.sync.learning(), 0);
    for index in 0..=MAX_LEARNING {
        node.sync.learn(Learned {
            ip: format!("10.{}.{}.1", index / 256, index % 256),
            ..learned("02:00:00:00:00:01", false)
        });
    }
    assert_eq!(node.sync.learning(), MAX_LEARNING);
    assert_eq!(node.sync.stats().learning_dropped, 1);
    // A waiting address learned again (another MAC) still gets through.
    node.sync.learn(Learned {
        ip: "10.0.0.1".into(),
        ..learned("02:00:00:00:00:02", false)
    });
    assert_eq!(node.sync.stats().learning_dropped, 1);
}

#[test]
fn the_gateway_chassis_claims_its_chassisredirect_port_up_and_releases_it_when_it_moves() {
    let mut sb = southbound(json!({"logical_port": "pod.ns", "up": false}));
    let mut node = Node::new(false, false);
    // Elected: claimed as a local port is, `up` with it (no veth to program).
    node.gateways.insert("pod.ns".into());
    node.sync.mark("pod.ns");
    let claimed = node.reconcile(&sb);
    assert_eq!(row(&claimed[0].1)["chassis"], json!(["uuid", US]));
    assert_eq!(row(&claimed[0].1)["up"], json!(true));
    node.modify(&mut sb, json!({"chassis": ["uuid", US], "up": true}));
    node.sync.finished(&sb, claimed[0].0, Ok(()));
    assert!(node.reconcile(&sb).is_empty(), "held: nothing to write");
    // Another chassis is elected: released.
    node.gateways.clear();
    node.sync.mark("pod.ns");
    let released = node.reconcile(&sb);
    assert_eq!(row(&released[0].1)["chassis"], json!(["set", []]));
    assert_eq!(row(&released[0].1)["up"], json!(false));
}
