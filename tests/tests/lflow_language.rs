//! Every logical flow real ovn-northd emits for Kube-OVN-shaped topologies (VPCs, peering, static
//! and policy routes, ACLs on switches and port groups with address sets, load balancers on
//! switches and routers, a localnet underlay subnet with a VLAN tag, port security, NAT on a
//! gateway router port) parses, prints, and parses again to the same tree.

use std::net::Ipv4Addr;

use ovnbpf_agent::lflow::{Actions, parse_actions, parse_match};
use ovnbpf_tests::{
    kubeovn::{Topology, mac_for},
    ovn::OvnLab,
    require_root,
    sbdump::dump_table,
};
use serde_json::Value;

/// The rich topology; `with_gateway` adds vpc-b's distributed gateway port with SNAT and a
/// floating IP.
fn build(lab: &OvnLab, with_gateway: bool) {
    let mut topology = Topology::new();
    topology.default_vpc().unwrap();
    topology
        .peered_vpcs("10.0.1.0/24", &["vpc-a", "vpc-b"])
        .unwrap()
        .subnet("vpc-a", "subnet-a2", "10.0.2.0/24")
        .unwrap();
    // Underlay: a localnet port with a VLAN tag (Kube-OVN Vlan + ProviderNetwork).
    topology
        .subnet("ovn-cluster", "underlay", "192.168.100.0/24")
        .unwrap()
        .localnet("underlay", "provider1", 100);
    if with_gateway {
        // A distributed gateway port (external access), given SNAT and a floating IP below.
        topology.gateway_port("vpc-b", "vpc-b-external", "172.20.0.1/24", "gw-node");
    }
    topology.node_port("node1", "0a:58:64:40:00:02", Ipv4Addr::new(100, 64, 0, 2));
    for (subnet, pod, ip) in [
        ("subnet-a", "web-1", Ipv4Addr::new(10, 0, 1, 2)),
        ("subnet-a", "web-2", Ipv4Addr::new(10, 0, 1, 3)),
        ("subnet-a2", "db-1", Ipv4Addr::new(10, 0, 2, 2)),
        ("subnet-b", "api-1", Ipv4Addr::new(10, 1, 1, 2)),
        ("ovn-default", "coredns-1", Ipv4Addr::new(10, 16, 0, 2)),
        ("underlay", "vm-1", Ipv4Addr::new(192, 168, 100, 10)),
    ] {
        topology.pod(subnet, pod, "ns", &mac_for(pod), ip);
    }
    topology
        // Port security on one pod.
        .port_security("web-1.ns", "0a:58:0a:00:01:02 10.0.1.2")
        // NetworkPolicy-style port group, address set and ACLs.
        .port_group("np.web", &["web-1.ns", "web-2.ns"])
        .address_set("np.web.allow.ipv4", &["10.1.1.0/24", "10.0.2.2"])
        .acl(
            "np.web",
            "to-lport",
            2001,
            "outport == @np.web && ip4.src == $np.web.allow.ipv4 && tcp.dst == 80",
            "allow-related",
        )
        .acl(
            "np.web",
            "to-lport",
            2000,
            "outport == @np.web && ip",
            "drop",
        )
        .acl(
            "subnet-b",
            "from-lport",
            1000,
            "ip4.dst == 10.0.0.0/8 && udp",
            "reject",
        )
        // Load balancers on a switch and on a router.
        .load_balancer(
            "lb-web",
            "10.96.0.10:80",
            "10.0.1.2:8080,10.0.1.3:8080",
            "tcp",
        )
        .switch_load_balancer("subnet-a", "lb-web")
        // A dual-stack Service's IPv6 VIP on subnet-a: not compiled until issue 21.
        .service(
            "vpc-a",
            &["subnet-a"],
            "tcp",
            "[fd00:10:96::10]:80",
            "[fd00:10:1::2]:8080",
        )
        .load_balancer("lb-dns", "10.96.0.3:53", "10.16.0.2:53", "udp")
        .router_load_balancer("ovn-cluster", "lb-dns")
        // Policy routes as Kube-OVN writes them (the builder writes the subnets' allow
        // policies).
        .policy(
            "ovn-cluster",
            29000,
            "ip4.src == 10.16.0.2",
            "reroute",
            Some(Ipv4Addr::new(100, 64, 0, 2)),
        );
    if with_gateway {
        // SNAT and a floating IP on the gateway port.
        topology
            .nat("vpc-b", "snat", "172.20.0.1", "10.1.1.0/24")
            .nat("vpc-b", "dnat_and_snat", "172.20.0.50", "10.1.1.2");
    }
    topology.apply(lab).unwrap();
}

