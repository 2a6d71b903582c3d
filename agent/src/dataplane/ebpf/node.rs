//! The eBPF datapath of one node as the daemon drives it: loads the kernel programs, sets the
//! tunnel endpoint and the segmenter ([`segmenter`]), attaches to the uplink, the segmenter and
//! the provider NICs (tcx links) and to the pods' host veths (a cls_bpf filter each, see [`pod_filter`](super::pod_filter); in the agent's
//! network namespace; pods plug and unplug at run time), and keeps the L2 and L3 maps in line
//! with the IR (which also names the other chassis's encap IPs). With a pin root, a new agent adopts the
//! maps and links of the previous one and the pods' filters (forwarding never stops), replaces the
//! programs atomically, and sweeps stale entries once told its state is complete. Without one,
//! everything is detached when it is dropped. Owns a [`KernelPrograms`], an [`L2State`], an
//! [`L3State`] and the pin layout; never reads the Southbound DB.

use std::{
    borrow::Borrow,
    collections::{HashMap, HashSet},
    net::IpAddr,
    path::PathBuf,
};

use tracing::info;

use super::{
    Attachment, EbpfError, Hook, KernelPrograms, announce,
    l2::L2State,
    l3::L3State,
    pins::{PinError, PinLayout},
    pod_filter::{self, PodFilterError, PodFilters},
    segmenter, socket_lb, unpin_link,
};
use crate::dataplane::PortAttachment;
use crate::pipeline::ir::{IrDiff, IrEntry};

/// What the node datapath needs to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDatapathConfig {
    /// This chassis's name.
    pub chassis: String,
    /// This node's tunnel endpoint; its family is the underlay's (IPv6: only chassis with an
    /// IPv6 Encap are tunnelled to, IPv4 likewise).
    pub encap_ip: IpAddr,
    /// The interface Geneve leaves and arrives on.
    pub uplink: String,
    /// Logical port name → its host-side veth.
    pub interfaces: Vec<(String, String)>,
    /// Where maps and links are pinned (on bpffs), so they outlive the agent; `None` detaches
    /// everything when the agent exits.
    pub pin_root: Option<PathBuf>,
    /// Bridge mappings: provider network name → the NIC its underlay traffic uses.
    pub providers: Vec<(String, String)>,
    /// ACLs that do not translate are ignored (`--unsupported-acl=allow`) instead of failing
    /// their switch's pipeline closed.
    pub acl_fail_open: bool,
    /// The socket-level balancer (`--socket-lb`): the cgroup v2 directory its programs attach
    /// to; `None`: off (connections to VIPs are balanced per packet only).
    pub socket_lb_cgroup: Option<PathBuf>,
    /// The network namespace (by its cookie) of each of [`Self::interfaces`]' pods that has a
    /// known one, for the socket-level balancer.
    pub netns: HashMap<String, u64>,
    /// Up to which level the kernel programs log (`--bpf-log-level`; off by default).
    pub bpf_log_level: super::kernel_log::BpfLogLevel,
    /// The capacity of the connection tables it creates (`--connection-table-entries`,
    /// [`super::CONNECTION_TABLES`]).
    pub connection_table_entries: u32,
}

