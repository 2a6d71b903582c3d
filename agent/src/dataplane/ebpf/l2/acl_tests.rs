//! The ACL family against a recording of the maps: switch flags, rules, one write per set
//! member, the ports' ACL flag, the paths that fail closed, the generation that stales the
//! kernel's cached verdicts.

use std::net::Ipv4Addr;

use ovnbpf_common::{
    LOCAL_PORT_ACL,
    acl::{
        AclAddressKey, AclRuleKey, FAIL_CLOSED_EGRESS, SWITCH_EGRESS, SWITCH_INGRESS,
        UNCHECKED_EGRESS, UNCHECKED_FLOOD, UNCHECKED_INGRESS, USER_RULES_EGRESS,
    },
    maps::{AclAddresses, AclGeneration, AclRules, AclSwitches, TunnelPorts},
};

use super::super::L2State;
use crate::dataplane::ebpf::maps::Recorder;
use crate::pipeline::ir::{
    AclAction, AclClause, AclFamily, AclMatch, AclRule, AclStage, AddressTerm, AddressValue,
    IrDiff, IrEntry, PortKind, PortRef, Prefix, States,
};

const DP: u32 = 5;

fn vif(name: &str, key: u32, chassis: &str) -> IrEntry {
    IrEntry::Port {
        datapath: DP,
        key,
        name: name.into(),
        kind: PortKind::Vif {
            chassis: Some(chassis.into()),
        },
        addresses: Vec::new(),
        port_security: Vec::new(),
    }
}

fn rule(stage: AclStage, clause: AclClause, action: AclAction) -> IrEntry {
    IrEntry::Acl {
        datapath: DP,
        rule: Box::new(AclRule {
            stage,
            priority: 3000,
            states: States::ALL,
            after_related: false,
            condition: AclMatch(vec![clause]),
            action,
            log: None,
            acl: Some("0123abcd".into()),
        }),
    }
}

fn member(set: &str, ip: [u8; 4]) -> IrEntry {
    IrEntry::AddressSetMember {
        set: set.into(),
        prefix: Prefix {
            network: Ipv4Addr::from(ip),
            length: 32,
        },
    }
}

fn apply(state: &mut L2State, maps: &mut Recorder, added: Vec<IrEntry>, removed: Vec<IrEntry>) {
    state.apply(&IrDiff { added, removed });
    state.flush(maps).unwrap();
}

fn flags(maps: &Recorder) -> u32 {
    maps.table::<AclSwitches>().get(&DP).map_or(0, |s| s.flags)
}

