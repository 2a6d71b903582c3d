//! A real OVN chassis on a simulated node, the interop peer: ovsdb-server, ovs-vswitchd with the
//! userspace (netdev) datapath and ovn-controller, all from Debian's packages, running in the
//! node's namespace with their state in a temp dir. The node's underlay IP moves onto a netdev
//! bridge `br-phy` holding its `eth0` (OVS userspace tunnelling needs it there); pods are plugged
//! into `br-int` with `external_ids:iface-id`, and their veths get TX checksum offload turned off
//! (OVS 3.1's userspace datapath does not complete partial checksums). The daemons are ended by
//! PID on drop, ovn-controller first.

use std::{path::Path, process::Command, time::Duration};

use anyhow::{Context, Result};

use crate::{
    network::{Node, UNDERLAY_PREFIX_LEN, UPLINK},
    ovn::{Db, OvnLab},
    process::{Child, output, wait_until},
};

const VSWITCH_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// Tells each node's Open vSwitch the MAC of every other node's tunnel endpoint (see
/// [`OvsSwitch::know_tunnel_peers`]).
///
/// # Errors
/// As there.
pub fn introduce_tunnel_peers(nodes: &[Node], switches: &[OvsSwitch]) -> Result<()> {
    for (index, switch) in switches.iter().enumerate() {
        let peers: Vec<&Node> = (nodes.iter().enumerate())
            .filter(|(peer, _)| *peer != index)
            .map(|(_, node)| node)
            .collect();
        switch.know_tunnel_peers(&peers)?;
    }
    Ok(())
}

/// Turns TX checksum offload off on both ends of a pod's veth (`interface` in `node_netns`,
/// `eth0` in `pod_netns`): Open vSwitch's userspace datapath reads frames whole and does not
/// complete partial checksums.
///
/// # Errors
/// When `ethtool` fails.
pub fn full_checksums(
    node_netns: &crate::netns::Netns,
    interface: &str,
    pod_netns: &crate::netns::Netns,
) -> Result<()> {
    node_netns.exec("ethtool", &["-K", interface, "tx", "off"])?;
    pod_netns.exec("ethtool", &["-K", "eth0", "tx", "off"])?;
    Ok(())
}

/// The three daemons of one real chassis: an [`OvsSwitch`] and ovn-controller.
pub struct OvsChassis {
    switch: OvsSwitch,
}

impl OvsChassis {
    /// Starts a chassis named `chassis` on `node`, registered in `lab`'s Southbound with the
    /// node's tunnel endpoint ([`Node::encap_ip`], IPv6 on an IPv6 underlay) as its Geneve
    /// endpoint.
    pub fn start(lab: &OvnLab, node: &Node, chassis: &str) -> Result<Self> {
        let switch = OvsSwitch::start(node.netns())?;
        let mut this = Self { switch };
        let remote = this.switch.db_remote();
        let encap_ip = node.encap_ip();
        this.vsctl(&[
            "set",
            "open",
            ".",
            &format!("external_ids:system-id={chassis}"),
            &format!("external_ids:hostname={chassis}"),
            &format!(
                "external_ids:ovn-remote={}",
                lab.unix_remote(Db::Southbound)
            ),
            "external_ids:ovn-encap-type=geneve",
            &format!("external_ids:ovn-encap-ip={encap_ip}"),
            "external_ids:ovn-bridge-datapath-type=netdev",
        ])?;
        this.switch.underlay(node)?;
        this.switch.spawn("ovn-controller", &[remote])?;
        Ok(this)
    }

    /// See [`OvsSwitch::know_tunnel_peers`].
    ///
    /// # Errors
    /// As there.
    pub fn know_tunnel_peers(&self, peers: &[&Node]) -> Result<()> {
        self.switch.know_tunnel_peers(peers)
    }

    /// Runs `ovs-vsctl` against this chassis's database.
    pub fn vsctl(&self, args: &[&str]) -> Result<String> {
        self.switch.vsctl(args)
    }

