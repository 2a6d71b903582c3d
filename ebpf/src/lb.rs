//! Load balancing (Kubernetes Services as OVN's switch load balancers carry them): the `lb`
//! stage, tail-called from `from_pod` for IPv4 packets to an address that is a VIP on the pod's
//! switch (`LB_ADDRESSES`), does what northd's `ls_in_pre_stateful` VIP flows, `ls_in_lb`
//! (`ct_lb_mark(backends=…)`) and the hairpin stages say: a new TCP or UDP connection to a VIP
//! gets a backend picked by a hash of its fields (`LB_VIPS`, `LB_BACKENDS`), its translation is
//! remembered in the client port's zone (`LB_CONNECTIONS`), and every later packet of it is
//! translated the same way. Then the packet goes on through the switch (its ingress ACL stage,
//! if it has one, then the L2 lookup), so the ACL stages see the backend, as they see it in
//! `ls_in_acl_after_lb` (Kube-OVN's NetworkPolicy rules) and for every established connection.
//! [`reverse`] is the other half, run where a packet is delivered to a port whose switch has
//! load balancers (`LB_SWITCHES`): a backend's reply to its client gets the VIP back as its
//! source (OVN's `ct_lb_mark` in `ls_out_pre_stateful`, in the client's zone). A client
//! balanced to itself (a hairpin) gets the VIP as source too, and the packet, and the replies,
//! leave through the port they came in on.
//!
//! A VIP with session affinity (`affinity_timeout`) sends a client's new connections to the
//! backend its last one went to while that is recent (`LB_AFFINITIES`), as OVN's
//! `ls_in_lb_aff_check` / `ls_in_lb_aff_learn` do; unlike 23.03, whose learning flow drops the
//! packet it learns from, the first packet of a session goes through.
//!
//! A VIP without backends drops new connections, or rejects them when the balancer says so
//! (through the reject stage, as an ACL's reject). Touches `LB_*`, reads `TUNNEL_PORTS` and the
//! ACL switches (to continue), rewrites addresses, ports and their checksums in place; counts
//! in `LB_COUNTERS`.

use aya_ebpf::{
    bindings::{BPF_F_MARK_MANGLED_0, BPF_F_PSEUDO_HDR},
    helpers::{bpf_ktime_get_ns, bpf_skb_load_bytes},
    programs::TcContext,
};
use ovnbpf_common::{
    AclRequest, DropReason, TunnelPortKey,
    acl::SWITCH_INGRESS,
    checksum::Checksum,
    drop_reason,
    lb::{
        FROM_PORT, LB_NAT_CLOSING, LB_NAT_HAIRPIN, LB_VIP_HAIRPIN, LB_VIP_REJECT, LbAddressKey,
        LbAffinity, LbAffinityKey, LbBackend, LbBackendKey, LbMemberKey, LbNat, LbNatKey, LbVip,
        LbVipKey, TO_PORT, connection_hash, counter, hash_fields, lifetime, pick,
    },
    stage::{LB as LB_SLOT, LB_ICMP_REQUEST_MAGIC, LB_REQUEST_MAGIC},
};

use crate::{
    LB_ADDRESSES, LB_AFFINITIES, LB_BACKENDS, LB_CONNECTIONS, LB_COUNTERS, LB_MEMBERS, LB_SCRATCH,
    LB_SWITCHES, LB_VIPS, TUNNEL_PORTS, acl,
    headers::{ETH_HEADER_LEN, ETH_P_IPV4, EthHeader, IPPROTO_TCP, IPPROTO_UDP},
    maps::get,
    output::{Between, deliver_after_lb, deliver_to_port},
    stages,
};

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;
const IP_OFFSET: usize = ETH_HEADER_LEN;
const IP_CHECKSUM: usize = IP_OFFSET + 10;
const IP_SOURCE: usize = IP_OFFSET + 12;
const IP_DESTINATION: usize = IP_OFFSET + 16;
const L4_OFFSET: usize = IP_OFFSET + 20;
const ICMP_CHECKSUM: usize = L4_OFFSET + 2;
/// Where an ICMP error quotes the packet it is about, and that packet's transport header.
const QUOTED_OFFSET: usize = L4_OFFSET + 8;
const QUOTED_L4_OFFSET: usize = QUOTED_OFFSET + 20;
const IPPROTO_ICMP: u8 = 1;
const ICMP_DESTINATION_UNREACHABLE: u8 = 3;
const ICMP_TIME_EXCEEDED: u8 = 11;
const ICMP_PARAMETER_PROBLEM: u8 = 12;

