//! The ACL and conntrack part of the contract: per switch, which of its pipelines run ACL stages
//! and send packets to conntrack ([`AclSwitch`]); its rules in lists ([`list`]), each rule one
//! clause of a compiled ACL flow ([`AclRule`]); the members of the address sets and port sets
//! the rules name; and the connection table ([`CtKey`] → [`CtEntry`]), kept by the kernel
//! (LRU, pinned: entries survive an agent restart) and swept of expired entries by the agent.

use crate::ct::States;

/// The rule lists of a switch, each walked highest priority first.
pub mod list {
    /// `ls_in_pre_acl`'s flows that skip conntrack (and `allow-stateless` filters).
    pub const INGRESS_BYPASS_ACL: u32 = 0;
    /// `ls_in_pre_lb`'s flows that skip the load balancers' conntrack.
    pub const INGRESS_BYPASS_LB: u32 = 1;
    /// `ls_in_acl`.
    pub const INGRESS: u32 = 2;
    /// `ls_in_acl_after_lb`.
    pub const AFTER_LB: u32 = 3;
    pub const EGRESS_BYPASS_ACL: u32 = 4;
    pub const EGRESS_BYPASS_LB: u32 = 5;
    /// `ls_out_acl`.
    pub const EGRESS: u32 = 6;
    /// Lists per switch.
    pub const COUNT: usize = 7;
}

/// [`AclSwitch::flags`]: the ingress pipeline runs the ACL stage (`from_pod` hands IP frames
/// of the switch's pods to it).
pub const SWITCH_INGRESS: u32 = 1 << 0;
/// The egress pipeline runs it (deliveries to the switch's local ports go through it).
pub const SWITCH_EGRESS: u32 = 1 << 1;
/// Ingress IP goes to conntrack from `ls_in_pre_acl`, resp. `ls_in_pre_lb`.
pub const TRACK_INGRESS_ACL: u32 = 1 << 2;
pub const TRACK_INGRESS_LB: u32 = 1 << 3;
pub const TRACK_EGRESS_ACL: u32 = 1 << 4;
pub const TRACK_EGRESS_LB: u32 = 1 << 5;
/// `ls_*_pre_lb`'s `reg0[16] == 1 → next;`: what a stateless filter matched skips the load
/// balancers' conntrack too.
pub const STATELESS_SKIPS_LB_INGRESS: u32 = 1 << 6;
pub const STATELESS_SKIPS_LB_EGRESS: u32 = 1 << 7;
/// An ACL flow of the pipeline did not translate: everything reaching its ACL stage drops.
pub const FAIL_CLOSED_INGRESS: u32 = 1 << 8;
pub const FAIL_CLOSED_EGRESS: u32 = 1 << 9;
/// `ls_*_stateful` commits what the ACL stage marked.
pub const COMMIT_INGRESS: u32 = 1 << 10;
pub const COMMIT_EGRESS: u32 = 1 << 11;

/// The pipeline has rules from users' ACLs (not only northd's own): IPv6 through it, which the
/// kernel's ACL stage does not evaluate yet, is dropped (without them OVN lets it through).
pub const USER_RULES_INGRESS: u32 = 1 << 12;
pub const USER_RULES_EGRESS: u32 = 1 << 13;

/// From-lport rules of users' ACLs may drop what enters the switch from a router or localnet
/// port, where the kernel runs no ingress ACL stage: IPv4 routed into the switch, or from its
/// provider network, is dropped (fails closed).
pub const UNCHECKED_INGRESS: u32 = 1 << 14;
/// To-lport rules may drop what leaves the switch to a router or localnet port, where the
/// kernel runs no egress ACL stage: IPv4 to its routers or provider network is dropped.
pub const UNCHECKED_EGRESS: u32 = 1 << 15;
/// To-lport rules may drop flood copies, which the kernel delivers without the egress ACL
/// stage: IPv4 floods on the switch are dropped.
pub const UNCHECKED_FLOOD: u32 = 1 << 16;

/// A switch with ACLs: [`SWITCH_INGRESS`] and the other flags, and each list's rule count.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AclSwitch {
    pub flags: u32,
    pub counts: [u16; 8],
}

