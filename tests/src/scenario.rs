//! Scenarios the integration tests share: two simulated nodes under one real OVN central
//! ([`TwoNodes`]), pods planned as (name, subnet, node, address) and built as real namespaces
//! ([`PodPlan`], [`add_planned_pods`]), the overlapping-VPC layout of the datapath tests
//! ([`OVERLAPPING_PODS`], [`overlapping_vpcs`]), one `ovnbpf-agent` per node for those pods, and
//! what the tests read back (Port_Binding `up`, the datapath counters, what a pod's sockets get).
//! Builds topologies only through [`crate::kubeovn`] (ovn-nbctl); everything it creates is removed
//! on drop. Fixtures that need the agent library (its SB replica and compiler, the kernel
//! programs) stay with the tests (`tests/tests/common`): this crate is also xtask's, which must
//! build without the eBPF toolchain.

use std::{net::Ipv4Addr, time::Duration};

use crate::{
    agent::AgentSpec,
    kubeovn::{Topology, mac_for},
    netns::Netns,
    network::{Node, Pod, PodSpec, Underlay},
    ovn::OvnLab,
    process::{Child, wait_until},
    workspace_binary,
};

/// Two VPCs whose subnets overlap (10.0.1.0/24), two pods each, spread over two nodes:
/// (pod, subnet, node index, address). vpc-b reuses vpc-a's addresses on the other nodes.
pub const OVERLAPPING_PODS: [PodPlan; 4] = [
    ("a1", "subnet-a", 0, Ipv4Addr::new(10, 0, 1, 2)),
    ("a2", "subnet-a", 1, Ipv4Addr::new(10, 0, 1, 3)),
    ("b1", "subnet-b", 0, Ipv4Addr::new(10, 0, 1, 3)),
    ("b2", "subnet-b", 1, Ipv4Addr::new(10, 0, 1, 2)),
];

/// Builds [`OVERLAPPING_PODS`] in the NB (through ovn-nbctl, as Kube-OVN does) and as real pods
/// (namespaces with veths, MTU 1442 for Geneve) on `nodes`; host veths are `<pod>_h`.
pub fn overlapping_vpcs(lab: &OvnLab, nodes: &[Node]) -> Vec<Pod> {
    overlapping_vpcs_with(lab, nodes, &OVERLAPPING_PODS)
}

/// [`overlapping_vpcs`] with other pods in the two VPCs (subnets `subnet-a` and `subnet-b`).
pub fn overlapping_vpcs_with(lab: &OvnLab, nodes: &[Node], plans: &[PodPlan]) -> Vec<Pod> {
    let mut topology = Topology::new();
    topology
        .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
        .unwrap()
        .vpc_with_subnet("vpc-b", "subnet-b", "10.0.1.0/24")
        .unwrap();
    build_planned_pods(lab, nodes, topology, plans, false, 1442)
}

/// Adds `plans`' logical ports to `topology` (MACs from [`mac_for`], namespace `ns`), applies it
/// through ovn-nbctl and creates the pods (see [`add_planned_pods`]).
pub fn build_planned_pods(
    lab: &OvnLab,
    nodes: &[Node],
    mut topology: Topology,
    plans: &[PodPlan],
    gateway: bool,
    mtu: u32,
) -> Vec<Pod> {
    for (name, subnet, _, ip) in plans {
        topology.pod(subnet, name, "ns", &mac_for(name), *ip);
    }
    topology.apply(lab).unwrap();
    add_planned_pods(nodes, plans, gateway, mtu)
}

