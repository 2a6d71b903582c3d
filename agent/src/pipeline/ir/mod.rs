//! The pipeline IR: the few typed tables the datapath backends implement, per datapath (keyed by
//! tunnel keys and port names as the SB names them). Every entry is derived from Southbound rows
//! or logical flows; entries are values, so a diff between two IRs is a set difference.

mod acl;
mod lb;

use std::{
    borrow::Borrow,
    net::{Ipv4Addr, Ipv6Addr},
};

pub use acl::{
    AclAction, AclClause, AclFamily, AclLog, AclMatch, AclRule, AclStage, AddressTerm,
    AddressValue, PortRef, States, TrackingStage,
};
pub use lb::{LbBackend, LbHashField, LbProtocol, LbVip};

/// One entry of a port's addresses or port security, typed.
pub use crate::net::LspAddress;
/// A MAC address's octets.
pub use crate::net::MacOctets as Mac;
/// IPv4 and IPv6 prefixes.
pub use crate::net::{Ipv4Prefix as Prefix, Ipv6Prefix as Prefix6};

/// What a logical port is to the datapath.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortKind {
    /// A pod (VIF), bound to a chassis or not yet.
    Vif { chassis: Option<String> },
    /// One end of a switch–router or router–router link.
    Patch { peer: String },
    /// The bridge to a physical network (underlay), with its VLAN tag.
    Localnet {
        network_name: String,
        tag: Option<u16>,
    },
    /// A distributed gateway port's companion (`chassisredirect`), active on the chassis it is
    /// bound to.
    ChassisRedirect { chassis: Option<String> },
    /// Any other Port_Binding type (l3gateway, localport, …).
    Other(String),
}

