//! The contract between the ovnbpf agent and its kernel programs: map names, keys, values and
//! constants, defined once as `#[repr(C)]` and compiled for both sides. The eBPF crate uses these
//! types as map keys and values; the agent (feature `user`) reads and writes the same bytes through
//! aya. Owns no behaviour; changing a layout here means bumping [`LAYOUT_VERSION`].
#![no_std]

/// Version of the pinned map layout under the pin root. A new agent that finds pinned maps of
/// another version must migrate or recreate them; it must never reinterpret their bytes.
/// (12 since 2026-12-06: `ROUTER_REPLIES` has room for 32 kinds and `STAGES` for 16 stages,
/// so new kinds and stages need no new layout.)
pub const LAYOUT_VERSION: u32 = 13;

pub mod acl;
pub mod checksum;
pub mod ct;
pub mod lb;
pub mod program;
pub mod stage;
pub use stage::{
    ACL_REQUEST_MAGIC, AclRequest, FLOOD_REQUEST_MAGIC, FloodRequest, GatewayRequest,
    IPV6_REQUEST_MAGIC, Ipv6Request, ROUTE6_REQUEST_MAGIC, ROUTED6_REQUEST_MAGIC,
    ROUTER_ADVERT_REQUEST_MAGIC, ROUTER_ANSWER6_REQUEST_MAGIC, ROUTER_REQUEST_MAGIC, RouterRequest,
    SNAT_IN_REQUEST_MAGIC, SNAT_OUT_REQUEST_MAGIC, TIME_EXCEEDED6_REQUEST_MAGIC,
};

pub mod maps;
/// Map names as they appear in the object file, from the one declaration of each map in
/// [`maps`].
pub use maps::names as map;

/// Where a node's agent pins its maps and links on the BPF filesystem, so that a restarted agent
/// adopts them and forwarding never stops: `<root>/v<LAYOUT_VERSION>/maps/<MAP>` and
/// `<root>/v<LAYOUT_VERSION>/links/<hook>-<ifindex>`.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/ovnbpf";

/// IPv6 addresses both sides derive the same way (the kernel's ND stage, the agent and its
/// evaluator).
pub mod ipv6 {
    /// The EUI-64 link-local address of `mac` (OVN's `in6_generate_lla`: what it gives router
    /// ports, and what a pod's kernel derives for its interface).
    #[must_use]
    pub const fn link_local(mac: [u8; 6]) -> [u8; 16] {
        [
            0xfe,
            0x80,
            0,
            0,
            0,
            0,
            0,
            0,
            mac[0] ^ 0x02,
            mac[1],
            mac[2],
            0xff,
            0xfe,
            mac[3],
            mac[4],
            mac[5],
        ]
    }

    /// The solicited-node multicast group of `ip` (`ff02::1:ffXX:XXXX`).
    #[must_use]
    pub const fn solicited_node(ip: [u8; 16]) -> [u8; 16] {
        [
            0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, ip[13], ip[14], ip[15],
        ]
    }
}

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
    /// Outer Ethernet 14 + IPv6 40 + UDP 8 + Geneve 8 + OVN option 8 bytes (an IPv6 underlay).
    pub const OVERHEAD6: usize = 78;
}

pub mod drop_reason;
pub mod router_reply;
pub use drop_reason::DropReason;

/// This node's tunnel endpoint. Over an IPv4 underlay `encap_ip` is the IPv4 address of this
/// chassis's Encap row in network byte order; over an IPv6 underlay ([`TUNNEL_IPV6`] in `flags`)
/// `encap_ip6` is its IPv6 address and `encap_ip` is unused. Neither: "not configured", the
/// programs then neither decapsulate nor encapsulate. Encapsulated frames leave through
/// `uplink_ifindex`. GSO super-packets toward a chassis that wants outer UDP checksums
/// ([`REMOTE_ENCAP_CSUM`]) go out of `segmenter_ifindex` instead (0: none), the sending end of
/// a veth pair that lets no GSO packet through whole: the kernel segments them there, and
/// `from_segmenter`, on the other end's ingress, checksums each segment and sends it out of the
/// uplink.
///
/// Other chassis are named by an *endpoint key* (`u32`) wherever the maps point at one
/// ([`FibEntry::remote_ip`], the remote slots of [`map::FLOOD_MEMBERS`], the keys of
/// [`map::REMOTE_ENCAPS`]): over an IPv4 underlay the endpoint's IPv4 address (network byte
/// order); over an IPv6 one a key the agent derives from the endpoint's address, whose
/// [`RemoteEncap`] holds the address itself.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunnelConfig {
    pub encap_ip: u32,
    pub uplink_ifindex: u32,
    pub segmenter_ifindex: u32,
    /// [`TUNNEL_IPV6`].
    pub flags: u32,
    pub encap_ip6: [u8; 16],
}

