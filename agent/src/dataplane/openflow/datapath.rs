//! The OpenFlow backend as the daemon drives it ([`Datapath`]): the IR's forwarding
//! ([`L2Flows`], [`RouterFlows`]) programmed into br-int through one session, and the pods' host interfaces
//! added to br-int ([`OvsAttacher`]).
//!
//! The session is asynchronous and the trait is not: a thread of its own owns the
//! [`Connection`] on a current-thread runtime, and each write waits for its bundle's answer
//! (the daemon's writes block as the eBPF backend's map writes do). A write that fails is kept
//! and retried ([`Datapath::pending`], [`Datapath::retry`]); a session that failed is opened
//! again for the next write, which then carries a full resync (our cookie's flows deleted and
//! every desired flow added, in one bundle), since what the switch holds is no longer known.
//! Between writes the thread asks the switch for a barrier every [`PROBE_INTERVAL`]: a switch
//! that restarted (its flows gone) or went away is noticed then, and the resync waits as a
//! pending write for the daemon's next retry.
//!
//! Ports are added to br-int with `ovs-vsctl` (Open vSwitch's own client, as Kube-OVN's daemon
//! does through its OVSDB library): one call per pod ADD and DEL, on the CNI server's blocking
//! task or at unplug. The Geneve tunnels to other chassis are br-int ports too (one per chassis,
//! `key=flow`, added again at each retry until they are there). Routers are [`RouterFlows`];
//! what neither translates is accounted (and fenced where it must be) by [`Untranslated`].
//! The provider NICs of the bridge mappings are br-int ports too (added at start, and at each
//! retry until they are, as the configured local ports).
//! What OVN answers in userspace the [`Controller`] answers, on a session and thread of its
//! own. Not yet here (issue 19): ACLs, load balancers, NAT, drop events.

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    path::PathBuf,
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use super::{
    connection::Connection,
    controller::Controller,
    l2::{L2Flows, OVN_GENEVE_OPTION, PortUse},
    l3::RouterFlows,
    message::{FlowMod, PortCounters},
    untranslated::Untranslated,
};
use crate::{
    dataplane::{
        Datapath, DatapathError, DropFollower, DropTap, InterfaceCounters, InterfaceReading,
        NeighbourSink, OffLoopJob, PortAttacher, PortAttachment,
    },
    pipeline::ir::{IrDiffRef, IrEntry},
};

/// The bridge the backend programs.
pub const BRIDGE: &str = "br-int";

/// How long a count of the drops may take (the session may be busy with a write).
const COUNT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often an idle session checks that the switch is still there (a barrier).
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// What the session thread is asked, the answer coming back on `done`.
enum Request {
    /// Flow changes, applied in one bundle.
    Write {
        changes: Vec<FlowMod>,
        done: mpsc::Sender<Result<(), String>>,
    },
    /// The packets the flows of `cookie` matched.
    Count {
        cookie: u64,
        done: mpsc::Sender<Result<u64, String>>,
    },
    /// Every port's counts.
    Ports {
        done: mpsc::Sender<Result<Vec<PortCounters>, String>>,
    },
}

/// Where Open vSwitch is (br-int's management socket, the database's remote), and the ports to
/// forward for from the start (`--local-port`, and pods a previous agent plugged: logical
/// port, host interface).
#[derive(Clone, Debug)]
pub struct OvsConfig {
    pub management_socket: PathBuf,
    pub db_remote: String,
    pub interfaces: Vec<(String, String)>,
    /// This chassis's name (ports bound to others are reached through Geneve tunnels).
    pub chassis: String,
    /// The bridge mappings: provider network → its NIC, added to br-int at start (a switch's
    /// localnet port on that network leaves and enters by it).
    pub providers: Vec<(String, String)>,
}

