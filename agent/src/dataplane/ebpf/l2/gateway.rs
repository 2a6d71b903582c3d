//! The gateway family of the L2 maps: a router's distributed gateway port
//! ([`IrEntry::GatewayPort`](crate::pipeline::ir::IrEntry::GatewayPort), a router port with a
//! chassisredirect companion) as this chassis carries it, by where the companion is active
//! (its Port_Binding's chassis, which the daemon's election claims here):
//! - here (this chassis is the active gateway): routes out of the port go on to the switch
//!   behind it (`GATEWAY_REDIRECTS` with no endpoint); what other chassis tunnel to the
//!   companion leaves by that switch (`GATEWAY_EGRESS`); the provider network's frames to the
//!   port's MAC enter the router (the FIB entry OVN's resident `ls_in_l2_lkup` flow gives, with
//!   `FIB_ROUTER_GATEWAY`), and its ARP for the port's address is answered
//!   (`ARP_ANSWER_PROVIDER`, the resident `lr_in_ip_input` answer); with the port's
//!   centralized SNAT rules (`SNAT_RULES`, [`GATEWAY_SNAT`] on the redirect and the egress,
//!   `FIB_ROUTER_SNAT`: both ways through the gateway NAT stage; their addresses in
//!   `NAT_BY_EXTERNAL` with `NAT_SNAT_ADDRESS`, for the stage's hairpin), its centralized FIPs
//!   (in the NAT family's maps, by [`L2State::gateway_fip`]) and its `dnat` rules (a DNAT
//!   without its SNAT twin: in `NAT_BY_EXTERNAL` only, with `NAT_STATEFUL`, the NAT stage
//!   translating the way in and recording the connection so that only its replies leave from
//!   the rule's address) and its load balancers' VIPs (their `LB_VIPS` entries, the lb
//!   family's: the NAT stage balances new connections to them and records each), whose
//!   addresses it answers ARP for too; the gratuitous ARPs
//!   of a gateway that became active here are collected for the node
//!   ([`L2State::take_announcements`]);
//! - on another chassis: routes out of the port are tunnelled there (`GATEWAY_REDIRECTS` with
//!   its endpoint), from the router port a packet entered by (`GATEWAY_INPORTS`);
//! - nowhere, or the router has centralized NAT on the port the datapath does not carry
//!   ([`IrEntry::CentralizedNat`](crate::pipeline::ir::IrEntry::CentralizedNat)): no entry, and
//!   the routes' packets are dropped as `gateway_unsupported`, never forwarded un-NATed.
//!
//! Each gateway port of a router (Kube-OVN's `extraExternalSubnets` gives a VPC one per
//! external subnet) is carried on its own: its redirect keyed by the router and the switch
//! behind it, its SNAT rules by both too, each active where its own chassisredirect port is,
//! announced by that port's name. Owns the desired values of the four gateway maps and the
//! state behind them; the FIB entry, the answers and the NAT entries are computed here for the
//! FIB, responder and NAT families. Reads [`Physical`](super::super::physical::Physical) for
//! where ports are.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    net::{IpAddr, Ipv4Addr},
};

use ovnbpf_common::{
    ARP_ANSWER_PROVIDER, ArpAnswer, FIB_ROUTER, FIB_ROUTER_GATEWAY, FIB_ROUTER_SNAT, FibEntry,
    GATEWAY_SNAT, GatewayEgress, GatewayKey, GatewayRedirect, NatTarget, NeighbourKey, SnatRule,
    SnatRuleKey, TunnelPortKey,
    maps::{GatewayEgressMap, GatewayInports, GatewayRedirects, SnatRules},
};

use super::{
    super::{
        EbpfError, Maps,
        physical::Residence,
        tables::{Table, TableKey, flush_from},
    },
    L2State,
    arp::AnswerKey,
};
use crate::pipeline::ir::{Mac, Prefix};

/// An SNAT rule's slot: (router, switch behind its gateway port, source prefix).
impl TableKey<SnatRules> for (u32, u32, Prefix) {
    fn slot(&self) -> (SnatRuleKey, u32) {
        let key = SnatRuleKey {
            router: self.0.to_be(),
            switch: self.1.to_be(),
            ip: u32::from_ne_bytes(self.2.network.octets()),
        };
        (key, 64 + u32::from(self.2.length))
    }
}

