//! L2 switching of frames leaving a pod: the pod's port (by the veth's ifindex) gives the datapath;
//! the destination MAC on that datapath gives a local port (redirect) or a port on another chassis
//! (Geneve). Port security is checked first ([`crate::port_security`]); ARP requests for known
//! addresses are answered ([`crate::arp`]); IPv6 neighbour solicitations and IPv6 to a router go to
//! the IPv6 stage ([`crate::ipv6`]), router solicitations a router port answers to the reject
//! stage ([`crate::router_advert`]), the rest to a router to the router stage ([`crate::router`]). Broadcast and multicast frames, and unicast to unknown MACs
//! where the switch floods them, go to the datapath's flood group (the flood stage, tail-called:
//! [`crate::flood`]); unicast to unknown MACs elsewhere is dropped, as OVN's `ls_in_l2_unknown`
//! drops it. Frames of unknown ports go on untouched, to the stack or the next program. Reads
//! `POD_PORTS` and `L2_FIB`.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::DropReason;
use ovnbpf_common::{
    FIB_LOCAL, FIB_ROUTER, FIB_SERVICE_MONITOR, FibKey, IPV6_REQUEST_MAGIC, Ipv6Request,
    ROUTER_REQUEST_MAGIC, RouterRequest,
    acl::{SWITCH_INGRESS, UNCHECKED_EGRESS, UNCHECKED_FLOOD},
    drop_reason,
};

use crate::maps::get;
use crate::output::{Output, output};
use crate::{
    L2_FIB, PASS, POD_PORTS, acl, arp, flood,
    headers::{ETH_P_ARP, ETH_P_IPV4, ETH_P_IPV6, EthHeader},
    ipv6, lb, port_security, router, router_advert, underlay,
};

/// The verdict for a frame from a pod, or the reason to drop it.
#[inline(always)]
pub fn forward(ctx: &TcContext) -> Result<i32, DropReason> {
    // SAFETY: reading ifindex from the skb context is always allowed for tc programs.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let Some(pod) = get(&POD_PORTS, ifindex) else {
        return Ok(PASS);
    };
    let (datapath, ingress_port) = (pod.datapath, pod.port);
    let Ok(eth) = ctx.load::<EthHeader>(0) else {
        return Ok(PASS);
    };
    if !port_security::allows(ctx, ifindex, &eth) {
        return Err(drop_reason::PORT_SECURITY);
    }
    let ether_type = u16::from_be(eth.ether_type);
    if ether_type == ETH_P_ARP {
        if let Some(verdict) = arp::respond(ctx, datapath, ingress_port, ifindex) {
            return Ok(verdict);
        }
        // Flooded, the switch's router port included: the router learns from it.
        if eth.destination[0] & 1 != 0 {
            crate::neighbour_learning::report_to_switch_router(ctx, datapath);
        }
    }
    let ip = ether_type == ETH_P_IPV4 || ether_type == ETH_P_IPV6;
    // IPv4 to a VIP of the switch's load balancers: their stage, which switches it afterwards
    // (through the ACL stage, if the switch has one).
    if ether_type == ETH_P_IPV4 {
        if lb::wants(ctx, datapath) {
            return Err(lb::request(ctx, datapath, ingress_port, ifindex));
        }
        lb::forget_reused(ctx, datapath, ingress_port);
    }
    // IP on a switch with from-lport ACLs: the ACL stage, which switches it afterwards.
    if ip && acl::switch_of(datapath, SWITCH_INGRESS).is_some() {
        let request = acl::ingress_request(datapath, ingress_port, ifindex);
        return Err(acl::request(ctx, acl::INGRESS_SLOT, &request));
    }
    switch_frame(ctx, datapath, ingress_port, ifindex)
}

