//! The pod-port family of the L2 maps: for each logical port bound here and plugged into a host
//! veth, its pod-port entry (veth → datapath and port key, with the veth's counters opened
//! around it), its tunnel-port entry (datapath and port key → veth, where decapsulated frames
//! for it go) and its port security (what the pod may send). Owns the desired values of
//! `POD_PORTS`, `TUNNEL_PORTS`, `PORT_SECURITY` and `PORT_SECURITY6` and the IR's port entries; installs through
//! the state's [`Table`](super::super::tables::Table)s.

use ovnbpf_common::{
    LOCAL_PORT_ACL, LOCAL_PORT_EGRESS_SECURITY, LOCAL_PORT_VETH_PEER, LocalPort,
    PORT_SECURITY_IPV4, PORT_SECURITY_IPV6, PodPort, PortSecurity, PortSecurity6, TunnelPortKey,
    maps::{PodPorts, PortSecurity6Map, PortSecurityMap, TunnelPorts},
};

use super::{
    super::{
        EbpfError, Maps,
        physical::{Binding, Location},
        tables::{Pass, Table, TableKey, flush_from, flush_from_with},
    },
    L2State, PortInfo, remove_from_index,
};
use crate::pipeline::ir::{LspAddress, PortKind};

impl TableKey<PodPorts> for u32 {
    fn slot(&self) -> u32 {
        *self
    }
}

impl TableKey<PortSecurityMap> for u32 {
    fn slot(&self) -> u32 {
        *self
    }
}

impl TableKey<PortSecurity6Map> for u32 {
    fn slot(&self) -> u32 {
        *self
    }
}

impl TableKey<TunnelPorts> for TunnelPortKey {
    fn slot(&self) -> TunnelPortKey {
        *self
    }
}

/// What the pod-port family installed.
#[derive(Debug, Default)]
pub(super) struct PortTables {
    pub(super) pod: Table<PodPorts, u32>,
    pub(super) security: Table<PortSecurityMap, u32>,
    pub(super) security6: Table<PortSecurity6Map, u32>,
    pub(super) tunnel: Table<TunnelPorts, TunnelPortKey>,
}

impl PortTables {
    pub(super) fn pending(&self) -> usize {
        self.pod.pending()
            + self.security.pending()
            + self.security6.pending()
            + self.tunnel.pending()
    }
}

/// A port bound here and plugged into a veth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LocalVif {
    pub(super) ifindex: u32,
    pub(super) datapath: u32,
    pub(super) key: u32,
    pub(super) security: Option<PortSecurity>,
    pub(super) security6: Option<PortSecurity6>,
    /// The veth's peer is in another namespace (a pod's), not in this one (the node's NIC).
    pub(super) peer_elsewhere: bool,
    /// Its switch runs egress ACLs.
    pub(super) acl: bool,
}

impl LocalVif {
    /// How frames are delivered to it ([`LocalPort::flags`]): into the pod's netns (not for
    /// the node's own NIC, whose peer is here: `bpf_redirect_peer` drops what would stay in
    /// the namespace), through its egress port security where it has some.
    pub(super) fn delivery_flags(&self) -> u32 {
        let egress = if self.security.is_some() {
            LOCAL_PORT_EGRESS_SECURITY
        } else {
            0
        };
        let peer = if self.peer_elsewhere {
            LOCAL_PORT_VETH_PEER
        } else {
            0
        };
        let acl = if self.acl { LOCAL_PORT_ACL } else { 0 };
        peer | egress | acl
    }
}

/// The kernel form of Port_Binding.port_security: its first entry's MAC, which families it
/// lists addresses of, and up to [`ovnbpf_common::PORT_SECURITY_MAX_IPS`] IPv4 and
/// [`ovnbpf_common::PORT_SECURITY_MAX_IPS6`] IPv6 single-host addresses (the IPv6 ones, when
/// there are any, in their own entry). `None` when there is no entry.
pub(super) fn kernel_port_security(
    entries: &[LspAddress],
) -> Option<(PortSecurity, Option<PortSecurity6>)> {
    let first = entries.first()?;
    let mut security = PortSecurity {
        mac: first.mac,
        ..PortSecurity::default()
    };
    if !first.ipv4.is_empty() {
        security.flags |= PORT_SECURITY_IPV4;
    }
    if !first.ipv6.is_empty() {
        security.flags |= PORT_SECURITY_IPV6;
    }
    let hosts = first.ipv4.iter().filter(|p| p.length == 32);
    for (slot, prefix) in security.ips.iter_mut().zip(hosts) {
        *slot = u32::from_ne_bytes(prefix.network.octets());
        security.ip_count += 1;
    }
    let mut security6 = PortSecurity6::default();
    let hosts6 = first.ipv6.iter().filter(|p| p.length == 128);
    for (slot, prefix) in security6.ips.iter_mut().zip(hosts6) {
        *slot = prefix.network.octets();
        security6.ip_count += 1;
    }
    Some((security, (security6.ip_count > 0).then_some(security6)))
}