#[test]
fn every_flow_northd_emits_parses_and_round_trips() {
    require_root();
    let lab = OvnLab::start().unwrap();
    build(&lab, true);
    let flows = dump_table(&lab, "Logical_Flow").unwrap();
    let mut failures = Vec::new();
    let mut stages = std::collections::BTreeSet::new();
    for (uuid, row) in &flows {
        let stage = row["external_ids"].to_string();
        let text = |column: &str| row[column].as_str().unwrap_or_default().to_string();
        let (match_text, actions_text) = (text("match"), text("actions"));
        match parse_match(&match_text) {
            Ok(tree) => {
                let printed = tree.to_string();
                if parse_match(&printed).ok().as_ref() != Some(&tree) {
                    failures.push(format!(
                        "{uuid} match round trip: {match_text:?} → {printed:?}"
                    ));
                }
            }
            Err(error) => failures.push(format!("{uuid} {stage} match {error}: {match_text:?}")),
        }
        match parse_actions(&actions_text) {
            Ok(tree) => {
                let printed = Actions(&tree).to_string();
                if parse_actions(&printed).ok().as_ref() != Some(&tree) {
                    failures.push(format!(
                        "{uuid} actions round trip: {actions_text:?} → {printed:?}"
                    ));
                }
            }
            Err(error) => {
                failures.push(format!("{uuid} {stage} actions {error}: {actions_text:?}"))
            }
        }
        if let Some(Value::Array(pairs)) = row["external_ids"].get(1) {
            for pair in pairs {
                if pair[0] == "stage-name" {
                    stages.insert(pair[1].as_str().unwrap_or_default().to_string());
                }
            }
        }
    }
    println!(
        "{} flows in {} stages parsed and round-tripped",
        flows.len(),
        stages.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} flows failed:\n{}",
        failures.len(),
        flows.len(),
        failures.join("\n")
    );
    assert!(flows.len() > 400, "{}", flows.len());
    for stage in [
        "ls_in_acl",
        "ls_in_lb",
        "lr_in_dnat",
        "lr_out_snat",
        "ls_in_check_port_sec",
        "lr_in_policy",
    ] {
        assert!(
            stages.contains(stage),
            "the topology should exercise {stage}: {stages:?}"
        );
    }
}

/// The L2/L3 forwarding stages: every flow in them must compile or be neutral.
const FORWARDING_STAGES: &[&str] = &[
    "ls_in_check_port_sec",
    "ls_in_apply_port_sec",
    "ls_in_arp_rsp",
    "ls_in_l2_lkup",
    "ls_in_l2_unknown",
    "ls_out_check_port_sec",
    "ls_out_apply_port_sec",
    "lr_in_admission",
    "lr_in_lookup_neighbor",
    "lr_in_learn_neighbor",
    "lr_in_ip_input",
    "lr_in_ip_routing_pre",
    "lr_in_ip_routing",
    "lr_in_policy",
    "lr_in_arp_resolve",
    "lr_in_arp_request",
    "lr_out_delivery",
];

