//! Flood groups: Multicast_Group rows → a header entry plus one member entry per listed port,
//! updated member by member from the update's set diff (O(change)), and re-resolved when a
//! listed Port_Binding arrives or changes its key. Touches the SB replica (read) and the
//! compiler's group state.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use super::{Compiler, Delta, EntryId};
use crate::{
    ovsdb::replica::SetChange,
    pipeline::ir::IrEntry,
    sb::{
        Southbound,
        rows::{DatapathBinding, MulticastGroup, PortBinding},
    },
};

/// A flood group's entries: its header and one entry per member port (by Port_Binding row);
/// `None` for a listed port whose Port_Binding is not (yet) in the replica.
#[derive(Debug)]
pub(super) struct GroupState {
    header: IrEntry,
    header_id: EntryId,
    members: HashMap<Uuid, Option<EntryId>>,
}

impl Compiler {
    /// Whether a group's datapath, key and name are what its header entry says (read without
    /// decoding its member list).
    pub(super) fn group_header_unchanged(&self, sb: &Southbound, uuid: Uuid) -> bool {
        let Some(state) = self.groups.get(&uuid) else {
            return false;
        };
        group_header(sb, uuid).is_some_and(|header| header == state.header)
    }

    /// Applies the members a group gained and lost (from the update's set diff): O(change).
    pub(super) fn apply_member_change(
        &mut self,
        sb: &Southbound,
        uuid: Uuid,
        change: &SetChange,
        delta: &mut Delta,
    ) {
        let Some(mut state) = self.groups.remove(&uuid) else {
            return;
        };
        let IrEntry::FloodGroup {
            datapath,
            key: group,
            ..
        } = state.header
        else {
            self.groups.insert(uuid, state);
            return;
        };
        for port in change.removed.iter().filter_map(|a| a.as_uuid()) {
            self.unlist_member(uuid, &mut state, port, delta);
        }
        let key_of = port_key_reader(sb);
        for port in change.added.iter().filter_map(|a| a.as_uuid()) {
            let key = key_of.as_ref().and_then(|read| read(&port));
            self.list_member(uuid, &mut state, (datapath, group), port, key, delta);
        }
        self.groups.insert(uuid, state);
    }

    /// Records `port` as listed by group `uuid`, with a member entry when its key is known.
    pub(super) fn list_member(
        &mut self,
        uuid: Uuid,
        state: &mut GroupState,
        (datapath, group): (u32, u32),
        port: Uuid,
        key: Option<u32>,
        delta: &mut Delta,
    ) {
        self.port_groups.entry(port).or_default().insert(uuid);
        let entry = key.map(|key| {
            let member = IrEntry::FloodMember {
                datapath,
                group,
                port: key,
            };
            self.add(member, delta)
        });
        if let Some(Some(old)) = state.members.insert(port, entry) {
            self.remove(old, delta);
        }
    }

    pub(super) fn unlist_member(
        &mut self,
        uuid: Uuid,
        state: &mut GroupState,
        port: Uuid,
        delta: &mut Delta,
    ) {
        if let Some(Some(entry)) = state.members.remove(&port) {
            self.remove(entry, delta);
        }
        if let Some(groups) = self.port_groups.get_mut(&port) {
            groups.remove(&uuid);
            if groups.is_empty() {
                self.port_groups.remove(&port);
            }
        }
    }

    /// A Port_Binding row changed: re-resolve its member entries in the groups listing it.
    pub(super) fn refresh_memberships(&mut self, sb: &Southbound, port: Uuid, delta: &mut Delta) {
        let Some(groups) = self.port_groups.get(&port).cloned() else {
            return;
        };
        let key = port_key_reader(sb).and_then(|read| read(&port));
        for uuid in groups {
            let Some(mut state) = self.groups.remove(&uuid) else {
                continue;
            };
            if let IrEntry::FloodGroup {
                datapath,
                key: group,
                ..
            } = state.header
            {
                self.list_member(uuid, &mut state, (datapath, group), port, key, delta);
            }
            self.groups.insert(uuid, state);
        }
    }

