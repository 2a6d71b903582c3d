//! Secondary indexes over the Southbound replica that the compiler and the chassis logic need,
//! maintained from each change set in O(changed rows): Port_Binding by logical_port and by
//! (datapath, tunnel_key), ports per datapath, Datapath_Binding by tunnel_key, logical flows by
//! datapath and by datapath group, groups by member datapath, Datapath_Binding, Chassis,
//! Chassis_Private and Address_Set by name, MAC_Binding by (logical_port, ip) (its index in the
//! schema).

use std::{
    collections::{HashMap, HashSet},
    hash::Hash,
};

use uuid::Uuid;

use super::rows::{
    AddressSet, Chassis, ChassisPrivate, DatapathBinding, LogicalDpGroup, LogicalFlow, MacBinding,
    PortBinding,
};
use crate::ovsdb::replica::{ChangeSet, Replica, RowRef, TableChanges};

#[derive(Debug, Default)]
pub struct Indexes {
    pub port_by_name: HashMap<String, Uuid>,
    /// (datapath row, port tunnel key) → Port_Binding.
    pub port_by_key: HashMap<(Uuid, u32), Uuid>,
    pub ports_by_datapath: HashMap<Uuid, HashSet<Uuid>>,
    /// Ports with a type (patch, localnet, chassisredirect, …) per datapath: few per datapath,
    /// unlike its VIFs.
    pub typed_ports_by_datapath: HashMap<Uuid, HashSet<Uuid>>,
    /// Ports whose `chassis` or `requested_chassis` is a chassis row (the closure's seeds).
    pub ports_by_chassis: HashMap<Uuid, HashSet<Uuid>>,
    pub datapath_by_key: HashMap<u32, Uuid>,
    /// Datapath_Binding by `external_ids:name` (the NB switch's or router's name).
    pub datapath_by_name: HashMap<String, Uuid>,
    pub flows_by_datapath: HashMap<Uuid, HashSet<Uuid>>,
    pub flows_by_group: HashMap<Uuid, HashSet<Uuid>>,
    pub groups_by_datapath: HashMap<Uuid, HashSet<Uuid>>,
    pub chassis_by_name: HashMap<String, Uuid>,
    pub chassis_private_by_name: HashMap<String, Uuid>,
    /// Address_Set name → row (`$name` in flow matches).
    pub address_set_by_name: HashMap<String, Uuid>,
    /// MAC_Binding by (`logical_port`, `ip`): what a router port learned of an address.
    pub mac_binding_by_port_ip: HashMap<(String, String), Uuid>,
}

/// Removes `key → uuid` only if the key still maps to that row (another row may have taken it).
fn remove_if<K: Eq + Hash>(map: &mut HashMap<K, Uuid>, key: &K, uuid: Uuid) {
    if map.get(key) == Some(&uuid) {
        map.remove(key);
    }
}

fn remove_member<K: Eq + Hash>(map: &mut HashMap<K, HashSet<Uuid>>, key: K, uuid: Uuid) {
    if let Some(members) = map.get_mut(&key) {
        members.remove(&uuid);
        if members.is_empty() {
            map.remove(&key);
        }
    }
}

impl Indexes {
    /// Brings the indexes in line with `changes`, which `replica` has just applied.
    pub fn update(&mut self, replica: &Replica, changes: &ChangeSet) {
        for (table, change) in &changes.tables {
            let Some(current) = replica.table(table) else {
                continue;
            };
            let layout = current.layout();
            let old_rows = change.deleted.iter().chain(&change.modified);
            for (uuid, row) in old_rows {
                self.remove_row(
                    table,
                    &RowRef {
                        uuid: *uuid,
                        layout,
                        row,
                    },
                );
            }
            for uuid in new_uuids(change) {
                if let Some(row) = current.row(&uuid) {
                    self.add_row(table, &row);
                }
            }
        }
    }

