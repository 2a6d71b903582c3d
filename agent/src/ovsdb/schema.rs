//! OVSDB database schemas (RFC 7047 §3.2) as far as a client needs them: tables, their columns and
//! each column's type, which decides how values and update2 diffs are decoded. Parsed from
//! `get_schema` replies; unknown schema members are ignored so newer servers keep working.

use std::collections::BTreeMap;

use serde_json::Value;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid schema: {0}")]
pub struct SchemaError(pub String);

fn invalid(text: impl Into<String>) -> SchemaError {
    SchemaError(text.into())
}

/// The five OVSDB atomic types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomType {
    Integer,
    Real,
    Boolean,
    String,
    Uuid,
}

impl AtomType {
    fn parse(name: &str) -> Result<Self, SchemaError> {
        Ok(match name {
            "integer" => Self::Integer,
            "real" => Self::Real,
            "boolean" => Self::Boolean,
            "string" => Self::String,
            "uuid" => Self::Uuid,
            other => return Err(invalid(format!("unknown atomic type {other:?}"))),
        })
    }
}

/// A column's type: a key type, an optional value type (then the column is a map), and how many
/// elements it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnType {
    pub key: AtomType,
    pub value: Option<AtomType>,
    pub min: u64,
    /// `u64::MAX` for "unlimited".
    pub max: u64,
}

impl ColumnType {
    /// Exactly one value, no map: update2 diffs carry the new value instead of a difference.
    #[must_use]
    pub fn is_scalar(&self) -> bool {
        self.value.is_none() && self.min == 1 && self.max == 1
    }

    /// Can hold more than one element. update2 diffs of non-composite columns (scalars and
    /// optional values alike) carry the new value, as ovsdb-server's `ovsdb_datum_diff` does.
    #[must_use]
    pub fn is_composite(&self) -> bool {
        self.max > 1
    }

    #[must_use]
    pub fn is_map(&self) -> bool {
        self.value.is_some()
    }

    fn parse(json: &Value) -> Result<Self, SchemaError> {
        if let Some(name) = json.as_str() {
            return Ok(Self {
                key: AtomType::parse(name)?,
                value: None,
                min: 1,
                max: 1,
            });
        }
        let object = json
            .as_object()
            .ok_or_else(|| invalid(format!("column type {json}")))?;
        let base = |json: &Value| -> Result<AtomType, SchemaError> {
            match json {
                Value::String(name) => AtomType::parse(name),
                Value::Object(base) => AtomType::parse(
                    base.get("type")
                        .and_then(Value::as_str)
                        .ok_or_else(|| invalid("base type without type"))?,
                ),
                other => Err(invalid(format!("base type {other}"))),
            }
        };
        let key = base(
            object
                .get("key")
                .ok_or_else(|| invalid("column type without key"))?,
        )?;
        let value = object.get("value").map(base).transpose()?;
        let min = object
            .get("min")
            .map_or(Ok(1), |v| v.as_u64().ok_or_else(|| invalid("min")))?;
        let max = match object.get("max") {
            None => 1,
            Some(Value::String(s)) if s == "unlimited" => u64::MAX,
            Some(v) => v.as_u64().ok_or_else(|| invalid("max"))?,
        };
        Ok(Self {
            key,
            value,
            min,
            max,
        })
    }
}

/// One table: column names (sorted) and their types. `_uuid` and `_version` are implicit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableSchema {
    pub name: String,
    pub columns: BTreeMap<String, ColumnType>,
    /// Whether rows exist only while referenced (not monitored for their own sake).
    pub is_root: bool,
}

/// A database schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseSchema {
    pub name: String,
    pub version: String,
    pub tables: BTreeMap<String, TableSchema>,
}

impl DatabaseSchema {
    /// Parses a `get_schema` result.
    pub fn parse(json: &Value) -> Result<Self, SchemaError> {
        let name = json
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("no name"))?;
        let version = json
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let tables_json = json
            .get("tables")
            .and_then(Value::as_object)
            .ok_or_else(|| invalid("no tables"))?;
        let mut tables = BTreeMap::new();
        for (table_name, table) in tables_json {
            let columns_json = table
                .get("columns")
                .and_then(Value::as_object)
                .ok_or_else(|| invalid(format!("table {table_name} has no columns")))?;
            let mut columns = BTreeMap::new();
            for (column_name, column) in columns_json {
                let column_type =
                    ColumnType::parse(column.get("type").ok_or_else(|| {
                        invalid(format!("{table_name}.{column_name} has no type"))
                    })?)
                    .map_err(|e| invalid(format!("{table_name}.{column_name}: {}", e.0)))?;
                columns.insert(column_name.clone(), column_type);
            }
            let is_root = table
                .get("isRoot")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            tables.insert(
                table_name.clone(),
                TableSchema {
                    name: table_name.clone(),
                    columns,
                    is_root,
                },
            );
        }
        Ok(Self {
            name: name.to_string(),
            version: version.to_string(),
            tables,
        })
    }
}

/// A column type from its parts, for tests.
#[cfg(test)]
pub(crate) fn column_of(key: AtomType, value: Option<AtomType>, min: u64, max: u64) -> ColumnType {
    ColumnType {
        key,
        value,
        min,
        max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn column_types_parse() {
        let schema = DatabaseSchema::parse(&json!({
            "name": "DB", "version": "1.0.0",
            "tables": {"T": {"isRoot": true, "columns": {
                "s": {"type": "string"},
                "opt": {"type": {"key": {"type": "uuid", "refTable": "U"}, "min": 0, "max": 1}},
                "set": {"type": {"key": "string", "min": 0, "max": "unlimited"}},
                "map": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
                "key": {"type": {"key": {"type": "integer", "minInteger": 1, "maxInteger": 32767}}}
            }}}
        }))
        .unwrap();
        let table = &schema.tables["T"];
        assert!(table.is_root);
        assert!(table.columns["s"].is_scalar());
        assert!(table.columns["key"].is_scalar());
        assert_eq!(table.columns["key"].key, AtomType::Integer);
        let opt = &table.columns["opt"];
        assert!(!opt.is_scalar() && !opt.is_map() && opt.max == 1 && opt.key == AtomType::Uuid);
        assert_eq!(table.columns["set"].max, u64::MAX);
        assert!(table.columns["map"].is_map());
    }

    #[test]
    fn bad_schemas_are_errors() {
        assert!(DatabaseSchema::parse(&json!({"tables": {}})).is_err());
        assert!(
            DatabaseSchema::parse(
                &json!({"name": "x", "tables": {"T": {"columns": {"c": {"type": "blob"}}}}})
            )
            .is_err()
        );
        assert!(DatabaseSchema::parse(&json!({"name": "x", "tables": {"T": {}}})).is_err());
    }
}
