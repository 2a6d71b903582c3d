//! The node NIC's static routes (`proto static`, see [`crate::node_network`]): set with a
//! preferred source, listed from a route dump, deleted. Requests of the parent's [`Socket`].

use std::{io, net::Ipv4Addr};

use super::{
    Message, NLM_F_CREATE, NLM_F_DUMP, NLM_F_REPLACE, NLMSG_DONE, NLMSG_ERROR, RT_SCOPE_UNIVERSE,
    RT_TABLE_MAIN, RTA_DST, RTA_GATEWAY, RTA_OIF, RTA_PREFSRC, RTA_TABLE, RTM_DELROUTE,
    RTM_GETROUTE, RTM_NEWROUTE, RTN_UNICAST, RTPROT_STATIC, Socket, acknowledgement,
    find_attribute,
};

impl Socket {
    /// Sets the main table's static route (`proto static`) to `route.destination` via
    /// `route.gateway` through link `index`, preferring source address `route.source` (which
    /// must be one of the node's), replacing a route to the same destination.
    pub fn replace_static_route(&self, index: u32, route: &StaticRoute) -> io::Result<()> {
        let mut message = Message::new(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE);
        route_header(
            &mut message,
            route.prefix_len,
            RTPROT_STATIC,
            RT_SCOPE_UNIVERSE,
        );
        message.attribute(RTA_DST, &route.destination.octets());
        message.attribute(RTA_GATEWAY, &route.gateway.octets());
        message.attribute(RTA_PREFSRC, &route.source.octets());
        message.attribute(RTA_OIF, &index.to_ne_bytes());
        self.request(message)
    }

