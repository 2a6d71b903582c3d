//! The kernel time ovnbpf's programs spend, from the kernel's own BPF run-time statistics: while a
//! [`KernelTime`] is held, the kernel counts each program's runs and nanoseconds
//! (`BPF_ENABLE_STATS`, the same counters `kernel.bpf_stats_enabled` turns on, but released with
//! the descriptor, so no host setting is left changed). Only the entry programs are summed: a
//! tail call runs inside its caller's accounting, so `from_pod`'s time includes the stages it
//! tail-calls. Used by `cargo xtask bench datapath`; touches nothing but that descriptor.

use std::os::fd::OwnedFd;

use anyhow::{Context, Result};
use aya::programs::loaded_programs;
use ovnbpf_common::program::{FROM_POD, FROM_PROVIDER, FROM_SEGMENTER, FROM_UPLINK};

/// The programs the agent attaches (its tail-called stages run inside them).
pub const ENTRY_PROGRAMS: [&str; 4] = [FROM_POD, FROM_UPLINK, FROM_PROVIDER, FROM_SEGMENTER];

/// Kernel run-time statistics on, for as long as this lives.
pub struct KernelTime {
    _enabled: OwnedFd,
}

/// Runs and nanoseconds summed over the entry programs loaded on the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunTime {
    pub runs: u64,
    pub nanoseconds: u64,
}

impl RunTime {
    /// What was run between `earlier` and `self`.
    #[must_use]
    pub fn since(self, earlier: RunTime) -> RunTime {
        RunTime {
            runs: self.runs.saturating_sub(earlier.runs),
            nanoseconds: self.nanoseconds.saturating_sub(earlier.nanoseconds),
        }
    }
}

impl KernelTime {
    /// Turns the statistics on.
    pub fn enable() -> Result<Self> {
        let enabled = aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .context("BPF_ENABLE_STATS (run time)")?;
        Ok(KernelTime { _enabled: enabled })
    }

    /// The sum over every loaded program named as one of [`ENTRY_PROGRAMS`]: on a bench host
    /// that is the agents' programs (several agents each count).
    pub fn sample(&self) -> Result<RunTime> {
        let mut total = RunTime::default();
        for program in loaded_programs() {
            let program = program.context("reading a loaded program's info")?;
            if program
                .name_as_str()
                .is_some_and(|name| ENTRY_PROGRAMS.contains(&name))
            {
                total.runs += program.run_count();
                total.nanoseconds +=
                    u64::try_from(program.run_time().as_nanos()).unwrap_or(u64::MAX);
            }
        }
        Ok(total)
    }
}
