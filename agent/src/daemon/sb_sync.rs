//! The agent's Southbound writes, level-triggered like ovn-controller's: after every replica
//! update and every local change, the rows this chassis owns (its Chassis, Encap and
//! Chassis_Private; the `chassis`, `encap` and `up` of the Port_Bindings it claims or releases;
//! the `status` of the Service_Monitors it probes; the MAC_Binding rows its routers learned,
//! [`super::mac_learning`]) are compared with what the agent wants them to be, and a write is made when they differ and
//! no transaction touching the row is outstanding. A write stays outstanding until its reply and
//! the update that carries it have arrived (tracked by its transaction, never by a clock); a
//! failed or lost write is compared (and so retried) again after [`RETRY_AFTER`] (doubling while
//! failures go on, up to [`RETRY_MAX`]; a new snapshot compares everything at once). Only rows that
//! changed, or whose wanted state changed, are compared ([`SbSync::mark`]). Claims follow the
//! rules of [`super::binding`] (OVN 23.03 `controller/binding.c`): a port is bound here only if
//! `requested_chassis` allows it (else released, never claimed back), and a port another chassis
//! holds is claimed back at most once per [`CLAIM_INTERVAL`].
//!
//! Owns the bookkeeping of outstanding transactions and the set of ports being released; builds
//! operations with [`crate::chassis`] and submits them through the session handle. Reads the
//! replica, never writes it.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::Duration,
};

use serde_json::Value;
use tracing::{debug, info, warn};
use uuid::Uuid;

pub use super::binding::{CLAIM_INTERVAL, can_bind_here};
use super::{binding::ClaimPacer, mac_learning::Learned};
use crate::{
    chassis::{self, ChassisConfig},
    ovsdb::{
        replica::{ChangeSet, RowRef},
        session::{RequestId, SessionHandle},
    },
    sb::{
        Southbound,
        rows::{Chassis, ChassisPrivate, Encap, MacBinding, PortBinding, ServiceMonitor},
    },
};

/// How long after a failed write its rows are compared (and written) again; doubled with each
/// failure in a row, up to [`RETRY_MAX`].
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
pub const RETRY_MAX: Duration = Duration::from_secs(8);

/// Learned neighbours waiting for their MAC_Binding write at most (pinctrl's
/// `MAX_MAC_BINDINGS`).
pub const MAX_LEARNING: usize = 1000;

/// Why a transaction was made (a transaction may serve several).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Purpose {
    Register,
    Claim,
    Up,
    Release,
    AckNbCfg,
    ServiceMonitor,
    MacBinding,
}

impl Purpose {
    pub const ALL: [Purpose; 7] = [
        Purpose::Register,
        Purpose::Claim,
        Purpose::Up,
        Purpose::Release,
        Purpose::AckNbCfg,
        Purpose::ServiceMonitor,
        Purpose::MacBinding,
    ];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Register => "register",
            Purpose::Claim => "claim",
            Purpose::Up => "up",
            Purpose::Release => "release",
            Purpose::AckNbCfg => "ack_nb_cfg",
            Purpose::ServiceMonitor => "service_monitor",
            Purpose::MacBinding => "mac_binding",
        }
    }
}

/// What the Southbound writes did, for logs, metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SbWriteStats {
    /// Transactions submitted, by purpose.
    pub transactions: BTreeMap<Purpose, u64>,
    /// Transactions refused by the server or lost with the connection.
    pub failures: u64,
    /// Rows written again after a failed write.
    pub retries: u64,
    /// Rows found different from what the agent wants (each one written).
    pub out_of_date: u64,
    /// Claims of ports another chassis holds put off by [`CLAIM_INTERVAL`].
    pub claims_postponed: u64,
    /// Learned neighbours dropped: [`MAX_LEARNING`] were waiting for their write.
    pub learning_dropped: u64,
}

/// A row (or group of rows) a transaction can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum RowKey {
    /// This chassis's Chassis, Encap and Chassis_Private rows.
    Own,
    Port(Uuid),
    /// A Service_Monitor row's `status`.
    Monitor(Uuid),
    /// The MAC_Binding of a learned neighbour (by its id in [`SbSync::learned`]).
    Binding(u64),
}

