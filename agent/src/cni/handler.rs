//! The CNI operations, in Kube-OVN's API: ADD (bind the logical port, build the NIC, plug it into
//! the datapath, wait until the Port_Binding is up), DEL (unplug, release, remove the NIC; always
//! idempotent), CHECK, STATUS and GC. Operations on one pod are serialised; different pods run
//! concurrently. Talks to the daemon loop through a [`DaemonHandle`], builds NICs with
//! [`plumbing`], has the datapath's [`PortAttacher`] prepare them (on the blocking task that
//! builds them, off the loop), and records attachments in the [`AttachmentStore`].

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use ovnbpf_cni::wire::{
    Attachment, CniRequest, CniResponse, IpConfig, Ipv4Route, Route, host_interface_name,
    logical_port_name,
};
use tracing::{info, warn};

use super::{
    plumbing::{self, NicAddress, PlumbingError, PodNic},
    store::{AttachmentRecord, AttachmentStore},
};
use crate::{
    daemon::ports::{DaemonHandle, FamilyFacts, PortError, PortFacts},
    dataplane::PortAttacher,
    net::{Ipv4Prefix, Ipv6Prefix},
};

/// A port's address of one family as its NIC gets it: with the default route via its gateway.
fn nic_address<A>(facts: FamilyFacts<A>) -> NicAddress<A> {
    NicAddress {
        ip: facts.ip,
        prefix_len: facts.prefix_len,
        gateway: Some(facts.gateway),
    }
}

/// The ADD result's addresses, IPv4 first, as Kube-OVN lists them: the address, its subnet
/// (host bits cleared) and its gateway.
fn ip_configs(facts: &PortFacts) -> Vec<IpConfig> {
    let ipv4 = facts.ipv4.map(|a| {
        let subnet = Ipv4Prefix {
            network: a.ip,
            length: a.prefix_len,
        };
        let network = std::net::Ipv4Addr::from(u32::from(a.ip) & subnet.mask());
        IpConfig {
            protocol: "IPv4".into(),
            ip: a.ip.to_string(),
            cidr: format!("{network}/{}", a.prefix_len),
            gateway: a.gateway.to_string(),
        }
    });
    let ipv6 = facts.ipv6.map(|a| {
        let subnet = Ipv6Prefix {
            network: a.ip,
            length: a.prefix_len,
        };
        let network = std::net::Ipv6Addr::from(u128::from(a.ip) & subnet.mask());
        IpConfig {
            protocol: "IPv6".into(),
            ip: a.ip.to_string(),
            cidr: format!("{network}/{}", a.prefix_len),
            gateway: a.gateway.to_string(),
        }
    });
    ipv4.into_iter().chain(ipv6).collect()
}

/// Why an operation failed; the server turns it into an HTTP status and the error string.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("{0}")]
    Failed(String),
    #[error("not ready: {0}")]
    NotReady(String),
    /// The pod cannot be served as configured; a retry fails the same way.
    #[error("{0}")]
    Unservable(String),
}

impl From<PortError> for HandlerError {
    fn from(error: PortError) -> Self {
        match error {
            PortError::Unservable(reason) => HandlerError::Unservable(reason),
            other => HandlerError::Failed(other.to_string()),
        }
    }
}

/// How the handler is set up.
#[derive(Clone, Debug)]
pub struct HandlerConfig {
    /// MTU of pod NICs.
    pub mtu: u32,
    /// How long ADD waits for the Port_Binding, and then for it to be up.
    pub port_wait: Duration,
    /// GC leaves attachments younger than this alone (the runtime's list of valid attachments
    /// may predate them).
    pub gc_grace: Duration,
}

