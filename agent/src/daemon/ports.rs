//! Ports that come and go at run time (the CNI server's): the requests other tasks send the daemon
//! loop ([`PortCommand`], through a [`DaemonHandle`]), what a pod NIC needs to know about its
//! logical port ([`PortFacts`], read from the Southbound replica), the names of the logical
//! datapaths ([`DatapathNames`], for the control socket), and the replies waiting for the
//! Southbound to catch up ([`Pending`]). Owns no state of the loop; the loop applies the commands.

use std::{
    collections::HashMap,
    net::{Ipv4Addr, Ipv6Addr},
    time::Duration,
};

use tokio::sync::{mpsc, oneshot, watch};

use super::node_network::NodeNetworkWanted;

use crate::{
    dataplane::PortAttachment,
    net::{LspAddress, format_mac},
    sb::{
        Southbound,
        rows::{DatapathBinding, PortBinding},
    },
};

/// What the pod side of a logical port is configured with: its MAC and, for each family its
/// addresses list, the first address with its subnet (at least one family).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortFacts {
    /// `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    pub ipv4: Option<FamilyFacts<Ipv4Addr>>,
    pub ipv6: Option<FamilyFacts<Ipv6Addr>>,
}

/// A port's address of one family, with the subnet it is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FamilyFacts<A> {
    pub ip: A,
    /// The subnet's prefix length (from the router port that holds the gateway).
    pub prefix_len: u8,
    pub gateway: A,
}

/// Why a port request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    #[error("{0}")]
    Rejected(String),
    /// The port can never be served as it is configured (no static address, no gateway in the
    /// Southbound): retrying does not help.
    #[error("{0}")]
    Unservable(String),
    #[error("timed out after {0:?}: {1}")]
    Timeout(Duration, String),
    #[error("the agent's main loop is not running")]
    Gone,
}

/// Whether the agent can serve CNI requests, and how a port is doing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortStatus {
    /// The Southbound snapshot is in, this chassis is registered and the datapath is loaded.
    pub ready: bool,
    /// For a queried port: its veth forwards (map entries installed).
    pub programmed: bool,
    /// For a queried port: its Port_Binding is bound here and `up`.
    pub up: bool,
}

