//! The socket-level balancer (beyond OVN: what Cilium does instead of kube-proxy), cgroup
//! `sock_addr` hooks the agent attaches with `--socket-lb`. For a pod of this node
//! (`SOCK_LB_CLIENTS`, by its network namespace's cookie), a connect() to a VIP of its switch
//! goes to a backend instead, picked from the same groups and with the same session affinity
//! as the per-packet `lb` stage reads (`LB_VIPS`, `LB_BACKENDS`, `LB_AFFINITIES`); so does a
//! datagram sent to a VIP by address. The connection then carries no translation at all: its
//! packets are a pod's packets to a pod. What the socket's owner reads back, its peer
//! (getpeername) and a datagram's source (recvmsg), is the VIP again (`SOCK_LB_REVERSE`, by
//! the socket's cookie).
//!
//! Left to the per-packet stage, untouched: sockets of namespaces that are not our pods', VIPs
//! without backends (the stage drops or rejects as the balancer says), and a client that is one
//! of the VIP's backends (balanced to itself, northd's hairpin stages give its connection the
//! VIP as source, which a socket hook cannot; and leaving only those picks would skew its
//! spread). A backend is picked by a hash of the socket's cookie (so one socket's
//! datagrams stay on one backend, as one conntrack entry keeps them) with the VIP's hash
//! fields; a VIP hashed by the client's address alone picks as the stage does.
//!
//! A socket released (`sock_release`) takes its reverse entry along, when it was connected to
//! a backend, so the table holds the live sockets' entries rather than evicting them for the
//! dead ones'.
//!
//! Every hook lets the call go on (returns 1): the balancer redirects, it never refuses.
//!
//! With the `log` feature each redirection is logged at debug level (aya-log).

use aya_ebpf::{
    helpers::{bpf_get_netns_cookie, bpf_get_socket_cookie, bpf_ktime_get_ns},
    programs::{SockAddrContext, SockContext},
};
use ovnbpf_common::lb::{
    LbAffinityKey, LbMemberKey, LbNatKey, SockLbClient, SockLbReverse, SockLbReverseKey,
    connection_hash, hash_fields, pick, socket_counter,
};

use crate::{
    LB_MEMBERS, SOCK_LB_CLIENTS, SOCK_LB_COUNTERS, SOCK_LB_REVERSE,
    headers::{IPPROTO_TCP, IPPROTO_UDP},
    lb::{backend_at, vip_of, with_affinity},
    maps::get,
};

/// What a hook returns: the call goes on.
pub const ALLOW: i32 = 1;

/// A call the balancer serves: a TCP or UDP socket of a pod of this node, and the address the
/// call names (network byte order) with its port (host order).
struct Served {
    client: SockLbClient,
    ip: u32,
    port: u16,
    protocol: u8,
}

/// The call in `ctx`, when it is one the balancer serves.
#[inline(always)]
fn served(ctx: &SockAddrContext) -> Option<Served> {
    let addr = ctx.sock_addr;
    // SAFETY: the kernel hands the hook a valid `bpf_sock_addr`; its fields are read with the
    // sizes the verifier allows.
    let (ip, raw_port, protocol) =
        unsafe { ((*addr).user_ip4, (*addr).user_port, (*addr).protocol) };
    let protocol = protocol as u8;
    if protocol != IPPROTO_TCP && protocol != IPPROTO_UDP {
        return None;
    }
    // SAFETY: the helper takes the hook's own context.
    let netns = unsafe { bpf_get_netns_cookie(addr.cast()) };
    let client = get(&SOCK_LB_CLIENTS, netns).copied()?;
    Some(Served {
        client,
        ip,
        port: u16::from_be(raw_port as u16),
        protocol,
    })
}

