//! Generic, typed access to the kernel maps declared in `ovnbpf_common::maps`: one
//! `set::<M>`/`remove::<M>`/`keys::<M>`/`get::<M>` for every map, over the loaded programs
//! ([`super::KernelPrograms`]) or, in tests, a `Recorder` that keeps the maps as the kernel
//! would. How a map is reached depends only on its kind ([`KindAccess`]): adding a map needs no
//! edit here. Touches the bpf() syscall through aya.

use std::{fmt::Debug, hash::Hash, io};

use aya::maps::{MapError, lpm_trie::Key as LpmKey};
use ovnbpf_common::maps::{MapDef, kind};

use super::EbpfError;

/// How maps of one kind are written and listed. `Slot` is what addresses one entry: the key, or
/// for an LPM trie the key and its prefix length in bits.
pub trait KindAccess<K, V> {
    type Slot: Copy + Eq + Hash + Debug + 'static;
    fn insert(map: &mut aya::maps::Map, slot: Self::Slot, value: V) -> Result<(), MapError>;
    fn remove(map: &mut aya::maps::Map, slot: Self::Slot) -> Result<(), MapError>;
    fn slots(map: &aya::maps::Map) -> Result<Vec<Self::Slot>, MapError>;
    /// The value at `slot`, if there is one.
    fn lookup(map: &aya::maps::Map, slot: Self::Slot) -> Result<Option<V>, MapError>;
}

/// A read's answer, with an absent key as `None`.
fn found<V>(read: Result<V, MapError>) -> Result<Option<V>, MapError> {
    match read {
        Ok(value) => Ok(Some(value)),
        Err(error) if absent(&error) => Ok(None),
        Err(error) => Err(error),
    }
}

impl<K: aya::Pod + Eq + Hash + Debug + 'static, V: aya::Pod> KindAccess<K, V> for kind::HashMap {
    type Slot = K;
    fn insert(map: &mut aya::maps::Map, slot: K, value: V) -> Result<(), MapError> {
        aya::maps::HashMap::<_, K, V>::try_from(map)?.insert(slot, value, 0)
    }
    fn remove(map: &mut aya::maps::Map, slot: K) -> Result<(), MapError> {
        aya::maps::HashMap::<_, K, V>::try_from(map)?.remove(&slot)
    }
    fn slots(map: &aya::maps::Map) -> Result<Vec<K>, MapError> {
        aya::maps::HashMap::<_, K, V>::try_from(map)?
            .keys()
            .collect()
    }
    fn lookup(map: &aya::maps::Map, slot: K) -> Result<Option<V>, MapError> {
        found(aya::maps::HashMap::<_, K, V>::try_from(map)?.get(&slot, 0))
    }
}

/// aya's `HashMap` reads and writes LRU hash maps too.
impl<K: aya::Pod + Eq + Hash + Debug + 'static, V: aya::Pod> KindAccess<K, V> for kind::LruHashMap {
    type Slot = K;
    fn insert(map: &mut aya::maps::Map, slot: K, value: V) -> Result<(), MapError> {
        <kind::HashMap as KindAccess<K, V>>::insert(map, slot, value)
    }
    fn remove(map: &mut aya::maps::Map, slot: K) -> Result<(), MapError> {
        <kind::HashMap as KindAccess<K, V>>::remove(map, slot)
    }
    fn slots(map: &aya::maps::Map) -> Result<Vec<K>, MapError> {
        <kind::HashMap as KindAccess<K, V>>::slots(map)
    }
    fn lookup(map: &aya::maps::Map, slot: K) -> Result<Option<V>, MapError> {
        <kind::HashMap as KindAccess<K, V>>::lookup(map, slot)
    }
}

