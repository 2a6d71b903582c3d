//! Links: a pod's veth pair created in one request with its peer born in the pod's namespace, the
//! node's segmenter pair, a host end kept out of the node's networking, brought up, read
//! (operational state, peer namespace), waited for through link notifications, deleted by name.
//! Requests of the parent's [`Socket`].

use std::{
    io,
    os::fd::{AsFd, AsRawFd},
    time::Duration,
};

use netlink_packet_core::{DefaultNla, Emitable, NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::{
    AddressFamily, RouteNetlinkMessage,
    link::{
        AfSpecInet, AfSpecInet6, AfSpecUnspec, In6AddrGenMode, InfoData, InfoKind, InfoVeth,
        LinkAttribute, LinkFlags, LinkInfo, LinkMessage, State,
    },
};

use super::{Socket, invalid};

/// `RTNLGRP_LINK`: the group of link notifications.
const LINK_GROUP: u32 = 1;
/// `IFLA_INET_CONF` and the two `IPV4_DEVCONF_*` entries a pod's host end changes.
const IFLA_INET_CONF: u16 = 1;
const IPV4_DEVCONF_FORWARDING: u16 = 1;
const IPV4_DEVCONF_ARP_IGNORE: u16 = 19;
/// `arp_ignore` 8: answer no ARP request on this link, whatever address it asks for.
const ARP_IGNORE_ALL: u32 = 8;

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

/// A link message about link `index` (0: the one the attributes name).
fn link(index: u32, attributes: Vec<LinkAttribute>) -> LinkMessage {
    let mut message = LinkMessage::default();
    message.header.index = index;
    message.attributes = attributes;
    message
}

/// A veth link `name` whose peer is `peer` (its own link message).
fn veth(name: &str, mtu: u32, mut extra: Vec<LinkAttribute>, peer: LinkMessage) -> LinkMessage {
    let mut attributes = vec![
        LinkAttribute::IfName(name.to_string()),
        LinkAttribute::Mtu(mtu),
    ];
    attributes.append(&mut extra);
    attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Veth),
        LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
    ]));
    link(0, attributes)
}

/// The `IFLA_AF_SPEC` that keeps a link out of the node's networking: IPv4 forwarding off, no
/// ARP answered, and (with `ipv6`) no IPv6 address generated.
///
/// The IPv4 part is an `IFLA_INET_CONF` nest of `DefaultNla`s emitted by the crate: its
/// `AfSpecInet::DevConfRequest` leaves out every entry whose value is 0, so it cannot say
/// "forwarding off".
fn isolation(ipv6: bool) -> Vec<AfSpecUnspec> {
    let entries = [
        DefaultNla::new(IPV4_DEVCONF_FORWARDING, 0u32.to_ne_bytes().to_vec()),
        DefaultNla::new(
            IPV4_DEVCONF_ARP_IGNORE,
            ARP_IGNORE_ALL.to_ne_bytes().to_vec(),
        ),
    ];
    let mut nest = vec![0; entries.as_slice().buffer_len()];
    entries.as_slice().emit(&mut nest);
    let mut spec = vec![AfSpecUnspec::Inet(vec![AfSpecInet::Other(
        DefaultNla::new(IFLA_INET_CONF | netlink_packet_core::NLA_F_NESTED, nest),
    )])];
    if ipv6 {
        spec.push(AfSpecUnspec::Inet6(vec![AfSpecInet6::AddrGenMode(
            In6AddrGenMode::None,
        )]));
    }
    spec
}

