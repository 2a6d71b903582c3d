//! The client-side copy of monitored tables. Applies the session's snapshots and updates (update,
//! update2 and update3 row formats) and reports, for each, the change set: exactly which rows were
//! inserted, modified (with their old values) and deleted (with their last values). A snapshot that
//! is not a resume is diffed against what the replica holds, so a reconnect costs the consumer only
//! the real differences. Malformed rows are rejected one by one and reported, never fatal.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use serde_json::{Value, value::RawValue};
use uuid::Uuid;

pub use super::packed::Row;
use super::{
    datum::{Atom, Datum},
    packed::DatumRef,
    raw::{RawJson, for_each_member},
    schema::{ColumnType, DatabaseSchema},
    session::{SessionEvent, UpdateFormat},
};

/// The monitored columns of one table, in a fixed order that [`Row`] values follow.
#[derive(Debug)]
pub struct TableLayout {
    pub name: String,
    pub columns: Vec<(String, ColumnType)>,
    index: HashMap<String, usize>,
}

impl TableLayout {
    #[must_use]
    pub fn new(name: &str, columns: Vec<(String, ColumnType)>) -> Self {
        let index = columns
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.clone(), i))
            .collect();
        Self {
            name: name.to_string(),
            columns,
            index,
        }
    }

    /// Position of `column` in rows of this table.
    #[must_use]
    pub fn position(&self, column: &str) -> Option<usize> {
        self.index.get(column).copied()
    }
}

/// One replicated table.
#[derive(Debug)]
pub struct Table {
    layout: Arc<TableLayout>,
    rows: HashMap<Uuid, Row>,
    /// Where a row is packed before its block is allocated at its size.
    scratch: Vec<u8>,
}

impl Table {
    #[must_use]
    pub fn layout(&self) -> &Arc<TableLayout> {
        &self.layout
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    #[must_use]
    pub fn row(&self, uuid: &Uuid) -> Option<RowRef<'_>> {
        self.rows.get(uuid).map(|row| RowRef {
            uuid: *uuid,
            layout: &self.layout,
            row,
        })
    }

    pub fn rows(&self) -> impl Iterator<Item = RowRef<'_>> {
        self.rows.iter().map(|(uuid, row)| RowRef {
            uuid: *uuid,
            layout: &self.layout,
            row,
        })
    }
}

/// A row with its table layout, for access by column name.
#[derive(Clone, Copy, Debug)]
pub struct RowRef<'a> {
    pub uuid: Uuid,
    pub layout: &'a TableLayout,
    pub row: &'a Row,
}

impl<'a> RowRef<'a> {
    /// Value of `column`, `None` if the column is not monitored (or not in this schema version).
    #[must_use]
    pub fn get(&self, column: &str) -> Option<DatumRef<'a>> {
        let position = self.layout.position(column)?;
        self.row.datum(position, &self.layout.columns[position].1)
    }

    /// Every value, decoded, in the layout's column order.
    #[must_use]
    pub fn values(&self) -> Vec<Datum> {
        self.row.values(&self.layout.columns)
    }
}

/// Elements added to and removed from one set column of a modified row (from an update2 diff),
/// so consumers can follow a large set (a flood group's ports) in O(change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetChange {
    pub column: String,
    pub added: Vec<Atom>,
    pub removed: Vec<Atom>,
}

/// What one applied event changed in one table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableChanges {
    pub inserted: Vec<Uuid>,
    /// Modified rows with their values before the change.
    pub modified: Vec<(Uuid, Row)>,
    /// Deleted rows with their last values.
    pub deleted: Vec<(Uuid, Row)>,
    /// For modified rows whose update carried set diffs: exactly what each set gained and lost.
    pub set_changes: HashMap<Uuid, Vec<SetChange>>,
}

impl TableChanges {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.inserted.is_empty() && self.modified.is_empty() && self.deleted.is_empty()
    }

    /// Number of rows touched.
    #[must_use]
    pub fn len(&self) -> usize {
        self.inserted.len() + self.modified.len() + self.deleted.len()
    }
}

/// What one applied event changed, per table (tables without changes are absent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeSet {
    pub tables: BTreeMap<String, TableChanges>,
    /// Row updates that could not be applied (malformed values, modify of an unknown row, …).
    pub rejected: Vec<String>,
    /// Whether the whole replica was (re)built from a snapshot in this change set.
    pub resynced: bool,
}

