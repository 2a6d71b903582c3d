//! One JSON-RPC 1.0 connection to an OVSDB server: a reader task that splits the stream into
//! messages, answers the server's `echo` requests, routes replies to their callers and hands
//! notifications (update/update2/update3, …) to the owner, with the replies to calls made
//! [`Caller::send_in_stream`] in the order the server sent them; a writer task; an inactivity
//! probe.
//! The connection never reconnects (see `session`); when it fails, every pending call and the
//! notification stream end with the reason.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    sync::{mpsc, oneshot},
    task::JoinHandle,
};
use tracing::{debug, warn};

use serde_json::value::RawValue;

use super::{
    OvsdbError,
    framing::Decoder,
    raw::{RawJson, for_each_member},
    remote::Remote,
    tls::TlsClient,
};

/// Who waits for a reply: a caller, or the owner's message stream ([`Incoming::Reply`]).
enum Waiter {
    Caller(oneshot::Sender<Result<RawJson, OvsdbError>>),
    InStream,
}

type Pending = Arc<Mutex<HashMap<u64, Waiter>>>;

/// What the owner reads, in the order the server sent it.
#[derive(Debug)]
pub enum Incoming {
    Notification(Notification),
    /// The reply to a call made with [`Caller::send_in_stream`] (a lost connection answers every
    /// such call with an error before the stream ends).
    Reply {
        id: u64,
        result: Result<Value, OvsdbError>,
    },
}

/// A server-initiated message without an id (or one we do not answer ourselves).
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    pub method: String,
    /// As sent: an update's parameters are as large as its rows, so they are decoded where they
    /// are read (see `raw`).
    pub params: RawJson,
}

/// Connection settings.
#[derive(Clone, Debug)]
pub struct ConnectionOptions {
    /// Send an echo after this long without any message; give up after twice this long.
    /// `None` disables the probe (ovn-controller's default is 60 s for the SB).
    pub probe_interval: Option<Duration>,
    pub connect_timeout: Duration,
    /// TLS settings for `ssl:` remotes.
    pub tls: Option<Arc<TlsClient>>,
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        Self {
            probe_interval: Some(Duration::from_secs(60)),
            connect_timeout: Duration::from_secs(5),
            tls: None,
        }
    }
}

/// The request side of a connection; cheap to clone, usable from any task.
#[derive(Clone)]
pub struct Caller {
    outgoing: mpsc::UnboundedSender<Vec<u8>>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
    failure: Arc<Mutex<Option<String>>>,
}

impl Caller {
    /// Calls `method` and waits for its reply. A JSON-RPC error reply is [`OvsdbError::Rpc`].
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, OvsdbError> {
        self.send(method, params).await
    }

    /// Sends `method` now (so calls go out in the order they are made, whoever awaits them) and
    /// returns the wait for its reply.
    pub fn send(
        &self,
        method: &str,
        params: Value,
    ) -> impl std::future::Future<Output = Result<Value, OvsdbError>> + Send + 'static {
        let reply = self.send_raw(method, params);
        async move { decoded(reply.await?) }
    }

    /// As [`Self::send`], with the reply's result as the server sent it (for large replies).
    pub fn send_raw(
        &self,
        method: &str,
        params: Value,
    ) -> impl std::future::Future<Output = Result<RawJson, OvsdbError>> + Send + 'static {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, Waiter::Caller(tx));
        let message = json!({"id": id, "method": method, "params": params});
        let sent = if self
            .outgoing
            .send(message.to_string().into_bytes())
            .is_err()
        {
            lock(&self.pending).remove(&id);
            Err(self.disconnected())
        } else {
            Ok(())
        };
        let caller = self.clone();
        async move {
            sent?;
            match rx.await {
                Ok(result) => result,
                Err(_) => Err(caller.disconnected()),
            }
        }
    }

    /// Sends `method` and returns its request id at once; the reply comes through the owner's
    /// stream ([`Connection::next_message`]) as [`Incoming::Reply`], after every notification the
    /// server sent before it (an update a transaction caused comes before its reply).
    pub fn send_in_stream(&self, method: &str, params: Value) -> Result<u64, OvsdbError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.pending).insert(id, Waiter::InStream);
        let message = json!({"id": id, "method": method, "params": params});
        if self
            .outgoing
            .send(message.to_string().into_bytes())
            .is_err()
        {
            lock(&self.pending).remove(&id);
            return Err(self.disconnected());
        }
        Ok(id)
    }

    fn disconnected(&self) -> OvsdbError {
        OvsdbError::Disconnected(
            lock(&self.failure)
                .clone()
                .unwrap_or_else(|| "connection closed".into()),
        )
    }
}