    fn remove_row(&mut self, table: &str, row: &RowRef<'_>) {
        let uuid = row.uuid;
        match table {
            PortBinding::TABLE => {
                let port = PortBinding::from_row(row);
                remove_if(&mut self.port_by_name, &port.logical_port, uuid);
                if let Some(datapath) = port.datapath {
                    remove_if(&mut self.port_by_key, &(datapath, port.tunnel_key), uuid);
                    remove_member(&mut self.ports_by_datapath, datapath, uuid);
                    remove_member(&mut self.typed_ports_by_datapath, datapath, uuid);
                }
                for chassis in [port.chassis, port.requested_chassis].into_iter().flatten() {
                    remove_member(&mut self.ports_by_chassis, chassis, uuid);
                }
            }
            DatapathBinding::TABLE => {
                let datapath = DatapathBinding::from_row(row);
                remove_if(&mut self.datapath_by_key, &datapath.tunnel_key, uuid);
                if let Some(name) = datapath.external_ids.get("name") {
                    remove_if(&mut self.datapath_by_name, name, uuid);
                }
            }
            LogicalFlow::TABLE => {
                let flow = LogicalFlow::from_row(row);
                if let Some(datapath) = flow.logical_datapath {
                    remove_member(&mut self.flows_by_datapath, datapath, uuid);
                }
                if let Some(group) = flow.logical_dp_group {
                    remove_member(&mut self.flows_by_group, group, uuid);
                }
            }
            LogicalDpGroup::TABLE => {
                for datapath in LogicalDpGroup::from_row(row).datapaths {
                    remove_member(&mut self.groups_by_datapath, datapath, uuid);
                }
            }
            Chassis::TABLE => remove_if(
                &mut self.chassis_by_name,
                &Chassis::from_row(row).name,
                uuid,
            ),
            ChassisPrivate::TABLE => {
                remove_if(
                    &mut self.chassis_private_by_name,
                    &ChassisPrivate::from_row(row).name,
                    uuid,
                );
            }
            AddressSet::TABLE => remove_if(
                &mut self.address_set_by_name,
                &AddressSet::from_row(row).name,
                uuid,
            ),
            MacBinding::TABLE => {
                let binding = MacBinding::from_row(row);
                remove_if(
                    &mut self.mac_binding_by_port_ip,
                    &(binding.logical_port, binding.ip),
                    uuid,
                );
            }
            _ => {}
        }
    }

    fn add_row(&mut self, table: &str, row: &RowRef<'_>) {
        let uuid = row.uuid;
        match table {
            PortBinding::TABLE => {
                let port = PortBinding::from_row(row);
                if let Some(datapath) = port.datapath {
                    self.port_by_key.insert((datapath, port.tunnel_key), uuid);
                    self.ports_by_datapath
                        .entry(datapath)
                        .or_default()
                        .insert(uuid);
                    if !port.kind.is_empty() {
                        self.typed_ports_by_datapath
                            .entry(datapath)
                            .or_default()
                            .insert(uuid);
                    }
                }
                for chassis in [port.chassis, port.requested_chassis].into_iter().flatten() {
                    self.ports_by_chassis
                        .entry(chassis)
                        .or_default()
                        .insert(uuid);
                }
                self.port_by_name.insert(port.logical_port, uuid);
            }
            DatapathBinding::TABLE => {
                let datapath = DatapathBinding::from_row(row);
                self.datapath_by_key.insert(datapath.tunnel_key, uuid);
                if let Some(name) = datapath.external_ids.get("name") {
                    self.datapath_by_name.insert(name.clone(), uuid);
                }
            }
            LogicalFlow::TABLE => {
                let flow = LogicalFlow::from_row(row);
                if let Some(datapath) = flow.logical_datapath {
                    self.flows_by_datapath
                        .entry(datapath)
                        .or_default()
                        .insert(uuid);
                }
                if let Some(group) = flow.logical_dp_group {
                    self.flows_by_group.entry(group).or_default().insert(uuid);
                }
            }
            LogicalDpGroup::TABLE => {
                for datapath in LogicalDpGroup::from_row(row).datapaths {
                    self.groups_by_datapath
                        .entry(datapath)
                        .or_default()
                        .insert(uuid);
                }
            }
            Chassis::TABLE => {
                self.chassis_by_name
                    .insert(Chassis::from_row(row).name, uuid);
            }
            ChassisPrivate::TABLE => {
                self.chassis_private_by_name
                    .insert(ChassisPrivate::from_row(row).name, uuid);
            }
            AddressSet::TABLE => {
                self.address_set_by_name
                    .insert(AddressSet::from_row(row).name, uuid);
            }
            MacBinding::TABLE => {
                let binding = MacBinding::from_row(row);
                self.mac_binding_by_port_ip
                    .insert((binding.logical_port, binding.ip), uuid);
            }
            _ => {}
        }
    }
}

fn new_uuids(change: &TableChanges) -> impl Iterator<Item = Uuid> + '_ {
    change
        .inserted
        .iter()
        .copied()
        .chain(change.modified.iter().map(|(uuid, _)| *uuid))
}
