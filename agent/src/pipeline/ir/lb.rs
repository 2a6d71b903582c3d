//! The load-balancer part of the IR: a switch's VIPs as `ls_in_lb` balances them
//! ([`LbVip`]), the backends, and how a backend is picked. Built by the compiler from the
//! flows northd writes for Northbound Load_Balancer rows (Kubernetes Services as Kube-OVN
//! writes them); read by the backends.

use std::net::Ipv4Addr;

use ovnbpf_common::lb::{LB_HASH_IP_DST, LB_HASH_IP_SRC, LB_HASH_TP_DST, LB_HASH_TP_SRC};

/// A transport a VIP balances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LbProtocol {
    Tcp,
    Udp,
}

impl LbProtocol {
    /// The IP protocol number.
    #[must_use]
    pub const fn number(self) -> u8 {
        match self {
            LbProtocol::Tcp => 6,
            LbProtocol::Udp => 17,
        }
    }
}

/// A field OVN's `hash_fields` picks backends by (the balancer's `selection_fields`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LbHashField {
    IpSrc,
    IpDst,
    TpSrc,
    TpDst,
}

impl LbHashField {
    /// The field named as northd writes it in `hash_fields="…"`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "ip_src" => LbHashField::IpSrc,
            "ip_dst" => LbHashField::IpDst,
            "tp_src" => LbHashField::TpSrc,
            "tp_dst" => LbHashField::TpDst,
            _ => return None,
        })
    }
}

/// A backend: its address and port (`None`: the packet's own, for a VIP without a port).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LbBackend {
    pub ip: Ipv4Addr,
    pub port: Option<u16>,
}

/// One VIP of a switch (an `ls_in_lb` flow): new connections to `vip` (`port` of `protocol`;
/// both `None` for a VIP without a port, which OVN balances for TCP and UDP alike here) are
/// sent to one of `backends`. No backends: new connections are dropped (`drop;`), or rejected
/// (`reject { … }`, the balancer's `options:reject=true`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LbVip {
    pub vip: Ipv4Addr,
    pub port: Option<u16>,
    pub protocol: Option<LbProtocol>,
    pub backends: Vec<LbBackend>,
    /// OVN's `hash_fields` (empty: the connection's 5-tuple).
    pub hash_fields: Vec<LbHashField>,
    pub reject: bool,
}

impl LbVip {
    /// Its hash fields as the kernel's [`ovnbpf_common::lb::LbVip::flags`] name them (0: none,
    /// the 5-tuple).
    #[must_use]
    pub fn hash_flags(&self) -> u32 {
        self.hash_fields.iter().fold(0, |flags, field| {
            flags
                | match field {
                    LbHashField::IpSrc => LB_HASH_IP_SRC,
                    LbHashField::IpDst => LB_HASH_IP_DST,
                    LbHashField::TpSrc => LB_HASH_TP_SRC,
                    LbHashField::TpDst => LB_HASH_TP_DST,
                }
        })
    }
}
