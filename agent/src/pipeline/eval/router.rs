//! The logical router in the evaluator: admission, router input (ARP, echo, drops, reject),
//! IPv4 routing and policies, next-hop resolution, delivery across patch ports. IPv6 after
//! admission is in [`super::ipv6`]. Reads only IR entries through [`Evaluator`].

use std::net::Ipv4Addr;

use super::{
    Evaluator, MAX_HOPS, Trace,
    family::{Hop, Input},
    is_multicast,
    packet::{L3, L4, Packet},
};
use crate::pipeline::ir::{
    EcmpStage, IrEntry, L4Match, Mac, PolicyVerdict, PortKind, Prefix, RouterDropRule,
};

/// IPv4 routes do not depend on the inport (only IPv6's per-port link-local routes do).
const NO_INPORT: &str = "";

impl<'a> Evaluator<'a> {
    pub(super) fn router_port_mac(&self, dp: u32, port: &str) -> Option<Mac> {
        self.entries(dp).find_map(|e| match e {
            IrEntry::RouterPort {
                port: p,
                mac,
                multicast: false,
                ..
            } if p == port => Some(*mac),
            _ => None,
        })
    }

    /// The MAC of gateway port `port` where its chassisredirect port is bound to a chassis
    /// (`lr_in_admission`'s resident flow, the backend's `FIB_ROUTER_GATEWAY` there): its
    /// Port_Binding's first address.
    pub(super) fn active_gateway_port_mac(&self, dp: u32, port: &str) -> Option<Mac> {
        let redirect = self.entries(dp).find_map(|e| match e {
            IrEntry::GatewayPort {
                port: p, redirect, ..
            } if p == port => Some(redirect),
            _ => None,
        })?;
        self.redirect_bound(dp, redirect).then_some(())?;
        self.entries(dp).find_map(|e| match e {
            IrEntry::Port {
                name, addresses, ..
            } if name == port => addresses.first().map(|a| a.mac),
            _ => None,
        })
    }

    /// Whether `redirect` is gateway port `port`'s chassisredirect port.
    fn is_redirect_of(&self, dp: u32, port: &str, redirect: &str) -> bool {
        self.entries(dp).any(|e| {
            matches!(e, IrEntry::GatewayPort { port: p, redirect: r, .. } if p == port && r == redirect)
        })
    }

    /// `lr_in_ip_input`'s resident ARP answers on gateway port `inport` for `tpa`: the port's
    /// own address, its centralized NAT addresses and its load balancers' VIPs with its MAC,
    /// where its gateway is active;
    /// a distributed FIP's address with the rule's external MAC (on the FIP's pod's chassis).
    fn gateway_arp_answer(&self, dp: u32, inport: &str, tpa: Ipv4Addr) -> Option<Mac> {
        let distributed = self.entries(dp).find_map(|e| match e {
            IrEntry::DistributedNat {
                gateway_port,
                external_ip,
                external_mac,
                ..
            } if gateway_port == inport && *external_ip == tpa => Some(*external_mac),
            _ => None,
        });
        if distributed.is_some() {
            return distributed;
        }
        let port_mac = self.active_gateway_port_mac(dp, inport)?;
        let own = self.entries(dp).any(|e| match e {
            IrEntry::Port {
                name, addresses, ..
            } if name == inport => addresses
                .iter()
                .any(|a| a.ipv4.iter().any(|p| p.network == tpa)),
            IrEntry::CentralizedSnat {
                gateway_port,
                external,
                ..
            }
            | IrEntry::CentralizedDnat {
                gateway_port,
                external,
                ..
            } => gateway_port == inport && *external == tpa,
            IrEntry::RouterLoadBalancer { redirect, vip, .. } => {
                vip.vip == tpa && self.is_redirect_of(dp, inport, redirect)
            }
            _ => false,
        });
        own.then_some(port_mac)
    }

