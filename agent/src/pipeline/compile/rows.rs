//! Row entries: Encap → chassis encap, Address_Set and Port_Group → one member entry each,
//! Port_Binding → port (its address columns parsed once, here, into typed
//! addresses; entries that do not parse are logged and counted), MAC_Binding → learned
//! neighbour, Datapath_Binding → datapath. Touches the SB replica (read) and the compiler's per-row contributions.

use uuid::Uuid;

use super::{Compiler, Delta};
use crate::ovsdb::{datum::Atom, replica::SetChange};
use crate::{
    net::{LspAddress, is_address_keyword},
    pipeline::ir::{IrEntry, PortKind, Prefix},
    sb::{
        Southbound,
        rows::{AddressSet, Chassis, DatapathBinding, Encap, MacBinding, PortBinding, PortGroup},
    },
};

impl Compiler {
    pub(super) fn compile_row(&mut self, sb: &Southbound, uuid: Uuid, delta: &mut Delta) {
        let entries = if let Some(port) = sb.row::<PortBinding>(&uuid) {
            let (entry, bad) = port_entry(sb, &port);
            self.bad_addresses += bad;
            entry
                .into_iter()
                .chain(super::gateway::gateway_port_entry(sb, &port))
                .collect()
        } else if let Some(binding) = sb.row::<MacBinding>(&uuid) {
            learned_neighbour(sb, &binding).into_iter().collect()
        } else if let Some(encap) = sb.row::<Encap>(&uuid) {
            chassis_encap(&encap).into_iter().collect()
        } else if let Some(set) = sb.row::<AddressSet>(&uuid) {
            address_set_members(&set)
        } else if let Some(group) = sb.row::<PortGroup>(&uuid) {
            group
                .ports
                .iter()
                .map(|port| IrEntry::PortGroupMember {
                    group: group.name.clone(),
                    port: port.clone(),
                })
                .collect()
        } else if let Some(datapath) = sb.row::<DatapathBinding>(&uuid) {
            vec![IrEntry::Datapath {
                datapath: datapath.tunnel_key,
                name: datapath
                    .external_ids
                    .get("name")
                    .cloned()
                    .unwrap_or_default(),
                router: datapath.external_ids.contains_key("logical-router"),
            }]
        } else {
            return;
        };
        let ids = self.add_all(entries, delta);
        self.rows.insert(uuid, ids);
    }
}

/// The IPv4 members of an Address_Set row (addresses or CIDRs; IPv6 ones wait for issue 21, and
/// an entry that is neither is left out, as ovn-controller leaves it out).
fn address_set_members(set: &AddressSet) -> Vec<IrEntry> {
    set.addresses
        .iter()
        .filter_map(|address| address_set_member(&set.name, address))
        .collect()
}

/// The member entry of `address` in set `set`, if it is an IPv4 address or CIDR.
fn address_set_member(set: &str, address: &str) -> Option<IrEntry> {
    let (network, length) = match address.split_once('/') {
        Some((network, length)) => (network, length.parse::<u8>().ok()?),
        None => (address, 32),
    };
    let network: std::net::Ipv4Addr = network.parse().ok()?;
    (length <= 32).then(|| IrEntry::AddressSetMember {
        set: set.to_string(),
        prefix: Prefix { network, length },
    })
}

impl Compiler {
    /// Applies the addresses `change` added to and removed from Address_Set row `uuid`, named
    /// `name` before and after: one member entry each.
    pub(super) fn change_address_set_members(
        &mut self,
        uuid: Uuid,
        name: &str,
        change: &SetChange,
        delta: &mut Delta,
    ) {
        let member = |atom: &Atom| address_set_member(name, atom.as_str()?);
        let removed: Vec<IrEntry> = change.removed.iter().filter_map(member).collect();
        let added: Vec<IrEntry> = change.added.iter().filter_map(member).collect();
        let mut ids = self.rows.remove(&uuid).unwrap_or_default();
        for entry in removed {
            let id = self.ir.find(&entry);
            if let Some(at) = ids.iter().position(|e| Some(*e) == id) {
                self.remove(ids.swap_remove(at), delta);
            }
        }
        for entry in added {
            let id = self.add(entry, delta);
            ids.push(id);
        }
        self.rows.insert(uuid, ids);
    }
}

