//! ECMP in the kernel's `ECMP_MEMBERS` (IPv4) and `ECMP_MEMBERS6` (IPv6 routes): for each group
//! of a router (an ECMP route's, or a multi-next-hop reroute's; routes and policies number
//! their groups apart), the member each
//! index of its `select` list leads to, resolved like a route's output. The route or policy that
//! selects stores only the group and its member count ([`ovnbpf_common::ROUTE_ECMP`]); the kernel
//! picks the index by the flow's hash ([`ovnbpf_common::ecmp`]), which the evaluator computes the
//! same way. Owns the groups, their members and the member table; a change marks only the
//! indexes of the groups it touches.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use ovnbpf_common::{
    EcmpKey, ROUTE_ECMP, RouteEntry, RouteEntry6, ecmp,
    maps::{EcmpMembers, EcmpMembers6},
};

use super::{
    super::{
        maps::Writable,
        tables::{Table, TableKey},
    },
    L3State,
};
use crate::pipeline::ir::{EcmpStage, Mac};

impl TableKey<EcmpMembers> for EcmpKey {
    fn slot(&self) -> EcmpKey {
        *self
    }
}

impl TableKey<EcmpMembers6> for EcmpKey {
    fn slot(&self) -> EcmpKey {
        *self
    }
}

/// A group of a router: (router, [`EcmpKey::group`]).
pub(super) type GroupKey = (u32, u32);

/// Where one member leads (IPv4 or IPv6 addresses: `A`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Member<A> {
    pub(super) nexthop: A,
    pub(super) source_ip: A,
    pub(super) source_mac: Mac,
    pub(super) port: String,
}

impl<A: Copy> Member<A> {
    /// A member's target: `nexthop` and `source_ip` of its family.
    pub(super) fn new(nexthop: &A, source_ip: &A, source_mac: &Mac, port: &str) -> Self {
        Self {
            nexthop: *nexthop,
            source_ip: *source_ip,
            source_mac: *source_mac,
            port: port.to_string(),
        }
    }
}

/// Every router's ECMP groups of one family: `A` its addresses, `M` the kernel map of its
/// members (`ECMP_MEMBERS`, `ECMP_MEMBERS6`).
pub(super) struct Groups<A, M: Writable> {
    /// A group's `select` list, and how many IR entries name it (an address-set policy names
    /// its group once per address).
    selects: HashMap<GroupKey, (Vec<u16>, usize)>,
    /// (group, member id) → where it leads.
    members: HashMap<(GroupKey, u16), Member<A>>,
    /// Output port → the groups with a member through it.
    by_port: HashMap<String, HashSet<GroupKey>>,
    pub(super) table: Table<M, EcmpKey>,
}

/// The IPv4 groups (routes' and policies').
pub(super) type Groups4 = Groups<Ipv4Addr, EcmpMembers>;
/// The IPv6 groups (routes').
pub(super) type Groups6 = Groups<Ipv6Addr, EcmpMembers6>;

impl<A, M: Writable> Default for Groups<A, M> {
    fn default() -> Self {
        Self {
            selects: HashMap::new(),
            members: HashMap::new(),
            by_port: HashMap::new(),
            table: Table::default(),
        }
    }
}

impl<A: std::fmt::Debug, M: Writable> std::fmt::Debug for Groups<A, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups")
            .field("selects", &self.selects)
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

/// The kernel's group id of OVN group `group` of `stage`.
#[must_use]
pub(super) fn group_id(stage: EcmpStage, group: u16) -> u32 {
    let base = match stage {
        EcmpStage::Route => ecmp::ROUTE_GROUPS,
        EcmpStage::Policy => ecmp::POLICY_GROUPS,
    };
    base | u32::from(group)
}

/// What a route or policy selecting group `group` of `router` stores: the group and its
/// member count, with `priority` (a route's).
#[must_use]
pub(super) fn selecting(group: u32, members: usize, priority: u8) -> RouteEntry {
    RouteEntry {
        nexthop: group,
        kind: ROUTE_ECMP,
        priority,
        ingress_port: u32::try_from(members).unwrap_or(u32::MAX),
        ..RouteEntry::default()
    }
}

