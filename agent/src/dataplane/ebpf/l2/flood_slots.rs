//! One flood group's member slots as installed in the kernel (`FLOOD_GROUPS` holds the counts,
//! `FLOOD_MEMBERS` one entry per (group, slot)), and the map writes that bring them to a new
//! member list: O(changed members), never a rewrite of the group. Touches the kernel only through
//! [`Maps`]'s flood-group and flood-member writes.
//!
//! Per list (local veths, other chassis' encap IPs):
//! - a member replacing another (a pod's veth or a chassis's encap IP changed, or one leaves as
//!   another joins): 1 write, its slot takes the new value;
//! - a member joining: its value in slot `count` (beyond the count: no program reads it), then the
//!   count (+1): 2 writes (joins of one flush share the count write);
//! - a member leaving slot `i` of `n`: slot `i` takes the last slot's value, the count becomes
//!   `n - 1`, slot `n - 1` is deleted: 3 writes (2 when `i` is the last).
//!
//! The order of a flood's copies is slot order: a new group's members in key order, and after a
//! leave the last slot's member in the leaver's place (the price of O(1) writes). ovn-controller
//! has no stable order either: its local outputs follow `Multicast_Group.ports` as its IDL holds
//! the set, the tunnel copies (sent before the local ones) the hash order of a set of chassis
//! names, and both change with the membership. Copies to different ports reach different
//! receivers, so no receiver can observe the order; what it observes, one copy per member port
//! and one Geneve copy per other chassis, is kept.
//!
//! What a frame in flight sees while these land (each write is one atomic map update; the
//! program reads the count once, then each slot below it): between a leaver's swap and the count
//! write, the moved member is in two slots (it gets that frame twice) and the leaver is already
//! gone; a slot the program reaches after its deletion is skipped. Every slot of a group's key
//! only ever holds a member of that very group (the key names the datapath and the group), so no
//! interleaving can send a frame to a port of another switch. A restarted agent starts from no
//! installed slots: it writes every slot over what the previous agent left (members of the same
//! group) and then the count, so floods never stop during the restart; the sweep then deletes
//! the slots beyond the count.

use std::collections::{HashMap, HashSet};

use ovnbpf_common::{FLOOD_SLOT_REMOTE, FloodGroup, FloodKey, FloodMemberKey};

use ovnbpf_common::maps::{FloodGroups, FloodMembers};

use super::super::Maps;
use crate::dataplane::ebpf::EbpfError;

/// The slots of one list of a group, as installed.
#[derive(Clone, Debug, Default)]
struct SlotList {
    slots: Vec<u32>,
    position: HashMap<u32, usize>,
}

impl SlotList {
    fn len(&self) -> u32 {
        // The agent installs at most FLOOD_MAX_LOCAL / FLOOD_MAX_REMOTE slots per list.
        u32::try_from(self.slots.len()).unwrap_or(u32::MAX)
    }
}

/// A flood group as installed: its count entry (if written) and both slot lists.
#[derive(Clone, Debug, Default)]
pub(super) struct InstalledGroup {
    pub(super) header: Option<FloodGroup>,
    local: SlotList,
    remote: SlotList,
}

impl InstalledGroup {
    /// A group whose kernel entries are unknown (a write failed): no slot is taken as installed
    /// and the count entry is taken as present, so the next update rewrites every slot and the
    /// count, or removes the count when the group is empty.
    pub(super) fn unknown() -> Self {
        Self {
            header: Some(FloodGroup {
                local_count: u32::MAX,
                remote_count: u32::MAX,
            }),
            ..Self::default()
        }
    }

    /// Whether `slot` (a [`FloodMemberKey::slot`]) is below its list's installed count.
    pub(super) fn holds(&self, slot: u32) -> bool {
        if slot & FLOOD_SLOT_REMOTE != 0 {
            slot & !FLOOD_SLOT_REMOTE < self.remote.len()
        } else {
            slot < self.local.len()
        }
    }

    fn counts(&self) -> FloodGroup {
        FloodGroup {
            local_count: self.local.len(),
            remote_count: self.remote.len(),
        }
    }

    /// Writes what turns the installed slots into `local` and `remote` (each a list without
    /// duplicates); returns the number of map writes. The group's entries are removed when both
    /// lists are empty.
    pub(super) fn update(
        &mut self,
        maps: &mut impl Maps,
        key: FloodKey,
        local: &[u32],
        remote: &[u32],
    ) -> Result<usize, EbpfError> {
        let mut writes = self.update_list(maps, key, false, local)?;
        writes += self.update_list(maps, key, true, remote)?;
        let counts = self.counts();
        if counts == FloodGroup::default() {
            if self.header.take().is_some() {
                maps.remove::<FloodGroups>(key)?;
                writes += 1;
            }
        } else if self.header != Some(counts) {
            maps.set::<FloodGroups>(key, counts)?;
            self.header = Some(counts);
            writes += 1;
        }
        Ok(writes)
    }

    fn list(&mut self, remote: bool) -> &mut SlotList {
        if remote {
            &mut self.remote
        } else {
            &mut self.local
        }
    }

    fn update_list(
        &mut self,
        maps: &mut impl Maps,
        key: FloodKey,
        remote: bool,
        desired: &[u32],
    ) -> Result<usize, EbpfError> {
        let slot_key = |index: usize| FloodMemberKey {
            datapath: key.datapath,
            group: key.group,
            slot: u32::try_from(index).unwrap_or(u32::MAX)
                | if remote { FLOOD_SLOT_REMOTE } else { 0 },
        };
        let wanted: HashSet<u32> = desired.iter().copied().collect();
        let list = self.list(remote);
        let leaving: Vec<u32> = list
            .slots
            .iter()
            .copied()
            .filter(|member| !wanted.contains(member))
            .collect();
        let mut joining = desired
            .iter()
            .copied()
            .filter(|member| !list.position.contains_key(member))
            .collect::<Vec<_>>()
            .into_iter();
        let mut writes = 0;
        for member in leaving {
            let list = self.list(remote);
            let Some(index) = list.position.remove(&member) else {
                continue;
            };
            if let Some(new) = joining.next() {
                // In place: one write.
                maps.set::<FloodMembers>(slot_key(index), new)?;
                list.slots[index] = new;
                list.position.insert(new, index);
                writes += 1;
                continue;
            }
            let last = list.slots.len() - 1;
            if index != last {
                let moved = list.slots[last];
                maps.set::<FloodMembers>(slot_key(index), moved)?;
                list.slots[index] = moved;
                list.position.insert(moved, index);
                writes += 1;
            }
            list.slots.pop();
            let counts = self.counts();
            maps.set::<FloodGroups>(key, counts)?;
            self.header = Some(counts);
            maps.remove::<FloodMembers>(slot_key(last))?;
            writes += 2;
        }
        let list = self.list(remote);
        for member in joining {
            let index = list.slots.len();
            maps.set::<FloodMembers>(slot_key(index), member)?;
            list.slots.push(member);
            list.position.insert(member, index);
            writes += 1;
        }
        Ok(writes)
    }
}
