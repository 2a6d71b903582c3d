//! The OVSDB session against a scripted server on a unix socket: method fallback, resume, bad
//! input of every kind (garbage, truncated JSON, wrong types, unknown requests), the order of
//! tracked requests' outcomes in the event stream, and the inactivity probe. Needs no root and
//! no OVS; the real-server tests live in tests/.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use ovnbpf_agent::ovsdb::{
    remote::Remote,
    replica::Replica,
    session::{self, MonitorMethod, MonitoredTable, SessionConfig, SessionEvent, UpdateFormat},
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{UnixListener, UnixStream},
    sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel},
};

const U1: &str = "11111111-1111-4111-8111-111111111111";
const U2: &str = "22222222-2222-4222-8222-222222222222";

fn schema() -> Value {
    json!({"name": "Test", "version": "1.0.0", "tables": {"T": {"columns": {
        "name": {"type": "string"},
        "key": {"type": "integer"},
        "ref": {"type": {"key": "uuid", "min": 0, "max": 1}}
    }}}})
}

/// How the scripted server answers one request.
enum Answer {
    Result(Value),
    Error(&'static str),
    Silence,
}

type Script = Arc<dyn Fn(usize, &str, &Value) -> Answer + Send + Sync>;

/// What the server saw from the client: requests (method, params) and replies to its own requests.
#[derive(Default)]
struct Seen {
    requests: Vec<(String, Value)>,
    /// The request id of each request, by method.
    ids: Vec<(String, Value)>,
    replies: Vec<Value>,
}

struct FakeServer {
    push: UnboundedSender<Vec<u8>>,
    seen: Arc<Mutex<Seen>>,
}

impl FakeServer {
    /// Sends raw bytes to the latest client connection.
    fn push(&self, bytes: &[u8]) {
        self.push.send(bytes.to_vec()).unwrap();
    }

    fn push_json(&self, value: Value) {
        self.push(value.to_string().as_bytes());
    }
}

/// Serves connections on `path`; `script(connection_index, method, params)` decides each answer.
fn serve(path: &Path, script: Script) -> FakeServer {
    let listener = UnixListener::bind(path).unwrap();
    let (push, mut pushed) = unbounded_channel::<Vec<u8>>();
    let latest: Arc<Mutex<Option<UnboundedSender<Vec<u8>>>>> = Arc::default();
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let forward = latest.clone();
    tokio::spawn(async move {
        while let Some(bytes) = pushed.recv().await {
            if let Some(sender) = forward.lock().unwrap().as_ref() {
                let _ = sender.send(bytes);
            }
        }
    });
    let seen_by_connections = seen.clone();
    tokio::spawn(async move {
        let mut index = 0;
        while let Ok((stream, _)) = listener.accept().await {
            let (tx, rx) = unbounded_channel();
            *latest.lock().unwrap() = Some(tx);
            let context = (index, script.clone(), seen_by_connections.clone());
            tokio::spawn(connection(stream, context, rx));
            index += 1;
        }
    });
    FakeServer { push, seen }
}

async fn connection(
    stream: UnixStream,
    (index, script, seen): (usize, Script, Arc<Mutex<Seen>>),
    mut pushed: UnboundedReceiver<Vec<u8>>,
) {
    let (mut reader, mut writer) = stream.into_split();
    let mut buffer = Vec::new();
    let mut chunk = [0_u8; 4096];
    loop {
        tokio::select! {
            bytes = pushed.recv() => match bytes {
                Some(bytes) => if writer.write_all(&bytes).await.is_err() { return },
                None => return,
            },
            read = reader.read(&mut chunk) => {
                let Ok(count) = read else { return };
                if count == 0 { return }
                buffer.extend_from_slice(&chunk[..count]);
                let mut stream = serde_json::Deserializer::from_slice(&buffer).into_iter::<Value>();
                let mut consumed = 0;
                let mut messages = Vec::new();
                while let Some(Ok(value)) = stream.next() {
                    consumed = stream.byte_offset();
                    messages.push(value);
                }
                buffer.drain(..consumed);
                for message in messages {
                    let Some(method) = message["method"].as_str() else {
                        seen.lock().unwrap().replies.push(message);
                        continue;
                    };
                    seen.lock().unwrap().requests.push((method.to_string(), message["params"].clone()));
                    seen.lock().unwrap().ids.push((method.to_string(), message["id"].clone()));
                    let id = message["id"].clone();
                    let reply = match script(index, method, &message["params"]) {
                        Answer::Result(result) => json!({"id": id, "result": result, "error": null}),
                        Answer::Error(error) => json!({"id": id, "result": null, "error": error}),
                        Answer::Silence => continue,
                    };
                    if writer.write_all(reply.to_string().as_bytes()).await.is_err() { return }
                }
            }
        }
    }
}

fn row(name: &str, key: i64) -> Value {
    json!({"initial": {"name": name, "key": key}})
}

fn start(
    path: &Path,
    probe: Option<Duration>,
) -> (session::SessionHandle, UnboundedReceiver<SessionEvent>) {
    let remote = Remote::Unix(path.to_path_buf());
    let mut config = SessionConfig::new(vec![remote], "Test", vec![MonitoredTable::all("T")]);
    config.backoff_min = Duration::from_millis(10);
    config.backoff_max = Duration::from_millis(50);
    config.connection.probe_interval = probe;
    session::start(config)
}

async fn next(events: &mut UnboundedReceiver<SessionEvent>) -> SessionEvent {
    tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .expect("no event in 5 s")
        .expect("session ended")
}

fn socket() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sock");
    (dir, path)
}