/// Whether switch `datapath` has load balancers (its deliveries translate replies back).
#[inline(always)]
pub fn balances(datapath: u32) -> bool {
    get(&LB_SWITCHES, datapath).is_some()
}

/// Whether an IPv4 frame on `datapath` is addressed to one of the switch's VIPs.
#[inline(always)]
pub fn wants(ctx: &TcContext, datapath: u32) -> bool {
    let Ok(ip) = ctx.load::<u32>(IP_DESTINATION) else {
        return false;
    };
    get(&LB_ADDRESSES, LbAddressKey { datapath, ip }).is_some()
}

/// Hands the frame of logical port `ingress_port` on `datapath`, sent from host veth `ifindex`,
/// to the load-balancer stage (on success this never returns).
#[inline(always)]
pub fn request(ctx: &TcContext, datapath: u32, ingress_port: u32, ifindex: u32) -> DropReason {
    let request = AclRequest {
        datapath,
        ports: ingress_port << 16,
        ifindex,
        flags: 0,
        magic: LB_REQUEST_MAGIC,
    };
    stages::jump(ctx, LB_SLOT, request.words())
}

/// `LB_SCRATCH`'s block: the packet as [`load`] read it, the frame's bytes it read it from (from
/// the EtherType to the transport ports, then the TCP flags), and the key the delivery side
/// looks up.
#[repr(C)]
pub(crate) struct Scratch {
    key: LbNatKey,
    packet: Packet,
    raw: [u8; RAW_BYTES],
    tcp_flags: u8,
    padding: [u8; 5],
}

/// The EtherType, the IPv4 header (without options) and the transport ports.
const RAW_BYTES: usize = 2 + 20 + 4;

const _: () = assert!(core::mem::size_of::<Scratch>() == ovnbpf_common::lb::LB_SCRATCH_BYTES);

/// A TCP or UDP packet in a plain IPv4 header (no options, not a fragment).
#[repr(C)]
#[derive(Clone, Copy)]
struct Packet {
    source: u32,
    destination: u32,
    source_port: u16,
    destination_port: u16,
    protocol: u8,
    tcp_flags: u8,
}

impl Packet {
    /// Writes into `key` this packet's key in logical port (`datapath`, `port`)'s zone as seen
    /// at `direction` (in place: the delivery paths keep it in the scratch block).
    fn write_key(&self, key: &mut LbNatKey, datapath: u32, port: u32, direction: u8) {
        key.datapath = datapath;
        key.port = port;
        key.source = self.source;
        key.destination = self.destination;
        key.source_port = self.source_port;
        key.destination_port = self.destination_port;
        key.protocol = self.protocol;
        key.direction = direction;
        key.padding = 0;
    }

    fn key(&self, datapath: u32, port: u32, direction: u8) -> LbNatKey {
        let mut key = LbNatKey::default();
        self.write_key(&mut key, datapath, port, direction);
        key
    }

    fn closes(&self) -> bool {
        self.protocol == IPPROTO_TCP && self.tcp_flags & (TCP_FIN | TCP_RST) != 0
    }

    fn opens(&self) -> bool {
        self.protocol == IPPROTO_TCP && self.tcp_flags & (TCP_SYN | TCP_ACK) == TCP_SYN
    }
}

/// Reads the packet into the per-CPU scratch block, if it is TCP or UDP in a plain IPv4 header
/// (no options, not a fragment: a later fragment has no ports to read). One copy of the
/// headers into map memory, read from there: the delivery paths that call [`reverse`] have
/// little stack left.
#[inline(always)]
fn load(ctx: &TcContext) -> Option<&'static mut Scratch> {
    let scratch = scratch_block()?;
    load_into(ctx, scratch).then_some(scratch)
}

/// This CPU's `LB_SCRATCH` block.
#[inline(always)]
fn scratch_block() -> Option<&'static mut Scratch> {
    let scratch = LB_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: the per-CPU block is this program's alone while it runs.
    Some(unsafe { &mut *scratch })
}