/// A gateway port's redirect slot: (router, switch behind the port).
impl TableKey<GatewayRedirects> for (u32, u32) {
    fn slot(&self) -> GatewayKey {
        GatewayKey {
            router: self.0,
            switch: self.1,
        }
    }
}

impl TableKey<GatewayInports> for (u32, Ipv4Addr) {
    fn slot(&self) -> NeighbourKey {
        NeighbourKey {
            datapath: self.0,
            ip: u32::from_ne_bytes(self.1.octets()),
        }
    }
}

impl TableKey<GatewayEgressMap> for TunnelPortKey {
    fn slot(&self) -> TunnelPortKey {
        *self
    }
}

/// The keys one router's gateway ports decide: so that they are marked again when one
/// changes.
#[derive(Debug, Default, Clone)]
struct GatewayKeys {
    /// (router, switch) of each port.
    redirects: Vec<(u32, u32)>,
    inports: Vec<(u32, Ipv4Addr)>,
    egress: Vec<TunnelPortKey>,
    fib: Vec<(u32, Mac)>,
    /// Each port's address, its SNAT rules' and DNATs' external addresses, on its switch.
    answers: Vec<AnswerKey>,
    snat_rules: Vec<(u32, u32, Prefix)>,
    /// The centralized FIPs' (router, logical) and (router, external) NAT slots.
    fips: Vec<((u32, Ipv4Addr), (u32, Ipv4Addr))>,
    /// The SNAT rules' (router, external) NAT slots.
    snat_addresses: Vec<(u32, Ipv4Addr)>,
}

/// The gateway ports, the fences, their keys and what is installed.
#[derive(Debug, Default)]
pub(super) struct GatewayState {
    /// Router → its (gateway port, chassisredirect port) pairs.
    by_router: HashMap<u32, BTreeSet<(String, String)>>,
    /// (router, chassisredirect port) pairs with centralized NAT not carried.
    centralized_nat: HashSet<(u32, String)>,
    /// Router → its centralized SNAT rules: (gateway port, source prefix) → external address.
    snat: HashMap<u32, BTreeMap<(String, Prefix), Ipv4Addr>>,
    /// Router → its centralized DNATs: (gateway port, external address) → logical address.
    dnat: HashMap<u32, BTreeMap<(String, Ipv4Addr), Ipv4Addr>>,
    /// Router → its load balancers' VIP addresses by chassisredirect port: (redirect, address)
    /// → how many VIPs (ports, protocols) the address has.
    vips: HashMap<u32, BTreeMap<(String, Ipv4Addr), usize>>,
    keys: HashMap<u32, GatewayKeys>,
    /// The FIB and answer keys (their switch names the port) back to their router.
    fib_keys: HashMap<(u32, Mac), u32>,
    answer_keys: HashMap<AnswerKey, u32>,
    redirects: Table<GatewayRedirects, (u32, u32)>,
    inports: Table<GatewayInports, (u32, Ipv4Addr)>,
    egress: Table<GatewayEgressMap, TunnelPortKey>,
    snat_rules: Table<SnatRules, (u32, u32, Prefix)>,
    /// The gateways active here (router, chassisredirect port), and those that became so since
    /// the last [`L2State::take_announcements`].
    here: HashSet<(u32, String)>,
    announce: BTreeSet<(u32, String)>,
    /// The chassisredirect ports whose gateway stopped being active here since the last
    /// [`L2State::take_withdrawals`].
    withdraw: BTreeSet<String>,
}

impl GatewayState {
    pub(super) fn pending(&self) -> usize {
        self.redirects.pending()
            + self.inports.pending()
            + self.egress.pending()
            + self.snat_rules.pending()
    }
}

/// Takes rule `key` → `value` of router `router` in (or out of) `rules` (out only while it
/// still has that value).
fn take_rule<K: Ord, V: PartialEq>(
    rules: &mut HashMap<u32, BTreeMap<K, V>>,
    router: u32,
    key: K,
    value: V,
    added: bool,
) {
    let of_router = rules.entry(router).or_default();
    if added {
        of_router.insert(key, value);
    } else if of_router.get(&key) == Some(&value) {
        of_router.remove(&key);
    }
    if of_router.is_empty() {
        rules.remove(&router);
    }
}

/// The gateway a router is carried for, as this chassis sees it now.
struct Gateway<'a> {
    port: &'a str,
    redirect: &'a str,
    /// The switch behind the port and the key of its port to the router.
    switch: u32,
    switch_port: u32,
    residence: Residence,
}