/// A server that knows only `get_schema` and `monitor_cond_since` (answered with `initial`).
fn simple_server(path: &Path, initial: Value) -> FakeServer {
    serve(
        path,
        Arc::new(move |_, method, _| match method {
            "get_schema" => Answer::Result(schema()),
            "monitor_cond_since" => Answer::Result(json!([false, "t", initial.clone()])),
            _ => Answer::Error("unknown method"),
        }),
    )
}

#[tokio::test]
async fn falls_back_to_monitor_cond_and_applies_update2() {
    let (_dir, path) = socket();
    let server = serve(
        &path,
        Arc::new(|_, method, _| match method {
            "get_schema" => Answer::Result(schema()),
            "monitor_cond" => Answer::Result(json!({"T": {U1: row("a", 1)}})),
            _ => Answer::Error("unknown method"),
        }),
    );
    let (_handle, mut events) = start(&path, None);
    let mut replica = Replica::new();
    let snapshot = next(&mut events).await;
    assert!(
        matches!(
            snapshot,
            SessionEvent::Snapshot {
                method: MonitorMethod::MonitorCond,
                format: UpdateFormat::Update2,
                resumed: false,
                ..
            }
        ),
        "{snapshot:?}"
    );
    let changes = replica.apply(&snapshot);
    assert_eq!(changes.table("T").unwrap().inserted.len(), 1);
    server.push_json(json!({"id": null, "method": "update2",
        "params": ["ovnbpf", {"T": {U1: {"modify": {"key": 2, "ref": ["uuid", U2]}}}}]}));
    let changes = replica.apply(&next(&mut events).await);
    assert_eq!(changes.table("T").unwrap().modified.len(), 1);
    let row = replica
        .table("T")
        .unwrap()
        .row(&U1.parse().unwrap())
        .unwrap();
    assert_eq!(
        row.get("key").unwrap().single().unwrap().as_integer(),
        Some(2)
    );
    assert_eq!(
        row.get("ref").unwrap().single().unwrap().as_uuid(),
        Some(U2.parse().unwrap())
    );
}

#[tokio::test]
async fn falls_back_to_plain_monitor_with_update1_rows() {
    let (_dir, path) = socket();
    let server = serve(
        &path,
        Arc::new(|_, method, params| match method {
            "get_schema" => Answer::Result(schema()),
            "monitor" if params[0] == "Test" => Answer::Result(
                json!({"T": {U1: {"new": {"name": "a", "key": 1, "ref": ["set", []]}}}}),
            ),
            _ => Answer::Error("unknown method"),
        }),
    );
    let (_handle, mut events) = start(&path, None);
    let mut replica = Replica::new();
    let snapshot = next(&mut events).await;
    assert!(matches!(
        snapshot,
        SessionEvent::Snapshot {
            method: MonitorMethod::Monitor,
            format: UpdateFormat::Update1,
            ..
        }
    ));
    replica.apply(&snapshot);
    server.push_json(json!({"id": null, "method": "update",
        "params": ["ovnbpf", {"T": {U1: {"old": {"name": "a"}}}}]}));
    let changes = replica.apply(&next(&mut events).await);
    assert_eq!(changes.table("T").unwrap().deleted.len(), 1);
    assert!(replica.table("T").unwrap().is_empty());
}