    /// Brings one Multicast_Group's entries up to date, touching only the members that changed.
    pub(super) fn update_group(&mut self, sb: &Southbound, uuid: Uuid, delta: &mut Delta) {
        let Some(group) = sb.row::<MulticastGroup>(&uuid) else {
            self.retract_group(uuid, delta);
            return;
        };
        let Some(datapath) = group
            .datapath
            .and_then(|dp| sb.row::<DatapathBinding>(&dp))
            .map(|dp| dp.tunnel_key)
        else {
            self.retract_group(uuid, delta);
            return;
        };
        let header = IrEntry::FloodGroup {
            datapath,
            key: group.tunnel_key,
            name: group.name.clone(),
        };
        if self
            .groups
            .get(&uuid)
            .is_some_and(|state| state.header != header)
        {
            self.retract_group(uuid, delta);
        }
        if !self.groups.contains_key(&uuid) {
            let header_id = self.add(header.clone(), delta);
            self.groups.insert(
                uuid,
                GroupState {
                    header,
                    header_id,
                    members: HashMap::new(),
                },
            );
        }
        let ports: HashSet<Uuid> = group.ports.iter().copied().collect();
        let Some(mut state) = self.groups.remove(&uuid) else {
            return;
        };
        let gone: Vec<Uuid> = state
            .members
            .keys()
            .filter(|p| !ports.contains(p))
            .copied()
            .collect();
        for port in gone {
            self.unlist_member(uuid, &mut state, port, delta);
        }
        let key_of = port_key_reader(sb);
        for port in ports {
            if matches!(state.members.get(&port), Some(Some(_))) {
                continue;
            }
            let key = key_of.as_ref().and_then(|read| read(&port));
            self.list_member(
                uuid,
                &mut state,
                (datapath, group.tunnel_key),
                port,
                key,
                delta,
            );
        }
        self.groups.insert(uuid, state);
    }

    pub(super) fn retract_group(&mut self, uuid: Uuid, delta: &mut Delta) {
        if let Some(mut state) = self.groups.remove(&uuid) {
            let ports: Vec<Uuid> = state.members.keys().copied().collect();
            for port in ports {
                self.unlist_member(uuid, &mut state, port, delta);
            }
            self.remove(state.header_id, delta);
        }
    }
}

/// A Multicast_Group's header entry, read column by column (its member list is not decoded).
pub(super) fn group_header(sb: &Southbound, uuid: Uuid) -> Option<IrEntry> {
    let row = sb.replica().table(MulticastGroup::TABLE)?.row(&uuid)?;
    let datapath_row = row.get("datapath")?.single()?.as_uuid()?;
    let datapath = sb.row::<DatapathBinding>(&datapath_row)?.tunnel_key;
    let key = u32::try_from(row.get("tunnel_key")?.single()?.as_integer()?).ok()?;
    let name = row.get("name")?.single()?.as_str()?.to_string();
    Some(IrEntry::FloodGroup {
        datapath,
        key,
        name,
    })
}

/// Reads a Port_Binding's tunnel key by row, from the replica column alone (no row decoding:
/// groups like `_MC_flood` hold every port of a switch).
pub(super) fn port_key_reader(sb: &Southbound) -> Option<impl Fn(&Uuid) -> Option<u32> + '_> {
    let bindings = sb.replica().table(PortBinding::TABLE)?;
    let key_column = bindings.layout().position("tunnel_key")?;
    let key_type = &bindings.layout().columns[key_column].1;
    Some(move |port: &Uuid| {
        let row = bindings.row(port)?;
        let key = row
            .row
            .datum(key_column, key_type)?
            .single()?
            .as_integer()?;
        u32::try_from(key).ok()
    })
}
