//! The forwarding part of `cargo xtask demo`: two simulated nodes on an underlay, one
//! `ovnbpf-agent` per node forwarding with eBPF, the demo's pods spread across the nodes, and
//! traffic: pings inside each VPC cross the nodes through Geneve while the overlapping addresses
//! of the other VPC stay out of reach.

use std::{path::Path, time::Duration};

use anyhow::{Context, Result, bail};
use ovnbpf_tests::{
    agent::AgentSpec,
    bpffs::BpfMount,
    kubeovn::mac_for,
    names::unique_prefix,
    network::{Node, Pod, PodSpec, Underlay},
    ovn::OvnLab,
    process::{Child, wait_until},
};

use crate::demo_topology::VPCS;

const NODES: [&str; 2] = ["node1", "node2"];

/// Where each demo pod runs: the first pod of each VPC on one node, the second on the other, so
/// every same-VPC ping crosses the underlay.
fn node_of(vpc_index: usize, pod_index: usize) -> usize {
    (vpc_index + pod_index) % 2
}

/// Starts `ovnbpf-agent` as chassis `name` inside `node`'s namespace, forwarding with eBPF for
/// `local_ports` (`PORT=INTERFACE`), pinning under `pin_root`, logging to `log`.
pub fn spawn_agent(
    lab: &OvnLab,
    agent: &Path,
    node: &Node,
    name: &str,
    local_ports: &[String],
    pin_root: &Path,
    log: std::path::PathBuf,
) -> Result<Child> {
    AgentSpec {
        chassis: name,
        node,
        local_ports: local_ports.to_vec(),
        pin_root: Some(pin_root.join(name)),
        cni_dir: None,
    }
    .spawn(lab, agent, log)
}

/// Ends the agents (by PID) and removes their logs.
pub fn stop_agents(agents: Vec<Child>) {
    let logs: Vec<_> = agents
        .iter()
        .filter_map(|a| a.log_path().map(Path::to_path_buf))
        .collect();
    drop(agents);
    for log in logs {
        let _ = std::fs::remove_file(log);
    }
}

/// Waits until every VIF Port_Binding in the SB is `up` (its agent programmed it).
pub fn wait_all_up(lab: &OvnLab, ports: usize, agents: &[Child]) -> Result<()> {
    let all_up = wait_until(Duration::from_secs(30), || {
        lab.sbctl(&[
            "--bare",
            "--columns=up",
            "find",
            "Port_Binding",
            "type=\"\"",
        ])
        .is_ok_and(|text| {
            let states: Vec<&str> = text.split_whitespace().collect();
            states.len() == ports && states.iter().all(|s| *s == "true")
        })
    });
    if !all_up {
        let logs: Vec<String> = agents.iter().map(Child::log_tail).collect();
        bail!("the pods did not come up:{}", logs.join("\n"));
    }
    Ok(())
}

