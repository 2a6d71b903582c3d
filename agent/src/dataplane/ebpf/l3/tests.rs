use super::*;

use crate::pipeline::ir::Unforwardable;

use crate::dataplane::ebpf::maps::Recorder;
use ovnbpf_common::maps::{Neighbours, RouterAddresses, Routers, Routes, SourceRoutes};
use ovnbpf_common::{Neighbour, NeighbourKey};

/// Views of the recorded L3 maps keyed as the assertions read them.
impl Recorder {
    fn routes(&self) -> HashMap<(u32, u32, u8), RouteEntry> {
        self.table_by::<Routes, _>(|(k, bits)| (k.datapath, k.ip, (bits - 32) as u8))
    }
    fn source_routes(&self) -> HashMap<(u32, u32, u8), RouteEntry> {
        self.table_by::<SourceRoutes, _>(|(k, bits)| (k.datapath, k.ip, (bits - 32) as u8))
    }
    fn neighbours(&self) -> HashMap<(u32, u32), Neighbour> {
        self.table_by::<Neighbours, _>(|k| (k.datapath, k.ip))
    }
    fn routers(&self) -> HashMap<u32, RouterInfo> {
        self.table::<Routers>()
    }
    fn addresses(&self) -> HashMap<(u32, u32), RouterAddress> {
        self.table_by::<RouterAddresses, _>(|k| (k.datapath, k.ip))
    }
}

const ROUTER: u32 = 10;
const PEER_ROUTER: u32 = 11;
const SWITCH_A: u32 = 1;
const SWITCH_B: u32 = 2;
const MAC_A: Mac = [0x0a, 0x58, 0, 0, 0, 0xa];
const MAC_B: Mac = [0x0a, 0x58, 0, 0, 0, 0xb];

fn datapath(datapath: u32, router: bool) -> IrEntry {
    IrEntry::Datapath {
        datapath,
        name: format!("dp{datapath}"),
        router,
    }
}

fn patch(datapath: u32, key: u32, name: &str, peer: &str) -> IrEntry {
    // Router ports carry "MAC CIDR"; switch ports "router".
    let address = match name {
        "peer-lr" => "0a:58:00:00:00:99 10.0.255.2/30",
        _ => "router",
    };
    IrEntry::Port {
        datapath,
        key,
        name: name.into(),
        kind: PortKind::Patch { peer: peer.into() },
        // As the compiler types them: "router" is a keyword, no address.
        addresses: address.parse().ok().into_iter().collect(),
        port_security: Vec::new(),
    }
}

fn prefix(text: &str) -> Prefix {
    let (network, length) = text.split_once('/').unwrap();
    Prefix {
        network: network.parse().unwrap(),
        length: length.parse().unwrap(),
    }
}

fn route(
    datapath: u32,
    to: &str,
    priority: u16,
    nexthop: Option<&str>,
    mac: Mac,
    port: &str,
) -> IrEntry {
    IrEntry::Route {
        datapath,
        selector: RouteSelector::Destination,
        prefix: prefix(to),
        priority,
        route_table: None,
        nexthop: nexthop.map(|n| n.parse().unwrap()),
        source_ip: Ipv4Addr::UNSPECIFIED,
        source_mac: mac,
        port: port.into(),
    }
}

/// A `src-ip` route: packets from `from` go to `nexthop` out of `port`.
fn source_route(datapath: u32, from: &str, nexthop: &str, mac: Mac, port: &str) -> IrEntry {
    let from = prefix(from);
    IrEntry::Route {
        datapath,
        selector: RouteSelector::Source,
        prefix: from,
        priority: u16::from(from.length) * 3,
        route_table: None,
        nexthop: Some(nexthop.parse().unwrap()),
        source_ip: Ipv4Addr::UNSPECIFIED,
        source_mac: mac,
        port: port.into(),
    }
}

fn key(datapath: u32, to: &str) -> (u32, u32, u8) {
    let p = prefix(to);
    let (k, _) = route_slot(datapath, p);
    (k.datapath, k.ip, p.length)
}

/// A VPC router with two subnets, a peer router, and a static route via a pod.
fn vpc() -> Vec<IrEntry> {
    vec![
        datapath(ROUTER, true),
        datapath(PEER_ROUTER, true),
        datapath(SWITCH_A, false),
        datapath(SWITCH_B, false),
        patch(ROUTER, 1, "lr-a", "a-lr"),
        patch(SWITCH_A, 5, "a-lr", "lr-a"),
        patch(ROUTER, 2, "lr-b", "b-lr"),
        patch(SWITCH_B, 6, "b-lr", "lr-b"),
        patch(ROUTER, 3, "lr-peer", "peer-lr"),
        patch(PEER_ROUTER, 1, "peer-lr", "lr-peer"),
        route(ROUTER, "10.0.1.0/24", 74, None, MAC_A, "lr-a"),
        route(ROUTER, "10.0.2.0/24", 74, None, MAC_B, "lr-b"),
        route(
            ROUTER,
            "10.1.0.0/16",
            49,
            Some("10.0.255.2"),
            MAC_A,
            "lr-peer",
        ),
        // A static route for a prefix connected routes also cover: the longer prefix wins by
        // the trie; for the same prefix, the higher priority.
        route(ROUTER, "10.0.2.0/24", 73, Some("10.0.1.9"), MAC_A, "lr-a"),
        IrEntry::Neighbour {
            datapath: ROUTER,
            port: "lr-b".into(),
            ip: "10.0.2.5".parse().unwrap(),
            mac: [0x0a, 0x58, 0, 0, 2, 5],
        },
    ]
}

fn diff(added: Vec<IrEntry>) -> IrDiff {
    IrDiff {
        added,
        removed: Vec::new(),
    }
}

