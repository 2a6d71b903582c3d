//! The flood family of the L2 maps: each flood group's (Multicast_Group's) members as this node
//! reaches them, local veths and other chassis with members (`FLOOD_GROUPS`, `FLOOD_MEMBERS`,
//! written slot by slot by [`InstalledGroup`]), and the group each datapath floods broadcasts
//! and unknown unicast to (`FLOOD_ROLES`, through a [`Table`](super::super::tables::Table)).
//! Membership is kept per member, resolved through [`Physical`](super::super::physical), so a
//! member that moves costs O(its groups), never a rebuild of a group.

use std::collections::{HashMap, HashSet};

use ovnbpf_common::{
    FLOOD_MAX_LOCAL, FLOOD_MAX_REMOTE, FloodKey, FloodRoles,
    maps::{FloodGroups, FloodMembers, FloodRolesMap},
};

use super::{
    super::{
        EbpfError, Maps,
        physical::Location,
        remove_unwanted,
        tables::{Table, TableKey, flush_from},
    },
    L2State,
    flood_slots::InstalledGroup,
};
use crate::pipeline::ir::IrEntry;

/// A switch's flood groups by role, by name (their keys come with the `FloodGroup` entries).
#[derive(Clone, Debug, Default)]
pub(super) struct RoleNames {
    /// Broadcast and multicast (`eth.mcast`).
    pub(super) broadcast: Option<String>,
    /// Unknown unicast, where the switch floods it.
    pub(super) unknown: Option<String>,
    /// The routers' own ARP requests.
    pub(super) router_originated: Option<String>,
}

impl TableKey<FloodRolesMap> for u32 {
    fn slot(&self) -> u32 {
        *self
    }
}

/// What the flood family installed: per group its slots ([`InstalledGroup`]), the groups
/// whose slots may need writes, and the flood roles.
#[derive(Debug, Default)]
pub(super) struct FloodTables {
    pub(super) installed: HashMap<(u32, u32), InstalledGroup>,
    pub(super) dirty: HashSet<(u32, u32)>,
    pub(super) roles: Table<FloodRolesMap, u32>,
}

impl FloodTables {
    pub(super) fn pending(&self) -> usize {
        self.dirty.len() + self.roles.pending()
    }
}

/// How this node reaches one flood group member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MemberTarget {
    /// A local pod behind this veth.
    Local(u32),
    /// A pod on the chassis with this encap IP (network byte order).
    Remote(u32),
    /// Not reachable as a flood target (router, localnet, unbound, unknown chassis).
    Unreachable,
}

impl L2State {
    /// Takes in a flood entry of the IR: a group, a member, or a datapath's flood role.
    pub(super) fn take_flood(&mut self, entry: &IrEntry, added: bool) {
        match entry {
            IrEntry::FloodGroup {
                datapath,
                key,
                name,
            } => {
                if added {
                    self.group_keys.insert((*datapath, name.clone()), *key);
                } else if self.group_keys.get(&(*datapath, name.clone())) == Some(key) {
                    self.group_keys.remove(&(*datapath, name.clone()));
                }
                self.flood_tables.dirty.insert((*datapath, *key));
                self.flood_tables.roles.mark(*datapath);
            }
            IrEntry::FloodMember {
                datapath,
                group,
                port,
            } => self.take_member(*datapath, *group, *port, added),
            IrEntry::FloodMulticast { datapath, group } => {
                let roles = self.roles.entry(*datapath).or_default();
                roles.broadcast = added.then(|| group.clone());
                self.flood_tables.roles.mark(*datapath);
            }
            IrEntry::FloodUnknown { datapath, group } => {
                let roles = self.roles.entry(*datapath).or_default();
                roles.unknown = added.then(|| group.clone());
                self.flood_tables.roles.mark(*datapath);
            }
            IrEntry::RouterOriginatedFlood {
                datapath, group, ..
            } => {
                let roles = self.roles.entry(*datapath).or_default();
                roles.router_originated = added.then(|| group.clone());
                self.flood_tables.roles.mark(*datapath);
            }
            _ => {}
        }
    }

