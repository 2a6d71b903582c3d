//! `from_pod` on pods' host veths, as a direct-action cls_bpf filter on clsact ingress
//! ([`crate::netlink::IngressFilter`]) rather than a tcx link. Why: a tcx attach waits for a
//! full RCU grace period (`synchronize_rcu` in `tcx_link_prog_attach`, about 15 ms here) while it
//! holds the kernel's rtnl lock, so concurrent ADDs queue behind each other's attach (ADD p99
//! about 200 ms at 10 at a time); the filter waits at most for an expedited grace period (ADD p99
//! about 60 ms, `cargo xtask bench cni`). The filter lives with the veth and needs no pin: it
//! outlives the agent, a restarted agent replaces its program atomically ([`PodFilters::attach`]
//! again), and deleting the veth removes it. Attaching works from any thread with a duplicate of
//! the program's descriptor, so the CNI server's blocking tasks do it and the daemon loop never
//! waits for rtnl. Owns the filter's identity ([`FILTER`]); touches only that filter on the
//! interfaces it is given.

use std::{
    io,
    os::fd::{AsFd, OwnedFd},
    sync::Arc,
};

use crate::{
    dataplane::PortAttachment,
    netlink::{IngressFilter, Socket},
};

/// The agent's filter on every pod's host veth: first on clsact ingress, recognised by its name.
pub const FILTER: IngressFilter<'static> = IngressFilter {
    priority: 1,
    handle: 1,
    name: "ovnbpf_from_pod",
};

/// Why `from_pod` could not be attached to, or removed from, a pod's veth.
#[derive(Debug, thiserror::Error)]
pub enum PodFilterError {
    #[error("attaching from_pod to interface index {ifindex}: {source}")]
    Attach { ifindex: u32, source: io::Error },
    #[error("removing from_pod from interface index {ifindex}: {source}")]
    Detach { ifindex: u32, source: io::Error },
    #[error("listing the interfaces: {0}")]
    List(#[source] io::Error),
}

/// Attaches `from_pod` from any thread. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PodFilters {
    program: Arc<OwnedFd>,
}

impl PodFilters {
    /// `program` is a descriptor of the loaded `from_pod`.
    #[must_use]
    pub fn new(program: OwnedFd) -> Self {
        Self {
            program: Arc::new(program),
        }
    }

    /// Runs `from_pod` on ingress of interface `ifindex` (of the caller's namespace): the filter
    /// is created, or its program replaced atomically when a previous agent left one. Blocking
    /// (rtnl): call from a blocking task. The attachment shows that `from_pod` runs there.
    pub fn attach(&self, ifindex: u32) -> Result<PortAttachment, PodFilterError> {
        let error = |source| PodFilterError::Attach { ifindex, source };
        let socket = Socket::open().map_err(error)?;
        socket.ensure_clsact(ifindex).map_err(error)?;
        socket
            .set_ingress_filter(ifindex, &FILTER, self.program.as_fd())
            .map_err(error)?;
        Ok(PortAttachment::attached(ifindex))
    }
}

/// Whether interface `ifindex` of the caller's namespace runs the agent's filter (one of
/// another name at its place does not count).
pub fn is_attached(socket: &Socket, ifindex: u32) -> io::Result<bool> {
    Ok(socket
        .ingress_filter_name(ifindex, &FILTER)?
        .is_some_and(|name| name == FILTER.name))
}

/// Removes the agent's filter from interface `ifindex` of the caller's namespace, if it has it.
/// Returns whether one went.
pub fn detach(socket: &Socket, ifindex: u32) -> Result<bool, PodFilterError> {
    let error = |source| PodFilterError::Detach { ifindex, source };
    if !is_attached(socket, ifindex).map_err(error)? {
        return Ok(false);
    }
    socket
        .delete_ingress_filter(ifindex, &FILTER)
        .map_err(error)
}

/// Attaches `from_pod` again to each of `interfaces` (name, index) that lost its filter; an
/// interface that is gone is skipped (its pod is being deleted). Returns how many were restored.
pub fn restore_missing(filters: &PodFilters, interfaces: &[(String, u32)]) -> usize {
    let socket = match Socket::open() {
        Ok(socket) => socket,
        Err(error) => {
            tracing::warn!(%error, "cannot check the pods' filters");
            return 0;
        }
    };
    let mut restored = 0;
    for (interface, index) in interfaces {
        match is_attached(&socket, *index) {
            Ok(true) => continue,
            Ok(false) => {}
            Err(error) => {
                tracing::debug!(interface, %error, "cannot read a pod's filter");
                continue;
            }
        }
        match filters.attach(*index) {
            Ok(_) => {
                tracing::warn!(
                    interface,
                    "from_pod had been removed from a pod's veth; attached it again"
                );
                restored += 1;
            }
            Err(error) => tracing::debug!(interface, %error, "cannot attach from_pod again"),
        }
    }
    restored
}

/// Removes the agent's filter from every interface of the caller's namespace (uninstall).
/// Returns how many went.
pub fn detach_everywhere() -> Result<usize, PodFilterError> {
    let socket = Socket::open().map_err(PodFilterError::List)?;
    let mut removed = 0;
    for ifindex in interface_indexes().map_err(PodFilterError::List)? {
        if detach(&socket, ifindex)? {
            removed += 1;
        }
    }
    Ok(removed)
}

/// The index of every interface of the caller's namespace.
fn interface_indexes() -> io::Result<Vec<u32>> {
    // SAFETY: if_nameindex returns an array ending in a zero entry, or null; it is read up to
    // that entry and freed once.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return Err(io::Error::last_os_error());
        }
        let mut indexes = Vec::new();
        let mut entry = list;
        while (*entry).if_index != 0 {
            indexes.push((*entry).if_index);
            entry = entry.add(1);
        }
        libc::if_freenameindex(list);
        Ok(indexes)
    }
}