/// connect() (TCP, UDP) and sendmsg() to an address (UDP): a VIP of the pod's switch becomes
/// one of its backends; `counter` says which.
#[inline(always)]
pub fn redirect(ctx: &SockAddrContext, counter: u32) {
    let addr = ctx.sock_addr;
    let Some(Served {
        client,
        ip,
        port,
        protocol,
    }) = served(ctx)
    else {
        return;
    };
    let Some(vip) = vip_of(client.datapath, ip, port, protocol) else {
        return;
    };
    if vip.count == 0 {
        crate::counters::bump(&SOCK_LB_COUNTERS, socket_counter::LEFT);
        return;
    }
    // SAFETY: the helper takes the hook's own context.
    let cookie = unsafe { bpf_get_socket_cookie(addr.cast()) };
    let key = LbNatKey {
        source: client.ip,
        destination: ip,
        source_port: (cookie ^ (cookie >> 16) ^ (cookie >> 32) ^ (cookie >> 48)) as u16,
        destination_port: port,
        protocol,
        ..LbNatKey::default()
    };
    let picked = pick(connection_hash(hash_fields(vip.flags), &key), vip.count);
    let backend = match vip.affinity_seconds {
        0 => backend_at(vip.group, picked),
        seconds => {
            let affinity = LbAffinityKey {
                datapath: client.datapath,
                client: client.ip,
                vip: ip,
                port,
                protocol,
                padding: 0,
            };
            // SAFETY: reading the clock has no preconditions.
            with_affinity(affinity, &vip, picked, seconds, unsafe {
                bpf_ktime_get_ns()
            })
        }
    };
    let Ok(backend) = backend else {
        return;
    };
    // A client that is one of the VIP's backends is left to the stage whichever backend was
    // picked: balanced to itself it must be the stage's hairpin, and the stage alone spreads
    // such a client evenly (leaving only its picks of itself would halve their share).
    let member = LbMemberKey {
        group: vip.group,
        ip: client.ip,
        port: backend.port,
        padding: 0,
    };
    if backend.ip == client.ip || get(&LB_MEMBERS, member).is_some() {
        crate::counters::bump(&SOCK_LB_COUNTERS, socket_counter::LEFT);
        return;
    }
    let backend_port = match backend.port {
        0 => port,
        own => own,
    };
    let reverse = SockLbReverseKey {
        cookie,
        backend: backend.ip,
        port: backend_port,
        protocol,
        padding: 0,
    };
    let shown = SockLbReverse {
        vip: ip,
        port,
        padding: 0,
    };
    if SOCK_LB_REVERSE.insert(reverse, shown, 0).is_err() {
        crate::counters::bump(&SOCK_LB_COUNTERS, socket_counter::INSERT_FAILED);
    }
    // SAFETY: connect4 and sendmsg4 hooks may write the destination (4-byte stores).
    unsafe {
        (*addr).user_ip4 = backend.ip;
        (*addr).user_port = u32::from(backend_port.to_be());
    }
    crate::counters::bump(&SOCK_LB_COUNTERS, counter);
    #[cfg(feature = "log")]
    aya_log_ebpf::debug!(
        ctx,
        "socket lb: {:i}:{} to {:i}:{}",
        u32::from_be(ip),
        port,
        u32::from_be(backend.ip),
        backend_port
    );
}

/// getpeername() and recvmsg(): a backend a VIP was translated to for this socket is shown as
/// the VIP.
#[inline(always)]
pub fn reverse(ctx: &SockAddrContext) {
    let addr = ctx.sock_addr;
    let Some(Served {
        ip, port, protocol, ..
    }) = served(ctx)
    else {
        return;
    };
    // SAFETY: the helper takes the hook's own context.
    let cookie = unsafe { bpf_get_socket_cookie(addr.cast()) };
    let key = SockLbReverseKey {
        cookie,
        backend: ip,
        port,
        protocol,
        padding: 0,
    };
    let Some(shown) = SOCK_LB_REVERSE
        .get_ptr(key)
        // SAFETY: LRU hash values stay valid while the program runs.
        .map(|entry| unsafe { *entry })
    else {
        return;
    };
    // SAFETY: getpeername4 and recvmsg4 hooks may write the address shown (4-byte stores).
    unsafe {
        (*addr).user_ip4 = shown.vip;
        (*addr).user_port = u32::from(shown.port.to_be());
    }
    crate::counters::bump(&SOCK_LB_COUNTERS, socket_counter::REVERSED);
}

/// sock_release: a connected socket of a pod here forgets the VIP its backend stood for.
#[inline(always)]
pub fn forget(ctx: &SockContext) {
    let sock = ctx.sock;
    // SAFETY: the kernel hands the hook a valid `bpf_sock`; its fields are read with the sizes
    // the verifier allows.
    let (protocol, destination, raw_port) =
        unsafe { ((*sock).protocol as u8, (*sock).dst_ip4, (*sock).dst_port) };
    if (protocol != IPPROTO_TCP && protocol != IPPROTO_UDP) || destination == 0 {
        return;
    }
    // SAFETY: the helper takes the hook's own context.
    let netns = unsafe { bpf_get_netns_cookie(sock.cast()) };
    if get(&SOCK_LB_CLIENTS, netns).is_none() {
        return;
    }
    // SAFETY: as above.
    let cookie = unsafe { bpf_get_socket_cookie(sock.cast()) };
    let key = SockLbReverseKey {
        cookie,
        backend: destination,
        port: u16::from_be(raw_port),
        protocol,
        padding: 0,
    };
    let _ = SOCK_LB_REVERSE.remove(key);
}