/// Flag of [`TunnelConfig::flags`]: the underlay is IPv6: Geneve goes out in IPv6 from
/// `encap_ip6` (hop limit 64, traffic class and flow label 0, as OVS builds it), its UDP
/// checksum computed for endpoints that ask ([`REMOTE_ENCAP_CSUM`]) and zero for the others
/// (RFC 6935's tunnel exception; Open vSwitch's Geneve ports accept it), and frames to
/// `encap_ip6` are decapsulated.
pub const TUNNEL_IPV6: u32 = 1;

/// What another chassis's Geneve endpoint asks of the frames sent to it (its Encap row's
/// options), keyed by its endpoint key (see [`TunnelConfig`]) in [`map::REMOTE_ENCAPS`]. Over
/// an IPv4 underlay an endpoint without an entry asks for nothing; over an IPv6 one every
/// endpoint has an entry, which holds its address (`ip6`): a key without one is not sent to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteEncap {
    /// [`REMOTE_ENCAP_CSUM`].
    pub flags: u32,
    /// The endpoint's IPv6 address (IPv6 underlays; zero otherwise).
    pub ip6: [u8; 16],
}

/// Flag of [`RemoteEncap::flags`]: the endpoint's Encap has `options:csum=true`: frames to it
/// carry an outer UDP checksum (as ovn-controller sets `csum=true` on the OVS tunnel port
/// toward such a chassis).
pub const REMOTE_ENCAP_CSUM: u32 = 1;

/// Other chassis's endpoints [`map::REMOTE_ENCAPS`] holds.
pub const MAX_REMOTE_ENCAPS: u32 = 16_384;

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
/// [`FibEntry::kind`]: a port on another chassis, reached through the tunnel to endpoint key
/// `remote_ip` (see [`TunnelConfig`]) with egress port key `port`.
pub const FIB_REMOTE: u32 = 2;
/// [`FibEntry::kind`]: the MAC is a router port's; the router handles the frame.
pub const FIB_ROUTER: u32 = 3;
/// [`FibEntry::kind`]: the MAC is the switch's service monitor MAC (northd's
/// `svc_monitor_mac`): the frame answers a health-check probe, which the agent reads from the
/// sender's interface; the datapath drops it, counted as
/// [`drop_reason::SERVICE_MONITOR`], without an event.
pub const FIB_SERVICE_MONITOR: u32 = 4;

/// Most IPv4 addresses one [`PortSecurity`] entry holds.
pub const PORT_SECURITY_MAX_IPS: usize = 4;

/// OVN's port security for one pod (Port_Binding.port_security "MAC [IPv4…] [IPv6…]"), as
/// ovn-controller's port-security flows and ovn-trace's `check_in_port_sec` judge it: frames
/// must come from `mac` and ARP name it as sender. With addresses of either family listed
/// (`flags`), IPv4 must come from one of `ips` (network byte order; or be a DHCP discovery from
/// 0.0.0.0) and ARP name one of them, and IPv6 must come from one of the port's
/// [`PortSecurity6`] addresses or the link-local address derived from `mac`, neighbour
/// discovery naming `mac` (or nothing) as its link-layer address and, with IPv6 addresses
/// listed, one of them (or that link-local one) as an advertisement's target. Egress: IPv4 to
/// one of `ips`, broadcast or multicast when IPv4 is listed, none when only IPv6 is; IPv6 to
/// one of the IPv6 addresses, the link-local one or multicast when IPv6 is listed, none when
/// only IPv4 is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortSecurity {
    pub mac: [u8; 6],
    pub ip_count: u8,
    /// [`PORT_SECURITY_IPV4`], [`PORT_SECURITY_IPV6`]: which families the entry lists
    /// addresses of (whether or not they fit `ips`: a listed prefix admits none of its
    /// addresses here, which is stricter than OVN, never looser).
    pub flags: u8,
    pub ips: [u32; PORT_SECURITY_MAX_IPS],
}

/// [`PortSecurity::flags`]: IPv4 addresses are listed.
pub const PORT_SECURITY_IPV4: u8 = 1 << 0;
/// [`PortSecurity::flags`]: IPv6 addresses are listed.
pub const PORT_SECURITY_IPV6: u8 = 1 << 1;

/// Most IPv6 addresses one [`PortSecurity6`] entry holds.
pub const PORT_SECURITY_MAX_IPS6: usize = 4;