/// What an outstanding write set, to recognise the update that carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Expect {
    /// The chassis registered (its Chassis and Chassis_Private rows exist).
    Registered {
        name: String,
    },
    /// The Chassis_Private row and the `nb_cfg` an acknowledgement wrote.
    NbCfg {
        private: Uuid,
        nb_cfg: i64,
    },
    Port {
        chassis: Option<Uuid>,
        up: Option<bool>,
    },
    Monitor {
        status: &'static str,
    },
    /// The MAC_Binding of (`port`, `ip`) has `mac`.
    Binding {
        port: String,
        ip: String,
        mac: String,
    },
}

#[derive(Debug)]
struct Busy {
    txn: RequestId,
    /// The logical port, to compare it again once free.
    port: Option<String>,
    expect: Expect,
    /// An update touched the row since the write was submitted.
    touched: bool,
    /// The server replied with success; the row is free once the update carrying it is in.
    replied: bool,
}

/// What the agent wants of its ports: given by the daemon for each comparison.
pub struct Wanted<'a> {
    pub config: &'a ChassisConfig,
    pub chassis: Uuid,
    /// Ports bound here (configured and plugged).
    pub local_ports: &'a HashSet<String>,
    /// The chassisredirect ports this chassis is the active gateway for (claimed as local
    /// ports are, with `up` once claimed).
    pub gateways: &'a HashSet<String>,
    /// Whether a port's datapath forwards for it (its `up`).
    pub programmed: &'a dyn Fn(&str) -> bool,
    /// The status this chassis's probes decided for a Service_Monitor row, if they did.
    pub monitor_status: &'a dyn Fn(&Uuid) -> Option<&'static str>,
    /// Now, in ms since the epoch: the timestamp of the MAC_Bindings written.
    pub now_ms: i64,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct SbSync {
    busy: HashMap<RowKey, Busy>,
    txns: HashMap<RequestId, Vec<RowKey>>,
    /// Ports to compare at the next [`Self::reconcile`].
    dirty: HashSet<String>,
    /// Service_Monitor rows to compare at the next [`Self::reconcile`].
    dirty_monitors: HashSet<Uuid>,
    own_dirty: bool,
    /// Ports unplugged here whose release is not seen yet.
    releasing: HashSet<String>,
    /// Rows whose last write failed (their next write is a retry), and the ports among them to
    /// compare again when the retry is due.
    failed: HashSet<RowKey>,
    retry_ports: HashSet<String>,
    retry_monitors: HashSet<Uuid>,
    retry_learned: HashSet<u64>,
    retry_own: bool,
    retry_at: Option<tokio::time::Instant>,
    /// The wait before the next retry (grows while writes keep failing).
    retry_delay: Option<Duration>,
    /// Claims of ports another chassis holds, paced.
    claims: ClaimPacer,
    /// Neighbours the routers learned whose MAC_Binding the replica does not show yet, by id;
    /// an entry goes once the replica shows it (or, updating only, shows no binding to update).
    learned: HashMap<u64, Learned>,
    /// (router port, address) → its id in `learned`.
    learned_ids: HashMap<(String, String), u64>,
    next_learned_id: u64,
    /// Learned neighbours to compare at the next [`Self::reconcile`].
    dirty_learned: HashSet<u64>,
    stats: SbWriteStats,
}

impl SbSync {
    #[must_use]
    pub fn stats(&self) -> &SbWriteStats {
        &self.stats
    }

    /// When failed writes or postponed claims are due for another comparison, if any.
    #[must_use]
    pub fn wake_at(&self) -> Option<tokio::time::Instant> {
        self.retry_at.into_iter().chain(self.claims.wake_at()).min()
    }

    /// Compares again what is due at `now` (see [`Self::wake_at`]).
    pub fn wake(&mut self, now: tokio::time::Instant) {
        if self.retry_at.is_some_and(|at| at <= now) {
            self.retry_due();
        }
        self.dirty.extend(self.claims.take_due(now));
    }

    /// Whether a transaction on this chassis's own rows (registration, `nb_cfg`) is outstanding.
    #[must_use]
    pub fn own_busy(&self) -> bool {
        self.busy.contains_key(&RowKey::Own)
    }

