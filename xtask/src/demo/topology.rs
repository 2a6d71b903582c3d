//! The built-in topology of `cargo xtask demo` and `cargo xtask lab up --demo`: Kube-OVN's default
//! VPC plus two custom VPCs whose subnets overlap (10.0.1.0/24 in both), with two pods each.

use std::net::Ipv4Addr;

use anyhow::Result;
use ovnbpf_tests::kubeovn::{Topology, mac_for};

/// (vpc, subnet, namespace, pods) of the demo.
pub const VPCS: [(&str, &str, &str, [&str; 2]); 2] = [
    ("vpc-a", "subnet-a", "team-a", ["web-a", "db-a"]),
    ("vpc-b", "subnet-b", "team-b", ["web-b", "db-b"]),
];
pub const SHARED_CIDR: &str = "10.0.1.0/24";

pub fn build() -> Result<Topology> {
    let mut topology = Topology::new();
    topology.default_vpc()?;
    for (vpc, subnet, namespace, pods) in VPCS {
        topology.vpc_with_subnet(vpc, subnet, SHARED_CIDR)?;
        for (index, pod) in (2_u8..).zip(pods) {
            topology.pod(
                subnet,
                pod,
                namespace,
                &mac_for(pod),
                Ipv4Addr::new(10, 0, 1, index),
            );
        }
    }
    Ok(topology)
}
