//! The IPv6 routes of [`L3State`]: each router's candidates per slot (destination or `src-ip`
//! source prefix), which the kernel's `ROUTES6` and `SOURCE_ROUTES6` hold (the best of each
//! slot, resolved to the datapath behind its output port: a switch, or a peer router). Owns the
//! `Route6` IR entries' bookkeeping and desired values; a change marks the slots it touches.
//!
//! What the kernel's IPv6 routing does not do keeps the router's IPv6 out (its IPv4 goes on),
//! never half-routed: routes in route tables and routers whose ports select some (the kernel
//! keys IPv6 routes by router only, the main table), and routes with an inport other than
//! northd's per-port `fe80::/64` ones (which
//! [`super::L3State`] turns into a router flag: the kernel sends link-local traffic back out of
//! its inport). ECMP routes select a group of [`super::ecmp::Groups6`]; discard routes are
//! stored as such. Policies that change IPv6 routing are not compiled for IPv6; the compiler
//! reports those flows, which keep the router's IPv6 out as well.

use std::net::Ipv6Addr;

use ovnbpf_common::{ROUTE_DISCARD, ROUTE_ECMP, RouteEntry6};

use super::L3State;
use crate::pipeline::ir::{EcmpStage, IrEntry, Mac, Prefix6, RouteSelector};

/// Where the state keeps a router's IPv6 routes: the router, what the prefix is matched
/// against, and the prefix (one kernel slot, in ROUTES6 or SOURCE_ROUTES6).
pub(super) type RouteSlot6 = (u32, RouteSelector, Prefix6);

/// One IPv6 route.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Candidate6 {
    /// OVN's priority (prefix length × 3 + 0…2).
    priority: u16,
    target: Target6,
}

/// Where an IPv6 route leads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Target6 {
    /// Out of `port` to `nexthop` (`None`: the destination itself).
    Hop {
        nexthop: Option<Ipv6Addr>,
        source_mac: Mac,
        port: String,
    },
    /// To a member of ECMP group `group` ([`super::ecmp::group_id`]) of `members`.
    Ecmp { group: u32, members: usize },
    /// Nowhere: a discard route.
    Discard,
}

impl Candidate6 {
    /// The output port (none for an ECMP route: each member has its own).
    fn port(&self) -> &str {
        match &self.target {
            Target6::Hop { port, .. } => port,
            Target6::Ecmp { .. } | Target6::Discard => "",
        }
    }
}

impl L3State {
    /// Takes in one IPv6 route, ECMP route or discard route (northd's per-port link-local ones are
    /// [`super`]'s: any other with an inport is beyond the kernel).
    pub(super) fn take_route6(&mut self, entry: &IrEntry, added: bool) {
        let (datapath, selector, prefix, priority, route_table, inport, target) = match entry {
            IrEntry::Route6 {
                datapath,
                selector,
                prefix,
                priority,
                inport,
                route_table,
                nexthop,
                source_mac,
                port,
                ..
            } => (
                *datapath,
                *selector,
                *prefix,
                *priority,
                *route_table,
                inport.as_deref(),
                Target6::Hop {
                    nexthop: *nexthop,
                    source_mac: *source_mac,
                    port: port.clone(),
                },
            ),
            IrEntry::EcmpRoute6 {
                datapath,
                selector,
                prefix,
                priority,
                route_table,
                group,
                members,
            } => {
                let group = super::ecmp::group_id(EcmpStage::Route, *group);
                self.take_ecmp6_select((*datapath, group), members, added);
                (
                    *datapath,
                    *selector,
                    *prefix,
                    *priority,
                    *route_table,
                    None,
                    Target6::Ecmp {
                        group,
                        members: members.len(),
                    },
                )
            }
            IrEntry::DiscardRoute6 {
                datapath,
                selector,
                prefix,
                priority,
                route_table,
            } => (
                *datapath,
                *selector,
                *prefix,
                *priority,
                *route_table,
                None,
                Target6::Discard,
            ),
            _ => return,
        };
        let via = match &target {
            Target6::Hop {
                nexthop: Some(ip),
                port,
                ..
            } => format!("{ip} out of {port}"),
            Target6::Hop { port, .. } => port.clone(),
            Target6::Ecmp { members, .. } => format!("{members} ECMP next hops"),
            Target6::Discard => "nowhere (discard)".to_string(),
        };
        let beyond = match (route_table, inport) {
            (_, Some(inport)) => Some(format!("IPv6 route {prefix} via {via} only from {inport}")),
            // `reg7 == 0`: the main table, which is what the kernel routes IPv6 by (a router
            // whose ports select other tables keeps its IPv6 out: [`Self::ipv6_beyond_tables`]).
            (Some(0) | None, None) => None,
            (Some(table), None) => Some(format!(
                "IPv6 route {prefix} via {via} in route table {table} (the kernel routes IPv6 by the main table only)"
            )),
        };
        if let Some(reason) = beyond {
            Self::take_blocker(&mut self.ipv6_blockers, datapath, reason, added);
            self.router_table.mark(datapath);
            return;
        }
        let key = (datapath, selector, prefix);
        let candidate = Candidate6 { priority, target };
        let port = candidate.port().to_string();
        let set = self.routes6.entry(key).or_default();
        let had_routes = !set.is_empty();
        if added {
            set.insert(candidate);
            if !port.is_empty() {
                self.routes6_by_port
                    .entry(port.clone())
                    .or_default()
                    .insert(key);
            }
        } else {
            set.remove(&candidate);
            if set.is_empty() {
                self.routes6.remove(&key);
            }
            let still_used = self
                .routes6
                .get(&key)
                .is_some_and(|set| set.iter().any(|c| c.port() == port));
            if let Some(keys) = self.routes6_by_port.get_mut(&port) {
                if !still_used {
                    keys.remove(&key);
                }
                if keys.is_empty() {
                    self.routes6_by_port.remove(&port);
                }
            }
        }
        let has_routes = self.routes6.contains_key(&key);
        if had_routes != has_routes {
            count_slot(&mut self.slots6, datapath, has_routes);
            if selector == RouteSelector::Source {
                count_slot(&mut self.source_prefixes6, datapath, has_routes);
            }
            self.router_table.mark(datapath);
        }
        self.mark_route6(key);
    }

