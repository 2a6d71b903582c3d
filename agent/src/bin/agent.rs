//! `ovnbpf-agent`: the node daemon. `run` follows the OVN Southbound DB, registers this chassis and
//! claims local ports (`run --cleanup` removes the chassis instead); `verify` loads every kernel
//! program through the verifier and reports what the kernel accepted; `unpin` removes the pinned
//! datapath and the pods' filters (what stays forwarding after `run` exits).

use std::time::Duration;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use ovnbpf_agent::{
    chassis::{self, ChassisConfig},
    cni::{
        handler::{Handler, HandlerConfig},
        plumbing, server,
        store::AttachmentStore,
    },
    config,
    daemon::{self, DaemonConfig, node_network::NodePortConfig},
    dataplane::{
        Datapath,
        ebpf::{
            KernelPrograms,
            kernel_log::BpfLogLevel,
            node::{NodeDatapath, NodeDatapathConfig},
        },
        openflow::datapath::{OpenFlowDatapath, OvsConfig},
    },
    node_network::{NodeNetworkStatus, NodeNicConfig},
    ovsdb::remote::Remote,
};

/// `--dataplane`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Dataplane {
    /// The eBPF datapath (tc and XDP programs, pinned maps).
    Ebpf,
    /// Open vSwitch's br-int through OpenFlow (the fallback): experimental, the switches' L2
    /// (across nodes through Geneve) only so far.
    Openflow,
    /// eBPF where the kernel loads and attaches its programs, else OpenFlow where br-int's
    /// management socket exists.
    Auto,
}

/// The datapath `--dataplane auto` runs: eBPF when it started (`ebpf_failure` is `None`),
/// else OpenFlow when br-int's socket is there; else the eBPF failure stands.
fn auto_dataplane(ebpf_failure: Option<&anyhow::Error>, ovs_socket_exists: bool) -> Dataplane {
    match (ebpf_failure, ovs_socket_exists) {
        (None, _) => Dataplane::Ebpf,
        (Some(_), true) => Dataplane::Openflow,
        (Some(_), false) => Dataplane::Ebpf,
    }
}

/// `--unsupported-acl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum UnsupportedAcl {
    Drop,
    Allow,
}

#[derive(Parser)]
#[command(name = "ovnbpf-agent", version, about = "ovnbpf node datapath agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Follow the Southbound DB as this node's chassis.
    Run(Box<RunArgs>),
    /// Load every kernel program through the verifier and print what the kernel accepted.
    Verify {
        /// Load the programs logging up to this level, to see what logging costs.
        #[arg(long, value_enum, default_value_t = BpfLogLevel::Off)]
        bpf_log_level: BpfLogLevel,
    },
    /// Remove every pinned map and link under the pin directory, the pods' `from_pod` filters
    /// and the segmenter pair in this network namespace: the datapath a stopped agent left
    /// forwarding detaches (uninstall).
    Unpin {
        #[arg(long, default_value = ovnbpf_common::DEFAULT_PIN_ROOT)]
        pin_dir: std::path::PathBuf,
    },
    /// Install the CNI plugin and its network configuration on this node (the DaemonSet's init
    /// container): the plugin as <bin-dir>/ovnbpf, deploy/'s conflist as
    /// <conf-dir>/01-kube-ovn.conflist (mode 0600), both atomically; then IPv4 forwarding on.
    InstallCni {
        /// The plugin binary; defaults to `ovnbpf-cni` beside this executable.
        #[arg(long)]
        plugin: Option<std::path::PathBuf>,
        #[arg(long, default_value = "/opt/cni/bin")]
        bin_dir: std::path::PathBuf,
        #[arg(long, default_value = "/etc/cni/net.d")]
        conf_dir: std::path::PathBuf,
        /// Leave net.ipv4.ip_forward as it is.
        #[arg(long)]
        no_sysctl: bool,
    },
}

