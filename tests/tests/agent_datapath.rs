//! Two `ovnbpf-agent` processes, one per simulated node, forward for their pods with the eBPF
//! datapath: each follows the real SB, registers its chassis, claims its pods, programs the
//! kernel maps from the IR, and reports the pods `up`. Pods of overlapping VPCs reach their own
//! VPC's pods on the other node, resolved through the kernel ARP responder.

use ovnbpf_tests::scenario;
use ovnbpf_tests::scenario::TwoNodes;

use std::time::Duration;

use ovnbpf_tests::{
    bpffs::BpfMount,
    kubeovn::mac_for,
    process::{Child, wait_until},
};

use ovnbpf_tests::scenario::OVERLAPPING_PODS as PODS;

#[test]
fn agents_program_the_datapath_from_the_sb() {
    let TwoNodes { lab, nodes, .. } = &TwoNodes::start();
    let pods = scenario::overlapping_vpcs(lab, nodes);

    // Removed with the test, whatever its outcome (failures print the logs' tails first).
    let log_dir = tempfile::tempdir().unwrap();
    let bpffs = BpfMount::create().unwrap();
    let agents: Vec<Child> = (0..nodes.len())
        .map(|index| {
            scenario::start_overlapping_agent(lab, nodes, index, Some(bpffs.path()), log_dir.path())
        })
        .collect();
    let logs = || scenario::log_tails(&agents);

    // ovn-controller's contract: a pod is `up` once its flows are installed.
    assert!(
        scenario::all_overlapping_pods_up(lab),
        "not every pod came up{}",
        logs()
    );

    let (a1, b1, b2) = (&pods[0], &pods[2], &pods[3]);
    // vpc-b's pods stay quiet (no IPv6 chatter), so anything delivered to them came from vpc-a.
    scenario::silence_ipv6(&[b1, b2]);
    let counters = || scenario::both_nodes_counters(nodes, bpffs.path());
    let before = counters();
    assert_eq!(a1.ping(PODS[1].3, 5).unwrap(), 5, "a1 → a2{}", logs());
    let after = counters();
    let delivered = |node: usize, interface: &str| {
        let count = |all: &[serde_json::Value; 2]| scenario::delivered(&all[node], interface);
        count(&after) - count(&before)
    };
    // Per-port counters: a2 got the echo requests, a1 the replies; vpc-b's pods, which use the
    // same addresses, got nothing.
    assert!(delivered(1, "a2_h") >= 5, "{after:?}");
    assert!(delivered(0, "a1_h") >= 5, "{after:?}");
    assert_eq!(delivered(0, "b1_h"), 0, "{before:?} {after:?}");
    assert_eq!(delivered(1, "b2_h"), 0, "{before:?} {after:?}");
    assert_eq!(b2.ping(PODS[2].3, 5).unwrap(), 5, "b2 → b1{}", logs());
    assert_eq!(b1.ping(PODS[3].3, 3).unwrap(), 3, "b1 → b2");
    let neighbour = a1.netns().ip(&["neigh", "show", "10.0.1.3"]).unwrap();
    assert!(neighbour.contains(&mac_for("a2")), "{neighbour}");

    // A pod deleted in the NB stops being reachable.
    lab.nbctl(&["--wait=sb", "lsp-del", "a2.ns"]).unwrap();
    let gone = wait_until(Duration::from_secs(10), || {
        a1.ping(PODS[1].3, 1).is_ok_and(|received| received == 0)
    });
    assert!(gone, "a2 still reachable after its deletion{}", logs());
    assert_eq!(b2.ping(PODS[2].3, 3).unwrap(), 3, "vpc-b untouched");
    drop(agents);
}