#[test]
fn a_network_policy_installs_its_rules_sets_and_port_flags() {
    let mut state = L2State::new("node1");
    state.set_interface("web", Some(40));
    let mut maps = Recorder::default();
    let to_web = AclClause {
        outport: Some(PortRef::Group("5_np".into())),
        family: AclFamily::Ipv4,
        source: vec![AddressTerm {
            negated: false,
            values: vec![AddressValue::Set("allow".into())],
        }],
        ..AclClause::default()
    };
    let allow = rule(
        AclStage::Egress,
        to_web.clone(),
        AclAction::Allow {
            commit: true,
            related: false,
        },
    );
    let deny = rule(
        AclStage::Egress,
        AclClause {
            source: Vec::new(),
            ..to_web
        },
        AclAction::Drop { block: false },
    );
    apply(
        &mut state,
        &mut maps,
        vec![
            vif("web", 1, "node1"),
            allow,
            deny,
            IrEntry::PortGroupMember {
                group: "5_np".into(),
                port: "web".into(),
            },
            member("allow", [10, 0, 1, 4]),
            member("unrelated", [10, 9, 9, 9]),
        ],
        Vec::new(),
    );
    let flags = flags(&maps);
    assert_eq!(
        flags & (SWITCH_EGRESS | USER_RULES_EGRESS),
        SWITCH_EGRESS | USER_RULES_EGRESS
    );
    // The drop names the pods' group: only floods fail closed.
    assert_eq!(
        flags & (UNCHECKED_FLOOD | UNCHECKED_EGRESS | UNCHECKED_INGRESS | SWITCH_INGRESS),
        UNCHECKED_FLOOD
    );
    assert_eq!(maps.table::<AclRules>().len(), 2);
    // Only the set a rule names is installed.
    let addresses = maps.table::<AclAddresses>();
    assert_eq!(addresses.len(), 1, "{addresses:?}");
    let ((AclAddressKey { address, .. }, bits), _) = addresses.iter().next().unwrap();
    assert_eq!((*address, *bits), (u32::from_ne_bytes([10, 0, 1, 4]), 64));
    // Deliveries to the pod go through the egress ACL stage.
    assert!(
        maps.table::<TunnelPorts>()
            .values()
            .all(|port| port.flags & LOCAL_PORT_ACL != 0)
    );

    // A peer joins the set: one write, and the kernel's cached verdicts go stale.
    let before = generation(&maps);
    maps.reset_writes();
    apply(
        &mut state,
        &mut maps,
        vec![member("allow", [10, 0, 1, 5])],
        Vec::new(),
    );
    assert_eq!(maps.writes_to::<AclAddresses>(), 1);
    assert_eq!(maps.writes(), 2);
    assert_eq!(generation(&maps), before + 1);
    assert_eq!(maps.table::<AclAddresses>().len(), 2);
    maps.reset_writes();
    apply(
        &mut state,
        &mut maps,
        Vec::new(),
        vec![member("allow", [10, 0, 1, 4])],
    );
    assert_eq!(maps.writes_to::<AclAddresses>(), 1);
    assert_eq!(generation(&maps), before + 2);
    // A change outside the ACL maps leaves the cached verdicts current.
    apply(
        &mut state,
        &mut maps,
        vec![vif("db", 2, "node1")],
        Vec::new(),
    );
    assert_eq!(generation(&maps), before + 2);
}

fn generation(maps: &Recorder) -> u64 {
    maps.table::<AclGeneration>().get(&0).copied().unwrap_or(0)
}

#[test]
fn an_agent_advances_the_generation_it_finds_on_its_first_flush_even_without_acl_writes() {
    let mut maps = Recorder::default();
    // A previous agent's generation, and the rules it wrote without advancing it.
    maps.table_mut::<AclGeneration>().insert(0, 41);
    let mut state = L2State::new("node1");
    apply(
        &mut state,
        &mut maps,
        vec![vif("web", 1, "node1")],
        Vec::new(),
    );
    assert_eq!(generation(&maps), 42);
    apply(
        &mut state,
        &mut maps,
        vec![vif("db", 2, "node1")],
        Vec::new(),
    );
    assert_eq!(generation(&maps), 42, "nothing ACL-related was written");
    // The sweep removes what the previous agent left: stale again.
    maps.table_mut::<AclRules>().insert(
        AclRuleKey {
            datapath: 5,
            list: 2,
            index: 0,
        },
        ovnbpf_common::acl::AclRule::default(),
    );
    assert_eq!(state.sweep(&mut maps).unwrap(), 1);
    assert_eq!(generation(&maps), 43);
}

#[test]
fn unconstrained_drops_fail_the_paths_the_kernel_does_not_check_and_crowded_rules_fail_closed() {
    let mut state = L2State::new("node1");
    let mut maps = Recorder::default();
    // A subnet ACL (no inport): what is routed into the switch could match it.
    let subnet_acl = rule(
        AclStage::Ingress,
        AclClause {
            family: AclFamily::Ipv4,
            ..AclClause::default()
        },
        AclAction::Drop { block: false },
    );
    apply(&mut state, &mut maps, vec![subnet_acl.clone()], Vec::new());
    assert_ne!(flags(&maps) & UNCHECKED_INGRESS, 0);
    assert_ne!(flags(&maps) & SWITCH_INGRESS, 0);
    apply(&mut state, &mut maps, Vec::new(), vec![subnet_acl]);
    assert!(
        maps.table::<AclSwitches>().is_empty(),
        "the switch is gone with its rules"
    );
    assert!(maps.table::<AclRules>().is_empty());

    let term = AddressTerm {
        negated: false,
        values: vec![AddressValue::Set("a".into())],
    };
    let crowded = rule(
        AclStage::Egress,
        AclClause {
            source: vec![term.clone(), term.clone(), term],
            ..AclClause::default()
        },
        AclAction::Allow {
            commit: false,
            related: false,
        },
    );
    apply(&mut state, &mut maps, vec![crowded], Vec::new());
    assert_ne!(flags(&maps) & FAIL_CLOSED_EGRESS, 0);
    state.set_acl_fail_open(true);
    state.flush(&mut maps).unwrap();
    assert_eq!(
        flags(&maps) & FAIL_CLOSED_EGRESS,
        0,
        "--unsupported-acl=allow"
    );
}

