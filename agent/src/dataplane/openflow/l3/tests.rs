use super::*;
use crate::dataplane::openflow::message::Command;
use crate::pipeline::ir::Prefix;

const SWITCH: u32 = 1;
const ROUTER: u32 = 3;
const ROUTER_MAC: [u8; 6] = [0, 0, 0, 0xaa, 0, 1];

fn port(datapath: u32, key: u32, name: &str, peer: &str) -> IrEntry {
    IrEntry::Port {
        datapath,
        key,
        name: name.into(),
        kind: PortKind::Patch { peer: peer.into() },
        addresses: Vec::new(),
        port_security: Vec::new(),
    }
}

/// A switch linked to a router (Kube-OVN's `<subnet>-<vpc>` and `<vpc>-<subnet>` patch), the
/// router's port, its connected route, a neighbour and its echo reply.
fn routed() -> Vec<IrEntry> {
    vec![
        IrEntry::Datapath {
            datapath: SWITCH,
            name: "subnet-a".into(),
            router: false,
        },
        IrEntry::Datapath {
            datapath: ROUTER,
            name: "vpc-a".into(),
            router: true,
        },
        port(SWITCH, 1, "subnet-a-vpc-a", "vpc-a-subnet-a"),
        port(ROUTER, 1, "vpc-a-subnet-a", "subnet-a-vpc-a"),
        IrEntry::RouterPort {
            datapath: ROUTER,
            port: "vpc-a-subnet-a".into(),
            mac: ROUTER_MAC,
            multicast: false,
        },
        IrEntry::Route {
            datapath: ROUTER,
            selector: RouteSelector::Destination,
            prefix: Prefix {
                network: Ipv4Addr::new(10, 0, 1, 0),
                length: 24,
            },
            priority: 74,
            route_table: None,
            nexthop: None,
            source_ip: Ipv4Addr::new(10, 0, 1, 1),
            source_mac: ROUTER_MAC,
            port: "vpc-a-subnet-a".into(),
        },
        IrEntry::Neighbour {
            datapath: ROUTER,
            port: "vpc-a-subnet-a".into(),
            ip: Ipv4Addr::new(10, 0, 1, 2),
            mac: [0, 0, 0, 0, 1, 2],
        },
        IrEntry::RouterEchoReply {
            datapath: ROUTER,
            ip: Ipv4Addr::new(10, 0, 1, 1),
        },
    ]
}

fn find(flows: &[FlowMod], table: u8, priority: u16) -> Vec<&FlowMod> {
    flows
        .iter()
        .filter(|flow| flow.table == table && flow.priority == priority)
        .collect()
}

/// Each end of the patch crosses into the other's datapath inside a clone (the router's
/// admission, the switch's lookup); the route sets the next hop to the destination, the
/// router port's MAC and key; the neighbour resolves the MAC and outputs.
#[test]
fn a_routed_switch_crosses_into_its_router_and_back() {
    let mut flows = RouterFlows::default();
    flows.apply(&IrDiff {
        added: routed(),
        removed: Vec::new(),
    });
    let changes = flows.changes();
    let crossings = find(&changes, OUTPUT, 100);
    assert_eq!(crossings.len(), 2, "{changes:#?}");
    let into = |datapath: u32, next: u8| {
        vec![Instruction::ApplyActions(vec![Action::Clone(vec![
            Action::SetField(Field::metadata(u64::from(datapath))),
            Action::SetField(Field::register(14, 1)),
            Action::SetField(Field::register(15, 0)),
            Action::SetField(Field::register(0, 0)),
            Action::Resubmit(next),
        ])])]
    };
    let switch_side = crossings
        .iter()
        .find(|flow| flow.matching == on_datapath(SWITCH).with(Field::register(15, 1)))
        .expect("the switch's crossing");
    assert_eq!(switch_side.instructions, into(ROUTER, ADMISSION));
    let router_side = crossings
        .iter()
        .find(|flow| flow.matching == on_datapath(ROUTER).with(Field::register(15, 1)))
        .expect("the router's crossing");
    assert_eq!(router_side.instructions, into(SWITCH, LOOKUP));
    // The switch never sends a frame back into the patch it came by (a flood from the router);
    // the router may route back out of its input port.
    let loops = find(&changes, OUTPUT, 110);
    assert_eq!(loops.len(), 1, "{loops:#?}");
    assert_eq!(
        loops[0].matching,
        on_datapath(SWITCH)
            .with(Field::register(15, 1))
            .with(Field::register(14, 1))
    );
    assert_eq!(
        loops[0].instructions,
        [Instruction::ApplyActions(Vec::new())]
    );
    let route = find(&changes, ROUTING, 74);
    assert_eq!(
        route[0].instructions,
        vec![Instruction::ApplyActions(vec![
            Action::DecrementTtl,
            moved(OXM_IPV4_DST, NXM_REG0, 32),
            Action::SetField(Field::register(1, u32::from(Ipv4Addr::new(10, 0, 1, 1)))),
            Action::SetField(Field::eth_source(ROUTER_MAC)),
            Action::SetField(Field::register(15, 1)),
            Action::Resubmit(POLICY),
        ])]
    );
    let resolve = find(&changes, RESOLVE, 100);
    assert_eq!(
        resolve[0].matching,
        on_datapath(ROUTER)
            .with(Field::register(15, 1))
            .with(Field::register(0, u32::from(Ipv4Addr::new(10, 0, 1, 2))))
    );
    assert_eq!(
        find(&changes, IP_INPUT, 90).len(),
        3,
        "the echo reply, and the neighbour discovery the router drops (135, 136)"
    );
    // What no route covers, and a next hop without a MAC, dropped by flows that count them.
    let cookies = |table: u8| {
        find(&changes, table, 0)
            .iter()
            .map(|flow| (flow.cookie, flow.instructions.is_empty()))
            .collect::<Vec<_>>()
    };
    assert_eq!(cookies(ROUTING), [(l2::COOKIE_NO_ROUTE, true)]);
    assert_eq!(cookies(RESOLVE), [(l2::COOKIE_UNTRANSLATED, true)]);
    assert_eq!(find(&changes, ADMISSION, 100).len(), 1);
    assert!(flows.changes().is_empty(), "nothing changed since");
}