/// The OpenFlow datapath of this node.
pub struct OpenFlowDatapath {
    l2: L2Flows,
    l3: RouterFlows,
    untranslated: Untranslated,
    writes: mpsc::Sender<Request>,
    /// The session had to be opened again: the next write resyncs.
    resync: bool,
    /// Changes the switch did not take yet.
    pending: Vec<FlowMod>,
    /// Logical port → its host interface.
    plugged: HashMap<String, String>,
    attacher: Arc<OvsAttacher>,
    /// Set by the session thread when an idle session was lost: the switch must be resynced.
    lost: Arc<AtomicBool>,
    chassis: String,
    /// Other chassis → (their tunnel endpoint, outer checksums), from the IR.
    wanted_tunnels: BTreeMap<String, (IpAddr, bool)>,
    /// Other chassis → (their tunnel endpoint, the tunnel port's name), on br-int.
    tunnels: BTreeMap<String, (IpAddr, String)>,
    /// br-int held flows of our cookie at the start (a previous agent's): they forward until
    /// the daemon releases this agent's complete view ([`Datapath::adopted`]).
    adopted: bool,
    /// Nothing is written until the first IR diffs come (with `adopted`, the daemon's complete
    /// view): the first write's resync then replaces the previous agent's flows at once.
    holding: bool,
    /// Provider NICs (network, NIC) and local ports (port, interface) from the configuration
    /// not on br-int yet: added again at each retry (a busy switch can take seconds to give a
    /// port its number), pending writes meanwhile.
    unattached_providers: Vec<(String, String)>,
    /// Provider network → its NIC, once on br-int.
    providers: HashMap<String, String>,
    unattached_ports: Vec<(String, String)>,
    /// The agent as br-int's controller: the answers OVN makes in userspace.
    controller: Controller,
}

impl OpenFlowDatapath {
    /// Starts the session thread for the switch at `config` (connected at the first write).
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn start(config: OvsConfig) -> Result<Self, DatapathError> {
        let adopted = match installed_flows(&config.management_socket) {
            Ok(0) => false,
            Ok(flows) => {
                tracing::info!(
                    flows,
                    "br-int holds a previous agent's flows: they forward until this agent's view \
                     is complete"
                );
                true
            }
            Err(error) => {
                tracing::info!(%error, "br-int's flows could not be counted; starting afresh");
                false
            }
        };
        let (writes, requests) = mpsc::channel::<Request>();
        let socket = config.management_socket.clone();
        let lost = Arc::new(AtomicBool::new(false));
        let session_lost = Arc::clone(&lost);
        std::thread::Builder::new()
            .name("openflow".into())
            .spawn(move || session(&socket, &requests, &session_lost))
            .map_err(DatapathError::new)?;
        let l3 = RouterFlows::default();
        let mut datapath = Self {
            l2: L2Flows::for_chassis(&config.chassis),
            untranslated: Untranslated::default(),
            chassis: config.chassis.clone(),
            wanted_tunnels: BTreeMap::new(),
            tunnels: BTreeMap::new(),
            writes,
            resync: true,
            pending: Vec::new(),
            plugged: HashMap::new(),
            attacher: Arc::new(OvsAttacher::new(config.db_remote)),
            lost,
            adopted,
            holding: adopted,
            unattached_providers: Vec::new(),
            providers: HashMap::new(),
            unattached_ports: Vec::new(),
            controller: Controller::start(config.management_socket.clone(), l3.adverts())?,
            l3,
        };
        // Written with the first write's resync.
        datapath.unattached_providers = config.providers.clone();
        datapath.unattached_ports = config.interfaces.clone();
        datapath.attach_configured();
        Ok(datapath)
    }

