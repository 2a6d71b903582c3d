//! The load-balancer part of the contract (OVN's `ls_in_lb`, Kubernetes Services as Kube-OVN
//! writes them): a switch's VIPs ([`LbVipKey`] → [`LbVip`]), each VIP's backends in a group
//! shared by every switch with the same list ([`LbBackendKey`] → [`LbBackend`]), the addresses
//! that are VIPs on a switch ([`LbAddressKey`], the gate a pod's packet passes first), and the
//! translations of live connections ([`LbNatKey`] → [`LbNat`]), kept by the kernel (LRU,
//! pinned: they survive an agent restart).
//!
//! A connection from a client to a VIP has two entries, both in the client port's zone (as
//! OVN's `ct_lb_mark` commits one conntrack entry in the client's zone): one looked up where
//! the client's packets enter (`from_pod`'s load-balancer stage: VIP → backend) and one where
//! the backend's replies are delivered to the client (VIP as source again). A hairpin
//! connection (the client is the backend chosen) has a third: the backend's replies enter from
//! the same port and are translated there, and both directions leave through the port they
//! came in on, as northd's hairpin stages do.

/// [`LbNatKey::direction`]: looked up where the zone's port sends (its ingress pipeline).
pub const FROM_PORT: u8 = 0;
/// [`LbNatKey::direction`]: looked up where a packet is delivered to the zone's port.
pub const TO_PORT: u8 = 1;

/// A VIP on a switch: (datapath, address, transport port, protocol); `port` 0 for a VIP without
/// one (`ct.new && ip4.dst == V`, which OVN balances for any transport).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LbVipKey {
    pub datapath: u32,
    /// Network byte order.
    pub vip: u32,
    /// Host order.
    pub port: u16,
    /// IP protocol number (6, 17); 0 with `port` 0.
    pub protocol: u8,
    pub padding: u8,
}

/// What a VIP balances to: `count` backends of group `group` (0: none, dropped or rejected
/// per [`LB_VIP_REJECT`]), picked by a hash of the fields in `flags`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbVip {
    pub group: u32,
    pub count: u32,
    pub flags: u32,
    /// Session affinity (OVN's `affinity_timeout`): a client's new connections go to the
    /// backend its last one went to, for this many seconds after it ([`LbAffinityKey`]); 0:
    /// none.
    pub affinity_seconds: u32,
}

/// [`LbVip::flags`]: the backend is picked by a hash of the source address (OVN's
/// `hash_fields="ip_src"`, Kube-OVN's session-affinity balancers).
pub const LB_HASH_IP_SRC: u32 = 1 << 0;
/// The destination address is hashed.
pub const LB_HASH_IP_DST: u32 = 1 << 1;
/// The source port is hashed.
pub const LB_HASH_TP_SRC: u32 = 1 << 2;
/// The destination port is hashed.
pub const LB_HASH_TP_DST: u32 = 1 << 3;
/// No `hash_fields`: the 5-tuple, as OVN's `dp_hash` selection spreads connections.
pub const LB_HASH_FIVE_TUPLE: u32 =
    LB_HASH_IP_SRC | LB_HASH_IP_DST | LB_HASH_TP_SRC | LB_HASH_TP_DST | LB_HASH_PROTOCOL;
/// The protocol is hashed (part of the 5-tuple only).
pub const LB_HASH_PROTOCOL: u32 = 1 << 4;
/// A VIP without backends rejects new connections (the balancer's `options:reject=true`:
/// a TCP reset or ICMP port unreachable) instead of dropping them.
pub const LB_VIP_REJECT: u32 = 1 << 8;
/// The switch has northd's hairpin stages: a client balanced to itself gets the VIP as
/// source, and the packet goes back out of the port it came in on.
pub const LB_VIP_HAIRPIN: u32 = 1 << 9;

/// Backend `index` (0 .. count) of group `group`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LbBackendKey {
    pub group: u32,
    pub index: u32,
}

/// A backend: address (network byte order) and port (host order; 0: the packet's own, for a
/// VIP without a port).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbBackend {
    pub ip: u32,
    pub port: u16,
    pub padding: u16,
}

/// A backend of a group by its address (the session-affinity check: is the backend a client
/// learned still one of the VIP's?).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LbMemberKey {
    pub group: u32,
    pub ip: u32,
    pub port: u16,
    pub padding: u16,
}

/// An address that is a VIP on a switch: the only packets the load-balancer stage looks at.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LbAddressKey {
    pub datapath: u32,
    /// Network byte order.
    pub ip: u32,
}

/// A client's affinity to a VIP's backend (OVN's `commit_lb_aff` / `chk_lb_aff`): (switch,
/// client address, VIP, port, protocol).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LbAffinityKey {
    pub datapath: u32,
    pub client: u32,
    pub vip: u32,
    pub port: u16,
    pub protocol: u8,
    pub padding: u8,
}

/// The backend a client's last new connection to the VIP went to, and when. The client keeps
/// it while it is one of the VIP's backends ([`LbMemberKey`]), whatever else changes in the
/// list, as OVN's per-backend affinity flows keep it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbAffinity {
    pub backend: u32,
    pub port: u16,
    pub padding: u16,
    pub last_seen: u64,
}

