//! The forwarding part of `cargo xtask demo`: two simulated nodes on an underlay, one
//! `ovnbpf-agent` per node forwarding with eBPF, the demo's pods spread across the nodes, and
//! traffic: pings inside each VPC cross the nodes through Geneve while the overlapping addresses
//! of the other VPC stay out of reach.

use std::{path::Path, time::Duration};

use anyhow::{Context, Result, bail};
use ovnbpf_tests::{
    agent::AgentSpec,
    bpffs::BpfMount,
    cni_runtime::{PodAttachment, Runtime, plugin_dir},
    kubeovn::mac_for,
    names::unique_prefix,
    netns::Netns,
    network::{Node, Pod, Underlay},
    ovn::OvnLab,
    process::{Child, wait_until},
};
use serde_json::{Value, json};

use super::topology::{DUAL_STACK_VPC, SERVICE_PORT, SERVICE_VIP, TARGET_PORT, VPCS, ipv6_of};
use crate::cmd::Binaries;

const NODES: [&str; 2] = ["node1", "node2"];

/// Where each demo pod runs: the first pod of each VPC on one node, the second on the other, so
/// every same-VPC ping crosses the underlay.
fn node_of(vpc_index: usize, pod_index: usize) -> usize {
    (vpc_index + pod_index) % 2
}