    /// Sends what changed (with what waits for a retry; everything after a failed session) to
    /// the switch; the number of flow changes written.
    fn flush(&mut self) -> Result<usize, DatapathError> {
        if self.holding {
            return Ok(0);
        }
        let mut changes = if self.resync {
            let mut changes = self.l2.resync();
            changes.extend(self.l3.resync());
            changes
        } else {
            std::mem::take(&mut self.pending)
        };
        changes.extend(self.l2.changes());
        changes.extend(self.l3.changes());
        if changes.is_empty() {
            return Ok(0);
        }
        let (done, answer) = mpsc::channel();
        let count = changes.len();
        let sent = self.writes.send(Request::Write {
            changes: changes.clone(),
            done,
        });
        let result = sent
            .map_err(|_| "the OpenFlow session thread is gone".to_string())
            .and_then(|()| {
                answer
                    .recv()
                    .map_err(|_| "the OpenFlow session thread is gone".to_string())?
            });
        match result {
            Ok(()) => {
                self.resync = false;
                self.pending.clear();
                Ok(count)
            }
            Err(error) => {
                // What the switch holds is not known after a failed bundle: resync next.
                self.resync = true;
                self.pending = changes;
                Err(DatapathError::new(error))
            }
        }
    }
}

/// How many flows of our cookie the switch at `socket` holds (asked on a thread of its own: the
/// daemon starts the backend inside its runtime).
fn installed_flows(socket: &std::path::Path) -> Result<usize, String> {
    let socket = socket.to_path_buf();
    std::thread::Builder::new()
        .name("openflow-count".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| error.to_string())?;
            runtime
                .block_on(async {
                    let mut connection = Connection::connect(&socket).await?;
                    connection.count_flows(super::l2::COOKIE).await
                })
                .map_err(|error| error.to_string())
        })
        .map_err(|error| error.to_string())?
        .join()
        .map_err(|_| "the thread counting br-int's flows panicked".to_string())?
}

/// The session thread: opens the session when a write comes without one, applies each write
/// in one bundle, answers it; a failed session is dropped and opened again at the next write.
/// Idle, it probes the switch every [`PROBE_INTERVAL`]; a session lost then sets `lost`.
fn session(socket: &std::path::Path, requests: &mpsc::Receiver<Request>, lost: &AtomicBool) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        tracing::error!("the OpenFlow session thread cannot build its runtime");
        return;
    };
    let mut connection: Option<Connection> = None;
    loop {
        let request = match requests.recv_timeout(PROBE_INTERVAL) {
            Ok(request) => request,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(open) = connection.as_mut()
                    && let Err(error) = runtime.block_on(open.barrier())
                {
                    tracing::warn!(%error, socket = %socket.display(), "OpenFlow session lost; the switch is resynced at the next retry");
                    connection = None;
                    lost.store(true, Ordering::Relaxed);
                }
                continue;
            }
        };
        let opened = runtime.block_on(async {
            if connection.is_none() {
                let mut opened = Connection::connect(socket).await?;
                opened.map_geneve_option(OVN_GENEVE_OPTION).await?;
                connection = Some(opened);
            }
            Ok::<_, super::OpenFlowError>(())
        });
        match request {
            Request::Write { changes, done } => {
                let result = opened.and_then(|()| match connection.as_mut() {
                    Some(open) => runtime.block_on(open.apply(&changes)),
                    None => Ok(()),
                });
                if let Err(error) = &result {
                    tracing::warn!(%error, socket = %socket.display(), "OpenFlow write failed");
                    connection = None;
                }
                let _ = done.send(result.map_err(|error| error.to_string()));
            }
            Request::Ports { done } => {
                let result = opened.and_then(|()| match connection.as_mut() {
                    Some(open) => runtime.block_on(open.port_counters()),
                    None => Ok(Vec::new()),
                });
                if let Err(error) = &result {
                    tracing::warn!(%error, socket = %socket.display(), "OpenFlow port stats failed");
                    connection = None;
                    lost.store(true, Ordering::Relaxed);
                }
                let _ = done.send(result.map_err(|error| error.to_string()));
            }
            Request::Count { cookie, done } => {
                let result = opened.and_then(|()| match connection.as_mut() {
                    Some(open) => runtime.block_on(open.count_packets(cookie)),
                    None => Ok(0),
                });
                if let Err(error) = &result {
                    // What the switch holds is not known after a lost session: resynced next.
                    tracing::warn!(%error, socket = %socket.display(), "OpenFlow count failed");
                    connection = None;
                    lost.store(true, Ordering::Relaxed);
                }
                let _ = done.send(result.map_err(|error| error.to_string()));
            }
        }
    }
}