/// The IPv6 addresses of a pod's port security (`PORT_SECURITY6`, by the veth's index), host
/// addresses only (`/128`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortSecurity6 {
    /// First, so that each address is 8-byte aligned in the map's value.
    pub ips: [[u8; 16]; PORT_SECURITY_MAX_IPS6],
    pub ip_count: u32,
    pub padding: u32,
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

/// The ARP (and ND) responder's answer: `mac`, unless the request comes from `owner_port` (the port
/// that owns the address, which must get no answer from the switch; 0 = no owner).
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
/// Flag of [`ArpAnswer::flags`]: requests from the provider network (the switch's localnet) are
/// answered too (a distributed NAT rule's external address, on its pod's chassis).
pub const ARP_ANSWER_PROVIDER: u8 = 2;

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
/// Flag of [`LocalPort::flags`]: the port's switch runs egress ACLs ([`acl::SWITCH_EGRESS`]):
/// IP frames delivered to it go through the egress ACL stage first.
pub const LOCAL_PORT_ACL: u32 = 4;

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

/// A router's gateway port, by the router's datapath key and the key of the switch behind the
/// port (a router has one port on a switch): [`map::GATEWAY_REDIRECTS`]'s key. Kube-OVN gives a
/// VPC one gateway port per external subnet (`extraExternalSubnets`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GatewayKey {
    pub router: u32,
    pub switch: u32,
}

/// [`map::SNAT_RULES`]' key: a router and the switch behind its gateway port (in network byte
/// order, so the trie's first 64 bits are theirs), then a source address, so the prefix length
/// is 64 + the rule's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SnatRuleKey {
    pub router: u32,
    pub switch: u32,
    pub ip: u32,
}

/// [`RouteEntry::kind`]: the output port faces a switch; the neighbour's MAC is looked up and
/// the switch's L2 step follows.
pub const ROUTE_TO_SWITCH: u8 = 1;
/// [`RouteEntry::kind`]: the output port faces another router (peering); routing goes on there.
pub const ROUTE_TO_ROUTER: u8 = 2;
/// [`RouteEntry::kind`]: an ECMP route or multi-next-hop reroute: [`RouteEntry::nexthop`] holds
/// the group (an [`EcmpKey::group`]) and [`RouteEntry::ingress_port`] its member count; the
/// member is chosen by [`ecmp::member_index`] and looked up in [`map::ECMP_MEMBERS`].
pub const ROUTE_ECMP: u8 = 3;
/// [`RouteEntry::kind`]: a discard route: the packet is dropped (before the policies).
pub const ROUTE_DISCARD: u8 = 4;
/// [`RouteEntry::kind`]: the output port is a gateway port (a router port with a
/// `chassisredirect` companion: OVN-native NAT, EIPs, centralized egress): once the policies
/// and ECMP have had their say (a policy may reroute it elsewhere), a local pod's distributed
/// NAT rule applies ([`map::NAT_BY_LOGICAL`]), else the packet goes where
/// [`map::GATEWAY_REDIRECTS`] says (on to the switch here, or tunnelled to the gateway
/// chassis), else it is dropped as [`drop_reason::GATEWAY_UNSUPPORTED`].
pub const ROUTE_GATEWAY: u8 = 5;
/// [`RouteEntry::kind`] the router stage gives a [`ROUTE_GATEWAY`] route whose gateway is active
/// here with centralized SNAT rules: routed onto the switch as [`ROUTE_TO_SWITCH`], then
/// through the gateway NAT stage before it leaves (never written to a map).
pub const ROUTE_GATEWAY_SNAT: u8 = 6;

/// A member of an ECMP group of a router: the route the packet takes when
/// [`ecmp::member_index`] chose `index`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EcmpKey {
    pub datapath: u32,
    /// [`ecmp::ROUTE_GROUPS`] or [`ecmp::POLICY_GROUPS`] with OVN's group id in the low 16 bits
    /// (routes and policies number their groups apart).
    pub group: u32,
    pub index: u32,
}

/// ECMP member choice, defined once for the kernel and the agent's evaluator, so that both send
/// a flow to the same member: a hash of the IPv4 5-tuple (a flow stays on its member; flows
/// spread over the members), modulo the member count. OVN leaves the choice to the datapath
/// (Open vSwitch's `dp_hash` select groups), so any stable per-flow hash is OVN's semantics.
pub mod ecmp {
    /// [`crate::EcmpKey::group`]'s high bits for an ECMP route's group.
    pub const ROUTE_GROUPS: u32 = 0;
    /// [`crate::EcmpKey::group`]'s high bits for a multi-next-hop reroute's group.
    pub const POLICY_GROUPS: u32 = 1 << 16;
    /// Members per group the kernel takes (larger groups keep their router unforwarded).
    pub const MAX_MEMBERS: u32 = 64;

