//! ACL-stage flows as northd 23.03 writes them for Kube-OVN's NetworkPolicies.

use ovnbpf_common::ct;

use crate::pipeline::classify::{Class, acl_fails_closed, tests::class};
use crate::pipeline::ir::{
    AclAction, AclClause, AclFamily, AclRule, AclStage, AddressTerm, AddressValue, IrEntry,
    PortRef, States, TrackingStage,
};

fn rule(stage: &str, priority: i64, match_: &str, actions: &str) -> AclRule {
    match class(stage, priority, match_, actions) {
        Class::Compiled(entries) => match entries.as_slice() {
            [IrEntry::Acl { datapath: 7, rule }] => (**rule).clone(),
            other => panic!("not one ACL rule: {other:?}"),
        },
        other => panic!("{match_} / {actions}: {other:?}"),
    }
}

fn states(holds: impl Fn(u8) -> bool) -> States {
    (0..128u8)
        .filter(|s| holds(*s))
        .fold(States::default(), States::with)
}

const TRK: u8 = ct::TRACKED;
const NEW: u8 = ct::NEW;
const EST: u8 = ct::ESTABLISHED;
const RPL: u8 = ct::REPLY;

#[test]
fn northd_hint_table_is_neutral_and_any_other_is_not() {
    let hints = [
        (7, "ct.new && !ct.est", "reg0[7] = 1; reg0[9] = 1; next;"),
        (
            6,
            "!ct.new && ct.est && !ct.rpl && ct_mark.blocked == 1",
            "reg0[7] = 1; reg0[9] = 1; next;",
        ),
        (5, "!ct.trk", "reg0[8] = 1; reg0[9] = 1; next;"),
        (
            4,
            "!ct.new && ct.est && !ct.rpl && ct_mark.blocked == 0",
            "reg0[8] = 1; reg0[10] = 1; next;",
        ),
        (3, "!ct.est", "reg0[9] = 1; next;"),
        (2, "ct.est && ct_mark.blocked == 1", "reg0[9] = 1; next;"),
        (1, "ct.est && ct_mark.blocked == 0", "reg0[10] = 1; next;"),
    ];
    for (priority, match_, actions) in hints {
        assert_eq!(
            class("ls_in_acl_hint", priority, match_, actions),
            Class::Neutral,
            "{match_}"
        );
        assert_eq!(
            class("ls_out_acl_hint", priority, match_, actions),
            Class::Neutral
        );
    }
    // The same flow at another priority, or setting other bits, changes the table.
    assert!(matches!(
        class(
            "ls_in_acl_hint",
            3,
            "!ct.trk",
            "reg0[8] = 1; reg0[9] = 1; next;"
        ),
        Class::Unsupported(_)
    ));
    assert!(matches!(
        class(
            "ls_in_acl_hint",
            7,
            "ct.new && !ct.est",
            "reg0[7] = 1; next;"
        ),
        Class::Unsupported(_)
    ));
}

#[test]
fn allow_related_network_policy_rule_keeps_groups_and_sets_by_name() {
    let m = "reg0[7] == 1 && (outport == @np.web.ns && ip && ip4.src == $np.web.ns.ingress.allow.IPv4.0 && ip4.src != $np.web.ns.ingress.except.IPv4.0 && tcp.dst == 80)";
    let new = rule("ls_out_acl", 3001, m, "reg0[1] = 1; next;");
    // Only where the hint stage sets reg0[7]: new connections and blocked requests.
    assert_eq!(new.states, states(|s| ct::hints(s) & 1 << 7 != 0));
    assert!(new.states.contains(TRK | NEW));
    assert!(!new.states.contains(TRK | EST) && !new.states.contains(0));
    assert_eq!(new.stage, AclStage::Egress);
    assert_eq!(new.priority, 3001);
    assert_eq!(
        new.action,
        AclAction::Allow {
            commit: true,
            related: false
        }
    );
    assert_eq!(
        new.condition.0,
        [AclClause {
            outport: Some(PortRef::Group("7_np.web.ns".into())),
            family: AclFamily::Ipv4,
            source: vec![
                AddressTerm {
                    negated: false,
                    values: vec![AddressValue::Set("np.web.ns.ingress.allow.IPv4.0".into())]
                },
                AddressTerm {
                    negated: true,
                    values: vec![AddressValue::Set("np.web.ns.ingress.except.IPv4.0".into())]
                },
            ],
            protocol: Some(6),
            destination_ports: Some(vec![(80, 80)]),
            ..AclClause::default()
        }]
    );
    // Its twin for established requests (and untracked packets) just passes.
    let established = rule(
        "ls_out_acl",
        3001,
        &m.replace("reg0[7]", "reg0[8]"),
        "next;",
    );
    assert!(established.states.contains(TRK | EST) && established.states.contains(0));
    assert!(!established.states.contains(TRK | EST | RPL));
    assert_eq!(
        established.action,
        AclAction::Allow {
            commit: false,
            related: false
        }
    );
}