/// The router's answers OVN makes in userspace go to the agent, each by the cookie that names
/// it, with its parameter: time exceeded (the port's address) for TTL 0 and 1 from that port,
/// a reset for TCP and an unreachable (its code) for UDP and the rest to its address (never for
/// later fragments), an ARP request where no neighbour resolves the next hop (only where the
/// router asks), and the ARP senders it hears for learning (but a neighbour learned at that
/// MAC); SCTP stays dropped and counted (no abort is built).
#[test]
fn the_routers_own_answers_go_to_the_agent() {
    let gateway = Ipv4Addr::new(10, 0, 1, 1);
    let mut entries = routed();
    entries.extend([
        IrEntry::TtlExceeded {
            datapath: ROUTER,
            port: "vpc-a-subnet-a".into(),
            source: gateway,
        },
        IrEntry::RouterReject {
            datapath: ROUTER,
            ip: gateway,
            protocol: Some(RejectProtocol::Tcp),
            response: RejectResponse::TcpReset,
        },
        IrEntry::RouterReject {
            datapath: ROUTER,
            ip: gateway,
            protocol: Some(RejectProtocol::Udp),
            response: RejectResponse::IcmpUnreachable { code: 3 },
        },
        IrEntry::RouterReject {
            datapath: ROUTER,
            ip: gateway,
            protocol: Some(RejectProtocol::Sctp),
            response: RejectResponse::SctpAbort,
        },
        IrEntry::RouterReject {
            datapath: ROUTER,
            ip: gateway,
            protocol: None,
            response: RejectResponse::IcmpUnreachable { code: 2 },
        },
        IrEntry::NeighbourLearning {
            datapath: ROUTER,
            port: Some("vpc-a-subnet-a".into()),
            subnet: None,
        },
        IrEntry::LearnedNeighbour {
            datapath: ROUTER,
            port: "vpc-a-subnet-a".into(),
            ip: Ipv4Addr::new(10, 0, 1, 9),
            mac: [0, 0, 0, 0, 1, 9],
        },
        IrEntry::RouterArpReply {
            datapath: ROUTER,
            port: "vpc-a-subnet-a".into(),
            ip: gateway,
            subnet: Prefix {
                network: Ipv4Addr::new(10, 0, 1, 0),
                length: 24,
            },
        },
    ]);
    let mut flows = RouterFlows::default();
    flows.apply(&IrDiff {
        added: entries,
        removed: Vec::new(),
    });
    let changes = flows.changes();
    let sent_up = |flow: &FlowMod| {
        matches!(flow.instructions.as_slice(),
            [Instruction::ApplyActions(actions)] if actions.last() == Some(&Action::Output(PORT_CONTROLLER)))
    };
    let ipv4 = || on_datapath(ROUTER).with(Field::eth_type(IPV4));
    let expired = find(&changes, IP_INPUT, 31);
    assert_eq!(expired.len(), 2, "TTL 0 and 1");
    for (flow, ttl) in expired.iter().zip([0, 1]) {
        assert_eq!(flow.cookie, COOKIE_TIME_EXCEEDED);
        assert!(sent_up(flow));
        assert_eq!(
            flow.matching,
            ipv4()
                .with(Field::register(14, 1))
                .with(Field::ip_ttl(ttl))
                .with(Field::not_later_fragment())
        );
        assert_eq!(
            flow.instructions,
            [Instruction::ApplyActions(vec![
                Action::SetField(Field::register(PARAMETER, u32::from(gateway))),
                Action::Output(PORT_CONTROLLER),
            ])]
        );
    }
    let to_gateway = |protocol: Option<u8>| {
        let matching = match protocol {
            Some(protocol) => ipv4().with(Field::ip_protocol(protocol)),
            None => ipv4(),
        };
        matching
            .with(Field::ipv4_destination(gateway))
            .with(Field::not_later_fragment())
    };
    let by_match = |priority: u16, matching: Match| {
        find(&changes, IP_INPUT, priority)
            .into_iter()
            .find(|flow| flow.matching == matching)
            .unwrap_or_else(|| panic!("no flow {matching:?}"))
    };
    let reset = by_match(80, to_gateway(Some(6)));
    assert_eq!(reset.cookie, COOKIE_TCP_RESET);
    assert!(sent_up(reset));
    let port = by_match(80, to_gateway(Some(17)));
    assert_eq!(port.cookie, COOKIE_UNREACHABLE);
    assert_eq!(
        port.instructions,
        [Instruction::ApplyActions(vec![
            Action::SetField(Field::register(PARAMETER, 3)),
            Action::Output(PORT_CONTROLLER),
        ])]
    );
    let sctp = by_match(80, to_gateway(Some(132)));
    assert_eq!(
        (sctp.cookie, sctp.instructions.is_empty()),
        (l2::COOKIE_UNTRANSLATED, true)
    );
    let rest = by_match(70, to_gateway(None));
    assert_eq!(rest.cookie, COOKIE_UNREACHABLE);
    let arp = || on_datapath(ROUTER).with(Field::eth_type(ARP));
    let learn = by_match(80, arp().with(Field::register(14, 1)));
    assert_eq!(learn.cookie, COOKIE_LEARN);
    assert!(sent_up(learn));
    let known = by_match(
        85,
        arp()
            .with(Field::register(14, 1))
            .with(Field::arp_source_ip(Ipv4Addr::new(10, 0, 1, 9)))
            .with(Field::arp_source_mac([0, 0, 0, 0, 1, 9])),
    );
    assert_eq!(
        known.instructions,
        [Instruction::ApplyActions(Vec::new())],
        "nothing to learn"
    );
    // The router's ARP reply for its address, to requesters of the port's subnet: the request
    // to the agent (learning), then turned into the reply from the port's MAC, out of the port.
    let reply = by_match(
        90,
        arp()
            .with(Field::register(14, 1))
            .with(Field::arp_op(1))
            .with(Field::arp_target_ip(gateway))
            .with(Field::arp_source_prefix(Ipv4Addr::new(10, 0, 1, 0), 24)),
    );
    assert_eq!(reply.cookie, COOKIE_LEARN);
    let mut expected = l2::to_controller(ROUTER_MAC);
    expected.extend(l2::arp_request_to_reply(gateway, ROUTER_MAC));
    expected.extend([
        Action::SetField(Field::register(15, 1)),
        Action::SetField(Field::register(14, 0)),
        Action::Resubmit(OUTPUT),
    ]);
    assert_eq!(reply.instructions, [Instruction::ApplyActions(expected)]);
    // This router does not ask for next hops: an unresolved one is dropped as untranslated.
    assert_eq!(
        find(&changes, RESOLVE, 0)[0].cookie,
        l2::COOKIE_UNTRANSLATED
    );
    flows.apply(&IrDiff {
        added: vec![IrEntry::ArpRequestForNextHop { datapath: ROUTER }],
        removed: Vec::new(),
    });
    let changes = flows.changes();
    let (ask, gone): (Vec<&FlowMod>, Vec<&FlowMod>) = find(&changes, RESOLVE, 0)
        .into_iter()
        .partition(|flow| flow.command == Command::Add);
    assert_eq!(ask.len(), 1, "{changes:#?}");
    assert_eq!(gone[0].cookie, l2::COOKIE_UNTRANSLATED, "the drop goes");
    assert_eq!(ask[0].cookie, COOKIE_ARP_REQUEST);
    assert_eq!(ask[0].matching, ipv4());
    assert!(sent_up(ask[0]));
}