/// Whether `raw`, as [`load_into`] read it, is a plain IPv4 header (no options) of a packet
/// that is not a fragment.
#[inline(always)]
fn plain_ipv4(raw: &[u8; RAW_BYTES]) -> bool {
    u16::from_be_bytes([raw[0], raw[1]]) == ETH_P_IPV4
        && raw[2] == 0x45
        && u16::from_be_bytes([raw[8], raw[9]]) & 0x3fff == 0
}

/// [`load`] into `scratch`: whether the packet is one the stage balances.
#[inline(always)]
fn load_into(ctx: &TcContext, scratch: &mut Scratch) -> bool {
    let skb = ctx.skb.skb as *const core::ffi::c_void;
    // SAFETY: the helper writes at most `RAW_BYTES` into the block's `raw`, which holds them.
    let loaded = unsafe {
        bpf_skb_load_bytes(
            skb,
            (ETH_HEADER_LEN - 2) as u32,
            scratch.raw.as_mut_ptr().cast(),
            RAW_BYTES as u32,
        )
    };
    if loaded != 0 {
        // What the block holds is another packet's: nothing may read this one from it.
        scratch.raw[0] = 0;
        return false;
    }
    let raw = &scratch.raw;
    let protocol = raw[11];
    if !plain_ipv4(raw) || (protocol != IPPROTO_TCP && protocol != IPPROTO_UDP) {
        return false;
    }
    scratch.tcp_flags = 0;
    if protocol == IPPROTO_TCP {
        // SAFETY: one byte into the block's `tcp_flags`.
        let flags = unsafe {
            bpf_skb_load_bytes(
                skb,
                (L4_OFFSET + 13) as u32,
                (&raw mut scratch.tcp_flags).cast(),
                1,
            )
        };
        if flags != 0 {
            return false;
        }
    }
    let raw = &scratch.raw;
    let packet = &mut scratch.packet;
    packet.source = u32::from_ne_bytes([raw[14], raw[15], raw[16], raw[17]]);
    packet.destination = u32::from_ne_bytes([raw[18], raw[19], raw[20], raw[21]]);
    packet.source_port = u16::from_be_bytes([raw[22], raw[23]]);
    packet.destination_port = u16::from_be_bytes([raw[24], raw[25]]);
    packet.protocol = protocol;
    packet.tcp_flags = scratch.tcp_flags;
    true
}

/// Hands an ICMP error that [`reverse`] found on its way to the port behind `ifindex` (flags
/// as in [`ovnbpf_common::LocalPort`]) to the load-balancer stage, which translates what it
/// quotes and delivers it (the delivery paths have no stack left for it; on success this never
/// returns).
#[inline(always)]
pub fn icmp_error_request(
    ctx: &TcContext,
    between: Between,
    ifindex: u32,
    flags: u32,
) -> DropReason {
    let request = AclRequest {
        datapath: between.datapath,
        ports: between.ports,
        ifindex,
        flags,
        magic: LB_ICMP_REQUEST_MAGIC,
    };
    stages::jump(ctx, LB_SLOT, request.words())
}

/// The `lb` stage.
#[inline(always)]
pub fn stage(ctx: &TcContext) -> Result<i32, DropReason> {
    if stages::magic(ctx) == LB_ICMP_REQUEST_MAGIC {
        return icmp_error_stage(ctx);
    }
    let [datapath, ports, ifindex, _] = stages::take(ctx, LB_REQUEST_MAGIC)?;
    let inport = ports >> 16;
    let scratch = scratch_block().ok_or(drop_reason::LB_NAT_FAILED)?;
    if load_into(ctx, scratch) {
        let packet = scratch.packet;
        if balance(ctx, datapath, inport, &packet)? {
            return hairpin(ctx, datapath, inport);
        }
    } else if is_icmp_error(&scratch.raw) {
        // The client's error about a reply from the VIP: to the backend.
        translate_icmp_error(ctx, datapath, inport, FROM_PORT, scratch)?;
    }
    if acl::switch_of(datapath, SWITCH_INGRESS).is_some() {
        let request = acl::ingress_request(datapath, inport, ifindex);
        return Err(acl::request(ctx, acl::INGRESS_SLOT, &request));
    }
    crate::switching::switch_frame(ctx, datapath, inport, ifindex)
}

