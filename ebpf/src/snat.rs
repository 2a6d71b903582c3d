//! The active gateway chassis's NAT stage (program `gateway_nat`, tail-called): centralized SNAT
//! (`snat` on a router with a gateway port, Kube-OVN's `OvnSnatRule`), what OVN's
//! `lr_out_snat` (`ct_snat_in_czone(E)`) and `lr_in_unsnat` do on the chassis where the
//! gateway's chassisredirect port is active. Written here rather than through the kernel's
//! conntrack NAT (`bpf_ct_set_nat_info`): that kfunc only records a NAT binding, the program
//! would still rewrite every packet and read the chosen port back from the entry, and the
//! agent could not sweep one rule's connections by itself; a table of our own is two hash
//! lookups a packet.
//!
//! The way out ([`SNAT_OUT_REQUEST_MAGIC`], from the router stage or a frame another chassis
//! tunnelled to the chassisredirect port, already routed): a centralized FIP's pod leaves from
//! its FIP (`NAT_BY_LOGICAL`, stateless, as a distributed FIP's; its way in is
//! `from_provider`'s); else a packet whose source the longest SNAT prefix of the router's
//! gateway port it leaves by covers (`SNAT_RULES`) leaves from the rule's external address, with its
//! own source port where that is free toward its destination, else another (8 tries); TCP,
//! UDP and ICMP echo (its identifier as the port), first fragments without IPv4 options; the
//! rest a rule covers is dropped (`snat_unsupported`). A connection is looked up from inside
//! (`SNAT_SESSIONS`) and from outside (`SNAT_REVERSE`); each packet checks the rule it falls
//! under now, so a changed or removed rule takes effect on the next packet of a running flow
//! (a new connection under the new address; under no rule, untranslated, as OVN forwards it).
//! A port is given again after [`SNAT_IDLE_NS`] without a packet. The way in
//! ([`SNAT_IN_REQUEST_MAGIC`], from the provider network to the gateway port): a reply to a
//! connection gets the pod's address and port back; then the router stage routes it (what is
//! no reply goes to the router unchanged), and an ICMP error about a connection is translated
//! as Linux's NAT translates a related packet (the pod gets it, about the packet it sent:
//! port unreachables and fragmentation-needed reach the pod through the SNAT). A packet out to one of
//! the router's FIP addresses, or a reply to one of its SNAT's connections, comes back in
//! ([`egress_loop`], OVN's hairpin). A `dnat` rule
//! (`NAT_BY_EXTERNAL` with `NAT_STATEFUL`: no SNAT twin) is translated on the way in here, not
//! statelessly: a new connection to its address is recorded both ways ([`admit`], the pod's
//! side flagged `SNAT_SESSION_DNAT`), and on the way out such a connection's replies leave from
//! the rule's address before any SNAT rule is looked at. A VIP of the router's load balancers
//! (`LB_VIPS` keyed by the router: Kube-OVN's `OvnDnatRule`, OVN's `lr_in_dnat` `ct_lb_mark`)
//! is admitted the same way, to a backend picked as the switches' balancer picks and its port
//! ([`balanced`]); its replies leave from the VIP and its port. Addresses and ports in the keys
//! are as in the packet. Reads `SNAT_RULES`, `NAT_BY_LOGICAL`, `NAT_BY_EXTERNAL`, `L2_FIB`,
//! `LB_VIPS` and `LB_BACKENDS`; reads and writes `SNAT_SESSIONS` and `SNAT_REVERSE`; counts
//! balanced connections in `LB_COUNTERS`.

use aya_ebpf::{
    bindings::BPF_F_MARK_MANGLED_0,
    helpers::{bpf_get_prandom_u32, bpf_ktime_get_ns},
    maps::lpm_trie::Key,
    programs::TcContext,
};
use ovnbpf_common::{
    DropReason, FIB_ROUTER_GATEWAY, FibKey, GatewayRequest, NAT_SNAT_ADDRESS, NAT_STATEFUL,
    NeighbourKey, ROUTER_REQUEST_MAGIC, RouterRequest, SNAT_IDLE_NS, SNAT_IN_REQUEST_MAGIC,
    SNAT_OUT_REQUEST_MAGIC, SNAT_SESSION_DNAT, SnatKey, SnatRuleKey, SnatSession, drop_reason,
    lb::{LbNatKey, connection_hash, counter, hash_fields, pick},
    stage as slot,
};