/// One IR entry. `datapath` is always the datapath's tunnel key; the chassis-wide entries
/// ([`IrEntry::ChassisEncap`]) belong to no datapath.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IrEntry {
    /// Chassis `chassis` is reached through Geneve at `ip` (from its Encap row of type
    /// "geneve", either family: a node reaches those of its own underlay's): where ports bound
    /// to it are tunnelled to; `csum`: its `options:csum` is "true", so frames to it carry an
    /// outer UDP checksum.
    ChassisEncap {
        chassis: String,
        ip: std::net::IpAddr,
        csum: bool,
    },
    /// A datapath (from Datapath_Binding): a logical switch or router.
    Datapath {
        datapath: u32,
        name: String,
        router: bool,
    },
    /// Some logical flow of this datapath (in `stage`) could not be compiled: reported (coverage,
    /// logs). Whether that stops the datapath from being forwarded is the compiler's call, made
    /// as an [`IrEntry::NotForwardable`] beside it; backends do not read `stage`.
    Unsupported {
        datapath: u32,
        stage: String,
        reason: String,
    },
    /// The compiler's verdict that a backend must not forward this datapath's traffic as
    /// compiled (it may refuse it, or fall back), and why. Stage knowledge stays in the
    /// compiler: a backend obeys this entry and never reads `Unsupported.stage`.
    NotForwardable {
        datapath: u32,
        reason: Unforwardable,
    },
    /// A flow of this datapath (in `stage`) also asks for a duty beside forwarding that the
    /// datapath does not perform, e.g. learning MAC_Bindings. Its forwarding is compiled, so a
    /// backend forwards the datapath as usual and only reports this.
    SideDutyNotDone {
        datapath: u32,
        stage: String,
        duty: String,
    },
    /// A user's ACL (a Northbound ACL row, named by the first 8 hex digits of its UUID as
    /// northd's `stage-hint`) has flows on this switch that the datapath does not enforce.
    UnenforcedAcl { datapath: u32, acl: String },
    /// A flow of an ACL stage of this switch could not be compiled: security fails closed, so
    /// the switch's ingress (or egress) pipeline drops what reaches its ACL stage (unless the
    /// operator chose `--unsupported-acl=allow`).
    AclFailClosed { datapath: u32, egress: bool },
    /// An ACL-stage flow, compiled ([`AclRule`]).
    Acl { datapath: u32, rule: Box<AclRule> },
    /// `stage` of the switch's ingress (or egress) pipeline sends IP packets to conntrack.
    AclTracking {
        datapath: u32,
        egress: bool,
        stage: TrackingStage,
    },
    /// Packets matching `condition` skip `stage`'s conntrack (northd's priority-110 flows:
    /// multicast, neighbour discovery, router and localnet ports); `stateless`: the flow is an
    /// `allow-stateless` ACL's filter (`reg0[16] = 1`), which `ls_*_pre_lb` honours too.
    AclTrackingBypass {
        datapath: u32,
        egress: bool,
        stage: TrackingStage,
        condition: AclMatch,
        stateless: bool,
    },
    /// `ls_*_pre_lb`'s `reg0[16] == 1 → next;`: packets an `allow-stateless` filter matched
    /// skip the load balancers' conntrack as well.
    StatelessSkipsLb { datapath: u32, egress: bool },
    /// A VIP of the switch's load balancers (`ls_in_lb`, with the `ls_in_pre_stateful` flow
    /// that sends it to conntrack).
    LoadBalancer { datapath: u32, vip: Box<LbVip> },
    /// The switch's VIP `vip` (`port` of `protocol`) keeps each client on one backend for
    /// `timeout` seconds after its last new connection (`ls_in_lb_aff_learn`'s
    /// `commit_lb_aff`, the balancer's `options:affinity_timeout`).
    LbAffinity {
        datapath: u32,
        vip: Ipv4Addr,
        port: Option<u16>,
        protocol: Option<LbProtocol>,
        timeout: u32,
    },
    /// The switch has northd's hairpin stages (`ls_in_pre_hairpin`, `ls_in_nat_hairpin`,
    /// `ls_in_hairpin`): a client balanced to itself gets the VIP as source and its packets
    /// leave through the port they came in on.
    LbHairpin { datapath: u32 },
    /// `ls_*_stateful`: connections the ACL stage marked (`reg0[1]`) are committed, with
    /// `ct_mark.blocked` cleared.
    AclCommit { datapath: u32, egress: bool },
    /// A member of an Address_Set (IPv4 entries; the set's IPv6 entries wait for issue 21).
    AddressSetMember { set: String, prefix: Prefix },
    /// A port of an SB Port_Group (named `<datapath key>_<NB name>`).
    PortGroupMember { group: String, port: String },
    /// A logical port (from Port_Binding), with its addresses and port-security allowances,
    /// parsed (in the Southbound's order; keywords such as "unknown" or "router" and entries
    /// that do not parse are left out).
    Port {
        datapath: u32,
        key: u32,
        name: String,
        kind: PortKind,
        addresses: Vec<LspAddress>,
        port_security: Vec<LspAddress>,
    },
    /// A flood/multicast group (from Multicast_Group), by its tunnel key.
    FloodGroup {
        datapath: u32,
        key: u32,
        name: String,
    },
    /// One member port of a flood group (one entry per member, so a membership change is one
    /// entry, whatever the group's size).
    FloodMember {
        datapath: u32,
        group: u32,
        port: u32,
    },
    /// Ingress sanity: VLAN-tagged frames and frames with a multicast source are dropped.
    IngressSanity { datapath: u32 },
    /// Port security is checked (from Port_Binding.port_security) on ingress or egress.
    PortSecurity { datapath: u32, egress: bool },
    /// Known destination MAC → output port.
    L2Fib {
        datapath: u32,
        mac: Mac,
        port: String,
    },
    /// Multicast/broadcast destination → flood group.
    FloodMulticast { datapath: u32, group: String },
    /// ARP/ND sent by a router port is flooded only to non-router ports.
    RouterOriginatedFlood {
        datapath: u32,
        router_macs: Vec<Mac>,
        group: String,
    },
    /// An ARP request for a router IP goes to that router port (and to the L2 flood group, if
    /// the switch has other ports that want it).
    ArpForRouterIp {
        datapath: u32,
        ip: Ipv4Addr,
        router_port: String,
        group: Option<String>,
    },
    /// Unknown unicast: FDB lookup first; what stays unknown meets `DropUnknownDestination` or
    /// `FloodUnknown`.
    UnknownUnicast { datapath: u32 },
    /// Frames whose output port is still unknown are dropped.
    DropUnknownDestination { datapath: u32 },
    /// Frames whose output port is still unknown are flooded to `group` (`_MC_unknown`: the
    /// switch's ports with "unknown" addresses, e.g. a localnet port).
    FloodUnknown { datapath: u32, group: String },
    /// The switch answers ARP requests for `ip` with `mac`.
    ArpReply {
        datapath: u32,
        ip: Ipv4Addr,
        mac: Mac,
    },
    /// …except when the request comes from the port that owns `ip`.
    ArpReplySkip {
        datapath: u32,
        ip: Ipv4Addr,
        inport: String,
    },
    /// No ARP replies to requests arriving on `inport` (localnet ports).
    ArpReplySkipPort { datapath: u32, inport: String },
    /// Frames reaching the end of a pipeline are delivered to their output port.
    Deliver { datapath: u32, egress: bool },
    /// Router port `port` is a gateway port: northd gave it the `chassisredirect` companion
    /// `redirect` (a distributed gateway port: OVN-native NAT, EIPs, a VPC's external access).
    /// What the router routes out of it goes to the chassis where `redirect` is active (its
    /// Port_Binding's chassis), which sends it on to the switch behind the port; with no active
    /// chassis it is dropped, counted and reported (`gateway_unsupported`). The rest of the
    /// router is routed.
    GatewayPort {
        datapath: u32,
        port: String,
        redirect: String,
    },
    /// Router `datapath`'s gateway with chassisredirect port `redirect` carries centralized NAT
    /// (a flow of a NAT stage that applies where `redirect` is active translates with
    /// conntrack: `snat`, a `dnat_and_snat` without `logical_port`, `dnat`), which the datapath
    /// does not: what the router routes out of the gateway stays dropped
    /// (`gateway_unsupported`) wherever `redirect` is active, never forwarded un-NATed.
    CentralizedNat { datapath: u32, redirect: String },
    /// A centralized SNAT rule of router `datapath` (`snat` from `logical` to `external` on
    /// gateway port `gateway_port`, Kube-OVN's `OvnSnatRule`): where the gateway's
    /// chassisredirect port is active, what leaves the port from `logical` leaves from
    /// `external` (a port per connection) and the replies come back to it; the gateway also
    /// answers ARP for `external` there. Elsewhere it does nothing (the traffic goes to the
    /// gateway chassis).
    CentralizedSnat {
        datapath: u32,
        gateway_port: String,
        logical: Prefix,
        external: Ipv4Addr,
    },
    /// A centralized DNAT of router `datapath` (`dnat`, or a `dnat_and_snat` without the pod's
    /// port and MAC: Kube-OVN's `OvnDnatRule`, an `OvnFip` of an IP): where the gateway's
    /// chassisredirect port is active, what enters gateway port `gateway_port` for `external`
    /// goes to `logical`. With a [`IrEntry::CentralizedSnat`] of `logical`/32 to `external`
    /// beside it the pair is a centralized FIP, translated both ways without connection state;
    /// alone it fences the gateway (the reverse translation of its replies needs one).
    CentralizedDnat {
        datapath: u32,
        gateway_port: String,
        external: Ipv4Addr,
        logical: Ipv4Addr,
    },
    /// A VIP of router `datapath`'s load balancers (`lr_in_dnat`'s `ct_lb_mark`, Kube-OVN's
    /// `OvnDnatRule`), balanced where the gateway's chassisredirect port `redirect` is active:
    /// a new connection entering the gateway port for the VIP goes to one of its backends (none:
    /// dropped), its replies leave from the VIP again, and the gateway answers ARP for the VIP
    /// there. Elsewhere it does nothing (the traffic goes to the gateway chassis).
    RouterLoadBalancer {
        datapath: u32,
        redirect: String,
        vip: Box<LbVip>,
    },
    /// A distributed NAT rule (`dnat_and_snat` with `logical_port` and `external_mac`: a FIP
    /// handled on its pod's chassis): where `logical_port` resides, what `logical_ip` sends out
    /// of gateway port `gateway_port` leaves from `external_ip` and `external_mac`, what enters
    /// that port for `external_ip` goes to `logical_ip`, and the switch behind the port answers
    /// ARP for `external_ip` with `external_mac` and hands frames to it to the router. Elsewhere
    /// the rule does nothing (the traffic goes to the gateway chassis).
    DistributedNat {
        datapath: u32,
        gateway_port: String,
        logical_ip: Ipv4Addr,
        external_ip: Ipv4Addr,
        external_mac: Mac,
        logical_port: String,
    },
    /// A router port accepts unicast frames to `mac` (and multicast) arriving on `port`.
    RouterPort {
        datapath: u32,
        port: String,
        mac: Mac,
        multicast: bool,
    },
    /// A route: destination (or, for a `src-ip` static route, source) prefix → output router
    /// port, next hop (None = directly connected). Both kinds compete in one stage by
    /// `priority` (northd: prefix length × 3, +1 for a static and +2 for a connected destination
    /// route, +0 for a source route).
    Route {
        datapath: u32,
        selector: RouteSelector,
        prefix: Prefix,
        priority: u16,
        route_table: Option<u32>,
        nexthop: Option<Ipv4Addr>,
        source_ip: Ipv4Addr,
        source_mac: Mac,
        port: String,
    },
    /// An ECMP route (`lr-route-add --ecmp`, several static routes to one prefix): like
    /// [`IrEntry::Route`], but the next hop is one of the group's members, chosen by a hash of
    /// the packet's 5-tuple among `members` ([`IrEntry::EcmpMember`] says where each leads).
    EcmpRoute {
        datapath: u32,
        selector: RouteSelector,
        prefix: Prefix,
        priority: u16,
        route_table: Option<u32>,
        group: u16,
        /// The member ids OVN's `select` chooses from, in its order.
        members: Vec<u16>,
    },
    /// Member `member` of ECMP group `group` of `stage` (routes and policies number their
    /// groups apart): the next hop, source address and MAC, output port.
    EcmpMember {
        datapath: u32,
        stage: EcmpStage,
        group: u16,
        member: u16,
        nexthop: Ipv4Addr,
        source_ip: Ipv4Addr,
        source_mac: Mac,
        port: String,
    },
    /// A discard (blackhole) route (`lr-route-add … discard`): packets it routes are dropped,
    /// before the router's policies.
    DiscardRoute {
        datapath: u32,
        selector: RouteSelector,
        prefix: Prefix,
        priority: u16,
        route_table: Option<u32>,
    },
    /// Packets entering the router through `port` are routed with route table `table`
    /// (`lr_in_ip_routing_pre`; Kube-OVN's `Subnet.spec.routeTable`, the router port's
    /// `options:route_table`): [`IrEntry::Route`]s of that table and those of no table apply.
    RouteTableOfPort {
        datapath: u32,
        port: String,
        table: u32,
    },
    /// Destinations without a route are dropped.
    RouteMissDrop { datapath: u32 },
    /// A logical router policy (`lr-policy-add`, Kube-OVN's node and subnet policies): after
    /// routing, the highest-priority policy whose prefixes contain the packet's source and
    /// destination (an absent prefix matches anything) decides its fate.
    RouterPolicy {
        datapath: u32,
        priority: u16,
        source: Option<Prefix>,
        destination: Option<Prefix>,
        /// The transport protocol and ports it also matches (`tcp.dst == 80`), if any.
        l4: Option<L4Match>,
        verdict: PolicyVerdict,
    },
    /// Next hop `ip` out of `port` has MAC `mac`.
    Neighbour {
        datapath: u32,
        port: String,
        ip: Ipv4Addr,
        mac: Mac,
    },
    /// A neighbour learned at run time (from MAC_Binding, written by chassis): used when no
    /// static neighbour matches.
    LearnedNeighbour {
        datapath: u32,
        port: String,
        ip: Ipv4Addr,
        mac: Mac,
    },
    /// Next hops without a static neighbour are looked up in MAC_Binding.
    NeighbourLookup { datapath: u32 },
    /// Frames routed out of `port` are delivered to it.
    RouterDelivery { datapath: u32, port: String },
    /// The switch answers neighbour solicitations for `ip` (to it or its solicited-node address)
    /// with `mac`.
    NdReply {
        datapath: u32,
        ip: Ipv6Addr,
        mac: Mac,
    },
    /// …except when the solicitation comes from the port that owns `ip`.
    NdReplySkip {
        datapath: u32,
        ip: Ipv6Addr,
        inport: String,
    },
    /// A solicitation for a router address goes to that router port (and the L2 flood group).
    NdForRouterIp {
        datapath: u32,
        ip: Ipv6Addr,
        router_port: String,
        group: Option<String>,
    },
    /// The router answers solicitations for its `ip` arriving on `port`.
    RouterNdReply {
        datapath: u32,
        port: String,
        ip: Ipv6Addr,
    },
    /// The router answers ICMPv6 echo requests to `ip`.
    RouterEchoReply6 { datapath: u32, ip: Ipv6Addr },
    /// Traffic to the router's own IPv6 `ip` is answered (TCP reset or ICMPv6 unreachable).
    RouterReject6 {
        datapath: u32,
        ip: Ipv6Addr,
        protocol: Option<RejectProtocol>,
        response: RejectResponse,
    },
    /// An IPv6 route (`inport` set for the per-port link-local routes), by destination or
    /// (`src-ip` static routes) by source.
    Route6 {
        datapath: u32,
        selector: RouteSelector,
        prefix: Prefix6,
        priority: u16,
        inport: Option<String>,
        /// As [`IrEntry::Route`]'s.
        route_table: Option<u32>,
        nexthop: Option<Ipv6Addr>,
        source_ip: Ipv6Addr,
        source_mac: Mac,
        port: String,
    },
    /// An IPv6 ECMP route, as [`IrEntry::EcmpRoute`] ([`IrEntry::EcmpMember6`] says where
    /// each member leads).
    EcmpRoute6 {
        datapath: u32,
        selector: RouteSelector,
        prefix: Prefix6,
        priority: u16,
        route_table: Option<u32>,
        group: u16,
        /// The member ids OVN's `select` chooses from, in its order.
        members: Vec<u16>,
    },
    /// Member `member` of IPv6 ECMP route group `group`: the next hop, source address and MAC,
    /// output port.
    EcmpMember6 {
        datapath: u32,
        group: u16,
        member: u16,
        nexthop: Ipv6Addr,
        source_ip: Ipv6Addr,
        source_mac: Mac,
        port: String,
    },
    /// An IPv6 discard route, as [`IrEntry::DiscardRoute`].
    DiscardRoute6 {
        datapath: u32,
        selector: RouteSelector,
        prefix: Prefix6,
        priority: u16,
        route_table: Option<u32>,
    },
    /// IPv6 next hop `ip` out of `port` has MAC `mac`.
    Neighbour6 {
        datapath: u32,
        port: String,
        ip: Ipv6Addr,
        mac: Mac,
    },
    /// An IPv6 neighbour learned at run time (MAC_Binding).
    LearnedNeighbour6 {
        datapath: u32,
        port: String,
        ip: Ipv6Addr,
        mac: Mac,
    },
    /// IPv6 next hops without a static neighbour are looked up in MAC_Binding.
    NeighbourLookup6 { datapath: u32 },
    /// Routed IPv6 packets whose next hop has no known MAC become neighbour solicitations.
    NsForNextHop { datapath: u32 },
    /// IPv6 arriving on `port` from a sender in `network` with hop limit 0 or 1 gets ICMPv6
    /// time exceeded from `source` (northd: one flow per network of the port).
    TtlExceeded6 {
        datapath: u32,
        port: String,
        network: Prefix6,
        source: Ipv6Addr,
    },
    /// Router port `port` answers router solicitations (to `ff02::2`, arriving through it) with
    /// `message`, an ICMPv6 router advertisement (checksum 0) from its MAC `mac` and link-local
    /// address (`lr_in_nd_ra_options`' `put_nd_ra_opts`, as ovn-controller encodes it).
    RouterAdvertisement {
        datapath: u32,
        port: String,
        mac: Mac,
        message: Vec<u8>,
    },
    /// Packets of this kind go to the slow path (the agent), e.g. DHCPv6 replies to a router port.
    Punt { datapath: u32, reason: String },
    /// Frames to `mac` (northd's `svc_monitor_mac`) on this switch are answers to the
    /// health-check probes of the chassis that hosts the sender (`handle_svc_check`): the agent
    /// reads them from the port's interface; the datapath forwards them nowhere.
    ServiceMonitorAnswers { datapath: u32, mac: Mac },
    /// The router drops frames not admitted by any router port.
    RouterAdmissionDrop { datapath: u32 },
    /// The neighbour lookup/learning stages for ARP/ND from `port` (if any) whose sender is in
    /// `subnet` (if any): every packet goes on to the next stage. They also teach the router
    /// the sender (MAC_Binding, written by the chassis): from ARP the kernel's routers report
    /// it and the daemon writes it; from ND ovnbpf does not learn, which the compiler reports
    /// as [`IrEntry::SideDutyNotDone`].
    NeighbourLearning {
        datapath: u32,
        port: Option<String>,
        subnet: Option<Prefix>,
    },
    /// Routed IPv4 packets whose next hop has no known MAC become ARP requests for it.
    ArpRequestForNextHop { datapath: u32 },
    /// Packets reaching the end of the router egress pipeline without a delivery are dropped.
    EgressDefaultDrop { datapath: u32 },
    /// The router answers ARP for its `ip` on `port`, from requesters inside `subnet`.
    RouterArpReply {
        datapath: u32,
        port: String,
        ip: Ipv4Addr,
        subnet: Prefix,
    },
    /// The router answers ICMP echo requests to `ip`.
    RouterEchoReply { datapath: u32, ip: Ipv4Addr },
    /// Traffic to the router's own `ip` (of `protocol`, or any other protocol when `None`) is
    /// answered: a TCP reset, or ICMP destination unreachable with `code`.
    RouterReject {
        datapath: u32,
        ip: Ipv4Addr,
        protocol: Option<RejectProtocol>,
        response: RejectResponse,
    },
    /// A router drop rule of the IP input stage.
    RouterDrop { datapath: u32, rule: RouterDropRule },
    /// Packets arriving on `port` with TTL 0 or 1 get ICMP time exceeded from `source`.
    TtlExceeded {
        datapath: u32,
        port: String,
        source: Ipv4Addr,
    },
}