#[derive(Args)]
struct RunArgs {
    /// A TOML file with any of these settings, each named as its flag without the dashes
    /// (`sb-remote = "tcp:…"`, `pod-mtu = 1400`, `local-port = ["…"]`); a flag or an
    /// environment variable overrides the file's value.
    #[arg(long, env = config::CONFIG_ENV)]
    config: Option<std::path::PathBuf>,
    /// Check the settings (flags, environment, file), print the effective ones as a
    /// configuration file with where each came from, and exit.
    #[arg(long)]
    check_config: bool,
    /// Southbound remotes, as ovn-controller's ovn-remote: tcp:HOST:PORT[,…] or unix:PATH.
    #[arg(long, env = "OVN_SB_REMOTE")]
    sb_remote: String,
    /// Chassis name; defaults to the first line of --system-id-file.
    #[arg(long, env = "OVNBPF_SYSTEM_ID")]
    system_id: Option<String>,
    #[arg(long, default_value = "/etc/openvswitch/system-id.conf")]
    system_id_file: String,
    /// Hostname to register; defaults to the kernel's.
    #[arg(long, env = "OVNBPF_HOSTNAME")]
    hostname: Option<String>,
    /// Tunnel endpoint IP (Encap.ip) of this node, IPv4 or IPv6: its family is the Geneve
    /// underlay's (only chassis whose Encap is of the same family are tunnelled to, as OVN's
    /// tunnels do not cross families either).
    #[arg(long, env = "OVN_ENCAP_IP")]
    encap_ip: String,
    /// Ask the other chassis for outer UDP checksums on the Geneve frames they send this node
    /// (this chassis's Encap options:csum, as `ovn-encap-csum`). Off by default, unlike
    /// ovn-controller: ovnbpf decapsulates before the kernel's UDP and never reads them, and a
    /// sender pays for each (see README, "Geneve on the wire"). What this node sends follows
    /// each receiver's Encap either way.
    #[arg(long, env = "OVN_ENCAP_CSUM", default_value_t = false, action = clap::ArgAction::Set)]
    encap_csum: bool,
    /// Replicate every row instead of only the local datapaths' (ovn-monitor-all).
    #[arg(long, env = "OVN_MONITOR_ALL")]
    monitor_all: bool,
    /// ovn-bridge-mappings, e.g. physnet1:eth1.
    #[arg(long, env = "OVN_BRIDGE_MAPPINGS", default_value = "")]
    bridge_mappings: String,
    /// A logical port bound to this node by configuration (repeatable): `NAME`, or
    /// `NAME=INTERFACE` to forward for it through its host-side veth (needs --uplink), or
    /// `NAME=INTERFACE,netns=PATH` to also name the pod's network namespace (for
    /// --socket-lb).
    #[arg(long = "local-port")]
    local_ports: Vec<String>,
    /// Forward with the eBPF datapath, Geneve over this interface; `auto`: the interface that
    /// holds --encap-ip (without it the agent only follows the Southbound DB and registers the
    /// chassis).
    #[arg(long, env = "OVNBPF_UPLINK")]
    uplink: Option<String>,
    /// Pin maps and links here (on bpffs) so the datapath forwards while the agent restarts; a
    /// new agent adopts them.
    #[arg(long, env = "OVNBPF_PIN_DIR", default_value = ovnbpf_common::DEFAULT_PIN_ROOT)]
    pin_dir: std::path::PathBuf,
    /// Pin nothing: the programs detach when the agent exits.
    #[arg(long)]
    no_pins: bool,
    /// Serve CNI requests (Kube-OVN's API) on this unix socket (with --uplink).
    #[arg(
        long,
        env = "OVNBPF_CNI_SOCKET",
        default_value = "/run/ovnbpf/cni.sock"
    )]
    cni_socket: std::path::PathBuf,
    /// Serve no CNI requests.
    #[arg(long)]
    no_cni: bool,
    /// The control socket `ovnbpfctl` talks to (e.g. `ovnbpfctl monitor`), with --uplink.
    #[arg(
        long,
        env = "OVNBPF_CONTROL_SOCKET",
        default_value = "/run/ovnbpf/control.sock"
    )]
    control_socket: std::path::PathBuf,
    /// Serve Prometheus metrics on GET /metrics of this TCP address, and the health probes
    /// /healthz, /livez and /readyz (Kube-OVN's CNI daemon uses port 10665); none without it.
    #[arg(long, env = "OVNBPF_METRICS_ADDRESS")]
    metrics_address: Option<std::net::SocketAddr>,
    /// Where CNI attachments are recorded, so a restarted agent keeps forwarding for its pods.
    #[arg(long, env = "OVNBPF_STATE_DIR", default_value = "/run/ovnbpf")]
    state_dir: std::path::PathBuf,
    /// MTU of pod NICs (0: the uplink's MTU minus 100, Kube-OVN's Geneve default).
    #[arg(long, env = "OVNBPF_POD_MTU", default_value_t = 0, value_parser = config::parse_mtu)]
    pod_mtu: u32,
    /// The Kubernetes node name (default: the hostname): the node's port on the join switch is
    /// `node-<node-name>`, as kube-ovn-controller names it.
    #[arg(long, env = "KUBE_NODE_NAME")]
    node_name: Option<String>,
    /// The node's InternalIP (default: --encap-ip): the source of the node's routes to the
    /// default VPC's subnets, and the address subnets holding it get no such route.
    #[arg(long, env = "OVNBPF_NODE_IP")]
    node_ip: Option<std::net::Ipv4Addr>,
    /// The default VPC's router (kube-ovn-controller's --cluster-router).
    #[arg(long, env = "OVNBPF_CLUSTER_ROUTER", default_value = "ovn-cluster")]
    cluster_router: String,
    /// The node's NIC on the join switch (Kube-OVN's ovn0), built and routed by the agent once
    /// the Southbound has the node's port (with --uplink).
    #[arg(long, env = "OVNBPF_NODE_NIC", default_value = "ovn0")]
    node_nic: String,
    /// Leave the node's own network alone (no NIC on the join switch, no routes, no NAT).
    #[arg(long)]
    no_node_nic: bool,
    /// A default-VPC subnet (its switch's name, repeatable) whose pods' traffic out of the
    /// cluster is masqueraded to the node's address as it leaves through the node (Kube-OVN's
    /// `natOutgoing: true`; Kube-OVN's `ovn-default` has it). Needs `nft`.
    #[arg(long = "nat-outgoing-subnet")]
    nat_outgoing_subnets: Vec<String>,
    /// What a switch does with an ACL the datapath cannot translate: `drop` what reaches its
    /// ACL stage (security fails closed), or `allow` it as if the ACL did not exist (fail-open,
    /// the operator's choice; reported either way).
    #[arg(long, env = "OVNBPF_UNSUPPORTED_ACL", value_enum, default_value_t = UnsupportedAcl::Drop)]
    unsupported_acl: UnsupportedAcl,
    /// Balance this node's pods' connections to Service VIPs at the socket as well: a
    /// connect() or sendto() to a VIP goes to a backend directly (cgroup BPF hooks), so the
    /// connection's packets carry no translation; the per-packet balancer stays for what no
    /// socket here sends (other nodes, NodePorts, hairpins).
    #[arg(long, env = "OVNBPF_SOCKET_LB")]
    socket_lb: bool,
    /// Up to which level the kernel programs log, to this log under target `ovnbpf::kernel`:
    /// at `debug`, each load-balanced connection's pick and each socket-level redirection, a
    /// record per connection, for debugging. Needs an agent built with `--features bpf-log`; a
    /// default build has no log statements and refuses any level but `off`.
    #[arg(long, env = "OVNBPF_BPF_LOG_LEVEL", value_enum, default_value_t = BpfLogLevel::Off)]
    bpf_log_level: BpfLogLevel,
    /// Connections each connection table holds (conntrack, SNAT sessions and their reverse,
    /// load-balanced connections, the socket-level balancer's reverse; affinities half): the
    /// kernel allocates these tables whole, ~140 MiB at the default. When one is full, a new
    /// connection evicts the least recently used. Tables pinned by an earlier agent keep their
    /// size.
    #[arg(long, env = "OVNBPF_CONNECTION_TABLE_ENTRIES",
          default_value_t = ovnbpf_common::acl::MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1_024..=16_777_216))]
    connection_table_entries: u32,
    /// The cgroup v2 directory whose processes the socket-level balancer serves (default: the
    /// cgroup2 mount's root, every process; it acts only for this agent's pods).
    #[arg(long, env = "OVNBPF_SOCKET_LB_CGROUP")]
    socket_lb_cgroup: Option<std::path::PathBuf>,
    /// How long CNI ADD waits for the pod's Port_Binding, then for it to be up.
    #[arg(long, default_value_t = 20)]
    cni_port_wait_s: u64,
    /// CNI GC leaves attachments younger than this alone.
    #[arg(long, default_value_t = 60)]
    cni_gc_grace_s: u64,
    /// Remove CNI attachments whose network namespace is gone (their DEL never arrived) this
    /// often (0 = never).
    #[arg(long, env = "OVNBPF_CNI_SWEEP_INTERVAL_S", default_value_t = 60)]
    cni_sweep_interval_s: u64,
    /// Check every pod veth for its from_pod filter this often, attaching it again where it was
    /// removed (0 = never).
    #[arg(long, default_value_t = 10)]
    filter_check_interval_s: u64,
    /// Echo the Southbound server after this many seconds of silence (0 = never).
    #[arg(long, default_value_t = 60)]
    probe_interval_s: u64,
    /// TLS for ssl: remotes, as ovn-controller's --private-key (Kube-OVN: /var/run/tls/key).
    #[arg(long, env = "OVN_SSL_PRIVATE_KEY")]
    private_key: Option<std::path::PathBuf>,
    /// TLS: this chassis's certificate; its common name is the chassis name the Southbound's
    /// RBAC allows (Kube-OVN: /var/run/tls/cert).
    #[arg(long, env = "OVN_SSL_CERTIFICATE")]
    certificate: Option<std::path::PathBuf>,
    /// TLS: the CA certificate the Southbound's certificate must lead to (Kube-OVN:
    /// /var/run/tls/cacert).
    #[arg(long, env = "OVN_SSL_CA_CERT")]
    ca_cert: Option<std::path::PathBuf>,
    /// The datapath this node runs: `ebpf`, `openflow` (Open vSwitch's br-int programmed with
    /// OpenFlow; experimental: the switches' L2, across nodes through Geneve, so far; what it
    /// does not program yet is dropped), or `auto` (eBPF where its programs load and attach,
    /// else OpenFlow where br-int's socket exists).
    #[arg(long, env = "OVNBPF_DATAPLANE", value_enum, default_value_t = Dataplane::Ebpf)]
    dataplane: Dataplane,
    /// With `--dataplane openflow`: br-int's management socket, where the agent connects.
    #[arg(long, default_value = "/var/run/openvswitch/br-int.mgmt")]
    ovs_bridge_socket: std::path::PathBuf,
    /// With `--dataplane openflow`: Open vSwitch's database, where pods' interfaces are added
    /// to br-int.
    #[arg(long, default_value = "unix:/var/run/openvswitch/db.sock")]
    ovs_db: String,
    /// Delete this chassis's rows from the Southbound DB and exit.
    #[arg(long)]
    cleanup: bool,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    // Flags and environment, then the configuration file where they give nothing.
    let command = Cli::command();
    let loaded = config::with_file(&command, "run", std::env::args_os().collect())?;
    let matches = command.clone().get_matches_from(&loaded.argv);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    match cli.command {
        Command::Run(args) if args.check_config => {
            check_settings(&args)?;
            if let Some(file) = &loaded.file {
                println!(
                    "# the settings of {}, under flags and environment",
                    file.display()
                );
            }
            print!(
                "{}",
                config::effective(&matches, &command, "run", &loaded.from_file)
            );
            Ok(())
        }
        Command::Run(args) => run(*args),
        Command::Verify { bpf_log_level } => verify(bpf_log_level),
        Command::InstallCni {
            plugin,
            bin_dir,
            conf_dir,
            no_sysctl,
        } => install_cni(plugin, &bin_dir, &conf_dir, no_sysctl),
        Command::Unpin { pin_dir } => {
            let filters = ovnbpf_agent::dataplane::ebpf::pod_filter::detach_everywhere()
                .context("removing the pods' from_pod filters")?;
            ovnbpf_agent::dataplane::ebpf::pins::remove_all(&pin_dir)
                .with_context(|| format!("removing {}", pin_dir.display()))?;
            let segmenter = ovnbpf_agent::dataplane::ebpf::segmenter::cleanup()
                .context("removing the segmenter")?;
            tracing::info!(pin_dir = %pin_dir.display(), filters, segmenter, "pinned datapath removed");
            Ok(())
        }
    }
}