/// Turns IPv6 off in `pods` (no router solicitations or MLD reports), so counters of their ports
/// move only with the traffic a test sends, and waits for what was already in flight.
pub fn silence_ipv6(pods: &[&Pod]) {
    for pod in pods {
        pod.netns()
            .exec("sysctl", &["-qw", "net.ipv6.conf.all.disable_ipv6=1"])
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
}

/// Both nodes' datapath counters (see [`datapath_counters`]), the pins of node `i` under
/// `pin_root/NODES[i]`.
pub fn both_nodes_counters(nodes: &[Node], pin_root: &std::path::Path) -> [serde_json::Value; 2] {
    [0, 1].map(|index| datapath_counters(&nodes[index], &pin_root.join(NODES[index])))
}

/// A pod as the tests plan it: (name, subnet, node index, address in a /24).
pub type PodPlan = (&'static str, &'static str, usize, Ipv4Addr);

/// A real OVN central and two simulated nodes on one underlay, removed on drop.
pub struct TwoNodes {
    pub lab: OvnLab,
    pub nodes: [Node; 2],
    /// The name prefix of this test's namespaces.
    pub prefix: String,
    pub underlay: Underlay,
}

impl TwoNodes {
    pub fn start() -> Self {
        Self::start_on(false)
    }

    /// [`Self::start`], the nodes tunnelling over IPv6 when `ipv6_underlay`
    /// ([`Underlay::create_ipv6`]).
    pub fn start_on(ipv6_underlay: bool) -> Self {
        crate::require_root();
        let lab = OvnLab::start().unwrap();
        let prefix = crate::names::unique_prefix();
        let mut underlay = if ipv6_underlay {
            Underlay::create_ipv6(&prefix)
        } else {
            Underlay::create(&prefix)
        }
        .unwrap();
        let nodes = [
            underlay.add_node("node1").unwrap(),
            underlay.add_node("node2").unwrap(),
        ];
        Self {
            lab,
            nodes,
            prefix,
            underlay,
        }
    }
}

/// Creates `plans` as real pods (namespaces with veths `<pod>_h`, the given MTU), with a
/// default route via their subnet's first address when `gateway`.
pub fn add_planned_pods(nodes: &[Node], plans: &[PodPlan], gateway: bool, mtu: u32) -> Vec<Pod> {
    plans
        .iter()
        .map(|(name, _, node, ip)| {
            let octets = ip.octets();
            nodes[*node]
                .add_pod(&PodSpec {
                    name,
                    host_interface: &format!("{name}_h"),
                    mac: Some(&mac_for(name)),
                    address: Some(&format!("{ip}/24")),
                    gateway: gateway.then(|| Ipv4Addr::new(octets[0], octets[1], octets[2], 1)),
                    mtu: Some(mtu),
                })
                .unwrap()
        })
        .collect()
}

/// The agent of node `index`, forwarding for the planned pods on it (`PORT=<pod>_h`), pinning
/// under `pin_root/<chassis>` when given.
pub fn planned_agent<'a>(
    nodes: &'a [Node],
    plans: &[PodPlan],
    index: usize,
    pin_root: Option<&std::path::Path>,
) -> AgentSpec<'a> {
    AgentSpec {
        chassis: NODES[index],
        node: &nodes[index],
        local_ports: plans
            .iter()
            .filter(|plan| plan.2 == index)
            .map(|(name, ..)| format!("{name}.ns={name}_h"))
            .collect(),
        pin_root: pin_root.map(|root| root.join(NODES[index])),
        cni_dir: None,
        extra_args: Vec::new(),
    }
}

/// Starts [`planned_agent`] of node `index`, logging to `log_dir/<chassis>.log`.
pub fn start_planned_agent(
    lab: &OvnLab,
    nodes: &[Node],
    plans: &[PodPlan],
    index: usize,
    pin_root: Option<&std::path::Path>,
    log_dir: &std::path::Path,
) -> Child {
    let log = log_dir.join(format!("{}.log", NODES[index]));
    planned_agent(nodes, plans, index, pin_root)
        .spawn(lab, &workspace_binary("ovnbpf-agent"), log)
        .unwrap()
}

/// Starts the planned agent of every node.
pub fn start_planned_agents(
    lab: &OvnLab,
    nodes: &[Node],
    plans: &[PodPlan],
    pin_root: Option<&std::path::Path>,
    log_dir: &std::path::Path,
) -> Vec<Child> {
    (0..nodes.len())
        .map(|index| start_planned_agent(lab, nodes, plans, index, pin_root, log_dir))
        .collect()
}