    fn take_member(&mut self, datapath: u32, group: u32, port: u32, added: bool) {
        let (group_key, port_key) = ((datapath, group), (datapath, port));
        if added {
            self.group_members
                .entry(group_key)
                .or_default()
                .insert(port);
            self.groups_of_port
                .entry(port_key)
                .or_default()
                .insert(group);
            let target = match self.member_targets.get(&port_key) {
                Some(target) => *target,
                None => {
                    let target = self.resolve_member(datapath, port);
                    self.member_targets.insert(port_key, target);
                    target
                }
            };
            self.add_to_group(group_key, port, target);
        } else {
            if let Some(target) = self.member_targets.get(&port_key).copied() {
                self.remove_from_group(group_key, port, target);
            }
            remove_member(&mut self.group_members, group_key, port);
            remove_member(&mut self.groups_of_port, port_key, group);
            if !self.groups_of_port.contains_key(&port_key) {
                self.member_targets.remove(&port_key);
            }
        }
        self.flood_tables.dirty.insert(group_key);
    }

    /// Re-resolves port `key` of `datapath` as a flood group member and, if that changed, updates
    /// and marks the groups it belongs to: O(its groups).
    pub(super) fn mark_groups_of(&mut self, datapath: u32, key: u32) {
        let Some(groups) = self.groups_of_port.get(&(datapath, key)).cloned() else {
            return;
        };
        let new = self.resolve_member(datapath, key);
        let old = self.member_targets.insert((datapath, key), new);
        if old == Some(new) {
            return;
        }
        for group in groups {
            if let Some(old) = old {
                self.remove_from_group((datapath, group), key, old);
            }
            self.add_to_group((datapath, group), key, new);
            self.flood_tables.dirty.insert((datapath, group));
        }
    }

    /// How this node reaches port `key` of `datapath` as a flood target.
    fn resolve_member(&self, datapath: u32, key: u32) -> MemberTarget {
        let Some(name) = self.port_names.get(&(datapath, key)) else {
            return MemberTarget::Unreachable;
        };
        match self.physical.locate(name) {
            Location::Local(ifindex) => MemberTarget::Local(ifindex),
            Location::Remote(endpoint) => MemberTarget::Remote(endpoint),
            Location::Router { .. } => MemberTarget::Unreachable,
            Location::Unreachable => MemberTarget::Unreachable,
        }
    }

    fn add_to_group(&mut self, group: (u32, u32), member: u32, target: MemberTarget) {
        match target {
            MemberTarget::Local(ifindex) => {
                self.group_local
                    .entry(group)
                    .or_default()
                    .insert(member, ifindex);
            }
            MemberTarget::Remote(ip) => {
                *self
                    .group_remote
                    .entry(group)
                    .or_default()
                    .entry(ip)
                    .or_default() += 1;
            }
            MemberTarget::Unreachable => {}
        }
    }

    fn remove_from_group(&mut self, group: (u32, u32), member: u32, target: MemberTarget) {
        match target {
            MemberTarget::Local(_) => {
                if let Some(local) = self.group_local.get_mut(&group) {
                    local.remove(&member);
                    if local.is_empty() {
                        self.group_local.remove(&group);
                    }
                }
            }
            MemberTarget::Remote(ip) => {
                if let Some(remote) = self.group_remote.get_mut(&group) {
                    if let Some(count) = remote.get_mut(&ip) {
                        *count -= 1;
                        if *count == 0 {
                            remote.remove(&ip);
                        }
                    }
                    if remote.is_empty() {
                        self.group_remote.remove(&group);
                    }
                }
            }
            MemberTarget::Unreachable => {}
        }
    }

    /// Flood groups whose members did not all fit the kernel's entry, as of the last flush.
    #[must_use]
    pub fn truncated_groups(&self) -> usize {
        self.truncated_groups.len()
    }