#[test]
fn routes_resolve_their_output_port_to_the_datapath_behind_it() {
    let mut state = L3State::default();
    state.apply(&diff(vpc()));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let to_b = maps.routes()[&key(ROUTER, "10.0.2.0/24")];
    assert_eq!(
        (
            to_b.kind,
            to_b.next_datapath,
            to_b.ingress_port,
            to_b.nexthop,
            to_b.source_mac
        ),
        (ROUTE_TO_SWITCH, SWITCH_B, 6, 0, MAC_B),
        "the connected route (priority 74) beats the static one (73)"
    );
    let to_peer = maps.routes()[&key(ROUTER, "10.1.0.0/16")];
    assert_eq!(
        (to_peer.kind, to_peer.next_datapath, to_peer.nexthop),
        (
            ROUTE_TO_ROUTER,
            PEER_ROUTER,
            u32::from_ne_bytes([10, 0, 255, 2])
        )
    );
    assert_eq!(
        to_peer.ingress_ip,
        u32::from_ne_bytes([10, 0, 255, 2]),
        "the peer router's port address: the source of its ICMP errors"
    );
    assert_eq!(maps.routers()[&ROUTER].flags, ROUTER_FORWARDS);
    assert_eq!(maps.neighbours().len(), 1);

    // The connected route goes away: the static one takes over the prefix, one write.
    maps.reset_writes();
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![route(ROUTER, "10.0.2.0/24", 74, None, MAC_B, "lr-b")],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 1);
    let to_b = maps.routes()[&key(ROUTER, "10.0.2.0/24")];
    assert_eq!(
        (to_b.next_datapath, to_b.nexthop),
        (SWITCH_A, u32::from_ne_bytes([10, 0, 1, 9]))
    );
}

/// Policies on both a source and a destination prefix go to the router's pair list, highest
/// priority first, masks in network order; more than the kernel scans keep the router out.
#[test]
fn two_prefix_policies_go_to_the_pair_list_and_too_many_keep_the_router_out() {
    use ovnbpf_common::{MAX_PAIR_POLICIES, POLICY_DROP, PairPolicyKey, maps::PolicyPairs};
    let pair = |priority: u16, third: u8| IrEntry::RouterPolicy {
        datapath: ROUTER,
        priority,
        source: Some(prefix(&format!("10.0.{third}.0/24"))),
        destination: Some(prefix("10.0.2.7/32")),
        l4: None,
        verdict: crate::pipeline::ir::PolicyVerdict::Drop,
    };
    let mut state = L3State::default();
    let mut entries = vpc();
    entries.extend([pair(1000, 1), pair(2000, 3)]);
    state.apply(&diff(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let info = maps.routers()[&ROUTER];
    assert_eq!(info.pair_policies, 2);
    assert_ne!(info.flags & ovnbpf_common::ROUTER_POLICIES, 0);
    let pairs = maps.table_by::<PolicyPairs, _>(|k: PairPolicyKey| (k.router, k.index));
    let first = pairs[&(ROUTER, 0)];
    assert_eq!(
        (first.policy.priority, first.policy.verdict),
        (2000, POLICY_DROP),
        "the higher priority first"
    );
    assert_eq!(
        (first.source, first.source_mask),
        (
            u32::from_ne_bytes([10, 0, 3, 0]),
            u32::from_ne_bytes([255, 255, 255, 0])
        )
    );
    assert_eq!(
        (first.destination, first.destination_mask),
        (u32::from_ne_bytes([10, 0, 2, 7]), u32::MAX)
    );
    assert_eq!(pairs[&(ROUTER, 1)].policy.priority, 1000);
    // One more than the kernel scans: the router goes, and comes back with one fewer.
    let many: Vec<IrEntry> = (0..MAX_PAIR_POLICIES as u8 - 1)
        .map(|i| pair(100 + u16::from(i), 10 + i))
        .collect();
    state.apply(&diff(many));
    state.flush(&mut maps).unwrap();
    assert!(!maps.routers().contains_key(&ROUTER), "17 pairs");
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![pair(1000, 1)],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.routers()[&ROUTER].pair_policies, MAX_PAIR_POLICIES);
}

#[test]
fn routers_with_unsupported_flows_are_not_forwarded() {
    let mut state = L3State::default();
    let mut entries = vpc();
    entries.push(IrEntry::Unsupported {
        datapath: PEER_ROUTER,
        stage: "lr_out_snat".into(),
        reason: "NAT".into(),
    });
    state.apply(&diff(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    assert!(maps.routers().contains_key(&ROUTER));
    assert!(
        maps.routers().contains_key(&PEER_ROUTER),
        "an unsupported flow the compiler did not make NotForwardable does not"
    );

    state.apply(&diff(vec![IrEntry::NotForwardable {
        datapath: PEER_ROUTER,
        reason: Unforwardable::UnsupportedFlow {
            stage: "lr_in_unsnat".into(),
            reason: "NAT".into(),
        },
    }]));
    state.flush(&mut maps).unwrap();
    assert_eq!(state.blocked(PEER_ROUTER).len(), 1);
    assert!(maps.routers().contains_key(&ROUTER));
    assert!(!maps.routers().contains_key(&PEER_ROUTER));

    // Routing onto an underlay switch (U2O), reported by the compiler, keeps it out too.
    let u2o = IrEntry::NotForwardable {
        datapath: ROUTER,
        reason: Unforwardable::UnderlayRouting {
            switch: "underlay".into(),
            localnet: "ln-underlay".into(),
        },
    };
    state.apply(&diff(vec![u2o.clone()]));
    state.flush(&mut maps).unwrap();
    assert!(!maps.routers().contains_key(&ROUTER));
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![u2o],
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.routers().contains_key(&ROUTER));
}

#[test]
fn learned_neighbours_count_only_where_the_router_looks_them_up() {
    let mut state = L3State::default();
    let learned = IrEntry::LearnedNeighbour {
        datapath: ROUTER,
        port: "lr-a".into(),
        ip: "10.0.1.9".parse().unwrap(),
        mac: [2, 0, 0, 0, 0, 9],
    };
    state.apply(&diff(vec![learned]));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    assert!(maps.neighbours().is_empty());
    state.apply(&diff(vec![IrEntry::NeighbourLookup { datapath: ROUTER }]));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.neighbours().len(), 1);
    assert_eq!(state.sweep(&mut maps).unwrap(), 0);
    maps.table_mut::<Neighbours>().insert(
        NeighbourKey {
            datapath: ROUTER,
            ip: 1,
        },
        Neighbour::default(),
    );
    assert_eq!(state.sweep(&mut maps).unwrap(), 1, "a stale key is swept");
}

#[test]
fn a_routers_own_addresses_are_known_with_their_ping_answers() {
    let mut state = L3State::default();
    let gateway: Ipv4Addr = "10.0.2.1".parse().unwrap();
    let arp = IrEntry::RouterArpReply {
        datapath: ROUTER,
        port: "lr-b".into(),
        ip: gateway,
        subnet: prefix("10.0.2.0/24"),
    };
    let echo = IrEntry::RouterEchoReply {
        datapath: ROUTER,
        ip: gateway,
    };
    state.apply(&diff(vec![arp.clone(), echo.clone()]));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let key = (ROUTER, u32::from_ne_bytes(gateway.octets()));
    assert_eq!(maps.addresses()[&key].flags, ROUTER_ADDRESS_ECHO);
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![echo],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.addresses()[&key].flags,
        0,
        "still the router's, no pings"
    );
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![arp],
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.addresses().is_empty());
}