    /// Leaves the router through `port` into the switch behind it.
    pub(super) fn router_output(
        &self,
        dp: u32,
        port: &str,
        packet: Packet,
        trace: &mut Trace,
        hops: usize,
    ) {
        let delivered = self
            .entries(dp)
            .any(|e| matches!(e, IrEntry::RouterDelivery { port: p, .. } if p == port));
        if !delivered {
            self.step(trace, dp, format!("dropped: no delivery for {port}"));
            return;
        }
        match self.ports.get(port) {
            Some((_, _, PortKind::Patch { peer })) => {
                self.cross_patch(dp, peer, packet, true, trace, hops)
            }
            _ => self.step(
                trace,
                dp,
                format!("dropped: router port {port} is not a patch port"),
            ),
        }
    }

    /// Enters the datapath on the other side of a patch port: a router (LS→LR, LR→LR peering)
    /// or a switch (LR→LS).
    pub(super) fn cross_patch(
        &self,
        dp: u32,
        peer: &str,
        packet: Packet,
        from_router: bool,
        trace: &mut Trace,
        hops: usize,
    ) {
        match self.ports.get(peer) {
            Some((peer_dp, _, _))
                if self
                    .datapaths
                    .get(peer_dp)
                    .is_some_and(|(_, router)| *router) =>
            {
                self.router(*peer_dp, peer, packet, trace, hops + 1);
            }
            Some((peer_dp, _, _)) => {
                self.switch(*peer_dp, peer, packet, from_router, trace, hops + 1)
            }
            None => self.step(trace, dp, format!("dropped: patch peer {peer} unknown")),
        }
    }

