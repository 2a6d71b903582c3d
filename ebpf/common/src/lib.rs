//! The contract between the ovnbpf agent and its kernel programs: map names, keys, values and
//! constants, defined once as `#[repr(C)]` and compiled for both sides. The eBPF crate uses these
//! types as map keys and values; the agent (feature `user`) reads and writes the same bytes through
//! aya. Owns no behaviour; changing a layout here means bumping [`LAYOUT_VERSION`].
#![no_std]

/// Version of the pinned map layout under the pin root. A new agent that finds pinned maps of
/// another version must migrate or recreate them; it must never reinterpret their bytes.
pub const LAYOUT_VERSION: u32 = 6;

/// Program names as they appear in the object file (the function names in the eBPF crate).
pub mod program {
    /// A cls_bpf filter on ingress of a pod's host-side veth: traffic leaving the pod.
    pub const FROM_POD: &str = "from_pod";
    /// A tcx link on ingress of the node's tunnel/uplink NIC: traffic arriving from other nodes.
    pub const FROM_UPLINK: &str = "from_uplink";
    /// A tcx link on ingress of a provider NIC (an underlay network): VLAN traffic for local pods.
    pub const FROM_PROVIDER: &str = "from_provider";
    /// The flood stage, tail-called from `from_pod` (slot [`super::stage::FLOOD`] of
    /// [`super::map::STAGES`]); attached to no interface.
    pub const FLOOD: &str = "flood";
    /// The IPv6 stage, tail-called from `from_pod` (slot [`super::stage::IPV6`]): the ND
    /// responder and what the kernel's router does with IPv6.
    pub const IPV6: &str = "ipv6";
    /// Every program the object must contain; each one is loaded through the verifier at start-up.
    pub const ALL: [&str; 5] = [FROM_POD, FROM_UPLINK, FROM_PROVIDER, FLOOD, IPV6];
    /// The tail-called stages and their slots in [`super::map::STAGES`].
    pub const STAGES: [(&str, u32); 2] = [(FLOOD, super::stage::FLOOD), (IPV6, super::stage::IPV6)];
}

/// Slots of [`map::STAGES`], the program array the entry programs tail-call their later stages
/// through: each stage is a program of its own, with its own 512-byte stack and verifier budget.
/// The agent fills the slots after loading (a restarted agent overwrites them with its own
/// programs, which run the same layout: the pinned array lives in the layout-versioned
/// directory).
pub mod stage {
    /// Floods a frame to a group ([`super::FloodRequest`] in the skb's control block).
    pub const FLOOD: u32 = 0;
    /// IPv6 from a pod that the switch's ND responder or a router handles ([`super::Ipv6Request`]).
    pub const IPV6: u32 = 1;
    /// Slots the array holds (room for stages added later without a layout change).
    pub const CAPACITY: u32 = 8;
}

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

pub mod maps;
/// Map names as they appear in the object file, from the one declaration of each map in
/// [`maps`].
pub use maps::names as map;

/// Where a node's agent pins its maps and links on the BPF filesystem, so that a restarted agent
/// adopts them and forwarding never stops: `<root>/v<LAYOUT_VERSION>/maps/<MAP>` and
/// `<root>/v<LAYOUT_VERSION>/links/<hook>-<ifindex>`.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/ovnbpf";

/// OVN's Geneve encapsulation, as ovn-controller puts it on the wire.
pub mod geneve {
    /// IANA UDP port of Geneve.
    pub const UDP_PORT: u16 = 6081;
    /// Geneve protocol type of an Ethernet payload ("transparent Ethernet bridging").
    pub const PROTOCOL_ETHERNET: u16 = 0x6558;
    /// The OVN option: class 0x0102, type 0x80 (critical), 4 bytes of data: 1 reserved bit,
    /// 15 bits of logical ingress port key, 16 bits of logical egress port key.
    pub const OVN_OPTION_CLASS: u16 = 0x0102;
    pub const OVN_OPTION_TYPE: u8 = 0x80;
    /// Outer Ethernet 14 + IPv4 20 + UDP 8 + Geneve 8 + OVN option 8 bytes.
    pub const OVERHEAD: usize = 58;
}

