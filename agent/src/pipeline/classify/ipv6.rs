//! The IPv6 side of the forwarding stages: neighbour discovery responders on switches and
//! routers, ICMPv6 echo and unreachable replies, IPv6 routes by destination or (`src-ip`) source
//! (including the per-port link-local routes northd emits for every router port), allow policies
//! (neutral), time exceeded, next-hop resolution and solicitation, router advertisements
//! ([`super::router_advert`]). Consulted
//! by [`super::classify`] for flows only IPv6 packets can match; `None` means "not recognised".

use super::{matching::*, verdict::Class};
use crate::lflow::ast::{Action, Expr, Source};
use crate::pipeline::ir::{IrEntry, RejectProtocol, RejectResponse, RouteSelector, RouterDropRule};

/// Classifies an IPv6-only flow of a forwarding stage.
pub(super) fn classify(
    dp: u32,
    stage: &str,
    priority: i64,
    terms: &[&Expr],
    actions: &[Action],
) -> Option<Class> {
    let compiled = |entry| Some(Class::Compiled(vec![entry]));
    let drops = matches!(actions, [Action::Keyword { name, .. }] if is_drop(name));
    let solicited = terms.iter().any(|t| is_predicate(t, "nd_ns"));
    let target = terms.iter().find_map(|t| compare_ipv6(t, "nd.target"));
    let inport = terms.iter().find_map(|t| compare_string(t, "inport"));
    match stage {
        "ls_in_arp_rsp" if solicited => {
            let ip = target?;
            match (inport, actions) {
                (Some(port), [next]) if is_next(next) => compiled(IrEntry::NdReplySkip {
                    datapath: dp,
                    ip,
                    inport: port.to_string(),
                }),
                (None, _) => {
                    let (_, block) = only_block(actions, &["nd_na", "nd_na_router"])?;
                    let mac = assigned_mac(block, "eth.src")?;
                    let answers = assigned_ipv6(block, "ip6.src") == Some(ip)
                        && assigned_ipv6(block, "nd.target") == Some(ip)
                        && assigned_mac(block, "nd.tll") == Some(mac);
                    answers.then(|| {
                        Class::Compiled(vec![IrEntry::NdReply {
                            datapath: dp,
                            ip,
                            mac,
                        }])
                    })
                }
                _ => None,
            }
        }
        "ls_in_l2_lkup" if solicited => {
            let ip = target?;
            match actions {
                [
                    Action::Keyword {
                        name,
                        block: Some(block),
                        ..
                    },
                    ..,
                ] if name == "clone" => {
                    let router_port = output_to(block)?.to_string();
                    let group = Some(output_to(actions)?.to_string());
                    compiled(IrEntry::NdForRouterIp {
                        datapath: dp,
                        ip,
                        router_port,
                        group,
                    })
                }
                [_, _] => compiled(IrEntry::NdForRouterIp {
                    datapath: dp,
                    ip,
                    router_port: output_to(actions)?.to_string(),
                    group: None,
                }),
                _ => None,
            }
        }
        "lr_in_ip_input" => classify_router_input(dp, priority, terms, actions, drops),
        "lr_in_nd_ra_options" => super::router_advert::options(dp, terms, actions),
        "lr_in_nd_ra_response" => super::router_advert::response(terms, actions),
        // Kube-OVN's per-subnet allow policy, IPv6 half (`ip6.dst == <cidr6>`): allow keeps the
        // routing decision, and an IPv6 policy that changes it (drop, reroute) is not compiled,
        // which keeps the router's IPv6 out; so an IPv6 allow changes nothing compiled.
        "lr_in_policy" if zeroes_then_next(actions, &slice("reg8", 0, 15)) => Some(Class::Neutral),
        "lr_in_ip_routing" if drops && matches!(terms, [Expr::Or(_)]) => {
            compiled(IrEntry::RouterDrop {
                datapath: dp,
                rule: RouterDropRule::RouterSolicitationOrAdvertisement,
            })
        }
        "lr_in_ip_routing" => classify_route(dp, priority, terms, actions),
        "lr_in_arp_resolve" => match (terms, actions) {
            (
                [only],
                [
                    Action::Keyword {
                        name,
                        arguments: Some(_),
                        ..
                    },
                    next,
                ],
            ) if is_predicate(only, "ip6") && name == "get_nd" && is_next(next) => {
                compiled(IrEntry::NeighbourLookup6 { datapath: dp })
            }
            (
                [first, second],
                [
                    Action::Assign {
                        destination,
                        source: Source::Constant(_),
                    },
                    next,
                ],
            ) if plain(destination, "eth.dst") && is_next(next) => {
                let port = compare_string(first, "outport")?;
                // One address, or a set: a peer router port's global and link-local ones.
                let ips = compare_ipv6_set(second, "xxreg0")?;
                let mac = assigned_mac(actions, "eth.dst")?;
                Some(Class::Compiled(
                    ips.into_iter()
                        .map(|ip| IrEntry::Neighbour6 {
                            datapath: dp,
                            port: port.to_string(),
                            ip,
                            mac,
                        })
                        .collect(),
                ))
            }
            _ => None,
        },
        "lr_in_arp_request" => {
            let (_, block) = only_block(actions, &["nd_ns"])?;
            let unresolved = terms
                .iter()
                .any(|t| compare_mac(t, "eth.dst") == Some([0; 6]));
            (unresolved && ends_with_output(block))
                .then(|| Class::Compiled(vec![IrEntry::NsForNextHop { datapath: dp }]))
        }
        // Both families: `classify::classify_neighbour_learning`.
        _ => None,
    }
}

