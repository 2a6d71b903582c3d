//! The differential oracle for ACLs: Kube-OVN NetworkPolicies (port groups, address sets,
//! allow-related ACLs, default deny both ways, the node's allow ACLs) built through ovn-nbctl as
//! kube-ovn-controller builds them, and for generated packets under each conntrack state
//! (`ovn-trace --ct`: new, established, reply, related, invalid), the evaluator's verdict must
//! equal `ovn-trace --minimal`'s. Every flow of the ACL and conntrack stages must compile. Run
//! twice: with NB_Global's options as kube-ovn-controller writes them (`use_ct_inv_match=false`,
//! northd's flows never look at `ct.inv`) and as plain OVN has them.
//!
//! Topology: the default VPC, `ovn-default` (10.16.0.0/16) with web0, web1, db0, client0 and a
//! second subnet `apps` (10.17.0.0/16, routed) with client1 and other; node1's join port.
//! Policies in namespace `ns`: `web` (web0, web1) admits TCP 80 from client0 and `apps` except
//! `other`, and UDP 5000–5010 from db0; `db` (db0) admits nothing and may reach web0 on TCP 5432
//! only; `client` (client1) may send nothing. The node may reach web0 and db0 (and they answer).
//!
//! Then the kernel: the same IR installed by the backend, each case replayed through `from_pod`
//! (and the receiver's `from_uplink`) from an empty connection table, the evaluator assuming
//! new connections; then its reply, the evaluator assuming what the kernel committed for the
//! first packet (replied where both ends' zones committed it, new or invalid where not).

mod common;
mod oracle_kernel;

use std::net::Ipv4Addr;

use ovnbpf_agent::pipeline::{
    classify::{acl_fails_closed, is_acl_stage},
    eval::{
        CtAssumptions, Evaluator,
        packet::{L3, L4, Packet},
    },
};
use ovnbpf_common::ct;
use ovnbpf_tests::{
    kubeovn::{DEFAULT_VPC, PolicyPort, PolicyRule, SubnetAcl, Topology, mac_for},
    ovn::OvnLab,
    require_root,
};

use common::trace_oracle::{self, TraceOptions};

struct Pod {
    port: String,
    switch: &'static str,
    mac: [u8; 6],
    ip: Ipv4Addr,
}

const PODS: &[(&str, &str, [u8; 4])] = &[
    ("web0", "ovn-default", [10, 16, 0, 10]),
    ("web1", "ovn-default", [10, 16, 0, 11]),
    ("db0", "ovn-default", [10, 16, 0, 12]),
    ("client0", "ovn-default", [10, 16, 0, 13]),
    ("client1", "apps", [10, 17, 0, 10]),
    ("other", "apps", [10, 17, 0, 11]),
];

const NODE_IP: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 2);
const NODE_MAC: &str = "0a:58:64:40:00:02";

fn mac(text: &str) -> [u8; 6] {
    ovnbpf_agent::lflow::parse_mac(text).unwrap()
}

fn build(lab: &OvnLab, globals: Globals) -> Vec<Pod> {
    let mut topology = Topology::new();
    if globals == Globals::PlainOvn {
        topology.plain_ovn_globals();
    }
    topology.default_vpc().unwrap();
    topology
        .subnet(DEFAULT_VPC, "apps", "10.17.0.0/16")
        .unwrap();
    let mut pods = Vec::new();
    for (name, switch, ip) in PODS {
        let ip = Ipv4Addr::from(*ip);
        topology.pod(switch, name, "ns", &mac_for(name), ip);
        pods.push(Pod {
            port: format!("{name}.ns"),
            switch,
            mac: mac(&mac_for(name)),
            ip,
        });
    }
    topology.node_port("node1", NODE_MAC, NODE_IP);
    pods.push(Pod {
        port: "node-node1".into(),
        switch: "join",
        mac: mac(NODE_MAC),
        ip: NODE_IP,
    });
    topology
        .network_policy(
            "web",
            "ns",
            &["web0.ns", "web1.ns"],
            Some(&[
                PolicyRule {
                    allow: &["10.16.0.13", "10.17.0.0/16"],
                    except: &["10.17.0.11"],
                    ports: &[PolicyPort::Port("tcp", 80)],
                },
                PolicyRule {
                    allow: &["10.16.0.12"],
                    except: &[],
                    ports: &[PolicyPort::Range("udp", 5000, 5010)],
                },
            ]),
            None,
        )
        .network_policy(
            "db",
            "ns",
            &["db0.ns"],
            Some(&[]),
            Some(&[PolicyRule {
                allow: &["10.16.0.10"],
                except: &[],
                ports: &[PolicyPort::Port("tcp", 5432)],
            }]),
        )
        .network_policy("client", "ns", &["client1.ns"], None, Some(&[]))
        .node_acls("node1", NODE_IP, &["web0.ns", "db0.ns"])
        .subnet_acls("ovn-default", &OVN_DEFAULT_ACLS)
        .subnet_acls("apps", &APPS_ACLS)
        .apply(lab)
        .unwrap();
    pods
}