    /// Whether a write on a Port_Binding (a claim, a release, `up`) is outstanding: its update,
    /// which the pipeline compiles (a port's `chassis` decides where it is delivered), is not
    /// in yet.
    #[must_use]
    pub fn ports_busy(&self) -> bool {
        self.busy.keys().any(|key| matches!(key, RowKey::Port(_)))
    }

    /// Outstanding transactions.
    #[must_use]
    pub fn outstanding(&self) -> usize {
        self.txns.len()
    }

    /// Compare `port` at the next reconciliation (its wanted state changed).
    pub fn mark(&mut self, port: &str) {
        self.dirty.insert(port.to_string());
    }

    /// Compare Service_Monitor row `monitor` at the next reconciliation (its wanted status
    /// changed).
    pub fn mark_monitor(&mut self, monitor: Uuid) {
        self.dirty_monitors.insert(monitor);
    }

    /// A router learned a neighbour: its MAC_Binding is written at the next reconciliation
    /// unless the replica shows it by then (a later MAC for the same address replaces it).
    /// At most [`MAX_LEARNING`] wait (pinctrl's bound on pending `put_arp`s): one more new
    /// address is dropped and counted (its sender is reported again by its next ARP).
    pub fn learn(&mut self, learned: Learned) {
        let key = (learned.port.clone(), learned.ip.clone());
        if self.learned.len() >= MAX_LEARNING && !self.learned_ids.contains_key(&key) {
            self.stats.learning_dropped += 1;
            return;
        }
        let id = *self.learned_ids.entry(key).or_insert_with(|| {
            self.next_learned_id += 1;
            self.next_learned_id
        });
        self.learned.insert(id, learned);
        self.dirty_learned.insert(id);
    }

    /// Learned neighbours whose MAC_Binding is not in the replica yet.
    #[must_use]
    pub fn learning(&self) -> usize {
        self.learned.len()
    }

    /// Compare this chassis's own rows at the next reconciliation.
    pub fn mark_own(&mut self) {
        self.own_dirty = true;
    }

    /// `port` was unplugged here: release it unless it is plugged again.
    pub fn release(&mut self, port: &str) {
        self.releasing.insert(port.to_string());
        self.mark(port);
    }

    /// `port` is (again) bound here: a release still pending is dropped.
    pub fn keep(&mut self, port: &str) {
        self.releasing.remove(port);
        self.mark(port);
    }

    /// Ports whose release is not seen yet.
    #[must_use]
    pub fn releasing(&self) -> &HashSet<String> {
        &self.releasing
    }

    /// Takes in a replica change: rows it touched that a write holds are freed once the write is
    /// answered; local ports, ports being released and ports bound to this chassis (`chassis`)
    /// that changed are compared again; a resync compares everything of ours again, including
    /// every port the Southbound binds to this chassis (one this agent did not plug, e.g. whose
    /// release a restart cut short, is released then, as ovn-controller does).
    pub fn observe(
        &mut self,
        sb: &Southbound,
        changes: &ChangeSet,
        local_ports: &HashSet<String>,
        chassis: Option<Uuid>,
    ) {
        if changes.resynced {
            self.own_dirty = true;
            self.dirty.extend(local_ports.iter().cloned());
            self.dirty.extend(self.releasing.iter().cloned());
            if let Some(chassis) = chassis {
                self.dirty
                    .extend(sb.ports_of_chassis(chassis).map(|port| port.logical_port));
            }
            // A write answered before the connection was lost may never see its update (the
            // snapshot is the server's whole view): the snapshot is the update.
            let replied: Vec<RowKey> = self
                .busy
                .iter()
                .filter(|(_, busy)| busy.replied)
                .map(|(key, _)| *key)
                .collect();
            for key in replied {
                self.free(key);
            }
        }
        if [Chassis::TABLE, Encap::TABLE, ChassisPrivate::TABLE]
            .iter()
            .any(|table| changes.tables.get(*table).is_some_and(|c| !c.is_empty()))
        {
            self.own_dirty = true;
            self.touch(RowKey::Own);
        }
        if let Some(change) = changes.tables.get(ServiceMonitor::TABLE) {
            // Northd may write a status too (offline for a port that went down): compared
            // again, and written back if this chassis's probes say otherwise.
            for uuid in change
                .inserted
                .iter()
                .chain(change.modified.iter().map(|(uuid, _)| uuid))
            {
                self.touch(RowKey::Monitor(*uuid));
                self.dirty_monitors.insert(*uuid);
            }
            for (uuid, _) in &change.deleted {
                self.touch(RowKey::Monitor(*uuid));
                self.dirty_monitors.remove(uuid);
            }
        }
        if let Some(change) = changes.tables.get(MacBinding::TABLE) {
            self.bindings_changed(sb, change);
        }
        let Some(change) = changes.tables.get(PortBinding::TABLE) else {
            return;
        };
        let layout = sb
            .replica()
            .table(PortBinding::TABLE)
            .map(|table| table.layout().clone());
        for uuid in &change.inserted {
            self.port_changed(sb.row::<PortBinding>(uuid), local_ports, chassis);
        }
        for (uuid, _) in &change.modified {
            self.port_changed(sb.row::<PortBinding>(uuid), local_ports, chassis);
        }
        for (uuid, row) in &change.deleted {
            self.touch(RowKey::Port(*uuid));
            if let Some(layout) = &layout {
                let port = PortBinding::from_row(&RowRef {
                    uuid: *uuid,
                    layout,
                    row,
                });
                if self.releasing.remove(&port.logical_port) {
                    debug!(port = %port.logical_port, "released port's binding deleted");
                }
            }
        }
    }

