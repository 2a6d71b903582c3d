//! Typed reads of replica values with the schema's defaults: a column that is absent (not
//! monitored, or not in this schema version) or holds an unexpected type reads as its default, so
//! rows from any OVN version between 23.03 and current decode without errors.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::ovsdb::{packed::AtomRef, replica::RowRef};

pub fn string(row: &RowRef<'_>, column: &str) -> String {
    row.get(column)
        .and_then(|d| d.single())
        .and_then(AtomRef::as_str)
        .unwrap_or_default()
        .to_string()
}

pub fn optional_string(row: &RowRef<'_>, column: &str) -> Option<String> {
    row.get(column)
        .and_then(|d| d.single())
        .and_then(AtomRef::as_str)
        .map(str::to_string)
}

pub fn integer(row: &RowRef<'_>, column: &str) -> i64 {
    optional_integer(row, column).unwrap_or_default()
}

pub fn optional_integer(row: &RowRef<'_>, column: &str) -> Option<i64> {
    row.get(column)
        .and_then(|d| d.single())
        .and_then(AtomRef::as_integer)
}

/// A tunnel key or other small non-negative integer; out-of-range values read as 0 (never valid).
pub fn key(row: &RowRef<'_>, column: &str) -> u32 {
    u32::try_from(integer(row, column)).unwrap_or(0)
}

pub fn optional_bool(row: &RowRef<'_>, column: &str) -> Option<bool> {
    row.get(column)
        .and_then(|d| d.single())
        .and_then(AtomRef::as_bool)
}

pub fn optional_uuid(row: &RowRef<'_>, column: &str) -> Option<Uuid> {
    row.get(column)
        .and_then(|d| d.single())
        .and_then(AtomRef::as_uuid)
}

pub fn uuids(row: &RowRef<'_>, column: &str) -> Vec<Uuid> {
    row.get(column)
        .map(|d| d.atoms().filter_map(AtomRef::as_uuid).collect())
        .unwrap_or_default()
}

pub fn strings(row: &RowRef<'_>, column: &str) -> Vec<String> {
    row.get(column)
        .map(|d| {
            d.atoms()
                .filter_map(AtomRef::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

pub fn string_map(row: &RowRef<'_>, column: &str) -> BTreeMap<String, String> {
    row.get(column)
        .map(|d| {
            d.pairs()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}