impl L2State {
    /// Takes in (or out) gateway port `port` of router `router` with chassisredirect port
    /// `redirect`.
    pub(super) fn take_gateway_port(
        &mut self,
        router: u32,
        port: &str,
        redirect: &str,
        added: bool,
    ) {
        let pair = (port.to_string(), redirect.to_string());
        if added {
            self.gateway
                .by_router
                .entry(router)
                .or_default()
                .insert(pair);
        } else if let Some(pairs) = self.gateway.by_router.get_mut(&router) {
            pairs.remove(&pair);
            if pairs.is_empty() {
                self.gateway.by_router.remove(&router);
            }
        }
        self.mark_gateway(router);
    }

    /// Takes in (or out) the fence of router `router`'s gateway `redirect` (centralized NAT).
    pub(super) fn take_centralized_nat(&mut self, router: u32, redirect: &str, added: bool) {
        let key = (router, redirect.to_string());
        if added {
            self.gateway.centralized_nat.insert(key);
        } else {
            self.gateway.centralized_nat.remove(&key);
        }
        self.mark_gateway(router);
    }

    /// Takes in (or out) centralized SNAT rule `logical` → `external` of router `router`'s
    /// gateway port `gateway_port`.
    pub(super) fn take_centralized_snat(
        &mut self,
        router: u32,
        (gateway_port, logical): (&str, Prefix),
        external: Ipv4Addr,
        added: bool,
    ) {
        let key = (gateway_port.to_string(), logical);
        take_rule(&mut self.gateway.snat, router, key, external, added);
        self.mark_gateway(router);
    }

    /// Takes in (or out) centralized DNAT `external` → `logical` of router `router`'s gateway
    /// port `gateway_port`.
    pub(super) fn take_centralized_dnat(
        &mut self,
        router: u32,
        (gateway_port, external): (&str, Ipv4Addr),
        logical: Ipv4Addr,
        added: bool,
    ) {
        let key = (gateway_port.to_string(), external);
        take_rule(&mut self.gateway.dnat, router, key, logical, added);
        self.mark_gateway(router);
    }

