//! The eBPF backend behind the agent's [`Datapath`] and [`PortAttacher`] interfaces: each method
//! hands over to [`NodeDatapath`] or [`PodFilters`] (which keep their own documentation and
//! stay usable directly, as the kernel tests do), and the backend's errors become
//! [`DatapathError`]s. Owns nothing.

use std::{net::IpAddr, sync::Arc};

use tracing::Instrument;

use super::{
    EbpfError,
    node::{self, NodeDatapath, NodeDatapathError},
    pod_filter::{self, PodFilterError, PodFilters},
};
use crate::{
    dataplane::{
        Datapath, DatapathError, DropFollower, DropTap, InterfaceReading, NeighbourSink,
        OffLoopJob, PortAttacher, PortAttachment, SweepJob,
    },
    pipeline::ir::IrDiffRef,
};

impl From<EbpfError> for DatapathError {
    fn from(error: EbpfError) -> Self {
        DatapathError::new(error)
    }
}

impl From<NodeDatapathError> for DatapathError {
    fn from(error: NodeDatapathError) -> Self {
        DatapathError::new(error)
    }
}

impl From<PodFilterError> for DatapathError {
    fn from(error: PodFilterError) -> Self {
        DatapathError::new(error)
    }
}

impl Datapath for NodeDatapath {
    fn kind(&self) -> &'static str {
        "ebpf"
    }

    fn apply(&mut self, diff: &IrDiffRef<'_>) -> Result<usize, DatapathError> {
        Ok(NodeDatapath::apply(self, diff)?)
    }

    fn plug(
        &mut self,
        port: &str,
        interface: &str,
        attachment: PortAttachment,
    ) -> Result<usize, DatapathError> {
        Ok(NodeDatapath::plug(self, port, interface, attachment)?)
    }

    fn unplug(&mut self, port: &str) -> Result<usize, DatapathError> {
        Ok(NodeDatapath::unplug(self, port)?)
    }

    fn interface_of(&self, port: &str) -> Option<String> {
        NodeDatapath::interface_of(self, port).map(str::to_string)
    }

    fn programmed(&self, port: &str) -> bool {
        NodeDatapath::programmed(self, port)
    }

    fn pending(&self) -> usize {
        NodeDatapath::pending(self)
    }

    fn adopted(&self) -> bool {
        NodeDatapath::adopted(self)
    }

    fn apply_all(&mut self, diffs: &[IrDiffRef<'_>]) -> Result<usize, DatapathError> {
        Ok(NodeDatapath::apply_all(self, diffs)?)
    }

    fn retry(&mut self) -> Result<usize, DatapathError> {
        Ok(NodeDatapath::retry(self)?)
    }

    fn sweep(&mut self) -> Result<usize, DatapathError> {
        Ok(NodeDatapath::sweep(self)?)
    }

    fn drop_counters(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(NodeDatapath::drop_counters(self)?)
    }

    fn router_replies(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(NodeDatapath::router_replies(self)?)
    }

    fn acl_logged(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(NodeDatapath::acl_logged(self)?)
    }

    fn conntrack_counters(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(NodeDatapath::conntrack_counters(self)?)
    }

    fn lb_counters(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(NodeDatapath::lb_counters(self)?)
    }

    fn socket_lb_counters(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(NodeDatapath::socket_lb_counters(self)?)
    }

    fn acl_verdict_cache(&self) -> Result<Vec<(&'static str, u64)>, DatapathError> {
        Ok(NodeDatapath::acl_verdict_cache(self)?)
    }

    fn interface_counters(&self) -> Result<Vec<InterfaceReading>, DatapathError> {
        Ok(NodeDatapath::interface_counters(self)?)
    }

    fn truncated_flood_groups(&self) -> usize {
        NodeDatapath::truncated_flood_groups(self)
    }

    fn enforces_acls(&self) -> bool {
        true
    }

    fn acls_fail_open(&self) -> bool {
        NodeDatapath::acls_fail_open(self)
    }

    fn attacher(&self) -> Arc<dyn PortAttacher> {
        Arc::new(self.pod_filters())
    }

    /// `from_pod` on every plugged pod veth that lost its filter (an operator's or a tool's `tc`
    /// removed it; a tcx link could not be removed that way).
    fn attachment_check(&self) -> Option<OffLoopJob> {
        let interfaces = self.plugged_interfaces();
        if interfaces.is_empty() {
            return None;
        }
        let filters = self.pod_filters();
        Some(Box::new(move || {
            pod_filter::restore_missing(&filters, &interfaces)
        }))
    }

    /// Expired connections out of the pinned `CONNTRACK` (unpinned, the table is only the
    /// kernel's: its LRU makes room).
    fn connection_sweep(&self) -> Option<SweepJob> {
        let root = self.pin_root()?.to_path_buf();
        Some(Box::new(move || {
            super::conntrack::sweep_pinned(&root)
                .inspect_err(|error| tracing::warn!(%error, "sweeping expired connections"))
                .ok()
        }))
    }

    /// See [`node::resolve_tunnel_neighbours`]: flood copies cannot resolve their next hop.
    fn tunnel_neighbours(&self, endpoints: Vec<IpAddr>) -> Option<OffLoopJob> {
        Some(Box::new(move || {
            node::resolve_tunnel_neighbours(&endpoints)
        }))
    }

    fn drop_events(&mut self, per_second: u32, tap: DropTap) -> Option<DropFollower> {
        let events = self.take_drop_events()?;
        Some(Box::pin(events.follow(per_second, tap).in_current_span()))
    }

    fn acl_log_events(&mut self, per_second: u32) -> Option<DropFollower> {
        let events = self.take_acl_log_events()?;
        Some(Box::pin(events.follow(per_second).in_current_span()))
    }

    fn neighbour_events(&mut self, sink: NeighbourSink) -> Option<DropFollower> {
        let events = self.take_neighbour_events()?;
        Some(Box::pin(events.follow(sink).in_current_span()))
    }
}

impl PortAttacher for PodFilters {
    fn name(&self) -> &'static str {
        "from_pod"
    }

    fn attach(&self, ifindex: u32) -> Result<PortAttachment, DatapathError> {
        Ok(PodFilters::attach(self, ifindex)?)
    }

    fn is_attached(&self, ifindex: u32) -> Result<bool, DatapathError> {
        crate::netlink::Socket::open()
            .and_then(|socket| pod_filter::is_attached(&socket, ifindex))
            .map_err(|error| {
                DatapathError::new(format!(
                    "reading the filters of interface index {ifindex}: {error}"
                ))
            })
    }
}
