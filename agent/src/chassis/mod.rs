//! This node's own Southbound rows, as ovn-controller writes them: Chassis (name = system-id),
//! its Encap and Chassis_Private; Port_Binding claims (`chassis`, `encap`, `up`); and the
//! `nb_cfg` acknowledgement that makes `ovn-nbctl --wait=hv` work. Builds OVSDB transactions from
//! the replica's view; the caller runs them through the session. Reuses existing rows by name, so
//! a restarted agent takes over its rows instead of creating new ones.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use thiserror::Error;
use uuid::Uuid;

use crate::sb::{
    Southbound,
    rows::{Chassis, ChassisPrivate, Encap, MacBinding, PortBinding, ServiceMonitor},
};

/// Feature flags ovnbpf advertises in `Chassis.other_config`. northd ANDs them across all chassis,
/// so advertising a feature we do not implement would make northd emit flows we cannot honour,
/// and omitting one we implement would downgrade the whole cluster. Implemented:
///
/// - `port-up-notif`: we set `Port_Binding.up` only once the port's datapath is programmed, so
///   northd may report LSP `up` from it (instead of from `chassis` alone).
/// - `mac-binding-timestamp`: the MAC_Binding rows our routers learn carry the time they were
///   written (`daemon/mac_learning.rs`), so northd may age them out by the routers'
///   `mac_binding_age_threshold` (it ages none while a chassis lacks the flag).
///
/// Not advertised (yet): `ct-no-masked-label`, `ovn-ct-lb-related`,
/// `fdb-timestamp`, `ls-dpg-column`, `ct-commit-nat-v2`, `ct-commit-to-zone`,
/// `ovn-sample-with-registers`, `ct-next-zone`, `ct-label-flush`, `ct-state-save`: they describe
/// conntrack, FDB aging and sampling behaviour the eBPF datapath does not have yet.
pub const FEATURES: &[&str] = &["port-up-notif", "mac-binding-timestamp"];

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ChassisError {
    #[error("no system-id configured and {path} is unreadable: {reason}")]
    NoSystemId { path: String, reason: String },
    #[error("port {0} has no Port_Binding")]
    UnknownPort(String),
    #[error("this chassis is not registered yet")]
    NotRegistered,
}

/// How this node presents itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChassisConfig {
    /// Chassis name (OVS system-id).
    pub name: String,
    pub hostname: String,
    /// Tunnel endpoint address (Encap.ip).
    pub encap_ip: String,
    /// Whether other chassis are asked for outer UDP checksums (Encap.options:csum), like
    /// `ovn-encap-csum` (ovn-controller defaults to true, the agent to false).
    pub encap_csum: bool,
    pub monitor_all: bool,
    /// `ovn-bridge-mappings`, e.g. `physnet1:eth1`.
    pub bridge_mappings: String,
}

/// The system-id: the configured one, else the first line of `path` (as OVS stores it).
pub fn system_id(configured: Option<&str>, path: &str) -> Result<String, ChassisError> {
    if let Some(id) = configured.filter(|id| !id.trim().is_empty()) {
        return Ok(id.trim().to_string());
    }
    let text = std::fs::read_to_string(path).map_err(|e| ChassisError::NoSystemId {
        path: path.to_string(),
        reason: e.to_string(),
    })?;
    text.lines()
        .next()
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_string)
        .ok_or_else(|| ChassisError::NoSystemId {
            path: path.to_string(),
            reason: "empty file".into(),
        })
}

const ENCAP_TYPE: &str = "geneve";

fn ovsdb_map(map: &BTreeMap<String, String>) -> Value {
    json!([
        "map",
        map.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()
    ])
}

fn uuid_json(uuid: Uuid) -> Value {
    json!(["uuid", uuid.to_string()])
}

fn where_uuid(uuid: Uuid) -> Value {
    json!([["_uuid", "==", uuid_json(uuid)]])
}

impl ChassisConfig {
    /// `Chassis.other_config` as ovn-controller fills it, with our feature flags.
    #[must_use]
    pub fn other_config(&self) -> BTreeMap<String, String> {
        let mut config: BTreeMap<String, String> = [
            ("datapath-type", "ebpf"),
            ("iface-types", "veth"),
            ("is-interconn", "false"),
            ("ovn-bridge-mappings", self.bridge_mappings.as_str()),
            ("ovn-chassis-mac-mappings", ""),
            ("ovn-cms-options", ""),
            (
                "ovn-monitor-all",
                if self.monitor_all { "true" } else { "false" },
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for feature in FEATURES {
            config.insert((*feature).to_string(), "true".to_string());
        }
        config
    }

    fn encap_options(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("csum".to_string(), self.encap_csum.to_string())])
    }

