//! Classifier tests on flows as northd writes them.

use std::net::Ipv4Addr;

use super::*;
use crate::lflow::{parse_actions, parse_match};
use crate::pipeline::ir::{EcmpStage, IrEntry, L4Match, PolicyVerdict, Prefix, RouteSelector};

/// The verdict on one flow of datapath 7, written as northd writes it.
pub(super) fn class(stage: &str, priority: i64, match_: &str, actions: &str) -> Class {
    let match_ = parse_match(match_).unwrap();
    let actions = parse_actions(actions).unwrap();
    classify(&Flow {
        datapath: 7,
        stage,
        priority,
        match_: &match_,
        actions: &actions,
    })
}

#[test]
fn switch_flows_from_northd_compile() {
    assert_eq!(
        class(
            "ls_in_l2_lkup",
            50,
            "eth.dst == 00:00:00:00:00:01",
            r#"outport = "pod-a1.ns1"; output;"#
        ),
        Class::Compiled(vec![IrEntry::L2Fib {
            datapath: 7,
            mac: [0, 0, 0, 0, 0, 1],
            port: "pod-a1.ns1".into()
        }])
    );
    assert!(matches!(
        class("ls_in_l2_lkup", 75, "eth.src == {0a:58:0a:00:01:01} && (arp.op == 1 || rarp.op == 3 || nd_ns)", r#"outport = "_MC_flood_l2"; output;"#),
        Class::Compiled(entries) if matches!(entries[0], IrEntry::RouterOriginatedFlood { .. })
    ));
    assert!(matches!(
        class("ls_in_l2_lkup", 80, "flags[1] == 0 && arp.op == 1 && arp.tpa == 10.0.1.1", r#"clone {outport = "subnet-a-vpc-a"; output; }; outport = "_MC_flood_l2"; output;"#),
        Class::Compiled(entries) if matches!(&entries[0], IrEntry::ArpForRouterIp { router_port, .. } if router_port == "subnet-a-vpc-a")
    ));
    assert_eq!(
        class(
            "ls_in_arp_rsp",
            50,
            "arp.tpa == 10.0.1.2 && arp.op == 1",
            "eth.dst = eth.src; eth.src = 00:00:00:00:00:01; arp.op = 2; /* ARP reply */ arp.tha = arp.sha; arp.sha = 00:00:00:00:00:01; arp.tpa = arp.spa; arp.spa = 10.0.1.2; outport = inport; flags.loopback = 1; output;"
        ),
        Class::Compiled(vec![IrEntry::ArpReply {
            datapath: 7,
            ip: Ipv4Addr::new(10, 0, 1, 2),
            mac: [0, 0, 0, 0, 0, 1]
        }])
    );
    assert_eq!(class("ls_in_pre_acl", 0, "1", "next;"), Class::Neutral);
    assert!(
        matches!(class("ls_in_acl", 1000, "ip4", "ct_commit { ct_mark.blocked = 0; }; next;"), Class::Unsupported(r) if r.contains("ACL"))
    );
    assert_eq!(
        class(
            "ls_in_l2_lkup",
            110,
            "eth.dst == {b2:fb:7f:27:57:01} && (tcp || icmp || icmp6)",
            "handle_svc_check(inport);"
        ),
        Class::Compiled(vec![IrEntry::ServiceMonitorAnswers {
            datapath: 7,
            mac: [0xb2, 0xfb, 0x7f, 0x27, 0x57, 0x01]
        }])
    );
}

#[test]
fn peer_router_link_local_neighbours_compile() {
    // On a peering link the next hop is the peer router port's link-local address, held in
    // xxreg0 (no ip6.* field in the match).
    assert_eq!(
        class(
            "lr_in_arp_resolve",
            100,
            r#"outport == "vpc-a-vpc-c" && xxreg0 == fe80::858:d6ff:fe22:2a24"#,
            "eth.dst = 0a:58:d6:22:2a:24; next;"
        ),
        Class::Compiled(vec![IrEntry::Neighbour6 {
            datapath: 7,
            port: "vpc-a-vpc-c".into(),
            ip: "fe80::858:d6ff:fe22:2a24".parse().unwrap(),
            mac: [0x0a, 0x58, 0xd6, 0x22, 0x2a, 0x24],
        }])
    );
    // A dual-stack peering: the peer router port's global and link-local addresses in one
    // flow, one neighbour each.
    assert_eq!(
        class(
            "lr_in_arp_resolve",
            100,
            r#"outport == "a-b" && xxreg0 == {fd00:255::2, fe80::800:ff:fe00:2}"#,
            "eth.dst = 0a:00:00:00:00:02; next;"
        ),
        Class::Compiled(
            ["fd00:255::2", "fe80::800:ff:fe00:2"]
                .map(|ip| IrEntry::Neighbour6 {
                    datapath: 7,
                    port: "a-b".into(),
                    ip: ip.parse().unwrap(),
                    mac: [0x0a, 0, 0, 0, 0, 2],
                })
                .to_vec()
        )
    );
}

/// The IPv6 half of a Kube-OVN dual-stack subnet's router flows, as northd 23.03 writes them:
/// the `policySrc` route by source, the allow policy (no change to routing), and time exceeded
/// (the kernel drops without the answer: a side duty, not a blocker).
#[test]
fn a_dual_stack_subnets_ipv6_router_flows_compile() {
    assert_eq!(
        class(
            "lr_in_ip_routing",
            192,
            "ip6.src == fd00:10:1::/64",
            r#"ip.ttl--; reg8[0..15] = 0; xxreg0 = fd00:10:1::1; xxreg1 = fd00:10:1::1; eth.src = 0a:58:63:5f:04:aa; outport = "vpc-a-subnet-a"; flags.loopback = 1; next;"#
        ),
        Class::Compiled(vec![IrEntry::Route6 {
            datapath: 7,
            selector: RouteSelector::Source,
            prefix: crate::pipeline::ir::Prefix6 {
                network: "fd00:10:1::".parse().unwrap(),
                length: 64
            },
            priority: 192,
            inport: None,
            route_table: None,
            nexthop: Some("fd00:10:1::1".parse().unwrap()),
            source_ip: "fd00:10:1::1".parse().unwrap(),
            source_mac: [0x0a, 0x58, 0x63, 0x5f, 0x04, 0xaa],
            port: "vpc-a-subnet-a".into(),
        }])
    );
    assert_eq!(
        class(
            "lr_in_ip_input",
            90,
            "ip6.dst == {fd00:10:1::1, fe80::858:63ff:fe5f:4aa} && icmp6.type == 128 && icmp6.code == 0",
            "ip6.dst <-> ip6.src; ip.ttl = 255; icmp6.type = 129; flags.loopback = 1; next; "
        ),
        Class::Compiled(
            ["fd00:10:1::1", "fe80::858:63ff:fe5f:4aa"]
                .map(|ip| IrEntry::RouterEchoReply6 {
                    datapath: 7,
                    ip: ip.parse().unwrap()
                })
                .to_vec()
        ),
        "a port's global and link-local addresses answer pings"
    );
    assert_eq!(
        class(
            "lr_in_policy",
            31000,
            "ip6.dst == fd00:10:1::/64",
            "reg8[0..15] = 0; next;"
        ),
        Class::Neutral
    );
    assert!(
        matches!(
            class("lr_in_policy", 31000, "ip6.dst == fd00:10:1::/64", "drop;"),
            Class::Unsupported(_)
        ),
        "an IPv6 policy that changes routing is not compiled"
    );
    assert!(matches!(
        class("lr_in_ip_input", 31, r#"inport == "vpc-a-subnet-a" && ip6 && ip6.src == fd00:10:1::/64 && ip.ttl == {0, 1} && !ip.later_frag"#, r#"icmp6 {eth.dst <-> eth.src; ip6.dst = ip6.src; ip6.src = fd00:10:1::1 ; ip.ttl = 254; icmp6.type = 3; /* Time exceeded */ icmp6.code = 0; /* TTL exceeded in transit */ outport = "vpc-a-subnet-a"; flags.loopback = 1; output; };"#),
        Class::Compiled(entries) if entries == [IrEntry::TtlExceeded6 {
            datapath: 7,
            port: "vpc-a-subnet-a".into(),
            network: crate::pipeline::ir::Prefix6 {
                network: "fd00:10:1::".parse().unwrap(),
                length: 64,
            },
            source: "fd00:10:1::1".parse().unwrap(),
        }]
    ));
    // A shape without the sender's network leaves the answer undone, IPv6 routing on.
    assert!(matches!(
        class("lr_in_ip_input", 31, r#"inport == "vpc-a-subnet-a" && ip6 && ip.ttl == {0, 1} && !ip.later_frag"#, r#"icmp6 {eth.dst <-> eth.src; ip6.dst = ip6.src; ip6.src = fd00:10:1::1 ; ip.ttl = 254; icmp6.type = 3; icmp6.code = 0; outport = "vpc-a-subnet-a"; flags.loopback = 1; output; };"#),
        Class::SideDuty { entries, duty } if entries.is_empty() && duty.contains("time exceeded")
    ));
}

#[test]
fn router_flows_from_northd_compile() {
    assert!(matches!(
        class("lr_in_ip_routing", 73, "reg7 == 0 && ip4.dst == 10.1.1.0/24", r#"ip.ttl--; reg8[0..15] = 0; reg0 = 10.0.255.2; reg1 = 10.0.255.1; eth.src = 0a:58:0a:00:ff:01; outport = "vpc-a-vpc-b"; flags.loopback = 1; next;"#),
        Class::Compiled(entries) if matches!(&entries[0], IrEntry::Route { selector: RouteSelector::Destination, nexthop: Some(_), route_table: Some(0), priority: 73, .. })
    ));
    // A `src-ip` static route as northd 23.03 writes Kube-OVN's per-subnet `policySrc` route
    // (the subnet → its own gateway): matched on the source, no route-table term, prefix × 3.
    assert_eq!(
        class(
            "lr_in_ip_routing",
            72,
            "ip4.src == 10.0.1.0/24",
            r#"ip.ttl--; reg8[0..15] = 0; reg0 = 10.0.1.1; reg1 = 10.0.1.1; eth.src = 00:00:00:00:01:01; outport = "r1-s1"; flags.loopback = 1; next;"#
        ),
        Class::Compiled(vec![IrEntry::Route {
            datapath: 7,
            selector: RouteSelector::Source,
            prefix: crate::net::Ipv4Prefix {
                network: Ipv4Addr::new(10, 0, 1, 0),
                length: 24
            },
            priority: 72,
            route_table: None,
            nexthop: Some(Ipv4Addr::new(10, 0, 1, 1)),
            source_ip: Ipv4Addr::new(10, 0, 1, 1),
            source_mac: [0, 0, 0, 0, 1, 1],
            port: "r1-s1".into(),
        }])
    );
    // A route matching both the source and the destination is not a static route northd makes.
    assert!(matches!(
        class(
            "lr_in_ip_routing",
            72,
            "ip4.src == 10.0.1.0/24 && ip4.dst == 10.0.2.0/24",
            r#"ip.ttl--; reg8[0..15] = 0; reg0 = 10.0.1.1; reg1 = 10.0.1.1; eth.src = 00:00:00:00:01:01; outport = "r1-s1"; flags.loopback = 1; next;"#
        ),
        Class::Unsupported(_)
    ));
    assert!(matches!(
        class("lr_in_ip_input", 90, r#"inport == "vpc-a-subnet-a" && arp.op == 1 && arp.tpa == 10.0.1.1 && arp.spa == 10.0.1.0/24"#, "eth.dst = eth.src; eth.src = xreg0[0..47]; arp.op = 2; /* ARP reply */ arp.tha = arp.sha; arp.sha = xreg0[0..47]; arp.tpa <-> arp.spa; outport = inport; flags.loopback = 1; output;"),
        Class::Compiled(entries) if matches!(entries[0], IrEntry::RouterArpReply { .. })
    ));
    assert_eq!(
        class(
            "lr_in_ip_input",
            90,
            "ip4.dst == 10.0.1.1 && icmp4.type == 8 && icmp4.code == 0",
            "ip4.dst <-> ip4.src; ip.ttl = 255; icmp4.type = 0; flags.loopback = 1; next; "
        ),
        Class::Compiled(vec![IrEntry::RouterEchoReply {
            datapath: 7,
            ip: Ipv4Addr::new(10, 0, 1, 1)
        }])
    );
    assert!(matches!(
        class("lr_in_ip_input", 31, r#"inport == "vpc-a-subnet-a" && ip4 && ip.ttl == {0, 1} && !ip.later_frag"#, r#"icmp4 {eth.dst <-> eth.src; icmp4.type = 11; /* Time exceeded */ icmp4.code = 0; /* TTL exceeded in transit */ ip4.dst = ip4.src; ip4.src = 10.0.1.1 ; ip.ttl = 254; outport = "vpc-a-subnet-a"; flags.loopback = 1; output; };"#),
        Class::Compiled(entries) if matches!(entries[0], IrEntry::TtlExceeded { .. })
    ));
    // A gateway port's variant (from the packet's destination), answered on the way in.
    assert_eq!(
        class(
            "lr_in_ip_input",
            31,
            r#"inport == "vpc1-ext" && ip4 && ip.ttl == {0, 1} && !ip.later_frag"#,
            r#"icmp4 {eth.dst <-> eth.src; icmp4.type = 11; /* Time exceeded */ icmp4.code = 0; /* TTL exceeded in transit */ ip4.dst <-> ip4.src ; ip.ttl = 254; outport = "vpc1-ext"; flags.loopback = 1; output; };"#
        ),
        Class::Compiled(Vec::new())
    );
    assert!(
        matches!(class("lr_in_ip_routing", 194, r#"inport == "p" && ip6.dst == fe80::/64"#, "ip.ttl--; next;"), Class::Unsupported(r) if r.contains("IPv6"))
    );
}

/// The neighbour stages as northd 23.03 writes them for a router with Kube-OVN's options
/// (`always_learn_from_arp_request=false`) and without (the default, true): every flow
/// compiles; those of ARP are compiled whole (the kernel reports the senders, the daemon writes
/// MAC_Binding), those that look up or write MAC_Binding from ND are side duties (not learned),
/// never unsupported, so they do not stop the router; an unknown action still is unsupported.
#[test]
fn neighbour_learning_compiles_arp_learning_and_leaves_nd_learning_as_a_side_duty() {
    let side_duty = |stage: &str, priority: i64, match_: &str, actions: &str| match class(
        stage, priority, match_, actions,
    ) {
        Class::SideDuty { entries, duty } => {
            assert_eq!(duty, MAC_LEARNING_NOT_DONE);
            assert!(
                matches!(
                    entries.as_slice(),
                    [IrEntry::NeighbourLearning { datapath: 7, .. }]
                ),
                "{entries:?}"
            );
        }
        other => panic!("{stage} {match_} / {actions}: {other:?}"),
    };
    let learned = |stage: &str, priority: i64, match_: &str, actions: &str| {
        assert!(
            matches!(
                class(stage, priority, match_, actions),
                Class::Compiled(entries) if matches!(entries.as_slice(), [IrEntry::NeighbourLearning { datapath: 7, .. }])
            ),
            "{stage} {match_} / {actions}"
        );
    };
    let lookup = "lr_in_lookup_neighbor";
    let learn = "lr_in_learn_neighbor";
    // always_learn_from_arp_request=false
    learned(
        lookup,
        110,
        r#"inport == "r2-s1" && arp.spa == 10.0.1.0/24 && arp.tpa == 10.0.1.1 && arp.op == 1"#,
        "reg9[2] = lookup_arp(inport, arp.spa, arp.sha); reg9[3] = 1; next;",
    );
    side_duty(
        lookup,
        110,
        "nd_na && ip6.src == fe80::/10 && ip6.dst == ff00::/8",
        "reg9[2] = lookup_nd(inport, ip6.src, nd.tll); reg9[3] = lookup_nd_ip(inport, ip6.src); next;",
    );
    learned(
        lookup,
        100,
        "arp.op == 2",
        "reg9[2] = lookup_arp(inport, arp.spa, arp.sha); reg9[3] = 1; next;",
    );
    learned(
        lookup,
        100,
        r#"inport == "r2-s1" && arp.spa == 10.0.1.0/24 && arp.op == 1"#,
        "reg9[2] = lookup_arp(inport, arp.spa, arp.sha); reg9[3] = lookup_arp_ip(inport, arp.spa); next;",
    );
    side_duty(
        lookup,
        100,
        "nd_ns",
        "reg9[2] = lookup_nd(inport, ip6.src, nd.sll); reg9[3] = lookup_nd_ip(inport, ip6.src); next;",
    );
    // The default (true)
    learned(
        lookup,
        100,
        "arp.op == 2",
        "reg9[2] = lookup_arp(inport, arp.spa, arp.sha); next;",
    );
    side_duty(
        lookup,
        100,
        "nd_na",
        "reg9[2] = lookup_nd(inport, nd.target, nd.tll); next;",
    );
    // Both
    learned(learn, 90, "arp", "put_arp(inport, arp.spa, arp.sha); next;");
    side_duty(
        learn,
        95,
        "nd_na && nd.tll == 0",
        "put_nd(inport, nd.target, eth.src); next;",
    );
    side_duty(learn, 90, "nd_ns", "put_nd(inport, ip6.src, nd.sll); next;");
    let forwarding_only = |stage: &str, priority: i64, match_: &str, actions: &str| {
        assert!(
            matches!(
                class(stage, priority, match_, actions),
                Class::Compiled(entries) if matches!(entries.as_slice(), [IrEntry::NeighbourLearning { .. }])
            ),
            "{stage} {match_} / {actions}"
        );
    };
    forwarding_only(lookup, 0, "1", "reg9[2] = 1; next;");
    forwarding_only(learn, 100, "reg9[2] == 1 || reg9[3] == 0", "next;");
    forwarding_only(learn, 100, "reg9[2] == 1", "next;");
    forwarding_only(learn, 95, "nd_ns && (ip6.src == 0 || nd.sll == 0)", "next;");
    forwarding_only(learn, 0, "1", "drop;");
    // What would change forwarding is not guessed at.
    for (stage, match_, actions) in [
        (learn, "arp", "put_arp(inport, arp.spa, arp.sha); drop;"),
        (
            lookup,
            "arp.op == 2",
            "reg9[2] = lookup_arp(inport, arp.spa, arp.sha); reg0 = 1; next;",
        ),
        (learn, "arp.op == 2", "drop;"),
        (lookup, "arp", "reg9[2] = get_fdb(eth.src); next;"),
    ] {
        assert!(
            matches!(class(stage, 90, match_, actions), Class::Unsupported(r) if r.contains("neighbour learning")),
            "{stage} {match_} / {actions}"
        );
    }
}

/// The compiler, not the backend, decides which unsupported flows stop their datapath: a router
/// stage's do, except SNAT on the way out (it applies only where NAT rules exist, which other
/// checked stages express); a switch stage's are reported only.
#[test]
fn unsupported_router_flows_stop_forwarding_switch_and_snat_flows_do_not() {
    assert!(unsupported_stops_forwarding("lr_in_unsnat"));
    assert!(unsupported_stops_forwarding("lr_in_learn_neighbor"));
    assert!(!unsupported_stops_forwarding("lr_out_snat"));
    assert!(!unsupported_stops_forwarding("ls_in_acl"));
    assert!(!unsupported_stops_forwarding(""));
}

#[test]
fn flows_of_stages_not_compiled_that_only_pass_on_are_neutral() {
    // What the datapath does with a stage it does not compile: every packet goes on.
    for (stage, match_, actions) in [
        ("ls_in_pre_hairpin", "ip && ct.trk", "next;"),
        ("ls_in_qos_mark", "ip4", "next;"),
        ("ls_in_lb_aff_check", "ip", "ct_clear; next;"),
    ] {
        assert_eq!(
            class(stage, 110, match_, actions),
            Class::Neutral,
            "{stage}"
        );
    }
    // Anything else they do stays unsupported, with the feature it needs.
    for (stage, match_, actions) in [
        (
            "lr_in_dnat",
            "ct.new && ip4.dst == 10.96.0.1 && tcp.dst == 80",
            "ct_lb_mark(backends=10.16.0.2:80);",
        ),
        ("ls_in_qos_mark", "ip4", "ip.dscp = 10; next;"),
        ("ls_in_pre_hairpin", "ip", "ct_clear; drop;"),
    ] {
        assert!(
            matches!(class(stage, 100, match_, actions), Class::Unsupported(ref r) if r.ends_with("is not in the datapath yet")),
            "{stage}: {actions}"
        );
    }
}

/// ECMP as northd 23.03 writes it: the route (or policy) selects a member of its group, the
/// `*_ecmp` stage says where each member leads; weighted selections stay unsupported.
#[test]
fn ecmp_routes_policies_and_members_compile() {
    assert_eq!(
        class(
            "lr_in_ip_routing",
            73,
            "ip4.dst == 198.51.100.0/24",
            "ip.ttl--; flags.loopback = 1; reg8[0..15] = 1; reg8[16..31] = select(1, 2);"
        ),
        Class::Compiled(vec![IrEntry::EcmpRoute {
            datapath: 7,
            selector: RouteSelector::Destination,
            prefix: Prefix {
                network: Ipv4Addr::new(198, 51, 100, 0),
                length: 24,
            },
            priority: 73,
            route_table: None,
            group: 1,
            members: vec![1, 2],
        }])
    );
    let member = |stage: &str, actions: &str| {
        class(stage, 100, "reg8[0..15] == 3 && reg8[16..31] == 2", actions)
    };
    let expected = |stage| {
        Class::Compiled(vec![IrEntry::EcmpMember {
            datapath: 7,
            stage,
            group: 3,
            member: 2,
            nexthop: Ipv4Addr::new(100, 64, 0, 3),
            source_ip: Ipv4Addr::new(100, 64, 0, 1),
            source_mac: [0x0a, 0x58, 0x64, 0x40, 0, 1],
            port: "ovn-cluster-join".into(),
        }])
    };
    assert_eq!(
        member(
            "lr_in_ip_routing_ecmp",
            r#"reg0 = 100.64.0.3; reg1 = 100.64.0.1; eth.src = 0a:58:64:40:00:01; outport = "ovn-cluster-join"; next;"#
        ),
        expected(EcmpStage::Route)
    );
    assert_eq!(
        member(
            "lr_in_policy_ecmp",
            r#"reg0 = 100.64.0.3; reg1 = 100.64.0.1; eth.src = 0a:58:64:40:00:01; outport = "ovn-cluster-join"; flags.loopback = 1; next;"#
        ),
        expected(EcmpStage::Policy)
    );
    assert_eq!(
        class(
            "lr_in_policy",
            29000,
            "ip4.src == 10.16.0.0/16",
            "reg8[0..15] = 3; reg8[16..31] = select(1, 2);"
        ),
        Class::Compiled(vec![IrEntry::RouterPolicy {
            datapath: 7,
            priority: 29000,
            source: Some(Prefix {
                network: Ipv4Addr::new(10, 16, 0, 0),
                length: 16,
            }),
            destination: None,
            l4: None,
            verdict: PolicyVerdict::RerouteEcmp {
                group: 3,
                members: vec![1, 2],
            },
        }])
    );
    // The stages' own rows stay neutral.
    assert_eq!(
        class("lr_in_policy_ecmp", 150, "reg8[0..15] == 0", "next;"),
        Class::Neutral
    );
    assert_eq!(
        class("lr_in_ip_routing_ecmp", 0, "1", "drop;"),
        Class::Neutral
    );
    // Weighted members are not what the kernel's hash picks from.
    assert!(matches!(
        class(
            "lr_in_policy",
            29000,
            "ip4.src == 10.16.0.0/16",
            "reg8[0..15] = 3; reg8[16..31] = select(1=80, 2=20);"
        ),
        Class::Unsupported(_)
    ));
}

/// A router port with a route table (`options:route_table`): northd sets `reg7` by inport; the
/// static routes of that table match `reg7 == N`.
#[test]
fn route_table_selection_and_table_routes_compile() {
    assert_eq!(
        class(
            "lr_in_ip_routing_pre",
            100,
            r#"inport == "vpc-a-subnet-a2""#,
            "reg7 = 1; next;"
        ),
        Class::Compiled(vec![IrEntry::RouteTableOfPort {
            datapath: 7,
            port: "vpc-a-subnet-a2".into(),
            table: 1,
        }])
    );
    assert_eq!(
        class("lr_in_ip_routing_pre", 0, "1", "reg7 = 0; next;"),
        Class::Neutral
    );
    assert!(matches!(
        class(
            "lr_in_ip_routing",
            73,
            "reg7 == 1 && ip4.dst == 192.168.50.0/24",
            r#"ip.ttl--; reg8[0..15] = 0; reg0 = 10.0.1.11; reg1 = 10.0.1.1; eth.src = 0a:58:00:00:00:01; outport = "vpc-a-subnet-a"; flags.loopback = 1; next;"#
        ),
        Class::Compiled(entries) if matches!(&entries[0], IrEntry::Route { route_table: Some(1), .. })
    ));
    assert!(matches!(
        class(
            "lr_in_ip_routing_pre",
            100,
            r#"inport == "p""#,
            "reg7 = reg5; next;"
        ),
        Class::Unsupported(_)
    ));
}

#[test]
fn discard_routes_compile() {
    assert_eq!(
        class(
            "lr_in_ip_routing",
            73,
            "reg7 == 0 && ip4.dst == 192.168.60.0/24",
            "drop;"
        ),
        Class::Compiled(vec![IrEntry::DiscardRoute {
            datapath: 7,
            selector: RouteSelector::Destination,
            prefix: Prefix {
                network: Ipv4Addr::new(192, 168, 60, 0),
                length: 24,
            },
            priority: 73,
            route_table: Some(0),
        }])
    );
}

/// Policies on one transport protocol's ports (`Vpc.spec.policyRoutes` with L4 matches): the
/// protocol and port ranges ride along; mixed protocols stay unsupported.
#[test]
fn policies_on_transport_ports_compile() {
    let l4 = |match_: &str| match class("lr_in_policy", 2800, match_, "drop;") {
        Class::Compiled(entries) => entries
            .into_iter()
            .map(|e| match e {
                IrEntry::RouterPolicy { l4, .. } => l4,
                _ => None,
            })
            .collect::<Vec<_>>(),
        other => panic!("{match_}: {other:?}"),
    };
    let tcp = |source_ports, destination_ports| {
        Some(L4Match {
            protocol: 6,
            source_ports,
            destination_ports,
        })
    };
    assert_eq!(
        l4("ip4.dst == 198.51.100.0/24 && 40000 <= tcp.src <= 40001"),
        [tcp(Some((40000, 40001)), None)]
    );
    assert_eq!(
        l4("ip4.src == 10.0.0.0/8 && tcp && tcp.dst == {80, 443}"),
        [tcp(None, Some((80, 80))), tcp(None, Some((443, 443)))]
    );
    assert_eq!(l4("tcp.dst >= 1024"), [tcp(None, Some((1024, u16::MAX)))]);
    assert!(matches!(
        class(
            "lr_in_policy",
            2800,
            "tcp.dst == 80 && udp.dst == 53",
            "drop;"
        ),
        Class::Unsupported(_)
    ));
    assert!(matches!(
        class(
            "lr_in_policy",
            2800,
            "ip4.dst == 10.0.0.0/8 && tcp.flags == 2",
            "drop;"
        ),
        Class::Unsupported(_)
    ));
}

#[test]
fn router_advertisement_flows_from_northd_compile() {
    // northd 23.03's pair for a router port with Kube-OVN's default `ipv6_ra_configs`.
    let options = class(
        "lr_in_nd_ra_options",
        50,
        r#"inport == "ovn-cluster-ovn-default" && ip6.dst == ff02::2 && nd_rs"#,
        r#"reg0[5] = put_nd_ra_opts(addr_mode = "dhcpv6_stateful", slla = 00:00:00:aa:bb:cc, prefix = fd00:10:16::/64); next;"#,
    );
    assert!(matches!(
        options,
        Class::Compiled(entries) if matches!(&entries[..], [IrEntry::RouterAdvertisement { datapath: 7, port, mac, message }]
            if port == "ovn-cluster-ovn-default" && *mac == [0, 0, 0, 0xaa, 0xbb, 0xcc] && message.len() == 56 && message[5] == 0x80)
    ));
    assert_eq!(
        class(
            "lr_in_nd_ra_response",
            50,
            r#"inport == "ovn-cluster-ovn-default" && ip6.dst == ff02::2 && nd_ra && reg0[5]"#,
            r#"eth.dst = eth.src; eth.src = 00:00:00:aa:bb:cc; ip6.dst = ip6.src; ip6.src = fe80::200:ff:feaa:bbcc; outport = inport; flags.loopback = 1; output;"#,
        ),
        Class::Neutral
    );
    // A response from another address than the port's link-local one is not the kernel's.
    assert!(matches!(
        class(
            "lr_in_nd_ra_response",
            50,
            r#"inport == "ovn-cluster-ovn-default" && ip6.dst == ff02::2 && nd_ra && reg0[5]"#,
            r#"eth.dst = eth.src; eth.src = 00:00:00:aa:bb:cc; ip6.dst = ip6.src; ip6.src = fe80::1; outport = inport; flags.loopback = 1; output;"#,
        ),
        Class::Unsupported(_)
    ));
    // Options ovn-controller would not encode: the answer is left undone, routing goes on.
    assert!(matches!(
        class(
            "lr_in_nd_ra_options",
            50,
            r#"inport == "rp" && ip6.dst == ff02::2 && nd_rs"#,
            r#"reg0[5] = put_nd_ra_opts(addr_mode = "slaac", slla = 00:00:00:aa:bb:cc); next;"#,
        ),
        Class::SideDuty { entries, duty } if entries.is_empty() && duty.contains("no prefix")
    ));
}

/// A distributed FIP's flows as northd 23.03 writes them for Kube-OVN's `OvnFip` (172.30.0.11
/// of e2.ns, 10.60.2.3, its MAC as external MAC, on gateway port vpc-ext-external): the redirect
/// exemption and both SNAT flows are the rule; the rest compile to nothing more (the rule carries
/// them out), as does the redirect of everything else (the gateway port's entry carries it
/// out); the flow it does not carry out (the hairpin back into the router) stays unsupported,
/// as does a rule's flow of another shape.
#[test]
fn a_distributed_fips_flows_compile_to_its_rule() {
    let rule = IrEntry::DistributedNat {
        datapath: 7,
        gateway_port: "vpc-ext-external".into(),
        logical_ip: Ipv4Addr::new(10, 60, 2, 3),
        external_ip: Ipv4Addr::new(172, 30, 0, 11),
        external_mac: [0x0a, 0x58, 0x85, 0x1a, 0xd0, 0x96],
        logical_port: "e2.ns".into(),
    };
    for (stage, match_, actions) in [
        (
            "lr_in_gw_redirect",
            r#"ip4.src == 10.60.2.3 && outport == "vpc-ext-external" && is_chassis_resident("e2.ns")"#,
            "eth.src = 0a:58:85:1a:d0:96; reg1 = 172.30.0.11; next;",
        ),
        (
            "lr_out_snat",
            r#"ip && ip4.src == 10.60.2.3 && outport == "vpc-ext-external" && is_chassis_resident("e2.ns")"#,
            "eth.src = 0a:58:85:1a:d0:96; ct_snat_in_czone(172.30.0.11);",
        ),
        (
            "lr_out_snat",
            r#"ip && ip4.src == 10.60.2.3 && outport == "vpc-ext-external" && is_chassis_resident("e2.ns") && reg9[4] == 1"#,
            "eth.src = 0a:58:85:1a:d0:96; reg9[4] = 0; ct_snat(172.30.0.11);",
        ),
    ] {
        assert_eq!(
            class(stage, 100, match_, actions),
            Class::Compiled(vec![rule.clone()]),
            "{stage} {match_}"
        );
    }
    for (stage, match_, actions) in [
        (
            "lr_in_dnat",
            r#"ip && ip4.dst == 172.30.0.11 && inport == "vpc-ext-external""#,
            "ct_dnat_in_czone(10.60.2.3);",
        ),
        (
            "lr_in_unsnat",
            r#"ip && ip4.dst == 172.30.0.11 && inport == "vpc-ext-external" && flags.loopback == 0"#,
            "ct_snat_in_czone;",
        ),
        (
            "lr_in_unsnat",
            r#"ip && ip4.dst == 172.30.0.11 && inport == "vpc-ext-external" && flags.loopback == 1 && flags.use_snat_zone == 1"#,
            "ct_snat;",
        ),
        (
            "lr_out_undnat",
            r#"ip && ip4.src == 10.60.2.3 && outport == "vpc-ext-external""#,
            "eth.src = 0a:58:85:1a:d0:96; ct_dnat_in_czone;",
        ),
        (
            "lr_in_admission",
            r#"eth.dst == 0a:58:85:1a:d0:96 && inport == "vpc-ext-external" && is_chassis_resident("e2.ns")"#,
            "xreg0[0..47] = 0a:58:ba:12:b2:f2; next;",
        ),
        (
            "ls_in_l2_lkup",
            r#"eth.dst == 0a:58:85:1a:d0:96 && is_chassis_resident("e2.ns")"#,
            r#"outport = "external-vpc-ext"; output;"#,
        ),
        (
            "lr_in_ip_input",
            r#"inport == "vpc-ext-external" && arp.op == 1 && arp.tpa == 172.30.0.11 && is_chassis_resident("e2.ns")"#,
            "eth.dst = eth.src; eth.src = 0a:58:85:1a:d0:96; arp.op = 2; /* ARP reply */ arp.tha = arp.sha; arp.sha = 0a:58:85:1a:d0:96; arp.tpa <-> arp.spa; outport = inport; flags.loopback = 1; output;",
        ),
        (
            "lr_in_ip_input",
            r#"inport == "vpc-ext-external" && arp.op == 1 && arp.tpa == 172.30.0.11"#,
            "drop;",
        ),
        (
            "lr_in_arp_resolve",
            r#"inport == "vpc-ext-external" && outport == "vpc-ext-external" && ip4.dst == 172.30.0.11"#,
            "drop;",
        ),
        (
            "lr_out_chk_dnat_local",
            r#"ip && ip4.dst == 172.30.0.11 && is_chassis_resident("e2.ns")"#,
            "reg9[4] = 1; next;",
        ),
        // The gateway port's redirect itself, which its entry carries out.
        (
            "lr_in_gw_redirect",
            r#"outport == "vpc-ext-external""#,
            r#"outport = "cr-vpc-ext-external"; next;"#,
        ),
    ] {
        assert_eq!(
            class(stage, 100, match_, actions),
            Class::Compiled(Vec::new()),
            "{stage} {match_}"
        );
    }
    for (stage, match_, actions) in [
        (
            "lr_out_egr_loop",
            r#"ip4.dst == 172.30.0.11 && outport == "vpc-ext-external" && is_chassis_resident("e2.ns")"#,
            "clone { ct_clear; inport = outport; outport = \"\"; eth.dst <-> eth.src; flags = 0; flags.loopback = 1; flags.use_snat_zone = reg9[4]; reg0 = 0; reg1 = 0; reg2 = 0; reg3 = 0; reg4 = 0; reg5 = 0; reg6 = 0; reg7 = 0; reg8 = 0; reg9 = 0; reg9[0] = 1; next(pipeline=ingress, table=0); };",
        ),
        // A SNAT that also matches a destination is not a distributed rule's.
        (
            "lr_out_snat",
            r#"ip && ip4.src == 10.60.2.3 && ip4.dst == 1.2.3.4 && outport == "vpc-ext-external" && is_chassis_resident("e2.ns")"#,
            "eth.src = 0a:58:85:1a:d0:96; ct_snat_in_czone(172.30.0.11);",
        ),
        // A centralized rule's SNAT without a resident port.
        (
            "lr_out_snat",
            r#"ip && ip4.src == 10.60.1.0/24 && outport == "vpc-ext-external""#,
            "ct_snat_in_czone(172.30.0.10);",
        ),
    ] {
        assert!(
            matches!(class(stage, 100, match_, actions), Class::Unsupported(_)),
            "{stage} {match_}"
        );
    }
}

/// A centralized SNAT rule's flows where the gateway's port resides (northd 23.03, `snat` from
/// 10.60.1.0/24 to 172.30.0.100 on gateway port vpc-ext-external): the SNAT is the rule, its
/// hairpin twin and the un-SNAT flows compile to nothing more; a DNAT is one
/// (`CentralizedDnat`), its replies' reverse nothing more; another resident flow (a load
/// balancer) and shapes beyond these are neutral (the compiler fences them).
#[test]
fn a_centralized_snat_rules_resident_flows() {
    let resident = |stage: &str, match_: &str, actions: &str| {
        let match_ = parse_match(&format!(
            r#"{match_} && is_chassis_resident("cr-vpc-ext-external")"#
        ))
        .unwrap();
        let actions = parse_actions(actions).unwrap();
        classify_resident(
            &Flow {
                datapath: 7,
                stage,
                priority: 153,
                match_: &match_,
                actions: &actions,
            },
            "cr-vpc-ext-external",
        )
    };
    let source = r#"ip && ip4.src == 10.60.1.0/24 && outport == "vpc-ext-external""#;
    assert_eq!(
        resident("lr_out_snat", source, "ct_snat_in_czone(172.30.0.100);"),
        Class::Compiled(vec![IrEntry::CentralizedSnat {
            datapath: 7,
            gateway_port: "vpc-ext-external".into(),
            logical: crate::net::Ipv4Prefix {
                network: Ipv4Addr::new(10, 60, 1, 0),
                length: 24,
            },
            external: Ipv4Addr::new(172, 30, 0, 100),
        }])
    );
    let destination = r#"ip && ip4.dst == 172.30.0.100 && inport == "vpc-ext-external""#;
    for (stage, match_, actions) in [
        (
            "lr_out_snat",
            format!("{source} && reg9[4] == 1"),
            "reg9[4] = 0; ct_snat(172.30.0.100);",
        ),
        (
            "lr_in_unsnat",
            format!("{destination} && flags.loopback == 0"),
            "ct_snat_in_czone;",
        ),
        (
            "lr_in_unsnat",
            format!("{destination} && flags.loopback == 1 && flags.use_snat_zone == 1"),
            "ct_snat;",
        ),
    ] {
        assert_eq!(
            resident(stage, &match_, actions),
            Class::Compiled(Vec::new()),
            "{stage} {match_}"
        );
    }
    // A centralized FIP's (or DNAT rule's) DNAT, and its reverse for the replies.
    assert_eq!(
        resident("lr_in_dnat", destination, "ct_dnat_in_czone(10.60.1.3);"),
        Class::Compiled(vec![IrEntry::CentralizedDnat {
            datapath: 7,
            gateway_port: "vpc-ext-external".into(),
            external: Ipv4Addr::new(172, 30, 0, 100),
            logical: Ipv4Addr::new(10, 60, 1, 3),
        }])
    );
    assert_eq!(
        resident(
            "lr_out_undnat",
            r#"ip && ip4.src == 10.60.1.3 && outport == "vpc-ext-external""#,
            "ct_dnat_in_czone;"
        ),
        Class::Compiled(Vec::new())
    );
    for (stage, match_, actions) in [
        // A load balancer on the gateway router.
        (
            "lr_in_dnat",
            destination.to_string(),
            "ct_lb_mark(backends=10.60.1.3:80);",
        ),
        // A SNAT to a destination too is not a plain rule's.
        (
            "lr_out_snat",
            format!("{source} && ip4.dst == 1.2.3.4"),
            "ct_snat_in_czone(172.30.0.100);",
        ),
        // The hairpin's shape without its mark's reset.
        (
            "lr_out_snat",
            format!("{source} && reg9[4] == 1"),
            "ct_snat(172.30.0.100);",
        ),
    ] {
        assert_eq!(
            resident(stage, &match_, actions),
            Class::Neutral,
            "{stage} {match_}"
        );
    }
}

/// A router load balancer's flows (Kube-OVN's `OvnDnatRule`s `172.30.0.110:8080` → l1
/// `10.86.1.2:80` and a UDP one, on gateway port vpc-l-external) as northd 23.03 writes them,
/// with `ct_mark` and, for chassis that do not advertise `ct_lb_mark`, `ct_label`: the VIP where
/// the gateway resides is the entry; the defrag lookup, the established and related flows,
/// the replies' reverse and the hairpin mark compile to nothing more; other actions on a VIP
/// fence the gateway; the VIP's ARP answer on another port is a side duty.
#[test]
fn a_router_load_balancers_flows_compile_to_its_vips() {
    let redirect = "cr-vpc-l-external";
    let resident = |stage: &str, match_: &str, actions: &str| {
        let match_ =
            parse_match(&format!(r#"{match_} && is_chassis_resident("{redirect}")"#)).unwrap();
        let actions = parse_actions(actions).unwrap();
        let flow = Flow {
            datapath: 7,
            stage,
            priority: 120,
            match_: &match_,
            actions: &actions,
        };
        classify_resident(&flow, redirect)
    };
    let vip = |port, protocol, backend: (Ipv4Addr, u16)| {
        Class::Compiled(vec![IrEntry::RouterLoadBalancer {
            datapath: 7,
            redirect: redirect.into(),
            vip: Box::new(crate::pipeline::ir::LbVip {
                vip: Ipv4Addr::new(172, 30, 0, 110),
                port: Some(port),
                protocol: Some(protocol),
                backends: vec![crate::pipeline::ir::LbBackend {
                    ip: backend.0,
                    port: Some(backend.1),
                }],
                hash_fields: Vec::new(),
                reject: false,
            }),
        }])
    };
    let new = "ct.new && !ct.rel && ip4 && ip4.dst == 172.30.0.110";
    for keyword in ["ct_lb_mark", "ct_lb"] {
        assert_eq!(
            resident(
                "lr_in_dnat",
                &format!("{new} && tcp && tcp.dst == 8080"),
                &format!("{keyword}(backends=10.86.1.2:80);")
            ),
            vip(
                8080,
                crate::pipeline::ir::LbProtocol::Tcp,
                (Ipv4Addr::new(10, 86, 1, 2), 80)
            )
        );
    }
    assert_eq!(
        resident(
            "lr_in_dnat",
            &format!("{new} && udp && udp.dst == 5353"),
            "ct_lb_mark(backends=10.86.1.3:53);"
        ),
        vip(
            5353,
            crate::pipeline::ir::LbProtocol::Udp,
            (Ipv4Addr::new(10, 86, 1, 3), 53)
        )
    );
    // Options the datapath does not carry (force SNAT), and backends without the VIP's port:
    // the gateway is fenced.
    let fence = Class::Compiled(vec![IrEntry::CentralizedNat {
        datapath: 7,
        redirect: redirect.into(),
    }]);
    for actions in [
        "flags.force_snat_for_lb = 1; ct_lb_mark(backends=10.86.1.2:80);",
        "ct_lb_mark(backends=10.86.1.2);",
    ] {
        assert_eq!(
            resident(
                "lr_in_dnat",
                &format!("{new} && tcp && tcp.dst == 8080"),
                actions
            ),
            fence,
            "{actions}"
        );
    }
    assert_eq!(
        resident(
            "lr_out_undnat",
            r#"ip4 && ((ip4.src == 10.86.1.2 && tcp.src == 80) || (ip4.src == 10.86.1.3 && tcp.src == 80)) && outport == "vpc-l-external""#,
            "ct_dnat_in_czone;"
        ),
        Class::Compiled(Vec::new())
    );
    for mark in ["ct_mark", "ct_label"] {
        for (stage, match_, actions) in [
            (
                "lr_in_defrag",
                "ip && ip4.dst == 172.30.0.110".to_string(),
                "ct_dnat;",
            ),
            (
                "lr_in_dnat",
                format!("ct.est && !ct.rel && !ct.new && {mark}.natted && {mark}.force_snat == 1"),
                "flags.force_snat_for_lb = 1; next;",
            ),
            (
                "lr_in_dnat",
                format!("ct.rel && !ct.est && !ct.new && {mark}.skip_snat == 1"),
                "flags.skip_snat_for_lb = 1; ct_commit_nat;",
            ),
            (
                "lr_in_dnat",
                "ct.rel && !ct.est && !ct.new".to_string(),
                "ct_commit_nat;",
            ),
            (
                "lr_out_chk_dnat_local",
                format!("ip && {mark}.natted == 1"),
                "reg9[4] = 1; next;",
            ),
        ] {
            assert_eq!(
                class(stage, 50, &match_, actions),
                Class::Compiled(Vec::new()),
                "{stage} {match_}"
            );
        }
    }
    // Passing established connections on is what the datapath does anyway.
    assert_eq!(
        class(
            "lr_in_dnat",
            50,
            "ct.est && !ct.rel && !ct.new && ct_mark.natted",
            "next;"
        ),
        Class::Neutral
    );
    // Not a balanced connection's: a new one balanced without residence stays unsupported.
    assert!(matches!(
        class(
            "lr_in_dnat",
            120,
            &format!("{new} && tcp && tcp.dst == 8080"),
            "ct_lb_mark(backends=10.86.1.2:80);"
        ),
        Class::Unsupported(_)
    ));
    assert!(matches!(
        class(
            "lr_in_ip_input",
            90,
            r#"inport == "vpc-l-subnet-l" && arp.op == 1 && arp.tpa == {172.30.0.110}"#,
            "eth.dst = eth.src; eth.src = xreg0[0..47]; arp.op = 2; /* ARP reply */ arp.tha = arp.sha; arp.sha = xreg0[0..47]; arp.tpa <-> arp.spa; outport = inport; flags.loopback = 1; output;"
        ),
        Class::SideDuty { .. }
    ));
}
