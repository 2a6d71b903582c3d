//! The typed Southbound replica: the generic OVSDB replica of the tables ovnbpf monitors, typed row
//! views ([`rows`]), the secondary indexes the compiler needs ([`index`]), and the monitor requests
//! with ovn-controller's conditional-monitoring rules ([`monitor`]). Every applied event yields a
//! change set listing exactly the rows inserted, modified and deleted. Touches nothing outside
//! itself; the session that feeds it lives in `ovsdb`.

pub mod extract;
pub mod index;
pub mod monitor;
pub mod rows;
#[cfg(test)]
pub mod testing;

use uuid::Uuid;

use crate::ovsdb::{
    replica::{ChangeSet, Replica, RowRef},
    session::SessionEvent,
};
use index::Indexes;
use rows::{AddressSet, DatapathBinding, LogicalFlow, PortBinding, SbGlobal};

/// The Southbound database name.
pub const DATABASE: &str = "OVN_Southbound";

/// A row type of the Southbound schema (see [`rows`]).
pub trait SbRow: Sized {
    const TABLE: &'static str;
    fn from_row(row: &RowRef<'_>) -> Self;
}

/// The replica plus indexes.
#[derive(Debug, Default)]
pub struct Southbound {
    replica: Replica,
    indexes: Indexes,
}

impl Southbound {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies a session event and returns what it changed.
    pub fn apply(&mut self, event: &SessionEvent) -> ChangeSet {
        let changes = self.replica.apply(event);
        if changes.resynced {
            // A resync may have changed the layout of every table: rebuild from scratch.
            self.indexes = Indexes::default();
            let everything = self.everything_as_inserted();
            self.indexes.update(&self.replica, &everything);
        } else {
            self.indexes.update(&self.replica, &changes);
        }
        changes
    }

    fn everything_as_inserted(&self) -> ChangeSet {
        let mut changes = ChangeSet::default();
        for (name, table) in self.replica.tables() {
            let entry = changes.tables.entry(name.to_string()).or_default();
            entry.inserted.extend(table.rows().map(|row| row.uuid));
        }
        changes
    }

    #[must_use]
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    #[must_use]
    pub fn indexes(&self) -> &Indexes {
        &self.indexes
    }

    /// One row of type `T`.
    #[must_use]
    pub fn row<T: SbRow>(&self, uuid: &Uuid) -> Option<T> {
        self.replica
            .table(T::TABLE)?
            .row(uuid)
            .map(|row| T::from_row(&row))
    }

    /// Every row of type `T` (in no particular order).
    pub fn rows<T: SbRow>(&self) -> impl Iterator<Item = T> + '_ {
        self.replica
            .table(T::TABLE)
            .into_iter()
            .flat_map(|table| table.rows().map(|row| T::from_row(&row)))
    }

    #[must_use]
    pub fn sb_global(&self) -> Option<SbGlobal> {
        self.rows::<SbGlobal>().next()
    }

    /// The datapath of the NB switch or router named `name`.
    #[must_use]
    pub fn datapath_by_name(&self, name: &str) -> Option<DatapathBinding> {
        self.row(self.indexes.datapath_by_name.get(name)?)
    }

    /// The Address_Set named `name` (`$name` in flow matches).
    #[must_use]
    pub fn address_set(&self, name: &str) -> Option<AddressSet> {
        self.row(self.indexes.address_set_by_name.get(name)?)
    }

    /// The MAC_Binding of `ip` (as OVN writes it) on router port `logical_port`.
    #[must_use]
    pub fn mac_binding(&self, logical_port: &str, ip: &str) -> Option<rows::MacBinding> {
        let key = (logical_port.to_string(), ip.to_string());
        self.row(self.indexes.mac_binding_by_port_ip.get(&key)?)
    }

    #[must_use]
    pub fn port_by_name(&self, logical_port: &str) -> Option<PortBinding> {
        self.row(self.indexes.port_by_name.get(logical_port)?)
    }

    /// The port with tunnel key `port_key` on the datapath with tunnel key `datapath_key`.
    #[must_use]
    pub fn port_by_key(&self, datapath_key: u32, port_key: u32) -> Option<PortBinding> {
        let datapath = self.indexes.datapath_by_key.get(&datapath_key)?;
        self.row(self.indexes.port_by_key.get(&(*datapath, port_key))?)
    }

    #[must_use]
    pub fn datapath_by_key(&self, tunnel_key: u32) -> Option<DatapathBinding> {
        self.row(self.indexes.datapath_by_key.get(&tunnel_key)?)
    }

