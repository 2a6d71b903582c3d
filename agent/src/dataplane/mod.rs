//! Datapath backends, and the one interface the rest of the agent drives them through.
//!
//! A backend turns the pipeline IR ([`IrDiff`]s) and the pods plugged on this node into
//! forwarding state: [`ebpf`] programs kernel maps and TC programs; an OpenFlow backend (OVS
//! br-int) is to sit beside it ([`openflow`] holds its wire side so far). Backends only apply what they are told; they never read the
//! Southbound DB (`tests/tests/layering.rs` checks the imports).
//!
//! [`Datapath`] is what the daemon loop drives: apply a diff, plug and unplug a port, say which
//! ports are programmed and how many writes wait for a retry, retry, sweep what a previous agent
//! left, read the counters, and hand out the blocking upkeep it needs done off the loop.
//! [`PortAttacher`] is the backend's part of building a pod NIC: it runs on the CNI server's
//! blocking task (never on the loop, which must not wait for the kernel's rtnl lock; see
//! `ebpf::pod_filter` for the measured reason) and returns a [`PortAttachment`], the token the
//! plug carries to the loop.
//!
//! Architecture invariant: the daemon, the CNI server, the metrics and the control socket name no
//! backend type; only `bin/agent.rs` picks a backend and starts it.
//!
//! Why trait objects (`Box<dyn Datapath>`, `Arc<dyn PortAttacher>`) rather than generics: the
//! backend is chosen at run time (by flags, per node), and a generic parameter would spread
//! through the daemon, the CNI handler and their handles for no gain. The cost is one indirect
//! call per IR diff, per plug and per CNI ADD's attach: nothing beside the map writes and the
//! rtnl round trips those calls make (a CNI ADD takes milliseconds).

use std::{fmt, net::IpAddr, sync::Arc};

use crate::{net::Mac, pipeline::ir::IrDiffRef};

pub mod drops;
pub mod ebpf;
#[cfg(test)]
pub mod memory;
pub mod openflow;

pub use drops::{DropReport, DropTap};
/// The counters of one interface the datapath runs on (see the type for what each counts). A
/// plain record of eight totals: any backend can fill it.
pub use ovnbpf_common::InterfaceCounters;

/// A failure of the datapath backend, with the backend's own error (and its context) inside.
#[derive(Debug)]
pub struct DatapathError(Box<dyn std::error::Error + Send + Sync>);

impl DatapathError {
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(error.into())
    }
}

impl fmt::Display for DatapathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for DatapathError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Blocking work a backend needs done off the daemon loop (it takes kernel locks). Returns how
/// many items it fixed or failed, as its producer documents.
pub type OffLoopJob = Box<dyn FnOnce() -> usize + Send>;

/// What one sweep of the connection table found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectionSweep {
    /// Expired connections it deleted.
    pub removed: usize,
    /// Connections still live in the table after it.
    pub live: usize,
    /// Connections the table holds.
    pub capacity: usize,
    /// Translations of balanced connections (two entries a connection) still live after it
    /// (the load balancers' table, swept in the same pass).
    pub balanced_live: usize,
    /// Translations of connections that were over, deleted.
    pub balanced_removed: usize,
}

/// The off-loop sweep of the connection table; `None` when it failed (logged by the backend).
pub type SweepJob = Box<dyn FnOnce() -> Option<ConnectionSweep> + Send>;

/// A task following one of the datapath's event streams (drops, ACL logs, heard neighbours)
/// until dropped.
pub type DropFollower = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// An ARP sender a logical router heard of and does not know at that MAC (OVN's
/// `lookup_arp` missed): the daemon decides whether the router learns it (`put_arp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeardNeighbour {
    /// The router's datapath tunnel key.
    pub router: u32,
    /// The MAC the packet was addressed to: the router port it entered by.
    pub router_mac: Mac,
    /// The sender's address and MAC (`arp.spa`, `arp.sha`).
    pub ip: IpAddr,
    pub mac: Mac,
    /// An ARP request (else a reply).
    pub request: bool,
}

