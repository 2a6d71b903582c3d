//! Connection tracking for the ACL stages (OVN's `ct_next`, `ct_commit`): a table of our own,
//! `CONNTRACK` (LRU hash, pinned), keyed per logical port's zone as OVN keys its zones, one entry
//! per connection for both directions ([`ovnbpf_common::acl::CtKey`]). Chosen over the kernel's
//! conntrack through the BPF kfuncs (`bpf_skb_ct_lookup`, `bpf_skb_ct_alloc`,
//! `bpf_ct_insert_entry`): the packets of the ACL stages never traverse netfilter, so the
//! kernel's TCP state machine would not see them anyway, and on one bench (`cargo xtask bench
//! conntrack`, the same packets through both, 2026-12-02) the kfuncs cost 1.20× ours for a packet
//! of an established connection (110 vs 92 ns a packet, BPF_PROG_TEST_RUN overhead included) and
//! 5.7× for a new one (2,213 vs 391 ns: allocation, insertion, reference counting). What the
//! kernel's table would bring (`conntrack -L`, sharing with the node's netfilter) is not worth
//! that on every new connection. What it keeps, and what OVN's ACL flows read:
//! - not in the table: `new` (a TCP reset, an ICMP echo reply and an ICMP error about nothing
//!   known are `inv`, as Linux conntrack says);
//! - committed, no reply seen yet: `new` in the original direction, `est|rpl` for the first reply
//!   (which marks it replied), `est` afterwards; `ct_mark.blocked` as committed;
//! - ICMP errors quoting a committed connection: `rel`;
//! - lifetimes after the last packet as Linux's defaults (`acl::lifetime`); an expired entry is
//!   as good as absent, and the agent sweeps them.
//!
//! A full table evicts its least recently used entry (LRU): a new connection always gets its
//! entry, the longest idle one loses its own; commits are counted (`CONNTRACK_COUNTERS`).
//!
//! Only the ACL stages write the table; entries are changed in place (a flag or the expiry, a
//! race between CPUs loses nothing but an expiry refresh).

use aya_ebpf::helpers::bpf_ktime_get_ns;
use ovnbpf_common::{
    acl::{
        CT_BLOCKED, CT_FIN_A, CT_FIN_B, CT_ORIGIN_A, CT_REPLIED, CT_RESET, CtEntry, CtKey,
        ct_counter, lifetime,
    },
    ct,
};

use crate::{CONNTRACK, CONNTRACK_COUNTERS};

const IPPROTO_ICMP: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const TCP_FIN: u8 = 0x01;
const TCP_RST: u8 = 0x04;
const ICMP_ECHO_REPLY: u8 = 0;
const NANOS: u64 = 1_000_000_000;

/// An IPv4 flow as conntrack keys it: addresses in network byte order, ports in host order
/// (ICMP echo: the identifier as both), the TCP flags of this packet.
#[derive(Clone, Copy, Default)]
pub struct Flow {
    pub source: u32,
    pub destination: u32,
    pub source_port: u16,
    pub destination_port: u16,
    pub protocol: u8,
    pub tcp_flags: u8,
    pub icmp_type: u8,
    /// For an ICMP error: the flow it quotes is in `quoted`.
    pub is_error: bool,
    pub quoted: QuotedFlow,
}

/// The flow an ICMP error quotes (as sent: its source is the error's destination).
#[derive(Clone, Copy, Default)]
pub struct QuotedFlow {
    pub source: u32,
    pub destination: u32,
    pub source_port: u16,
    pub destination_port: u16,
    pub protocol: u8,
}

/// A logical port's zone.
#[derive(Clone, Copy)]
pub struct Zone {
    pub datapath: u32,
    pub port: u32,
}

/// The key of `(source, destination)` in `zone`, and whether `source` is end a.
#[inline(always)]
fn key_of(zone: Zone, source: (u32, u16), destination: (u32, u16), protocol: u8) -> (CtKey, bool) {
    let a_first =
        (u32::from_be(source.0), source.1) <= (u32::from_be(destination.0), destination.1);
    let (a, b) = if a_first {
        (source, destination)
    } else {
        (destination, source)
    };
    (
        CtKey {
            datapath: zone.datapath,
            port: zone.port,
            address_a: a.0,
            address_b: b.0,
            port_a: a.1,
            port_b: b.1,
            protocol: u32::from(protocol),
        },
        a_first,
    )
}

#[inline(always)]
fn flow_key(zone: Zone, flow: &Flow) -> (CtKey, bool) {
    key_of(
        zone,
        (flow.source, flow.source_port),
        (flow.destination, flow.destination_port),
        flow.protocol,
    )
}