#[test]
fn a_routers_reject_answers_become_address_flags() {
    let mut state = L3State::default();
    let gateway: Ipv4Addr = "10.0.2.1".parse().unwrap();
    let reject = |protocol, response| IrEntry::RouterReject {
        datapath: ROUTER,
        ip: gateway,
        protocol,
        response,
    };
    // What northd emits per router address: TCP reset, UDP port unreachable, SCTP abort and
    // protocol unreachable for the rest.
    let tcp = reject(Some(RejectProtocol::Tcp), RejectResponse::TcpReset);
    let udp = reject(
        Some(RejectProtocol::Udp),
        RejectResponse::IcmpUnreachable { code: 3 },
    );
    let sctp = reject(Some(RejectProtocol::Sctp), RejectResponse::SctpAbort);
    let other = reject(None, RejectResponse::IcmpUnreachable { code: 2 });
    state.apply(&diff(vec![
        tcp.clone(),
        udp.clone(),
        sctp.clone(),
        other.clone(),
    ]));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let key = (ROUTER, u32::from_ne_bytes(gateway.octets()));
    assert_eq!(
        maps.addresses()[&key].flags,
        ROUTER_ADDRESS_TCP_RESET
            | ROUTER_ADDRESS_PORT_UNREACHABLE
            | ROUTER_ADDRESS_PROTOCOL_UNREACHABLE,
        "SCTP abort is not built by the kernel: no flag"
    );
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![udp],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.addresses()[&key].flags,
        ROUTER_ADDRESS_TCP_RESET | ROUTER_ADDRESS_PROTOCOL_UNREACHABLE
    );
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![tcp, sctp, other],
    });
    state.flush(&mut maps).unwrap();
    assert!(
        maps.addresses().is_empty(),
        "no answer left: not an address"
    );
}

/// The compiler decides what kind a gap is; the backend obeys: a side duty the datapath does
/// not do (MAC learning in the neighbour stages) leaves the router forwarded, a neighbour flow
/// that cannot be forwarded correctly keeps it out.
#[test]
fn side_duties_do_not_block_a_router_unsupported_neighbour_flows_do() {
    let mut state = L3State::default();
    let mut entries = vpc();
    for stage in ["lr_in_lookup_neighbor", "lr_in_learn_neighbor"] {
        entries.push(IrEntry::SideDutyNotDone {
            datapath: ROUTER,
            stage: stage.into(),
            duty: crate::pipeline::ir::MAC_LEARNING_NOT_DONE.into(),
        });
    }
    state.apply(&diff(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    assert!(
        maps.routers().contains_key(&ROUTER),
        "{:?}",
        state.blocked(ROUTER)
    );
    assert!(state.blocked(ROUTER).is_empty());

    let unsupported = IrEntry::NotForwardable {
        datapath: ROUTER,
        reason: Unforwardable::UnsupportedFlow {
            stage: "lr_in_learn_neighbor".into(),
            reason: "neighbour learning variant".into(),
        },
    };
    state.apply(&diff(vec![unsupported.clone()]));
    state.flush(&mut maps).unwrap();
    assert!(!maps.routers().contains_key(&ROUTER));
    assert_eq!(state.blocked(ROUTER).len(), 1);
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![unsupported],
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.routers().contains_key(&ROUTER));
}

#[test]
fn an_unsupported_ipv6_flow_keeps_only_the_routers_ipv6_out() {
    use ovnbpf_common::ROUTER_IPV6_UNSUPPORTED;
    let mut state = L3State::default();
    state.apply(&diff(vpc()));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.routers()[&ROUTER].flags & ROUTER_IPV6_UNSUPPORTED, 0);
    let ipv6_only = IrEntry::NotForwardable {
        datapath: ROUTER,
        reason: Unforwardable::UnsupportedIpv6Flow {
            stage: "lr_in_policy".into(),
            reason: "router policy match".into(),
        },
    };
    state.apply(&diff(vec![ipv6_only.clone()]));
    state.flush(&mut maps).unwrap();
    let info = maps.routers()[&ROUTER];
    assert_eq!(
        info.flags & (ROUTER_FORWARDS | ROUTER_IPV6_UNSUPPORTED),
        ROUTER_FORWARDS | ROUTER_IPV6_UNSUPPORTED,
        "IPv4 still forwarded, IPv6 not"
    );
    assert_eq!(
        state.blocked(ROUTER),
        ["lr_in_policy: router policy match (IPv6 only)"]
    );
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![ipv6_only],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.routers()[&ROUTER].flags & ROUTER_IPV6_UNSUPPORTED, 0);
    assert!(state.blocked(ROUTER).is_empty());
}