/// The subnets' own ACLs (Kube-OVN's `spec.acls`, above and below the policies' priorities):
/// client0's pings to web0 are rejected (ICMP unreachable from the egress stage, back to a
/// neighbour), web1's UDP skips conntrack, and the subnet may talk to itself. The drop and reject
/// ACLs name their pods: one that may act on routed traffic makes the kernel drop all of it
/// (it runs no ACL stage there, and fails closed), which the oracle does not model.
const OVN_DEFAULT_ACLS: [SubnetAcl<'static>; 3] = [
    SubnetAcl {
        direction: "to-lport",
        priority: 2500,
        match_: "outport == \"web0.ns\" && ip4.src == 10.16.0.13 && icmp4",
        action: "reject",
    },
    SubnetAcl {
        direction: "from-lport",
        priority: 2600,
        match_: "inport == \"web1.ns\" && udp",
        action: "allow-stateless",
    },
    SubnetAcl {
        direction: "to-lport",
        priority: 1900,
        match_: "ip4.src == 10.16.0.0/16 && ip4.dst == 10.16.0.0/16",
        action: "allow",
    },
];

/// `apps` rejects TCP 22 from db0 to client1 (a reset from the egress stage, routed back) and
/// other's UDP to web0 (ICMP port unreachable from the ingress stage).
const APPS_ACLS: [SubnetAcl<'static>; 2] = [
    SubnetAcl {
        direction: "to-lport",
        priority: 2500,
        match_: "outport == \"client1.ns\" && ip4.src == 10.16.0.12 && tcp.dst == 22",
        action: "reject",
    },
    SubnetAcl {
        direction: "from-lport",
        priority: 2500,
        match_: "inport == \"other.ns\" && ip4.dst == 10.16.0.10 && udp",
        action: "reject",
    },
];

/// The router port's MAC on a pod's switch (the default VPC's `ovn-cluster-<switch>`).
fn gateway_mac(pod: &Pod) -> [u8; 6] {
    mac(&mac_for(&format!("{DEFAULT_VPC}-{}", pod.switch)))
}

/// The conntrack states tried, as ovn-trace's `--ct` words and as the evaluator's bits.
const STATES: &[(&str, u8)] = &[
    ("new", ct::NEW),
    ("est", ct::ESTABLISHED),
    ("est,rpl", ct::ESTABLISHED | ct::REPLY),
    ("rel", ct::RELATED),
    ("inv", ct::INVALID),
];

fn cases(pods: &[Pod]) -> Vec<(String, &Pod, Packet)> {
    let l4s = [
        (
            "tcp 80",
            L4::Tcp {
                source: 40000,
                destination: 80,
            },
        ),
        (
            "tcp 22",
            L4::Tcp {
                source: 40001,
                destination: 22,
            },
        ),
        (
            "tcp 5432",
            L4::Tcp {
                source: 40002,
                destination: 5432,
            },
        ),
        (
            "udp 5005",
            L4::Udp {
                source: 40003,
                destination: 5005,
            },
        ),
        ("ping", L4::Icmp { kind: 8, code: 0 }),
    ];
    let mut cases = Vec::new();
    for from in pods {
        for to in pods.iter().filter(|to| to.ip != from.ip) {
            let eth_dst = if to.switch == from.switch {
                to.mac
            } else {
                gateway_mac(from)
            };
            for (what, l4) in l4s {
                let packet = Packet {
                    eth_src: from.mac,
                    eth_dst,
                    l3: L3::Ipv4 {
                        source: from.ip,
                        destination: to.ip,
                        ttl: 64,
                        l4,
                    },
                };
                cases.push((format!("{} → {} {what}", from.port, to.port), from, packet));
            }
        }
    }
    cases
}

