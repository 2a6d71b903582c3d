//! The agent's main loop: follow the Southbound DB through a monitoring session, keep the typed
//! replica and the pipeline IR current, and have each duty act on what changed. Split by duty as
//! ovn-controller is:
//! - [`binding`] (`binding.c`): which ports are bound here, the claim rules, the local scope and
//!   the monitor conditions it sets (unless monitor-all);
//! - [`sb_sync`] (the SB transactions; `chassis.c`, `binding.c`'s writes): this chassis's rows,
//!   level-triggered: registration, claims, releases, `up`, the `nb_cfg` acknowledgement;
//! - `datapath` (`ofctrl.c`): drives the [`Datapath`] backend from the IR: programs, retries
//!   failed writes, sweeps what a previous agent left once the view settles, runs its upkeep off
//!   the loop;
//! - `commands` (`unixctl`, and the CNI's requests): the [`ports`] commands other tasks send.
//!
//! This module keeps the loop, the event handling that feeds the duties, and what needs them all:
//! `nb_cfg` is acknowledged once each change set has been processed, its datapath writes are done
//! and the monitor conditions it needed are in effect. Owns the session, the replica, the compiler
//! and the datapath; writes only this chassis's rows, through [`sb_sync`].

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::IpAddr,
    sync::{Arc, atomic::AtomicU64},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tracing::{Instrument, debug, info, info_span, warn};

mod acls;
pub mod binding;
mod commands;
mod datapath;
pub mod gateway;
mod mac_learning;
pub mod node_network;
pub mod ports;
pub mod sb_sync;
mod side_duties;

pub use mac_learning::NotLearned;
use ports::{Pending, PortCommand, PortCommands};
pub use sb_sync::{Purpose, SbWriteStats};

use crate::{
    chassis::ChassisConfig,
    dataplane::Datapath,
    ovsdb::{
        connection::ConnectionOptions,
        remote::Remote,
        replica::ChangeSet,
        session::{self, RequestId, SessionConfig, SessionEvent, SessionHandle},
        tls::TlsClient,
    },
    pipeline::Compiler,
    sb::{
        DATABASE, Southbound,
        monitor::{self, LocalScope},
    },
};

/// Everything the daemon needs to know.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub sb_remotes: Vec<Remote>,
    /// TLS settings for `ssl:` remotes.
    pub tls: Option<Arc<TlsClient>>,
    /// Where the datapath's decoded drop events are published (the control socket follows it).
    pub drop_tap: Option<crate::dataplane::DropTap>,
    pub chassis: ChassisConfig,
    /// Logical ports bound to this node by configuration (ports the CNI will add come later).
    pub local_ports: Vec<String>,
    /// Ports the CNI server attached before a restart (released again by CNI DEL).
    pub restored_ports: Vec<String>,
    pub probe_interval: Option<Duration>,
    /// How often every plugged pod's veth is checked for `from_pod` (re-attached when something
    /// removed its filter); `None`: never.
    pub filter_check_interval: Option<Duration>,
    /// This node's port on the join switch, whose facts and routes the loop publishes for
    /// [`crate::node_network`]; `None`: the agent leaves the node's network alone.
    pub node_network: Option<node_network::NodePortConfig>,
}

/// Counters of what the loop did, for logs, metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DaemonStats {
    pub events: u64,
    pub rows_changed: u64,
    pub rejected_rows: u64,
    /// Port_Binding address entries the compiler left out because they do not parse.
    pub bad_addresses: u64,
    /// Southbound transactions submitted, and those refused or lost (see `southbound`).
    pub transactions: u64,
    pub failed_transactions: u64,
    /// Southbound writes by purpose, failures, retries and rows found out of date.
    pub southbound: SbWriteStats,
    /// IR entries added and removed by the compiler over the daemon's life.
    pub ir_changes: u64,
    /// Datapath writes (kernel map writes for eBPF), and failed attempts (retried with the next
    /// change).
    pub datapath_writes: u64,
    pub datapath_errors: u64,
    /// Southbound connections lost (the session reconnects by itself).
    pub disconnects: u64,
    /// ARP senders the datapath's routers heard of (MAC learning), and of them those not
    /// learned, by reason ([`mac_learning::NotLearned`]).
    pub neighbours_heard: u64,
    pub neighbours_not_learned: BTreeMap<&'static str, u64>,
    /// Chassisredirect ports whose gateway group names this chassis, by its role
    /// ([`gateway::Role`]).
    pub gateway_ports: BTreeMap<&'static str, u64>,
}