use crate::{
    headers::{ETH_HEADER_LEN, ETH_P_IPV4, Ipv4Frame, Ipv4Header},
    maps::{
        L2_FIB, LB_COUNTERS, NAT_BY_EXTERNAL, NAT_BY_LOGICAL, SNAT_REVERSE, SNAT_RULES,
        SNAT_SESSIONS, get,
    },
    nat::{IP_DESTINATION, IP_SOURCE, QUOTED_SOURCE, translate, translate_quoted},
    stages,
};

const IPPROTO_ICMP: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const L4_OFFSET: usize = ETH_HEADER_LEN + 20;
/// Tries at a free external port before the packet is dropped.
const PORT_TRIES: u32 = 8;

/// Hands a frame router `router` routed out of its gateway port onto `switch` (entered by its
/// router port `switch_port`) to this stage; the reason to drop it when the stage is missing.
#[inline(always)]
pub fn request_out(ctx: &TcContext, router: u32, switch: u32, switch_port: u32) -> DropReason {
    let request = GatewayRequest {
        router,
        switch,
        port: switch_port,
        ifindex: 0,
        magic: SNAT_OUT_REQUEST_MAGIC,
    };
    stages::jump(ctx, slot::GATEWAY_NAT, request.words())
}

/// Hands a frame entering router `router`'s gateway port (address `router_ip`) from provider
/// NIC `ifindex` to this stage.
#[inline(always)]
pub fn request_in(ctx: &TcContext, router: u32, router_ip: u32, ifindex: u32) -> DropReason {
    let request = GatewayRequest {
        router,
        switch: 0,
        port: router_ip,
        ifindex,
        magic: SNAT_IN_REQUEST_MAGIC,
    };
    stages::jump(ctx, slot::GATEWAY_NAT, request.words())
}

/// The stage: see the module doc.
#[inline(always)]
pub fn stage(ctx: &TcContext) -> Result<i32, DropReason> {
    if stages::magic(ctx) == SNAT_IN_REQUEST_MAGIC {
        let [router, _, router_ip, ifindex] = stages::take(ctx, SNAT_IN_REQUEST_MAGIC)?;
        inbound(ctx, router)?;
        let request = RouterRequest {
            router,
            router_ip,
            ifindex,
            magic: ROUTER_REQUEST_MAGIC,
        };
        return Err(crate::router::request(ctx, &request));
    }
    let [router, switch, switch_port, _] = stages::take(ctx, SNAT_OUT_REQUEST_MAGIC)?;
    outbound(ctx, router, switch)?;
    if let Some(request) = egress_loop(ctx, router, switch)? {
        return Err(crate::router::request(ctx, &request));
    }
    crate::gateway::leave(ctx, switch, switch_port)
}

/// OVN's `lr_out_egr_loop`: a packet leaving the gateway port (translated) for one of the
/// router's FIP addresses resident here (a centralized one's on the gateway chassis, a
/// distributed one's on its pod's) comes back into the router through that port, its MACs
/// swapped and its destination the FIP's pod's (`lr_in_dnat`): the request for the router
/// stage, entered from the port's address (read from its FIB entry on `switch`, found by its
/// MAC, the frame's source after routing). One for a `dnat` rule's address, or a reply to an
/// SNAT connection (`lr_in_unsnat`), goes to the way in of this stage instead, which records
/// or translates it. `None` for any other packet.
#[inline(always)]
fn egress_loop(
    ctx: &TcContext,
    router: u32,
    switch: u32,
) -> Result<Option<RouterRequest>, DropReason> {
    let Ok(frame) = ctx.load::<Ipv4Frame>(0) else {
        return Ok(None);
    };
    if u16::from_be(frame.eth.ether_type) != ETH_P_IPV4 {
        return Ok(None);
    }
    let ip = frame.ip;
    let to = NeighbourKey {
        datapath: router,
        ip: ip.destination,
    };
    // One of the router's NAT addresses (the lookup every packet pays), and for an SNAT
    // rule's, a reply to one of its connections (from a FIP's pod a SNATed pod reached
    // through the hairpin), which the way in gives its pod back.
    let Some(target) = get(&NAT_BY_EXTERNAL, to).copied() else {
        return Ok(None);
    };
    if target.flags & NAT_SNAT_ADDRESS != 0 && !is_snat_reply(ctx, router, &ip) {
        return Ok(None);
    }
    let port = FibKey {
        datapath: switch,
        mac: frame.eth.source,
        padding: [0; 2],
    };
    let Some(entry) = get(&L2_FIB, port).filter(|e| e.flags & FIB_ROUTER_GATEWAY != 0) else {
        return Ok(None);
    };
    let failed = |_| drop_reason::NAT_FAILED;
    ctx.store(0, &frame.eth.source, 0).map_err(failed)?;
    ctx.store(6, &frame.eth.destination, 0).map_err(failed)?;
    if target.flags & (NAT_STATEFUL | NAT_SNAT_ADDRESS) != 0 {
        // A `dnat` rule's (the way in records the connection), or the SNAT's reply.
        return Err(request_in(ctx, router, entry.remote_ip, 0));
    }
    crate::nat::to_pod(ctx, &ip, target.ip)?;
    Ok(Some(RouterRequest {
        router,
        router_ip: entry.remote_ip,
        ifindex: 0,
        magic: ROUTER_REQUEST_MAGIC,
    }))
}

