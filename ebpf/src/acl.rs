//! The ACL stages of a switch (OVN's `ls_in_pre_acl` … `ls_in_stateful` and `ls_out_pre_acl` …
//! `ls_out_stateful`), as tail-called programs: `acl_ingress` for IP frames from a pod (then, on
//! a switch with after-LB rules, `acl_after_lb` for them; then the rest of the switch,
//! [`crate::switching::switch_frame`]) and `acl_egress` for IP frames
//! delivered to a port whose switch has to-lport ACLs (then the delivery,
//! [`crate::output::deliver_after_acl`]). Each: the packet goes through conntrack
//! ([`crate::conntrack`]) unless a bypass rule skips it, then the rule lists are walked with
//! `bpf_loop` in priority order, the first rule holding in the packet's conntrack state and
//! matching its ports, addresses and transport deciding; the stateful stage commits what the
//! winner marked. Rules, the switch's flags and the sets they name are the agent's
//! (`agent/src/dataplane/ebpf/l2/acl.rs`). IPv4 only: other IPv6 than neighbour discovery and
//! MLD (which OVN's ACL stages always let through) is dropped and counted until issue 21.
//! A `reject` hands the packet to the `acl_reject` stage ([`crate::reject::acl_stage`]).
//! A logged rule that decides reports the packet (`ACL_LOGGED`, `ACL_LOG_EVENTS`).
//!
//! The verdict cache (`ACL_VERDICTS`): a main list's walk stores its outcome under everything it
//! read (the list, the conntrack state, the related flag, the packet's ports, addresses,
//! transport ports, ICMP type and MACs) with the ACL maps' generation (`ACL_GENERATION`), which
//! the agent advances after each write to them; a later packet with the same fields takes the
//! outcome without a walk while the generation holds. An exact-match cache, like OVS's
//! exact-match cache in front of its classifier: a connection's packets after the first cost
//! one lookup however many rules come before theirs, and any rule or member change makes every
//! outcome stale at once. Counted in `ACL_VERDICT_CACHE`.
//!
//! Reads `ACL_SWITCHES`, `ACL_RULES`, `ACL_ADDRESSES`, `ACL_PORT_SETS`, `ACL_GENERATION`; writes
//! `CONNTRACK`, `ACL_PACKET_SCRATCH` (the parsed packet), `ACL_VERDICTS`,
//! `ACL_VERDICT_SCRATCH`, `ACL_VERDICT_CACHE`, `ACL_LOGGED` and `ACL_LOG_EVENTS`.

use aya_ebpf::{
    cty::{c_long, c_void},
    helpers::bpf_loop,
    maps::lpm_trie::Key,
    programs::TcContext,
};
use ovnbpf_common::{
    ACL_REQUEST_MAGIC, AclRequest, DropReason,
    acl::{
        AclAddressKey, AclAddressTerm, AclLogEvent, AclPortKey, AclRule, AclRuleKey, AclSwitch,
        AclVerdictKey, COMMIT_EGRESS, COMMIT_INGRESS, FAIL_CLOSED_EGRESS, FAIL_CLOSED_INGRESS,
        MAX_RULES_PER_LIST, RULE_AFTER_RELATED, RULE_ETH_DESTINATION, RULE_ETH_MULTICAST,
        RULE_ETH_SOURCE, RULE_IP, RULE_IPV4, RULE_IPV6, STATELESS_SKIPS_LB_EGRESS,
        STATELESS_SKIPS_LB_INGRESS, TRACK_EGRESS_ACL, TRACK_EGRESS_LB, TRACK_INGRESS_ACL,
        TRACK_INGRESS_LB, USER_RULES_EGRESS, USER_RULES_INGRESS, action, list, logged,
        verdict_cache,
    },
    drop_reason, stage as slot,
};

use crate::{
    ACL_ADDRESSES, ACL_GENERATION, ACL_LOG_EVENTS, ACL_LOGGED, ACL_PACKET_SCRATCH, ACL_PORT_SETS,
    ACL_RULES, ACL_SWITCHES, ACL_VERDICT_CACHE, ACL_VERDICT_SCRATCH, ACL_VERDICTS,
    conntrack::{self, Flow, QuotedFlow, Zone},
    counters::bump,
    headers::{
        ETH_P_IPV4, ETH_P_IPV6, EthHeader, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP, Ipv4Header,
        Ipv6Header,
    },
    maps::get,
    stages,
};

