//! The differential oracle for load balancers: Kubernetes Services as kube-ovn-controller writes
//! them (`vpc-<vpc>-tcp-load`, `-udp-load` and the session-affinity `-tcp-sess-load` with
//! `selection_fields=ip_src` and `options:affinity_timeout=10800`, attached to both subnets of
//! the VPC), and generated packets from pods to VIPs (hits on TCP and UDP, the wrong port, the
//! wrong protocol, a pod's own address, a backend reaching its own Service).
//!
//! `ovn-trace --ct=new` prints the balancing it would do (`ct_lb_mark(backends=…)`) but applies
//! no translation, so the oracle compares the decision: for every case, the evaluator balances
//! exactly when ovn-trace does, over the same backends with the same hash fields. Then the
//! kernel: the same IR installed by the backend, each case replayed through `from_pod`, and the
//! kernel's output must be the evaluator's, which names the backend the kernel picks (the same
//! hash of the connection's fields), translated.
//!
//! Every load-balancing flow compiles, session affinity's included. ovn-trace cannot say which
//! backend a client learned (its `chk_lb_aff` finds nothing), so the cases are new sessions;
//! the kernel learns as the cases go (its `LB_AFFINITIES` are not cleared between them), and
//! a client's later session to the sticky VIP must land where its first did, which the
//! source-address hash also says.

mod common;
mod oracle_kernel;

use std::net::Ipv4Addr;

use common::trace_oracle;

use ovnbpf_agent::pipeline::eval::{
    Balanced, CtAssumptions, Evaluator,
    packet::{L3, L4, Packet},
};
use ovnbpf_common::ct;
use ovnbpf_tests::{
    kubeovn::{Topology, mac_for},
    ovn::OvnLab,
    require_root,
};

struct Pod {
    port: String,
    switch: &'static str,
    mac: [u8; 6],
    ip: Ipv4Addr,
}

const PODS: &[(&str, &str, [u8; 4])] = &[
    ("c1", "subnet-a", [10, 0, 1, 10]),
    ("b1", "subnet-a", [10, 0, 1, 2]),
    ("b2", "subnet-a", [10, 0, 1, 3]),
    ("b3", "subnet-a2", [10, 0, 2, 2]),
    ("c2", "subnet-a2", [10, 0, 2, 10]),
];
const SUBNETS: [&str; 2] = ["subnet-a", "subnet-a2"];
const WEB: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
const DNS: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 11);
const TLS: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 12);
const STICKY: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 20);

fn mac(text: &str) -> [u8; 6] {
    ovnbpf_agent::lflow::parse_mac(text).unwrap()
}

fn build(lab: &OvnLab) -> Vec<Pod> {
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .subnet("vpc-a", "subnet-a2", "10.0.2.0/24")
        .unwrap();
    for (name, switch, ip) in PODS {
        topology.pod(switch, name, "ns", &mac_for(name), Ipv4Addr::from(*ip));
    }
    topology
        .service(
            "vpc-a",
            &SUBNETS,
            "tcp",
            "10.96.0.10:80",
            "10.0.1.2:8080,10.0.1.3:8080,10.0.2.2:8080",
        )
        .service(
            "vpc-a",
            &SUBNETS,
            "udp",
            "10.96.0.11:53",
            "10.0.1.2:5353,10.0.2.2:5353",
        )
        .service("vpc-a", &SUBNETS, "tcp", "10.96.0.12:443", "10.0.2.2:8443");
    topology.apply(lab).unwrap();
    // A Service with sessionAffinity: ClientIP goes to the session balancer, which
    // kube-ovn-controller creates with `selection_fields=ip_src` and the fixed timeout.
    let mut session = Topology::new();
    session.session_service(
        "vpc-a",
        &SUBNETS,
        "tcp",
        "10.96.0.20:80",
        "10.0.1.2:8080,10.0.1.3:8080",
    );
    session.apply(lab).unwrap();
    PODS.iter()
        .map(|(name, switch, ip)| Pod {
            port: format!("{name}.ns"),
            switch,
            mac: mac(&mac_for(name)),
            ip: Ipv4Addr::from(*ip),
        })
        .collect()
}

fn gateway_mac(pod: &Pod) -> [u8; 6] {
    mac(&mac_for(&format!("vpc-a-{}", pod.switch)))
}

