//! The built-in topology of `cargo xtask demo` and `cargo xtask lab up --demo`: Kube-OVN's default
//! VPC plus two custom VPCs whose subnets overlap (10.0.1.0/24 in both), with two pods each and a
//! Service each (the same ClusterIP in both, each balanced to its own VPC's db pod). vpc-a's
//! subnet is dual-stack, as Kube-OVN builds one (`cidrBlock: "10.0.1.0/24,fd00:10:1::/64"`), its
//! pods with an address of each family.

use std::net::{Ipv4Addr, Ipv6Addr};

use anyhow::Result;
use ovnbpf_tests::kubeovn::{Topology, mac_for};

/// (vpc, subnet, namespace, pods) of the demo.
pub const VPCS: [(&str, &str, &str, [&str; 2]); 2] = [
    ("vpc-a", "subnet-a", "team-a", ["web-a", "db-a"]),
    ("vpc-b", "subnet-b", "team-b", ["web-b", "db-b"]),
];
pub const SHARED_CIDR: &str = "10.0.1.0/24";
/// vpc-a's IPv6 block: its subnet is dual-stack.
pub const DUAL_STACK_VPC: &str = "vpc-a";
pub const IPV6_CIDR: &str = "fd00:10:1::/64";

/// A demo pod's IPv6 address in vpc-a (its IPv4 one's last byte in the last group).
pub fn ipv6_of(index: u8) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x10, 1, 0, 0, 0, 0, u16::from(index))
}
/// The ClusterIP of each VPC's Service (the same in both: Services of VPCs overlap too), whose
/// backend is the VPC's db pod.
pub const SERVICE_VIP: &str = "10.96.0.10";
pub const SERVICE_PORT: u16 = 80;
pub const TARGET_PORT: u16 = 8080;

pub fn build() -> Result<Topology> {
    let mut topology = Topology::new();
    topology.default_vpc()?;
    for (vpc, subnet, namespace, pods) in VPCS {
        let dual_stack = vpc == DUAL_STACK_VPC;
        let cidr = if dual_stack {
            format!("{SHARED_CIDR},{IPV6_CIDR}")
        } else {
            SHARED_CIDR.to_string()
        };
        topology.vpc_with_subnet(vpc, subnet, &cidr)?;
        for (index, pod) in (2_u8..).zip(pods) {
            let ip = Ipv4Addr::new(10, 0, 1, index);
            if dual_stack {
                topology.dual_stack_pod(
                    subnet,
                    pod,
                    namespace,
                    &mac_for(pod),
                    (ip, ipv6_of(index)),
                );
            } else {
                topology.pod(subnet, pod, namespace, &mac_for(pod), ip);
            }
        }
        // A Service per VPC, as kube-ovn-controller writes it: its balancer on the subnet.
        topology.service(
            vpc,
            &[subnet],
            "tcp",
            &format!("{SERVICE_VIP}:{SERVICE_PORT}"),
            &format!("10.0.1.3:{TARGET_PORT}"),
        );
    }
    Ok(topology)
}