/// IPv6 routes as IPv4's: the destination prefix, hop limit decremented, the next hop in
/// `xxreg0` (`reg0` its most significant word), the port's MAC and key; a neighbour resolves
/// by `xxreg0`; the router answers pings to its address (addresses swapped through `xxreg0`,
/// type 129) and solicitations for it (the agent, with the port's MAC); other neighbour
/// discovery, reserved multicast and expiring hop limits are dropped; an unresolved next hop is
/// dropped and counted.
#[test]
fn ipv6_routes_resolve_through_xxreg0() {
    use std::net::Ipv6Addr;
    let gateway: Ipv6Addr = "fd00:10:1::1".parse().unwrap();
    let pod: Ipv6Addr = "fd00:10:1::2".parse().unwrap();
    let mut entries = routed();
    entries.extend([
        IrEntry::Route6 {
            datapath: ROUTER,
            selector: RouteSelector::Destination,
            prefix: crate::pipeline::ir::Prefix6 {
                network: "fd00:10:1::".parse().unwrap(),
                length: 64,
            },
            priority: 194,
            inport: None,
            route_table: None,
            nexthop: None,
            source_ip: gateway,
            source_mac: ROUTER_MAC,
            port: "vpc-a-subnet-a".into(),
        },
        IrEntry::Neighbour6 {
            datapath: ROUTER,
            port: "vpc-a-subnet-a".into(),
            ip: pod,
            mac: [0, 0, 0, 0, 1, 2],
        },
        IrEntry::RouterEchoReply6 {
            datapath: ROUTER,
            ip: gateway,
        },
        IrEntry::RouterNdReply {
            datapath: ROUTER,
            port: "vpc-a-subnet-a".into(),
            ip: gateway,
        },
        IrEntry::RouterDrop {
            datapath: ROUTER,
            rule: RouterDropRule::Ipv6ReservedMulticast,
        },
    ]);
    let mut flows = RouterFlows::default();
    flows.apply(&IrDiff {
        added: entries,
        removed: Vec::new(),
    });
    let changes = flows.changes();
    let ipv6 = || on_datapath(ROUTER).with(Field::eth_type(IPV6));
    let route = find(&changes, ROUTING, 194);
    assert_eq!(
        route[0].matching,
        ipv6().with(Field::ipv6_destination_prefix(
            "fd00:10:1::".parse().unwrap(),
            64
        ))
    );
    let mut expected = vec![Action::DecrementTtl];
    expected.extend(ipv6_to_xxreg0(OXM_IPV6_DST));
    expected.extend([
        Action::SetField(Field::eth_source(ROUTER_MAC)),
        Action::SetField(Field::register(15, 1)),
        Action::Resubmit(POLICY),
    ]);
    assert_eq!(route[0].instructions, [Instruction::ApplyActions(expected)]);
    assert_eq!(
        ipv6_to_xxreg0(OXM_IPV6_DST)[0],
        Action::Move {
            source: OXM_IPV6_DST,
            source_offset: 96,
            destination: NXM_REG0,
            destination_offset: 0,
            bits: 32
        },
        "the address's most significant word into reg0"
    );
    let resolve = find(&changes, RESOLVE, 100);
    let neighbour = resolve
        .iter()
        .find(|flow| {
            flow.matching
                != on_datapath(ROUTER)
                    .with(Field::register(15, 1))
                    .with(Field::register(0, u32::from(Ipv4Addr::new(10, 0, 1, 2))))
        })
        .expect("the IPv6 neighbour");
    assert_eq!(
        neighbour.matching,
        on_datapath(ROUTER)
            .with(Field::register(15, 1))
            .with(Field::register(0, 0xfd00_0010))
            .with(Field::register(1, 0x0001_0000))
            .with(Field::register(2, 0))
            .with(Field::register(3, 2))
    );
    let echo = find(&changes, IP_INPUT, 90)
        .into_iter()
        .find(|flow| {
            flow.matching
                == ipv6()
                    .with(Field::ip_protocol(58))
                    .with(Field::ipv6_destination(gateway))
                    .with(Field::icmpv6_type(128))
        })
        .expect("the IPv6 echo reply");
    let mut expected = ipv6_to_xxreg0(OXM_IPV6_DST);
    expected.push(moved(OXM_IPV6_SRC, OXM_IPV6_DST, 128));
    expected.extend(xxreg0_to_ipv6(OXM_IPV6_SRC));
    expected.extend([
        Action::SetTtl(255),
        Action::SetField(Field::icmpv6_type(129)),
        Action::Resubmit(ROUTING),
    ]);
    assert_eq!(echo.instructions, [Instruction::ApplyActions(expected)]);
    let solicitation = find(&changes, IP_INPUT, 95);
    assert_eq!(solicitation[0].cookie, COOKIE_ND_ROUTER_ADVERTISEMENT);
    assert_eq!(
        solicitation[0].matching,
        ipv6()
            .with(Field::register(14, 1))
            .with(Field::ip_protocol(58))
            .with(Field::icmpv6_type(135))
            .with(Field::nd_target(gateway))
    );
    let mut expected = l2::to_controller(ROUTER_MAC);
    expected.pop();
    expected.push(Action::Output(PORT_CONTROLLER));
    assert_eq!(
        solicitation[0].instructions,
        [Instruction::ApplyActions(expected)]
    );
    let reserved = find(&changes, IP_INPUT, 100);
    assert_eq!(
        reserved.len(),
        3,
        "ff00::, ff01::, ff02:: with a 16-bit group"
    );
    assert_eq!(find(&changes, IP_INPUT, 30).len(), 2, "hop limits 0 and 1");
    let unresolved = find(&changes, RESOLVE, 1);
    assert_eq!(
        (unresolved[0].cookie, unresolved[0].matching.clone()),
        (l2::COOKIE_UNTRANSLATED, ipv6())
    );
    // The router's IPv6 answers: time exceeded from the port's address (in `xxreg1`), a reset
    // for TCP to its address, and a solicitation for a next hop without a MAC.
    flows.apply(&IrDiff {
        added: vec![
            IrEntry::TtlExceeded6 {
                datapath: ROUTER,
                port: "vpc-a-subnet-a".into(),
                network: crate::pipeline::ir::Prefix6 {
                    network: "fd00:10:1::".parse().unwrap(),
                    length: 64,
                },
                source: gateway,
            },
            IrEntry::RouterReject6 {
                datapath: ROUTER,
                ip: gateway,
                protocol: Some(RejectProtocol::Tcp),
                response: RejectResponse::TcpReset,
            },
            IrEntry::NsForNextHop { datapath: ROUTER },
        ],
        removed: Vec::new(),
    });
    let changes = flows.changes();
    let expired = find(&changes, IP_INPUT, 31);
    assert_eq!(expired.len(), 2, "hop limits 0 and 1");
    assert_eq!(expired[0].cookie, COOKIE_TIME_EXCEEDED);
    assert_eq!(
        expired[0].instructions,
        [Instruction::ApplyActions(vec![
            Action::SetField(Field::register(4, 0xfd00_0010)),
            Action::SetField(Field::register(5, 0x0001_0000)),
            Action::SetField(Field::register(6, 0)),
            Action::SetField(Field::register(7, 1)),
            Action::Output(PORT_CONTROLLER),
        ])]
    );
    let reset = find(&changes, IP_INPUT, 80);
    assert_eq!(
        (reset[0].cookie, reset[0].matching.clone()),
        (
            COOKIE_TCP_RESET,
            ipv6()
                .with(Field::ip_protocol(6))
                .with(Field::ipv6_destination(gateway))
                .with(Field::not_later_fragment())
        )
    );
    let solicit = find(&changes, RESOLVE, 1)
        .into_iter()
        .find(|flow| flow.command == Command::Add)
        .expect("the solicitation's flow");
    assert_eq!(solicit.cookie, COOKIE_ARP_REQUEST);
    // Its IPv6 fenced (IPv6 ECMP left out): every IPv6 packet dropped and counted as it
    // enters, above the rest; then routed again.
    flows.set_ipv6_fenced(ROUTER, true);
    let fence = flows.changes();
    assert_eq!(
        fence
            .iter()
            .map(|flow| (flow.command, flow.table, flow.priority, flow.cookie))
            .collect::<Vec<_>>(),
        [(Command::Add, IP_INPUT, 150, l2::COOKIE_UNTRANSLATED)]
    );
    assert_eq!(fence[0].matching, ipv6());
    flows.set_ipv6_fenced(ROUTER, false);
    assert_eq!(flows.changes()[0].command, Command::DeleteStrict);
}

