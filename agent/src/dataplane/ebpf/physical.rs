//! Physical resolution (OVN's physical.c role): where a logical port leads from this node: a
//! host veth here, the tunnel to another chassis, or (a switch's router port) the router behind
//! its patch peer. From this chassis's name, the host veths of the ports plugged here and the
//! provider NICs (bridge mappings), which the daemon tells the backend, and from the IR: the
//! other chassis's tunnel endpoints (`IrEntry::ChassisEncap`, as the endpoint keys the kernel
//! names them by, `ovnbpf_common::TunnelConfig`) and each port's binding (its datapath,
//! chassis, patch peer and address, from `IrEntry::Port`). Owns those facts; decides no map
//! value and installs nothing (the state modules and the tables do).

use std::{collections::HashMap, net::Ipv4Addr};

/// Where a logical port leads, seen from this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// Bound here and plugged into this host veth.
    Local(u32),
    /// Bound to another chassis, reached through the tunnel to the endpoint with this key.
    Remote(u32),
    /// A patch port: frames cross to its peer, a port of router `datapath` with `address`.
    Router {
        datapath: u32,
        address: Option<Ipv4Addr>,
    },
    /// Not bound, bound here but not plugged, bound to a chassis without a known encap IP, or a
    /// patch port whose peer is unknown.
    Unreachable,
}

/// Where a chassisredirect port is active, seen from this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residence {
    /// On this chassis (its Port_Binding's chassis is this one).
    Here,
    /// On another chassis, reached through the tunnel to the endpoint with this key.
    Remote(u32),
}

/// What the IR says of a port that decides where it leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The port's datapath (tunnel key).
    pub datapath: u32,
    /// The chassis a VIF or a chassisredirect port is bound to (`None` for unbound ones and
    /// other ports).
    pub chassis: Option<String>,
    /// A patch port's peer.
    pub peer: Option<String>,
    /// Its first IPv4 address (a router port's own address).
    pub address: Option<Ipv4Addr>,
}

/// This node's physical facts.
#[derive(Debug, Default)]
pub struct Physical {
    chassis: String,
    /// Logical port name → its host-side veth on this node, and back.
    interfaces: HashMap<String, u32>,
    ports_at: HashMap<u32, String>,
    /// Chassis name → its endpoint's key.
    encaps: HashMap<String, u32>,
    /// Provider network name → NIC index.
    providers: HashMap<String, u32>,
    /// Logical port name → its binding.
    bindings: HashMap<String, Binding>,
}

impl Physical {
    /// The facts of chassis `chassis` (its name in the Chassis table), none known yet.
    #[must_use]
    pub fn new(chassis: &str) -> Self {
        Self {
            chassis: chassis.to_string(),
            ..Self::default()
        }
    }

    /// Logical port `port` is plugged into host veth `ifindex` (`None`: unplugged).
    pub fn set_interface(&mut self, port: &str, ifindex: Option<u32>) {
        let old = match ifindex {
            Some(ifindex) => self.interfaces.insert(port.to_string(), ifindex),
            None => self.interfaces.remove(port),
        };
        if let Some(old) = old
            && self.ports_at.get(&old).is_some_and(|at| at == port)
        {
            self.ports_at.remove(&old);
        }
        if let Some(ifindex) = ifindex {
            self.ports_at.insert(ifindex, port.to_string());
        }
    }

    /// The host veth port `port` is plugged into.
    #[must_use]
    pub fn interface(&self, port: &str) -> Option<u32> {
        self.interfaces.get(port).copied()
    }

    /// The logical port plugged into host veth `ifindex`.
    #[must_use]
    pub fn port_at(&self, ifindex: u32) -> Option<&str> {
        self.ports_at.get(&ifindex).map(String::as_str)
    }

    /// Chassis `chassis` is reached at the tunnel endpoint with key `endpoint` (see
    /// `ovnbpf_common::TunnelConfig`; `None`: gone, or not reachable over this node's underlay);
    /// whether that changed anything.
    pub fn set_encap(&mut self, chassis: &str, endpoint: Option<u32>) -> bool {
        match endpoint {
            Some(key) => self.encaps.insert(chassis.to_string(), key) != Some(key),
            None => self.encaps.remove(chassis).is_some(),
        }
    }

    /// The provider networks of this node (bridge mappings): network name → NIC index.
    pub fn set_providers(&mut self, providers: HashMap<String, u32>) {
        self.providers = providers;
    }

    /// The NIC of provider network `network`.
    #[must_use]
    pub fn provider(&self, network: &str) -> Option<u32> {
        self.providers.get(network).copied()
    }