#[test]
fn coverage_shows_forwarding_stages_compiled_and_lists_the_rest() {
    require_root();
    // Gateway ports (chassis-resident admission, NAT addresses) come with NAT, which is not in
    // the datapath yet; their flows are reported unsupported, so they stay out of this topology.
    let lab = OvnLab::start().unwrap();
    build(&lab, false);
    let stdout = ovnbpfctl(&lab, &["lflow", "coverage", "--json", "--unsupported"]);
    println!("{stdout}");
    let json_line = stdout.lines().next().unwrap_or_default();
    let coverage: Value = serde_json::from_str(json_line).unwrap();
    let mut gaps = Vec::new();
    for stage in FORWARDING_STAGES {
        let counts = &coverage[stage];
        assert!(
            counts["flows"].as_u64().unwrap_or(0) > 0,
            "{stage}: no flows"
        );
        if counts["unsupported"].as_u64() != Some(0) {
            gaps.push(format!("{stage}: {}", counts["reasons"]));
        }
    }
    assert!(
        gaps.is_empty(),
        "forwarding flows unsupported:\n{}",
        gaps.join("\n")
    );
    // Without NAT, the SNAT stage holds only `next;` flows: what the datapath does anyway.
    assert_eq!(
        coverage["lr_out_snat"]["unsupported"], 0,
        "{}",
        coverage["lr_out_snat"]
    );
    assert!(coverage["lr_out_snat"]["neutral"].as_u64().unwrap_or(0) > 0);
    // The ACL stages and their conntrack compile whole: the NetworkPolicy (port group, address
    // set, allow-related and drop), the switch ACL with `reject`, northd's fixed flows.
    for stage in [
        "ls_in_pre_acl",
        "ls_out_pre_acl",
        "ls_in_acl_hint",
        "ls_out_acl_hint",
        "ls_in_acl",
        "ls_out_acl",
        "ls_in_stateful",
        "ls_out_stateful",
    ] {
        let counts = &coverage[stage];
        assert_eq!(counts["unsupported"], 0, "{stage}: {counts}");
        // The hint stage is northd's standard table, folded into the rules: neutral.
        let kind = if stage.ends_with("_hint") {
            "neutral"
        } else {
            "compiled"
        };
        assert!(counts[kind].as_u64().unwrap_or(0) > 0, "{stage}: {counts}");
    }
    // The switch's load balancers compile (VIPs, their conntrack, the hairpin stages) but
    // for session affinity's learning; the rest is listed with reasons.
    for stage in [
        "ls_in_lb",
        "ls_in_pre_stateful",
        "ls_in_pre_hairpin",
        "ls_in_nat_hairpin",
    ] {
        let counts = &coverage[stage];
        assert!(
            counts["compiled"].as_u64().unwrap_or(0) + counts["neutral"].as_u64().unwrap_or(0) > 1,
            "{stage}: {counts}"
        );
    }
    for stage in ["ls_in_lb", "ls_in_pre_stateful", "lr_in_dnat"] {
        let counts = &coverage[stage];
        assert!(
            counts["unsupported"].as_u64().unwrap_or(0) > 0,
            "{stage}: {counts}"
        );
        let reasons = counts["reasons"].as_object().unwrap();
        assert!(
            reasons
                .keys()
                .all(|r| r.ends_with("is not in the datapath yet")),
            "{stage}: {counts}"
        );
    }
}

