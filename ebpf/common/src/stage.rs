//! Slots of [`crate::map::STAGES`], the program array the entry programs tail-call their later
//! stages through: each stage is a program of its own, with its own 512-byte stack and verifier
//! budget.
//! The agent fills the slots after loading (a restarted agent overwrites them with its own
//! programs, which run the same layout: the pinned array lives in the layout-versioned
//! directory).
//!
//! Each stage's request travels in the skb's control block; its types are here.

/// Floods a frame to a group ([`FloodRequest`] in the skb's control block).
pub const FLOOD: u32 = 0;
/// IPv6 from a pod that the switch's ND responder or a router handles ([`Ipv6Request`]).
pub const IPV6: u32 = 1;
/// A frame from a pod to a router port's MAC, not IPv6: the logical router ([`RouterRequest`]);
/// also IPv6 the IPv6 stage routed, for its L2 output step ([`ROUTED6_REQUEST_MAGIC`]).
pub const ROUTER: u32 = 2;
/// An IP frame through a switch's ingress ACL stage ([`AclRequest`]), which then switches it.
pub const ACL_INGRESS: u32 = 3;
/// An IP frame through a switch's egress ACL stage before it is delivered to a local port
/// ([`AclRequest`]).
pub const ACL_EGRESS: u32 = 4;
/// An IP frame an ACL stage rejected ([`AclRequest`], [`REJECT_FROM_EGRESS`] in `flags` for
/// the egress stage's): answered with a TCP reset or an ICMP unreachable, as OVN's `reject`.
pub const ACL_REJECT: u32 = 5;
/// The second half of a switch's ingress ACL stage (`ls_in_acl_after_lb` and the commit), for
/// switches with after-LB rules ([`AclRequest`], the first half's verdict in `flags`), which
/// then switches the frame.
pub const ACL_AFTER_LB: u32 = 6;
/// An IPv4 frame from a pod to an address that is a load balancer's VIP on its switch
/// ([`AclRequest`] with [`LB_REQUEST_MAGIC`], the ingress port in `ports`' high 16 bits as for
/// the ingress ACL stage): balanced, then on through the switch. Also an ICMP error a delivery
/// hands it ([`AclRequest`] with [`LB_ICMP_REQUEST_MAGIC`], as for the egress ACL stage): the
/// packet it quotes translated back if a balanced connection's, then delivered.
pub const LB: u32 = 7;
/// IPv6 the IPv6 stage found is to be routed ([`Ipv6Request`] with [`ROUTE6_REQUEST_MAGIC`]):
/// the routers' IPv6 routes, on a stack of its own (the IPv6 stage's was full).
pub const ROUTE6: u32 = 8;
/// The active gateway chassis's NAT stage: what a router routes out of its gateway port (from a
/// pod here, or tunnelled here by another chassis) under a centralized SNAT rule
/// ([`GatewayRequest`] with [`SNAT_OUT_REQUEST_MAGIC`]), and what enters the gateway port from
/// the provider network ([`GatewayRequest`] with [`SNAT_IN_REQUEST_MAGIC`]).
pub const GATEWAY_NAT: u32 = 9;
/// [`AclRequest::flags`] of a reject from the egress stage: the answer enters the switch's L2
/// lookup from the output port (OVN's `next(pipeline=ingress, table=ls_in_l2_lkup)`); without
/// it, from the ingress stage, the answer goes straight back to the sender (`next(pipeline=egress,
/// table=ls_out_qos_mark)`, past the egress ACLs).
pub const REJECT_FROM_EGRESS: u32 = 1;
/// Slots the array holds (room for stages added later without a layout change; 16 since
/// layout 12).
pub const CAPACITY: u32 = 16;

/// What `from_pod` hands the flood stage, in the skb's control block (`cb[0..5]`, which a tail
/// call keeps): flood the frame on `datapath` to group `group`, as entered through logical port
/// `ingress_port`, never back to host interface `except` (0 = none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloodRequest {
    pub datapath: u32,
    pub group: u32,
    pub ingress_port: u32,
    pub except: u32,
    /// [`FLOOD_REQUEST_MAGIC`]: a control block the flood stage did not get from `from_pod`
    /// (it can only be reached by a tail call, but it checks) is dropped.
    pub magic: u32,
}

impl FloodRequest {
    /// The control block's words, in field order.
    #[must_use]
    pub const fn words(&self) -> [u32; 5] {
        [
            self.datapath,
            self.group,
            self.ingress_port,
            self.except,
            self.magic,
        ]
    }
}

/// [`FloodRequest::magic`].
pub const FLOOD_REQUEST_MAGIC: u32 = 0x0f10_0d06;

/// What `from_pod` hands the IPv6 stage in the skb's control block: an IPv6 frame on switch
/// `datapath` from logical port `ingress_port` behind host interface `ifindex`, addressed to
/// router `router`'s MAC (0: a multicast neighbour solicitation for the switch's responder).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ipv6Request {
    pub datapath: u32,
    pub router: u32,
    pub ingress_port: u32,
    pub ifindex: u32,
    /// [`IPV6_REQUEST_MAGIC`].
    pub magic: u32,
}

impl Ipv6Request {
    /// The request of a control block's first four words (what [`crate::stage`]'s `take`
    /// returns), its magic checked already.
    #[must_use]
    pub const fn from_words([datapath, router, ingress_port, ifindex]: [u32; 4]) -> Self {
        Self {
            datapath,
            router,
            ingress_port,
            ifindex,
            magic: 0,
        }
    }