    /// Bridges provider network `network` to the node's NIC `nic` as ovn-controller's bridge
    /// mappings do (`ovn-bridge-mappings=<network>:br-ex`, `br-ex` a netdev bridge holding
    /// `nic`), with TX checksum offload off on `nic`.
    pub fn provider_network(&self, network: &str, nic: &str) -> Result<()> {
        output(
            self.switch
                .command("ethtool")
                .args(["-K", nic, "tx", "off"]),
        )?;
        self.vsctl(&[
            "--may-exist",
            "add-br",
            "br-ex",
            "--",
            "set",
            "bridge",
            "br-ex",
            "datapath_type=netdev",
            "--",
            "--may-exist",
            "add-port",
            "br-ex",
            nic,
        ])?;
        output(
            self.switch
                .command("ip")
                .args(["link", "set", "br-ex", "up"]),
        )?;
        self.vsctl(&[
            "set",
            "open",
            ".",
            &format!("external_ids:ovn-bridge-mappings={network}:br-ex"),
        ])
        .map(drop)
    }

    /// Plugs host veth `interface` (in the node's namespace; its pod peer in `pod_netns`) into
    /// `br-int` as logical port `logical_port`, with TX checksum offload off on both ends.
    pub fn plug(
        &self,
        interface: &str,
        pod_netns: &crate::netns::Netns,
        logical_port: &str,
    ) -> Result<()> {
        output(
            self.switch
                .command("ethtool")
                .args(["-K", interface, "tx", "off"]),
        )?;
        pod_netns.exec("ethtool", &["-K", "eth0", "tx", "off"])?;
        self.vsctl(&[
            "--may-exist",
            "add-port",
            "br-int",
            interface,
            "--",
            "set",
            "interface",
            interface,
            &format!("external_ids:iface-id={logical_port}"),
        ])?;
        Ok(())
    }

    /// The process IDs of the chassis's daemons (ovsdb-server, ovs-vswitchd, ovn-controller):
    /// where its datapath's CPU time is spent (the userspace datapath forwards in
    /// ovs-vswitchd's threads, not in the senders' softirq).
    #[must_use]
    pub fn daemon_pids(&self) -> Vec<u32> {
        self.switch.daemon_pids()
    }

    /// The ends of the daemons' logs, for assertion messages.
    #[must_use]
    pub fn log_tails(&self) -> String {
        self.switch.log_tails()
    }
}

/// Open vSwitch alone, in a namespace: ovsdb-server and ovs-vswitchd from Debian's packages,
/// their state in a temp dir, and `br-int` with the userspace (netdev) datapath, `fail_mode`
/// secure and no in-band flows, as ovn-controller wants it. The daemons (and any started on
/// top, such as ovn-controller) are ended by PID on drop, the last started first.
pub struct OvsSwitch {
    dir: tempfile::TempDir,
    netns: String,
    /// The daemons, in the order started (stopped in reverse).
    daemons: Vec<Child>,
}

impl OvsSwitch {
    /// Starts ovsdb-server and ovs-vswitchd in `netns` and adds `br-int`.
    pub fn start(netns: &crate::netns::Netns) -> Result<Self> {
        Self::start_in(netns, Self::state_dir()?)
    }

    /// A state dir for [`Self::start_in`]: its sockets' paths are known before the switch
    /// starts (an agent started first can be told them).
    pub fn state_dir() -> Result<tempfile::TempDir> {
        tempfile::Builder::new()
            .prefix("ovnbpf-ovs-")
            .tempdir()
            .context("creating the OVS state dir")
    }

    /// [`Self::start`] with its state in `dir` (the database socket `db.sock`, br-int's
    /// management socket `br-int.mgmt`).
    pub fn start_in(netns: &crate::netns::Netns, dir: tempfile::TempDir) -> Result<Self> {
        let mut this = Self {
            dir,
            netns: netns.name().to_string(),
            daemons: Vec::new(),
        };
        let path = this.dir.path().to_path_buf();
        let db = path.join("conf.db");
        output(
            Command::new("ovsdb-tool")
                .arg("create")
                .arg(&db)
                .arg(VSWITCH_SCHEMA),
        )?;
        let socket = path.join("db.sock");
        this.spawn(
            "ovsdb-server",
            &[
                db.display().to_string(),
                format!("--remote=punix:{}", socket.display()),
            ],
        )?;
        anyhow::ensure!(
            wait_until(Duration::from_secs(5), || socket.exists()),
            "ovsdb-server did not open {}{}",
            socket.display(),
            this.log_tails()
        );
        this.vsctl(&["--no-wait", "init"])?;
        let remote = this.db_remote();
        this.spawn("ovs-vswitchd", &[remote])?;
        this.vsctl(&[
            "--may-exist",
            "add-br",
            "br-int",
            "--",
            "set",
            "bridge",
            "br-int",
            "datapath_type=netdev",
            "fail_mode=secure",
            "other_config:disable-in-band=true",
        ])?;
        Ok(this)
    }

