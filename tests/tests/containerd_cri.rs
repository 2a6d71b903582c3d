//! A real container runtime drives ovnbpf's CNI: Debian's containerd (1.6), called through its
//! CRI socket exactly as kubelet calls it (RunPodSandbox, PodSandboxStatus, StopPodSandbox,
//! RemovePodSandbox; the sandbox image built locally), executes `ovnbpf` from the conflist
//! `ovnbpf-agent install-cni` installs (deploy/'s, only its `server_socket` pointed at this
//! node's agent) with Debian's `portmap` chained after it and Debian's `loopback` for `lo`. Pods
//! get their LSPs' addresses and MACs, reach each other across two nodes, and StopPodSandbox +
//! RemovePodSandbox leave no veth, no attachment record and no claim.
//!
//! The layout, as on real nodes: each simulated node (a network namespace) runs its own agent
//! and its own containerd, both inside the node's namespace. containerd is started entering only
//! the network namespace (setns), so the pod namespaces it mounts under `/var/run/netns` are the
//! machine's and the agent (which serves the plugin's unix socket) opens them by path, as the
//! DaemonSet does through its `/var/run/netns` mount; the plugins containerd executes (and
//! portmap's iptables) run in the node's namespace; the host ends of the pod veths are the node's.
//!
//! And the leak the sweep exists for: a sandbox whose DEL fails in a chained plugin (here
//! portmap's binary is gone when the runtime tears the pod down, so ovnbpf's DEL never runs) and
//! whose namespace the runtime then removes: the agent's periodic sweep releases the veth, the
//! record and the Port_Binding claim, counts it, and leaves a live pod alone; the runtime's CNI
//! GC collects that one, counted apart.

use ovnbpf_tests::scenario;
use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
    time::Duration,
};

use ovnbpf_tests::scenario::CniNodes;
use ovnbpf_tests::{
    cni_runtime::{PodAttachment, Runtime, plugin_dir},
    containerd::{Containerd, build_pause_image},
    kubeovn::mac_for,
    names::unique_prefix,
    netns::Netns,
    oci,
    process::wait_until,
    workspace_binary,
};
use serde_json::Value;

/// Where each node's agent serves its metrics, inside the node's namespace.
const METRICS: &str = "127.0.0.1:10665";

/// (pod, node index, address) in subnet-a (10.0.1.0/24), namespace `ns`.
const PODS: [(&str, usize, Ipv4Addr); 3] = [
    ("web", 0, Ipv4Addr::new(10, 0, 1, 2)),
    ("db", 1, Ipv4Addr::new(10, 0, 1, 3)),
    ("cache", 0, Ipv4Addr::new(10, 0, 1, 4)),
];

/// Two nodes with an agent each serving CNI (sweeping every second), and the pods' LSPs built
/// as Kube-OVN builds them.
struct Lab(CniNodes);

impl std::ops::Deref for Lab {
    type Target = CniNodes;
    fn deref(&self) -> &CniNodes {
        &self.0
    }
}

impl Lab {
    fn start() -> Self {
        let pods: Vec<(&str, Ipv4Addr)> = PODS.iter().map(|(name, _, ip)| (*name, *ip)).collect();
        let extra_args = [0, 1].map(|_| {
            vec![
                "--metrics-address".to_string(),
                METRICS.into(),
                "--cni-sweep-interval-s".into(),
                "1".into(),
            ]
        });
        Self(CniNodes::start(&pods, None, extra_args))
    }

    /// The attachment records of node `index`'s agent.
    fn records(&self, index: usize) -> Vec<PathBuf> {
        std::fs::read_dir(self.cni_dir(index).join("state/attachments"))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|entry| entry.path())
                    .filter(|path| path.extension().is_some_and(|e| e == "json"))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The chassis column of `port`'s Port_Binding (empty when unclaimed).
    fn chassis_of(&self, port: &str) -> String {
        scenario::port_chassis(&self.lab, port).unwrap()
    }