const IPPROTO_ICMP: u8 = 1;
const IPPROTO_SCTP: u8 = 132;

/// The switch of `datapath` if its ingress (or egress) pipeline runs the ACL stage.
#[inline(always)]
pub fn switch_of(datapath: u32, flag: u32) -> Option<&'static AclSwitch> {
    get(&ACL_SWITCHES, datapath).filter(|switch| switch.flags & flag != 0)
}

/// Whether IPv4 on `datapath` must not take a path the kernel runs no ACL stage on (`flag`: one
/// of the `UNCHECKED_*` flags).
#[inline(always)]
pub fn unchecked(datapath: u32, flag: u32) -> bool {
    get(&ACL_SWITCHES, datapath).is_some_and(|switch| switch.flags & flag != 0)
}

/// Hands the frame to the ACL stage in `slot` (on success this never returns).
#[inline(always)]
pub fn request(ctx: &TcContext, stage: u32, request: &AclRequest) -> DropReason {
    stages::jump(ctx, stage, request.words())
}

/// The request for the ingress stage of a frame from logical port `ingress_port` of
/// `datapath`, sent from host veth `ifindex`.
#[inline(always)]
pub fn ingress_request(datapath: u32, ingress_port: u32, ifindex: u32) -> AclRequest {
    AclRequest {
        datapath,
        ports: ingress_port << 16,
        ifindex,
        flags: 0,
        magic: ACL_REQUEST_MAGIC,
    }
}

/// What the stages read of a packet.
#[derive(Clone, Copy, Default)]
pub(crate) struct Packet {
    eth_source: [u8; 6],
    eth_destination: [u8; 6],
    /// 4 or 6.
    family: u8,
    protocol: u8,
    source_port: u16,
    destination_port: u16,
    icmp_type: u8,
    inport: u32,
    outport: u32,
    flow: Flow,
}

/// A frame as the ACL stages take it.
enum Parsed {
    /// IPv4 the stage judges, read into the packet.
    Ip,
    /// IPv6 neighbour discovery or MLD: OVN's ACL stages let it through (priority 65532).
    Exempt,
    /// Other IPv6.
    Ipv6,
}

#[repr(C, packed)]
#[derive(Clone, Copy)]
struct Ports {
    source: u16,
    destination: u16,
}

/// ICMP's first eight bytes.
#[repr(C, packed)]
#[derive(Clone, Copy)]
struct IcmpHeader {
    kind: u8,
    code: u8,
    checksum: u16,
    id: u16,
    sequence: u16,
}