#[test]
fn a_logged_rule_carries_a_log_id_the_book_names() {
    use crate::dataplane::ebpf::acl_log::AclLogName;
    use crate::pipeline::ir::AclLog;
    let mut state = L2State::new("node1");
    let mut maps = Recorder::default();
    let logged = |name: &str, verdict: &str, action| {
        let IrEntry::Acl { datapath, mut rule } = rule(
            AclStage::Egress,
            AclClause {
                family: AclFamily::Ipv4,
                protocol: Some(6),
                ..AclClause::default()
            },
            action,
        ) else {
            unreachable!()
        };
        rule.log = Some(AclLog {
            name: Some(name.into()),
            severity: Some("warning".into()),
            verdict: verdict.into(),
        });
        rule.priority = if verdict == "drop" { 2000 } else { 2001 };
        IrEntry::Acl { datapath, rule }
    };
    let drop = logged("ns/web", "drop", AclAction::Drop { block: false });
    let allow = logged(
        "np/web.ns/ingress/IPv4/0",
        "allow",
        AclAction::Allow {
            commit: true,
            related: false,
        },
    );
    let quiet = rule(
        AclStage::Egress,
        AclClause {
            family: AclFamily::Ipv4,
            protocol: Some(17),
            ..AclClause::default()
        },
        AclAction::Drop { block: false },
    );
    apply(&mut state, &mut maps, vec![drop, allow, quiet], Vec::new());
    let book = state.acl_log_book();
    let book = book.read().unwrap();
    let rules = maps.table::<AclRules>();
    let mut logs: Vec<(u16, u32)> = rules.values().map(|r| (r.priority, r.log)).collect();
    logs.sort_unstable();
    assert_eq!(logs.len(), 3, "{logs:?}");
    let by_priority = |priority| logs.iter().find(|(p, _)| *p == priority).unwrap().1;
    assert_eq!(by_priority(3000), 0, "an ACL without log has no log id");
    let (drop_id, allow_id) = (by_priority(2000), by_priority(2001));
    assert_ne!(drop_id, allow_id);
    assert_eq!(
        book[&drop_id],
        AclLogName {
            name: Some("ns/web".into()),
            severity: "warning".into(),
            verdict: "drop".into(),
            egress: true,
        }
    );
    assert_eq!(
        book[&allow_id].name.as_deref(),
        Some("np/web.ns/ingress/IPv4/0")
    );
}

/// A restarted agent meets its sets in another order than the agent before it (a snapshot,
/// not the history of changes): each set still gets the id the kernel holds its members under.
#[test]
fn set_ids_depend_on_the_names_not_on_the_order_they_come_in() {
    use super::{Ids, SetIds};
    use crate::pipeline::ir::PortRef;
    let ids = |order: &[&str]| {
        let mut ids = Ids::default();
        for name in order {
            ids.address_set(name);
            ids.port_set(5, &PortRef::Group(format!("5_{name}")));
        }
        let mut taken: Vec<(String, u32)> = ids
            .addresses
            .iter()
            .map(|(name, id)| (name.clone(), *id))
            .chain(
                ids.ports
                    .iter()
                    .map(|(name, id)| (format!("{name:?}"), *id)),
            )
            .collect();
        taken.sort();
        taken
    };
    let first = ids(&["backends", "client", "node"]);
    assert_eq!(first, ids(&["node", "client", "backends"]));
    let mut distinct: Vec<u32> = first.iter().map(|(_, id)| *id).collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 6, "{first:?}");
    assert!(!distinct.contains(&0), "0 is any");
}