    /// The interfaces of node `index`'s namespace, by name.
    fn links(&self, index: usize) -> Vec<String> {
        let text = self.nodes[index]
            .netns()
            .ip(&["-o", "link", "show"])
            .unwrap();
        let mut names: Vec<String> = text
            .lines()
            .filter_map(|line| line.split(": ").nth(1))
            .map(|name| name.split('@').next().unwrap_or(name).to_string())
            .collect();
        names.sort();
        names
    }

    /// `GET /metrics` of node `index`'s agent.
    fn metrics(&self, index: usize) -> String {
        use std::io::{Read, Write};
        ovnbpf_tests::netns::run_in_path(&self.nodes[index].netns().path(), || {
            let mut stream = std::net::TcpStream::connect(METRICS)?;
            write!(stream, "GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")?;
            let mut text = String::new();
            stream.read_to_string(&mut text)?;
            Ok(text)
        })
        .unwrap()
    }

    /// Installs the plugin and deploy/'s conflist into `bin_dir`/`conf_dir` with
    /// `ovnbpf-agent install-cni`, then points the conflist's `server_socket` at node `index`'s
    /// agent (the only change); the installed conflist.
    fn install_cni(&self, index: usize, bin_dir: &Path, conf_dir: &Path) -> PathBuf {
        std::fs::create_dir_all(bin_dir).unwrap();
        std::fs::create_dir_all(conf_dir).unwrap();
        ovnbpf_tests::process::output(
            std::process::Command::new(workspace_binary("ovnbpf-agent"))
                .arg("install-cni")
                .arg("--plugin")
                .arg(workspace_binary("ovnbpf-cni"))
                .arg("--bin-dir")
                .arg(bin_dir)
                .arg("--conf-dir")
                .arg(conf_dir)
                .arg("--no-sysctl"),
        )
        .unwrap();
        let conflist = conf_dir.join("01-kube-ovn.conflist");
        let shipped: Value =
            serde_json::from_str(include_str!("../../deploy/cni/01-ovnbpf.conflist")).unwrap();
        let mut installed: Value =
            serde_json::from_str(&std::fs::read_to_string(&conflist).unwrap()).unwrap();
        assert_eq!(installed, shipped, "install-cni wrote deploy/'s conflist");
        installed["plugins"][0]["server_socket"] = self.socket(index).display().to_string().into();
        std::fs::write(&conflist, installed.to_string()).unwrap();
        conflist
    }
}

/// The name under /run/netns of a namespace path there.
fn netns_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Three pings from the namespace at `netns` (a runtime's, not the harness's) to `to`.
fn ping_from(netns: &str, to: Ipv4Addr) -> bool {
    let mut command = std::process::Command::new("ip");
    command.args(["netns", "exec", netns_name(netns), "ping"]);
    command.args([
        "-n",
        "-q",
        "-c",
        "3",
        "-i",
        "0.1",
        "-W",
        "1",
        &to.to_string(),
    ]);
    ovnbpf_tests::process::output(&mut command).is_ok_and(|text| text.contains(" 3 received"))
}

/// `eth0` of the namespace at `netns`: (MAC, addresses).
fn pod_nic(netns: &str) -> (String, String) {
    let name = netns_name(netns);
    let link =
        ovnbpf_tests::process::run("ip", &["-n", name, "-o", "link", "show", "eth0"]).unwrap();
    let mac = link
        .split_whitespace()
        .skip_while(|word| *word != "link/ether")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let addresses =
        ovnbpf_tests::process::run("ip", &["-n", name, "-o", "-4", "addr", "show", "eth0"])
            .unwrap();
    (mac, addresses)
}