/// One rule: the `index`-th of `list` on switch `datapath`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AclRuleKey {
    pub datapath: u32,
    pub list: u32,
    pub index: u32,
}

/// [`AclRule::action`].
pub mod action {
    pub const ALLOW: u8 = 0;
    /// Allow, and the stateful stage commits the connection (clearing `ct_mark.blocked`).
    pub const ALLOW_COMMIT: u8 = 1;
    /// Allow as a reply or related packet (`reg0[17]`, which `ls_in_acl_after_lb` honours).
    pub const ALLOW_RELATED: u8 = 2;
    pub const DROP: u8 = 3;
    /// Mark the connection blocked, then drop.
    pub const DROP_BLOCK: u8 = 4;
    pub const REJECT: u8 = 5;
    pub const REJECT_BLOCK: u8 = 6;
    /// A bypass list's rule: the packet skips that conntrack.
    pub const BYPASS: u8 = 7;
    /// A stateless filter (`allow-stateless`): skips conntrack, and the load balancers' too
    /// where the switch says so.
    pub const BYPASS_STATELESS: u8 = 8;
}

/// [`AclRule::flags`]: applies only after `ls_in_acl` allowed the packet as related.
pub const RULE_AFTER_RELATED: u32 = 1 << 0;
/// The destination MAC is multicast (`eth.mcast`).
pub const RULE_ETH_MULTICAST: u32 = 1 << 1;
/// IPv4 or IPv6 (`ip`), IPv4 only, IPv6 only.
pub const RULE_IP: u32 = 1 << 2;
pub const RULE_IPV4: u32 = 1 << 3;
pub const RULE_IPV6: u32 = 1 << 4;
/// [`AclRule::eth_source`], [`AclRule::eth_destination`] must equal the frame's.
pub const RULE_ETH_SOURCE: u32 = 1 << 5;
pub const RULE_ETH_DESTINATION: u32 = 1 << 6;

/// An address condition: the address is in one of `sets` (0: unused slot), or in none of them
/// when `negated`. A term whose sets are all 0 is no condition.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AclAddressTerm {
    pub sets: [u32; 2],
    pub negated: u32,
}

/// An inclusive range of transport ports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortRange {
    pub low: u16,
    pub high: u16,
}

/// Address terms per side, port ranges per side and ICMP types a rule holds (a clause with
/// more ranges or types is split into several rules; more address terms do not translate).
pub const RULE_ADDRESS_TERMS: usize = 2;
pub const RULE_SOURCE_PORTS: usize = 2;
pub const RULE_DESTINATION_PORTS: usize = 4;
pub const RULE_ICMP_TYPES: usize = 4;

/// One clause of a compiled ACL-stage flow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AclRule {
    /// The conntrack states it applies in ([`crate::ct`]).
    pub states: States,
    pub priority: u16,
    pub action: u8,
    /// The IP protocol (0: any).
    pub protocol: u8,
    pub flags: u32,
    /// The port sets (`ACL_PORT_SETS`) the logical inport and outport must be in; 0: any.
    pub inport_set: u32,
    pub outport_set: u32,
    pub source: [AclAddressTerm; RULE_ADDRESS_TERMS],
    pub destination: [AclAddressTerm; RULE_ADDRESS_TERMS],
    pub source_ports: [PortRange; RULE_SOURCE_PORTS],
    pub destination_ports: [PortRange; RULE_DESTINATION_PORTS],
    /// Ranges in use (0: any port).
    pub source_port_count: u8,
    pub destination_port_count: u8,
    /// Types in use (0: any type).
    pub icmp_type_count: u8,
    pub padding: u8,
    pub icmp_types: [u8; RULE_ICMP_TYPES],
    pub eth_source: [u8; 6],
    pub eth_destination: [u8; 6],
    /// The agent's id of the rule's `log` option (its ACL's name, severity and verdict); 0: not
    /// logged. A logged rule that decides reports the packet on `ACL_LOG_EVENTS`.
    pub log: u32,
}

