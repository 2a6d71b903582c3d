//! The load-balancer stages' flows as northd 23.03 wrote them for Kube-OVN-shaped balancers
//! (captured with ovn-northd 23.03.1: `lb-add` TCP and UDP VIPs, a VIP without a port, one
//! without backends, one with `options:reject=true`, one with `selection_fields=ip_src` and
//! `options:affinity_timeout`).

use std::net::Ipv4Addr;

use crate::pipeline::{
    classify::{Class, tests::class},
    ir::{IrEntry, LbBackend, LbHashField, LbProtocol, LbVip},
};

fn vip(class: Class) -> LbVip {
    match class {
        Class::Compiled(entries) => match entries.as_slice() {
            [IrEntry::LoadBalancer { datapath: 7, vip }] => (**vip).clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

fn backend(ip: [u8; 4], port: Option<u16>) -> LbBackend {
    LbBackend {
        ip: Ipv4Addr::from(ip),
        port,
    }
}

#[test]
fn vips_with_ports_balance_over_their_backends() {
    let tcp = vip(class(
        "ls_in_lb",
        120,
        "ct.new && ip4.dst == 10.96.0.10 && tcp.dst == 80",
        "reg0[1] = 0; ct_lb_mark(backends=10.0.1.2:8080,10.0.1.3:8080);",
    ));
    assert_eq!(
        tcp,
        LbVip {
            vip: Ipv4Addr::new(10, 96, 0, 10),
            port: Some(80),
            protocol: Some(LbProtocol::Tcp),
            backends: vec![
                backend([10, 0, 1, 2], Some(8080)),
                backend([10, 0, 1, 3], Some(8080))
            ],
            hash_fields: vec![],
            reject: false,
        }
    );
    // 23.03 without `ct-no-masked-label` writes `ct_lb`.
    let udp = vip(class(
        "ls_in_lb",
        120,
        "ct.new && ip4.dst == 10.96.0.11 && udp.dst == 53",
        "reg0[1] = 0; ct_lb(backends=10.0.1.2:53);",
    ));
    assert_eq!(udp.protocol, Some(LbProtocol::Udp));
    assert_eq!(udp.backends, vec![backend([10, 0, 1, 2], Some(53))]);
}

#[test]
fn portless_vips_hash_fields_and_vips_without_backends() {
    let any = vip(class(
        "ls_in_lb",
        110,
        "ct.new && ip4.dst == 10.96.0.16",
        "reg0[1] = 0; ct_lb_mark(backends=10.0.1.2,10.0.1.3);",
    ));
    assert_eq!((any.port, any.protocol), (None, None));
    assert_eq!(any.backends[1], backend([10, 0, 1, 3], None));
    let session = vip(class(
        "ls_in_lb",
        120,
        "ct.new && ip4.dst == 10.96.0.15 && tcp.dst == 80",
        "reg0[1] = 0; ct_lb_mark(backends=10.0.1.2:80; hash_fields=\"ip_src\");",
    ));
    assert_eq!(session.hash_fields, vec![LbHashField::IpSrc]);
    let dropped = vip(class(
        "ls_in_lb",
        120,
        "ct.new && ip4.dst == 10.96.0.13 && tcp.dst == 80",
        "drop;",
    ));
    assert!(dropped.backends.is_empty() && !dropped.reject);
    let rejected = vip(class(
        "ls_in_lb",
        120,
        "ct.new && ip4.dst == 10.96.0.14 && tcp.dst == 80",
        "reg0 = 0; reject { outport <-> inport; next(pipeline=egress,table=5);};",
    ));
    assert!(rejected.backends.is_empty() && rejected.reject);
}

#[test]
fn what_is_not_compiled_is_reported_with_its_feature() {
    let unsupported =
        |stage, priority, match_, actions| match class(stage, priority, match_, actions) {
            Class::Unsupported(reason) => reason,
            other => panic!("{other:?}"),
        };
    // An affinity flow of another shape.
    assert!(
        unsupported(
            "ls_in_lb_aff_learn",
            100,
            "reg9[6] == 0 && ct.new && ip4 && reg1 == 10.96.0.15",
            "commit_lb_aff(vip = \"10.96.0.15:80\", proto = sctp, timeout = 10800);"
        )
        .contains("affinity")
    );
    assert!(
        unsupported(
            "ls_in_lb",
            120,
            "ct.new && ip6.dst == fd00::10 && tcp.dst == 80",
            "reg0[1] = 0; ct_lb_mark(backends=[fd00::2]:80);"
        )
        .contains("IPv6")
    );
    // Mixed backends (with and without ports) and unknown hash fields are not guessed at.
    assert!(
        unsupported(
            "ls_in_lb",
            120,
            "ct.new && ip4.dst == 10.96.0.10 && tcp.dst == 80",
            "reg0[1] = 0; ct_lb_mark(backends=10.0.1.2:80,10.0.1.3);"
        )
        .contains("ports")
    );
    assert!(
        unsupported(
            "ls_in_lb",
            120,
            "ct.new && ip4.dst == 10.96.0.10 && tcp.dst == 80",
            "reg0[1] = 0; ct_lb_mark(backends=10.0.1.2:80; hash_fields=\"eth_src\");"
        )
        .contains("action")
    );
}

#[test]
fn the_hairpin_stages_compile_to_the_switch_hairpin() {
    for (stage, match_, actions) in [
        (
            "ls_in_pre_hairpin",
            "ip && ct.trk",
            "reg0[6] = chk_lb_hairpin(); reg0[12] = chk_lb_hairpin_reply(); next;",
        ),
        (
            "ls_in_nat_hairpin",
            "ip && ct.new && ct.trk && reg0[6] == 1",
            "ct_snat_to_vip; next;",
        ),
        ("ls_in_nat_hairpin", "ip && reg0[12] == 1", "ct_snat;"),
        (
            "ls_in_hairpin",
            "(reg0[6] == 1 || reg0[12] == 1)",
            "eth.dst <-> eth.src; outport = inport; flags.loopback = 1; output;",
        ),
    ] {
        assert_eq!(
            class(stage, 100, match_, actions),
            Class::Compiled(vec![IrEntry::LbHairpin { datapath: 7 }]),
            "{stage}: {actions}"
        );
    }
}

/// Session affinity as northd 23.03 writes it for `options:affinity_timeout=10800`: the check
/// and the learned backend's VIP flow are what the kernel does for the VIP's affinity, the
/// learning flows (one per backend) say the timeout.
#[test]
fn session_affinity_compiles_to_the_vips_timeout() {
    assert_eq!(
        class(
            "ls_in_lb_aff_check",
            100,
            "ct.new && ip4 && reg1 == 10.96.0.15 && reg2[0..15] == 80",
            "reg9[6] = chk_lb_aff(); next;"
        ),
        Class::Neutral
    );
    assert_eq!(
        class(
            "ls_in_lb",
            150,
            "reg9[6] == 1 && ct.new && ip4 && reg4 == 10.0.1.2 && reg8[0..15] == 80",
            "reg0[1] = 0; reg1 = 10.96.0.15; reg2[0..15] = 80; ct_lb_mark(backends=10.0.1.2:80);"
        ),
        Class::Neutral
    );
    assert_eq!(
        class(
            "ls_in_lb_aff_learn",
            100,
            "reg9[6] == 0 && ct.new && ip4 && reg1 == 10.96.0.15 && reg2[0..15] == 80 && ip4.dst == 10.0.1.2 && tcp.dst == 80",
            "commit_lb_aff(vip = \"10.96.0.15:80\", backend = \"10.0.1.2:80\", proto = tcp, timeout = 10800); /* drop */"
        ),
        Class::Compiled(vec![IrEntry::LbAffinity {
            datapath: 7,
            vip: Ipv4Addr::new(10, 96, 0, 15),
            port: Some(80),
            protocol: Some(LbProtocol::Tcp),
            timeout: 10800,
        }])
    );
}