    /// Deletes the main table's static route to `destination/prefix_len` through link `index`;
    /// `Ok(false)` if there was none.
    pub fn delete_static_route(
        &self,
        index: u32,
        destination: Ipv4Addr,
        prefix_len: u8,
    ) -> io::Result<bool> {
        let mut message = Message::new(RTM_DELROUTE, 0);
        route_header(&mut message, prefix_len, RTPROT_STATIC, RT_SCOPE_UNIVERSE);
        message.attribute(RTA_DST, &destination.octets());
        message.attribute(RTA_OIF, &index.to_ne_bytes());
        match self.request(message) {
            Ok(()) => Ok(true),
            Err(error) if error.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// The main table's IPv4 static routes (`proto static`) through link `index`.
    pub fn static_routes(&self, index: u32) -> io::Result<Vec<StaticRoute>> {
        let mut message = Message::with_flags(RTM_GETROUTE, NLM_F_DUMP);
        route_header(&mut message, 0, 0, 0);
        let bytes = message.finish();
        self.send(&bytes)?;
        let mut routes = Vec::new();
        loop {
            let reply = self.receive()?;
            let mut done = false;
            for (kind, body) in messages(&reply)? {
                match kind {
                    NLMSG_DONE => done = true,
                    NLMSG_ERROR => {
                        if let Some(Err(error)) = acknowledgement(&reply) {
                            return Err(error);
                        }
                        done = true;
                    }
                    RTM_NEWROUTE => routes.extend(static_route_of(body, index)),
                    _ => {}
                }
            }
            if done {
                return Ok(routes);
            }
        }
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

/// `struct rtmsg` of an IPv4 route of the main table: family, dst/src length, tos, table,
/// protocol, scope, type, flags.
fn route_header(message: &mut Message, prefix_len: u8, protocol: u8, scope: u8) {
    message.bytes.extend_from_slice(&[
        libc::AF_INET as u8,
        prefix_len,
        0,
        0,
        RT_TABLE_MAIN,
        protocol,
        scope,
        RTN_UNICAST,
    ]);
    message.bytes.extend_from_slice(&0u32.to_ne_bytes());
}

/// The netlink messages of a datagram: (type, bytes after the 16-byte header).
fn messages(reply: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
    let truncated = || io::Error::new(io::ErrorKind::InvalidData, "truncated netlink reply");
    let mut found = Vec::new();
    let mut offset = 0;
    while offset + 16 <= reply.len() {
        let length = u32::from_ne_bytes(
            reply[offset..offset + 4]
                .try_into()
                .map_err(|_| truncated())?,
        ) as usize;
        let kind = u16::from_ne_bytes(
            reply[offset + 4..offset + 6]
                .try_into()
                .map_err(|_| truncated())?,
        );
        if length < 16 || offset + length > reply.len() {
            return Err(truncated());
        }
        found.push((kind, &reply[offset + 16..offset + length]));
        offset += length.next_multiple_of(4);
    }
    Ok(found)
}

/// The route in `body` (an RTM_NEWROUTE's rtmsg and attributes) if it is a main-table IPv4
/// static route through link `index` (a missing gateway or preferred source reads 0.0.0.0).
fn static_route_of(body: &[u8], index: u32) -> Option<StaticRoute> {
    let [family, prefix_len, _, _, table, protocol, ..] = body.get(..12)? else {
        return None;
    };
    let attributes = body.get(12..)?;
    let table = find_attribute(attributes, RTA_TABLE)
        .and_then(|value| value.try_into().ok())
        .map_or(u32::from(*table), u32::from_ne_bytes);
    let address = |kind| {
        find_attribute(attributes, kind)
            .and_then(|value| <[u8; 4]>::try_from(value).ok())
            .map(Ipv4Addr::from)
    };
    let oif = find_attribute(attributes, RTA_OIF)
        .and_then(|value| value.try_into().ok())
        .map(u32::from_ne_bytes);
    (i32::from(*family) == libc::AF_INET
        && table == u32::from(RT_TABLE_MAIN)
        && *protocol == RTPROT_STATIC
        && oif == Some(index))
    .then_some(())?;
    Some(StaticRoute {
        destination: address(RTA_DST).unwrap_or(Ipv4Addr::UNSPECIFIED),
        prefix_len: *prefix_len,
        gateway: address(RTA_GATEWAY).unwrap_or(Ipv4Addr::UNSPECIFIED),
        source: address(RTA_PREFSRC).unwrap_or(Ipv4Addr::UNSPECIFIED),
    })
}

#[cfg(test)]
mod tests {
    use super::super::RTPROT_BOOT;
    use super::*;

    /// A route dump's messages: only main-table static routes through the asked link count,
    /// with their destination, gateway and preferred source.
    #[test]
    fn static_routes_are_read_from_a_dump() {
        let route = |table: u8, protocol: u8, oif: u32| {
            let mut message = Message::query(RTM_NEWROUTE);
            route_header(&mut message, 16, protocol, RT_SCOPE_UNIVERSE);
            message.bytes[16 + 4] = table;
            message.attribute(RTA_DST, &[10, 16, 0, 0]);
            message.attribute(RTA_GATEWAY, &[100, 64, 0, 1]);
            message.attribute(RTA_PREFSRC, &[172, 18, 0, 2]);
            message.attribute(RTA_OIF, &oif.to_ne_bytes());
            message.finish()
        };
        let mut dump = route(RT_TABLE_MAIN, RTPROT_STATIC, 7);
        dump.extend(route(RT_TABLE_MAIN, RTPROT_BOOT, 7));
        dump.extend(route(RT_TABLE_MAIN, RTPROT_STATIC, 8));
        dump.extend(route(100, RTPROT_STATIC, 7));
        let found: Vec<StaticRoute> = messages(&dump)
            .unwrap()
            .into_iter()
            .filter(|(kind, _)| *kind == RTM_NEWROUTE)
            .filter_map(|(_, body)| static_route_of(body, 7))
            .collect();
        assert_eq!(
            found,
            [StaticRoute {
                destination: Ipv4Addr::new(10, 16, 0, 0),
                prefix_len: 16,
                gateway: Ipv4Addr::new(100, 64, 0, 1),
                source: Ipv4Addr::new(172, 18, 0, 2),
            }]
        );
        assert!(messages(&dump[..dump.len() - 3]).is_err(), "truncated");
    }
}