impl<K: aya::Pod + Eq + Hash + Debug + 'static, V: aya::Pod> KindAccess<K, V> for kind::LpmTrie {
    /// The key and its prefix length in bits (over the whole key).
    type Slot = (K, u32);
    fn insert(map: &mut aya::maps::Map, (key, bits): (K, u32), value: V) -> Result<(), MapError> {
        aya::maps::LpmTrie::<_, K, V>::try_from(map)?.insert(&LpmKey::new(bits, key), value, 0)
    }
    fn remove(map: &mut aya::maps::Map, (key, bits): (K, u32)) -> Result<(), MapError> {
        aya::maps::LpmTrie::<_, K, V>::try_from(map)?.remove(&LpmKey::new(bits, key))
    }
    fn slots(map: &aya::maps::Map) -> Result<Vec<(K, u32)>, MapError> {
        aya::maps::LpmTrie::<_, K, V>::try_from(map)?
            .keys()
            .map(|key| key.map(|key| (key.data(), key.prefix_len())))
            .collect()
    }
    fn lookup(map: &aya::maps::Map, (key, bits): (K, u32)) -> Result<Option<V>, MapError> {
        found(aya::maps::LpmTrie::<_, K, V>::try_from(map)?.get(&LpmKey::new(bits, key), 0))
    }
}

/// The slot type of map `M`.
pub type Slot<M> =
    <<M as MapDef>::Kind as KindAccess<<M as MapDef>::Key, <M as MapDef>::Value>>::Slot;

/// A map the agent writes entry by entry (hash maps and LPM tries).
pub trait Writable: MapDef<Kind: KindAccess<Self::Key, Self::Value>> {}
impl<M: MapDef<Kind: KindAccess<M::Key, M::Value>>> Writable for M {}

/// Writes to the kernel maps: the loaded programs, or a `Recorder` in tests.
pub trait Maps {
    /// Sets `slot` of map `M` to `value`.
    fn set<M: Writable>(&mut self, slot: Slot<M>, value: M::Value) -> Result<(), EbpfError>;
    /// Removes `slot` from map `M` (an absent slot is fine).
    fn remove<M: Writable>(&mut self, slot: Slot<M>) -> Result<(), EbpfError>;
    /// The slots present in map `M`, whoever wrote them.
    fn keys<M: Writable>(&self) -> Result<Vec<Slot<M>>, EbpfError>;
    /// The value at `slot` of map `M`, whoever wrote it.
    fn get<M: Writable>(&self, slot: Slot<M>) -> Result<Option<M::Value>, EbpfError>;
    /// Gives interface `ifindex` a counter entry, keeping one it has (so frames delivered to a
    /// new pod count from the start, and a previous agent's counts survive).
    fn open_counters(&mut self, _ifindex: u32) -> Result<(), EbpfError> {
        Ok(())
    }
    /// Forgets the counters of interface `ifindex` (the index may be reused).
    fn close_counters(&mut self, _ifindex: u32) -> Result<(), EbpfError> {
        Ok(())
    }
}

/// Whether a failed delete only says the key was absent (the kernel answers ENOENT).
pub(crate) fn absent(error: &MapError) -> bool {
    match error {
        MapError::KeyNotFound => true,
        MapError::SyscallError(error) => error.io_error.kind() == io::ErrorKind::NotFound,
        _ => false,
    }
}

impl Maps for super::KernelPrograms {
    fn set<M: Writable>(&mut self, slot: Slot<M>, value: M::Value) -> Result<(), EbpfError> {
        let name = M::NAME;
        M::Kind::insert(self.map_mut(name)?, slot, value)
            .map_err(|source| EbpfError::Map { name, source })
    }

    fn remove<M: Writable>(&mut self, slot: Slot<M>) -> Result<(), EbpfError> {
        let name = M::NAME;
        match M::Kind::remove(self.map_mut(name)?, slot) {
            Err(source) if !absent(&source) => Err(EbpfError::Map { name, source }),
            _ => Ok(()),
        }
    }

    fn keys<M: Writable>(&self) -> Result<Vec<Slot<M>>, EbpfError> {
        let name = M::NAME;
        let map = self.ebpf.map(name).ok_or(EbpfError::MissingMap { name })?;
        M::Kind::slots(map).map_err(|source| EbpfError::Map { name, source })
    }