/// What a router drops for a reason the eBPF datapath names is dropped by a flow of that
/// reason's cookie, so that it is counted: TTL run out, its own addresses, a policy's drop, a
/// discard route.
#[test]
fn a_routers_drops_carry_their_reasons_cookie() {
    let mut entries = routed();
    entries.extend([
        IrEntry::RouterDrop {
            datapath: ROUTER,
            rule: RouterDropRule::TtlExpired,
        },
        IrEntry::RouterDrop {
            datapath: ROUTER,
            rule: RouterDropRule::ToRouter(vec![Ipv4Addr::new(10, 0, 1, 1)]),
        },
        IrEntry::RouterPolicy {
            datapath: ROUTER,
            priority: 2000,
            source: None,
            destination: Some(Prefix {
                network: Ipv4Addr::new(10, 9, 0, 0),
                length: 16,
            }),
            l4: None,
            verdict: PolicyVerdict::Drop,
        },
        IrEntry::DiscardRoute {
            datapath: ROUTER,
            selector: RouteSelector::Destination,
            prefix: Prefix {
                network: Ipv4Addr::new(10, 8, 0, 0),
                length: 16,
            },
            priority: 49,
            route_table: None,
        },
    ]);
    let mut flows = RouterFlows::default();
    flows.apply(&IrDiff {
        added: entries,
        removed: Vec::new(),
    });
    let changes = flows.changes();
    let cookies = |table: u8, priority: u16| {
        find(&changes, table, priority)
            .iter()
            .filter(|flow| flow.instructions.is_empty())
            .map(|flow| flow.cookie)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        cookies(IP_INPUT, 30),
        [l2::COOKIE_TTL_EXPIRED; 4],
        "TTL 0 and 1, hop limit 0 and 1"
    );
    assert_eq!(cookies(IP_INPUT, 60), [l2::COOKIE_TO_ROUTER_UNHANDLED]);
    assert_eq!(cookies(POLICY, 2000), [l2::COOKIE_POLICY_DROP]);
    assert_eq!(cookies(ROUTING, 49), [l2::COOKIE_ROUTE_DISCARD]);
    assert!(
        l2::DROP_REASONS
            .iter()
            .any(|(reason, cookie)| *reason == "policy_drop" && *cookie == l2::COOKIE_POLICY_DROP)
    );
}