fn install_cni(
    plugin: Option<std::path::PathBuf>,
    bin_dir: &std::path::Path,
    conf_dir: &std::path::Path,
    no_sysctl: bool,
) -> anyhow::Result<()> {
    let plugin = match plugin {
        Some(plugin) => plugin,
        None => std::env::current_exe()
            .context("locating this executable")?
            .with_file_name("ovnbpf-cni"),
    };
    let installed = ovnbpf_agent::cni::install::install(&plugin, bin_dir, conf_dir)?;
    tracing::info!(
        plugin = %installed.plugin.display(),
        conflist = %installed.conflist.display(),
        "CNI plugin and network configuration installed"
    );
    if !no_sysctl {
        let path = "/proc/sys/net/ipv4/ip_forward";
        std::fs::write(path, "1").with_context(|| {
            format!("turning IPv4 forwarding on ({path}); --no-sysctl skips it")
        })?;
        tracing::info!("net.ipv4.ip_forward=1");
    }
    Ok(())
}

/// The TLS settings, loaded once: needed (and then complete) when a remote is `ssl:`.
fn tls_client(
    args: &RunArgs,
    remotes: &[Remote],
) -> anyhow::Result<Option<std::sync::Arc<ovnbpf_agent::ovsdb::tls::TlsClient>>> {
    let files = match (&args.private_key, &args.certificate, &args.ca_cert) {
        (Some(private_key), Some(certificate), Some(ca_cert)) => {
            ovnbpf_agent::ovsdb::tls::TlsFiles {
                private_key: private_key.clone(),
                certificate: certificate.clone(),
                ca_cert: ca_cert.clone(),
            }
        }
        (None, None, None) if !remotes.iter().any(Remote::is_ssl) => return Ok(None),
        _ => anyhow::bail!(
            "ssl: remotes need --private-key, --certificate and --ca-cert, all three (given: {})",
            [
                ("--private-key", args.private_key.is_some()),
                ("--certificate", args.certificate.is_some()),
                ("--ca-cert", args.ca_cert.is_some()),
            ]
            .iter()
            .filter(|(_, given)| *given)
            .map(|(flag, _)| *flag)
            .collect::<Vec<_>>()
            .join(", ")
        ),
    };
    let client = ovnbpf_agent::ovsdb::tls::TlsClient::load(&files).context("TLS settings")?;
    Ok(Some(std::sync::Arc::new(client)))
}