/// [`start_planned_agents`], each agent also given `extra_args` (e.g. `--bridge-mappings`).
pub fn start_planned_agents_with(
    lab: &OvnLab,
    nodes: &[Node],
    plans: &[PodPlan],
    pin_root: Option<&std::path::Path>,
    log_dir: &std::path::Path,
    extra_args: &[&str],
) -> Vec<Child> {
    (0..nodes.len())
        .map(|index| {
            let mut spec = planned_agent(nodes, plans, index, pin_root);
            spec.extra_args = extra_args.iter().map(|a| (*a).to_string()).collect();
            let log = log_dir.join(format!("{}.log", NODES[index]));
            spec.spawn(lab, &workspace_binary("ovnbpf-agent"), log)
                .unwrap()
        })
        .collect()
}

/// Which datapath the agents of a scenario run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dataplane {
    Ebpf,
    /// `--dataplane openflow`: each node gets an Open vSwitch of its own (userspace datapath,
    /// tunnelling from `br-phy`, which takes the node's underlay address) whose br-int the
    /// agent programs.
    OpenFlow,
}

/// Open vSwitch under the agent of each node, for [`Dataplane::OpenFlow`].
pub struct OvsNodes {
    pub switches: Vec<crate::ovs_chassis::OvsSwitch>,
}

impl OvsNodes {
    /// An Open vSwitch in each node, its underlay on `br-phy`, each knowing the others' tunnel
    /// endpoints' MACs; TX checksum offload off on the planned pods' veths (both ends), since
    /// the userspace datapath reads frames whole.
    pub fn start(nodes: &[Node], plans: &[PodPlan], pods: &[Pod]) -> anyhow::Result<Self> {
        let mut switches = Vec::new();
        for node in nodes {
            let switch = crate::ovs_chassis::OvsSwitch::start(node.netns())?;
            switch.underlay(node)?;
            switches.push(switch);
        }
        crate::ovs_chassis::introduce_tunnel_peers(nodes, &switches)?;
        for ((name, _, node, _), pod) in plans.iter().zip(pods) {
            let interface = format!("{name}_h");
            crate::ovs_chassis::full_checksums(nodes[*node].netns(), &interface, pod.netns())?;
        }
        Ok(Self { switches })
    }

    /// The agent arguments that make node `index`'s agent program its switch.
    #[must_use]
    pub fn agent_args(&self, index: usize) -> Vec<String> {
        self.switches[index].agent_args()
    }