/// ECMP: a route of several next hops decrements the TTL, puts its group in `reg9` and picks
/// a member's index into `reg8` (Open vSwitch's `multipath` over the flow's addresses,
/// protocol and ports); the member table turns each index into its member's next hop, source
/// and port, then the policies (a reroute policy's members: then the next hops). Routes and
/// policies number their groups apart.
#[test]
fn ecmp_routes_and_policies_pick_a_member_by_the_flows_hash() {
    let member = |stage, member: u16, nexthop: [u8; 4]| IrEntry::EcmpMember {
        datapath: ROUTER,
        stage,
        group: 1,
        member,
        nexthop: nexthop.into(),
        source_ip: Ipv4Addr::new(10, 0, 1, 1),
        source_mac: ROUTER_MAC,
        port: "vpc-a-subnet-a".into(),
    };
    let mut entries = routed();
    entries.extend([
        IrEntry::EcmpRoute {
            datapath: ROUTER,
            selector: RouteSelector::Destination,
            prefix: Prefix {
                network: Ipv4Addr::new(192, 168, 0, 0),
                length: 16,
            },
            priority: 33,
            route_table: None,
            group: 1,
            members: vec![1, 2],
        },
        member(EcmpStage::Route, 1, [10, 0, 1, 7]),
        member(EcmpStage::Route, 2, [10, 0, 1, 8]),
        IrEntry::RouterPolicy {
            datapath: ROUTER,
            priority: 29000,
            source: Some(Prefix {
                network: Ipv4Addr::new(10, 0, 1, 0),
                length: 24,
            }),
            destination: None,
            l4: None,
            verdict: PolicyVerdict::RerouteEcmp {
                group: 1,
                members: vec![2, 1],
            },
        },
        member(EcmpStage::Policy, 1, [10, 0, 1, 9]),
        member(EcmpStage::Policy, 2, [10, 0, 1, 10]),
    ]);
    let mut flows = RouterFlows::default();
    flows.apply(&IrDiff {
        added: entries,
        removed: Vec::new(),
    });
    let changes = flows.changes();
    let choice = |tag: u32| {
        vec![
            Action::SetField(Field::register(9, tag | 1)),
            Action::SetField(Field::register(8, 0)),
            Action::Multipath {
                links: 2,
                destination: NXM_REG8,
            },
            Action::Resubmit(ECMP),
        ]
    };
    let route = find(&changes, ROUTING, 33);
    let mut expected = vec![Action::DecrementTtl];
    expected.extend(choice(ECMP_ROUTE));
    assert_eq!(route[0].instructions, [Instruction::ApplyActions(expected)]);
    let policy = find(&changes, POLICY, 29000);
    assert_eq!(
        policy[0].instructions,
        [Instruction::ApplyActions(choice(ECMP_POLICY))]
    );
    let members = find(&changes, ECMP, 100);
    assert_eq!(members.len(), 4);
    let member_flow = |tag: u32, index: u32| {
        members
            .iter()
            .find(|flow| flow.matching == ecmp_member_match(on_datapath(ROUTER), tag, 1, index))
            .map(|flow| flow.instructions.clone())
            .expect("the member's flow")
    };
    let to = |nexthop: [u8; 4], next: u8| {
        vec![Instruction::ApplyActions(vec![
            Action::SetField(Field::register(0, u32::from(Ipv4Addr::from(nexthop)))),
            Action::SetField(Field::register(1, u32::from(Ipv4Addr::new(10, 0, 1, 1)))),
            Action::SetField(Field::eth_source(ROUTER_MAC)),
            Action::SetField(Field::register(15, 1)),
            Action::Resubmit(next),
        ])]
    };
    assert_eq!(member_flow(ECMP_ROUTE, 0), to([10, 0, 1, 7], POLICY));
    assert_eq!(member_flow(ECMP_ROUTE, 1), to([10, 0, 1, 8], POLICY));
    // The policy's members in its own order: index 0 is member 2.
    assert_eq!(member_flow(ECMP_POLICY, 0), to([10, 0, 1, 10], RESOLVE));
    assert_eq!(member_flow(ECMP_POLICY, 1), to([10, 0, 1, 9], RESOLVE));
}