    /// The control block's words, in field order.
    #[must_use]
    pub const fn words(&self) -> [u32; 5] {
        [
            self.datapath,
            self.router,
            self.ingress_port,
            self.ifindex,
            self.magic,
        ]
    }
}

/// [`Ipv6Request::magic`].
pub const IPV6_REQUEST_MAGIC: u32 = 0x1b06_0d06;

/// The magic of the [`Ipv6Request`] the IPv6 stage hands the route6 stage ([`ROUTE6`]) with
/// IPv6 to route: the same words as its own request.
pub const ROUTE6_REQUEST_MAGIC: u32 = 0x1b16_0d06;

/// What `from_pod` hands the router stage in the skb's control block: a frame (not IPv6) sent
/// from host interface `ifindex` to a MAC of router `router`, whose port on the sender's switch
/// has IPv4 address `router_ip` (network byte order; 0 for none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterRequest {
    pub router: u32,
    pub router_ip: u32,
    pub ifindex: u32,
    /// [`ROUTER_REQUEST_MAGIC`].
    pub magic: u32,
}

impl RouterRequest {
    /// The control block's words, in field order (the fourth unused).
    #[must_use]
    pub const fn words(&self) -> [u32; 5] {
        [self.router, self.router_ip, self.ifindex, 0, self.magic]
    }
}

/// [`RouterRequest::magic`].
pub const ROUTER_REQUEST_MAGIC: u32 = 0x0f4a_0d06;

/// What the gateway NAT stage is handed ([`GATEWAY_NAT`]): router `router`'s frame; with
/// [`SNAT_OUT_REQUEST_MAGIC`], routed out of its gateway port onto `switch` (entered by its
/// router port `port`), to translate and send on there; with [`SNAT_IN_REQUEST_MAGIC`],
/// entering the gateway port (whose address is `port`, network byte order) from provider NIC
/// `ifindex` (0: answers cannot go back that way), to translate back and route.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatewayRequest {
    pub router: u32,
    pub switch: u32,
    pub port: u32,
    pub ifindex: u32,
    pub magic: u32,
}

impl GatewayRequest {
    /// The control block's words, in field order.
    #[must_use]
    pub const fn words(&self) -> [u32; 5] {
        [
            self.router,
            self.switch,
            self.port,
            self.ifindex,
            self.magic,
        ]
    }
}

/// [`GatewayRequest::magic`] of the way out.
pub const SNAT_OUT_REQUEST_MAGIC: u32 = 0x05a7_0d06;
/// [`GatewayRequest::magic`] of the way in.
pub const SNAT_IN_REQUEST_MAGIC: u32 = 0x05a8_0d06;

/// The magic of the request the IPv6 stage hands the router stage with an IPv6 frame it routed
/// (MACs and hop limit rewritten): words (switch datapath, the port the frame enters it
/// through, 0, 0); the router stage makes its L2 output step.
pub const ROUTED6_REQUEST_MAGIC: u32 = 0x0f46_0d06;

/// The magic of the request the IPv6 stage hands the reject stage with an IPv6 packet whose
/// hop limit ran out at the first router: words (router, the sender's host interface, 0, 0); the
/// reject stage answers with the router's ICMPv6 time exceeded where `TIME_EXCEEDED6` names its
/// source ([`crate::TimeExceeded6Key`]), or drops the packet (`ttl_expired`).
pub const TIME_EXCEEDED6_REQUEST_MAGIC: u32 = 0x0e36_0d06;

/// The magic of the request the IPv6 stage hands the reject stage with IPv6 for a router's own
/// address that the router answers: words (the sender's host interface, the sender's MAC in the
/// next two words' first six bytes, the ICMPv6 unreachable code for what is not TCP).
pub const ROUTER_ANSWER6_REQUEST_MAGIC: u32 = 0x0e37_0d06;

/// The magic of the request `from_pod` hands the reject stage with a router solicitation to a
/// switch whose router port advertises (`ROUTER_ADVERTS`): words (the switch, the sender's host
/// interface, 0, 0); the reject stage answers with the port's router advertisement.
pub const ROUTER_ADVERT_REQUEST_MAGIC: u32 = 0x0e38_0d06;

/// What a program hands an ACL stage in the skb's control block: a frame on switch `datapath`
/// between logical ports `ports` (ingress key in the high 16 bits, egress key in the low; 0 in
/// the ingress stage), at host interface `ifindex` (the sender's veth for the ingress stage,
/// the port's for the egress stage, with its [`crate::LocalPort`] `flags`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AclRequest {
    pub datapath: u32,
    pub ports: u32,
    pub ifindex: u32,
    pub flags: u32,
    /// [`ACL_REQUEST_MAGIC`].
    pub magic: u32,
}

impl AclRequest {
    /// The control block's words, in field order.
    #[must_use]
    pub const fn words(&self) -> [u32; 5] {
        [
            self.datapath,
            self.ports,
            self.ifindex,
            self.flags,
            self.magic,
        ]
    }
}

/// [`AclRequest::magic`].
pub const ACL_REQUEST_MAGIC: u32 = 0x0ac1_0d06;

/// The magic of an [`AclRequest`] for the load-balancer stage ([`LB`]).
pub const LB_REQUEST_MAGIC: u32 = 0x01b0_0d06;

/// The magic of an [`AclRequest`] for the load-balancer stage's ICMP errors ([`LB`]).
pub const LB_ICMP_REQUEST_MAGIC: u32 = 0x01b1_0d06;