/// Where a packet's ports are: the offsets of its source and destination "ports" (an ICMP
/// echo's identifier for both) and of the checksum covering them, and whether a zero checksum
/// means none (UDP).
struct Ports {
    source: usize,
    destination: usize,
    checksum: usize,
    udp: bool,
}

/// The ports of `ip` (TCP, UDP, or an ICMP echo request or reply); `None` for other packets.
#[inline(always)]
fn ports_of(ctx: &TcContext, ip: &Ipv4Header) -> Option<Ports> {
    match ip.protocol {
        IPPROTO_TCP => Some(Ports {
            source: L4_OFFSET,
            destination: L4_OFFSET + 2,
            checksum: L4_OFFSET + 16,
            udp: false,
        }),
        IPPROTO_UDP => Some(Ports {
            source: L4_OFFSET,
            destination: L4_OFFSET + 2,
            checksum: L4_OFFSET + 6,
            udp: true,
        }),
        IPPROTO_ICMP => {
            let kind = ctx.load::<u8>(L4_OFFSET).ok()?;
            (kind == 8 || kind == 0).then_some(Ports {
                source: L4_OFFSET + 4,
                destination: L4_OFFSET + 4,
                checksum: L4_OFFSET + 2,
                udp: false,
            })
        }
        _ => None,
    }
}

/// Router `router`'s connection `ip` belongs to, seen from its local side (the source on the
/// way out, `outward`; the destination on the way in), and the local port as in the packet.
#[inline(always)]
fn connection(
    ctx: &TcContext,
    router: u32,
    ip: &Ipv4Header,
    ports: &Ports,
    outward: bool,
) -> Result<(SnatKey, u16), DropReason> {
    let read = |offset| {
        ctx.load::<u16>(offset)
            .map_err(|_| drop_reason::SNAT_UNSUPPORTED)
    };
    let (source_port, destination_port) = (read(ports.source)?, read(ports.destination)?);
    let (local_ip, remote_ip, local_port, remote_port) = if outward {
        (ip.source, ip.destination, source_port, destination_port)
    } else {
        (ip.destination, ip.source, destination_port, source_port)
    };
    let key = SnatKey {
        router,
        local_ip,
        remote_ip,
        local_port,
        // An echo's identifier is its only port; its type tells a request from a reply.
        remote_port: if ip.protocol == IPPROTO_ICMP {
            u16::from(
                ctx.load::<u8>(L4_OFFSET)
                    .map_err(|_| drop_reason::SNAT_UNSUPPORTED)?,
            )
        } else {
            remote_port
        },
        protocol: ip.protocol,
        padding: [0; 3],
    };
    Ok((key, local_port))
}

/// Whether `ip` is an IPv4 packet without options and not a later fragment.
#[inline(always)]
fn whole(ip: &Ipv4Header) -> bool {
    ip.version_ihl == 0x45 && u16::from_be(ip.fragment) & 0x1fff == 0
}