/// A router port that advertises answers router solicitations to all routers on it (hop
/// limit 255, code 0) through the agent, above the drops of reserved multicast and
/// solicitations; its advertisement is there for the agent under the router and port key, and
/// goes with the entry.
#[test]
fn router_solicitations_go_to_the_agent_with_the_ports_advertisement() {
    let advert = IrEntry::RouterAdvertisement {
        datapath: ROUTER,
        port: "vpc-a-subnet-a".into(),
        mac: ROUTER_MAC,
        message: vec![134, 0, 0, 0],
    };
    let mut entries = routed();
    entries.push(advert.clone());
    let mut flows = RouterFlows::default();
    flows.apply(&IrDiff {
        added: entries,
        removed: Vec::new(),
    });
    let changes = flows.changes();
    let solicitation = find(&changes, IP_INPUT, 110);
    assert_eq!(solicitation[0].cookie, COOKIE_ROUTER_ADVERTISEMENT);
    assert_eq!(
        solicitation[0].matching,
        on_datapath(ROUTER)
            .with(Field::eth_type(IPV6))
            .with(Field::register(14, 1))
            .with(Field::ipv6_destination("ff02::2".parse().unwrap()))
            .with(Field::ip_ttl(255))
            .with(Field::ip_protocol(58))
            .with(Field::icmpv6_type(133))
            .with(Field::icmpv6_code(0))
    );
    let adverts = flows.adverts();
    assert_eq!(
        adverts
            .read()
            .unwrap()
            .get(&ROUTER)
            .and_then(|ports| ports.get(&1)),
        Some(&(ROUTER_MAC, vec![134, 0, 0, 0]))
    );
    flows.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![advert],
    });
    flows.changes();
    assert!(adverts.read().unwrap().get(&ROUTER).is_none());
}