/// `--uplink`: a name as given, or for `auto` the interface that holds the tunnel IP.
/// The cgroup the socket-level balancer attaches to (`None` without --socket-lb).
fn socket_lb_cgroup(args: &RunArgs) -> anyhow::Result<Option<std::path::PathBuf>> {
    if !args.socket_lb {
        return Ok(None);
    }
    match &args.socket_lb_cgroup {
        Some(path) => Ok(Some(path.clone())),
        None => ovnbpf_agent::dataplane::ebpf::socket_lb::cgroup2_mount()
            .map(Some)
            .context("--socket-lb: no cgroup2 file system is mounted (mount one, or name a cgroup v2 directory with --socket-lb-cgroup)"),
    }
}

/// The namespace cookies of pods' namespaces by port; a namespace that cannot be read (its pod
/// gone while the agent was down) is logged and left out: its sockets are balanced per packet.
fn netns_cookies(paths: &[(String, std::path::PathBuf)]) -> std::collections::HashMap<String, u64> {
    paths
        .iter()
        .filter_map(|(port, path)| match ovnbpf_agent::netns::cookie(path) {
            Ok(cookie) => Some((port.clone(), cookie)),
            Err(error) => {
                tracing::warn!(port, %error, "no namespace cookie: the pod's sockets are balanced per packet");
                None
            }
        })
        .collect()
}

