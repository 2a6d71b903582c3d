//! The routes of [`L3State`]: each router's candidates per slot (destination or source prefix),
//! which the kernel's `ROUTES` and `SOURCE_ROUTES` hold per route table (the table in the key's
//! datapath field, [`route_key_datapath`]; the main one is 0): routes of no table (northd's
//! connected routes) in each table the router uses, those of a table in it alone; ECMP routes by
//! their group, discard routes as such; and the ports that select a table (`ROUTE_TABLES`, by the
//! port's address, which is what the kernel knows of the ingress port). Owns the route IR entries'
//! bookkeeping and desired values; a change marks the slots it touches in each table concerned.

use std::net::Ipv4Addr;

use ovnbpf_common::{ROUTE_DISCARD, RouteEntry, route_key_datapath};

use super::{Candidate, L3State, RouteSlot, ecmp};
use crate::pipeline::ir::{EcmpStage, IrEntry, RouteSelector};

impl L3State {
    /// Takes in a route, ECMP route, discard route or a port's route table.
    pub(super) fn take_route(&mut self, entry: &IrEntry, added: bool) {
        match entry {
            IrEntry::Route {
                datapath,
                selector,
                prefix,
                priority,
                route_table,
                nexthop,
                source_ip,
                source_mac,
                port,
            } => {
                // The kernel compares a destination and a source route by OVN's priority in one
                // byte; northd's IPv4 route priorities are at most 32 × 3 + 2.
                let priority = match kernel_route_priority(*priority, *route_table) {
                    Ok(priority) => priority,
                    Err(reason) => return self.block(*datapath, reason, added),
                };
                let candidate = Candidate {
                    priority,
                    discard: false,
                    table: *route_table,
                    ecmp: None,
                    nexthop: *nexthop,
                    source_ip: *source_ip,
                    source_mac: *source_mac,
                    port: port.clone(),
                };
                self.take_candidate((*datapath, *selector, *prefix), candidate, added);
            }
            IrEntry::EcmpRoute {
                datapath,
                selector,
                prefix,
                priority,
                route_table,
                group,
                members,
            } => {
                let priority = match kernel_route_priority(*priority, *route_table) {
                    Ok(priority) => priority,
                    Err(reason) => return self.block(*datapath, reason, added),
                };
                let group = ecmp::group_id(EcmpStage::Route, *group);
                let candidate = Candidate {
                    priority,
                    discard: false,
                    table: *route_table,
                    ecmp: Some((group, members.len())),
                    nexthop: None,
                    source_ip: Ipv4Addr::UNSPECIFIED,
                    source_mac: [0; 6],
                    port: String::new(),
                };
                self.take_ecmp_select((*datapath, group), members, added);
                self.take_candidate((*datapath, *selector, *prefix), candidate, added);
            }
            IrEntry::DiscardRoute {
                datapath,
                selector,
                prefix,
                priority,
                route_table,
            } => {
                let priority = match kernel_route_priority(*priority, *route_table) {
                    Ok(priority) => priority,
                    Err(reason) => return self.block(*datapath, reason, added),
                };
                let candidate = Candidate {
                    priority,
                    discard: true,
                    table: *route_table,
                    ecmp: None,
                    nexthop: None,
                    source_ip: Ipv4Addr::UNSPECIFIED,
                    source_mac: [0; 6],
                    port: String::new(),
                };
                self.take_candidate((*datapath, *selector, *prefix), candidate, added);
            }
            IrEntry::RouteTableOfPort {
                datapath,
                port,
                table,
            } => {
                if let Some(reason) = table_beyond_kernel(Some(*table)) {
                    return self.block(*datapath, reason, added);
                }
                self.take_route_table(*datapath, port, *table, added);
            }
            _ => {}
        }
    }

    /// Marks a route slot in the table of its kernel map, for each route table of the router
    /// (the main one, 0, and those its ports select).
    pub(super) fn mark_route(&mut self, (datapath, selector, prefix): RouteSlot) {
        let tables: Vec<u32> = std::iter::once(0)
            .chain(
                self.tables_of
                    .get(&datapath)
                    .into_iter()
                    .flat_map(|t| t.keys().copied()),
            )
            .collect();
        for table in tables {
            self.mark_route_in((datapath, selector, prefix), table);
        }
    }

    fn mark_route_in(&mut self, (datapath, selector, prefix): RouteSlot, table: u32) {
        let key = (route_key_datapath(datapath, table), prefix);
        match selector {
            RouteSelector::Destination => self.route_table.mark(key),
            RouteSelector::Source => self.source_route_table.mark(key),
        }
    }

