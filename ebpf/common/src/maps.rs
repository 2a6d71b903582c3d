//! Every kernel map, declared once: its name, key, value, capacity and kind, as one zero-sized
//! type implementing [`MapDef`] (and its name in [`crate::map`]). The kernel's statics are
//! derived from these declarations (`ebpf/src/maps.rs`, whose macro checks at compile time that
//! the static's name and kind match), and the agent reads and writes every map through one
//! generic access over [`MapDef`] (`agent/src/dataplane/ebpf/maps.rs`). Owns no behaviour.
//!
//! Adding a map needs edits in at most three places:
//! 1. one line in the [`declare_maps!`] table below (plus its key/value types in `lib.rs`, and a
//!    [`crate::LAYOUT_VERSION`] bump if an existing map's name or layout changes);
//! 2. one `kernel_map!` line in `ebpf/src/maps.rs`, next to the stage that uses it;
//! 3. on the agent side, the module of the map's family (`agent/src/dataplane/ebpf/l2/<family>.rs`
//!    or `l3.rs`): a `Table<M, K>` in the family's tables, its `TableKey` impl, the function
//!    computing its desired values, and its line in the family's flush and sweep (a new family
//!    also registers its tables in `L2State`). The generic `set::<M>`/`remove::<M>`/`keys::<M>`,
//!    the `Table` installer and the test recorder need no edit.

use crate::{
    ArpAnswer, ArpKey, DROP_EVENTS_BYTES, DropEvent, EcmpKey, FibEntry, FibKey, FloodGroup,
    FloodKey, FloodMemberKey, FloodRoles, GatewayEgress, GatewayKey, GatewayRedirect,
    InterfaceCounters, Ipv6Key, LocalPort, Localnet, MAX_ARP_ENTRIES, MAX_ECMP_MEMBERS,
    MAX_FIB_ENTRIES, MAX_FLOOD_GROUPS, MAX_FLOOD_MEMBERS, MAX_GATEWAYS, MAX_INTERFACES,
    MAX_LOCALNETS, MAX_NATS, MAX_NEIGHBOURS, MAX_REMOTE_ENCAPS, MAX_ROUTERS, MAX_ROUTES,
    MAX_SNAT_RULES, MAX_SNAT_SESSIONS, MAX_TUNNEL_PORTS, NEIGHBOUR_EVENTS_BYTES, NatTarget,
    Neighbour, NeighbourEvent, NeighbourKey, PairPolicy, PairPolicyKey, PodPort, PolicyEntry,
    PortSecurity, PortSecurity6, ProviderKey, RemoteEncap, Route6Key, RouteEntry, RouteEntry6,
    RouteKey, RouterAddress, RouterAdvert, RouterInfo, SnatKey, SnatRule, SnatRuleKey, SnatSession,
    SwitchRouter, TimeExceeded6Key, TimeExceeded6Source, TunnelConfig, TunnelPortKey,
    acl::{
        self, AclAddressKey, AclLogEvent, AclPortKey, AclRule, AclRuleKey, AclSwitch, AclVerdict,
        AclVerdictKey, CtEntry, CtKey,
    },
    drop_reason,
    lb::{
        self, LbAddressKey, LbAffinity, LbAffinityKey, LbBackend, LbBackendKey, LbMemberKey, LbNat,
        LbNatKey, LbVip, LbVipKey, SockLbClient, SockLbReverse, SockLbReverseKey,
    },
    router_reply, stage,
};