fn resolve_uplink(uplink: &str, encap_ip: &str) -> anyhow::Result<String> {
    if uplink != "auto" {
        return Ok(uplink.to_string());
    }
    let address: std::net::IpAddr = encap_ip
        .parse()
        .context("--uplink auto needs --encap-ip to be an IP address")?;
    ovnbpf_agent::netlink::interface_with_address(address)
        .context("listing this node's addresses for --uplink auto")?
        .with_context(|| format!("--uplink auto: no interface holds the tunnel IP {address}"))
}

/// The checks of `run`'s settings that need nothing of the node (`--check-config`).
fn check_settings(args: &RunArgs) -> anyhow::Result<()> {
    Remote::parse_list(&args.sb_remote).context("--sb-remote")?;
    config::parse_bridge_mappings(&args.bridge_mappings)
        .map_err(|e| anyhow::anyhow!("--bridge-mappings: {e}"))?;
    Ok(())
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let sb_remotes = Remote::parse_list(&args.sb_remote).context("--sb-remote")?;
    let tls = tls_client(&args, &sb_remotes)?;
    let name = chassis::system_id(args.system_id.as_deref(), &args.system_id_file)?;
    let hostname = match args.hostname.clone() {
        Some(hostname) => hostname,
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .context("reading the hostname")?
            .trim()
            .to_string(),
    };
    // Pods' network namespaces, by port, for the socket-level balancer.
    let mut netns_paths: Vec<(String, std::path::PathBuf)> = Vec::new();
    let (local_ports, interfaces): (Vec<String>, Vec<(String, String)>) = {
        let mut names = Vec::new();
        let mut interfaces = Vec::new();
        for entry in &args.local_ports {
            match entry.split_once('=') {
                Some((port, rest)) => {
                    let (interface, namespace) = match rest.split_once(",netns=") {
                        Some((interface, path)) => (interface, Some(path)),
                        None => (rest, None),
                    };
                    names.push(port.to_string());
                    interfaces.push((port.to_string(), interface.to_string()));
                    if let Some(path) = namespace {
                        netns_paths.push((port.to_string(), std::path::PathBuf::from(path)));
                    }
                }
                None => names.push(entry.clone()),
            }
        }
        (names, interfaces)
    };
    // Pods the CNI server attached before a restart: keep forwarding for them.
    let uplink = args
        .uplink
        .as_deref()
        .map(|uplink| resolve_uplink(uplink, &args.encap_ip))
        .transpose()?;
    let store = match (&uplink, args.no_cni) {
        (Some(_), false) => Some(
            AttachmentStore::open(&args.state_dir)
                .with_context(|| format!("opening the state dir {}", args.state_dir.display()))?,
        ),
        _ => None,
    };
    let mut interfaces = interfaces;
    let mut restored_ports = Vec::new();
    if let Some(store) = &store {
        for record in store.restorable(plumbing::host_interface_exists) {
            restored_ports.push(record.logical_port.clone());
            netns_paths.push((
                record.logical_port.clone(),
                std::path::PathBuf::from(&record.netns),
            ));
            interfaces.push((record.logical_port, record.host_interface));
        }
    }
    // The node's NIC on the join switch (with a datapath to plug it into). Its port is bound
    // from the start and, when a previous agent left the NIC, forwarded for at once, like the
    // pods' restored ports: its `up`, and the node's probes through it, go on across a restart.
    let node_network = match (&uplink, args.no_node_nic) {
        (Some(_), false) => Some(node_network_config(&args, &hostname)?),
        _ => None,
    };
    if let Some((port_config, nic_config)) = &node_network {
        let host = ovnbpf_agent::node_network::nic::host_interface_of(&nic_config.interface);
        if plumbing::host_interface_exists(&host) {
            restored_ports.push(port_config.port());
            interfaces.push((port_config.port(), host));
        }
    }
    let datapath_config = match &uplink {
        Some(uplink) => Some(NodeDatapathConfig {
            chassis: name.clone(),
            encap_ip: args
                .encap_ip
                .parse()
                .context("--encap-ip must be an IP address to forward")?,
            uplink: uplink.clone(),
            interfaces,
            pin_root: (!args.no_pins).then(|| args.pin_dir.clone()),
            providers: config::parse_bridge_mappings(&args.bridge_mappings)
                .map_err(|e| anyhow::anyhow!("--bridge-mappings: {e}"))?,
            acl_fail_open: args.unsupported_acl == UnsupportedAcl::Allow,
            bpf_log_level: args.bpf_log_level,
            connection_table_entries: args.connection_table_entries,
            socket_lb_cgroup: socket_lb_cgroup(&args)?,
            netns: if args.socket_lb {
                netns_cookies(&netns_paths)
            } else {
                std::collections::HashMap::new()
            },
        }),
        None if !interfaces.is_empty() => {
            anyhow::bail!("--local-port NAME=INTERFACE needs --uplink")
        }
        None => None,
    };
    // Decoded drop events, published for the control socket's followers.
    let drop_tap = uplink
        .is_some()
        .then(|| tokio::sync::broadcast::channel(1024).0);
    let config = DaemonConfig {
        sb_remotes,
        tls,
        drop_tap: drop_tap.clone(),
        chassis: ChassisConfig {
            name,
            hostname,
            encap_ip: args.encap_ip,
            encap_csum: args.encap_csum,
            monitor_all: args.monitor_all,
            bridge_mappings: args.bridge_mappings,
        },
        local_ports,
        restored_ports,
        node_network: node_network.as_ref().map(|(port, _)| port.clone()),
        probe_interval: (args.probe_interval_s > 0)
            .then(|| Duration::from_secs(args.probe_interval_s)),
        filter_check_interval: (args.filter_check_interval_s > 0)
            .then(|| Duration::from_secs(args.filter_check_interval_s)),
    };
    let pod_mtu = match (args.pod_mtu, &uplink) {
        (0, Some(uplink)) => interface_mtu(uplink)?.saturating_sub(100),
        (mtu, _) => mtu,
    };
    ovnbpf_agent::allocator::cap_arenas();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        if args.cleanup {
            daemon::cleanup(&config, Duration::from_secs(30))
                .await
                .context("removing the chassis rows")?;
            tracing::info!(chassis = %config.chassis.name, "chassis rows removed");
            if !args.no_node_nic {
                let removed =
                    ovnbpf_agent::node_network::cleanup(&args.node_nic).with_context(|| {
                        format!("removing the node NIC {} and its NAT", args.node_nic)
                    })?;
                tracing::info!(interface = args.node_nic, removed, "node NIC removed");
            }
            return Ok(());
        }
        // The Southbound first: its snapshot arrives while the kernel verifies the programs.
        let session = daemon::connect(&config);
        // The one place that picks the backend; everything else drives it as a `Datapath`.
        // `auto` tries eBPF first; a datapath it started is the one run.
        let mut ebpf = None;
        let dataplane = match (&datapath_config, args.dataplane) {
            (Some(datapath_config), Dataplane::Auto) => {
                let started =
                    NodeDatapath::start(datapath_config).context("starting the eBPF datapath");
                let chosen = auto_dataplane(started.as_ref().err(), args.ovs_bridge_socket.exists());
                match started {
                    Ok(datapath) => ebpf = Some(datapath),
                    Err(error) if chosen == Dataplane::Openflow => tracing::warn!(
                        error = format!("{error:#}"),
                        "--dataplane auto: the eBPF datapath cannot run here; running OpenFlow on br-int"
                    ),
                    Err(error) => return Err(error),
                }
                chosen
            }
            (_, requested) => requested,
        };
        let datapath: Option<Box<dyn Datapath>> = match (&datapath_config, dataplane) {
            (None, _) => None,
            (Some(datapath_config), Dataplane::Openflow) => {
                tracing::warn!(
                    socket = %args.ovs_bridge_socket.display(),
                    "the OpenFlow datapath is experimental: switches, localnets and IPv4 routers; what it does not translate is logged and dropped"
                );
                Some(Box::new(
                    OpenFlowDatapath::start(OvsConfig {
                        management_socket: args.ovs_bridge_socket.clone(),
                        db_remote: args.ovs_db.clone(),
                        interfaces: datapath_config.interfaces.clone(),
                        chassis: datapath_config.chassis.clone(),
                        providers: datapath_config.providers.clone(),
                    })
                    .context("starting the OpenFlow datapath")?,
                ))
            }
            (Some(datapath_config), Dataplane::Ebpf | Dataplane::Auto) => Some(Box::new(match ebpf {
                Some(started) => started,
                None => NodeDatapath::start(datapath_config).context("starting the eBPF datapath")?,
            })),
        };
        if let Some(datapath) = &datapath {
            tracing::info!(dataplane = datapath.kind(), "datapath started");
        }
        let attacher = datapath.as_deref().map(Datapath::attacher);
        let (handle, commands) = daemon::ports::channel();
        let node_network_task = match (&node_network, &attacher) {
            (Some((_, nic_config)), Some(attacher)) => {
                let status = std::sync::Arc::new(NodeNetworkStatus::default());
                let task = tokio::spawn(ovnbpf_agent::node_network::run(
                    handle.clone(),
                    std::sync::Arc::clone(attacher),
                    NodeNicConfig {
                        mtu: pod_mtu,
                        ..nic_config.clone()
                    },
                    std::sync::Arc::clone(&status),
                ));
                Some((task, status))
            }
            _ => None,
        };
        let metrics_sources = ovnbpf_agent::metrics::Sources {
            daemon: Some(handle.clone()),
            cni_socket: store.is_some().then(|| args.cni_socket.clone()),
            node_network: node_network_task
                .as_ref()
                .map(|(_, status)| std::sync::Arc::clone(status)),
            ..Default::default()
        };
        let metrics = match args.metrics_address {
            Some(address) => {
                let listener = tokio::net::TcpListener::bind(address)
                    .await
                    .with_context(|| format!("binding the metrics address {address}"))?;
                tracing::info!(%address, "serving /metrics, /healthz, /livez and /readyz");
                Some(tokio::spawn(ovnbpf_agent::metrics::serve(
                    listener,
                    metrics_sources.clone(),
                )))
            }
            None => None,
        };
        let control = match &drop_tap {
            Some(drop_tap) => {
                let listener = server::bind(&args.control_socket).with_context(|| {
                    format!(
                        "binding the control socket {}",
                        args.control_socket.display()
                    )
                })?;
                Some(tokio::spawn(ovnbpf_agent::control::serve(
                    listener,
                    drop_tap.clone(),
                    handle.clone(),
                )))
            }
            None => None,
        };
        let cni = match store {
            Some(store) => {
                let listener = server::bind(&args.cni_socket).with_context(|| {
                    format!("binding the CNI socket {}", args.cni_socket.display())
                })?;
                let handler = Handler::new(
                    handle,
                    attacher,
                    store,
                    HandlerConfig {
                        mtu: pod_mtu,
                        port_wait: Duration::from_secs(args.cni_port_wait_s),
                        gc_grace: Duration::from_secs(args.cni_gc_grace_s),
                    },
                );
                tracing::info!(
                    socket = %args.cni_socket.display(),
                    pod_mtu,
                    sweep_interval_s = args.cni_sweep_interval_s,
                    "serving CNI"
                );
                let handler = std::sync::Arc::new(handler);
                let sweep = (args.cni_sweep_interval_s > 0).then(|| {
                    tokio::spawn(ovnbpf_agent::cni::sweep::run(
                        std::sync::Arc::clone(&handler),
                        std::sync::Arc::clone(&metrics_sources.server),
                        Duration::from_secs(args.cni_sweep_interval_s),
                    ))
                });
                let server = tokio::spawn(server::serve(
                    listener,
                    handler,
                    metrics_sources.server,
                    metrics_sources.cni,
                ));
                Some((server, sweep))
            }
            None => None,
        };
        daemon::run(config, session, datapath, commands, shutdown_signal()).await;
        if let Some(metrics) = metrics {
            metrics.abort();
        }
        if let Some((task, _)) = node_network_task {
            task.abort();
        }
        if let Some(control) = control {
            control.abort();
            let _ = std::fs::remove_file(&args.control_socket);
        }
        if let Some((cni, sweep)) = cni {
            cni.abort();
            if let Some(sweep) = sweep {
                sweep.abort();
            }
            let _ = std::fs::remove_file(&args.cni_socket);
        }
        Ok(())
    })
}

