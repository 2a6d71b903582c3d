//! The rtnetlink requests the agent makes itself instead of spawning `ip` or `tc`: pod NICs
//! ([`links`]: a veth pair whose peer is born in the pod's namespace, kept out of the node's
//! networking, brought up, waited for), addresses, routes and neighbours ([`addressing`]), the
//! node NIC's static routes ([`static_routes`]) and the BPF filter on a link's ingress
//! ([`filter`]).
//!
//! Messages are `netlink-packet-route`'s typed messages, serialised and parsed by
//! `netlink-packet-core`; the socket is `netlink-sys`'s. This module owns only the exchange: a
//! request with its sequence number, then its answer (an acknowledgement, one reply, or a
//! multipart dump up to its end), skipping what is not the answer (notifications of the groups a
//! socket joined, stale replies). Why not the `rtnetlink` crate's async handle: every caller is a
//! plain thread, most of them inside a pod's namespace ([`crate::netns::run_in`]), where an async
//! connection would need a reactor entered and a task spawned per namespace for what is one
//! `send` and one `recv`; the measured CNI path stays a request and its acknowledgement.
//!
//! A [`Socket`] acts in the namespace it was opened in, whatever thread uses it later. Touches
//! only the links, addresses, routes, neighbours and filters it is asked about.

mod addressing;
mod filter;
mod links;
mod static_routes;

pub use filter::IngressFilter;
pub use links::VethPair;
pub use static_routes::StaticRoute;

use std::{
    io,
    net::{IpAddr, Ipv4Addr},
    os::fd::{AsFd, BorrowedFd},
    sync::atomic::{AtomicU32, Ordering},
};

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_MULTIPART, NLM_F_REQUEST, NetlinkBuffer, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{SocketAddr, protocols::NETLINK_ROUTE};

/// The largest datagram the kernel sends on a route socket (a dump's batch is at most 32 KiB);
/// a longer one is reported, not cut.
const RECEIVE_BUFFER: usize = 64 * 1024;

/// A NETLINK_ROUTE socket of the namespace it was opened in.
pub struct Socket {
    socket: netlink_sys::Socket,
    /// The last request's sequence number: each request gets the next.
    sequence: AtomicU32,
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

/// What answers a request: the kernel's messages (none for an acknowledgement).
type Answer = Vec<RouteNetlinkMessage>;

impl Socket {
    pub fn open() -> io::Result<Self> {
        let mut socket = netlink_sys::Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Self {
            socket,
            sequence: AtomicU32::new(0),
        })
    }

    /// Sends `message` as a change with `flags` (`NLM_F_CREATE`, …) and waits for the kernel's
    /// acknowledgement: its error, if any.
    fn change(&self, message: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
        let sequence = self.send(message, flags | NLM_F_ACK)?;
        self.answer(sequence).map(drop)
    }

    /// Sends `message` as a query and returns the kernel's reply (a single message).
    fn query(&self, message: RouteNetlinkMessage) -> io::Result<RouteNetlinkMessage> {
        let sequence = self.send(message, 0)?;
        self.answer(sequence)?
            .into_iter()
            .next()
            .ok_or_else(|| invalid("the kernel answered the query with nothing"))
    }

    /// Sends `message` with `NLM_F_DUMP` and returns every message of the dump.
    fn dump(&self, message: RouteNetlinkMessage) -> io::Result<Answer> {
        let sequence = self.send(message, netlink_packet_core::NLM_F_DUMP)?;
        self.answer(sequence)
    }

    /// Sends one request; returns its sequence number.
    fn send(&self, message: RouteNetlinkMessage, flags: u16) -> io::Result<u32> {
        let sequence = self
            .sequence
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags | NLM_F_REQUEST;
        header.sequence_number = sequence;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
        packet.finalize();
        let mut bytes = vec![0; packet.buffer_len()];
        packet.serialize(&mut bytes);
        self.socket.send(&bytes, 0)?;
        Ok(sequence)
    }