impl ChangeSet {
    #[must_use]
    pub fn table(&self, name: &str) -> Option<&TableChanges> {
        self.tables.get(name)
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.tables.values().all(TableChanges::is_empty)
    }

    fn entry(&mut self, table: &str) -> &mut TableChanges {
        self.tables.entry(table.to_string()).or_default()
    }
}

/// The replicated database.
#[derive(Debug, Default)]
pub struct Replica {
    schema: Option<Arc<DatabaseSchema>>,
    tables: BTreeMap<String, Table>,
}

impl Replica {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    #[must_use]
    pub fn schema(&self) -> Option<&Arc<DatabaseSchema>> {
        self.schema.as_ref()
    }

    #[must_use]
    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.get(name)
    }

    pub fn tables(&self) -> impl Iterator<Item = (&str, &Table)> {
        self.tables
            .iter()
            .map(|(name, table)| (name.as_str(), table))
    }

    /// Applies a session event; `Disconnected` and request outcomes change nothing (the replica stays as it was until
    /// the next snapshot tells what changed meanwhile).
    pub fn apply(&mut self, event: &SessionEvent) -> ChangeSet {
        match event {
            SessionEvent::Snapshot {
                schema,
                monitored,
                updates,
                format,
                resumed,
                ..
            } => {
                if *resumed && self.schema.as_ref() == Some(schema) {
                    self.apply_updates(updates, *format)
                } else {
                    self.resync(schema, monitored, updates, *format)
                }
            }
            SessionEvent::Update { updates, format } => self.apply_updates(updates, *format),
            SessionEvent::Disconnected { .. }
            | SessionEvent::Transacted { .. }
            | SessionEvent::ConditionChanged { .. } => ChangeSet::default(),
        }
    }

    /// Replaces the contents with `updates` (a full snapshot) and reports the differences.
    fn resync(
        &mut self,
        schema: &Arc<DatabaseSchema>,
        monitored: &BTreeMap<String, Vec<String>>,
        updates: &RawJson,
        format: UpdateFormat,
    ) -> ChangeSet {
        let mut fresh = Replica {
            schema: Some(schema.clone()),
            tables: BTreeMap::new(),
        };
        for (table_name, columns) in monitored {
            let Some(table_schema) = schema.tables.get(table_name) else {
                continue;
            };
            let columns = columns
                .iter()
                .filter_map(|c| table_schema.columns.get(c).map(|t| (c.clone(), t.clone())))
                .collect();
            let layout = Arc::new(TableLayout::new(table_name, columns));
            fresh.tables.insert(
                table_name.clone(),
                Table {
                    layout,
                    rows: HashMap::new(),
                    scratch: Vec::new(),
                },
            );
        }
        let mut changes = fresh.apply_updates(updates, format);
        let rejected = std::mem::take(&mut changes.rejected);
        let old = std::mem::replace(self, fresh);
        let mut diff = ChangeSet {
            rejected,
            resynced: true,
            ..ChangeSet::default()
        };
        for (name, table) in &self.tables {
            let old_table = old.tables.get(name);
            let same_layout = old_table.is_some_and(|t| t.layout.columns == table.layout.columns);
            for (uuid, row) in &table.rows {
                match old_table.and_then(|t| t.rows.get(uuid)) {
                    None => diff.entry(name).inserted.push(*uuid),
                    Some(old_row) if !same_layout || old_row != row => {
                        diff.entry(name).modified.push((*uuid, old_row.clone()));
                    }
                    Some(_) => {}
                }
            }
        }
        for (name, old_table) in old.tables {
            let new_table = self.tables.get(&name);
            for (uuid, row) in old_table.rows {
                if new_table.is_none_or(|t| !t.rows.contains_key(&uuid)) {
                    diff.entry(&name).deleted.push((uuid, row));
                }
            }
        }
        diff.tables.retain(|_, t| !t.is_empty());
        diff
    }

    /// Applies `<table-updates>` / `<table-updates2>`, row by row from their text: a row's values
    /// are decoded from it directly, with no JSON tree (see `raw`); only a `modify`'s few
    /// columns are.
    fn apply_updates(&mut self, updates: &RawJson, format: UpdateFormat) -> ChangeSet {
        let mut changes = ChangeSet::default();
        if updates.is_null() {
            return changes;
        }
        let tables = &mut self.tables;
        let walked = for_each_member(updates.text(), |table_name, rows| {
            let Some(table) = tables.get_mut(&*table_name) else {
                return;
            };
            let walked = for_each_member(rows.get(), |uuid_text, update| {
                let Ok(uuid) = Uuid::parse_str(&uuid_text) else {
                    changes
                        .rejected
                        .push(format!("{table_name}: invalid row uuid {uuid_text:?}"));
                    return;
                };
                let result = match format {
                    UpdateFormat::Update2 => table.apply_update2(uuid, update),
                    UpdateFormat::Update1 => table.apply_update1(uuid, update),
                };
                match result {
                    Ok(Some(change)) => change.record(changes.entry(&table_name), uuid),
                    Ok(None) => {}
                    Err(reason) => changes
                        .rejected
                        .push(format!("{table_name} {uuid}: {reason}")),
                }
            });
            if let Err(error) = walked {
                changes.rejected.push(format!(
                    "{table_name}: row updates are not an object: {error}"
                ));
            }
        });
        if let Err(error) = walked {
            changes.rejected.push(format!(
                "table updates are not an object: {error}: {updates:?}"
            ));
        }
        changes.tables.retain(|_, t| !t.is_empty());
        changes
    }
}

