//! Load balancer health checks, ovn-controller's part of them (pinctrl's service monitors):
//! for each Service_Monitor row whose `logical_port` is bound to this chassis and up, the agent
//! probes the backend (a TCP SYN or a UDP datagram from `src_mac`/`src_ip`, through its host
//! interface: [`socket`]), follows pinctrl's state machine ([`state`]) and reports the status
//! it decides, which the daemon writes to `Service_Monitor.status` (see
//! [`crate::daemon::sb_sync`]); northd then keeps offline backends out of the VIP's
//! `ct_lb_mark(backends=…)`. Kube-OVN creates these rows for SwitchLBRule Services (and, on its
//! master branch, for router LB VIPs): an `ip_port_mappings` entry per backend and a
//! `Load_Balancer_Health_Check` with interval 5, timeout 20, success and failure counts 3.
//!
//! Owns one Tokio task per monitored backend and the statuses they decided; reads the replica
//! and the datapath's interface names when told a row or a port changed. IPv6 backends are not
//! probed yet (left without a status, so northd keeps them).

pub mod probe;
pub mod socket;
pub mod state;

use std::{
    collections::{HashMap, HashSet},
    net::Ipv4Addr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use tokio::{sync::mpsc, task::JoinHandle, time::Instant};
use tracing::{Instrument, debug, info, info_span, warn};
use uuid::Uuid;

use crate::{
    net::parse_lsp_address,
    sb::{
        Southbound,
        rows::{PortBinding, ServiceMonitor},
    },
};
use probe::Endpoints;
use socket::ProbeSocket;
use state::{Monitor, Next, Options, Probe, Protocol, Status};

/// A status a probing task decided for its Service_Monitor row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decided {
    pub monitor: Uuid,
    pub status: Status,
}

/// What one backend's probing needs; a change restarts it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub logical_port: String,
    pub interface: String,
    pub endpoints: Endpoints,
    pub protocol: Protocol,
    pub options: Options,
}

/// Counts for metrics and tests.
#[derive(Debug, Default)]
pub struct ProbeCounters {
    pub sent: AtomicU64,
    pub answered: AtomicU64,
    pub unanswered: AtomicU64,
    /// Probes that could not be sent, sockets that could not be opened.
    pub errors: AtomicU64,
}

struct Running {
    target: Target,
    task: JoinHandle<()>,
}

/// See the module documentation.
pub struct ServiceMonitors {
    running: HashMap<Uuid, Running>,
    /// The last status each task decided: what the Southbound should say.
    decided: HashMap<Uuid, Status>,
    sender: mpsc::UnboundedSender<Decided>,
    receiver: mpsc::UnboundedReceiver<Decided>,
    counters: Arc<ProbeCounters>,
}

impl Default for ServiceMonitors {
    fn default() -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        Self {
            running: HashMap::new(),
            decided: HashMap::new(),
            sender,
            receiver,
            counters: Arc::default(),
        }
    }
}

impl std::fmt::Debug for ServiceMonitors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceMonitors")
            .field("running", &self.running.len())
            .field("decided", &self.decided)
            .finish_non_exhaustive()
    }
}

impl ServiceMonitors {
    /// The status the agent wants `monitor`'s row to say, once decided.
    #[must_use]
    pub fn wanted(&self, monitor: &Uuid) -> Option<Status> {
        self.decided.get(monitor).copied()
    }

    /// Backends being probed.
    #[must_use]
    pub fn probing(&self) -> usize {
        self.running.len()
    }

    /// The probes sent, answered, unanswered and failed (for metrics).
    #[must_use]
    pub fn probe_counts(&self) -> Vec<(&'static str, u64)> {
        let counters = &self.counters;
        [
            ("sent", &counters.sent),
            ("answered", &counters.answered),
            ("unanswered", &counters.unanswered),
            ("error", &counters.errors),
        ]
        .into_iter()
        .map(|(name, count)| (name, count.load(Ordering::Relaxed)))
        .collect()
    }

    /// The backends probed here by the status their probes decided (`undecided` before the
    /// first decision).
    #[must_use]
    pub fn status_counts(&self) -> Vec<(&'static str, u64)> {
        let count = |wanted: Option<Status>| {
            self.running
                .keys()
                .filter(|uuid| self.decided.get(uuid).copied() == wanted)
                .count() as u64
        };
        vec![
            ("online", count(Some(Status::Online))),
            ("offline", count(Some(Status::Offline))),
            ("undecided", count(None)),
        ]
    }