    /// MAC_Binding rows changed: a learned neighbour's write they carry is done, and every
    /// learned neighbour they touch is compared again.
    fn bindings_changed(&mut self, sb: &Southbound, change: &crate::ovsdb::replica::TableChanges) {
        if self.learned_ids.is_empty() {
            return;
        }
        let Some(table) = sb.replica().table(MacBinding::TABLE) else {
            return;
        };
        let layout = table.layout().clone();
        let current = change
            .inserted
            .iter()
            .chain(change.modified.iter().map(|(uuid, _)| uuid))
            .filter_map(|uuid| sb.row::<MacBinding>(uuid));
        let deleted = change.deleted.iter().map(|(uuid, row)| {
            MacBinding::from_row(&RowRef {
                uuid: *uuid,
                layout: &layout,
                row,
            })
        });
        let touched: Vec<u64> = current
            .chain(deleted)
            .filter_map(|binding| {
                self.learned_ids
                    .get(&(binding.logical_port, binding.ip))
                    .copied()
            })
            .collect();
        for id in touched {
            self.touch(RowKey::Binding(id));
            self.dirty_learned.insert(id);
        }
    }

    fn port_changed(
        &mut self,
        port: Option<PortBinding>,
        local_ports: &HashSet<String>,
        chassis: Option<Uuid>,
    ) {
        let Some(port) = port else {
            return;
        };
        self.touch(RowKey::Port(port.uuid));
        if local_ports.contains(&port.logical_port)
            || self.releasing.contains(&port.logical_port)
            || (chassis.is_some() && port.chassis == chassis)
        {
            self.dirty.insert(port.logical_port);
        }
    }

    /// An update touched `key`: an answered write holding it is carried; an unanswered one will
    /// be once answered.
    fn touch(&mut self, key: RowKey) {
        let Some(busy) = self.busy.get_mut(&key) else {
            return;
        };
        if busy.replied {
            self.free(key);
        } else {
            busy.touched = true;
        }
    }

    /// Releases `key` and compares it again.
    fn free(&mut self, key: RowKey) {
        if let Some(busy) = self.busy.remove(&key) {
            match (key, busy.port) {
                (RowKey::Own, _) => self.own_dirty = true,
                (RowKey::Port(_), Some(port)) => {
                    self.dirty.insert(port);
                }
                (RowKey::Port(_), None) => {}
                (RowKey::Monitor(uuid), _) => {
                    self.dirty_monitors.insert(uuid);
                }
                (RowKey::Binding(id), _) => {
                    self.dirty_learned.insert(id);
                }
            }
        }
    }

