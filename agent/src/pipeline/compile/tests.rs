//! Compiler tests on a replica built from update notifications: the rows the IR gets its typed
//! addresses and chassis encaps from.

use std::{collections::BTreeMap, net::Ipv4Addr, sync::Arc};

use serde_json::{Value, json};

use super::*;
use crate::{
    net::{Ipv4Prefix, LspAddress},
    ovsdb::{
        replica::TableChanges,
        schema::DatabaseSchema,
        session::{MonitorMethod, SessionEvent, UpdateFormat},
    },
    pipeline::ir::{PolicyVerdict, PortKind},
};

const DP: &str = "00000000-0000-0000-0000-0000000000a1";
const PB: &str = "00000000-0000-0000-0000-0000000000b1";
const ENCAP: &str = "00000000-0000-0000-0000-0000000000e1";
const ROUTER: &str = "00000000-0000-0000-0000-0000000000a2";

/// A Southbound with one switch (tunnel key 5), one pod port with `mac` and `port_security` as
/// given, and node2's Geneve endpoint; the compiler's first diff.
fn southbound(mac: Value, port_security: Value) -> (Southbound, Compiler, IrDiff) {
    let set = json!({"type": {"key": "string", "min": 0, "max": "unlimited"}});
    let map = json!({"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}});
    let optional = |key: Value| json!({"type": {"key": key, "min": 0, "max": 1}});
    let schema = DatabaseSchema::parse(&json!({"name": "OVN_Southbound", "version": "20.27.0",
    "tables": {
        "Datapath_Binding": {"columns": {"tunnel_key": {"type": "integer"}, "external_ids": map}},
        "Port_Binding": {"columns": {"logical_port": {"type": "string"},
            "datapath": optional(json!({"type": "uuid"})), "tunnel_key": {"type": "integer"},
            "type": {"type": "string"}, "mac": set, "port_security": set, "options": map,
            "chassis": optional(json!({"type": "uuid"}))}},
        "Chassis": {"columns": {"name": {"type": "string"}}},
        "Encap": {"columns": {"type": {"type": "string"}, "ip": {"type": "string"},
            "chassis_name": {"type": "string"}, "options": map}},
        "Logical_Flow": {"columns": {"logical_datapath": optional(json!({"type": "uuid"})),
            "priority": {"type": "integer"}, "match": {"type": "string"},
            "actions": {"type": "string"}, "external_ids": map}},
        "Address_Set": {"columns": {"name": {"type": "string"}, "addresses": set}},
        "MAC_Binding": {"columns": {"logical_port": {"type": "string"},
            "ip": {"type": "string"}, "mac": {"type": "string"},
            "datapath": optional(json!({"type": "uuid"})), "timestamp": {"type": "integer"}}},
    }}))
    .unwrap();
    let monitored: BTreeMap<String, Vec<String>> = schema
        .tables
        .iter()
        .map(|(name, table)| (name.clone(), table.columns.keys().cloned().collect()))
        .collect();
    let mut sb = Southbound::new();
    let changes = sb.apply(&SessionEvent::Snapshot {
        remote: "test".into(),
        method: MonitorMethod::MonitorCondSince,
        schema: Arc::new(schema),
        monitored,
        updates: json!({
            "Datapath_Binding": {DP: {"initial": {"tunnel_key": 5,
                "external_ids": ["map", [["name", "subnet-a"]]]}},
                ROUTER: {"initial": {"tunnel_key": 9,
                "external_ids": ["map", [["name", "vpc-a"], ["logical-router", ROUTER]]]}}},
            "Port_Binding": {PB: {"initial": {"logical_port": "pod.ns", "tunnel_key": 3,
                "datapath": ["uuid", DP], "mac": mac, "port_security": port_security}}},
            "Encap": {ENCAP: {"initial": {"type": "geneve", "ip": "172.18.0.3",
                "chassis_name": "node2"}}},
        })
        .into(),
        format: UpdateFormat::Update2,
        resumed: false,
    });
    let mut compiler = Compiler::new();
    let diff = compiler.apply(&sb, &changes);
    (sb, compiler, diff)
}

fn port_of(diff: &IrDiff) -> (&[LspAddress], &[LspAddress]) {
    diff.added
        .iter()
        .find_map(|entry| match entry {
            IrEntry::Port {
                addresses,
                port_security,
                kind: PortKind::Vif { .. },
                ..
            } => Some((addresses.as_slice(), port_security.as_slice())),
            _ => None,
        })
        .unwrap()
}

#[test]
fn port_addresses_reach_the_ir_typed_and_bad_entries_are_counted_and_left_out() {
    let (_, compiler, diff) = southbound(
        json!(["set", ["0a:58:0a:00:01:02 10.0.1.2", "unknown"]]),
        json!([
            "set",
            ["0a:58:0a:00:01:02 10.0.1.2 not-an-ip", "0a:58:0a:00:01:03"]
        ]),
    );
    let (addresses, port_security) = port_of(&diff);
    let pod = LspAddress {
        mac: [0x0a, 0x58, 0x0a, 0x00, 0x01, 0x02],
        ipv4: vec![Ipv4Prefix {
            network: Ipv4Addr::new(10, 0, 1, 2),
            length: 32,
        }],
        ipv6: Vec::new(),
    };
    assert_eq!(addresses, [pod], "the keyword \"unknown\" is no address");
    assert_eq!(
        port_security,
        [LspAddress {
            mac: [0x0a, 0x58, 0x0a, 0x00, 0x01, 0x03],
            ..LspAddress::default()
        }],
        "the entry with a bad word is left out, as OVN does"
    );
    assert_eq!(compiler.bad_addresses(), 1);
}

#[test]
fn encap_rows_become_chassis_encaps_and_change_incrementally() {
    let (mut sb, mut compiler, diff) =
        southbound(json!("0a:58:0a:00:01:02 10.0.1.2"), json!(["set", []]));
    let with_csum = |ip: [u8; 4], csum: bool| IrEntry::ChassisEncap {
        chassis: "node2".into(),
        ip: Ipv4Addr::from(ip).into(),
        csum,
    };
    let node2 = |ip: [u8; 4]| with_csum(ip, false);
    assert!(diff.added.contains(&node2([172, 18, 0, 3])), "{diff:?}");
    assert_eq!(compiler.bad_addresses(), 0);

    let mut update = |row: Value| {
        let changes = sb.apply(&SessionEvent::Update {
            updates: json!({"Encap": {ENCAP: row}}).into(),
            format: UpdateFormat::Update2,
        });
        compiler.apply(&sb, &changes)
    };
    // The endpoint moves: exactly that entry changes.
    let diff = update(json!({"modify": {"ip": "172.18.0.9"}}));
    assert_eq!(diff.added, [node2([172, 18, 0, 9])]);
    assert_eq!(diff.removed, [node2([172, 18, 0, 3])]);
    // Not Geneve: no endpoint to tunnel to.
    let diff = update(json!({"modify": {"type": "vxlan"}}));
    assert!(diff.added.is_empty());
    assert_eq!(diff.removed, [node2([172, 18, 0, 9])]);
    // An IPv6 endpoint is one (nodes on an IPv6 underlay tunnel to it); an address that is
    // not an IP is not.
    let diff = update(json!({"modify": {"type": "geneve", "ip": "fd00::9"}}));
    let ipv6 = IrEntry::ChassisEncap {
        chassis: "node2".into(),
        ip: "fd00::9".parse().unwrap(),
        csum: false,
    };
    assert_eq!((diff.added, diff.removed), (vec![ipv6.clone()], vec![]));
    let diff = update(json!({"modify": {"ip": "node2.example"}}));
    assert_eq!((diff.added, diff.removed), (vec![], vec![ipv6]));
    let diff = update(json!({"modify": {"ip": "172.18.0.3"}}));
    assert_eq!(diff.added, [node2([172, 18, 0, 3])]);
    // `options:csum=true` asks for outer checksums; anything else (or nothing) does not.
    let diff = update(json!({"modify": {"options": ["map", [["csum", "true"]]]}}));
    assert_eq!(diff.added, [with_csum([172, 18, 0, 3], true)]);
    assert_eq!(diff.removed, [node2([172, 18, 0, 3])]);
    let diff = update(json!({"modify": {"options": ["map", [["csum", "yes"]]]}}));
    assert_eq!(diff.added, [node2([172, 18, 0, 3])]);
    let diff = update(json!({"delete": null}));
    assert_eq!(diff.removed, [node2([172, 18, 0, 3])]);
}

/// MAC_Binding rows of either family become learned neighbours of their router.
#[test]
fn mac_bindings_of_both_families_become_learned_neighbours() {
    let (mut sb, mut compiler, _) = southbound(json!(["set", []]), json!(["set", []]));
    let mut update = |uuid: &str, row: Value| {
        let changes = sb.apply(&SessionEvent::Update {
            updates: json!({"MAC_Binding": {uuid: row}}).into(),
            format: UpdateFormat::Update2,
        });
        compiler.apply(&sb, &changes)
    };
    let mac = [0x0a, 0x58, 0x0a, 0, 2, 5];
    let binding = |ip: &str| {
        json!({"insert": {"logical_port": "vpc-a-subnet-b", "ip": ip,
            "mac": "0a:58:0a:00:02:05", "datapath": ["uuid", ROUTER]}})
    };
    let diff = update("00000000-0000-0000-0000-0000000000c1", binding("10.0.2.5"));
    assert_eq!(
        diff.added,
        [IrEntry::LearnedNeighbour {
            datapath: 9,
            port: "vpc-a-subnet-b".into(),
            ip: Ipv4Addr::new(10, 0, 2, 5),
            mac,
        }]
    );
    let diff = update(
        "00000000-0000-0000-0000-0000000000c2",
        binding("fd00:10:2::5"),
    );
    assert_eq!(
        diff.added,
        [IrEntry::LearnedNeighbour6 {
            datapath: 9,
            port: "vpc-a-subnet-b".into(),
            ip: "fd00:10:2::5".parse().unwrap(),
            mac,
        }]
    );
    let diff = update(
        "00000000-0000-0000-0000-0000000000c3",
        binding("not an address"),
    );
    assert!(diff.is_empty(), "{diff:?}");
}

/// The compiler decides which unsupported flows stop their router: a NAT flow in an ingress
/// router stage does (NotForwardable beside the Unsupported report, gone with the flow), one in
/// `lr_out_snat` is only reported, one only IPv6 can match stops the router's IPv6 only.
#[test]
fn unsupported_router_flows_make_their_router_not_forwardable_as_the_compiler_decides() {
    let (mut sb, mut compiler, _) = southbound(json!(["set", []]), json!(["set", []]));
    let mut flow = |uuid: &str, row: Value| {
        let changes = sb.apply(&SessionEvent::Update {
            updates: json!({"Logical_Flow": {uuid: row}}).into(),
            format: UpdateFormat::Update2,
        });
        compiler.apply(&sb, &changes)
    };
    let nat = |stage: &str| {
        json!({"insert": {"logical_datapath": ["uuid", ROUTER], "priority": 100,
            "match": "ip && ip4.dst == 172.18.0.100", "actions": "ct_snat;",
            "external_ids": ["map", [["stage-name", stage]]]}})
    };
    let unsnat = "00000000-0000-0000-0000-0000000000f1";
    let diff = flow(unsnat, nat("lr_in_unsnat"));
    let blocking: Vec<&IrEntry> = diff
        .added
        .iter()
        .filter(|e| matches!(e, IrEntry::NotForwardable { .. }))
        .collect();
    assert_eq!(
        blocking,
        [&IrEntry::NotForwardable {
            datapath: 9,
            reason: Unforwardable::UnsupportedFlow {
                stage: "lr_in_unsnat".into(),
                reason: "NAT is not in the datapath yet".into(),
            },
        }],
        "{diff:?}"
    );
    assert!(
        diff.added
            .iter()
            .any(|e| matches!(e, IrEntry::Unsupported { datapath: 9, .. })),
        "still reported: {diff:?}"
    );
    let diff = flow("00000000-0000-0000-0000-0000000000f2", nat("lr_out_snat"));
    assert!(
        diff.added
            .iter()
            .all(|e| !matches!(e, IrEntry::NotForwardable { .. })),
        "{diff:?}"
    );
    let diff = flow(unsnat, json!({"delete": null}));
    assert!(
        diff.removed
            .iter()
            .any(|e| matches!(e, IrEntry::NotForwardable { datapath: 9, .. })),
        "{diff:?}"
    );
    // A flow only IPv6 can match keeps only the router's IPv6 out.
    let nat6 = json!({"insert": {"logical_datapath": ["uuid", ROUTER], "priority": 100,
        "match": "ip && ip6.dst == fd00::100", "actions": "ct_snat;",
        "external_ids": ["map", [["stage-name", "lr_in_unsnat"]]]}});
    let diff = flow("00000000-0000-0000-0000-0000000000f3", nat6);
    let blocking: Vec<&IrEntry> = diff
        .added
        .iter()
        .filter(|e| matches!(e, IrEntry::NotForwardable { .. }))
        .collect();
    assert_eq!(
        blocking,
        [&IrEntry::NotForwardable {
            datapath: 9,
            reason: Unforwardable::UnsupportedIpv6Flow {
                stage: "lr_in_unsnat".into(),
                reason: "NAT is not in the datapath yet".into(),
            },
        }],
        "{diff:?}"
    );
}

/// Kube-OVN's distributed-gateway policy names the address set of a node's pods: each address
/// is one policy entry, a pod joining the set adds its own entry and nothing else, and a set
/// that is not (or no longer) in the Southbound makes the policy unsupported, its router not
/// forwarded for, until it is back.
#[test]
fn address_sets_in_policies_expand_to_one_entry_per_address_and_change_incrementally() {
    let (mut sb, mut compiler, _) = southbound(json!(["set", []]), json!(["set", []]));
    // The set's own member entries (what ACLs read) are left out here: the policy entries are
    // what this is about.
    let mut update = |updates: Value| {
        let changes = sb.apply(&SessionEvent::Update {
            updates: updates.into(),
            format: UpdateFormat::Update2,
        });
        let mut diff = compiler.apply(&sb, &changes);
        let member = |e: &IrEntry| matches!(e, IrEntry::AddressSetMember { .. });
        diff.added.retain(|e| !member(e));
        diff.removed.retain(|e| !member(e));
        diff
    };
    let set = "00000000-0000-0000-0000-0000000000c1";
    let flow = "00000000-0000-0000-0000-0000000000f1";
    let policy = |source: [u8; 4]| IrEntry::RouterPolicy {
        datapath: 9,
        priority: 29000,
        source: Some(Ipv4Prefix {
            network: Ipv4Addr::from(source),
            length: 32,
        }),
        destination: None,
        l4: None,
        verdict: PolicyVerdict::Reroute {
            nexthop: Ipv4Addr::new(100, 64, 0, 2),
            source_ip: Ipv4Addr::new(100, 64, 0, 1),
            source_mac: [0x0a, 0x58, 0x64, 0x40, 0x00, 0x01],
            port: "ovn-cluster-join".into(),
        },
    };
    update(
        json!({"Address_Set": {set: {"insert": {"name": "ovn.default.node1_ip4",
        "addresses": ["set", ["10.16.0.5", "10.16.0.6"]]}}}}),
    );
    let diff = update(json!({"Logical_Flow": {flow: {"insert": {
        "logical_datapath": ["uuid", ROUTER], "priority": 29000,
        "match": "ip4.src == $ovn.default.node1_ip4",
        "actions": "reg0 = 100.64.0.2; reg1 = 100.64.0.1; eth.src = 0a:58:64:40:00:01; \
            outport = \"ovn-cluster-join\"; flags.loopback = 1; reg8[0..15] = 0; next;",
        "external_ids": ["map", [["stage-name", "lr_in_policy"]]]}}}}));
    assert_eq!(diff.added, [policy([10, 16, 0, 5]), policy([10, 16, 0, 6])]);

    // A pod joins: its entry, nothing else. A pod leaves: its entry goes.
    let diff = update(json!({"Address_Set": {set: {"modify": {"addresses": "10.16.0.7"}}}}));
    assert_eq!(diff.added, [policy([10, 16, 0, 7])]);
    assert!(diff.removed.is_empty(), "{diff:?}");
    let diff = update(json!({"Address_Set": {set: {"modify": {"addresses": "10.16.0.5"}}}}));
    assert!(diff.added.is_empty(), "{diff:?}");
    assert_eq!(diff.removed, [policy([10, 16, 0, 5])]);

    // The set goes: the policy's meaning is unknown, so its router stops.
    let diff = update(json!({"Address_Set": {set: {"delete": null}}}));
    assert!(
        diff.added.iter().any(|e| matches!(e,
            IrEntry::NotForwardable { datapath: 9, reason: Unforwardable::UnsupportedFlow { reason, .. } }
                if reason == "address set $ovn.default.node1_ip4 is not in the Southbound")),
        "{diff:?}"
    );
    assert_eq!(diff.removed.len(), 2, "{diff:?}");
    // Back under another row: compiled again, empty sets match nothing.
    let diff = update(
        json!({"Address_Set": {"00000000-0000-0000-0000-0000000000c2": {"insert": {
        "name": "ovn.default.node1_ip4", "addresses": ["set", []]}}}}),
    );
    assert!(diff.added.is_empty(), "{diff:?}");
    assert!(
        diff.removed
            .iter()
            .any(|e| matches!(e, IrEntry::NotForwardable { datapath: 9, .. })),
        "{diff:?}"
    );
}

/// An address joining or leaving an Address_Set changes its one member entry (what the ACL
/// backend installs), applied from the set's change alone, without recomputing the set.
#[test]
fn an_address_joining_or_leaving_a_set_is_one_member_entry() {
    let (mut sb, mut compiler, _) = southbound(json!(["set", []]), json!(["set", []]));
    let mut update = |updates: Value| {
        let changes = sb.apply(&SessionEvent::Update {
            updates: updates.into(),
            format: UpdateFormat::Update2,
        });
        compiler.apply(&sb, &changes)
    };
    let member = |ip: [u8; 4]| IrEntry::AddressSetMember {
        set: "np.web.ns.ingress.allow.IPv4.0".into(),
        prefix: Ipv4Prefix {
            network: Ipv4Addr::from(ip),
            length: 32,
        },
    };
    let set = "00000000-0000-0000-0000-0000000000c3";
    let diff = update(json!({"Address_Set": {set: {"insert": {
        "name": "np.web.ns.ingress.allow.IPv4.0",
        "addresses": ["set", ["10.16.0.5", "10.16.0.6", "fd00::5"]]}}}}));
    assert_eq!(diff.added, [member([10, 16, 0, 5]), member([10, 16, 0, 6])]);
    let diff = update(json!({"Address_Set": {set: {"modify": {"addresses": "10.16.0.7"}}}}));
    assert_eq!(
        (diff.added, diff.removed),
        (vec![member([10, 16, 0, 7])], vec![])
    );
    let diff = update(json!({"Address_Set": {set: {"modify": {"addresses": "10.16.0.5"}}}}));
    assert_eq!(
        (diff.added, diff.removed),
        (vec![], vec![member([10, 16, 0, 5])])
    );
    // Renamed: every member moves to the new name.
    let diff = update(json!({"Address_Set": {set: {"modify": {"name": "other"}}}}));
    assert_eq!((diff.added.len(), diff.removed.len()), (2, 2));
}

/// A flow that applies only where a chassisredirect port is active is neutral, whoever holds
/// the port (the backend carries the gateway from the port's binding), but for a centralized
/// SNAT rule's, which is carried (`CentralizedSnat`); one of them that translates through
/// conntrack otherwise (a load balancer on the gateway router) fences that gateway, and its
/// deletion lifts the fence.
#[test]
fn a_gateways_centralized_snat_is_carried_and_other_centralized_nat_fences_it() {
    let (mut sb, mut compiler, _) = southbound(json!(["set", []]), json!(["set", []]));
    let mut apply = |updates: Value| {
        let changes = sb.apply(&SessionEvent::Update {
            updates: updates.into(),
            format: UpdateFormat::Update2,
        });
        compiler.apply(&sb, &changes)
    };
    apply(
        json!({"Port_Binding": {"00000000-0000-0000-0000-0000000000b2": {"insert": {
        "logical_port": "cr-vpc-a-ext", "type": "chassisredirect", "tunnel_key": 3,
        "datapath": ["uuid", ROUTER],
        "options": ["map", [["distributed-port", "vpc-a-ext"]]]}}}}),
    );
    let flow = |stage: &str, match_: &str, actions: &str| {
        json!({"insert": {"logical_datapath": ["uuid", ROUTER], "priority": 153,
            "match": format!("{match_} && is_chassis_resident(\"cr-vpc-a-ext\")"),
            "actions": actions, "external_ids": ["map", [["stage-name", stage]]]}})
    };
    let snat = flow(
        "lr_out_snat",
        r#"ip && ip4.src == 10.0.1.0/24 && outport == "vpc-a-ext""#,
        "ct_snat_in_czone(172.18.0.10);",
    );
    let diff = apply(json!({"Logical_Flow": {"00000000-0000-0000-0000-0000000000f1": snat}}));
    assert_eq!(
        diff.added,
        [IrEntry::CentralizedSnat {
            datapath: 9,
            gateway_port: "vpc-a-ext".into(),
            logical: Ipv4Prefix {
                network: Ipv4Addr::new(10, 0, 1, 0),
                length: 24,
            },
            external: Ipv4Addr::new(172, 18, 0, 10),
        }],
        "{diff:?}"
    );
    // Its way in, and the resident admission of the gateway port's MAC: nothing more.
    let unsnat = flow(
        "lr_in_unsnat",
        r#"ip && ip4.dst == 172.18.0.10 && inport == "vpc-a-ext" && flags.loopback == 0"#,
        "ct_snat_in_czone;",
    );
    let admission = flow(
        "lr_in_admission",
        r#"eth.dst == 0a:58:00:00:00:01 && inport == "vpc-a-ext""#,
        "xreg0[0..47] = 0a:58:00:00:00:01; next;",
    );
    let diff = apply(
        json!({"Logical_Flow": {"00000000-0000-0000-0000-0000000000f2": unsnat,
        "00000000-0000-0000-0000-0000000000f3": admission}}),
    );
    assert!(diff.added.is_empty() && diff.removed.is_empty(), "{diff:?}");
    // A load balancer on the gateway router is not carried: it fences the gateway, until it
    // goes.
    let fence = IrEntry::CentralizedNat {
        datapath: 9,
        redirect: "cr-vpc-a-ext".into(),
    };
    let dnat = "00000000-0000-0000-0000-0000000000f4";
    let diff = apply(json!({"Logical_Flow": {dnat: flow(
        "lr_in_dnat",
        r#"ip && ip4.dst == 172.18.0.21 && inport == "vpc-a-ext""#,
        "ct_lb_mark(backends=10.0.1.5:80);",
    )}}));
    assert_eq!(diff.added, std::slice::from_ref(&fence), "{diff:?}");
    let diff = apply(json!({"Logical_Flow": {dnat: {"delete": null}}}));
    assert_eq!(diff.removed, [fence], "{diff:?}");
}

/// The first view is compiled without a change set (its diff is the whole IR): the same diff as
/// a compiler tracking every change finds for the same rows.
#[test]
fn the_first_views_diff_is_what_tracking_finds() {
    let (sb, compiler, first) = southbound(
        json!("0a:58:0a:00:01:02 10.0.1.2"),
        json!("0a:58:0a:00:01:02 10.0.1.2"),
    );
    assert!(first.added.len() >= 3, "{first:?}");
    assert!(first.removed.is_empty());
    let mut whole: Vec<IrEntry> = compiler.entries().cloned().collect();
    whole.sort();
    assert_eq!(first.added, whole);
    // Every row as inserted by an update, into a compiler that tracks what changes.
    let mut every_row = ChangeSet::default();
    for (name, table) in sb.replica().tables() {
        every_row.tables.insert(
            name.to_string(),
            TableChanges {
                inserted: table.rows().map(|row| row.uuid).collect(),
                ..TableChanges::default()
            },
        );
    }
    // The agent reads a first view in place: no diff of its own, the IR itself, sorted.
    let mut in_place = Compiler::new();
    let snapshot = ChangeSet {
        resynced: true,
        ..every_row.clone()
    };
    assert_eq!(in_place.compile(&sb, &snapshot), None);
    assert_eq!(in_place.whole_view().to_owned_diff(), first);
    assert!(in_place.whole_view().added.is_sorted());
    assert_eq!(
        in_place.compile(&sb, &ChangeSet::default()),
        Some(IrDiff::default()),
        "after it, changes again"
    );
    let tracked = Compiler::new().apply(&sb, &every_row);
    assert_eq!(tracked, first);
}

/// A chassis's name is in the port entries of the ports bound to it: its change recompiles
/// those, not every row and flow (as a tunnel key's change still does).
#[test]
fn a_chassis_change_recompiles_only_its_ports() {
    const CHASSIS: &str = "00000000-0000-0000-0000-0000000000c9";
    let (mut sb, mut compiler, _) =
        southbound(json!("0a:58:0a:00:01:02 10.0.1.2"), json!(["set", []]));
    assert_eq!(compiler.full_compiles(), 1, "the first view");
    let mut update = |updates: Value| {
        let changes = sb.apply(&SessionEvent::Update {
            updates: updates.into(),
            format: UpdateFormat::Update2,
        });
        let diff = compiler.apply(&sb, &changes);
        (diff, compiler.full_compiles())
    };
    let bound_to = |diff: &[IrEntry]| -> Vec<Option<String>> {
        diff.iter()
            .filter_map(|entry| match entry {
                IrEntry::Port {
                    kind: PortKind::Vif { chassis },
                    ..
                } => Some(chassis.clone()),
                _ => None,
            })
            .collect()
    };
    // The port is bound to a chassis that registers in the same update.
    let (diff, full_compiles) = update(json!({
        "Chassis": {CHASSIS: {"insert": {"name": "node1"}}},
        "Port_Binding": {PB: {"modify": {"chassis": ["uuid", CHASSIS]}}},
    }));
    assert_eq!(bound_to(&diff.removed), [None]);
    assert_eq!(bound_to(&diff.added), [Some("node1".to_string())]);
    assert_eq!(full_compiles, 1, "only the port was recompiled");
    // The chassis alone changes: the port's entry follows.
    let (diff, full_compiles) =
        update(json!({"Chassis": {CHASSIS: {"modify": {"name": "node9"}}}}));
    assert_eq!(bound_to(&diff.removed), [Some("node1".to_string())]);
    assert_eq!(bound_to(&diff.added), [Some("node9".to_string())]);
    assert_eq!(diff.len(), 2, "{diff:?}");
    assert_eq!(full_compiles, 1);
    // And goes: the port is bound to no chassis the SB knows.
    let (diff, full_compiles) = update(json!({"Chassis": {CHASSIS: {"delete": null}}}));
    assert_eq!(bound_to(&diff.added), [None]);
    assert_eq!(full_compiles, 1);
    let (diff, full_compiles) = update(json!({"Chassis": {"00000000-0000-0000-0000-0000000000ca":
        {"insert": {"name": "node3"}}}}));
    assert!(diff.is_empty(), "a chassis nothing is bound to: {diff:?}");
    assert_eq!(full_compiles, 1, "none of these recompiled everything");
    let (diff, full_compiles) =
        update(json!({"Datapath_Binding": {DP: {"modify": {"tunnel_key": 6}}}}));
    assert!(!diff.is_empty());
    assert_eq!(full_compiles, 2, "a tunnel key's change still does");
}
