//! The kernel's map statics, each derived from its one declaration in `ovnbpf_common::maps`
//! (name, key, value, capacity and kind), and the typed lookup every stage reads hash maps
//! through. Owns no behaviour; which stage reads or writes a map is said in that stage's module.

use aya_ebpf::{
    macros::map,
    maps::{
        Array, HashMap, LpmTrie, LruHashMap, PerCpuArray, PerCpuHashMap, ProgramArray, RingBuf,
    },
};
use ovnbpf_common::maps::{
    AclAddresses, AclGeneration, AclLogEvents, AclLogged, AclPacketScratch, AclPortSets, AclRules,
    AclSwitches, AclVerdictCache, AclVerdictScratch, AclVerdicts, ArpResponder, ChecksumScratch,
    Conntrack, ConntrackCounters, DropCounters, DropEvents, EcmpMembers, EcmpMembers6, FloodGroups,
    FloodMembers, FloodRolesMap, FloodScratch, GatewayEgressMap, GatewayInports, GatewayRedirects,
    InterfaceCountersMap, L2Fib, LbAddresses, LbAffinities, LbBackends, LbConnections, LbCounters,
    LbMembers, LbScratch, LbSwitches, LbVips, Localnets, MapDef, NatByExternal, NatByLogical,
    NdResponder, NeighbourEvents, Neighbours, Neighbours6, PodPorts, PoliciesByDestination,
    PoliciesBySource, PolicyPairs, PortSecurity6Map, PortSecurityMap, ProviderNetworks,
    RemoteEncaps, RouteTables, RouterAddresses, RouterAddresses6, RouterAdverts, RouterReplies,
    Routers, Routes, Routes6, SnatReverse, SnatRules, SnatSessions, SockLbClients, SockLbCounters,
    SockLbReverseMap, SourceRoutes, SourceRoutes6, Stages, SwitchRouters, TimeExceeded6,
    TunnelConfigMap, TunnelPorts, kind::MapKind, same_name,
};

/// `BPF_F_NO_PREALLOC`: a hash map's elements are allocated as they are inserted.
const NO_PREALLOC: u32 = aya_ebpf::bindings::BPF_F_NO_PREALLOC;

/// Declares the static `$name` of aya type `$kind` from the [`MapDef`] `$def`: aya's `#[map]`
/// names the map after the static, and the build fails unless that name and the kind are the
/// declaration's. `$value` overrides the value type with a kernel-private one of the same size.
macro_rules! kernel_map {
    ($name:ident: $kind:ident = $def:ty) => {
        kernel_map!($name: $kind = $def, <$def as MapDef>::Value);
    };
    ($name:ident: $kind:ident = $def:ty, $value:ty) => {
        const _: () = {
            assert!(same_name(stringify!($name), <$def as MapDef>::NAME));
            assert!(
                <<$def as MapDef>::Kind as MapKind>::ID
                    == <ovnbpf_common::maps::kind::$kind as MapKind>::ID
            );
            assert!(
                core::mem::size_of::<$value>() == core::mem::size_of::<<$def as MapDef>::Value>()
            );
        };
        kernel_map!(@static $name: $kind = $def, $value);
    };
    (@static $name:ident: PerCpuArray = $def:ty, $value:ty) => {
        #[map]
        pub(crate) static $name: PerCpuArray<$value> =
            PerCpuArray::with_max_entries(<$def as MapDef>::MAX_ENTRIES, 0);
    };
    (@static $name:ident: Array = $def:ty, $value:ty) => {
        #[map]
        pub(crate) static $name: Array<$value> =
            Array::with_max_entries(<$def as MapDef>::MAX_ENTRIES, 0);
    };
    (@static $name:ident: ProgramArray = $def:ty, $value:ty) => {
        #[map]
        pub(crate) static $name: ProgramArray =
            ProgramArray::with_max_entries(<$def as MapDef>::MAX_ENTRIES, 0);
    };
    (@static $name:ident: RingBuf = $def:ty, $value:ty) => {
        #[map]
        pub(crate) static $name: RingBuf = RingBuf::with_byte_size(<$def as MapDef>::MAX_ENTRIES, 0);
    };
    // Hash maps allocate their elements as they are inserted (`BPF_F_NO_PREALLOC`), not all of
    // `MAX_ENTRIES` at creation: preallocated, the agent's hash maps took ~300 MiB per node
    // whatever the node ran (`bench cni --one-node`). The kernel's lookups are the same either
    // way. LRU maps (connection tables) cannot be, and stay preallocated.
    (@static $name:ident: HashMap = $def:ty, $value:ty) => {
        #[map]
        pub(crate) static $name: HashMap<<$def as MapDef>::Key, $value> =
            HashMap::with_max_entries(<$def as MapDef>::MAX_ENTRIES, NO_PREALLOC);
    };
    (@static $name:ident: PerCpuHashMap = $def:ty, $value:ty) => {
        #[map]
        pub(crate) static $name: PerCpuHashMap<<$def as MapDef>::Key, $value> =
            PerCpuHashMap::with_max_entries(<$def as MapDef>::MAX_ENTRIES, NO_PREALLOC);
    };
    (@static $name:ident: $kind:ident = $def:ty, $value:ty) => {
        #[map]
        pub(crate) static $name: $kind<<$def as MapDef>::Key, $value> =
            $kind::with_max_entries(<$def as MapDef>::MAX_ENTRIES, 0);
    };
}

