//! The agent's main loop: follow the Southbound DB through a monitoring session, keep the typed
//! replica and the pipeline IR current, register this chassis, claim its ports (configured, or
//! plugged by the CNI server through [`ports`] commands), narrow the monitor to the local
//! datapaths (unless monitor-all), program the eBPF datapath from the IR (retrying failed writes,
//! sweeping what a previous agent left once the view settles), report ports `up`, and
//! acknowledge `nb_cfg` once each change set has been processed. Owns the session, the replica,
//! the compiler and the datapath; writes only this chassis's rows.

use std::{
    collections::{HashMap, HashSet},
    net::Ipv4Addr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::Value;
use tracing::{Instrument, debug, info, info_span, warn};

mod acls;
pub mod ports;
mod side_duties;

use ports::{Pending, PortCommand, PortCommands, PortError, PortStatus};

use crate::{
    chassis::{self, ChassisConfig},
    dataplane::ebpf::{
        node::{self, NodeDatapath},
        pod_filter,
    },
    ovsdb::{
        connection::ConnectionOptions,
        remote::Remote,
        replica::{ChangeSet, RowRef},
        session::{self, SessionConfig, SessionEvent, SessionHandle},
        tls::TlsClient,
    },
    pipeline::Compiler,
    sb::{
        DATABASE, Southbound,
        monitor::{self, LocalScope},
        rows::{self, Chassis, DatapathBinding, Encap, PortBinding},
    },
};

/// Everything the daemon needs to know.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub sb_remotes: Vec<Remote>,
    /// TLS settings for `ssl:` remotes.
    pub tls: Option<Arc<TlsClient>>,
    pub chassis: ChassisConfig,
    /// Logical ports bound to this node by configuration (ports the CNI will add come later).
    pub local_ports: Vec<String>,
    /// Ports the CNI server attached before a restart (released again by CNI DEL).
    pub restored_ports: Vec<String>,
    pub probe_interval: Option<Duration>,
    /// How often every plugged pod's veth is checked for `from_pod` (re-attached when something
    /// removed its filter); `None`: never.
    pub filter_check_interval: Option<Duration>,
}

/// Counters of what the loop did, for logs, metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DaemonStats {
    pub events: u64,
    pub rows_changed: u64,
    pub rejected_rows: u64,
    pub transactions: u64,
    pub failed_transactions: u64,
    /// IR entries added and removed by the compiler over the daemon's life.
    pub ir_changes: u64,
    /// Kernel map writes, and failed attempts (retried with the next change).
    pub datapath_writes: u64,
    pub datapath_errors: u64,
    /// Southbound connections lost (the session reconnects by itself).
    pub disconnects: u64,
}

struct Daemon {
    config: DaemonConfig,
    sb: Southbound,
    compiler: Compiler,
    handle: SessionHandle,
    scope: LocalScope,
    /// Ports bound here: the configured ones and those the CNI server plugged.
    local_ports: HashSet<String>,
    /// Replies to port commands waiting for the Southbound.
    pending: Pending,
    /// Whether a Southbound snapshot has been applied.
    synced: bool,
    /// Whether the Southbound session is up (a snapshot came since the last disconnection).
    connected: bool,
    /// Last submitted write per purpose, with when, so a write is not repeated while its effect
    /// has not arrived in the replica yet.
    in_flight: Vec<(Vec<Value>, Instant)>,
    /// Outcomes of submitted writes (what, the write's key, the result): writes never block the
    /// loop, so one slow commit does not hold up every other port.
    writes_done: tokio::sync::mpsc::UnboundedSender<(String, Vec<Value>, Result<(), String>)>,
    /// The kernel datapath, when this agent forwards (not only follows the SB).
    datapath: Option<NodeDatapath>,
    /// Other chassis's encap IPs as last given to the datapath.
    encaps: HashMap<String, Ipv4Addr>,
    /// When to remove the datapath entries nobody asked for (set by a snapshot, pushed back while
    /// the monitored scope still grows).
    sweep_at: Option<tokio::time::Instant>,
    /// The running refresh of tunnel next hops, if any.
    neighbour_refresh: Option<tokio::task::JoinHandle<()>>,
    /// The running check of the pods' filters, if any, and how many it re-attached so far.
    filter_check: Option<tokio::task::JoinHandle<()>>,
    filters_restored: Arc<AtomicU64>,
    /// The users' ACLs the datapath does not enforce, per switch.
    unenforced_acls: acls::UnenforcedAcls,
    /// The side duties (e.g. MAC learning) the datapath leaves undone, per datapath.
    side_duties: side_duties::SideDuties,
    stats: DaemonStats,
}