/// Errors starting the node datapath.
#[derive(Debug, thiserror::Error)]
pub enum NodeDatapathError {
    #[error("interface {interface}: {source}")]
    Interface {
        interface: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Ebpf(#[from] EbpfError),
    #[error(transparent)]
    Pins(#[from] PinError),
    #[error(transparent)]
    PodFilter(#[from] PodFilterError),
    #[error("opening a netlink socket: {0}")]
    Netlink(#[source] std::io::Error),
}

pub struct NodeDatapath {
    acl_fail_open: bool,
    programs: KernelPrograms,
    l2: L2State,
    l3: L3State,
    pins: Option<PinLayout>,
    /// Logical port → its host veth (name, index).
    plugged: HashMap<String, (String, u32)>,
    /// Attaches `from_pod` to pods' veths (here and on the CNI server's tasks).
    pod_filters: PodFilters,
    /// The uplink and the provider NICs, by index.
    static_interfaces: Vec<(u32, String)>,
    /// Whether the maps came from a previous agent (they may hold stale entries until swept).
    adopted: bool,
    /// How a gateway becoming active here announces itself.
    announcer: announce::Announcer,
}

fn ifindex(interface: &str) -> Result<u32, NodeDatapathError> {
    let path = format!("/sys/class/net/{interface}/ifindex");
    let error = |source| NodeDatapathError::Interface {
        interface: interface.to_string(),
        source,
    };
    std::fs::read_to_string(&path)
        .map_err(error)?
        .trim()
        .parse()
        .map_err(|e| error(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

/// The kernel's FIB lookups for tunnel next hops are forwarding lookups: the node must forward
/// IPv4, as Kubernetes nodes do (Kube-OVN's installer turns it on too). Failing that is logged;
/// flood copies and tunnelled ARP then find no next hop and are counted.
fn ensure_ip_forwarding() {
    ensure_sysctl("/proc/sys/net/ipv4/ip_forward", "1");
}

/// Over an IPv6 underlay the FIB lookups of the tunnel's next hops are forwarding lookups on
/// the uplink too, which the kernel refuses unless the uplink forwards IPv6: turned on for the
/// uplink alone (Kubernetes IPv6 nodes forward on every interface anyway). An uplink that took
/// router advertisements only while not forwarding (`accept_ra=1`) is set to keep taking them
/// (`accept_ra=2`), so its SLAAC addresses and default route stay.
fn ensure_ipv6_forwarding(uplink: &str) {
    let conf = format!("/proc/sys/net/ipv6/conf/{uplink}");
    let forwarding = format!("{conf}/forwarding");
    if std::fs::read_to_string(&forwarding).is_ok_and(|value| value.trim() == "1") {
        return;
    }
    let accept_ra = format!("{conf}/accept_ra");
    if std::fs::read_to_string(&accept_ra).is_ok_and(|value| value.trim() == "1") {
        ensure_sysctl(&accept_ra, "2");
    }
    ensure_sysctl(&forwarding, "1");
}

/// Writes `value` to the sysctl at `path` unless it holds it; logged either way.
fn ensure_sysctl(path: &str, value: &str) {
    if std::fs::read_to_string(path).is_ok_and(|held| held.trim() == value) {
        return;
    }
    match std::fs::write(path, value) {
        Ok(()) => info!(path, value, "sysctl set for the datapath"),
        Err(error) => tracing::warn!(path, value, %error, "cannot set a sysctl the datapath needs"),
    }
}

impl NodeDatapath {
    /// Loads the programs through the verifier and attaches them to the uplink, the provider
    /// NICs and every configured pod interface. With a pin root, the maps and links a previous
    /// agent pinned are adopted (its entries keep forwarding until [`Self::sweep`]) and each link,
    /// and each pod's filter, gets the new program atomically; links of interfaces no longer
    /// configured, and pins of other layout versions, are removed.
    pub fn start(config: &NodeDatapathConfig) -> Result<Self, NodeDatapathError> {
        let pins = config
            .pin_root
            .as_deref()
            .map(PinLayout::prepare)
            .transpose()?;
        let adopted = pins.as_ref().is_some_and(PinLayout::has_maps);
        ensure_ip_forwarding();
        let mut programs = KernelPrograms::load_with(
            pins.as_ref(),
            config.bpf_log_level,
            Some(config.connection_table_entries),
        )?;
        let pod_filters = PodFilters::new(programs.program_fd(Hook::Pod)?);
        let uplink_index = ifindex(&config.uplink)?;
        if config.encap_ip.is_ipv6() {
            ensure_ipv6_forwarding(&config.uplink);
        }
        programs.set_tunnel_endpoint(config.encap_ip, uplink_index)?;
        let socket = crate::netlink::Socket::open().map_err(NodeDatapathError::Netlink)?;
        let mut hooks = vec![(Hook::Uplink, config.uplink.as_str(), uplink_index)];
        // Without a segmenter the node still forwards: GSO frames toward chassis that ask for
        // outer checksums then leave without one (legal over IPv4), as said here.
        match segmenter::ensure(&socket) {
            Ok(segmenter) => {
                programs.set_segmenter(segmenter.sending)?;
                hooks.push((Hook::Segmenter, segmenter::RECEIVING, segmenter.receiving));
            }
            Err(error) => tracing::warn!(
                %error,
                "no segmenter: TCP toward chassis that ask for outer UDP checksums leaves without them"
            ),
        }
        let mut l2 = L2State::new(&config.chassis);
        l2.set_ipv6_underlay(config.encap_ip.is_ipv6());
        l2.set_acl_fail_open(config.acl_fail_open);
        match &config.socket_lb_cgroup {
            Some(cgroup) => {
                socket_lb::attach(&mut programs, cgroup, pins.as_ref())?;
                l2.set_socket_lb(true);
            }
            None => {
                let detached = pins.as_ref().map_or(0, socket_lb::detach_pinned);
                if detached > 0 {
                    info!(
                        detached,
                        "socket-level balancer off: a previous agent's links detached"
                    );
                }
            }
        }
        let mut providers = HashMap::new();
        for (network, interface) in &config.providers {
            let index = ifindex(interface)?;
            providers.insert(network.clone(), index);
            hooks.push((Hook::Provider, interface, index));
        }
        l2.set_providers(providers);
        let mut plugged = HashMap::new();
        for (port, interface) in &config.interfaces {
            // An interface gone while the agent was down (its pod deleted) is skipped: the port
            // stays unprogrammed and `up` false until the CNI (or its configuration) fixes it.
            let index = match ifindex(interface) {
                Ok(index) => index,
                Err(error) => {
                    tracing::warn!(port, interface, %error, "interface missing; port not plugged");
                    continue;
                }
            };
            // A filter a previous agent left gets this program atomically.
            let how = if pod_filter::is_attached(&socket, index).map_err(|source| {
                PodFilterError::Attach {
                    ifindex: index,
                    source,
                }
            })? {
                Attachment::Replaced
            } else {
                Attachment::Attached
            };
            pod_filters.attach(index)?;
            info!(hook = ?Hook::Pod, interface, ?how, "program attached");
            l2.set_peer_in_namespace(index, peer_in_namespace(&socket, index, interface));
            l2.set_interface(port, Some(index));
            l2.set_netns(port, config.netns.get(port).copied());
            plugged.insert(port.clone(), (interface.clone(), index));
        }
        let static_interfaces = hooks
            .iter()
            .map(|(_, interface, index)| (*index, (*interface).to_string()))
            .collect();
        let mut linked = HashSet::new();
        for (hook, interface, index) in hooks {
            match &pins {
                Some(pins) => {
                    let pin = pins.link_path(hook, index);
                    let how = programs.attach_pinned(hook, interface, &pin)?;
                    info!(?hook, interface, ?how, "program attached");
                    linked.insert(pin);
                }
                None => {
                    // Static links (uplink, providers) live as long as the programs.
                    let _ = programs.attach(hook, interface)?;
                }
            }
        }
        if let Some(pins) = &pins {
            // Also the tcx links of pods that agents before the filters pinned: the pods'
            // filters run by now.
            for pin in pins.link_pins()? {
                if !linked.contains(&pin) {
                    unpin_link(&pin);
                    info!(pin = %pin.display(), "detached a pinned link nothing uses any more");
                }
            }
            for dir in pins.remove_other_versions()? {
                info!(dir = %dir.display(), "removed the pins of another layout version");
            }
        }
        info!(adopted, pinned = pins.is_some(), "eBPF datapath started");
        Ok(Self {
            acl_fail_open: config.acl_fail_open,
            programs,
            l2,
            l3: L3State::default(),
            pins,
            plugged,
            pod_filters,
            static_interfaces,
            adopted,
            announcer: announce::Announcer::default(),
        })
    }

    /// The programs loaded through the verifier with fresh maps, attached to no interface and
    /// pinned nowhere: the map writes of IR diffs, for `ovnbpfctl sb-sync --program` (a
    /// benchmark; nothing forwards through it). Everything goes when it is dropped.
    pub fn unattached(chassis: &str) -> Result<Self, NodeDatapathError> {
        let mut programs = KernelPrograms::load()?;
        let pod_filters = PodFilters::new(programs.program_fd(Hook::Pod)?);
        Ok(Self {
            acl_fail_open: false,
            programs,
            l2: L2State::new(chassis),
            l3: L3State::default(),
            pins: None,
            plugged: HashMap::new(),
            pod_filters,
            static_interfaces: Vec::new(),
            adopted: false,
            announcer: announce::Announcer::default(),
        })
    }

    /// What attaches `from_pod` to new pods' veths away from the daemon loop (see
    /// [`PodFilters`]), with this datapath's program.
    #[must_use]
    pub fn pod_filters(&self) -> PodFilters {
        self.pod_filters.clone()
    }

    /// Forwards for `port` through `interface`, whose `from_pod` filter `filter` shows; returns
    /// the map writes made. Takes no kernel lock.
    pub fn plug(
        &mut self,
        port: &str,
        interface: &str,
        filter: PortAttachment,
    ) -> Result<usize, NodeDatapathError> {
        let start = std::time::Instant::now();
        let index = ifindex(interface)?;
        if index != filter.ifindex() {
            return Err(NodeDatapathError::Interface {
                interface: interface.to_string(),
                source: std::io::Error::other(format!(
                    "from_pod was attached to interface index {}, the interface has index {index}",
                    filter.ifindex()
                )),
            });
        }
        self.plugged
            .insert(port.to_string(), (interface.to_string(), index));
        let here = crate::netlink::Socket::open()
            .map(|socket| peer_in_namespace(&socket, index, interface))
            .unwrap_or(false);
        self.l2.set_peer_in_namespace(index, here);
        self.l2.set_interface(port, Some(index));
        self.l2.set_netns(port, filter.netns());
        let writes = self.l2.flush(&mut self.programs)?;
        info!(
            port,
            interface,
            ifindex = index,
            writes,
            us = start.elapsed().as_micros() as u64,
            "port plugged"
        );
        Ok(writes)
    }

    /// Stops forwarding for `port`: its map entries go (`from_pod` then passes the veth's
    /// frames on untouched; its filter goes with the veth, which the CNI server deletes after).
    /// Returns the map writes made.
    pub fn unplug(&mut self, port: &str) -> Result<usize, EbpfError> {
        let Some((interface, _)) = self.plugged.remove(port) else {
            return Ok(0);
        };
        self.l2.set_interface(port, None);
        self.l2.set_netns(port, None);
        info!(port, interface, "port unplugged");
        self.l2.flush(&mut self.programs)
    }

    /// The kernel's counters of each interface the datapath runs on and has seen traffic on:
    /// (interface, the logical port of a pod's veth, counters).
    pub fn interface_counters(
        &self,
    ) -> Result<Vec<(String, Option<String>, ovnbpf_common::InterfaceCounters)>, EbpfError> {
        let pods = self
            .plugged
            .iter()
            .map(|(port, (interface, index))| (*index, interface, Some(port)));
        let fixed = self
            .static_interfaces
            .iter()
            .map(|(index, interface)| (*index, interface, None));
        let mut report = Vec::new();
        for (index, interface, port) in fixed.chain(pods) {
            if let Some(counters) = self.programs.interface_counters(index)? {
                report.push((interface.clone(), port.cloned(), counters));
            }
        }
        report.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(report)
    }

    /// The host veth (name, index) of every plugged port.
    #[must_use]
    pub fn plugged_interfaces(&self) -> Vec<(String, u32)> {
        self.plugged.values().cloned().collect()
    }

    /// The host veth `port` is plugged into.
    #[must_use]
    pub fn interface_of(&self, port: &str) -> Option<&str> {
        self.plugged
            .get(port)
            .map(|(interface, _)| interface.as_str())
    }

    /// The drop-event ring buffer's consumer (`None` after the first call).
    pub fn take_drop_events(&mut self) -> Option<super::events::DropEvents> {
        match self.programs.take_drop_events() {
            Ok(events) => Some(events),
            Err(error) => {
                tracing::debug!(%error, "no drop-event ring buffer to follow");
                None
            }
        }
    }

    /// Map keys whose writes failed and wait for a retry.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.l2.pending() + self.l3.pending()
    }

    /// Flood groups with more members than the agent installs, as last flushed.
    #[must_use]
    pub fn truncated_flood_groups(&self) -> usize {
        self.l2.truncated_groups()
    }

    /// Retries the writes that failed.
    pub fn retry(&mut self) -> Result<usize, EbpfError> {
        let routed = self.l3.flush(&mut self.programs)?;
        Ok(routed + self.l2.flush(&mut self.programs)?)
    }

    /// Whether the maps were adopted from a previous agent.
    #[must_use]
    pub fn adopted(&self) -> bool {
        self.adopted
    }

    /// Removes map entries this agent did not install (see [`L2State::sweep`]); call once the
    /// Southbound view is complete. Returns the number removed.
    /// The pin root (the agent's `--pin-dir`), when the datapath is pinned.
    #[must_use]
    pub fn pin_root(&self) -> Option<&std::path::Path> {
        self.pins.as_ref().map(PinLayout::root)
    }

    /// Whether ACLs that do not translate are let through ([`NodeDatapathConfig::acl_fail_open`]).
    #[must_use]
    pub fn acls_fail_open(&self) -> bool {
        self.acl_fail_open
    }

    pub fn sweep(&mut self) -> Result<usize, EbpfError> {
        self.l3.flush(&mut self.programs)?;
        self.l2.flush(&mut self.programs)?;
        Ok(self.l2.sweep(&mut self.programs)? + self.l3.sweep(&mut self.programs)?)
    }

    /// Takes in an IR diff and writes what it changes.
    pub fn apply<E: Borrow<IrEntry>>(&mut self, diff: &IrDiff<E>) -> Result<usize, EbpfError> {
        self.apply_all(std::slice::from_ref(diff))
    }

    /// Takes in IR diffs, in order, then writes what they change together.
    pub fn apply_all<E: Borrow<IrEntry>>(
        &mut self,
        diffs: &[IrDiff<E>],
    ) -> Result<usize, EbpfError> {
        for diff in diffs {
            self.l2.apply(diff);
            self.l3.apply(diff);
        }
        // Routes before the switch entries that lead to them.
        let routed = self.l3.flush(&mut self.programs)?;
        let written = routed + self.l2.flush(&mut self.programs)?;
        // Once the gateway's entries are in: the physical network learns where it is now.
        for gateway in self.l2.take_withdrawals() {
            self.announcer.withdraw(&gateway);
        }
        for (gateway, announcement) in self.l2.take_announcements() {
            self.announcer.announce(gateway, announcement);
        }
        Ok(written)
    }

    /// Whether logical port `port` is programmed (its veth forwards and receives).
    #[must_use]
    pub fn programmed(&self, port: &str) -> bool {
        self.l2.programmed(port)
    }

    /// Dropped frames per reason.
    pub fn drop_counters(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.programs.drop_counters()
    }

    /// Answers the routers sent, per kind.
    pub fn router_replies(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.programs.router_replies()
    }

    /// Packets logged ACL rules decided, per verdict, and events lost.
    pub fn acl_logged(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.programs.acl_logged()
    }

    /// Rule-list walks answered from the verdict cache, and walks done.
    pub fn acl_verdict_cache(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.programs.acl_verdict_cache()
    }

    /// Connections committed and failed commits.
    pub fn conntrack_counters(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.programs.conntrack_counters()
    }

    /// What the load-balancer stage did.
    pub fn lb_counters(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.programs.lb_counters()
    }

    /// What the socket-level balancer did.
    pub fn socket_lb_counters(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.programs.socket_lb_counters()
    }

    /// The heard-neighbour ring buffer's consumer (`None` after the first call).
    pub fn take_neighbour_events(&mut self) -> Option<super::neighbour_events::NeighbourEvents> {
        match self.programs.take_neighbour_events() {
            Ok(events) => Some(events),
            Err(error) => {
                tracing::debug!(%error, "no heard-neighbour ring buffer to follow");
                None
            }
        }
    }

    /// The ACL log ring buffer's consumer (`None` after the first call).
    pub fn take_acl_log_events(&mut self) -> Option<super::acl_log::AclLogEvents> {
        let book = self.l2.acl_log_book();
        match self.programs.take_acl_log_events(book) {
            Ok(events) => Some(events),
            Err(error) => {
                tracing::debug!(%error, "no ACL log ring buffer to follow");
                None
            }
        }
    }
}

impl Drop for NodeDatapath {
    /// Without pins nothing is meant to outlive the agent: the pods' filters (which, unlike a
    /// link, no descriptor of ours holds) and the segmenter are removed. With pins they stay for the next agent.
    fn drop(&mut self) {
        if self.pins.is_some() {
            return;
        }
        let socket = match crate::netlink::Socket::open() {
            Ok(socket) => socket,
            Err(error) => {
                tracing::warn!(%error, "cannot remove the pods' from_pod filters and the segmenter");
                return;
            }
        };
        if let Err(error) = segmenter::remove(&socket) {
            tracing::warn!(%error, "cannot remove the segmenter");
        }
        for (interface, index) in self.plugged.values() {
            if let Err(error) = pod_filter::detach(&socket, *index) {
                tracing::warn!(interface, %error, "cannot remove a pod's from_pod filter");
            }
        }
    }
}

/// Has the kernel resolve the next hop towards each of `endpoints` (the endpoint itself when it
/// is on-link, else its gateway, once). Flood copies (clones) cannot resolve their next hop
/// themselves the way a unicast encapsulation does: without an entry they are dropped
/// (`flood_next_hop_unresolved`), so a node's first broadcast to a chassis it never talked to
/// would be lost. Only next hops are asked for: an off-link endpoint is never ARPed for. Blocking
/// (each request takes the kernel's rtnl lock): call from a blocking task. Returns how many
/// endpoints could not be resolved.
pub fn resolve_tunnel_neighbours(endpoints: &[IpAddr]) -> usize {
    let socket = match crate::netlink::Socket::open() {
        Ok(socket) => socket,
        Err(error) => {
            tracing::warn!(%error, "cannot resolve tunnel next hops");
            return endpoints.len();
        }
    };
    let mut asked = HashSet::new();
    endpoints
        .iter()
        .filter(|ip| {
            let resolved = socket.next_hop(**ip).and_then(|next_hop| {
                if asked.insert(next_hop) {
                    socket.resolve_neighbour(next_hop.0, next_hop.1)
                } else {
                    Ok(())
                }
            });
            resolved
                .inspect_err(|error| {
                    tracing::debug!(%ip, %error, "cannot resolve a tunnel next hop");
                })
                .is_err()
        })
        .count()
}

/// Whether host interface `index` (`interface`) has its peer in this namespace (the node's own
/// NIC). Unknown (the link cannot be read) counts as a pod's veth, the common case.
fn peer_in_namespace(socket: &crate::netlink::Socket, index: u32, interface: &str) -> bool {
    match socket.peer_in_other_namespace(index) {
        Ok(elsewhere) => !elsewhere,
        Err(error) => {
            tracing::warn!(interface, %error, "cannot read where the veth's peer is");
            false
        }
    }
}