    /// The outcome of a transaction (from [`crate::ovsdb::session::SessionEvent::Transacted`]):
    /// on success its rows are free once the update carrying it is in (already, normally: the
    /// server sends it before the reply); on failure they are compared again after
    /// [`RETRY_AFTER`].
    pub fn finished(&mut self, sb: &Southbound, id: RequestId, result: Result<(), String>) {
        let Some(keys) = self.txns.remove(&id) else {
            return;
        };
        if let Err(error) = &result {
            self.stats.failures += 1;
            warn!(%error, rows = keys.len(), "southbound write failed; comparing its rows again shortly");
            let delay = self.retry_delay.unwrap_or(RETRY_AFTER);
            self.retry_at
                .get_or_insert_with(|| tokio::time::Instant::now() + delay);
        } else {
            self.retry_delay = None;
        }
        for key in keys {
            let Some(busy) = self.busy.get_mut(&key) else {
                continue;
            };
            if busy.txn != id {
                continue;
            }
            if result.is_err() {
                let busy = self.busy.remove(&key);
                self.failed.insert(key);
                match (key, busy.and_then(|busy| busy.port)) {
                    (RowKey::Own, _) => self.retry_own = true,
                    (RowKey::Port(_), Some(port)) => {
                        self.retry_ports.insert(port);
                    }
                    (RowKey::Port(_), None) => {}
                    (RowKey::Monitor(uuid), _) => {
                        self.retry_monitors.insert(uuid);
                    }
                    (RowKey::Binding(id), _) => {
                        self.retry_learned.insert(id);
                    }
                }
                continue;
            }
            self.failed.remove(&key);
            if busy.touched || carried(sb, key, &busy.expect) {
                self.free(key);
            } else {
                busy.replied = true;
            }
        }
    }

    /// Failed writes are due: their rows are compared again.
    fn retry_due(&mut self) {
        self.retry_at = None;
        self.retry_delay = Some(
            self.retry_delay
                .map_or(RETRY_AFTER, |delay| delay * 2)
                .min(RETRY_MAX),
        );
        self.dirty.extend(self.retry_ports.drain());
        self.dirty_monitors.extend(self.retry_monitors.drain());
        self.dirty_learned.extend(self.retry_learned.drain());
        if std::mem::take(&mut self.retry_own) {
            self.own_dirty = true;
        }
    }

    /// Compares the rows marked since the last call with what `wanted` asks and writes those
    /// that differ and are free (a busy row is compared again when its write is done).
    /// Without `wanted` (this chassis is not registered yet) only the registration is compared.
    pub fn reconcile(
        &mut self,
        sb: &Southbound,
        handle: &SessionHandle,
        config: &ChassisConfig,
        wanted: Option<&Wanted>,
    ) {
        if self.own_dirty && !self.own_busy() {
            self.own_dirty = false;
            {
                let ops = config.registration_ops(sb);
                if !ops.is_empty() {
                    self.submit(
                        handle,
                        &[Purpose::Register],
                        ops,
                        vec![(
                            RowKey::Own,
                            None,
                            Expect::Registered {
                                name: config.name.clone(),
                            },
                        )],
                    );
                }
            }
        }
        let Some(wanted) = wanted else {
            return;
        };
        let mut ops = Vec::new();
        let mut purposes = Vec::new();
        let mut rows = Vec::new();
        for name in std::mem::take(&mut self.dirty) {
            let Some(port) = sb.port_by_name(&name) else {
                if !wanted.local_ports.contains(&name) {
                    self.releasing.remove(&name);
                }
                continue;
            };
            if self.busy.contains_key(&RowKey::Port(port.uuid)) {
                // Compared again when its write is done.
                continue;
            }
            let Some((op, purpose, expect)) = self.port_write(&port, wanted) else {
                continue;
            };
            ops.push(op);
            purposes.extend(purpose);
            rows.push((RowKey::Port(port.uuid), Some(name), expect));
        }
        for uuid in std::mem::take(&mut self.dirty_monitors) {
            let key = RowKey::Monitor(uuid);
            if self.busy.contains_key(&key) {
                continue;
            }
            let (Some(row), Some(status)) = (
                sb.row::<ServiceMonitor>(&uuid),
                (wanted.monitor_status)(&uuid),
            ) else {
                continue;
            };
            if row.status.as_deref() == Some(status) {
                continue;
            }
            ops.push(chassis::service_monitor_status_op(uuid, status));
            purposes.push(Purpose::ServiceMonitor);
            rows.push((key, None, Expect::Monitor { status }));
        }
        self.learned_writes(sb, wanted.now_ms, &mut ops, &mut purposes, &mut rows);
        if !ops.is_empty() {
            purposes.sort_unstable();
            purposes.dedup();
            self.submit(handle, &purposes, ops, rows);
        }
    }