/// The switch after its ACL stage (OVN's `ls_in_arp_rsp` on: the responders, then the L2
/// lookup) for a frame on `datapath` from logical port `ingress_port` behind host veth
/// `ifindex`.
#[inline(always)]
pub fn switch_frame(
    ctx: &TcContext,
    datapath: u32,
    ingress_port: u32,
    ifindex: u32,
) -> Result<i32, DropReason> {
    let Ok(eth) = ctx.load::<EthHeader>(0) else {
        return Ok(PASS);
    };
    let ether_type = u16::from_be(eth.ether_type);
    let multicast = eth.destination[0] & 1 != 0;
    // Paths the kernel runs no ACL stage on, refused where the switch's ACLs may act on them.
    let ipv4 = ether_type == ETH_P_IPV4;
    let unchecked = |flag| ipv4 && acl::unchecked(datapath, flag);
    let ipv6_request = |router| Ipv6Request {
        datapath,
        router,
        ingress_port,
        ifindex,
        magic: IPV6_REQUEST_MAGIC,
    };
    // The switch's ND responder answers multicast solicitations before they flood, and its
    // router port router solicitations, where it advertises.
    if ether_type == ETH_P_IPV6 && multicast {
        if ipv6::is_solicitation(ctx) {
            return Err(ipv6::request(ctx, &ipv6_request(0)));
        }
        if router_advert::wants(ctx, datapath) {
            return Err(router_advert::request(ctx, datapath, ifindex));
        }
    }
    let key = FibKey {
        datapath,
        mac: eth.destination,
        padding: [0; 2],
    };
    let entry = if multicast {
        None
    } else {
        get(&L2_FIB, key).copied()
    };
    // An underlay switch: what is not a local pod goes to the physical network.
    if let Some(localnet) = underlay::localnet(datapath)
        && !entry.is_some_and(|e| {
            e.kind == FIB_LOCAL || e.kind == FIB_ROUTER || e.kind == FIB_SERVICE_MONITOR
        })
    {
        // A broadcast reaches the local members too: the flood stage sends it to both.
        if multicast && let Some(group) = flood::group_of(datapath, true) {
            if unchecked(UNCHECKED_FLOOD) {
                return Err(drop_reason::ACL_FAIL_CLOSED);
            }
            return Err(flood::request(ctx, &group.request(ingress_port, ifindex)));
        }
        if unchecked(UNCHECKED_EGRESS) {
            return Err(drop_reason::ACL_FAIL_CLOSED);
        }
        return underlay::to_provider(ctx, &localnet);
    }
    let entry = match entry {
        None => {
            let Some(group) = flood::group_of(datapath, multicast) else {
                // A multicast frame on a switch without a flood group (none installed yet)
                // goes on as before; unicast to a MAC nobody has is what OVN drops.
                return if multicast {
                    Ok(PASS)
                } else {
                    Err(drop_reason::UNKNOWN_DESTINATION)
                };
            };
            if unchecked(UNCHECKED_FLOOD) {
                return Err(drop_reason::ACL_FAIL_CLOSED);
            }
            return Err(flood::request(ctx, &group.request(ingress_port, ifindex)));
        }
        // OVN never sends a frame back out of the port it came in on.
        Some(entry) if entry.kind == FIB_LOCAL && entry.ifindex == ifindex => {
            return Ok(crate::TC_ACT_SHOT);
        }
        // An answer to the agent's health check: the agent has read it from the interface.
        Some(entry) if entry.kind == FIB_SERVICE_MONITOR => {
            crate::drop::count_drop(drop_reason::SERVICE_MONITOR);
            return Ok(crate::TC_ACT_SHOT);
        }
        // IPv6 for a router: its stage (ND responder, the router's IPv6).
        Some(entry) if entry.kind == FIB_ROUTER && ether_type == ETH_P_IPV6 => {
            return Err(ipv6::request(ctx, &ipv6_request(entry.ifindex)));
        }
        // The rest for a router: its stage.
        Some(entry) if entry.kind == FIB_ROUTER => {
            if unchecked(UNCHECKED_EGRESS) {
                return Err(drop_reason::ACL_FAIL_CLOSED);
            }
            let request = RouterRequest {
                router: entry.ifindex,
                router_ip: entry.remote_ip,
                ifindex,
                magic: ROUTER_REQUEST_MAGIC,
            };
            return Err(router::request(ctx, &request));
        }
        Some(entry) => entry,
    };
    output(
        ctx,
        &Output {
            entry,
            datapath,
            ingress_port,
            ip: ether_type == ETH_P_IPV4 || ether_type == ETH_P_IPV6,
            routed: false,
        },
    )
}
