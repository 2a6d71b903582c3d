//! The ACL part of the IR: what northd's ACL and conntrack stages of a switch (`ls_*_pre_acl`,
//! `ls_*_pre_lb`, `ls_*_pre_stateful`, `ls_*_acl_hint`, `ls_*_acl`, `ls_in_acl_after_lb`,
//! `ls_*_stateful`) ask of the datapath, typed: when a packet goes through conntrack, the rules
//! (priority, the conntrack states they apply in, a match on ports, addresses and transport,
//! the verdict), and the members of the port groups and address sets the rules name, kept as
//! entries of their own so that a pod joining a group or a set changes one entry.
//!
//! Conntrack states are [`ovnbpf_common::ct`]'s byte; a rule's [`States`] already folds in
//! northd's hint registers (`reg0[7..10]`), which are a function of the state.

use std::fmt;

pub use ovnbpf_common::ct::States;

use super::{Mac, Prefix};

/// An ACL stage of a switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AclStage {
    /// `ls_in_acl`: from-lport ACLs, run where the packet enters the switch.
    Ingress,
    /// `ls_in_acl_after_lb`: from-lport ACLs with `apply-after-lb` (Kube-OVN's egress rules).
    IngressAfterLb,
    /// `ls_out_acl`: to-lport ACLs, run where the packet leaves the switch.
    Egress,
}

impl AclStage {
    /// Whether the stage belongs to the egress pipeline.
    #[must_use]
    pub fn egress(self) -> bool {
        self == AclStage::Egress
    }

    /// The stage's name in northd.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            AclStage::Ingress => "ls_in_acl",
            AclStage::IngressAfterLb => "ls_in_acl_after_lb",
            AclStage::Egress => "ls_out_acl",
        }
    }
}

/// Which of the two stages that may send a packet to conntrack a tracking entry comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TrackingStage {
    /// `ls_*_pre_acl` (`reg0[0] = 1`, then `ct_next`): the switch has stateful ACLs.
    PreAcl,
    /// `ls_*_pre_lb` (`reg0[2] = 1`, then `ct_lb_mark`): the switch has load balancers.
    PreLb,
}

/// A logical port, or the ports of an SB port group (`<datapath key>_<NB name>`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortRef {
    Port(String),
    Group(String),
}

/// One value of an address match: a prefix, or the addresses of an Address_Set.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddressValue {
    Prefix(Prefix),
    Set(String),
}

/// `field == {values}` (or `!=` when `negated`: none of them).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AddressTerm {
    pub negated: bool,
    pub values: Vec<AddressValue>,
}

/// What a clause asks of the packet's network layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AclFamily {
    /// Any frame.
    #[default]
    Any,
    /// `ip`: IPv4 or IPv6.
    Ip,
    Ipv4,
    Ipv6,
}

/// One conjunction of conditions on a packet (all must hold).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclClause {
    pub inport: Option<PortRef>,
    pub outport: Option<PortRef>,
    pub family: AclFamily,
    /// `eth.mcast`: a multicast or broadcast destination MAC.
    pub eth_multicast: bool,
    pub eth_source: Option<Mac>,
    pub eth_destination: Option<Mac>,
    /// Conditions on the IPv4 source and destination (each term must hold).
    pub source: Vec<AddressTerm>,
    pub destination: Vec<AddressTerm>,
    /// The IP protocol (1 ICMPv4, 6 TCP, 17 UDP, 58 ICMPv6, 132 SCTP).
    pub protocol: Option<u8>,
    /// Inclusive ranges of the transport source and destination ports (any of them).
    pub source_ports: Option<Vec<(u16, u16)>>,
    pub destination_ports: Option<Vec<(u16, u16)>>,
    /// ICMP types (of [`AclClause::protocol`]'s ICMP), any of them.
    pub icmp_types: Option<Vec<u8>>,
}

/// A match: any of its clauses (empty: matches nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclMatch(pub Vec<AclClause>);

impl AclMatch {
    /// The match of every packet.
    #[must_use]
    pub fn any() -> Self {
        AclMatch(vec![AclClause::default()])
    }
}

/// What a rule does with the packets it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AclAction {
    /// On to the next stage; `commit`: the stateful stage commits the connection (`reg0[1]`,
    /// clearing `ct_mark.blocked`); `related`: the packet is a reply or related to an allowed
    /// connection (`reg0[17]`), which `ls_in_acl_after_lb` lets through.
    Allow { commit: bool, related: bool },
    /// Dropped; `block`: the connection is marked blocked first (`ct_commit {
    /// ct_mark.blocked = 1; }`), so its replies are dropped too.
    Drop { block: bool },
    /// Answered with a TCP reset or an ICMP unreachable (as OVN's `reject`), after marking the
    /// connection blocked when `block`.
    Reject { block: bool },
}

/// An ACL's `log` option, as northd writes it in the flow's `log(…)` action.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclLog {
    pub name: Option<String>,
    pub severity: Option<String>,
    pub verdict: String,
}

/// One ACL-stage flow, compiled.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclRule {
    pub stage: AclStage,
    pub priority: u16,
    /// The conntrack states it applies in (its conditions on `ct.*`, `ct_mark.blocked` and the
    /// hint registers, folded).
    pub states: States,
    /// Applies only to packets `ls_in_acl` let through as reply or related (`reg0[17] == 1`).
    pub after_related: bool,
    pub condition: AclMatch,
    pub action: AclAction,
    pub log: Option<AclLog>,
    /// northd's `stage-hint`: the first 8 hex digits of the NB ACL's UUID.
    pub acl: Option<String>,
}

impl fmt::Display for PortRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortRef::Port(name) => write!(f, "{name:?}"),
            PortRef::Group(name) => write!(f, "@{name}"),
        }
    }
}
