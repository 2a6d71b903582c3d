//! The L2 datapath driven by the Southbound DB: Kube-OVN-shaped VPCs whose subnets overlap
//! (built through ovn-nbctl), two chassis with pods bound to them, one replica + compiler +
//! [`L2State`] + kernel program set per node, as one agent per node runs them. Pods of a VPC
//! reach each other across nodes, resolve each other through the kernel ARP responder, never see
//! the other VPC, and a pod deleted in the NB stops being reachable once its IR diff is applied.

mod common;

use common::Replica;
use ovnbpf_agent::{
    dataplane::ebpf::{Hook, KernelPrograms, l2::L2State},
    pipeline::{IrDiff, ir::IrEntry},
};
use ovnbpf_tests::scenario;
use ovnbpf_tests::{
    kubeovn::mac_for,
    names::unique_prefix,
    network::{Node, Pod, Underlay},
    ovn::OvnLab,
    require_root,
};

use ovnbpf_tests::scenario::OVERLAPPING_PODS as PODS;
const NODES: [&str; 2] = ["node1", "node2"];

/// One node's agent-side state: its programs and its L2 maps.
struct NodeAgent {
    programs: KernelPrograms,
    l2: L2State,
}

impl NodeAgent {
    fn start(index: usize, nodes: &[Node], pods: &[Pod]) -> Self {
        let node = &nodes[index];
        let netns = node.netns();
        let mut programs = common::load_programs();
        let uplink = netns.ifindex("eth0").unwrap();
        programs
            .set_tunnel_endpoint(node.ip().into(), uplink)
            .unwrap();
        programs
            .attach_in_netns(&netns.path(), Hook::Uplink, "eth0")
            .unwrap();
        let mut l2 = L2State::new(NODES[index]);
        // The compiler emits these from the SB's Encap rows (this lab registers no chassis).
        l2.apply(&IrDiff {
            added: nodes
                .iter()
                .zip(NODES)
                .map(|(other, name)| IrEntry::ChassisEncap {
                    chassis: name.to_string(),
                    ip: other.ip().into(),
                    csum: false,
                })
                .collect(),
            removed: Vec::new(),
        });
        for ((name, _, node_index, _), pod) in PODS.iter().zip(pods) {
            if *node_index == index {
                let ifindex = netns.ifindex(pod.host_interface()).unwrap();
                l2.set_interface(&format!("{name}.ns"), Some(ifindex));
                programs
                    .attach_in_netns(&netns.path(), Hook::Pod, pod.host_interface())
                    .unwrap();
            }
        }
        Self { programs, l2 }
    }

    fn apply(&mut self, diff: &IrDiff) {
        self.l2.apply(diff);
        self.l2.flush(&mut self.programs).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_bound_in_the_sb_talk_through_the_ebpf_datapath() {
    require_root();
    let lab = OvnLab::start().unwrap();
    let prefix = unique_prefix();
    let mut underlay = Underlay::create(&prefix).unwrap();
    let nodes = vec![
        underlay.add_node("node1").unwrap(),
        underlay.add_node("node2").unwrap(),
    ];

    let pods = scenario::overlapping_vpcs(&lab, &nodes);
    // What each node's ovn-controller (here: ovnbpf agent) does: register and claim its pods.
    for (name, node) in NODES.iter().zip(&nodes) {
        lab.sbctl(&["chassis-add", name, "geneve", &node.ip().to_string()])
            .unwrap();
    }
    for (name, _, node_index, _) in PODS {
        lab.sbctl(&["lsp-bind", &format!("{name}.ns"), NODES[node_index]])
            .unwrap();
    }

    let mut agents: Vec<NodeAgent> = (0..2).map(|i| NodeAgent::start(i, &nodes, &pods)).collect();
    let mut replicas = Vec::new();
    for agent in &mut agents {
        let replica = Replica::start(&lab).await;
        let everything = IrDiff {
            added: replica.compiler.entries().cloned().collect(),
            removed: Vec::new(),
        };
        agent.apply(&everything);
        replicas.push(replica);
    }

    let (a1, b1, b2) = (&pods[0], &pods[2], &pods[3]);
    assert_eq!(a1.ping(PODS[1].3, 5).unwrap(), 5, "a1 → a2 across nodes");
    assert_eq!(b2.ping(PODS[2].3, 5).unwrap(), 5, "b2 → b1 across nodes");
    let neighbour = a1.netns().ip(&["neigh", "show", "10.0.1.3"]).unwrap();
    assert!(
        neighbour.contains(&mac_for("a2")),
        "a1 must resolve a2, not b1: {neighbour}"
    );
    assert_eq!(b1.ping(PODS[3].3, 3).unwrap(), 3, "b1 → b2");

    // Delete a2 in the NB: once both agents applied the IR diff, a1 cannot reach it.
    lab.nbctl(&["--wait=sb", "lsp-del", "a2.ns"]).unwrap();
    for (agent, replica) in agents.iter_mut().zip(&mut replicas) {
        let diff = replica.settle().await;
        assert!(!diff.removed.is_empty(), "the deletion reached the IR");
        agent.apply(&diff);
    }
    assert_eq!(a1.ping(PODS[1].3, 3).unwrap(), 0, "a2 is gone");
    assert_eq!(b2.ping(PODS[2].3, 3).unwrap(), 3, "vpc-b is untouched");
}