/// Kube-OVN gives every VPC router an allow policy per subnet (`ip4.dst == <cidr>`, priority
/// 31000): allow keeps the routing decision, so a router with only such policies is forwarded;
/// a drop or reroute policy beside them still keeps it out.
/// Kube-OVN's default-VPC shape: allow per subnet (31000, by destination), reroute per node
/// (30000, by destination: a /32 inside nothing), reroute per subnet source (29000).
#[test]
fn policies_reach_their_tries_with_the_best_policy_at_or_above_each_prefix() {
    use crate::pipeline::ir::PolicyVerdict;
    use ovnbpf_common::{
        POLICY_ALLOW, POLICY_DROP, POLICY_REROUTE, ROUTER_POLICIES,
        maps::{PoliciesByDestination, PoliciesBySource},
    };
    let mut state = L3State::default();
    let mut entries = vpc();
    let policy = |priority, source: Option<&str>, destination: Option<&str>, verdict| {
        IrEntry::RouterPolicy {
            datapath: ROUTER,
            priority,
            source: source.map(prefix),
            destination: destination.map(prefix),
            l4: None,
            verdict,
        }
    };
    let via_peer = PolicyVerdict::Reroute {
        nexthop: Ipv4Addr::new(10, 0, 255, 2),
        source_ip: Ipv4Addr::new(10, 0, 255, 1),
        source_mac: MAC_A,
        port: "lr-peer".into(),
    };
    entries.extend([
        policy(31000, None, Some("10.0.0.0/16"), PolicyVerdict::Allow),
        policy(30000, None, Some("10.0.2.7/32"), via_peer.clone()),
        policy(29000, Some("10.0.1.0/24"), None, via_peer.clone()),
    ]);
    state.apply(&diff(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.routers()[&ROUTER].flags & ROUTER_POLICIES,
        ROUTER_POLICIES,
        "{:?}",
        state.blocked(ROUTER)
    );
    let by_destination = maps.table_by::<PoliciesByDestination, _>(|(key, length)| {
        (u32::from_be(key.datapath), key.ip, length)
    });
    let slot = |text: &str| {
        let (key, length) = route_slot(ROUTER, prefix(text));
        (ROUTER, key.ip, length)
    };
    // The node /32 lies inside the allowed /16, whose allow (31000) outranks its reroute.
    assert_eq!(by_destination[&slot("10.0.0.0/16")].verdict, POLICY_ALLOW);
    let node = by_destination[&slot("10.0.2.7/32")];
    assert_eq!((node.priority, node.verdict), (31000, POLICY_ALLOW));
    let by_source = maps.table_by::<PoliciesBySource, _>(|(key, length)| {
        (u32::from_be(key.datapath), key.ip, length)
    });
    let subnet = by_source[&slot("10.0.1.0/24")];
    assert_eq!((subnet.priority, subnet.verdict), (29000, POLICY_REROUTE));
    // The reroute resolves through its port like a route: to the peer router.
    assert_eq!(
        (subnet.route.kind, subnet.route.next_datapath),
        (ROUTE_TO_ROUTER, PEER_ROUTER)
    );
    assert_eq!(subnet.route.nexthop, u32::from_ne_bytes([10, 0, 255, 2]));

    // A drop above the allow, at the /32: only that slot changes.
    maps.reset_writes();
    let drop = policy(32000, None, Some("10.0.2.7/32"), PolicyVerdict::Drop);
    state.apply(&diff(vec![drop.clone()]));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 1);
    let by_destination = maps.table_by::<PoliciesByDestination, _>(|(key, length)| {
        (u32::from_be(key.datapath), key.ip, length)
    });
    assert_eq!(by_destination[&slot("10.0.2.7/32")].verdict, POLICY_DROP);
    assert_eq!(by_destination[&slot("10.0.0.0/16")].verdict, POLICY_ALLOW);
    // The allow gone, the /32's own reroute shows through; the /16 slot goes.
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![
            drop,
            policy(31000, None, Some("10.0.0.0/16"), PolicyVerdict::Allow),
        ],
    });
    state.flush(&mut maps).unwrap();
    let by_destination = maps.table_by::<PoliciesByDestination, _>(|(key, length)| {
        (u32::from_be(key.datapath), key.ip, length)
    });
    assert!(!by_destination.contains_key(&slot("10.0.0.0/16")));
    let node = by_destination[&slot("10.0.2.7/32")];
    assert_eq!((node.priority, node.verdict), (30000, POLICY_REROUTE));
}

#[test]
fn source_routes_go_to_their_own_map_with_ovns_priority_and_flag_their_router() {
    let mut state = L3State::default();
    state.apply(&diff(vpc()));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.routers()[&ROUTER].flags,
        ROUTER_FORWARDS,
        "no source lookup for a router without source routes"
    );
    let to_a = maps.routes()[&key(ROUTER, "10.0.1.0/24")];
    assert_eq!(
        to_a.priority, 74,
        "destination routes carry their priority too"
    );

    // Kube-OVN's per-subnet route: packets from subnet b go to b's own gateway.
    let from_b = source_route(ROUTER, "10.0.2.0/24", "10.0.2.1", MAC_B, "lr-b");
    maps.reset_writes();
    state.apply(&diff(vec![from_b.clone()]));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 2, "the source route and the router's flags");
    let entry = maps.source_routes()[&key(ROUTER, "10.0.2.0/24")];
    assert_eq!(
        (
            entry.priority,
            entry.kind,
            entry.next_datapath,
            entry.ingress_port
        ),
        (72, ROUTE_TO_SWITCH, SWITCH_B, 6)
    );
    assert_eq!(entry.nexthop, u32::from_ne_bytes([10, 0, 2, 1]));
    assert_eq!(
        maps.routes()[&key(ROUTER, "10.0.2.0/24")].next_datapath,
        SWITCH_B,
        "the destination route of the same prefix is untouched"
    );
    assert_eq!(
        maps.routers()[&ROUTER].flags,
        ROUTER_FORWARDS | ROUTER_SOURCE_ROUTES
    );

    // A second source prefix changes only its own slot; removing both clears the flag.
    let from_a = source_route(ROUTER, "10.0.1.0/24", "10.0.1.1", MAC_A, "lr-a");
    maps.reset_writes();
    state.apply(&diff(vec![from_a.clone()]));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 1);
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![from_a],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.routers()[&ROUTER].flags,
        ROUTER_FORWARDS | ROUTER_SOURCE_ROUTES,
        "b's source route is still there"
    );
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![from_b],
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.source_routes().is_empty());
    assert_eq!(maps.routers()[&ROUTER].flags, ROUTER_FORWARDS);
}