/// Indexes of [`map::ROUTER_REPLIES`]: what a router sent back to a pod.
pub mod router_reply {
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
    /// Number of kinds (the map's size).
    pub const COUNT: u32 = 7;
    /// Names for metrics and logs, by index.
    pub const NAMES: [&str; COUNT as usize] = [
        "echo_reply",
        "time_exceeded",
        "tcp_reset",
        "port_unreachable",
        "protocol_unreachable",
        "arp_request",
        "nd_solicitation",
    ];
}

/// Why a program dropped a frame: an index of [`map::DROP_COUNTERS`] and of
/// [`drop_reason::NAMES`] (the reasons are the constants of [`drop_reason`]).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropReason(pub u32);

/// The reasons a program drops a frame.
pub mod drop_reason {
    use super::DropReason;

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
    /// An IPv4 packet to a router that is malformed (or has options, which the kernel does not
    /// route).
    pub const ROUTED_MALFORMED: DropReason = DropReason(15);
    /// Unicast to a MAC the switch does not know, on a switch that does not flood unknown
    /// unicast: OVN drops it (`ls_in_l2_unknown`).
    pub const UNKNOWN_DESTINATION: DropReason = DropReason(16);
    /// ARP to a router's MAC that the ARP responder does not answer (a reply, or a request
    /// for an address that is not the router's): OVN's router consumes it, learning its
    /// sender, which ovnbpf does not do yet.
    pub const ARP_TO_ROUTER: DropReason = DropReason(17);
    /// IPv6 to a router's MAC that the kernel's router does not handle yet (issue 21): answers
    /// and forwarding toward a known neighbour, and every destination but a link-local one. What
    /// it does handle: solicitations (answered by the switch), and a solicitation of its own for
    /// a link-local next hop without a MAC.
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
    /// Number of reasons.
    pub const COUNT: u32 = 23;
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
    ];
}

/// This node's tunnel endpoint. `encap_ip` is the IPv4 address of this chassis's Encap row in
/// network byte order; 0 means "not configured": the programs then neither decapsulate nor
/// encapsulate. Encapsulated frames leave through `uplink_ifindex`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunnelConfig {
    pub encap_ip: u32,
    pub uplink_ifindex: u32,
}

/// A pod's logical port: its datapath's tunnel key and its Port_Binding tunnel key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodPort {
    pub datapath: u32,
    pub port: u32,
}

/// An L2 FIB key: a MAC on a datapath (`padding` must be zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FibKey {
    pub datapath: u32,
    pub mac: [u8; 6],
    pub padding: [u8; 2],
}

/// [`FibEntry::kind`]: a port on this node, reached through `ifindex` (flags as in
/// [`LocalPort`]).
pub const FIB_LOCAL: u32 = 1;
/// [`FibEntry::kind`]: a port on another chassis, reached through the tunnel to `remote_ip`
/// (network byte order) with egress port key `port`.
pub const FIB_REMOTE: u32 = 2;
/// [`FibEntry::kind`]: the MAC is a router port's; the router handles the frame.
pub const FIB_ROUTER: u32 = 3;

/// Most IPv4 addresses one [`PortSecurity`] entry holds.
pub const PORT_SECURITY_MAX_IPS: usize = 4;

/// OVN's ingress port security for one pod (Port_Binding.port_security "MAC [IP…]"): frames must
/// come from `mac`; when `ip_count` > 0, IPv4 packets from one of `ips` (network byte order; or a
/// DHCP discovery from 0.0.0.0) and ARP with `mac` and one of `ips` as sender.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortSecurity {
    pub mac: [u8; 6],
    pub ip_count: u8,
    pub padding: u8,
    pub ips: [u32; PORT_SECURITY_MAX_IPS],
}