/// Starts `ovnbpf-agent` as chassis `name` inside `node`'s namespace, forwarding with eBPF,
/// pinning under `pin_root/<name>`, serving CNI under `cni_root/<name>`, logging to `log`.
pub fn spawn_agent(
    lab: &OvnLab,
    agent: &Path,
    node: &Node,
    name: &str,
    pin_root: &Path,
    cni_root: &Path,
    log: std::path::PathBuf,
) -> Result<Child> {
    AgentSpec {
        chassis: name,
        node,
        local_ports: Vec::new(),
        pin_root: Some(pin_root.join(name)),
        cni_dir: Some(cni_root.join(name)),
        extra_args: Vec::new(),
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

pub fn run(lab: &OvnLab, binaries: &Binaries) -> Result<()> {
    let agent = binaries.agent.as_path();
    let prefix = unique_prefix();
    let mut underlay = Underlay::create(&prefix)?;
    let nodes = [underlay.add_node(NODES[0])?, underlay.add_node(NODES[1])?];
    // The agents pin their maps and links here, so they survive the agents' restarts; each
    // serves CNI on a socket in `work`.
    let bpffs = BpfMount::create()?;
    let work = tempfile::Builder::new().prefix("ovnbpf-demo-").tempdir()?;
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
            bpffs.path(),
            work.path(),
            log,
        )?);
    }
    let plugins = plugin_dir(&work.path().join("bin"), "ovnbpf", &binaries.cni)?;
    let socket = |index: usize| work.path().join(NODES[index]).join("cni.sock");
    if !wait_until(Duration::from_secs(15), || {
        socket(0).exists() && socket(1).exists()
    }) {
        let logs: Vec<String> = agents.iter().map(Child::log_tail).collect();
        bail!(
            "the agents did not open their CNI sockets:{}",
            logs.join("\n")
        );
    }
    println!(
        "== demo: pods attached by the CNI plugin (/opt/cni/bin/ovnbpf as a runtime calls it)"
    );
    let mut pods: Vec<(String, Pod)> = Vec::new();
    for (vpc_index, (_, _, namespace, names)) in VPCS.iter().enumerate() {
        for (pod_index, name) in names.iter().enumerate() {
            let node = node_of(vpc_index, pod_index);
            let netns = Netns::create(&format!("{prefix}-{name}"))?;
            let container_id = format!("{name:0<8}0000demo");
            let attachment = PodAttachment {
                container_id: container_id.clone(),
                netns: netns.path().display().to_string(),
                if_name: "eth0".into(),
                args: format!("K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}"),
            };
            let config = json!({"cniVersion": "1.0.0", "name": "ovn", "type": "ovnbpf", "server_socket": socket(node)});
            let started = std::time::Instant::now();
            let output = Runtime::new(nodes[node].netns(), vec![plugins.clone()]).exec(
                "ADD",
                &attachment,
                &config,
            )?;
            if !output.status.success() {
                bail!(
                    "CNI ADD of {name} failed: {}",
                    String::from_utf8_lossy(&output.stdout)
                );
            }
            let result: Value = serde_json::from_slice(&output.stdout)?;
            let ipv6 = result["ips"][1]["address"]
                .as_str()
                .map_or(String::new(), |address| format!(" and {address}"));
            println!(
                "   {name:<6} {:<6} {:<13} gw {:<9} on {} (ADD {} ms){ipv6}",
                VPCS[vpc_index].0,
                result["ips"][0]["address"].as_str().unwrap_or("?"),
                result["ips"][0]["gateway"].as_str().unwrap_or("?"),
                NODES[node],
                started.elapsed().as_millis()
            );
            let host = result["interfaces"][0]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            pods.push((name.to_string(), Pod::attached(name, netns, &host)));
        }
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
    for (vpc, _, _, [first, _]) in VPCS {
        let received = pod(first)?.ping("10.0.1.1".parse()?, 3)?;
        println!(
            "   {first} → its gateway 10.0.1.1 ({vpc}'s router, answered in the kernel): {received}/3 replies"
        );
        if received != 3 {
            bail!("{first} could not reach its gateway");
        }
    }
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
    // vpc-a is dual-stack: the same over IPv6, its router's IPv6 gateway answering in the kernel.
    if let Some((_, _, _, [first, second])) = VPCS.iter().find(|(v, ..)| *v == DUAL_STACK_VPC) {
        for (target, what, count) in [(ipv6_of(1), "its IPv6 gateway", 3), (ipv6_of(3), second, 5)]
        {
            let received = pod(first)?.ping6(target, count)?;
            println!(
                "   {first} → {what} ({target}, {DUAL_STACK_VPC}, IPv6): {received}/{count} replies"
            );
            if received != count {
                bail!("{first} could not reach {target} over IPv6");
            }
        }
    }
    println!(
        "   (details: cargo test -p ovnbpf-tests --test datapath_l2 shows the Geneve capture)"
    );
    // Each VPC's Service: the same ClusterIP, balanced in the kernel to that VPC's db pod.
    for (vpc, _, _, [first, second]) in VPCS {
        let answer = format!(
            "import socket\n\
             s = socket.socket()\n\
             s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('0.0.0.0', {TARGET_PORT}))\n\
             s.listen(1)\n\
             c, peer = s.accept()\n\
             c.sendall(b'{second} saw ' + peer[0].encode())\n\
             c.close()\n"
        );
        let _server = pod(second)?
            .netns()
            .spawn(second, "python3", &["-c", &answer], None)?;
        let ask = format!(
            "import socket, time\n\
             for attempt in range(20):\n    \
                 try:\n        \
                     s = socket.create_connection(('{SERVICE_VIP}', {SERVICE_PORT}), 2)\n        \
                     break\n    \
                 except OSError:\n        \
                     time.sleep(0.1)\n\
             print(s.recv(64).decode(), 'from', s.getpeername()[0])\n"
        );
        let reply = pod(first)?.netns().exec("python3", &["-c", &ask])?;
        println!(
            "   {first} → Service {SERVICE_VIP}:{SERVICE_PORT} ({vpc}'s ClusterIP, balanced in the kernel): {}",
            reply.trim()
        );
        if !reply.contains(second) || !reply.contains(&format!("from {SERVICE_VIP}")) {
            bail!("{first} could not reach its VPC's Service: {reply}");
        }
    }

    println!("== demo: per-port counters (ovnbpfctl datapath counters, read from the pins)");
    let ctl = &binaries.ctl;
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
                bpffs.path(),
                work.path(),
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