fn cases(pods: &[Pod]) -> Vec<(String, &Pod, Packet)> {
    let tcp = |source, destination| L4::Tcp {
        source,
        destination,
    };
    let udp = |source, destination| L4::Udp {
        source,
        destination,
    };
    let mut targets = Vec::new();
    for port in 0..6_u16 {
        targets.push((
            format!("web tcp from {}", 40000 + port),
            WEB,
            tcp(40000 + port, 80),
        ));
        targets.push((
            format!("dns udp from {}", 50000 + port),
            DNS,
            udp(50000 + port, 53),
        ));
        targets.push((
            format!("sticky from {}", 41000 + port),
            STICKY,
            tcp(41000 + port, 80),
        ));
    }
    targets.push(("tls".into(), TLS, tcp(42000, 443)));
    targets.push(("web, wrong port".into(), WEB, tcp(42001, 81)));
    targets.push(("web, udp".into(), WEB, udp(42002, 80)));
    targets.push(("dns, tcp".into(), DNS, tcp(42003, 53)));
    let mut cases = Vec::new();
    for from in pods {
        for (what, destination, l4) in &targets {
            let packet = Packet {
                eth_src: from.mac,
                eth_dst: gateway_mac(from),
                l3: L3::Ipv4 {
                    source: from.ip,
                    destination: *destination,
                    ttl: 64,
                    l4: *l4,
                },
            };
            cases.push((format!("{} → {what}", from.port), from, packet));
        }
        // A pod's own address is no VIP.
        let to = pods
            .iter()
            .find(|to| to.ip != from.ip && to.switch == from.switch);
        if let Some(to) = to {
            let packet = Packet {
                eth_src: from.mac,
                eth_dst: to.mac,
                l3: L3::Ipv4 {
                    source: from.ip,
                    destination: to.ip,
                    ttl: 64,
                    l4: tcp(43000, 8080),
                },
            };
            cases.push((format!("{} → {} direct", from.port, to.port), from, packet));
        }
    }
    cases
}

/// The evaluator's balancing in the same words.
fn ours(balanced: &[Balanced]) -> Option<String> {
    let [decision] = balanced else {
        assert!(balanced.is_empty(), "{balanced:?}");
        return None;
    };
    let backends: Vec<String> = decision
        .backends
        .iter()
        .map(|backend| match backend.port {
            Some(port) => format!("{}:{port}", backend.ip),
            None => backend.ip.to_string(),
        })
        .collect();
    let sticky = decision.vip == STICKY;
    Some(format!(
        "{}{}",
        backends.join(","),
        if sticky {
            "; hash_fields=\"ip_src\""
        } else {
            ""
        }
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_decisions_equal_ovn_trace_and_the_kernel() {
    require_root();
    let lab = OvnLab::start().unwrap();
    let pods = build(&lab);
    let common::Replica { compiler, sb, .. } = common::Replica::start(&lab).await;
    let gaps = common::unsupported_described(&sb, &compiler, |stage, _| {
        stage.contains("lb") || stage.contains("hairpin") || stage.contains("stateful")
    });
    assert!(
        gaps.is_empty(),
        "load-balancing flows left unsupported:\n{}",
        gaps.join("\n")
    );
    let evaluator = Evaluator::new(compiler.entries());

    let cases = cases(&pods);
    let (mut balanced, mut unbalanced) = (0, 0);
    let mut disagreements = Vec::new();
    for (what, pod, packet) in &cases {
        let new = CtAssumptions::new(vec![ct::TRACKED | ct::NEW; 4]);
        let trace = evaluator.trace_with_ct(&pod.port, *packet, new).unwrap();
        let (mine, theirs) = (
            ours(&trace.balanced),
            trace_oracle::ovn_trace_balancing(&lab, pod.switch, &pod.port, packet),
        );
        match &mine {
            Some(_) => balanced += 1,
            None => unbalanced += 1,
        }
        if mine != theirs {
            disagreements.push(format!(
                "{what}\n  ovnbpf: {mine:?}\n  ovn-trace: {theirs:?}\n{}",
                trace.steps.join("\n")
            ));
        }
    }
    println!(
        "{} cases: {balanced} balanced, {unbalanced} not, {} disagreements with ovn-trace",
        cases.len(),
        disagreements.len()
    );
    assert!(
        balanced >= 80 && unbalanced >= 15,
        "{balanced} / {unbalanced}"
    );
    assert!(
        disagreements.is_empty(),
        "{} disagree:\n\n{}",
        disagreements.len(),
        disagreements.join("\n\n")
    );

    // The kernel picks the evaluator's backend and translates as it says.
    let entries: Vec<_> = compiler.entries().cloned().collect();
    let mut kernel = oracle_kernel::KernelReplay::new(&entries);
    let mut report = oracle_kernel::Report::default();
    let mut chosen = std::collections::BTreeSet::new();
    for (what, pod, packet) in &cases {
        let new = CtAssumptions::new(vec![ct::TRACKED | ct::NEW; 4]);
        let trace = kernel.check_with_ct(&mut report, &evaluator, what, &pod.port, *packet, new);
        chosen.extend(trace.balanced.iter().filter_map(|b| b.chosen));
    }
    println!(
        "kernel replay: {} packets, {} forwarded alike, {} dropped by both, {} disagreements; {} backends chosen",
        report.replayed,
        report.both_forward,
        report.both_drop,
        report.disagreements.len(),
        chosen.len()
    );
    // Every backend of the web and DNS Services is picked for some connection.
    assert!(chosen.len() >= 6, "{chosen:?}");
    assert!(
        report.disagreements.is_empty(),
        "{} of {} disagree between the kernel and the evaluator:\n\n{}",
        report.disagreements.len(),
        report.replayed,
        report.disagreements.join("\n\n")
    );
}