#[test]
fn routers_that_arp_for_next_hops_are_flagged_and_their_switch_routes_carry_the_port_address() {
    let mut state = L3State::default();
    let mut entries = vpc();
    let to_a = IrEntry::Route {
        datapath: ROUTER,
        selector: RouteSelector::Destination,
        prefix: prefix("10.0.1.0/24"),
        priority: 74,
        route_table: None,
        nexthop: None,
        source_ip: "10.0.1.1".parse().unwrap(),
        source_mac: MAC_A,
        port: "lr-a".into(),
    };
    entries.retain(|e| !matches!(e, IrEntry::Route { prefix: p, priority: 74, .. } if *p == prefix("10.0.1.0/24")));
    entries.push(to_a);
    state.apply(&diff(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.routers()[&ROUTER].flags, ROUTER_FORWARDS);
    // The router's ARP request for an unresolved next hop comes from the output port's address.
    let to_a = maps.routes()[&key(ROUTER, "10.0.1.0/24")];
    assert_eq!(
        (to_a.kind, to_a.ingress_ip),
        (ROUTE_TO_SWITCH, u32::from_ne_bytes([10, 0, 1, 1]))
    );
    let asks = IrEntry::ArpRequestForNextHop { datapath: ROUTER };
    state.apply(&diff(vec![asks.clone()]));
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.routers()[&ROUTER].flags,
        ROUTER_FORWARDS | ROUTER_ARP_REQUESTS
    );
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![asks],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.routers()[&ROUTER].flags, ROUTER_FORWARDS);
}

