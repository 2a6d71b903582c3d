//! MAC learning, pinctrl's half of OVN's `put_arp`: of the ARP senders a router heard of and
//! does not know at that MAC ([`HeardNeighbour`], reported by the datapath), which the router
//! learns, as the MAC_Binding row ovn-controller writes (`logical_port` the router port the
//! packet entered by, `ip`, `mac`, `datapath` the router, `timestamp` in ms). The rows come back
//! through the replica as the routers' learned neighbours, so every chassis forwards to them.
//!
//! Which senders are learned, as northd's `lr_in_lookup_neighbor`/`lr_in_learn_neighbor` flows
//! say for every `always_learn_from_arp_request` setting:
//! - an ARP reply always (`arp.op == 2`: `lookup_arp`, then `put_arp` on a miss);
//! - an ARP request (which reaches the router only unicast to its port: the switch's responder
//!   answers the rest) only to update the MAC of an address the port already has a binding for
//!   (`lookup_arp_ip`); a request teaching a new address (the `always_learn_from_arp_request`
//!   routers, or one for the router's own address) is not learned: the sender is learned from
//!   its reply to the router's own ARP request.
//!
//! The router port is the one whose MAC the packet was addressed to, or, for a MAC no port has
//! (a distributed NAT rule's external MAC: the reply to the router's ARP request from that MAC),
//! the router's gateway port, which admits those (a router with several gateway ports learns
//! nothing from them).
//!
//! Decides from the replica; the writes themselves are [`super::sb_sync`]'s.

use uuid::Uuid;

use crate::{
    dataplane::HeardNeighbour,
    net::Mac,
    sb::{Southbound, rows::PortBinding},
};

/// A MAC_Binding row a router learned, to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    /// The router port (`logical_port`).
    pub port: String,
    /// The address, as OVN writes it (`172.30.0.1`).
    pub ip: String,
    /// The MAC, as OVN writes it (`0a:58:…`).
    pub mac: String,
    /// The router's Datapath_Binding.
    pub datapath: Uuid,
    /// Only a binding the port already has is updated (an ARP request): none is created.
    pub update_only: bool,
}

/// Why a heard neighbour is not learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotLearned {
    /// The router is not in the replica (gone meanwhile).
    UnknownRouter,
    /// No port of the router has the MAC the packet was addressed to.
    UnknownPort,
    /// The port already has this binding.
    Known,
}

impl NotLearned {
    pub const ALL: [NotLearned; 3] = [
        NotLearned::UnknownRouter,
        NotLearned::UnknownPort,
        NotLearned::Known,
    ];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            NotLearned::UnknownRouter => "unknown_router",
            NotLearned::UnknownPort => "unknown_port",
            NotLearned::Known => "known",
        }
    }
}

/// What router port `heard` entered by learns of it, if anything.
pub fn learned(sb: &Southbound, heard: &HeardNeighbour) -> Result<Learned, NotLearned> {
    let router = sb
        .datapath_by_key(heard.router)
        .ok_or(NotLearned::UnknownRouter)?;
    let ports: Vec<PortBinding> = sb.typed_ports_on_datapath(router.uuid).collect();
    let port = ports
        .iter()
        .find(|port| is_router_port_with_mac(port, heard.router_mac))
        .or_else(|| only_gateway_port(&ports))
        .ok_or(NotLearned::UnknownPort)?;
    let (ip, mac) = (heard.ip.to_string(), heard.mac.to_string());
    if sb
        .mac_binding(&port.logical_port, &ip)
        .is_some_and(|binding| binding.mac == mac)
    {
        return Err(NotLearned::Known);
    }
    Ok(Learned {
        port: port.logical_port.clone(),
        ip,
        mac,
        datapath: router.uuid,
        update_only: heard.request,
    })
}

/// The router's gateway port, when it has one: a frame to a MAC no router port has reached the
/// router as a distributed NAT rule's external MAC, which only the gateway port admits.
fn only_gateway_port(ports: &[PortBinding]) -> Option<&PortBinding> {
    let mut gateways = ports
        .iter()
        .filter(|port| port.kind == "chassisredirect")
        .filter_map(|redirect| redirect.options.get("distributed-port"));
    let (Some(gateway), None) = (gateways.next(), gateways.next()) else {
        return None;
    };
    ports.iter().find(|port| port.logical_port == *gateway)
}