struct Daemon {
    config: DaemonConfig,
    sb: Southbound,
    compiler: Compiler,
    handle: SessionHandle,
    scope: LocalScope,
    /// Ports bound here: the configured ones and those the CNI server plugged.
    local_ports: HashSet<String>,
    /// The chassisredirect ports this chassis is the active gateway for.
    gateways: gateway::GatewayElection,
    /// Replies to port commands waiting for the Southbound.
    pending: Pending,
    /// Whether a Southbound snapshot has been applied.
    synced: bool,
    /// Whether the Southbound session is up (a snapshot came since the last disconnection).
    connected: bool,
    /// This chassis's Southbound writes: what is wanted, what is in flight.
    sb_sync: sb_sync::SbSync,
    /// Monitor condition changes whose rows have not all arrived yet (`nb_cfg` waits for them).
    conditions_pending: HashSet<RequestId>,
    /// This chassis's Chassis row as last seen (a new one makes every local port compared).
    chassis_uuid: Option<uuid::Uuid>,
    /// The datapath backend, when this agent forwards (not only follows the SB).
    datapath: Option<Box<dyn Datapath>>,
    /// Every chassis's encap IPs as the IR names them (for the tunnel next-hop refresh).
    encaps: HashMap<String, std::collections::BTreeSet<IpAddr>>,
    /// When to remove the datapath entries nobody asked for (set by a snapshot, pushed back while
    /// the monitored scope still grows).
    sweep_at: Option<tokio::time::Instant>,
    /// The running refresh of tunnel next hops, if any.
    neighbour_refresh: Option<tokio::task::JoinHandle<()>>,
    /// The running check of the pods' filters, if any, and how many it re-attached so far.
    filter_check: Option<tokio::task::JoinHandle<()>>,
    filters_restored: Arc<AtomicU64>,
    /// The running sweep of expired connections, how many it and its predecessors deleted, and
    /// the table as the last one left it.
    connection_sweep: Option<tokio::task::JoinHandle<()>>,
    connections_swept: Arc<AtomicU64>,
    connection_table: Arc<std::sync::Mutex<Option<crate::dataplane::ConnectionSweep>>>,
    /// The users' ACLs the datapath does not enforce, per switch.
    unenforced_acls: acls::UnenforcedAcls,
    /// The side duties (e.g. MAC learning) the datapath leaves undone, per datapath.
    side_duties: side_duties::SideDuties,
    /// Where what the Southbound asks of the node's network is published (see
    /// [`node_network`]).
    node_network: Option<tokio::sync::watch::Sender<node_network::NodeNetworkWanted>>,
    /// The load balancer backends this chassis probes (Service_Monitor).
    service_monitors: crate::service_monitor::ServiceMonitors,
    /// Periodic router advertisements to the local ports of advertising switches.
    periodic_adverts: crate::router_advert::periodic::PeriodicAdverts,
    /// BFD with the chassis this one shares gateway groups with (a forwarding agent's).
    bfd: Option<crate::bfd::Bfd>,
    /// The IR diffs not yet written, while the datapath holds a previous agent's state and this
    /// agent's view is not complete (see [`Self::release_held`]); `None` once written.
    held: Option<Vec<crate::pipeline::IrDiff>>,
    stats: DaemonStats,
}

/// Drop events logged per second at most (all are counted in the datapath's drop counters).
const DROP_LOGS_PER_SECOND: u32 = 10;

/// ACL log lines written per second at most (all are counted in `ovnbpf_acl_logged_total`;
/// ovn-controller's own limit is the ACL's meter, where one is set).
const ACL_LOGS_PER_SECOND: u32 = 100;

/// Heard neighbours waiting for the loop at most (more are lost and counted by the backend;
/// each sender is reported again by its next ARP).
const HEARD_NEIGHBOURS_QUEUE: usize = 1024;

/// How often failed datapath writes are retried (they are also retried with every change).
const RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// How often the tunnel next hops of other chassis are refreshed in the kernel's neighbour table
/// (stale entries are probed; without that, the table's garbage collection may drop entries of
/// chassis this node rarely talks to, and flood copies to them would be lost).
const NEIGHBOUR_REFRESH: Duration = Duration::from_secs(30);