    /// An IPv6 ECMP route of `key`'s router selects among `members` (or no longer does); a
    /// group larger than the kernel takes keeps the router's IPv6 out.
    fn take_ecmp6_select(&mut self, key: super::ecmp::GroupKey, members: &[u16], added: bool) {
        let reason = |count: usize| {
            format!(
                "an IPv6 ECMP group of {count} members (the kernel takes {})",
                ovnbpf_common::ecmp::MAX_MEMBERS
            )
        };
        if let Some(count) = self.ecmp6.oversized(key) {
            Self::take_blocker(&mut self.ipv6_blockers, key.0, reason(count), false);
        }
        self.ecmp6.take_select(key, members, added);
        if let Some(count) = self.ecmp6.oversized(key) {
            Self::take_blocker(&mut self.ipv6_blockers, key.0, reason(count), true);
        }
        self.router_table.mark(key.0);
    }

    /// Marks an IPv6 route slot in its kernel map.
    pub(super) fn mark_route6(&mut self, (datapath, selector, prefix): RouteSlot6) {
        match selector {
            RouteSelector::Destination => self.route6_table.mark((datapath, prefix)),
            RouteSelector::Source => self.source_route6_table.mark((datapath, prefix)),
        }
    }

    /// Marks the IPv6 routes out of `port`.
    pub(super) fn mark_routes6_of_port(&mut self, port: &str) {
        let slots: Vec<RouteSlot6> = self
            .routes6_by_port
            .get(port)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        slots.into_iter().for_each(|slot| self.mark_route6(slot));
    }

    /// Marks every IPv6 route slot (a datapath came or went: routes into it may change kind).
    pub(super) fn mark_all_routes6(&mut self) {
        let slots: Vec<RouteSlot6> = self.routes6.keys().copied().collect();
        slots.into_iter().for_each(|slot| self.mark_route6(slot));
    }

    /// Why the kernel does not route `router`'s IPv6 for its ports' route tables, if it has
    /// some: packets entering those ports are routed by their table, which the kernel keys only
    /// for IPv4.
    pub(super) fn ipv6_beyond_tables(&self, router: u32) -> Option<String> {
        let routes_ipv6 = self.slots6.contains_key(&router);
        (routes_ipv6 && self.tables_of.contains_key(&router)).then(|| {
            "ports with route tables (the kernel routes IPv6 by the main table only)".to_string()
        })
    }

    /// Whether router `datapath` has IPv6 source routes.
    pub(super) fn has_source_routes6(&self, datapath: u32) -> bool {
        self.source_prefixes6.contains_key(&datapath)
    }

    /// What the kernel stores at `slot`: its highest-priority route (ties: the first output
    /// port by name, as for IPv4), resolved through its output port, or the ECMP group it
    /// selects from.
    pub(super) fn desired_route6(&self, slot: RouteSlot6) -> Option<RouteEntry6> {
        let best = self
            .routes6
            .get(&slot)?
            .iter()
            .max_by(|a, b| a.priority.cmp(&b.priority).then(b.port().cmp(a.port())))?;
        match &best.target {
            Target6::Hop {
                nexthop,
                source_mac,
                port,
            } => self.resolve_output6(port, *nexthop, *source_mac, best.priority),
            Target6::Discard => Some(RouteEntry6 {
                priority: best.priority,
                kind: ROUTE_DISCARD,
                ..RouteEntry6::default()
            }),
            Target6::Ecmp { group, members } => Some(RouteEntry6 {
                next_datapath: *group,
                ingress_port: u32::try_from(*members).unwrap_or(u32::MAX),
                priority: best.priority,
                kind: ROUTE_ECMP,
                ..RouteEntry6::default()
            }),
        }
    }

    /// Where a packet routed out of router port `port` toward `nexthop` (`None`: the
    /// destination itself) goes: the datapath behind the port and how the kernel gets there.
    pub(super) fn resolve_output6(
        &self,
        port: &str,
        nexthop: Option<Ipv6Addr>,
        source_mac: Mac,
        priority: u16,
    ) -> Option<RouteEntry6> {
        let out = self.ports.get(port)?;
        let peer = self.ports.get(out.peer.as_ref()?)?;
        let kind = self.output_kind(port, peer.datapath)?;
        Some(RouteEntry6 {
            nexthop: nexthop.map_or([0; 16], |ip| ip.octets()),
            next_datapath: peer.datapath,
            ingress_port: peer.key,
            priority,
            source_mac,
            kind,
            padding: [0; 3],
        })
    }
}

/// Counts a router's slot that gained its first route (`added`) or lost its last.
fn count_slot(counts: &mut std::collections::HashMap<u32, usize>, router: u32, added: bool) {
    let count = counts.entry(router).or_default();
    if added {
        *count += 1;
    } else {
        *count = count.saturating_sub(1);
    }
    if *count == 0 {
        counts.remove(&router);
    }
}