    /// Port `port` of `router` selects route table `table` (or no longer does).
    fn take_route_table(&mut self, router: u32, port: &str, table: u32, added: bool) {
        if let Some(ip) = self.ports.get(port).and_then(|p| p.ipv4) {
            self.port_table_table.mark((router, ip));
        }
        let tables = self.tables_of.entry(router).or_default();
        let before = tables.contains_key(&table);
        if added {
            self.port_tables.insert(port.to_string(), (router, table));
            *tables.entry(table).or_default() += 1;
        } else {
            if self.port_tables.get(port) == Some(&(router, table)) {
                self.port_tables.remove(port);
            }
            if let Some(count) = tables.get_mut(&table) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    tables.remove(&table);
                }
            }
        }
        let after = tables.contains_key(&table);
        if tables.is_empty() {
            self.tables_of.remove(&router);
        }
        if before != after && table != 0 {
            // The table's copies of every route of the router come or go.
            let slots: Vec<RouteSlot> = self
                .routes
                .keys()
                .filter(|(datapath, ..)| *datapath == router)
                .copied()
                .collect();
            for slot in slots {
                self.mark_route_in(slot, table);
            }
        }
        self.router_table.mark(router);
    }

    /// The route table packets entering `router` through its port with address `ip` use.
    pub(super) fn desired_port_table(&self, router: u32, ip: Ipv4Addr) -> Option<u32> {
        self.port_tables.iter().find_map(|(port, &(of, table))| {
            (of == router && self.ports.get(port).and_then(|p| p.ipv4) == Some(ip)).then_some(table)
        })
    }

    /// Adds or removes one route of slot `key`, keeping the per-port index (routes with an
    /// output port) and the router's source-route count.
    fn take_candidate(&mut self, key: RouteSlot, candidate: Candidate, added: bool) {
        let port = candidate.port.clone();
        let set = self.routes.entry(key).or_default();
        let had_routes = !set.is_empty();
        if added {
            set.insert(candidate);
            if !port.is_empty() {
                self.routes_by_port.entry(port).or_default().insert(key);
            }
        } else {
            set.remove(&candidate);
            if set.is_empty() {
                self.routes.remove(&key);
            }
            if let Some(keys) = self.routes_by_port.get_mut(&port) {
                let still_used = self
                    .routes
                    .get(&key)
                    .is_some_and(|set| set.iter().any(|c| c.port == port));
                if !still_used {
                    keys.remove(&key);
                }
                if keys.is_empty() {
                    self.routes_by_port.remove(&port);
                }
            }
        }
        self.count_source_prefix(key, had_routes);
        self.mark_route(key);
    }

    /// What the kernel stores at `slot`, whose datapath field is [`route_key_datapath`]'s: the
    /// best route of that route table (routes of no table count in every table).
    pub(super) fn desired_route(
        &self,
        (key_datapath, selector, prefix): RouteSlot,
    ) -> Option<RouteEntry> {
        let (datapath, table) = (key_datapath & 0x00ff_ffff, key_datapath >> 24);
        if table != 0
            && !self
                .tables_of
                .get(&datapath)
                .is_some_and(|tables| tables.contains_key(&table))
        {
            return None;
        }
        let best = self
            .routes
            .get(&(datapath, selector, prefix))?
            .iter()
            .filter(|c| c.table.is_none_or(|t| t == table))
            .max_by(|a, b| a.priority.cmp(&b.priority).then(b.port.cmp(&a.port)))?;
        if let Some((group, members)) = best.ecmp {
            return Some(ecmp::selecting(group, members, best.priority));
        }
        if best.discard {
            return Some(RouteEntry {
                kind: ROUTE_DISCARD,
                priority: best.priority,
                ..RouteEntry::default()
            });
        }
        Some(RouteEntry {
            priority: best.priority,
            ..self.resolve_output(&best.port, best.nexthop, best.source_ip, best.source_mac)?
        })
    }
}

/// A route's OVN priority as the kernel's byte (northd's IPv4 route priorities are at most
/// 32 × 3 + 2), or why the route is beyond the kernel (that, or its route table).
fn kernel_route_priority(priority: u16, table: Option<u32>) -> Result<u8, String> {
    let priority = u8::try_from(priority)
        .map_err(|_| format!("route priority {priority} beyond the kernel's 255"))?;
    match table_beyond_kernel(table) {
        Some(reason) => Err(reason),
        None => Ok(priority),
    }
}

/// Why route table `table` is beyond the kernel's keys, if it is.
fn table_beyond_kernel(table: Option<u32>) -> Option<String> {
    table
        .filter(|t| *t > ovnbpf_common::MAX_ROUTE_TABLES)
        .map(|t| {
            format!(
                "route table {t} beyond the kernel's {}",
                ovnbpf_common::MAX_ROUTE_TABLES
            )
        })
}