    /// The logical router pipeline (ingress and egress).
    pub(super) fn router(
        &self,
        dp: u32,
        inport: &str,
        packet: Packet,
        trace: &mut Trace,
        hops: usize,
    ) {
        if hops > MAX_HOPS {
            self.step(trace, dp, "dropped: too many hops".into());
            return;
        }
        self.step(trace, dp, format!("router ingress from {inport}: {packet}"));
        let Some(port_mac) = self
            .router_port_mac(dp, inport)
            .or_else(|| self.active_gateway_port_mac(dp, inport))
        else {
            self.step(trace, dp, format!("dropped: {inport} is not admitted"));
            return;
        };
        let multicast_ok = self.entries(dp).any(
            |e| matches!(e, IrEntry::RouterPort { port, multicast: true, .. } if port == inport),
        );
        // A gateway port also admits its distributed FIPs' external MACs (`lr_in_admission`,
        // where the FIP's pod resides: ovn-trace takes every port as resident).
        let fip_mac = self.entries(dp).any(|e| {
            matches!(e, IrEntry::DistributedNat { gateway_port, external_mac, .. }
                if gateway_port == inport && *external_mac == packet.eth_dst)
        });
        let admitted = packet.eth_dst == port_mac
            || fip_mac
            || (is_multicast(&packet.eth_dst) && multicast_ok);
        if is_multicast(&packet.eth_src) || !admitted {
            self.step(trace, dp, "dropped by admission".into());
            return;
        }
        if let L3::Ipv6 { .. } = packet.l3 {
            self.router_ipv6(dp, inport, port_mac, packet, trace, hops);
            return;
        }
        let (source, destination, ttl, l4) = match packet.l3 {
            L3::Arp {
                op: 1,
                tpa,
                spa,
                sha,
                ..
            } => {
                let answers = self.entries(dp).any(|e| {
                    matches!(e, IrEntry::RouterArpReply { port, ip, subnet, .. }
                        if port == inport && *ip == tpa && subnet.contains(spa))
                });
                let answer_mac = if answers {
                    Some(port_mac)
                } else {
                    self.gateway_arp_answer(dp, inport, tpa)
                };
                if let Some(answer_mac) = answer_mac {
                    self.step(trace, dp, format!("router answers ARP for {tpa}"));
                    let answer = Packet {
                        eth_src: answer_mac,
                        eth_dst: packet.eth_src,
                        l3: L3::Arp {
                            op: 2,
                            sha: answer_mac,
                            spa: tpa,
                            tha: sha,
                            tpa: spa,
                        },
                    };
                    self.router_output(dp, inport, answer, trace, hops);
                } else {
                    self.step(
                        trace,
                        dp,
                        "dropped: ARP not for this router (OVN may learn its sender; ovnbpf does not learn)".into(),
                    );
                }
                return;
            }
            L3::Arp { .. } => {
                self.step(
                    trace,
                    dp,
                    "dropped: ARP reply (OVN learns its sender; ovnbpf does not learn)".into(),
                );
                return;
            }
            L3::Ipv4 {
                source,
                destination,
                ttl,
                l4,
            } => (source, destination, ttl, l4),
            L3::Ipv6 { .. } => return,
        };
        let martian = |ip: Ipv4Addr| {
            ip.is_multicast() || ip.is_broadcast() || ip.is_loopback() || ip.octets()[0] == 0
        };
        if self.drops(
            dp,
            |r| matches!(r, RouterDropRule::SpoofedSource(list) if list.contains(&source)),
        ) {
            self.step(
                trace,
                dp,
                format!("dropped: source {source} is the router's own"),
            );
            return;
        }
        if self.drops(dp, |r| matches!(r, RouterDropRule::Martian))
            && (martian(source) || destination.is_loopback() || destination.octets()[0] == 0)
        {
            self.step(trace, dp, "dropped: martian address".into());
            return;
        }
        match self.router_input(dp, &packet, (source, destination), l4, trace) {
            Input::Dropped => return,
            Input::Answered(reply) => return self.route(dp, inport, reply, trace, hops),
            Input::Forward => {}
        }
        if ttl <= 1 {
            let source_ip = self.entries(dp).find_map(|e| match e {
                IrEntry::TtlExceeded { port, source, .. } if port == inport => Some(*source),
                _ => None,
            });
            if let Some(router_ip) = source_ip {
                self.step(
                    trace,
                    dp,
                    "TTL exceeded: ICMP time exceeded back to the sender".into(),
                );
                let error = Packet {
                    eth_src: port_mac,
                    eth_dst: packet.eth_src,
                    l3: L3::Ipv4 {
                        source: router_ip,
                        destination: source,
                        ttl: 254,
                        l4: L4::Icmp { kind: 11, code: 0 },
                    },
                };
                self.router_output(dp, inport, error, trace, hops);
            } else {
                self.step(trace, dp, "dropped: TTL expired".into());
            }
            return;
        }
        let Some(packet) = self.gateway_dnat(dp, inport, packet, trace) else {
            return;
        };
        self.route(dp, inport, packet, trace, hops);
    }

    /// The route table of packets entering router `dp` through `inport` (0: the main one).
    pub(super) fn route_table(&self, dp: u32, inport: &str) -> u32 {
        self.entries(dp)
            .find_map(|e| match e {
                IrEntry::RouteTableOfPort { port, table, .. } if port == inport => Some(*table),
                _ => None,
            })
            .unwrap_or(0)
    }

    /// The highest-priority router policy matching `packet`, if any.
    pub(super) fn policy(&self, dp: u32, packet: &Packet) -> Option<(u16, &'a PolicyVerdict)> {
        let L3::Ipv4 {
            source,
            destination,
            ..
        } = packet.l3
        else {
            return None;
        };
        let within = |prefix: &Option<Prefix>, ip| prefix.as_ref().is_none_or(|p| p.contains(ip));
        let (protocol, ports) = packet.transport();
        let transport =
            |l4: &Option<L4Match>| l4.as_ref().is_none_or(|l4| l4.matches(protocol, ports));
        self.entries(dp)
            .filter_map(|e| match e {
                IrEntry::RouterPolicy {
                    priority,
                    source: from,
                    destination: to,
                    l4,
                    verdict,
                    ..
                } if within(from, source) && within(to, destination) && transport(l4) => {
                    Some((*priority, verdict))
                }
                _ => None,
            })
            .max_by_key(|(priority, _)| *priority)
    }