/// What `ovnbpfctl ARGS --remote <the lab's Southbound>` prints (it must succeed).
fn ovnbpfctl(lab: &OvnLab, args: &[&str]) -> String {
    let remote = lab.unix_remote(ovnbpf_tests::ovn::Db::Southbound);
    let output = std::process::Command::new(ovnbpf_tests::workspace_binary("ovnbpfctl"))
        .args(args)
        .args(["--remote", &remote])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "ovnbpfctl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `ovnbpfctl trace` on the rich topology, as JSON.
fn trace(lab: &OvnLab, microflow: &str) -> Value {
    serde_json::from_str(&ovnbpfctl(lab, &["trace", "--json", microflow])).unwrap()
}

#[test]
fn trace_names_the_unsupported_flows_on_its_path_and_only_those() {
    require_root();
    let lab = OvnLab::start().unwrap();
    build(&lab, false);
    // web-1 sends from the MAC its port security names.
    let (web1, web2, vm1) = ("0a:58:0a:00:01:02", mac_for("web-2"), mac_for("vm-1"));
    // web-1 → web-2 crosses subnet-a: its NetworkPolicy admits only TCP 80 from its address
    // set, so the ping is dropped where web-2's switch sends it out (conntrack reports an
    // established connection, ovn-trace's default, which the drop ACL marks blocked). The
    // IPv6 VIP on the switch is not compiled: the trace says OVN may answer otherwise there.
    let across_policy = trace(
        &lab,
        &format!(
            "inport == \"web-1.ns\" && eth.src == {web1} && eth.dst == {web2} && \
             ip4.src == 10.0.1.2 && ip4.dst == 10.0.1.3 && ip.ttl == 64 && icmp4.type == 8 && \
             icmp4.code == 0"
        ),
    );
    println!("{across_policy:#}");
    assert_eq!(
        across_policy["outputs"],
        serde_json::json!([]),
        "{across_policy}"
    );
    let steps = across_policy["steps"].to_string();
    assert!(
        steps.contains("dropped: ls_out_acl priority 3000"),
        "{steps}"
    );
    let unsupported = across_policy["unsupported"].as_array().unwrap();
    assert!(
        unsupported
            .iter()
            .all(|report| report["datapath_name"] == "subnet-a"),
        "{unsupported:?}"
    );
    let mut stages = Vec::new();
    for report in unsupported {
        let stage = report["stage"].as_str().unwrap();
        stages.push(stage);
        // The flows named are the Southbound's, in that stage, and none only says `next;`.
        let flows = report["flows"].as_array().unwrap();
        assert!(!flows.is_empty(), "{report}");
        for flow in flows {
            let get = |column: &str| {
                lab.sbctl(&["get", "Logical_Flow", flow.as_str().unwrap(), column])
                    .unwrap()
                    .trim()
                    .trim_matches('"')
                    .to_string()
            };
            assert_eq!(get("external_ids:stage-name"), stage, "{flow}");
            assert_ne!(get("actions"), "next;", "{flow}");
        }
    }
    // The IPv6 VIP (its balancing and its conntrack); no ACL stage, nothing of the balancers
    // that compile.
    stages.sort_unstable();
    stages.dedup();
    assert_eq!(
        stages,
        ["ls_in_lb", "ls_in_pre_stateful"],
        "{unsupported:?}"
    );
    assert!(
        stages.iter().all(|stage| !stage.contains("acl")),
        "{stages:?}"
    );
    // web-2 opens a connection to lb-web's VIP: the trace names the VIP's backends and the one
    // the kernel's hash picks, and the packet goes to it through vpc-a's router.
    let router = mac_for("vpc-a-subnet-a");
    let to_service = trace(
        &lab,
        &format!(
            "inport == \"web-2.ns\" && eth.src == {web2} && eth.dst == {router} && \
             ip4.src == 10.0.1.3 && ip4.dst == 10.96.0.10 && ip.ttl == 64 && tcp.src == 40000 && \
             tcp.dst == 80"
        ),
    );
    println!("{to_service:#}");
    let decision = &to_service["balanced"][0];
    assert_eq!(
        decision["backends"],
        serde_json::json!(["10.0.1.2:8080", "10.0.1.3:8080"]),
        "{to_service}"
    );
    let (ip, port) = decision["chosen"]
        .as_str()
        .unwrap()
        .split_once(':')
        .unwrap();
    // Translated, routed back into subnet-a to the backend, whose NetworkPolicy (np.web admits
    // TCP 80 only) judges the backend's port and drops it.
    let steps = to_service["steps"].to_string();
    assert!(
        steps.contains(&format!("10.0.1.3 → {ip} ttl 63 TCP 40000 → {port}")),
        "{steps}"
    );
    assert!(
        steps.contains("dropped: ls_out_acl priority 3000"),
        "{steps}"
    );
    // vm-1 asks for its gateway on the underlay switch, which has no ACL or load balancer:
    // northd's default flows there only say `next;` or need register bits nothing on the switch
    // sets (`reg0[2] == 1 → ct_lb_mark;`), so there is nothing to warn about.
    let plain = trace(
        &lab,
        &format!(
            "inport == \"vm-1.ns\" && eth.src == {vm1} && eth.dst == ff:ff:ff:ff:ff:ff && \
             arp.op == 1 && arp.sha == {vm1} && arp.spa == 192.168.100.10 && \
             arp.tha == 00:00:00:00:00:00 && arp.tpa == 192.168.100.1"
        ),
    );
    println!("{plain:#}");
    assert_eq!(plain["outputs"][0]["port"], "vm-1.ns", "{plain}");
    assert_eq!(plain["unsupported"], serde_json::json!([]), "{plain}");
}
