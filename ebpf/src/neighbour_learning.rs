//! MAC learning's kernel half (OVN's `lr_in_lookup_neighbor`, `lookup_arp`): an ARP packet a
//! router receives whose sender the router's neighbour table does not hold at that MAC is
//! reported on the `NEIGHBOUR_EVENTS` ring buffer. The agent decides by the router's learning
//! flows whether the router learns it (`put_arp`) and writes the MAC_Binding row, which comes
//! back as the neighbour's entry in `NEIGHBOURS`, so the sender is reported no more. The packet
//! itself is the router's (consumed, as OVN's router consumes it). A broadcast ARP a pod sends
//! that the switch's responder does not answer reaches the switch's router too, as OVN floods it
//! to the router port ([`report_to_switch_router`]): a gratuitous ARP teaches the router a moved
//! address's new MAC. Reads `NEIGHBOURS` and `SWITCH_ROUTERS`; writes `NEIGHBOUR_EVENTS` and
//! counts in `ROUTER_REPLIES`.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::{NeighbourEvent, NeighbourKey, router_reply};

use crate::{
    counters::count_reply,
    headers::ArpFrame,
    maps::{NEIGHBOUR_EVENTS, NEIGHBOURS, SWITCH_ROUTERS, get},
};

/// Reports the sender of the ARP packet in `ctx` (addressed to a port of router `router`) when
/// the router does not know it at that MAC.
#[inline(always)]
pub fn report_arp(ctx: &TcContext, router: u32) {
    report(ctx, router, None);
}

/// Reports the sender of the broadcast ARP packet in `ctx` on switch `switch` to the switch's
/// router, which OVN floods it to (a gratuitous ARP: a moved address's new MAC).
#[inline(always)]
pub fn report_to_switch_router(ctx: &TcContext, switch: u32) {
    if let Some(port) = get(&SWITCH_ROUTERS, switch) {
        report(ctx, port.router, Some(port.mac));
    }
}

/// Reports the sender to `router`, whose port `router_mac` it reached (default: the frame's
/// destination).
#[inline(always)]
fn report(ctx: &TcContext, router: u32, router_mac: Option<[u8; 6]>) {
    let Ok(arp) = ctx.load::<ArpFrame>(0) else {
        return;
    };
    let operation = u16::from_be(arp.operation);
    if !arp.is_ipv4_over_ethernet() || !(1..=2).contains(&operation) {
        return;
    }
    let ip = u32::from_ne_bytes(arp.sender_ip);
    // A sender without an address, or with a group MAC, teaches nothing.
    if ip == 0 || arp.sender_mac[0] & 1 != 0 {
        return;
    }
    let key = NeighbourKey {
        datapath: router,
        ip,
    };
    if get(&NEIGHBOURS, key).is_some_and(|known| known.mac == arp.sender_mac) {
        return;
    }
    let Some(mut entry) = NEIGHBOUR_EVENTS.reserve::<NeighbourEvent>(0) else {
        count_reply(router_reply::NEIGHBOUR_REPORT_LOST);
        return;
    };
    entry.write(NeighbourEvent {
        router,
        ip,
        mac: arp.sender_mac,
        router_mac: router_mac.unwrap_or(arp.eth.destination),
        operation,
        reserved: 0,
    });
    entry.submit(0);
    count_reply(router_reply::NEIGHBOUR_REPORTED);
}