/// The kinds of kernel map ovnbpf uses: one marker type each, named like aya's map types, so a
/// [`MapDef`] states its kind in its type and generic code dispatches on it.
pub mod kind {
    /// A map kind; `ID` lets `const` code compare kinds.
    pub trait MapKind {
        const ID: u8;
    }
    /// `BPF_MAP_TYPE_HASH`.
    pub struct HashMap;
    /// `BPF_MAP_TYPE_PERCPU_HASH`.
    pub struct PerCpuHashMap;
    /// `BPF_MAP_TYPE_LRU_HASH`: the least recently used entries make room for new ones.
    pub struct LruHashMap;
    /// `BPF_MAP_TYPE_ARRAY` (keys are `u32` indexes).
    pub struct Array;
    /// `BPF_MAP_TYPE_PERCPU_ARRAY` (keys are `u32` indexes).
    pub struct PerCpuArray;
    /// `BPF_MAP_TYPE_LPM_TRIE` (keys carry a prefix length).
    pub struct LpmTrie;
    /// `BPF_MAP_TYPE_RINGBUF` (no keys; the capacity is in bytes).
    pub struct RingBuf;
    /// `BPF_MAP_TYPE_PROG_ARRAY` (keys are slots, values program descriptors).
    pub struct ProgramArray;
    impl MapKind for HashMap {
        const ID: u8 = 0;
    }
    impl MapKind for PerCpuHashMap {
        const ID: u8 = 1;
    }
    impl MapKind for Array {
        const ID: u8 = 2;
    }
    impl MapKind for PerCpuArray {
        const ID: u8 = 3;
    }
    impl MapKind for LpmTrie {
        const ID: u8 = 4;
    }
    impl MapKind for RingBuf {
        const ID: u8 = 5;
    }
    impl MapKind for ProgramArray {
        const ID: u8 = 6;
    }
    impl MapKind for LruHashMap {
        const ID: u8 = 7;
    }
}

/// One kernel map: the contract both sides compile against.
pub trait MapDef {
    /// Its name in the object file (and its pin file's name).
    const NAME: &'static str;
    /// Entries it holds (bytes for a ring buffer).
    const MAX_ENTRIES: u32;
    /// What it is.
    type Kind: kind::MapKind;
    /// Its key (`u32` for arrays; the data part for an LPM trie; `()` for a ring buffer).
    type Key: Copy + 'static;
    /// Its value (the record type for a ring buffer).
    type Value: Copy + 'static;
}

/// Whether two names are equal, in `const` code (the kernel's statics check their names with it).
#[must_use]
pub const fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Bytes of the flood walk's per-CPU scratch (its value type is the kernel's own: a FIB lookup
/// parameter block, a member key and a re-addressing plan; the kernel checks the size).
pub const FLOOD_SCRATCH_BYTES: usize = 88;
/// Size of the ACL stages' parsed packet (`ebpf/src/acl.rs`'s `Packet`), kept in
/// [`AclPacketScratch`].
pub const ACL_PACKET_SCRATCH_BYTES: usize = 60;
/// The size of [`map::CHECKSUM_SCRATCH`]'s one block.
pub const CHECKSUM_CHUNK_BYTES: usize = 64;