    /// The hash of a flow (addresses and ports in host byte order; ports 0 for protocols
    /// without them and for later fragments).
    #[inline(always)]
    #[must_use]
    pub fn flow_hash(
        source: u32,
        destination: u32,
        protocol: u8,
        source_port: u16,
        destination_port: u16,
    ) -> u32 {
        let ports = (u32::from(source_port) << 16) | u32::from(destination_port);
        let mut hash = source
            ^ destination.rotate_left(16)
            ^ (u32::from(protocol) << 24)
            ^ ports.rotate_left(8);
        // MurmurHash3's finaliser: every input bit moves every output bit.
        hash ^= hash >> 16;
        hash = hash.wrapping_mul(0x85eb_ca6b);
        hash ^= hash >> 13;
        hash = hash.wrapping_mul(0xc2b2_ae35);
        hash ^= hash >> 16;
        hash
    }

    /// The hash of an IPv6 flow: [`flow_hash`] over each address folded to 32 bits (its four
    /// words XORed; ports 0 for protocols without them).
    #[inline(always)]
    #[must_use]
    pub fn flow_hash6(
        source: &[u8; 16],
        destination: &[u8; 16],
        protocol: u8,
        source_port: u16,
        destination_port: u16,
    ) -> u32 {
        flow_hash(
            fold(source),
            fold(destination),
            protocol,
            source_port,
            destination_port,
        )
    }

    /// An IPv6 address's four big-endian words, XORed.
    #[inline(always)]
    fn fold(address: &[u8; 16]) -> u32 {
        let word = |at: usize| {
            u32::from_be_bytes([
                address[at],
                address[at + 1],
                address[at + 2],
                address[at + 3],
            ])
        };
        word(0) ^ word(4) ^ word(8) ^ word(12)
    }

    /// The member (an index into the group's `select` list) a flow of `hash` takes among
    /// `members`.
    #[inline(always)]
    #[must_use]
    pub fn member_index(hash: u32, members: u32) -> u32 {
        if members == 0 { 0 } else { hash % members }
    }
}

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

/// The data of a [`map::ROUTES6`] (or [`map::SOURCE_ROUTES6`]) key: a router's datapath key
/// (network byte order) and an IPv6 destination (or source), so the trie's prefix length is
/// 32 + the route's prefix length.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Route6Key {
    pub datapath: u32,
    pub ip: [u8; 16],
}

/// Key of `TIME_EXCEEDED6` (LPM; the prefix length counts 96 bits of router, MAC and padding,
/// then the network's): a router port a packet entered through, by its router's tunnel key
/// (network byte order) and its MAC, and a network of that port the packet's source is in
/// (northd's `inport == P && ip6.src == N && ip.ttl == {0, 1}` flows, one per network of P).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TimeExceeded6Key {
    pub router: u32,
    pub mac: [u8; 6],
    pub padding: [u8; 2],
    pub source: [u8; 16],
}

/// The bits of a [`TimeExceeded6Key`] before its source address.
pub const TIME_EXCEEDED6_KEY_PREFIX_BITS: u32 = 96;

/// Value of `TIME_EXCEEDED6`: the address the router's ICMPv6 time exceeded comes from (the
/// port's address in that network).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeExceeded6Source {
    pub address: [u8; 16],
}

/// The longest router advertisement (ICMPv6 message) [`RouterAdvert`] holds: the header, a
/// link-layer and an MTU option, a recursive DNS server, and up to six prefixes or the search
/// list and routes in their stead.
pub const ROUTER_ADVERT_MAX: usize = 256;

/// Value of `ROUTER_ADVERTS` (keyed by a switch's tunnel key): the router advertisement the
/// switch's router port answers a router solicitation with (OVN's `put_nd_ra_opts`, encoded as
/// ovn-controller encodes it), from the port's MAC and its link-local address.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterAdvert {
    /// The router port's MAC: the answer's Ethernet source; its link-local address (EUI-64) is
    /// the answer's IPv6 source.
    pub mac: [u8; 6],
    /// The message's length in bytes: a multiple of 8, at most [`ROUTER_ADVERT_MAX`].
    pub length: u16,
    /// The ICMPv6 checksum's sum so far, unfolded: the message (its checksum field 0), the
    /// source address, the length and the next header (58); the kernel adds the destination's
    /// words and folds.
    pub partial_sum: u32,
    /// The message (type 134 first); bytes past `length` are zero.
    pub message: [u8; ROUTER_ADVERT_MAX],
}