/// Translates `packet` of port `inport`'s zone if it belongs to a balanced connection, or
/// opens one if it is new and to a VIP. Returns whether it is a hairpin's.
#[inline(always)]
fn balance(
    ctx: &TcContext,
    datapath: u32,
    inport: u32,
    packet: &Packet,
) -> Result<bool, DropReason> {
    // SAFETY: reading the clock has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let key = packet.key(datapath, inport, FROM_PORT);
    if let Some(entry) = LB_CONNECTIONS.get_ptr_mut(key) {
        // SAFETY: LRU hash values stay valid while the program runs; races with other CPUs
        // lose at most a refresh.
        let nat = unsafe { &mut *entry };
        let alive = now.saturating_sub(nat.last_seen) < lifetime(packet.protocol, nat.flags);
        let reopened = nat.flags & LB_NAT_CLOSING != 0 && packet.opens();
        if alive && !reopened {
            nat.last_seen = now;
            if packet.closes() {
                nat.flags |= LB_NAT_CLOSING;
            }
            let translated = *nat;
            rewrite(ctx, packet, &translated)?;
            return Ok(translated.flags & LB_NAT_HAIRPIN != 0);
        }
    }
    let Some(vip) = vip_of(
        datapath,
        packet.destination,
        packet.destination_port,
        packet.protocol,
    ) else {
        return Ok(false);
    };
    if vip.count == 0 {
        return Err(if vip.flags & LB_VIP_REJECT != 0 {
            drop_reason::ACL_REJECT
        } else {
            drop_reason::LB_NO_BACKENDS
        });
    }
    let picked = pick(connection_hash(hash_fields(vip.flags), &key), vip.count);
    let backend = match vip.affinity_seconds {
        0 => backend_at(vip.group, picked)?,
        seconds => {
            let client = LbAffinityKey {
                datapath,
                client: packet.source,
                vip: packet.destination,
                port: packet.destination_port,
                protocol: packet.protocol,
                padding: 0,
            };
            with_affinity(client, &vip, picked, seconds, now)?
        }
    };
    let backend_port = match backend.port {
        0 => packet.destination_port,
        port => port,
    };
    let hairpin = backend.ip == packet.source && vip.flags & LB_VIP_HAIRPIN != 0;
    #[cfg(feature = "log")]
    aya_log_ebpf::debug!(
        ctx,
        "lb: {:i}:{} to {:i}:{} picks {:i}:{}",
        u32::from_be(packet.source),
        packet.source_port,
        u32::from_be(packet.destination),
        packet.destination_port,
        u32::from_be(backend.ip),
        backend_port
    );
    let closing = if packet.closes() { LB_NAT_CLOSING } else { 0 };
    let forward = LbNat {
        // A hairpin's client sees the VIP as source (northd's `ct_snat_to_vip`).
        source: if hairpin {
            packet.destination
        } else {
            packet.source
        },
        destination: backend.ip,
        source_port: packet.source_port,
        destination_port: backend_port,
        flags: closing | if hairpin { LB_NAT_HAIRPIN } else { 0 },
        last_seen: now,
    };
    // The backend's replies: to the client where it is delivered, or, for a hairpin, back
    // from the same port (to the VIP, from the backend port).
    let (reply_key, reply_flags) = if hairpin {
        (
            LbNatKey {
                source: packet.source,
                destination: packet.destination,
                source_port: backend_port,
                destination_port: packet.source_port,
                ..key
            },
            LB_NAT_HAIRPIN,
        )
    } else {
        (
            LbNatKey {
                source: backend.ip,
                destination: packet.source,
                source_port: backend_port,
                destination_port: packet.source_port,
                direction: TO_PORT,
                ..key
            },
            0,
        )
    };
    let reply = LbNat {
        source: packet.destination,
        destination: packet.source,
        source_port: packet.destination_port,
        destination_port: packet.source_port,
        flags: reply_flags,
        last_seen: now,
    };
    // A full table evicts its least recently used entry; were an insert to fail, the next
    // packet picks the same backend again (the hash is of the packet's own fields). Counted.
    let stored = LB_CONNECTIONS.insert(reply_key, reply, 0).is_ok()
        && LB_CONNECTIONS.insert(key, forward, 0).is_ok();
    crate::counters::bump(&LB_COUNTERS, counter::BALANCED);
    if hairpin {
        crate::counters::bump(&LB_COUNTERS, counter::HAIRPIN);
    }
    if !stored {
        crate::counters::bump(&LB_COUNTERS, counter::INSERT_FAILED);
    }
    rewrite(ctx, packet, &forward)?;
    Ok(hairpin)
}

