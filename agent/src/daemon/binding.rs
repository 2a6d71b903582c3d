//! Binding (OVN's `controller/binding.c`): which logical ports are bound to this chassis, the
//! rules for claiming them, and the local scope they make. The rules: a port is bound here only
//! if `requested_chassis` allows it ([`can_bind_here`], OVN 23.03 `lport_can_bind_on_this_chassis`)
//! and a port another chassis holds is claimed back at most once per [`CLAIM_INTERVAL`]
//! ([`ClaimPacer`], `lport_maybe_postpone`). The scope: which Southbound changes can change the
//! local datapaths, and narrowing the monitor to them (unless monitor-all). And the port
//! commands' replies that wait for a Port_Binding to be bound here and up. The writes these rules
//! ask for are made by [`super::sb_sync`]. Touches the daemon's scope, monitor conditions and
//! pending replies; reads the replica.

use std::{collections::HashMap, time::Duration};

use tokio::time::Instant;
use tracing::{info, warn};

use super::{Daemon, SWEEP_DELAY};
use crate::{
    chassis::ChassisConfig,
    ovsdb::replica::{ChangeSet, RowRef},
    sb::{
        monitor,
        rows::{self, DatapathBinding, PortBinding},
    },
};

/// A port another chassis holds is not claimed back within this long of this chassis's last
/// claim of it (OVN 23.03 `CLAIM_TIME_THRESHOLD_MS`, `lport_maybe_postpone`): two chassis that
/// both want a port claim it at most twice a second each instead of in a tight loop.
pub const CLAIM_INTERVAL: Duration = Duration::from_millis(500);

/// OVN's rule for binding a port as main chassis (`lport_can_bind_on_this_chassis`):
/// `requested_chassis` is this chassis, or `options:requested-chassis` is empty or names this
/// chassis (by name or hostname) first.
#[must_use]
pub fn can_bind_here(port: &PortBinding, config: &ChassisConfig, chassis: uuid::Uuid) -> bool {
    if port.requested_chassis == Some(chassis) {
        return true;
    }
    let Some(requested) = port
        .options
        .get("requested-chassis")
        .map(|list| list.trim())
        .filter(|list| !list.is_empty())
    else {
        return true;
    };
    requested
        .split(',')
        .next()
        .map(str::trim)
        .is_some_and(|first| first == config.name || first == config.hostname)
}

/// Paces claims of ports another chassis holds (see [`CLAIM_INTERVAL`]).
#[derive(Debug, Default)]
pub struct ClaimPacer {
    /// When this chassis last claimed each port (kept for 5 × [`CLAIM_INTERVAL`]).
    pub(super) last_claimed: HashMap<String, Instant>,
    /// Claims put off, and when they are due.
    postponed: HashMap<String, Instant>,
}

impl ClaimPacer {
    /// Whether `port`, which another chassis holds, may be claimed back at `now`; if not, the
    /// claim is put off until [`CLAIM_INTERVAL`] after this chassis's last claim.
    pub fn may_claim_back(&mut self, port: &str, now: Instant) -> bool {
        match self.last_claimed.get(port) {
            Some(last) if now.duration_since(*last) < CLAIM_INTERVAL => {
                self.postponed
                    .insert(port.to_string(), *last + CLAIM_INTERVAL);
                false
            }
            _ => true,
        }
    }

    /// This chassis claimed `port` at `now`.
    pub fn claimed(&mut self, port: &str, now: Instant) {
        self.last_claimed
            .retain(|_, at| now.duration_since(*at) < 5 * CLAIM_INTERVAL);
        self.last_claimed.insert(port.to_string(), now);
        self.postponed.remove(port);
    }

    /// When the next postponed claim is due, if any.
    #[must_use]
    pub fn wake_at(&self) -> Option<Instant> {
        self.postponed.values().copied().min()
    }

    /// The postponed claims due at `now`, forgotten here (the caller compares them again).
    pub fn take_due(&mut self, now: Instant) -> Vec<String> {
        let due: Vec<String> = self
            .postponed
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(port, _)| port.clone())
            .collect();
        for port in &due {
            self.postponed.remove(port);
        }
        due
    }
}

impl Daemon {
    /// Answers the port commands the replica can now answer.
    pub(super) fn poll_pending(&mut self) {
        let chassis = self
            .sb
            .chassis_by_name(&self.config.chassis.name)
            .map(|c| c.uuid);
        self.pending.poll(&self.sb, |binding| {
            chassis.is_some() && binding.chassis == chassis && binding.up != Some(false)
        });
    }

    /// Recomputes the monitored scope now (after the local ports changed).
    pub(super) fn refresh_scope(&mut self) {
        if let Some(chassis) = self.sb.chassis_by_name(&self.config.chassis.name) {
            self.update_scope(chassis.uuid);
        }
    }

    /// Whether `changes` can alter the local scope: a resync, a datapath change, or a
    /// Port_Binding that is (or was) a patch port or bound here. Other nodes' pods, the bulk of
    /// the updates, skip the scope computation (which walks the local ports).
    pub(super) fn scope_may_change(&self, changes: &ChangeSet, chassis: uuid::Uuid) -> bool {
        if changes.resynced || self.scope.chassis != Some(chassis) {
            return true;
        }
        if changes
            .tables
            .get(DatapathBinding::TABLE)
            .is_some_and(|c| !c.is_empty())
        {
            return true;
        }
        let Some(change) = changes.tables.get(PortBinding::TABLE) else {
            return false;
        };
        let Some(table) = self.sb.replica().table(PortBinding::TABLE) else {
            return true;
        };
        let relevant = |port: &PortBinding| {
            port.kind == "patch"
                || port.chassis == Some(chassis)
                || port.requested_chassis == Some(chassis)
                || self.local_ports.contains(&port.logical_port)
        };
        let now = change
            .inserted
            .iter()
            .chain(change.modified.iter().map(|(uuid, _)| uuid))
            .filter_map(|uuid| self.sb.row::<PortBinding>(uuid));
        let before = change
            .modified
            .iter()
            .chain(&change.deleted)
            .map(|(uuid, row)| {
                PortBinding::from_row(&RowRef {
                    uuid: *uuid,
                    layout: table.layout(),
                    row,
                })
            });
        now.chain(before).any(|port| relevant(&port))
    }

    /// Narrows (or widens) the conditional monitor when the set of local datapaths changed.
    pub(super) fn update_scope(&mut self, chassis: uuid::Uuid) {
        if self.config.chassis.monitor_all {
            return;
        }
        let scope = monitor::local_scope(&self.sb, Some(chassis), &self.local_ports);
        if scope == self.scope {
            return;
        }
        info!(
            datapaths = scope.datapaths.len(),
            "local datapaths changed; updating monitor conditions"
        );
        if self.sweep_at.is_some() {
            self.sweep_at = Some(tokio::time::Instant::now() + SWEEP_DELAY);
        }
        for (table, _) in rows::MONITORED {
            let before = monitor::condition(table, &self.config.chassis.name, &self.scope);
            let after = monitor::condition(table, &self.config.chassis.name, &scope);
            if before != after {
                match self.handle.set_condition(table, after) {
                    Ok(id) => {
                        self.conditions_pending.insert(id);
                    }
                    Err(error) => warn!(%table, %error, "could not change the monitor condition"),
                }
            }
        }
        self.scope = scope;
    }
}