/// Reads the frame into `packet` (left as it was unless the frame is IP the stage judges).
#[inline(always)]
fn parse(
    ctx: &TcContext,
    inport: u32,
    outport: u32,
    packet: &mut Packet,
) -> Result<Parsed, DropReason> {
    let eth = ctx
        .load::<EthHeader>(0)
        .map_err(|_| drop_reason::ROUTED_MALFORMED)?;
    let (eth_source, eth_destination) = (eth.source, eth.destination);
    match u16::from_be(eth.ether_type) {
        ETH_P_IPV4 => {}
        ETH_P_IPV6 => {
            let ip = ctx
                .load::<Ipv6Header>(14)
                .map_err(|_| drop_reason::ROUTED_MALFORMED)?;
            if ip.next_header == IPPROTO_ICMPV6 {
                let kind = ctx
                    .load::<u8>(54)
                    .map_err(|_| drop_reason::ROUTED_MALFORMED)?;
                if matches!(kind, 130..=136 | 143) {
                    return Ok(Parsed::Exempt);
                }
            }
            return Ok(Parsed::Ipv6);
        }
        _ => return Err(drop_reason::ROUTED_MALFORMED),
    }
    let ip = ctx
        .load::<Ipv4Header>(14)
        .map_err(|_| drop_reason::ROUTED_MALFORMED)?;
    let l4 = 14 + usize::from(ip.version_ihl & 0x0f) * 4;
    *packet = Packet {
        eth_source,
        eth_destination,
        inport,
        outport,
        ..Packet::default()
    };
    packet.family = 4;
    packet.protocol = ip.protocol;
    packet.flow.source = ip.source;
    packet.flow.destination = ip.destination;
    packet.flow.protocol = ip.protocol;
    // Later fragments carry no transport header.
    let later_fragment = u16::from_be(ip.fragment) & 0x1fff != 0;
    if later_fragment {
        return Ok(Parsed::Ip);
    }
    match ip.protocol {
        IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP => {
            let ports = ctx
                .load::<Ports>(l4)
                .map_err(|_| drop_reason::ROUTED_MALFORMED)?;
            packet.source_port = u16::from_be(ports.source);
            packet.destination_port = u16::from_be(ports.destination);
            packet.flow.source_port = packet.source_port;
            packet.flow.destination_port = packet.destination_port;
            if ip.protocol == IPPROTO_TCP {
                packet.flow.tcp_flags = ctx.load::<u8>(l4 + 13).unwrap_or(0);
            }
        }
        IPPROTO_ICMP => {
            let icmp = ctx
                .load::<IcmpHeader>(l4)
                .map_err(|_| drop_reason::ROUTED_MALFORMED)?;
            packet.icmp_type = icmp.kind;
            packet.flow.icmp_type = icmp.kind;
            match icmp.kind {
                // Echo request and reply: the identifier stands for both ports.
                0 | 8 => {
                    packet.flow.source_port = u16::from_be(icmp.id);
                    packet.flow.destination_port = u16::from_be(icmp.id);
                }
                // Errors quote the datagram they are about.
                3 | 11 | 12 => {
                    let quoted = ctx
                        .load::<Ipv4Header>(l4 + 8)
                        .map_err(|_| drop_reason::ROUTED_MALFORMED)?;
                    let quoted_l4 = l4 + 8 + usize::from(quoted.version_ihl & 0x0f) * 4;
                    let mut ports = ctx.load::<Ports>(quoted_l4).unwrap_or(Ports {
                        source: 0,
                        destination: 0,
                    });
                    // An error about an echo request: its identifier stands for both ports, as
                    // for the echo itself.
                    if quoted.protocol == IPPROTO_ICMP
                        && let Ok(echo) = ctx.load::<IcmpHeader>(quoted_l4)
                        && echo.kind == 8
                    {
                        ports = Ports {
                            source: echo.id,
                            destination: echo.id,
                        };
                    }
                    packet.flow.is_error = true;
                    packet.flow.quoted = QuotedFlow {
                        source: quoted.source,
                        destination: quoted.destination,
                        source_port: u16::from_be(ports.source),
                        destination_port: u16::from_be(ports.destination),
                        protocol: quoted.protocol,
                    };
                }
                _ => {}
            }
        }
        _ => {}
    }
    Ok(Parsed::Ip)
}

/// This CPU's block for the packet a stage judges.
#[inline(always)]
fn packet_block() -> Result<&'static mut Packet, DropReason> {
    let block = ACL_PACKET_SCRATCH
        .get_ptr_mut(0)
        .ok_or(drop_reason::STAGE_REQUEST_INVALID)?;
    // SAFETY: this CPU's slot, used by nothing else while the program runs; a `Packet` is
    // plain data, any bytes are one.
    Ok(unsafe { &mut *block })
}

/// [`parse`] out of line, into this CPU's `ACL_PACKET_SCRATCH` block: the verifier then meets
/// one state after it rather than one per way through the parser, each carrying its own packet
/// on the stack into the rule walk and the verdict (which took `acl_egress` past its budget).
#[inline(never)]
fn parse_into_block(
    ctx: &TcContext,
    inport: u32,
    outport: u32,
    block: &mut Packet,
) -> Result<Parsed, DropReason> {
    parse(ctx, inport, outport, block)
}

/// A walk of one rule list, in the caller's frame.
struct Walk {
    key: AclRuleKey,
    count: u32,
    state: u8,
    related: bool,
    /// The winner's action and log id, if one matched.
    found: bool,
    action: u8,
    log: u32,
    packet: Packet,
}

#[inline(always)]
fn in_port_set(set: u32, port: u32) -> bool {
    set == 0 || get(&ACL_PORT_SETS, AclPortKey { set, port }).is_some()
}

#[inline(always)]
fn term_holds(term: &AclAddressTerm, address: u32) -> bool {
    if term.sets[0] == 0 && term.sets[1] == 0 {
        return true;
    }
    let member = |set: u32| {
        set != 0
            && ACL_ADDRESSES
                .get(Key::new(64, AclAddressKey { set, address }))
                .is_some()
    };
    (member(term.sets[0]) || member(term.sets[1])) != (term.negated != 0)
}

