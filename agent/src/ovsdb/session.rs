//! A monitoring session that survives failures: it connects to one of its remotes (rotating through
//! the list with exponential backoff), skips cluster members that are not connected to their
//! cluster, fetches the schema, monitors the requested tables with the best method the server has
//! (`monitor_cond_since` → `monitor_cond` → `monitor`), resumes from the last transaction id after
//! a reconnect, and streams [`SessionEvent`]s to its owner. Transactions and condition changes go
//! through a [`SessionHandle`]; the outcomes of tracked ones come in the event stream, in the
//! order the server sent them (after the updates they caused), and every tracked request gets
//! exactly one outcome, also when the connection is lost. Owns the connection; holds no replica
//! (see `replica`).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::{Value, json, value::RawValue};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use super::{
    OvsdbError,
    connection::{Caller, Connection, ConnectionOptions, Incoming, Notification},
    monitor_start::{check_cluster_member, check_database_row, start_monitor},
    raw::RawJson,
    remote::Remote,
    schema::DatabaseSchema,
};

/// How rows are encoded in an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateFormat {
    /// `update` / `monitor`: `{"old": …, "new": …}`.
    Update1,
    /// `update2` / `update3` / `monitor_cond*`: `initial`/`insert`/`modify`/`delete`.
    Update2,
}

/// Which monitoring method the server accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MonitorMethod {
    MonitorCondSince,
    MonitorCond,
    Monitor,
}

/// A table to monitor.
#[derive(Clone, Debug, PartialEq)]
pub struct MonitoredTable {
    pub name: String,
    /// Columns to monitor; `None` for all columns the server's schema has.
    pub columns: Option<Vec<String>>,
    /// An OVSDB `where` clause list (a JSON array of conditions); `None` for all rows.
    pub condition: Option<Value>,
}

impl MonitoredTable {
    #[must_use]
    pub fn all(name: &str) -> Self {
        Self {
            name: name.to_string(),
            columns: None,
            condition: None,
        }
    }
}

/// Session settings.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    pub remotes: Vec<Remote>,
    pub database: String,
    pub tables: Vec<MonitoredTable>,
    pub connection: ConnectionOptions,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl SessionConfig {
    #[must_use]
    pub fn new(remotes: Vec<Remote>, database: &str, tables: Vec<MonitoredTable>) -> Self {
        Self {
            remotes,
            database: database.to_string(),
            tables,
            connection: ConnectionOptions::default(),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(8),
        }
    }
}

/// What the session reports.
#[derive(Clone, Debug)]
pub enum SessionEvent {
    /// Monitoring (re)started. `updates` is the server's full view unless `resumed`, in which case
    /// it holds only what changed since the last transaction the replica has seen.
    Snapshot {
        remote: String,
        method: MonitorMethod,
        schema: Arc<DatabaseSchema>,
        /// Monitored tables and columns actually requested (those the server's schema has).
        monitored: BTreeMap<String, Vec<String>>,
        /// `<table-updates>` as the server sent them (the replica decodes them row by row).
        updates: RawJson,
        format: UpdateFormat,
        resumed: bool,
    },
    /// An incremental update.
    Update {
        updates: RawJson,
        format: UpdateFormat,
    },
    /// The connection was lost; the session is reconnecting.
    Disconnected { remote: String, reason: String },
    /// The outcome of a transaction submitted with [`SessionHandle::submit_tracked`]: its reply
    /// (the updates it caused came before), or why it has none (not sent, connection lost: it may
    /// or may not have committed; the next snapshot tells).
    Transacted {
        id: RequestId,
        result: Result<(), String>,
    },
    /// A condition change of [`SessionHandle::set_condition`] is in effect: the server replied to
    /// its `monitor_cond_change` (the rows it brings came before), or it was folded into a
    /// monitor start (the snapshot came before), or it failed (logged; the next monitor start
    /// applies it).
    ConditionChanged { id: RequestId },
}