/// A datapath reading for the metrics: empty without a datapath, or when it fails (logged).
fn reading<T>(
    result: Option<Result<Vec<T>, crate::dataplane::ebpf::EbpfError>>,
    counters: &str,
) -> Vec<T> {
    match result {
        Some(Ok(values)) => values,
        Some(Err(error)) => {
            debug!(counters, %error, "cannot read the datapath's counters");
            Vec::new()
        }
        None => Vec::new(),
    }
}

/// Drop events logged per second at most (all are counted in the kernel's drop counters).
const DROP_LOGS_PER_SECOND: u32 = 10;

/// How long a submitted write suppresses an identical one.
const WRITE_SETTLE: Duration = Duration::from_secs(5);

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

/// Runs until `shutdown` resolves (the chassis rows stay, so a restart is hitless). With a
/// `datapath`, the IR and the chassis's encap IPs are programmed into it as they change.
pub async fn run(
    config: DaemonConfig,
    mut datapath: Option<NodeDatapath>,
    mut commands: PortCommands,
    shutdown: impl std::future::Future<Output = ()>,
) -> DaemonStats {
    let span = info_span!("agent", chassis = %config.chassis.name);
    async move {
        let drop_events = datapath
            .as_mut()
            .and_then(NodeDatapath::take_drop_events)
            .map(|events| tokio::spawn(events.follow(DROP_LOGS_PER_SECOND).in_current_span()));
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
        session_config.connection = connection_options(&config);
        let (handle, mut events) = session::start(session_config);
        let (writes_done, mut write_outcomes) = tokio::sync::mpsc::unbounded_channel();
        let local_ports = config
            .local_ports
            .iter()
            .chain(&config.restored_ports)
            .cloned()
            .collect();
        let mut daemon = Daemon {
            config,
            sb: Southbound::new(),
            compiler: Compiler::new(),
            handle,
            scope,
            local_ports,
            pending: Pending::default(),
            synced: false,
            connected: false,
            in_flight: Vec::new(),
            writes_done,
            datapath,
            encaps: HashMap::new(),
            sweep_at: None,
            neighbour_refresh: None,
            filter_check: None,
            filters_restored: Arc::default(),
            unenforced_acls: acls::UnenforcedAcls::default(),
            side_duties: side_duties::SideDuties::default(),
            stats: DaemonStats::default(),
        };
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
            tokio::select! {
                () = &mut shutdown => break,
                () = sweep_due => daemon.sweep_datapath(),
                _ = retry.tick() => {
                    daemon.retry_datapath();
                    daemon.acknowledge_nb_cfg().await;
                }
                _ = neighbours.tick() => daemon.refresh_tunnel_neighbours(false),
                _ = filters.tick(), if filter_check_interval.is_some() => daemon.check_pod_filters(),
                Some((what, key, outcome)) = write_outcomes.recv() => daemon.write_finished(&what, &key, outcome),
                command = commands.recv(), if commands_open => match command {
                    Some(command) => daemon.command(command).await,
                    None => commands_open = false,
                },
                event = events.recv() => match event {
                    Some(event) => daemon.handle(&event).await,
                    None => break,
                },
            }
        }
        if let Some(task) = drop_events {
            task.abort();
        }
        info!(stats = ?daemon.stats, "agent stopping; chassis rows kept");
        daemon.stats
    }
    .instrument(span)
    .await
}

/// Every chassis's Geneve encap IP (IPv4) by chassis name.
fn chassis_encaps(sb: &Southbound) -> HashMap<String, Ipv4Addr> {
    sb.rows::<Encap>()
        .filter(|encap| encap.kind == "geneve")
        .filter_map(|encap| Some((encap.chassis_name.clone(), encap.ip.parse().ok()?)))
        .collect()
}

