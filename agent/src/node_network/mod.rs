//! The node's own network on the default VPC, as kube-ovn-cni makes it (`configureNodeNic`,
//! `reconcileRouters`): the node's NIC `ovn0` on the join switch, bound to the logical port
//! `node-<node>` with its MAC and join address, and one route per default-VPC subnet via the join
//! gateway with the node's InternalIP as source. Through it kubelet probes pods, hostNetwork
//! processes and the node reach them, and pods reach the node (northd's priority-30000 policy
//! reroutes replies to the node's InternalIP to its join port).
//!
//! A task follows what the daemon loop publishes ([`NodeNetworkWanted`], computed from the
//! Southbound) and makes it so: the NIC ([`nic`], adopted untouched across an agent restart),
//! `from_pod` on its datapath end (the [`PortAttacher`]), the port plugged into the datapath
//! through the [`DaemonHandle`] like a pod's, IPv4 forwarding on (pods' traffic out of the
//! cluster leaves through the node's routing: Kube-OVN's distributed gateway), the routes (stale
//! ones removed), the masquerading of the NAT-outgoing subnets ([`nat`]), and a ping of the join
//! gateway, repeated until it answers, whose answer says the node's network works. Failures are logged, counted and retried.
//! Touches only its own NIC, the static routes through it, its nftables table and
//! `net.ipv4.ip_forward`.

pub mod nat;
pub mod nic;

use std::{
    net::Ipv4Addr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use tracing::{info, warn};

use crate::{
    daemon::{
        node_network::{JoinPort, NodeNetworkWanted},
        ports::{DaemonHandle, PortError},
    },
    dataplane::PortAttacher,
    netlink::StaticRoute,
};

/// How the node's NIC is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeNicConfig {
    /// The join port (`node-<node>`).
    pub port: String,
    /// The NIC's name (Kube-OVN: `ovn0`); its datapath end is `<interface>_h`.
    pub interface: String,
    pub mtu: u32,
    /// The node's InternalIP: the routes' preferred source.
    pub node_ip: Ipv4Addr,
    /// How long a plug waits for the port to be bound here and up.
    pub plug_wait: Duration,
}

/// Longest NIC name: its datapath end adds `_h` within Linux's 15 characters.
pub const MAX_INTERFACE_NAME: usize = 13;

/// How the node's network is doing, for the metrics.
#[derive(Debug, Default)]
pub struct NodeNetworkStatus {
    /// The NIC is built, attached and its port plugged and up.
    pub plugged: AtomicBool,
    /// Routes to default-VPC subnets through the NIC.
    pub routes: AtomicU64,
    /// The join gateway answered the last ping.
    pub gateway_reachable: AtomicBool,
    /// Attempts to make the node's network as wanted that failed (each is retried).
    pub failures: AtomicU64,
    /// Stale static routes removed from the NIC.
    pub stale_routes_removed: AtomicU64,
    /// Subnets whose traffic out of the cluster is masqueraded here.
    pub nat_outgoing_subnets: AtomicU64,
}

impl NodeNetworkStatus {
    /// The Prometheus text of the status.
    /// Registers the node network's metrics in `scrape`.
    pub fn register(&self, scrape: &mut crate::metrics::Scrape) {
        let load = |value: &std::sync::atomic::AtomicU64| value.load(Ordering::Relaxed);
        scrape.gauge(
            "ovnbpf_node_nic_plugged",
            "Whether the node's NIC on the join switch is built, attached and its port up.",
            u64::from(self.plugged.load(Ordering::Relaxed)),
        );
        scrape.gauge(
            "ovnbpf_node_routes",
            "Routes to default-VPC subnets through the node's NIC.",
            load(&self.routes),
        );
        scrape.gauge(
            "ovnbpf_node_join_gateway_reachable",
            "Whether the join gateway answered the node's last ping (Kube-OVN's \
             JoinSubnetGatewayReachable).",
            u64::from(self.gateway_reachable.load(Ordering::Relaxed)),
        );
        scrape.counter(
            "ovnbpf_node_network_failures_total",
            "Failed attempts to set up the node's network (each retried).",
            load(&self.failures),
        );
        scrape.counter(
            "ovnbpf_node_stale_routes_removed_total",
            "Stale static routes removed from the node's NIC.",
            load(&self.stale_routes_removed),
        );
        scrape.gauge(
            "ovnbpf_node_nat_outgoing_subnets",
            "Subnets whose traffic out of the cluster is masqueraded to the node's address.",
            load(&self.nat_outgoing_subnets),
        );
    }
}