    pub(super) fn route(
        &self,
        dp: u32,
        inport: &str,
        packet: Packet,
        trace: &mut Trace,
        hops: usize,
    ) {
        let L3::Ipv4 {
            source,
            destination,
            ..
        } = packet.l3
        else {
            return;
        };
        let flow_hash = packet.flow_hash();
        let Some(Hop {
            mut nexthop,
            mut source_ip,
            mut source_mac,
            mut port,
        }) = self.lookup_route(
            dp,
            (NO_INPORT, self.route_table(dp, inport)),
            (source, destination),
            flow_hash,
            trace,
        )
        else {
            return;
        };
        match self.policy(dp, &packet) {
            Some((priority, PolicyVerdict::RerouteEcmp { group, members })) => {
                self.step(trace, dp, format!("router policy {priority}: ECMP reroute"));
                let Some(hop) = self.ecmp_member(
                    dp,
                    (EcmpStage::Policy, *group, members.as_slice()),
                    flow_hash,
                    trace,
                ) else {
                    return;
                };
                (nexthop, source_ip, source_mac, port) =
                    (hop.nexthop, hop.source_ip, hop.source_mac, hop.port);
            }
            None | Some((_, PolicyVerdict::Allow)) => {}
            Some((priority, PolicyVerdict::Drop)) => {
                self.step(trace, dp, format!("dropped: router policy {priority}"));
                return;
            }
            Some((
                priority,
                PolicyVerdict::Reroute {
                    nexthop: policy_nexthop,
                    source_ip: policy_source_ip,
                    source_mac: policy_source_mac,
                    port: policy_port,
                },
            )) => {
                nexthop = *policy_nexthop;
                source_ip = *policy_source_ip;
                source_mac = *policy_source_mac;
                port = policy_port;
                self.step(
                    trace,
                    dp,
                    format!("router policy {priority}: reroute via {nexthop} out of {port}"),
                );
            }
        }
        // A distributed NAT rule of the sender, out of its gateway port: the packet leaves from
        // the rule's external address and MAC (`lr_in_gw_redirect`, `lr_out_snat`; ovn-trace
        // takes every port as resident, the kernel installs the rule where its pod is, which
        // is where the pod's packets are routed).
        if let Some((external_ip, external_mac)) =
            self.distributed_nat(dp, port, source, destination)
        {
            self.step(
                trace,
                dp,
                format!("distributed NAT: {source} leaves as {external_ip}"),
            );
            let mut packet = packet;
            if let L3::Ipv4 { source, .. } = &mut packet.l3 {
                *source = external_ip;
            }
            let hop = Hop {
                nexthop,
                source_ip: external_ip,
                source_mac: external_mac,
                port,
            };
            self.forward_unfenced(dp, &hop, packet, trace, hops);
            return;
        }
        let hop = Hop {
            nexthop,
            source_ip,
            source_mac,
            port,
        };
        self.forward(dp, &hop, packet, trace, hops);
    }

    /// The external address and MAC of router `dp`'s distributed NAT rule for `source` out of
    /// gateway port `port`, unless `destination` is one of the router's NAT addresses (OVN
    /// loops that back into the router, which ovnbpf does not: fenced).
    fn distributed_nat(
        &self,
        dp: u32,
        port: &str,
        source: Ipv4Addr,
        destination: Ipv4Addr,
    ) -> Option<(Ipv4Addr, Mac)> {
        let to_nat_address = self.entries(dp).any(|e| {
            matches!(e, IrEntry::DistributedNat { external_ip, .. } if *external_ip == destination)
        });
        if to_nat_address {
            return None;
        }
        self.entries(dp).find_map(|e| match e {
            IrEntry::DistributedNat {
                gateway_port,
                logical_ip,
                external_ip,
                external_mac,
                ..
            } if gateway_port == port && *logical_ip == source => {
                Some((*external_ip, *external_mac))
            }
            _ => None,
        })
    }
}