#[tokio::test]
async fn resumes_from_the_last_transaction_when_the_server_has_the_history() {
    let (_dir, path) = socket();
    let server = serve(
        &path,
        Arc::new(|connection, method, params| match method {
            "get_schema" => Answer::Result(schema()),
            "monitor_cond_since" if connection == 0 => {
                Answer::Result(json!([false, "txn-1", {"T": {U1: row("a", 1)}}]))
            }
            // The client must ask for what follows the last transaction it saw (txn-2, from update3).
            "monitor_cond_since" if params[3] == "txn-2" => Answer::Result(
                json!([true, "txn-3", {"T": {U2: {"insert": {"name": "b", "key": 2}}}}]),
            ),
            "monitor_cond_since" => Answer::Result(json!([false, "txn-9", {}])),
            _ => Answer::Error("unknown method"),
        }),
    );
    let (_handle, mut events) = start(&path, None);
    let mut replica = Replica::new();
    replica.apply(&next(&mut events).await);
    server.push_json(json!({"id": null, "method": "update3",
        "params": ["ovnbpf", "txn-2", {"T": {U1: {"modify": {"key": 5}}}}]}));
    replica.apply(&next(&mut events).await);
    // Break the connection with garbage; the session reconnects and resumes.
    server.push(b"not json");
    let SessionEvent::Disconnected { reason, .. } = next(&mut events).await else {
        panic!("expected a disconnect")
    };
    assert!(reason.contains("framing"), "{reason}");
    let snapshot = next(&mut events).await;
    assert!(
        matches!(snapshot, SessionEvent::Snapshot { resumed: true, .. }),
        "{snapshot:?}"
    );
    let changes = replica.apply(&snapshot);
    assert!(!changes.resynced);
    assert_eq!(changes.table("T").unwrap().inserted.len(), 1);
    let table = replica.table("T").unwrap();
    assert_eq!(table.len(), 2);
    let key = table
        .row(&U1.parse().unwrap())
        .unwrap()
        .get("key")
        .unwrap()
        .single();
    assert_eq!(key.and_then(|k| k.as_integer()), Some(5));
}

#[tokio::test]
async fn bad_input_ends_the_connection_never_the_process() {
    let cases: [(&str, &[u8]); 5] = [
        (
            "truncated JSON",
            b"{\"id\": null, \"method\": \"update2\", \"params\": [\"ovnbpf\", {\"T\"]]]",
        ),
        ("not an object", b"[1, 2, 3]"),
        ("invalid UTF-8", b"{\"id\": null, \"method\": \"\xff\xfe\"}"),
        ("neither request nor reply", b"{\"foo\": 1}"),
        (
            "wrong update3 arity",
            b"{\"id\": null, \"method\": \"update3\", \"params\": [\"ovnbpf\"]}",
        ),
    ];
    for (what, raw) in cases {
        let (_dir, path) = socket();
        let server = simple_server(&path, json!({"T": {U1: row("a", 1)}}));
        let (_handle, mut events) = start(&path, None);
        next(&mut events).await;
        server.push(raw);
        match next(&mut events).await {
            SessionEvent::Disconnected { reason, .. } => println!("{what}: {reason}"),
            other => panic!("{what}: expected a disconnect, got {other:?}"),
        }
        // And the session comes back.
        assert!(
            matches!(next(&mut events).await, SessionEvent::Snapshot { .. }),
            "{what}"
        );
    }
}

