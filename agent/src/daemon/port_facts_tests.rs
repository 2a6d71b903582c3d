//! Tests of [`super::ports::port_facts`] on a replica built from a snapshot: a pod's addresses
//! of each family with the subnet and gateway of the router port network that holds them, as
//! northd copies Kube-OVN's dual-stack LSP and LRP into the Southbound.

use serde_json::{Value, json};

use super::ports::{FamilyFacts, port_facts};
use crate::sb::Southbound;

const SWITCH: &str = "00000000-0000-0000-0000-0000000000d1";
const ROUTER: &str = "00000000-0000-0000-0000-0000000000d2";

/// Switch `subnet` with pod port `pod.ns` (`pod_mac`), its router-type port and the router's
/// port `vpc-subnet` (`router_mac`).
fn southbound(pod_mac: &str, router_mac: &str) -> Southbound {
    let set = |key: &str| json!({"type": {"key": key, "min": 0, "max": "unlimited"}});
    let map = json!({"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}});
    let tables = json!({
        "Datapath_Binding": {"columns": {"tunnel_key": {"type": "integer"},
            "external_ids": map}},
        "Port_Binding": {"columns": {"logical_port": {"type": "string"},
            "type": {"type": "string"}, "tunnel_key": {"type": "integer"},
            "datapath": {"type": {"key": {"type": "uuid"}, "min": 0, "max": 1}},
            "mac": set("string"), "options": map}},
    });
    let port = |name: &str, kind: &str, datapath: &str, key: u32, mac: &str, options: Value| {
        json!({"initial": {"logical_port": name, "type": kind, "tunnel_key": key,
            "datapath": ["uuid", datapath], "mac": ["set", [mac]], "options": options}})
    };
    crate::sb::testing::southbound(
        &tables,
        json!({
            "Datapath_Binding": {
                SWITCH: {"initial": {"tunnel_key": 1,
                    "external_ids": ["map", [["logical-switch", "x"], ["name", "subnet"]]]}},
                ROUTER: {"initial": {"tunnel_key": 2,
                    "external_ids": ["map", [["logical-router", "y"], ["name", "vpc"]]]}},
            },
            "Port_Binding": {
                "00000000-0000-0000-0000-0000000000b1":
                    port("pod.ns", "", SWITCH, 1, pod_mac, json!(["map", []])),
                "00000000-0000-0000-0000-0000000000b2":
                    port("subnet-vpc", "patch", SWITCH, 2, "router",
                        json!(["map", [["peer", "vpc-subnet"]]])),
                "00000000-0000-0000-0000-0000000000b3":
                    port("vpc-subnet", "patch", ROUTER, 1, router_mac,
                        json!(["map", [["peer", "subnet-vpc"]]])),
            },
        }),
    )
}

const ROUTER_DUAL: &str = "0a:58:00:00:00:01 10.0.1.1/24 fd00:10:1::1/64";

#[test]
fn a_dual_stack_port_gets_both_families_with_their_gateways() {
    let sb = southbound("0a:58:0a:00:01:05 10.0.1.5 fd00:10:1::5", ROUTER_DUAL);
    let facts = port_facts(&sb, "pod.ns").unwrap().unwrap();
    assert_eq!(facts.mac, "0a:58:0a:00:01:05");
    assert_eq!(
        facts.ipv4,
        Some(FamilyFacts {
            ip: "10.0.1.5".parse().unwrap(),
            prefix_len: 24,
            gateway: "10.0.1.1".parse().unwrap(),
        })
    );
    assert_eq!(
        facts.ipv6,
        Some(FamilyFacts {
            ip: "fd00:10:1::5".parse().unwrap(),
            prefix_len: 64,
            gateway: "fd00:10:1::1".parse().unwrap(),
        })
    );
}

#[test]
fn an_ipv6_only_port_gets_ipv6_alone() {
    let sb = southbound(
        "0a:58:0a:00:01:06 fd00:10:1::6",
        "0a:58:00:00:00:01 fd00:10:1::1/64",
    );
    let facts = port_facts(&sb, "pod.ns").unwrap().unwrap();
    assert_eq!(facts.ipv4, None);
    assert_eq!(
        facts
            .ipv6
            .map(|a| (a.ip.to_string(), a.gateway.to_string())),
        Some(("fd00:10:1::6".into(), "fd00:10:1::1".into()))
    );
}

#[test]
fn a_family_without_a_router_network_waits_and_no_address_is_an_error() {
    // The router port has no IPv6 network (yet): the pod's IPv6 address has no gateway.
    let sb = southbound(
        "0a:58:0a:00:01:05 10.0.1.5 fd00:10:1::5",
        "0a:58:00:00:00:01 10.0.1.1/24",
    );
    assert_eq!(port_facts(&sb, "pod.ns"), Ok(None));
    let sb = southbound("0a:58:0a:00:01:05", ROUTER_DUAL);
    let error = port_facts(&sb, "pod.ns").unwrap_err();
    assert!(error.contains("no static"), "{error}");
    assert_eq!(port_facts(&sb, "other.ns"), Ok(None), "not replicated yet");
}