/// The port entry of a Port_Binding row, and how many of its address entries did not parse
/// (each logged; OVN ignores them too).
pub(super) fn port_entry(sb: &Southbound, port: &PortBinding) -> (Option<IrEntry>, u64) {
    let Some(datapath) = port
        .datapath
        .and_then(|datapath| sb.row::<DatapathBinding>(&datapath))
    else {
        return (None, 0);
    };
    let kind = match port.kind.as_str() {
        "" => PortKind::Vif {
            chassis: port
                .chassis
                .and_then(|c| sb.row::<Chassis>(&c))
                .map(|c| c.name),
        },
        "patch" => PortKind::Patch {
            peer: port.options.get("peer").cloned().unwrap_or_default(),
        },
        "chassisredirect" => PortKind::ChassisRedirect {
            chassis: port
                .chassis
                .and_then(|c| sb.row::<Chassis>(&c))
                .map(|c| c.name),
        },
        "localnet" => PortKind::Localnet {
            network_name: port
                .options
                .get("network_name")
                .cloned()
                .unwrap_or_default(),
            tag: port.tag.and_then(|t| u16::try_from(t).ok()),
        },
        other => PortKind::Other(other.to_string()),
    };
    let mut bad = 0;
    let mut typed = |column: &'static str, entries: &[String]| -> Vec<LspAddress> {
        entries
            .iter()
            .filter(|entry| column == "port_security" || !is_address_keyword(entry))
            .filter_map(|entry| match entry.parse::<LspAddress>() {
                Ok(address) => Some(address),
                Err(error) => {
                    bad += 1;
                    tracing::warn!(
                        port = %port.logical_port,
                        column,
                        %error,
                        "Port_Binding address entry ignored"
                    );
                    None
                }
            })
            .collect()
    };
    let addresses = typed("mac", &port.mac);
    let port_security = typed("port_security", &port.port_security);
    let entry = IrEntry::Port {
        datapath: datapath.tunnel_key,
        key: port.tunnel_key,
        name: port.logical_port.clone(),
        kind,
        addresses,
        port_security,
    };
    (Some(entry), bad)
}

/// An Encap row as the chassis's tunnel endpoint: Geneve over IPv4 or IPv6 (what the datapath
/// tunnels through); other types and addresses that are not an IP give no entry. Checksums are
/// asked for with `options:csum=true` only, as ovn-controller reads it (absent or anything
/// else: none).
pub(super) fn chassis_encap(encap: &Encap) -> Option<IrEntry> {
    if encap.kind != "geneve" {
        return None;
    }
    match encap.ip.parse() {
        Ok(ip) => Some(IrEntry::ChassisEncap {
            chassis: encap.chassis_name.clone(),
            ip,
            csum: encap
                .options
                .get("csum")
                .is_some_and(|value| value == "true"),
        }),
        Err(_) => {
            tracing::debug!(
                chassis = %encap.chassis_name,
                ip = %encap.ip,
                "Geneve endpoint not an IP address: not tunnelled to"
            );
            None
        }
    }
}

/// A MAC_Binding row as a learned neighbour, of either family.
pub(super) fn learned_neighbour(sb: &Southbound, binding: &MacBinding) -> Option<IrEntry> {
    let datapath = sb.row::<DatapathBinding>(&binding.datapath?)?.tunnel_key;
    let ip: std::net::IpAddr = binding.ip.parse().ok()?;
    let mac = crate::net::parse_mac(&binding.mac)?;
    let port = binding.logical_port.clone();
    Some(match ip {
        std::net::IpAddr::V4(ip) => IrEntry::LearnedNeighbour {
            datapath,
            port,
            ip,
            mac,
        },
        std::net::IpAddr::V6(ip) => IrEntry::LearnedNeighbour6 {
            datapath,
            port,
            ip,
            mac,
        },
    })
}