/// What [`IrEntry::datapath`] gives for entries of no datapath (tunnel keys start at 1).
pub const NO_DATAPATH: u32 = 0;

/// Why a datapath must not be forwarded as compiled ([`IrEntry::NotForwardable`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unforwardable {
    /// A flow of `stage` that changes how the datapath forwards could not be compiled.
    UnsupportedFlow { stage: String, reason: String },
    /// Like [`Self::UnsupportedFlow`], for a flow only IPv6 packets can match: the datapath's
    /// IPv6 must not be forwarded as compiled; its IPv4 is unaffected.
    UnsupportedIpv6Flow { stage: String, reason: String },
    /// The router routes onto underlay switch `switch`, which has localnet port `localnet`
    /// (Kube-OVN's U2O interconnection): OVN sends such routed traffic through the localnet
    /// port with per-chassis MACs, which is not compiled.
    UnderlayRouting { switch: String, localnet: String },
}

impl std::fmt::Display for Unforwardable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unforwardable::UnsupportedFlow { stage, reason } => write!(f, "{stage}: {reason}"),
            Unforwardable::UnsupportedIpv6Flow { stage, reason } => {
                write!(f, "{stage}: {reason} (IPv6 only)")
            }
            Unforwardable::UnderlayRouting { switch, localnet } => write!(
                f,
                "routes onto underlay switch {switch} (localnet port {localnet}): U2O \
                 interconnection is not compiled"
            ),
        }
    }
}

