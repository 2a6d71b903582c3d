//! Physical resolution (OVN's physical.c role): where a logical port is on this node's network,
//! from this chassis's name, the host veths of the ports plugged here and the provider NICs
//! (bridge mappings), which the daemon tells the backend, and the other chassis's encap IPs,
//! which come in the IR (`IrEntry::ChassisEncap`). Owns
//! those facts; decides no map value and installs nothing (the state modules and the tables do).

use std::{collections::HashMap, net::Ipv4Addr};

/// Where a logical port is, seen from this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// Bound here and plugged into this host veth.
    Local(u32),
    /// Bound to another chassis, reached through the tunnel to its encap IP.
    Remote(Ipv4Addr),
    /// Not bound, bound here but not plugged, or bound to a chassis without a known encap IP.
    Unreachable,
}

/// This node's physical facts.
#[derive(Debug, Default)]
pub struct Physical {
    chassis: String,
    /// Logical port name → its host-side veth on this node, and back.
    interfaces: HashMap<String, u32>,
    ports_at: HashMap<u32, String>,
    /// Chassis name → encap IP.
    encaps: HashMap<String, Ipv4Addr>,
    /// Provider network name → NIC index.
    providers: HashMap<String, u32>,
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

    /// Chassis `chassis` is reached at `encap_ip` (`None`: gone); whether that changed anything.
    pub fn set_encap(&mut self, chassis: &str, encap_ip: Option<Ipv4Addr>) -> bool {
        match encap_ip {
            Some(ip) => self.encaps.insert(chassis.to_string(), ip) != Some(ip),
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

    /// Where port `port`, bound to `bound_to` (its Port_Binding's chassis), is.
    #[must_use]
    pub fn locate(&self, port: &str, bound_to: Option<&str>) -> Location {
        match bound_to {
            Some(chassis) if chassis == self.chassis => self
                .interfaces
                .get(port)
                .map_or(Location::Unreachable, |&ifindex| Location::Local(ifindex)),
            Some(chassis) => self
                .encaps
                .get(chassis)
                .map_or(Location::Unreachable, |&ip| Location::Remote(ip)),
            None => Location::Unreachable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_local_when_bound_here_and_plugged_remote_when_its_chassis_has_an_encap() {
        let mut physical = Physical::new("node1");
        physical.set_interface("p1", Some(40));
        assert!(physical.set_encap("node2", Some(Ipv4Addr::new(172, 18, 0, 3))));
        assert!(!physical.set_encap("node2", Some(Ipv4Addr::new(172, 18, 0, 3))));
        assert_eq!(physical.locate("p1", Some("node1")), Location::Local(40));
        assert_eq!(physical.locate("p2", Some("node1")), Location::Unreachable);
        assert_eq!(
            physical.locate("p3", Some("node2")),
            Location::Remote(Ipv4Addr::new(172, 18, 0, 3))
        );
        assert_eq!(physical.locate("p4", Some("node3")), Location::Unreachable);
        assert_eq!(physical.locate("p1", None), Location::Unreachable);
        assert_eq!(physical.port_at(40), Some("p1"));
        physical.set_interface("p1", Some(41));
        assert_eq!(
            (physical.port_at(40), physical.port_at(41)),
            (None, Some("p1"))
        );
        physical.set_interface("p1", None);
        assert_eq!(physical.locate("p1", Some("node1")), Location::Unreachable);
        assert_eq!(
            (physical.interface("p1"), physical.port_at(41)),
            (None, None)
        );
    }
}
