//! The bench's own view of a lab's databases, over their unix sockets: [`Ovsdb`], a blocking
//! JSON-RPC client for `transact` (one request at a time), and [`SbWatch`], a thread that
//! follows the Southbound's chassis and port bindings (`monitor`, RFC 7047) and stamps each
//! Port_Binding insert with the instant its update arrived.
//!
//! Hand-written rather than the agent's client: that one is asynchronous (tokio) and feeds a
//! replica, and xtask should not compile the agent to time it; the bench needs two methods, one
//! notification and arrival times, about a hundred lines. `ovn-sbctl` is not polled instead: it
//! reads the whole Port_Binding table per call (a second at 50,000 ports), which would load the
//! server whose clients are being timed. Used by `bench scale` only; touches nothing but its own
//! connections.

use std::{
    collections::HashMap,
    io::{BufReader, Write},
    os::unix::net::UnixStream,
    sync::{Arc, Condvar, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// One JSON-RPC connection to an OVSDB server's unix socket.
pub struct Ovsdb {
    writer: UnixStream,
    messages: serde_json::StreamDeserializer<
        'static,
        serde_json::de::IoRead<BufReader<UnixStream>>,
        Value,
    >,
    next_id: u64,
}

impl Ovsdb {
    /// Connects to `remote` (`unix:PATH`).
    pub fn connect(remote: &str) -> Result<Self> {
        let path = remote
            .strip_prefix("unix:")
            .with_context(|| format!("{remote} is not a unix: remote"))?;
        let writer = UnixStream::connect(path).with_context(|| format!("connecting to {path}"))?;
        let reader = BufReader::with_capacity(1 << 20, writer.try_clone()?);
        Ok(Self {
            writer,
            messages: serde_json::Deserializer::from_reader(reader).into_iter(),
            next_id: 0,
        })
    }

    /// The next message from the server (answering its echo requests on the way).
    fn next_message(&mut self) -> Result<Value> {
        loop {
            let message = self
                .messages
                .next()
                .context("the OVSDB server closed the connection")??;
            if message["method"] == "echo" {
                let reply =
                    json!({"result": message["params"], "error": null, "id": message["id"]});
                self.writer.write_all(reply.to_string().as_bytes())?;
                continue;
            }
            return Ok(message);
        }
    }

    /// Sends request `method(params)` and returns its result; notifications that arrive before
    /// the reply go to `notified`.
    fn request(
        &mut self,
        method: &str,
        params: Value,
        mut notified: impl FnMut(&Value),
    ) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"method": method, "params": params, "id": id});
        self.writer.write_all(request.to_string().as_bytes())?;
        loop {
            let mut message = self.next_message()?;
            if message["id"] == json!(id) {
                if !message["error"].is_null() {
                    bail!("{method} failed: {}", message["error"]);
                }
                return Ok(message["result"].take());
            }
            notified(&message);
        }
    }

    /// Runs `operations` on `database` as one transaction; fails when any operation did.
    pub fn transact(&mut self, database: &str, operations: &[Value]) -> Result<Vec<Value>> {
        let mut params = vec![json!(database)];
        params.extend(operations.iter().cloned());
        let result = self.request("transact", Value::Array(params), |_| {})?;
        let results = result.as_array().cloned().unwrap_or_default();
        if let Some(failed) = results.iter().find(|r| r.get("error").is_some()) {
            bail!("transaction failed: {failed}");
        }
        Ok(results)
    }
}

/// One Port_Binding as the watch sees it.
#[derive(Clone, Debug, Default)]
struct Binding {
    logical_port: String,
    chassis: Option<String>,
    up: bool,
}

/// What the watch knows of the Southbound.
#[derive(Default)]
struct SbState {
    /// Chassis name by row UUID.
    chassis: HashMap<String, String>,
    /// Chassis_Private (name, nb_cfg) by row UUID.
    private: HashMap<String, (String, i64)>,
    bindings: HashMap<String, Binding>,
    /// Port_Binding row UUID by logical port: what a wait looks up for its few ports, rather
    /// than walk every binding on each update (50,000 of them, on the cores being measured).
    by_port: HashMap<String, String>,
    /// When the update inserting each logical port arrived (inserts after the watch began).
    inserted_at: HashMap<String, Instant>,
    /// The monitor's connection failed (the reason).
    failed: Option<String>,
}

/// The OVSDB atom or optional value `value` as a string (a UUID's text), `None` when empty.
fn optional_uuid(value: &Value) -> Option<String> {
    match value.as_array().map(Vec::as_slice) {
        Some([kind, uuid]) if kind == "uuid" => uuid.as_str().map(str::to_string),
        _ => None,
    }
}

