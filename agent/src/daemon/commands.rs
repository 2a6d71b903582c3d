//! The daemon's handling of the CNI server's requests ([`PortCommand`]): binding, plugging and
//! unplugging ports (which change what [`super::sb_sync`] wants of their Port_Bindings), and the
//! read-only facts, datapath names, status and report. Touches the local port set, the datapath's plugs and the
//! pending replies.

use std::sync::atomic::Ordering;

use tracing::{info, warn};

use super::{
    Daemon, datapath,
    ports::{self, PortCommand, PortError, PortStatus},
};

impl Daemon {
    /// Applies one request of the CNI server.
    pub(super) async fn command(&mut self, command: PortCommand) {
        let chassis = self
            .sb
            .chassis_by_name(&self.config.chassis.name)
            .map(|c| c.uuid);
        match command {
            PortCommand::Bind { port, reply } => {
                info!(port, "binding port");
                self.local_ports.insert(port.clone());
                self.sb_sync.keep(&port);
                self.refresh_scope();
                self.sync_southbound().await;
                self.pending.wait_for_facts(port, reply);
            }
            PortCommand::Plug {
                port,
                interface,
                attachment,
                reply,
            } => {
                let Some(datapath) = self.datapath.as_mut() else {
                    let _ = reply.send(Err(PortError::Rejected(
                        "this agent does not forward (started without --uplink)".into(),
                    )));
                    return;
                };
                match datapath.plug(&port, &interface, attachment) {
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
                self.sb_sync.keep(&port);
                self.refresh_scope();
                self.sync_southbound().await;
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
                if self.config.local_ports.contains(&port) {
                    // Configured here: stays bound, its `up` is compared again.
                    self.sb_sync.mark(&port);
                } else {
                    self.local_ports.remove(&port);
                    // Released once every write before is done (a claim still on its way
                    // commits first, then this release).
                    self.sb_sync.release(&port);
                }
                self.refresh_scope();
                self.sync_southbound().await;
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
                let datapath = self.datapath.as_deref();
                let drops = datapath::reading(datapath.map(|d| d.drop_counters()), "drop");
                let router_replies =
                    datapath::reading(datapath.map(|d| d.router_replies()), "router reply");
                let acl_logged =
                    datapath::reading(datapath.map(|d| d.acl_logged()), "ACL log counter");
                let conntrack = datapath::reading(
                    datapath.map(|d| d.conntrack_counters()),
                    "conntrack counter",
                );
                let lb =
                    datapath::reading(datapath.map(|d| d.lb_counters()), "load-balancer counter");
                let socket_lb = datapath::reading(
                    datapath.map(|d| d.socket_lb_counters()),
                    "socket-level balancer counter",
                );
                let acl_verdict_cache = datapath::reading(
                    datapath.map(|d| d.acl_verdict_cache()),
                    "ACL verdict cache counter",
                );
                let interfaces =
                    datapath::reading(datapath.map(|d| d.interface_counters()), "interface");
                let _ = reply.send(ports::DaemonReport {
                    interfaces,
                    stats: self.stats(),
                    synced: self.synced,
                    connected: self.connected,
                    ready: self.synced && chassis.is_some() && self.datapath.is_some(),
                    local_ports: self.local_ports.len(),
                    pod_filters_restored: self.filters_restored.load(Ordering::Relaxed),
                    connections_swept: self.connections_swept.load(Ordering::Relaxed),
                    connections: *self
                        .connection_table
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                    unenforced_acl_switches: self.unenforced_acls.switches(),
                    unenforced_acls: self.unenforced_acls.acls(),
                    side_duty_datapaths: self.side_duties.datapaths(),
                    truncated_flood_groups: datapath.map_or(0, |d| d.truncated_flood_groups()),
                    datapath_pending: datapath.map_or(0, |d| d.pending()),
                    dataplane: datapath.map(|d| d.kind()),
                    untranslated_datapaths: datapath
                        .map(|d| d.untranslated_datapaths())
                        .unwrap_or_default(),
                    drops,
                    router_replies,
                    acl_logged,
                    conntrack,
                    acl_verdict_cache,
                    lb,
                    socket_lb,
                    service_monitors: self.service_monitors.status_counts(),
                    service_monitor_probes: self.service_monitors.probe_counts(),
                    router_advertisements: self.periodic_adverts.counts(),
                });
            }
            PortCommand::DatapathNames { reply } => {
                let _ = reply.send(ports::DatapathNames::read(&self.sb, &self.local_ports));
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
}