/// Names a tracked request in [`SessionEvent::Transacted`] and
/// [`SessionEvent::ConditionChanged`].
pub type RequestId = u64;

enum Command {
    Transact {
        operations: Vec<Value>,
        reply: oneshot::Sender<Result<Value, OvsdbError>>,
    },
    TransactTracked {
        id: RequestId,
        operations: Vec<Value>,
    },
    SetCondition {
        id: RequestId,
        table: String,
        condition: Option<Value>,
    },
}

/// A request whose reply comes in the connection's message stream.
enum Tracked {
    Transaction(RequestId),
    Condition(RequestId, String),
}

/// The owner's side of a running session.
#[derive(Clone)]
pub struct SessionHandle {
    commands: mpsc::UnboundedSender<Command>,
    next_id: Arc<AtomicU64>,
}

impl SessionHandle {
    /// Runs a transaction (`operations` as in RFC 7047 §5.2) on the current connection and returns
    /// the per-operation results. Fails if any operation failed (the reply's error objects are in
    /// the message) or the session is disconnected.
    pub async fn transact(&self, operations: Vec<Value>) -> Result<Vec<Value>, OvsdbError> {
        self.submit(operations).await
    }

    /// Like [`Self::transact`], but the transaction is queued at once, in call order, and the
    /// returned future only waits for its outcome (so a caller can submit without waiting).
    pub fn submit(
        &self,
        operations: Vec<Value>,
    ) -> impl std::future::Future<Output = Result<Vec<Value>, OvsdbError>> + Send + 'static {
        let (reply, result) = oneshot::channel();
        let queued = self
            .commands
            .send(Command::Transact { operations, reply })
            .map_err(|_| OvsdbError::SessionEnded);
        async move {
            queued?;
            transaction_outcome(result.await.map_err(|_| OvsdbError::SessionEnded)??)
        }
    }
}

/// A transaction's per-operation results, or the errors among them.
fn transaction_outcome(value: Value) -> Result<Vec<Value>, OvsdbError> {
    let results = value
        .as_array()
        .cloned()
        .ok_or_else(|| OvsdbError::Protocol(format!("transact result {value}")))?;
    let failures: Vec<&Value> = results
        .iter()
        .filter(|r| r.get("error").is_some())
        .collect();
    if !failures.is_empty() {
        return Err(OvsdbError::Transaction(
            failures
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        ));
    }
    Ok(results)
}

impl SessionHandle {
    /// Replaces the `where` condition of a monitored table (`None` = all rows). Applied with
    /// `monitor_cond_change` when connected, and remembered for every later reconnect. Returns
    /// the id its [`SessionEvent::ConditionChanged`] will carry.
    pub fn set_condition(
        &self,
        table: &str,
        condition: Option<Value>,
    ) -> Result<RequestId, OvsdbError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.commands
            .send(Command::SetCondition {
                id,
                table: table.to_string(),
                condition,
            })
            .map_err(|_| OvsdbError::SessionEnded)?;
        Ok(id)
    }

    /// Queues a transaction (in call order) whose outcome comes as [`SessionEvent::Transacted`]
    /// with the returned id, in the event stream after the updates it caused.
    pub fn submit_tracked(&self, operations: Vec<Value>) -> Result<RequestId, OvsdbError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.commands
            .send(Command::TransactTracked { id, operations })
            .map_err(|_| OvsdbError::SessionEnded)?;
        Ok(id)
    }
}

/// Starts the session on the current tokio runtime. Events arrive on the returned receiver; the
/// session ends when both the handle and the receiver are dropped.
pub fn start(config: SessionConfig) -> (SessionHandle, mpsc::UnboundedReceiver<SessionEvent>) {
    let (commands, command_rx) = mpsc::unbounded_channel();
    let (events, event_rx) = mpsc::unbounded_channel();
    tokio::spawn(run(config, command_rx, events));
    let handle = SessionHandle {
        commands,
        next_id: Arc::new(AtomicU64::new(1)),
    };
    (handle, event_rx)
}