/// The side duty of the neighbour stages the datapath leaves undone: ovn-controller (pinctrl)
/// writes MAC_Binding rows from ARP and ND (`put_arp`, `put_nd`); ovnbpf learns from ARP, not
/// yet from ND.
pub const MAC_LEARNING_NOT_DONE: &str =
    "IPv6 MAC learning (MAC_Binding from ND senders) is not done by the datapath";

/// The transport protocol a router reject rule is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectProtocol {
    Tcp,
    Udp,
    Sctp,
}

/// What a router sends back for traffic to its own addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectResponse {
    TcpReset,
    SctpAbort,
    IcmpUnreachable { code: u8 },
}

/// Which address of a packet a [`IrEntry::Route`]'s prefix is matched against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteSelector {
    /// `ip4.dst`: every route but `lr-route-add --policy=src-ip`.
    Destination,
    /// `ip4.src`: a source-based static route (Kube-OVN's `policySrc`, which it writes for
    /// every subnet of a custom VPC).
    Source,
}

/// What a router policy does with the packets it matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyVerdict {
    /// Keep the routing decision.
    Allow,
    Drop,
    /// Replace the routing decision: next hop, source address and MAC, output port.
    Reroute {
        nexthop: Ipv4Addr,
        source_ip: Ipv4Addr,
        source_mac: Mac,
        port: String,
    },
    /// Replace the routing decision by one of ECMP group `group`'s members (a reroute with
    /// several next hops: Kube-OVN's centralized gateways with ECMP), chosen among `members` by
    /// a hash of the packet's 5-tuple.
    RerouteEcmp {
        group: u16,
        members: Vec<u16>,
    },
}

