//! The reasons a program drops a frame: indexes of [`crate::map::DROP_COUNTERS`] and of
//! [`NAMES`].

/// Why a program dropped a frame: an index of [`crate::map::DROP_COUNTERS`] and of
/// [`NAMES`] (the reasons are the constants of [this module](self)).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropReason(pub u32);

/// Addressed to our Geneve port but not a frame OVN sends (version, options, protocol,
/// lengths).
pub const GENEVE_MALFORMED: DropReason = DropReason(0);
/// A well-formed Geneve frame whose (VNI, egress port key) has no local port.
pub const GENEVE_UNKNOWN_DESTINATION: DropReason = DropReason(1);
/// The kernel refused to strip the outer headers.
pub const DECAP_FAILED: DropReason = DropReason(2);
/// The kernel refused to make room for the outer headers.
pub const ENCAP_FAILED: DropReason = DropReason(3);
/// A pod sent with a source MAC or IPv4 address its port security does not allow.
pub const PORT_SECURITY: DropReason = DropReason(4);
/// A flood copy for another chassis whose next hop has no resolved neighbour entry.
pub const FLOOD_NEXT_HOP_UNRESOLVED: DropReason = DropReason(5);
/// A clone for a flood group member failed.
pub const FLOOD_CLONE_FAILED: DropReason = DropReason(6);
/// The kernel refused to rewrite a router's reply.
pub const ROUTER_REPLY_FAILED: DropReason = DropReason(7);
/// A router the kernel does not forward for (its pipeline has flows the kernel lacks:
/// policies, NAT, ECMP…): counted, never forwarded half-right.
pub const ROUTER_UNSUPPORTED: DropReason = DropReason(8);
/// No route to the destination.
pub const NO_ROUTE: DropReason = DropReason(9);
/// The next hop's MAC is not known and the router sends no ARP request for it (a router
/// without `lr_in_arp_request`, or a switch without a flood group to send it to).
pub const NEXT_HOP_UNRESOLVED: DropReason = DropReason(10);
/// TTL expires past the first router (the first router's own expiry is answered with ICMP
/// time exceeded; a later router's is only counted so far).
pub const TTL_EXPIRED: DropReason = DropReason(11);
/// More router hops than the kernel follows.
pub const TOO_MANY_HOPS: DropReason = DropReason(12);
/// The routed frame's next switch has no entry for the neighbour's MAC.
pub const ROUTED_UNKNOWN_DESTINATION: DropReason = DropReason(13);
/// Traffic to a router's own address the kernel does not answer: later fragments (OVN drops
/// them too), SCTP (OVN's `sctp_abort` is not built), or a protocol the address has no
/// answer for.
pub const TO_ROUTER_UNHANDLED: DropReason = DropReason(14);
/// An IP packet to a router that is malformed (IPv4 with options, which the kernel does not
/// route, or a frame whose header does not say its version).
pub const ROUTED_MALFORMED: DropReason = DropReason(15);
/// Unicast to a MAC the switch does not know, on a switch that does not flood unknown
/// unicast: OVN drops it (`ls_in_l2_unknown`).
pub const UNKNOWN_DESTINATION: DropReason = DropReason(16);
/// ARP to a router's MAC that the ARP responder does not answer (a reply, or a request
/// for an address that is not the router's): OVN's router consumes it, learning its
/// sender, which ovnbpf does not do yet.
pub const ARP_TO_ROUTER: DropReason = DropReason(17);
/// IPv6 to a router's MAC that the kernel's router does not handle: multicast to the router
/// (other than the neighbour discovery the switch and router answer), and IPv6 that reaches
/// the router stage, which routes IPv4 only (the IPv6 stage routes the rest).
pub const IPV6_TO_ROUTER: DropReason = DropReason(18);
/// A frame for a port with port security to a MAC or IPv4 address the port does not list:
/// OVN drops it in the egress pipeline (`ls_out_apply_port_sec`).
pub const EGRESS_PORT_SECURITY: DropReason = DropReason(19);
/// A later stage's slot in `STAGES` is empty or the tail call failed (the agent fills the
/// slots at start; a frame is never half-handled without it).
pub const STAGE_MISSING: DropReason = DropReason(20);
/// A stage was reached without a request from `from_pod` in the control block.
pub const STAGE_REQUEST_INVALID: DropReason = DropReason(21);
/// Neighbour discovery to a router's MAC that the switch's responder did not answer: OVN's
/// router consumes it (learning its sender, which ovnbpf does not do).
pub const ND_TO_ROUTER: DropReason = DropReason(22);
/// A router policy (`lr_in_policy`) drops the packet.
pub const POLICY_DROP: DropReason = DropReason(23);
/// An ECMP route or reroute whose chosen member the kernel has no entry for (its member flow
/// is missing from the Southbound, or its output port is unknown).
pub const ECMP_MEMBER_MISSING: DropReason = DropReason(24);
/// A discard (blackhole) route routes the packet (OVN drops it in `lr_in_ip_routing`).
pub const ROUTE_DISCARD: DropReason = DropReason(25);
/// Number of reasons.
/// An ACL dropped the packet (`drop`, or a blocked connection's reply, or an invalid one).
pub const ACL_DROP: DropReason = DropReason(26);
/// An ACL rejected the packet and no answer was sent: it was itself a TCP reset or an ICMP
/// destination unreachable (which OVN's pinctrl never answers), SCTP (OVN's `sctp_abort` is not
/// built), or IPv4 with options or a later fragment. Rejects that are answered are counted with
/// the replies (`acl_tcp_reset`, `acl_unreachable`).
pub const ACL_REJECT: DropReason = DropReason(27);
/// The switch has an ACL flow that did not translate: security fails closed.
pub const ACL_FAIL_CLOSED: DropReason = DropReason(28);
/// IPv6 (other than neighbour discovery) through a switch's ACL stage, which takes IPv4 only
/// until issue 21.
pub const ACL_IPV6: DropReason = DropReason(29);
/// An ACL rejected the packet and its answer could not be built in place of it (the kernel
/// refused to reshape the frame); it is dropped unanswered.
pub const ACL_REJECT_FAILED: DropReason = DropReason(30);
/// A new connection to a load balancer's VIP that has no backends (OVN's `drop;` in
/// `ls_in_lb`; with the balancer's `options:reject=true` it is answered instead, counted with
/// the replies).
pub const LB_NO_BACKENDS: DropReason = DropReason(31);
/// The kernel refused to rewrite a balanced packet's addresses or ports.
pub const LB_NAT_FAILED: DropReason = DropReason(32);
/// A VIP's backend is missing from its group (the agent is rewriting the group).
pub const LB_BACKEND_MISSING: DropReason = DropReason(33);
/// An answer to the agent's health-check probe (to the service monitor MAC: northd's
/// `handle_svc_check`), which the agent read from the pod's interface before the datapath:
/// counted, not reported as an event.
pub const SERVICE_MONITOR: DropReason = DropReason(34);
/// Over an IPv6 underlay: a frame for another chassis whose endpoint key has no address in
/// `REMOTE_ENCAPS` (the agent is rewriting the endpoints, or the chassis's Encap is IPv4).
pub const TUNNEL_ENDPOINT_UNKNOWN: DropReason = DropReason(35);
/// Routed out of a gateway port (OVN-native NAT and EIPs, a VPC's external access through its
/// gateway chassis) whose chassisredirect port is active nowhere this chassis reaches, or whose
/// gateway carries centralized NAT, which the datapath does not yet; the rest of the router is
/// routed.
pub const GATEWAY_UNSUPPORTED: DropReason = DropReason(36);
/// The kernel refused to rewrite an address of a packet a distributed NAT rule translates.
pub const NAT_FAILED: DropReason = DropReason(37);
/// A packet a centralized SNAT rule covers that the gateway cannot translate: not TCP, UDP or
/// an ICMP echo, a later fragment, IPv4 options, or no free port for it.
pub const SNAT_UNSUPPORTED: DropReason = DropReason(38);
pub const COUNT: u32 = 39;
/// Entries of `DROP_COUNTERS`: room for reasons added later without a layout change.
pub const CAPACITY: u32 = 64;
const _: () = assert!(COUNT <= CAPACITY);
/// Names for metrics and logs, by index.
pub const NAMES: [&str; COUNT as usize] = [
    "geneve_malformed",
    "geneve_unknown_destination",
    "decap_failed",
    "encap_failed",
    "port_security",
    "flood_next_hop_unresolved",
    "flood_clone_failed",
    "router_reply_failed",
    "router_unsupported",
    "no_route",
    "next_hop_unresolved",
    "ttl_expired",
    "too_many_hops",
    "routed_unknown_destination",
    "to_router_unhandled",
    "routed_malformed",
    "unknown_destination",
    "arp_to_router",
    "ipv6_to_router",
    "egress_port_security",
    "stage_missing",
    "stage_request_invalid",
    "nd_to_router",
    "policy_drop",
    "ecmp_member_missing",
    "route_discard",
    "acl_drop",
    "acl_reject",
    "acl_fail_closed",
    "acl_ipv6",
    "acl_reject_failed",
    "lb_no_backends",
    "lb_nat_failed",
    "lb_backend_missing",
    "service_monitor",
    "tunnel_endpoint_unknown",
    "gateway_unsupported",
    "nat_failed",
    "snat_unsupported",
];