/// Why the node's network could not be made as wanted.
#[derive(Debug, thiserror::Error)]
pub enum NodeNetworkError {
    #[error("the join port cannot be served: {0}")]
    Unservable(String),
    #[error("building {interface}: {source}")]
    Nic {
        interface: String,
        source: crate::cni::plumbing::PlumbingError,
    },
    #[error("attaching the datapath to {interface}: {reason}")]
    Attach { interface: String, reason: String },
    #[error("plugging {port}: {source}")]
    Plug { port: String, source: PortError },
    #[error("masquerading the NAT-outgoing subnets: {0}")]
    Nat(#[from] nat::NatError),
    #[error("turning IPv4 forwarding on: {0}")]
    Forwarding(std::io::Error),
    #[error("a blocking task failed: {0}")]
    Task(String),
}

/// Pods' traffic out of the cluster is forwarded by the node (distributed gateways).
const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// How long to wait before retrying after a failure.
const RETRY: Duration = Duration::from_secs(3);
/// How long to wait before pinging an unanswering join gateway again.
const PING_AGAIN: Duration = Duration::from_secs(10);
/// How long the join gateway is pinged for, and how often.
const PING_TIMEOUT: Duration = Duration::from_secs(10);
const PING_INTERVAL: Duration = Duration::from_millis(200);

/// What the task last made so.
#[derive(Debug, Default)]
struct Applied {
    /// The join port's facts the NIC was built and plugged with.
    port: Option<JoinPort>,
    routes: Option<Vec<StaticRoute>>,
    /// The join gateway answered a ping since the port was plugged.
    pinged: bool,
    /// Pings in a row the join gateway did not answer (the warning is logged for the first).
    unanswered_pings: u64,
    nat: Option<nat::NatRules>,
}

/// Follows `daemon`'s [`NodeNetworkWanted`] until the daemon is gone.
pub async fn run(
    daemon: DaemonHandle,
    attacher: Arc<dyn PortAttacher>,
    config: NodeNicConfig,
    status: Arc<NodeNetworkStatus>,
) {
    let mut wanted = daemon.node_network();
    let mut applied = Applied::default();
    loop {
        let current = wanted.borrow_and_update().clone();
        let again = match apply(&daemon, &attacher, &config, &status, &current, &mut applied).await
        {
            Ok(settled) => (!settled).then_some(PING_AGAIN),
            Err(error) => {
                status.failures.fetch_add(1, Ordering::Relaxed);
                warn!(port = config.port, interface = config.interface, %error,
                    "the node's network is not set up; retrying");
                Some(RETRY)
            }
        };
        tokio::select! {
            changed = wanted.changed() => if changed.is_err() {
                return;
            },
            () = tokio::time::sleep(again.unwrap_or(RETRY)), if again.is_some() => {}
        }
    }
}

/// Makes the node's network as `wanted` says, doing only what differs from `applied`. Returns
/// whether that is settled: not while the join gateway does not answer (pinged again later, as
/// kube-ovn-cni keeps checking until it does).
async fn apply(
    daemon: &DaemonHandle,
    attacher: &Arc<dyn PortAttacher>,
    config: &NodeNicConfig,
    status: &NodeNetworkStatus,
    wanted: &NodeNetworkWanted,
    applied: &mut Applied,
) -> Result<bool, NodeNetworkError> {
    if let Some(problem) = &wanted.problem {
        return Err(NodeNetworkError::Unservable(problem.clone()));
    }
    let Some(facts) = &wanted.port else {
        // Not in the Southbound (yet): a cluster without Kube-OVN's join switch, or a node the
        // controller has not added.
        return Ok(true);
    };
    if applied.port.as_ref() != Some(facts) {
        status.plugged.store(false, Ordering::Relaxed);
        applied.routes = None;
        status.gateway_reachable.store(false, Ordering::Relaxed);
        plug(daemon, attacher, config, facts).await?;
        blocking(enable_forwarding).await?;
        applied.port = Some(facts.clone());
        applied.pinged = false;
        applied.unanswered_pings = 0;
        status.plugged.store(true, Ordering::Relaxed);
    }
    let routes: Vec<StaticRoute> = wanted
        .subnets
        .iter()
        .map(|subnet| StaticRoute {
            destination: subnet.network,
            prefix_len: subnet.length,
            gateway: facts.ipv4.gateway,
            source: config.node_ip,
        })
        .collect();
    if applied.routes.as_ref() != Some(&routes) {
        let interface = config.interface.clone();
        let set = routes.clone();
        let removed = blocking(move || {
            nic::set_routes(&interface, &set)
                .map_err(|source| NodeNetworkError::Nic { interface, source })
        })
        .await?;
        status
            .stale_routes_removed
            .fetch_add(removed as u64, Ordering::Relaxed);
        status.routes.store(routes.len() as u64, Ordering::Relaxed);
        info!(
            interface = config.interface,
            routes = routes.len(),
            removed,
            "node routes to the default VPC set"
        );
        applied.routes = Some(routes);
    }
    let rules = nat::NatRules {
        cluster: wanted.cluster.clone(),
        nat_outgoing: wanted.nat_outgoing.clone(),
    };
    if applied.nat.as_ref() != Some(&rules) {
        let written = rules.clone();
        blocking(move || {
            if written.nat_outgoing.is_empty() {
                // Nothing to masquerade: a table a previous configuration left goes (without
                // nft installed there is none).
                match nat::remove() {
                    Err(nat::NatError::Spawn(_)) | Ok(()) => Ok(()),
                    Err(error) => Err(error.into()),
                }
            } else {
                nat::apply(&written).map_err(NodeNetworkError::from)
            }
        })
        .await?;
        status
            .nat_outgoing_subnets
            .store(rules.nat_outgoing.len() as u64, Ordering::Relaxed);
        info!(
            nat_outgoing = ?rules.nat_outgoing,
            "masquerading of traffic out of the cluster set"
        );
        applied.nat = Some(rules);
    }
    if !applied.pinged {
        let (interface, gateway) = (config.interface.clone(), facts.ipv4.gateway);
        let reachable = blocking(move || {
            nic::ping(&interface, gateway, PING_TIMEOUT, PING_INTERVAL)
                .map_err(|e| NodeNetworkError::Task(format!("pinging {gateway}: {e}")))
        })
        .await?;
        applied.pinged = reachable;
        let was = status.gateway_reachable.swap(reachable, Ordering::Relaxed);
        if reachable {
            info!(interface = config.interface, %gateway, "join gateway reachable");
        } else if was || applied.unanswered_pings == 0 {
            warn!(interface = config.interface, %gateway,
                "join gateway unreachable (no answer to ping after {PING_TIMEOUT:?}); trying again");
        }
        applied.unanswered_pings = if reachable {
            0
        } else {
            applied.unanswered_pings + 1
        };
        return Ok(reachable);
    }
    Ok(true)
}

/// Builds (or adopts) the NIC, attaches the datapath to its datapath end and plugs the port.
async fn plug(
    daemon: &DaemonHandle,
    attacher: &Arc<dyn PortAttacher>,
    config: &NodeNicConfig,
    facts: &JoinPort,
) -> Result<(), NodeNetworkError> {
    let node_nic = nic::NodeNic {
        interface: config.interface.clone(),
        mac: facts.mac.clone(),
        ip: facts.ipv4.ip,
        prefix_len: facts.ipv4.prefix_len,
        mtu: config.mtu,
    };
    let host = node_nic.host_interface();
    let (attacher, built_nic) = (Arc::clone(attacher), node_nic.clone());
    let (built, attachment) = blocking(move || {
        let built = nic::ensure(&built_nic).map_err(|source| NodeNetworkError::Nic {
            interface: built_nic.interface.clone(),
            source,
        })?;
        let attachment =
            attacher
                .attach(built.host_index())
                .map_err(|e| NodeNetworkError::Attach {
                    interface: built_nic.host_interface(),
                    reason: e.to_string(),
                })?;
        Ok((built, attachment))
    })
    .await?;
    daemon
        .plug(&config.port, &host, attachment, config.plug_wait)
        .await
        .map_err(|source| NodeNetworkError::Plug {
            port: config.port.clone(),
            source,
        })?;
    if matches!(built, nic::Built::Created { .. }) {
        let announced = node_nic.clone();
        let _ = tokio::task::spawn_blocking(move || nic::announce(&announced)).await;
    }
    info!(
        port = config.port,
        interface = config.interface,
        ip = %facts.ipv4.ip,
        prefix_len = facts.ipv4.prefix_len,
        adopted = matches!(built, nic::Built::Adopted { .. }),
        "node NIC plugged"
    );
    Ok(())
}

/// Turns IPv4 forwarding on unless it is (the DaemonSet's init container turns it on, and the
/// agent's container cannot write /proc/sys).
fn enable_forwarding() -> Result<(), NodeNetworkError> {
    let current = std::fs::read_to_string(IP_FORWARD).map_err(NodeNetworkError::Forwarding)?;
    if current.trim() != "1" {
        std::fs::write(IP_FORWARD, "1").map_err(NodeNetworkError::Forwarding)?;
        info!("net.ipv4.ip_forward=1 (pods' traffic out of the cluster leaves through the node)");
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, NodeNetworkError> + Send + 'static,
) -> Result<T, NodeNetworkError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| NodeNetworkError::Task(e.to_string()))?
}

/// Removes the node's NIC (and the routes through it) and the masquerading rules:
/// `ovnbpf-agent run --cleanup`. Returns whether the NIC was there.
pub fn cleanup(interface: &str) -> Result<bool, NodeNetworkError> {
    let removed = nic::remove(interface).map_err(|source| NodeNetworkError::Nic {
        interface: interface.to_string(),
        source,
    })?;
    match nat::remove() {
        // Without nft there is no table to remove.
        Ok(()) | Err(nat::NatError::Spawn(_)) => Ok(removed),
        Err(error) => Err(error.into()),
    }
}