/// An IPv6 address on a datapath (the ND responder's key; a router's address or next hop).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ipv6Key {
    pub datapath: u32,
    pub ip: [u8; 16],
}

/// An IPv4 address (network byte order) on a datapath, as the ARP responder looks it up.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ArpKey {
    pub datapath: u32,
    pub ip: u32,
}

/// The ARP (and ND) responder's answer: `mac`, unless the request comes from `owner_port` (the port that
/// owns the address, which must get no answer from the switch; 0 = no owner).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArpAnswer {
    pub mac: [u8; 6],
    /// [`ARP_ANSWER_ROUTER`].
    pub flags: u8,
    pub reserved: u8,
    pub owner_port: u32,
}

/// Flag of [`ArpAnswer::flags`]: the address is a router port's on this switch, and frames to
/// `mac` on this switch go to the router ([`FIB_ROUTER`]).
pub const ARP_ANSWER_ROUTER: u8 = 1;

/// Where frames to one MAC go. For [`FIB_ROUTER`]: `port` is the switch's router port key,
/// `ifindex` the router's datapath key and `remote_ip` the router port's IPv4 address (network
/// byte order; the source of the router's ICMP errors on this switch).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FibEntry {
    pub kind: u32,
    pub ifindex: u32,
    pub flags: u32,
    pub remote_ip: u32,
    pub port: u32,
}

/// A logical port as a tunnel addresses it: the datapath's tunnel key (the Geneve VNI) and the
/// Port_Binding's tunnel key (the OVN option's egress port).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TunnelPortKey {
    pub datapath: u32,
    pub port: u32,
}

/// Flag of [`LocalPort::flags`]: deliver with `bpf_redirect_peer` into the pod's netns (the port
/// is a veth whose peer is the pod's interface).
pub const LOCAL_PORT_VETH_PEER: u32 = 1;
/// Flag of [`LocalPort::flags`]: the port has port security ([`map::PORT_SECURITY`] under its
/// interface): what is delivered to it passes OVN's egress check first (`ls_out_check_port_sec`:
/// multicast, or its MAC and, where IPv4 addresses are listed, one of them, broadcast or
/// multicast as the destination).
pub const LOCAL_PORT_EGRESS_SECURITY: u32 = 2;

/// A port on this node: the host-side interface to deliver to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalPort {
    pub ifindex: u32,
    pub flags: u32,
}

/// A flood group on a datapath: both tunnel keys (the group's is ≥ 32768).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FloodKey {
    pub datapath: u32,
    pub group: u32,
}

/// Local members of one flood group on one node the agent installs (the kernel walks as many as
/// the group's count says; the agent refuses more, with an error naming the group).
pub const FLOOD_MAX_LOCAL: u32 = 4_096;
/// Other chassis of one flood group the agent installs (one Geneve copy each).
pub const FLOOD_MAX_REMOTE: u32 = 4_096;
/// Set in [`FloodMemberKey::slot`] for the other-chassis slots; clear for local ones.
pub const FLOOD_SLOT_REMOTE: u32 = 1 << 31;

/// How many members a flood group reaches from this node: slots `0..local_count` of
/// [`map::FLOOD_MEMBERS`] hold local veths, slots `FLOOD_SLOT_REMOTE | 0..remote_count` the
/// other chassis with members, each listed once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloodGroup {
    pub local_count: u32,
    pub remote_count: u32,
}

/// One slot of a flood group's member list.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FloodMemberKey {
    pub datapath: u32,
    pub group: u32,
    /// Index in the list; [`FLOOD_SLOT_REMOTE`] set for the other-chassis list.
    pub slot: u32,
}

/// The flood groups of one datapath by purpose (group tunnel keys; 0 = none): broadcast and
/// multicast frames go to `broadcast` (`_MC_flood`), unicast to unknown MACs to `unknown`
/// (`_MC_unknown`, on switches with ports of unknown addresses).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloodRoles {
    pub broadcast: u32,
    pub unknown: u32,
    /// The group the switch's routers flood their own ARP requests to (`ls_in_l2_lkup`'s
    /// `eth.src == {router MACs} && arp.op == 1`: `_MC_flood_l2`; see [`ROUTER_ARP_REQUESTS`]).
    pub router_originated: u32,
}