    /// The next status a task decided (cancel-safe).
    pub async fn next_decision(&mut self) -> Option<Decided> {
        self.receiver.recv().await
    }

    /// Takes in a task's decision: whether the row must be compared (the task is still the
    /// row's).
    pub fn decided(&mut self, decided: Decided) -> bool {
        if !self.running.contains_key(&decided.monitor) {
            return false;
        }
        self.decided.insert(decided.monitor, decided.status) != Some(decided.status)
    }

    /// Brings the tasks in line with the Southbound: a task for every Service_Monitor row of a
    /// port bound to `chassis` and up whose interface `interface_of` knows, restarted when what
    /// it probes changed, stopped when the row or the port went. O(rows of the table): the
    /// agent replicates only the rows of its own ports. A row no longer probed here keeps the
    /// status it has (the chassis that probes it next writes its own).
    pub fn reconcile(
        &mut self,
        sb: &Southbound,
        chassis: Option<Uuid>,
        interface_of: &dyn Fn(&str) -> Option<String>,
    ) {
        let mut seen = HashSet::new();
        for row in sb.rows::<ServiceMonitor>() {
            let target = chassis.and_then(|chassis| target_of(sb, &row, chassis, interface_of));
            let Some(target) = target else {
                continue;
            };
            seen.insert(row.uuid);
            if self
                .running
                .get(&row.uuid)
                .is_some_and(|running| running.target == target)
            {
                continue;
            }
            if let Some(old) = self.running.remove(&row.uuid) {
                old.task.abort();
            }
            info!(
                monitor = %row.uuid,
                port = %target.logical_port,
                backend = %format!("{}:{}", target.endpoints.backend_ip, target.endpoints.backend_port),
                protocol = ?target.protocol,
                "probing a load balancer backend"
            );
            let task = tokio::spawn(
                probe_backend(
                    row.uuid,
                    target.clone(),
                    self.sender.clone(),
                    self.counters.clone(),
                )
                .instrument(info_span!("service_monitor", port = %target.logical_port)),
            );
            self.running.insert(row.uuid, Running { target, task });
        }
        let gone: Vec<Uuid> = self
            .running
            .keys()
            .filter(|uuid| !seen.contains(uuid))
            .copied()
            .collect();
        for uuid in gone {
            if let Some(running) = self.running.remove(&uuid) {
                debug!(monitor = %uuid, "no longer probing a backend");
                running.task.abort();
            }
            self.decided.remove(&uuid);
        }
    }

    /// Stops every task (the agent is stopping).
    pub fn stop(&mut self) {
        for (_, running) in self.running.drain() {
            running.task.abort();
        }
    }
}

/// What probing `row` needs, if this chassis is the one to probe it: its port bound here and
/// up, an IPv4 backend, the port's MAC for that address (its first MAC if it lists no
/// address, as pinctrl), valid `src_mac`/`src_ip`, and the port's host interface.
fn target_of(
    sb: &Southbound,
    row: &ServiceMonitor,
    chassis: Uuid,
    interface_of: &dyn Fn(&str) -> Option<String>,
) -> Option<Target> {
    let port: PortBinding = sb.port_by_name(&row.logical_port)?;
    if port.chassis != Some(chassis) || port.up != Some(true) {
        return None;
    }
    let backend_ip: Ipv4Addr = row.ip.parse().ok()?;
    let addresses: Vec<_> = port
        .mac
        .iter()
        .filter_map(|entry| parse_lsp_address(entry))
        .collect();
    let backend_mac = addresses
        .iter()
        .find(|(_, ips)| ips.iter().any(|prefix| prefix.network == backend_ip))
        .or_else(|| addresses.iter().find(|(_, ips)| ips.is_empty()))
        .or_else(|| addresses.first())
        .map(|(mac, _)| *mac)?;
    let source_mac = crate::net::parse_mac(&row.src_mac)?;
    let source_ip: Ipv4Addr = row.src_ip.parse().ok()?;
    let backend_port = u16::try_from(row.port).ok()?;
    Some(Target {
        logical_port: row.logical_port.clone(),
        interface: interface_of(&row.logical_port)?,
        endpoints: Endpoints {
            source_mac,
            source_ip,
            backend_mac,
            backend_ip,
            backend_port,
        },
        protocol: Protocol::from_column(row.protocol.as_deref()),
        options: Options::from_map(&row.options),
    })
}