/// The VIP (network byte order) `ip`, port `port` (host order), protocol `protocol` of switch
/// `datapath`, or the switch's VIP `ip` without a port.
#[inline(always)]
pub(crate) fn vip_of(datapath: u32, ip: u32, port: u16, protocol: u8) -> Option<LbVip> {
    get(
        &LB_VIPS,
        LbVipKey {
            datapath,
            vip: ip,
            port,
            protocol,
            padding: 0,
        },
    )
    .or_else(|| {
        get(
            &LB_VIPS,
            LbVipKey {
                datapath,
                vip: ip,
                ..LbVipKey::default()
            },
        )
    })
    .copied()
}

/// Backend `index` of group `group`.
#[inline(always)]
pub(crate) fn backend_at(group: u32, index: u32) -> Result<LbBackend, DropReason> {
    get(&LB_BACKENDS, LbBackendKey { group, index })
        .copied()
        .ok_or(drop_reason::LB_BACKEND_MISSING)
}

/// Session affinity (OVN's `chk_lb_aff` and `commit_lb_aff`): the backend client `key`'s last new
/// connection to this VIP went to, if that was less than `seconds` ago and it is still one of
/// the VIP's backends, else `picked`; either way remembered, from now.
#[inline(always)]
pub(crate) fn with_affinity(
    key: LbAffinityKey,
    vip: &LbVip,
    picked: u32,
    seconds: u32,
    now: u64,
) -> Result<LbBackend, DropReason> {
    let learned = LB_AFFINITIES
        .get_ptr(key)
        // SAFETY: LRU hash values stay valid while the program runs.
        .map(|entry| unsafe { *entry })
        .filter(|entry| now.saturating_sub(entry.last_seen) < u64::from(seconds) * 1_000_000_000)
        .filter(|entry| {
            let member = LbMemberKey {
                group: vip.group,
                ip: entry.backend,
                port: entry.port,
                padding: 0,
            };
            get(&LB_MEMBERS, member).is_some()
        })
        .map(|entry| LbBackend {
            ip: entry.backend,
            port: entry.port,
            padding: 0,
        });
    let backend = match learned {
        Some(backend) => {
            crate::counters::bump(&LB_COUNTERS, counter::AFFINITY);
            backend
        }
        None => backend_at(vip.group, picked)?,
    };
    let remembered = LbAffinity {
        backend: backend.ip,
        port: backend.port,
        padding: 0,
        last_seen: now,
    };
    let _ = LB_AFFINITIES.insert(key, remembered, 0);
    Ok(backend)
}

/// A hairpin leaves through the port it came in on, with its Ethernet addresses swapped
/// (northd's `ls_in_hairpin`: `eth.dst <-> eth.src; outport = inport; output;`), through
/// that port's egress pipeline.
#[inline(always)]
fn hairpin(ctx: &TcContext, datapath: u32, inport: u32) -> Result<i32, DropReason> {
    let eth = ctx
        .load::<EthHeader>(0)
        .map_err(|_| drop_reason::LB_NAT_FAILED)?;
    let swapped = [eth.source, eth.destination];
    ctx.store(0, &swapped, 0)
        .map_err(|_| drop_reason::LB_NAT_FAILED)?;
    let port = get(
        &TUNNEL_PORTS,
        TunnelPortKey {
            datapath,
            port: inport,
        },
    )
    .copied()
    .ok_or(drop_reason::UNKNOWN_DESTINATION)?;
    deliver_to_port(
        ctx,
        port.ifindex,
        port.flags,
        true,
        Between {
            datapath,
            ports: inport << 16 | inport,
        },
    )
}