/// Replaces the port at `offset` (`old`, as in the packet) by `new`, with the checksum.
#[inline(always)]
fn set_port(
    ctx: &TcContext,
    ports: &Ports,
    offset: usize,
    (old, new): (u16, u16),
) -> Result<(), DropReason> {
    if old == new {
        return Ok(());
    }
    let failed = |_| drop_reason::NAT_FAILED;
    let mangled = if ports.udp {
        u64::from(BPF_F_MARK_MANGLED_0)
    } else {
        0
    };
    ctx.l4_csum_replace(ports.checksum, u64::from(old), u64::from(new), mangled | 2)
        .map_err(failed)?;
    ctx.store(offset, &new, 0).map_err(failed)
}

/// The way out of router `router`'s gateway port onto `switch`: see the module doc.
#[inline(always)]
fn outbound(ctx: &TcContext, router: u32, switch: u32) -> Result<(), DropReason> {
    let Ok(frame) = ctx.load::<Ipv4Frame>(0) else {
        return Ok(());
    };
    if u16::from_be(frame.eth.ether_type) != ETH_P_IPV4 {
        // The router's ARP request for a next hop.
        return Ok(());
    }
    let ip = frame.ip;
    // A centralized FIP's pod (not to another of the router's NAT addresses): its FIP, without
    // connection state, as a distributed one's.
    let from = NeighbourKey {
        datapath: router,
        ip: ip.source,
    };
    let to = NeighbourKey {
        datapath: router,
        ip: ip.destination,
    };
    if let Some(fip) = get(&NAT_BY_LOGICAL, from).map(|target| target.ip)
        && !is_fip_address(to)
    {
        return crate::nat::from_pod(ctx, &ip, fip);
    }
    let rule_key = Key::new(
        96,
        SnatRuleKey {
            router: router.to_be(),
            switch: switch.to_be(),
            ip: ip.source,
        },
    );
    let rule = SNAT_RULES.get(rule_key).map(|rule| rule.external);
    let unsupported = || match rule {
        Some(_) => Err(drop_reason::SNAT_UNSUPPORTED),
        None => Ok(()),
    };
    if !whole(&ip) {
        return unsupported();
    }
    let Some(ports) = ports_of(ctx, &ip) else {
        return unsupported();
    };
    let (inside, source_port) = connection(ctx, router, &ip, &ports, true)?;
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    // The connection, looked up once: a reply of one a `dnat` rule admitted leaves from the
    // rule's address; else the SNAT rule's port it has, if it still has one.
    let session = SNAT_SESSIONS.get_ptr_mut(inside);
    if let Some(session) = session
        && let Some((external, port)) = dnat_reply(session, &inside, now)
    {
        translate(ctx, IP_SOURCE, (ip.source, external), ip.protocol, true)?;
        return set_port(ctx, &ports, ports.source, (source_port, port));
    }
    let Some(external) = rule else {
        return Ok(());
    };
    let port = match session.and_then(|session| current(session, &inside, external, now)) {
        Some(port) => port,
        None => allocate(&inside, external, now)?,
    };
    translate(ctx, IP_SOURCE, (ip.source, external), ip.protocol, true)?;
    set_port(ctx, &ports, ports.source, (source_port, port))
}

/// The external port of connection `inside` (its `session`) if it has one under `external`
/// whose reply side still names it (both refreshed to `now`).
#[inline(always)]
fn current(session: *mut SnatSession, inside: &SnatKey, external: u32, now: u64) -> Option<u16> {
    // SAFETY: the pointer is to a map value, valid for this program's run.
    let session = unsafe { &mut *session };
    if session.ip != external {
        return None;
    }
    let outside = outside_key(inside, external, session.port);
    // SAFETY: as above.
    let reply = unsafe { &mut *SNAT_REVERSE.get_ptr_mut(outside)? };
    if reply.ip != inside.local_ip || reply.port != inside.local_port {
        return None;
    }
    session.seen_ns = now;
    reply.seen_ns = now;
    Some(session.port)
}

/// Whether NAT slot `to` (a router and an address) is a FIP's or a `dnat` rule's address, not
/// an SNAT rule's only.
#[inline(always)]
pub fn is_fip_address(to: NeighbourKey) -> bool {
    get(&NAT_BY_EXTERNAL, to).is_some_and(|target| target.flags & NAT_SNAT_ADDRESS == 0)
}