/// The node network's settings: the join port's source (node name, cluster router, node IP)
/// and how its NIC is built (the MTU is the pods', set once known).
fn node_network_config(
    args: &RunArgs,
    hostname: &str,
) -> anyhow::Result<(NodePortConfig, NodeNicConfig)> {
    let node = args
        .node_name
        .clone()
        .unwrap_or_else(|| hostname.to_string());
    let node_ip = match args.node_ip {
        Some(ip) => ip,
        None => args
            .encap_ip
            .parse()
            .context("--node-ip is needed when --encap-ip is not an IPv4 address")?,
    };
    let interface = args.node_nic.clone();
    if interface.is_empty()
        || interface.len() > ovnbpf_agent::node_network::MAX_INTERFACE_NAME
        || !interface
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        anyhow::bail!(
            "--node-nic {interface:?}: a Linux interface name of at most {} characters (its \
             datapath end adds \"_h\")",
            ovnbpf_agent::node_network::MAX_INTERFACE_NAME
        );
    }
    let port = NodePortConfig {
        node,
        cluster_router: args.cluster_router.clone(),
        node_ip,
        nat_outgoing: args.nat_outgoing_subnets.clone(),
    };
    let nic = NodeNicConfig {
        port: port.port(),
        interface,
        mtu: 0,
        node_ip,
        plug_wait: Duration::from_secs(args.cni_port_wait_s),
    };
    Ok((port, nic))
}

