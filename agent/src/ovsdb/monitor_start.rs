//! How a session starts monitoring on a fresh connection: it rejects a clustered member cut off
//! from its cluster (and keeps watching `_Server` for that), fetches the schema, and monitors the
//! requested tables with the best method the server has (`monitor_cond_since` resuming from the
//! last transaction id, then `monitor_cond`, then `monitor`). Owns nothing; reads and updates the
//! session's [`State`].

use std::{collections::BTreeMap, sync::Arc};

use serde_json::{Value, json, value::RawValue};
use tracing::warn;

use super::{
    OvsdbError,
    connection::Connection,
    schema::DatabaseSchema,
    session::{MONITOR_ID, MonitorMethod, SERVER_MONITOR_ID, SessionEvent, State, UpdateFormat},
};

const ZERO_TXN: &str = "00000000-0000-0000-0000-000000000000";

/// Rejects a clustered-database member that is not connected to its cluster (it may serve stale
/// data). Servers without `_Server` (old or relay-less standalone ones) are accepted.
pub(super) async fn check_cluster_member(
    connection: &Connection,
    database: &str,
) -> Result<(), String> {
    let request = json!({"Database": {"columns": ["name", "model", "connected", "leader"]}});
    let reply = match connection
        .call("monitor", json!(["_Server", SERVER_MONITOR_ID, request]))
        .await
    {
        Ok(reply) => reply,
        Err(error @ OvsdbError::Disconnected(_)) => return Err(error.to_string()),
        // No _Server database: nothing to check.
        Err(_) => return Ok(()),
    };
    let Some(rows) = reply.get("Database").and_then(Value::as_object) else {
        return Ok(());
    };
    let row = rows
        .values()
        .filter_map(|update| update.get("new"))
        .find(|row| row.get("name").and_then(Value::as_str) == Some(database));
    // The _Server monitor stays: its updates tell when this member loses its cluster.
    let Some(row) = row else {
        return Err(format!("server does not serve database {database}"));
    };
    check_database_row(row)
}

/// Fails for a clustered member that is not connected to its cluster.
pub(super) fn check_database_row(row: &Value) -> Result<(), String> {
    let clustered = row.get("model").and_then(Value::as_str) == Some("clustered");
    if clustered && row.get("connected").and_then(Value::as_bool) == Some(false) {
        return Err("cluster member is not connected to its cluster".into());
    }
    Ok(())
}

/// Fetches the schema and starts the monitor; returns the resulting [`SessionEvent::Snapshot`].
pub(super) async fn start_monitor(
    state: &mut State,
    connection: &Connection,
) -> Result<SessionEvent, OvsdbError> {
    let remote = connection.remote().to_string();
    let database = state.config.database.clone();
    let schema_json = connection.call("get_schema", json!([database])).await?;
    let schema = Arc::new(DatabaseSchema::parse(&schema_json)?);
    if state.schema.as_ref() != Some(&schema) {
        // A different schema (an upgraded server) invalidates the resume point.
        state.last_txn_id = None;
        state.schema = Some(schema.clone());
    }
    let mut monitored = BTreeMap::new();
    let mut requests = serde_json::Map::new();
    let mut plain_requests = serde_json::Map::new();
    for table in &state.config.tables {
        let Some(table_schema) = schema.tables.get(&table.name) else {
            warn!(table = %table.name, "server schema lacks a monitored table; skipped");
            continue;
        };
        let columns: Vec<String> = match &table.columns {
            Some(wanted) => wanted
                .iter()
                .filter(|c| table_schema.columns.contains_key(*c))
                .cloned()
                .collect(),
            None => table_schema.columns.keys().cloned().collect(),
        };
        let mut request = json!({"columns": columns});
        plain_requests.insert(table.name.clone(), json!([request.clone()]));
        if let Some(Some(condition)) = state.conditions.get(&table.name) {
            request["where"] = condition.clone();
        }
        requests.insert(table.name.clone(), json!([request]));
        monitored.insert(table.name.clone(), columns);
    }
    let since = state
        .last_txn_id
        .clone()
        .unwrap_or_else(|| ZERO_TXN.to_string());
    let params = json!([database, MONITOR_ID, requests, since]);
    match connection.call_raw("monitor_cond_since", params).await {
        Ok(reply) => {
            // The reply is [found, last-txn-id, updates]; the updates stay text (the snapshot is
            // the largest message there is, see `raw`).
            let malformed = || OvsdbError::Protocol(format!("monitor_cond_since reply {reply:?}"));
            let Ok([found, txn, updates]) = reply.parse::<[&RawValue; 3]>() else {
                return Err(malformed());
            };
            let found = serde_json::from_str::<bool>(found.get()).unwrap_or(false);
            let txn = serde_json::from_str::<String>(txn.get()).ok();
            let updates = reply.part(updates).ok_or_else(malformed)?;
            let resumed = found && state.last_txn_id.is_some();
            state.last_txn_id = txn;
            return Ok(SessionEvent::Snapshot {
                remote,
                method: MonitorMethod::MonitorCondSince,
                schema,
                monitored,
                updates,
                format: UpdateFormat::Update2,
                resumed,
            });
        }
        Err(error) if error.is_unknown_method() => {}
        Err(error) => return Err(error),
    }
    state.last_txn_id = None;
    match connection
        .call_raw("monitor_cond", json!([database, MONITOR_ID, requests]))
        .await
    {
        Ok(updates) => {
            return Ok(SessionEvent::Snapshot {
                remote,
                method: MonitorMethod::MonitorCond,
                schema,
                monitored,
                updates,
                format: UpdateFormat::Update2,
                resumed: false,
            });
        }
        Err(error) if error.is_unknown_method() => {}
        Err(error) => return Err(error),
    }
    // Plain monitor has no conditions: every row is replicated.
    let updates = connection
        .call_raw("monitor", json!([database, MONITOR_ID, plain_requests]))
        .await?;
    Ok(SessionEvent::Snapshot {
        remote,
        method: MonitorMethod::Monitor,
        schema,
        monitored,
        updates,
        format: UpdateFormat::Update1,
        resumed: false,
    })
}