    /// The operations that make the SB hold exactly our Chassis, Encap and Chassis_Private rows;
    /// empty when it already does.
    #[must_use]
    pub fn registration_ops(&self, sb: &Southbound) -> Vec<Value> {
        let mut ops = Vec::new();
        let existing = sb.chassis_by_name(&self.name);
        let encaps: Vec<Encap> = existing
            .iter()
            .flat_map(|chassis| chassis.encaps.iter())
            .filter_map(|uuid| sb.row::<Encap>(uuid))
            .collect();
        let encap_current = matches!(encaps.as_slice(), [encap]
            if encap.kind == ENCAP_TYPE && encap.ip == self.encap_ip
                && encap.options == self.encap_options() && encap.chassis_name == self.name);
        let encap_ref = if encap_current {
            uuid_json(encaps[0].uuid)
        } else {
            ops.push(
                json!({"op": "insert", "table": Encap::TABLE, "uuid-name": "encap", "row": {
                    "type": ENCAP_TYPE, "ip": self.encap_ip, "chassis_name": self.name,
                    "options": ovsdb_map(&self.encap_options()),
                }}),
            );
            json!(["named-uuid", "encap"])
        };
        let row = json!({
            "name": self.name,
            "hostname": self.hostname,
            "other_config": ovsdb_map(&self.other_config()),
            "encaps": ["set", [encap_ref]],
        });
        let chassis_ref = match &existing {
            Some(chassis) => {
                let up_to_date = encap_current
                    && chassis.hostname == self.hostname
                    && chassis.other_config == self.other_config();
                if !up_to_date {
                    ops.push(json!({"op": "update", "table": Chassis::TABLE, "where": where_uuid(chassis.uuid), "row": row}));
                }
                uuid_json(chassis.uuid)
            }
            None => {
                ops.push(json!({"op": "insert", "table": Chassis::TABLE, "uuid-name": "chassis", "row": row}));
                json!(["named-uuid", "chassis"])
            }
        };
        match sb.chassis_private_by_name(&self.name) {
            Some(private)
                if existing.is_some() && private.chassis == existing.as_ref().map(|c| c.uuid) => {}
            Some(private) => ops.push(json!({"op": "update", "table": ChassisPrivate::TABLE,
                "where": where_uuid(private.uuid), "row": {"chassis": chassis_ref}})),
            None => ops.push(json!({"op": "insert", "table": ChassisPrivate::TABLE,
                "row": {"name": self.name, "chassis": chassis_ref}})),
        }
        if !ops.is_empty() {
            ops.push(json!({"op": "comment", "comment": format!("ovnbpf: register chassis {}", self.name)}));
        }
        ops
    }

    /// Deletes our Chassis and Chassis_Private rows (Encaps go with the Chassis; port claims,
    /// weak references, are cleared by the server).
    #[must_use]
    pub fn cleanup_ops(&self) -> Vec<Value> {
        vec![
            json!({"op": "delete", "table": Chassis::TABLE, "where": [["name", "==", self.name]]}),
            json!({"op": "delete", "table": ChassisPrivate::TABLE, "where": [["name", "==", self.name]]}),
            json!({"op": "comment", "comment": format!("ovnbpf: remove chassis {}", self.name)}),
        ]
    }
}

/// A write that binds a port here (see [`bind_op`]).
#[derive(Clone, Debug, PartialEq)]
pub struct BindWrite {
    pub op: Value,
    /// It sets `chassis` to this chassis.
    pub claims: bool,
    /// It sets `up` to true.
    pub sets_up: bool,
}

/// The one operation that makes `port` bound to `chassis` as ovn-controller leaves it: `chassis`
/// set, `encap` empty (a chassis with one Encap, as ovn-controller does), and `up` as the
/// datapath is (`programmed`) in the same operation as the claim, so no claim written later can
/// undo the `up` of an earlier one. `up` is written only where northd created it, and on a port
/// already bound here only set to true (like ovn-controller, which never reports a bound port
/// down again). `None` when nothing differs.
#[must_use]
pub fn bind_op(port: &PortBinding, chassis: Uuid, programmed: bool) -> Option<BindWrite> {
    let ours = port.chassis == Some(chassis);
    let mut row = serde_json::Map::new();
    if !ours {
        row.insert("chassis".into(), uuid_json(chassis));
    }
    if port.encap.is_some() {
        row.insert("encap".into(), json!(["set", []]));
    }
    let sets_up = port.up.is_some() && programmed && (!ours || port.up == Some(false));
    if port.up.is_some() && (!ours || sets_up) {
        row.insert("up".into(), json!(programmed));
    }
    if row.is_empty() {
        return None;
    }
    Some(BindWrite {
        op: json!({"op": "update", "table": PortBinding::TABLE, "where": where_uuid(port.uuid), "row": row}),
        claims: !ours,
        sets_up,
    })
}