impl Default for RouterAdvert {
    fn default() -> Self {
        Self {
            mac: [0; 6],
            length: 0,
            partial_sum: 0,
            message: [0; ROUTER_ADVERT_MAX],
        }
    }
}

/// Where an IPv6 route sends a packet (kinds as [`RouteEntry::kind`]'s: [`ROUTE_TO_SWITCH`],
/// [`ROUTE_TO_ROUTER`], or [`ROUTE_ECMP`]: then [`RouteEntry6::next_datapath`] holds the group
/// (an [`EcmpKey::group`]) and [`RouteEntry6::ingress_port`] its member count, the member is
/// chosen by [`ecmp::flow_hash6`] and looked up in `ECMP_MEMBERS6`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteEntry6 {
    /// Next hop; all zeros = the destination itself (directly connected).
    pub nexthop: [u8; 16],
    /// The datapath behind the output port: the switch, or the peer router.
    pub next_datapath: u32,
    /// The port the packet enters `next_datapath` through (the switch's router port key).
    pub ingress_port: u32,
    /// OVN's priority of the route (IPv6 prefixes are up to 128 long: up to 128 × 3 + 2), as
    /// [`RouteEntry::priority`].
    pub priority: u16,
    /// The output router port's MAC.
    pub source_mac: [u8; 6],
    pub kind: u8,
    pub padding: [u8; 3],
}

/// [`PolicyEntry::verdict`]: keep the routing decision.
pub const POLICY_ALLOW: u8 = 1;
/// [`PolicyEntry::verdict`]: drop the packet.
pub const POLICY_DROP: u8 = 2;
/// [`PolicyEntry::verdict`]: replace the routing decision by [`PolicyEntry::route`].
pub const POLICY_REROUTE: u8 = 3;

/// The router policy (`lr_in_policy`) that wins for addresses within one prefix of a
/// [`map::POLICIES_BY_DESTINATION`] (or [`map::POLICIES_BY_SOURCE`]) trie: the agent stores at
/// each prefix the highest-priority policy among all those of the router whose prefix contains
/// it, so the kernel's longest-prefix match finds OVN's answer for that map; between the two
/// maps the higher priority wins.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyEntry {
    pub priority: u16,
    pub verdict: u8,
    pub reserved: u8,
    /// For [`POLICY_REROUTE`]: where the packet goes instead (`next_datapath` 0: the reroute's
    /// output port is not known, the packet is dropped).
    pub route: RouteEntry,
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

/// One side of a distributed NAT rule (a FIP handled on its pod's chassis), keyed by router and
/// address ([`NeighbourKey`]): in [`map::NAT_BY_LOGICAL`], by the pod's address, what its
/// packets leaving the gateway port become (`ip`: the external address, `mac`: the external
/// MAC); in [`map::NAT_BY_EXTERNAL`], by the external address, the pod's address (`ip`) that
/// packets entering the gateway port for it go to (`mac`: the external MAC). `switch`: the
/// switch behind the gateway port (the provider network's). A centralized FIP's, on the active
/// gateway chassis, has [`NAT_CENTRALIZED`] in `flags` (its MAC the gateway port's).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatTarget {
    /// Network byte order.
    pub ip: u32,
    pub switch: u32,
    pub mac: [u8; 6],
    /// [`NAT_CENTRALIZED`].
    pub flags: u8,
    pub reserved: u8,
}

/// Flag of [`NatTarget::flags`]: a centralized FIP's (`dnat_and_snat` without `logical_port`),
/// on the active gateway chassis: the router asks for next hops from the gateway port's own
/// address (OVN's `reg1`), not from the FIP as a distributed one's does.
pub const NAT_CENTRALIZED: u8 = 1;

/// Flag of [`NatTarget::flags`], in [`map::NAT_BY_EXTERNAL`] only: a centralized `dnat` rule
/// (no SNAT twin): the way in is translated by the gateway NAT stage, which records the
/// connection so that only its replies leave from the external address.
pub const NAT_STATEFUL: u8 = 2;

/// Flag of [`NatTarget::flags`], in [`map::NAT_BY_EXTERNAL`] only, on the active gateway
/// chassis: the external address of an SNAT rule (no pod: `ip` 0). What the router sends out
/// of the gateway port to it may be a reply to one of the SNAT's connections, which the gateway
/// NAT stage's way in gives its pod back (OVN's hairpin); what arrives for it from the provider
/// network goes there too.
pub const NAT_SNAT_ADDRESS: u8 = 4;