/// A policy's match on the transport layer: the protocol (6 TCP, 17 UDP, 132 SCTP) and,
/// inclusive, the source and destination port ranges (`None`: any port).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct L4Match {
    pub protocol: u8,
    pub source_ports: Option<(u16, u16)>,
    pub destination_ports: Option<(u16, u16)>,
}

impl L4Match {
    /// Whether a packet of `protocol` with these ports matches.
    #[must_use]
    pub fn matches(&self, protocol: u8, (source, destination): (u16, u16)) -> bool {
        let within = |range: Option<(u16, u16)>, port: u16| {
            range.is_none_or(|(low, high)| (low..=high).contains(&port))
        };
        protocol == self.protocol
            && within(self.source_ports, source)
            && within(self.destination_ports, destination)
    }
}

/// The stage an ECMP group belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EcmpStage {
    /// `lr_in_ip_routing_ecmp`: ECMP routes.
    Route,
    /// `lr_in_policy_ecmp`: reroute policies with several next hops.
    Policy,
}

/// Why the router's IP input stage drops a packet.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouterDropRule {
    /// Source address is one of the router's own (or its subnets' broadcast) addresses.
    SpoofedSource(Vec<Ipv4Addr>),
    /// Multicast/broadcast/loopback/"this network" sources or destinations.
    Martian,
    /// ARP or ND not handled by an earlier rule.
    UnhandledNeighbourDiscovery,
    /// IP multicast.
    Multicast,
    /// Ethernet broadcast.
    Broadcast,
    /// Anything else addressed to the router's own IPs.
    ToRouter(Vec<Ipv4Addr>),
    /// TTL 0 or 1 (after time-exceeded handling).
    TtlExpired,
    /// Neither IPv4 nor IPv6 after routing: no next hop can be resolved.
    Unresolvable,
    /// IPv6 reserved multicast destinations (ff0X::/16 scopes 0–2).
    Ipv6ReservedMulticast,
    /// Anything else addressed to the router's own IPv6 addresses.
    ToRouter6(Vec<Ipv6Addr>),
    /// Router solicitations and advertisements are not routed.
    RouterSolicitationOrAdvertisement,
}