/// How long after a snapshot, or the last scope change that followed it, the datapath is swept.
/// Until then entries a previous agent left keep forwarding: the rows of the datapaths added to
/// the monitor after the snapshot arrive later, and sweeping before would cut live traffic.
const SWEEP_DELAY: Duration = Duration::from_secs(3);

/// A daemon's Southbound session, started by [`connect`] before its datapath: the server
/// serializes the snapshot and the session reads it while the kernel verifies the datapath's
/// programs (1.2 s here; at 1,000 pods more than the snapshot takes).
pub struct SouthboundSession {
    scope: LocalScope,
    handle: SessionHandle,
    events: tokio::sync::mpsc::UnboundedReceiver<SessionEvent>,
}

/// Starts the session [`run`] follows (on the current tokio runtime); its events wait for it.
#[must_use]
pub fn connect(config: &DaemonConfig) -> SouthboundSession {
    let scope = LocalScope {
        ports: config
            .local_ports
            .iter()
            .chain(&config.restored_ports)
            .cloned()
            .collect(),
        ..LocalScope::default()
    };
    let tables =
        monitor::monitored_tables(config.chassis.monitor_all, &config.chassis.name, &scope);
    let mut session_config = SessionConfig::new(config.sb_remotes.clone(), DATABASE, tables);
    session_config.connection = connection_options(config);
    let (handle, events) = session::start(session_config);
    SouthboundSession {
        scope,
        handle,
        events,
    }
}

/// Runs until `shutdown` resolves (the chassis rows stay, so a restart is hitless), following
/// `session` (from [`connect`] with the same `config`). With a `datapath`, the IR and the
/// chassis's encap IPs are programmed into it as they change.
pub async fn run(
    config: DaemonConfig,
    session: SouthboundSession,
    mut datapath: Option<Box<dyn Datapath>>,
    mut commands: PortCommands,
    shutdown: impl std::future::Future<Output = ()>,
) -> DaemonStats {
    let span = info_span!("agent", chassis = %config.chassis.name);
    async move {
        let drop_events = datapath.as_mut().and_then(|datapath| {
            let tap = config
                .drop_tap
                .clone()
                .unwrap_or_else(|| tokio::sync::broadcast::channel(1).0);
            datapath
                .drop_events(DROP_LOGS_PER_SECOND, tap)
                .map(tokio::spawn)
        });
        let acl_log_events = datapath
            .as_mut()
            .and_then(|datapath| datapath.acl_log_events(ACL_LOGS_PER_SECOND))
            .map(tokio::spawn);
        let (neighbour_sink, mut heard_neighbours) =
            tokio::sync::mpsc::channel(HEARD_NEIGHBOURS_QUEUE);
        let neighbour_events = datapath
            .as_mut()
            .and_then(|datapath| datapath.neighbour_events(neighbour_sink))
            .map(tokio::spawn);
        let SouthboundSession {
            scope,
            handle,
            mut events,
        } = session;
        let mut daemon = Daemon::new(config, handle, scope, datapath);
        daemon.node_network = Some(commands.node_network.clone());
        daemon.bfd = daemon.start_bfd();
        tokio::pin!(shutdown);
        let mut commands_open = true;
        let mut retry = tokio::time::interval(RETRY_INTERVAL);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut neighbours = tokio::time::interval(NEIGHBOUR_REFRESH);
        neighbours.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let filter_check_interval = daemon.config.filter_check_interval;
        // Without checks the timer is never polled; its period only has to be valid.
        let mut filters =
            tokio::time::interval(filter_check_interval.unwrap_or(Duration::from_secs(3600)));
        filters.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let sweep_at = daemon.sweep_at;
            let sweep_due = async move {
                match sweep_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let hold_until = daemon.gateways.hold_until();
            let hold_ends = async move {
                match hold_until {
                    Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                    None => std::future::pending().await,
                }
            };
            let sb_wake_at = daemon.sb_sync.wake_at();
            let sb_wake = async move {
                match sb_wake_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut shutdown => break,
                () = sb_wake => {
                    daemon.sb_sync.wake(tokio::time::Instant::now());
                    daemon.sync_southbound().await;
                }
                () = sweep_due => daemon.sweep_datapath(),
                _ = retry.tick() => daemon.retry_tick().await,
                _ = neighbours.tick() => {
                    daemon.refresh_tunnel_neighbours(false);
                    daemon.sweep_connections();
                }
                _ = filters.tick(), if filter_check_interval.is_some() => daemon.check_pod_filters(),
                command = commands.recv(), if commands_open => match command {
                    Some(command) => {
                        // A port bound, plugged or unplugged may start or stop a backend's
                        // probing; reports and status queries change nothing.
                        let ports_change = matches!(
                            command,
                            PortCommand::Bind { .. }
                                | PortCommand::Plug { .. }
                                | PortCommand::Unplug { .. }
                        );
                        daemon.command(command).await;
                        if ports_change {
                            daemon.reconcile_service_monitors(daemon.chassis_uuid);
                            daemon.reconcile_periodic_adverts();
                        }
                    }
                    None => commands_open = false,
                },
                event = events.recv() => match event {
                    Some(event) => daemon.handle(event).await,
                    None => break,
                },
                Some(heard) = heard_neighbours.recv() => daemon.heard_neighbour(&heard).await,
                () = bfd_changed(&mut daemon.bfd) => daemon.tunnels_changed().await,
                () = hold_ends => daemon.gateway_hold_ended().await,
                Some(decided) = daemon.service_monitors.next_decision() => {
                    if daemon.service_monitors.decided(decided) {
                        daemon.sb_sync.mark_monitor(decided.monitor);
                        daemon.sync_southbound().await;
                    }
                }
            }
        }
        daemon.service_monitors.stop();
        daemon.periodic_adverts.stop();
        if let Some(bfd) = &daemon.bfd {
            bfd.stop();
        }
        for task in [drop_events, acl_log_events, neighbour_events]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
        let stats = daemon.stats();
        info!(?stats, "agent stopping; chassis rows kept");
        stats
    }
    .instrument(span)
    .await
}