/// Whether `ip` (leaving router `router`'s gateway port) is a reply to one of its SNAT's
/// connections: its destination and port are a translated connection's, toward its source.
#[inline(always)]
fn is_snat_reply(ctx: &TcContext, router: u32, ip: &Ipv4Header) -> bool {
    if !whole(ip) {
        return false;
    }
    let Some(ports) = ports_of(ctx, ip) else {
        return false;
    };
    let Ok((outside, _)) = connection(ctx, router, ip, &ports, false) else {
        return false;
    };
    // SAFETY: the reference is to a map value, read at once.
    unsafe { SNAT_REVERSE.get(outside) }.is_some()
}

/// The external address and port (as in the packet) of connection `inside` (its `session`)
/// when a `dnat` rule or a load balancer admitted it (both sides still naming each other,
/// refreshed to `now`).
#[inline(always)]
fn dnat_reply(session: *mut SnatSession, inside: &SnatKey, now: u64) -> Option<(u32, u16)> {
    // SAFETY: the pointer is to a map value, valid for this program's run.
    let session = unsafe { &mut *session };
    if session.flags & SNAT_SESSION_DNAT == 0 {
        return None;
    }
    let outside = outside_key(inside, session.ip, session.port);
    // SAFETY: as above.
    let reply = unsafe { &mut *SNAT_REVERSE.get_ptr_mut(outside)? };
    if reply.ip != inside.local_ip || reply.port != inside.local_port {
        return None;
    }
    session.seen_ns = now;
    reply.seen_ns = now;
    Some((session.ip, session.port))
}

/// A new connection from outside to `outside.local_ip` (a `dnat` rule's address, a VIP), for
/// pod `pod` and its port `pod_port` (as in the packet): recorded both ways (the pod's side
/// flagged [`SNAT_SESSION_DNAT`]).
#[inline(always)]
fn admit(outside: &SnatKey, (pod, pod_port): (u32, u16), now: u64) -> Result<(), DropReason> {
    let inside = SnatKey {
        local_ip: pod,
        local_port: pod_port,
        remote_port: other_side(outside),
        ..*outside
    };
    let reply = SnatSession {
        ip: pod,
        port: pod_port,
        flags: 0,
        seen_ns: now,
    };
    let session = SnatSession {
        ip: outside.local_ip,
        port: outside.local_port,
        flags: SNAT_SESSION_DNAT,
        seen_ns: now,
    };
    SNAT_REVERSE
        .insert(outside, reply, 0)
        .and_then(|()| SNAT_SESSIONS.insert(inside, session, 0))
        .map_err(|_| drop_reason::SNAT_UNSUPPORTED)
}

/// The outside view of connection `inside` once translated to `external` and `port`.
#[inline(always)]
fn outside_key(inside: &SnatKey, external: u32, port: u16) -> SnatKey {
    SnatKey {
        local_ip: external,
        local_port: port,
        remote_port: other_side(inside),
        ..*inside
    }
}

/// The remote port of the other side's key of connection `key`: the same, but for ICMP echo,
/// whose requests go one way and replies the other (8 ↔ 0), so that a request from outside
/// never passes for the reply to a pod's.
#[inline(always)]
fn other_side(key: &SnatKey) -> u16 {
    if key.protocol == IPPROTO_ICMP {
        key.remote_port ^ 8
    } else {
        key.remote_port
    }
}

/// The backend (address and port, as in the packet) a new connection from outside (its key
/// `outside`) to a VIP of router `router`'s load balancers goes to, picked as the switches'
/// balancer picks (a hash of the VIP's fields, [`crate::lb::vip_of`]); `None` when the
/// destination is no VIP; a VIP without backends drops it (OVN's `drop;`).
#[inline(always)]
fn balanced(router: u32, outside: &SnatKey) -> Result<Option<(u32, u16)>, DropReason> {
    // An echo has no port: only a VIP without one takes it.
    let (source_port, destination_port, protocol) = if outside.protocol == IPPROTO_ICMP {
        (0, 0, 0)
    } else {
        (
            u16::from_be(outside.remote_port),
            u16::from_be(outside.local_port),
            outside.protocol,
        )
    };
    let Some(vip) = crate::lb::vip_of(router, outside.local_ip, destination_port, protocol) else {
        return Ok(None);
    };
    if vip.count == 0 {
        return Err(drop_reason::LB_NO_BACKENDS);
    }
    let key = LbNatKey {
        datapath: router,
        port: 0,
        source: outside.remote_ip,
        destination: outside.local_ip,
        source_port,
        destination_port,
        protocol: outside.protocol,
        direction: 0,
        padding: 0,
    };
    let picked = pick(connection_hash(hash_fields(vip.flags), &key), vip.count);
    let backend = crate::lb::backend_at(vip.group, picked)?;
    crate::counters::bump(&LB_COUNTERS, counter::BALANCED);
    let port = match backend.port {
        0 => outside.local_port,
        port => port.to_be(),
    };
    Ok(Some((backend.ip, port)))
}

