//! An in-memory datapath backend for tests of the daemon and the CNI side without a kernel.
//! It keeps what the eBPF backend keeps, in the same way: desired state (IR entries, encaps
//! among them, plugged ports), what is installed, and the keys whose write failed, retried on the next
//! write, [`Datapath::retry`] or [`Datapath::sweep`]. A test makes writes fail
//! ([`State::failing`]), gives the host interfaces that exist, preloads a previous agent's
//! leftovers and the counters, and reads everything back. Clones share one state.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    net::IpAddr,
    sync::{Arc, Mutex, MutexGuard},
};

use super::{
    Datapath, DatapathError, DropFollower, DropTap, InterfaceReading, OffLoopJob, PortAttacher,
    PortAttachment,
};
use crate::pipeline::ir::{IrDiffRef, IrEntry};

/// One thing the backend writes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Port(String),
    Entry(IrEntry),
}

/// Everything the backend holds; tests set and read it through [`MemoryDatapath::state`].
#[derive(Debug, Default)]
pub struct State {
    /// Every write fails while set (as a full map would), and so does attaching.
    pub failing: bool,
    /// The host interfaces that exist: name → index.
    pub interfaces: HashMap<String, u32>,
    pub plugged: HashMap<String, (String, u32)>,
    pub entries: BTreeSet<IrEntry>,
    pub installed: BTreeSet<Key>,
    /// Keys to write (or remove) at the next flush.
    pub dirty: BTreeSet<Key>,
    /// Installed by a previous agent and not asked for: removed by a sweep.
    pub leftovers: BTreeSet<Key>,
    /// The backend took over a previous agent's state (see [`Datapath::adopted`]).
    pub adopted: bool,
    /// Interfaces the attacher attached (and that still have it).
    pub attached: HashSet<u32>,
    pub drops: Vec<(&'static str, u64)>,
    pub router_replies: Vec<(&'static str, u64)>,
    pub interface_counters: Vec<InterfaceReading>,
    /// The endpoints of each tunnel neighbour job that ran.
    pub neighbour_jobs: Vec<Vec<IpAddr>>,
}

impl State {
    fn wanted(&self, key: &Key) -> bool {
        match key {
            Key::Port(port) => self.plugged.contains_key(port),
            Key::Entry(entry) => self.entries.contains(entry),
        }
    }

    /// Writes every dirty key, or none when writes fail.
    fn flush(&mut self) -> Result<usize, DatapathError> {
        if self.dirty.is_empty() {
            return Ok(0);
        }
        if self.failing {
            return Err(DatapathError::new(format!(
                "{} writes failed (the memory backend is failing)",
                self.dirty.len()
            )));
        }
        let dirty = std::mem::take(&mut self.dirty);
        for key in &dirty {
            if self.wanted(key) {
                self.installed.insert(key.clone());
            } else {
                self.installed.remove(key);
            }
        }
        Ok(dirty.len())
    }
}

#[derive(Clone, Debug, Default)]
pub struct MemoryDatapath {
    state: Arc<Mutex<State>>,
}

impl MemoryDatapath {
    /// A backend on which host interfaces `interfaces` (name, index) exist.
    #[must_use]
    pub fn with_interfaces(interfaces: &[(&str, u32)]) -> Self {
        let datapath = Self::default();
        datapath.state().interfaces = interfaces
            .iter()
            .map(|(name, index)| ((*name).to_string(), *index))
            .collect();
        datapath
    }

    /// The shared state.
    pub fn state(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl Datapath for MemoryDatapath {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn adopted(&self) -> bool {
        self.state().adopted
    }

    fn apply(&mut self, diff: &IrDiffRef<'_>) -> Result<usize, DatapathError> {
        let mut state = self.state();
        for &entry in &diff.removed {
            state.entries.remove(entry);
            state.dirty.insert(Key::Entry(entry.clone()));
        }
        for &entry in &diff.added {
            state.entries.insert(entry.clone());
            state.dirty.insert(Key::Entry(entry.clone()));
        }
        state.flush()
    }

    fn plug(
        &mut self,
        port: &str,
        interface: &str,
        attachment: PortAttachment,
    ) -> Result<usize, DatapathError> {
        let mut state = self.state();
        let Some(index) = state.interfaces.get(interface).copied() else {
            return Err(DatapathError::new(format!("no interface {interface}")));
        };
        if index != attachment.ifindex() {
            return Err(DatapathError::new(format!(
                "{interface} has index {index}, the attachment is of index {}",
                attachment.ifindex()
            )));
        }
        state
            .plugged
            .insert(port.to_string(), (interface.to_string(), index));
        state.dirty.insert(Key::Port(port.to_string()));
        state.flush()
    }

    fn unplug(&mut self, port: &str) -> Result<usize, DatapathError> {
        let mut state = self.state();
        if state.plugged.remove(port).is_none() {
            return Ok(0);
        }
        state.dirty.insert(Key::Port(port.to_string()));
        state.flush()
    }

    fn interface_of(&self, port: &str) -> Option<String> {
        let state = self.state();
        state
            .plugged
            .get(port)
            .map(|(interface, _)| interface.clone())
    }

    fn programmed(&self, port: &str) -> bool {
        let key = Key::Port(port.to_string());
        let state = self.state();
        state.installed.contains(&key) && !state.dirty.contains(&key)
    }

    fn pending(&self) -> usize {
        self.state().dirty.len()
    }

    fn retry(&mut self) -> Result<usize, DatapathError> {
        self.state().flush()
    }

    fn sweep(&mut self) -> Result<usize, DatapathError> {
        let mut state = self.state();
        state.flush()?;
        if state.failing {
            return Err(DatapathError::new("removing stale entries failed"));
        }
        let leftovers = std::mem::take(&mut state.leftovers);
        let stale: Vec<Key> = leftovers
            .into_iter()
            .filter(|key| !state.wanted(key))
            .collect();
        for key in &stale {
            state.installed.remove(key);
        }
        Ok(stale.len())
    }

    fn drop_counters(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(self.state().drops.clone())
    }

    fn router_replies(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(self.state().router_replies.clone())
    }

    fn interface_counters(&self) -> Result<Vec<InterfaceReading>, DatapathError> {
        let state = self.state();
        if state.failing {
            return Err(DatapathError::new("the counters cannot be read"));
        }
        Ok(state.interface_counters.clone())
    }

    fn attacher(&self) -> Arc<dyn PortAttacher> {
        Arc::new(self.clone())
    }

    fn attachment_check(&self) -> Option<OffLoopJob> {
        if self.state().plugged.is_empty() {
            return None;
        }
        let datapath = self.clone();
        Some(Box::new(move || {
            let mut state = datapath.state();
            let lost: Vec<u32> = state
                .plugged
                .values()
                .map(|(_, index)| *index)
                .filter(|index| !state.attached.contains(index))
                .collect();
            state.attached.extend(&lost);
            lost.len()
        }))
    }

    fn tunnel_neighbours(&self, endpoints: Vec<IpAddr>) -> Option<OffLoopJob> {
        let datapath = self.clone();
        Some(Box::new(move || {
            datapath.state().neighbour_jobs.push(endpoints);
            0
        }))
    }

    fn drop_events(&mut self, _per_second: u32, _tap: DropTap) -> Option<DropFollower> {
        None
    }
}

impl PortAttacher for MemoryDatapath {
    fn name(&self) -> &'static str {
        "the memory datapath"
    }

    fn attach(&self, ifindex: u32) -> Result<PortAttachment, DatapathError> {
        let mut state = self.state();
        if state.failing {
            return Err(DatapathError::new("attaching failed"));
        }
        state.attached.insert(ifindex);
        Ok(PortAttachment::attached(ifindex))
    }

    fn is_attached(&self, ifindex: u32) -> Result<bool, DatapathError> {
        Ok(self.state().attached.contains(&ifindex))
    }
}
