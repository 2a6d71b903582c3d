//! Program names as they appear in the object file (the function names in the eBPF crate).

/// A cls_bpf filter on ingress of a pod's host-side veth: traffic leaving the pod.
pub const FROM_POD: &str = "from_pod";
/// A tcx link on ingress of the node's tunnel/uplink NIC: traffic arriving from other nodes.
pub const FROM_UPLINK: &str = "from_uplink";
/// A tcx link on ingress of a provider NIC (an underlay network): VLAN traffic for local pods.
pub const FROM_PROVIDER: &str = "from_provider";
/// A tcx link on ingress of the receiving end of the node's segmenter veth pair (see
/// [`crate::TunnelConfig`]): encapsulated segments to checksum and send out of the uplink.
pub const FROM_SEGMENTER: &str = "from_segmenter";
/// The flood stage, tail-called from `from_pod` (slot [`crate::stage::FLOOD`] of
/// [`crate::map::STAGES`]); attached to no interface.
pub const FLOOD: &str = "flood";
/// The IPv6 stage, tail-called from `from_pod` (slot [`crate::stage::IPV6`]): the ND
/// responder and what the kernel's router does with IPv6.
pub const IPV6: &str = "ipv6";
/// The logical router stage, tail-called from `from_pod` (slot [`crate::stage::ROUTER`]): what
/// a pod sends to a router port's MAC, but IPv6.
pub const ROUTER: &str = "router";
/// The switch's ingress ACL stage, tail-called from `from_pod` (slot
/// [`crate::stage::ACL_INGRESS`]): from-lport ACLs and conntrack, then the rest of the switch.
pub const ACL_INGRESS: &str = "acl_ingress";
/// The switch's egress ACL stage, tail-called by deliveries to ports with to-lport ACLs (slot
/// [`crate::stage::ACL_EGRESS`]).
pub const ACL_EGRESS: &str = "acl_egress";
/// What an ACL stage rejected, answered (slot [`crate::stage::ACL_REJECT`]).
pub const ACL_REJECT: &str = "acl_reject";
/// The after-LB half of the ingress ACL stage (slot [`crate::stage::ACL_AFTER_LB`]).
pub const ACL_AFTER_LB: &str = "acl_after_lb";
/// The IPv6 routing stage, tail-called from the IPv6 stage (slot [`crate::stage::ROUTE6`]).
pub const ROUTE6: &str = "route6";
/// The load-balancer stage, tail-called from `from_pod` for packets to a VIP of the pod's
/// switch (slot [`crate::stage::LB`]).
pub const LB: &str = "lb";
/// The active gateway chassis's NAT stage, tail-called by the router stage, `from_uplink` and
/// `from_provider` (slot [`crate::stage::GATEWAY_NAT`]).
pub const GATEWAY_NAT: &str = "gateway_nat";
/// The socket-level balancer's programs (cgroup `sock_addr` hooks, attached to a cgroup with
/// `--socket-lb`): a connect() to a VIP goes to a backend instead; so does a datagram sent to
/// one; what the socket's owner reads back (a datagram's source, its peer) is the VIP again.
pub const SOCK_CONNECT4: &str = "sock_connect4";
pub const SOCK_SENDMSG4: &str = "sock_sendmsg4";
pub const SOCK_RECVMSG4: &str = "sock_recvmsg4";
pub const SOCK_GETPEERNAME4: &str = "sock_getpeername4";
/// The socket-level balancer's `sock_release` hook (a cgroup `sock` program): a connected
/// socket's reverse entry goes with it.
pub const SOCK_RELEASE: &str = "sock_release";
/// The socket-level programs, which the agent loads as cgroup programs, not classifiers.
pub const SOCKET_LB: [&str; 5] = [
    SOCK_CONNECT4,
    SOCK_SENDMSG4,
    SOCK_RECVMSG4,
    SOCK_GETPEERNAME4,
    SOCK_RELEASE,
];
/// Every program the object must contain; each one is loaded through the verifier at start-up.
pub const ALL: [&str; 19] = [
    FROM_POD,
    FROM_UPLINK,
    FROM_PROVIDER,
    FROM_SEGMENTER,
    FLOOD,
    IPV6,
    ROUTER,
    ACL_INGRESS,
    ACL_EGRESS,
    ACL_REJECT,
    ACL_AFTER_LB,
    LB,
    ROUTE6,
    GATEWAY_NAT,
    SOCK_CONNECT4,
    SOCK_SENDMSG4,
    SOCK_RECVMSG4,
    SOCK_GETPEERNAME4,
    SOCK_RELEASE,
];
/// The tail-called stages and their slots in [`crate::map::STAGES`].
pub const STAGES: [(&str, u32); 10] = [
    (FLOOD, crate::stage::FLOOD),
    (IPV6, crate::stage::IPV6),
    (ROUTER, crate::stage::ROUTER),
    (ACL_INGRESS, crate::stage::ACL_INGRESS),
    (ACL_EGRESS, crate::stage::ACL_EGRESS),
    (ACL_REJECT, crate::stage::ACL_REJECT),
    (ACL_AFTER_LB, crate::stage::ACL_AFTER_LB),
    (LB, crate::stage::LB),
    (ROUTE6, crate::stage::ROUTE6),
    (GATEWAY_NAT, crate::stage::GATEWAY_NAT),
];
