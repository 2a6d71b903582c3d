//! The distributed NAT family of the L2 maps: the FIPs of this chassis's pods
//! ([`IrEntry::DistributedNat`], a rule applying where its pod's port resides), by the pod's
//! address (`NAT_BY_LOGICAL`: what leaves the gateway port from it) and by the external address
//! (`NAT_BY_EXTERNAL`: what enters the gateway port for it); and, on the switch behind the
//! gateway port (the provider network's), the answer to ARP for the external address with the
//! external MAC (also to requests from the provider network) and the FIB entry handing frames
//! to that MAC to the router. Where the pod's port is not local, the rule installs nothing and
//! its external address is not answered (the router's answer northd gives every port of the
//! switch is the gateway chassis's, as `lr_in_ip_input` says). Owns the desired values of the
//! two NAT maps; the answer and the FIB entry are computed here for the responder and FIB
//! families. Reads [`Physical`](super::super::physical::Physical) for where ports are.

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, Ipv4Addr},
};

use ovnbpf_common::{
    ARP_ANSWER_PROVIDER, ArpAnswer, NatTarget, NeighbourKey,
    maps::{NatByExternal, NatByLogical},
};

use super::{
    super::{
        EbpfError, Maps,
        physical::Location,
        tables::{Table, TableKey, flush_from},
    },
    L2State,
    arp::AnswerKey,
    remove_from_index,
};
use crate::pipeline::ir::Mac;

fn nat_key((router, ip): (u32, Ipv4Addr)) -> NeighbourKey {
    NeighbourKey {
        datapath: router,
        ip: u32::from_ne_bytes(ip.octets()),
    }
}

impl TableKey<NatByLogical> for (u32, Ipv4Addr) {
    fn slot(&self) -> NeighbourKey {
        nat_key(*self)
    }
}

impl TableKey<NatByExternal> for (u32, Ipv4Addr) {
    fn slot(&self) -> NeighbourKey {
        nat_key(*self)
    }
}

/// A NAT map's value: the address a packet gets, on `switch`, with `rule`'s external MAC.
fn target(ip: Ipv4Addr, switch: u32, rule: &NatRule) -> NatTarget {
    NatTarget {
        ip: u32::from_ne_bytes(ip.octets()),
        switch,
        mac: rule.external_mac,
        flags: 0,
        reserved: 0,
    }
}

/// One distributed NAT rule of a router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct NatRule {
    pub(super) gateway_port: String,
    pub(super) logical_ip: Ipv4Addr,
    pub(super) external_ip: Ipv4Addr,
    pub(super) external_mac: Mac,
    pub(super) logical_port: String,
}

/// The rules, their indexes and what is installed.
#[derive(Debug, Default)]
pub(super) struct NatState {
    /// (router, pod address) → its rule.
    rules: HashMap<(u32, Ipv4Addr), NatRule>,
    /// (router, external address) → the pod address of its rule.
    by_external: HashMap<(u32, Ipv4Addr), Ipv4Addr>,
    /// Pod port or gateway port → the rules that name it.
    by_port: HashMap<String, HashSet<(u32, Ipv4Addr)>>,
    /// The external MAC on the gateway's switch (its FIB key) and the external address there
    /// (its answer key) → the rule, once the switch is known.
    fib_keys: HashMap<(u32, Mac), (u32, Ipv4Addr)>,
    answer_keys: HashMap<AnswerKey, (u32, Ipv4Addr)>,
    /// The reverse: a rule → its FIB and answer keys.
    switch_keys: HashMap<(u32, Ipv4Addr), ((u32, Mac), AnswerKey)>,
    by_logical: Table<NatByLogical, (u32, Ipv4Addr)>,
    by_external_table: Table<NatByExternal, (u32, Ipv4Addr)>,
}

impl NatState {
    pub(super) fn pending(&self) -> usize {
        self.by_logical.pending() + self.by_external_table.pending()
    }
}

impl L2State {
    /// Takes in (or out) a distributed NAT rule of router `router`.
    pub(super) fn take_distributed_nat(&mut self, router: u32, rule: &NatRule, added: bool) {
        let key = (router, rule.logical_ip);
        if added {
            if let Some(old) = self.nat.rules.get(&key).cloned() {
                self.forget_nat(router, &old);
            }
            self.nat.rules.insert(key, rule.clone());
            self.nat
                .by_external
                .insert((router, rule.external_ip), rule.logical_ip);
            for port in [&rule.logical_port, &rule.gateway_port] {
                self.nat
                    .by_port
                    .entry(port.clone())
                    .or_default()
                    .insert(key);
            }
            self.mark_nat(key);
        } else if self.nat.rules.get(&key) == Some(rule) {
            self.forget_nat(router, rule);
        }
    }

    fn forget_nat(&mut self, router: u32, rule: &NatRule) {
        let key = (router, rule.logical_ip);
        self.nat.rules.remove(&key);
        // Its slots (the rule gone, its switch keys are released).
        self.mark_nat(key);
        self.nat.by_external_table.mark((router, rule.external_ip));
        if self.nat.by_external.get(&(router, rule.external_ip)) == Some(&rule.logical_ip) {
            self.nat.by_external.remove(&(router, rule.external_ip));
        }
        for port in [&rule.logical_port, &rule.gateway_port] {
            remove_from_index(&mut self.nat.by_port, port, &key);
        }
    }

