//! Drop reports: a dropped frame as people read it (reason, interface, addresses), whatever
//! backend dropped it, and the [`DropTap`] every report is published on for live followers
//! (`ovnbpfctl monitor` through the control socket). Owns only these types.

use std::{fmt, net::Ipv4Addr};

use crate::net::format_mac;

/// Where every decoded drop event is published (lagging or absent receivers lose events; the
/// datapath's counters keep them all).
pub type DropTap = tokio::sync::broadcast::Sender<DropReport>;

/// A drop event decoded for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropReport {
    pub reason: &'static str,
    /// Interface name in the agent's namespace, or `ifindex N` if it has none (any more).
    pub interface: String,
    pub source_mac: Option<[u8; 6]>,
    pub destination_mac: Option<[u8; 6]>,
    pub ether_type: Option<u16>,
    pub ipv4: Option<(Ipv4Addr, Ipv4Addr)>,
    /// For a Geneve frame (IPv4, UDP to port 6081) whose header was captured: its VNI, the
    /// logical datapath's tunnel key.
    pub geneve_vni: Option<u32>,
}

impl fmt::Display for DropReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mac = |mac: Option<[u8; 6]>| mac.map_or("?".to_string(), |m| format_mac(&m));
        write!(
            f,
            "{} > {}",
            mac(self.source_mac),
            mac(self.destination_mac)
        )?;
        if let Some(ether_type) = self.ether_type {
            write!(f, " type 0x{ether_type:04x}")?;
        }
        if let Some((source, destination)) = self.ipv4 {
            write!(f, " {source} > {destination}")?;
        }
        Ok(())
    }
}