/// One `IrEntry::Port`, as [`L2State::take_port`] takes it.
pub(super) struct PortEntry<'a> {
    pub(super) datapath: u32,
    pub(super) key: u32,
    pub(super) name: &'a str,
    pub(super) kind: &'a PortKind,
    pub(super) addresses: &'a [LspAddress],
    pub(super) port_security: &'a [LspAddress],
}

impl L2State {
    /// Takes in a logical port (added or removed): its own entries, and what depends on it.
    pub(super) fn take_port(&mut self, port: &PortEntry<'_>, added: bool) {
        let PortEntry {
            datapath,
            key,
            name,
            kind,
            ..
        } = *port;
        // Its slots as they are, before it changes.
        self.mark_port_slots(name);
        let chassis = match kind {
            PortKind::Vif { chassis } | PortKind::ChassisRedirect { chassis } => chassis.clone(),
            _ => None,
        };
        let peer = match kind {
            PortKind::Patch { peer } => Some(peer.clone()),
            _ => None,
        };
        if let PortKind::Localnet { network_name, tag } = kind {
            if added {
                self.localnets
                    .insert(datapath, (name.to_string(), network_name.clone(), *tag));
            } else if self.localnets.get(&datapath).is_some_and(|l| l.0 == name) {
                self.localnets.remove(&datapath);
            }
            self.mark_localnet(datapath);
        }
        if let Some(old) = self.ports.remove(name) {
            if let Some(binding) = self.physical.binding(name).cloned() {
                if let Some(old_chassis) = &binding.chassis {
                    remove_from_index(&mut self.ports_by_chassis, old_chassis, &name.to_string());
                }
                if let Some(old_peer) = &binding.peer
                    && self.patch_by_peer.get(old_peer).is_some_and(|p| p == name)
                {
                    self.patch_by_peer.remove(old_peer);
                }
            }
            self.physical.set_binding(name, None);
            if self.patch_ports.contains_key(&old.datapath) {
                self.take_patch_port(old.datapath, name, false);
            }
            if self
                .port_names
                .get(&(old.datapath, old.key))
                .is_some_and(|p| p == name)
            {
                self.port_names.remove(&(old.datapath, old.key));
            }
            self.mark_groups_of(old.datapath, old.key);
        }
        if added {
            if let Some(chassis) = &chassis {
                self.ports_by_chassis
                    .entry(chassis.clone())
                    .or_default()
                    .insert(name.to_string());
            }
            if let Some(peer) = &peer {
                self.patch_by_peer.insert(peer.clone(), name.to_string());
                self.take_patch_port(datapath, name, true);
            }
            self.physical.set_binding(
                name,
                Some(Binding {
                    datapath,
                    chassis,
                    peer,
                    address: port
                        .addresses
                        .first()
                        .and_then(|a| a.ipv4.first())
                        .map(|p| p.network),
                }),
            );
            let (security, security6) = match kernel_port_security(port.port_security) {
                Some((security, security6)) => (Some(security), security6),
                None => (None, None),
            };
            let info = PortInfo {
                datapath,
                key,
                security,
                security6,
                mac: port.addresses.first().map(|a| a.mac),
            };
            self.ports.insert(name.to_string(), info);
            self.port_names.insert((datapath, key), name.to_string());
            self.mark_groups_of(datapath, key);
        }
        self.mark_port(name);
        self.mark_acl_port(name);
    }