macro_rules! declare_maps {
    ($( $(#[$doc:meta])* $ty:ident = $name:ident: $kind:ident<$key:ty, $value:ty>[$max:expr]; )*) => {
        $(
            $(#[$doc])*
            pub struct $ty;
            impl MapDef for $ty {
                const NAME: &'static str = stringify!($name);
                const MAX_ENTRIES: u32 = $max;
                type Kind = kind::$kind;
                type Key = $key;
                type Value = $value;
            }
        )*
        /// Map names as they appear in the object file (the [`MapDef::NAME`]s).
        pub mod names {
            $( pub const $name: &str = stringify!($name); )*
            /// Every map the object must contain; each one is pinned (and adopted on restart) by
            /// name.
            pub const ALL: &[&str] = &[$( $name ),*];
        }
    };
}

declare_maps! {
    /// Per-CPU hash: ifindex → [`InterfaceCounters`].
    InterfaceCountersMap = INTERFACE_COUNTERS: PerCpuHashMap<u32, InterfaceCounters>[MAX_INTERFACES];
    /// Array with one [`TunnelConfig`] (index 0): this node's tunnel endpoint.
    TunnelConfigMap = TUNNEL_CONFIG: Array<u32, TunnelConfig>[1];
    /// Hash: another chassis's endpoint key (its encap IP in network byte order over an IPv4
    /// underlay: see [`TunnelConfig`]) → [`RemoteEncap`]: what its Geneve endpoint asks of the
    /// frames sent to it, and its IPv6 address over an IPv6 underlay.
    RemoteEncaps = REMOTE_ENCAPS: HashMap<u32, RemoteEncap>[MAX_REMOTE_ENCAPS];
    /// Hash: [`TunnelPortKey`] → [`LocalPort`]: where a decapsulated frame for (datapath, logical
    /// output port) is delivered.
    TunnelPorts = TUNNEL_PORTS: HashMap<TunnelPortKey, LocalPort>[MAX_TUNNEL_PORTS];
    /// Per-CPU array of `u64`, indexed by [`drop_reason`]: frames the programs dropped.
    DropCounters = DROP_COUNTERS: PerCpuArray<u32, u64>[drop_reason::CAPACITY];
    /// Hash: ifindex of a pod's host-side veth → [`PodPort`].
    PodPorts = POD_PORTS: HashMap<u32, PodPort>[MAX_INTERFACES];
    /// Hash: [`FibKey`] → [`FibEntry`]: where frames to a MAC on a datapath go.
    L2Fib = L2_FIB: HashMap<FibKey, FibEntry>[MAX_FIB_ENTRIES];
    /// Hash: ifindex of a pod's host-side veth → [`PortSecurity`]: what the pod may send (ports
    /// without an entry are not checked).
    PortSecurityMap = PORT_SECURITY: HashMap<u32, PortSecurity>[MAX_INTERFACES];
    /// Hash: veth ifindex → [`PortSecurity6`]: the IPv6 addresses of a pod's port security
    /// (ports listing some).
    PortSecurity6Map = PORT_SECURITY6: HashMap<u32, PortSecurity6>[MAX_INTERFACES];
    /// Hash: [`ArpKey`] → [`ArpAnswer`]: the ARP responder (an IPv4 address on a datapath and the
    /// MAC to answer with).
    ArpResponder = ARP_RESPONDER: HashMap<ArpKey, ArpAnswer>[MAX_ARP_ENTRIES];
    /// Hash: [`FloodKey`] → [`FloodGroup`]: how many members of a flood group (Multicast_Group)
    /// this node reaches, locally and on other chassis.
    FloodGroups = FLOOD_GROUPS: HashMap<FloodKey, FloodGroup>[MAX_FLOOD_GROUPS];
    /// Hash: [`FloodMemberKey`] (a group and a slot) → `u32`: one member of a flood group, a local
    /// veth's ifindex or another chassis's endpoint key (see [`TunnelConfig`]).
    FloodMembers = FLOOD_MEMBERS: HashMap<FloodMemberKey, u32>[MAX_FLOOD_MEMBERS];
    /// Per-CPU array of one scratch block: the flood walk's (its callback has no stack to spare
    /// for it). Holds nothing between frames.
    FloodScratch = FLOOD_SCRATCH: PerCpuArray<u32, [u8; FLOOD_SCRATCH_BYTES]>[1];
    /// Per-CPU array of one 64-byte block: a chunk of a frame the outer UDP checksum sums whole
    /// (`ebpf/src/encap_checksum.rs`). Holds nothing between frames.
    ChecksumScratch = CHECKSUM_SCRATCH: PerCpuArray<u32, [u8; CHECKSUM_CHUNK_BYTES]>[1];
    /// Hash: datapath tunnel key → [`FloodRoles`]: which group a datapath floods broadcasts and
    /// unknown unicast to.
    FloodRolesMap = FLOOD_ROLES: HashMap<u32, FloodRoles>[MAX_FLOOD_GROUPS];
    /// Ring buffer of [`DropEvent`]s: one per frame a program dropped.
    DropEvents = DROP_EVENTS: RingBuf<(), DropEvent>[DROP_EVENTS_BYTES];
    /// LPM trie: ([`RouteKey`], prefix) → [`RouteEntry`]: each router's routes.
    Routes = ROUTES: LpmTrie<RouteKey, RouteEntry>[MAX_ROUTES];
    /// LPM trie: ([`RouteKey`] by source, prefix) → [`RouteEntry`]: each router's `src-ip`
    /// routes.
    SourceRoutes = SOURCE_ROUTES: LpmTrie<RouteKey, RouteEntry>[MAX_ROUTES];
    /// LPM trie: ([`Route6Key`], prefix) → [`RouteEntry6`]: each router's IPv6 routes.
    Routes6 = ROUTES6: LpmTrie<Route6Key, RouteEntry6>[MAX_ROUTES];
    /// LPM trie: ([`Route6Key`] by source, prefix) → [`RouteEntry6`]: each router's IPv6
    /// `src-ip` routes.
    SourceRoutes6 = SOURCE_ROUTES6: LpmTrie<Route6Key, RouteEntry6>[MAX_ROUTES];
    /// LPM trie: ([`TimeExceeded6Key`], prefix) → [`TimeExceeded6Source`]: where a router port
    /// answers IPv6 whose hop limit runs out on entering it, by the sender's network.
    TimeExceeded6 = TIME_EXCEEDED6: LpmTrie<TimeExceeded6Key, TimeExceeded6Source>[MAX_NEIGHBOURS];
    /// Hash: a switch's tunnel key → the [`RouterAdvert`] its router port answers router
    /// solicitations with.
    RouterAdverts = ROUTER_ADVERTS: HashMap<u32, RouterAdvert>[MAX_ROUTERS];
    /// LPM trie: ([`RouteKey`] by destination, prefix) → [`PolicyEntry`]: each router's policies
    /// matching a destination prefix.
    PoliciesByDestination = POLICIES_BY_DESTINATION: LpmTrie<RouteKey, PolicyEntry>[MAX_ROUTES];
    /// LPM trie: ([`RouteKey`] by source, prefix) → [`PolicyEntry`]: each router's policies
    /// matching a source prefix.
    PoliciesBySource = POLICIES_BY_SOURCE: LpmTrie<RouteKey, PolicyEntry>[MAX_ROUTES];
    /// Hash: [`NeighbourKey`] (a router and the address of one of its ports) → the route table
    /// packets entering through that port are routed with (`lr_in_ip_routing_pre`).
    RouteTables = ROUTE_TABLES: HashMap<NeighbourKey, u32>[MAX_NEIGHBOURS];
    /// Hash: [`PairPolicyKey`] → [`PairPolicy`]: each router's policies matching both a source
    /// and a destination prefix, highest priority first.
    PolicyPairs = POLICY_PAIRS: HashMap<PairPolicyKey, PairPolicy>[MAX_ROUTERS];
    /// Hash: [`EcmpKey`] → [`RouteEntry`]: where each member of routers' ECMP groups leads.
    EcmpMembers = ECMP_MEMBERS: HashMap<EcmpKey, RouteEntry>[MAX_ECMP_MEMBERS];
    /// Hash: [`EcmpKey`] → [`RouteEntry6`]: where each index of an IPv6 ECMP group leads.
    EcmpMembers6 = ECMP_MEMBERS6: HashMap<EcmpKey, RouteEntry6>[MAX_ECMP_MEMBERS];
    /// Hash: [`NeighbourKey`] → [`Neighbour`]: next hops' MACs per router.
    Neighbours = NEIGHBOURS: HashMap<NeighbourKey, Neighbour>[MAX_NEIGHBOURS];
    /// Hash: [`NeighbourKey`] (a router and a pod's address) → [`NatTarget`]: the distributed
    /// NAT rules of this chassis's pods, by the address their packets leave from.
    NatByLogical = NAT_BY_LOGICAL: HashMap<NeighbourKey, NatTarget>[MAX_NATS];
    /// Hash: [`NeighbourKey`] (a router and an external address) → [`NatTarget`]: the same
    /// rules, by the address their packets arrive for.
    NatByExternal = NAT_BY_EXTERNAL: HashMap<NeighbourKey, NatTarget>[MAX_NATS];
    /// Hash: [`GatewayKey`] (a router, the switch behind one of its gateway ports) →
    /// [`GatewayRedirect`]: where what the router routes out of that port goes. No entry: the
    /// gateway has no active chassis, or carries what the datapath does not (centralized NAT):
    /// dropped as `gateway_unsupported`.
    GatewayRedirects = GATEWAY_REDIRECTS: HashMap<GatewayKey, GatewayRedirect>[MAX_GATEWAYS];
    /// Hash: [`NeighbourKey`] (a router with a gateway port elsewhere, the address of one of
    /// its ports) → `u32`: that port's key, the logical input port of what entered by it and is
    /// tunnelled to the gateway chassis.
    GatewayInports = GATEWAY_INPORTS: HashMap<NeighbourKey, u32>[MAX_GATEWAYS];
    /// Hash: [`TunnelPortKey`] (a router's VNI, a chassisredirect port's key) → [`GatewayEgress`]:
    /// on the active gateway chassis, where frames other chassis tunnel to the port go.
    GatewayEgressMap = GATEWAY_EGRESS: HashMap<TunnelPortKey, GatewayEgress>[MAX_GATEWAYS];
    /// LPM trie: [`SnatRuleKey`] (a router, the switch behind its gateway port, a source
    /// prefix; prefix length 64 + the prefix's) → [`SnatRule`]: the centralized SNAT rules of
    /// the gateway ports this chassis is the active gateway of.
    SnatRules = SNAT_RULES: LpmTrie<SnatRuleKey, SnatRule>[MAX_SNAT_RULES];
    /// LRU hash: [`SnatKey`] from inside → [`SnatSession`] (the external address and port): the
    /// centralized SNAT connections through this gateway chassis.
    SnatSessions = SNAT_SESSIONS: LruHashMap<SnatKey, SnatSession>[MAX_SNAT_SESSIONS];
    /// LRU hash: [`SnatKey`] from outside → [`SnatSession`] (the pod's address and port): the
    /// same connections, as their replies find them.
    SnatReverse = SNAT_REVERSE: LruHashMap<SnatKey, SnatSession>[MAX_SNAT_SESSIONS];
    /// Hash: switch datapath key → [`SwitchRouter`]: the router a switch's broadcast ARP also
    /// reaches (MAC learning from gratuitous ARP).
    SwitchRouters = SWITCH_ROUTERS: HashMap<u32, SwitchRouter>[MAX_FLOOD_GROUPS];
    /// Ring buffer of [`NeighbourEvent`]s: ARP senders routers heard of and do not hold at
    /// that MAC (MAC learning).
    NeighbourEvents = NEIGHBOUR_EVENTS: RingBuf<(), NeighbourEvent>[NEIGHBOUR_EVENTS_BYTES];
    /// Hash: router datapath key → [`RouterInfo`]: routers the kernel forwards for.
    Routers = ROUTERS: HashMap<u32, RouterInfo>[MAX_ROUTERS];
    /// Hash: [`NeighbourKey`] (a router and one of its own addresses) → [`RouterAddress`].
    RouterAddresses = ROUTER_ADDRESSES: HashMap<NeighbourKey, RouterAddress>[MAX_NEIGHBOURS];
    /// Hash: switch datapath key → [`Localnet`]: underlay switches and the provider NIC and VLAN
    /// their localnet port is bridged to.
    Localnets = LOCALNETS: HashMap<u32, Localnet>[MAX_LOCALNETS];
    /// Hash: [`ProviderKey`] (provider NIC, VLAN) → switch datapath key.
    ProviderNetworks = PROVIDER_NETWORKS: HashMap<ProviderKey, u32>[MAX_LOCALNETS];
    /// Per-CPU array of `u64`, indexed by [`router_reply`]: answers the routers sent.
    RouterReplies = ROUTER_REPLIES: PerCpuArray<u32, u64>[router_reply::CAPACITY];
    /// Hash: [`Ipv6Key`] → [`ArpAnswer`]: the ND responder (an IPv6 address on a switch and the
    /// MAC to advertise).
    NdResponder = ND_RESPONDER: HashMap<Ipv6Key, ArpAnswer>[MAX_ARP_ENTRIES];
    /// Hash: [`Ipv6Key`] (a router and one of its own IPv6 addresses) → [`RouterAddress`].
    RouterAddresses6 = ROUTER_ADDRESSES6: HashMap<Ipv6Key, RouterAddress>[MAX_NEIGHBOURS];
    /// Hash: [`Ipv6Key`] (a router and a next hop) → [`Neighbour`]: IPv6 next hops' MACs.
    Neighbours6 = NEIGHBOURS6: HashMap<Ipv6Key, Neighbour>[MAX_NEIGHBOURS];
    /// Program array: [`crate::stage`] slot → a later stage's program, tail-called.
    Stages = STAGES: ProgramArray<u32, u32>[stage::CAPACITY];
    /// Hash: switch datapath key → [`AclSwitch`]: switches whose pipelines run ACL stages.
    AclSwitches = ACL_SWITCHES: HashMap<u32, AclSwitch>[acl::MAX_ACL_SWITCHES];
    /// Hash: [`AclRuleKey`] → [`AclRule`]: each switch's rule lists.
    AclRules = ACL_RULES: HashMap<AclRuleKey, AclRule>[acl::MAX_ACL_RULES];
    /// LPM trie: [`AclAddressKey`] (set id, IPv4 prefix) → `u32` (1): address set members.
    AclAddresses = ACL_ADDRESSES: LpmTrie<AclAddressKey, u32>[acl::MAX_ACL_ADDRESSES];
    /// Hash: [`AclPortKey`] (set id, port key) → `u32` (1): port set members.
    AclPortSets = ACL_PORT_SETS: HashMap<AclPortKey, u32>[acl::MAX_ACL_PORTS];
    /// LRU hash: [`CtKey`] → [`CtEntry`]: committed connections, per logical port's zone.
    Conntrack = CONNTRACK: LruHashMap<CtKey, CtEntry>[acl::MAX_CONNECTIONS];
    /// Ring buffer of [`AclLogEvent`]s: one per packet a logged ACL rule decided.
    AclLogEvents = ACL_LOG_EVENTS: RingBuf<(), AclLogEvent>[acl::ACL_LOG_EVENTS_BYTES];
    /// Per-CPU array of `u64`, indexed by [`acl::logged`]: packets logged rules decided, and
    /// events lost.
    AclLogged = ACL_LOGGED: PerCpuArray<u32, u64>[acl::logged::COUNT];
    /// Per-CPU array of `u64`, indexed by [`acl::ct_counter`]: connections committed, and
    /// commits that failed.
    ConntrackCounters = CONNTRACK_COUNTERS: PerCpuArray<u32, u64>[acl::ct_counter::COUNT];
    /// LRU hash: [`AclVerdictKey`] → [`AclVerdict`]: the outcome of recent walks of the main
    /// rule lists, so that the packets of a connection after its first walk none. An exact-match
    /// cache (the key holds everything a rule reads), valid while its generation is current.
    AclVerdicts = ACL_VERDICTS: LruHashMap<AclVerdictKey, AclVerdict>[acl::MAX_ACL_VERDICTS];
    /// Hash: 0 → the generation of the ACL maps, which the agent advances after every write to
    /// `ACL_SWITCHES`, `ACL_RULES`, `ACL_ADDRESSES` or `ACL_PORT_SETS`: verdicts of an older one
    /// are stale. Absent: nothing is cached.
    AclGeneration = ACL_GENERATION: HashMap<u32, u64>[1];
    /// Per-CPU array of one [`AclVerdict`]: the verdict cache's key and outcome while a stage
    /// consults it (the stages' frames have no room for them). Holds nothing between frames.
    AclVerdictScratch = ACL_VERDICT_SCRATCH: PerCpuArray<u32, AclVerdict>[1];
    /// Per-CPU array of one block: the packet an ACL stage parsed, which the stage's judgement
    /// reads (`ebpf/src/acl.rs`). Holds nothing between frames.
    AclPacketScratch = ACL_PACKET_SCRATCH: PerCpuArray<u32, [u8; ACL_PACKET_SCRATCH_BYTES]>[1];
    /// Per-CPU array of `u64`, indexed by [`acl::verdict_cache`]: walks answered from the cache
    /// and walks done.
    AclVerdictCache = ACL_VERDICT_CACHE: PerCpuArray<u32, u64>[acl::verdict_cache::COUNT];
    /// Hash: [`LbAddressKey`] (switch, address) → `u32` (its VIPs): addresses that are load
    /// balancer VIPs on a switch, the gate before the load-balancer stage.
    LbAddresses = LB_ADDRESSES: HashMap<LbAddressKey, u32>[lb::MAX_LB_ADDRESSES];
    /// Hash: switch datapath key → `u32` (its VIPs): switches with load balancers, whose
    /// deliveries give a backend's replies the VIP back. A map of its own rather than a flag of
    /// the ports' entries: those are written from Port_Binding rows, which a restarted agent
    /// has before the flows that say a switch balances, so a flag would flap off meanwhile.
    LbSwitches = LB_SWITCHES: HashMap<u32, u32>[lb::MAX_LB_SWITCHES];
    /// Hash: [`LbVipKey`] → [`LbVip`]: each switch's VIPs.
    LbVips = LB_VIPS: HashMap<LbVipKey, LbVip>[lb::MAX_LB_VIPS];
    /// Hash: [`LbBackendKey`] (group, index) → [`LbBackend`]: the VIPs' backends.
    LbBackends = LB_BACKENDS: HashMap<LbBackendKey, LbBackend>[lb::MAX_LB_BACKENDS];
    /// LRU hash: [`LbNatKey`] → [`LbNat`]: the translations of balanced connections.
    LbConnections = LB_CONNECTIONS: LruHashMap<LbNatKey, LbNat>[lb::MAX_LB_CONNECTIONS];
    /// Hash: [`LbMemberKey`] (group, backend) → `u32` (its index): the groups' backends by
    /// address.
    LbMembers = LB_MEMBERS: HashMap<LbMemberKey, u32>[lb::MAX_LB_BACKENDS];
    /// Per-CPU array of `u64`, indexed by [`lb::counter`]: what the load-balancer stage did.
    LbCounters = LB_COUNTERS: PerCpuArray<u32, u64>[lb::counter::COUNT];
    /// LRU hash: [`LbAffinityKey`] → [`LbAffinity`]: clients' session affinities.
    LbAffinities = LB_AFFINITIES: LruHashMap<LbAffinityKey, LbAffinity>[lb::MAX_LB_AFFINITIES];
    /// Per-CPU array of one block of [`lb::LB_SCRATCH_BYTES`]: the delivery side's lookup key
    /// while it translates a reply (the delivery paths have little stack left). Holds nothing
    /// between frames.
    LbScratch = LB_SCRATCH: PerCpuArray<u32, [u8; lb::LB_SCRATCH_BYTES]>[1];
    /// Hash: a pod's network namespace cookie → [`SockLbClient`]: the pods whose sockets the
    /// socket-level balancer serves (written only with `--socket-lb`).
    SockLbClients = SOCK_LB_CLIENTS: HashMap<u64, SockLbClient>[lb::MAX_SOCK_LB_CLIENTS];
    /// LRU hash: [`SockLbReverseKey`] → [`SockLbReverse`]: the VIP each socket's backend stands
    /// for, kept by the kernel.
    SockLbReverseMap = SOCK_LB_REVERSE: LruHashMap<SockLbReverseKey, SockLbReverse>[lb::MAX_SOCK_LB_REVERSE];
    /// Per-CPU array of `u64`, indexed by [`lb::socket_counter`]: what the socket-level
    /// balancer did.
    SockLbCounters = SOCK_LB_COUNTERS: PerCpuArray<u32, u64>[lb::socket_counter::COUNT];
}
