//! Router policies (`lr_in_policy`: Kube-OVN's node and subnet policies, `Vpc.spec.policyRoutes`)
//! in the kernel's two tries, `POLICIES_BY_DESTINATION` and `POLICIES_BY_SOURCE`. OVN takes the
//! highest-priority policy whose prefixes contain the packet's addresses; a trie returns the
//! longest prefix that contains one address. Prefixes containing one address are nested, so the
//! policies matching an address are exactly those at or above its longest prefix: the agent
//! stores at each prefix the best policy at or above it, and the kernel compares the winners of
//! the two tries by priority. A policy matching both a source and a destination prefix fits
//! neither trie: it goes to the router's short list in `POLICY_PAIRS`, highest priority first,
//! which the kernel scans after the tries (a router with more than the kernel scans is declined:
//! reported, dropped and counted). Owns the policies and their desired values; a change at a
//! prefix marks that prefix and the ones nested in it, a change of a pair the router's list.

use std::collections::{BTreeMap, HashMap, HashSet};

use ovnbpf_common::{
    MAX_PAIR_POLICIES, POLICY_ALLOW, POLICY_DROP, POLICY_REROUTE, PairPolicy, PairPolicyKey,
    PolicyEntry, RouteEntry,
    maps::{PoliciesByDestination, PoliciesBySource, PolicyPairs},
};

use super::{
    super::tables::{Table, TableKey},
    L3State,
};
use crate::pipeline::ir::{EcmpStage, L4Match, PolicyVerdict, Prefix, RouteSelector};

/// One policy as the tries need it: its priority and verdict.
type Policy = (u16, PolicyVerdict);

/// One router's policies of one selector: (network, length) → the policies at exactly that
/// prefix, ordered so that the prefixes nested in one are a range.
type ByPrefix = BTreeMap<(u32, u8), Vec<Policy>>;

/// A policy matching both a source and a destination prefix (0.0.0.0/0 where it has none),
/// or transport ports.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PairRule {
    source: Prefix,
    destination: Prefix,
    l4: Option<L4Match>,
    policy: Policy,
}

impl TableKey<PolicyPairs> for PairPolicyKey {
    fn slot(&self) -> PairPolicyKey {
        *self
    }
}

/// The policies of every router, by the address they match.
#[derive(Debug, Default)]
pub(super) struct Policies {
    /// Router → its policies matching both a source and a destination prefix, highest
    /// priority first (equal priorities in the order they came).
    pairs: HashMap<u32, Vec<PairRule>>,
    pub(super) pair_table: Table<PolicyPairs, PairPolicyKey>,
    /// (router, selector) → its policies by prefix.
    at: HashMap<(u32, RouteSelector), ByPrefix>,
    /// Output port of a reroute → the slots whose policies reroute through it.
    by_port: HashMap<String, HashSet<PolicySlot>>,
    /// Policies per router (the kernel looks policies up only for routers that have some).
    count: HashMap<u32, usize>,
    pub(super) destination_table: Table<PoliciesByDestination, (u32, Prefix)>,
    pub(super) source_table: Table<PoliciesBySource, (u32, Prefix)>,
}

/// A router's policy slot: the router, what the prefix is matched against, and the prefix.
pub(super) type PolicySlot = (u32, RouteSelector, Prefix);

impl Policies {
    pub(super) fn pending(&self) -> usize {
        self.destination_table.pending() + self.source_table.pending() + self.pair_table.pending()
    }

    /// How many pair policies `router` has (the kernel scans at most [`MAX_PAIR_POLICIES`]).
    pub(super) fn pair_count(&self, router: u32) -> usize {
        self.pairs.get(&router).map_or(0, Vec::len)
    }

    /// Whether `router` has more pair policies than the kernel scans.
    pub(super) fn too_many_pairs(&self, router: u32) -> bool {
        self.pair_count(router) > MAX_PAIR_POLICIES as usize
    }