    /// Marks the pod-port, port-security and tunnel-port slots `port` has now: call before and
    /// after anything that moves them (its veth, its datapath or key).
    pub(super) fn mark_port_slots(&mut self, port: &str) {
        if let Some(ifindex) = self.physical.interface(port) {
            self.port_tables.pod.mark(ifindex);
            self.port_tables.security.mark(ifindex);
            self.port_tables.security6.mark(ifindex);
        }
        if let Some(info) = self.ports.get(port) {
            self.port_tables.tunnel.mark(TunnelPortKey {
                datapath: info.datapath,
                port: info.key,
            });
        }
    }

    /// A port bound here with a known veth.
    pub(super) fn local_port(&self, port: &str) -> Option<LocalVif> {
        let info = self.ports.get(port)?;
        let Location::Local(ifindex) = self.physical.locate(port) else {
            return None;
        };
        Some(LocalVif {
            ifindex,
            datapath: info.datapath,
            key: info.key,
            security: info.security,
            security6: info.security6,
            peer_elsewhere: !self.same_namespace_peers.contains(&ifindex),
            acl: self.acl.egress_switches.contains(&info.datapath),
        })
    }

    /// The port plugged into veth `ifindex`, if it is bound here.
    fn local_port_at(&self, ifindex: u32) -> Option<LocalVif> {
        self.local_port(self.physical.port_at(ifindex)?)
    }

    fn desired_pod_port(&self, ifindex: u32) -> Option<PodPort> {
        let local = self.local_port_at(ifindex)?;
        Some(PodPort {
            datapath: local.datapath,
            port: local.key,
        })
    }

    fn desired_security(&self, ifindex: u32) -> Option<PortSecurity> {
        self.local_port_at(ifindex)?.security
    }

    fn desired_security6(&self, ifindex: u32) -> Option<PortSecurity6> {
        self.local_port_at(ifindex)?.security6
    }

    fn desired_tunnel_port(&self, key: TunnelPortKey) -> Option<LocalPort> {
        let port = self.port_names.get(&(key.datapath, key.port))?;
        let local = self.local_port(port)?;
        Some(LocalPort {
            ifindex: local.ifindex,
            flags: local.delivery_flags(),
        })
    }

    /// Whether `port` has its pod and tunnel entries installed.
    #[must_use]
    pub fn programmed(&self, port: &str) -> bool {
        let Some(local) = self.local_port(port) else {
            return false;
        };
        let tunnel = TunnelPortKey {
            datapath: local.datapath,
            port: local.key,
        };
        self.port_tables.pod.installed().get(&local.ifindex)
            == Some(&PodPort {
                datapath: local.datapath,
                port: local.key,
            })
            && self.port_tables.tunnel.installed().contains_key(&tunnel)
    }

    /// Writes the marked pod-port family slots. A port's security goes in before the entry that
    /// lets it forward and out after it; its veth's counters are opened before its pod-port
    /// entry and closed after.
    pub(super) fn flush_ports(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        let mut writes = flush_from_with(
            self,
            maps,
            |s| &mut s.port_tables.security6,
            Pass::SetsOnly,
            |s, &ifindex| s.desired_security6(ifindex),
            |_, _, _| Ok(()),
        )?;
        writes += flush_from_with(
            self,
            maps,
            |s| &mut s.port_tables.security,
            Pass::SetsOnly,
            |s, &ifindex| s.desired_security(ifindex),
            |_, _, _| Ok(()),
        )?;
        writes += flush_from_with(
            self,
            maps,
            |s| &mut s.port_tables.pod,
            Pass::All,
            |s, &ifindex| s.desired_pod_port(ifindex),
            |maps, &ifindex, value| match value {
                Some(_) => maps.open_counters(ifindex),
                None => maps.close_counters(ifindex),
            },
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.port_tables.tunnel,
            |s, &key| s.desired_tunnel_port(key),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.port_tables.security,
            |s, &ifindex| s.desired_security(ifindex),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.port_tables.security6,
            |s, &ifindex| s.desired_security6(ifindex),
        )?;
        Ok(writes)
    }

    /// Removes the pod-port family slots this state did not install (closing the counters of
    /// the veths it removes); returns how many went.
    pub(super) fn sweep_ports(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        Ok(self
            .port_tables
            .pod
            .sweep_with(maps, |maps, ifindex| maps.close_counters(ifindex))?
            + self.port_tables.security.sweep(maps)?
            + self.port_tables.security6.sweep(maps)?
            + self.port_tables.tunnel.sweep(maps)?)
    }
}