impl Daemon {
    async fn handle(&mut self, event: &SessionEvent) {
        self.stats.events += 1;
        if matches!(event, SessionEvent::Snapshot { .. }) {
            self.synced = true;
            self.connected = true;
            if self.datapath.is_some() {
                self.sweep_at = Some(tokio::time::Instant::now() + SWEEP_DELAY);
            }
        }
        let changes = self.sb.apply(event);
        self.record(event, &changes);
        let diff = self.compiler.apply(&self.sb, &changes);
        self.stats.ir_changes += diff.len() as u64;
        let sb = &self.sb;
        let datapath_name = |key| {
            sb.datapath_by_key(key)
                .and_then(|datapath| datapath.external_ids.get("name").cloned())
                .unwrap_or_else(|| format!("datapath {key}"))
        };
        self.unenforced_acls.apply(&diff, datapath_name);
        self.side_duties.apply(&diff, datapath_name);
        let datapath_writes = self.program_datapath(&changes, &diff);
        if !diff.is_empty() {
            debug!(
                added = diff.added.len(),
                removed = diff.removed.len(),
                "pipeline IR changed"
            );
        }
        if matches!(event, SessionEvent::Disconnected { .. }) {
            self.connected = false;
            self.stats.disconnects += 1;
            self.in_flight.clear();
            return;
        }
        let registration = self.config.chassis.registration_ops(&self.sb);
        self.write("register chassis", registration);
        let Some(chassis) = self.sb.chassis_by_name(&self.config.chassis.name) else {
            return;
        };
        self.claim_local_ports(chassis.uuid).await;
        // `up` can only change when the datapath was written or a Port_Binding changed.
        if datapath_writes > 0
            || changes.resynced
            || changes
                .tables
                .get(PortBinding::TABLE)
                .is_some_and(|c| !c.is_empty())
        {
            self.report_ports_up(chassis.uuid).await;
        }
        if self.scope_may_change(&changes, chassis.uuid) {
            self.update_scope(chassis.uuid);
        }
        self.acknowledge_nb_cfg().await;
        self.poll_pending();
    }

    /// Answers the port commands the replica can now answer.
    fn poll_pending(&mut self) {
        let chassis = self
            .sb
            .chassis_by_name(&self.config.chassis.name)
            .map(|c| c.uuid);
        self.pending.poll(&self.sb, |binding| {
            chassis.is_some() && binding.chassis == chassis && binding.up != Some(false)
        });
    }

    /// Recomputes the monitored scope now (after the local ports changed).
    fn refresh_scope(&mut self) {
        if let Some(chassis) = self.sb.chassis_by_name(&self.config.chassis.name) {
            self.update_scope(chassis.uuid);
        }
    }