/// The delivery side: a packet to logical port `port` on `datapath` that is a backend's reply
/// on a connection this port opened to a VIP gets the VIP back as its source. Returns whether
/// the packet is an ICMP error, for the stage to translate ([`icmp_error_request`]). A function
/// of its own (every delivery path calls it; inlined, it grew the ACL stages past LLVM's
/// inlining).
#[inline(never)]
pub fn reverse(ctx: &TcContext, datapath: u32, port: u32) -> Result<bool, DropReason> {
    let Some(scratch) = scratch_block() else {
        return Ok(false);
    };
    if !load_into(ctx, scratch) {
        return Ok(is_icmp_error(&scratch.raw));
    }
    let Scratch { key, packet, .. } = &mut *scratch;
    packet.write_key(key, datapath, port, TO_PORT);
    // By reference: the helper reads the key where it is, in the scratch block, not from a
    // copy on the stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let Some(entry) = LB_CONNECTIONS.get_ptr_mut(&scratch.key) else {
        return Ok(false);
    };
    // SAFETY: as in `balance`.
    let nat = unsafe { &mut *entry };
    // SAFETY: reading the clock has no preconditions.
    nat.last_seen = unsafe { bpf_ktime_get_ns() };
    if scratch.packet.closes() {
        nat.flags |= LB_NAT_CLOSING;
    }
    rewrite(ctx, &scratch.packet, nat).map(|()| false)
}

/// Whether `raw`, as [`load_into`] read it, is an ICMP error in a plain IPv4 header (not a
/// fragment): destination unreachable, time exceeded or parameter problem, the errors that
/// quote the packet they are about.
#[inline(always)]
fn is_icmp_error(raw: &[u8; RAW_BYTES]) -> bool {
    plain_ipv4(raw)
        && raw[11] == IPPROTO_ICMP
        && matches!(
            raw[22],
            ICMP_DESTINATION_UNREACHABLE | ICMP_TIME_EXCEEDED | ICMP_PARAMETER_PROBLEM
        )
}

/// The stage's second request: an ICMP error on its way to a port of a switch with load
/// balancers. What it quotes is translated back if it is a balanced connection's, then the
/// error is delivered.
#[inline(always)]
fn icmp_error_stage(ctx: &TcContext) -> Result<i32, DropReason> {
    let [datapath, ports, ifindex, flags] = stages::take(ctx, LB_ICMP_REQUEST_MAGIC)?;
    let scratch = scratch_block().ok_or(drop_reason::LB_NAT_FAILED)?;
    // Not a packet the stage balances: this reads the outer header into `raw` for the test.
    load_into(ctx, scratch);
    if is_icmp_error(&scratch.raw) {
        translate_icmp_error(ctx, datapath, ports & 0xffff, TO_PORT, scratch)?;
    }
    deliver_after_lb(ctx, ifindex, flags, true)
}