/// A fenced router loses every flow of its own (strict deletes of our cookie) but one that
/// drops and counts what crosses into it, and gets them back unfenced; the switch keeps its
/// crossing. A neighbour removed takes only its flow.
#[test]
fn fencing_a_router_removes_its_flows_and_one_change_costs_one_flow() {
    let mut flows = RouterFlows::default();
    flows.apply(&IrDiff {
        added: routed(),
        removed: Vec::new(),
    });
    let all = flows.changes();
    let switch_side = on_datapath(SWITCH).with(Field::register(15, 1));
    let router_flows = all
        .iter()
        .filter(|flow| {
            flow.matching != switch_side
                && flow.matching != switch_side.clone().with(Field::register(14, 1))
        })
        .count();
    flows.set_fenced(ROUTER, true);
    let fenced = flows.changes();
    let (deletes, adds): (Vec<&FlowMod>, Vec<&FlowMod>) = fenced
        .iter()
        .partition(|flow| flow.command == Command::DeleteStrict);
    assert_eq!(deletes.len(), router_flows);
    assert!(deletes.iter().all(|flow| flow.cookie_mask == u64::MAX));
    assert_eq!(
        adds.iter()
            .map(|flow| (
                flow.cookie,
                flow.table,
                flow.matching.clone(),
                flow.instructions.len()
            ))
            .collect::<Vec<_>>(),
        [(l2::COOKIE_UNTRANSLATED, ADMISSION, on_datapath(ROUTER), 0)],
        "the fence's counted drop"
    );
    flows.set_fenced(ROUTER, false);
    assert_eq!(
        flows.changes().len(),
        router_flows + 1,
        "back, the fence's drop gone"
    );
    let neighbour = routed().remove(6);
    flows.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![neighbour],
    });
    let removed = flows.changes();
    assert_eq!(removed.len(), 1);
    assert_eq!(
        (removed[0].command, removed[0].table),
        (Command::DeleteStrict, RESOLVE)
    );
}

