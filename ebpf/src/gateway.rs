//! The active gateway chassis's side of a distributed gateway port (a router port with a
//! chassisredirect companion, Kube-OVN's external access): what other chassis tunnel to the
//! chassisredirect port ([`egress`]: OVN's output to the port on its chassis, the router's
//! egress, then the switch behind the gateway port) leaves by that switch: to a port of it on
//! this node, else out of its localnet's provider NIC ([`leave`], which the gateway NAT stage
//! ends in too). The sending side is the router stage's (`GATEWAY_REDIRECTS`), the way in from
//! the provider network [`crate::nat`]'s. Reads `GATEWAY_EGRESS`, `L2_FIB`, `LOCALNETS`.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::{DropReason, FIB_LOCAL, FibKey, GATEWAY_SNAT, TunnelPortKey, drop_reason};

use crate::{
    headers::{ETH_P_IPV4, ETH_P_IPV6, EthHeader},
    maps::{GATEWAY_EGRESS, L2_FIB, get},
    output::{Between, deliver_to_port},
};

/// Sends a decapsulated frame another chassis tunnelled to chassisredirect port `key` (its
/// router's VNI and its key) out of the gateway port: the router's egress, which acts only
/// where the router has centralized SNAT rules here (the gateway NAT stage, [`crate::snat`]),
/// then [`leave`].
#[inline(always)]
pub fn egress(ctx: &TcContext, key: TunnelPortKey) -> Result<i32, DropReason> {
    let gateway = get(&GATEWAY_EGRESS, key)
        .copied()
        .ok_or(drop_reason::GENEVE_UNKNOWN_DESTINATION)?;
    if gateway.flags & GATEWAY_SNAT != 0 {
        return Err(crate::snat::request_out(
            ctx,
            key.datapath,
            gateway.switch,
            gateway.switch_port,
        ));
    }
    leave(ctx, gateway.switch, gateway.switch_port)
}

/// Sends a frame a router routed out of its gateway port into `switch`, the switch behind the
/// port, entered by its router port `switch_port`. A unicast to a port of that switch on this
/// node is delivered there (egress ACLs and port security first); anything else (a MAC of the
/// physical network, the router's ARP request) goes out of the switch's localnet, where OVN's
/// `_MC_unknown` and flood send it too (the flood's copies to the switch's other ports are not
/// made here). The switch's ingress ACL stage is not run: IPv4 is refused where its from-lport
/// ACLs may act on it (fails closed).
#[inline(always)]
pub fn leave(ctx: &TcContext, switch: u32, switch_port: u32) -> Result<i32, DropReason> {
    let inner = ctx
        .load::<EthHeader>(0)
        .map_err(|_| drop_reason::ROUTED_MALFORMED)?;
    let ether_type = u16::from_be(inner.ether_type);
    if ether_type == ETH_P_IPV4
        && crate::acl::unchecked(switch, ovnbpf_common::acl::UNCHECKED_INGRESS)
    {
        return Err(drop_reason::ACL_FAIL_CLOSED);
    }
    if inner.destination[0] & 1 == 0 {
        let fib = FibKey {
            datapath: switch,
            mac: inner.destination,
            padding: [0; 2],
        };
        if let Some(entry) = get(&L2_FIB, fib).filter(|entry| entry.kind == FIB_LOCAL) {
            let between = Between {
                datapath: switch,
                ports: switch_port << 16 | entry.port,
            };
            let ip = ether_type == ETH_P_IPV4 || ether_type == ETH_P_IPV6;
            return deliver_to_port(ctx, entry.ifindex, entry.flags, ip, between);
        }
    }
    let localnet =
        crate::underlay::localnet(switch).ok_or(drop_reason::ROUTED_UNKNOWN_DESTINATION)?;
    crate::underlay::to_provider(ctx, &localnet)
}
