//! The typed Southbound replica: the generic OVSDB replica of the tables ovnbpf monitors, typed row
//! views ([`rows`]), the secondary indexes the compiler needs ([`index`]), and the monitor requests
//! with ovn-controller's conditional-monitoring rules ([`monitor`]). Every applied event yields a
//! change set listing exactly the rows inserted, modified and deleted. Touches nothing outside
//! itself; the session that feeds it lives in `ovsdb`.

pub mod extract;
pub mod index;
pub mod monitor;
pub mod rows;

use uuid::Uuid;

use crate::ovsdb::{
    replica::{ChangeSet, Replica, RowRef},
    session::SessionEvent,
};
use index::Indexes;
use rows::{DatapathBinding, LogicalFlow, PortBinding, SbGlobal};

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
        self.indexes
            .ports_by_datapath
            .get(&datapath)
            .into_iter()
            .flatten()
            .filter_map(|uuid| self.row(uuid))
    }

    /// Every logical flow that applies to `datapath`: its own and those of its datapath groups.
    pub fn flows_for_datapath(&self, datapath: Uuid) -> impl Iterator<Item = LogicalFlow> + '_ {
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
        own.chain(grouped).filter_map(|uuid| self.row(uuid))
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