/// A live connection.
pub struct Connection {
    remote: Remote,
    caller: Caller,
    notifications: mpsc::UnboundedReceiver<Incoming>,
    failure: Arc<Mutex<Option<String>>>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Connection {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Connection {
    /// Connects to `remote`.
    pub async fn connect(remote: &Remote, options: &ConnectionOptions) -> Result<Self, OvsdbError> {
        let stream = tokio::time::timeout(
            options.connect_timeout,
            remote.connect(options.tls.as_deref()),
        )
        .await
        .map_err(|_| OvsdbError::Connect {
            remote: remote.to_string(),
            reason: "timed out".into(),
        })?
        .map_err(|e| OvsdbError::Connect {
            remote: remote.to_string(),
            reason: e.to_string(),
        })?;
        let (reader, mut writer) = tokio::io::split(stream);
        let (outgoing, mut outgoing_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let (notify_tx, notifications) = mpsc::unbounded_channel();
        let pending: Pending = Arc::default();
        let failure: Arc<Mutex<Option<String>>> = Arc::default();

        let writer_failure = failure.clone();
        let writer_task = tokio::spawn(async move {
            while let Some(bytes) = outgoing_rx.recv().await {
                if let Err(error) = writer.write_all(&bytes).await {
                    record_failure(&writer_failure, format!("write failed: {error}"));
                    break;
                }
            }
        });
        let reader_task = tokio::spawn(read_loop(
            reader,
            ReadContext {
                outgoing: outgoing.clone(),
                pending: pending.clone(),
                notify: notify_tx,
                failure: failure.clone(),
                probe_interval: options.probe_interval,
                remote: remote.to_string(),
            },
        ));
        let caller = Caller {
            outgoing,
            pending,
            next_id: Arc::new(AtomicU64::new(1)),
            failure: failure.clone(),
        };
        Ok(Self {
            remote: remote.clone(),
            caller,
            notifications,
            failure,
            tasks: [reader_task, writer_task],
        })
    }

    #[must_use]
    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// Calls `method` and waits for its reply. A JSON-RPC error reply is [`OvsdbError::Rpc`].
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, OvsdbError> {
        self.caller.call(method, params).await
    }

    /// As [`Self::call`], with the reply's result as the server sent it: a monitor's snapshot is
    /// decoded row by row from its text (see `raw`).
    pub async fn call_raw(&self, method: &str, params: Value) -> Result<RawJson, OvsdbError> {
        self.caller.send_raw(method, params).await
    }

    /// A handle for calls from other tasks.
    #[must_use]
    pub fn caller(&self) -> Caller {
        self.caller.clone()
    }

    /// The next notification or in-stream reply; `None` once the connection has failed (see
    /// [`Self::failure`]).
    pub async fn next_message(&mut self) -> Option<Incoming> {
        self.notifications.recv().await
    }

    /// Why the connection failed, if it did.
    #[must_use]
    pub fn failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }
}

/// A reply's result as a [`Value`] (replies other than a snapshot are small).
fn decoded(result: RawJson) -> Result<Value, OvsdbError> {
    result
        .to_value()
        .map_err(|error| OvsdbError::Protocol(format!("reply result: {error}")))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave the maps inconsistent; keep going.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn record_failure(failure: &Mutex<Option<String>>, reason: String) {
    lock(failure).get_or_insert(reason);
}

struct ReadContext {
    outgoing: mpsc::UnboundedSender<Vec<u8>>,
    pending: Pending,
    notify: mpsc::UnboundedSender<Incoming>,
    failure: Arc<Mutex<Option<String>>>,
    probe_interval: Option<Duration>,
    remote: String,
}

/// Id of the echo requests the probe sends (replies to it are not routed to any caller).
const PROBE_ID: &str = "echo";

async fn read_loop(
    mut reader: tokio::io::ReadHalf<Box<dyn super::remote::Transport>>,
    context: ReadContext,
) {
    let mut decoder = Decoder::default();
    let mut buffer = vec![0_u8; 256 * 1024];
    let mut probe_outstanding = false;
    let reason = loop {
        let read = match context.probe_interval {
            Some(interval) => {
                match tokio::time::timeout(interval, reader.read(&mut buffer)).await {
                    Ok(read) => read,
                    Err(_) if probe_outstanding => {
                        break format!("no reply to inactivity probe within {interval:?}");
                    }
                    Err(_) => {
                        probe_outstanding = true;
                        let probe = json!({"id": PROBE_ID, "method": "echo", "params": []});
                        let _ = context.outgoing.send(probe.to_string().into_bytes());
                        continue;
                    }
                }
            }
            None => reader.read(&mut buffer).await,
        };
        let count = match read {
            Ok(0) => break "server closed the connection".to_string(),
            Ok(count) => count,
            Err(error) => break format!("read failed: {error}"),
        };
        probe_outstanding = false;
        decoder.feed(&buffer[..count]);
        if let Err(reason) = drain_messages(&mut decoder, &context) {
            break reason;
        }
    };
    debug!(remote = %context.remote, %reason, "ovsdb connection ended");
    record_failure(&context.failure, reason.clone());
    let waiters: Vec<(u64, Waiter)> = lock(&context.pending).drain().collect();
    for (id, waiter) in waiters {
        let error = OvsdbError::Disconnected(reason.clone());
        match waiter {
            Waiter::Caller(sender) => {
                let _ = sender.send(Err(error));
            }
            Waiter::InStream => {
                let _ = context.notify.send(Incoming::Reply {
                    id,
                    result: Err(error),
                });
            }
        }
    }
}

/// Dispatches every complete message in the decoder; an error ends the connection.
fn drain_messages(decoder: &mut Decoder, context: &ReadContext) -> Result<(), String> {
    loop {
        let bytes = match decoder.next_message() {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(()),
            Err(error) => return Err(format!("framing error: {error}")),
        };
        let text = String::from_utf8(bytes).map_err(|e| format!("invalid UTF-8: {e}"))?;
        dispatch(&RawJson::whole(text), context)?;
    }
}

/// A JSON-RPC message's members, as their text (the message is not built as a tree: a reply or
/// an update can hold a whole snapshot).
#[derive(Default)]
struct Members<'a> {
    id: Option<&'a RawValue>,
    method: Option<&'a RawValue>,
    params: Option<&'a RawValue>,
    result: Option<&'a RawValue>,
    error: Option<&'a RawValue>,
    details: Option<&'a RawValue>,
}

impl<'a> Members<'a> {
    fn of(message: &'a RawJson) -> Result<Self, String> {
        let mut members = Members::default();
        for_each_member(message.text(), |name, value| {
            let slot = match &*name {
                "id" => &mut members.id,
                "method" => &mut members.method,
                "params" => &mut members.params,
                "result" => &mut members.result,
                "error" => &mut members.error,
                "details" => &mut members.details,
                _ => return,
            };
            *slot = Some(value);
        })
        .map_err(|e| format!("invalid JSON-RPC message: {e}"))?;
        Ok(members)
    }
}

/// Whether a member is absent or `null`.
fn is_null(member: Option<&RawValue>) -> bool {
    member.is_none_or(|value| value.get() == "null")
}

fn dispatch(message: &RawJson, context: &ReadContext) -> Result<(), String> {
    let members = Members::of(message)?;
    if let Some(method) = members.method {
        let method: String =
            serde_json::from_str(method.get()).map_err(|_| "method is not a string")?;
        let params = members
            .params
            .and_then(|params| message.part(params))
            .unwrap_or_else(RawJson::null);
        let Some(id) = members.id.filter(|id| id.get() != "null") else {
            // A notification for the owner; if it is gone, nobody cares any more.
            let _ = context
                .notify
                .send(Incoming::Notification(Notification { method, params }));
            return Ok(());
        };
        let reply = if method == "echo" {
            format!(
                r#"{{"id":{},"result":{},"error":null}}"#,
                id.get(),
                params.text()
            )
        } else {
            warn!(remote = %context.remote, %method, "server sent an unknown request");
            format!(
                r#"{{"id":{},"result":null,"error":"unknown method"}}"#,
                id.get()
            )
        };
        let _ = context.outgoing.send(reply.into_bytes());
        return Ok(());
    }
    if members.result.is_none() && members.error.is_none() {
        return Err("message is neither a request nor a reply".into());
    }
    let Some(id) = members
        .id
        .and_then(|id| serde_json::from_str::<u64>(id.get()).ok())
    else {
        // Replies to our probe (id "echo") and stray ids are not anyone's business.
        return Ok(());
    };
    let Some(waiter) = lock(&context.pending).remove(&id) else {
        return Ok(());
    };
    let result = if is_null(members.error) {
        Ok(members
            .result
            .and_then(|result| message.part(result))
            .unwrap_or_else(RawJson::null))
    } else {
        let error = members.error.map_or("null", RawValue::get);
        Err(OvsdbError::Rpc {
            error: serde_json::from_str::<String>(error).unwrap_or_else(|_| error.to_string()),
            details: members
                .details
                .and_then(|details| serde_json::from_str(details.get()).ok()),
        })
    };
    match waiter {
        Waiter::Caller(sender) => {
            let _ = sender.send(result);
        }
        Waiter::InStream => {
            let result = result.and_then(decoded);
            let _ = context.notify.send(Incoming::Reply { id, result });
        }
    }
    Ok(())
}