impl SbState {
    /// Applies one `<table-updates>` (RFC 7047 `update` or the monitor's initial reply).
    fn apply(&mut self, updates: &Value, arrived: Option<Instant>) {
        let rows = |table: &str| {
            updates[table]
                .as_object()
                .into_iter()
                .flat_map(|rows| rows.iter())
        };
        for (uuid, update) in rows("Chassis") {
            match update["new"]["name"].as_str() {
                Some(name) => {
                    self.chassis.insert(uuid.clone(), name.to_string());
                }
                None if update.get("new").is_none() => {
                    self.chassis.remove(uuid);
                }
                None => {}
            }
        }
        for (uuid, update) in rows("Chassis_Private") {
            let Some(new) = update.get("new") else {
                self.private.remove(uuid);
                continue;
            };
            let entry = self.private.entry(uuid.clone()).or_default();
            if let Some(name) = new["name"].as_str() {
                entry.0 = name.to_string();
            }
            if let Some(cfg) = new["nb_cfg"].as_i64() {
                entry.1 = cfg;
            }
        }
        for (uuid, update) in rows("Port_Binding") {
            let Some(new) = update.get("new") else {
                if let Some(gone) = self.bindings.remove(uuid) {
                    self.by_port.remove(&gone.logical_port);
                }
                continue;
            };
            let inserted = update.get("old").is_none() && !self.bindings.contains_key(uuid);
            let binding = self.bindings.entry(uuid.clone()).or_default();
            if let Some(name) = new["logical_port"].as_str() {
                binding.logical_port = name.to_string();
                self.by_port.insert(name.to_string(), uuid.clone());
            }
            if new.get("chassis").is_some() {
                binding.chassis = optional_uuid(&new["chassis"]);
            }
            if new.get("up").is_some() {
                binding.up = new["up"].as_bool().unwrap_or(false);
            }
            if let (true, Some(at)) = (inserted, arrived) {
                self.inserted_at.insert(binding.logical_port.clone(), at);
            }
        }
    }

    /// Whether chassis `name` has acknowledged `nb_cfg` ≥ `target` and holds every one of
    /// `ports`, each `up`.
    fn programmed(&self, name: &str, target: i64, ports: &[String]) -> bool {
        let acknowledged = (self.private.values()).any(|(n, cfg)| n == name && *cfg >= target);
        let Some(chassis) = (self.chassis.iter()).find_map(|(uuid, n)| (n == name).then_some(uuid))
        else {
            return false;
        };
        acknowledged && self.bound(chassis, ports, true) == ports.len()
    }

    /// How many of `ports` are bound to `chassis` (a row UUID) with `up` as given.
    fn bound(&self, chassis: &str, ports: &[String], up: bool) -> usize {
        (ports.iter())
            .filter_map(|port| self.bindings.get(self.by_port.get(port)?))
            .filter(|b| b.up == up && b.chassis.as_deref() == Some(chassis))
            .count()
    }

    /// What of [`Self::programmed`] holds, for an error message.
    fn describe(&self, name: &str, target: i64, ports: &[String]) -> String {
        let acknowledged: Vec<i64> = (self.private.values())
            .filter(|(n, _)| n == name)
            .map(|(_, cfg)| *cfg)
            .collect();
        let chassis = (self.chassis.iter()).find_map(|(uuid, n)| (n == name).then_some(uuid));
        let bound = |up: bool| chassis.map_or(0, |chassis| self.bound(chassis, ports, up));
        format!(
            "chassis {name}: registered {}, nb_cfg {acknowledged:?} of {target}, {} of {} local ports bound and up, {} bound and not up",
            chassis.is_some(),
            bound(true),
            ports.len(),
            bound(false),
        )
    }
}

/// A thread following the Southbound's Chassis, Chassis_Private and Port_Binding rows.
pub struct SbWatch {
    state: Arc<(Mutex<SbState>, Condvar)>,
    /// A second connection, closed on drop to end the thread's read.
    connection: UnixStream,
}

