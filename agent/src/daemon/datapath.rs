//! The daemon's side of the datapath (through [`crate::dataplane::Datapath`], whatever the
//! backend): programs the IR diff (the other chassis's encap IPs included), retries failed writes,
//! sweeps what a previous agent left, runs the backend's blocking upkeep off the loop (tunnel
//! next hops, pods' attachments), and reads the datapath's counters for the metrics. Touches only
//! the datapath and the daemon's datapath bookkeeping.

use std::{
    net::IpAddr,
    sync::{Arc, atomic::Ordering},
};

use tracing::{debug, info, warn};

use super::Daemon;
use crate::{
    dataplane::DatapathError,
    pipeline::ir::{IrDiff, IrDiffRef, IrEntry},
};

/// A datapath reading for the metrics: empty without a datapath, or when it fails (logged).
pub(super) fn reading<T>(result: Option<Result<Vec<T>, DatapathError>>, counters: &str) -> Vec<T> {
    match result {
        Some(Ok(values)) => values,
        Some(Err(error)) => {
            debug!(counters, %error, "cannot read the datapath's counters");
            Vec::new()
        }
        None => Vec::new(),
    }
}

impl Daemon {
    /// Writes the IR diff into the datapath; failures are logged and counted, and the backend
    /// retries them with the next change (or the retry timer). A change of another chassis's
    /// encap IP (an `IrEntry::ChassisEncap` of the diff) also refreshes the tunnel next hops.
    /// Returns the number of writes.
    pub(super) fn program_datapath(&mut self, diff: &IrDiffRef<'_>) -> usize {
        if self.track_encaps(diff) {
            self.refresh_tunnel_neighbours(true);
        }
        if let Some(held) = self.held.as_mut() {
            // The view is not complete yet (see `release_held`).
            held.push(diff.to_owned_diff());
            return 0;
        }
        self.write_datapath(std::slice::from_ref(diff))
    }

