//! Indexes of [`crate::map::ROUTER_REPLIES`]: what the datapath sent back to a pod for a router
//! (and, `acl_*`, for a switch's `reject` ACL), and the neighbours routers reported for learning.

/// ICMP echo reply from a router address.
pub const ECHO_REPLY: u32 = 0;
/// ICMP time exceeded from the router where a packet's TTL ran out.
pub const TIME_EXCEEDED: u32 = 1;
/// TCP reset for TCP to a router address.
pub const TCP_RESET: u32 = 2;
/// ICMP port unreachable for UDP to a router address.
pub const PORT_UNREACHABLE: u32 = 3;
/// ICMP protocol unreachable for other protocols to a router address.
pub const PROTOCOL_UNREACHABLE: u32 = 4;
/// ARP request a router broadcast for a next hop it had no MAC for (OVN's
/// `lr_in_arp_request`); the packet that needed it is dropped, as ovn-trace shows it.
pub const ARP_REQUEST: u32 = 5;
/// Neighbour solicitation a router multicast for an IPv6 next hop it had no MAC for.
pub const ND_SOLICITATION: u32 = 6;
/// TCP reset for TCP a `reject` ACL refused.
pub const ACL_TCP_RESET: u32 = 7;
/// ICMP destination unreachable (port unreachable for UDP, host unreachable otherwise) for
/// other IPv4 a `reject` ACL refused.
pub const ACL_UNREACHABLE: u32 = 8;
/// Router advertisement answering a pod's router solicitation (OVN's `put_nd_ra_opts`).
pub const ROUTER_ADVERTISEMENT: u32 = 9;
/// An ARP sender a router heard of reported to the agent for MAC learning ([`crate::NeighbourEvent`]).
pub const NEIGHBOUR_REPORTED: u32 = 10;
/// Such a report lost: the ring buffer was full (the sender is reported again by its next ARP).
pub const NEIGHBOUR_REPORT_LOST: u32 = 11;
/// ARP reply to the provider network for a distributed NAT rule's external address (the
/// router's answer for its gateway port).
pub const ARP_REPLY_PROVIDER: u32 = 12;
/// Number of kinds.
pub const COUNT: u32 = 13;
/// The map's size: room for kinds to come without a new layout.
pub const CAPACITY: u32 = 32;
const _: () = assert!(COUNT <= CAPACITY);
/// Names for metrics and logs, by index.
pub const NAMES: [&str; COUNT as usize] = [
    "echo_reply",
    "time_exceeded",
    "tcp_reset",
    "port_unreachable",
    "protocol_unreachable",
    "arp_request",
    "nd_solicitation",
    "acl_tcp_reset",
    "acl_unreachable",
    "router_advertisement",
    "neighbour_reported",
    "neighbour_report_lost",
    "arp_reply_provider",
];