pub(super) const MONITOR_ID: &str = "ovnbpf";
pub(super) const SERVER_MONITOR_ID: &str = "ovnbpf-server";

/// What a session keeps across its connections.
pub(super) struct State {
    pub(super) config: SessionConfig,
    pub(super) conditions: BTreeMap<String, Option<Value>>,
    pub(super) last_txn_id: Option<String>,
    pub(super) schema: Option<Arc<DatabaseSchema>>,
    /// Condition changes made while disconnected: in effect with the next snapshot.
    folded_conditions: Vec<RequestId>,
}

enum Ended {
    /// The owner went away.
    Shutdown,
    Failed(String),
}

async fn run(
    config: SessionConfig,
    mut commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::UnboundedSender<SessionEvent>,
) {
    let conditions = config
        .tables
        .iter()
        .map(|t| (t.name.clone(), t.condition.clone()))
        .collect();
    let mut state = State {
        config,
        conditions,
        last_txn_id: None,
        schema: None,
        folded_conditions: Vec::new(),
    };
    let mut backoff = state.config.backoff_min;
    let mut next_remote = 0;
    loop {
        if state.config.remotes.is_empty() {
            warn!("ovsdb session has no remotes");
            return;
        }
        let remote = state.config.remotes[next_remote % state.config.remotes.len()].clone();
        next_remote += 1;
        let outcome = match Connection::connect(&remote, &state.config.connection).await {
            Ok(connection) => {
                let was_monitoring = serve(&mut state, connection, &mut commands, &events).await;
                if was_monitoring.0 {
                    backoff = state.config.backoff_min;
                }
                was_monitoring.1
            }
            Err(error) => Ended::Failed(error.to_string()),
        };
        match outcome {
            Ended::Shutdown => return,
            Ended::Failed(reason) => {
                debug!(%remote, %reason, "ovsdb session lost its server");
                let event = SessionEvent::Disconnected {
                    remote: remote.to_string(),
                    reason,
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        }
        // Fail pending commands while disconnected rather than letting callers hang.
        let sleep = tokio::time::sleep(backoff);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => break,
                command = commands.recv() => match command {
                    None if events.is_closed() => return,
                    None => {}
                    Some(command) => {
                        if let Some(event) = reject_while_disconnected(command, &mut state)
                            && events.send(event).is_err()
                        {
                            return;
                        }
                    }
                },
            }
        }
        backoff = (backoff * 2).min(state.config.backoff_max);
    }
}

/// Answers what cannot be sent while disconnected; returns the event that tells the owner.
fn reject_while_disconnected(command: Command, state: &mut State) -> Option<SessionEvent> {
    const RECONNECTING: &str = "the session is reconnecting";
    match command {
        Command::Transact { reply, .. } => {
            let _ = reply.send(Err(OvsdbError::Disconnected(RECONNECTING.into())));
            None
        }
        Command::TransactTracked { id, .. } => Some(SessionEvent::Transacted {
            id,
            result: Err(format!("not sent: {RECONNECTING}")),
        }),
        Command::SetCondition {
            id,
            table,
            condition,
        } => {
            state.conditions.insert(table, condition);
            state.folded_conditions.push(id);
            None
        }
    }
}

/// Serves one connection until it fails. Returns (whether monitoring was established, why it ended).
async fn serve(
    state: &mut State,
    mut connection: Connection,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    events: &mpsc::UnboundedSender<SessionEvent>,
) -> (bool, Ended) {
    let remote = connection.remote().to_string();
    if let Err(reason) = check_cluster_member(&connection, &state.config.database).await {
        return (false, Ended::Failed(reason));
    }
    let snapshot = match start_monitor(state, &connection).await {
        Ok(snapshot) => snapshot,
        Err(error) => return (false, Ended::Failed(error.to_string())),
    };
    let SessionEvent::Snapshot {
        method,
        resumed,
        format,
        ..
    } = &snapshot
    else {
        return (
            false,
            Ended::Failed("internal: monitor start produced no snapshot".into()),
        );
    };
    info!(%remote, ?method, resumed, "ovsdb monitor established");
    let format = *format;
    if events.send(snapshot).is_err() {
        return (true, Ended::Shutdown);
    }
    for id in std::mem::take(&mut state.folded_conditions) {
        if events.send(SessionEvent::ConditionChanged { id }).is_err() {
            return (true, Ended::Shutdown);
        }
    }
    let mut tracked = HashMap::new();
    let ended = follow(
        state,
        &mut connection,
        commands,
        events,
        format,
        &mut tracked,
    )
    .await;
    // Requests whose replies the connection will not deliver any more.
    for (_, request) in tracked {
        let _ = events.send(lost(request, "the connection ended before its reply"));
    }
    (true, ended)
}