    /// Moves `node`'s underlay address onto a netdev bridge `br-phy` holding its `eth0`, where
    /// Open vSwitch's userspace tunnelling needs it (it routes and terminates Geneve there).
    pub fn underlay(&self, node: &Node) -> Result<()> {
        self.vsctl(&[
            "--may-exist",
            "add-br",
            "br-phy",
            "--",
            "set",
            "bridge",
            "br-phy",
            "datapath_type=netdev",
            "--",
            "--may-exist",
            "add-port",
            "br-phy",
            UPLINK,
        ])?;
        let netns = node.netns();
        let encap_ip = node.encap_ip();
        netns.ip(&["addr", "flush", "dev", UPLINK])?;
        netns.ip(&["link", "set", "br-phy", "up"])?;
        netns.ip(&[
            "addr",
            "add",
            &format!("{}/{UNDERLAY_PREFIX_LEN}", node.ip()),
            "dev",
            "br-phy",
        ])?;
        if encap_ip.is_ipv6() {
            let address = format!("{encap_ip}/64");
            netns.ip(&["addr", "add", &address, "dev", "br-phy", "nodad"])?;
        }
        Ok(())
    }

    /// Tells this switch the MAC of each peer's tunnel endpoint (`tnl/neigh/set br-phy`, the
    /// MAC of whichever of the peer's interfaces holds its underlay address, `eth0` or its own
    /// `br-phy`), then pings the peer from `br-phy` until it answers. The userspace datapath
    /// drops a tunnelled packet whose endpoint it has not resolved yet while it sends an ARP of
    /// its own (the kernel's datapath queues it in the kernel's neighbour table instead); on a
    /// loaded machine that first loss lands in whatever a test sends first across nodes. The
    /// ping's ARP also corrects the peer's neighbour entry for this node, which still holds
    /// `eth0`'s MAC if the peer talked to it before [`Self::underlay`] (Open vSwitch only
    /// terminates Geneve sent to `br-phy`'s). Giving `br-phy` `eth0`'s MAC instead would make
    /// `eth0`'s own stack take every tunnelled packet too.
    ///
    /// # Errors
    /// When a peer's MAC cannot be read, `ovs-appctl` fails or the peer does not answer
    /// within 5 s.
    pub fn know_tunnel_peers(&self, peers: &[&Node]) -> Result<()> {
        for peer in peers {
            let endpoint = peer.encap_ip().to_string();
            let text = peer.netns().ip(&["-j", "addr", "show", "to", &endpoint])?;
            let links: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("ip -j addr show to {endpoint}: {text:?}"))?;
            let interface = links[0]["ifname"]
                .as_str()
                .with_context(|| format!("no interface holds {endpoint}: {text}"))?;
            let mac = peer.netns().mac(interface)?;
            self.appctl(&["tnl/neigh/set", "br-phy", &endpoint, &mac])?;
            let answered = wait_until(Duration::from_secs(5), || {
                self.command("ping")
                    .args(["-n", "-q", "-c", "1", "-W", "1", &endpoint])
                    .output()
                    .is_ok_and(|output| output.status.success())
            });
            anyhow::ensure!(answered, "{endpoint} does not answer {}", self.netns);
        }
        Ok(())
    }

    /// The database's socket as a remote (`unix:…`).
    #[must_use]
    pub fn db_remote(&self) -> String {
        format!("unix:{}", self.dir.path().join("db.sock").display())
    }

    /// The arguments that make an agent program this switch's br-int (`--dataplane openflow`).
    #[must_use]
    pub fn agent_args(&self) -> Vec<String> {
        Self::agent_args_in(self.dir.path())
    }

    /// [`Self::agent_args`] of a switch that will keep its state in `dir` (see
    /// [`Self::start_in`]): an agent started before the switch.
    #[must_use]
    pub fn agent_args_in(dir: &std::path::Path) -> Vec<String> {
        vec![
            "--dataplane".into(),
            "openflow".into(),
            "--ovs-bridge-socket".into(),
            dir.join("br-int.mgmt").display().to_string(),
            "--ovs-db".into(),
            format!("unix:{}", dir.join("db.sock").display()),
        ]
    }

    /// The management socket of bridge `bridge`, where an OpenFlow controller connects.
    #[must_use]
    pub fn management_socket(&self, bridge: &str) -> std::path::PathBuf {
        self.dir.path().join(format!("{bridge}.mgmt"))
    }

    /// A command run in the switch's namespace with its state dir as OVS's and OVN's.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.netns, program]);
        for variable in [
            "OVS_RUNDIR",
            "OVS_DBDIR",
            "OVS_LOGDIR",
            "OVS_SYSCONFDIR",
            "OVN_RUNDIR",
            "OVN_LOGDIR",
        ] {
            command.env(variable, self.dir.path());
        }
        command
    }

    /// Starts a daemon in the foreground (tracked by PID), logging to `<dir>/<program>.log`.
    pub fn spawn(&mut self, program: &str, args: &[String]) -> Result<()> {
        let dir = self.dir.path();
        let mut command = self.command(program);
        command.args(args).args([
            format!("--pidfile={}", dir.join(format!("{program}.pid")).display()),
            format!(
                "--log-file={}",
                dir.join(format!("{program}.log")).display()
            ),
        ]);
        let child = Child::spawn(
            program,
            &mut command,
            Some(dir.join(format!("{program}.out"))),
        )?;
        self.daemons.push(child);
        Ok(())
    }

    /// Stops ovs-vswitchd and starts it again (its flows are gone; its ports come back from the
    /// database).
    pub fn restart_vswitchd(&mut self) -> Result<()> {
        let index = self
            .daemons
            .iter()
            .position(|daemon| daemon.name() == "ovs-vswitchd")
            .context("ovs-vswitchd is not running")?;
        self.daemons.remove(index).stop();
        let remote = self.db_remote();
        self.spawn("ovs-vswitchd", &[remote])
    }

    /// Runs `ovs-vsctl` against the switch's database.
    pub fn vsctl(&self, args: &[&str]) -> Result<String> {
        output(
            self.command("ovs-vsctl")
                .arg(format!("--db={}", self.db_remote()))
                .arg("--timeout=30")
                .args(args),
        )
    }

    /// Runs `ovs-ofctl` (OpenFlow 1.5) against the switch.
    pub fn ofctl(&self, args: &[&str]) -> Result<String> {
        output(
            self.command("ovs-ofctl")
                .arg("-O")
                .arg("OpenFlow15")
                .args(args),
        )
    }

    /// Runs `ovs-appctl` against ovs-vswitchd.
    pub fn appctl(&self, args: &[&str]) -> Result<String> {
        // Found through the pidfile in OVS_RUNDIR (`ovs-vswitchd.<pid>.ctl`).
        output(
            self.command("ovs-appctl")
                .arg("--target=ovs-vswitchd")
                .args(args),
        )
    }

    /// The process IDs of the daemons.
    #[must_use]
    pub fn daemon_pids(&self) -> Vec<u32> {
        self.daemons.iter().map(Child::pid).collect()
    }

    /// The PID of daemon `program` (`ovs-vswitchd`, `ovn-controller`, …), if it runs.
    #[must_use]
    pub fn daemon_pid(&self, program: &str) -> Option<u32> {
        (self.daemons.iter())
            .find(|daemon| daemon.name() == program)
            .map(Child::pid)
    }

    /// The ends of the daemons' logs, for assertion messages.
    #[must_use]
    pub fn log_tails(&self) -> String {
        ["ovsdb-server", "ovs-vswitchd", "ovn-controller"]
            .iter()
            .map(|name| tail(&self.dir.path().join(format!("{name}.log"))))
            .filter(|text| !text.ends_with("---\n"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!(
        "\n--- last lines of {} ---\n{}",
        path.display(),
        lines[lines.len().saturating_sub(15)..].join("\n")
    )
}

impl Drop for OvsSwitch {
    fn drop(&mut self) {
        while let Some(mut daemon) = self.daemons.pop() {
            daemon.stop();
        }
    }
}