    /// Adds or removes `router`'s `policy` matching `source`, `destination` and `l4`.
    pub(super) fn take_pair(
        &mut self,
        router: u32,
        (source, destination, l4): (Prefix, Prefix, Option<L4Match>),
        policy: &Policy,
        added: bool,
    ) {
        let rule = PairRule {
            source,
            destination,
            l4,
            policy: policy.clone(),
        };
        let list = self.pairs.entry(router).or_default();
        let old = list.len();
        let count = self.count.entry(router).or_default();
        if added {
            list.push(rule);
            // Stable: equal priorities keep their order.
            list.sort_by_key(|rule| std::cmp::Reverse(rule.policy.0));
            *count += 1;
        } else if let Some(index) = list.iter().position(|r| *r == rule) {
            list.remove(index);
            *count = count.saturating_sub(1);
        }
        let new = list.len();
        if list.is_empty() {
            self.pairs.remove(&router);
        }
        if *count == 0 {
            self.count.remove(&router);
        }
        self.mark_pairs(router, old.max(new));
    }

    fn mark_pairs(&mut self, router: u32, count: usize) {
        for index in 0..count.min(MAX_PAIR_POLICIES as usize) as u32 {
            self.pair_table.mark(PairPolicyKey { router, index });
        }
    }

    /// Whether `router` has policies.
    pub(super) fn any(&self, router: u32) -> bool {
        self.count.contains_key(&router)
    }

    /// Adds or removes `policy` of `router` at `(selector, prefix)`.
    pub(super) fn take(
        &mut self,
        (router, selector, prefix): PolicySlot,
        policy: &Policy,
        added: bool,
    ) {
        let at = self.at.entry((router, selector)).or_default();
        let key = (u32::from(prefix.network), prefix.length);
        let list = at.entry(key).or_default();
        let count = self.count.entry(router).or_default();
        if added {
            list.push(policy.clone());
            *count += 1;
        } else if let Some(index) = list.iter().position(|p| p == policy) {
            list.remove(index);
            *count = count.saturating_sub(1);
        }
        if list.is_empty() {
            at.remove(&key);
        }
        if *count == 0 {
            self.count.remove(&router);
        }
        if let PolicyVerdict::Reroute { port, .. } = &policy.1 {
            let slots = self.by_port.entry(port.clone()).or_default();
            if added {
                slots.insert((router, selector, prefix));
            } else if !self.at.get(&(router, selector)).is_some_and(|at| {
                at.get(&key)
                    .is_some_and(|list| list.iter().any(|p| rerouted_via(p, port)))
            }) {
                slots.remove(&(router, selector, prefix));
            }
            if slots.is_empty() {
                self.by_port.remove(port);
            }
        }
        self.mark_nested((router, selector, prefix));
    }

    /// Marks `slot` and every slot of its router and selector nested in it (their best policy
    /// may be this one).
    fn mark_nested(&mut self, (router, selector, prefix): PolicySlot) {
        let start = u32::from(prefix.network) & prefix_mask(prefix.length);
        let end = start | !prefix_mask(prefix.length);
        let nested: Vec<Prefix> = self
            .at
            .get(&(router, selector))
            .into_iter()
            .flat_map(|at| at.range((start, 0)..=(end, 32)))
            .filter(|((_, length), _)| *length >= prefix.length)
            .map(|(&(network, length), _)| Prefix {
                network: network.into(),
                length,
            })
            .chain(std::iter::once(prefix))
            .collect();
        for nested in nested {
            self.mark((router, selector, nested));
        }
    }

    fn mark(&mut self, (router, selector, prefix): PolicySlot) {
        match selector {
            RouteSelector::Destination => self.destination_table.mark((router, prefix)),
            RouteSelector::Source => self.source_table.mark((router, prefix)),
        }
    }

