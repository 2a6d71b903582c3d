//! SB → pipeline IR against real northd output: the L2/L3 tables hold exactly what the topology
//! says, and adding one pod changes the same handful of IR entries whatever the size.

use std::{collections::BTreeSet, net::Ipv4Addr};

mod common;

use common::Replica;
use ovnbpf_agent::dataplane::ebpf::l3::L3State;
use ovnbpf_agent::pipeline::{
    Compiler, IrDiff, UNDERLAY_ROUTING_STAGE,
    ir::{IrEntry, Prefix},
};
use ovnbpf_tests::{
    kubeovn::{self, Topology, mac_for},
    ovn::OvnLab,
    require_root,
};

fn mac(text: &str) -> [u8; 6] {
    ovnbpf_agent::lflow::parse_mac(text).unwrap()
}

fn pod_ip(index: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, (index / 250) as u8 + 1, (index % 250) as u8 + 2)
}

fn add_pods(lab: &OvnLab, range: std::ops::Range<u32>) {
    let mut topology = Topology::new();
    for index in range {
        let pod = format!("pod-{index}");
        topology.pod("subnet-a", &pod, "ns", &mac_for(&pod), pod_ip(index));
    }
    topology.apply(lab).unwrap();
}

/// A lab with vpc-a's subnet-a (10.0.0.0/17) holding `pods` pods, and a replica synced to it.
async fn subnet_with_pods(pods: u32) -> (OvnLab, Replica) {
    require_root();
    let lab = OvnLab::start().unwrap();
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.0.0/17")
        .unwrap();
    topology.apply(&lab).unwrap();
    add_pods(&lab, 0..pods);
    let replica = Replica::start(&lab).await;
    (lab, replica)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l2_and_l3_tables_reflect_the_topology() {
    require_root();
    let lab = OvnLab::start().unwrap();
    let mut topology = Topology::new();
    topology.peered_vpcs("10.0.0.0/17", &["vpc-a"]).unwrap();
    topology.apply(&lab).unwrap();
    add_pods(&lab, 0..3);
    let replica = Replica::start(&lab).await;
    let datapaths = kubeovn::sb_datapaths(&lab).unwrap();
    let key = |name: &str| {
        datapaths
            .iter()
            .find(|d| d.name == name)
            .unwrap()
            .tunnel_key
    };
    let (subnet_a, vpc_a) = (key("subnet-a"), key("vpc-a"));
    let entries: Vec<&IrEntry> = replica.compiler.entries().collect();

    let fib: BTreeSet<(String, [u8; 6])> = entries
        .iter()
        .filter_map(|e| match e {
            IrEntry::L2Fib {
                datapath,
                mac,
                port,
            } if *datapath == subnet_a => Some((port.clone(), *mac)),
            _ => None,
        })
        .collect();
    let router_mac = mac(&kubeovn::mac_for("vpc-a-subnet-a"));
    let mut expected: BTreeSet<(String, [u8; 6])> = (0..3)
        .map(|i| (format!("pod-{i}.ns"), mac(&mac_for(&format!("pod-{i}")))))
        .collect();
    expected.insert(("subnet-a-vpc-a".into(), router_mac));
    assert_eq!(fib, expected);

    for index in 0..3 {
        let ip = pod_ip(index);
        let pod_mac = mac(&mac_for(&format!("pod-{index}")));
        assert!(
            entries.contains(&&IrEntry::ArpReply {
                datapath: subnet_a,
                ip,
                mac: pod_mac
            }),
            "ARP reply for {ip}"
        );
        assert!(entries.contains(&&IrEntry::Neighbour {
            datapath: vpc_a,
            port: "vpc-a-subnet-a".into(),
            ip,
            mac: pod_mac
        }));
    }
    let routes: Vec<(Prefix, Option<Ipv4Addr>, String)> = entries
        .iter()
        .filter_map(|e| match e {
            IrEntry::Route {
                datapath,
                prefix,
                nexthop,
                port,
                ..
            } if *datapath == vpc_a => Some((*prefix, *nexthop, port.clone())),
            _ => None,
        })
        .collect();
    assert!(
        routes.contains(&(
            Prefix {
                network: Ipv4Addr::new(10, 0, 0, 0),
                length: 17
            },
            None,
            "vpc-a-subnet-a".into()
        )),
        "{routes:?}"
    );
    assert!(
        routes.contains(&(
            Prefix {
                network: Ipv4Addr::new(10, 1, 1, 0),
                length: 24
            },
            Some(Ipv4Addr::new(10, 0, 255, 2)),
            "vpc-a-vpc-b".into()
        )),
        "{routes:?}"
    );
    assert!(entries.contains(&&IrEntry::RouterPort {
        datapath: vpc_a,
        port: "vpc-a-subnet-a".into(),
        mac: router_mac,
        multicast: false
    }));

    let coverage = replica.compiler.coverage();
    for (stage, c) in &coverage {
        assert!(
            c.reasons.keys().all(|r| !r.contains("does not parse")),
            "{stage}: {:?}",
            c.reasons
        );
    }
    for stage in [
        "ls_in_l2_lkup",
        "ls_in_arp_rsp",
        "lr_in_admission",
        "lr_in_ip_routing",
        "lr_in_arp_resolve",
    ] {
        assert!(
            coverage[stage].compiled > 0,
            "{stage}: {:?}",
            coverage[stage]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_one_pod_changes_the_same_few_entries_at_any_size() {
    let (lab, mut replica) = subnet_with_pods(20).await;

    add_pods(&lab, 20..21);
    let small = replica.settle().await;
    add_pods(&lab, 21..5000);
    replica.settle().await;
    add_pods(&lab, 5000..5001);
    let large = replica.settle().await;

    let describe = |diff: &IrDiff| {
        let kinds = |entries: &[IrEntry]| {
            entries
                .iter()
                .map(|e| {
                    format!("{e:?}")
                        .split([' ', '{'])
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect::<Vec<_>>()
        };
        (kinds(&diff.added), kinds(&diff.removed))
    };
    println!("one pod at 21 ports: {:?}", describe(&small));
    println!("one pod at 5001 ports: {:?}", describe(&large));
    assert_eq!(
        describe(&small),
        describe(&large),
        "the IR diff of one pod must not grow with the topology"
    );
    assert!(small.len() <= 12, "{small:?}");
    let new_mac = mac(&mac_for("pod-5000"));
    assert!(
        large
            .added
            .iter()
            .any(|e| matches!(e, IrEntry::L2Fib { mac, .. } if *mac == new_mac))
    );
    assert!(
        large
            .added
            .iter()
            .any(|e| matches!(e, IrEntry::ArpReply { ip, .. } if *ip == pod_ip(5000)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_ir_equals_a_fresh_compile_after_changes() {
    let (lab, mut replica) = subnet_with_pods(5).await;

    // A port's tunnel key changes (requested-tnl-key): its flood-group members must follow,
    // although the groups' member lists stay the same.
    lab.nbctl(&[
        "--wait=sb",
        "set",
        "logical_switch_port",
        "pod-2.ns",
        "options:requested-tnl-key=900",
    ])
    .unwrap();
    replica.settle().await;
    add_pods(&lab, 5..8);
    lab.nbctl(&["--wait=sb", "lsp-del", "pod-1.ns"]).unwrap();
    replica.settle().await;

    let fresh = Replica::start(&lab).await;
    let sorted = |compiler: &Compiler| {
        let mut entries: Vec<IrEntry> = compiler.entries().cloned().collect();
        entries.sort();
        entries
    };
    let (incremental, full) = (sorted(&replica.compiler), sorted(&fresh.compiler));
    let members_900 = incremental
        .iter()
        .filter(|e| matches!(e, IrEntry::FloodMember { port: 900, .. }))
        .count();
    assert!(members_900 >= 1, "no flood member with the new key 900");
    if incremental != full {
        let only_incremental: Vec<_> = incremental.iter().filter(|e| !full.contains(e)).collect();
        let only_full: Vec<_> = full.iter().filter(|e| !incremental.contains(e)).collect();
        panic!(
            "incremental IR differs: only incremental {only_incremental:?}, only fresh {only_full:?}"
        );
    }
}

/// Routing onto an underlay switch (Kube-OVN's U2O interconnection) is reported unsupported for
/// the router, and the report follows the localnet port and the router port incrementally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routers_on_underlay_switches_are_reported_unsupported() {
    let (lab, mut replica) = subnet_with_pods(2).await;
    let router_key = |replica: &Replica| {
        replica
            .compiler
            .entries()
            .find_map(|e| match e {
                IrEntry::Datapath {
                    datapath,
                    name,
                    router: true,
                } if name == "vpc-a" => Some(*datapath),
                _ => None,
            })
            .unwrap()
    };
    let u2o = |replica: &Replica| -> Vec<(u32, String)> {
        let mut found: Vec<(u32, String)> = replica
            .compiler
            .entries()
            .filter_map(|e| match e {
                IrEntry::Unsupported {
                    datapath,
                    stage,
                    reason,
                } if stage == UNDERLAY_ROUTING_STAGE => Some((*datapath, reason.clone())),
                _ => None,
            })
            .collect();
        found.sort();
        found
    };
    assert!(u2o(&replica).is_empty(), "{:?}", u2o(&replica));

    // An underlay subnet of vpc-a, first without its router port: nothing routes onto it.
    let mut topology = Topology::new();
    topology
        .plain_switch("subnet-u", "10.200.0.0/24")
        .unwrap()
        .localnet("subnet-u", "physnet1", 100);
    topology.apply(&lab).unwrap();
    replica.settle().await;
    assert!(u2o(&replica).is_empty(), "{:?}", u2o(&replica));

    // U2O: the router gets a port on it.
    let mut topology = Topology::new();
    topology
        .subnet("vpc-a", "subnet-u", "10.200.0.0/24")
        .unwrap();
    topology.apply(&lab).unwrap();
    replica.settle().await;
    let reported = u2o(&replica);
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert_eq!(reported[0].0, router_key(&replica));
    assert!(reported[0].1.contains("subnet-u"), "{reported:?}");
    let coverage = replica.compiler.coverage();
    assert_eq!(coverage[UNDERLAY_ROUTING_STAGE].unsupported, 1);

    // Without the localnet port the switch is an overlay subnet again.
    lab.nbctl(&["--wait=sb", "lsp-del", "localnet.subnet-u"])
        .unwrap();
    replica.settle().await;
    assert!(u2o(&replica).is_empty(), "{:?}", u2o(&replica));
    Topology::new()
        .localnet("subnet-u", "physnet1", 0)
        .apply(&lab)
        .unwrap();
    replica.settle().await;
    assert_eq!(u2o(&replica).len(), 1);
    let fresh = Replica::start(&lab).await;
    assert_eq!(u2o(&fresh), u2o(&replica));

    // Removing the router port ends it.
    lab.nbctl(&["--wait=sb", "lrp-del", "vpc-a-subnet-u"])
        .unwrap();
    replica.settle().await;
    assert!(u2o(&replica).is_empty(), "{:?}", u2o(&replica));
}

/// A VPC router as kube-ovn-controller builds it (`always_learn_from_arp_request=false`, so
/// northd writes the no-learn variants of the neighbour stages): every neighbour flow compiles,
/// the learning from ND is reported as a side duty (from ARP it is done: `mac_learning.rs`),
/// and the eBPF backend forwards the router. Turning the
/// option on (as a peering does) changes the variants (to the same IR), and still nothing is
/// unsupported. A neighbour flow the compiler cannot forward still blocks the router.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_ovn_routers_compile_with_nd_learning_as_a_side_duty() {
    let (lab, mut replica) = subnet_with_pods(2).await;
    let router = replica
        .compiler
        .entries()
        .find_map(|e| match e {
            IrEntry::Datapath {
                datapath,
                name,
                router: true,
            } if name == "vpc-a" => Some(*datapath),
            _ => None,
        })
        .unwrap();
    let check = |replica: &Replica, learn: &str| {
        let unsupported: Vec<_> = replica
            .compiler
            .entries()
            .filter(|e| matches!(e, IrEntry::Unsupported { datapath, stage, .. } if *datapath == router && stage.ends_with("_neighbor")))
            .collect();
        assert!(unsupported.is_empty(), "learn={learn}: {unsupported:?}");
        let duties: BTreeSet<&str> = replica
            .compiler
            .entries()
            .filter_map(|e| match e {
                IrEntry::SideDutyNotDone {
                    datapath, stage, ..
                } if *datapath == router => Some(stage.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            duties,
            BTreeSet::from(["lr_in_learn_neighbor", "lr_in_lookup_neighbor"]),
            "learn={learn}"
        );
        let mut l3 = L3State::default();
        l3.apply(&IrDiff {
            added: replica.compiler.entries().cloned().collect(),
            removed: Vec::new(),
        });
        assert!(
            l3.blocked(router).is_empty(),
            "learn={learn}: {:?}",
            l3.blocked(router)
        );
    };
    let option = || kubeovn::router_option(&lab, "vpc-a", "always_learn_from_arp_request").unwrap();
    // northd's no-learn variant looks the sender's IP up (`lookup_arp_ip`).
    let no_learn_variant = || {
        lab.sbctl(&["lflow-list", "vpc-a"])
            .unwrap()
            .contains("lookup_arp_ip")
    };
    assert_eq!(option().as_deref(), Some("false"));
    assert!(no_learn_variant());
    check(&replica, "false");

    // A peering: Kube-OVN rewrites the options without the key (northd's default: learn).
    Topology::new()
        .vpc("vpc-p")
        .peering("vpc-a", "10.255.9.1/30", "vpc-p", "10.255.9.2/30")
        .apply(&lab)
        .unwrap();
    replica.settle().await;
    assert_eq!(option(), None);
    assert!(!no_learn_variant(), "northd wrote the learning variants");
    check(&replica, "true");

    // A neighbour flow that would change forwarding is still unsupported, which the compiler
    // makes NotForwardable, and that blocks.
    let mut l3 = L3State::default();
    let mut entries: Vec<IrEntry> = replica.compiler.entries().cloned().collect();
    entries.push(IrEntry::NotForwardable {
        datapath: router,
        reason: ovnbpf_agent::pipeline::ir::Unforwardable::UnsupportedFlow {
            stage: "lr_in_learn_neighbor".into(),
            reason: "neighbour learning variant".into(),
        },
    });
    l3.apply(&IrDiff {
        added: entries,
        removed: Vec::new(),
    });
    assert_eq!(l3.blocked(router).len(), 1);
}