#[tokio::test]
async fn malformed_rows_are_rejected_one_by_one() {
    let (_dir, path) = socket();
    let _server = simple_server(
        &path,
        json!({"T": {
            U1: row("good", 1),
            U2: {"initial": {"name": "bad", "key": "not a number"}},
            "not-a-uuid": row("x", 3),
        }, "Unknown": {U1: row("y", 4)}}),
    );
    let (_handle, mut events) = start(&path, None);
    let mut replica = Replica::new();
    let changes = replica.apply(&next(&mut events).await);
    assert_eq!(changes.rejected.len(), 2, "{:?}", changes.rejected);
    assert!(
        changes.rejected.iter().any(|r| r.contains("key")),
        "{:?}",
        changes.rejected
    );
    assert_eq!(replica.table("T").unwrap().len(), 1);
}

#[tokio::test]
async fn server_requests_are_answered_and_transactions_reported() {
    let (_dir, path) = socket();
    let server = serve(
        &path,
        Arc::new(|_, method, _| match method {
            "get_schema" => Answer::Result(schema()),
            "monitor_cond_since" => Answer::Result(json!([false, "t", {}])),
            "transact" => Answer::Result(
                json!([{"uuid": ["uuid", U1]}, {"error": "constraint violation", "details": "dup"}]),
            ),
            _ => Answer::Error("unknown method"),
        }),
    );
    let (handle, mut events) = start(&path, None);
    next(&mut events).await;
    server.push_json(json!({"id": "e1", "method": "echo", "params": ["hello"]}));
    server.push_json(json!({"id": "x1", "method": "frobnicate", "params": []}));
    let error = handle
        .transact(vec![json!({"op": "insert", "table": "T", "row": {}})])
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("constraint violation"),
        "{error}"
    );
    let seen = server.seen.lock().unwrap();
    assert!(
        seen.replies
            .contains(&json!({"id": "e1", "result": ["hello"], "error": null})),
        "{:?}",
        seen.replies
    );
    assert!(
        seen.replies
            .iter()
            .any(|r| r["id"] == "x1" && !r["error"].is_null()),
        "{:?}",
        seen.replies
    );
    let transact = seen
        .requests
        .iter()
        .find(|(m, _)| m == "transact")
        .expect("transact sent");
    assert_eq!(transact.1[0], "Test");
    drop(seen);
    // Still connected: no Disconnected event.
    assert!(events.try_recv().is_err());
}

#[tokio::test]
async fn a_silent_server_is_dropped_by_the_inactivity_probe() {
    let (_dir, path) = socket();
    let server = serve(
        &path,
        Arc::new(|_, method, _| match method {
            "get_schema" => Answer::Result(schema()),
            "monitor_cond_since" => Answer::Result(json!([false, "t", {}])),
            "echo" => Answer::Silence,
            _ => Answer::Error("unknown method"),
        }),
    );
    let (_handle, mut events) = start(&path, Some(Duration::from_millis(100)));
    next(&mut events).await;
    let SessionEvent::Disconnected { reason, .. } = next(&mut events).await else {
        panic!("expected a disconnect")
    };
    assert!(reason.contains("inactivity probe"), "{reason}");
    let seen = server.seen.lock().unwrap();
    assert!(seen.requests.iter().any(|(method, _)| method == "echo"));
}

#[tokio::test]
async fn a_cluster_member_cut_off_from_its_cluster_is_skipped_and_left() {
    let dir = tempfile::tempdir().unwrap();
    let cut_off = dir.path().join("a.sock");
    let healthy = dir.path().join("b.sock");
    let database_row = |connected: bool| json!({"Database": {U1: {"new": {"name": "Test", "model": "clustered", "connected": connected, "leader": false}}}});
    serve(
        &cut_off,
        Arc::new(move |_, method, params| match method {
            "monitor" if params[0] == "_Server" => Answer::Result(database_row(false)),
            "get_schema" => Answer::Result(schema()),
            "monitor_cond_since" => Answer::Result(json!([false, "t", {}])),
            _ => Answer::Error("unknown method"),
        }),
    );
    let server = serve(
        &healthy,
        Arc::new(move |_, method, params| match method {
            "monitor" if params[0] == "_Server" => Answer::Result(database_row(true)),
            "get_schema" => Answer::Result(schema()),
            "monitor_cond_since" => Answer::Result(json!([false, "t", {}])),
            _ => Answer::Error("unknown method"),
        }),
    );
    let remotes = vec![Remote::Unix(cut_off.clone()), Remote::Unix(healthy.clone())];
    let mut config = SessionConfig::new(remotes, "Test", vec![MonitoredTable::all("T")]);
    config.backoff_min = Duration::from_millis(10);
    let (_handle, mut events) = session::start(config);
    let SessionEvent::Disconnected { reason, .. } = next(&mut events).await else {
        panic!("expected a refusal")
    };
    assert!(reason.contains("not connected to its cluster"), "{reason}");
    let SessionEvent::Snapshot { remote, .. } = next(&mut events).await else {
        panic!("expected a snapshot")
    };
    assert_eq!(remote, format!("unix:{}", healthy.display()));
    // When the member later loses its cluster, the client leaves it.
    server.push_json(
        json!({"id": null, "method": "update", "params": ["ovnbpf-server", database_row(false)]}),
    );
    let SessionEvent::Disconnected { reason, .. } = next(&mut events).await else {
        panic!("expected a disconnect")
    };
    assert!(reason.contains("not connected to its cluster"), "{reason}");
}