/// An ICMP error about a packet of a balanced connection, translated as Linux's NAT translates
/// a related packet (`nf_nat_icmp_reply_translation`, which OVN's `ct_lb_mark` relies on):
/// - on its way to the client (`TO_PORT` at the client's port: a backend's port unreachable
///   for a UDP Service, a fragmentation-needed on the way), the error quotes the packet as the
///   backend received it, which the client's stack would match to no socket: the quoted
///   packet gets the VIP back where the backend was (and the client where a hairpin put the
///   VIP), and the error comes from the VIP;
/// - from the client (`FROM_PORT` at its port, to the VIP: its port unreachable for a reply
///   that came too late), the error quotes the reply as the client got it: the quoted reply
///   gets the backend back where the VIP was, and the error goes to the backend.
///
/// Either way the connection's entry in `direction` is keyed by the quoted packet reversed, and
/// its translation says what the quoted packet's addresses were (its destination, its source)
/// and what the error's are (its source, its destination). `scratch` holds the outer header
/// of an ICMP error ([`is_icmp_error`]) as [`load_into`] read it.
#[inline(always)]
fn translate_icmp_error(
    ctx: &TcContext,
    datapath: u32,
    port: u32,
    direction: u8,
    scratch: &mut Scratch,
) -> Result<(), DropReason> {
    let raw = &scratch.raw;
    let outer_source = u32::from_ne_bytes([raw[14], raw[15], raw[16], raw[17]]);
    let outer_destination = u32::from_ne_bytes([raw[18], raw[19], raw[20], raw[21]]);
    let icmp_checksum = u16::from_be_bytes([raw[24], raw[25]]);
    // The quoted header and its ports, read where the outer one was: two bytes of the ICMP
    // header first, where the EtherType was, so `raw` has the same layout.
    let skb = ctx.skb.skb as *const core::ffi::c_void;
    // SAFETY: as in `load_into`.
    let loaded = unsafe {
        bpf_skb_load_bytes(
            skb,
            (QUOTED_OFFSET - 2) as u32,
            scratch.raw.as_mut_ptr().cast(),
            RAW_BYTES as u32,
        )
    };
    let raw = &scratch.raw;
    let protocol = raw[11];
    if loaded != 0
        || raw[2] != 0x45
        || u16::from_be_bytes([raw[8], raw[9]]) & 0x1fff != 0
        || (protocol != IPPROTO_TCP && protocol != IPPROTO_UDP)
    {
        return Ok(());
    }
    let quoted_checksum = u16::from_be_bytes([raw[12], raw[13]]);
    let quoted = Packet {
        source: u32::from_ne_bytes([raw[14], raw[15], raw[16], raw[17]]),
        destination: u32::from_ne_bytes([raw[18], raw[19], raw[20], raw[21]]),
        source_port: u16::from_be_bytes([raw[22], raw[23]]),
        destination_port: u16::from_be_bytes([raw[24], raw[25]]),
        protocol,
        tcp_flags: 0,
    };
    // The packet the quoted one answers: its entry translates the quoted one back.
    let answered = Packet {
        source: quoted.destination,
        destination: quoted.source,
        source_port: quoted.destination_port,
        destination_port: quoted.source_port,
        ..quoted
    };
    answered.write_key(&mut scratch.key, datapath, port, direction);
    // By reference, as in `reverse`.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let Some(entry) = LB_CONNECTIONS.get_ptr(&scratch.key) else {
        return Ok(());
    };
    // SAFETY: a copy of the entry, read while this program holds the map's RCU read lock.
    let nat = unsafe { *entry };
    let failed = |_| drop_reason::LB_NAT_FAILED;
    // The quoted packet as it was sent: from `nat.destination`, to `nat.source`.
    let mut icmp = Checksum::new(icmp_checksum);
    let mut header = Checksum::new(quoted_checksum);
    header.replace32(quoted.source, nat.destination);
    header.replace32(quoted.destination, nat.source);
    icmp.replace32(quoted.source, nat.destination);
    icmp.replace32(quoted.destination, nat.source);
    icmp.replace16(quoted_checksum, header.value());
    icmp.replace16(quoted.source_port, nat.destination_port);
    icmp.replace16(quoted.destination_port, nat.source_port);
    // The quoted transport checksum, where the quote holds it (a TCP header may be cut
    // short; a UDP checksum of zero means none).
    let transport_checksum_at = if protocol == IPPROTO_TCP {
        QUOTED_L4_OFFSET + 16
    } else {
        QUOTED_L4_OFFSET + 6
    };
    if let Ok(old) = ctx.load::<u16>(transport_checksum_at).map(u16::from_be)
        && old != 0
    {
        let mut transport = Checksum::new(old);
        transport.replace32(quoted.source, nat.destination);
        transport.replace32(quoted.destination, nat.source);
        transport.replace16(quoted.source_port, nat.destination_port);
        transport.replace16(quoted.destination_port, nat.source_port);
        let mut new = transport.value();
        if new == 0 && protocol == IPPROTO_UDP {
            new = 0xffff;
        }
        icmp.replace16(old, new);
        ctx.store(transport_checksum_at, &new.to_be(), 0)
            .map_err(failed)?;
    }
    let quoted_fields = QuotedFields {
        source: nat.destination,
        destination: nat.source,
        source_port: nat.destination_port.to_be(),
        destination_port: nat.source_port.to_be(),
    };
    ctx.store(QUOTED_OFFSET + 12, &quoted_fields.source, 0)
        .map_err(failed)?;
    ctx.store(QUOTED_OFFSET + 16, &quoted_fields.destination, 0)
        .map_err(failed)?;
    ctx.store(QUOTED_L4_OFFSET, &quoted_fields.source_port, 0)
        .map_err(failed)?;
    ctx.store(QUOTED_L4_OFFSET + 2, &quoted_fields.destination_port, 0)
        .map_err(failed)?;
    ctx.store(QUOTED_OFFSET + 10, &header.value().to_be(), 0)
        .map_err(failed)?;
    ctx.store(ICMP_CHECKSUM, &icmp.value().to_be(), 0)
        .map_err(failed)?;
    // The error goes as the answered packet does once translated.
    replace_ip_address(ctx, IP_SOURCE, outer_source, nat.source)?;
    replace_ip_address(ctx, IP_DESTINATION, outer_destination, nat.destination)?;
    crate::counters::bump(&LB_COUNTERS, counter::ICMP_ERROR);
    Ok(())
}