#[test]
fn ipv6_addresses_neighbours_and_link_local_routes_reach_their_maps_and_flags() {
    use ovnbpf_common::{
        Ipv6Key, ROUTER_ADDRESS_PORT_UNREACHABLE, ROUTER_IPV6_LINK_LOCAL, ROUTER_ND_REQUESTS,
        maps::{Neighbours6, RouterAddresses6},
    };
    use std::net::Ipv6Addr;
    let mut state = L3State::default();
    let own: Ipv6Addr = "fe80::858:aff:fe00:101".parse().unwrap();
    let pod: Ipv6Addr = "fe80::858:aff:fe00:102".parse().unwrap();
    let link_local_route = IrEntry::Route6 {
        selector: RouteSelector::Destination,
        datapath: ROUTER,
        prefix: crate::pipeline::ir::Prefix6 {
            network: "fe80::".parse().unwrap(),
            length: 64,
        },
        priority: 194,
        inport: Some("lr-a".into()),
        route_table: None,
        nexthop: None,
        source_ip: own,
        source_mac: MAC_A,
        port: "lr-a".into(),
    };
    let mut entries = vpc();
    entries.extend([
        IrEntry::RouterEchoReply6 {
            datapath: ROUTER,
            ip: own,
        },
        IrEntry::RouterReject6 {
            datapath: ROUTER,
            ip: own,
            protocol: Some(RejectProtocol::Udp),
            response: RejectResponse::IcmpUnreachable { code: 4 },
        },
        IrEntry::Neighbour6 {
            datapath: ROUTER,
            port: "lr-a".into(),
            ip: pod,
            mac: MAC_A,
        },
        IrEntry::NsForNextHop { datapath: ROUTER },
        link_local_route.clone(),
    ]);
    state.apply(&diff(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let key = |ip: Ipv6Addr| Ipv6Key {
        datapath: ROUTER,
        ip: ip.octets(),
    };
    assert_eq!(
        maps.table::<RouterAddresses6>()[&key(own)].flags,
        ROUTER_ADDRESS_ECHO | ROUTER_ADDRESS_PORT_UNREACHABLE
    );
    assert_eq!(maps.table::<Neighbours6>()[&key(pod)].mac, MAC_A);
    assert_eq!(
        maps.routers()[&ROUTER].flags,
        ROUTER_FORWARDS | ROUTER_ND_REQUESTS | ROUTER_IPV6_LINK_LOCAL
    );
    // IPv4 keeps its own maps: the IPv6 neighbour is not among them.
    assert!(maps.neighbours().values().all(|n| n.mac != MAC_A));
    // The link-local route gone, the flag goes; its address answers stay.
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![link_local_route],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.routers()[&ROUTER].flags,
        ROUTER_FORWARDS | ROUTER_ND_REQUESTS
    );
    assert!(maps.table::<RouterAddresses6>().contains_key(&key(own)));
}

/// An ECMP route stores its group and member count; each index of the group's `select` list
/// gets its member's route, resolved like any other; a member without a flow has no entry, and
/// a member moving changes only its own index.
#[test]
fn ecmp_routes_and_reroutes_store_their_group_and_each_member_its_route() {
    use ovnbpf_common::{EcmpKey, ROUTE_ECMP, maps::EcmpMembers};

    let member = |stage, member: u16, nexthop: [u8; 4], port: &str, mac| IrEntry::EcmpMember {
        datapath: ROUTER,
        stage,
        group: 1,
        member,
        nexthop: Ipv4Addr::from(nexthop),
        source_ip: Ipv4Addr::new(10, 0, 1, 1),
        source_mac: mac,
        port: port.into(),
    };
    let mut entries = vpc();
    entries.extend([
        IrEntry::EcmpRoute {
            datapath: ROUTER,
            selector: RouteSelector::Destination,
            prefix: prefix("198.51.100.0/24"),
            priority: 73,
            route_table: None,
            group: 1,
            members: vec![1, 2],
        },
        member(EcmpStage::Route, 1, [10, 0, 1, 11], "lr-a", MAC_A),
        member(EcmpStage::Route, 2, [10, 0, 2, 12], "lr-b", MAC_B),
        IrEntry::RouterPolicy {
            datapath: ROUTER,
            priority: 29000,
            source: Some(prefix("10.0.1.0/24")),
            destination: None,
            l4: None,
            verdict: PolicyVerdict::RerouteEcmp {
                group: 1,
                members: vec![1, 2, 3],
            },
        },
        member(EcmpStage::Policy, 3, [10, 0, 2, 13], "lr-b", MAC_B),
    ]);
    let mut state = L3State::default();
    state.apply(&diff(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let route = maps.routes()[&key(ROUTER, "198.51.100.0/24")];
    assert_eq!(
        (
            route.kind,
            route.nexthop,
            route.ingress_port,
            route.priority
        ),
        (ROUTE_ECMP, ovnbpf_common::ecmp::ROUTE_GROUPS | 1, 2, 73)
    );
    let members = maps.table_by::<EcmpMembers, _>(|k: EcmpKey| (k.datapath, k.group, k.index));
    let route_group = ovnbpf_common::ecmp::ROUTE_GROUPS | 1;
    let policy_group = ovnbpf_common::ecmp::POLICY_GROUPS | 1;
    let hop = |index| {
        members
            .get(&(ROUTER, route_group, index))
            .map(|m| (m.kind, m.next_datapath, m.nexthop))
    };
    assert_eq!(
        hop(0),
        Some((
            ROUTE_TO_SWITCH,
            SWITCH_A,
            u32::from_ne_bytes([10, 0, 1, 11])
        ))
    );
    assert_eq!(
        hop(1),
        Some((
            ROUTE_TO_SWITCH,
            SWITCH_B,
            u32::from_ne_bytes([10, 0, 2, 12])
        ))
    );
    // The policy's group is numbered apart; members 1 and 2 have no flow of its stage: only
    // index 2 (member 3) is there, the kernel drops flows the others would take.
    assert_eq!(
        members
            .keys()
            .filter(|(_, group, _)| *group == policy_group)
            .map(|(_, _, index)| *index)
            .collect::<Vec<_>>(),
        [2]
    );
    // A member moves: its index alone is written.
    maps.reset_writes();
    state.apply(&IrDiff {
        added: vec![member(EcmpStage::Route, 2, [10, 0, 2, 14], "lr-b", MAC_B)],
        removed: vec![member(EcmpStage::Route, 2, [10, 0, 2, 12], "lr-b", MAC_B)],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 1);
    let members = maps.table_by::<EcmpMembers, _>(|k: EcmpKey| (k.datapath, k.group, k.index));
    assert_eq!(
        members[&(ROUTER, route_group, 1)].nexthop,
        u32::from_ne_bytes([10, 0, 2, 14])
    );
}

/// A port selecting a route table: the kernel learns the table by the port's address, and the
/// routes of that table, plus those of no table, are stored under the table's key; the main
/// table keeps its own static routes.
#[test]
fn route_tables_key_their_routes_apart_and_routes_of_no_table_count_in_each() {
    use ovnbpf_common::{ROUTER_ROUTE_TABLES, maps::RouteTables, route_key_datapath};

    let mut entries = vpc();
    // lr-b with its address (the kernel finds the table by it).
    entries.retain(|e| !matches!(e, IrEntry::Port { name, .. } if name == "lr-b"));
    entries.push(IrEntry::Port {
        datapath: ROUTER,
        key: 2,
        name: "lr-b".into(),
        kind: PortKind::Patch {
            peer: "b-lr".into(),
        },
        addresses: "0a:58:00:00:00:0b 10.0.2.1/24"
            .parse()
            .ok()
            .into_iter()
            .collect(),
        port_security: Vec::new(),
    });
    let route_to = |to: &str, table: Option<u32>, nexthop: &str| IrEntry::Route {
        datapath: ROUTER,
        selector: RouteSelector::Destination,
        prefix: prefix(to),
        priority: 49,
        route_table: table,
        nexthop: Some(nexthop.parse().unwrap()),
        source_ip: Ipv4Addr::new(10, 0, 1, 1),
        source_mac: MAC_A,
        port: "lr-a".into(),
    };
    entries.extend([
        route_to("10.8.0.0/16", Some(0), "10.0.1.20"),
        route_to("10.9.0.0/16", Some(0), "10.0.1.20"),
        route_to("10.9.0.0/16", Some(1), "10.0.1.30"),
        IrEntry::RouteTableOfPort {
            datapath: ROUTER,
            port: "lr-b".into(),
            table: 1,
        },
    ]);
    let mut state = L3State::default();
    state.apply(&diff(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    assert_ne!(maps.routers()[&ROUTER].flags & ROUTER_ROUTE_TABLES, 0);
    let tables = maps.table_by::<RouteTables, _>(|k: NeighbourKey| (k.datapath, k.ip));
    assert_eq!(
        tables.get(&(ROUTER, u32::from_ne_bytes([10, 0, 2, 1]))),
        Some(&1)
    );
    let table1 = route_key_datapath(ROUTER, 1);
    let nexthop = |datapath, to| maps.routes().get(&key(datapath, to)).map(|r| r.nexthop);
    assert_eq!(
        nexthop(ROUTER, "10.9.0.0/16"),
        Some(u32::from_ne_bytes([10, 0, 1, 20]))
    );
    assert_eq!(
        nexthop(table1, "10.9.0.0/16"),
        Some(u32::from_ne_bytes([10, 0, 1, 30]))
    );
    // The routes of no table (northd's connected routes) are in table 1 too; a main-table
    // static route (`reg7 == 0`) only in the main table.
    assert_eq!(nexthop(table1, "10.0.1.0/24"), Some(0));
    assert_eq!(
        nexthop(ROUTER, "10.8.0.0/16"),
        Some(u32::from_ne_bytes([10, 0, 1, 20]))
    );
    assert_eq!(nexthop(table1, "10.8.0.0/16"), None);
    // The port leaves the table: table 1's copies go.
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![IrEntry::RouteTableOfPort {
            datapath: ROUTER,
            port: "lr-b".into(),
            table: 1,
        }],
    });
    state.flush(&mut maps).unwrap();
    let main = key(ROUTER, "10.0.1.0/24").0;
    assert!(
        maps.routes().keys().all(|(datapath, ..)| *datapath == main),
        "{:?}",
        maps.routes().keys()
    );
    assert!(maps.table::<RouteTables>().is_empty());
}

fn prefix6(text: &str) -> crate::pipeline::ir::Prefix6 {
    let (network, length) = text.split_once('/').unwrap();
    crate::pipeline::ir::Prefix6 {
        network: network.parse().unwrap(),
        length: length.parse().unwrap(),
    }
}

fn route6(
    selector: RouteSelector,
    prefix: &str,
    priority: u16,
    nexthop: Option<&str>,
    (mac, port): (Mac, &str),
) -> IrEntry {
    IrEntry::Route6 {
        datapath: ROUTER,
        selector,
        prefix: prefix6(prefix),
        priority,
        inport: None,
        route_table: None,
        nexthop: nexthop.map(|ip| ip.parse().unwrap()),
        source_ip: "fd00:a::1".parse().unwrap(),
        source_mac: mac,
        port: port.into(),
    }
}

/// IPv6 routes reach their own tries keyed by (router, prefix) with OVN's priority (beyond a
/// byte), resolved like IPv4's: a connected route to the switch behind its port, a static one
/// with its next hop, a peering one to the peer router; `src-ip` ones go to the source trie and
/// flag the router; a route in a route table or with an inport keeps only the router's IPv6 out,
/// until it goes.
#[test]
fn ipv6_routes_reach_their_tries_resolved_and_what_the_kernel_cannot_route_keeps_ipv6_out() {
    use ovnbpf_common::{
        ROUTE_TO_ROUTER, ROUTE_TO_SWITCH, ROUTER_IPV6_UNSUPPORTED, RouteEntry6,
        maps::{Routes6, SourceRoutes6},
    };
    let mut state = L3State::default();
    let connected_a = route6(
        RouteSelector::Destination,
        "fd00:a::/64",
        194,
        None,
        (MAC_A, "lr-a"),
    );
    let source = route6(
        RouteSelector::Source,
        "fd00:b::/64",
        192,
        Some("fd00:b::1"),
        (MAC_B, "lr-b"),
    );
    let mut entries = vpc();
    entries.extend([
        connected_a.clone(),
        route6(
            RouteSelector::Destination,
            "fd00:b::/64",
            194,
            None,
            (MAC_B, "lr-b"),
        ),
        // A longer static route within a connected prefix, and a peering.
        route6(
            RouteSelector::Destination,
            "fd00:b::5/128",
            385,
            Some("fd00:a::9"),
            (MAC_A, "lr-a"),
        ),
        route6(
            RouteSelector::Destination,
            "fd00:1::/48",
            145,
            Some("fd00:ff::2"),
            (MAC_A, "lr-peer"),
        ),
        source.clone(),
    ]);
    state.apply(&diff(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let routes = maps.table_by::<Routes6, _>(|(k, bits)| {
        (
            u32::from_be(k.datapath),
            std::net::Ipv6Addr::from(k.ip).to_string(),
            bits - 32,
        )
    });
    let at = |ip: &str, length: u32| routes.get(&(ROUTER, ip.to_string(), length)).copied();
    assert_eq!(
        at("fd00:a::", 64),
        Some(RouteEntry6 {
            nexthop: [0; 16],
            next_datapath: SWITCH_A,
            ingress_port: 5,
            priority: 194,
            source_mac: MAC_A,
            kind: ROUTE_TO_SWITCH,
            padding: [0; 3],
        })
    );
    assert_eq!(at("fd00:b::", 64).map(|r| r.next_datapath), Some(SWITCH_B));
    let host = at("fd00:b::5", 128).unwrap();
    assert_eq!(
        (host.next_datapath, host.nexthop, host.priority),
        (
            SWITCH_A,
            "fd00:a::9".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            385
        )
    );
    let peering = at("fd00:1::", 48).unwrap();
    assert_eq!(
        (peering.kind, peering.next_datapath, peering.ingress_port),
        (ROUTE_TO_ROUTER, PEER_ROUTER, 1)
    );
    assert_eq!(routes.len(), 4);
    let sources = maps.table::<SourceRoutes6>();
    assert_eq!(sources.len(), 1);
    assert_eq!(
        sources
            .values()
            .next()
            .map(|r| (r.next_datapath, r.priority)),
        Some((SWITCH_B, 192))
    );
    // IPv4's tries hold none of them.
    assert!(maps.routes().keys().all(|(_, _, length)| *length <= 32));
    assert_eq!(
        maps.routers()[&ROUTER].flags,
        ROUTER_FORWARDS | ROUTER_SOURCE_ROUTES6
    );

    // `reg7 == 0` (a static route where northd keys the main table) is the main table; a port
    // selecting another table keeps the router's IPv6 out while it does.
    let main_table = IrEntry::Route6 {
        datapath: ROUTER,
        selector: RouteSelector::Destination,
        prefix: prefix6("fd00:3::/64"),
        priority: 193,
        inport: None,
        route_table: Some(0),
        nexthop: Some("fd00:a::8".parse().unwrap()),
        source_ip: "fd00:a::1".parse().unwrap(),
        source_mac: MAC_A,
        port: "lr-a".into(),
    };
    let port_table = IrEntry::RouteTableOfPort {
        datapath: ROUTER,
        port: "lr-b".into(),
        table: 1,
    };
    state.apply(&diff(vec![main_table.clone(), port_table.clone()]));
    state.flush(&mut maps).unwrap();
    let routes = maps.table_by::<Routes6, _>(|(k, bits)| (std::net::Ipv6Addr::from(k.ip), bits));
    assert!(routes.contains_key(&("fd00:3::".parse().unwrap(), 96)));
    assert_ne!(maps.routers()[&ROUTER].flags & ROUTER_IPV6_UNSUPPORTED, 0);
    assert!(state.blocked(ROUTER)[0].contains("ports with route tables"));
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![main_table, port_table],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.routers()[&ROUTER].flags,
        ROUTER_FORWARDS | ROUTER_SOURCE_ROUTES6
    );

    // A route in a route table keeps the router's IPv6 out (its IPv4 goes on); gone, it
    // comes back. The source route gone, so is its flag; the connected route gone, its slot.
    let mut in_table = route6(
        RouteSelector::Destination,
        "fd00:2::/64",
        193,
        Some("fd00:a::7"),
        (MAC_A, "lr-a"),
    );
    if let IrEntry::Route6 { route_table, .. } = &mut in_table {
        *route_table = Some(2);
    }
    state.apply(&diff(vec![in_table.clone()]));
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.routers()[&ROUTER].flags,
        ROUTER_FORWARDS | ROUTER_SOURCE_ROUTES6 | ROUTER_IPV6_UNSUPPORTED
    );
    assert!(
        state.blocked(ROUTER)[0].contains("route table 2"),
        "{:?}",
        state.blocked(ROUTER)
    );
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![in_table, source, connected_a.clone()],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.routers()[&ROUTER].flags, ROUTER_FORWARDS);
    assert!(maps.table::<SourceRoutes6>().is_empty());
    assert_eq!(maps.table::<Routes6>().len(), 3);

    // The switch behind a port goes: its routes go with it, and come back with it.
    let port_a = patch(SWITCH_A, 5, "a-lr", "lr-a");
    state.apply(&diff(vec![connected_a]));
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![port_a.clone()],
    });
    state.flush(&mut maps).unwrap();
    let installed = |maps: &Recorder| {
        maps.table_by::<Routes6, _>(|(k, bits)| (std::net::Ipv6Addr::from(k.ip), bits))
    };
    let a: std::net::Ipv6Addr = "fd00:a::".parse().unwrap();
    assert!(!installed(&maps).contains_key(&(a, 96)));
    state.apply(&diff(vec![port_a]));
    state.flush(&mut maps).unwrap();
    assert_eq!(installed(&maps)[&(a, 96)].next_datapath, SWITCH_A);
}

/// An IPv6 ECMP route stores its group and member count in `ROUTES6`; each index of the
/// group's `select` list gets its member's route in `ECMP_MEMBERS6`, resolved like any IPv6
/// route; a member moving rewrites its own index only; the route gone, its slot goes.
#[test]
fn ipv6_ecmp_routes_store_their_group_and_each_member_its_route() {
    use ovnbpf_common::{
        EcmpKey, ROUTE_ECMP,
        maps::{EcmpMembers6, Routes6},
    };
    let member = |member: u16, nexthop: &str, port: &str, mac| IrEntry::EcmpMember6 {
        datapath: ROUTER,
        group: 1,
        member,
        nexthop: nexthop.parse().unwrap(),
        source_ip: "fd00:a::1".parse().unwrap(),
        source_mac: mac,
        port: port.into(),
    };
    let route = IrEntry::EcmpRoute6 {
        datapath: ROUTER,
        selector: RouteSelector::Destination,
        prefix: crate::pipeline::ir::Prefix6 {
            network: "fd00:98::".parse().unwrap(),
            length: 64,
        },
        priority: 193,
        route_table: None,
        group: 1,
        members: vec![1, 2],
    };
    let mut entries = vpc();
    entries.extend([
        route.clone(),
        member(1, "fd00:a::11", "lr-a", MAC_A),
        member(2, "fd00:b::12", "lr-b", MAC_B),
    ]);
    let mut state = L3State::default();
    state.apply(&diff(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let routes = maps.table_by::<Routes6, _>(|(k, bits)| (std::net::Ipv6Addr::from(k.ip), bits));
    let stored = routes[&("fd00:98::".parse().unwrap(), 32 + 64)];
    let group = ovnbpf_common::ecmp::ROUTE_GROUPS | 1;
    assert_eq!(
        (
            stored.kind,
            stored.next_datapath,
            stored.ingress_port,
            stored.priority
        ),
        (ROUTE_ECMP, group, 2, 193)
    );
    let members = |maps: &Recorder| {
        maps.table_by::<EcmpMembers6, _>(|k: EcmpKey| (k.datapath, k.group, k.index))
    };
    let hop = |maps: &Recorder, index| {
        members(maps).get(&(ROUTER, group, index)).map(|m| {
            (
                m.next_datapath,
                std::net::Ipv6Addr::from(m.nexthop),
                m.source_mac,
            )
        })
    };
    assert_eq!(
        hop(&maps, 0),
        Some((SWITCH_A, "fd00:a::11".parse().unwrap(), MAC_A))
    );
    assert_eq!(
        hop(&maps, 1),
        Some((SWITCH_B, "fd00:b::12".parse().unwrap(), MAC_B))
    );
    maps.reset_writes();
    state.apply(&IrDiff {
        added: vec![member(2, "fd00:b::14", "lr-b", MAC_B)],
        removed: vec![member(2, "fd00:b::12", "lr-b", MAC_B)],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 1);
    assert_eq!(
        hop(&maps, 1),
        Some((SWITCH_B, "fd00:b::14".parse().unwrap(), MAC_B))
    );
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![route],
    });
    state.flush(&mut maps).unwrap();
    let routes = maps.table_by::<Routes6, _>(|(k, bits)| (std::net::Ipv6Addr::from(k.ip), bits));
    assert!(!routes.contains_key(&("fd00:98::".parse().unwrap(), 32 + 64)));
    assert!(members(&maps).is_empty(), "the group's indexes go with it");
}

#[test]
fn routes_out_of_a_gateway_port_drop_and_the_rest_of_the_router_routes() {
    let gateway = IrEntry::GatewayPort {
        datapath: ROUTER,
        port: "lr-b".into(),
        redirect: "cr-lr-b".into(),
    };
    let mut state = L3State::default();
    state.apply(&diff(vpc()));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    maps.reset_writes();
    // lr-b becomes a gateway port: its routes (the connected 10.0.2.0/24) turn into gateway
    // routes, one write; lr-a's and the peering's are untouched; the router still forwards.
    state.apply(&diff(vec![gateway.clone()]));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 1);
    let to_b = maps.routes()[&key(ROUTER, "10.0.2.0/24")];
    assert_eq!((to_b.kind, to_b.next_datapath), (ROUTE_GATEWAY, SWITCH_B));
    assert_eq!(
        maps.routes()[&key(ROUTER, "10.0.1.0/24")].kind,
        ROUTE_TO_SWITCH
    );
    assert_eq!(
        maps.routes()[&key(ROUTER, "10.1.0.0/16")].kind,
        ROUTE_TO_ROUTER
    );
    assert_eq!(maps.routers()[&ROUTER].flags, ROUTER_FORWARDS);
    // No longer a gateway port: back to a route to the switch.
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![gateway],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.routes()[&key(ROUTER, "10.0.2.0/24")].kind,
        ROUTE_TO_SWITCH
    );
}