/// `ct_next`: the state of `flow` in `zone` ([`ct`] bits), the entry refreshed.
#[inline(always)]
pub fn lookup(zone: Zone, flow: &Flow) -> u8 {
    // SAFETY: the helper takes no arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if flow.is_error {
        let quoted = &flow.quoted;
        let (key, _) = key_of(
            zone,
            (quoted.source, quoted.source_port),
            (quoted.destination, quoted.destination_port),
            quoted.protocol,
        );
        // SAFETY: the value stays valid (RCU) while the program runs; only read here.
        return match unsafe { CONNTRACK.get(key) } {
            Some(entry) if entry.expires > now => {
                let blocked = if entry.flags & CT_BLOCKED != 0 {
                    ct::BLOCKED
                } else {
                    0
                };
                ct::TRACKED | ct::RELATED | blocked
            }
            _ => ct::TRACKED | ct::INVALID,
        };
    }
    let (key, from_a) = flow_key(zone, flow);
    let Some(entry) = CONNTRACK.get_ptr_mut(key) else {
        return untracked_state(flow);
    };
    // SAFETY: as above; the entry is only changed in place, field by field.
    let entry = unsafe { &mut *entry };
    if entry.expires <= now {
        return untracked_state(flow);
    }
    let original = (entry.flags & CT_ORIGIN_A != 0) == from_a;
    let mut flags = entry.flags;
    if !original {
        flags |= CT_REPLIED;
    }
    if flow.protocol == IPPROTO_TCP {
        if flow.tcp_flags & TCP_FIN != 0 {
            flags |= if from_a { CT_FIN_A } else { CT_FIN_B };
        }
        if flow.tcp_flags & TCP_RST != 0 {
            flags |= CT_RESET;
        }
    }
    let was_replied = entry.flags & CT_REPLIED != 0;
    entry.flags = flags;
    entry.expires = now + lifetime(flow.protocol, flags) * NANOS;
    let direction = if !original {
        ct::ESTABLISHED | ct::REPLY
    } else if was_replied {
        ct::ESTABLISHED
    } else {
        ct::NEW
    };
    let blocked = if flags & CT_BLOCKED != 0 {
        ct::BLOCKED
    } else {
        0
    };
    ct::TRACKED | direction | blocked
}

/// What conntrack says of a packet of no committed connection.
#[inline(always)]
fn untracked_state(flow: &Flow) -> u8 {
    let invalid = (flow.protocol == IPPROTO_TCP && flow.tcp_flags & TCP_RST != 0)
        || (flow.protocol == IPPROTO_ICMP && flow.icmp_type == ICMP_ECHO_REPLY);
    if invalid {
        ct::TRACKED | ct::INVALID
    } else {
        ct::TRACKED | ct::NEW
    }
}

/// `ct_commit { ct_mark.blocked = 0; }`: commits `flow` in `zone` (this packet's direction the
/// original one), or clears the mark of a committed connection; an invalid packet is not
/// committed.
#[inline(always)]
pub fn commit(zone: Zone, flow: &Flow) {
    if flow.is_error {
        return;
    }
    // SAFETY: the helper takes no arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let (key, from_a) = flow_key(zone, flow);
    if let Some(entry) = CONNTRACK.get_ptr_mut(key) {
        // SAFETY: as in `lookup`.
        let entry = unsafe { &mut *entry };
        if entry.expires > now {
            entry.flags &= !CT_BLOCKED;
            return;
        }
    }
    // An invalid packet creates no entry (as OVS's `ct(commit)`; with Kube-OVN's
    // `use_ct_inv_match=false` northd's commit flows no longer exclude `ct.inv` themselves).
    // Checked here on the packet rather than on its state in the ACL stage: a branch on the
    // state there makes the verifier walk the rule lists once per state (218k → 390k).
    if untracked_state(flow) & ct::INVALID != 0 {
        return;
    }
    let flags = if from_a { CT_ORIGIN_A } else { 0 };
    let entry = CtEntry {
        expires: now + lifetime(flow.protocol, flags) * NANOS,
        flags,
        padding: 0,
    };
    // A full table evicts its least recently used entry; a failed insert leaves the connection
    // uncommitted (its replies are then judged by the ACLs as new packets). Both counted.
    let counter = if CONNTRACK.insert(key, entry, 0).is_ok() {
        ct_counter::INSERTED
    } else {
        ct_counter::INSERT_FAILED
    };
    crate::counters::bump(&CONNTRACK_COUNTERS, counter);
}

/// `ct_commit { ct_mark.blocked = 1; }`: marks a committed connection blocked.
#[inline(always)]
pub fn block(zone: Zone, flow: &Flow) {
    if flow.is_error {
        return;
    }
    let (key, _) = flow_key(zone, flow);
    if let Some(entry) = CONNTRACK.get_ptr_mut(key) {
        // SAFETY: as in `lookup`.
        unsafe { (*entry).flags |= CT_BLOCKED };
    }
}