    /// Takes in (or out) a VIP at `address` of router `router`'s load balancers, balanced where
    /// chassisredirect port `redirect` is active.
    pub(super) fn take_router_vip(
        &mut self,
        router: u32,
        redirect: &str,
        address: Ipv4Addr,
        added: bool,
    ) {
        let of_router = self.gateway.vips.entry(router).or_default();
        let key = (redirect.to_string(), address);
        if added {
            *of_router.entry(key).or_default() += 1;
        } else if let Some(count) = of_router.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                of_router.remove(&key);
            }
        }
        if of_router.is_empty() {
            self.gateway.vips.remove(&router);
        }
        self.mark_gateway(router);
    }

    /// Router `router`'s VIP addresses balanced where `redirect` is active.
    fn vips_of(&self, router: u32, redirect: &str) -> Vec<Ipv4Addr> {
        self.gateway
            .vips
            .get(&router)
            .into_iter()
            .flatten()
            .filter(|((of, _), _)| of == redirect)
            .map(|((_, address), _)| *address)
            .collect()
    }

    /// Marks the gateway slots of the routers `port` can matter to: its own router's, and
    /// (a switch's router port) its peer's router's.
    pub(super) fn mark_gateway_of_port(&mut self, port: &str) {
        let Some(binding) = self.physical.binding(port) else {
            return;
        };
        let peer_router = binding
            .peer
            .as_deref()
            .and_then(|peer| self.physical.binding(peer))
            .map(|peer| peer.datapath);
        let routers: Vec<u32> = std::iter::once(binding.datapath)
            .chain(peer_router)
            .filter(|router| self.gateway.by_router.contains_key(router))
            .collect();
        routers
            .into_iter()
            .for_each(|router| self.mark_gateway(router));
    }

    /// Marks every slot router `router`'s gateway ports decide: those they had, and those they
    /// have now.
    fn mark_gateway(&mut self, router: u32) {
        if let Some(old) = self.gateway.keys.remove(&router) {
            self.mark_gateway_keys(router, &old, false);
        }
        let pairs: Vec<(String, String)> = self
            .gateway
            .by_router
            .get(&router)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        let here: BTreeSet<String> = pairs
            .iter()
            .filter(|(port, redirect)| {
                self.carried_gateway(router, port, redirect)
                    .is_some_and(|gateway| gateway.residence == Residence::Here)
            })
            .map(|(_, redirect)| redirect.clone())
            .collect();
        let was_here: Vec<String> = self
            .gateway
            .here
            .iter()
            .filter(|(r, redirect)| *r == router && !here.contains(redirect))
            .map(|(_, redirect)| redirect.clone())
            .collect();
        for redirect in was_here {
            let key = (router, redirect);
            self.gateway.here.remove(&key);
            self.gateway.announce.remove(&key);
            self.gateway.withdraw.insert(key.1);
        }
        for redirect in here {
            if self.gateway.here.insert((router, redirect.clone())) {
                self.gateway.withdraw.remove(&redirect);
                self.gateway.announce.insert((router, redirect));
            }
        }
        let keys = self.gateway_keys(router, &pairs);
        self.mark_gateway_keys(router, &keys, true);
        if !pairs.is_empty() {
            self.gateway.keys.insert(router, keys);
        }
    }

    /// Marks the slots `keys` name; `current`: they are router `router`'s keys now (the FIB
    /// and answer keys point back to it), else its former ones (they no longer do).
    fn mark_gateway_keys(&mut self, router: u32, keys: &GatewayKeys, current: bool) {
        keys.redirects
            .iter()
            .for_each(|key| self.gateway.redirects.mark(*key));
        keys.inports
            .iter()
            .for_each(|key| self.gateway.inports.mark(*key));
        keys.egress
            .iter()
            .for_each(|key| self.gateway.egress.mark(*key));
        for key in &keys.fib {
            if current {
                self.gateway.fib_keys.insert(*key, router);
            } else {
                self.gateway.fib_keys.remove(key);
            }
            self.fib_table.mark(*key);
        }
        for key in &keys.answers {
            if current {
                self.gateway.answer_keys.insert(*key, router);
            } else {
                self.gateway.answer_keys.remove(key);
            }
            self.mark_answer(*key);
        }
        keys.snat_rules
            .iter()
            .for_each(|key| self.gateway.snat_rules.mark(*key));
        for (logical, external) in &keys.fips {
            self.nat_tables_mark(*logical, *external);
        }
        for external in &keys.snat_addresses {
            self.nat_external_mark(*external);
        }
    }

    /// The keys router `router`'s gateway ports `pairs` (gateway port, chassisredirect port)
    /// name, whatever their residence.
    fn gateway_keys(&self, router: u32, pairs: &[(String, String)]) -> GatewayKeys {
        let mut keys = GatewayKeys {
            inports: self
                .patch_ports
                .get(&router)
                .into_iter()
                .flatten()
                .filter_map(|name| self.physical.binding(name)?.address)
                .map(|ip| (router, ip))
                .collect(),
            ..GatewayKeys::default()
        };
        for (port, redirect) in pairs {
            keys.egress
                .extend(self.ports.get(redirect).map(|info| TunnelPortKey {
                    datapath: router,
                    port: info.key,
                }));
            let dnats = self.dnats_of(router, port);
            keys.fips.extend(
                dnats
                    .iter()
                    .map(|(external, logical)| ((router, *logical), (router, *external))),
            );
            let Some(switch) = self.gateway_switch(port) else {
                continue;
            };
            keys.redirects.push((router, switch));
            if let Some(mac) = self.ports.get(port.as_str()).and_then(|info| info.mac) {
                keys.fib.push((switch, mac));
            }
            let rules = self.snat_rules_of(router, port);
            let addresses: BTreeSet<Ipv4Addr> = self
                .physical
                .binding(port)
                .and_then(|binding| binding.address)
                .into_iter()
                .chain(rules.iter().map(|(_, external)| *external))
                .chain(dnats.iter().map(|(external, _)| *external))
                .chain(self.vips_of(router, redirect))
                .collect();
            keys.answers
                .extend(addresses.into_iter().map(|ip| (switch, IpAddr::V4(ip))));
            keys.snat_rules
                .extend(rules.iter().map(|(prefix, _)| (router, switch, *prefix)));
            keys.snat_addresses
                .extend(rules.iter().map(|(_, external)| (router, *external)));
        }
        keys
    }

    /// Router `router`'s centralized DNATs on gateway port `port`: (external, logical).
    fn dnats_of(&self, router: u32, port: &str) -> Vec<(Ipv4Addr, Ipv4Addr)> {
        self.gateway
            .dnat
            .get(&router)
            .into_iter()
            .flatten()
            .filter(|((gateway_port, _), _)| gateway_port == port)
            .map(|((_, external), logical)| (*external, *logical))
            .collect()
    }

    /// Whether DNAT `external` → `logical` on router `router`'s gateway port `port` has its
    /// SNAT twin (`logical`/32 → `external`): a centralized FIP.
    fn is_fip(&self, router: u32, port: &str, (external, logical): (Ipv4Addr, Ipv4Addr)) -> bool {
        let host = Prefix {
            network: logical,
            length: 32,
        };
        self.gateway
            .snat
            .get(&router)
            .and_then(|rules| rules.get(&(port.to_string(), host)))
            == Some(&external)
    }

    /// The translation a centralized FIP of a gateway active here gives NAT slot `key` (a
    /// router and an address), by its `logical` address (`by_logical`) or its external one:
    /// the other address, with the gateway port's MAC.
    pub(super) fn gateway_fip(
        &self,
        (router, address): (u32, Ipv4Addr),
        by_logical: bool,
    ) -> Option<NatTarget> {
        let here: Vec<Gateway<'_>> = self
            .carried_gateways(router)
            .into_iter()
            .filter(|gateway| gateway.residence == Residence::Here)
            .collect();
        let found =
            here.iter().find_map(|gateway| {
                let dnat = self.dnats_of(router, gateway.port).into_iter().find(
                    |&(external, logical)| address == if by_logical { logical } else { external },
                )?;
                Some((gateway, dnat))
            });
        let Some((gateway, (external, logical))) = found else {
            // An SNAT rule's address: marked for the gateway NAT stage's hairpin and way in.
            let gateway = here.iter().find(|gateway| {
                !by_logical
                    && self
                        .snat_rules_of(router, gateway.port)
                        .iter()
                        .any(|(_, external)| *external == address)
            })?;
            return Some(NatTarget {
                ip: 0,
                switch: gateway.switch,
                mac: self.ports.get(gateway.port)?.mac?,
                flags: ovnbpf_common::NAT_CENTRALIZED | ovnbpf_common::NAT_SNAT_ADDRESS,
                reserved: 0,
            });
        };
        // A `dnat` rule's pod leaves untranslated (its replies by the NAT stage's record).
        let stateful = !self.is_fip(router, gateway.port, (external, logical));
        if by_logical && stateful {
            return None;
        }
        Some(NatTarget {
            ip: u32::from_ne_bytes(if by_logical { external } else { logical }.octets()),
            switch: gateway.switch,
            mac: self.ports.get(gateway.port)?.mac?,
            flags: ovnbpf_common::NAT_CENTRALIZED
                | if stateful {
                    ovnbpf_common::NAT_STATEFUL
                } else {
                    0
                },
            reserved: 0,
        })
    }

    /// Router `router`'s SNAT rules on gateway port `port`: (source prefix, external address).
    fn snat_rules_of(&self, router: u32, port: &str) -> Vec<(Prefix, Ipv4Addr)> {
        self.gateway
            .snat
            .get(&router)
            .into_iter()
            .flatten()
            .filter(|((gateway_port, _), _)| gateway_port == port)
            .map(|((_, prefix), external)| (*prefix, *external))
            .collect()
    }

    /// Whether router `router`'s gateway is active here with SNAT rules, `dnat` rules or load
    /// balancers (the NAT stage's, which records their connections).
    fn snat_here(&self, router: u32, gateway: &Gateway<'_>) -> bool {
        gateway.residence == Residence::Here
            && (!self.snat_rules_of(router, gateway.port).is_empty()
                || !self.vips_of(router, gateway.redirect).is_empty()
                || self
                    .dnats_of(router, gateway.port)
                    .into_iter()
                    .any(|pair| !self.is_fip(router, gateway.port, pair)))
    }

    /// [`GATEWAY_SNAT`] for router `router`'s `gateway` when [`Self::snat_here`].
    fn snat_flag(&self, router: u32, gateway: &Gateway<'_>) -> u32 {
        if self.snat_here(router, gateway) {
            GATEWAY_SNAT
        } else {
            0
        }
    }

    /// Router `router`'s gateway port `port` (chassisredirect port `redirect`) as carried
    /// here: `None` when it is fenced, or its chassisredirect port is active nowhere this
    /// chassis can reach.
    fn carried_gateway<'a>(
        &'a self,
        router: u32,
        port: &'a str,
        redirect: &'a str,
    ) -> Option<Gateway<'a>> {
        if self
            .gateway
            .centralized_nat
            .contains(&(router, redirect.to_string()))
        {
            return None;
        }
        let switch_side = self.physical.binding(port)?.peer.as_deref()?;
        Some(Gateway {
            port,
            redirect,
            switch: self.physical.binding(switch_side)?.datapath,
            switch_port: self.ports.get(switch_side)?.key,
            residence: self.physical.residence(redirect)?,
        })
    }

    /// Router `router`'s gateway ports as carried here (see [`Self::carried_gateway`]).
    fn carried_gateways(&self, router: u32) -> Vec<Gateway<'_>> {
        self.gateway
            .by_router
            .get(&router)
            .into_iter()
            .flatten()
            .filter_map(|(port, redirect)| self.carried_gateway(router, port, redirect))
            .collect()
    }

    /// Router `router`'s gateway port onto `switch`, as carried here.
    fn carried_gateway_on(&self, router: u32, switch: u32) -> Option<Gateway<'_>> {
        self.carried_gateways(router)
            .into_iter()
            .find(|gateway| gateway.switch == switch)
    }

    fn desired_redirect(&self, (router, switch): (u32, u32)) -> Option<GatewayRedirect> {
        let gateway = self.carried_gateway_on(router, switch)?;
        Some(GatewayRedirect {
            remote_ip: match gateway.residence {
                Residence::Here => 0,
                Residence::Remote(endpoint) => endpoint,
            },
            port: self.ports.get(gateway.redirect)?.key,
            switch: gateway.switch,
            flags: self.snat_flag(router, &gateway),
        })
    }

    fn desired_snat_rule(&self, (router, switch, prefix): (u32, u32, Prefix)) -> Option<SnatRule> {
        let gateway = self.carried_gateway_on(router, switch)?;
        if gateway.residence != Residence::Here {
            return None;
        }
        let external = self
            .gateway
            .snat
            .get(&router)?
            .get(&(gateway.port.to_string(), prefix))?;
        Some(SnatRule {
            external: u32::from_ne_bytes(external.octets()),
        })
    }

    /// The key of router `router`'s port with address `ip`, where one of its gateway ports is
    /// active on another chassis (what enters by that port and leaves by the gateway port is
    /// tunnelled there from it).
    fn desired_inport(&self, (router, ip): (u32, Ipv4Addr)) -> Option<u32> {
        let elsewhere = self
            .carried_gateways(router)
            .iter()
            .any(|gateway| gateway.residence != Residence::Here);
        if !elsewhere {
            return None;
        }
        let port = self.patch_ports.get(&router)?.iter().find(|name| {
            self.physical
                .binding(name)
                .is_some_and(|binding| binding.address == Some(ip))
        })?;
        Some(self.ports.get(port)?.key)
    }

    fn desired_egress(&self, key: TunnelPortKey) -> Option<GatewayEgress> {
        let gateway = self
            .carried_gateways(key.datapath)
            .into_iter()
            .find(|gateway| {
                gateway.residence == Residence::Here
                    && self
                        .ports
                        .get(gateway.redirect)
                        .is_some_and(|info| info.key == key.port)
            })?;
        Some(GatewayEgress {
            switch: gateway.switch,
            switch_port: gateway.switch_port,
            flags: self.snat_flag(key.datapath, &gateway),
            reserved: 0,
        })
    }

    /// The FIB entry for `mac` on `switch` when it is the MAC of a gateway port active here:
    /// to the router, admitted from the provider network.
    pub(super) fn gateway_fib(&self, switch: u32, mac: Mac) -> Option<FibEntry> {
        let router = *self.gateway.fib_keys.get(&(switch, mac))?;
        let gateway = self.carried_gateway_on(router, switch)?;
        let snat = if self.snat_here(router, &gateway) {
            FIB_ROUTER_SNAT
        } else {
            0
        };
        (gateway.residence == Residence::Here && gateway.switch == switch).then(|| FibEntry {
            kind: FIB_ROUTER,
            ifindex: router,
            flags: FIB_ROUTER_GATEWAY | snat,
            remote_ip: self
                .physical
                .binding(gateway.port)
                .and_then(|binding| binding.address)
                .map_or(0, |ip| u32::from_ne_bytes(ip.octets())),
            port: gateway.switch_port,
        })
    }

    /// The answer for `key` when it is the external address of an SNAT rule of a gateway
    /// active here that the switch has no answer of its own for: the gateway port's MAC, to the
    /// provider network too (`lr_in_ip_input`'s resident answer).
    pub(super) fn gateway_answer(&self, key: AnswerKey) -> Option<ArpAnswer> {
        let router = *self.gateway.answer_keys.get(&key)?;
        let gateway = self.carried_gateway_on(router, key.0)?;
        if gateway.residence != Residence::Here {
            return None;
        }
        Some(ArpAnswer {
            mac: self.ports.get(gateway.port)?.mac?,
            flags: ARP_ANSWER_PROVIDER,
            ..ArpAnswer::default()
        })
    }

    /// The responder's extra flags for `key`: [`ARP_ANSWER_PROVIDER`] for a gateway port's
    /// address active here (requests from the provider network are answered too).
    pub(super) fn gateway_answer_flags(&self, key: AnswerKey) -> u8 {
        let Some(router) = self.gateway.answer_keys.get(&key) else {
            return 0;
        };
        match self.carried_gateway_on(*router, key.0) {
            Some(gateway) if gateway.residence == Residence::Here => ARP_ANSWER_PROVIDER,
            _ => 0,
        }
    }

    /// What the gateways that became active here since the last call announce (their port's
    /// address and NAT external addresses, out of the provider NIC of the switch behind the
    /// port); one that is no longer active here, or whose switch has no provider NIC here,
    /// announces nothing.
    pub fn take_announcements(
        &mut self,
    ) -> Vec<(String, crate::dataplane::ebpf::announce::Announcement)> {
        std::mem::take(&mut self.gateway.announce)
            .into_iter()
            .filter_map(|(router, redirect)| {
                let port = self
                    .gateway
                    .by_router
                    .get(&router)?
                    .iter()
                    .find(|(_, r)| *r == redirect)
                    .map(|(port, _)| port)?;
                let gateway = self.carried_gateway(router, port, &redirect)?;
                if gateway.residence != Residence::Here {
                    return None;
                }
                let (_, network, tag) = self.localnets.get(&gateway.switch)?;
                let addresses = self
                    .physical
                    .binding(gateway.port)
                    .and_then(|binding| binding.address)
                    .into_iter()
                    .chain(
                        self.snat_rules_of(router, gateway.port)
                            .into_iter()
                            .map(|(_, external)| external),
                    )
                    .chain(
                        self.dnats_of(router, gateway.port)
                            .into_iter()
                            .map(|(external, _)| external),
                    )
                    .chain(self.vips_of(router, gateway.redirect))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                let announcement = crate::dataplane::ebpf::announce::Announcement {
                    ifindex: self.physical.provider(network)?,
                    vlan: tag.unwrap_or(0),
                    mac: self.ports.get(gateway.port)?.mac?,
                    addresses,
                };
                Some((gateway.redirect.to_string(), announcement))
            })
            .collect()
    }

    /// The chassisredirect ports whose gateway stopped being active here since the last call
    /// (their announcements' repeats stop).
    pub fn take_withdrawals(&mut self) -> Vec<String> {
        std::mem::take(&mut self.gateway.withdraw)
            .into_iter()
            .collect()
    }

    /// Writes the marked gateway entries; returns the writes made.
    pub(super) fn flush_gateways(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        // Where the tunnelled frames go before the redirects that send them.
        let mut writes = flush_from(
            self,
            maps,
            |s| &mut s.gateway.snat_rules,
            |s, key| s.desired_snat_rule(*key),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.gateway.egress,
            |s, key| s.desired_egress(*key),
        )?;
        writes += flush_from(
            self,
            maps,
            |s| &mut s.gateway.inports,
            |s, key| s.desired_inport(*key),
        )?;
        Ok(writes
            + flush_from(
                self,
                maps,
                |s| &mut s.gateway.redirects,
                |s, key| s.desired_redirect(*key),
            )?)
    }

    /// Removes the gateway entries this state did not install; returns how many went.
    pub(super) fn sweep_gateways(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        Ok(self.gateway.redirects.sweep(maps)?
            + self.gateway.inports.sweep(maps)?
            + self.gateway.egress.sweep(maps)?
            + self.gateway.snat_rules.sweep(maps)?)
    }
}