    pub fn ports_on_datapath(&self, datapath: Uuid) -> impl Iterator<Item = PortBinding> + '_ {
        self.ports_listed(self.indexes.ports_by_datapath.get(&datapath))
    }

    /// The ports of `datapath` that have a type (patch, localnet, …), without its VIFs.
    pub fn typed_ports_on_datapath(
        &self,
        datapath: Uuid,
    ) -> impl Iterator<Item = PortBinding> + '_ {
        self.ports_listed(self.indexes.typed_ports_by_datapath.get(&datapath))
    }

    /// The ports bound to `chassis` or requested for it.
    pub fn ports_of_chassis(&self, chassis: Uuid) -> impl Iterator<Item = PortBinding> + '_ {
        self.ports_listed(self.indexes.ports_by_chassis.get(&chassis))
    }

    /// The Port_Binding rows an index entry lists.
    fn ports_listed<'a>(
        &'a self,
        rows: Option<&'a std::collections::HashSet<Uuid>>,
    ) -> impl Iterator<Item = PortBinding> + 'a {
        rows.into_iter().flatten().filter_map(|uuid| self.row(uuid))
    }

    /// Every logical flow that applies to `datapath`: its own and those of its datapath groups.
    pub fn flows_for_datapath(&self, datapath: Uuid) -> impl Iterator<Item = LogicalFlow> + '_ {
        self.flow_uuids_for_datapath(datapath)
            .filter_map(|uuid| self.row(&uuid))
    }

    /// The rows of [`Self::flows_for_datapath`], without reading them.
    pub fn flow_uuids_for_datapath(&self, datapath: Uuid) -> impl Iterator<Item = Uuid> + '_ {
        let own = self
            .indexes
            .flows_by_datapath
            .get(&datapath)
            .into_iter()
            .flatten();
        let grouped = self
            .indexes
            .groups_by_datapath
            .get(&datapath)
            .into_iter()
            .flatten()
            .flat_map(|group| self.indexes.flows_by_group.get(group).into_iter().flatten());
        own.chain(grouped).copied()
    }

    #[must_use]
    pub fn chassis_by_name(&self, name: &str) -> Option<rows::Chassis> {
        self.row(self.indexes.chassis_by_name.get(name)?)
    }

    #[must_use]
    pub fn chassis_private_by_name(&self, name: &str) -> Option<rows::ChassisPrivate> {
        self.row(self.indexes.chassis_private_by_name.get(name)?)
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, sync::Arc};

    use serde_json::json;

    use super::*;
    use crate::ovsdb::{
        schema::DatabaseSchema,
        session::{MonitorMethod, UpdateFormat},
    };

    const DP: &str = "11111111-1111-4111-8111-111111111111";
    const PB: &str = "22222222-2222-4222-8222-222222222222";

    /// A Southbound whose schema has Port_Binding `columns` (all monitored) and Datapath_Binding
    /// `tunnel_key`, with datapath DP (key 7) and Port_Binding PB = `port` in its snapshot.
    fn southbound_with(
        version: &str,
        columns: serde_json::Value,
        port: serde_json::Value,
    ) -> Southbound {
        let names: Vec<String> = columns
            .as_object()
            .map(|columns| columns.keys().cloned().collect())
            .unwrap_or_default();
        let schema = DatabaseSchema::parse(
            &json!({"name": "OVN_Southbound", "version": version, "tables": {
                "Port_Binding": {"columns": columns},
                "Datapath_Binding": {"columns": {"tunnel_key": {"type": "integer"}}}
            }}),
        )
        .unwrap();
        let monitored: BTreeMap<String, Vec<String>> = [
            ("Port_Binding".to_string(), names),
            ("Datapath_Binding".to_string(), vec!["tunnel_key".into()]),
        ]
        .into();
        let mut sb = Southbound::new();
        sb.apply(&SessionEvent::Snapshot {
            remote: "test".into(),
            method: MonitorMethod::MonitorCondSince,
            schema: Arc::new(schema),
            monitored,
            updates: json!({
                "Datapath_Binding": {DP: {"initial": {"tunnel_key": 7}}},
                "Port_Binding": {PB: {"initial": port}}
            })
            .into(),
            format: UpdateFormat::Update2,
            resumed: false,
        });
        sb
    }

    /// A Southbound built from a schema of another OVN version: Port_Binding lacks `up` and has
    /// a column ovnbpf does not know.
    fn southbound_of_another_version() -> Southbound {
        southbound_with(
            "99.0.0",
            json!({
                "logical_port": {"type": "string"},
                "datapath": {"type": {"key": {"type": "uuid", "refTable": "Datapath_Binding"}}},
                "tunnel_key": {"type": "integer"},
                "future_column": {"type": "string"}
            }),
            json!({"logical_port": "p1.ns", "datapath": ["uuid", DP], "tunnel_key": 3, "future_column": "x"}),
        )
    }

    #[test]
    fn rows_of_other_schema_versions_decode_with_defaults() {
        let sb = southbound_of_another_version();
        let port = sb.port_by_name("p1.ns").expect("indexed by name");
        assert_eq!(port.tunnel_key, 3);
        assert_eq!(port.up, None, "a column the server lacks reads as absent");
        assert!(port.options.is_empty() && port.kind.is_empty());
        assert_eq!(
            sb.port_by_key(7, 3).map(|p| p.logical_port),
            Some("p1.ns".into())
        );
        assert_eq!(
            sb.datapath_by_key(7).map(|d| d.uuid.to_string()),
            Some(DP.to_string())
        );
    }

    #[test]
    fn indexes_follow_modifications_and_deletions() {
        let mut sb = southbound_of_another_version();
        sb.apply(&SessionEvent::Update {
            updates: json!({"Port_Binding": {PB: {"modify": {"logical_port": "renamed.ns", "tunnel_key": 4}}}}).into(),
            format: UpdateFormat::Update2,
        });
        assert!(sb.port_by_name("p1.ns").is_none());
        assert!(sb.port_by_key(7, 3).is_none());
        assert_eq!(
            sb.port_by_key(7, 4).map(|p| p.logical_port),
            Some("renamed.ns".into())
        );
        let changes = sb.apply(&SessionEvent::Update {
            updates: json!({"Port_Binding": {PB: {"delete": null}}}).into(),
            format: UpdateFormat::Update2,
        });
        assert_eq!(changes.table("Port_Binding").unwrap().deleted.len(), 1);
        assert!(sb.port_by_name("renamed.ns").is_none());
        assert_eq!(sb.ports_on_datapath(DP.parse().unwrap()).count(), 0);
    }

    #[test]
    fn typed_and_chassis_indexes_follow_the_rows() {
        const CHASSIS: &str = "33333333-3333-4333-8333-333333333333";
        const OTHER: &str = "44444444-4444-4444-8444-444444444444";
        let uuid_column = |table: &str| json!({"type": {"key": {"type": "uuid", "refTable": table}, "min": 0, "max": 1}});
        let mut sb = southbound_with(
            "20.0.0",
            json!({
                "logical_port": {"type": "string"},
                "type": {"type": "string"},
                "datapath": uuid_column("Datapath_Binding"),
                "chassis": uuid_column("Chassis"),
                "requested_chassis": uuid_column("Chassis"),
                "tunnel_key": {"type": "integer"}
            }),
            json!({"logical_port": "lrp", "type": "patch", "datapath": ["uuid", DP], "requested_chassis": ["uuid", CHASSIS], "tunnel_key": 3}),
        );
        let datapath: Uuid = DP.parse().unwrap();
        let names = |ports: Vec<PortBinding>| -> Vec<String> {
            ports.into_iter().map(|p| p.logical_port).collect()
        };
        assert_eq!(
            names(sb.typed_ports_on_datapath(datapath).collect()),
            ["lrp"]
        );
        assert_eq!(
            names(sb.ports_of_chassis(CHASSIS.parse().unwrap()).collect()),
            ["lrp"]
        );
        sb.apply(&SessionEvent::Update {
            updates: json!({"Port_Binding": {PB: {"modify": {"type": "", "requested_chassis": ["set", []], "chassis": ["uuid", OTHER]}}}}).into(),
            format: UpdateFormat::Update2,
        });
        assert_eq!(sb.typed_ports_on_datapath(datapath).count(), 0, "a VIF now");
        assert_eq!(sb.ports_of_chassis(CHASSIS.parse().unwrap()).count(), 0);
        assert_eq!(
            names(sb.ports_of_chassis(OTHER.parse().unwrap()).collect()),
            ["lrp"]
        );
        sb.apply(&SessionEvent::Update {
            updates: json!({"Port_Binding": {PB: {"delete": null}}}).into(),
            format: UpdateFormat::Update2,
        });
        assert_eq!(sb.ports_of_chassis(OTHER.parse().unwrap()).count(), 0);
        assert!(sb.indexes().ports_by_chassis.is_empty());
    }
}
