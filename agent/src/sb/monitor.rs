//! What ovnbpf asks the Southbound server for: the tables and columns of `rows::MONITORED`, with
//! ovn-controller's conditions unless `monitor-all` is set. Conditionally, a chassis receives the
//! rows of its *local datapaths* (those with a port bound here, grown through patch peers: a pod's
//! switch pulls in its router and every switch behind it) plus the rows every chassis needs
//! (patch/chassisredirect/external ports, flows on datapath groups, all chassis and encaps).

use std::collections::{BTreeSet, HashSet};

use serde_json::{Value, json};
use uuid::Uuid;

use super::{
    Southbound,
    rows::{
        self, ChassisPrivate, DatapathBinding, Fdb, LogicalFlow, MacBinding, MulticastGroup,
        PortBinding,
    },
};
use crate::ovsdb::session::MonitoredTable;

/// The monitor requests for the initial connection.
#[must_use]
pub fn monitored_tables(
    monitor_all: bool,
    chassis_name: &str,
    local: &LocalScope,
) -> Vec<MonitoredTable> {
    rows::MONITORED
        .iter()
        .map(|(table, columns)| MonitoredTable {
            name: (*table).to_string(),
            columns: Some(columns.iter().map(|c| (*c).to_string()).collect()),
            condition: if monitor_all {
                None
            } else {
                condition(table, chassis_name, local)
            },
        })
        .collect()
}

/// What the conditions depend on: this chassis's row and its local datapaths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalScope {
    pub chassis: Option<Uuid>,
    /// Logical ports bound here by configuration or CNI (ovn-controller's local iface-ids): their
    /// Port_Bindings must be replicated before they can be claimed.
    pub ports: BTreeSet<String>,
    pub datapaths: BTreeSet<Uuid>,
    pub datapath_keys: BTreeSet<u32>,
}

fn uuid_json(uuid: &Uuid) -> Value {
    json!(["uuid", uuid.to_string()])
}

/// The `where` clauses (ORed) for `table`, `None` for tables every chassis needs whole.
#[must_use]
pub fn condition(table: &str, chassis_name: &str, local: &LocalScope) -> Option<Value> {
    let datapath_clauses = |column: &str, function: &str| -> Vec<Value> {
        local
            .datapaths
            .iter()
            .map(|dp| json!([column, function, uuid_json(dp)]))
            .collect()
    };
    let clauses: Vec<Value> = match table {
        PortBinding::TABLE => {
            let mut clauses = vec![
                json!(["type", "==", "patch"]),
                json!(["type", "==", "chassisredirect"]),
                json!(["type", "==", "external"]),
            ];
            if let Some(chassis) = &local.chassis {
                clauses.push(json!(["chassis", "==", uuid_json(chassis)]));
                clauses.push(json!(["requested_chassis", "==", uuid_json(chassis)]));
            }
            clauses.extend(
                local
                    .ports
                    .iter()
                    .map(|port| json!(["logical_port", "==", port])),
            );
            clauses.extend(datapath_clauses("datapath", "=="));
            clauses
        }
        LogicalFlow::TABLE => {
            let mut clauses = vec![json!(["logical_dp_group", "!=", ["set", []]])];
            clauses.extend(datapath_clauses("logical_datapath", "=="));
            clauses
        }
        MacBinding::TABLE | MulticastGroup::TABLE => datapath_clauses("datapath", "=="),
        rows::Dns::TABLE => datapath_clauses("datapaths", "includes"),
        Fdb::TABLE => local
            .datapath_keys
            .iter()
            .map(|key| json!(["dp_key", "==", key]))
            .collect(),
        ChassisPrivate::TABLE => vec![json!(["name", "==", chassis_name])],
        // The backends this chassis probes: those behind its own ports.
        rows::ServiceMonitor::TABLE => local
            .ports
            .iter()
            .map(|port| json!(["logical_port", "==", port]))
            .collect(),
        _ => return None,
    };
    // An empty OR matches nothing; OVSDB spells that `false`.
    Some(if clauses.is_empty() {
        json!([false])
    } else {
        Value::Array(clauses)
    })
}

/// Computes the local scope: datapaths with a port bound to `chassis` (or named in
/// `local_ports`), closed over patch peers, like ovn-controller's `add_local_datapath`.
#[must_use]
pub fn local_scope(
    sb: &Southbound,
    chassis: Option<Uuid>,
    local_ports: &HashSet<String>,
) -> LocalScope {
    // From the indexes: O(local ports + the closure's patch ports), whatever the cluster's size.
    let mut pending: Vec<Uuid> = chassis
        .into_iter()
        .flat_map(|chassis| sb.ports_of_chassis(chassis))
        .chain(local_ports.iter().filter_map(|name| sb.port_by_name(name)))
        .filter_map(|port| port.datapath)
        .collect();
    let mut datapaths = BTreeSet::new();
    while let Some(datapath) = pending.pop() {
        if !datapaths.insert(datapath) {
            continue;
        }
        for port in sb.typed_ports_on_datapath(datapath) {
            if port.kind != "patch" {
                continue;
            }
            let peer = port
                .options
                .get("peer")
                .and_then(|peer| sb.port_by_name(peer));
            if let Some(peer_datapath) = peer.and_then(|p| p.datapath) {
                pending.push(peer_datapath);
            }
        }
    }
    let datapath_keys = datapaths
        .iter()
        .filter_map(|dp| sb.row::<DatapathBinding>(dp))
        .map(|dp| dp.tunnel_key)
        .collect();
    LocalScope {
        chassis,
        ports: local_ports.iter().cloned().collect(),
        datapaths,
        datapath_keys,
    }
}