/// Gives connection `inside` an external port under `external`: its own where that is free
/// toward its destination (or taken by nothing heard from for [`SNAT_IDLE_NS`]), else a random
/// one, [`PORT_TRIES`] times; records both sides.
#[inline(always)]
fn allocate(inside: &SnatKey, external: u32, now: u64) -> Result<u16, DropReason> {
    let idle = SNAT_IDLE_NS[usize::from(inside.protocol != IPPROTO_TCP)];
    let mut port = inside.local_port;
    for _ in 0..PORT_TRIES {
        let outside = outside_key(inside, external, port);
        // SAFETY: the reference is to a map value, read at once.
        let taken = unsafe { SNAT_REVERSE.get(outside) };
        let free = taken.is_none_or(|taken| {
            (taken.ip == inside.local_ip && taken.port == inside.local_port)
                || now.saturating_sub(taken.seen_ns) > idle
        });
        if free {
            let reply = SnatSession {
                ip: inside.local_ip,
                port: inside.local_port,
                flags: 0,
                seen_ns: now,
            };
            let session = SnatSession {
                ip: external,
                port,
                flags: 0,
                seen_ns: now,
            };
            SNAT_REVERSE
                .insert(outside, reply, 0)
                .and_then(|()| SNAT_SESSIONS.insert(inside, session, 0))
                .map_err(|_| drop_reason::SNAT_UNSUPPORTED)?;
            return Ok(port);
        }
        // SAFETY: a helper without arguments.
        let random = unsafe { bpf_get_prandom_u32() };
        // Ports 1024 and up (any identifier for ICMP), as in the packet.
        port = ((1024 + random % 64_512) as u16).to_be();
    }
    Err(drop_reason::SNAT_UNSUPPORTED)
}

/// Offsets of an ICMP error's checksum and of the packet it quotes (after its 8-byte header).
const ICMP_CHECKSUM: usize = L4_OFFSET + 2;
const QUOTED_OFFSET: usize = L4_OFFSET + 8;