#[inline(always)]
fn in_ranges(ranges: &[ovnbpf_common::acl::PortRange], count: u8, port: u16) -> bool {
    if count == 0 {
        return true;
    }
    let mut i = 0;
    while i < ranges.len() {
        if (i as u8) < count && ranges[i].low <= port && port <= ranges[i].high {
            return true;
        }
        i += 1;
    }
    false
}

#[inline(always)]
fn rule_matches(rule: &AclRule, walk: &Walk) -> bool {
    let packet = &walk.packet;
    let flags = rule.flags;
    if !rule.states.contains(walk.state)
        || (flags & RULE_AFTER_RELATED != 0 && !walk.related)
        || (flags & RULE_IPV4 != 0 && packet.family != 4)
        || (flags & RULE_IPV6 != 0 && packet.family != 6)
        || (flags & RULE_IP != 0 && packet.family == 0)
        || (flags & RULE_ETH_MULTICAST != 0 && packet.eth_destination[0] & 1 == 0)
        || (flags & RULE_ETH_SOURCE != 0 && rule.eth_source != packet.eth_source)
        || (flags & RULE_ETH_DESTINATION != 0 && rule.eth_destination != packet.eth_destination)
        || (rule.protocol != 0 && rule.protocol != packet.protocol)
    {
        return false;
    }
    if !in_ranges(
        &rule.source_ports,
        rule.source_port_count,
        packet.source_port,
    ) || !in_ranges(
        &rule.destination_ports,
        rule.destination_port_count,
        packet.destination_port,
    ) {
        return false;
    }
    if rule.icmp_type_count != 0 {
        let mut any = false;
        let mut i = 0;
        while i < rule.icmp_types.len() {
            any |= (i as u8) < rule.icmp_type_count && rule.icmp_types[i] == packet.icmp_type;
            i += 1;
        }
        if !any {
            return false;
        }
    }
    if !in_port_set(rule.inport_set, packet.inport)
        || (rule.outport_set != 0
            && (packet.outport == 0 || !in_port_set(rule.outport_set, packet.outport)))
    {
        return false;
    }
    term_holds(&rule.source[0], packet.flow.source)
        && term_holds(&rule.source[1], packet.flow.source)
        && term_holds(&rule.destination[0], packet.flow.destination)
        && term_holds(&rule.destination[1], packet.flow.destination)
}

/// One rule of the walk: stops at the first that matches.
#[inline(never)]
extern "C" fn rule_at(index: u32, walk: *mut c_void) -> c_long {
    // SAFETY: `walk` is the `Walk` the caller passed to bpf_loop, on its stack.
    let walk = unsafe { &mut *walk.cast::<Walk>() };
    if index >= walk.count {
        return 1;
    }
    let key = AclRuleKey { index, ..walk.key };
    let Some(rule) = get(&ACL_RULES, key) else {
        return 0;
    };
    if rule_matches(rule, walk) {
        walk.found = true;
        walk.action = rule.action;
        walk.log = rule.log;
        return 1;
    }
    0
}

/// Reports the packet the walk's logged winner decided (OVN's `log()` action): counted by
/// verdict, and an event on `ACL_LOG_EVENTS` when the ring buffer has room (else counted lost).
/// Called after the walk rather than in its callback, which the verifier walks far more often.
#[inline(never)]
fn log(walk: &Walk) {
    let verdict = match walk.action {
        action::DROP | action::DROP_BLOCK => logged::DROP,
        action::REJECT | action::REJECT_BLOCK => logged::REJECT,
        _ => logged::ALLOW,
    };
    bump(&ACL_LOGGED, verdict);
    let packet = &walk.packet;
    let Some(mut entry) = ACL_LOG_EVENTS.reserve::<AclLogEvent>(0) else {
        bump(&ACL_LOGGED, logged::LOST);
        return;
    };
    let source_port = if packet.protocol == IPPROTO_ICMP {
        u16::from(packet.icmp_type)
    } else {
        packet.source_port
    };
    // Written field by field into the reserved slot: a whole event built on the stack first
    // would not fit the callback's frame.
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points to the reserved, writable slot of one AclLogEvent; every field is
    // written before the slot is submitted.
    unsafe {
        (*event).log = walk.log;
        (*event).datapath = walk.key.datapath;
        (*event).ports = packet.inport << 16 | packet.outport;
        (*event).source = packet.flow.source;
        (*event).destination = packet.flow.destination;
        (*event).source_port = source_port;
        (*event).destination_port = packet.destination_port;
        (*event).action = walk.action;
        (*event).state = walk.state;
        (*event).protocol = packet.protocol;
        (*event).tcp_flags = packet.flow.tcp_flags;
        (*event).eth_source = packet.eth_source;
        (*event).eth_destination = packet.eth_destination;
    }
    entry.submit(0);
}