    /// Applies one request of the CNI server.
    async fn command(&mut self, command: PortCommand) {
        // An explicit change may repeat an earlier write on purpose (claim, release, claim
        // again within seconds): nothing in flight suppresses it.
        if !matches!(
            command,
            PortCommand::Status { .. } | PortCommand::Facts { .. } | PortCommand::Report { .. }
        ) {
            self.in_flight.clear();
        }
        let chassis = self
            .sb
            .chassis_by_name(&self.config.chassis.name)
            .map(|c| c.uuid);
        match command {
            PortCommand::Bind { port, reply } => {
                info!(port, "binding port");
                self.local_ports.insert(port.clone());
                self.refresh_scope();
                if let Some(chassis) = chassis {
                    self.claim_local_ports(chassis).await;
                }
                self.pending.wait_for_facts(port, reply);
            }
            PortCommand::Plug {
                port,
                interface,
                filter,
                reply,
            } => {
                let Some(datapath) = self.datapath.as_mut() else {
                    let _ = reply.send(Err(PortError::Rejected(
                        "this agent does not forward (started without --uplink)".into(),
                    )));
                    return;
                };
                match datapath.plug(&port, &interface, filter) {
                    Ok(writes) => self.stats.datapath_writes += writes as u64,
                    Err(error) => {
                        self.stats.datapath_errors += 1;
                        let _ = reply.send(Err(PortError::Rejected(format!(
                            "plugging {port} into {interface}: {error}"
                        ))));
                        return;
                    }
                }
                self.local_ports.insert(port.clone());
                if let Some(chassis) = chassis {
                    self.claim_local_ports(chassis).await;
                    self.report_ports_up(chassis).await;
                }
                self.pending.wait_for_up(port, reply);
            }
            PortCommand::Unplug {
                port,
                interface,
                reply,
            } => {
                if let Some(datapath) = self.datapath.as_mut() {
                    if datapath
                        .interface_of(&port)
                        .is_some_and(|current| current != interface)
                    {
                        // A stale DEL: the port lives on in another sandbox's NIC.
                        info!(port, interface, "unplug of a replaced interface ignored");
                        let _ = reply.send(Ok(()));
                        return;
                    }
                    match datapath.unplug(&port) {
                        Ok(writes) => self.stats.datapath_writes += writes as u64,
                        Err(error) => {
                            self.stats.datapath_errors += 1;
                            warn!(port, %error, "removing the port's map entries failed");
                        }
                    }
                }
                if !self.config.local_ports.contains(&port) {
                    self.local_ports.remove(&port);
                }
                if let (Some(chassis), Some(binding)) = (chassis, self.sb.port_by_name(&port)) {
                    // Our claim may still be on its way: release on the server's view.
                    let ops = chassis::release_ops_if_ours(&binding, chassis);
                    self.write("release port", ops);
                }
                self.refresh_scope();
                let _ = reply.send(Ok(()));
            }
            PortCommand::Facts { port, reply } => {
                let facts = match ports::port_facts(&self.sb, &port) {
                    Ok(Some(facts)) => Ok(facts),
                    Ok(None) => Err(PortError::Rejected(format!(
                        "{port} or its switch's router port is not known here"
                    ))),
                    Err(reason) => Err(PortError::Unservable(reason)),
                };
                let _ = reply.send(facts);
            }
            PortCommand::Report { reply } => {
                let datapath = self.datapath.as_ref();
                let drops = reading(datapath.map(NodeDatapath::drop_counters), "drop");
                let router_replies =
                    reading(datapath.map(NodeDatapath::router_replies), "router reply");
                let interfaces =
                    reading(datapath.map(NodeDatapath::interface_counters), "interface");
                let _ = reply.send(ports::DaemonReport {
                    interfaces,
                    stats: self.stats.clone(),
                    synced: self.synced,
                    connected: self.connected,
                    ready: self.synced && chassis.is_some() && self.datapath.is_some(),
                    local_ports: self.local_ports.len(),
                    pod_filters_restored: self.filters_restored.load(Ordering::Relaxed),
                    unenforced_acl_switches: self.unenforced_acls.switches(),
                    unenforced_acls: self.unenforced_acls.acls(),
                    side_duty_datapaths: self.side_duties.datapaths(),
                    drops,
                    router_replies,
                });
            }
            PortCommand::Status { port, reply } => {
                let mut status = PortStatus {
                    ready: self.synced && chassis.is_some() && self.datapath.is_some(),
                    ..PortStatus::default()
                };
                if let Some(port) = port {
                    status.programmed = self
                        .datapath
                        .as_ref()
                        .is_some_and(|datapath| datapath.programmed(&port));
                    status.up = self.sb.port_by_name(&port).is_some_and(|binding| {
                        chassis.is_some() && binding.chassis == chassis && binding.up != Some(false)
                    });
                }
                let _ = reply.send(status);
            }
        }
        self.poll_pending();
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
            SessionEvent::Update { .. } => {}
        }
    }

    /// Writes the IR diff and any encap change into the kernel datapath; failures are logged and
    /// counted, and the maps retry on the next change.
    /// Returns the number of map writes.
    fn program_datapath(&mut self, changes: &ChangeSet, diff: &crate::pipeline::IrDiff) -> usize {
        let Some(datapath) = self.datapath.as_mut() else {
            return 0;
        };
        let mut result = datapath.apply(diff);
        let encaps_touched = changes.resynced
            || [Chassis::TABLE, Encap::TABLE]
                .iter()
                .any(|t| changes.tables.get(*t).is_some_and(|c| !c.is_empty()));
        if encaps_touched {
            let encaps = chassis_encaps(&self.sb);
            if encaps != self.encaps {
                // The L2 state keeps the new encaps even when a write fails; the keys it could
                // not write stay marked and are retried with the next change.
                let encap_result = datapath.set_encaps(&encaps);
                self.encaps = encaps;
                self.refresh_tunnel_neighbours(true);
                result = match (result, encap_result) {
                    (Ok(ir_writes), Ok(encap_writes)) => Ok(ir_writes + encap_writes),
                    (Err(error), _) | (_, Err(error)) => Err(error),
                };
            }
        }
        match result {
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

    /// Keeps the other chassis's tunnel next hops resolved (see [`NEIGHBOUR_REFRESH`]).
    /// Off the loop: each request takes the kernel's rtnl lock, which pod NICs being built or
    /// deleted hold, at times through an RCU grace period.
    /// A periodic refresh is skipped while the previous one runs; a new chassis (`changed`)
    /// always starts one.
    fn refresh_tunnel_neighbours(&mut self, changed: bool) {
        if self.datapath.is_none() {
            return;
        }
        if !changed
            && self
                .neighbour_refresh
                .as_ref()
                .is_some_and(|task| !task.is_finished())
        {
            return;
        }
        let endpoints: Vec<Ipv4Addr> = self
            .encaps
            .iter()
            .filter(|(chassis, _)| **chassis != self.config.chassis.name)
            .map(|(_, ip)| *ip)
            .collect();
        if endpoints.is_empty() {
            return;
        }
        let span = tracing::Span::current();
        self.neighbour_refresh = Some(tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let failed = node::resolve_tunnel_neighbours(&endpoints);
            if failed > 0 {
                warn!(failed, "tunnel next hops could not be resolved");
            }
        }));
    }

    /// Re-attaches `from_pod` to every plugged pod veth that lost its filter (an operator's or a
    /// tool's `tc` removed it; a tcx link could not be removed that way). Off the loop, like the
    /// neighbour refresh; skipped while the previous check runs.
    fn check_pod_filters(&mut self) {
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
        let interfaces = datapath.plugged_interfaces();
        if interfaces.is_empty() {
            return;
        }
        let pod_filters = datapath.pod_filters();
        let restored = Arc::clone(&self.filters_restored);
        let span = tracing::Span::current();
        self.filter_check = Some(tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let count = pod_filter::restore_missing(&pod_filters, &interfaces);
            restored.fetch_add(count as u64, Ordering::Relaxed);
        }));
    }

    /// Retries map writes that failed, if any.
    fn retry_datapath(&mut self) {
        let Some(datapath) = self.datapath.as_mut() else {
            return;
        };
        let pending = datapath.pending();
        if pending == 0 {
            return;
        }
        match datapath.retry() {
            Ok(writes) => {
                self.stats.datapath_writes += writes as u64;
                info!(pending, writes, "failed datapath writes retried");
            }
            Err(error) => {
                self.stats.datapath_errors += 1;
                warn!(
                    pending,
                    %error,
                    "retrying datapath writes failed again; nb_cfg stays unacknowledged until they succeed"
                );
            }
        }
    }

    /// Removes what a previous agent left in the kernel maps and the Southbound no longer asks
    /// for. A failure is retried after the next snapshot.
    fn sweep_datapath(&mut self) {
        self.sweep_at = None;
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

    /// Sets `up` on claimed local ports once the datapath forwards for them (like
    /// ovn-controller once their flows are installed).
    async fn report_ports_up(&mut self, chassis: uuid::Uuid) {
        let Some(datapath) = &self.datapath else {
            return;
        };
        let mut ops = Vec::new();
        for name in &self.local_ports {
            if let Some(port) = self.sb.port_by_name(name)
                && datapath.programmed(name)
            {
                ops.extend(chassis::set_up_ops(&port, chassis, true));
            }
        }
        self.write("report ports up", ops);
    }

    /// Claims configured local ports not yet bound here.
    async fn claim_local_ports(&mut self, chassis: uuid::Uuid) {
        let mut ops = Vec::new();
        for name in &self.local_ports {
            if let Some(port) = self.sb.port_by_name(name) {
                ops.extend(chassis::claim_ops(&port, chassis));
            }
        }
        self.write("claim local ports", ops);
    }

    /// Whether `changes` can alter the local scope: a resync, a datapath change, or a
    /// Port_Binding that is (or was) a patch port or bound here. Other nodes' pods, the bulk of
    /// the updates, skip the scope computation (which walks the local ports).
    fn scope_may_change(&self, changes: &ChangeSet, chassis: uuid::Uuid) -> bool {
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
    fn update_scope(&mut self, chassis: uuid::Uuid) {
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
            if before != after
                && let Err(error) = self.handle.set_condition(table, after)
            {
                warn!(%table, %error, "could not change the monitor condition");
            }
        }
        self.scope = scope;
    }

    /// Tells northd (through Chassis_Private.nb_cfg) that this chassis has processed the SB as of
    /// SB_Global.nb_cfg: the replica, the claims, the pipeline IR and the kernel maps are current.
    /// While map writes wait for a retry, the acknowledgement waits too (`ovn-nbctl --wait=hv`
    /// must not return before the datapath forwards as asked); the retry acknowledges.
    async fn acknowledge_nb_cfg(&mut self) {
        if self
            .datapath
            .as_ref()
            .is_some_and(|datapath| datapath.pending() > 0)
        {
            debug!("nb_cfg not acknowledged: datapath writes wait for a retry");
            return;
        }
        let (Some(global), Some(private)) = (
            self.sb.sb_global(),
            self.sb.chassis_private_by_name(&self.config.chassis.name),
        ) else {
            return;
        };
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let ops = chassis::nb_cfg_ops(&private, global.nb_cfg, now_ms);
        self.write("acknowledge nb_cfg", ops);
    }

    /// Submits `ops` (in call order, without waiting) unless empty or identical to a write still
    /// settling; the outcome comes back through [`Self::write_finished`].
    fn write(&mut self, what: &str, ops: Vec<Value>) {
        if ops.is_empty() {
            return;
        }
        self.in_flight.retain(|(_, at)| at.elapsed() < WRITE_SETTLE);
        // Timestamps differ between otherwise identical nb_cfg writes; compare without them.
        let key = strip_timestamps(&ops);
        if self
            .in_flight
            .iter()
            .any(|(submitted, _)| *submitted == key)
        {
            return;
        }
        self.stats.transactions += 1;
        self.in_flight.push((key.clone(), Instant::now()));
        let outcome = self.handle.submit(ops);
        let done = self.writes_done.clone();
        let what = what.to_string();
        tokio::spawn(async move {
            let result = outcome.await.map(|_| ()).map_err(|e| e.to_string());
            let _ = done.send((what, key, result));
        });
    }

    /// A submitted write's outcome: a failed one no longer suppresses its retry.
    fn write_finished(&mut self, what: &str, key: &[Value], outcome: Result<(), String>) {
        match outcome {
            Ok(()) => info!(what, "southbound write committed"),
            Err(error) => {
                self.stats.failed_transactions += 1;
                self.in_flight.retain(|(submitted, _)| submitted != key);
                warn!(what, %error, "southbound write failed; will retry on the next change");
            }
        }
    }
}

fn strip_timestamps(ops: &[Value]) -> Vec<Value> {
    ops.iter()
        .map(|op| {
            let mut op = op.clone();
            if let Some(row) = op.get_mut("row").and_then(Value::as_object_mut) {
                row.remove("nb_cfg_timestamp");
            }
            op
        })
        .collect()
}

/// Removes this chassis's rows (`ovnbpf-agent run --cleanup`): waits for the first snapshot, then
/// How the daemon connects to the Southbound: its probe interval and TLS settings.
fn connection_options(config: &DaemonConfig) -> ConnectionOptions {
    ConnectionOptions {
        probe_interval: config.probe_interval,
        tls: config.tls.clone(),
        ..ConnectionOptions::default()
    }
}

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
