//! The few rtnetlink requests a pod NIC needs, sent from the agent itself instead of spawning
//! `ip`: create a veth pair whose peer is born in the pod's namespace with its final name, MAC,
//! MTU and state (one request), keep a host end out of the node's networking and bring it up,
//! add an IPv4 or IPv6 address, replace a route, delete a link; for the node's own NIC (`ovn0`, see
//! [`crate::node_network`]), the static routes through a link: set with a preferred source,
//! listed, deleted.
//! Each request is acknowledged before returning. A [`Socket`] acts in the namespace it was opened
//! in: open it on a thread that joined the pod's namespace ([`crate::netns::run_in`]) for the pod
//! side. Touches only the links, addresses and routes it is asked to; the BPF filter on a link's
//! ingress is [`filter`]'s.

mod filter;
mod routes;

pub use filter::IngressFilter;
pub use routes::StaticRoute;

use std::{
    io,
    net::{IpAddr, Ipv4Addr},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const RTA_DST: u16 = 1;
const RTM_NEWNEIGH: u16 = 28;
const NDA_DST: u16 = 1;
const NTF_USE: u8 = 0x01;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_TXQLEN: u16 = 13;
const IFLA_OPERSTATE: u16 = 16;
const IFLA_LINKINFO: u16 = 18;
const IFLA_AF_SPEC: u16 = 26;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_LINK_NETNSID: u16 = 37;
const IFLA_INET_CONF: u16 = 1;
const IPV4_DEVCONF_FORWARDING: u16 = 1;
const IPV4_DEVCONF_ARP_IGNORE: u16 = 19;
/// `arp_ignore` 8: answer no ARP request on this link, whatever address it asks for.
const ARP_IGNORE_ALL: u32 = 8;
const IFLA_INET6_ADDR_GEN_MODE: u16 = 8;
const IN6_ADDR_GEN_MODE_NONE: u8 = 1;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
/// `ifaddrmsg.ifa_flags`: no duplicate address detection for this address.
const IFA_F_NODAD: u8 = 0x02;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PREFSRC: u16 = 7;
const RTA_TABLE: u16 = 15;
const NLA_F_NESTED: u16 = 0x8000;
const IFF_UP: u32 = 0x1;
const IF_OPER_UP: u8 = 6;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
/// Routes the agent sets for the node (`ip route … proto static`, as kube-ovn-cni's).
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;

/// A request under construction: header, fixed part, attributes (4-byte aligned).
struct Message {
    bytes: Vec<u8>,
    /// Offsets of the length fields of open nested attributes.
    open: Vec<usize>,
}

impl Message {
    /// A change, acknowledged by the kernel.
    fn new(kind: u16, flags: u16) -> Self {
        Self::with_flags(kind, flags | NLM_F_ACK)
    }

    /// A query: the kernel answers with the data (or an error), no acknowledgement after it.
    fn query(kind: u16) -> Self {
        Self::with_flags(kind, 0)
    }

    fn with_flags(kind: u16, flags: u16) -> Self {
        let mut bytes = Vec::with_capacity(256);
        bytes.extend_from_slice(&0u32.to_ne_bytes()); // length, set by `finish`
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        bytes.extend_from_slice(&1u32.to_ne_bytes()); // sequence
        bytes.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
        Self {
            bytes,
            open: Vec::new(),
        }
    }

    /// `struct ifinfomsg`: family, type, index, flags, change mask.
    fn link_header(&mut self, index: i32, flags: u32, change: u32) {
        self.bytes.extend_from_slice(&[0, 0, 0, 0]);
        self.bytes.extend_from_slice(&index.to_ne_bytes());
        self.bytes.extend_from_slice(&flags.to_ne_bytes());
        self.bytes.extend_from_slice(&change.to_ne_bytes());
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }

    fn attribute(&mut self, kind: u16, payload: &[u8]) {
        let length = 4 + payload.len();
        self.bytes.extend_from_slice(&(length as u16).to_ne_bytes());
        self.bytes.extend_from_slice(&kind.to_ne_bytes());
        self.bytes.extend_from_slice(payload);
        self.pad();
    }

    fn name(&mut self, kind: u16, name: &str) {
        let mut payload = name.as_bytes().to_vec();
        payload.push(0);
        self.attribute(kind, &payload);
    }

    fn begin_nested(&mut self, kind: u16) {
        self.open.push(self.bytes.len());
        self.bytes.extend_from_slice(&0u16.to_ne_bytes());
        self.bytes
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
    }

    fn end_nested(&mut self) {
        if let Some(start) = self.open.pop() {
            let length = (self.bytes.len() - start) as u16;
            self.bytes[start..start + 2].copy_from_slice(&length.to_ne_bytes());
        }
    }

    fn finish(mut self) -> Vec<u8> {
        let length = self.bytes.len() as u32;
        self.bytes[..4].copy_from_slice(&length.to_ne_bytes());
        self.bytes
    }
}

/// What a pod's veth pair gets.
#[derive(Clone, Copy, Debug)]
pub struct VethPair<'a> {
    /// Host end, in the socket's namespace, created down (see [`Socket::isolate_and_up`]).
    pub host: &'a str,
    /// Pod end: created directly in `peer_netns` under this name, with `peer_mac`, down (see
    /// [`Socket::set_up`]).
    pub peer: &'a str,
    pub peer_mac: [u8; 6],
    pub mtu: u32,
    pub peer_netns: &'a std::fs::File,
}

