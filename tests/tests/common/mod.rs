//! What the integration tests share that needs the agent library: an SB replica plus compiler,
//! and loading the kernel programs. The scenarios themselves (two nodes, planned pods, the
//! overlapping VPCs, agents per node) are the harness's `ovnbpf_tests::scenario`.

#![allow(dead_code)] // each test binary uses a different part

pub mod stream;
pub mod trace_oracle;

use std::{collections::BTreeSet, time::Duration};

use ovnbpf_agent::{
    ovsdb::{
        remote::Remote,
        session::{self, SessionConfig, SessionEvent},
    },
    pipeline::{Compiler, IrDiff},
    sb::{DATABASE, Southbound, monitor},
};
use ovnbpf_tests::ovn::{Db, OvnLab};
use tokio::sync::mpsc::UnboundedReceiver;

/// The kernel programs, loaded through the verifier; a rejection panics with the whole verifier
/// log so it is diagnosable from the test output.
pub fn load_programs() -> ovnbpf_agent::dataplane::ebpf::KernelPrograms {
    ovnbpf_tests::require_root();
    match ovnbpf_agent::dataplane::ebpf::KernelPrograms::load() {
        Ok(programs) => programs,
        Err(error) => panic!("kernel programs failed to load:\n{error}"),
    }
}

/// The flows `compiler` left unsupported whose stage and reason `keep` selects, each with its
/// stage, reason, match and actions (for an assertion's message).
pub fn unsupported_described(
    sb: &Southbound,
    compiler: &Compiler,
    keep: impl Fn(&str, &str) -> bool,
) -> Vec<String> {
    compiler
        .unsupported_flows()
        .into_iter()
        .filter(|(_, stage, reason)| keep(stage, reason))
        .map(|(uuid, stage, reason)| {
            let flow = sb
                .row::<ovnbpf_agent::sb::rows::LogicalFlow>(&uuid)
                .map(|f| format!("{} / {}", f.match_, f.actions))
                .unwrap_or_default();
            format!("{stage}: {reason}: {flow}")
        })
        .collect()
}

/// A monitor-all SB replica and the compiler fed by it.
pub struct Replica {
    pub sb: Southbound,
    pub compiler: Compiler,
    events: UnboundedReceiver<SessionEvent>,
}

impl Replica {
    pub async fn start(lab: &OvnLab) -> Self {
        let tables = monitor::monitored_tables(true, "", &monitor::LocalScope::default());
        let remote = Remote::parse_list(&lab.unix_remote(Db::Southbound)).unwrap();
        let (handle, events) = session::start(SessionConfig::new(remote, DATABASE, tables));
        std::mem::forget(handle);
        let mut replica = Self {
            sb: Southbound::new(),
            compiler: Compiler::new(),
            events,
        };
        replica.settle().await;
        replica
    }

    /// Applies events until none arrives for 300 ms; returns the merged IR diff.
    pub async fn settle(&mut self) -> IrDiff {
        let mut added = BTreeSet::new();
        let mut removed = BTreeSet::new();
        while let Ok(Some(event)) =
            tokio::time::timeout(Duration::from_millis(300), self.events.recv()).await
        {
            let changes = self.sb.apply(&event);
            let diff = self.compiler.apply(&self.sb, &changes);
            for entry in diff.removed {
                if !added.remove(&entry) {
                    removed.insert(entry);
                }
            }
            for entry in diff.added {
                if !removed.remove(&entry) {
                    added.insert(entry);
                }
            }
        }
        IrDiff {
            added: added.into_iter().collect(),
            removed: removed.into_iter().collect(),
        }
    }
}