fn classify_router_input(
    dp: u32,
    priority: i64,
    terms: &[&Expr],
    actions: &[Action],
    drops: bool,
) -> Option<Class> {
    let compiled = |entry| Some(Class::Compiled(vec![entry]));
    let solicited = terms.iter().any(|t| is_predicate(t, "nd_ns"));
    // Neighbour solicitation for a router address from its link.
    if solicited {
        let port = terms
            .iter()
            .find_map(|t| compare_string(t, "inport"))?
            .to_string();
        let ip = terms.iter().find_map(|t| compare_ipv6(t, "nd.target"))?;
        let (_, block) = only_block(actions, &["nd_na_router", "nd_na"])?;
        return ends_with_output(block).then(|| {
            Class::Compiled(vec![IrEntry::RouterNdReply {
                datapath: dp,
                port,
                ip,
            }])
        });
    }
    // ICMPv6 echo to a router's addresses (one flow for a port's link-local and global ones).
    if terms
        .iter()
        .any(|t| compare_integer(t, "icmp6.type") == Some(128))
    {
        let ips = terms.iter().find_map(|t| compare_ipv6_set(t, "ip6.dst"))?;
        let replies = assigned_integer(actions, "icmp6.type") == Some(129);
        return replies.then(|| {
            Class::Compiled(
                ips.into_iter()
                    .map(|ip| IrEntry::RouterEchoReply6 { datapath: dp, ip })
                    .collect(),
            )
        });
    }
    // Hop limit exceeded in transit, from a network of the port: OVN answers with ICMPv6
    // time exceeded from the port's address in it.
    if priority == 31
        && terms.iter().any(|t| mentions(t, "ip.ttl"))
        && let Some((_, block)) = only_block(actions, &["icmp6"])
        && assigned_integer(block, "icmp6.type") == Some(3)
    {
        let network = terms.iter().find_map(|t| compare_prefix6(t, "ip6.src"));
        let port = terms.iter().find_map(|t| compare_string(t, "inport"));
        return Some(match (port, network, assigned_ipv6(block, "ip6.src")) {
            (Some(port), Some(network), Some(source)) => {
                Class::Compiled(vec![IrEntry::TtlExceeded6 {
                    datapath: dp,
                    port: port.to_string(),
                    network,
                    source,
                }])
            }
            // Another shape of the flow: the answer is left undone (the packet is dropped, as
            // it is without the flow), not a reason to stop routing IPv6.
            _ => Class::SideDuty {
                entries: Vec::new(),
                duty: "this ICMPv6 time exceeded flow's shape is not compiled (the packet is dropped as ttl_expired)".into(),
            },
        });
    }
    // DHCPv6 replies to the router (prefix delegation client): the slow path's business.
    if actions
        .iter()
        .any(|a| matches!(a, Action::Keyword { name, .. } if name == "handle_dhcpv6_reply"))
    {
        return compiled(IrEntry::Punt {
            datapath: dp,
            reason: "DHCPv6 reply to a router port".into(),
        });
    }
    match terms {
        [only] if drops && is_predicate(only, "ip6.mcast_rsvd") => compiled(IrEntry::RouterDrop {
            datapath: dp,
            rule: RouterDropRule::Ipv6ReservedMulticast,
        }),
        [only] if drops => compiled(IrEntry::RouterDrop {
            datapath: dp,
            rule: RouterDropRule::ToRouter6(compare_ipv6_set(only, "ip6.dst")?),
        }),
        _ => {
            let (name, block) = only_block(actions, &["tcp_reset", "sctp_abort", "icmp6"])?;
            let ip = terms.iter().find_map(|t| compare_ipv6(t, "ip6.dst"))?;
            let protocol = terms.iter().find_map(|t| match t {
                Expr::Field(f) if plain(f, "tcp") => Some(RejectProtocol::Tcp),
                Expr::Field(f) if plain(f, "udp") => Some(RejectProtocol::Udp),
                Expr::Field(f) if plain(f, "sctp") => Some(RejectProtocol::Sctp),
                _ => None,
            });
            let response = match name {
                "tcp_reset" => RejectResponse::TcpReset,
                "sctp_abort" => RejectResponse::SctpAbort,
                _ if assigned_integer(block, "icmp6.type") == Some(1) => {
                    RejectResponse::IcmpUnreachable {
                        code: u8::try_from(assigned_integer(block, "icmp6.code")?).ok()?,
                    }
                }
                _ => return None,
            };
            compiled(IrEntry::RouterReject6 {
                datapath: dp,
                ip,
                protocol,
                response,
            })
        }
    }
}