kernel_map!(INTERFACE_COUNTERS: PerCpuHashMap = InterfaceCountersMap);
kernel_map!(TUNNEL_CONFIG: Array = TunnelConfigMap);
kernel_map!(REMOTE_ENCAPS: HashMap = RemoteEncaps);
kernel_map!(CHECKSUM_SCRATCH: PerCpuArray = ChecksumScratch);
kernel_map!(TUNNEL_PORTS: HashMap = TunnelPorts);
kernel_map!(POD_PORTS: HashMap = PodPorts);
kernel_map!(L2_FIB: HashMap = L2Fib);
kernel_map!(PORT_SECURITY: HashMap = PortSecurityMap);
kernel_map!(PORT_SECURITY6: HashMap = PortSecurity6Map);
kernel_map!(ARP_RESPONDER: HashMap = ArpResponder);
kernel_map!(FLOOD_GROUPS: HashMap = FloodGroups);
kernel_map!(FLOOD_MEMBERS: HashMap = FloodMembers);
kernel_map!(FLOOD_SCRATCH: PerCpuArray = FloodScratch, crate::flood::FloodScratch);
kernel_map!(FLOOD_ROLES: HashMap = FloodRolesMap);
kernel_map!(ROUTES: LpmTrie = Routes);
kernel_map!(SOURCE_ROUTES: LpmTrie = SourceRoutes);
kernel_map!(ROUTES6: LpmTrie = Routes6);
kernel_map!(SOURCE_ROUTES6: LpmTrie = SourceRoutes6);
kernel_map!(TIME_EXCEEDED6: LpmTrie = TimeExceeded6);
kernel_map!(ROUTER_ADVERTS: HashMap = RouterAdverts);
kernel_map!(POLICIES_BY_DESTINATION: LpmTrie = PoliciesByDestination);
kernel_map!(POLICIES_BY_SOURCE: LpmTrie = PoliciesBySource);
kernel_map!(ECMP_MEMBERS: HashMap = EcmpMembers);
kernel_map!(ECMP_MEMBERS6: HashMap = EcmpMembers6);
kernel_map!(POLICY_PAIRS: HashMap = PolicyPairs);
kernel_map!(ROUTE_TABLES: HashMap = RouteTables);
kernel_map!(NEIGHBOURS: HashMap = Neighbours);
kernel_map!(NEIGHBOUR_EVENTS: RingBuf = NeighbourEvents);
kernel_map!(NAT_BY_LOGICAL: HashMap = NatByLogical);
kernel_map!(NAT_BY_EXTERNAL: HashMap = NatByExternal);
kernel_map!(GATEWAY_REDIRECTS: HashMap = GatewayRedirects);
kernel_map!(GATEWAY_INPORTS: HashMap = GatewayInports);
kernel_map!(GATEWAY_EGRESS: HashMap = GatewayEgressMap);
kernel_map!(SNAT_RULES: LpmTrie = SnatRules);
kernel_map!(SNAT_SESSIONS: LruHashMap = SnatSessions);
kernel_map!(SNAT_REVERSE: LruHashMap = SnatReverse);
kernel_map!(SWITCH_ROUTERS: HashMap = SwitchRouters);
kernel_map!(LOCALNETS: HashMap = Localnets);
kernel_map!(PROVIDER_NETWORKS: HashMap = ProviderNetworks);
kernel_map!(ROUTER_ADDRESSES: HashMap = RouterAddresses);
kernel_map!(ROUTERS: HashMap = Routers);
kernel_map!(DROP_EVENTS: RingBuf = DropEvents);
kernel_map!(DROP_COUNTERS: PerCpuArray = DropCounters);
kernel_map!(ROUTER_REPLIES: PerCpuArray = RouterReplies);
kernel_map!(STAGES: ProgramArray = Stages);
kernel_map!(ND_RESPONDER: HashMap = NdResponder);
kernel_map!(ROUTER_ADDRESSES6: HashMap = RouterAddresses6);
kernel_map!(NEIGHBOURS6: HashMap = Neighbours6);
kernel_map!(ACL_SWITCHES: HashMap = AclSwitches);
kernel_map!(ACL_RULES: HashMap = AclRules);
kernel_map!(ACL_ADDRESSES: LpmTrie = AclAddresses);
kernel_map!(ACL_PORT_SETS: HashMap = AclPortSets);
kernel_map!(CONNTRACK: LruHashMap = Conntrack);
kernel_map!(ACL_LOG_EVENTS: RingBuf = AclLogEvents);
kernel_map!(ACL_LOGGED: PerCpuArray = AclLogged);
kernel_map!(CONNTRACK_COUNTERS: PerCpuArray = ConntrackCounters);
kernel_map!(ACL_VERDICTS: LruHashMap = AclVerdicts);
kernel_map!(ACL_GENERATION: HashMap = AclGeneration);
kernel_map!(ACL_VERDICT_CACHE: PerCpuArray = AclVerdictCache);
kernel_map!(ACL_VERDICT_SCRATCH: PerCpuArray = AclVerdictScratch);
kernel_map!(ACL_PACKET_SCRATCH: PerCpuArray = AclPacketScratch, crate::acl::Packet);
kernel_map!(LB_ADDRESSES: HashMap = LbAddresses);
kernel_map!(LB_SWITCHES: HashMap = LbSwitches);
kernel_map!(LB_VIPS: HashMap = LbVips);
kernel_map!(LB_BACKENDS: HashMap = LbBackends);
kernel_map!(LB_CONNECTIONS: LruHashMap = LbConnections);
kernel_map!(LB_AFFINITIES: LruHashMap = LbAffinities);
kernel_map!(LB_MEMBERS: HashMap = LbMembers);
kernel_map!(LB_COUNTERS: PerCpuArray = LbCounters);
kernel_map!(LB_SCRATCH: PerCpuArray = LbScratch, crate::lb::Scratch);
kernel_map!(SOCK_LB_CLIENTS: HashMap = SockLbClients);
kernel_map!(SOCK_LB_REVERSE: LruHashMap = SockLbReverseMap);
kernel_map!(SOCK_LB_COUNTERS: PerCpuArray = SockLbCounters);

/// The value of `key` in hash map `map`, if present.
#[inline(always)]
pub(crate) fn get<K, V>(
    map: &'static HashMap<K, V>,
    key: impl core::borrow::Borrow<K>,
) -> Option<&'static V> {
    // SAFETY: hash map values are RCU-protected while the program runs, so the reference stays
    // valid until it returns; the agent may overwrite the value meanwhile (a torn read of a
    // plain-data value at worst, never a dangling one), which every caller tolerates.
    unsafe { map.get(key) }
}