/// Whether `port` is a router port (not its chassisredirect companion, which shares its MAC)
/// whose MAC is `mac`.
fn is_router_port_with_mac(port: &PortBinding, mac: Mac) -> bool {
    matches!(port.kind.as_str(), "patch" | "l3gateway")
        && port.mac.iter().any(|entry| {
            entry
                .split_whitespace()
                .next()
                .and_then(|first| first.parse::<Mac>().ok())
                == Some(mac)
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ROUTER: &str = "00000000-0000-0000-0000-0000000000a1";
    const GATEWAY_MAC: &str = "0a:58:ba:12:b2:f2";

    /// Router `vpc-ext` (key 7) with its gateway port, that port's chassisredirect companion
    /// (same MAC) and a subnet port; the gateway port has a binding for 172.30.0.1.
    fn southbound() -> Southbound {
        let optional = |key: serde_json::Value| json!({"type": {"key": key, "min": 0, "max": 1}});
        let strings = json!({"type": {"key": "string", "min": 0, "max": "unlimited"}});
        crate::sb::testing::southbound(
            &json!({
                "Datapath_Binding": {"columns": {"tunnel_key": {"type": "integer"}}},
                "Port_Binding": {"columns": {"logical_port": {"type": "string"},
                    "type": {"type": "string"}, "mac": strings,
                    "options": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
                    "datapath": optional(json!({"type": "uuid"})),
                    "tunnel_key": {"type": "integer"}}},
                "MAC_Binding": {"columns": {"logical_port": {"type": "string"},
                    "ip": {"type": "string"}, "mac": {"type": "string"},
                    "datapath": optional(json!({"type": "uuid"}))}},
            }),
            json!({
                "Datapath_Binding": {ROUTER: {"initial": {"tunnel_key": 7}}},
                "Port_Binding": {
                    "00000000-0000-0000-0000-0000000000b1": {"initial": {
                        "logical_port": "cr-vpc-ext-external", "type": "chassisredirect",
                        "options": ["map", [["distributed-port", "vpc-ext-external"]]],
                        "mac": ["set", [format!("{GATEWAY_MAC} 172.30.0.10/24")]],
                        "datapath": ["uuid", ROUTER], "tunnel_key": 3}},
                    "00000000-0000-0000-0000-0000000000b2": {"initial": {
                        "logical_port": "vpc-ext-external", "type": "patch",
                        "mac": ["set", [format!("{GATEWAY_MAC} 172.30.0.10/24")]],
                        "datapath": ["uuid", ROUTER], "tunnel_key": 2}},
                    "00000000-0000-0000-0000-0000000000b3": {"initial": {
                        "logical_port": "vpc-ext-subnet-e1", "type": "patch",
                        "mac": ["set", ["0a:58:74:bd:a3:b5 10.60.1.1/24"]],
                        "datapath": ["uuid", ROUTER], "tunnel_key": 1}},
                },
                "MAC_Binding": {"00000000-0000-0000-0000-0000000000c1": {"initial": {
                    "logical_port": "vpc-ext-external", "ip": "172.30.0.1",
                    "mac": "02:00:00:00:00:01", "datapath": ["uuid", ROUTER]}}},
            }),
        )
    }

    fn heard(router_mac: &str, ip: &str, mac: &str, request: bool) -> HeardNeighbour {
        HeardNeighbour {
            router: 7,
            router_mac: router_mac.parse().unwrap(),
            ip: ip.parse().unwrap(),
            mac: mac.parse().unwrap(),
            request,
        }
    }

    #[test]
    fn a_heard_neighbour_is_learned_on_the_router_port_it_entered_by() {
        let sb = southbound();
        let uuid = uuid::Uuid::parse_str(ROUTER).unwrap();
        // On the gateway port (not its chassisredirect companion, which has its MAC).
        assert_eq!(
            learned(
                &sb,
                &heard(GATEWAY_MAC, "172.30.0.1", "02:00:00:00:00:02", false)
            ),
            Ok(Learned {
                port: "vpc-ext-external".into(),
                ip: "172.30.0.1".into(),
                mac: "02:00:00:00:00:02".into(),
                datapath: uuid,
                update_only: false,
            })
        );
        // A request only updates.
        let request = learned(
            &sb,
            &heard("0a:58:74:bd:a3:b5", "10.60.1.9", "02:00:00:00:00:03", true),
        );
        assert!(
            matches!(request, Ok(Learned { ref port, update_only: true, .. }) if port == "vpc-ext-subnet-e1")
        );
        // What the port has already, another router, another MAC: nothing.
        assert_eq!(
            learned(
                &sb,
                &heard(GATEWAY_MAC, "172.30.0.1", "02:00:00:00:00:01", false)
            ),
            Err(NotLearned::Known)
        );
        assert_eq!(
            learned(
                &sb,
                &HeardNeighbour {
                    router: 8,
                    ..heard(GATEWAY_MAC, "172.30.0.1", "02:00:00:00:00:05", false)
                }
            ),
            Err(NotLearned::UnknownRouter)
        );
        // To a MAC no port has (a distributed FIP's): the gateway port's.
        let nat_mac = heard(
            "0a:58:00:00:00:99",
            "172.30.0.1",
            "02:00:00:00:00:05",
            false,
        );
        assert!(matches!(
            learned(&sb, &nat_mac),
            Ok(Learned { ref port, .. }) if port == "vpc-ext-external"
        ));
    }
}