/// The event that ends a tracked request without a reply.
fn lost(request: Tracked, reason: &str) -> SessionEvent {
    match request {
        Tracked::Transaction(id) => SessionEvent::Transacted {
            id,
            result: Err(reason.to_string()),
        },
        Tracked::Condition(id, _) => SessionEvent::ConditionChanged { id },
    }
}

/// Streams one established monitor's messages to the owner and sends its commands, until the
/// connection fails or the owner goes.
async fn follow(
    state: &mut State,
    connection: &mut Connection,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    events: &mpsc::UnboundedSender<SessionEvent>,
    format: UpdateFormat,
    tracked: &mut HashMap<u64, Tracked>,
) -> Ended {
    let caller = connection.caller();
    loop {
        tokio::select! {
            message = connection.next_message() => {
                let event = match message {
                    None => {
                        let reason = connection.failure().unwrap_or_else(|| "connection closed".into());
                        return Ended::Failed(reason);
                    }
                    Some(Incoming::Notification(notification)) => {
                        match handle_notification(state, notification, format) {
                            Ok(event) => event,
                            Err(reason) => return Ended::Failed(reason),
                        }
                    }
                    Some(Incoming::Reply { id, result }) => {
                        tracked.remove(&id).map(|request| reply_event(request, result))
                    }
                };
                if let Some(event) = event
                    && events.send(event).is_err()
                {
                    return Ended::Shutdown;
                }
            }
            command = commands.recv() => match command {
                None if events.is_closed() => return Ended::Shutdown,
                None => {}
                Some(Command::Transact { operations, reply }) => {
                    let mut params = vec![json!(state.config.database)];
                    params.extend(operations);
                    // Sent now, in order; only the wait is spawned.
                    let outcome = caller.send("transact", Value::Array(params));
                    tokio::spawn(async move {
                        let _ = reply.send(outcome.await);
                    });
                }
                Some(Command::TransactTracked { id, operations }) => {
                    let mut params = vec![json!(state.config.database)];
                    params.extend(operations);
                    match caller.send_in_stream("transact", Value::Array(params)) {
                        Ok(call) => {
                            tracked.insert(call, Tracked::Transaction(id));
                        }
                        Err(error) => {
                            let event = lost(Tracked::Transaction(id), &error.to_string());
                            if events.send(event).is_err() {
                                return Ended::Shutdown;
                            }
                        }
                    }
                }
                Some(Command::SetCondition { id, table, condition }) => {
                    match change_condition(state, &caller, table.clone(), condition) {
                        Ok(call) => {
                            tracked.insert(call, Tracked::Condition(id, table));
                        }
                        Err(error) => {
                            warn!(%table, %error, "monitor_cond_change not sent");
                            if events.send(SessionEvent::ConditionChanged { id }).is_err() {
                                return Ended::Shutdown;
                            }
                        }
                    }
                }
            },
        }
    }
}

/// The event for a tracked request's reply.
fn reply_event(request: Tracked, result: Result<Value, OvsdbError>) -> SessionEvent {
    match request {
        Tracked::Transaction(id) => SessionEvent::Transacted {
            id,
            result: result
                .and_then(transaction_outcome)
                .map(drop)
                .map_err(|error| error.to_string()),
        },
        Tracked::Condition(id, table) => {
            if let Err(error) = result {
                warn!(%table, %error, "monitor_cond_change failed");
            }
            SessionEvent::ConditionChanged { id }
        }
    }
}

