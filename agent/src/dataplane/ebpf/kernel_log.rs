//! The kernel programs' debug logs (aya-log), in an agent built with the `bpf-log` feature: the
//! level the programs are loaded with (`--bpf-log-level`, off by default) and, when on, a
//! thread that reads aya-log's `AYA_LOGS` ring buffer and hands each record to tracing (target
//! `ovnbpf::kernel`, at info: asking for the kernel's debug records is asking to see them).
//!
//! Why a build feature and not only the run-time level: the level is a `.rodata` global the
//! verifier knows, so it removes a disabled statement, but the statement still changes how the
//! compiler lays out its program (registers kept alive for its arguments, spills, stack). With
//! one debug statement in the drop path, off: up to +2,446 verified instructions (`flood`),
//! +544 translated bytes (`acl_reject`), and on, `ipv6` over the 512-byte stack limit; in the
//! socket balancer, off: +252 instructions, +128 bytes, +96 bytes of stack. A default build
//! has no statement at all: its object is the same as without aya-log. The `bpf-log` build
//! logs each new load-balanced connection's pick (`lb`) and each socket-level redirection
//! (`sock_connect4`, `sock_sendmsg4`). Touches the `AYA_LOG_LEVEL` global at load and the
//! `AYA_LOGS` map; nothing else of the programs.

use std::{
    os::fd::AsFd,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use aya::Ebpf;
use aya_log::{EbpfLogger, Level};

/// Whether the programs were built with their log statements (the `bpf-log` feature).
pub const BUILT_WITH_LOGS: bool = cfg!(feature = "bpf-log");
/// The ring buffer aya-log's kernel side writes its records to.
pub const LOG_MAP: &str = "AYA_LOGS";
/// The global that holds the level, in the object's `.rodata`.
pub const LEVEL_GLOBAL: &str = aya_log::LEVEL;
/// How long the reader sleeps without records before it checks whether it should stop.
const IDLE_WAKE: Duration = Duration::from_millis(500);

/// Up to which level the kernel programs log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BpfLogLevel {
    /// No log statement runs (removed by the verifier).
    #[default]
    Off,
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl BpfLogLevel {
    /// The value of [`LEVEL_GLOBAL`]: aya-log's level number, 0 for off.
    #[must_use]
    pub fn global_value(self) -> u8 {
        match self {
            Self::Off => 0,
            Self::Error => Level::Error as u8,
            Self::Warn => Level::Warn as u8,
            Self::Info => Level::Info as u8,
            Self::Debug => Level::Debug as u8,
            Self::Trace => Level::Trace as u8,
        }
    }
}

/// The value the loader gives [`LEVEL_GLOBAL`] for `level`: `None` in a build without log
/// statements (there is no such global), where asking for any level but off is an error.
pub fn level_global(level: BpfLogLevel) -> Result<Option<u8>, KernelLogError> {
    match (BUILT_WITH_LOGS, level) {
        (true, level) => Ok(Some(level.global_value())),
        (false, BpfLogLevel::Off) => Ok(None),
        (false, level) => Err(KernelLogError::NotBuilt(level)),
    }
}

/// Errors starting the reader.
#[derive(Debug, thiserror::Error)]
pub enum KernelLogError {
    #[error(
        "--bpf-log-level {0:?}: this agent's kernel programs have no log statements (build it \
         with --features bpf-log)"
    )]
    NotBuilt(BpfLogLevel),
    #[error("reading the kernel programs' log ring buffer: {0}")]
    Logger(#[from] aya_log::Error),
    #[error("starting the kernel log reader thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// The reader of the programs' log records; stops when dropped.
pub struct KernelLog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl KernelLog {
    /// Starts reading the records of `ebpf`'s programs (loaded with [`level_global`]'s value)
    /// unless `level` is off.
    pub fn start(ebpf: &mut Ebpf, level: BpfLogLevel) -> Result<Option<Self>, KernelLogError> {
        if level == BpfLogLevel::Off {
            return Ok(None);
        }
        let mut logger = EbpfLogger::init_with_logger(ebpf, ToTracing)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("ovnbpf-kernel-log".into())
            .spawn(move || {
                while !stopping.load(Ordering::Relaxed) {
                    // An error (none is expected) only makes the loop poll again.
                    let _ = crate::readiness::readable_within(logger.as_fd(), IDLE_WAKE);
                    // aya-log panics on a record it cannot decode: it ends this thread only.
                    logger.flush();
                }
            })?;
        tracing::info!(?level, "kernel programs log to target ovnbpf::kernel");
        Ok(Some(Self {
            stop,
            thread: Some(thread),
        }))
    }
}

impl Drop for KernelLog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Hands aya-log's records (as `log` records) to tracing.
struct ToTracing;

impl log::Log for ToTracing {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let level = record.level().as_str();
        tracing::info!(target: "ovnbpf::kernel", level, "{}", record.args());
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Off is 0, below every level aya-log-ebpf compares with (`level <= AYA_LOG_LEVEL`), and
    /// each level is aya-log's own number.
    #[test]
    fn the_global_value_is_aya_logs_level() {
        assert_eq!(BpfLogLevel::Off.global_value(), 0);
        assert_eq!(BpfLogLevel::Error.global_value(), 1);
        assert_eq!(BpfLogLevel::Trace.global_value(), 5);
        assert!(BpfLogLevel::Debug.global_value() >= Level::Debug as u8);
        assert!(BpfLogLevel::Info.global_value() < Level::Debug as u8);
    }

    /// A build without log statements refuses any level but off, saying how to get them; one
    /// with them sets the global for every level.
    #[test]
    fn a_level_needs_a_build_with_log_statements() {
        if BUILT_WITH_LOGS {
            assert_eq!(level_global(BpfLogLevel::Off).unwrap(), Some(0));
            assert_eq!(level_global(BpfLogLevel::Debug).unwrap(), Some(4));
        } else {
            assert_eq!(level_global(BpfLogLevel::Off).unwrap(), None);
            let error = level_global(BpfLogLevel::Debug).unwrap_err().to_string();
            assert!(error.contains("--features bpf-log"), "{error}");
        }
    }
}