/// Where a backend hands the neighbours its routers heard of.
pub type NeighbourSink = tokio::sync::mpsc::Sender<HeardNeighbour>;

/// Per interface: (interface, the logical port of a pod's interface, its counters).
pub type InterfaceReading = (String, Option<String>, InterfaceCounters);

/// The datapath of this node as the daemon loop drives it. Writes that fail are kept and retried
/// ([`Self::pending`], [`Self::retry`]); every method returning a count returns the writes made.
pub trait Datapath: Send {
    /// Which datapath this is (`ebpf`, `openflow`), for logs and metrics.
    fn kind(&self) -> &'static str;

    /// Takes in an IR diff and writes what it changes.
    fn apply(&mut self, diff: &IrDiffRef<'_>) -> Result<usize, DatapathError>;

    /// Takes in IR diffs, in order, and writes what they change together, once (never a state
    /// between them).
    fn apply_all(&mut self, diffs: &[IrDiffRef<'_>]) -> Result<usize, DatapathError> {
        let mut writes = 0;
        for diff in diffs {
            writes += self.apply(diff)?;
        }
        Ok(writes)
    }

    /// Forwards for `port` through host interface `interface`, which the backend's
    /// [`PortAttacher`] prepared (`attachment`). The port stays plugged when its writes fail.
    fn plug(
        &mut self,
        port: &str,
        interface: &str,
        attachment: PortAttachment,
    ) -> Result<usize, DatapathError>;

    /// Stops forwarding for `port` (nothing to do when it is not plugged).
    fn unplug(&mut self, port: &str) -> Result<usize, DatapathError>;

    /// The host interface `port` is plugged into.
    fn interface_of(&self, port: &str) -> Option<String>;

    /// Whether `port` is programmed: its interface forwards and receives (its `up`).
    fn programmed(&self, port: &str) -> bool;

    /// Writes that failed and wait for a retry (`nb_cfg` is not acknowledged while there are).
    fn pending(&self) -> usize;

    /// Whether the backend took over a previous agent's programmed state (which forwards until
    /// this agent's view is complete: see the daemon's hold of its writes).
    fn adopted(&self) -> bool {
        false
    }

    /// Retries the writes that failed.
    fn retry(&mut self) -> Result<usize, DatapathError>;

    /// Removes what this agent did not install (a previous agent's stale state); called once the
    /// Southbound view is complete. Returns the number removed.
    fn sweep(&mut self) -> Result<usize, DatapathError>;

    /// Datapaths the backend does not translate whole, per effect (`partial`: some of their
    /// traffic dropped where OVN forwards it; `fenced`: not forwarded at all). Backends that
    /// translate the whole IR have none.
    fn untranslated_datapaths(&self) -> Vec<(&'static str, usize)> {
        Vec::new()
    }

    /// Dropped frames per reason.
    fn drop_counters(&self) -> Result<Vec<(&'static str, u64)>, DatapathError>;

    /// The answers the datapath's routers sent, per kind.
    fn router_replies(&self) -> Result<Vec<(&'static str, u64)>, DatapathError>;

    /// Packets logged ACLs decided, per verdict (`allow`, `drop`, `reject`), and log events
    /// lost (`lost`).
    fn acl_logged(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(Vec::new())
    }

    /// Connections the connection table committed (`inserted`) and failed to (`insert_failed`).
    fn conntrack_counters(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(Vec::new())
    }

    /// New connections the load balancers balanced (`balanced`), of them the ones session
    /// affinity placed (`affinity`) and hairpins (`hairpin`), and translations not stored
    /// (`insert_failed`).
    fn lb_counters(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(Vec::new())
    }

    /// What the socket-level balancer did: connects and datagrams sent to a backend instead
    /// of a VIP (`connect`, `sendmsg`), backends shown as their VIP (`reversed`), VIPs left
    /// to the per-packet balancer (`left`), reverse entries not stored (`insert_failed`).
    fn socket_lb_counters(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(Vec::new())
    }

    /// Walks of ACL rule lists the verdict cache answered (`hit`) and walks done (`miss`).
    fn acl_verdict_cache(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(Vec::new())
    }

    /// The counters of each interface the datapath runs on and has seen traffic on, by name.
    fn interface_counters(&self) -> Result<Vec<InterfaceReading>, DatapathError>;

    /// Whether the datapath enforces the ACLs the compiler translated (the ones it could not
    /// are reported either way).
    fn enforces_acls(&self) -> bool {
        false
    }

    /// Whether ACLs that do not translate are let through (`--unsupported-acl=allow`) rather
    /// than failing their switch closed.
    fn acls_fail_open(&self) -> bool {
        false
    }

    /// Flood groups with more members than the datapath installs (those beyond its limit get
    /// no flooded frames; each such group is logged as an error).
    fn truncated_flood_groups(&self) -> usize {
        0
    }

    /// What prepares new pods' interfaces for this datapath (for the CNI server).
    fn attacher(&self) -> Arc<dyn PortAttacher>;

    /// The job that re-attaches the datapath to plugged interfaces that lost it (returns how many
    /// it restored); `None` when there is nothing to check.
    fn attachment_check(&self) -> Option<OffLoopJob>;

    /// The job that deletes the connections whose lifetime ran out from the datapath's
    /// connection table (returns how many went and how many live on); `None` when there is
    /// none to sweep.
    fn connection_sweep(&self) -> Option<SweepJob> {
        None
    }

    /// The job that keeps the next hops towards `endpoints` (other chassis's tunnel IPs)
    /// resolved (returns how many could not be); `None` when the backend needs none.
    fn tunnel_neighbours(&self, endpoints: Vec<IpAddr>) -> Option<OffLoopJob>;

    /// The task that publishes every drop event on `tap`, logging at most `per_second` a second;
    /// `None` after the first call, or when the backend has no drop events.
    fn drop_events(&mut self, per_second: u32, tap: DropTap) -> Option<DropFollower>;

    /// The task that logs what logged ACLs decided (OVN's `acl_log` lines), at most
    /// `per_second` lines a second; `None` after the first call, or when the backend has none.
    fn acl_log_events(&mut self, _per_second: u32) -> Option<DropFollower> {
        None
    }

    /// The task that hands every ARP sender the routers heard of and do not know to `sink`
    /// (MAC learning; a full sink loses the report, the sender's next ARP reports it again);
    /// `None` after the first call, or when the backend reports none.
    fn neighbour_events(&mut self, _sink: NeighbourSink) -> Option<DropFollower> {
        None
    }
}

/// The backend's side of building a pod NIC, run on the CNI server's blocking tasks. Cheap to
/// share; every method may block (kernel locks).
pub trait PortAttacher: Send + Sync {
    /// What it attaches, for messages (eBPF: `from_pod`).
    fn name(&self) -> &'static str;

    /// Makes host interface `ifindex` (of the caller's namespace) ready to be plugged; replaces
    /// what a previous agent attached.
    fn attach(&self, ifindex: u32) -> Result<PortAttachment, DatapathError>;

    /// Whether host interface `ifindex` is attached (CNI CHECK).
    fn is_attached(&self, ifindex: u32) -> Result<bool, DatapathError>;
}

/// A host interface a [`PortAttacher`] prepared: the token a plug carries from the CNI server to
/// the loop. Only attachers make one.
#[derive(Debug, PartialEq, Eq)]
pub struct PortAttachment {
    ifindex: u32,
    netns: Option<u64>,
}

impl PortAttachment {
    /// For [`PortAttacher`] implementations: interface `ifindex` is attached.
    pub(crate) fn attached(ifindex: u32) -> Self {
        Self {
            ifindex,
            netns: None,
        }
    }

    /// The pod behind the interface lives in the network namespace of cookie `netns`
    /// (`SO_NETNS_COOKIE`), which the socket-level balancer knows its sockets by.
    #[must_use]
    pub fn in_netns(self, netns: u64) -> Self {
        Self {
            netns: Some(netns),
            ..self
        }
    }

    /// The pod's network namespace cookie, when the CNI server knows it.
    #[must_use]
    pub fn netns(&self) -> Option<u64> {
        self.netns
    }

    #[must_use]
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
}