#[test]
fn drops_blocks_rejects_and_logs() {
    let drop = rule(
        "ls_out_acl",
        3000,
        "reg0[9] == 1 && (outport == @np.web.ns && ip)",
        "/* drop */",
    );
    assert_eq!(drop.action, AclAction::Drop { block: false });
    let block = rule(
        "ls_out_acl",
        3000,
        "reg0[10] == 1 && (outport == @np.web.ns && ip)",
        "ct_commit { ct_mark.blocked = 1; }; /* drop */",
    );
    assert_eq!(block.action, AclAction::Drop { block: true });
    assert_eq!(block.states, states(|s| ct::hints(s) & 1 << 10 != 0));
    let reject = rule(
        "ls_in_acl",
        2000,
        "reg0[9] == 1 && (inport == @np.db.ns && ip4)",
        "reg0 = 0; reject { /* eth.dst <-> eth.src; ip.dst <-> ip.src; is implicit. */ outport <-> inport; next(pipeline=egress,table=5); };",
    );
    assert_eq!(reject.action, AclAction::Reject { block: false });
    assert_eq!(
        reject.condition.0[0].inport,
        Some(PortRef::Group("7_np.db.ns".into()))
    );
    let logged = rule(
        "ls_in_acl_after_lb",
        3001,
        "reg0[7] == 1 && (inport == @np.web.ns && ip && ip4.dst == 10.16.0.0/16)",
        r#"log(name="np/web.ns/egress/IPv4/0", severity=info, verdict=allow); reg0[1] = 1; next;"#,
    );
    let log = logged.log.unwrap();
    assert_eq!(log.name.as_deref(), Some("np/web.ns/egress/IPv4/0"));
    assert_eq!(log.severity.as_deref(), Some("info"));
    assert_eq!(log.verdict, "allow");
    assert_eq!(logged.stage, AclStage::IngressAfterLb);
}

#[test]
fn northd_fixed_rules_fold_into_states() {
    let invalid = rule(
        "ls_in_acl",
        65532,
        "ct.inv || (ct.est && ct.rpl && ct_mark.blocked == 1)",
        "drop;",
    );
    assert!(invalid.states.contains(TRK | ct::INVALID));
    assert!(invalid.states.contains(TRK | EST | RPL | ct::BLOCKED));
    assert!(!invalid.states.contains(TRK | EST | RPL));
    assert_eq!(invalid.condition.0, [AclClause::default()]);
    let reply = rule(
        "ls_in_acl",
        65532,
        "ct.est && !ct.rel && !ct.new && !ct.inv && ct.rpl && ct_mark.blocked == 0",
        "reg0[9] = 0; reg0[10] = 0; reg0[17] = 1; next;",
    );
    assert_eq!(
        reply.action,
        AclAction::Allow {
            commit: false,
            related: true
        }
    );
    assert!(reply.states.contains(TRK | EST | RPL) && !reply.states.contains(TRK | EST));
    let related = rule(
        "ls_in_acl",
        65532,
        "!ct.est && ct.rel && !ct.new && !ct.inv && ct_mark.blocked == 0",
        "reg0[17] = 1; ct_commit_nat;",
    );
    assert_eq!(
        related.action,
        AclAction::Allow {
            commit: false,
            related: true
        }
    );
    let after = rule("ls_in_acl_after_lb", 65532, "reg0[17] == 1", "next;");
    assert!(after.after_related);
    let default = rule("ls_out_acl", 1, "ip && !ct.est", "reg0[1] = 1; next;");
    assert_eq!(default.condition.0[0].family, AclFamily::Ip);
    assert!(default.states.contains(TRK | NEW) && default.states.contains(0));
    assert!(!default.states.contains(TRK | EST));
}