    /// The members flood group (datapath, group) reaches from here, in the order a new group's
    /// slots take them: local members' veths (lowest member keys first) and the other chassis
    /// with members, each once. A group beyond [`FLOOD_MAX_LOCAL`] or [`FLOOD_MAX_REMOTE`] is an
    /// error, logged once per group (and counted by [`Self::truncated_groups`]): the members
    /// beyond the limit are not installed.
    fn desired_members(&mut self, datapath: u32, group: u32) -> (Vec<u32>, Vec<u32>) {
        let key = (datapath, group);
        let mut seen = HashSet::new();
        let mut local: Vec<u32> = self
            .group_local
            .get(&key)
            .into_iter()
            .flat_map(|m| m.values())
            .copied()
            .filter(|ifindex| seen.insert(*ifindex))
            .collect();
        let mut remote: Vec<u32> = self
            .group_remote
            .get(&key)
            .into_iter()
            .flat_map(|m| m.keys())
            .copied()
            .collect();
        let (local_limit, remote_limit) = (FLOOD_MAX_LOCAL as usize, FLOOD_MAX_REMOTE as usize);
        if local.len() > local_limit || remote.len() > remote_limit {
            if self.truncated_groups.insert(key) {
                tracing::error!(
                    datapath,
                    group,
                    local = local.len(),
                    remote = remote.len(),
                    local_limit,
                    remote_limit,
                    "flood group exceeds the members the agent installs; those beyond the limit \
                     get no flooded frames"
                );
            }
        } else {
            self.truncated_groups.remove(&key);
        }
        local.truncate(local_limit);
        remote.truncate(remote_limit);
        (local, remote)
    }

    /// Brings the kernel's slots of flood group (datapath, group) to its desired members with
    /// O(changed members) map writes (see [`InstalledGroup`]). On an error the group is forgotten
    /// as installed, so the retry rewrites every slot and the count.
    fn flush_group(
        &mut self,
        maps: &mut impl Maps,
        datapath: u32,
        group: u32,
    ) -> Result<usize, EbpfError> {
        let (local, remote) = self.desired_members(datapath, group);
        let mut installed = self
            .flood_tables
            .installed
            .remove(&(datapath, group))
            .unwrap_or_default();
        let key = FloodKey { datapath, group };
        match installed.update(maps, key, &local, &remote) {
            Ok(writes) => {
                if installed.header.is_some() {
                    self.flood_tables
                        .installed
                        .insert((datapath, group), installed);
                }
                Ok(writes)
            }
            Err(error) => {
                self.flood_tables
                    .installed
                    .insert((datapath, group), InstalledGroup::unknown());
                Err(error)
            }
        }
    }

    fn desired_roles(&self, datapath: u32) -> Option<FloodRoles> {
        let names = self.roles.get(&datapath)?;
        let key_of = |name: &Option<String>| {
            name.as_ref()
                .and_then(|name| self.group_keys.get(&(datapath, name.clone())))
                .copied()
                .unwrap_or(0)
        };
        let roles = FloodRoles {
            broadcast: key_of(&names.broadcast),
            unknown: key_of(&names.unknown),
            router_originated: key_of(&names.router_originated),
        };
        (roles != FloodRoles::default()).then_some(roles)
    }

    /// Writes the marked groups' slots, then the marked flood roles. A group whose write fails
    /// stays marked.
    pub(super) fn flush_flood(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        let mut writes = 0;
        let dirty: Vec<(u32, u32)> = self.flood_tables.dirty.iter().copied().collect();
        for (datapath, group) in dirty {
            writes += self.flush_group(maps, datapath, group)?;
            self.flood_tables.dirty.remove(&(datapath, group));
        }
        Ok(writes
            + flush_from(
                self,
                maps,
                |s| &mut s.flood_tables.roles,
                |s, &dp| s.desired_roles(dp),
            )?)
    }

    /// Removes the flood slots and roles this state did not install; returns how many went.
    pub(super) fn sweep_flood(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        let removed = remove_unwanted(
            maps.keys::<FloodGroups>()?,
            |key| {
                self.flood_tables
                    .installed
                    .get(&(key.datapath, key.group))
                    .is_some_and(|group| group.header.is_some())
            },
            |key| maps.remove::<FloodGroups>(key),
        )? + remove_unwanted(
            maps.keys::<FloodMembers>()?,
            |key| {
                self.flood_tables
                    .installed
                    .get(&(key.datapath, key.group))
                    .is_some_and(|group| group.holds(key.slot))
            },
            |key| maps.remove::<FloodMembers>(key),
        )?;
        Ok(removed + self.flood_tables.roles.sweep(maps)?)
    }
}

/// Removes `value` from the set at `key`, dropping the set when it becomes empty.
fn remove_member(index: &mut HashMap<(u32, u32), HashSet<u32>>, key: (u32, u32), value: u32) {
    if let Some(values) = index.get_mut(&key) {
        values.remove(&value);
        if values.is_empty() {
            index.remove(&key);
        }
    }
}
