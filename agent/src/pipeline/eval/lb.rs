//! The switch's load balancers (`ls_in_lb` and the hairpin stages) as the kernel's `lb` stage
//! runs them: an IPv4 TCP or UDP packet from a VIF to one of the switch's VIPs gets a backend
//! picked by the same hash of its fields ([`ovnbpf_common::lb::connection_hash`]), so a trace
//! names the backend the datapath would choose for that connection; the packet goes on with
//! the backend as destination. A client balanced to itself gets the VIP as source and leaves
//! through its own port. A VIP without backends drops or rejects. Each decision is recorded
//! ([`super::Trace::balanced`]): `ovn-trace` prints `ct_lb_mark(backends=…)` but applies no
//! translation, so the differential tests compare the decision, not the packet after it. A
//! router's load balancers (`lr_in_dnat` where its gateway resides: Kube-OVN's `OvnDnatRule`)
//! are run the same way for new connections entering the gateway port.

use std::net::Ipv4Addr;

use ovnbpf_common::lb::{LbNatKey, connection_hash, hash_fields, pick};

use super::{
    Evaluator, Trace,
    packet::{L3, L4, Packet},
};
use crate::pipeline::ir::{IrEntry, LbBackend, LbProtocol, LbVip};

/// A load balancer's decision on a packet to one of its VIPs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Balanced {
    pub vip: Ipv4Addr,
    pub port: Option<u16>,
    /// The VIP's backends, in the Southbound's order.
    pub backends: Vec<LbBackend>,
    /// The one picked (`None`: there are none).
    pub chosen: Option<LbBackend>,
}

/// What the load-balancer step did with a packet.
pub(super) enum LbOutcome {
    /// Not a VIP's (or balanced): go on with this packet.
    Continue(Packet),
    /// A hairpin: the packet goes back out of the port it came in on.
    Hairpin(Packet),
    /// A VIP without backends: dropped (`false`) or rejected (`true`).
    NoBackends { reject: bool },
}

/// A packet's addresses, protocol and ports: (source, destination, protocol, source port,
/// destination port).
type Transport = (Ipv4Addr, Ipv4Addr, LbProtocol, u16, u16);

/// The VIP among `vips` (one address's) a packet of `protocol` to `port` is for: its (protocol,
/// port) first, then a VIP without a port, as the kernel looks them up.
fn matching_vip<'v, I: Iterator<Item = &'v LbVip>>(
    vips: impl Fn() -> I,
    protocol: LbProtocol,
    port: u16,
) -> Option<&'v LbVip> {
    vips()
        .find(|vip| vip.protocol == Some(protocol) && vip.port == Some(port))
        .or_else(|| vips().find(|vip| vip.port.is_none()))
}

/// `packet`'s addresses, protocol and ports, if it is IPv4 TCP or UDP (what the kernel's
/// stage balances).
fn transport(packet: &Packet) -> Option<Transport> {
    let L3::Ipv4 {
        source,
        destination,
        ..
    } = packet.l3
    else {
        return None;
    };
    let (number, (sport, dport)) = packet.transport();
    let protocol = [LbProtocol::Tcp, LbProtocol::Udp]
        .into_iter()
        .find(|protocol| protocol.number() == number)?;
    Some((source, destination, protocol, sport, dport))
}

/// `packet` with its addresses and ports replaced.
fn translated(packet: &Packet, source: (Ipv4Addr, u16), destination: (Ipv4Addr, u16)) -> Packet {
    let mut packet = *packet;
    if let L3::Ipv4 {
        source: s,
        destination: d,
        l4,
        ..
    } = &mut packet.l3
    {
        *s = source.0;
        *d = destination.0;
        match l4 {
            L4::Tcp {
                source: sp,
                destination: dp,
            }
            | L4::Udp {
                source: sp,
                destination: dp,
            } => {
                *sp = source.1;
                *dp = destination.1;
            }
            _ => {}
        }
    }
    packet
}