#[test]
fn tracking_stages_and_their_bypasses() {
    assert_eq!(
        class("ls_in_pre_acl", 100, "ip", "reg0[0] = 1; next;"),
        Class::Compiled(vec![IrEntry::AclTracking {
            datapath: 7,
            egress: false,
            stage: TrackingStage::PreAcl
        }])
    );
    assert_eq!(
        class("ls_out_pre_lb", 100, "ip", "reg0[2] = 1; next;"),
        Class::Compiled(vec![IrEntry::AclTracking {
            datapath: 7,
            egress: true,
            stage: TrackingStage::PreLb
        }])
    );
    let Class::Compiled(entries) = class(
        "ls_out_pre_lb",
        110,
        r#"ip && outport == "subnet-a-vpc-a""#,
        "ct_clear; next;",
    ) else {
        panic!("router port bypass");
    };
    assert!(
        matches!(&entries[0], IrEntry::AclTrackingBypass { condition, stateless: false, .. }
        if condition.0[0].outport == Some(PortRef::Port("subnet-a-vpc-a".into())))
    );
    let Class::Compiled(entries) = class(
        "ls_in_pre_acl",
        110,
        "nd || nd_rs || nd_ra || mldv1 || mldv2 || (udp && udp.src == 546 && udp.dst == 547)",
        "next;",
    ) else {
        panic!("neighbour discovery bypass");
    };
    let IrEntry::AclTrackingBypass { condition, .. } = &entries[0] else {
        panic!()
    };
    assert_eq!(condition.0.len(), 6);
    assert_eq!(condition.0[5].protocol, Some(17));
    assert_eq!(condition.0[5].source_ports, Some(vec![(546, 546)]));
    assert_eq!(condition.0[0].icmp_types, Some(vec![135, 136]));
    assert!(matches!(
        class("ls_in_pre_acl", 2001, "inport == @np.a.ns && icmp6", "reg0[16] = 1; next;"),
        Class::Compiled(e) if matches!(e[0], IrEntry::AclTrackingBypass { stateless: true, .. })
    ));
    assert_eq!(
        class("ls_in_pre_lb", 110, "reg0[16] == 1", "next;"),
        Class::Compiled(vec![IrEntry::StatelessSkipsLb {
            datapath: 7,
            egress: false
        }])
    );
    assert_eq!(
        class("ls_in_pre_stateful", 100, "reg0[0] == 1", "ct_next;"),
        Class::Neutral
    );
    assert_eq!(
        class("ls_in_pre_stateful", 110, "reg0[2] == 1", "ct_lb_mark;"),
        Class::Neutral
    );
    // A VIP's conntrack is the load-balancer stage's (classify::lb).
    assert_eq!(
        class(
            "ls_in_pre_stateful",
            120,
            "reg0[2] == 1 && ip4.dst == 10.96.0.100 && tcp.dst == 80",
            "reg1 = 10.96.0.100; reg2[0..15] = 80; ct_lb_mark;"
        ),
        Class::Neutral
    );
    assert!(matches!(
        class("ls_in_pre_stateful", 120, "reg0[2] == 1 && ip4.dst == 10.96.0.100 && tcp.dst == 80", "reg1 = 10.96.0.100; ct_commit; ct_lb_mark;"),
        Class::Unsupported(r) if r.contains("load balancing")
    ));
    assert_eq!(
        class(
            "ls_out_stateful",
            100,
            "reg0[1] == 1 && reg0[13] == 0",
            "ct_commit { ct_mark.blocked = 0; }; next;"
        ),
        Class::Compiled(vec![IrEntry::AclCommit {
            datapath: 7,
            egress: true
        }])
    );
}

#[test]
fn untranslatable_acl_terms_are_unsupported_and_fail_closed() {
    for (match_, what) in [
        ("reg0[9] == 1 && (outport == @pg && ip.ttl == 1)", "ip.ttl"),
        (
            "reg0[9] == 1 && (outport == @pg && ip4.src == 10.0.0.0/255.0.255.0)",
            "ip4.src",
        ),
        ("reg0[9] == 1 && (outport != @pg && ip)", "outport"),
        ("reg0[9] == 1 && (ct_label.label == 5)", "ct_label"),
    ] {
        assert!(
            matches!(class("ls_out_acl", 2000, match_, "drop;"), Class::Unsupported(r) if r.contains(what) || r.contains("state")),
            "{match_}"
        );
    }
    assert_eq!(acl_fails_closed("ls_out_acl"), Some(true));
    assert_eq!(acl_fails_closed("ls_in_acl_after_lb"), Some(false));
    assert_eq!(acl_fails_closed("ls_in_stateful"), Some(false));
    // Load balancing stages are reported, not failed closed (issue 17).
    assert_eq!(acl_fails_closed("ls_in_pre_stateful"), None);
    assert_eq!(acl_fails_closed("ls_in_lb"), None);
    assert_eq!(acl_fails_closed("lr_in_dnat"), None);
}