impl<A: Clone + PartialEq, M: Writable> Groups<A, M>
where
    EcmpKey: TableKey<M>,
    M::Value: PartialEq,
{
    pub(super) fn pending(&self) -> usize {
        self.table.pending()
    }

    /// A route or policy of `key`'s router selects among `members` (or no longer does).
    pub(super) fn take_select(&mut self, key: GroupKey, members: &[u16], added: bool) {
        let old = self.selects.get(&key).map_or(0, |(list, _)| list.len());
        if added {
            let entry = self
                .selects
                .entry(key)
                .or_insert_with(|| (members.to_vec(), 0));
            entry.0 = members.to_vec();
            entry.1 += 1;
        } else if let Some(entry) = self.selects.get_mut(&key) {
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                self.selects.remove(&key);
            }
        }
        let new = self.selects.get(&key).map_or(0, |(list, _)| list.len());
        self.mark_indexes(key, old.max(new));
    }

    /// Member `member` of group `key` leads to `target` (or no longer does).
    pub(super) fn take_member(
        &mut self,
        key: GroupKey,
        member: u16,
        target: &Member<A>,
        added: bool,
    ) {
        if added {
            self.members.insert((key, member), target.clone());
            self.by_port
                .entry(target.port.clone())
                .or_default()
                .insert(key);
        } else if self.members.get(&(key, member)) == Some(target) {
            self.members.remove(&(key, member));
            let still = self
                .members
                .iter()
                .any(|((group, _), other)| *group == key && other.port == target.port);
            if !still && let Some(groups) = self.by_port.get_mut(&target.port) {
                groups.remove(&key);
                if groups.is_empty() {
                    self.by_port.remove(&target.port);
                }
            }
        }
        self.mark_group(key);
    }

    /// Marks the members of the groups leading through `port` (its datapath or peer changed).
    pub(super) fn mark_port(&mut self, port: &str) {
        let groups: Vec<GroupKey> = self
            .by_port
            .get(port)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        for key in groups {
            self.mark_group(key);
        }
    }

    /// The largest group of `router`, if larger than the kernel takes.
    pub(super) fn oversized(&self, key: GroupKey) -> Option<usize> {
        let (list, _) = self.selects.get(&key)?;
        (list.len() > ecmp::MAX_MEMBERS as usize).then_some(list.len())
    }

    fn mark_group(&mut self, key: GroupKey) {
        let count = self.selects.get(&key).map_or(0, |(list, _)| list.len());
        self.mark_indexes(key, count);
    }

    fn mark_indexes(&mut self, (datapath, group): GroupKey, count: usize) {
        let count = count.min(ecmp::MAX_MEMBERS as usize) as u32;
        for index in 0..count {
            self.table.mark(EcmpKey {
                datapath,
                group,
                index,
            });
        }
    }
}

impl<A, M: Writable> Groups<A, M> {
    /// The member at `key`'s index of its group's `select` list, if it has a flow.
    fn member_at(&self, key: &EcmpKey) -> Option<&Member<A>> {
        let group = (key.datapath, key.group);
        let (list, _) = self.selects.get(&group)?;
        let member = list.get(key.index as usize)?;
        self.members.get(&(group, *member))
    }
}

impl L3State {
    /// What the kernel stores for `key`: the route of the member at that index of the group's
    /// `select` list (none for a member without a flow or whose port is unknown: the kernel
    /// drops what would take it, counted).
    pub(super) fn desired_ecmp_member(&self, key: &EcmpKey) -> Option<RouteEntry> {
        let target = self.ecmp.member_at(key)?;
        self.resolve_output(
            &target.port,
            Some(target.nexthop),
            target.source_ip,
            target.source_mac,
        )
    }

    /// The same for an IPv6 group's member ([`Self::resolve_output6`]).
    pub(super) fn desired_ecmp_member6(&self, key: &EcmpKey) -> Option<RouteEntry6> {
        let target = self.ecmp6.member_at(key)?;
        self.resolve_output6(&target.port, Some(target.nexthop), target.source_mac, 0)
    }
}