/// The data of a [`map::ROUTES`] (or [`map::SOURCE_ROUTES`]) key: a router's datapath key and a
/// destination (or source) address, both in network byte order, so the trie's prefix length is
/// 32 + the route's prefix length.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RouteKey {
    pub datapath: u32,
    pub ip: u32,
}

/// [`RouteEntry::kind`]: the output port faces a switch; the neighbour's MAC is looked up and
/// the switch's L2 step follows.
pub const ROUTE_TO_SWITCH: u8 = 1;
/// [`RouteEntry::kind`]: the output port faces another router (peering); routing goes on there.
pub const ROUTE_TO_ROUTER: u8 = 2;

/// Where a route sends a packet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteEntry {
    /// Next hop (network byte order); 0 = the destination itself (directly connected).
    pub nexthop: u32,
    /// The output router port's MAC.
    pub source_mac: [u8; 6],
    pub kind: u8,
    /// OVN's priority of the route (`lr_in_ip_routing`: prefix length × 3, +1 for a static and
    /// +2 for a connected destination route, +0 for a source route): where a router has source
    /// routes, the kernel takes the higher of its destination and source matches.
    pub priority: u8,
    /// The datapath behind the output port: the switch, or the peer router.
    pub next_datapath: u32,
    /// The port the packet enters `next_datapath` through (the switch's router port key).
    pub ingress_port: u32,
    /// For [`ROUTE_TO_ROUTER`]: that port's IPv4 address (network byte order), the source of
    /// the next router's ICMP errors. For [`ROUTE_TO_SWITCH`]: the output router port's address
    /// (OVN's `reg1`), the sender of the router's ARP request for an unresolved next hop.
    pub ingress_ip: u32,
}

/// A next hop of a router.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NeighbourKey {
    pub datapath: u32,
    pub ip: u32,
}

/// A next hop's MAC.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Neighbour {
    pub mac: [u8; 6],
    pub reserved: [u8; 2],
}

/// [`RouterAddress::flags`]: the router answers ICMP echo requests to the address.
pub const ROUTER_ADDRESS_ECHO: u32 = 1;
/// [`RouterAddress::flags`]: TCP to the address is answered with a reset (OVN's `tcp_reset`).
pub const ROUTER_ADDRESS_TCP_RESET: u32 = 2;
/// [`RouterAddress::flags`]: UDP to the address is answered with ICMP port unreachable.
pub const ROUTER_ADDRESS_PORT_UNREACHABLE: u32 = 4;
/// [`RouterAddress::flags`]: other IPv4 protocols to the address (SCTP excepted: OVN aborts it)
/// are answered with ICMP protocol unreachable.
pub const ROUTER_ADDRESS_PROTOCOL_UNREACHABLE: u32 = 8;

/// One of a router's own addresses.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterAddress {
    pub flags: u32,
}

/// [`RouterInfo::flags`]: the kernel forwards for this router.
pub const ROUTER_FORWARDS: u32 = 1;
/// [`RouterInfo::flags`]: the router sends an ARP request for a next hop it has no MAC for
/// (`lr_in_arp_request`): the packet becomes the request, flooded on the next hop's switch to
/// [`FloodRoles::router_originated`] from the router's port there. Without the flag such
/// packets are dropped (`next_hop_unresolved`).
pub const ROUTER_ARP_REQUESTS: u32 = 4;
/// [`RouterInfo::flags`]: the router has northd's per-port link-local routes (`ip6.dst ==
/// fe80::/64 && inport == P` → out of P): IPv6 to a link-local address goes back out of the
/// port it came in on.
pub const ROUTER_IPV6_LINK_LOCAL: u32 = 8;
/// [`RouterInfo::flags`]: the router solicits IPv6 next hops it has no MAC for
/// (`lr_in_arp_request`'s `nd_ns`).
pub const ROUTER_ND_REQUESTS: u32 = 16;
/// [`RouterInfo::flags`]: the router has source routes ([`map::SOURCE_ROUTES`]); routers
/// without them cost one route lookup per hop, not two.
pub const ROUTER_SOURCE_ROUTES: u32 = 2;