/// What the daemon loop reports for the metrics.
#[derive(Clone, Debug, Default)]
pub struct DaemonReport {
    pub stats: super::DaemonStats,
    /// A Southbound snapshot has been applied.
    pub synced: bool,
    /// The Southbound session is up.
    pub connected: bool,
    /// Synced, this chassis registered and the datapath loaded (CNI STATUS's readiness).
    pub ready: bool,
    /// Ports bound here (configured and plugged by the CNI server).
    pub local_ports: usize,
    /// Pod veths whose lost `from_pod` filter the loop re-attached.
    pub pod_filters_restored: u64,
    /// Expired connections the agent deleted from the datapath's table.
    pub connections_swept: u64,
    /// The datapath's connection table as its last sweep found it (`None` before the first).
    pub connections: Option<crate::dataplane::ConnectionSweep>,
    /// Switches with users' ACLs the datapath does not enforce, and those ACLs (per switch).
    pub unenforced_acl_switches: usize,
    pub unenforced_acls: usize,
    /// Flood groups with more members than the datapath installs.
    pub truncated_flood_groups: usize,
    /// Datapath writes that failed and wait for a retry (the datapath is not wholly programmed).
    pub datapath_pending: usize,
    /// Which datapath this node runs (`ebpf`, `openflow`); `None` without one.
    pub dataplane: Option<&'static str>,
    /// Datapaths the backend does not translate whole, per effect (`partial`, `fenced`).
    pub untranslated_datapaths: Vec<(&'static str, usize)>,
    /// Datapaths whose flows ask for a side duty the datapath does not do (e.g. MAC learning);
    /// they are forwarded.
    pub side_duty_datapaths: usize,
    /// The datapath's dropped frames per reason (empty without a datapath).
    pub drops: Vec<(&'static str, u64)>,
    /// The answers the datapath's routers sent, per kind (empty without a datapath).
    pub router_replies: Vec<(&'static str, u64)>,
    /// Packets logged ACLs decided, per verdict, and log events lost.
    pub acl_logged: Vec<(&'static str, u64)>,
    /// Connections the connection table committed, and failed commits.
    pub conntrack: Vec<(&'static str, u64)>,
    /// Walks of ACL rule lists the verdict cache answered, and walks done.
    pub acl_verdict_cache: Vec<(&'static str, u64)>,
    /// New connections the load balancers balanced, by how.
    pub lb: Vec<(&'static str, u64)>,
    /// What the socket-level balancer did, per kind (empty without it).
    pub socket_lb: Vec<(&'static str, u64)>,
    /// Load balancer backends this chassis probes, by the status it decided.
    pub service_monitors: Vec<(&'static str, u64)>,
    /// Their health-check probes, by outcome.
    pub service_monitor_probes: Vec<(&'static str, u64)>,
    /// Periodic router advertisements sent to local ports, and failed sends.
    pub router_advertisements: Vec<(&'static str, u64)>,
    /// The datapath's counters per interface: (interface, a pod veth's logical port, counters).
    pub interfaces: Vec<crate::dataplane::InterfaceReading>,
}

/// A logical switch or router as operators name it (Kube-OVN: the subnet's or the VPC's name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatapathName {
    pub tunnel_key: u32,
    /// `switch` or `router` (northd's `logical-switch` / `logical-router` external_ids), or
    /// `datapath` when the row says neither.
    pub kind: &'static str,
    /// The Northbound name (`external_ids:name`), if the row has one.
    pub name: Option<String>,
}

impl DatapathName {
    #[must_use]
    pub fn of(datapath: &DatapathBinding) -> Self {
        let ids = &datapath.external_ids;
        let kind = if ids.contains_key("logical-router") {
            "router"
        } else if ids.contains_key("logical-switch") {
            "switch"
        } else {
            "datapath"
        };
        Self {
            tunnel_key: datapath.tunnel_key,
            kind,
            name: ids.get("name").cloned(),
        }
    }
}

/// The logical datapaths by tunnel key, and the datapath of each port bound here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DatapathNames {
    pub datapaths: HashMap<u32, DatapathName>,
    /// Local logical port → its datapath's tunnel key.
    pub ports: HashMap<String, u32>,
}

impl DatapathNames {
    /// Every datapath of the replica, and the datapaths of `local_ports`.
    pub fn read<'a>(sb: &Southbound, local_ports: impl IntoIterator<Item = &'a String>) -> Self {
        let datapaths = sb
            .rows::<DatapathBinding>()
            .map(|datapath| (datapath.tunnel_key, DatapathName::of(&datapath)))
            .collect();
        let ports = local_ports
            .into_iter()
            .filter_map(|port| {
                let binding = sb.port_by_name(port)?;
                let datapath = sb.row::<DatapathBinding>(&binding.datapath?)?;
                Some((port.clone(), datapath.tunnel_key))
            })
            .collect();
        Self { datapaths, ports }
    }
}

/// A request to the daemon loop.
#[derive(Debug)]
pub enum PortCommand {
    /// Make `port` local (monitored, claimed) and answer with its facts once the Southbound has
    /// them.
    Bind {
        port: String,
        reply: oneshot::Sender<Result<PortFacts, PortError>>,
    },
    /// `port`'s NIC exists, its host end is `interface`, which the datapath's port attacher
    /// prepared (`attachment`): forward for it; answer once its Port_Binding is bound here and up.
    Plug {
        port: String,
        interface: String,
        attachment: PortAttachment,
        reply: oneshot::Sender<Result<(), PortError>>,
    },
    /// Stop forwarding for `port` if it is still plugged into `interface` (or not plugged at
    /// all), and release its Port_Binding.
    Unplug {
        port: String,
        interface: String,
        reply: oneshot::Sender<Result<(), PortError>>,
    },
    /// The loop's counters and state, for the metrics.
    Report {
        reply: oneshot::Sender<DaemonReport>,
    },
    /// `port`'s facts as the replica has them now, without binding it (CHECK).
    Facts {
        port: String,
        reply: oneshot::Sender<Result<PortFacts, PortError>>,
    },
    /// The datapaths' names and the local ports' datapaths (the control socket's events).
    DatapathNames {
        reply: oneshot::Sender<DatapathNames>,
    },
    /// Readiness, and `port`'s state.
    Status {
        port: Option<String>,
        reply: oneshot::Sender<PortStatus>,
    },
}

/// The sending side, for the CNI server and the node network.
#[derive(Clone, Debug)]
pub struct DaemonHandle {
    commands: mpsc::UnboundedSender<PortCommand>,
    node_network: watch::Receiver<NodeNetworkWanted>,
}

/// The receiving side, for [`super::run`]: the commands, and where the loop publishes what the
/// Southbound asks of the node's network.
#[derive(Debug)]
pub struct PortCommands {
    receiver: mpsc::UnboundedReceiver<PortCommand>,
    pub(super) node_network: watch::Sender<NodeNetworkWanted>,
}

impl PortCommands {
    pub async fn recv(&mut self) -> Option<PortCommand> {
        self.receiver.recv().await
    }
}

/// A connected handle and command stream.
#[must_use]
pub fn channel() -> (DaemonHandle, PortCommands) {
    let (commands, receiver) = mpsc::unbounded_channel();
    let (node_network, wanted) = watch::channel(NodeNetworkWanted::default());
    (
        DaemonHandle {
            commands,
            node_network: wanted,
        },
        PortCommands {
            receiver,
            node_network,
        },
    )
}

impl DaemonHandle {
    /// What the Southbound asks of the node's network (see
    /// [`super::node_network::NodeNetworkWanted`]), as the loop last published it; it changes
    /// only when the loop was configured with a node port.
    #[must_use]
    pub fn node_network(&self) -> watch::Receiver<NodeNetworkWanted> {
        self.node_network.clone()
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> PortCommand,
        timeout: Duration,
        what: &str,
    ) -> Result<T, PortError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(make(reply))
            .map_err(|_| PortError::Gone)?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(_)) => Err(PortError::Gone),
            Err(_) => Err(PortError::Timeout(timeout, what.to_string())),
        }
    }

    /// See [`PortCommand::Bind`].
    pub async fn bind(&self, port: &str, timeout: Duration) -> Result<PortFacts, PortError> {
        let port = port.to_string();
        let what = format!("waiting for the Port_Binding of {port} and its switch's router port");
        self.ask(|reply| PortCommand::Bind { port, reply }, timeout, &what)
            .await?
    }

    /// See [`PortCommand::Plug`].
    pub async fn plug(
        &self,
        port: &str,
        interface: &str,
        attachment: PortAttachment,
        timeout: Duration,
    ) -> Result<(), PortError> {
        let (port, interface) = (port.to_string(), interface.to_string());
        let what = format!("waiting for {port} to be bound here and up");
        self.ask(
            |reply| PortCommand::Plug {
                port,
                interface,
                attachment,
                reply,
            },
            timeout,
            &what,
        )
        .await?
    }

    /// See [`PortCommand::Unplug`].
    pub async fn unplug(&self, port: &str, interface: &str) -> Result<(), PortError> {
        let (port, interface) = (port.to_string(), interface.to_string());
        self.ask(
            |reply| PortCommand::Unplug {
                port,
                interface,
                reply,
            },
            Duration::from_secs(30),
            "releasing the port",
        )
        .await?
    }

    /// See [`PortCommand::Facts`].
    pub async fn facts(&self, port: &str) -> Result<PortFacts, PortError> {
        let port = port.to_string();
        self.ask(
            |reply| PortCommand::Facts { port, reply },
            Duration::from_secs(5),
            "facts",
        )
        .await?
    }

    /// See [`PortCommand::DatapathNames`].
    pub async fn datapath_names(&self) -> Result<DatapathNames, PortError> {
        self.ask(
            |reply| PortCommand::DatapathNames { reply },
            Duration::from_secs(5),
            "datapath names",
        )
        .await
    }

    /// See [`PortCommand::Report`].
    pub async fn report(&self) -> Result<DaemonReport, PortError> {
        self.ask(
            |reply| PortCommand::Report { reply },
            Duration::from_secs(5),
            "report",
        )
        .await
    }

    /// See [`PortCommand::Status`].
    pub async fn status(&self, port: Option<&str>) -> Result<PortStatus, PortError> {
        let port = port.map(str::to_string);
        self.ask(
            |reply| PortCommand::Status { port, reply },
            Duration::from_secs(5),
            "status",
        )
        .await
    }
}

/// The facts of `port`: `Ok(None)` while the Southbound does not have them yet (no
/// Port_Binding, or no router port of its switch with a network holding each of its
/// addresses); an error when the port can never have them (no static MAC with an address).
/// A port's addresses are its first Southbound `mac` entry with an IP address, as Kube-OVN
/// writes one ("MAC IPv4 IPv6" on a dual-stack subnet).
pub fn port_facts(sb: &Southbound, port: &str) -> Result<Option<PortFacts>, String> {
    let Some(binding) = sb.port_by_name(port) else {
        return Ok(None);
    };
    let Some(address) = binding
        .mac
        .iter()
        .filter_map(|entry| entry.parse::<LspAddress>().ok())
        .find(|address| !address.ipv4.is_empty() || !address.ipv6.is_empty())
    else {
        return Err(format!(
            "Port_Binding {port} has no static \"MAC IP\" address ({:?})",
            binding.mac
        ));
    };
    let Some(datapath) = binding.datapath else {
        return Ok(None);
    };
    let neighbours: Vec<PortBinding> = sb.typed_ports_on_datapath(datapath).collect();
    let router_networks: Vec<LspAddress> = neighbours
        .iter()
        .filter(|p| p.kind == "patch")
        .filter_map(|p| sb.port_by_name(p.options.get("peer")?))
        .flat_map(|router_port| router_port.mac)
        .filter_map(|entry| entry.parse::<LspAddress>().ok())
        .collect();
    let ipv4 = address.ipv4.first().map(|prefix| {
        let gateway = router_networks
            .iter()
            .flat_map(|networks| &networks.ipv4)
            .find(|network| network.contains(prefix.network));
        (prefix.network, gateway)
    });
    let ipv6 = address.ipv6.first().map(|prefix| {
        let gateway = router_networks
            .iter()
            .flat_map(|networks| &networks.ipv6)
            .find(|network| network.contains(prefix.network));
        (prefix.network, gateway)
    });
    let missing_gateway = matches!(ipv4, Some((_, None))) || matches!(ipv6, Some((_, None)));
    if missing_gateway
        && let Some(localnet) = neighbours.iter().find(|p| p.kind == "localnet")
        && !neighbours.iter().any(|p| p.kind == "patch")
    {
        // Kube-OVN's daemon takes such a subnet's gateway from the pod's annotations; the
        // Southbound does not have it.
        return Err(format!(
            "{port} is on an underlay subnet without a logical gateway (localnet port {}, no \
             router port): its prefix and gateway are not in the Southbound, which ovnbpf's CNI \
             does not support yet",
            localnet.logical_port
        ));
    }
    if missing_gateway {
        return Ok(None);
    }
    Ok(Some(PortFacts {
        mac: format_mac(&address.mac),
        ipv4: ipv4.and_then(|(ip, network)| {
            network.map(|network| FamilyFacts {
                ip,
                prefix_len: network.length,
                gateway: network.network,
            })
        }),
        ipv6: ipv6.and_then(|(ip, network)| {
            network.map(|network| FamilyFacts {
                ip,
                prefix_len: network.length,
                gateway: network.network,
            })
        }),
    }))
}

/// Where a plugged port's caller waits for `up`.
type UpReply = oneshot::Sender<Result<(), PortError>>;

/// Replies waiting for the Southbound.
#[derive(Debug, Default)]
pub struct Pending {
    binds: Vec<(String, oneshot::Sender<Result<PortFacts, PortError>>)>,
    /// With when the wait began, for the log.
    ups: Vec<(String, std::time::Instant, UpReply)>,
}

impl Pending {
    pub fn wait_for_facts(
        &mut self,
        port: String,
        reply: oneshot::Sender<Result<PortFacts, PortError>>,
    ) {
        self.binds.push((port, reply));
    }

    pub fn wait_for_up(&mut self, port: String, reply: UpReply) {
        self.ups.push((port, std::time::Instant::now(), reply));
    }

    /// Answers every request the replica can now answer; requests whose caller gave up are
    /// dropped. `bound_up(port)` says whether a port is bound here and up.
    pub fn poll(&mut self, sb: &Southbound, bound_up: impl Fn(&PortBinding) -> bool) {
        for (port, reply) in std::mem::take(&mut self.binds) {
            if reply.is_closed() {
                continue;
            }
            match port_facts(sb, &port) {
                Ok(Some(facts)) => {
                    let _ = reply.send(Ok(facts));
                }
                Ok(None) => self.binds.push((port, reply)),
                Err(reason) => {
                    let _ = reply.send(Err(PortError::Unservable(reason)));
                }
            }
        }
        for (port, since, reply) in std::mem::take(&mut self.ups) {
            if reply.is_closed() {
                continue;
            }
            if sb
                .port_by_name(&port)
                .is_some_and(|binding| bound_up(&binding))
            {
                tracing::info!(
                    port,
                    waited_ms = since.elapsed().as_millis() as u64,
                    "Port_Binding bound here and up"
                );
                let _ = reply.send(Ok(()));
            } else {
                self.ups.push((port, since, reply));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datapath(tunnel_key: u32, ids: &[(&str, &str)]) -> DatapathBinding {
        DatapathBinding {
            uuid: uuid::Uuid::new_v4(),
            tunnel_key,
            external_ids: ids
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_datapath_is_named_as_northd_describes_it() {
        let switch = datapath(3, &[("logical-switch", "5b0c…"), ("name", "subnet-a")]);
        assert_eq!(
            DatapathName::of(&switch),
            DatapathName {
                tunnel_key: 3,
                kind: "switch",
                name: Some("subnet-a".into())
            }
        );
        let router = datapath(1, &[("logical-router", "9e1f…"), ("name", "vpc-a")]);
        assert_eq!(DatapathName::of(&router).kind, "router");
        assert_eq!(DatapathName::of(&router).name.as_deref(), Some("vpc-a"));
        let bare = DatapathName::of(&datapath(7, &[]));
        assert_eq!((bare.kind, bare.name), ("datapath", None));
    }
}