    /// The MAC_Binding writes of the learned neighbours marked since the last call: an insert
    /// for an address the port has no binding for, an update of one with another MAC; a
    /// neighbour the replica shows (or, updating only, has no binding to update) is done.
    fn learned_writes(
        &mut self,
        sb: &Southbound,
        now_ms: i64,
        ops: &mut Vec<Value>,
        purposes: &mut Vec<Purpose>,
        rows: &mut Vec<(RowKey, Option<String>, Expect)>,
    ) {
        for id in std::mem::take(&mut self.dirty_learned) {
            let key = RowKey::Binding(id);
            if self.busy.contains_key(&key) {
                continue;
            }
            let Some(learned) = self.learned.get(&id) else {
                continue;
            };
            // The router port or the router went meanwhile: nothing to learn on.
            if sb.port_by_name(&learned.port).is_none()
                || sb
                    .row::<crate::sb::rows::DatapathBinding>(&learned.datapath)
                    .is_none()
            {
                self.forget_learned(id);
                continue;
            }
            let op = match sb.mac_binding(&learned.port, &learned.ip) {
                Some(binding) if binding.mac == learned.mac => None,
                Some(binding) => Some(chassis::mac_binding_update_op(
                    binding.uuid,
                    &learned.mac,
                    now_ms,
                )),
                None if learned.update_only => None,
                None => Some(chassis::mac_binding_insert_op(
                    &learned.port,
                    &learned.ip,
                    &learned.mac,
                    learned.datapath,
                    now_ms,
                )),
            };
            let Some(op) = op else {
                self.forget_learned(id);
                continue;
            };
            debug!(port = %learned.port, ip = %learned.ip, mac = %learned.mac, "writing a learned neighbour");
            ops.push(op);
            purposes.push(Purpose::MacBinding);
            let expect = Expect::Binding {
                port: learned.port.clone(),
                ip: learned.ip.clone(),
                mac: learned.mac.clone(),
            };
            rows.push((key, None, expect));
        }
    }

    fn forget_learned(&mut self, id: u64) {
        if let Some(learned) = self.learned.remove(&id) {
            self.learned_ids.remove(&(learned.port, learned.ip));
        }
        self.retry_learned.remove(&id);
    }

    /// The write that brings `port` to what the agent wants, if it differs: for a local port a
    /// claim (with `up` as its datapath is, in the same operation, so no later write undoes an
    /// earlier `up`), or `up` alone; a release for a port bound here that is not plugged here
    /// (unplugged, or never plugged by this agent) or that `requested_chassis` gives to another
    /// chassis (OVN's rule: such a port is released and not claimed back).
    fn port_write(
        &mut self,
        port: &PortBinding,
        wanted: &Wanted,
    ) -> Option<(Value, Vec<Purpose>, Expect)> {
        let name = &port.logical_port;
        let ours = port.chassis == Some(wanted.chassis);
        let gateway = wanted.gateways.contains(name);
        let local = wanted.local_ports.contains(name) || gateway;
        let bindable = local && can_bind_here(port, wanted.config, wanted.chassis);
        if !bindable {
            if !local && !ours {
                // Released (or never ours): nothing left to do.
                self.releasing.remove(name);
            }
            if !ours {
                return None;
            }
            if local {
                info!(port = %name, requested_chassis = ?port.requested_chassis, "port requested by another chassis; releasing it");
            } else if !self.releasing.contains(name) {
                // Bound here but plugged by no one here (a release a restart cut short, a port
                // moved while the agent was away): released, as ovn-controller does.
                info!(port = %name, "port bound to this chassis but not plugged here; releasing it");
            }
            let op = chassis::release_op_if_ours(port, wanted.chassis);
            let up = port.up.map(|_| false);
            return Some((
                op,
                vec![Purpose::Release],
                Expect::Port { chassis: None, up },
            ));
        }
        let now = tokio::time::Instant::now();
        if !ours && port.chassis.is_some() && !self.claims.may_claim_back(name, now) {
            // Another chassis holds it: claimed back only CLAIM_INTERVAL after the last claim.
            debug!(port = %name, "claim of a port another chassis holds postponed");
            self.stats.claims_postponed += 1;
            return None;
        }
        let programmed = gateway || (wanted.programmed)(name);
        let write = chassis::bind_op(port, wanted.chassis, programmed)?;
        if write.claims {
            self.claims.claimed(name, now);
        }
        let mut purposes = Vec::new();
        if write.claims {
            purposes.push(Purpose::Claim);
        }
        if write.sets_up {
            purposes.push(Purpose::Up);
        }
        let up = if port.up.is_some() && (!ours || write.sets_up) {
            Some(programmed)
        } else {
            port.up
        };
        Some((
            write.op,
            purposes,
            Expect::Port {
                chassis: Some(wanted.chassis),
                up,
            },
        ))
    }