#[test]
fn containerd_runs_pods_through_the_shipped_conflist_across_two_nodes() {
    let lab = Lab::start();
    let pause = build_pause_image(&lab.work.path().join("image")).unwrap();
    let mut runtimes = Vec::new();
    for index in 0..2 {
        let mut containerd = Containerd::prepare(
            &lab.work.path().join(format!("containerd-{index}")),
            &format!("{}-cri{index}", lab.prefix),
        )
        .unwrap();
        lab.install_cni(index, &containerd.bin_dir(), &containerd.conf_dir());
        containerd
            .start(lab.nodes[index].netns(), &pause)
            .unwrap_or_else(|error| panic!("{error:#}"));
        runtimes.push(containerd);
    }
    let version = runtimes[0].version().unwrap();
    assert_eq!(version["runtime"], "containerd", "{version}");
    assert_eq!(version["api"], "v1", "{version}");
    let links_before = [lab.links(0), lab.links(1)];

    // RunPodSandbox on each node: containerd makes the namespace and runs the conflist's ADD.
    let mut sandboxes = Vec::new();
    for (name, node, ip) in &PODS[..2] {
        let sandbox = runtimes[*node]
            .run_pod_sandbox(name, "ns")
            .unwrap_or_else(|error| panic!("{error:#}{}", lab.logs()));
        assert_eq!(sandbox.state, "SANDBOX_READY", "{sandbox:?}");
        assert_eq!(sandbox.ip, ip.to_string(), "{name}: {sandbox:?}");
        assert!(
            sandbox.netns.starts_with("/var/run/netns/cni-"),
            "{sandbox:?}"
        );
        let (mac, addresses) = pod_nic(&sandbox.netns);
        assert_eq!(mac, mac_for(name), "{name}'s eth0");
        assert!(addresses.contains(&format!("{ip}/24")), "{addresses}");
        assert_eq!(
            lab.chassis_of(&format!("{name}.ns")),
            lab.lab
                .sbctl(&[
                    "--bare",
                    "--columns=_uuid",
                    "find",
                    "Chassis",
                    &format!("name={}", scenario::NODES[*node]),
                ])
                .unwrap()
                .trim(),
            "{name}.ns is claimed by its node"
        );
        assert_eq!(lab.records(*node).len(), 1, "one attachment on node {node}");
        sandboxes.push(sandbox);
    }
    assert_eq!(
        runtimes[1].status(&sandboxes[1].id).unwrap(),
        sandboxes[1],
        "PodSandboxStatus reports the same sandbox"
    );

    // Across the two nodes, both ways.
    assert!(
        ping_from(&sandboxes[0].netns, PODS[1].2),
        "web cannot reach db across the nodes{}",
        lab.logs()
    );
    assert!(
        ping_from(&sandboxes[1].netns, PODS[0].2),
        "db cannot reach web across the nodes{}",
        lab.logs()
    );

    // StopPodSandbox (CNI DEL through the chain) and RemovePodSandbox, as kubelet deletes pods.
    for ((name, node, _), sandbox) in PODS[..2].iter().zip(&sandboxes) {
        runtimes[*node].stop_pod_sandbox(&sandbox.id).unwrap();
        runtimes[*node].remove_pod_sandbox(&sandbox.id).unwrap();
        assert!(
            runtimes[*node].list().unwrap().is_empty(),
            "ListPodSandbox after removing {name}"
        );
        assert!(
            !Path::new(&sandbox.netns).exists(),
            "{name}'s namespace {} is left",
            sandbox.netns
        );
        assert_eq!(
            lab.links(*node),
            links_before[*node],
            "{name}'s veth is left"
        );
        assert!(
            lab.records(*node).is_empty(),
            "{name}'s attachment record is left"
        );
        assert!(
            wait_until(Duration::from_secs(5), || lab
                .chassis_of(&format!("{name}.ns"))
                .is_empty()),
            "{name}.ns is still claimed{}",
            lab.logs()
        );
    }
    drop(runtimes);
}

