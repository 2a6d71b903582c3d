//! Masquerading of pods' traffic out of the cluster (Kube-OVN's `natOutgoing` on distributed
//! gateways): traffic from a NAT-outgoing subnet that the default VPC's policy rerouted to this
//! node's `ovn0` and that leaves for a destination outside the cluster's subnets takes the
//! node's address, as kube-ovn-cni's `OVN-POSTROUTING` rule `-m set --match-set
//! ovn40subnets-nat src -m set ! --match-set ovn40subnets dst -j MASQUERADE` does.
//!
//! The rules are one nftables table the agent owns, `ip ovnbpf`, written whole by `nft -f -`
//! in one transaction (the table replaced atomically, so no packet sees a half-written set);
//! `nft` is the field's tool for this (Kube-OVN shells out to iptables the same way). Blocking:
//! call from a blocking task.

use std::{io::Write, process::Command};

use crate::net::Ipv4Prefix;

/// The agent's nftables table (family `ip`).
pub const TABLE: &str = "ovnbpf";

/// Why the rules could not be written.
#[derive(Debug, thiserror::Error)]
pub enum NatError {
    #[error("running nft: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("nft refused the rules: {0}")]
    Refused(String),
}

/// What the table holds: the cluster's subnets (never masqueraded to) and the NAT-outgoing ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatRules {
    pub cluster: Vec<Ipv4Prefix>,
    pub nat_outgoing: Vec<Ipv4Prefix>,
}

impl NatRules {
    /// The `nft -f` script that replaces the table with these rules.
    #[must_use]
    pub fn script(&self) -> String {
        let elements = |prefixes: &[Ipv4Prefix]| {
            if prefixes.is_empty() {
                String::new()
            } else {
                let list: Vec<String> = prefixes
                    .iter()
                    .map(|p| format!("{}/{}", p.network, p.length))
                    .collect();
                format!(" elements = {{ {} }};", list.join(", "))
            }
        };
        format!(
            "table ip {TABLE}\ndelete table ip {TABLE}\ntable ip {TABLE} {{\n\
             \tset cluster_subnets {{ type ipv4_addr; flags interval;{} }}\n\
             \tset nat_outgoing_subnets {{ type ipv4_addr; flags interval;{} }}\n\
             \tchain postrouting {{\n\
             \t\ttype nat hook postrouting priority srcnat; policy accept;\n\
             \t\tip saddr @nat_outgoing_subnets ip daddr != @cluster_subnets counter masquerade\n\
             \t}}\n}}\n",
            elements(&self.cluster),
            elements(&self.nat_outgoing),
        )
    }
}

/// Replaces the agent's table with `rules`.
pub fn apply(rules: &NatRules) -> Result<(), NatError> {
    run_nft(&rules.script())
}

/// Removes the agent's table; absent is fine.
pub fn remove() -> Result<(), NatError> {
    run_nft(&format!("table ip {TABLE}\ndelete table ip {TABLE}\n"))
}

fn run_nft(script: &str) -> Result<(), NatError> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(NatError::Spawn)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(NatError::Spawn)?;
    }
    let output = child.wait_with_output().map_err(NatError::Spawn)?;
    if output.status.success() {
        Ok(())
    } else {
        Err(NatError::Refused(
            String::from_utf8_lossy(&output.stderr).trim().to_string(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn the_script_replaces_the_table_and_masquerades_only_nat_outgoing_sources() {
        let prefix = |a, b, length| Ipv4Prefix {
            network: Ipv4Addr::new(a, b, 0, 0),
            length,
        };
        let rules = NatRules {
            cluster: vec![prefix(10, 16, 16), prefix(100, 64, 16)],
            nat_outgoing: vec![prefix(10, 16, 16)],
        };
        let script = rules.script();
        // Created if absent, so that the delete never fails, then written whole.
        assert!(script.starts_with("table ip ovnbpf\ndelete table ip ovnbpf\ntable ip ovnbpf {"));
        assert!(script.contains(
            "set cluster_subnets { type ipv4_addr; flags interval; elements = { 10.16.0.0/16, \
             100.64.0.0/16 }; }"
        ));
        assert!(script.contains(
            "set nat_outgoing_subnets { type ipv4_addr; flags interval; elements = { \
             10.16.0.0/16 }; }"
        ));
        assert!(script.contains(
            "ip saddr @nat_outgoing_subnets ip daddr != @cluster_subnets counter masquerade"
        ));
        // No NAT-outgoing subnet: an empty set, which nft takes without elements.
        let none = NatRules {
            cluster: rules.cluster.clone(),
            nat_outgoing: Vec::new(),
        };
        assert!(
            none.script()
                .contains("set nat_outgoing_subnets { type ipv4_addr; flags interval; }")
        );
    }
}