impl OpenFlowDatapath {
    /// Follows the chassis encaps of `diff`: the Geneve tunnels wanted to other chassis, then
    /// [`Self::ensure_tunnels`].
    fn follow_tunnels(&mut self, diff: &IrDiffRef<'_>) {
        for (entry, added) in diff.in_order() {
            let IrEntry::ChassisEncap { chassis, ip, csum } = entry else {
                continue;
            };
            if *chassis == self.chassis {
                continue;
            }
            if added {
                self.wanted_tunnels.insert(chassis.clone(), (*ip, *csum));
            } else if self
                .wanted_tunnels
                .get(chassis)
                .is_some_and(|(at, _)| at == ip)
            {
                self.wanted_tunnels.remove(chassis);
            }
        }
        self.ensure_tunnels();
    }

    /// Brings br-int's Geneve ports in line with the wanted tunnels (`key=flow`: the flows set
    /// the VNI; OVN's option through the TLV map): one to each other chassis, gone with it. A
    /// port that cannot be added is tried again at the next write or retry (a pending write).
    fn ensure_tunnels(&mut self) {
        let gone: Vec<String> = self
            .tunnels
            .iter()
            .filter(|(chassis, (ip, _))| {
                self.wanted_tunnels.get(*chassis).map(|(at, _)| at) != Some(ip)
            })
            .map(|(chassis, _)| chassis.clone())
            .collect();
        for chassis in gone {
            if let Some((_, port)) = self.tunnels.remove(&chassis) {
                self.attacher.remove(&port);
                self.l2.set_tunnel(&chassis, None);
            }
        }
        let missing: Vec<(String, IpAddr, bool)> = self
            .wanted_tunnels
            .iter()
            .filter(|(chassis, _)| !self.tunnels.contains_key(*chassis))
            .map(|(chassis, (ip, csum))| (chassis.clone(), *ip, *csum))
            .collect();
        for (chassis, ip, csum) in missing {
            let port = tunnel_port_name(&chassis);
            match self.attacher.add_tunnel(&port, ip, csum) {
                Ok(ofport) => {
                    self.tunnels.insert(chassis.clone(), (ip, port));
                    self.l2.set_tunnel(&chassis, Some(ofport));
                }
                Err(error) => {
                    tracing::warn!(%error, chassis, %ip, "cannot add the tunnel port to br-int; retried");
                }
            }
        }
    }

    /// Adds the configured provider NICs and local ports that are not on br-int yet; what fails
    /// is logged and left for the next retry.
    fn attach_configured(&mut self) {
        let attacher = Arc::clone(&self.attacher);
        self.unattached_providers.retain(|(network, nic)| {
            let ofport = attacher
                .vsctl(&["--may-exist", "add-port", BRIDGE, nic])
                .and_then(|_| attacher.ofport_of(nic));
            match ofport {
                Ok(ofport) => {
                    self.l2.set_provider(network, ofport);
                    self.providers.insert(network.clone(), nic.clone());
                    false
                }
                Err(error) => {
                    tracing::warn!(%error, network, nic, "cannot add the provider NIC to br-int; retried");
                    true
                }
            }
        });
        self.unattached_ports.retain(|(port, interface)| {
            // An interface that is gone is not waited for (its pod went while no agent ran).
            let Some(ifindex) = interface_index(interface) else {
                tracing::warn!(port, interface, "no such interface: the port is not plugged");
                return false;
            };
            let attached = attacher
                .attach(ifindex)
                .and_then(|attachment| {
                    attacher.ofport(attachment.ifindex()).ok_or_else(|| {
                        DatapathError::new(format!("{interface} has no OpenFlow port"))
                    })
                });
            match attached {
                Ok(ofport) => {
                    attacher.name_port(interface, port);
                    self.plugged.insert(port.clone(), interface.clone());
                    self.l2.plug(port, ofport);
                    false
                }
                Err(error) => {
                    tracing::warn!(%error, port, interface, "cannot add the port to br-int; retried");
                    true
                }
            }
        });
    }

