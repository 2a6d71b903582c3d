//! Test support: a Southbound replica built from a snapshot of a schema written for the test
//! (only the tables and columns it needs, every one monitored). Compiled for tests only.

use std::{collections::BTreeMap, sync::Arc};

use serde_json::{Value, json};

use super::Southbound;
use crate::ovsdb::{
    schema::DatabaseSchema,
    session::{MonitorMethod, SessionEvent, UpdateFormat},
};

/// The replica after a snapshot of `updates` (table → uuid → `{"initial": row}`) under a
/// Southbound schema of `tables` (table → `{"columns": …}`).
pub fn southbound(tables: &Value, updates: Value) -> Southbound {
    let schema = DatabaseSchema::parse(
        &json!({"name": "OVN_Southbound", "version": "20.27.0", "tables": tables}),
    )
    .expect("the test's schema parses");
    let monitored: BTreeMap<String, Vec<String>> = schema
        .tables
        .iter()
        .map(|(name, table)| (name.clone(), table.columns.keys().cloned().collect()))
        .collect();
    let mut sb = Southbound::new();
    sb.apply(&SessionEvent::Snapshot {
        remote: "test".into(),
        method: MonitorMethod::MonitorCondSince,
        schema: Arc::new(schema),
        monitored,
        updates: updates.into(),
        format: UpdateFormat::Update2,
        resumed: false,
    });
    sb
}