    fn get<M: Writable>(&self, slot: Slot<M>) -> Result<Option<M::Value>, EbpfError> {
        let name = M::NAME;
        let map = self.ebpf.map(name).ok_or(EbpfError::MissingMap { name })?;
        M::Kind::lookup(map, slot).map_err(|source| EbpfError::Map { name, source })
    }

    fn open_counters(&mut self, ifindex: u32) -> Result<(), EbpfError> {
        super::KernelPrograms::open_counters(self, ifindex)
    }

    fn close_counters(&mut self, ifindex: u32) -> Result<(), EbpfError> {
        super::KernelPrograms::close_counters(self, ifindex)
    }
}

#[cfg(test)]
pub(crate) use recorder::Recorder;

#[cfg(test)]
mod recorder {
    use std::{any::Any, collections::HashMap};

    use super::{EbpfError, MapDef, Maps, Slot, Writable};

    /// The maps as a kernel would hold them after the writes, with a count of writes per map.
    #[derive(Default)]
    pub(crate) struct Recorder {
        tables: HashMap<&'static str, Box<dyn Any>>,
        writes: HashMap<&'static str, usize>,
    }

    impl std::fmt::Debug for Recorder {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Recorder")
                .field("writes", &self.writes)
                .finish_non_exhaustive()
        }
    }

    impl Recorder {
        /// Map `M`'s entries.
        pub(crate) fn table<M: Writable>(&self) -> HashMap<Slot<M>, M::Value> {
            self.tables
                .get(M::NAME)
                .and_then(|table| table.downcast_ref::<HashMap<Slot<M>, M::Value>>())
                .cloned()
                .unwrap_or_default()
        }

        /// Map `M`'s entries keyed by `key(slot)` (for assertions that name slots their way).
        pub(crate) fn table_by<M: Writable, K: Eq + std::hash::Hash>(
            &self,
            key: impl Fn(Slot<M>) -> K,
        ) -> HashMap<K, M::Value> {
            let table = self.table::<M>();
            table
                .into_iter()
                .map(|(slot, value)| (key(slot), value))
                .collect()
        }

        /// Map `M`'s entries, to change behind the agent's back.
        pub(crate) fn table_mut<M: Writable>(&mut self) -> &mut HashMap<Slot<M>, M::Value> {
            self.tables
                .entry(M::NAME)
                .or_insert_with(|| Box::new(HashMap::<Slot<M>, M::Value>::new()))
                .downcast_mut()
                .expect("one slot and value type per map name")
        }

        /// Writes to map `M` so far.
        pub(crate) fn writes_to<M: MapDef>(&self) -> usize {
            self.writes.get(M::NAME).copied().unwrap_or(0)
        }

        /// Writes to every map so far.
        pub(crate) fn writes(&self) -> usize {
            self.writes.values().sum()
        }

        /// Starts counting writes from zero.
        pub(crate) fn reset_writes(&mut self) {
            self.writes.clear();
        }
    }

    impl Maps for Recorder {
        fn set<M: Writable>(&mut self, slot: Slot<M>, value: M::Value) -> Result<(), EbpfError> {
            *self.writes.entry(M::NAME).or_default() += 1;
            self.table_mut::<M>().insert(slot, value);
            Ok(())
        }

        fn remove<M: Writable>(&mut self, slot: Slot<M>) -> Result<(), EbpfError> {
            *self.writes.entry(M::NAME).or_default() += 1;
            self.table_mut::<M>().remove(&slot);
            Ok(())
        }

        fn keys<M: Writable>(&self) -> Result<Vec<Slot<M>>, EbpfError> {
            Ok(self.table::<M>().into_keys().collect())
        }

        fn get<M: Writable>(&self, slot: Slot<M>) -> Result<Option<M::Value>, EbpfError> {
            Ok(self.table::<M>().get(&slot).copied())
        }
    }
}