/// A packet of a balanced connection, in logical port (datapath, port) 's zone, as it is seen
/// at `direction` ([`FROM_PORT`], [`TO_PORT`]): addresses in network byte order, ports in host
/// order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LbNatKey {
    pub datapath: u32,
    pub port: u32,
    pub source: u32,
    pub destination: u32,
    pub source_port: u16,
    pub destination_port: u16,
    pub protocol: u8,
    pub direction: u8,
    pub padding: u16,
}

/// What the packet becomes (every field written; unchanged ones equal the key's), and when
/// the connection was last seen.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbNat {
    pub source: u32,
    pub destination: u32,
    pub source_port: u16,
    pub destination_port: u16,
    /// [`LB_NAT_HAIRPIN`], [`LB_NAT_CLOSING`].
    pub flags: u32,
    /// `bpf_ktime_get_ns` of the last packet through this entry.
    pub last_seen: u64,
}

/// [`LbNat::flags`]: the packet goes back out of the port it came in on (a hairpin).
pub const LB_NAT_HAIRPIN: u32 = 1 << 0;
/// A TCP FIN or reset went through: the entry lives [`CLOSING_LIFETIME_NS`] after its last
/// packet, and a new SYN on the same tuple is a new connection.
pub const LB_NAT_CLOSING: u32 = 1 << 1;

/// How long an entry outlives its last packet: Linux conntrack's defaults (TCP established 5
/// days, UDP stream 120 s, 10 s after a FIN or reset).
pub const TCP_LIFETIME_NS: u64 = 432_000 * 1_000_000_000;
pub const UDP_LIFETIME_NS: u64 = 120 * 1_000_000_000;
pub const CLOSING_LIFETIME_NS: u64 = 10 * 1_000_000_000;

/// The lifetime of an entry of `protocol` with `flags`.
#[must_use]
pub const fn lifetime(protocol: u8, flags: u32) -> u64 {
    if flags & LB_NAT_CLOSING != 0 {
        CLOSING_LIFETIME_NS
    } else if protocol == 6 {
        TCP_LIFETIME_NS
    } else {
        UDP_LIFETIME_NS
    }
}

/// The backend index `hash` picks among `count` (> 0).
#[must_use]
pub const fn pick(hash: u32, count: u32) -> u32 {
    hash % count
}

/// The fields a VIP's backends are picked by: its [`LbVip::flags`]' hash fields, or the 5-tuple
/// where it names none (OVN's `dp_hash` without `hash_fields`).
#[must_use]
pub const fn hash_fields(flags: u32) -> u32 {
    match flags & LB_HASH_FIVE_TUPLE {
        0 => LB_HASH_FIVE_TUPLE,
        fields => fields,
    }
}

/// The hash of a new connection's fields that `flags` selects ([`LB_HASH_FIVE_TUPLE`] and its
/// parts): a murmur3 finalizer over each, so that neighbouring ports spread over backends.
#[must_use]
pub const fn connection_hash(flags: u32, key: &LbNatKey) -> u32 {
    let mut hash: u32 = 0x9e37_79b9;
    if flags & LB_HASH_IP_SRC != 0 {
        hash = mix(hash ^ key.source);
    }
    if flags & LB_HASH_IP_DST != 0 {
        hash = mix(hash ^ key.destination);
    }
    if flags & LB_HASH_TP_SRC != 0 {
        hash = mix(hash ^ key.source_port as u32);
    }
    if flags & LB_HASH_TP_DST != 0 {
        hash = mix(hash ^ (key.destination_port as u32) << 16);
    }
    if flags & LB_HASH_PROTOCOL != 0 {
        hash = mix(hash ^ key.protocol as u32);
    }
    hash
}

const fn mix(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The size of `LB_SCRATCH`'s block (a [`LbNatKey`] and the kernel's view of a packet).
pub const LB_SCRATCH_BYTES: usize = 72;

/// Indexes of `LB_COUNTERS`: what the load-balancer stage did.
pub mod counter {
    /// New connections balanced to a backend.
    pub const BALANCED: u32 = 0;
    /// Of those, the ones a client's session affinity sent to its backend.
    pub const AFFINITY: u32 = 1;
    /// Of those, hairpins (a client balanced to itself).
    pub const HAIRPIN: u32 = 2;
    /// Translations the table could not take (the next packet picks again).
    pub const INSERT_FAILED: u32 = 3;
    /// ICMP errors about a balanced connection's packets, given back the VIP on their way to
    /// the client.
    pub const ICMP_ERROR: u32 = 4;
    pub const COUNT: u32 = 5;
    /// Names for metrics, by index.
    pub const NAMES: [&str; COUNT as usize] = [
        "balanced",
        "affinity",
        "hairpin",
        "insert_failed",
        "icmp_error",
    ];
}

/// A pod whose sockets the socket-level balancer serves (`SOCK_LB_CLIENTS`, keyed by its
/// network namespace's cookie): its switch and address. A socket of a namespace not listed
/// (the host's, another agent's pods) is left alone.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockLbClient {
    pub datapath: u32,
    /// Network byte order.
    pub ip: u32,
}