/// The first rule of `list` matching, as (found, action). A main list (`MAIN`: `ls_*_acl`,
/// `ls_in_acl_after_lb`) is walked only when the verdict cache has no current outcome for the
/// packet's fields; the walk's outcome is then stored. A main list's logged winner reports the
/// packet, from the cache too.
#[inline(always)]
fn first_match<const MAIN: bool>(
    datapath: u32,
    list: u32,
    switch: &AclSwitch,
    packet: &Packet,
    state: u8,
    related: bool,
) -> Option<u8> {
    let count = u32::from(switch.counts[list as usize & 7]).min(MAX_RULES_PER_LIST);
    if count == 0 {
        return None;
    }
    let mut walk = Walk {
        key: AclRuleKey {
            datapath,
            list,
            index: 0,
        },
        count,
        state,
        related,
        found: false,
        action: 0,
        log: 0,
        packet: *packet,
    };
    if MAIN {
        walk_cached(&mut walk);
    } else {
        walk_all(&mut walk);
    }
    if MAIN && walk.log != 0 {
        log(&walk);
    }
    walk.found.then_some(walk.action)
}

/// The walk over all the list's rules.
#[inline(always)]
fn walk_all(walk: &mut Walk) {
    // SAFETY: the callback only reads maps and writes the walk it is given.
    unsafe {
        bpf_loop(
            walk.count,
            rule_at as *mut c_void,
            (walk as *mut Walk).cast(),
            0,
        )
    };
}

/// The walk, unless the verdict cache holds its outcome in the ACL maps' current generation; a
/// walk's outcome is then stored (without a generation, nothing is cached). Out of line, its
/// key and outcome in `ACL_VERDICT_SCRATCH`: they would not fit the stages' frames.
#[inline(never)]
fn walk_cached(walk: &mut Walk) {
    let (Some(generation), Some(scratch)) = (
        get(&ACL_GENERATION, 0).copied(),
        ACL_VERDICT_SCRATCH.get_ptr_mut(0),
    ) else {
        return walk_all(walk);
    };
    // SAFETY: this CPU's scratch slot, used by nothing else while the program runs.
    let scratch = unsafe { &mut *scratch };
    write_verdict_key(walk, &mut scratch.key);
    if cached(&scratch.key, generation, walk) {
        bump(&ACL_VERDICT_CACHE, verdict_cache::HIT);
        return;
    }
    bump(&ACL_VERDICT_CACHE, verdict_cache::MISS);
    walk_all(walk);
    scratch.found = u8::from(walk.found);
    scratch.action = walk.action;
    scratch.padding = 0;
    scratch.log = walk.log;
    scratch.padding2 = 0;
    scratch.generation = generation;
    // A full cache evicts its least recently used outcome; a failed store only costs the next
    // packet a walk.
    // By reference: by value, the key and outcome would be copied to the stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let _ = ACL_VERDICTS.insert(&scratch.key, &*scratch, 0);
}

/// The verdict cache's key for the walk: the list, the state and every packet field a rule
/// reads.
#[inline(always)]
fn write_verdict_key(walk: &Walk, key: &mut AclVerdictKey) {
    let packet = &walk.packet;
    key.datapath = walk.key.datapath;
    key.list = walk.key.list as u8;
    key.state = walk.state;
    key.related = u8::from(walk.related);
    key.family = packet.family;
    key.protocol = packet.protocol;
    key.icmp_type = packet.icmp_type;
    key.padding = 0;
    key.inport = packet.inport;
    key.outport = packet.outport;
    key.source = packet.flow.source;
    key.destination = packet.flow.destination;
    key.source_port = packet.source_port;
    key.destination_port = packet.destination_port;
    key.eth_source = packet.eth_source;
    key.eth_destination = packet.eth_destination;
}

