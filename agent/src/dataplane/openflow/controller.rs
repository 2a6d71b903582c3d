//! The agent as br-int's controller, for the answers OVN makes in ovn-controller's userspace
//! ([`super::answer`]): a session of its own on br-int's management socket, on a thread of its
//! own, that asks for packet-ins, answers each, sends the answer back into br-int as a
//! packet-out and hands the ARP senders routers heard of to the daemon's MAC learning.
//!
//! A lost session is opened again after [`RECONNECT_DELAY`] (packets sent up meanwhile are
//! lost, as pinctrl's are while ovn-controller restarts). Answers are counted by kind, packets
//! left unanswered by reason, heard neighbours the daemon's queue could not take too. At most
//! [`ANSWERS_PER_SECOND`] packets are handled a second: the rest are dropped and counted
//! (`rate_limited`), so that a flood sent up costs the agent a bounded share of a core.
//!
//! Owns the thread, its session and the counters; touches nothing but that socket.

use std::{
    path::PathBuf,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use super::{
    action::PORT_CONTROLLER,
    answer::{self, Adverts, Kind, Outcome, Unanswered},
    connection::{Connection, OpenFlowError},
};
use crate::dataplane::{DatapathError, NeighbourSink};

/// How long a lost session waits before it is opened again.
pub const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// The packets answered a second at most.
pub const ANSWERS_PER_SECOND: u32 = 2000;

/// What the controller did, by kind and reason.
#[derive(Debug, Default)]
struct Counters {
    answered: [AtomicU64; Kind::ALL.len()],
    unanswered: [AtomicU64; Unanswered::ALL.len()],
    rate_limited: AtomicU64,
    reports_lost: AtomicU64,
}

/// The controller's thread (stopped when this is dropped) and what it counted.
pub struct Controller {
    counters: Arc<Counters>,
    sink: Arc<Mutex<Option<NeighbourSink>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Controller {
    /// Starts the thread answering the switch at `socket`.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn start(socket: PathBuf, adverts: Arc<RwLock<Adverts>>) -> Result<Self, DatapathError> {
        let counters = Arc::new(Counters::default());
        let sink: Arc<Mutex<Option<NeighbourSink>>> = Arc::default();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (thread_counters, thread_sink) = (Arc::clone(&counters), Arc::clone(&sink));
        std::thread::Builder::new()
            .name("openflow-answers".into())
            .spawn(move || run(&socket, &thread_counters, &thread_sink, &adverts, stopped))
            .map_err(DatapathError::new)?;
        Ok(Self {
            counters,
            sink,
            _stop: stop,
        })
    }

    /// Where heard neighbours go from now on.
    pub fn set_sink(&self, sink: NeighbourSink) {
        if let Ok(mut slot) = self.sink.lock() {
            *slot = Some(sink);
        }
    }

    /// The answers sent (and neighbours reported), by kind.
    #[must_use]
    pub fn answered(&self) -> Vec<(&'static str, u64)> {
        let mut counts: Vec<(&'static str, u64)> = Kind::ALL
            .iter()
            .zip(&self.counters.answered)
            .map(|(kind, count)| (kind.name(), count.load(Ordering::Relaxed)))
            .collect();
        counts.push((
            "neighbour_report_lost",
            self.counters.reports_lost.load(Ordering::Relaxed),
        ));
        counts
    }

    /// The packets sent up that got no answer, by reason (drop reasons).
    #[must_use]
    pub fn unanswered(&self) -> Vec<(&'static str, u64)> {
        let mut counts: Vec<(&'static str, u64)> = Unanswered::ALL
            .iter()
            .zip(&self.counters.unanswered)
            .map(|(reason, count)| (reason.drop_reason(), count.load(Ordering::Relaxed)))
            .collect();
        counts.push((
            "answer_rate_limited",
            self.counters.rate_limited.load(Ordering::Relaxed),
        ));
        counts
    }
}

/// The thread: sessions opened and served until `stop`'s sender is dropped.
fn run(
    socket: &std::path::Path,
    counters: &Counters,
    sink: &Mutex<Option<NeighbourSink>>,
    adverts: &RwLock<Adverts>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        tracing::error!("the OpenFlow controller thread cannot build its runtime");
        return;
    };
    runtime.block_on(async {
        // Whether the last attempt failed before its session was up: a switch that stays away
        // is warned of once, not at every attempt.
        let mut failing = false;
        loop {
            let mut up = false;
            tokio::select! {
                result = serve(socket, counters, sink, adverts, &mut up) => {
                    if let Err(error) = result {
                        if up {
                            tracing::warn!(%error, socket = %socket.display(), "the OpenFlow controller session was lost; opened again");
                        } else if !failing {
                            tracing::warn!(%error, socket = %socket.display(), "the OpenFlow controller session cannot be opened; tried again every second");
                        } else {
                            tracing::debug!(%error, socket = %socket.display(), "the OpenFlow controller session cannot be opened");
                        }
                        failing = !up;
                    }
                }
                _ = &mut stop => return,
            }
            tokio::select! {
                () = tokio::time::sleep(RECONNECT_DELAY) => {}
                _ = &mut stop => return,
            }
        }
    });
}

/// One session: packet-ins asked for (`up` set then), each answered, until the session fails.
async fn serve(
    socket: &std::path::Path,
    counters: &Counters,
    sink: &Mutex<Option<NeighbourSink>>,
    adverts: &RwLock<Adverts>,
    up: &mut bool,
) -> Result<(), OpenFlowError> {
    let mut connection = Connection::connect(socket).await?;
    connection.receive_packet_ins().await?;
    *up = true;
    tracing::info!(socket = %socket.display(), "answering br-int's packet-ins");
    let mut second = Instant::now();
    let mut handled = 0_u32;
    loop {
        let packet_in = connection.next_packet_in().await?;
        if second.elapsed() >= Duration::from_secs(1) {
            second = Instant::now();
            handled = 0;
        }
        handled += 1;
        if handled > ANSWERS_PER_SECOND {
            counters.rate_limited.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let answered = match adverts.read() {
            Ok(adverts) => answer::answer(&packet_in, &adverts),
            Err(_) => answer::answer(&packet_in, &Adverts::new()),
        };
        match answered {
            Ok(Outcome::Reply(reply)) => {
                connection
                    .packet_out(PORT_CONTROLLER, &reply.actions, &reply.frame)
                    .await?;
                count(
                    &counters.answered,
                    Kind::ALL.iter().position(|k| *k == reply.kind),
                );
            }
            Ok(Outcome::Heard(heard)) => {
                let sent = sink
                    .lock()
                    .ok()
                    .and_then(|sink| sink.as_ref().map(|sink| sink.try_send(heard).is_ok()));
                if sent == Some(true) {
                    count(
                        &counters.answered,
                        Kind::ALL.iter().position(|k| *k == Kind::NeighbourReported),
                    );
                } else {
                    counters.reports_lost.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(reason) => {
                tracing::debug!(%reason, cookie = packet_in.cookie, table = packet_in.table, "a packet sent to the agent is not answered");
                count(
                    &counters.unanswered,
                    Unanswered::ALL.iter().position(|r| *r == reason),
                );
            }
        }
    }
}

fn count(counters: &[AtomicU64], index: Option<usize>) {
    if let Some(counter) = index.and_then(|index| counters.get(index)) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