    fn submit(
        &mut self,
        handle: &SessionHandle,
        purposes: &[Purpose],
        ops: Vec<Value>,
        rows: Vec<(RowKey, Option<String>, Expect)>,
    ) {
        let id = match handle.submit_tracked(ops) {
            Ok(id) => id,
            Err(error) => {
                // The session is gone (the agent is stopping).
                warn!(%error, "southbound write not submitted");
                return;
            }
        };
        for purpose in purposes {
            *self.stats.transactions.entry(*purpose).or_default() += 1;
        }
        debug!(
            id,
            ?purposes,
            rows = rows.len(),
            "southbound write submitted"
        );
        let mut keys = Vec::with_capacity(rows.len());
        for (key, port, expect) in rows {
            self.stats.out_of_date += 1;
            if self.failed.contains(&key) {
                self.stats.retries += 1;
            }
            self.busy.insert(
                key,
                Busy {
                    txn: id,
                    port,
                    expect,
                    touched: false,
                    replied: false,
                },
            );
            keys.push(key);
        }
        self.txns.insert(id, keys);
    }

    /// Acknowledges `nb_cfg` in Chassis_Private when it differs and this chassis's rows are free.
    pub fn acknowledge(
        &mut self,
        sb: &Southbound,
        handle: &SessionHandle,
        config: &ChassisConfig,
        now_ms: i64,
    ) {
        if self.own_busy() {
            return;
        }
        let (Some(global), Some(private)) =
            (sb.sb_global(), sb.chassis_private_by_name(&config.name))
        else {
            return;
        };
        let ops = chassis::nb_cfg_ops(&private, global.nb_cfg, now_ms);
        if ops.is_empty() {
            return;
        }
        self.submit(
            handle,
            &[Purpose::AckNbCfg],
            ops,
            vec![(
                RowKey::Own,
                None,
                Expect::NbCfg {
                    private: private.uuid,
                    nb_cfg: global.nb_cfg,
                },
            )],
        );
    }
}

/// Whether the replica already shows what a write set.
fn carried(sb: &Southbound, key: RowKey, expect: &Expect) -> bool {
    match (key, expect) {
        (RowKey::Port(uuid), Expect::Port { chassis, up }) => sb
            .row::<PortBinding>(&uuid)
            .is_none_or(|port| port.chassis == *chassis && port.up == *up),
        (RowKey::Own, Expect::Registered { name }) => {
            sb.chassis_by_name(name).is_some() && sb.chassis_private_by_name(name).is_some()
        }
        (RowKey::Monitor(uuid), Expect::Monitor { status }) => sb
            .row::<ServiceMonitor>(&uuid)
            .is_none_or(|row| row.status.as_deref() == Some(*status)),
        (RowKey::Binding(_), Expect::Binding { port, ip, mac }) => sb
            .mac_binding(port, ip)
            .is_some_and(|binding| binding.mac == *mac),
        (RowKey::Own, Expect::NbCfg { private, nb_cfg }) => sb
            .row::<ChassisPrivate>(private)
            .is_none_or(|private| private.nb_cfg == *nb_cfg),
        _ => false,
    }
}

#[cfg(test)]
#[path = "sb_sync_tests.rs"]
mod tests;