enum RowChange {
    Inserted,
    Modified(Row, Vec<SetChange>),
    Deleted(Row),
}

impl RowChange {
    fn record(self, changes: &mut TableChanges, uuid: Uuid) {
        match self {
            RowChange::Inserted => changes.inserted.push(uuid),
            RowChange::Modified(old, set_changes) => {
                changes.modified.push((uuid, old));
                if !set_changes.is_empty() {
                    changes.set_changes.insert(uuid, set_changes);
                }
            }
            RowChange::Deleted(old) => changes.deleted.push((uuid, old)),
        }
    }
}

impl Table {
    /// Decodes a full row from its text (absent columns take their defaults).
    fn decode_row(&mut self, columns: &RawValue) -> Result<Row, String> {
        let mut values = vec![None; self.layout.columns.len()];
        let mut failed = None;
        for_each_member(columns.get(), |column, value| {
            let Some(position) = self.layout.position(&column) else {
                return;
            };
            if failed.is_some() {
                return;
            }
            let column_type = &self.layout.columns[position].1;
            match Datum::decode_text(value.get(), column_type) {
                Ok(datum) => values[position] = Some(datum),
                Err(error) => failed = Some(format!("{column}: {error}")),
            }
        })
        .map_err(|_| format!("row is not an object: {}", columns.get()))?;
        match failed {
            Some(error) => Err(error),
            None => Ok(Row::pack(&self.layout.columns, &values, &mut self.scratch)),
        }
    }

    fn insert(&mut self, uuid: Uuid, row: Row) -> Option<RowChange> {
        match self.rows.insert(uuid, row) {
            None => Some(RowChange::Inserted),
            Some(old) if self.rows.get(&uuid) == Some(&old) => None,
            Some(old) => Some(RowChange::Modified(old, Vec::new())),
        }
    }

    fn apply_update2(
        &mut self,
        uuid: Uuid,
        update: &RawValue,
    ) -> Result<Option<RowChange>, String> {
        let mut first = None;
        for_each_member(update.get(), |kind, columns| {
            first.get_or_insert((kind, columns));
        })
        .map_err(|_| "row update is not an object")?;
        let (kind, columns) = first.ok_or("empty row update")?;
        match &*kind {
            "initial" | "insert" => {
                let row = self.decode_row(columns)?;
                Ok(self.insert(uuid, row))
            }
            "modify" => {
                // A modification carries only what changed: small, so a tree of it will do.
                let diffs: Value =
                    serde_json::from_str(columns.get()).map_err(|e| e.to_string())?;
                let diffs = diffs.as_object().ok_or("modify is not an object")?;
                let old = self
                    .rows
                    .get(&uuid)
                    .ok_or("modify of a row the replica does not have")?;
                let mut values = old.values(&self.layout.columns);
                let mut set_changes = Vec::new();
                for (column, diff) in diffs {
                    if let Some(position) = self.layout.position(column) {
                        let column_type = &self.layout.columns[position].1;
                        if column_type.is_composite() && !column_type.is_map() {
                            let toggled = Datum::decode(diff, column_type)
                                .map_err(|e| format!("{column}: {e}"))?;
                            let before = values[position].atoms();
                            let (removed, added) = toggled
                                .atoms()
                                .iter()
                                .cloned()
                                .partition(|atom| before.binary_search(atom).is_ok());
                            set_changes.push(SetChange {
                                column: column.clone(),
                                added,
                                removed,
                            });
                        }
                        values[position]
                            .apply_diff(diff, column_type)
                            .map_err(|e| format!("{column}: {e}"))?;
                    }
                }
                let values: Vec<_> = values.into_iter().map(Some).collect();
                let row = Row::pack(&self.layout.columns, &values, &mut self.scratch);
                Ok(match self.insert(uuid, row) {
                    Some(RowChange::Modified(old, _)) => {
                        Some(RowChange::Modified(old, set_changes))
                    }
                    other => other,
                })
            }
            "delete" => Ok(self.rows.remove(&uuid).map(RowChange::Deleted)),
            other => Err(format!("unknown row update kind {other:?}")),
        }
    }