/// Where a router sends what it routes out of one of its gateway ports
/// ([`map::GATEWAY_REDIRECTS`], keyed by the router and the port's switch): OVN's `lr_in_gw_redirect` (`outport = "cr-…"`) and the output to the
/// chassisredirect port. With `remote_ip` 0 the port resides here (this chassis is the active
/// gateway) and the packet goes on to the switch behind the port; otherwise it is tunnelled to
/// the gateway chassis's endpoint `remote_ip` (a key as [`FibEntry::remote_ip`]) on the
/// router's VNI, to `port` (the chassisredirect port's key), from the router port it entered
/// by ([`map::GATEWAY_INPORTS`]). `switch`: the switch behind the gateway port.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatewayRedirect {
    pub remote_ip: u32,
    pub port: u32,
    pub switch: u32,
    /// [`GATEWAY_SNAT`].
    pub flags: u32,
}

/// Flag of [`GatewayRedirect::flags`] and [`GatewayEgress::flags`]: the router has centralized
/// SNAT rules ([`map::SNAT_RULES`]) this chassis, the active gateway, applies on the way out
/// (the gateway NAT stage).
pub const GATEWAY_SNAT: u32 = 1;

/// What the active gateway chassis does with a frame another chassis tunnelled to a
/// chassisredirect port ([`map::GATEWAY_EGRESS`], keyed by the router's VNI and that port's
/// key): the router's egress (no stage of it acts on a gateway port without centralized NAT)
/// then the ingress of `switch`, the switch behind the gateway port, entered by its router port
/// `switch_port`: to a local port of it by its FIB, else out of its localnet's provider NIC.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatewayEgress {
    pub switch: u32,
    pub switch_port: u32,
    /// [`GATEWAY_SNAT`].
    pub flags: u32,
    pub reserved: u32,
}

/// A centralized SNAT rule (`snat` on a router with a gateway port: Kube-OVN's `OvnSnatRule`),
/// the value of [`map::SNAT_RULES`] (keyed as routes are, by router and source prefix: the
/// longest prefix wins, as northd's priorities say): what leaves the gateway port from the
/// prefix leaves from `external` (network byte order), one port per connection.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnatRule {
    pub external: u32,
}

/// One side of a centralized SNAT connection ([`map::SNAT_SESSIONS`] from inside,
/// [`map::SNAT_REVERSE`] from outside): router `router`'s connection of `protocol` between
/// `local` (a pod's address and port, or the external address and the port it was given) and
/// `remote`. ICMP echo is keyed by its identifier as the local port and, as the remote port, the
/// type that side sends (8, a request; 0, a reply): the other side's key has the other.
/// Addresses and ports as in the packet (network byte order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SnatKey {
    pub router: u32,
    pub local_ip: u32,
    pub remote_ip: u32,
    pub local_port: u16,
    pub remote_port: u16,
    pub protocol: u8,
    pub padding: [u8; 3],
}

/// What the other side of a [`SnatKey`] is: the translated address and port (from inside), or
/// the pod's (from outside); when the connection last carried a packet (`bpf_ktime_get_ns`),
/// after [`SNAT_IDLE_NS`] of silence its external port is free again.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnatSession {
    pub ip: u32,
    pub port: u16,
    /// [`SNAT_SESSION_DNAT`].
    pub flags: u16,
    pub seen_ns: u64,
}

/// Flag of [`SnatSession::flags`] (the inside side's): a connection a centralized `dnat` rule
/// admitted from outside, whose replies leave from the rule's external address and the port
/// they came to (whatever SNAT rule covers the pod).
pub const SNAT_SESSION_DNAT: u16 = 1;

/// How long a centralized SNAT connection holds its external port without a packet: TCP's
/// (an established connection's, conntrack's default is 5 days; a port held an hour idle is
/// given again), and the rest's (UDP, ICMP echo: conntrack's stream timeout).
pub const SNAT_IDLE_NS: [u64; 2] = [3_600_000_000_000, 120_000_000_000];

/// Flag of [`FibEntry::flags`] for a [`FIB_ROUTER_GATEWAY`] entry: the router has centralized
/// SNAT rules here, so what enters the gateway port passes the gateway NAT stage first (replies
/// to a translated connection get the pod's address and port back).
pub const FIB_ROUTER_SNAT: u32 = 2;

/// Flag of [`FibEntry::flags`] for a [`FIB_ROUTER`] entry: the router port is a gateway port
/// whose chassisredirect port resides here (the active gateway chassis): IPv4 from the
/// provider network to its MAC enters the router (OVN's `is_chassis_resident` admission).
pub const FIB_ROUTER_GATEWAY: u32 = 1;

