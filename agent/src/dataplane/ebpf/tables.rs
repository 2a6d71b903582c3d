//! The installer's generic part (OVN's ofctrl role): a [`Table`] per kernel map holds what this
//! agent installed and which keys changed, writes a key only when its desired value differs from
//! the installed one, and sweeps what it did not install. The desired values come from the
//! state modules ([`super::l2`], [`super::l3`]); tables never decide them. Touches the kernel only through
//! [`Maps`].

use std::{
    collections::{HashMap, HashSet},
    hash::Hash,
};

use super::{
    EbpfError,
    maps::{Maps, Slot, Writable},
};

/// A state's key for entries of map `M`: where the entry lives in the map.
pub trait TableKey<M: Writable>: Clone + Eq + Hash {
    fn slot(&self) -> Slot<M>;
}

/// Map `M`'s entries this agent installed, keyed by the state's own key `K` (from which the
/// map slot follows), and the keys whose desired value may have changed.
pub struct Table<M: Writable, K> {
    installed: HashMap<K, M::Value>,
    dirty: HashSet<K>,
}

impl<M: Writable, K: std::fmt::Debug> std::fmt::Debug for Table<M, K>
where
    M::Value: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("map", &M::NAME)
            .field("installed", &self.installed)
            .field("dirty", &self.dirty)
            .finish()
    }
}

impl<M: Writable, K> Default for Table<M, K> {
    fn default() -> Self {
        Self {
            installed: HashMap::new(),
            dirty: HashSet::new(),
        }
    }
}

