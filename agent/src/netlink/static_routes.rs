//! The node NIC's static routes (`proto static`, see [`crate::node_network`]): set with a
//! preferred source, listed from a route dump, deleted. Requests of the parent's [`Socket`].

use std::{
    io,
    net::{IpAddr, Ipv4Addr},
};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::{
    AddressFamily, RouteNetlinkMessage,
    route::{RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope},
};

use super::{Socket, addressing::main_table_route};

impl Socket {
    /// Sets the main table's static route (`proto static`) to `route.destination` via
    /// `route.gateway` through link `index`, preferring source address `route.source` (which
    /// must be one of the node's), replacing a route to the same destination.
    pub fn replace_static_route(&self, index: u32, route: &StaticRoute) -> io::Result<()> {
        let mut message = static_route(route.destination, route.prefix_len, index);
        message.attributes.extend([
            RouteAttribute::Gateway(RouteAddress::Inet(route.gateway)),
            RouteAttribute::PrefSource(RouteAddress::Inet(route.source)),
        ]);
        self.change(
            RouteNetlinkMessage::NewRoute(message),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Deletes the main table's static route to `destination/prefix_len` through link `index`;
    /// `Ok(false)` if there was none.
    pub fn delete_static_route(
        &self,
        index: u32,
        destination: Ipv4Addr,
        prefix_len: u8,
    ) -> io::Result<bool> {
        let message = static_route(destination, prefix_len, index);
        match self.change(RouteNetlinkMessage::DelRoute(message), 0) {
            Ok(()) => Ok(true),
            Err(error) if error.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// The main table's IPv4 static routes (`proto static`) through link `index`.
    pub fn static_routes(&self, index: u32) -> io::Result<Vec<StaticRoute>> {
        let mut message = RouteMessage::default();
        message.header.address_family = AddressFamily::Inet;
        Ok(self
            .dump(RouteNetlinkMessage::GetRoute(message))?
            .iter()
            .filter_map(|message| match message {
                RouteNetlinkMessage::NewRoute(route) => static_route_of(route, index),
                _ => None,
            })
            .collect())
    }
}

/// A static route the agent sets: `destination/prefix_len via gateway src source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct StaticRoute {
    pub destination: Ipv4Addr,
    pub prefix_len: u8,
    pub gateway: Ipv4Addr,
    pub source: Ipv4Addr,
}

/// The message naming the static route to `destination/prefix_len` through link `index`.
fn static_route(destination: Ipv4Addr, prefix_len: u8, index: u32) -> RouteMessage {
    let mut message = main_table_route(
        IpAddr::V4(destination),
        prefix_len,
        RouteProtocol::Static,
        RouteScope::Universe,
    );
    message.attributes = vec![
        RouteAttribute::Destination(RouteAddress::Inet(destination)),
        RouteAttribute::Oif(index),
    ];
    message
}

/// `route` as a [`StaticRoute`] if it is a main-table IPv4 static route through link `index` (a
/// missing gateway or preferred source reads 0.0.0.0).
fn static_route_of(route: &RouteMessage, index: u32) -> Option<StaticRoute> {
    let mut table = u32::from(route.header.table);
    let (mut destination, mut gateway, mut source, mut oif) = (None, None, None, None);
    for attribute in &route.attributes {
        match attribute {
            RouteAttribute::Table(full) => table = *full,
            RouteAttribute::Destination(RouteAddress::Inet(address)) => {
                destination = Some(*address)
            }
            RouteAttribute::Gateway(RouteAddress::Inet(address)) => gateway = Some(*address),
            RouteAttribute::PrefSource(RouteAddress::Inet(address)) => source = Some(*address),
            RouteAttribute::Oif(link) => oif = Some(*link),
            _ => {}
        }
    }
    (route.header.address_family == AddressFamily::Inet
        && table == u32::from(RouteHeader::RT_TABLE_MAIN)
        && route.header.protocol == RouteProtocol::Static
        && oif == Some(index))
    .then(|| StaticRoute {
        destination: destination.unwrap_or(Ipv4Addr::UNSPECIFIED),
        prefix_len: route.header.destination_prefix_length,
        gateway: gateway.unwrap_or(Ipv4Addr::UNSPECIFIED),
        source: source.unwrap_or(Ipv4Addr::UNSPECIFIED),
    })
}
