//! The periodic sweep of CNI attachments whose network namespace is gone, for runtimes whose
//! DEL never arrives (a chained plugin failed first) and that send no CNI GC: every interval,
//! off the daemon loop, [`Handler::sweep_gone_namespaces`] releases what such attachments hold
//! (the veth, the datapath's entries, the Port_Binding claim, the record) through the same path
//! as DEL. Its cost per round is reading the attachment records and one `stat` per record (on a
//! blocking thread); a path whose directory the agent cannot see is never taken for gone. Counts
//! what it collected in [`ServerStats::collected_by_sweep`]; touches nothing else.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use tracing::debug;

use super::handler::Handler;
use crate::metrics::ServerStats;

/// Sweeps every `interval`, forever (until the task is dropped).
pub async fn run(handler: Arc<Handler>, stats: Arc<ServerStats>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: attachments left by a previous run are swept at start.
    loop {
        ticks.tick().await;
        let collected = handler.sweep_gone_namespaces().await;
        stats
            .collected_by_sweep
            .fetch_add(collected as u64, Ordering::Relaxed);
        debug!(collected, "CNI attachment sweep done");
    }
}