    fn apply_update1(
        &mut self,
        uuid: Uuid,
        update: &RawValue,
    ) -> Result<Option<RowChange>, String> {
        let (mut old, mut new) = (None, None);
        for_each_member(update.get(), |name, value| match &*name {
            "old" => old = Some(value),
            "new" => new = Some(value),
            _ => {}
        })
        .map_err(|_| "row update is not an object")?;
        match new {
            Some(new) => {
                // `new` carries every monitored column, so it replaces the row.
                let row = self.decode_row(new)?;
                Ok(self.insert(uuid, row))
            }
            None if old.is_some() => Ok(self.rows.remove(&uuid).map(RowChange::Deleted)),
            None => Err("row update has neither old nor new".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ovsdb::{packed::AtomRef, session::MonitorMethod};

    const ROW: &str = "11111111-1111-4111-8111-111111111111";
    const A: &str = "aaaaaaaa-1111-4111-8111-111111111111";
    const B: &str = "bbbbbbbb-1111-4111-8111-111111111111";
    const C: &str = "cccccccc-1111-4111-8111-111111111111";

    fn replica() -> Replica {
        let schema = DatabaseSchema::parse(
            &json!({"name": "T", "version": "1", "tables": {"G": {"columns": {
                "name": {"type": "string"},
                "ports": {"type": {"key": "uuid", "min": 0, "max": "unlimited"}}
            }}}}),
        )
        .unwrap();
        let mut replica = Replica::new();
        replica.apply(&SessionEvent::Snapshot {
            remote: "test".into(),
            method: MonitorMethod::MonitorCondSince,
            schema: Arc::new(schema),
            monitored: [("G".to_string(), vec!["name".to_string(), "ports".to_string()])].into(),
            updates: json!({"G": {ROW: {"initial": {"name": "g", "ports": ["set", [["uuid", A], ["uuid", B]]]}}}}).into(),
            format: UpdateFormat::Update2,
            resumed: false,
        });
        replica
    }

    #[test]
    fn set_diffs_are_reported_as_added_and_removed_elements() {
        let mut replica = replica();
        let changes = replica.apply(&SessionEvent::Update {
            updates: json!({"G": {ROW: {"modify": {"ports": ["set", [["uuid", B], ["uuid", C]]], "name": "h"}}}}).into(),
            format: UpdateFormat::Update2,
        });
        let table = changes.table("G").unwrap();
        assert_eq!(table.modified.len(), 1);
        let set_changes = &table.set_changes[&ROW.parse().unwrap()];
        assert_eq!(set_changes.len(), 1, "scalar columns carry no set change");
        assert_eq!(set_changes[0].column, "ports");
        assert_eq!(set_changes[0].added, vec![Atom::Uuid(C.parse().unwrap())]);
        assert_eq!(set_changes[0].removed, vec![Atom::Uuid(B.parse().unwrap())]);
        let row = replica
            .table("G")
            .unwrap()
            .row(&ROW.parse().unwrap())
            .unwrap();
        let ports: Vec<_> = row
            .get("ports")
            .unwrap()
            .atoms()
            .filter_map(AtomRef::as_uuid)
            .map(|u| u.to_string())
            .collect();
        assert_eq!(ports, [A, C]);
    }
}
