//! Address sets in matches (`$name`), expanded as ovn-controller expands them before it
//! translates a flow: each `$name` becomes the set `{…}` of the Address_Set row's addresses.
//! Kube-OVN's distributed gateways name one per subnet and node (`$<subnet>.<node>_ip4`, the
//! address set northd derives from the port group of that node's pods), so a pod joining a node
//! changes one row here. The compiler keeps which flows name which set ([`FlowsBySet`]) and
//! recompiles only those; the reference-counted IR then yields only the entries the change added
//! or removed. Reads the SB replica; touches nothing else.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use crate::{
    lflow::{
        ast::{Expr, Value},
        lexer::{Token, tokenize},
    },
    sb::Southbound,
};

/// Replaces every `$name` in `expr` by the addresses of the Address_Set `name`, and lists in
/// `used` each set named (also the ones that are missing, so that their arrival recompiles the
/// flow). A missing set or an address that is not a constant is an error naming it: the flow's
/// meaning is then unknown.
///
/// `keep_ip`: sets compared with IP addresses (`ip4.src`, `ip4.dst`, `ip6.src`, `ip6.dst`) are
/// left by name and not listed (the ACL stages: their members are IR entries of their own).
pub(super) fn expand(
    expr: &mut Expr,
    sb: &Southbound,
    used: &mut Vec<String>,
    keep_ip: bool,
) -> Result<(), String> {
    match expr {
        Expr::Not(inner) => expand(inner, sb, used, keep_ip),
        Expr::And(terms) | Expr::Or(terms) => {
            // Every set is listed even when an earlier one fails.
            let mut outcome = Ok(());
            for term in terms {
                let expanded = expand(term, sb, used, keep_ip);
                if outcome.is_ok() {
                    outcome = expanded;
                }
            }
            outcome
        }
        Expr::Compare {
            values, set, field, ..
        } => {
            if !values.iter().any(|v| matches!(v, Value::AddressSet(_))) {
                return Ok(());
            }
            if keep_ip
                && field.slice.is_none()
                && ["ip4.src", "ip4.dst", "ip6.src", "ip6.dst"].contains(&field.name.as_str())
            {
                return Ok(());
            }
            let mut outcome = Ok(());
            let mut expanded = Vec::with_capacity(values.len());
            for value in values.drain(..) {
                match value {
                    Value::AddressSet(name) => {
                        let addresses = addresses_of(sb, &name);
                        used.push(name);
                        match addresses {
                            Ok(addresses) => expanded.extend(addresses),
                            Err(reason) if outcome.is_ok() => outcome = Err(reason),
                            Err(_) => {}
                        }
                    }
                    other => expanded.push(other),
                }
            }
            *values = expanded;
            *set = true;
            outcome
        }
        Expr::Bool(_) | Expr::Field(_) | Expr::Range { .. } | Expr::Function { .. } => Ok(()),
    }
}

/// The addresses of the Address_Set `name`, each as a match constant.
fn addresses_of(sb: &Southbound, name: &str) -> Result<Vec<Value>, String> {
    let set = sb
        .address_set(name)
        .ok_or_else(|| format!("address set ${name} is not in the Southbound"))?;
    set.addresses
        .iter()
        .map(|address| match tokenize(address).as_deref() {
            Ok([(_, Token::Constant(constant))]) => Ok(Value::Constant(constant.clone())),
            _ => Err(format!(
                "address set ${name} holds {address:?}, which is not an address"
            )),
        })
        .collect()
}

/// Which flows name which address set, and each set row's name (to find a deleted row's flows).
#[derive(Debug, Default)]
pub(super) struct FlowsBySet {
    flows: HashMap<String, HashSet<Uuid>>,
    names: HashMap<Uuid, String>,
}

impl FlowsBySet {
    pub(super) fn add(&mut self, flow: Uuid, sets: &[String]) {
        for set in sets {
            self.flows.entry(set.clone()).or_default().insert(flow);
        }
    }

    pub(super) fn remove(&mut self, flow: Uuid, sets: &[String]) {
        for set in sets {
            if let Some(flows) = self.flows.get_mut(set) {
                flows.remove(&flow);
                if flows.is_empty() {
                    self.flows.remove(set);
                }
            }
        }
    }

    /// The flows to recompile after Address_Set row `uuid` changed (its name may have changed
    /// too, or the row gone): those naming its old or its new name; and both names.
    pub(super) fn changed(
        &mut self,
        sb: &Southbound,
        uuid: Uuid,
    ) -> (Vec<Uuid>, Option<String>, Option<String>) {
        let old = self.names.remove(&uuid);
        let new = sb
            .row::<crate::sb::rows::AddressSet>(&uuid)
            .map(|set| set.name);
        if let Some(name) = &new {
            self.names.insert(uuid, name.clone());
        }
        let flows = [&old, &new]
            .into_iter()
            .flatten()
            .flat_map(|name| self.flows.get(name).into_iter().flatten().copied())
            .collect();
        (flows, old, new)
    }

    /// Forgets the set rows' names and learns them again from `sb` (a full rebuild).
    pub(super) fn relearn_names(&mut self, sb: &Southbound) {
        self.names = sb
            .rows::<crate::sb::rows::AddressSet>()
            .map(|set| (set.uuid, set.name))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lflow::parse_match;

    #[test]
    fn missing_sets_are_errors_that_still_list_every_set_named() {
        let sb = Southbound::new();
        let mut expr = parse_match("ip4.src == $a_ip4 && ip4.dst == $b_ip4").unwrap();
        let mut used = Vec::new();
        let error = expand(&mut expr, &sb, &mut used, false).unwrap_err();
        assert_eq!(error, "address set $a_ip4 is not in the Southbound");
        assert_eq!(used, ["a_ip4", "b_ip4"]);
    }
}