/// Releases `port` if we hold it: clears `chassis` and `encap`, sets `up` false.
#[must_use]
pub fn release_ops(port: &PortBinding, chassis: Uuid) -> Vec<Value> {
    if port.chassis != Some(chassis) {
        return Vec::new();
    }
    let mut row = json!({"chassis": ["set", []], "encap": ["set", []]});
    if port.up.is_some() {
        row["up"] = json!(false);
    }
    vec![
        json!({"op": "update", "table": PortBinding::TABLE, "where": where_uuid(port.uuid), "row": row}),
    ]
}

/// Releases `port` if it is bound to `chassis` when the transaction runs, whatever the replica
/// shows now: a port another chassis took meanwhile is left alone. Clears `chassis` and `encap`,
/// sets `up` false (where northd created it).
#[must_use]
pub fn release_op_if_ours(port: &PortBinding, chassis: Uuid) -> Value {
    let mut row = json!({"chassis": ["set", []], "encap": ["set", []]});
    if port.up.is_some() {
        row["up"] = json!(false);
    }
    let condition = json!([
        ["_uuid", "==", uuid_json(port.uuid)],
        ["chassis", "==", uuid_json(chassis)]
    ]);
    json!({"op": "update", "table": PortBinding::TABLE, "where": condition, "row": row})
}

/// Sets Service_Monitor row `monitor`'s `status` (what this chassis's probes decided).
#[must_use]
pub fn service_monitor_status_op(monitor: Uuid, status: &str) -> Value {
    json!({
        "op": "update",
        "table": ServiceMonitor::TABLE,
        "where": where_uuid(monitor),
        "row": {"status": status},
    })
}

/// Inserts the MAC_Binding a router port `port` learned (`ip` at `mac`), stamped `timestamp_ms`,
/// as pinctrl's `put_arp` does.
#[must_use]
pub fn mac_binding_insert_op(
    port: &str,
    ip: &str,
    mac: &str,
    datapath: Uuid,
    timestamp_ms: i64,
) -> Value {
    json!({
        "op": "insert",
        "table": MacBinding::TABLE,
        "row": {
            "logical_port": port,
            "ip": ip,
            "mac": mac,
            "datapath": uuid_json(datapath),
            "timestamp": timestamp_ms,
        },
    })
}

/// Gives MAC_Binding row `binding` the MAC `mac` a router learned, stamped `timestamp_ms`.
#[must_use]
pub fn mac_binding_update_op(binding: Uuid, mac: &str, timestamp_ms: i64) -> Value {
    json!({
        "op": "update",
        "table": MacBinding::TABLE,
        "where": where_uuid(binding),
        "row": {"mac": mac, "timestamp": timestamp_ms},
    })
}

/// Acknowledges `nb_cfg` in our Chassis_Private row, with the time it was reached (ms since epoch).
#[must_use]
pub fn nb_cfg_ops(private: &ChassisPrivate, nb_cfg: i64, timestamp_ms: i64) -> Vec<Value> {
    if private.nb_cfg == nb_cfg {
        return Vec::new();
    }
    vec![
        json!({"op": "update", "table": ChassisPrivate::TABLE, "where": where_uuid(private.uuid),
        "row": {"nb_cfg": nb_cfg, "nb_cfg_timestamp": timestamp_ms}}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ChassisConfig {
        ChassisConfig {
            name: "node1".into(),
            hostname: "node1.example".into(),
            encap_ip: "172.31.0.10".into(),
            encap_csum: true,
            monitor_all: false,
            bridge_mappings: String::new(),
        }
    }

    #[test]
    fn a_new_chassis_inserts_all_three_rows() {
        let ops = config().registration_ops(&Southbound::new());
        let tables: Vec<_> = ops.iter().filter_map(|op| op["table"].as_str()).collect();
        assert_eq!(tables, ["Encap", "Chassis", "Chassis_Private"]);
        assert_eq!(
            ops[1]["row"]["encaps"],
            json!(["set", [["named-uuid", "encap"]]])
        );
        assert_eq!(ops[2]["row"]["chassis"], json!(["named-uuid", "chassis"]));
        let other_config = &ops[1]["row"]["other_config"];
        assert!(other_config.to_string().contains("port-up-notif"));
        assert!(other_config.to_string().contains("mac-binding-timestamp"));
        assert!(!other_config.to_string().contains("ct-no-masked-label"));
    }

    #[test]
    fn system_id_comes_from_config_or_file() {
        assert_eq!(
            system_id(Some(" node-7 "), "/nonexistent").unwrap(),
            "node-7"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("system-id.conf");
        std::fs::write(&path, "abc-123\n").unwrap();
        assert_eq!(system_id(None, path.to_str().unwrap()).unwrap(), "abc-123");
        assert!(matches!(
            system_id(None, "/nonexistent/x"),
            Err(ChassisError::NoSystemId { .. })
        ));
        std::fs::write(&path, "\n").unwrap();
        assert!(system_id(Some(""), path.to_str().unwrap()).is_err());
    }
}