    /// The answer to request `sequence`: its messages, until an acknowledgement, the end of a
    /// dump, or a single reply. An error the kernel returns is the answer's error. Within a dump,
    /// an entry this crate cannot decode is skipped (logged): one exotic route must not hide the
    /// others.
    fn answer(&self, sequence: u32) -> io::Result<Answer> {
        let mut messages = Vec::new();
        loop {
            let (datagram, notification) = self.receive()?;
            if notification {
                continue;
            }
            for bytes in datagrams_messages(&datagram)? {
                let header = NetlinkBuffer::new_checked(bytes).map_err(invalid)?;
                if header.sequence_number() != sequence {
                    continue;
                }
                let multipart = header.flags() & NLM_F_MULTIPART != 0;
                let message = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes) {
                    Ok(message) => message,
                    Err(error) if multipart => {
                        tracing::debug!(%error, "an undecodable entry of a netlink dump skipped");
                        continue;
                    }
                    Err(error) => return Err(invalid(error)),
                };
                match message.payload {
                    NetlinkPayload::Error(error) => {
                        return match error.code {
                            None => Ok(messages),
                            Some(_) => Err(error.to_io()),
                        };
                    }
                    NetlinkPayload::Done(_) => return Ok(messages),
                    NetlinkPayload::InnerMessage(inner) => {
                        messages.push(inner);
                        if !multipart {
                            return Ok(messages);
                        }
                    }
                    // Noop, Overrun: not an answer.
                    _ => {}
                }
            }
        }
    }

    /// The socket's next datagram, and whether it is a notification (sent to a group the socket
    /// joined) rather than an answer.
    fn receive(&self) -> io::Result<(Vec<u8>, bool)> {
        let mut datagram = Vec::with_capacity(RECEIVE_BUFFER);
        loop {
            match self.socket.recv_from(&mut datagram, libc::MSG_TRUNC) {
                Ok((length, _)) if length > RECEIVE_BUFFER => {
                    return Err(invalid(format!(
                        "a netlink datagram of {length} bytes, more than {RECEIVE_BUFFER}"
                    )));
                }
                Ok((_, from)) => return Ok((datagram, from.multicast_groups() != 0)),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }
}

/// The netlink messages packed in `datagram` (each with its header), in order.
fn datagrams_messages(datagram: &[u8]) -> io::Result<Vec<&[u8]>> {
    let mut messages = Vec::new();
    let mut offset = 0;
    while offset < datagram.len() {
        let rest = &datagram[offset..];
        let length = NetlinkBuffer::new_checked(rest).map_err(invalid)?.length() as usize;
        messages.push(&rest[..length]);
        offset += length.next_multiple_of(4);
    }
    Ok(messages)
}

fn invalid(error: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error.to_string())
}

/// The index of `name` in the calling thread's namespace.
pub fn index_of(name: &str) -> io::Result<u32> {
    let name =
        std::ffi::CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a valid C string.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(index)
    }
}

/// The name of the interface that holds `address` (either family) in the calling thread's namespace (the
/// uplink Geneve leaves through, found from the tunnel IP), or `None`.
pub fn interface_with_address(address: IpAddr) -> io::Result<Option<String>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills our pointer with a list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut entry = list;
    while !entry.is_null() {
        // SAFETY: every entry of the list is valid until freeifaddrs.
        let current = unsafe { &*entry };
        entry = current.ifa_next;
        if current.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null address of the list.
        let held = match i32::from(unsafe { (*current.ifa_addr).sa_family }) {
            libc::AF_INET => {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let inet = unsafe { &*current.ifa_addr.cast::<libc::sockaddr_in>() };
                IpAddr::from(Ipv4Addr::from(u32::from_be(inet.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let inet6 = unsafe { &*current.ifa_addr.cast::<libc::sockaddr_in6>() };
                IpAddr::from(inet6.sin6_addr.s6_addr)
            }
            _ => continue,
        };
        if held == address {
            // SAFETY: ifa_name is a NUL-terminated name.
            let name = unsafe { std::ffi::CStr::from_ptr(current.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(list) };
    Ok(found)
}

#[cfg(test)]
mod tests;