/// The MTU of `interface` in the agent's namespace.
fn interface_mtu(interface: &str) -> anyhow::Result<u32> {
    let path = format!("/sys/class/net/{interface}/mtu");
    std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path}"))?
        .trim()
        .parse()
        .with_context(|| format!("parsing {path}"))
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            tracing::warn!("cannot install signal handlers; stop with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}

fn verify(log_level: BpfLogLevel) -> anyhow::Result<()> {
    let programs =
        KernelPrograms::load_with(None, log_level, None).context("loading the kernel programs")?;
    println!(
        "{:<17} {:>8} {:>14} {:>16}  stack bytes (frames; deepest chain)",
        "program", "prog id", "verified insns", "translated bytes"
    );
    for program in programs.programs()? {
        let stack = program.stack.as_ref().map_or("-".into(), |stack| {
            let frames: Vec<String> = stack.frames.iter().map(u32::to_string).collect();
            format!("{}; {}", frames.join("+"), stack.deepest_chain)
        });
        println!(
            "{:<17} {:>8} {:>14} {:>16}  {}",
            program.name,
            program.id,
            program
                .verified_instructions
                .map_or("-".into(), |n| n.to_string()),
            program
                .translated_bytes
                .map_or("-".into(), |n| n.to_string()),
            stack,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--dataplane auto`: eBPF when it started; OpenFlow when it did not and br-int is there;
    /// else the eBPF failure is the agent's.
    #[test]
    fn auto_runs_ebpf_where_it_starts_else_openflow_where_br_int_is() {
        let failure = anyhow::anyhow!("the verifier refused from_pod");
        assert_eq!(auto_dataplane(None, true), Dataplane::Ebpf);
        assert_eq!(auto_dataplane(None, false), Dataplane::Ebpf);
        assert_eq!(auto_dataplane(Some(&failure), true), Dataplane::Openflow);
        assert_eq!(auto_dataplane(Some(&failure), false), Dataplane::Ebpf);
    }

    #[test]
    fn every_setting_of_the_file_is_a_flag_of_run_and_back() {
        let command = Cli::command();
        let run = command.find_subcommand("run").unwrap();
        let mut flags: Vec<&str> = run
            .get_arguments()
            .filter_map(clap::Arg::get_long)
            .filter(|long| !config::NOT_SETTINGS.contains(long))
            .collect();
        let mut keys: Vec<&str> = config::SETTINGS.iter().map(|s| s.key).collect();
        flags.sort_unstable();
        keys.sort_unstable();
        assert_eq!(flags, keys);
        for setting in config::SETTINGS {
            let arg = run
                .get_arguments()
                .find(|a| a.get_long() == Some(setting.key))
                .unwrap();
            let switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
            let list = matches!(arg.get_action(), clap::ArgAction::Append);
            assert_eq!(switch, setting.kind == config::Kind::Switch, "{setting:?}");
            assert_eq!(list, setting.kind == config::Kind::List, "{setting:?}");
        }
    }

    #[test]
    fn a_flag_overrides_the_file_and_the_file_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(
            &file,
            "sb-remote = \"tcp:192.0.2.1:6642\"\nencap-ip = \"192.0.2.7\"\npod-mtu = 1400\n\
             probe-interval-s = 5\nmonitor-all = true\nlocal-port = [\"a.ns\", \"b.ns=b_h\"]\n",
        )
        .unwrap();
        let argv: Vec<std::ffi::OsString> = vec![
            "ovnbpf-agent".into(),
            "run".into(),
            "--config".into(),
            file.clone().into(),
            "--probe-interval-s".into(),
            "7".into(),
        ];
        let command = Cli::command();
        let loaded = config::with_file(&command, "run", argv).unwrap();
        assert_eq!(loaded.file.as_deref(), Some(file.as_path()));
        let matches = command.clone().try_get_matches_from(&loaded.argv).unwrap();
        let Command::Run(args) = Cli::from_arg_matches(&matches).unwrap().command else {
            panic!("not run");
        };
        assert_eq!(args.sb_remote, "tcp:192.0.2.1:6642");
        assert_eq!(args.encap_ip, "192.0.2.7");
        assert_eq!(args.pod_mtu, 1400);
        assert!(args.monitor_all);
        assert_eq!(args.local_ports, ["a.ns", "b.ns=b_h"]);
        assert_eq!(args.probe_interval_s, 7, "the flag wins over the file");
        assert_eq!(args.cni_gc_grace_s, 60, "the default where nothing says");
        assert!(!loaded.from_file.contains("probe-interval-s"));
        assert!(loaded.from_file.contains("pod-mtu"));
    }

    #[test]
    fn a_bad_file_is_an_error_naming_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(
            &file,
            "sb-remote = \"tcp:192.0.2.1:6642\"\npod-mtu = 99999\n",
        )
        .unwrap();
        let argv: Vec<std::ffi::OsString> = vec![
            "ovnbpf-agent".into(),
            "run".into(),
            "--config".into(),
            file.into(),
        ];
        let error = config::with_file(&Cli::command(), "run", argv)
            .unwrap_err()
            .to_string();
        assert!(error.contains("setting `pod-mtu`"), "{error}");
    }

    #[test]
    fn connection_tables_are_sized_within_their_range() {
        let parse = |extra: &[&str]| {
            let mut argv = vec![
                "ovnbpf-agent",
                "run",
                "--sb-remote",
                "tcp:192.0.2.1:6642",
                "--encap-ip",
                "192.0.2.7",
            ];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map(|cli| match cli.command {
                Command::Run(args) => args.connection_table_entries,
                _ => unreachable!("run was asked for"),
            })
        };
        assert_eq!(parse(&[]).unwrap(), ovnbpf_common::acl::MAX_CONNECTIONS);
        assert_eq!(
            parse(&["--connection-table-entries", "65536"]).unwrap(),
            65_536
        );
        for refused in ["100", "16777217", "many"] {
            assert!(
                parse(&["--connection-table-entries", refused]).is_err(),
                "{refused} was taken"
            );
        }
    }
}
