//! The L3 family's map keys: where a state key (a router and a prefix or an address) lives in
//! `ROUTES(6)`, `SOURCE_ROUTES(6)`, `POLICIES_BY_*`, `NEIGHBOURS(6)`, `ROUTER_ADDRESSES(6)` and `ROUTERS`. Pure
//! conversions.

use std::net::{Ipv4Addr, Ipv6Addr};

use ovnbpf_common::{
    Ipv6Key, NeighbourKey, Route6Key, RouteKey,
    maps::{
        Neighbours, Neighbours6, PoliciesByDestination, PoliciesBySource, RouteTables,
        RouterAddresses, RouterAddresses6, Routers, Routes, Routes6, SourceRoutes, SourceRoutes6,
    },
};

use super::super::tables::TableKey;
use crate::pipeline::ir::{Prefix, Prefix6};

/// The kernel's route slot for `prefix` in router `datapath`: the key (both in network byte
/// order) and its prefix length in bits (the datapath's 32, then the prefix's).
#[must_use]
pub fn route_slot(datapath: u32, prefix: Prefix) -> (RouteKey, u32) {
    let key = RouteKey {
        datapath: datapath.to_be(),
        ip: u32::from_ne_bytes(prefix.network.octets()),
    };
    (key, 32 + u32::from(prefix.length))
}

impl TableKey<Routes> for (u32, Prefix) {
    fn slot(&self) -> (RouteKey, u32) {
        route_slot(self.0, self.1)
    }
}

impl TableKey<SourceRoutes> for (u32, Prefix) {
    fn slot(&self) -> (RouteKey, u32) {
        route_slot(self.0, self.1)
    }
}

/// The kernel's IPv6 route slot for `prefix` in router `datapath`: the key (the datapath in
/// network byte order) and its prefix length in bits (the datapath's 32, then the prefix's).
#[must_use]
pub fn route6_slot(datapath: u32, prefix: Prefix6) -> (Route6Key, u32) {
    let key = Route6Key {
        datapath: datapath.to_be(),
        ip: prefix.network.octets(),
    };
    (key, 32 + u32::from(prefix.length))
}

impl TableKey<Routes6> for (u32, Prefix6) {
    fn slot(&self) -> (Route6Key, u32) {
        route6_slot(self.0, self.1)
    }
}

impl TableKey<SourceRoutes6> for (u32, Prefix6) {
    fn slot(&self) -> (Route6Key, u32) {
        route6_slot(self.0, self.1)
    }
}

impl TableKey<PoliciesByDestination> for (u32, Prefix) {
    fn slot(&self) -> (RouteKey, u32) {
        route_slot(self.0, self.1)
    }
}

impl TableKey<PoliciesBySource> for (u32, Prefix) {
    fn slot(&self) -> (RouteKey, u32) {
        route_slot(self.0, self.1)
    }
}

impl TableKey<Neighbours> for (u32, Ipv4Addr) {
    fn slot(&self) -> NeighbourKey {
        neighbour_key(self.0, self.1)
    }
}

impl TableKey<RouteTables> for (u32, Ipv4Addr) {
    fn slot(&self) -> NeighbourKey {
        neighbour_key(self.0, self.1)
    }
}

impl TableKey<RouterAddresses> for (u32, Ipv4Addr) {
    fn slot(&self) -> NeighbourKey {
        neighbour_key(self.0, self.1)
    }
}

impl TableKey<Neighbours6> for (u32, Ipv6Addr) {
    fn slot(&self) -> Ipv6Key {
        ipv6_key(self.0, self.1)
    }
}

impl TableKey<RouterAddresses6> for (u32, Ipv6Addr) {
    fn slot(&self) -> Ipv6Key {
        ipv6_key(self.0, self.1)
    }
}

impl TableKey<Routers> for u32 {
    fn slot(&self) -> u32 {
        *self
    }
}

/// The map key of (router, address) in NEIGHBOURS and ROUTER_ADDRESSES.
pub(super) fn neighbour_key(datapath: u32, ip: Ipv4Addr) -> NeighbourKey {
    NeighbourKey {
        datapath,
        ip: u32::from_ne_bytes(ip.octets()),
    }
}

/// The map key of (router, address) in NEIGHBOURS6 and ROUTER_ADDRESSES6.
pub(super) fn ipv6_key(datapath: u32, ip: Ipv6Addr) -> Ipv6Key {
    Ipv6Key {
        datapath,
        ip: ip.octets(),
    }
}