/// Resolves when the chassis whose BFD sessions are up change (never without BFD).
async fn bfd_changed(bfd: &mut Option<crate::bfd::Bfd>) {
    let Some(bfd) = bfd else {
        return std::future::pending().await;
    };
    if bfd.up().changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Daemon {
    /// BFD for a forwarding agent, on its Geneve endpoint; none (logged) where the port cannot
    /// be bound (a gateway group of several chassis then has no active gateway here).
    fn start_bfd(&self) -> Option<crate::bfd::Bfd> {
        self.datapath.as_ref()?;
        let local: std::net::IpAddr = self.config.chassis.encap_ip.parse().ok()?;
        match crate::bfd::Bfd::start(local) {
            Ok(bfd) => Some(bfd),
            Err(error) => {
                warn!(%error, "BFD not started: gateway groups of several chassis get no active gateway here");
                None
            }
        }
    }

    /// Gives the BFD task the chassis this one shares gateway groups with (starting it again if
    /// its port could not be bound before: a predecessor still held it).
    fn update_bfd_peers(&mut self, chassis: Option<uuid::Uuid>) {
        if self.bfd.is_none() {
            self.bfd = self.start_bfd();
        }
        let (Some(bfd), Some(chassis)) = (&self.bfd, chassis) else {
            return;
        };
        let ipv6 = self
            .config
            .chassis
            .encap_ip
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_ipv6());
        bfd.set_peers(gateway::bfd_peers(
            &self.sb,
            chassis,
            &self.config.chassis.name,
            ipv6,
        ));
    }

    /// The chassis whose BFD sessions are up changed: the gateways are elected again.
    async fn tunnels_changed(&mut self) {
        let Some(bfd) = self.bfd.as_mut() else {
            return;
        };
        let up = bfd.up().borrow_and_update().clone();
        for port in self
            .gateways
            .tunnels_changed(&self.sb, self.chassis_uuid, up)
        {
            self.sb_sync.mark(&port);
        }
        self.sync_southbound().await;
    }

    /// The restart's hold on the gateway ports this chassis holds ended: elected by BFD alone.
    async fn gateway_hold_ended(&mut self) {
        for port in self.gateways.end_hold(&self.sb, self.chassis_uuid) {
            self.sb_sync.mark(&port);
        }
        self.sync_southbound().await;
    }

    /// A daemon that has seen nothing of the Southbound yet.
    fn new(
        config: DaemonConfig,
        handle: SessionHandle,
        scope: LocalScope,
        datapath: Option<Box<dyn Datapath>>,
    ) -> Self {
        let local_ports = config
            .local_ports
            .iter()
            .chain(&config.restored_ports)
            .cloned()
            .collect();
        let adopted = datapath
            .as_deref()
            .is_some_and(|datapath| datapath.adopted());
        let enforcement = match datapath.as_deref() {
            Some(datapath) if datapath.enforces_acls() && datapath.acls_fail_open() => {
                acls::Enforcement::FailOpen
            }
            Some(datapath) if datapath.enforces_acls() => acls::Enforcement::FailClosed,
            _ => acls::Enforcement::None,
        };
        Daemon {
            config,
            sb: Southbound::new(),
            compiler: Compiler::new(),
            handle,
            scope,
            local_ports,
            gateways: gateway::GatewayElection::holding_until(
                std::time::Instant::now() + gateway::HOLD_AFTER_START,
            ),
            pending: Pending::default(),
            synced: false,
            connected: false,
            sb_sync: sb_sync::SbSync::default(),
            conditions_pending: HashSet::new(),
            chassis_uuid: None,
            datapath,
            encaps: HashMap::new(),
            sweep_at: None,
            neighbour_refresh: None,
            filter_check: None,
            filters_restored: Arc::default(),
            connection_sweep: None,
            connections_swept: Arc::default(),
            connection_table: Arc::default(),
            unenforced_acls: acls::UnenforcedAcls::new(enforcement),
            side_duties: side_duties::SideDuties::default(),
            node_network: None,
            service_monitors: crate::service_monitor::ServiceMonitors::default(),
            periodic_adverts: crate::router_advert::periodic::PeriodicAdverts::default(),
            bfd: None,
            held: adopted.then(Vec::new),
            stats: DaemonStats::default(),
        }
    }

    async fn handle(&mut self, event: SessionEvent) {
        match &event {
            SessionEvent::Transacted { id, result } => {
                self.sb_sync.finished(&self.sb, *id, result.clone());
                self.sync_southbound().await;
                self.poll_pending();
                return;
            }
            SessionEvent::ConditionChanged { id } => {
                self.conditions_pending.remove(id);
                if self.release_held() {
                    self.sync_southbound().await;
                }
                self.acknowledge_nb_cfg().await;
                return;
            }
            _ => {}
        }
        self.stats.events += 1;
        let started = std::time::Instant::now();
        let snapshot = matches!(event, SessionEvent::Snapshot { .. });
        if snapshot {
            self.synced = true;
            self.connected = true;
            if self.datapath.is_some() {
                self.sweep_at = Some(tokio::time::Instant::now() + SWEEP_DELAY);
            }
        }
        let changes = self.sb.apply(&event);
        self.record(&event, &changes);
        let disconnected = matches!(event, SessionEvent::Disconnected { .. });
        // The update's JSON is in the replica now: gone before the compile, whose own peak
        // would come on top of it (the snapshot's tree was ~100 MiB at 10,000 ports).
        drop(event);
        let applied = started.elapsed();
        let compiled = self.compiler.compile(&self.sb, &changes);
        let compile_done = started.elapsed();
        self.stats.bad_addresses = self.compiler.bad_addresses();
        // A first view's diff is the compiler's IR itself, read in place: the compiler is set
        // aside while the diff's readers below (which never read it) borrow its entries.
        let compiler = std::mem::take(&mut self.compiler);
        let diff = compiler.view(compiled.as_ref());
        self.stats.ir_changes += diff.len() as u64;
        let sb = &self.sb;
        let datapath_name = |key| {
            sb.datapath_by_key(key)
                .and_then(|datapath| datapath.external_ids.get("name").cloned())
                .unwrap_or_else(|| format!("datapath {key}"))
        };
        self.unenforced_acls.apply(&diff, datapath_name);
        self.side_duties.apply(&diff, datapath_name);
        self.publish_node_network(&changes);
        let datapath_writes = self.program_datapath(&diff);
        if !diff.is_empty() {
            debug!(
                added = diff.added.len(),
                removed = diff.removed.len(),
                applied_us = applied.as_micros(),
                compiled_us = (compile_done - applied).as_micros(),
                written_us = (started.elapsed() - compile_done).as_micros(),
                "pipeline IR changed"
            );
        }
        drop(diff);
        self.compiler = compiler;
        if snapshot {
            drop(compiled);
            crate::allocator::release_freed_memory();
        }
        if disconnected {
            // Writes in flight end with the session's Transacted events (retried from there).
            self.connected = false;
            self.stats.disconnects += 1;
            return;
        }
        let chassis = self
            .sb
            .chassis_by_name(&self.config.chassis.name)
            .map(|c| c.uuid);
        self.sb_sync
            .observe(&self.sb, &changes, &self.local_ports, chassis);
        for port in self.gateways.observe(&self.sb, &changes, chassis) {
            self.sb_sync.mark(&port);
        }
        if gateway::groups_changed(&changes) {
            self.update_bfd_peers(chassis);
        }
        if chassis != self.chassis_uuid || datapath_writes > 0 {
            // A new Chassis row changes every claim; a datapath write may change any local
            // port's `up` (compared: the node's own ports, not the Southbound's).
            self.chassis_uuid = chassis;
            self.mark_local_ports();
        }
        if let Some(chassis) = chassis
            && self.scope_may_change(&changes, chassis)
        {
            self.update_scope(chassis);
        }
        self.follow_service_monitors(&changes, chassis);
        if changes.resynced || self.advertising_ports_may_change(&changes) {
            self.reconcile_periodic_adverts();
        }
        self.release_held();
        self.sync_southbound().await;
        self.poll_pending();
    }

    /// A restarted agent's datapath forwards with its predecessor's complete state. This
    /// agent's own view arrives in steps: the snapshot has its ports before the flows of their
    /// switches, which come once the monitor conditions name them. Written step by step, that
    /// view would overwrite the complete state with partial ones (a switch's ACL stage without
    /// its users' rules: their to-lport policies skipped, open, for tens of milliseconds). So
    /// the diffs are held until the view is complete (synced, no monitor condition waiting for
    /// its rows), then written together; the sweep, later, releases them in any case. Returns
    /// whether it wrote them.
    fn release_held(&mut self) -> bool {
        if self.held.is_none() || !self.synced || !self.conditions_pending.is_empty() {
            return false;
        }
        let diffs = self.held.take().unwrap_or_default();
        let entries: usize = diffs.iter().map(crate::pipeline::IrDiff::len).sum();
        let writes = self.write_held(&diffs);
        info!(
            diffs = diffs.len(),
            entries, writes, "the Southbound view is complete: datapath written"
        );
        self.mark_local_ports();
        true
    }

    /// Starts or stops probing load balancer backends when `changes` touched the
    /// Service_Monitor rows, or a local port (bound, up, gone), or this chassis.
    fn follow_service_monitors(&mut self, changes: &ChangeSet, chassis: Option<uuid::Uuid>) {
        use crate::sb::rows::{PortBinding, ServiceMonitor};
        let monitors_changed = changes
            .table(ServiceMonitor::TABLE)
            .is_some_and(|t| !t.is_empty());
        let local_port_changed = changes.table(PortBinding::TABLE).is_some_and(|table| {
            let local = |uuid: &uuid::Uuid| {
                self.sb
                    .row::<PortBinding>(uuid)
                    .is_some_and(|port| self.local_ports.contains(&port.logical_port))
            };
            table.inserted.iter().any(local)
                || table.modified.iter().any(|(uuid, _)| local(uuid))
                || !table.deleted.is_empty()
        });
        if changes.resynced || monitors_changed || local_port_changed {
            self.reconcile_service_monitors(chassis);
        }
    }

    /// Brings the probing of load balancer backends in line with the Southbound and the ports
    /// plugged here.
    fn reconcile_service_monitors(&mut self, chassis: Option<uuid::Uuid>) {
        let datapath = self.datapath.as_deref();
        let interface_of = |port: &str| datapath.and_then(|datapath| datapath.interface_of(port));
        self.service_monitors
            .reconcile(&self.sb, chassis, &interface_of);
    }

    /// Whether `changes` may change where periodic router advertisements go: a local port or a
    /// patch port written, or any port gone (its type is gone with it).
    fn advertising_ports_may_change(&self, changes: &ChangeSet) -> bool {
        use crate::sb::rows::PortBinding;
        changes.table(PortBinding::TABLE).is_some_and(|table| {
            let relevant = |uuid: &uuid::Uuid| {
                self.sb.row::<PortBinding>(uuid).is_some_and(|port| {
                    port.kind == "patch" || self.local_ports.contains(&port.logical_port)
                })
            };
            table.inserted.iter().any(relevant)
                || table.modified.iter().any(|(uuid, _)| relevant(uuid))
                || !table.deleted.is_empty()
        })
    }

    /// Brings the periodic router advertisements in line with the Southbound and the ports
    /// plugged here.
    fn reconcile_periodic_adverts(&mut self) {
        let datapath = self.datapath.as_deref();
        let interface_of = |port: &str| datapath.and_then(|datapath| datapath.interface_of(port));
        self.periodic_adverts
            .reconcile(&self.sb, &self.local_ports, &interface_of);
    }

    /// The retry timer: failed datapath writes are retried; when that succeeds the local ports'
    /// `up` is compared (the retried writes may have programmed them), and `nb_cfg` is
    /// acknowledged if nothing else holds it.
    async fn retry_tick(&mut self) {
        if self.retry_datapath() {
            self.mark_local_ports();
            self.sync_southbound().await;
        } else {
            self.acknowledge_nb_cfg().await;
        }
    }

    /// Compares every local port at the next [`Self::sync_southbound`].
    fn mark_local_ports(&mut self) {
        for port in &self.local_ports {
            self.sb_sync.mark(port);
        }
    }

    /// Compares this chassis's rows with what the agent wants and writes those that differ (see
    /// [`sb_sync`]), then acknowledges `nb_cfg` if everything it covers is done.
    async fn sync_southbound(&mut self) {
        let chassis = self
            .sb
            .chassis_by_name(&self.config.chassis.name)
            .map(|c| c.uuid);
        let datapath = self.datapath.as_ref();
        let sb = &self.sb;
        let holding = self.held.is_some();
        // While the datapath's writes are held, ports keep the `up` they have (their
        // predecessor's state forwards for them).
        let programmed = |port: &str| {
            if holding {
                return sb.port_by_name(port).and_then(|port| port.up) == Some(true);
            }
            datapath.is_some_and(|datapath| datapath.programmed(port))
        };
        let monitors = &self.service_monitors;
        let monitor_status = |monitor: &uuid::Uuid| monitors.wanted(monitor).map(|s| s.as_str());
        let wanted = chassis.map(|chassis| sb_sync::Wanted {
            config: &self.config.chassis,
            chassis,
            local_ports: &self.local_ports,
            gateways: self.gateways.active(),
            programmed: &programmed,
            monitor_status: &monitor_status,
            now_ms: now_ms(),
        });
        if self.synced {
            self.sb_sync.reconcile(
                &self.sb,
                &self.handle,
                &self.config.chassis,
                wanted.as_ref(),
            );
        }
        self.acknowledge_nb_cfg().await;
    }

    /// The loop's counters with the Southbound writes'.
    /// Publishes what the Southbound asks of the node's network, when `changes` touched the
    /// ports or datapaths it is computed from (and the value changed).
    fn publish_node_network(&self, changes: &ChangeSet) {
        let (Some(config), Some(sender)) = (&self.config.node_network, &self.node_network) else {
            return;
        };
        let relevant = changes.resynced
            || [
                crate::sb::rows::PortBinding::TABLE,
                crate::sb::rows::DatapathBinding::TABLE,
            ]
            .iter()
            .any(|table| changes.table(table).is_some_and(|t| !t.is_empty()));
        if !relevant {
            return;
        }
        let wanted = node_network::wanted(&self.sb, config);
        sender.send_if_modified(|current| {
            let changed = *current != wanted;
            if changed {
                *current = wanted;
            }
            changed
        });
    }

    fn stats(&self) -> DaemonStats {
        let southbound = self.sb_sync.stats().clone();
        DaemonStats {
            transactions: southbound.transactions.values().sum(),
            failed_transactions: southbound.failures,
            southbound,
            gateway_ports: self.gateways.roles(),
            ..self.stats.clone()
        }
    }

    fn record(&mut self, event: &SessionEvent, changes: &ChangeSet) {
        let rows: usize = changes.tables.values().map(|t| t.len()).sum();
        self.stats.rows_changed += rows as u64;
        self.stats.rejected_rows += changes.rejected.len() as u64;
        for reason in &changes.rejected {
            warn!(%reason, "rejected a malformed Southbound row");
        }
        match event {
            SessionEvent::Snapshot {
                remote,
                method,
                resumed,
                ..
            } => {
                info!(%remote, ?method, resumed, rows, "southbound snapshot applied");
            }
            SessionEvent::Disconnected { remote, reason } => {
                warn!(%remote, %reason, "southbound connection lost")
            }
            SessionEvent::Update { .. }
            | SessionEvent::Transacted { .. }
            | SessionEvent::ConditionChanged { .. } => {}
        }
    }

    /// Tells northd (through Chassis_Private.nb_cfg) that this chassis has processed the SB as of
    /// SB_Global.nb_cfg: the replica, the pipeline IR and the datapath are current. It waits
    /// while datapath writes wait for a retry (`ovn-nbctl --wait=hv` must not return before the
    /// datapath forwards as asked; the retry acknowledges), and while a monitor condition change
    /// has not brought its rows yet (like ovn-controller, which waits for the condition's
    /// sequence number), and while a claim or release of this chassis is in flight (the
    /// pipeline follows each port's `chassis`: the claim's update must be compiled first).
    async fn acknowledge_nb_cfg(&mut self) {
        if self
            .datapath
            .as_ref()
            .is_some_and(|datapath| datapath.pending() > 0)
        {
            debug!("nb_cfg not acknowledged: datapath writes wait for a retry");
            return;
        }
        if !self.conditions_pending.is_empty() {
            debug!(
                pending = self.conditions_pending.len(),
                "nb_cfg not acknowledged: monitor condition changes in flight"
            );
            return;
        }
        if self.sb_sync.ports_busy() {
            debug!("nb_cfg not acknowledged: a Port_Binding write is in flight");
            return;
        }
        self.sb_sync
            .acknowledge(&self.sb, &self.handle, &self.config.chassis, now_ms());
    }

    /// A router heard of a neighbour it does not know: learned (its MAC_Binding written) when
    /// OVN's router would learn it ([`mac_learning`]).
    async fn heard_neighbour(&mut self, heard: &crate::dataplane::HeardNeighbour) {
        self.stats.neighbours_heard += 1;
        match mac_learning::learned(&self.sb, heard) {
            Ok(learned) => {
                debug!(port = %learned.port, ip = %learned.ip, mac = %learned.mac, "router heard a neighbour");
                self.sb_sync.learn(learned);
                self.sync_southbound().await;
            }
            Err(reason) => {
                debug!(router = heard.router, ip = %heard.ip, reason = reason.as_str(), "heard neighbour not learned");
                *self
                    .stats
                    .neighbours_not_learned
                    .entry(reason.as_str())
                    .or_default() += 1;
            }
        }
    }
}