    /// Wanted tunnels not on br-int yet.
    fn missing_tunnels(&self) -> usize {
        self.wanted_tunnels
            .keys()
            .filter(|chassis| !self.tunnels.contains_key(*chassis))
            .count()
    }
}

/// The tunnel port to `chassis`: `ovn-` and a hash of the name (interface names hold 15 bytes).
fn tunnel_port_name(chassis: &str) -> String {
    let hash = chassis.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    format!("ovn-{hash:08x}")
}

impl Datapath for OpenFlowDatapath {
    fn kind(&self) -> &'static str {
        "openflow"
    }

    fn apply(&mut self, diff: &IrDiffRef<'_>) -> Result<usize, DatapathError> {
        self.apply_all(std::slice::from_ref(diff))
    }

    fn apply_all(&mut self, diffs: &[IrDiffRef<'_>]) -> Result<usize, DatapathError> {
        for diff in diffs {
            self.follow_tunnels(diff);
            self.untranslated.apply(diff);
            self.l2.apply(diff);
            self.l3.apply(diff);
        }
        for change in self.untranslated.take_fence_changes() {
            self.l2.set_fenced(change.datapath, change.fenced);
            self.l3.set_fenced(change.datapath, change.fenced);
            self.l2.set_ipv6_fenced(change.datapath, change.ipv6_fenced);
            self.l3.set_ipv6_fenced(change.datapath, change.ipv6_fenced);
        }
        self.holding = false;
        self.flush()
    }

    fn adopted(&self) -> bool {
        self.adopted
    }

    fn plug(
        &mut self,
        port: &str,
        interface: &str,
        attachment: PortAttachment,
    ) -> Result<usize, DatapathError> {
        let ofport = self
            .attacher
            .ofport(attachment.ifindex())
            .ok_or_else(|| DatapathError::new(format!("{interface} was not added to {BRIDGE}")))?;
        self.plugged.insert(port.to_string(), interface.to_string());
        self.attacher.name_port(interface, port);
        self.l2.plug(port, ofport);
        self.flush()
    }

    fn unplug(&mut self, port: &str) -> Result<usize, DatapathError> {
        let Some(interface) = self.plugged.remove(port) else {
            return Ok(0);
        };
        self.l2.unplug(port);
        let written = self.flush();
        self.attacher.remove(&interface);
        written
    }

    fn interface_of(&self, port: &str) -> Option<String> {
        self.plugged.get(port).cloned()
    }

    fn programmed(&self, port: &str) -> bool {
        self.plugged.contains_key(port) && !self.resync && self.pending.is_empty()
    }

    fn pending(&self) -> usize {
        self.pending.len()
            + usize::from(self.resync && !self.plugged.is_empty())
            + usize::from(self.lost.load(Ordering::Relaxed))
            + self.missing_tunnels()
            + self.unattached_providers.len()
            + self.unattached_ports.len()
    }

    fn retry(&mut self) -> Result<usize, DatapathError> {
        if self.lost.swap(false, Ordering::Relaxed) {
            self.resync = true;
        }
        self.ensure_tunnels();
        self.attach_configured();
        if self.pending.is_empty()
            && !self.resync
            && !self.l2.has_changes()
            && !self.l3.has_changes()
        {
            return Ok(0);
        }
        self.flush()
    }

    fn sweep(&mut self) -> Result<usize, DatapathError> {
        // The first write after the start resyncs: a previous agent's flows of our cookie go
        // then.
        Ok(0)
    }

    /// br-int's counted drops per reason ([`super::l2::DROP_REASONS`]: what the translation
    /// leaves out, no route, unknown destinations), as the switch counted them.
    fn drop_counters(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        let mut counters = Vec::new();
        for (reason, cookie) in super::l2::DROP_REASONS {
            let (done, answer) = mpsc::channel();
            self.writes
                .send(Request::Count { cookie, done })
                .map_err(|_| DatapathError::new("the OpenFlow session thread is gone"))?;
            let packets = answer
                .recv_timeout(COUNT_TIMEOUT)
                .map_err(|_| DatapathError::new("the OpenFlow session did not answer the count"))?
                .map_err(DatapathError::new)?;
            counters.push((reason, packets));
        }
        counters.extend(self.controller.unanswered());
        Ok(counters)
    }

    fn router_replies(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(self.controller.answered())
    }

    fn untranslated_datapaths(&self) -> Vec<(&'static str, usize)> {
        self.untranslated.counts()
    }

    /// What the switch counted on each port the flows use (pods' interfaces, provider NICs,
    /// tunnels): what it took in from the port as received, what it sent out of it as
    /// delivered. The switch does not tell which drops came in by which port (br-int's drops
    /// are counted by reason), so `dropped` stays 0, as do the eBPF counters' IPv4/other/
    /// malformed split.
    fn interface_counters(&self) -> Result<Vec<InterfaceReading>, DatapathError> {
        let (done, answer) = mpsc::channel();
        self.writes
            .send(Request::Ports { done })
            .map_err(|_| DatapathError::new("the OpenFlow session thread is gone"))?;
        let counted: HashMap<u32, PortCounters> = answer
            .recv_timeout(COUNT_TIMEOUT)
            .map_err(|_| DatapathError::new("the OpenFlow session did not answer the port stats"))?
            .map_err(DatapathError::new)?
            .into_iter()
            .map(|counters| (counters.port, counters))
            .collect();
        let mut report: Vec<InterfaceReading> = self
            .l2
            .ofports()
            .filter_map(|(ofport, role)| {
                let (interface, port) = match role {
                    PortUse::Pod(port) => (self.plugged.get(port)?, Some(port.to_string())),
                    PortUse::Provider(network) => (self.providers.get(network)?, None),
                    PortUse::Tunnel(chassis) => (&self.tunnels.get(chassis)?.1, None),
                };
                let counted = counted.get(&ofport)?;
                let counters = InterfaceCounters {
                    packets: counted.rx_packets,
                    bytes: counted.rx_bytes,
                    delivered_packets: counted.tx_packets,
                    delivered_bytes: counted.tx_bytes,
                    ..InterfaceCounters::default()
                };
                Some((interface.clone(), port, counters))
            })
            .collect();
        report.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(report)
    }

    fn attacher(&self) -> Arc<dyn PortAttacher> {
        self.attacher.clone()
    }

    fn attachment_check(&self) -> Option<OffLoopJob> {
        None
    }

    fn tunnel_neighbours(&self, _endpoints: Vec<IpAddr>) -> Option<OffLoopJob> {
        None
    }

    fn drop_events(&mut self, _per_second: u32, _tap: DropTap) -> Option<DropFollower> {
        None
    }

    fn neighbour_events(&mut self, sink: NeighbourSink) -> Option<DropFollower> {
        // The controller's thread hands them over itself.
        self.controller.set_sink(sink);
        None
    }
}