/// A NETLINK_ROUTE socket of the namespace it was opened in.
pub struct Socket {
    fd: OwnedFd,
}

impl std::os::fd::AsFd for Socket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Socket {
    pub fn open() -> io::Result<Self> {
        // SAFETY: plain socket call; the descriptor is owned from here on.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor nothing else owns.
        Ok(Self {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Sends one request and waits for its acknowledgement (the kernel's error code).
    fn request(&self, message: Message) -> io::Result<()> {
        let reply = self.exchange(message)?;
        acknowledgement(&reply).unwrap_or_else(|| {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "no acknowledgement in the reply",
            ))
        })
    }

    /// Sends one request and returns the datagram that answers it.
    fn exchange(&self, message: Message) -> io::Result<Vec<u8>> {
        self.send(&message.finish())?;
        self.receive()
    }

    fn send(&self, bytes: &[u8]) -> io::Result<()> {
        // SAFETY: the buffer is valid for its length; the kernel is the destination (zeroed
        // sockaddr_nl).
        let sent = unsafe {
            let mut address: libc::sockaddr_nl = std::mem::zeroed();
            address.nl_family = libc::AF_NETLINK as u16;
            libc::sendto(
                self.fd.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                0,
                std::ptr::addr_of!(address).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The next datagram of the socket.
    fn receive(&self) -> io::Result<Vec<u8>> {
        let mut answer = vec![0u8; 32768];
        loop {
            // SAFETY: the buffer is valid for its length.
            let received = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    answer.as_mut_ptr().cast(),
                    answer.len(),
                    0,
                )
            };
            if received < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            answer.truncate(received as usize);
            return Ok(answer);
        }
    }

    /// Creates the pair in one request (see [`VethPair`]); fails if either name is taken. The
    /// host end is created down: [`Self::isolate_and_up`] brings it up.
    pub fn create_veth(&self, pair: &VethPair<'_>) -> io::Result<()> {
        let mut message = Message::new(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
        message.link_header(0, 0, 0);
        message.name(IFLA_IFNAME, pair.host);
        message.attribute(IFLA_MTU, &pair.mtu.to_ne_bytes());
        message.attribute(IFLA_TXQLEN, &1000u32.to_ne_bytes());
        message.begin_nested(IFLA_LINKINFO);
        message.name(IFLA_INFO_KIND, "veth");
        message.begin_nested(IFLA_INFO_DATA);
        message.begin_nested(VETH_INFO_PEER);
        // Down: the kernel opens the peer before it pairs the two (ENOTCONN).
        message.link_header(0, 0, 0);
        message.name(IFLA_IFNAME, pair.peer);
        message.attribute(IFLA_ADDRESS, &pair.peer_mac);
        message.attribute(IFLA_MTU, &pair.mtu.to_ne_bytes());
        message.attribute(
            IFLA_NET_NS_FD,
            &(pair.peer_netns.as_raw_fd() as u32).to_ne_bytes(),
        );
        message.end_nested();
        message.end_nested();
        message.end_nested();
        self.request(message)
    }

    /// Creates a veth pair `sending`–`receiving` in this namespace, both ends down (the node's
    /// segmenter, [`crate::dataplane::ebpf::segmenter`]); fails if either name is taken.
    pub fn create_segmenter_pair(
        &self,
        sending: &str,
        receiving: &str,
        mtu: u32,
    ) -> io::Result<()> {
        let mut message = Message::new(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
        message.link_header(0, 0, 0);
        message.name(IFLA_IFNAME, sending);
        message.attribute(IFLA_MTU, &mtu.to_ne_bytes());
        message.begin_nested(IFLA_LINKINFO);
        message.name(IFLA_INFO_KIND, "veth");
        message.begin_nested(IFLA_INFO_DATA);
        message.begin_nested(VETH_INFO_PEER);
        message.link_header(0, 0, 0);
        message.name(IFLA_IFNAME, receiving);
        message.attribute(IFLA_MTU, &mtu.to_ne_bytes());
        message.end_nested();
        message.end_nested();
        message.end_nested();
        self.request(message)
    }

    /// Keeps link `name` (a pod's host end) out of the node's own networking, then brings it up:
    /// IPv4 forwarding off on it and no ARP answered on it, and no IPv6 address generated for it
    /// (so none is answered by neighbour discovery). Frames the datapath leaves to the node's
    /// stack (a pod whose port is not programmed) then reach neither the node's addresses nor
    /// its routing. One request; without IPv6 in the kernel, the IPv4 part alone.
    pub fn isolate_and_up(&self, name: &str) -> io::Result<()> {
        let request = |ipv6: bool| {
            let mut message = Message::new(RTM_NEWLINK, 0);
            message.link_header(0, IFF_UP, IFF_UP);
            message.name(IFLA_IFNAME, name);
            message.begin_nested(IFLA_AF_SPEC);
            message.begin_nested(libc::AF_INET as u16);
            message.begin_nested(IFLA_INET_CONF);
            message.attribute(IPV4_DEVCONF_FORWARDING, &0u32.to_ne_bytes());
            message.attribute(IPV4_DEVCONF_ARP_IGNORE, &ARP_IGNORE_ALL.to_ne_bytes());
            message.end_nested();
            message.end_nested();
            if ipv6 {
                message.begin_nested(libc::AF_INET6 as u16);
                message.attribute(IFLA_INET6_ADDR_GEN_MODE, &[IN6_ADDR_GEN_MODE_NONE]);
                message.end_nested();
            }
            message.end_nested();
            message
        };
        match self.request(request(true)) {
            Err(error) if error.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
                self.request(request(false))
            }
            result => result,
        }
    }

    /// Brings link `index` up.
    pub fn set_up(&self, index: u32) -> io::Result<()> {
        let mut message = Message::new(RTM_NEWLINK, 0);
        message.link_header(index as i32, IFF_UP, IFF_UP);
        self.request(message)
    }

    /// The RFC 2863 operational state of link `index` (`IF_OPER_UP` is 6).
    pub fn operstate(&self, index: u32) -> io::Result<u8> {
        let mut message = Message::query(RTM_GETLINK);
        message.link_header(index as i32, 0, 0);
        let reply = self.exchange(message)?;
        if let Some(Err(error)) = acknowledgement(&reply) {
            return Err(error);
        }
        link_attribute(&reply, IFLA_OPERSTATE)
            .and_then(|value| value.first().copied())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no IFLA_OPERSTATE"))
    }

    /// Whether link `index` is tied to a link of another namespace (a veth whose peer is in a
    /// pod's namespace): the kernel then reports the peer's namespace id.
    pub fn peer_in_other_namespace(&self, index: u32) -> io::Result<bool> {
        let mut message = Message::query(RTM_GETLINK);
        message.link_header(index as i32, 0, 0);
        let reply = self.exchange(message)?;
        if let Some(Err(error)) = acknowledgement(&reply) {
            return Err(error);
        }
        Ok(link_attribute(&reply, IFLA_LINK_NETNSID).is_some())
    }

    /// Waits (polling, up to `timeout`) until link `index` is operationally up: the kernel's
    /// link watcher has seen its carrier, which is also when it gives the device its transmit
    /// queue (until then every frame it sends is dropped). Returns whether it came up.
    pub fn wait_up(&self, index: u32, timeout: std::time::Duration) -> io::Result<bool> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if self.operstate(index)? == IF_OPER_UP {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// The next hop towards `destination` in the main routing table: (link index, the gateway,
    /// or `destination` itself when it is on-link). Either family.
    pub fn next_hop(&self, destination: IpAddr) -> io::Result<(u32, IpAddr)> {
        let mut message = Message::query(RTM_GETROUTE);
        let (family, bits) = match destination {
            IpAddr::V4(_) => (libc::AF_INET, 32),
            IpAddr::V6(_) => (libc::AF_INET6, 128),
        };
        // struct rtmsg: family, dst length, the rest zero.
        message
            .bytes
            .extend_from_slice(&[family as u8, bits, 0, 0, 0, 0, 0, 0]);
        message.bytes.extend_from_slice(&0u32.to_ne_bytes());
        message.attribute(RTA_DST, &octets_of(destination));
        let reply = self.exchange(message)?;
        if let Some(Err(error)) = acknowledgement(&reply) {
            return Err(error);
        }
        let route = |kind| message_attribute(&reply, RTM_NEWROUTE, 12, kind);
        let index = route(RTA_OIF)
            .and_then(|value| value.try_into().ok())
            .map(u32::from_ne_bytes)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no RTA_OIF"))?;
        let gateway = route(RTA_GATEWAY)
            .and_then(|value| match value.len() {
                4 => <[u8; 4]>::try_from(value).ok().map(IpAddr::from),
                16 => <[u8; 16]>::try_from(value).ok().map(IpAddr::from),
                _ => None,
            })
            .unwrap_or(destination);
        Ok((index, gateway))
    }

    /// Makes the kernel resolve `ip`'s link-layer address on link `index` now (an entry with
    /// `NTF_USE`: an ARP request or neighbour solicitation if it has none, a probe if it is
    /// stale, nothing if it is fresh), without sending any other packet.
    pub fn resolve_neighbour(&self, index: u32, ip: IpAddr) -> io::Result<()> {
        let mut message = Message::new(RTM_NEWNEIGH, NLM_F_CREATE);
        let family = match ip {
            IpAddr::V4(_) => libc::AF_INET,
            IpAddr::V6(_) => libc::AF_INET6,
        };
        // struct ndmsg: family, padding (3), index, state, flags, type.
        message.bytes.extend_from_slice(&[family as u8, 0, 0, 0]);
        message
            .bytes
            .extend_from_slice(&(index as i32).to_ne_bytes());
        message.bytes.extend_from_slice(&0u16.to_ne_bytes());
        message.bytes.extend_from_slice(&[NTF_USE, 0]);
        message.attribute(NDA_DST, &octets_of(ip));
        self.request(message)
    }

    /// Deletes the link named `name` (and, for a veth, its peer); `Ok(false)` if there was none.
    /// By name in one request, so the name cannot come to mean another link in between.
    pub fn delete_link_named(&self, name: &str) -> io::Result<bool> {
        let mut message = Message::new(RTM_DELLINK, 0);
        message.link_header(0, 0, 0);
        message.name(IFLA_IFNAME, name);
        match self.request(message) {
            Ok(()) => Ok(true),
            Err(error) if error.raw_os_error() == Some(libc::ENODEV) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Adds `address/prefix_len` to link `index`. An IPv6 address is added without duplicate
    /// address detection (`IFA_F_NODAD`): usable at once, not tentative for a second (see
    /// [`crate::cni::plumbing`] for why a pod's address cannot be a duplicate).
    pub fn add_address(&self, index: u32, address: IpAddr, prefix_len: u8) -> io::Result<()> {
        let mut message = Message::new(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
        let (family, flags) = match address {
            IpAddr::V4(_) => (libc::AF_INET, 0),
            IpAddr::V6(_) => (libc::AF_INET6, IFA_F_NODAD),
        };
        // struct ifaddrmsg: family, prefix length, flags, scope, index.
        message
            .bytes
            .extend_from_slice(&[family as u8, prefix_len, flags, 0]);
        message.bytes.extend_from_slice(&index.to_ne_bytes());
        let octets = octets_of(address);
        message.attribute(IFA_LOCAL, &octets);
        message.attribute(IFA_ADDRESS, &octets);
        self.request(message)
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
        let mut message = Message::new(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE);
        let scope = if gateway.is_some() {
            RT_SCOPE_UNIVERSE
        } else {
            RT_SCOPE_LINK
        };
        let family = if destination.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        // struct rtmsg: family, dst/src length, tos, table, protocol, scope, type, flags.
        message.bytes.extend_from_slice(&[
            family as u8,
            prefix_len,
            0,
            0,
            RT_TABLE_MAIN,
            RTPROT_BOOT,
            scope,
            RTN_UNICAST,
        ]);
        message.bytes.extend_from_slice(&0u32.to_ne_bytes());
        if prefix_len > 0 {
            message.attribute(RTA_DST, &octets_of(destination));
        }
        if let Some(gateway) = gateway {
            message.attribute(RTA_GATEWAY, &octets_of(gateway));
        }
        message.attribute(RTA_OIF, &index.to_ne_bytes());
        self.request(message)
    }
}

/// An address's bytes in network order (4 or 16).
fn octets_of(address: IpAddr) -> Vec<u8> {
    match address {
        IpAddr::V4(address) => address.octets().to_vec(),
        IpAddr::V6(address) => address.octets().to_vec(),
    }
}

/// The outcome in a reply, if it holds our acknowledgement: `Ok` for an ACK (error 0).
fn acknowledgement(reply: &[u8]) -> Option<io::Result<()>> {
    let mut offset = 0;
    while offset + 16 <= reply.len() {
        let length = u32::from_ne_bytes(reply[offset..offset + 4].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(reply[offset + 4..offset + 6].try_into().ok()?);
        if length < 16 || offset + length > reply.len() {
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "truncated netlink reply",
            )));
        }
        if kind == NLMSG_ERROR && length >= 20 {
            let code = i32::from_ne_bytes(reply[offset + 16..offset + 20].try_into().ok()?);
            return Some(if code == 0 {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(-code))
            });
        }
        offset += length.next_multiple_of(4);
    }
    None
}

/// Attribute `kind` of the RTM_NEWLINK message in `reply`; `None` if the reply is an error or
/// lacks it.
fn link_attribute(reply: &[u8], kind: u16) -> Option<&[u8]> {
    message_attribute(reply, RTM_NEWLINK, 16, kind)
}

/// Attribute `kind` of the first message of `reply` if it is of type `message_type`, whose fixed
/// part after the netlink header is `fixed` bytes long.
fn message_attribute(reply: &[u8], message_type: u16, fixed: usize, kind: u16) -> Option<&[u8]> {
    let length = u32::from_ne_bytes(reply.get(..4)?.try_into().ok()?) as usize;
    let message = reply.get(..length)?;
    if u16::from_ne_bytes(message.get(4..6)?.try_into().ok()?) != message_type {
        return None;
    }
    find_attribute(message.get(16 + fixed..)?, kind)
}

/// Attribute `kind` among the attributes packed in `attributes` (a message's, or a nested
/// attribute's payload); `None` if absent or if they are malformed before it.
fn find_attribute(attributes: &[u8], kind: u16) -> Option<&[u8]> {
    let mut offset = 0;
    while offset + 4 <= attributes.len() {
        let size = usize::from(u16::from_ne_bytes(
            attributes[offset..offset + 2].try_into().ok()?,
        ));
        let attribute = u16::from_ne_bytes(attributes[offset + 2..offset + 4].try_into().ok()?);
        if size < 4 || offset + size > attributes.len() {
            return None;
        }
        if attribute & !NLA_F_NESTED == kind {
            return Some(&attributes[offset + 4..offset + size]);
        }
        offset += size.next_multiple_of(4);
    }
    None
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
mod tests {
    use super::*;

    #[test]
    fn the_loopback_address_is_found_on_lo() {
        assert_eq!(
            interface_with_address(Ipv4Addr::LOCALHOST.into())
                .unwrap()
                .as_deref(),
            Some("lo")
        );
        assert_eq!(
            interface_with_address(Ipv4Addr::new(192, 0, 2, 254).into()).unwrap(),
            None
        );
    }

    /// The veth request nests peer attributes (with their own ifinfomsg) inside
    /// IFLA_LINKINFO/IFLA_INFO_DATA/VETH_INFO_PEER, lengths covering exactly their contents.
    #[test]
    fn nested_attributes_have_consistent_lengths() {
        let mut message = Message::new(RTM_NEWLINK, NLM_F_CREATE);
        message.link_header(0, IFF_UP, IFF_UP);
        message.name(IFLA_IFNAME, "abc_h");
        message.begin_nested(IFLA_LINKINFO);
        message.name(IFLA_INFO_KIND, "veth");
        message.begin_nested(IFLA_INFO_DATA);
        message.attribute(IFLA_MTU, &1400u32.to_ne_bytes());
        message.end_nested();
        message.end_nested();
        let bytes = message.finish();
        assert_eq!(
            u32::from_ne_bytes(bytes[..4].try_into().unwrap()) as usize,
            bytes.len()
        );
        // Header 16 + ifinfomsg 16, then IFLA_IFNAME ("abc_h\0" → 4 + 6, padded to 12).
        assert_eq!(&bytes[32..36], &[10, 0, 3, 0]);
        let linkinfo = 44;
        let linkinfo_length = u16::from_ne_bytes([bytes[linkinfo], bytes[linkinfo + 1]]);
        assert_eq!(usize::from(linkinfo_length), bytes.len() - linkinfo);
        assert_eq!(
            u16::from_ne_bytes([bytes[linkinfo + 2], bytes[linkinfo + 3]]),
            IFLA_LINKINFO | NLA_F_NESTED
        );
        // IFLA_INFO_KIND "veth\0" (4 + 5 → 12), then IFLA_INFO_DATA holding one 8-byte MTU.
        let data = linkinfo + 4 + 12;
        assert_eq!(u16::from_ne_bytes([bytes[data], bytes[data + 1]]), 4 + 8);
    }

    #[test]
    fn acknowledgements_carry_the_kernel_error() {
        let reply = |code: i32| {
            let mut bytes = 36u32.to_ne_bytes().to_vec();
            bytes.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            bytes.extend_from_slice(&[0; 10]);
            bytes.extend_from_slice(&code.to_ne_bytes());
            bytes.extend_from_slice(&[0; 16]);
            bytes
        };
        assert!(matches!(acknowledgement(&reply(0)), Some(Ok(()))));
        let error = acknowledgement(&reply(-libc::EEXIST)).unwrap().unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EEXIST));
        assert!(acknowledgement(&[0; 8]).is_none());
        assert!(matches!(acknowledgement(&reply(0)[..20]), Some(Err(_))));
    }

    #[test]
    fn link_attributes_are_found_in_a_newlink_reply() {
        let mut message = Message::query(RTM_NEWLINK);
        message.link_header(7, 0, 0);
        message.name(IFLA_IFNAME, "eth0");
        message.attribute(IFLA_OPERSTATE, &[IF_OPER_UP]);
        let reply = message.finish();
        assert_eq!(
            link_attribute(&reply, IFLA_OPERSTATE),
            Some(&[IF_OPER_UP][..])
        );
        assert_eq!(link_attribute(&reply, IFLA_MTU), None);
        assert_eq!(link_attribute(&reply[..30], IFLA_OPERSTATE), None);
    }

    #[test]
    fn route_attributes_follow_the_rtmsg() {
        let mut message = Message::query(RTM_NEWROUTE);
        message
            .bytes
            .extend_from_slice(&[libc::AF_INET as u8, 32, 0, 0, 254, 0, 0, 1, 0, 0, 0, 0]);
        message.attribute(RTA_OIF, &7u32.to_ne_bytes());
        message.attribute(RTA_GATEWAY, &[10, 0, 0, 1]);
        let reply = message.finish();
        assert_eq!(
            message_attribute(&reply, RTM_NEWROUTE, 12, RTA_GATEWAY),
            Some(&[10, 0, 0, 1][..])
        );
        assert_eq!(
            message_attribute(&reply, RTM_NEWROUTE, 12, RTA_OIF),
            Some(&7u32.to_ne_bytes()[..])
        );
        assert_eq!(message_attribute(&reply, RTM_NEWLINK, 12, RTA_OIF), None);
    }
}
