//! Layer 3 of a link: an address added, a main-table route replaced, the next hop towards a
//! destination looked up, a neighbour resolved. Requests of the parent's [`Socket`].

use std::{io, net::IpAddr};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::{
    AddressFamily, RouteNetlinkMessage,
    address::{AddressAttribute, AddressHeaderFlags, AddressMessage},
    neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage},
    route::{
        RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
        RouteType,
    },
};

use super::{Socket, invalid};

/// The address family of `address`.
pub(super) fn family_of(address: IpAddr) -> AddressFamily {
    match address {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// A main-table unicast route message of `destination`'s family, `prefix_len` long.
pub(super) fn main_table_route(
    destination: IpAddr,
    prefix_len: u8,
    protocol: RouteProtocol,
    scope: RouteScope,
) -> RouteMessage {
    let mut message = RouteMessage::default();
    message.header.address_family = family_of(destination);
    message.header.destination_prefix_length = prefix_len;
    message.header.table = RouteHeader::RT_TABLE_MAIN;
    message.header.protocol = protocol;
    message.header.scope = scope;
    message.header.kind = RouteType::Unicast;
    message
}

impl Socket {
    /// Adds `address/prefix_len` to link `index`. An IPv6 address is added without duplicate
    /// address detection (`IFA_F_NODAD`): usable at once, not tentative for a second (see
    /// [`crate::cni::plumbing`] for why a pod's address cannot be a duplicate).
    pub fn add_address(&self, index: u32, address: IpAddr, prefix_len: u8) -> io::Result<()> {
        let mut message = AddressMessage::default();
        message.header.family = family_of(address);
        message.header.prefix_len = prefix_len;
        message.header.index = index;
        if address.is_ipv6() {
            message.header.flags = AddressHeaderFlags::Nodad;
        }
        message.attributes = vec![
            AddressAttribute::Local(address),
            AddressAttribute::Address(address),
        ];
        self.change(
            RouteNetlinkMessage::NewAddress(message),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// Sets the main table's route to `destination/prefix_len` (a zero length: the family's
    /// default route) through link `index`, via `gateway` (of the destination's family) or,
    /// without one, on-link (scope link), replacing a route to the same destination.
    pub fn replace_route(
        &self,
        index: u32,
        destination: IpAddr,
        prefix_len: u8,
        gateway: Option<IpAddr>,
    ) -> io::Result<()> {
        if gateway.is_some_and(|gateway| gateway.is_ipv4() != destination.is_ipv4()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("gateway {gateway:?} is not of {destination}'s family"),
            ));
        }
        let scope = if gateway.is_some() {
            RouteScope::Universe
        } else {
            RouteScope::Link
        };
        let mut message = main_table_route(destination, prefix_len, RouteProtocol::Boot, scope);
        if prefix_len > 0 {
            message
                .attributes
                .push(RouteAttribute::Destination(destination.into()));
        }
        if let Some(gateway) = gateway {
            message
                .attributes
                .push(RouteAttribute::Gateway(gateway.into()));
        }
        message.attributes.push(RouteAttribute::Oif(index));
        self.change(
            RouteNetlinkMessage::NewRoute(message),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// The next hop towards `destination` in the main routing table: (link index, the gateway,
    /// or `destination` itself when it is on-link). Either family.
    pub fn next_hop(&self, destination: IpAddr) -> io::Result<(u32, IpAddr)> {
        let bits = if destination.is_ipv4() { 32 } else { 128 };
        let mut message = RouteMessage::default();
        message.header.address_family = family_of(destination);
        message.header.destination_prefix_length = bits;
        message.attributes = vec![RouteAttribute::Destination(destination.into())];
        let RouteNetlinkMessage::NewRoute(route) =
            self.query(RouteNetlinkMessage::GetRoute(message))?
        else {
            return Err(invalid("a route query answered by something else"));
        };
        let index = route
            .attributes
            .iter()
            .find_map(|attribute| match attribute {
                RouteAttribute::Oif(index) => Some(*index),
                _ => None,
            })
            .ok_or_else(|| invalid("no output interface in the route"))?;
        let gateway = route
            .attributes
            .iter()
            .find_map(|attribute| match attribute {
                RouteAttribute::Gateway(RouteAddress::Inet(gateway)) => {
                    Some(IpAddr::from(*gateway))
                }
                RouteAttribute::Gateway(RouteAddress::Inet6(gateway)) => {
                    Some(IpAddr::from(*gateway))
                }
                _ => None,
            })
            .unwrap_or(destination);
        Ok((index, gateway))
    }

    /// Makes the kernel resolve `ip`'s link-layer address on link `index` now (an entry with
    /// `NTF_USE`: an ARP request or neighbour solicitation if it has none, a probe if it is
    /// stale, nothing if it is fresh), without sending any other packet.
    pub fn resolve_neighbour(&self, index: u32, ip: IpAddr) -> io::Result<()> {
        let mut message = NeighbourMessage::default();
        message.header.family = family_of(ip);
        message.header.ifindex = index;
        message.header.flags = NeighbourFlags::Use;
        message.attributes = vec![NeighbourAttribute::Destination(match ip {
            IpAddr::V4(ip) => NeighbourAddress::Inet(ip),
            IpAddr::V6(ip) => NeighbourAddress::Inet6(ip),
        })];
        self.change(RouteNetlinkMessage::NewNeighbour(message), NLM_F_CREATE)
    }
}
