//! The IR's reference-counted entries, each held once: a slot per distinct entry, found through
//! an index of slot numbers, and the [`EntryId`] (4 bytes) by which sources (flows, rows, flood
//! groups) remember what they contributed. Owns the slots and the index; touches nothing else.
//!
//! Before, the IR was a map from entry to count and each source kept a copy of each entry it
//! contributed: every entry was held at least twice, at 120 bytes a copy (heaptrack, 10,000
//! pods: 8.5 MB of map and as much again in copies). Sharing the entries through an `Arc`
//! (branch `wip/ir-entry-sharing`) cost more than it saved: a block per entry.

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use crate::pipeline::ir::IrEntry;

/// An entry's slot in the [`EntryTable`], valid while a source counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct EntryId(u32);

#[derive(Debug)]
struct Slot {
    /// `None`: free, listed in [`EntryTable::free`].
    entry: Option<IrEntry>,
    count: u32,
}

#[derive(Debug, Default)]
pub(super) struct EntryTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slot numbers, by their entries' hashes.
    index: HashTable<u32>,
    hasher: RandomState,
    len: usize,
}

impl EntryTable {
    /// Counts one more use of `entry`: its id, and whether it is new to the IR.
    pub(super) fn add(&mut self, entry: IrEntry) -> (EntryId, bool) {
        let hash = self.hasher.hash_one(&entry);
        let slots = &mut self.slots;
        if let Some(&number) = self.index.find(hash, |&number| {
            slots.get(number as usize).and_then(|s| s.entry.as_ref()) == Some(&entry)
        }) && let Some(slot) = slots.get_mut(number as usize)
        {
            slot.count += 1;
            return (EntryId(number), false);
        }
        let slot = Slot {
            entry: Some(entry),
            count: 1,
        };
        let number = match self.free.pop() {
            Some(number) if let Some(free) = slots.get_mut(number as usize) => {
                *free = slot;
                number
            }
            _ => {
                // By an eighth, not by doubling: after a whole compile the slots are trimmed
                // to their entries, and the next entry (the agent's own chassis registering)
                // would double them, 16 MB at 10,000 pods.
                if slots.len() == slots.capacity() {
                    slots.reserve_exact(slots.len() / 8 + 16);
                }
                slots.push(slot);
                // Four billion distinct entries would be half a terabyte of them.
                (slots.len() - 1) as u32
            }
        };
        self.index
            .insert_unique(hash, number, rehash(&self.slots, &self.hasher));
        self.len += 1;
        (EntryId(number), true)
    }

    /// Counts one use of `id` less: the entry once nothing uses it any more (it left the IR).
    pub(super) fn remove(&mut self, id: EntryId) -> Option<IrEntry> {
        let slot = self.slots.get_mut(id.0 as usize)?;
        let entry = slot.entry.as_ref()?;
        slot.count -= 1;
        if slot.count > 0 {
            return None;
        }
        let hash = self.hasher.hash_one(entry);
        if let Ok(found) = self.index.find_entry(hash, |&number| number == id.0) {
            found.remove();
        }
        self.free.push(id.0);
        self.len -= 1;
        slot.entry.take()
    }

    #[must_use]
    pub(super) fn get(&self, id: EntryId) -> Option<&IrEntry> {
        self.slots.get(id.0 as usize)?.entry.as_ref()
    }

    /// The entries of `ids` that are in the IR.
    pub(super) fn resolve<'a>(
        &'a self,
        ids: &'a [EntryId],
    ) -> impl Iterator<Item = &'a IrEntry> + 'a {
        ids.iter().filter_map(|id| self.get(*id))
    }

    /// The id of `entry`, if the IR holds it.
    #[must_use]
    pub(super) fn find(&self, entry: &IrEntry) -> Option<EntryId> {
        let hash = self.hasher.hash_one(entry);
        self.index
            .find(hash, |&number| {
                self.slots
                    .get(number as usize)
                    .and_then(|slot| slot.entry.as_ref())
                    == Some(entry)
            })
            .map(|&number| EntryId(number))
    }

    /// Gives back what the slots and the index hold beyond their entries, after a whole
    /// compile (128 bytes a slot).
    pub(super) fn shrink_to_fit(&mut self) {
        self.slots.shrink_to_fit();
        self.free.shrink_to_fit();
        self.index.shrink_to_fit(rehash(&self.slots, &self.hasher));
    }

    /// Every entry, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &IrEntry> {
        self.slots.iter().filter_map(|slot| slot.entry.as_ref())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    #[must_use]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The hash of the entry in a slot, for the index to move its slot numbers when it resizes.
fn rehash<'a>(slots: &'a [Slot], hasher: &'a RandomState) -> impl Fn(&u32) -> u64 + 'a {
    |&number| {
        slots
            .get(number as usize)
            .and_then(|slot| slot.entry.as_ref())
            .map_or(0, |entry| hasher.hash_one(entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datapath(key: u32) -> IrEntry {
        IrEntry::Datapath {
            datapath: key,
            name: format!("dp{key}"),
            router: false,
        }
    }

    #[test]
    fn an_entry_is_held_once_and_leaves_with_its_last_use() {
        let mut table = EntryTable::default();
        let (a, new) = table.add(datapath(1));
        assert!(new);
        let (again, new) = table.add(datapath(1));
        assert_eq!((again, new), (a, false));
        let (b, new) = table.add(datapath(2));
        assert!(new && b != a);
        assert_eq!(table.len(), 2);
        assert_eq!(table.find(&datapath(1)), Some(a));
        assert_eq!(table.remove(a), None, "still used once");
        assert_eq!(table.get(a), Some(&datapath(1)));
        assert_eq!(table.remove(a), Some(datapath(1)));
        assert_eq!(table.get(a), None);
        assert_eq!(table.find(&datapath(1)), None);
        assert_eq!(table.remove(a), None, "a freed id counts nothing");
        assert_eq!(table.len(), 1);
        assert_eq!(table.iter().collect::<Vec<_>>(), [&datapath(2)]);
    }

    #[test]
    fn freed_slots_are_reused_and_every_entry_stays_findable() {
        let mut table = EntryTable::default();
        let ids: Vec<EntryId> = (0..1000).map(|key| table.add(datapath(key)).0).collect();
        for id in ids.iter().step_by(2) {
            assert!(table.remove(*id).is_some());
        }
        for key in 1000..1500 {
            table.add(datapath(key));
        }
        assert_eq!(
            table.slots.len(),
            1000,
            "the 500 freed slots were taken again"
        );
        table.shrink_to_fit();
        assert_eq!(table.slots.capacity(), 1000);
        assert_eq!(table.len(), 1000);
        for key in 0..1500 {
            let held = key >= 1000 || key % 2 == 1;
            let id = table.find(&datapath(key));
            assert_eq!(id.is_some(), held, "entry {key}");
            if let Some(id) = id {
                assert_eq!(table.get(id), Some(&datapath(key)));
            }
        }
        // An id names its entry while that is counted; a freed one names whatever took its slot.
        for (key, entry) in table.resolve(&ids).enumerate() {
            let IrEntry::Datapath { datapath, .. } = entry else {
                panic!("{entry:?}");
            };
            let key = key as u32;
            let even = key.is_multiple_of(2);
            assert!(*datapath == key && !even || *datapath >= 1000 && even);
        }
        table.add(datapath(2000));
        assert_eq!(
            table.slots.capacity(),
            1000 + 1000 / 8 + 16,
            "grown by an eighth"
        );
    }
}