/// A router as the kernel sees it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterInfo {
    pub flags: u32,
}

/// Where an underlay switch meets the physical network: the provider NIC (from the bridge
/// mappings) and the localnet port's VLAN tag (0 = untagged).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Localnet {
    pub ifindex: u32,
    pub vlan: u32,
}

/// A provider NIC and a VLAN on it (0 = untagged frames).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProviderKey {
    pub ifindex: u32,
    pub vlan: u32,
}

/// Capacity of [`map::LOCALNETS`] and [`map::PROVIDER_NETWORKS`].
pub const MAX_LOCALNETS: u32 = 4_096;

/// Capacity of [`map::ROUTES`].
pub const MAX_ROUTES: u32 = 65_536;
/// Capacity of [`map::NEIGHBOURS`].
pub const MAX_NEIGHBOURS: u32 = 262_144;
/// Capacity of [`map::ROUTERS`].
pub const MAX_ROUTERS: u32 = 16_384;
/// Router hops the kernel follows for one packet (peering chains).
pub const MAX_ROUTER_HOPS: usize = 4;

/// Capacity of [`map::FLOOD_GROUPS`].
pub const MAX_FLOOD_GROUPS: u32 = 16_384;

/// Capacity of [`map::FLOOD_MEMBERS`]: member slots across all groups on this node.
pub const MAX_FLOOD_MEMBERS: u32 = 131_072;

/// Capacity of [`map::INTERFACE_COUNTERS`]: one entry per attached interface.
pub const MAX_INTERFACES: u32 = 65_536;

/// Capacity of [`map::TUNNEL_PORTS`]: local ports reachable through the tunnel.
pub const MAX_TUNNEL_PORTS: u32 = 65_536;

/// Capacity of [`map::L2_FIB`]: MACs across all datapaths this node forwards for.
pub const MAX_FIB_ENTRIES: u32 = 262_144;

/// Capacity of [`map::ARP_RESPONDER`]: addresses across all datapaths.
pub const MAX_ARP_ENTRIES: u32 = 262_144;

/// Per-interface (so, for a pod's veth, per-port) packet counters, kept per CPU by the kernel
/// and summed by the agent.
///
/// Every packet a program sees arriving on the interface (from the pod, for a pod's veth)
/// increments `packets` and `bytes` and exactly one of `ipv4`, `other` (a well-formed Ethernet
/// frame that is not IPv4) or `malformed` (too short for its Ethernet header, or an IPv4 header
/// that fails version/IHL/length checks); `dropped` counts those the programs dropped.
/// `delivered_packets` and `delivered_bytes` count frames the programs sent into the interface
/// (to the pod), flooded copies included.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterfaceCounters {
    pub packets: u64,
    pub bytes: u64,
    pub ipv4: u64,
    pub other: u64,
    pub malformed: u64,
    pub dropped: u64,
    pub delivered_packets: u64,
    pub delivered_bytes: u64,
}

impl InterfaceCounters {
    /// Field-wise sum, used to fold per-CPU values into one total.
    #[must_use]
    pub fn sum(self, other: Self) -> Self {
        self.combine(other, u64::wrapping_add)
    }

    /// Field-wise difference from an `earlier` reading.
    #[must_use]
    pub fn since(self, earlier: Self) -> Self {
        self.combine(earlier, u64::wrapping_sub)
    }

    fn combine(self, other: Self, op: fn(u64, u64) -> u64) -> Self {
        Self {
            packets: op(self.packets, other.packets),
            bytes: op(self.bytes, other.bytes),
            ipv4: op(self.ipv4, other.ipv4),
            other: op(self.other, other.other),
            malformed: op(self.malformed, other.malformed),
            dropped: op(self.dropped, other.dropped),
            delivered_packets: op(self.delivered_packets, other.delivered_packets),
            delivered_bytes: op(self.delivered_bytes, other.delivered_bytes),
        }
    }
}