/// The CNI operations of one agent.
pub struct Handler {
    daemon: DaemonHandle,
    /// Prepares new NICs for the datapath on the blocking task that builds them; `None` when the
    /// agent does not forward (ADD is refused).
    attacher: Option<Arc<dyn PortAttacher>>,
    store: AttachmentStore,
    config: HandlerConfig,
    /// One lock per logical port, so ADD and DEL of the same pod never interleave.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Milliseconds since the epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Milliseconds since `start`, for the operation logs.
fn elapsed_ms(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

impl Handler {
    #[must_use]
    pub fn new(
        daemon: DaemonHandle,
        attacher: Option<Arc<dyn PortAttacher>>,
        store: AttachmentStore,
        config: HandlerConfig,
    ) -> Self {
        Self {
            daemon,
            attacher,
            store,
            config,
            locks: Mutex::new(HashMap::new()),
        }
    }

    fn lock_for(&self, port: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = match self.locks.lock() {
            Ok(locks) => locks,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Locks of finished operations are dropped, so the map holds only live pods.
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        Arc::clone(locks.entry(port.to_string()).or_default())
    }

    /// The request's routes (the network configuration's), parsed.
    fn routes(request: &CniRequest) -> Result<Vec<Ipv4Route>, HandlerError> {
        request
            .routes
            .iter()
            .map(|route| route.parse_ipv4().map_err(HandlerError::BadRequest))
            .collect()
    }

    fn names(request: &CniRequest) -> Result<(String, String, String), HandlerError> {
        for (field, value) in [
            ("pod_name", &request.pod_name),
            ("pod_namespace", &request.pod_namespace),
            ("container_id", &request.container_id),
        ] {
            if value.is_empty() {
                return Err(HandlerError::BadRequest(format!("{field} is empty")));
            }
        }
        // These end up in interface names, paths and `ip` commands.
        let plain = |text: &str| {
            text.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !plain(&request.container_id) {
            return Err(HandlerError::BadRequest(format!(
                "container_id {:?} has characters other than letters, digits, '-', '_' and '.'",
                request.container_id
            )));
        }
        if !request.net_ns.is_empty()
            && (!request.net_ns.starts_with('/')
                || request
                    .net_ns
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(HandlerError::BadRequest(format!(
                "net_ns {:?} is not an absolute path",
                request.net_ns
            )));
        }
        let if_name = if request.if_name.is_empty() {
            "eth0".to_string()
        } else {
            request.if_name.clone()
        };
        // Longer names would leave too little of the container ID in the host veth's name.
        if if_name.len() > 11 || !plain(&if_name) {
            return Err(HandlerError::BadRequest(format!(
                "interface name {if_name:?} is not a valid Linux interface name"
            )));
        }
        let port = logical_port_name(&request.pod_name, &request.pod_namespace, &request.provider);
        let host = host_interface_name(&request.container_id, &if_name);
        Ok((port, host, if_name))
    }

    /// ADD: see the module doc. Any failure after the NIC exists removes it again.
    pub async fn add(&self, request: &CniRequest) -> Result<CniResponse, HandlerError> {
        let start = Instant::now();
        let (port, host, if_name) = Self::names(request)?;
        if request.net_ns.is_empty() {
            return Err(HandlerError::BadRequest("net_ns is empty".into()));
        }
        let routes = Self::routes(request)?;
        let Some(attacher) = self.attacher.clone() else {
            return Err(HandlerError::Unservable(
                "this agent does not forward (started without --uplink)".into(),
            ));
        };
        let lock = self.lock_for(&port);
        let _guard = lock.lock().await;
        let locked_ms = elapsed_ms(start);
        let facts = match self.daemon.bind(&port, self.config.port_wait).await {
            Ok(facts) => facts,
            Err(error) => {
                let _ = self.daemon.unplug(&port, &host).await;
                return Err(error.into());
            }
        };
        let bound_ms = elapsed_ms(start);
        // A host veth of this name that another attachment owns is not ours to replace (a
        // leftover of this attachment, or of none, is).
        let taken = plumbing::host_interface_exists(&host)
            && self.store.all().into_iter().any(|r| {
                r.host_interface == host
                    && (r.container_id != request.container_id || r.if_name != if_name)
            });
        if taken {
            let _ = self.daemon.unplug(&port, &host).await;
            return Err(HandlerError::Failed(format!(
                "host interface {host} belongs to another attachment"
            )));
        }
        let nic = PodNic {
            netns: PathBuf::from(&request.net_ns),
            host_interface: host.clone(),
            pod_interface: if_name.clone(),
            mac: facts.mac.clone(),
            mtu: self.config.mtu,
            ipv4: facts.ipv4.map(nic_address),
            ipv6: facts.ipv6.map(nic_address),
            routes,
        };
        let routes = plumbing::routes_of(nic.gateway4(), &nic.routes)
            .into_iter()
            .map(|route| Route {
                dst: format!("{}/{}", route.destination, route.prefix_len),
                gw: route.gateway.map(|gw| gw.to_string()).unwrap_or_default(),
            })
            .chain(facts.ipv6.map(|ipv6| Route {
                dst: "::/0".into(),
                gw: ipv6.gateway.to_string(),
            }))
            .collect();
        let built = {
            let nic = nic.clone();
            tokio::task::spawn_blocking(move || {
                let built = plumbing::create(&nic).map_err(|error| match error {
                    PlumbingError::ConfiguredRoute { .. } => {
                        HandlerError::Unservable(error.to_string())
                    }
                    error => HandlerError::Failed(error.to_string()),
                })?;
                let attachment = attacher
                    .attach(built.host_index)
                    .map_err(|e| HandlerError::Failed(e.to_string()))
                    .map(|attachment| match built.netns_cookie() {
                        Ok(cookie) => attachment.in_netns(cookie),
                        Err(error) => {
                            // Its sockets are then balanced per packet only.
                            warn!(interface = nic.host_interface, %error, "cannot read the pod's namespace cookie");
                            attachment
                        }
                    });
                if attachment.is_err() {
                    let _ = plumbing::delete(&nic.host_interface);
                    return attachment;
                }
                // Best effort: the NIC works once they are up.
                if let Err(error) = plumbing::wait_until_up(&nic, &built) {
                    warn!(interface = nic.host_interface, %error, "cannot wait for the links");
                }
                attachment
            })
            .await
        };
        let linked_ms = elapsed_ms(start);
        let names = (
            request.container_id.as_str(),
            if_name.as_str(),
            port.as_str(),
            host.as_str(),
        );
        let attachment = match built {
            Ok(Ok(attachment)) => attachment,
            Ok(Err(error)) => return Err(self.rollback_with(names, error).await),
            Err(error) => {
                return Err(self
                    .rollback(names, format!("building the NIC: {error}"))
                    .await);
            }
        };
        let record = AttachmentRecord {
            container_id: request.container_id.clone(),
            if_name: if_name.clone(),
            netns: request.net_ns.clone(),
            logical_port: port.clone(),
            host_interface: host.clone(),
            created_ms: now_ms(),
        };
        if let Err(error) = self.store.save(&record) {
            let reason = format!("recording the attachment: {error}");
            return Err(self.rollback(names, reason).await);
        }
        if let Err(error) = self
            .daemon
            .plug(&port, &host, attachment, self.config.port_wait)
            .await
        {
            return Err(self.rollback(names, error.to_string()).await);
        }
        let _ = tokio::task::spawn_blocking(move || plumbing::announce(&nic)).await;
        info!(
            port,
            interface = host,
            ipv4 = ?facts.ipv4.map(|a| a.ip),
            ipv6 = ?facts.ipv6.map(|a| a.ip),
            locked_ms,
            bound_ms,
            linked_ms,
            ms = elapsed_ms(start),
            "CNI ADD done"
        );
        Ok(CniResponse {
            ips: ip_configs(&facts),
            mac_address: facts.mac,
            routes,
            mtu: self.config.mtu,
            nicname: if_name,
            dns: None,
            error: String::new(),
            host_mac: std::fs::read_to_string(format!("/sys/class/net/{host}/address"))
                .map(|mac| mac.trim().to_string())
                .unwrap_or_default(),
            host_interface: host,
        })
    }

    /// Undoes a failed ADD (unplug and release, remove the NIC and the record) and returns the
    /// error to report.
    async fn rollback(&self, names: (&str, &str, &str, &str), reason: String) -> HandlerError {
        self.rollback_with(names, HandlerError::Failed(reason))
            .await
    }

    /// Like [`Self::rollback`], reporting `error` as it is.
    async fn rollback_with(
        &self,
        (container_id, if_name, port, host): (&str, &str, &str, &str),
        error: HandlerError,
    ) -> HandlerError {
        if let Err(cleanup) = self.remove(container_id, if_name, port, host).await {
            warn!(port, error = %cleanup, "cleaning up after a failed ADD failed");
        }
        error
    }

    /// DEL: see the module doc. Succeeds when there is nothing (left) to remove.
    pub async fn del(&self, request: &CniRequest) -> Result<(), HandlerError> {
        let (port, host, if_name) = Self::names(request)?;
        let lock = self.lock_for(&port);
        let _guard = lock.lock().await;
        self.remove(&request.container_id, &if_name, &port, &host)
            .await
    }

    async fn remove(
        &self,
        container_id: &str,
        if_name: &str,
        port: &str,
        host: &str,
    ) -> Result<(), HandlerError> {
        let start = Instant::now();
        // The NIC and the record go even if the daemon could not unplug (it releases on its
        // next start: a missing interface is not restored).
        let unplugged = self.daemon.unplug(port, host).await;
        let unplugged_ms = elapsed_ms(start);
        let interface = host.to_string();
        tokio::task::spawn_blocking(move || plumbing::delete(&interface))
            .await
            .map_err(|e| HandlerError::Failed(format!("removing {host}: {e}")))?
            .map_err(|e| HandlerError::Failed(e.to_string()))?;
        self.store
            .remove(container_id, if_name)
            .map_err(|e| HandlerError::Failed(format!("forgetting the attachment: {e}")))?;
        unplugged?;
        info!(
            port,
            interface = host,
            unplugged_ms,
            ms = elapsed_ms(start),
            "CNI DEL done"
        );
        Ok(())
    }

    /// CHECK: the NIC has the port's MAC, address and default route, and the datapath forwards
    /// for it with the Port_Binding up.
    pub async fn check(&self, request: &CniRequest) -> Result<(), HandlerError> {
        let (port, host, if_name) = Self::names(request)?;
        let configured_routes = Self::routes(request)?;
        let lock = self.lock_for(&port);
        let _guard = lock.lock().await;
        let Some(record) = self.store.get(&request.container_id, &if_name) else {
            return Err(HandlerError::Failed(format!(
                "no attachment of container {} as {if_name}",
                request.container_id
            )));
        };
        if record.logical_port != port {
            return Err(HandlerError::Failed(format!(
                "container {} is attached as {}, not {port}",
                request.container_id, record.logical_port
            )));
        }
        let facts = self.daemon.facts(&port).await?;
        let netns = PathBuf::from(&request.net_ns);
        let name = if_name.clone();
        let host_interface = host.clone();
        let attacher = self.attacher.clone();
        let (state, attached) = tokio::task::spawn_blocking(move || {
            let state = plumbing::inspect(&netns, &name).map_err(|e| e.to_string())?;
            let attached = attacher.map(|attacher| {
                let attached = plumbing::host_ifindex(&host_interface)
                    .map_err(|e| e.to_string())
                    .and_then(|index| attacher.is_attached(index).map_err(|e| e.to_string()));
                (attacher.name(), attached)
            });
            Ok::<_, String>((state, attached))
        })
        .await
        .map_err(|e| HandlerError::Failed(e.to_string()))?
        .map_err(HandlerError::Failed)?;
        let mut problems = Vec::new();
        if !state.mac.eq_ignore_ascii_case(&facts.mac) {
            problems.push(format!("MAC {} instead of {}", state.mac, facts.mac));
        }
        let addresses = facts
            .ipv4
            .map(|a| format!("{}/{}", a.ip, a.prefix_len))
            .into_iter()
            .chain(facts.ipv6.map(|a| format!("{}/{}", a.ip, a.prefix_len)));
        for address in addresses {
            if !state.addresses.contains(&address) {
                problems.push(format!("addresses {:?} lack {address}", state.addresses));
            }
        }
        if let Some(ipv6) = facts.ipv6
            && state.default_gateway6 != Some(ipv6.gateway)
        {
            problems.push(format!(
                "the IPv6 default route is via {} instead of {}",
                state
                    .default_gateway6
                    .map_or("nothing".into(), |gw| gw.to_string()),
                ipv6.gateway
            ));
        }
        let gateway4 = facts.ipv4.map(|a| a.gateway);
        for route in plumbing::routes_of(gateway4, &configured_routes) {
            if !state.routes.contains(&route) {
                problems.push(format!(
                    "no route to {}/{} via {}",
                    route.destination,
                    route.prefix_len,
                    route.gateway.map_or("the link".into(), |gw| gw.to_string())
                ));
            }
        }
        match attached {
            Some((_, Ok(true))) => {}
            Some((what, Ok(false))) => problems.push(format!("{what} is not attached to {host}")),
            Some((what, Err(error))) => problems.push(format!(
                "cannot tell whether {what} is attached to {host}: {error}"
            )),
            None => problems.push("this agent does not forward (started without --uplink)".into()),
        }
        let status = self.daemon.status(Some(&port)).await?;
        if !status.programmed {
            problems.push(format!("the datapath does not forward for {port} ({host})"));
        }
        if !status.up {
            problems.push(format!("Port_Binding {port} is not bound here and up"));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(HandlerError::Failed(problems.join("; ")))
        }
    }

    /// STATUS: ready once the Southbound is synced and the datapath loaded.
    pub async fn status(&self) -> Result<(), HandlerError> {
        let status = self
            .daemon
            .status(None)
            .await
            .map_err(|e| HandlerError::NotReady(e.to_string()))?;
        if status.ready {
            Ok(())
        } else {
            Err(HandlerError::NotReady(
                "the Southbound is not synced or the datapath is not loaded yet".into(),
            ))
        }
    }

    /// The sweep: removes every attachment whose network namespace (its recorded CNI_NETNS
    /// path) no longer exists: the runtime deleted the sandbox and its DEL never reached this
    /// agent (a chained plugin failed before ovnbpf's DEL, the runtime gave up, the node
    /// rebooted). Records without a path are left to DEL and GC. Each removal re-checks under the
    /// pod's lock, so an ADD or DEL in flight is never undone. Returns how many it removed.
    pub async fn sweep_gone_namespaces(&self) -> usize {
        let store = self.store.clone();
        let gone = tokio::task::spawn_blocking(move || {
            store
                .all()
                .into_iter()
                .filter(|record| namespace_is_gone(&record.netns))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let mut removed = 0;
        for record in gone {
            let lock = self.lock_for(&record.logical_port);
            let _guard = lock.lock().await;
            let unchanged = self
                .store
                .get(&record.container_id, &record.if_name)
                .is_some_and(|now| now == record);
            if !unchanged || !namespace_is_gone(&record.netns) {
                continue;
            }
            match self
                .remove(
                    &record.container_id,
                    &record.if_name,
                    &record.logical_port,
                    &record.host_interface,
                )
                .await
            {
                Ok(()) => {
                    info!(
                        port = record.logical_port,
                        container = record.container_id,
                        netns = record.netns,
                        interface = record.host_interface,
                        "swept an attachment whose network namespace is gone"
                    );
                    removed += 1;
                }
                Err(error) => warn!(
                    port = record.logical_port,
                    container = record.container_id,
                    %error,
                    "the sweep could not remove an attachment"
                ),
            }
        }
        removed
    }

    /// GC: removes every attachment the runtime no longer lists.
    pub async fn gc(&self, valid: &[Attachment]) -> Result<usize, HandlerError> {
        let valid: HashSet<(&str, &str)> = valid
            .iter()
            .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
            .collect();
        // The runtime built its list before calling: an attachment made since is not in it and
        // must stay.
        let started_ms = now_ms();
        let mut removed = 0;
        for record in self.store.all() {
            if valid.contains(&(record.container_id.as_str(), record.if_name.as_str()))
                || record.created_ms
                    >= started_ms.saturating_sub(self.config.gc_grace.as_millis() as u64)
            {
                continue;
            }
            let lock = self.lock_for(&record.logical_port);
            let _guard = lock.lock().await;
            match self
                .remove(
                    &record.container_id,
                    &record.if_name,
                    &record.logical_port,
                    &record.host_interface,
                )
                .await
            {
                Ok(()) => removed += 1,
                Err(error) => {
                    warn!(container = record.container_id, %error, "GC could not remove an attachment")
                }
            }
        }
        Ok(removed)
    }
}

/// Whether `netns` names a network namespace path that no longer exists. An empty path says
/// nothing, and neither does a path whose directory this agent cannot see (e.g. a runtime's
/// namespace directory not mounted into its container): only a missing file in a directory that
/// is there counts.
fn namespace_is_gone(netns: &str) -> bool {
    let path = std::path::Path::new(netns);
    let directory_visible = path.parent().is_some_and(|dir| dir.is_dir());
    !netns.is_empty()
        && directory_visible
        && matches!(
            std::fs::symlink_metadata(path),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound
        )
}

#[cfg(test)]
mod tests {
    use super::{FamilyFacts, PortFacts, ip_configs, namespace_is_gone};

    #[test]
    fn a_dual_stack_result_lists_ipv4_then_ipv6_with_their_subnets() {
        let facts = PortFacts {
            mac: "0a:58:0a:00:01:05".into(),
            ipv4: Some(FamilyFacts {
                ip: "10.0.1.5".parse().unwrap(),
                prefix_len: 24,
                gateway: "10.0.1.1".parse().unwrap(),
            }),
            ipv6: Some(FamilyFacts {
                ip: "fd00:10:1::5".parse().unwrap(),
                prefix_len: 64,
                gateway: "fd00:10:1::1".parse().unwrap(),
            }),
        };
        let ips = ip_configs(&facts);
        let shown: Vec<_> = ips
            .iter()
            .map(|ip| {
                (
                    ip.protocol.as_str(),
                    ip.ip.as_str(),
                    ip.cidr.as_str(),
                    ip.gateway.as_str(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("IPv4", "10.0.1.5", "10.0.1.0/24", "10.0.1.1"),
                ("IPv6", "fd00:10:1::5", "fd00:10:1::/64", "fd00:10:1::1"),
            ]
        );
        let ipv6_only = PortFacts {
            ipv4: None,
            ..facts
        };
        assert_eq!(ip_configs(&ipv6_only).len(), 1);
        assert_eq!(ip_configs(&ipv6_only)[0].protocol, "IPv6");
    }

    #[test]
    fn only_a_missing_file_in_a_visible_directory_is_a_gone_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let present = dir.path().join("cni-present");
        std::fs::write(&present, b"").unwrap();
        assert!(!namespace_is_gone(&present.display().to_string()));
        assert!(namespace_is_gone(
            &dir.path().join("cni-gone").display().to_string()
        ));
        assert!(!namespace_is_gone(""), "no path says nothing");
        assert!(
            !namespace_is_gone(&dir.path().join("unmounted/cni-x").display().to_string()),
            "a directory this agent cannot see says nothing"
        );
    }
}
