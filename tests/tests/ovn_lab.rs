//! The real OVN lab: ovsdb-server (NB, SB) and ovn-northd from Debian's packages, Kube-OVN-shaped
//! topologies through ovn-nbctl, and what northd writes to the Southbound DB.

use std::{net::Ipv4Addr, path::Path};

use ovnbpf_tests::{
    kubeovn::{self, DatapathKind, Topology, mac_for},
    ovn::{Db, OvnLab},
    require_root,
};

#[test]
fn two_vpcs_with_overlapping_cidrs_get_distinct_router_datapaths() {
    require_root();
    let lab = OvnLab::start().unwrap();
    let mut topology = Topology::new();
    topology.default_vpc().unwrap();
    for (vpc, subnet, pod) in [
        ("vpc-a", "subnet-a", "pod-a1"),
        ("vpc-b", "subnet-b", "pod-b1"),
    ] {
        topology
            .vpc_with_subnet(vpc, subnet, "10.0.1.0/24")
            .unwrap();
        topology.pod(
            subnet,
            pod,
            "ns1",
            &mac_for(pod),
            Ipv4Addr::new(10, 0, 1, 2),
        );
    }
    topology.apply(&lab).unwrap();

    let datapaths = kubeovn::sb_datapaths(&lab).unwrap();
    let routers: Vec<_> = datapaths
        .iter()
        .filter(|d| d.kind == DatapathKind::Router)
        .collect();
    let router_names: Vec<_> = routers.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        router_names,
        ["ovn-cluster", "vpc-a", "vpc-b"],
        "{datapaths:?}"
    );
    let vpc_a = routers.iter().find(|d| d.name == "vpc-a").unwrap();
    let vpc_b = routers.iter().find(|d| d.name == "vpc-b").unwrap();
    assert_ne!(vpc_a.tunnel_key, vpc_b.tunnel_key, "{datapaths:?}");
    assert!(vpc_a.tunnel_key > 0 && vpc_b.tunnel_key > 0);

    let switches: Vec<_> = datapaths
        .iter()
        .filter(|d| d.kind == DatapathKind::Switch)
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(switches, ["join", "ovn-default", "subnet-a", "subnet-b"]);
    let mut keys: Vec<_> = datapaths.iter().map(|d| d.tunnel_key).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(
        keys.len(),
        datapaths.len(),
        "datapath tunnel keys must be unique: {datapaths:?}"
    );
    println!("SB datapaths: {datapaths:?}");

    // The same pod IP lives in both VPCs, each on its own switch datapath.
    let ports = kubeovn::sb_ports(&lab).unwrap();
    let key_of = |name: &str| {
        datapaths
            .iter()
            .find(|d| d.name == name)
            .unwrap()
            .tunnel_key
    };
    let a1 = ports
        .iter()
        .find(|p| p.logical_port == "pod-a1.ns1")
        .expect("pod-a1 bound");
    let b1 = ports
        .iter()
        .find(|p| p.logical_port == "pod-b1.ns1")
        .expect("pod-b1 bound");
    assert_eq!(a1.datapath_key, key_of("subnet-a"));
    assert_eq!(b1.datapath_key, key_of("subnet-b"));
    assert_eq!(a1.kind, "");
    // Router ports become patch port bindings on both sides.
    let patch = ports
        .iter()
        .find(|p| p.logical_port == "subnet-a-vpc-a")
        .expect("switch side");
    assert_eq!(patch.kind, "patch");
    assert_eq!(patch.datapath_key, key_of("subnet-a"));
}

#[test]
fn peering_and_static_routes_reach_the_southbound() {
    require_root();
    let lab = OvnLab::start().unwrap();
    let mut topology = Topology::new();
    topology
        .peered_vpcs("10.0.1.0/24", &["vpc-a", "vpc-b"])
        .unwrap();
    topology.apply(&lab).unwrap();

    let ports = kubeovn::sb_ports(&lab).unwrap();
    for name in ["vpc-a-vpc-b", "vpc-b-vpc-a"] {
        let port = ports
            .iter()
            .find(|p| p.logical_port == name)
            .unwrap_or_else(|| panic!("{name}: {ports:?}"));
        assert_eq!(port.kind, "patch");
    }
    // northd compiles the static route into vpc-a's routing stage.
    let flows = lab.sbctl(&["lflow-list", "vpc-a"]).unwrap();
    let route = flows
        .lines()
        .find(|l| l.contains("lr_in_ip_routing") && l.contains("ip4.dst == 10.1.1.0/24"))
        .unwrap_or_else(|| panic!("no route flow for 10.1.1.0/24 in vpc-a:\n{flows}"));
    assert!(route.contains("10.0.255.2"), "{route}");
}

#[test]
fn lab_listens_on_unix_and_tcp_and_stops_its_processes() {
    require_root();
    let lab = OvnLab::start().unwrap();
    for db in [Db::Northbound, Db::Southbound] {
        for remote in [lab.unix_remote(db), lab.tcp_remote(db)] {
            let dbs = ovnbpf_tests::process::run("ovsdb-client", &["list-dbs", &remote]).unwrap();
            assert!(dbs.contains("OVN_"), "{remote}: {dbs}");
        }
    }
    let pids = lab.pids();
    let dir = lab.dir().to_path_buf();
    drop(lab);
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists() || is_zombie_or_other(pid),
            "pid {pid} still runs"
        );
    }
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

/// After our child was reaped its PID may be reused by an unrelated process; that is not ours.
fn is_zombie_or_other(pid: u32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline);
    !(cmdline.contains("ovsdb-server") || cmdline.contains("ovn-northd"))
}