/// The router's drop rules match what northd drops before routing: martian sources and
/// destinations, TTL 0 and 1 below the echo reply (which answers a TTL-1 ping, as OVN does),
/// its own addresses below the echo reply too.
#[test]
fn router_drop_rules_rank_around_the_echo_reply() {
    let ipv4 = || on_datapath(ROUTER).with(Field::eth_type(IPV4));
    let ipv6 = || on_datapath(ROUTER).with(Field::eth_type(IPV6));
    let martian = drop_matches(&RouterDropRule::Martian, &ipv4, &ipv6);
    assert_eq!(martian.len(), 6);
    assert!(martian.iter().all(|(priority, _)| *priority > 90));
    let ttl = drop_matches(&RouterDropRule::TtlExpired, &ipv4, &ipv6);
    assert!(ttl.iter().all(|(priority, _)| *priority < 90));
    let own = drop_matches(
        &RouterDropRule::ToRouter(vec![Ipv4Addr::new(10, 0, 1, 1)]),
        &ipv4,
        &ipv6,
    );
    assert_eq!(
        own,
        [(
            60,
            ipv4().with(Field::ipv4_destination(Ipv4Addr::new(10, 0, 1, 1)))
        )]
    );
}

/// A port range becomes the aligned blocks that cover it exactly, whole range and single port
/// included.
#[test]
fn port_ranges_become_the_masked_blocks_that_cover_them() {
    assert_eq!(port_blocks(80, 80), [(80, 0xffff)]);
    assert_eq!(
        port_blocks(1000, 1023),
        [(1000, 0xfff8), (1008, 0xfff0)],
        "1000-1007 and 1008-1023"
    );
    assert_eq!(port_blocks(0, 65535), [(0, 0)]);
    assert_eq!(
        port_blocks(65534, 65535),
        [(65534, 0xfffe)],
        "the top of the range without overflow"
    );
    // Every port in and out of a range, against its blocks.
    let covered = |port: u16, blocks: &[(u16, u16)]| {
        blocks
            .iter()
            .any(|(value, mask)| port & mask == *value & mask)
    };
    let blocks = port_blocks(1025, 3000);
    for port in 0..=u16::MAX {
        assert_eq!(
            covered(port, &blocks),
            (1025..=3000).contains(&port),
            "{port}"
        );
    }
}

/// A patch whose peer arrives later (or changes) gets its crossing then: the peer's change
/// marks the patch's datapath through the index of who names it, even when the peer does not
/// name the patch back.
#[test]
fn a_patch_crosses_once_its_peer_arrives() {
    let mut flows = RouterFlows::default();
    let mut entries = routed();
    let switch_side = entries.remove(2);
    flows.apply(&IrDiff {
        added: entries,
        removed: Vec::new(),
    });
    let crossing = |changes: &[FlowMod]| {
        changes.iter().any(|flow| {
            flow.table == OUTPUT
                && flow.matching == on_datapath(ROUTER).with(Field::register(15, 1))
        })
    };
    assert!(!crossing(&flows.changes()), "no crossing without the peer");
    // The switch's end, naming no peer of its own.
    let IrEntry::Port {
        datapath,
        key,
        name,
        addresses,
        port_security,
        ..
    } = switch_side
    else {
        panic!("the switch's patch port");
    };
    flows.apply(&IrDiff {
        added: vec![IrEntry::Port {
            datapath,
            key,
            name,
            kind: PortKind::Other("router".into()),
            addresses,
            port_security,
        }],
        removed: Vec::new(),
    });
    assert!(
        crossing(&flows.changes()),
        "the router's crossing once its peer is known"
    );
}