/// A backend a socket was sent to instead of a VIP (`SOCK_LB_REVERSE`): the socket's cookie,
/// the backend's address (network byte order), port (host order) and the protocol. What the
/// socket's owner is shown as its peer or a datagram's source is the VIP again.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SockLbReverseKey {
    pub cookie: u64,
    pub backend: u32,
    pub port: u16,
    pub protocol: u8,
    pub padding: u8,
}

/// The VIP (network byte order) and port (host order) a [`SockLbReverseKey`] stands for.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockLbReverse {
    pub vip: u32,
    pub port: u16,
    pub padding: u16,
}

/// Indexes of `SOCK_LB_COUNTERS`: what the socket-level balancer did.
pub mod socket_counter {
    /// connect() of a TCP or UDP socket to a VIP, sent to a backend instead.
    pub const CONNECT: u32 = 0;
    /// Datagrams sent to a VIP by address (sendmsg on an unconnected UDP socket), sent to a
    /// backend instead.
    pub const SENDMSG: u32 = 1;
    /// A backend's address shown as the VIP's (a datagram's source, getpeername()).
    pub const REVERSED: u32 = 2;
    /// Left to the per-packet balancer: the client is one of the VIP's backends (a hairpin's
    /// packets get the VIP as source from northd's hairpin stages, and the stage spreads such
    /// a client evenly), or the VIP has none.
    pub const LEFT: u32 = 3;
    /// Translations whose reverse entry the table could not take (the socket's owner sees the
    /// backend's address).
    pub const INSERT_FAILED: u32 = 4;
    pub const COUNT: u32 = 5;
    /// Names for metrics, by index.
    pub const NAMES: [&str; COUNT as usize] =
        ["connect", "sendmsg", "reversed", "left", "insert_failed"];
}

/// Pods the socket-level balancer serves on a node.
pub const MAX_SOCK_LB_CLIENTS: u32 = 16_384;
/// Sockets' translations remembered (the least recently used make room).
pub const MAX_SOCK_LB_REVERSE: u32 = 262_144;

pub const MAX_LB_VIPS: u32 = 131_072;
pub const MAX_LB_SWITCHES: u32 = 16_384;
pub const MAX_LB_BACKENDS: u32 = 262_144;
pub const MAX_LB_ADDRESSES: u32 = 131_072;
/// Connection entries (two per connection, three for a hairpin one).
pub const MAX_LB_CONNECTIONS: u32 = 262_144;
/// Clients' affinities (the least recently used make room).
pub const MAX_LB_AFFINITIES: u32 = 131_072;

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: plain `#[repr(C)]` data without padding holes the kernel reads.
    unsafe impl aya::Pod for LbVipKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LbVip {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LbBackendKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LbBackend {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LbAddressKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LbNatKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LbNat {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LbAffinityKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LbAffinity {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LbMemberKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SockLbClient {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SockLbReverseKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SockLbReverse {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_the_kernels() {
        assert_eq!(core::mem::size_of::<LbVipKey>(), 12);
        assert_eq!(core::mem::size_of::<LbVip>(), 16);
        assert_eq!(core::mem::size_of::<LbAffinityKey>(), 16);
        assert_eq!(core::mem::size_of::<LbAffinity>(), 16);
        assert_eq!(core::mem::size_of::<LbMemberKey>(), 12);
        assert_eq!(core::mem::size_of::<LbBackendKey>(), 8);
        assert_eq!(core::mem::size_of::<LbBackend>(), 8);
        assert_eq!(core::mem::size_of::<LbAddressKey>(), 8);
        assert_eq!(core::mem::size_of::<LbNatKey>(), 24);
        assert_eq!(core::mem::size_of::<LbNat>(), 24);
        assert_eq!(core::mem::size_of::<SockLbClient>(), 8);
        assert_eq!(core::mem::size_of::<SockLbReverseKey>(), 16);
        assert_eq!(core::mem::size_of::<SockLbReverse>(), 8);
    }

    #[test]
    fn the_five_tuple_spreads_source_ports_over_backends() {
        let mut seen = [0_u32; 3];
        for port in 40_000..40_300_u16 {
            let key = LbNatKey {
                source: 0x0201_000a,
                destination: 0x0a00_600a,
                source_port: port,
                destination_port: 80,
                protocol: 6,
                ..LbNatKey::default()
            };
            seen[pick(connection_hash(LB_HASH_FIVE_TUPLE, &key), 3) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 70), "{seen:?}");
    }

    #[test]
    fn a_source_hash_ignores_the_ports() {
        let key = |port| LbNatKey {
            source: 0x0201_000a,
            source_port: port,
            protocol: 6,
            ..LbNatKey::default()
        };
        let hash = |port| connection_hash(LB_HASH_IP_SRC, &key(port));
        assert_eq!(hash(1000), hash(2000));
        assert_ne!(
            connection_hash(LB_HASH_FIVE_TUPLE, &key(1000)),
            connection_hash(LB_HASH_FIVE_TUPLE, &key(2000))
        );
    }
}