fn classify_route(dp: u32, priority: i64, terms: &[&Expr], actions: &[Action]) -> Option<Class> {
    let destination = terms.iter().find_map(|t| compare_prefix6(t, "ip6.dst"));
    let source = terms.iter().find_map(|t| compare_prefix6(t, "ip6.src"));
    let (selector, prefix) = match (destination, source) {
        (Some(prefix), None) => (RouteSelector::Destination, prefix),
        (None, Some(prefix)) => (RouteSelector::Source, prefix),
        _ => return None,
    };
    let inport = terms
        .iter()
        .find_map(|t| compare_string(t, "inport"))
        .map(str::to_string);
    let route_table = terms.iter().find_map(|t| compare_integer(t, "reg7"));
    let known_terms = 1 + usize::from(inport.is_some()) + usize::from(route_table.is_some());
    let decrements = actions
        .iter()
        .any(|a| matches!(a, Action::Decrement(f) if plain(f, "ip.ttl")));
    let discards = matches!(actions, [Action::Keyword { name, .. }] if is_drop(name));
    if terms.len() != known_terms || !(decrements || discards) {
        return None;
    }
    let route_table = match route_table.map(u32::try_from) {
        None => None,
        Some(Ok(table)) => Some(table),
        Some(Err(_)) => return None,
    };
    // A discard route (`lr-route-add … discard`).
    if discards {
        return inport.is_none().then(|| {
            Class::Compiled(vec![IrEntry::DiscardRoute6 {
                datapath: dp,
                selector,
                prefix,
                priority: u16::try_from(priority).unwrap_or(u16::MAX),
                route_table,
            }])
        });
    }
    // An ECMP route (`lr-route-add --ecmp`): the group and the members `select` picks from;
    // `lr_in_ip_routing_ecmp` says where each leads.
    if let Some((group, members)) = ecmp_selection(actions) {
        return (inport.is_none()).then(|| {
            Class::Compiled(vec![IrEntry::EcmpRoute6 {
                datapath: dp,
                selector,
                prefix,
                priority: u16::try_from(priority).unwrap_or(u16::MAX),
                route_table,
                group,
                members,
            }])
        });
    }
    let nexthop = match assigned(actions, "xxreg0")? {
        Source::Field(field) if plain(field, "ip6.dst") => None,
        Source::Constant(_) => Some(assigned_ipv6(actions, "xxreg0")?),
        _ => return None,
    };
    Some(Class::Compiled(vec![IrEntry::Route6 {
        datapath: dp,
        selector,
        prefix,
        priority: u16::try_from(priority).unwrap_or(u16::MAX),
        inport,
        route_table,
        nexthop,
        source_ip: assigned_ipv6(actions, "xxreg1")?,
        source_mac: assigned_mac(actions, "eth.src")?,
        port: assigned_string(actions, "outport")?.to_string(),
    }]))
}