/// Bytes of a dropped frame's start carried by its [`DropEvent`].
pub const DROP_EVENT_HEADER: usize = 64;

/// Capacity of [`map::DROP_EVENTS`] in bytes (a power of two, a multiple of the page size).
pub const DROP_EVENTS_BYTES: u32 = 256 * 1024;

/// One dropped frame: why ([`drop_reason`]), where it arrived, its length, and its first
/// `captured` bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropEvent {
    pub reason: u32,
    pub ifindex: u32,
    pub length: u32,
    pub captured: u32,
    pub header: [u8; DROP_EVENT_HEADER],
}

// SAFETY: InterfaceCounters is repr(C), Copy, has no padding (eight u64) and every bit pattern is
// a valid value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for InterfaceCounters {}

// SAFETY: the following are repr(C), Copy, made of u32 fields (and byte arrays filling whole
// u32s) without padding; every bit pattern is a valid value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for TunnelConfig {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for TunnelPortKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for LocalPort {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for PodPort {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for FibKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for FibEntry {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for ArpKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for Ipv6Key {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for PortSecurity {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for ArpAnswer {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for FloodKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for FloodGroup {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for FloodMemberKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for FloodRoles {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for DropEvent {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for RouteKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for RouteEntry {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for NeighbourKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for Neighbour {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for RouterInfo {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for RouterAddress {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for Localnet {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for ProviderKey {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_have_the_kernel_layout() {
        // The kernel side writes eight consecutive u64; any padding or reordering would corrupt reads.
        assert_eq!(core::mem::size_of::<InterfaceCounters>(), 64);
        assert_eq!(core::mem::align_of::<InterfaceCounters>(), 8);
    }

    #[test]
    fn tunnel_types_have_the_kernel_layout() {
        assert_eq!(core::mem::size_of::<TunnelConfig>(), 8);
        assert_eq!(core::mem::size_of::<TunnelPortKey>(), 8);
        assert_eq!(core::mem::size_of::<LocalPort>(), 8);
        assert_eq!(core::mem::size_of::<PodPort>(), 8);
        assert_eq!(core::mem::size_of::<FibKey>(), 12);
        assert_eq!(core::mem::size_of::<FibEntry>(), 20);
        assert_eq!(core::mem::size_of::<ArpKey>(), 8);
        assert_eq!(core::mem::size_of::<PortSecurity>(), 24);
        assert_eq!(core::mem::size_of::<ArpAnswer>(), 12);
        assert_eq!(core::mem::size_of::<FloodKey>(), 8);
        assert_eq!(core::mem::size_of::<FloodGroup>(), 8);
        assert_eq!(core::mem::size_of::<FloodMemberKey>(), 12);
        assert_eq!(core::mem::size_of::<FloodRoles>(), 12);
        assert_eq!(core::mem::size_of::<DropEvent>(), 16 + DROP_EVENT_HEADER);
        assert_eq!(core::mem::size_of::<RouteKey>(), 8);
        assert_eq!(core::mem::size_of::<RouteEntry>(), 24);
        assert_eq!(core::mem::size_of::<Neighbour>(), 8);
        assert_eq!(drop_reason::NAMES.len(), drop_reason::COUNT as usize);
    }

    #[test]
    fn sum_adds_and_since_subtracts_every_field() {
        let field = |n: u64| InterfaceCounters {
            packets: n,
            bytes: 2 * n,
            ipv4: 3 * n,
            other: 4 * n,
            malformed: 5 * n,
            dropped: 6 * n,
            delivered_packets: 7 * n,
            delivered_bytes: 8 * n,
        };
        assert_eq!(field(1).sum(field(10)), field(11));
        assert_eq!(field(11).since(field(1)), field(10));
    }
}