/// Now, in ms since the epoch (Southbound timestamps).
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How the daemon connects to the Southbound: its probe interval and TLS settings.
fn connection_options(config: &DaemonConfig) -> ConnectionOptions {
    ConnectionOptions {
        probe_interval: config.probe_interval,
        tls: config.tls.clone(),
        ..ConnectionOptions::default()
    }
}

/// Removes this chassis's rows (`ovnbpf-agent run --cleanup`): waits for the first snapshot, then
/// deletes Chassis and Chassis_Private. Fails after `timeout`.
pub async fn cleanup(
    config: &DaemonConfig,
    timeout: Duration,
) -> Result<(), crate::ovsdb::OvsdbError> {
    let tables = monitor::monitored_tables(true, &config.chassis.name, &LocalScope::default());
    let mut session_config = SessionConfig::new(config.sb_remotes.clone(), DATABASE, tables);
    session_config.connection = connection_options(config);
    let (handle, mut events) = session::start(session_config);
    let wait = async {
        while let Some(event) = events.recv().await {
            if matches!(event, SessionEvent::Snapshot { .. }) {
                return handle
                    .transact(config.chassis.cleanup_ops())
                    .await
                    .map(drop);
            }
        }
        Err(crate::ovsdb::OvsdbError::SessionEnded)
    };
    tokio::time::timeout(timeout, wait)
        .await
        .unwrap_or_else(|_| {
            Err(crate::ovsdb::OvsdbError::Disconnected(
                "timed out waiting for the Southbound DB".into(),
            ))
        })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod port_facts_tests;