impl<M: Writable, K: TableKey<M>> Table<M, K>
where
    M::Value: PartialEq,
{
    /// Marks `key` for the next [`Self::flush`].
    pub fn mark(&mut self, key: K) {
        self.dirty.insert(key);
    }

    /// Keys marked and not yet written.
    pub fn pending(&self) -> usize {
        self.dirty.len()
    }

    /// The installed entries.
    pub fn installed(&self) -> &HashMap<K, M::Value> {
        &self.installed
    }

    /// Writes each marked key whose `desired` value differs from the installed one (`None`
    /// removes it). `around_write` sees, with the maps, each set before it is made and each
    /// removal after it is made: what an entry needs goes in first and out last (e.g. an
    /// interface's counters around its pod-port entry). In [`Pass::SetsOnly`] removals wait:
    /// their keys stay marked for a later pass. A failed key stays marked. Returns the writes
    /// made.
    pub fn flush_with<Ms: Maps>(
        &mut self,
        maps: &mut Ms,
        pass: Pass,
        mut desired: impl FnMut(&K) -> Option<M::Value>,
        mut around_write: impl FnMut(&mut Ms, &K, Option<&M::Value>) -> Result<(), EbpfError>,
    ) -> Result<usize, EbpfError> {
        let mut writes = 0;
        let dirty: Vec<K> = self.dirty.iter().cloned().collect();
        for key in dirty {
            let wanted = desired(&key);
            if wanted != self.installed.get(&key).copied() {
                if wanted.is_none() && pass == Pass::SetsOnly {
                    continue;
                }
                let slot = key.slot();
                match wanted {
                    Some(value) => {
                        around_write(maps, &key, Some(&value))?;
                        maps.set::<M>(slot, value)?;
                        self.installed.insert(key.clone(), value);
                    }
                    None => {
                        maps.remove::<M>(slot)?;
                        self.installed.remove(&key);
                        around_write(maps, &key, None)?;
                    }
                }
                writes += 1;
            }
            self.dirty.remove(&key);
        }
        Ok(writes)
    }

    /// [`Self::flush_with`], every write, without a hook.
    pub fn flush(
        &mut self,
        maps: &mut impl Maps,
        desired: impl FnMut(&K) -> Option<M::Value>,
    ) -> Result<usize, EbpfError> {
        self.flush_with(maps, Pass::All, desired, |_, _, _| Ok(()))
    }

    /// Removes every slot of the map this table did not install (what a previous agent left);
    /// returns how many went.
    pub fn sweep(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        self.sweep_with(maps, |_, _| Ok(()))
    }

    /// [`Self::sweep`], with `after_remove` seeing each slot removed (e.g. to close an
    /// interface's counters).
    pub fn sweep_with<Ms: Maps>(
        &self,
        maps: &mut Ms,
        mut after_remove: impl FnMut(&mut Ms, Slot<M>) -> Result<(), EbpfError>,
    ) -> Result<usize, EbpfError> {
        let ours: HashSet<Slot<M>> = self.installed.keys().map(TableKey::slot).collect();
        let mut removed = 0;
        for slot in maps.keys::<M>()? {
            if !ours.contains(&slot) {
                maps.remove::<M>(slot)?;
                after_remove(maps, slot)?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Which of a flush's writes to make: all, or only sets (removals wait for a later pass, so
/// that, e.g., a port's security entry is written before the entry that lets it forward and
/// removed after it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    All,
    SetsOnly,
}

/// Flushes the table `table` picks out of `state`, with desired values read from `state` (the
/// table is taken out while it flushes, so `desired` may read the whole state).
pub fn flush_from<S, M: Writable, K: TableKey<M>>(
    state: &mut S,
    maps: &mut impl Maps,
    table: fn(&mut S) -> &mut Table<M, K>,
    desired: impl Fn(&S, &K) -> Option<M::Value>,
) -> Result<usize, EbpfError>
where
    M::Value: PartialEq,
{
    flush_from_with(state, maps, table, Pass::All, desired, |_, _, _| Ok(()))
}

/// [`flush_from`] with a pass and a hook (see [`Table::flush_with`]).
pub fn flush_from_with<S, M: Writable, K: TableKey<M>, Ms: Maps>(
    state: &mut S,
    maps: &mut Ms,
    table: fn(&mut S) -> &mut Table<M, K>,
    pass: Pass,
    desired: impl Fn(&S, &K) -> Option<M::Value>,
    around_write: impl FnMut(&mut Ms, &K, Option<&M::Value>) -> Result<(), EbpfError>,
) -> Result<usize, EbpfError>
where
    M::Value: PartialEq,
{
    let mut taken = std::mem::take(table(state));
    let written = taken.flush_with(maps, pass, |key| desired(state, key), around_write);
    *table(state) = taken;
    written
}

#[cfg(test)]
mod tests {
    use ovnbpf_common::{PodPort, maps::PodPorts};

    use super::*;
    use crate::dataplane::ebpf::maps::Recorder;

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    struct Veth(u32);

    impl TableKey<PodPorts> for Veth {
        fn slot(&self) -> u32 {
            self.0
        }
    }

    fn pod(port: u32) -> PodPort {
        PodPort { datapath: 5, port }
    }

    /// A sets-only pass leaves removals marked for the next pass; the hook sees a set before the
    /// slot is written and a removal after the slot is gone.
    #[test]
    fn removals_wait_for_their_pass_and_the_hook_brackets_each_write() {
        let mut table = Table::<PodPorts, Veth>::default();
        let mut maps = Recorder::default();
        table.mark(Veth(1));
        table.mark(Veth(2));
        table.flush(&mut maps, |veth| Some(pod(veth.0))).unwrap();
        assert_eq!(maps.table::<PodPorts>().len(), 2);

        table.mark(Veth(1));
        table.mark(Veth(2));
        let desired = |veth: &Veth| (veth.0 == 1).then_some(pod(10));
        let mut seen = Vec::new();
        let writes = table
            .flush_with(&mut maps, Pass::SetsOnly, desired, |maps, veth, value| {
                seen.push((veth.0, value.is_some(), maps.table::<PodPorts>()[&veth.0]));
                Ok(())
            })
            .unwrap();
        assert_eq!(writes, 1);
        assert_eq!(seen, [(1, true, pod(1))], "before the set: the old value");
        assert_eq!(table.pending(), 1, "the removal waits");
        assert!(maps.table::<PodPorts>().contains_key(&2));

        let mut seen = Vec::new();
        table
            .flush_with(&mut maps, Pass::All, desired, |maps, veth, value| {
                seen.push((
                    veth.0,
                    value.is_some(),
                    maps.table::<PodPorts>().contains_key(&veth.0),
                ));
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, [(2, false, false)], "after the removal: gone");
        assert_eq!(table.pending(), 0);
        assert_eq!(
            maps.table::<PodPorts>(),
            std::collections::HashMap::from([(1, pod(10))])
        );

        // What the table did not install is swept.
        maps.table_mut::<PodPorts>().insert(7, pod(7));
        let mut closed = Vec::new();
        let swept = table
            .sweep_with(&mut maps, |_, slot| {
                closed.push(slot);
                Ok(())
            })
            .unwrap();
        assert_eq!((swept, closed), (1, vec![7]));
        assert_eq!(maps.table::<PodPorts>().len(), 1);
    }
}