    /// Marks the slots whose policies reroute through `port` (and every router's pair list,
    /// short: ports change rarely).
    pub(super) fn mark_port(&mut self, port: &str) {
        let routers: Vec<(u32, usize)> = self
            .pairs
            .iter()
            .map(|(router, list)| (*router, list.len()))
            .collect();
        for (router, count) in routers {
            self.mark_pairs(router, count);
        }
        let slots: Vec<PolicySlot> = self
            .by_port
            .get(port)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        for slot in slots {
            self.mark(slot);
        }
    }

    /// The best policy for addresses within `prefix` (the highest priority at or above it;
    /// the last added on a tie), if a policy sits at exactly `prefix`.
    fn best(&self, (router, selector, prefix): PolicySlot) -> Option<&Policy> {
        let at = self.at.get(&(router, selector))?;
        let network = u32::from(prefix.network);
        at.get(&(network, prefix.length))?;
        (0..=prefix.length)
            .filter_map(|length| at.get(&(network & prefix_mask(length), length)))
            .flatten()
            .max_by_key(|(priority, _)| *priority)
    }
}

fn rerouted_via(policy: &Policy, via: &str) -> bool {
    matches!(&policy.1, PolicyVerdict::Reroute { port, .. } if port == via)
}

/// The netmask of a prefix length (lengths over 32 count as 32).
fn prefix_mask(length: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(length.min(32)))
        .unwrap_or(0)
}

impl L3State {
    /// What the kernel stores at `slot`: the best policy for addresses within it, a reroute
    /// resolved to the port's datapath (an unknown port leaves `next_datapath` 0: dropped).
    pub(super) fn desired_policy(&self, slot: PolicySlot) -> Option<PolicyEntry> {
        let (priority, verdict) = self.policies.best(slot)?;
        Some(self.policy_entry(*priority, verdict))
    }

    /// What the kernel stores at index `key.index` of a router's pair list.
    pub(super) fn desired_pair(&self, key: &PairPolicyKey) -> Option<PairPolicy> {
        let rule = self
            .policies
            .pairs
            .get(&key.router)?
            .get(key.index as usize)?;
        let (priority, verdict) = &rule.policy;
        let network = |prefix: &Prefix| {
            let mask = prefix_mask(prefix.length);
            ((u32::from(prefix.network) & mask).to_be(), mask.to_be())
        };
        let (source, source_mask) = network(&rule.source);
        let (destination, destination_mask) = network(&rule.destination);
        let all = (0, u16::MAX);
        let [source_ports, destination_ports] = [
            rule.l4.and_then(|l4| l4.source_ports),
            rule.l4.and_then(|l4| l4.destination_ports),
        ]
        .map(|range| {
            let (low, high) = range.unwrap_or(all);
            [low, high]
        });
        Some(PairPolicy {
            source,
            source_mask,
            destination,
            destination_mask,
            protocol: rule.l4.map_or(0, |l4| l4.protocol),
            reserved: [0; 3],
            source_ports,
            destination_ports,
            policy: self.policy_entry(*priority, verdict),
        })
    }

    /// A policy as the kernel stores it: a reroute resolved to the port's datapath (an unknown
    /// port leaves `next_datapath` 0: dropped).
    fn policy_entry(&self, priority: u16, verdict: &PolicyVerdict) -> PolicyEntry {
        let (verdict, route) = match verdict {
            PolicyVerdict::Allow => (POLICY_ALLOW, RouteEntry::default()),
            PolicyVerdict::Drop => (POLICY_DROP, RouteEntry::default()),
            PolicyVerdict::Reroute {
                nexthop,
                source_ip,
                source_mac,
                port,
            } => (
                POLICY_REROUTE,
                self.resolve_output(port, Some(*nexthop), *source_ip, *source_mac)
                    .unwrap_or_default(),
            ),
            PolicyVerdict::RerouteEcmp { group, members } => (
                POLICY_REROUTE,
                super::ecmp::selecting(
                    super::ecmp::group_id(EcmpStage::Policy, *group),
                    members.len(),
                    0,
                ),
            ),
        };
        PolicyEntry {
            priority,
            verdict,
            reserved: 0,
            route,
        }
    }
}