/// What a logged rule reports of a packet it decided ([`crate::map::ACL_LOG_EVENTS`]): the
/// rule's log id, where (switch, logical ports), the kernel action, the conntrack state and the
/// packet's MACs, addresses, transport ports (ICMP: the type as the source port) and TCP
/// flags.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AclLogEvent {
    pub log: u32,
    pub datapath: u32,
    /// Ingress port key << 16 | egress port key (0 in the ingress pipeline).
    pub ports: u32,
    /// IPv4 addresses in network byte order.
    pub source: u32,
    pub destination: u32,
    pub source_port: u16,
    pub destination_port: u16,
    pub action: u8,
    pub state: u8,
    pub protocol: u8,
    pub tcp_flags: u8,
    pub eth_source: [u8; 6],
    pub eth_destination: [u8; 6],
}

/// Capacity of [`crate::map::ACL_LOG_EVENTS`] in bytes (a power of two, a multiple of the page
/// size): 2,048 events waiting.
pub const ACL_LOG_EVENTS_BYTES: u32 = 128 * 1024;

/// Indexes of [`crate::map::CONNTRACK_COUNTERS`]: connections committed to the table, and
/// commits that failed. A full table evicts its least recently used entry to make room (the
/// table's policy: never a packet dropped for it); inserted − live − swept is what it evicted.
pub mod ct_counter {
    pub const INSERTED: u32 = 0;
    pub const INSERT_FAILED: u32 = 1;
    pub const COUNT: u32 = 2;
    /// Names for metrics, by index.
    pub const NAMES: [&str; COUNT as usize] = ["inserted", "insert_failed"];
}

/// Indexes of [`crate::map::ACL_LOGGED`]: the packets logged rules decided, by verdict, and the
/// events the ring buffer had no room for.
pub mod logged {
    pub const ALLOW: u32 = 0;
    pub const DROP: u32 = 1;
    pub const REJECT: u32 = 2;
    /// Events lost: the ring buffer was full (the verdict counters still count them).
    pub const LOST: u32 = 3;
    pub const COUNT: u32 = 4;
    /// Names for metrics, by index.
    pub const NAMES: [&str; COUNT as usize] = ["allow", "drop", "reject", "lost"];
}

/// What one walk of a rule list depends on: the list, the conntrack state the walk held and
/// whether `ls_in_acl` let the packet through as related, and every field of the packet a rule
/// reads. The key of [`crate::map::ACL_VERDICTS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AclVerdictKey {
    pub datapath: u32,
    pub list: u8,
    pub state: u8,
    pub related: u8,
    /// 4 or 6.
    pub family: u8,
    pub protocol: u8,
    pub icmp_type: u8,
    pub padding: u16,
    /// The logical ports (0: none).
    pub inport: u32,
    pub outport: u32,
    /// IPv4 addresses in network byte order.
    pub source: u32,
    pub destination: u32,
    pub source_port: u16,
    pub destination_port: u16,
    pub eth_source: [u8; 6],
    pub eth_destination: [u8; 6],
}

// The kernel compares keys word by word.
const _: () = assert!(core::mem::size_of::<AclVerdictKey>().is_multiple_of(4));

/// A walk's outcome, valid while [`crate::map::ACL_GENERATION`] still holds `generation`: whether
/// a rule matched, its action and log id. `key` repeats the entry's key: an LRU map may hand a
/// freed entry to another key while a reader holds it, and the reader, comparing `key` after
/// reading the outcome, then sees a different key rather than another packet's verdict.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AclVerdict {
    pub key: AclVerdictKey,
    pub found: u8,
    pub action: u8,
    pub padding: u16,
    pub log: u32,
    pub padding2: u32,
    pub generation: u64,
}

/// Indexes of [`crate::map::ACL_VERDICT_CACHE`]: walks answered from the verdict cache, and
/// walks done (then stored).
pub mod verdict_cache {
    pub const HIT: u32 = 0;
    pub const MISS: u32 = 1;
    pub const COUNT: u32 = 2;
    /// Names for metrics, by index.
    pub const NAMES: [&str; COUNT as usize] = ["hit", "miss"];
}

