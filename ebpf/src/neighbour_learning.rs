//! MAC learning's kernel half (OVN's `lr_in_lookup_neighbor`, `lookup_arp`): an ARP packet a
//! router receives whose sender the router's neighbour table does not hold at that MAC is
//! reported on the `NEIGHBOUR_EVENTS` ring buffer. The agent decides by the router's learning
//! flows whether the router learns it (`put_arp`) and writes the MAC_Binding row, which comes
//! back as the neighbour's entry in `NEIGHBOURS`, so the sender is reported no more. The packet
//! itself is the router's (consumed, as OVN's router consumes it). Reads `NEIGHBOURS`; writes
//! `NEIGHBOUR_EVENTS` and counts in `ROUTER_REPLIES`.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::{NeighbourEvent, NeighbourKey, router_reply};

use crate::{
    counters::count_reply,
    headers::ArpFrame,
    maps::{NEIGHBOUR_EVENTS, NEIGHBOURS, get},
};

/// Reports the sender of the ARP packet in `ctx` (addressed to a port of router `router`) when
/// the router does not know it at that MAC.
#[inline(always)]
pub fn report_arp(ctx: &TcContext, router: u32) {
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
        router_mac: arp.eth.destination,
        operation,
        reserved: 0,
    });
    entry.submit(0);
    count_reply(router_reply::NEIGHBOUR_REPORTED);
}