fn handle_notification(
    state: &mut State,
    notification: Notification,
    format: UpdateFormat,
) -> Result<Option<SessionEvent>, String> {
    let method = notification.method.as_str();
    // The parameters' text, not a tree of it: an update can be as large as the snapshot.
    let Ok(params) = notification.params.parse::<Vec<&RawValue>>() else {
        debug!(%method, "ignoring ovsdb notification without a parameter list");
        return Ok(None);
    };
    let monitor = params
        .first()
        .and_then(|id| serde_json::from_str::<String>(id.get()).ok());
    let ours = monitor.as_deref() == Some(MONITOR_ID);
    debug!(%method, ours, bytes = notification.params.text().len(), "ovsdb notification received");
    let updates_at = |index: usize| {
        params
            .get(index)
            .and_then(|updates| notification.params.part(updates))
            .ok_or_else(|| format!("malformed {method} with {} params", params.len()))
    };
    match method {
        "update3" if ours => {
            let updates = updates_at(2)?;
            if let Some(txn) = params
                .get(1)
                .and_then(|txn| serde_json::from_str::<String>(txn.get()).ok())
            {
                state.last_txn_id = Some(txn);
            }
            Ok(Some(SessionEvent::Update {
                updates,
                format: UpdateFormat::Update2,
            }))
        }
        "update2" | "update" if ours => Ok(Some(SessionEvent::Update {
            updates: updates_at(1)?,
            format,
        })),
        "monitor_canceled" if ours => Err("the server canceled the monitor".into()),
        "update" if monitor.as_deref() == Some(SERVER_MONITOR_ID) => {
            let database = &state.config.database;
            let updates = params
                .get(1)
                .and_then(|updates| serde_json::from_str::<Value>(updates.get()).ok());
            let rows = updates
                .as_ref()
                .and_then(|u| u.get("Database"))
                .and_then(Value::as_object);
            for row in rows
                .into_iter()
                .flat_map(|rows| rows.values())
                .filter_map(|u| u.get("new"))
            {
                if row.get("name").and_then(Value::as_str) == Some(database.as_str()) {
                    check_database_row(row)?;
                }
            }
            Ok(None)
        }
        method => {
            debug!(%method, "ignoring ovsdb notification");
            Ok(None)
        }
    }
}

/// Sends a `monitor_cond_change`; its reply comes in the connection's stream.
fn change_condition(
    state: &mut State,
    caller: &Caller,
    table: String,
    condition: Option<Value>,
) -> Result<u64, OvsdbError> {
    state.conditions.insert(table.clone(), condition.clone());
    let clause = condition.unwrap_or_else(|| json!([true]));
    let params = json!([MONITOR_ID, MONITOR_ID, {table: [{"where": clause}]}]);
    caller.send_in_stream("monitor_cond_change", params)
}

/// A handle whose requests are recorded instead of sent, for tests of its owners.
#[cfg(test)]
pub(crate) fn recording_handle() -> (SessionHandle, Recorder) {
    let (commands, receiver) = mpsc::unbounded_channel();
    let handle = SessionHandle {
        commands,
        next_id: Arc::new(AtomicU64::new(1)),
    };
    (handle, Recorder(receiver))
}

/// The requests a [`recording_handle`] received.
#[cfg(test)]
pub(crate) struct Recorder(mpsc::UnboundedReceiver<Command>);

#[cfg(test)]
impl Recorder {
    /// The tracked transactions submitted since the last call.
    pub(crate) fn transactions(&mut self) -> Vec<(RequestId, Vec<Value>)> {
        let mut submitted = Vec::new();
        while let Ok(command) = self.0.try_recv() {
            if let Command::TransactTracked { id, operations } = command {
                submitted.push((id, operations));
            }
        }
        submitted
    }
}