/// The router port of a switch ([`map::SWITCH_ROUTERS`]): the router's datapath key and the
/// port's MAC. A broadcast ARP reaches that router too, which learns from it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchRouter {
    pub router: u32,
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
/// [`RouterInfo::flags`]: the router has policies ([`map::POLICIES_BY_DESTINATION`],
/// [`map::POLICIES_BY_SOURCE`]); routers without them cost no policy lookup.
pub const ROUTER_POLICIES: u32 = 32;
/// [`RouterInfo::flags`]: the router has source routes ([`map::SOURCE_ROUTES`]); routers
/// without them cost one route lookup per hop, not two.
pub const ROUTER_SOURCE_ROUTES: u32 = 2;
/// [`RouterInfo::flags`]: the kernel does not forward this router's IPv6 (a flow only IPv6 can
/// match is not compiled): IPv6 to its MAC is dropped as `router_unsupported`, its IPv4 goes on.
pub const ROUTER_IPV6_UNSUPPORTED: u32 = 128;
/// [`RouterInfo::flags`]: the router has IPv6 source routes ([`map::SOURCE_ROUTES6`]).
pub const ROUTER_SOURCE_ROUTES6: u32 = 256;
/// [`RouterInfo::flags`]: some of the router's ports route with a route table of their own
/// ([`map::ROUTE_TABLES`]); its routes are keyed by [`route_key_datapath`].
pub const ROUTER_ROUTE_TABLES: u32 = 64;

/// Route tables per router the kernel keys apart (OVN numbers a router's tables from 1).
pub const MAX_ROUTE_TABLES: u32 = 255;

/// The datapath field of a [`RouteKey`] for router `datapath`'s route table `table` (0: the
/// main one): OVN's datapath keys have 24 bits, the table takes the 8 above.
#[inline(always)]
#[must_use]
pub const fn route_key_datapath(datapath: u32, table: u32) -> u32 {
    datapath | (table << 24)
}

/// A router as the kernel sees it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterInfo {
    pub flags: u32,
    /// How many policies matching both a source and a destination prefix the router has in
    /// [`map::POLICY_PAIRS`] (indexes 0 to this, highest priority first; at most
    /// [`MAX_PAIR_POLICIES`]).
    pub pair_policies: u32,
}

/// Policies matching both a source and a destination prefix per router: scanned in priority
/// order after the two tries (a router with more is not forwarded).
pub const MAX_PAIR_POLICIES: u32 = 16;

/// A router's policy matching both a source and a destination prefix: index `index` of the
/// router's list in [`map::POLICY_PAIRS`], highest priority first.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PairPolicyKey {
    pub router: u32,
    pub index: u32,
}

/// A policy matching a source and a destination prefix (addresses and masks in network byte
/// order; a mask of 0 matches any address), optionally a transport protocol and its port
/// ranges, and what it does.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairPolicy {
    pub source: u32,
    pub source_mask: u32,
    pub destination: u32,
    pub destination_mask: u32,
    /// The IP protocol it matches (0: any, and the port ranges are then whole).
    pub protocol: u8,
    pub reserved: [u8; 3],
    /// Inclusive port ranges (host byte order): `[0, 65535]` matches any port.
    pub source_ports: [u16; 2],
    pub destination_ports: [u16; 2],
    pub policy: PolicyEntry,
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
/// ECMP members of all routers.
pub const MAX_ECMP_MEMBERS: u32 = 16_384;
/// Capacity of [`map::NAT_BY_LOGICAL`] and [`map::NAT_BY_EXTERNAL`].
pub const MAX_NATS: u32 = 65_536;
/// Capacity of [`map::GATEWAY_REDIRECTS`] (router ports of routers with a gateway port) and
/// [`map::GATEWAY_EGRESS`].
pub const MAX_GATEWAYS: u32 = 16_384;
/// Capacity of [`map::SNAT_RULES`].
pub const MAX_SNAT_RULES: u32 = 16_384;
/// Capacity of [`map::SNAT_SESSIONS`] and [`map::SNAT_REVERSE`]: centralized SNAT connections
/// through this gateway chassis (least recently used ones make room).
pub const MAX_SNAT_SESSIONS: u32 = 262_144;
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

/// Capacity of [`map::NEIGHBOUR_EVENTS`] in bytes (a power of two, a multiple of the page size).
pub const NEIGHBOUR_EVENTS_BYTES: u32 = 16 * 1024;

