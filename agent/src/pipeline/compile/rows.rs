//! Row entries: Port_Binding → port, MAC_Binding → learned neighbour, Datapath_Binding →
//! datapath. Touches the SB replica (read) and the compiler's per-row contributions.

use uuid::Uuid;

use super::{Compiler, Contribution, Delta};
use crate::{
    pipeline::ir::{IrEntry, PortKind},
    sb::{
        Southbound,
        rows::{Chassis, DatapathBinding, MacBinding, PortBinding},
    },
};

impl Compiler {
    pub(super) fn compile_row(&mut self, sb: &Southbound, uuid: Uuid, delta: &mut Delta) {
        let entries = if let Some(port) = sb.row::<PortBinding>(&uuid) {
            port_entry(sb, &port).into_iter().collect()
        } else if let Some(binding) = sb.row::<MacBinding>(&uuid) {
            learned_neighbour(sb, &binding).into_iter().collect()
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
        let contribution = Contribution {
            entries,
            ..Contribution::default()
        };
        for entry in contribution.entries.clone() {
            self.add(entry, delta);
        }
        self.rows.insert(uuid, contribution);
    }
}

pub(super) fn port_entry(sb: &Southbound, port: &PortBinding) -> Option<IrEntry> {
    let datapath = sb.row::<DatapathBinding>(&port.datapath?)?.tunnel_key;
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
    Some(IrEntry::Port {
        datapath,
        key: port.tunnel_key,
        name: port.logical_port.clone(),
        kind,
        addresses: port.mac.clone(),
        port_security: port.port_security.clone(),
    })
}

/// A MAC_Binding row as a learned neighbour (IPv4 only for now).
pub(super) fn learned_neighbour(sb: &Southbound, binding: &MacBinding) -> Option<IrEntry> {
    let datapath = sb.row::<DatapathBinding>(&binding.datapath?)?.tunnel_key;
    let ip = binding.ip.parse().ok()?;
    let mac = crate::net::parse_mac(&binding.mac)?;
    Some(IrEntry::LearnedNeighbour {
        datapath,
        port: binding.logical_port.clone(),
        ip,
        mac,
    })
}
