//! The logical switch in the evaluator, stage by stage as the kernel modules are named
//! (`port_security`, `arp`, `switching`, `flood`, delivery with egress port security). Reads
//! only IR entries through [`Evaluator`].

use super::{
    Evaluator, MAX_HOPS, Trace,
    acl::{AclPorts, AclVerdict},
    is_multicast,
    lb::LbOutcome,
    packet::{L3, L4, Packet},
};
use crate::{
    net::{LspAddress, format_mac},
    pipeline::ir::{IrEntry, PortKind},
};

/// OVN's ingress port security, as ovn-trace's `check_in_port_sec` judges it: the first entry
/// whose MAC is the source decides. ARP must name that MAC as sender. With addresses of either
/// family listed: IPv4 from a listed address (0.0.0.0 for DHCP discovery), ARP naming one; IPv6
/// from a listed host address or the MAC's link-local address, a solicitation's source
/// link-layer address and an advertisement's target link-layer address the MAC or none, and,
/// with IPv6 addresses listed, an advertisement's target one of them or the link-local one.
fn ingress_allowed(allowed: &[LspAddress], packet: &Packet) -> bool {
    let Some(entry) = allowed.iter().find(|entry| entry.mac == packet.eth_src) else {
        return false;
    };
    let (ipv4, ipv6) = (&entry.ipv4, &entry.ipv6);
    let unlisted = ipv4.is_empty() && ipv6.is_empty();
    match packet.l3 {
        L3::Arp { sha, spa, .. } => {
            sha == entry.mac && (ipv4.is_empty() || ipv4.iter().any(|p| p.contains(spa)))
        }
        _ if unlisted => true,
        L3::Ipv4 {
            source,
            destination,
            l4,
            ..
        } => {
            ipv4.iter().any(|p| p.contains(source))
                || (source.is_unspecified()
                    && destination.is_broadcast()
                    && matches!(
                        l4,
                        L4::Udp {
                            source: 68,
                            destination: 67
                        }
                    ))
        }
        L3::Ipv6 { source, l4, .. } => {
            if !listed6(entry, source) {
                return false;
            }
            match l4 {
                L4::Nd { kind: 135, sll, .. } => sll == [0; 6] || sll == entry.mac,
                L4::Nd {
                    kind: 136,
                    tll,
                    target,
                    ..
                } => {
                    (tll == [0; 6] || tll == entry.mac)
                        && (ipv6.is_empty() || listed6(entry, target))
                }
                _ => true,
            }
        }
    }
}

/// Whether `ip` is one of `entry`'s IPv6 host addresses or its MAC's link-local address (what
/// the kernel holds: host addresses only).
fn listed6(entry: &LspAddress, ip: std::net::Ipv6Addr) -> bool {
    ip.octets() == ovnbpf_common::ipv6::link_local(entry.mac)
        || entry
            .ipv6
            .iter()
            .any(|p| p.length == 128 && p.network == ip)
}

/// OVN's egress port security (ovn-trace's `check_out_port_sec`): frames to multicast or
/// broadcast MACs are exempt (northd's `eth.mcast` rule); otherwise the destination MAC must be
/// allowed and, when addresses of either family are listed, an IPv4 destination listed (or
/// limited broadcast or multicast; none when only IPv6 is listed), an IPv6 destination listed,
/// the link-local one or multicast (none when only IPv4 is listed).
fn egress_allowed(allowed: &[LspAddress], packet: &Packet) -> bool {
    if is_multicast(&packet.eth_dst) {
        return true;
    }
    let Some(entry) = allowed.iter().find(|entry| entry.mac == packet.eth_dst) else {
        return false;
    };
    let (ipv4, ipv6) = (&entry.ipv4, &entry.ipv6);
    if ipv4.is_empty() && ipv6.is_empty() {
        return true;
    }
    match packet.l3 {
        L3::Ipv4 { destination, .. } => {
            !ipv4.is_empty()
                && (destination.is_broadcast()
                    || destination.is_multicast()
                    || ipv4.iter().any(|p| p.contains(destination)))
        }
        L3::Ipv6 { destination, .. } => {
            !ipv6.is_empty() && (destination.is_multicast() || listed6(entry, destination))
        }
        L3::Arp { .. } => true,
    }
}