/// The quoted packet's addresses and ports as it was sent (network order).
struct QuotedFields {
    source: u32,
    destination: u32,
    source_port: u16,
    destination_port: u16,
}

/// Rewrites an address of the IPv4 header, with the header's checksum (a transport checksum
/// over it is the caller's: an ICMP error's covers no address).
#[inline(always)]
fn replace_ip_address(
    ctx: &TcContext,
    offset: usize,
    old: u32,
    new: u32,
) -> Result<(), DropReason> {
    if old == new {
        return Ok(());
    }
    let failed = |_| drop_reason::LB_NAT_FAILED;
    ctx.l3_csum_replace(IP_CHECKSUM, u64::from(old), u64::from(new), 4)
        .map_err(failed)?;
    ctx.store(offset, &new, 0).map_err(failed)
}

/// A pod's TCP SYN to an address that is not a VIP opens a connection of its own: a balanced
/// connection's reply translation left on the same addresses and ports (its client closed it
/// and reuses the port, to the backend directly) must not turn this one's replies into the
/// VIP's, so it goes. Out of line, its key in the scratch block, as [`reverse`].
#[inline(never)]
pub fn forget_reused(ctx: &TcContext, datapath: u32, port: u32) {
    let Some(scratch) = load(ctx) else {
        return;
    };
    if !scratch.packet.opens() {
        return;
    }
    // The replies of this connection, as the delivery side would look them up.
    let sent = scratch.packet;
    let reply = Packet {
        source: sent.destination,
        destination: sent.source,
        source_port: sent.destination_port,
        destination_port: sent.source_port,
        ..sent
    };
    reply.write_key(&mut scratch.key, datapath, port, TO_PORT);
    // By reference, as in `reverse`.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let _ = LB_CONNECTIONS.remove(&scratch.key);
}

/// Rewrites `packet`'s addresses and ports to `nat`'s, with the IPv4 and transport checksums
/// (a UDP checksum of zero stays zero). Each step reads what it needs from `packet` and `nat`
/// again rather than keep it across the helper calls (fewer values spilled to the stack of
/// the delivery paths).
#[inline(always)]
fn rewrite(ctx: &TcContext, packet: &Packet, nat: &LbNat) -> Result<(), DropReason> {
    replace_address(ctx, packet, IP_SOURCE, packet.source, nat.source)?;
    replace_address(
        ctx,
        packet,
        IP_DESTINATION,
        packet.destination,
        nat.destination,
    )?;
    replace_port(ctx, packet, L4_OFFSET, packet.source_port, nat.source_port)?;
    replace_port(
        ctx,
        packet,
        L4_OFFSET + 2,
        packet.destination_port,
        nat.destination_port,
    )
}

/// The transport checksum's offset and the flag that keeps a zero UDP checksum zero.
#[inline(always)]
fn transport_checksum(packet: &Packet) -> (usize, u64) {
    if packet.protocol == IPPROTO_TCP {
        (L4_OFFSET + 16, 0)
    } else {
        (L4_OFFSET + 6, u64::from(BPF_F_MARK_MANGLED_0))
    }
}

#[inline(always)]
fn replace_address(
    ctx: &TcContext,
    packet: &Packet,
    offset: usize,
    old: u32,
    new: u32,
) -> Result<(), DropReason> {
    if old == new {
        return Ok(());
    }
    let failed = |_| drop_reason::LB_NAT_FAILED;
    let (checksum, mangled) = transport_checksum(packet);
    let flags = u64::from(BPF_F_PSEUDO_HDR) | mangled | 4;
    ctx.l4_csum_replace(checksum, u64::from(old), u64::from(new), flags)
        .map_err(failed)?;
    replace_ip_address(ctx, offset, old, new)
}

#[inline(always)]
fn replace_port(
    ctx: &TcContext,
    packet: &Packet,
    offset: usize,
    old: u16,
    new: u16,
) -> Result<(), DropReason> {
    if old == new {
        return Ok(());
    }
    let failed = |_| drop_reason::LB_NAT_FAILED;
    let (checksum, mangled) = transport_checksum(packet);
    let (old, new) = (old.to_be(), new.to_be());
    ctx.l4_csum_replace(checksum, u64::from(old), u64::from(new), mangled | 2)
        .map_err(failed)?;
    ctx.store(offset, &new, 0).map_err(failed)
}