/// Whether the cache holds `key`'s outcome in `generation`; if so, the walk takes it. The
/// outcome is read before the entry's copy of its key, which must then still be `key` (an entry
/// the LRU map reused meanwhile for another key fails that comparison).
#[inline(always)]
fn cached(key: &AclVerdictKey, generation: u64, walk: &mut Walk) -> bool {
    let Some(entry) = ACL_VERDICTS.get_ptr(key) else {
        return false;
    };
    // SAFETY: `entry` points into the map's value, valid while the program runs.
    let (stored, found, action, log) = unsafe {
        (
            core::ptr::read_volatile(&raw const (*entry).generation),
            core::ptr::read_volatile(&raw const (*entry).found),
            core::ptr::read_volatile(&raw const (*entry).action),
            core::ptr::read_volatile(&raw const (*entry).log),
        )
    };
    // The key's loads stay after the outcome's.
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    // SAFETY: as above.
    if stored != generation || unsafe { !same_key(&raw const (*entry).key, key) } {
        return false;
    }
    walk.found = found != 0;
    walk.action = action;
    walk.log = log;
    true
}

/// Whether the key at `stored` (in a map's value) is `key`, word by word.
///
/// # Safety
/// `stored` points to a readable `AclVerdictKey`.
#[inline(always)]
unsafe fn same_key(stored: *const AclVerdictKey, key: &AclVerdictKey) -> bool {
    const WORDS: usize = core::mem::size_of::<AclVerdictKey>() / 4;
    // SAFETY: both point to an AclVerdictKey, WORDS aligned words (the caller's promise and a
    // reference).
    let (stored, key) = unsafe {
        (
            &*stored.cast::<[u32; WORDS]>(),
            &*(key as *const AclVerdictKey).cast::<[u32; WORDS]>(),
        )
    };
    let mut i = 0;
    while i < WORDS {
        if stored[i] != key[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Which lists and flags a pipeline uses.
struct Pipeline {
    bypass_acl: u32,
    bypass_lb: u32,
    track_acl: u32,
    track_lb: u32,
    stateless_skips_lb: u32,
}

const INGRESS: Pipeline = Pipeline {
    bypass_acl: list::INGRESS_BYPASS_ACL,
    bypass_lb: list::INGRESS_BYPASS_LB,
    track_acl: TRACK_INGRESS_ACL,
    track_lb: TRACK_INGRESS_LB,
    stateless_skips_lb: STATELESS_SKIPS_LB_INGRESS,
};

const EGRESS: Pipeline = Pipeline {
    bypass_acl: list::EGRESS_BYPASS_ACL,
    bypass_lb: list::EGRESS_BYPASS_LB,
    track_acl: TRACK_EGRESS_ACL,
    track_lb: TRACK_EGRESS_LB,
    stateless_skips_lb: STATELESS_SKIPS_LB_EGRESS,
};

/// Whether the packet goes through conntrack in this pipeline.
#[inline(always)]
fn tracked(datapath: u32, switch: &AclSwitch, pipeline: &Pipeline, packet: &Packet) -> bool {
    let by_acl = switch.flags & pipeline.track_acl != 0;
    let by_lb = switch.flags & pipeline.track_lb != 0;
    if !by_acl && !by_lb {
        return false;
    }
    let acl_bypass = first_match::<false>(datapath, pipeline.bypass_acl, switch, packet, 0, false);
    let stateless = acl_bypass == Some(action::BYPASS_STATELESS);
    if by_acl && acl_bypass.is_none() {
        return true;
    }
    by_lb
        && !(stateless && switch.flags & pipeline.stateless_skips_lb != 0)
        && first_match::<false>(datapath, pipeline.bypass_lb, switch, packet, 0, false).is_none()
}

/// What a rule list decided.
#[inline(always)]
fn judged(action: Option<u8>, zone: Zone, packet: &Packet) -> Result<(bool, bool), DropReason> {
    match action {
        None | Some(action::ALLOW) => Ok((false, false)),
        Some(action::ALLOW_COMMIT) => Ok((true, false)),
        Some(action::ALLOW_RELATED) => Ok((false, true)),
        Some(action::DROP_BLOCK) => {
            conntrack::block(zone, &packet.flow);
            Err(drop_reason::ACL_DROP)
        }
        Some(action::REJECT_BLOCK) => {
            conntrack::block(zone, &packet.flow);
            Err(drop_reason::ACL_REJECT)
        }
        Some(action::REJECT) => Err(drop_reason::ACL_REJECT),
        Some(_) => Err(drop_reason::ACL_DROP),
    }
}

/// What a stage's drop becomes: a rejected packet goes to the `acl_reject` stage, which answers
/// it (on success this never returns), with the request the stage was given (still in the
/// control block: [`stages::take`] clears only its magic) and `flags`; other drops stay drops.
/// Called by the stages' entry points, after the stage: a jump inside the stage costs the
/// verifier far more (acl_ingress 218k → 369k instructions).
#[inline(always)]
pub fn answered(ctx: &TcContext, reason: DropReason, flags: u32) -> DropReason {
    if reason != drop_reason::ACL_REJECT {
        return reason;
    }
    // SAFETY: tc programs may read the skb's control block.
    let cb = unsafe { (*ctx.skb.skb).cb };
    let request = AclRequest {
        datapath: cb[0],
        ports: cb[1],
        ifindex: cb[2],
        flags,
        magic: ACL_REQUEST_MAGIC,
    };
    stages::jump(ctx, slot::ACL_REJECT, request.words())
}

/// The `acl_ingress` stage.
#[inline(always)]
pub fn ingress_stage(ctx: &TcContext) -> Result<i32, DropReason> {
    let [datapath, ports, ifindex, _] = stages::take(ctx, ACL_REQUEST_MAGIC)?;
    let inport = ports >> 16;
    let Some(switch) = get(&ACL_SWITCHES, datapath) else {
        return crate::switching::switch_frame(ctx, datapath, inport, ifindex);
    };
    if switch.flags & FAIL_CLOSED_INGRESS != 0 {
        return Err(drop_reason::ACL_FAIL_CLOSED);
    }
    let block = packet_block()?;
    let packet: &Packet = match parse_into_block(ctx, inport, 0, block)? {
        Parsed::Ip => block,
        Parsed::Ipv6 if switch.flags & USER_RULES_INGRESS != 0 => {
            return Err(drop_reason::ACL_IPV6);
        }
        Parsed::Exempt | Parsed::Ipv6 => {
            return crate::switching::switch_frame(ctx, datapath, inport, ifindex);
        }
    };
    let zone = Zone {
        datapath,
        port: inport,
    };
    let is_tracked = tracked(datapath, switch, &INGRESS, packet);
    let state = if is_tracked {
        conntrack::lookup(zone, &packet.flow)
    } else {
        0
    };
    let first = first_match::<true>(datapath, list::INGRESS, switch, packet, state, false);
    let (commit, related) = judged(first, zone, packet)?;
    let verdict = AfterLb {
        state,
        related,
        commit,
        tracked: is_tracked,
    };
    if switch.counts[list::AFTER_LB as usize & 7] > 0 {
        let request = AclRequest {
            datapath,
            ports,
            ifindex,
            flags: verdict.flags(),
            magic: ACL_REQUEST_MAGIC,
        };
        return Err(stages::jump(ctx, slot::ACL_AFTER_LB, request.words()));
    }
    finish_ingress(ctx, switch, zone, packet, verdict, ifindex)
}

/// What the ingress stage hands its after-LB half (in the request's flags): the packet's
/// conntrack state, whether `ls_in_acl` let it through as related and asked for a commit, and
/// whether it is tracked at all.
#[derive(Clone, Copy)]
struct AfterLb {
    state: u8,
    related: bool,
    commit: bool,
    tracked: bool,
}

impl AfterLb {
    const RELATED: u32 = 1 << 8;
    const COMMIT: u32 = 1 << 9;
    const TRACKED: u32 = 1 << 10;

    fn flags(self) -> u32 {
        let bit = |set: bool, flag: u32| if set { flag } else { 0 };
        u32::from(self.state)
            | bit(self.related, Self::RELATED)
            | bit(self.commit, Self::COMMIT)
            | bit(self.tracked, Self::TRACKED)
    }

    fn from_flags(flags: u32) -> Self {
        Self {
            state: flags as u8,
            related: flags & Self::RELATED != 0,
            commit: flags & Self::COMMIT != 0,
            tracked: flags & Self::TRACKED != 0,
        }
    }
}

/// The ingress pipeline's end: the stateful stage's commit, then the rest of the switch.
#[inline(always)]
fn finish_ingress(
    ctx: &TcContext,
    switch: &AclSwitch,
    zone: Zone,
    packet: &Packet,
    verdict: AfterLb,
    ifindex: u32,
) -> Result<i32, DropReason> {
    if verdict.tracked && verdict.commit && switch.flags & COMMIT_INGRESS != 0 {
        conntrack::commit(zone, &packet.flow);
    }
    crate::switching::switch_frame(ctx, zone.datapath, zone.port, ifindex)
}

/// The `acl_after_lb` stage: `ls_in_acl_after_lb` (the from-lport ACLs applied after the load
/// balancers, Kube-OVN's NetworkPolicy egress rules among them) for what the ingress stage let
/// through, then its end. A stage of its own so that each program walks one list of rules
/// within the verifier budget.
#[inline(always)]
pub fn after_lb_stage(ctx: &TcContext) -> Result<i32, DropReason> {
    let [datapath, ports, ifindex, flags] = stages::take(ctx, ACL_REQUEST_MAGIC)?;
    let inport = ports >> 16;
    let Some(switch) = get(&ACL_SWITCHES, datapath) else {
        return crate::switching::switch_frame(ctx, datapath, inport, ifindex);
    };
    let block = packet_block()?;
    let Parsed::Ip = parse_into_block(ctx, inport, 0, block)? else {
        return crate::switching::switch_frame(ctx, datapath, inport, ifindex);
    };
    let packet: &Packet = block;
    let zone = Zone {
        datapath,
        port: inport,
    };
    let mut verdict = AfterLb::from_flags(flags);
    let after = first_match::<true>(
        datapath,
        list::AFTER_LB,
        switch,
        packet,
        verdict.state,
        verdict.related,
    );
    let (commit, _) = judged(after, zone, packet)?;
    verdict.commit |= commit;
    finish_ingress(ctx, switch, zone, packet, verdict, ifindex)
}

/// The `acl_egress` stage.
#[inline(always)]
pub fn egress_stage(ctx: &TcContext) -> Result<i32, DropReason> {
    let [datapath, ports, ifindex, flags] = stages::take(ctx, ACL_REQUEST_MAGIC)?;
    judge_egress(ctx, datapath, ports)?;
    // One delivery for every packet the stage lets through: inlined once, not once per way
    // through the stage (three copies took the verifier past its budget).
    let between = crate::output::Between { datapath, ports };
    crate::output::deliver_after_acl(ctx, ifindex, flags, true, between)
}

/// The egress stage's judgement of the packet on `datapath` between `ports` (the inport in the
/// high 16 bits): `Ok` to deliver it, or the drop reason.
#[inline(always)]
fn judge_egress(ctx: &TcContext, datapath: u32, ports: u32) -> Result<(), DropReason> {
    let (inport, outport) = (ports >> 16, ports & 0xffff);
    let Some(switch) = get(&ACL_SWITCHES, datapath) else {
        return Ok(());
    };
    if switch.flags & FAIL_CLOSED_EGRESS != 0 {
        return Err(drop_reason::ACL_FAIL_CLOSED);
    }
    let block = packet_block()?;
    let packet: &Packet = match parse_into_block(ctx, inport, outport, block)? {
        Parsed::Ip => block,
        Parsed::Ipv6 if switch.flags & USER_RULES_EGRESS != 0 => return Err(drop_reason::ACL_IPV6),
        Parsed::Exempt | Parsed::Ipv6 => return Ok(()),
    };
    let zone = Zone {
        datapath,
        port: outport,
    };
    let is_tracked = tracked(datapath, switch, &EGRESS, packet);
    let state = if is_tracked {
        conntrack::lookup(zone, &packet.flow)
    } else {
        0
    };
    let verdict = first_match::<true>(datapath, list::EGRESS, switch, packet, state, false);
    let (commit, _) = judged(verdict, zone, packet)?;
    if is_tracked && commit && switch.flags & COMMIT_EGRESS != 0 {
        conntrack::commit(zone, &packet.flow);
    }
    Ok(())
}

/// The request for the egress stage, and its slot.
#[inline(always)]
pub fn egress_request(datapath: u32, ports: u32, ifindex: u32, flags: u32) -> AclRequest {
    AclRequest {
        datapath,
        ports,
        ifindex,
        flags,
        magic: ACL_REQUEST_MAGIC,
    }
}

/// The slot of the egress stage.
pub const EGRESS_SLOT: u32 = slot::ACL_EGRESS;
/// The slot of the ingress stage.
pub const INGRESS_SLOT: u32 = slot::ACL_INGRESS;