impl Evaluator<'_> {
    /// The logical switch pipeline (ingress), then delivery.
    pub(super) fn switch(
        &self,
        dp: u32,
        inport: &str,
        packet: Packet,
        from_router: bool,
        trace: &mut Trace,
        hops: usize,
    ) {
        if hops > MAX_HOPS {
            self.step(trace, dp, "dropped: too many hops".into());
            return;
        }
        self.step(trace, dp, format!("switch ingress from {inport}: {packet}"));
        if !self.port_security(dp, inport, &packet, trace) {
            return;
        }
        // The load balancers, for what a pod sends (router ports skip them: northd's
        // `ls_in_pre_lb` priority-110 flows).
        let packet = if from_router {
            packet
        } else {
            match self.load_balance(dp, packet, trace) {
                LbOutcome::Continue(packet) => packet,
                LbOutcome::Hairpin(packet) => {
                    self.deliver(dp, inport, inport, packet, true, trace, hops + 1);
                    return;
                }
                LbOutcome::NoBackends { reject: false } => return,
                LbOutcome::NoBackends { reject: true } => {
                    if let Some(answer) = packet.reject_answer() {
                        self.step(trace, dp, format!("reject answer: {answer}"));
                        self.deliver_after_acl(dp, inport, answer, trace, hops + 1);
                    }
                    return;
                }
            }
        };
        let ports = AclPorts {
            inport,
            outport: None,
        };
        match self.acl(dp, ports, &packet, trace) {
            AclVerdict::Pass => {}
            AclVerdict::Drop => return,
            // OVN's `reject` from the ingress pipeline: `outport <-> inport;
            // next(pipeline=egress, table=ls_out_qos_mark)`, back to the sender past the egress
            // ACLs.
            AclVerdict::Reject => {
                if let Some(answer) = packet.reject_answer() {
                    self.step(trace, dp, format!("reject answer: {answer}"));
                    self.deliver_after_acl(dp, inport, answer, trace, hops + 1);
                }
                return;
            }
        }
        if self.switch_ipv6(dp, inport, packet, from_router, trace, hops)
            || self.arp(dp, inport, packet, trace, hops)
        {
            return;
        }
        self.switching(dp, inport, packet, from_router, trace, hops);
    }

    /// `port_security`: northd's ingress sanity drops (multicast source MAC) and the inport's
    /// port security; `false` if the packet is dropped.
    fn port_security(&self, dp: u32, inport: &str, packet: &Packet, trace: &mut Trace) -> bool {
        let has = |wanted: &dyn Fn(&IrEntry) -> bool| self.entries(dp).any(wanted);
        if has(&|e| matches!(e, IrEntry::IngressSanity { .. })) && is_multicast(&packet.eth_src) {
            self.step(trace, dp, "dropped: multicast source MAC".into());
            return false;
        }
        if has(&|e| matches!(e, IrEntry::PortSecurity { egress: false, .. }))
            && let Some(allowed) = self.port_security.get(inport)
            && !ingress_allowed(allowed, packet)
        {
            self.step(trace, dp, format!("dropped: port security of {inport}"));
            return false;
        }
        true
    }

    /// `arp`: the switch's ARP responder; `true` if it answered.
    fn arp(&self, dp: u32, inport: &str, packet: Packet, trace: &mut Trace, hops: usize) -> bool {
        if let L3::Arp {
            op: 1,
            tpa,
            sha,
            spa,
            ..
        } = packet.l3
        {
            let reply = self.entries(dp).find_map(|e| match e {
                IrEntry::ArpReply { ip, mac, .. } if *ip == tpa => Some(*mac),
                _ => None,
            });
            let skipped = self.entries(dp).any(|e| match e {
                IrEntry::ArpReplySkip { ip, inport: p, .. } => *ip == tpa && p == inport,
                IrEntry::ArpReplySkipPort { inport: p, .. } => p == inport,
                _ => false,
            });
            if let (Some(mac), false) = (reply, skipped) {
                self.step(
                    trace,
                    dp,
                    format!("ARP responder: {tpa} is-at {}", format_mac(&mac)),
                );
                let answer = Packet {
                    eth_src: mac,
                    eth_dst: packet.eth_src,
                    l3: L3::Arp {
                        op: 2,
                        sha: mac,
                        spa: tpa,
                        tha: sha,
                        tpa: spa,
                    },
                };
                self.deliver(dp, inport, inport, answer, true, trace, hops);
                return true;
            }
        }
        false
    }

    /// The L2 lookup's resident flows for the router port of switch `dp` behind a gateway port
    /// (`eth.dst == M && is_chassis_resident(…)`): `mac` is the gateway port's own, where its
    /// chassisredirect port is active, or a distributed FIP's external MAC (on its pod's
    /// chassis: ovn-trace takes every port as resident).
    fn gateway_lookup(&self, dp: u32, mac: [u8; 6]) -> Option<&str> {
        self.entries(dp).find_map(|e| {
            let IrEntry::Port {
                name,
                kind: PortKind::Patch { peer },
                ..
            } = e
            else {
                return None;
            };
            let (router, ..) = self.ports.get(peer.as_str())?;
            let fip_mac = self.entries(*router).any(|r| {
                matches!(r, IrEntry::DistributedNat { gateway_port, external_mac, .. }
                    if gateway_port == peer && *external_mac == mac)
            });
            (fip_mac || self.active_gateway_port_mac(*router, peer) == Some(mac))
                .then_some(name.as_str())
        })
    }

    /// `switching`: the L2 lookup, in northd's priority order (ARP for router IPs, floods from
    /// router ports, multicast, the FIB, unknown destinations).
    fn switching(
        &self,
        dp: u32,
        inport: &str,
        packet: Packet,
        from_router: bool,
        trace: &mut Trace,
        hops: usize,
    ) {
        if let (L3::Arp { op: 1, tpa, .. }, false) = (packet.l3, from_router) {
            let to_router = self.entries(dp).find_map(|e| match e {
                IrEntry::ArpForRouterIp {
                    ip,
                    router_port,
                    group,
                    ..
                } if *ip == tpa => Some((router_port, group)),
                _ => None,
            });
            if let Some((router_port, group)) = to_router {
                self.step(
                    trace,
                    dp,
                    format!("ARP for router IP {tpa}: to {router_port}"),
                );
                self.to_router_port(
                    dp,
                    inport,
                    (router_port, group.as_deref()),
                    packet,
                    trace,
                    hops,
                );
                return;
            }
        }
        if matches!(
            packet.l3,
            L3::Arp { op: 1, .. }
                | L3::Ipv6 {
                    l4: L4::Nd { kind: 135, .. },
                    ..
                }
        ) {
            let router_flood = self.entries(dp).find_map(|e| match e {
                IrEntry::RouterOriginatedFlood {
                    router_macs, group, ..
                } if router_macs.contains(&packet.eth_src) => Some(group),
                _ => None,
            });
            if let Some(group) = router_flood {
                self.step(
                    trace,
                    dp,
                    format!("ARP from a router port: flood to {group}"),
                );
                self.flood(dp, inport, group, packet, trace, hops);
                return;
            }
        }
        if is_multicast(&packet.eth_dst) {
            let group = self.entries(dp).find_map(|e| match e {
                IrEntry::FloodMulticast { group, .. } => Some(group),
                _ => None,
            });
            match group {
                Some(group) => {
                    self.step(
                        trace,
                        dp,
                        format!("multicast destination: flood to {group}"),
                    );
                    self.flood(dp, inport, group, packet, trace, hops);
                }
                None => self.step(trace, dp, "dropped: multicast and no flood rule".into()),
            }
            return;
        }
        let known = self
            .entries(dp)
            .find_map(|e| match e {
                IrEntry::L2Fib { mac, port, .. } if *mac == packet.eth_dst => Some(port.as_str()),
                _ => None,
            })
            .or_else(|| self.gateway_lookup(dp, packet.eth_dst));
        match known {
            Some(port) => {
                self.step(
                    trace,
                    dp,
                    format!("L2 lookup: {} is on {port}", format_mac(&packet.eth_dst)),
                );
                self.deliver(dp, inport, port, packet, false, trace, hops);
            }
            None => {
                let unknown_group = self.entries(dp).find_map(|e| match e {
                    IrEntry::FloodUnknown { group, .. } => Some(group),
                    _ => None,
                });
                match unknown_group {
                    Some(group) => {
                        self.step(
                            trace,
                            dp,
                            format!(
                                "unknown destination {}: flood to {group}",
                                format_mac(&packet.eth_dst)
                            ),
                        );
                        self.flood(dp, inport, group, packet, trace, hops);
                    }
                    None => self.step(
                        trace,
                        dp,
                        format!(
                            "dropped: unknown destination {}",
                            format_mac(&packet.eth_dst)
                        ),
                    ),
                }
            }
        }
    }

    pub(super) fn flood(
        &self,
        dp: u32,
        inport: &str,
        group: &str,
        packet: Packet,
        trace: &mut Trace,
        hops: usize,
    ) {
        let members = self
            .groups
            .get(&(dp, group))
            .map(Vec::as_slice)
            .unwrap_or_default();
        for key in members {
            if let Some(port) = self.port_names.get(&(dp, *key))
                && *port != inport
            {
                self.deliver(dp, inport, port, packet, false, trace, hops);
            }
        }
    }

    /// ARP or neighbour solicitation for a router address: to the router port, and flooded to
    /// `group` as well when northd's flow clones it (other routers on the switch may answer).
    pub(super) fn to_router_port(
        &self,
        dp: u32,
        inport: &str,
        (router_port, group): (&str, Option<&str>),
        packet: Packet,
        trace: &mut Trace,
        hops: usize,
    ) {
        self.deliver(dp, inport, router_port, packet, false, trace, hops);
        if let Some(group) = group {
            self.flood(dp, inport, group, packet, trace, hops);
        }
    }

    /// Switch egress: to a VIF or localnet port, or across a patch port into a router.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deliver(
        &self,
        dp: u32,
        inport: &str,
        outport: &str,
        packet: Packet,
        loopback: bool,
        trace: &mut Trace,
        hops: usize,
    ) {
        if outport == inport && !loopback {
            self.step(trace, dp, format!("not sent back out of {inport}"));
            return;
        }
        let ports = AclPorts {
            inport,
            outport: Some(outport),
        };
        if self.ports.contains_key(outport) {
            match self.acl(dp, ports, &packet, trace) {
                AclVerdict::Pass => {}
                AclVerdict::Drop => return,
                // From the egress pipeline: `outport <-> inport; next(pipeline=ingress,
                // table=ls_in_l2_lkup)`, switched from the port the packet was for.
                AclVerdict::Reject => {
                    if let Some(answer) = packet.reject_answer() {
                        self.step(trace, dp, format!("reject answer: {answer}"));
                        self.switching(dp, outport, answer, false, trace, hops + 1);
                    }
                    return;
                }
            }
        }
        self.deliver_after_acl(dp, outport, packet, trace, hops);
    }

    /// Switch egress after the ACL stage: across a patch port into a router, or egress port
    /// security and the port.
    fn deliver_after_acl(
        &self,
        dp: u32,
        outport: &str,
        packet: Packet,
        trace: &mut Trace,
        hops: usize,
    ) {
        match self.ports.get(outport) {
            Some((_, _, PortKind::Patch { peer })) => {
                self.cross_patch(dp, peer, packet, false, trace, hops)
            }
            Some(_)
                if self
                    .entries(dp)
                    .any(|e| matches!(e, IrEntry::PortSecurity { egress: true, .. }))
                    && self
                        .port_security
                        .get(outport)
                        .is_some_and(|allowed| !egress_allowed(allowed, &packet)) =>
            {
                self.step(
                    trace,
                    dp,
                    format!("dropped: egress port security of {outport}"),
                );
            }
            Some(_) => {
                self.step(trace, dp, format!("output to {outport}: {packet}"));
                trace.outputs.push((outport.to_string(), packet));
            }
            None => self.step(trace, dp, format!("dropped: output port {outport} unknown")),
        }
    }
}
