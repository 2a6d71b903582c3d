//! `cargo xtask demo`: the product on a built-in default. Starts a real OVN central (ovsdb-server
//! and ovn-northd), builds a Kube-OVN-shaped two-VPC topology with overlapping CIDRs, shows what
//! northd put in the Southbound DB, shows what ovnbpf's compiler makes of the logical flows
//! (coverage, and traces of packets through the IR), loads ovnbpf's kernel programs through the
//! verifier, then runs two simulated nodes with one agent each and pings between their pods
//! through the eBPF datapath ([`agents`]), and tears everything down.

pub mod agents;
pub mod topology;

use std::process::Command;

use anyhow::{Context, Result};
use ovnbpf_tests::{
    kubeovn::{self, DatapathKind},
    ovn::{Db, OvnLab},
    process,
};

use crate::cmd;

/// The MAC of a pod port in the SB (its "MAC IP" address).
fn mac_of(ports: &[kubeovn::SbPort], name: &str) -> String {
    ports
        .iter()
        .find(|p| p.logical_port == name)
        .map(|p| p.mac.clone())
        .unwrap_or_default()
}

pub fn run() -> Result<()> {
    println!("== demo: building the agent, ovnbpfctl and the CNI plugin");
    let binaries = cmd::build_binaries(cmd::Profile::Debug)?;

    println!("== demo: starting a real OVN central (ovsdb-server NB+SB, ovn-northd)");
    let lab = OvnLab::start()?;
    println!(
        "   NB {}  SB {}",
        lab.tcp_remote(Db::Northbound),
        lab.tcp_remote(Db::Southbound)
    );

    println!(
        "== demo: Kube-OVN topology through ovn-nbctl: default VPC + vpc-a and vpc-b, both {}",
        topology::SHARED_CIDR
    );
    topology::build()?.apply(&lab)?;

    println!("== demo: Southbound datapaths (tunnel_key = Geneve VNI)");
    let datapaths = kubeovn::sb_datapaths(&lab)?;
    println!("   {:<14} {:<8} {:>10}", "datapath", "kind", "tunnel_key");
    for datapath in &datapaths {
        let kind = match datapath.kind {
            DatapathKind::Router => "router",
            DatapathKind::Switch => "switch",
        };
        println!(
            "   {:<14} {:<8} {:>10}",
            datapath.name, kind, datapath.tunnel_key
        );
    }

    println!("== demo: pod port bindings (same IP 10.0.1.x in both VPCs, isolated by datapath)");
    let ports = kubeovn::sb_ports(&lab)?;
    println!(
        "   {:<18} {:<10} {:>8} {:>10}",
        "logical_port", "datapath", "dp key", "port key"
    );
    for port in ports.iter().filter(|p| p.kind.is_empty()) {
        let datapath = datapaths
            .iter()
            .find(|d| d.tunnel_key == port.datapath_key)
            .map_or("?", |d| d.name.as_str());
        println!(
            "   {:<18} {:<10} {:>8} {:>10}",
            port.logical_port, datapath, port.datapath_key, port.tunnel_key
        );
    }
    let flows = lab.sbctl(&["--bare", "--columns=_uuid", "list", "Logical_Flow"])?;
    println!(
        "   {} logical flows in the SB",
        flows.lines().filter(|l| !l.is_empty()).count()
    );

    let ctl = &binaries.ctl;
    let remote = lab.unix_remote(Db::Southbound);
    println!(
        "== demo: ovnbpf compiles the logical flows into its pipeline IR (ovnbpfctl lflow coverage)"
    );
    let coverage =
        process::output(Command::new(ctl).args(["lflow", "coverage", "--remote", &remote]))?;
    for line in coverage.lines().filter(|l| {
        l.starts_with("stage")
            || l.starts_with("total")
            || l.starts_with("ls_in_l2_lkup")
            || l.starts_with("lr_in_ip_routing ")
    }) {
        println!("   {line}");
    }
    let (web, db) = (
        mac_of(&ports, "web-a.team-a"),
        mac_of(&ports, "db-a.team-a"),
    );
    let router_mac = ovnbpf_tests::kubeovn::mac_for("vpc-a-subnet-a");
    for (what, microflow) in [
        (
            "web-a pings db-a (same subnet, 10.0.1.0/24 in vpc-a)",
            format!(
                "inport == \"web-a.team-a\" && eth.src == {web} && eth.dst == {db} && ip4.src == 10.0.1.2 && ip4.dst == 10.0.1.3 && ip.ttl == 64 && icmp4.type == 8 && icmp4.code == 0"
            ),
        ),
        (
            "web-a pings its gateway 10.0.1.1 (vpc-a's router answers)",
            format!(
                "inport == \"web-a.team-a\" && eth.src == {web} && eth.dst == {router_mac} && ip4.src == 10.0.1.2 && ip4.dst == 10.0.1.1 && ip.ttl == 64 && icmp4.type == 8 && icmp4.code == 0"
            ),
        ),
    ] {
        println!("== demo: ovnbpfctl trace: {what}");
        let trace =
            process::output(Command::new(ctl).args(["trace", "--remote", &remote, &microflow]))?;
        for line in trace.lines() {
            println!("   {line}");
        }
    }

    println!("== demo: ovnbpf kernel programs, loaded through the verifier");
    let verified = process::output(Command::new(&binaries.agent).arg("verify"))
        .context("ovnbpf-agent verify")?;
    for line in verified.lines() {
        println!("   {line}");
    }

    println!("== demo: two nodes, one ovnbpf-agent each, the pods spread over them");
    agents::run(&lab, &binaries)?;

    println!("== demo: tearing down");
    drop(lab);
    println!("== demo: done");
    Ok(())
}