/// Adds pods' host interfaces to br-int and knows their OpenFlow ports.
pub struct OvsAttacher {
    db_remote: String,
    /// Host interface index → its OpenFlow port.
    ofports: Mutex<HashMap<u32, u32>>,
}

/// How long Open vSwitch has to give an added interface its OpenFlow port.
const OFPORT_WAIT: Duration = Duration::from_secs(5);

impl OvsAttacher {
    fn new(db_remote: String) -> Self {
        Self {
            db_remote,
            ofports: Mutex::new(HashMap::new()),
        }
    }

    fn vsctl(&self, args: &[&str]) -> Result<String, DatapathError> {
        let output = Command::new("ovs-vsctl")
            .arg(format!("--db={}", self.db_remote))
            .arg("--timeout=10")
            .args(args)
            .output()
            .map_err(|error| DatapathError::new(format!("running ovs-vsctl: {error}")))?;
        if !output.status.success() {
            return Err(DatapathError::new(format!(
                "ovs-vsctl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    fn ofport(&self, ifindex: u32) -> Option<u32> {
        self.ofports.lock().ok()?.get(&ifindex).copied()
    }

    /// The OpenFlow port of interface `name` on br-int, once Open vSwitch gave it one.
    fn ofport_of(&self, name: &str) -> Result<u32, DatapathError> {
        let deadline = Instant::now() + OFPORT_WAIT;
        loop {
            let text = self.vsctl(&["get", "interface", name, "ofport"])?;
            match text.parse::<i64>() {
                Ok(port) if port > 0 => return u32::try_from(port).map_err(DatapathError::new),
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    return Err(DatapathError::new(format!(
                        "{BRIDGE} gave {name} no OpenFlow port ({text})"
                    )));
                }
            }
        }
    }

    /// Adds Geneve port `name` to br-int toward `remote` (outer UDP checksums when `csum`);
    /// its OpenFlow port.
    fn add_tunnel(&self, name: &str, remote: IpAddr, csum: bool) -> Result<u32, DatapathError> {
        self.vsctl(&[
            "--may-exist",
            "add-port",
            BRIDGE,
            name,
            "--",
            "set",
            "interface",
            name,
            "type=geneve",
            &format!("options:remote_ip={remote}"),
            "options:key=flow",
            &format!("options:csum={csum}"),
        ])?;
        self.ofport_of(name)
    }

    /// Names logical port `port` on `interface`'s br-int interface (`external_ids:iface-id`, as
    /// Kube-OVN and ovn-controller name it, for the tools that read it; best effort: logged
    /// when it fails).
    fn name_port(&self, interface: &str, port: &str) {
        let iface_id = format!("external_ids:iface-id={port}");
        if let Err(error) = self.vsctl(&["set", "interface", interface, &iface_id]) {
            tracing::warn!(%error, interface, port, "cannot name the port on br-int");
        }
    }

    /// Takes `interface` out of br-int (best effort: logged when it fails).
    fn remove(&self, interface: &str) {
        if let Err(error) = self.vsctl(&["--if-exists", "del-port", BRIDGE, interface]) {
            tracing::warn!(%error, interface, "cannot take the port out of br-int");
        }
        if let (Ok(mut ofports), Some(ifindex)) = (self.ofports.lock(), interface_index(interface))
        {
            ofports.remove(&ifindex);
        }
    }
}

/// The name of host interface `ifindex`.
fn interface_name(ifindex: u32) -> Option<String> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: the buffer holds IF_NAMESIZE bytes, as if_indextoname requires.
    let found = unsafe { libc::if_indextoname(ifindex, name.as_mut_ptr()) };
    if found.is_null() {
        return None;
    }
    // SAFETY: if_indextoname wrote a NUL-terminated name into the buffer.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

/// The index of host interface `name`.
fn interface_index(name: &str) -> Option<u32> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (index != 0).then_some(index)
}

impl PortAttacher for OvsAttacher {
    fn name(&self) -> &'static str {
        "br-int"
    }

    fn attach(&self, ifindex: u32) -> Result<PortAttachment, DatapathError> {
        let name = interface_name(ifindex)
            .ok_or_else(|| DatapathError::new(format!("no interface of index {ifindex}")))?;
        self.vsctl(&["--may-exist", "add-port", BRIDGE, &name])?;
        let ofport = self.ofport_of(&name)?;
        self.ofports
            .lock()
            .map_err(|_| DatapathError::new("the attacher's port table is poisoned"))?
            .insert(ifindex, ofport);
        Ok(PortAttachment::attached(ifindex))
    }

    fn is_attached(&self, ifindex: u32) -> Result<bool, DatapathError> {
        Ok(self.ofport(ifindex).is_some())
    }
}