impl IrEntry {
    /// The datapath (tunnel key) the entry belongs to; [`NO_DATAPATH`] for chassis-wide
    /// entries.
    #[must_use]
    pub fn datapath(&self) -> u32 {
        match self {
            IrEntry::ChassisEncap { .. }
            | IrEntry::AddressSetMember { .. }
            | IrEntry::PortGroupMember { .. } => NO_DATAPATH,
            IrEntry::Datapath { datapath, .. }
            | IrEntry::Unsupported { datapath, .. }
            | IrEntry::NotForwardable { datapath, .. }
            | IrEntry::SideDutyNotDone { datapath, .. }
            | IrEntry::UnenforcedAcl { datapath, .. }
            | IrEntry::Acl { datapath, .. }
            | IrEntry::AclFailClosed { datapath, .. }
            | IrEntry::AclTracking { datapath, .. }
            | IrEntry::AclTrackingBypass { datapath, .. }
            | IrEntry::StatelessSkipsLb { datapath, .. }
            | IrEntry::AclCommit { datapath, .. }
            | IrEntry::LoadBalancer { datapath, .. }
            | IrEntry::LbHairpin { datapath }
            | IrEntry::LbAffinity { datapath, .. }
            | IrEntry::Port { datapath, .. }
            | IrEntry::FloodGroup { datapath, .. }
            | IrEntry::FloodMember { datapath, .. }
            | IrEntry::IngressSanity { datapath }
            | IrEntry::PortSecurity { datapath, .. }
            | IrEntry::L2Fib { datapath, .. }
            | IrEntry::FloodMulticast { datapath, .. }
            | IrEntry::RouterOriginatedFlood { datapath, .. }
            | IrEntry::ArpForRouterIp { datapath, .. }
            | IrEntry::UnknownUnicast { datapath }
            | IrEntry::DropUnknownDestination { datapath }
            | IrEntry::FloodUnknown { datapath, .. }
            | IrEntry::ArpReply { datapath, .. }
            | IrEntry::ArpReplySkip { datapath, .. }
            | IrEntry::ArpReplySkipPort { datapath, .. }
            | IrEntry::Deliver { datapath, .. }
            | IrEntry::RouterPort { datapath, .. }
            | IrEntry::GatewayPort { datapath, .. }
            | IrEntry::CentralizedNat { datapath, .. }
            | IrEntry::CentralizedSnat { datapath, .. }
            | IrEntry::CentralizedDnat { datapath, .. }
            | IrEntry::RouterLoadBalancer { datapath, .. }
            | IrEntry::DistributedNat { datapath, .. }
            | IrEntry::Route { datapath, .. }
            | IrEntry::EcmpRoute { datapath, .. }
            | IrEntry::EcmpMember { datapath, .. }
            | IrEntry::EcmpRoute6 { datapath, .. }
            | IrEntry::EcmpMember6 { datapath, .. }
            | IrEntry::DiscardRoute6 { datapath, .. }
            | IrEntry::RouteTableOfPort { datapath, .. }
            | IrEntry::DiscardRoute { datapath, .. }
            | IrEntry::RouteMissDrop { datapath }
            | IrEntry::RouterPolicy { datapath, .. }
            | IrEntry::Neighbour { datapath, .. }
            | IrEntry::NeighbourLookup { datapath }
            | IrEntry::LearnedNeighbour { datapath, .. }
            | IrEntry::RouterDelivery { datapath, .. }
            | IrEntry::RouterAdmissionDrop { datapath }
            | IrEntry::NeighbourLearning { datapath, .. }
            | IrEntry::ArpRequestForNextHop { datapath }
            | IrEntry::EgressDefaultDrop { datapath }
            | IrEntry::RouterArpReply { datapath, .. }
            | IrEntry::RouterEchoReply { datapath, .. }
            | IrEntry::RouterDrop { datapath, .. }
            | IrEntry::NdReply { datapath, .. }
            | IrEntry::NdReplySkip { datapath, .. }
            | IrEntry::NdForRouterIp { datapath, .. }
            | IrEntry::RouterNdReply { datapath, .. }
            | IrEntry::RouterEchoReply6 { datapath, .. }
            | IrEntry::RouterReject6 { datapath, .. }
            | IrEntry::Route6 { datapath, .. }
            | IrEntry::Neighbour6 { datapath, .. }
            | IrEntry::LearnedNeighbour6 { datapath, .. }
            | IrEntry::NeighbourLookup6 { datapath }
            | IrEntry::NsForNextHop { datapath }
            | IrEntry::Punt { datapath, .. }
            | IrEntry::ServiceMonitorAnswers { datapath, .. }
            | IrEntry::RouterReject { datapath, .. }
            | IrEntry::TtlExceeded { datapath, .. }
            | IrEntry::TtlExceeded6 { datapath, .. }
            | IrEntry::RouterAdvertisement { datapath, .. } => *datapath,
        }
    }
}