/// The id of the `nth` (from 0) request of `method` the server saw, once it did.
async fn request_id(server: &FakeServer, method: &str, nth: usize) -> Value {
    for _ in 0..250 {
        if let Some((_, id)) = server
            .seen
            .lock()
            .unwrap()
            .ids
            .iter()
            .filter(|(m, _)| m == method)
            .nth(nth)
        {
            return id.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no {method} request")
}

#[tokio::test]
async fn tracked_requests_end_in_the_event_stream_after_what_the_server_sent_before() {
    let (_dir, path) = socket();
    let server = serve(
        &path,
        Arc::new(|_, method, _| match method {
            "get_schema" => Answer::Result(schema()),
            "monitor_cond_since" => Answer::Result(json!([false, "t", {}])),
            // Answered by the test, after an update.
            "transact" | "monitor_cond_change" => Answer::Silence,
            _ => Answer::Error("unknown method"),
        }),
    );
    let (handle, mut events) = start(&path, None);
    next(&mut events).await;

    // A transaction's update comes before its reply: so do their events.
    let txn = handle
        .submit_tracked(vec![
            json!({"op": "insert", "table": "T", "row": {"name": "a"}}),
        ])
        .unwrap();
    let id = request_id(&server, "transact", 0).await;
    server.push_json(json!({"id": null, "method": "update3",
        "params": ["ovnbpf", "txn-9", {"T": {U1: {"insert": {"name": "a", "key": 1}}}}]}));
    server.push_json(json!({"id": id, "result": [{"uuid": ["uuid", U1]}], "error": null}));
    assert!(matches!(
        next(&mut events).await,
        SessionEvent::Update { .. }
    ));
    let SessionEvent::Transacted { id: done, result } = next(&mut events).await else {
        panic!("expected the transaction's outcome")
    };
    assert_eq!((done, result), (txn, Ok(())));

    // Same for a condition change: its rows, then its reply.
    let change = handle
        .set_condition("T", Some(json!([["key", "==", 2]])))
        .unwrap();
    let id = request_id(&server, "monitor_cond_change", 0).await;
    server.push_json(json!({"id": null, "method": "update3",
        "params": ["ovnbpf", "txn-10", {"T": {U2: {"insert": {"name": "b", "key": 2}}}}]}));
    server.push_json(json!({"id": id, "result": {}, "error": null}));
    assert!(matches!(
        next(&mut events).await,
        SessionEvent::Update { .. }
    ));
    assert!(matches!(
        next(&mut events).await,
        SessionEvent::ConditionChanged { id } if id == change
    ));

    // A transaction without reply when the connection is lost ends with an error, before the
    // disconnection.
    let lost = handle
        .submit_tracked(vec![json!({"op": "delete", "table": "T", "where": []})])
        .unwrap();
    let _ = request_id(&server, "transact", 1).await;
    server.push(b"]");
    let SessionEvent::Transacted { id, result } = next(&mut events).await else {
        panic!("expected the lost transaction's outcome")
    };
    assert_eq!(id, lost);
    assert!(result.is_err());
    assert!(matches!(
        next(&mut events).await,
        SessionEvent::Disconnected { .. }
    ));
}