    /// Writes IR diffs (in order, together) into the datapath, their encaps already tracked.
    pub(super) fn write_datapath(&mut self, diffs: &[IrDiffRef<'_>]) -> usize {
        let Some(datapath) = self.datapath.as_mut() else {
            return 0;
        };
        match datapath.apply_all(diffs) {
            Ok(writes) => {
                self.stats.datapath_writes += writes as u64;
                writes
            }
            Err(error) => {
                self.stats.datapath_errors += 1;
                warn!(%error, "programming the datapath failed; retrying with the next change");
                0
            }
        }
    }

    /// Writes the diffs held while the view was incomplete (see `release_held`).
    pub(super) fn write_held(&mut self, diffs: &[IrDiff]) -> usize {
        let borrowed: Vec<IrDiffRef<'_>> = diffs.iter().map(IrDiff::borrowed).collect();
        self.write_datapath(&borrowed)
    }

    /// Keeps the chassis's encap IPs the tunnel next-hop refresh resolves in line with the
    /// diff's `ChassisEncap` entries (a chassis may have several, of either family); whether
    /// they changed.
    fn track_encaps(&mut self, diff: &IrDiffRef<'_>) -> bool {
        let mut changed = false;
        for entry in diff.removed.iter().copied() {
            if let IrEntry::ChassisEncap { chassis, ip, .. } = entry
                && let Some(ips) = self.encaps.get_mut(chassis)
            {
                changed |= ips.remove(ip);
                if ips.is_empty() {
                    self.encaps.remove(chassis);
                }
            }
        }
        for entry in diff.added.iter().copied() {
            if let IrEntry::ChassisEncap { chassis, ip, .. } = entry {
                changed |= self.encaps.entry(chassis.clone()).or_default().insert(*ip);
            }
        }
        changed
    }

    /// Keeps the other chassis's tunnel next hops resolved (see [`NEIGHBOUR_REFRESH`]).
    /// Off the loop: each request takes the kernel's rtnl lock, which pod NICs being built or
    /// deleted hold, at times through an RCU grace period.
    /// A periodic refresh is skipped while the previous one runs; a new chassis (`changed`)
    /// always starts one.
    pub(super) fn refresh_tunnel_neighbours(&mut self, changed: bool) {
        let Some(datapath) = self.datapath.as_ref() else {
            return;
        };
        if !changed
            && self
                .neighbour_refresh
                .as_ref()
                .is_some_and(|task| !task.is_finished())
        {
            return;
        }
        // Only endpoints of this node's underlay family are tunnelled to.
        let ipv6_underlay = self
            .config
            .chassis
            .encap_ip
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_ipv6());
        let endpoints: Vec<IpAddr> = self
            .encaps
            .iter()
            .filter(|(chassis, _)| **chassis != self.config.chassis.name)
            .flat_map(|(_, ips)| ips.iter().copied())
            .filter(|ip| ip.is_ipv6() == ipv6_underlay)
            .collect();
        if endpoints.is_empty() {
            return;
        }
        let Some(job) = datapath.tunnel_neighbours(endpoints) else {
            return;
        };
        let span = tracing::Span::current();
        self.neighbour_refresh = Some(tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let failed = job();
            if failed > 0 {
                warn!(failed, "tunnel next hops could not be resolved");
            }
        }));
    }

    /// Re-attaches the datapath to every plugged pod interface that lost it (eBPF: an operator's
    /// or a tool's `tc` removed `from_pod`). Off the loop, like the neighbour refresh; skipped
    /// while the previous check runs.
    pub(super) fn check_pod_filters(&mut self) {
        let Some(datapath) = self.datapath.as_ref() else {
            return;
        };
        if self
            .filter_check
            .as_ref()
            .is_some_and(|task| !task.is_finished())
        {
            return;
        }
        let Some(job) = datapath.attachment_check() else {
            return;
        };
        let restored = Arc::clone(&self.filters_restored);
        let span = tracing::Span::current();
        self.filter_check = Some(tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let count = job();
            restored.fetch_add(count as u64, Ordering::Relaxed);
        }));
    }

    /// Deletes expired connections from the datapath's table, off the loop; skipped while the
    /// previous sweep runs.
    pub(super) fn sweep_connections(&mut self) {
        let Some(datapath) = self.datapath.as_ref() else {
            return;
        };
        if self
            .connection_sweep
            .as_ref()
            .is_some_and(|task| !task.is_finished())
        {
            return;
        }
        let Some(job) = datapath.connection_sweep() else {
            return;
        };
        let swept = Arc::clone(&self.connections_swept);
        let table = Arc::clone(&self.connection_table);
        let span = tracing::Span::current();
        self.connection_sweep = Some(tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            // A failed sweep (logged by the backend) leaves the last count standing.
            if let Some(outcome) = job() {
                swept.fetch_add(outcome.removed as u64, Ordering::Relaxed);
                *table
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(outcome);
            }
        }));
    }

    /// Retries datapath writes that failed, if any; whether the retry succeeded (so ports may
    /// be programmed now).
    pub(super) fn retry_datapath(&mut self) -> bool {
        let Some(datapath) = self.datapath.as_mut() else {
            return false;
        };
        let pending = datapath.pending();
        if pending == 0 {
            return false;
        }
        match datapath.retry() {
            Ok(writes) => {
                self.stats.datapath_writes += writes as u64;
                info!(pending, writes, "failed datapath writes retried");
                true
            }
            Err(error) => {
                self.stats.datapath_errors += 1;
                warn!(
                    pending,
                    %error,
                    "retrying datapath writes failed again; nb_cfg stays unacknowledged until they succeed"
                );
                false
            }
        }
    }

    /// Removes what a previous agent left in the datapath and the Southbound no longer asks
    /// for. A failure is retried after the next snapshot.
    pub(super) fn sweep_datapath(&mut self) {
        self.sweep_at = None;
        if let Some(diffs) = self.held.take() {
            // Conditions still unanswered at the sweep: what is in is written before it.
            warn!(
                diffs = diffs.len(),
                pending_conditions = self.conditions_pending.len(),
                "the Southbound view is still incomplete at the sweep; writing the datapath"
            );
            self.write_held(&diffs);
            self.mark_local_ports();
        }
        let Some(datapath) = self.datapath.as_mut() else {
            return;
        };
        match datapath.sweep() {
            Ok(removed) => {
                self.stats.datapath_writes += removed as u64;
                info!(removed, "datapath swept of stale entries");
            }
            Err(error) => {
                self.stats.datapath_errors += 1;
                warn!(%error, "sweeping the datapath failed");
            }
        }
    }
}