/// An ARP packet a router received (OVN's `lr_in_lookup_neighbor`) whose sender its neighbour
/// table does not hold at that MAC: the agent decides, by the router's learning stages, whether
/// the router learns it (`put_arp`) and writes the MAC_Binding row ovn-controller would.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NeighbourEvent {
    /// The router's datapath key.
    pub router: u32,
    /// The sender's IPv4 address (`arp.spa`), network byte order.
    pub ip: u32,
    /// The sender's MAC (`arp.sha`).
    pub mac: [u8; 6],
    /// The MAC the packet was addressed to: the router port it entered.
    pub router_mac: [u8; 6],
    /// The ARP operation (1 request, 2 reply).
    pub operation: u16,
    pub reserved: u16,
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
unsafe impl aya::Pod for NeighbourEvent {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for NatTarget {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for GatewayRedirect {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for GatewayEgress {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for SnatRule {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for SnatKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for SnatSession {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for SwitchRouter {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for RemoteEncap {}
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
unsafe impl aya::Pod for PortSecurity6 {}
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
unsafe impl aya::Pod for GatewayKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for SnatRuleKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for RouteEntry {}
// SAFETY: repr(C), Copy, a u32 and 16 bytes (20 bytes, 4-aligned): no padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for Route6Key {}
// SAFETY: repr(C), Copy, 16 bytes, two u32, a u16, 6 + 1 + 3 bytes (36 bytes, 4-aligned):
// no padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for RouteEntry6 {}
// SAFETY: repr(C), Copy, a u32, then 6 + 2 + 16 bytes: no padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for TimeExceeded6Key {}
// SAFETY: repr(C), Copy, 16 bytes.
#[cfg(feature = "user")]
unsafe impl aya::Pod for TimeExceeded6Source {}
// SAFETY: repr(C), Copy, 6 bytes, a u16, a u32 and 256 bytes (268 bytes, 4-aligned): no padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for RouterAdvert {}
// SAFETY: repr(C), Copy, a u16, two u8 and a RouteEntry (24 bytes, 4-aligned): no padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for PolicyEntry {}
// SAFETY: repr(C), Copy, three u32: no padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for EcmpKey {}
// SAFETY: repr(C), Copy, two u32: no padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for PairPolicyKey {}
// SAFETY: repr(C), Copy, four u32, four u8, four u16 and a PolicyEntry (28 bytes, 4-aligned):
// no padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for PairPolicy {}
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

    /// Flows that differ only in their source port spread over the members, each flow always
    /// on the same one.
    #[test]
    fn ecmp_spreads_flows_over_members_and_keeps_each_on_one() {
        for members in [2u32, 3, 5] {
            let mut counts = [0u32; 5];
            for port in 40_000u16..41_000 {
                let hash = ecmp::flow_hash(0x0a10_000a, 0xc633_6407, 6, port, 443);
                assert_eq!(
                    hash,
                    ecmp::flow_hash(0x0a10_000a, 0xc633_6407, 6, port, 443)
                );
                counts[ecmp::member_index(hash, members) as usize] += 1;
            }
            let fair = 1000 / members;
            for count in &counts[..members as usize] {
                assert!(
                    count * 10 > fair * 7 && count * 10 < fair * 13,
                    "{members} members: {counts:?}"
                );
            }
        }
        assert_eq!(ecmp::member_index(7, 0), 0);
    }

    #[test]
    fn counters_have_the_kernel_layout() {
        // The kernel side writes eight consecutive u64; any padding or reordering would corrupt reads.
        assert_eq!(core::mem::size_of::<InterfaceCounters>(), 64);
        assert_eq!(core::mem::align_of::<InterfaceCounters>(), 8);
    }

    #[test]
    fn tunnel_types_have_the_kernel_layout() {
        assert_eq!(core::mem::size_of::<TunnelConfig>(), 32);
        assert_eq!(core::mem::size_of::<RemoteEncap>(), 20);
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
        assert_eq!(core::mem::size_of::<acl::AclLogEvent>(), 40);
        assert_eq!(core::mem::size_of::<acl::AclRule>() % 4, 0);
        assert_eq!(core::mem::size_of::<RouteKey>(), 8);
        assert_eq!(core::mem::size_of::<RouteEntry>(), 24);
        assert_eq!(core::mem::size_of::<Route6Key>(), 20);
        assert_eq!(core::mem::size_of::<RouteEntry6>(), 36);
        assert_eq!(core::mem::size_of::<EcmpKey>(), 12);
        assert_eq!(core::mem::size_of::<PairPolicy>(), 16 + 12 + 28);
        assert_eq!(core::mem::size_of::<RouterInfo>(), 8);
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