/// Random bits from the kernel (probe ports and sequence numbers need not be more).
fn random_u32() -> u32 {
    let mut bytes = [0_u8; 4];
    // SAFETY: a buffer of the length we pass.
    let filled = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if filled != 4 {
        return std::process::id().wrapping_mul(2_654_435_761);
    }
    u32::from_ne_bytes(bytes)
}

/// A source port in pinctrl's range, 1024–65535.
fn random_port() -> u16 {
    1024 + (random_u32() % (65_536 - 1024)) as u16
}

/// One backend's probing, until aborted: probes as [`Monitor`] says, reads the answers, resets
/// answered SYNs, and reports each status it decides that differs from the last.
async fn probe_backend(
    monitor_uuid: Uuid,
    target: Target,
    decisions: mpsc::UnboundedSender<Decided>,
    counters: Arc<ProbeCounters>,
) {
    let socket = match crate::netlink::index_of(&target.interface)
        .and_then(|ifindex| ProbeSocket::open(ifindex, target.endpoints.source_mac))
    {
        Ok(socket) => socket,
        Err(error) => {
            counters.errors.fetch_add(1, Ordering::Relaxed);
            warn!(interface = %target.interface, %error, "cannot probe a load balancer backend: no socket on its interface");
            return;
        }
    };
    let endpoints = target.endpoints;
    let mut monitor = Monitor::new(target.protocol, target.options, Instant::now());
    let udp_port = random_port();
    let mut reported = None;
    let mut buffer = vec![0_u8; 2048];
    loop {
        let now = Instant::now();
        let until = match monitor.run(now) {
            Next::Probe => {
                let probe = Probe {
                    source_port: match target.protocol {
                        Protocol::Tcp => random_port(),
                        Protocol::Udp => udp_port,
                    },
                    seq: random_u32(),
                };
                let frame = match target.protocol {
                    Protocol::Tcp => probe::tcp_syn(&endpoints, probe.source_port, probe.seq),
                    Protocol::Udp => probe::udp_datagram(&endpoints, probe.source_port),
                };
                match socket.send(&frame) {
                    Ok(()) => {
                        counters.sent.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        // As pinctrl: the probe counts as sent, and goes unanswered.
                        counters.errors.fetch_add(1, Ordering::Relaxed);
                        debug!(%error, "probe not sent");
                    }
                }
                monitor.sent(probe, now);
                continue;
            }
            Next::Wait(until) => until,
        };
        if monitor.status() != reported
            && let Some(status) = monitor.status()
        {
            reported = Some(status);
            info!(status = status.as_str(), backend = %format!("{}:{}", endpoints.backend_ip, endpoints.backend_port), "load balancer backend status");
            if decisions
                .send(Decided {
                    monitor: monitor_uuid,
                    status,
                })
                .is_err()
            {
                return;
            }
        }
        let in_flight = monitor.probe();
        tokio::select! {
            () = tokio::time::sleep_until(until) => {
                // Slept until the probe's timeout: it went unanswered.
                if in_flight.is_some() {
                    counters.unanswered.fetch_add(1, Ordering::Relaxed);
                }
            }
            received = socket.receive(&mut buffer) => {
                let length = match received {
                    Ok(length) => length,
                    Err(error) => {
                        // The interface going away, say: not a loop on the same error (the
                        // reconciliation stops this task once the port goes).
                        counters.errors.fetch_add(1, Ordering::Relaxed);
                        debug!(%error, "reading answers failed");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                        continue;
                    }
                };
                let Some(reply) = probe::read_reply(&endpoints, &buffer[..length]) else {
                    continue;
                };
                let now = Instant::now();
                if !monitor.reply(reply, now) {
                    continue;
                }
                counters.answered.fetch_add(1, Ordering::Relaxed);
                if let (state::Reply::SynAck { destination_port, ack }, Protocol::Tcp) = (reply, target.protocol) {
                    let reset = probe::tcp_reset(&endpoints, destination_port, ack);
                    if let Err(error) = socket.send(&reset) {
                        debug!(%error, "reset after an answered probe not sent");
                    }
                }
            }
        }
    }
}