impl SbWatch {
    /// Connects to `remote` and starts monitoring; returns once the initial rows are in.
    pub fn start(remote: &str) -> Result<Self> {
        let mut sb = Ovsdb::connect(remote)?;
        let connection = sb.writer.try_clone()?;
        let requests = json!({
            "Chassis": {"columns": ["name"]},
            "Chassis_Private": {"columns": ["name", "nb_cfg"]},
            "Port_Binding": {"columns": ["logical_port", "chassis", "up"]},
        });
        let initial = sb.request(
            "monitor",
            json!(["OVN_Southbound", "bench", requests]),
            |_| {},
        )?;
        let state = Arc::new((Mutex::new(SbState::default()), Condvar::new()));
        state
            .0
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .apply(&initial, None);
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            let (lock, changed) = &*shared;
            loop {
                let message = sb.next_message();
                let arrived = Instant::now();
                let Ok(mut state) = lock.lock() else { return };
                match message {
                    Ok(message) if message["method"] == "update" => {
                        state.apply(&message["params"][1], Some(arrived));
                    }
                    Ok(_) => {}
                    Err(error) => {
                        state.failed = Some(format!("{error:#}"));
                        changed.notify_all();
                        return;
                    }
                }
                changed.notify_all();
            }
        });
        Ok(Self { state, connection })
    }

    /// Waits up to `limit` until `ready` holds of the state: whether it did.
    fn wait(&self, limit: Duration, mut ready: impl FnMut(&SbState) -> bool) -> Result<bool> {
        let (lock, changed) = &*self.state;
        let deadline = Instant::now() + limit;
        let mut state = lock.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        loop {
            if ready(&state) {
                return Ok(true);
            }
            if let Some(failed) = &state.failed {
                bail!("the Southbound watch failed: {failed}");
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            state = changed
                .wait_timeout(state, left)
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .0;
        }
    }

    /// Waits up to `limit` until chassis `name` has acknowledged `nb_cfg` ≥ `target` and holds
    /// every one of `ports` up: whether it did.
    pub fn wait_programmed(
        &self,
        name: &str,
        target: i64,
        ports: &[String],
        limit: Duration,
    ) -> Result<bool> {
        self.wait(limit, |state| state.programmed(name, target, ports))
    }

    /// What of [`Self::wait_programmed`] holds now.
    pub fn describe(&self, name: &str, target: i64, ports: &[String]) -> String {
        match self.state.0.lock() {
            Ok(state) => state.describe(name, target, ports),
            Err(_) => "poisoned".into(),
        }
    }

    /// Forgets when `logical_port` was last inserted.
    pub fn forget(&self, logical_port: &str) {
        if let Ok(mut state) = self.state.0.lock() {
            state.inserted_at.remove(logical_port);
        }
    }

    /// When the update inserting `logical_port` arrived (waiting up to `limit` for it).
    pub fn inserted_at(&self, logical_port: &str, limit: Duration) -> Result<Instant> {
        let mut at = None;
        self.wait(limit, |state| {
            at = state.inserted_at.get(logical_port).copied();
            at.is_some()
        })?;
        at.with_context(|| {
            format!("Port_Binding {logical_port}'s insert did not arrive within {limit:?}")
        })
    }
}

impl Drop for SbWatch {
    fn drop(&mut self) {
        let _ = self.connection.shutdown(std::net::Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chassis_is_programmed_once_it_acknowledged_and_holds_every_port_up() {
        let mut state = SbState::default();
        state.apply(
            &json!({
                "Chassis": {"c1": {"new": {"name": "node"}}},
                "Chassis_Private": {"p1": {"new": {"name": "node", "nb_cfg": 3}}},
                "Port_Binding": {
                    "b1": {"new": {"logical_port": "a", "chassis": ["uuid", "c1"], "up": true}},
                    "b2": {"new": {"logical_port": "b", "chassis": ["set", []], "up": ["set", []]}},
                },
            }),
            None,
        );
        let ports = ["a".to_string(), "b".to_string()];
        assert!(!state.programmed("node", 3, &ports), "b is not bound");
        let at = Instant::now();
        state.apply(
            &json!({"Port_Binding": {"b2": {"old": {"chassis": ["set", []]}, "new": {"logical_port": "b", "chassis": ["uuid", "c1"], "up": true}}}}),
            Some(at),
        );
        assert!(state.programmed("node", 3, &ports));
        assert!(
            !state.programmed("node", 4, &ports),
            "nb_cfg 4 not acknowledged"
        );
        assert!(!state.programmed("other", 3, &ports));
        assert!(state.inserted_at.is_empty(), "a modify is not an insert");
        state.apply(
            &json!({"Port_Binding": {"b3": {"new": {"logical_port": "probe"}}}}),
            Some(at),
        );
        assert_eq!(state.inserted_at.get("probe"), Some(&at));
        state.apply(
            &json!({"Port_Binding": {"b1": {"old": {"up": true}}}}),
            Some(at),
        );
        assert!(!state.programmed("node", 3, &ports), "a deleted");
    }
}