impl Evaluator<'_> {
    /// The switch's VIP that `packet` is for: its (protocol, port) first, then a VIP without
    /// a port, as the kernel looks them up.
    fn vip_of(
        &self,
        dp: u32,
        destination: Ipv4Addr,
        protocol: LbProtocol,
        port: u16,
    ) -> Option<&LbVip> {
        let vips = || {
            self.entries(dp).filter_map(|entry| match entry {
                IrEntry::LoadBalancer { vip, .. } if vip.vip == destination => Some(&**vip),
                _ => None,
            })
        };
        matching_vip(vips, protocol, port)
    }

    /// The backend `vip` gives the new connection `transport` (`None`: it has none), picked
    /// by the kernel's hash of the VIP's fields; the decision recorded in `trace`.
    fn choose(&self, vip: &LbVip, transport: Transport, trace: &mut Trace) -> Option<LbBackend> {
        let (source, destination, protocol, sport, dport) = transport;
        let key = LbNatKey {
            source: u32::from_ne_bytes(source.octets()),
            destination: u32::from_ne_bytes(destination.octets()),
            source_port: sport,
            destination_port: dport,
            protocol: protocol.number(),
            ..LbNatKey::default()
        };
        let chosen = (!vip.backends.is_empty()).then(|| {
            let fields = hash_fields(vip.hash_flags());
            let index = pick(connection_hash(fields, &key), vip.backends.len() as u32);
            vip.backends[index as usize]
        });
        trace.balanced.push(Balanced {
            vip: vip.vip,
            port: vip.port,
            backends: vip.backends.clone(),
            chosen,
        });
        chosen
    }

    /// OVN's `lr_in_dnat` balancing for a new connection entering router `dp`'s gateway port
    /// `inport` (its chassisredirect port bound) to a VIP of the router's load balancers, as
    /// the gateway NAT stage runs it: the backend picked by the switches' hash, the packet's
    /// destination and port its; the decision recorded. `None` when `packet` is no IPv4 TCP
    /// or UDP packet to such a VIP; a VIP without backends drops it (`Some(None)`).
    pub(super) fn router_balance(
        &self,
        dp: u32,
        inport: &str,
        packet: &Packet,
        trace: &mut Trace,
    ) -> Option<Option<Packet>> {
        let transport = transport(packet)?;
        let (source, destination, protocol, sport, dport) = transport;
        let redirect = self.entries(dp).find_map(|e| match e {
            IrEntry::GatewayPort { port, redirect, .. } if port == inport => Some(redirect),
            _ => None,
        })?;
        let vips = || {
            self.entries(dp).filter_map(move |entry| match entry {
                IrEntry::RouterLoadBalancer {
                    redirect: r, vip, ..
                } if r == redirect && vip.vip == destination => Some(&**vip),
                _ => None,
            })
        };
        let vip = matching_vip(vips, protocol, dport)?;
        let Some(backend) = self.choose(vip, transport, trace) else {
            let text = format!("dropped: router load balancer VIP {destination} has no backends");
            self.step(trace, dp, text);
            return Some(None);
        };
        let backend_port = backend.port.unwrap_or(dport);
        let text = format!(
            "lr_in_dnat: router load balancer VIP {destination}:{dport} → backend {}:{backend_port}",
            backend.ip
        );
        self.step(trace, dp, text);
        Some(Some(translated(
            packet,
            (source, sport),
            (backend.ip, backend_port),
        )))
    }

    /// `ls_in_lb` for `packet` from VIF `inport` of switch `dp`.
    pub(super) fn load_balance(&self, dp: u32, packet: Packet, trace: &mut Trace) -> LbOutcome {
        let Some(transport) = transport(&packet) else {
            return LbOutcome::Continue(packet);
        };
        let (source, destination, protocol, sport, dport) = transport;
        let Some(vip) = self.vip_of(dp, destination, protocol, dport) else {
            return LbOutcome::Continue(packet);
        };
        let Some(backend) = self.choose(vip, transport, trace) else {
            let verdict = if vip.reject { "rejected" } else { "dropped" };
            self.step(
                trace,
                dp,
                format!("{verdict}: load balancer VIP {destination} has no backends"),
            );
            return LbOutcome::NoBackends { reject: vip.reject };
        };
        let backend_port = backend.port.unwrap_or(dport);
        let hairpin = backend.ip == source
            && self
                .entries(dp)
                .any(|entry| matches!(entry, IrEntry::LbHairpin { .. }));
        let new_source = if hairpin { destination } else { source };
        let balanced = translated(&packet, (new_source, sport), (backend.ip, backend_port));
        self.step(
            trace,
            dp,
            format!(
                "load balancer: VIP {destination}:{dport} → backend {}:{backend_port}{}",
                backend.ip,
                if hairpin {
                    " (hairpin: the VIP as source)"
                } else {
                    ""
                }
            ),
        );
        if hairpin {
            let mut back = balanced;
            std::mem::swap(&mut back.eth_src, &mut back.eth_dst);
            LbOutcome::Hairpin(back)
        } else {
            LbOutcome::Continue(balanced)
        }
    }
}