    /// Port `port`'s binding (`None`: the port is gone).
    pub fn set_binding(&mut self, port: &str, binding: Option<Binding>) {
        match binding {
            Some(binding) => self.bindings.insert(port.to_string(), binding),
            None => self.bindings.remove(port),
        };
    }

    /// Port `port`'s binding.
    #[must_use]
    pub fn binding(&self, port: &str) -> Option<&Binding> {
        self.bindings.get(port)
    }

    /// Where chassisredirect port `port` is active: `None` when it is bound to no chassis, or
    /// to one without a known endpoint.
    #[must_use]
    pub fn residence(&self, port: &str) -> Option<Residence> {
        match self.bindings.get(port)?.chassis.as_deref()? {
            chassis if chassis == self.chassis => Some(Residence::Here),
            chassis => self.encaps.get(chassis).map(|&key| Residence::Remote(key)),
        }
    }

    /// Where port `port` leads.
    #[must_use]
    pub fn locate(&self, port: &str) -> Location {
        let Some(binding) = self.bindings.get(port) else {
            return Location::Unreachable;
        };
        if let Some(peer) = &binding.peer {
            return self
                .bindings
                .get(peer)
                .map_or(Location::Unreachable, |router| Location::Router {
                    datapath: router.datapath,
                    address: router.address,
                });
        }
        match binding.chassis.as_deref() {
            Some(chassis) if chassis == self.chassis => self
                .interfaces
                .get(port)
                .map_or(Location::Unreachable, |&ifindex| Location::Local(ifindex)),
            Some(chassis) => self
                .encaps
                .get(chassis)
                .map_or(Location::Unreachable, |&key| Location::Remote(key)),
            None => Location::Unreachable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vif(chassis: Option<&str>) -> Option<Binding> {
        Some(Binding {
            datapath: 5,
            chassis: chassis.map(str::to_string),
            peer: None,
            address: None,
        })
    }

    #[test]
    fn a_port_is_local_when_bound_here_and_plugged_remote_when_its_chassis_has_an_encap() {
        let mut physical = Physical::new("node1");
        for (port, chassis) in [("p1", Some("node1")), ("p2", Some("node1"))] {
            physical.set_binding(port, vif(chassis));
        }
        physical.set_binding("p3", vif(Some("node2")));
        physical.set_binding("p4", vif(Some("node3")));
        physical.set_binding("p5", vif(None));
        physical.set_interface("p1", Some(40));
        assert!(physical.set_encap("node2", Some(0x0300_12ac)));
        assert!(!physical.set_encap("node2", Some(0x0300_12ac)));
        assert_eq!(physical.locate("p1"), Location::Local(40));
        assert_eq!(physical.locate("p2"), Location::Unreachable);
        assert_eq!(physical.locate("p3"), Location::Remote(0x0300_12ac));
        assert_eq!(physical.locate("p4"), Location::Unreachable);
        assert_eq!(physical.locate("p5"), Location::Unreachable);
        assert_eq!(physical.locate("unknown"), Location::Unreachable);
        assert_eq!(physical.port_at(40), Some("p1"));
        physical.set_interface("p1", Some(41));
        assert_eq!(
            (physical.port_at(40), physical.port_at(41)),
            (None, Some("p1"))
        );
        physical.set_interface("p1", None);
        assert_eq!(physical.locate("p1"), Location::Unreachable);
        assert_eq!(
            (physical.interface("p1"), physical.port_at(41)),
            (None, None)
        );
        physical.set_binding("p3", None);
        assert_eq!(physical.locate("p3"), Location::Unreachable);
    }

    #[test]
    fn a_switch_router_port_leads_to_the_router_behind_its_peer() {
        let mut physical = Physical::new("node1");
        let patch = |datapath, peer: &str, address| {
            Some(Binding {
                datapath,
                chassis: None,
                peer: Some(peer.to_string()),
                address,
            })
        };
        physical.set_binding("ls-lr", patch(5, "lr-ls", None));
        assert_eq!(
            physical.locate("ls-lr"),
            Location::Unreachable,
            "no peer yet"
        );
        let gateway = Ipv4Addr::new(10, 0, 1, 1);
        physical.set_binding("lr-ls", patch(9, "ls-lr", Some(gateway)));
        assert_eq!(
            physical.locate("ls-lr"),
            Location::Router {
                datapath: 9,
                address: Some(gateway)
            }
        );
        assert_eq!(
            physical.locate("lr-ls"),
            Location::Router {
                datapath: 5,
                address: None
            }
        );
    }
}