/// An address set member: the LPM trie's data (set id, then the IPv4 address in network byte
/// order; the prefix length is 32 + the member's).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AclAddressKey {
    pub set: u32,
    pub address: u32,
}

/// A port set member: a logical port's tunnel key in set `set`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AclPortKey {
    pub set: u32,
    pub port: u32,
}

/// A connection in the zone of logical port (`datapath`, `port`), as OVN gives each port its
/// own zone: the IPv4 protocol and both ends, the lower (address, port) pair first, so both
/// directions find the same entry. ICMP echo uses its identifier as both ports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CtKey {
    pub datapath: u32,
    pub port: u32,
    pub address_a: u32,
    pub address_b: u32,
    pub port_a: u16,
    pub port_b: u16,
    pub protocol: u32,
}

/// [`CtEntry::flags`]: the connection was opened from end a (the key's first pair).
pub const CT_ORIGIN_A: u32 = 1 << 0;
/// A packet in the reply direction was seen (the connection is established).
pub const CT_REPLIED: u32 = 1 << 1;
/// `ct_mark.blocked`.
pub const CT_BLOCKED: u32 = 1 << 2;
/// TCP: a FIN from end a, from end b; a reset.
pub const CT_FIN_A: u32 = 1 << 3;
pub const CT_FIN_B: u32 = 1 << 4;
pub const CT_RESET: u32 = 1 << 5;

/// A committed connection: when it expires (`bpf_ktime_get_ns`, CLOCK_MONOTONIC) and its flags.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtEntry {
    pub expires: u64,
    pub flags: u32,
    pub padding: u32,
}

/// Seconds a connection lives after its last packet, by state (Linux conntrack's defaults, which
/// OVN's kernel datapath inherits).
pub mod timeout {
    pub const TCP_OPENING: u64 = 120;
    pub const TCP_ESTABLISHED: u64 = 432_000;
    pub const TCP_CLOSING: u64 = 120;
    pub const TCP_RESET: u64 = 10;
    pub const UDP_UNREPLIED: u64 = 30;
    pub const UDP_REPLIED: u64 = 120;
    pub const ICMP: u64 = 30;
    pub const OTHER: u64 = 600;
}

/// The seconds a connection in `flags` of `protocol` lives after a packet.
#[must_use]
pub fn lifetime(protocol: u8, flags: u32) -> u64 {
    let replied = flags & CT_REPLIED != 0;
    match protocol {
        6 if flags & CT_RESET != 0 => timeout::TCP_RESET,
        6 if flags & (CT_FIN_A | CT_FIN_B) != 0 => timeout::TCP_CLOSING,
        6 if replied => timeout::TCP_ESTABLISHED,
        6 => timeout::TCP_OPENING,
        17 if replied => timeout::UDP_REPLIED,
        17 => timeout::UDP_UNREPLIED,
        1 => timeout::ICMP,
        _ => timeout::OTHER,
    }
}

/// Rules one list holds (the kernel walks at most this many).
pub const MAX_RULES_PER_LIST: u32 = 1_024;
pub const MAX_ACL_SWITCHES: u32 = 16_384;
pub const MAX_ACL_RULES: u32 = 131_072;
pub const MAX_ACL_ADDRESSES: u32 = 262_144;
pub const MAX_ACL_PORTS: u32 = 131_072;
pub const MAX_CONNECTIONS: u32 = 262_144;
/// Walks the verdict cache remembers (the least recently used make room).
pub const MAX_ACL_VERDICTS: u32 = 32_768;

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: plain `#[repr(C)]` data without padding holes the kernel reads.
    unsafe impl aya::Pod for AclSwitch {}
    // SAFETY: as above.
    unsafe impl aya::Pod for AclRuleKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for AclRule {}
    // SAFETY: as above.
    unsafe impl aya::Pod for AclAddressKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for AclPortKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for CtKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for CtEntry {}
    // SAFETY: as above.
    unsafe impl aya::Pod for AclLogEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for AclVerdictKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for AclVerdict {}
}