    /// Every node's br-int flows, for assertion messages.
    #[must_use]
    pub fn flows(&self) -> String {
        self.switches
            .iter()
            .map(|switch| switch.ofctl(&["dump-flows", "br-int"]).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Every planned pod's received packets, as the kernel counts them on its `eth0` (whatever
/// datapath delivered them).
#[must_use]
pub fn received_packets(pod: &Pod) -> u64 {
    let text = pod
        .netns()
        .exec("ip", &["-j", "-s", "link", "show", "eth0"])
        .unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|links| links[0]["stats64"]["rx"]["packets"].as_u64())
        .unwrap_or_else(|| panic!("no counters for {}: {text}", pod.name()))
}

/// The planned agent of every node (see [`start_planned_agents_with`]), pinned under a bpffs
/// of their own and logging to a temporary directory, started once every planned pod is up
/// (asserted, with the agents' logs).
pub struct PlannedAgents {
    pub children: Vec<Child>,
    pub bpffs: crate::bpffs::BpfMount,
    /// With [`Dataplane::OpenFlow`], each node's Open vSwitch.
    pub ovs: Option<OvsNodes>,
    _log_dir: tempfile::TempDir,
}

impl PlannedAgents {
    /// [`Self::start`] on `dataplane` (`pods`: the planned pods, which Open vSwitch needs
    /// prepared).
    pub fn start_on(
        lab: &OvnLab,
        nodes: &[Node],
        plans: &[PodPlan],
        pods: &[Pod],
        (dataplane, extra_args): (Dataplane, &[&str]),
    ) -> Self {
        let Dataplane::OpenFlow = dataplane else {
            return Self::start(lab, nodes, plans, extra_args);
        };
        let ovs = OvsNodes::start(nodes, plans, pods).expect("Open vSwitch on every node");
        let log_dir = tempfile::tempdir().expect("a temporary directory for the agents' logs");
        let bpffs = crate::bpffs::BpfMount::create().expect("a bpffs for the agents' pins");
        let children = (0..nodes.len())
            .map(|index| {
                let mut spec = planned_agent(nodes, plans, index, None);
                spec.extra_args = ovs.agent_args(index);
                spec.extra_args
                    .extend(extra_args.iter().map(|arg| (*arg).to_string()));
                let log = log_dir.path().join(format!("{}.log", NODES[index]));
                spec.spawn(lab, &workspace_binary("ovnbpf-agent"), log)
                    .expect("the agent started")
            })
            .collect();
        let agents = Self {
            children,
            bpffs,
            ovs: Some(ovs),
            _log_dir: log_dir,
        };
        assert!(
            planned_pods_up(lab, plans),
            "not every pod came up{}",
            agents.logs()
        );
        agents
    }

    pub fn start(lab: &OvnLab, nodes: &[Node], plans: &[PodPlan], extra_args: &[&str]) -> Self {
        let log_dir = tempfile::tempdir().expect("a temporary directory for the agents' logs");
        let bpffs = crate::bpffs::BpfMount::create().expect("a bpffs for the agents' pins");
        let children = start_planned_agents_with(
            lab,
            nodes,
            plans,
            Some(bpffs.path()),
            log_dir.path(),
            extra_args,
        );
        let agents = Self {
            children,
            bpffs,
            ovs: None,
            _log_dir: log_dir,
        };
        assert!(
            planned_pods_up(lab, plans),
            "not every pod came up{}",
            agents.logs()
        );
        agents
    }

    /// The last lines of every agent's log (and, with Open vSwitch, its flows).
    pub fn logs(&self) -> String {
        let flows = self.ovs.as_ref().map(OvsNodes::flows).unwrap_or_default();
        format!("{}{flows}", log_tails(&self.children))
    }

    /// Node `index`'s datapath counters ([`datapath_counters`]).
    pub fn counters(&self, nodes: &[Node], index: usize) -> serde_json::Value {
        datapath_counters(&nodes[index], &self.bpffs.path().join(NODES[index]))
    }
}

/// Whether Port_Binding `port` is bound to the chassis named `chassis` in `lab`'s Southbound.
pub fn bound_to(lab: &OvnLab, port: &str, chassis: &str) -> bool {
    let uuid = lab
        .sbctl(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "Chassis",
            &format!("name={chassis}"),
        ])
        .unwrap_or_default();
    let bound = port_chassis(lab, port).unwrap_or_default();
    !uuid.trim().is_empty() && uuid.trim() == bound
}

/// The chassis column of `port`'s Port_Binding in `lab`'s Southbound, trimmed (empty when
/// unclaimed).
pub fn port_chassis(lab: &OvnLab, port: &str) -> anyhow::Result<String> {
    let chassis = lab.sbctl(&[
        "--bare",
        "--columns=chassis",
        "find",
        "Port_Binding",
        &format!("logical_port={port}"),
    ])?;
    Ok(chassis.trim().to_string())
}

/// Waits up to 20 s until every planned pod's Port_Binding is `up`.
pub fn planned_pods_up(lab: &OvnLab, plans: &[PodPlan]) -> bool {
    wait_until(Duration::from_secs(20), || {
        plans
            .iter()
            .all(|(name, ..)| port_up(lab, &format!("{name}.ns")))
    })
}

/// Chassis names of the simulated nodes, by node index.
pub const NODES: [&str; 2] = ["node1", "node2"];

/// Starts the agent of node `index` for [`OVERLAPPING_PODS`] (see [`start_planned_agent`]).
pub fn start_overlapping_agent(
    lab: &OvnLab,
    nodes: &[Node],
    index: usize,
    pin_root: Option<&std::path::Path>,
    log_dir: &std::path::Path,
) -> Child {
    start_planned_agent(lab, nodes, &OVERLAPPING_PODS, index, pin_root, log_dir)
}

/// Whether Port_Binding `port` is `up` in the SB.
pub fn port_up(lab: &OvnLab, port: &str) -> bool {
    let selector = format!("logical_port={port}");
    lab.sbctl(&["--bare", "--columns=up", "find", "Port_Binding", &selector])
        .is_ok_and(|text| text.trim() == "true")
}

/// Waits up to 20 s until every pod of [`OVERLAPPING_PODS`] is `up` (its agent programmed it).
pub fn all_overlapping_pods_up(lab: &OvnLab) -> bool {
    planned_pods_up(lab, &OVERLAPPING_PODS)
}

/// The ends of the agents' logs, for assertion messages.
pub fn log_tails(agents: &[Child]) -> String {
    agents
        .iter()
        .map(Child::log_tail)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `ovnbpfctl datapath counters --json` for the datapath `node`'s agent pinned under `pin_root`,
/// read inside the node's namespace (so interfaces have their names).
pub fn datapath_counters(node: &Node, pin_root: &std::path::Path) -> serde_json::Value {
    let ctl = workspace_binary("ovnbpfctl");
    let text = node
        .netns()
        .exec(
            &ctl.to_string_lossy(),
            &[
                "datapath",
                "counters",
                "--json",
                "--pin-dir",
                &pin_root.to_string_lossy(),
            ],
        )
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Frames delivered to interface `name` in `ovnbpfctl datapath counters --json` output.
pub fn delivered(counters: &serde_json::Value, name: &str) -> u64 {
    counters["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|interface| interface["name"] == name)
        .and_then(|interface| interface["delivered_packets"].as_u64())
        .unwrap_or_else(|| panic!("no counters for {name}: {counters}"))
}

/// What `pod`'s own sockets get from `ip:port`: a TCP connect, and a datagram on a connected UDP
/// socket followed by a receive (an ICMP port unreachable makes it fail with ECONNREFUSED).
/// Each within 3 s; the error kinds, `Ok` when something else happened.
pub fn socket_outcomes(
    pod: &Pod,
    ip: Ipv4Addr,
    port: u16,
) -> (std::io::Result<()>, std::io::Result<()>) {
    socket_outcomes_in(pod.netns(), std::net::SocketAddr::from((ip, port)))
}

/// [`socket_outcomes`] from the sockets of namespace `netns`, to `address` of either family.
pub fn socket_outcomes_in(
    netns: &Netns,
    address: std::net::SocketAddr,
) -> (std::io::Result<()>, std::io::Result<()>) {
    let unspecified = if address.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    netns
        .run_in(|| {
            let tcp =
                std::net::TcpStream::connect_timeout(&address, Duration::from_secs(3)).map(drop);
            let udp = (|| {
                let socket = std::net::UdpSocket::bind(unspecified)?;
                socket.connect(address)?;
                socket.set_read_timeout(Some(Duration::from_secs(3)))?;
                socket.send(b"ovnbpf-udp-probe")?;
                let mut buffer = [0_u8; 64];
                socket.recv(&mut buffer).map(drop)
            })();
            Ok((tcp, udp))
        })
        .unwrap()
}

/// The ICMP port unreachable `pod` (at `pod_ip`) gets for a datagram its own UDP socket sends to
/// `ip` (port 9), as seen on its eth0: the whole frame. The datagram goes through the pod's
/// stack as applications' do (checksum offload and all).
pub fn unreachable_for_socket_datagram(pod: &Pod, pod_ip: Ipv4Addr, ip: Ipv4Addr) -> Vec<u8> {
    let socket = crate::frames::FrameSocket::open_in(pod.netns(), "eth0").unwrap();
    pod.netns()
        .run_in(|| {
            let udp = std::net::UdpSocket::bind("0.0.0.0:0")?;
            udp.send_to(b"ovnbpf-offloaded-udp", (ip, 9))?;
            Ok(())
        })
        .unwrap();
    socket
        .receive(Duration::from_secs(3), |frame| {
            frame.len() > 42
                && frame[12..14] == [0x08, 0x00]
                && frame[23] == 1
                && frame[26..30] == ip.octets()
                && frame[30..34] == pod_ip.octets()
                && frame[34] == 3
        })
        .unwrap()
        .unwrap_or_else(|| panic!("{}: no ICMP unreachable from {ip}", pod.name()))
}

/// Two nodes whose agents serve CNI on `<work>/<node>/cni.sock` (no configured ports: pods come
/// through the socket), and pods of `subnet-a` (vpc-a, 10.0.1.0/24, namespace `ns`) built in the
/// NB the way Kube-OVN builds them, so a CNI ADD finds their logical ports. The agents are
/// stopped (SIGTERM) on drop, before the nodes and the central go.
pub struct CniNodes {
    pub agents: Vec<Child>,
    pub lab: OvnLab,
    pub nodes: [Node; 2],
    /// The name prefix of this test's namespaces.
    pub prefix: String,
    /// Each node's CNI directory (`<node>/`) and agent log (`<node>.log`), and anything else a
    /// test keeps there.
    pub work: tempfile::TempDir,
    /// Each node's pins under `<pin_root>/<node>`, when pinned.
    pin_root: Option<std::path::PathBuf>,
    /// Arguments added to each node's agent.
    extra_args: [Vec<String>; 2],
    _underlay: Underlay,
}

impl CniNodes {
    /// Starts the central, the nodes and their agents, and waits for both CNI sockets.
    pub fn start(
        pods: &[(&str, Ipv4Addr)],
        pin_root: Option<&std::path::Path>,
        extra_args: [Vec<String>; 2],
    ) -> Self {
        Self::start_with(
            |topology| {
                topology
                    .vpc_with_subnet("vpc-a", "subnet-a", "10.0.1.0/24")
                    .unwrap();
                for (name, ip) in pods {
                    topology.pod("subnet-a", name, "ns", &mac_for(name), *ip);
                }
            },
            pin_root,
            extra_args,
        )
    }

    /// Like [`Self::start`], with the NB `build` writes instead of subnet-a's.
    pub fn start_with(
        build: impl FnOnce(&mut Topology),
        pin_root: Option<&std::path::Path>,
        extra_args: [Vec<String>; 2],
    ) -> Self {
        Self::start_on(false, build, pin_root, extra_args)
    }

    /// Like [`Self::start_with`], the nodes tunnelling over IPv6 when `ipv6_underlay`.
    pub fn start_on(
        ipv6_underlay: bool,
        build: impl FnOnce(&mut Topology),
        pin_root: Option<&std::path::Path>,
        extra_args: [Vec<String>; 2],
    ) -> Self {
        let TwoNodes {
            lab,
            nodes,
            prefix,
            underlay,
        } = TwoNodes::start_on(ipv6_underlay);
        let mut topology = Topology::new();
        build(&mut topology);
        topology.apply(&lab).unwrap();
        let mut this = Self {
            agents: Vec::new(),
            lab,
            nodes,
            prefix,
            work: tempfile::tempdir().unwrap(),
            pin_root: pin_root.map(std::path::Path::to_path_buf),
            extra_args,
            _underlay: underlay,
        };
        this.agents = vec![this.start_agent(0), this.start_agent(1)];
        assert!(
            wait_until(Duration::from_secs(10), || {
                this.socket(0).exists() && this.socket(1).exists()
            }),
            "no CNI socket{}",
            this.logs()
        );
        this
    }

    /// Starts node `index`'s agent (again, after a restart), logging to `<work>/<node>.log`.
    pub fn start_agent(&self, index: usize) -> Child {
        let chassis = NODES[index];
        AgentSpec {
            chassis,
            node: &self.nodes[index],
            local_ports: Vec::new(),
            pin_root: self.pin_root.as_ref().map(|root| root.join(chassis)),
            cni_dir: Some(self.cni_dir(index)),
            extra_args: self.extra_args[index].clone(),
        }
        .spawn(
            &self.lab,
            &workspace_binary("ovnbpf-agent"),
            self.work.path().join(format!("{chassis}.log")),
        )
        .unwrap()
    }

    /// Node `index`'s CNI directory (socket, attachment records).
    pub fn cni_dir(&self, index: usize) -> std::path::PathBuf {
        self.work.path().join(NODES[index])
    }

    /// Node `index`'s CNI socket.
    pub fn socket(&self, index: usize) -> std::path::PathBuf {
        self.cni_dir(index).join("cni.sock")
    }

    /// The tails of the agents' logs, for assertion messages.
    pub fn logs(&self) -> String {
        log_tails(&self.agents)
    }
}

impl Drop for CniNodes {
    fn drop(&mut self) {
        for agent in &mut self.agents {
            agent.stop();
        }
    }
}