pub fn run(lab: &OvnLab, agent: &Path) -> Result<()> {
    let prefix = unique_prefix();
    let mut underlay = Underlay::create(&prefix)?;
    let nodes = [underlay.add_node(NODES[0])?, underlay.add_node(NODES[1])?];
    let mut pods: Vec<(String, Pod)> = Vec::new();
    let mut local_ports: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    for (vpc_index, (_, _, namespace, names)) in VPCS.iter().enumerate() {
        for (pod_index, name) in names.iter().enumerate() {
            let node = node_of(vpc_index, pod_index);
            let address = format!("10.0.1.{}/24", pod_index + 2);
            let host = format!("{name}_h");
            let mac = mac_for(name);
            let pod = nodes[node].add_pod(&PodSpec {
                name,
                host_interface: &host,
                mac: Some(&mac),
                address: Some(&address),
                gateway: None,
                mtu: Some(1442),
            })?;
            local_ports[node].push(format!("{name}.{namespace}={host}"));
            println!(
                "   {name:<6} {:<6} {address:<13} on {}",
                VPCS[vpc_index].0, NODES[node]
            );
            pods.push((name.to_string(), pod));
        }
    }
    // The agents pin their maps and links here, so they survive the agents' restarts.
    let bpffs = BpfMount::create()?;
    let mut agents: Vec<Child> = Vec::new();
    for (index, node) in nodes.iter().enumerate() {
        let log = std::env::temp_dir().join(format!("{prefix}-{}.log", NODES[index]));
        println!(
            "== demo: starting ovnbpf-agent on {} (log {})",
            NODES[index],
            log.display()
        );
        agents.push(spawn_agent(
            lab,
            agent,
            node,
            NODES[index],
            &local_ports[index],
            bpffs.path(),
            log,
        )?);
    }
    wait_all_up(lab, pods.len(), &agents)?;
    println!("   every pod is up in the SB (its agent programmed the kernel maps)");

    let pod = |name: &str| {
        pods.iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p)
            .context("demo pod")
    };
    println!("== demo: traffic");
    for (vpc, _, _, [first, second]) in VPCS {
        let received = pod(first)?.ping("10.0.1.3".parse()?, 5)?;
        println!("   {first} → {second} (10.0.1.3, {vpc}, other node): {received}/5 replies");
        if received != 5 {
            bail!("{first} could not reach {second}");
        }
        let neighbour = pod(first)?.netns().ip(&["neigh", "show", "10.0.1.3"])?;
        let other_vpc_pod = VPCS
            .iter()
            .find(|(v, ..)| *v != vpc)
            .map(|(_, _, _, pods)| pods[1])
            .context("other VPC")?;
        let isolated =
            neighbour.contains(&mac_for(second)) && !neighbour.contains(&mac_for(other_vpc_pod));
        println!(
            "   {first} resolved 10.0.1.3 to {second}'s MAC, not {other_vpc_pod}'s (same address in the other VPC): {}",
            if isolated { "yes" } else { "NO" }
        );
        if !isolated {
            bail!("VPC isolation broken: {neighbour}");
        }
    }
    println!(
        "   (details: cargo test -p ovnbpf-tests --test datapath_l2 shows the Geneve capture)"
    );

    println!("== demo: per-port counters (ovnbpfctl datapath counters, read from the pins)");
    let ctl = agent.with_file_name("ovnbpfctl");
    for (index, node) in nodes.iter().enumerate() {
        let pin_dir = bpffs.path().join(NODES[index]);
        let table = node.netns().exec(
            &ctl.to_string_lossy(),
            &[
                "datapath",
                "counters",
                "--pin-dir",
                &pin_dir.to_string_lossy(),
            ],
        )?;
        println!("   {}:", NODES[index]);
        for line in table.lines() {
            println!("     {line}");
        }
    }

    let (first_vpc, _, _, [first, _]) = VPCS[0];
    println!(
        "== demo: hitless restart: {first} pings every 10 ms across nodes while both agents are killed (SIGKILL) and started again"
    );
    let pinger = pod(first)?;
    let received = std::thread::scope(|scope| -> Result<u32> {
        let pings = scope.spawn(|| pinger.ping_every("10.0.1.3".parse()?, 300, "0.01"));
        std::thread::sleep(Duration::from_millis(500));
        for (index, agent_child) in agents.iter_mut().enumerate() {
            agent_child.kill();
            let log = std::env::temp_dir().join(format!("{prefix}-{}.log", NODES[index]));
            *agent_child = spawn_agent(
                lab,
                agent,
                &nodes[index],
                NODES[index],
                &local_ports[index],
                bpffs.path(),
                log,
            )?;
        }
        pings
            .join()
            .map_err(|_| anyhow::anyhow!("the ping thread panicked"))?
    })?;
    println!(
        "   {received}/300 replies in {first_vpc} while no agent ran for part of the time: the pinned programs and maps kept forwarding, and the new agents adopted them"
    );
    if received != 300 {
        bail!("pings were lost across the restart");
    }
    stop_agents(agents);
    Ok(())
}