/// NB_Global's options: what kube-ovn-controller writes (`use_ct_inv_match=false`: northd's ACL
/// flows do not look at `ct.inv`), or plain OVN's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Globals {
    KubeOvn,
    PlainOvn,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_verdicts_equal_ovn_trace() {
    oracle(Globals::KubeOvn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_verdicts_equal_ovn_trace_with_ct_inv_match() {
    oracle(Globals::PlainOvn).await;
}

async fn oracle(globals: Globals) {
    require_root();
    let lab = OvnLab::start().unwrap();
    let pods = build(&lab, globals);
    let use_ct_inv_match = lab.nbctl(&["get", "nb_global", ".", "options"]).unwrap();
    assert_eq!(
        use_ct_inv_match.contains("use_ct_inv_match=\"false\""),
        globals == Globals::KubeOvn,
        "NB_Global options: {use_ct_inv_match}"
    );
    let common::Replica { compiler, sb, .. } = common::Replica::start(&lab).await;

    let acl_gaps = common::unsupported_described(&sb, &compiler, |stage, _| {
        is_acl_stage(stage) || acl_fails_closed(stage).is_some()
    });
    assert!(
        acl_gaps.is_empty(),
        "ACL flows left unsupported:\n{}",
        acl_gaps.join("\n")
    );
    let evaluator = Evaluator::new(compiler.entries());

    let cases = cases(&pods);
    let mut disagreements = Vec::new();
    let (mut compared, mut drops) = (0, 0);
    for (what, pod, packet) in &cases {
        for (words, bits) in STATES {
            let assumed = CtAssumptions::new(vec![ct::TRACKED | bits; 4]);
            let ours = evaluator
                .trace_with_ct(&pod.port, *packet, assumed)
                .unwrap();
            let ct_words = [*words; 4];
            let Some((theirs, their_text)) = trace_oracle::ovn_trace(
                &lab,
                pod.switch,
                &pod.port,
                packet,
                TraceOptions {
                    select: None,
                    ct: &ct_words,
                },
            ) else {
                continue;
            };
            compared += 1;
            let what = format!("{what} (ct {words})");
            let (dropped, disagreement) = trace_oracle::compare(&what, &ours, theirs, &their_text);
            drops += usize::from(dropped);
            disagreements.extend(disagreement);
        }
    }
    println!(
        "{} cases × {} conntrack states: {compared} compared with ovn-trace ({drops} drops), {} disagreements",
        cases.len(),
        STATES.len(),
        disagreements.len()
    );
    assert!(compared >= 1000, "only {compared} compared");
    // Both verdicts occur in numbers: a test where everything is dropped (or passes) proves
    // little.
    assert!(
        drops > compared / 5 && drops < compared * 4 / 5,
        "{drops} of {compared} dropped"
    );
    assert!(
        disagreements.is_empty(),
        "{} disagree:\n\n{}",
        disagreements.len(),
        disagreements.join("\n\n")
    );

    let entries: Vec<_> = compiler.entries().cloned().collect();
    let mut kernel = oracle_kernel::KernelReplay::new(&entries);
    let mut report = oracle_kernel::Report::default();
    let mut replies = 0;
    for (what, pod, packet) in &cases {
        kernel.clear_connections();
        let new = CtAssumptions::new(vec![ct::TRACKED | ct::NEW; 4]);
        let forward = kernel.check_with_ct(&mut report, &evaluator, what, &pod.port, *packet, new);
        let Some((from, reply)) = reply_to(&pods, pod, packet) else {
            continue;
        };
        replies += 1;
        let states = reply_states(&forward, &pod.port, &from.port, &reply);
        let what = format!("{what}, then its reply");
        kernel.check_with_ct(&mut report, &evaluator, &what, &from.port, reply, states);
    }
    println!(
        "kernel replay: {} packets ({replies} replies), {} dropped by both, {} forwarded alike, {} disagreements",
        report.replayed,
        report.both_drop,
        report.both_forward,
        report.disagreements.len()
    );
    assert!(
        report.both_drop > 100 && report.both_forward > 100,
        "{report:?}"
    );
    assert!(
        report.disagreements.is_empty(),
        "{} of {} disagree between the kernel and the evaluator:\n\n{}",
        report.disagreements.len(),
        report.replayed,
        report.disagreements.join("\n\n")
    );
}

/// The reply to `packet` from the pod it was for (ports and addresses swapped, a ping
/// answered), when both ends are pods (the node's join port has no conntrack of its own, so
/// its replies meet conntrack once, not twice).
fn reply_to<'a>(pods: &'a [Pod], from: &Pod, packet: &Packet) -> Option<(&'a Pod, Packet)> {
    let L3::Ipv4 {
        source,
        destination,
        l4,
        ..
    } = packet.l3
    else {
        return None;
    };
    let to = pods.iter().find(|pod| pod.ip == destination)?;
    if to.switch == "join" || from.switch == "join" {
        return None;
    }
    let l4 = match l4 {
        L4::Tcp {
            source,
            destination,
        } => L4::Tcp {
            source: destination,
            destination: source,
        },
        L4::Udp {
            source,
            destination,
        } => L4::Udp {
            source: destination,
            destination: source,
        },
        L4::Icmp { kind: 8, code } => L4::Icmp { kind: 0, code },
        other => other,
    };
    let eth_dst = if to.switch == from.switch {
        from.mac
    } else {
        gateway_mac(to)
    };
    Some((
        to,
        Packet {
            eth_src: to.mac,
            eth_dst,
            l3: L3::Ipv4 {
                source: destination,
                destination: source,
                ttl: 64,
                l4,
            },
        },
    ))
}

/// What the kernel's table says of `reply` (from `to` back to `from`) after the first packet's
/// `forward` trace, zone by zone: `from`'s zone committed the connection if conntrack tracked the
/// first packet there and it passed `from`'s ingress ACLs, `to`'s if conntrack tracked it there
/// and it was delivered to `to`. A reply is `est|rpl` in a zone that committed it; elsewhere a
/// new connection, but an echo reply without its request is invalid.
fn reply_states(
    forward: &ovnbpf_agent::pipeline::eval::Trace,
    from: &str,
    to: &str,
    reply: &Packet,
) -> CtAssumptions {
    // The zone each step is in: a switch's ingress from a port, or the port its L2 lookup chose.
    let mut zone = "";
    let mut tracked = std::collections::HashSet::new();
    for step in &forward.steps {
        if let Some(rest) = step.split("switch ingress from ").nth(1) {
            zone = rest.split(':').next().unwrap_or_default();
        } else if let Some(rest) = step.split(" is on ").nth(1) {
            zone = rest.trim();
        } else if step.contains("] conntrack: ") {
            tracked.insert(zone.to_string());
        }
    }
    let delivered = forward.outputs.iter().any(|(port, _)| port == to);
    let passed_ingress = delivered
        || forward.steps.iter().any(|step| {
            step.contains("dropped: ls_out_acl") || step.contains("rejected: ls_out_acl")
        });
    let echo_reply = matches!(
        reply.l3,
        L3::Ipv4 {
            l4: L4::Icmp { kind: 0, .. },
            ..
        }
    );
    let state = |committed: bool| {
        if committed {
            ct::TRACKED | ct::ESTABLISHED | ct::REPLY
        } else if echo_reply {
            ct::TRACKED | ct::INVALID
        } else {
            ct::TRACKED | ct::NEW
        }
    };
    CtAssumptions::by_zone(
        [
            (to.to_string(), state(delivered && tracked.contains(to))),
            (
                from.to_string(),
                state(passed_ingress && tracked.contains(from)),
            ),
        ]
        .into(),
    )
}