/// An ICMP error (destination unreachable, time exceeded, parameter problem) about what a
/// translated connection sent, as Linux's NAT translates a related packet: the error goes to
/// the pod, quoting the packet as the pod sent it (its address and port; the ICMP checksum and
/// the quoted checksums with them); whether it was one. Other packets are left alone.
#[inline(always)]
fn related(ctx: &TcContext, router: u32, ip: &Ipv4Header) -> Result<bool, DropReason> {
    let kind = ctx.load::<u8>(L4_OFFSET).unwrap_or(0);
    if ip.protocol != IPPROTO_ICMP || !matches!(kind, 3 | 11 | 12) {
        return Ok(false);
    }
    let Ok(quoted) = ctx.load::<Ipv4Header>(QUOTED_OFFSET) else {
        return Ok(false);
    };
    if quoted.version_ihl != 0x45 {
        return Ok(false);
    }
    // The quoted packet's ports (an echo's identifier: its "source port").
    let at = QUOTED_OFFSET + 20;
    // An echo the error quotes went out: its reply's type keys the outside side.
    let (port_at, remote_port) = match quoted.protocol {
        IPPROTO_TCP | IPPROTO_UDP => (at, ctx.load::<u16>(at + 2).unwrap_or(0)),
        IPPROTO_ICMP => (at + 4, u16::from(ctx.load::<u8>(at).unwrap_or(0)) ^ 8),
        _ => return Ok(false),
    };
    let Ok(local_port) = ctx.load::<u16>(port_at) else {
        return Ok(false);
    };
    let outside = SnatKey {
        router,
        local_ip: quoted.source,
        remote_ip: quoted.destination,
        local_port,
        remote_port,
        protocol: quoted.protocol,
        padding: [0; 3],
    };
    // SAFETY: the reference is to a map value, read at once.
    let Some(connection) = (unsafe { SNAT_REVERSE.get(outside) }).copied() else {
        return Ok(false);
    };
    let failed = |_| drop_reason::NAT_FAILED;
    // The quoted port, with the quoted UDP checksum over it (a zero one stays zero; a TCP
    // checksum is past the 8 bytes a quote holds at least, and left as quoted), then the ICMP
    // checksum over both.
    if local_port != connection.port {
        if quoted.protocol == IPPROTO_UDP
            && let Ok(checksum) = ctx.load::<u16>(at + 6)
            && checksum != 0
        {
            ctx.l3_csum_replace(at + 6, u64::from(local_port), u64::from(connection.port), 2)
                .map_err(failed)?;
            let updated = ctx.load::<u16>(at + 6).map_err(failed)?;
            ctx.l4_csum_replace(ICMP_CHECKSUM, u64::from(checksum), u64::from(updated), 2)
                .map_err(failed)?;
        }
        ctx.l4_csum_replace(
            ICMP_CHECKSUM,
            u64::from(local_port),
            u64::from(connection.port),
            2,
        )
        .map_err(failed)?;
        ctx.store(port_at, &connection.port, 0).map_err(failed)?;
    }
    translate_quoted(
        ctx,
        ip.protocol,
        QUOTED_SOURCE,
        quoted.source,
        connection.ip,
    )?;
    translate(
        ctx,
        IP_DESTINATION,
        (ip.destination, connection.ip),
        ip.protocol,
        true,
    )?;
    Ok(true)
}

/// The way in: a reply to a translated connection gets the pod's address and port back.
#[inline(always)]
fn inbound(ctx: &TcContext, router: u32) -> Result<(), DropReason> {
    let Ok(frame) = ctx.load::<Ipv4Frame>(0) else {
        return Ok(());
    };
    let ip = frame.ip;
    if u16::from_be(frame.eth.ether_type) != ETH_P_IPV4 {
        return Ok(());
    }
    // To a `dnat` rule's address, what the stage cannot track goes no further (routed on
    // untranslated, it would come back here by the hairpin).
    let to = NeighbourKey {
        datapath: router,
        ip: ip.destination,
    };
    // The rule's pod, 0 for none (an `Option` kept across the branches below leaves its
    // payload uninitialized where it is `None`, which the verifier refuses to spill).
    let dnat = get(&NAT_BY_EXTERNAL, to)
        .filter(|target| target.flags & NAT_STATEFUL != 0)
        .map_or(0, |target| target.ip);
    let untracked = || {
        if dnat != 0 {
            Err(drop_reason::SNAT_UNSUPPORTED)
        } else {
            Ok(())
        }
    };
    if !whole(&ip) {
        return untracked();
    }
    let Some(ports) = ports_of(ctx, &ip) else {
        if related(ctx, router, &ip)? {
            return Ok(());
        }
        return untracked();
    };
    let (outside, destination_port) = connection(ctx, router, &ip, &ports, false)?;
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let (pod, pod_port) = match SNAT_REVERSE.get_ptr_mut(outside) {
        // A reply to a translated connection, or a later packet of an admitted one.
        Some(reply) => {
            // SAFETY: the pointer is to a map value, valid for this program's run.
            let reply = unsafe { &mut *reply };
            reply.seen_ns = now;
            (reply.ip, reply.port)
        }
        // A new connection to a `dnat` rule's address (its port kept), or to a VIP of the
        // router's load balancers.
        None => {
            let target = if dnat != 0 {
                (dnat, destination_port)
            } else {
                match balanced(router, &outside)? {
                    Some(backend) => backend,
                    None => return Ok(()),
                }
            };
            admit(&outside, target, now)?;
            target
        }
    };
    translate(
        ctx,
        IP_DESTINATION,
        (ip.destination, pod),
        ip.protocol,
        true,
    )?;
    set_port(ctx, &ports, ports.destination, (destination_port, pod_port))
}
