//! Reading whole tables through `ovn-sbctl --format=json list`, the independent view of the
//! Southbound DB that tests compare ovnbpf's replica against.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::ovn::OvnLab;

/// One row: column name → JSON value in OVSDB notation (without `_uuid`).
pub type DumpedRow = BTreeMap<String, Value>;

/// Every row of `table`, keyed by its UUID.
pub fn dump_table(lab: &OvnLab, table: &str) -> Result<BTreeMap<String, DumpedRow>> {
    dump_table_with(|args| lab.sbctl(args), table)
}

/// Like [`dump_table`], through any `ovn-sbctl` runner (e.g. a clustered lab's).
pub fn dump_table_with(
    sbctl: impl Fn(&[&str]) -> Result<String>,
    table: &str,
) -> Result<BTreeMap<String, DumpedRow>> {
    let text = sbctl(&["--format=json", "list", table])?;
    let json: Value =
        serde_json::from_str(&text).with_context(|| format!("ovn-sbctl list {table}"))?;
    let headings: Vec<&str> = json["headings"]
        .as_array()
        .context("no headings")?
        .iter()
        .map(|h| h.as_str().unwrap_or_default())
        .collect();
    let mut rows = BTreeMap::new();
    for row in json["data"].as_array().context("no data")? {
        let values = row.as_array().context("row is not an array")?;
        let mut uuid = None;
        let mut columns = DumpedRow::new();
        for (heading, value) in headings.iter().zip(values) {
            match *heading {
                "_uuid" => {
                    uuid = value.get(1).and_then(Value::as_str).map(str::to_string);
                }
                "_version" => {}
                column => {
                    columns.insert(column.to_string(), value.clone());
                }
            }
        }
        let Some(uuid) = uuid else {
            bail!("{table} row without _uuid")
        };
        rows.insert(uuid, columns);
    }
    Ok(rows)
}