impl Socket {
    /// Creates the pair in one request (see [`VethPair`]); fails if either name is taken. The
    /// host end is created down: [`Self::isolate_and_up`] brings it up.
    pub fn create_veth(&self, pair: &VethPair<'_>) -> io::Result<()> {
        // Down: the kernel opens the peer before it pairs the two (ENOTCONN).
        let peer = link(
            0,
            vec![
                LinkAttribute::IfName(pair.peer.to_string()),
                LinkAttribute::Address(pair.peer_mac.to_vec()),
                LinkAttribute::Mtu(pair.mtu),
                LinkAttribute::NetNsFd(pair.peer_netns.as_raw_fd()),
            ],
        );
        let host = veth(
            pair.host,
            pair.mtu,
            vec![LinkAttribute::TxQueueLen(1000)],
            peer,
        );
        self.change(
            RouteNetlinkMessage::NewLink(host),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// Creates a veth pair `sending`–`receiving` in this namespace, both ends down (the node's
    /// segmenter, [`crate::dataplane::ebpf::segmenter`]); fails if either name is taken.
    pub fn create_segmenter_pair(
        &self,
        sending: &str,
        receiving: &str,
        mtu: u32,
    ) -> io::Result<()> {
        let peer = link(
            0,
            vec![
                LinkAttribute::IfName(receiving.to_string()),
                LinkAttribute::Mtu(mtu),
            ],
        );
        self.change(
            RouteNetlinkMessage::NewLink(veth(sending, mtu, Vec::new(), peer)),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// Keeps link `name` (a pod's host end) out of the node's own networking, then brings it up:
    /// IPv4 forwarding off on it and no ARP answered on it, and no IPv6 address generated for it
    /// (so none is answered by neighbour discovery). Frames the datapath leaves to the node's
    /// stack (a pod whose port is not programmed) then reach neither the node's addresses nor
    /// its routing. One request; without IPv6 in the kernel, the IPv4 part alone.
    pub fn isolate_and_up(&self, name: &str) -> io::Result<()> {
        let request = |ipv6: bool| {
            let mut message = link(
                0,
                vec![
                    LinkAttribute::IfName(name.to_string()),
                    LinkAttribute::AfSpecUnspec(isolation(ipv6)),
                ],
            );
            message.header.flags = LinkFlags::Up;
            message.header.change_mask = LinkFlags::Up;
            RouteNetlinkMessage::NewLink(message)
        };
        match self.change(request(true), 0) {
            Err(error) if error.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
                self.change(request(false), 0)
            }
            result => result,
        }
    }

    /// Brings link `index` up.
    pub fn set_up(&self, index: u32) -> io::Result<()> {
        let mut message = link(index, Vec::new());
        message.header.flags = LinkFlags::Up;
        message.header.change_mask = LinkFlags::Up;
        self.change(RouteNetlinkMessage::NewLink(message), 0)
    }

    /// Link `index` as the kernel describes it.
    fn get_link(&self, index: u32) -> io::Result<LinkMessage> {
        let mut message = LinkMessage::default();
        message.header.interface_family = AddressFamily::Unspec;
        message.header.index = index;
        match self.query(RouteNetlinkMessage::GetLink(message))? {
            RouteNetlinkMessage::NewLink(link) => Ok(link),
            other => Err(invalid(format!("a link query answered by {other:?}"))),
        }
    }

    /// Whether link `index` is operationally up (RFC 2863).
    pub fn is_up(&self, index: u32) -> io::Result<bool> {
        Ok(operstate(&self.get_link(index)?) == Some(State::Up))
    }

    /// Whether link `index` is tied to a link of another namespace (a veth whose peer is in a
    /// pod's namespace): the kernel then reports the peer's namespace id.
    pub fn peer_in_other_namespace(&self, index: u32) -> io::Result<bool> {
        Ok(self
            .get_link(index)?
            .attributes
            .iter()
            .any(|attribute| matches!(attribute, LinkAttribute::LinkNetNsId(_))))
    }

    /// Waits, up to `timeout`, until link `index` is operationally up: the kernel's link watcher
    /// has seen its carrier, which is also when it gives the device its transmit queue (until
    /// then every frame it sends is dropped). Returns whether it came up. Woken by the link's
    /// notifications (the socket joins the link group for the wait), not by polling.
    pub fn wait_up(&self, index: u32, timeout: Duration) -> io::Result<bool> {
        self.socket.add_membership(LINK_GROUP)?;
        let result = self.wait_up_joined(index, timeout);
        let _ = self.socket.drop_membership(LINK_GROUP);
        result
    }

    /// [`Self::wait_up`] once the socket receives link notifications: the state is read after
    /// joining, so a change between the two is not missed.
    fn wait_up_joined(&self, index: u32, timeout: Duration) -> io::Result<bool> {
        let deadline = std::time::Instant::now() + timeout;
        let mut read_state = true;
        loop {
            if read_state && self.is_up(index)? {
                return Ok(true);
            }
            read_state = false;
            let remaining = deadline.saturating_duration_since(std::time::Instant::now());
            if remaining.is_zero() || !crate::readiness::readable_within(self.as_fd(), remaining)? {
                return Ok(false);
            }
            let (datagram, notification) = match self.receive() {
                Ok(received) => received,
                // Notifications were lost: read the state again.
                Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => {
                    read_state = true;
                    continue;
                }
                Err(error) => return Err(error),
            };
            if !notification {
                continue;
            }
            for bytes in super::datagrams_messages(&datagram)? {
                let Ok(message) =
                    netlink_packet_core::NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes)
                else {
                    read_state = true;
                    continue;
                };
                if let netlink_packet_core::NetlinkPayload::InnerMessage(
                    RouteNetlinkMessage::NewLink(link),
                ) = message.payload
                    && link.header.index == index
                    && operstate(&link) == Some(State::Up)
                {
                    return Ok(true);
                }
            }
        }
    }

    /// Deletes the link named `name` (and, for a veth, its peer); `Ok(false)` if there was none.
    /// By name in one request, so the name cannot come to mean another link in between.
    pub fn delete_link_named(&self, name: &str) -> io::Result<bool> {
        let message = link(0, vec![LinkAttribute::IfName(name.to_string())]);
        match self.change(RouteNetlinkMessage::DelLink(message), 0) {
            Ok(()) => Ok(true),
            Err(error) if error.raw_os_error() == Some(libc::ENODEV) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// The operational state a link message reports, if it does.
fn operstate(link: &LinkMessage) -> Option<State> {
    link.attributes
        .iter()
        .find_map(|attribute| match attribute {
            LinkAttribute::OperState(state) => Some(*state),
            _ => None,
        })
}
