//! `cargo xtask demo`: the product on a built-in default. Starts a real OVN central (ovsdb-server
//! and ovn-northd), builds a Kube-OVN-shaped two-VPC topology with overlapping CIDRs, shows what
//! northd put in the Southbound DB, loads ovnbpf's kernel programs through the verifier, and tears
//! everything down. Later work extends it with agents, pods and traffic.

use std::process::Command;

use anyhow::{Context, Result};
use ovnbpf_tests::{
    kubeovn::{self, DatapathKind},
    ovn::{Db, OvnLab},
};

use crate::{cmd, demo_topology};

pub fn run() -> Result<()> {
    println!("== demo: building the agent");
    cmd::run_checked(Command::new("cargo").args([
        "build",
        "--quiet",
        "--package",
        "ovnbpf-agent",
    ]))?;

    println!("== demo: starting a real OVN central (ovsdb-server NB+SB, ovn-northd)");
    let lab = OvnLab::start()?;
    println!(
        "   NB {}  SB {}",
        lab.tcp_remote(Db::Northbound),
        lab.tcp_remote(Db::Southbound)
    );

    println!(
        "== demo: Kube-OVN topology through ovn-nbctl: default VPC + vpc-a and vpc-b, both {}",
        demo_topology::SHARED_CIDR
    );
    demo_topology::build()?.apply(&lab)?;

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

    println!("== demo: ovnbpf kernel programs, loaded through the verifier");
    let agent = std::path::Path::new("target/debug/ovnbpf-agent");
    let verified = cmd::output(Command::new(agent).arg("verify")).context("ovnbpf-agent verify")?;
    for line in verified.lines() {
        println!("   {line}");
    }

    println!("== demo: tearing down");
    drop(lab);
    println!("== demo: done");
    Ok(())
}
