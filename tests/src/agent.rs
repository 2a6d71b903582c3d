//! `ovnbpf-agent` as a simulated node's agent: the command line the tests and the demo use
//! (the lab's SB, the node's name and tunnel endpoint (IPv4, or IPv6 on an IPv6 underlay, the
//! node's IPv4 address then given as `--node-ip`), Geneve over the interface that holds that IP
//! (`--uplink auto`: the node's `eth0`), the node's pods
//! as `PORT=INTERFACE`), started inside the node's namespace and tracked by PID.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::{
    network::Node,
    ovn::{Db, OvnLab},
    process::Child,
};

/// One node's agent.
#[derive(Clone, Debug)]
pub struct AgentSpec<'a> {
    /// Chassis name (also the hostname it registers).
    pub chassis: &'a str,
    pub node: &'a Node,
    /// `PORT=INTERFACE` per local pod.
    pub local_ports: Vec<String>,
    /// Pin root for maps and links (see [`crate::bpffs::BpfMount`]); `None` pins nothing.
    pub pin_root: Option<PathBuf>,
    /// Serve CNI on `<dir>/cni.sock`, recording attachments under `<dir>/state`, waiting 5 s for
    /// a pod's Port_Binding (tests ask for missing ones), with no GC grace (tests GC right after
    /// ADD); `None` serves no CNI.
    pub cni_dir: Option<PathBuf>,
    /// More arguments (e.g. `--bridge-mappings physnet1:eth1`).
    pub extra_args: Vec<String>,
}

impl AgentSpec<'_> {
    /// The `ovnbpf-agent` arguments for this node.
    #[must_use]
    pub fn args(&self, lab: &OvnLab) -> Vec<String> {
        let mut args = vec![
            "run".to_string(),
            "--sb-remote".into(),
            lab.unix_remote(Db::Southbound),
            "--system-id".into(),
            self.chassis.into(),
            "--hostname".into(),
            self.chassis.into(),
            "--encap-ip".into(),
            self.node.encap_ip().to_string(),
            // As the DaemonSet runs it: the uplink is the interface holding the node's IP (eth0).
            "--uplink".into(),
            "auto".into(),
        ];
        if self.node.encap_ip().is_ipv6() {
            // The node's own address (its routes' source) is still the IPv4 one.
            args.extend(["--node-ip".into(), self.node.ip().to_string()]);
        }
        match &self.pin_root {
            Some(root) => args.extend(["--pin-dir".into(), root.display().to_string()]),
            None => args.push("--no-pins".into()),
        }
        match &self.cni_dir {
            Some(dir) => args.extend([
                "--cni-socket".into(),
                dir.join("cni.sock").display().to_string(),
                "--state-dir".into(),
                dir.join("state").display().to_string(),
                "--cni-port-wait-s".into(),
                "5".into(),
                "--cni-gc-grace-s".into(),
                "0".into(),
            ]),
            None => args.push("--no-cni".into()),
        }
        for port in &self.local_ports {
            args.extend(["--local-port".to_string(), port.clone()]);
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }

    /// Starts `binary` (an `ovnbpf-agent`) in the node's namespace, appending to `log`.
    pub fn spawn(&self, lab: &OvnLab, binary: &Path, log: PathBuf) -> Result<Child> {
        self.node.netns().spawn(
            self.chassis,
            &binary.to_string_lossy(),
            &self.args(lab),
            Some(log),
        )
    }
}