    /// Marks every slot rule `key` decides (call before and after it or its ports change):
    /// its two NAT entries, and its FIB entry and answer on the gateway's switch (the keys it
    /// had and the ones it has now).
    pub(super) fn mark_nat(&mut self, key: (u32, Ipv4Addr)) {
        self.nat.by_logical.mark(key);
        if let Some((fib, answer)) = self.nat.switch_keys.remove(&key) {
            if self.nat.fib_keys.get(&fib) == Some(&key) {
                self.nat.fib_keys.remove(&fib);
            }
            if self.nat.answer_keys.get(&answer) == Some(&key) {
                self.nat.answer_keys.remove(&answer);
            }
            self.fib_table.mark(fib);
            self.mark_answer(answer);
        }
        let Some(rule) = self.nat.rules.get(&key).cloned() else {
            return;
        };
        self.nat.by_external_table.mark((key.0, rule.external_ip));
        if let Some(switch) = self.gateway_switch(&rule.gateway_port) {
            let fib = (switch, rule.external_mac);
            let answer = (switch, IpAddr::V4(rule.external_ip));
            self.nat.fib_keys.insert(fib, key);
            self.nat.answer_keys.insert(answer, key);
            self.nat.switch_keys.insert(key, (fib, answer));
            self.fib_table.mark(fib);
            self.mark_answer(answer);
        }
    }

    /// Marks the rules naming `port` or its patch peer (its binding or interface changed: a
    /// gateway port's switch is its peer's datapath).
    pub(super) fn mark_nat_of_port(&mut self, port: &str) {
        let peer = self
            .physical
            .binding(port)
            .and_then(|binding| binding.peer.clone());
        let keys: Vec<(u32, Ipv4Addr)> = std::iter::once(port)
            .chain(peer.as_deref())
            .flat_map(|name| self.nat.by_port.get(name).into_iter().flatten())
            .copied()
            .collect();
        keys.into_iter().for_each(|key| self.mark_nat(key));
    }

    /// The switch behind router port `gateway_port` (its patch peer's datapath).
    pub(super) fn gateway_switch(&self, gateway_port: &str) -> Option<u32> {
        let peer = self.physical.binding(gateway_port)?.peer.as_ref()?;
        Some(self.physical.binding(peer)?.datapath)
    }

    /// The rule `key` if its pod's port is on this chassis, with its gateway's switch.
    fn local_nat(&self, key: (u32, Ipv4Addr)) -> Option<(&NatRule, u32)> {
        let rule = self.nat.rules.get(&key)?;
        let local = matches!(self.physical.locate(&rule.logical_port), Location::Local(_));
        let switch = self.gateway_switch(&rule.gateway_port)?;
        local.then_some((rule, switch))
    }

    /// The FIB port for `mac` on `switch` a local rule asks for: the switch's port to the
    /// router (the gateway port's peer).
    pub(super) fn nat_fib_port(&self, switch: u32, mac: Mac) -> Option<&str> {
        let key = *self.nat.fib_keys.get(&(switch, mac))?;
        let (rule, _) = self.local_nat(key)?;
        self.physical.binding(&rule.gateway_port)?.peer.as_deref()
    }

    /// What the responder answers for `key` by a rule: `Some(Some(answer))` for a local rule's
    /// external address, `Some(None)` (no answer) for another chassis's, `None` when no rule
    /// has the address.
    pub(super) fn nat_answer(&self, key: AnswerKey) -> Option<Option<ArpAnswer>> {
        let rule = *self.nat.answer_keys.get(&key)?;
        Some(self.local_nat(rule).map(|(rule, _)| ArpAnswer {
            mac: rule.external_mac,
            flags: ARP_ANSWER_PROVIDER,
            ..ArpAnswer::default()
        }))
    }

    fn desired_by_logical(&self, key: (u32, Ipv4Addr)) -> Option<NatTarget> {
        let Some((rule, switch)) = self.local_nat(key) else {
            return self.gateway_fip(key, true);
        };
        Some(target(rule.external_ip, switch, rule))
    }

    /// Marks NAT slots `logical` and `external` (a centralized FIP's, which the gateway family
    /// decides).
    pub(super) fn nat_tables_mark(&mut self, logical: (u32, Ipv4Addr), external: (u32, Ipv4Addr)) {
        self.nat.by_logical.mark(logical);
        self.nat.by_external_table.mark(external);
    }

    /// Marks NAT slot `external` only (an SNAT rule's address, which the gateway family
    /// decides).
    pub(super) fn nat_external_mark(&mut self, external: (u32, Ipv4Addr)) {
        self.nat.by_external_table.mark(external);
    }

    fn desired_by_external(&self, (router, external): (u32, Ipv4Addr)) -> Option<NatTarget> {
        let local = self
            .nat
            .by_external
            .get(&(router, external))
            .and_then(|logical| self.local_nat((router, *logical)));
        let Some((rule, switch)) = local else {
            return self.gateway_fip((router, external), false);
        };
        Some(target(rule.logical_ip, switch, rule))
    }

    /// Writes the marked NAT entries; returns the writes made.
    pub(super) fn flush_nat(&mut self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        let writes = flush_from(
            self,
            maps,
            |s| &mut s.nat.by_logical,
            |s, key| s.desired_by_logical(*key),
        )?;
        Ok(writes
            + flush_from(
                self,
                maps,
                |s| &mut s.nat.by_external_table,
                |s, key| s.desired_by_external(*key),
            )?)
    }

    /// Removes the NAT entries this state did not install; returns how many went.
    pub(super) fn sweep_nat(&self, maps: &mut impl Maps) -> Result<usize, EbpfError> {
        Ok(self.nat.by_logical.sweep(maps)? + self.nat.by_external_table.sweep(maps)?)
    }
}
