//! The eBPF datapath of one node as the daemon drives it: loads the kernel programs, sets the
//! tunnel endpoint, attaches to the uplink and to the pods' host veths (in the agent's network
//! namespace), and keeps the L2 maps in line with the IR and the chassis encap IPs it is told
//! about. Owns a [`KernelPrograms`] and an [`L2State`]; never reads the Southbound DB.

use std::{collections::HashMap, net::Ipv4Addr};

use super::{EbpfError, Hook, KernelPrograms, l2::L2State};
use crate::pipeline::IrDiff;

/// What the node datapath needs to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDatapathConfig {
    /// This chassis's name.
    pub chassis: String,
    /// This node's tunnel endpoint.
    pub encap_ip: Ipv4Addr,
    /// The interface Geneve leaves and arrives on.
    pub uplink: String,
    /// Logical port name → its host-side veth.
    pub interfaces: Vec<(String, String)>,
}

/// Errors starting the node datapath.
#[derive(Debug, thiserror::Error)]
pub enum NodeDatapathError {
    #[error("interface {interface}: {source}")]
    Interface {
        interface: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Ebpf(#[from] EbpfError),
}

pub struct NodeDatapath {
    programs: KernelPrograms,
    l2: L2State,
}

fn ifindex(interface: &str) -> Result<u32, NodeDatapathError> {
    let path = format!("/sys/class/net/{interface}/ifindex");
    let error = |source| NodeDatapathError::Interface {
        interface: interface.to_string(),
        source,
    };
    std::fs::read_to_string(&path)
        .map_err(error)?
        .trim()
        .parse()
        .map_err(|e| error(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

impl NodeDatapath {
    /// Loads the programs through the verifier and attaches them to the uplink and to every
    /// configured pod interface.
    pub fn start(config: &NodeDatapathConfig) -> Result<Self, NodeDatapathError> {
        let mut programs = KernelPrograms::load()?;
        programs.set_tunnel_endpoint(config.encap_ip, ifindex(&config.uplink)?)?;
        programs.attach(Hook::Uplink, &config.uplink)?;
        let mut l2 = L2State::new(&config.chassis);
        for (port, interface) in &config.interfaces {
            let index = ifindex(interface)?;
            programs.attach(Hook::Pod, interface)?;
            l2.set_interface(port, Some(index));
        }
        Ok(Self { programs, l2 })
    }

    /// Takes in an IR diff and writes what it changes.
    pub fn apply(&mut self, diff: &IrDiff) -> Result<usize, EbpfError> {
        self.l2.apply(diff);
        self.l2.flush(&mut self.programs)
    }

    /// Replaces the known chassis encap IPs (other chassis's tunnel endpoints) and writes what
    /// changes.
    pub fn set_encaps(&mut self, encaps: &HashMap<String, Ipv4Addr>) -> Result<usize, EbpfError> {
        self.l2.replace_encaps(encaps);
        self.l2.flush(&mut self.programs)
    }

    /// Whether logical port `port` is programmed (its veth forwards and receives).
    #[must_use]
    pub fn programmed(&self, port: &str) -> bool {
        self.l2.programmed(port)
    }

    /// Dropped frames per reason.
    pub fn drop_counters(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.programs.drop_counters()
    }
}