#[test]
fn a_pod_whose_del_failed_in_a_chained_plugin_is_swept_once_its_namespace_is_gone() {
    let lab = Lab::start();
    let prefix = unique_prefix();
    let bin = lab.work.path().join("cni-bin");
    let conf = lab.work.path().join("cni-conf");
    let conflist: Value =
        serde_json::from_str(&std::fs::read_to_string(lab.install_cni(0, &bin, &conf)).unwrap())
            .unwrap();
    // portmap from its own directory, so it can disappear before the DEL.
    let portmap_dir = plugin_dir(
        &lab.work.path().join("portmap"),
        "portmap",
        Path::new("/usr/lib/cni/portmap"),
    )
    .unwrap();
    let node = lab.nodes[0].netns();
    let runtime = Runtime::new(node, vec![bin.clone(), portmap_dir.clone()]);
    let links_before = lab.links(0);

    // web: its DEL will fail; cache: stays, its namespace alive.
    let web_netns = Netns::create(&format!("{prefix}-web")).unwrap();
    let cache_netns = Netns::create(&format!("{prefix}-cache")).unwrap();
    let attachment = |container_id: &str, netns: &Netns, pod: &str| PodAttachment {
        container_id: container_id.into(),
        netns: netns.path().display().to_string(),
        if_name: "eth0".into(),
        args: format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME={pod}"),
    };
    let web = attachment("5eeb0001deadbeef", &web_netns, "web");
    let cache = attachment("5eeb0002deadbeef", &cache_netns, "cache");
    let web_result = runtime
        .add(&conflist, &web)
        .unwrap_or_else(|error| panic!("ADD web: {error:#}{}", lab.logs()));
    runtime
        .add(&conflist, &cache)
        .unwrap_or_else(|error| panic!("ADD cache: {error:#}{}", lab.logs()));
    assert_eq!(lab.records(0).len(), 2);
    assert!(scenario::port_up(&lab.lab, "web.ns"));

    // The runtime tears web down: portmap (last in the chain, so first in DEL) is gone, the DEL
    // fails before it reaches ovnbpf, and the runtime removes the namespace anyway.
    std::fs::remove_file(portmap_dir.join("portmap")).unwrap();
    let error = runtime
        .del(&conflist, &web, Some(&web_result))
        .expect_err("DEL without portmap");
    assert!(error.to_string().contains("portmap"), "{error:#}");
    assert_eq!(lab.records(0).len(), 2, "ovnbpf's DEL never ran");
    assert!(!lab.chassis_of("web.ns").is_empty());
    drop(web_netns);

    // The sweep (every second here) collects web, and only web.
    let swept = wait_until(Duration::from_secs(10), || {
        lab.records(0).len() == 1 && lab.chassis_of("web.ns").is_empty()
    });
    assert!(swept, "web was not swept{}", lab.logs());
    let mut links = lab.links(0);
    let cache_host = ovnbpf_cni_host_interface("5eeb0002deadbeef");
    assert!(links.contains(&cache_host), "cache's veth: {links:?}");
    links.retain(|link| *link != cache_host);
    assert_eq!(links, links_before, "web's veth is left");
    assert!(
        !lab.chassis_of("cache.ns").is_empty(),
        "cache keeps its claim"
    );
    assert!(scenario::port_up(&lab.lab, "cache.ns"));
    let metrics = lab.metrics(0);
    assert!(
        metrics.contains("ovnbpf_cni_gc_collected_total{by=\"sweep\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ovnbpf_cni_gc_collected_total{by=\"gc\"} 0\n"),
        "{metrics}"
    );
    assert!(
        std::fs::read_to_string(lab.work.path().join("node1.log"))
            .unwrap()
            .contains("swept an attachment whose network namespace is gone"),
        "the sweep logs what it removed"
    );

    // A runtime that no longer lists cache (CNI GC, as 1.1.0 runtimes send it): collected too,
    // and counted as the runtime's GC.
    let mut gc_config = conflist["plugins"][0].clone();
    gc_config["name"] = conflist["name"].clone();
    gc_config["cniVersion"] = "1.1.0".into();
    gc_config["cni.dev/valid-attachments"] = serde_json::json!([]);
    let gc = runtime.exec("GC", &cache, &gc_config).unwrap();
    assert!(gc.status.success(), "GC: {gc:?}");
    assert!(lab.records(0).is_empty(), "cache's record after GC");
    assert_eq!(lab.links(0), links_before, "cache's veth after GC");
    assert!(
        wait_until(Duration::from_secs(5), || lab
            .chassis_of("cache.ns")
            .is_empty()),
        "cache.ns is still claimed after GC{}",
        lab.logs()
    );
    let metrics = lab.metrics(0);
    for line in [
        "ovnbpf_cni_gc_collected_total{by=\"gc\"} 1",
        "ovnbpf_cni_gc_collected_total{by=\"sweep\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    drop(cache_netns);
}

/// The host end of a pod veth, as the agent names it: the container ID's first 12 characters
/// and `_h` (Kube-OVN's naming).
fn ovnbpf_cni_host_interface(container_id: &str) -> String {
    format!("{}_h", &container_id[..12])
}

/// The image `cargo xtask image` makes (here from the suite's binaries, debug info stripped),
/// run by containerd: the agent starts in it (its shared libraries are in the image), and its
/// `install-cni`, as the DaemonSet's init container runs it with the node's CNI directories
/// mounted, installs deploy/'s conflist and the plugin; `ovnbpfctl` runs in it too.
#[test]
fn ovnbpfs_image_runs_under_containerd_and_its_init_installs_the_cni() {
    ovnbpf_tests::require_root();
    let prefix = unique_prefix();
    let work = tempfile::tempdir().unwrap();
    let bin = work.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for binary in ["ovnbpf-agent", "ovnbpfctl", "ovnbpf-cni"] {
        ovnbpf_tests::process::output(
            std::process::Command::new("objcopy")
                .arg("--strip-debug")
                .arg(workspace_binary(binary))
                .arg(bin.join(binary)),
        )
        .unwrap();
    }
    let name = "localhost/ovnbpf:test";
    let archive = work.path().join("ovnbpf.tar");
    oci::write_archive(&oci::ovnbpf_image(&bin, name).unwrap(), &archive).unwrap();

    let node = Netns::create(&format!("{prefix}-image")).unwrap();
    let pause = build_pause_image(&work.path().join("pause")).unwrap();
    let mut containerd =
        Containerd::prepare(&work.path().join("containerd"), &format!("{prefix}-image")).unwrap();
    containerd
        .start(&node, &pause)
        .unwrap_or_else(|error| panic!("{error:#}"));
    containerd.import(&archive).unwrap();

    let version = containerd
        .run_container(
            name,
            &["/usr/local/bin/ovnbpf-agent", "--version"],
            &[],
            &[],
        )
        .unwrap_or_else(|error| panic!("{error:#}{}", containerd.log()));
    assert!(version.starts_with("ovnbpf-agent "), "{version}");

    let (cni_bin, cni_conf) = (work.path().join("opt-cni-bin"), work.path().join("net.d"));
    std::fs::create_dir_all(&cni_bin).unwrap();
    std::fs::create_dir_all(&cni_conf).unwrap();
    containerd
        .run_container(
            name,
            &["/usr/local/bin/ovnbpf-agent", "install-cni", "--no-sysctl"],
            &[],
            &[(&cni_bin, "/opt/cni/bin"), (&cni_conf, "/etc/cni/net.d")],
        )
        .unwrap_or_else(|error| panic!("{error:#}"));
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/cni/01-ovnbpf.conflist");
    assert_eq!(
        std::fs::read(cni_conf.join("01-kube-ovn.conflist")).unwrap(),
        std::fs::read(shipped).unwrap()
    );
    assert_eq!(
        std::fs::read(cni_bin.join("ovnbpf")).unwrap(),
        std::fs::read(bin.join("ovnbpf-cni")).unwrap()
    );
    let ctl = containerd
        .run_container(name, &["/usr/local/bin/ovnbpfctl", "--version"], &[], &[])
        .unwrap_or_else(|error| panic!("{error:#}"));
    assert!(ctl.starts_with("ovnbpfctl "), "{ctl}");
}
