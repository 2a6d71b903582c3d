//! What a classifier says about a flow ([`Class`]), and the verdict on stages nothing compiles
//! (the stateful features: ACL, load balancing, NAT, conntrack, QoS). Shared by the stage
//! classifiers; imports none of them.

use crate::pipeline::ir::IrEntry;

/// The verdict on one flow for one datapath.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Class {
    Compiled(Vec<IrEntry>),
    /// Forwarding is compiled as `entries`, but the flow also has a duty beside forwarding that
    /// the datapath does not perform (e.g. learning a MAC_Binding). Unlike `Unsupported`, this
    /// does not stop the datapath from forwarding: it is only reported.
    SideDuty {
        entries: Vec<IrEntry>,
        duty: String,
    },
    Neutral,
    /// The flow cannot be forwarded correctly: the datapath must not forward as if it did not
    /// exist.
    Unsupported(String),
}

pub(super) fn unsupported(reason: impl Into<String>) -> Class {
    Class::Unsupported(reason.into())
}

/// The verdict on a stage without a classifier (or a flow its classifier leaves to it).
pub(super) fn not_compiled(stage: &str) -> Class {
    match stateful_feature(stage) {
        Some(feature) => unsupported(format!("{feature} is not in the datapath yet")),
        None => unsupported(format!("stage {stage} is not compiled yet")),
    }
}

/// Router stages whose unsupported flows do not change how plain routed IPv4 is forwarded
/// between pods: SNAT on the way out applies only where NAT rules exist, which northd also
/// expresses as flows in the stages that are checked.
const HARMLESS_UNSUPPORTED_ROUTER_STAGES: [&str; 1] = ["lr_out_snat"];

/// Whether an unsupported flow of `stage` keeps its datapath from being forwarded
/// ([`crate::pipeline::ir::IrEntry::NotForwardable`]): a router stage's does (except the
/// harmless ones above); a switch stage's is reported only (`Unsupported`, and `UnenforcedAcl`
/// for ACL stages), its switch still forwards.
#[must_use]
pub fn unsupported_stops_forwarding(stage: &str) -> bool {
    stage.starts_with("lr_") && !HARMLESS_UNSUPPORTED_ROUTER_STAGES.contains(&stage)
}

/// Whether `stage` is one of the ACL stages (where NetworkPolicies and subnet ACLs land).
#[must_use]
pub fn is_acl_stage(stage: &str) -> bool {
    stateful_feature(stage) == Some("ACL")
}

/// Whether an unsupported flow of `stage` makes its pipeline of the switch fail closed
/// ([`crate::pipeline::ir::IrEntry::AclFailClosed`]): the ACL stages and the commit after them.
/// Returns the pipeline (`true`: egress). Load balancing flows in `ls_*_pre_stateful` and
/// `ls_in_lb` do not: they are reported, and Services are issue 17's.
#[must_use]
pub fn acl_fails_closed(stage: &str) -> Option<bool> {
    let egress = stage.starts_with("ls_out_");
    let acl = is_acl_stage(stage) || (stage.ends_with("_stateful") && !stage.contains("pre_"));
    (stage.starts_with("ls_") && acl).then_some(egress)
}

/// Whether the compiler keeps the address sets a flow of `stage` compares IP addresses with by
/// name (the ACL stages: a set's member becomes an entry of its own, so a pod joining a
/// NetworkPolicy's set changes one entry, not every ACL naming it).
#[must_use]
pub fn keeps_address_sets(stage: &str) -> bool {
    stage.starts_with("ls_") && is_acl_stage(stage)
}

/// The stateful feature a stage implements, for the unsupported reason.
fn stateful_feature(stage: &str) -> Option<&'static str> {
    let words: Vec<&str> = stage.split('_').collect();
    let has = |word: &str| words.contains(&word);
    Some(if has("acl") {
        "ACL"
    } else if has("lb") || has("aff") || has("hairpin") {
        "load balancing"
    } else if has("dnat") || has("snat") || has("unsnat") || has("undnat") {
        "NAT"
    } else if has("stateful") || has("defrag") || has("ct") {
        "conntrack"
    } else if has("qos") {
        "QoS"
    } else {
        return None;
    })
}