/// Entries that appeared and disappeared in one step: owned (`IrDiff`), or borrowed
/// ([`IrDiffRef`]) from an owned diff or from the compiler's IR itself, as a first view's diff is
/// (the whole IR: a copy of it was the largest allocation of the agent's start, 25 MB at 10,000
/// pods).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IrDiff<E = IrEntry> {
    pub added: Vec<E>,
    pub removed: Vec<E>,
}

/// A diff whose entries are borrowed; what backends take.
pub type IrDiffRef<'a> = IrDiff<&'a IrEntry>;

impl<E> Default for IrDiff<E> {
    fn default() -> Self {
        Self {
            added: Vec::new(),
            removed: Vec::new(),
        }
    }
}

impl<E: Borrow<IrEntry>> IrDiff<E> {
    #[must_use]
    pub fn len(&self) -> usize {
        self.added.len() + self.removed.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its entries in the order a backend takes them in: the removed ones (`false`), then the
    /// added ones (`true`), so that an entry replaced by an equal-keyed one ends up present.
    pub fn in_order(&self) -> impl Iterator<Item = (&IrEntry, bool)> {
        self.removed
            .iter()
            .map(|entry| (entry.borrow(), false))
            .chain(self.added.iter().map(|entry| (entry.borrow(), true)))
    }

    /// A view of it, by reference.
    #[must_use]
    pub fn borrowed(&self) -> IrDiffRef<'_> {
        IrDiff {
            added: self.added.iter().map(Borrow::borrow).collect(),
            removed: self.removed.iter().map(Borrow::borrow).collect(),
        }
    }

    /// A copy of it that owns its entries.
    #[must_use]
    pub fn to_owned_diff(&self) -> IrDiff {
        IrDiff {
            added: self.added.iter().map(|e| e.borrow().clone()).collect(),
            removed: self.removed.iter().map(|e| e.borrow().clone()).collect(),
        }
    }
}
