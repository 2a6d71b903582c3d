//! The simulated cluster network: an underlay (a Linux bridge in its own namespace), nodes (one
//! namespace each, uplink `eth0` plugged into the underlay bridge) and pods (one namespace each,
//! `eth0` paired with a host-side veth in their node's namespace). Nothing is created in the
//! caller's namespace, so interface names only need to be unique inside their own namespace.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{Context, Result, bail};

use crate::{netns::Netns, vlan_access::AccessPortPrograms};

/// Underlay subnet the nodes' uplinks live in (inside the test namespaces only).
pub const UNDERLAY_PREFIX_LEN: u8 = 24;
const UNDERLAY_BASE: [u8; 3] = [172, 31, 0];
/// The IPv6 underlay subnet (`fd00:172:31::/64`) of [`Underlay::create_ipv6`].
const UNDERLAY6_BASE: [u16; 3] = [0xfd00, 0x172, 0x31];
const BRIDGE: &str = "br0";
/// Name of each node's uplink interface.
pub const UPLINK: &str = "eth0";

/// Longest interface name Linux accepts (IFNAMSIZ - 1).
const MAX_INTERFACE_NAME: usize = 15;

fn check_interface_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_INTERFACE_NAME || name.contains(['/', ' ', ':']) {
        bail!("invalid interface name {name:?} (1..=15 characters, no '/', ':' or spaces)");
    }
    Ok(())
}

/// The shared L2 segment between nodes.
#[derive(Debug)]
pub struct Underlay {
    prefix: String,
    netns: Netns,
    next_host: u8,
    /// The nodes' tunnel endpoints are IPv6 ([`Self::create_ipv6`]).
    ipv6: bool,
}

impl Underlay {
    /// Creates the underlay namespace `<prefix>-underlay` with bridge `br0`.
    pub fn create(prefix: &str) -> Result<Self> {
        let netns = Netns::create(&format!("{prefix}-underlay"))?;
        // No multicast snooping: with it the bridge joins the multicast-router-discovery group
        // and sends IGMP reports into the underlay at random times, noise on every node uplink.
        netns.ip(&[
            "link",
            "add",
            BRIDGE,
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ])?;
        netns.ip(&["link", "set", BRIDGE, "up"])?;
        Ok(Self {
            prefix: prefix.to_string(),
            netns,
            next_host: 10,
            ipv6: false,
        })
    }

    /// [`Self::create`], for an IPv6 underlay: each node's uplink also gets an address of
    /// `fd00:172:31::/64` (the same host part), which is its tunnel endpoint
    /// ([`Node::encap_ip`]); the IPv4 one stays the node's own address.
    pub fn create_ipv6(prefix: &str) -> Result<Self> {
        let mut underlay = Self::create(prefix)?;
        underlay.ipv6 = true;
        Ok(underlay)
    }

    #[must_use]
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// Adds node `name`: namespace `<prefix>-<name>`, uplink `eth0` with the next free underlay
    /// address, its peer (named after the node) enslaved to the bridge.
    pub fn add_node(&mut self, name: &str) -> Result<Node> {
        check_interface_name(name)?;
        let host = self.next_host;
        self.next_host = host
            .checked_add(1)
            .context("underlay address space exhausted")?;
        let ip = Ipv4Addr::new(UNDERLAY_BASE[0], UNDERLAY_BASE[1], UNDERLAY_BASE[2], host);
        let netns = Netns::create(&format!("{}-{name}", self.prefix))?;
        netns.veth_to(UPLINK, name, &self.netns)?;
        self.netns.ip(&["link", "set", name, "master", BRIDGE])?;
        self.netns.ip(&["link", "set", name, "up"])?;
        netns.ip(&[
            "addr",
            "add",
            &format!("{ip}/{UNDERLAY_PREFIX_LEN}"),
            "dev",
            UPLINK,
        ])?;
        let encap_ip = if self.ipv6 {
            let [a, b, c] = UNDERLAY6_BASE;
            let ip6 = Ipv6Addr::new(a, b, c, 0, 0, 0, 0, u16::from(host));
            // Without duplicate address detection: usable at once (the test owns the segment).
            netns.ip(&["addr", "add", &format!("{ip6}/64"), "dev", UPLINK, "nodad"])?;
            IpAddr::V6(ip6)
        } else {
            IpAddr::V4(ip)
        };
        netns.ip(&["link", "set", UPLINK, "up"])?;
        Ok(Node {
            prefix: self.prefix.clone(),
            name: name.to_string(),
            netns,
            ip,
            encap_ip,
        })
    }
}

/// A simulated Kubernetes node.
#[derive(Debug)]
pub struct Node {
    prefix: String,
    name: String,
    netns: Netns,
    ip: Ipv4Addr,
    encap_ip: IpAddr,
}

/// How to wire a pod, the way a CNI would.
#[derive(Clone, Debug)]
pub struct PodSpec<'a> {
    pub name: &'a str,
    /// Host-side veth name in the node namespace (Kube-OVN uses `<container-id[:12]>_h`).
    pub host_interface: &'a str,
    pub mac: Option<&'a str>,
    /// Address with prefix, e.g. `10.0.1.2/24`.
    pub address: Option<&'a str>,
    pub gateway: Option<Ipv4Addr>,
    pub mtu: Option<u32>,
}

impl Node {
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    #[must_use]
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// The node's IPv4 underlay address (its tunnel endpoint, unless the underlay is IPv6).
    #[must_use]
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The node's tunnel endpoint: [`Self::ip`], or its IPv6 address on an IPv6 underlay.
    #[must_use]
    pub fn encap_ip(&self) -> IpAddr {
        self.encap_ip
    }

    /// Creates pod namespace `<prefix>-<node>-<pod>` with `eth0` configured per `spec`, paired with
    /// `spec.host_interface` (up, unaddressed) in the node namespace.
    pub fn add_pod(&self, spec: &PodSpec<'_>) -> Result<Pod> {
        check_interface_name(spec.host_interface)?;
        let netns = Netns::create(&format!("{}-{}-{}", self.prefix, self.name, spec.name))?;
        self.netns.veth_to(spec.host_interface, "eth0", &netns)?;
        let mtu = spec.mtu.map(|m| m.to_string());
        if let Some(mtu) = &mtu {
            self.netns
                .ip(&["link", "set", spec.host_interface, "mtu", mtu])?;
            netns.ip(&["link", "set", "eth0", "mtu", mtu])?;
        }
        self.netns.ip(&["link", "set", spec.host_interface, "up"])?;
        if let Some(mac) = spec.mac {
            netns.ip(&["link", "set", "eth0", "address", mac])?;
        }
        if let Some(address) = spec.address {
            netns.ip(&["addr", "add", address, "dev", "eth0"])?;
        }
        netns.ip(&["link", "set", "eth0", "up"])?;
        if let Some(gateway) = spec.gateway {
            netns.ip(&[
                "route",
                "add",
                "default",
                "via",
                &gateway.to_string(),
                "dev",
                "eth0",
            ])?;
        }
        Ok(Pod {
            name: spec.name.to_string(),
            host_interface: spec.host_interface.to_string(),
            netns,
        })
    }
}

/// A simulated pod.
#[derive(Debug)]
pub struct Pod {
    name: String,
    host_interface: String,
    netns: Netns,
}

impl Pod {
    /// A pod whose interface something else built (a CNI plugin) in `netns`, with host end
    /// `host_interface`; the namespace is deleted with the pod.
    #[must_use]
    pub fn attached(name: &str, netns: Netns, host_interface: &str) -> Self {
        Self {
            name: name.to_string(),
            host_interface: host_interface.to_string(),
            netns,
        }
    }

    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    #[must_use]
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// The host-side veth in the node namespace.
    #[must_use]
    pub fn host_interface(&self) -> &str {
        &self.host_interface
    }

    /// Pings `target` from the pod: `count` echo requests 50 ms apart, 1 s deadline per reply.
    /// Returns how many replies came back.
    pub fn ping(&self, target: Ipv4Addr, count: u32) -> Result<u32> {
        self.ping_every(target, count, "0.05")
    }

    /// Three broadcast echo requests to `broadcast` from the pod (`ping -b`, 0.2 s apart, 1 s
    /// deadline per reply); ping's output.
    pub fn ping_broadcast(&self, broadcast: Ipv4Addr) -> Result<std::process::Output> {
        let target = broadcast.to_string();
        self.netns
            .command("ping")
            .args(["-b", "-n", "-c", "3", "-i", "0.2", "-W", "1", &target])
            .output()
            .with_context(|| format!("ping -b {target} from {}", self.name))
    }

    /// A one-second iperf3 TCP stream from this pod to `server` at `server_ip` (retried for up to
    /// 5 s while the path comes up); the client's report.
    pub fn tcp_stream_to(&self, server: &Pod, server_ip: Ipv4Addr) -> Result<String> {
        let ip = server_ip.to_string();
        let mut listener =
            server
                .netns
                .spawn("iperf3", "iperf3", &["-s", "-1", "-B", &ip], None)?;
        let mut report = Err(anyhow::anyhow!("iperf3 never ran"));
        let connected = crate::process::wait_until(std::time::Duration::from_secs(5), || {
            report = self
                .netns
                .exec("iperf3", &["-c", &ip, "-t", "1", "-f", "m"]);
            report.is_ok()
        });
        listener.stop();
        let report = report.with_context(|| format!("TCP {} → {ip}", self.name))?;
        anyhow::ensure!(
            connected && report.contains("receiver"),
            "TCP {} → {ip}: {report}",
            self.name
        );
        Ok(report)
    }

    /// Sends `count` echo requests `interval` seconds apart (ping's `-i`) and returns how many
    /// replies came back.
    pub fn ping_every(&self, target: Ipv4Addr, count: u32, interval: &str) -> Result<u32> {
        ping_from(&self.netns, target.into(), count, interval)
    }

    /// [`Self::ping`] over IPv6.
    pub fn ping6(&self, target: std::net::Ipv6Addr, count: u32) -> Result<u32> {
        ping_from(&self.netns, target.into(), count, "0.05")
    }
}

/// Pings `target` from `netns`: `count` echo requests `interval` seconds apart, 1 s deadline per
/// reply. Returns how many replies came back.
fn ping_from(netns: &Netns, target: std::net::IpAddr, count: u32, interval: &str) -> Result<u32> {
    let output = netns
        .command("ping")
        .args([
            "-n",
            "-q",
            "-i",
            interval,
            "-W",
            "1",
            "-c",
            &count.to_string(),
        ])
        .arg(target.to_string())
        .output()
        .context("running ping")?;
    let text = String::from_utf8_lossy(&output.stdout);
    parse_ping_received(&text).with_context(|| format!("unexpected ping output: {text}"))
}

/// Extracts the `N received` count from ping's summary line.
fn parse_ping_received(output: &str) -> Option<u32> {
    let summary = output
        .lines()
        .find(|line| line.contains("packets transmitted"))?;
    let received = summary.split(',').nth(1)?.trim();
    received.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::unique_prefix;

    /// Access ports keep VLANs apart on the untagged side and tag on the shared bridge.
    #[test]
    fn access_ports_join_their_vlan_only() {
        let prefix = unique_prefix();
        let switch = PhysicalSwitch::create(&prefix).unwrap();
        let a = switch.add_host("a", Some(100), "10.51.0.1/24").unwrap();
        let b = switch.add_host("b", Some(100), "10.51.0.2/24").unwrap();
        let c = switch.add_host("c", Some(200), "10.51.0.3/24").unwrap();
        let d = switch.add_host("d", Some(200), "10.51.0.4/24").unwrap();
        assert_eq!(a.ping(Ipv4Addr::new(10, 51, 0, 2), 2).unwrap(), 2);
        assert_eq!(c.ping(Ipv4Addr::new(10, 51, 0, 4), 2).unwrap(), 2);
        assert_eq!(a.ping(Ipv4Addr::new(10, 51, 0, 3), 2).unwrap(), 0);
        assert_eq!(d.ping(Ipv4Addr::new(10, 51, 0, 2), 2).unwrap(), 0);
        // On the bridge the frames carry their port's tag.
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut capture = switch
            .netns()
            .spawn(
                "tcpdump",
                "tcpdump",
                &["-i", "br0", "-nn", "-e", "-l", "icmp"],
                Some(log.path().to_path_buf()),
            )
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert_eq!(c.ping(Ipv4Addr::new(10, 51, 0, 4), 1).unwrap(), 1);
        let tagged = crate::process::wait_until(std::time::Duration::from_secs(3), || {
            std::fs::read_to_string(log.path()).is_ok_and(|text| text.contains("vlan 200"))
        });
        capture.stop();
        let text = std::fs::read_to_string(log.path()).unwrap_or_default();
        assert!(tagged && !text.contains("vlan 100"), "{text}");
        drop((a, b, c, d));
    }

    #[test]
    fn ping_summary_is_parsed() {
        let text = "--- 10.0.0.1 ping statistics ---\n3 packets transmitted, 2 received, 33% packet loss, time 2003ms\n";
        assert_eq!(parse_ping_received(text), Some(2));
        assert_eq!(parse_ping_received("nothing"), None);
    }

    #[test]
    fn interface_names_are_checked() {
        assert!(check_interface_name("abcdef012345_h").is_ok());
        assert!(check_interface_name("abcdef0123456789").is_err());
        assert!(check_interface_name("").is_err());
    }

    #[test]
    fn nodes_reach_each_other_over_the_underlay() {
        crate::require_root();
        let prefix = unique_prefix();
        let mut underlay = Underlay::create(&prefix).unwrap();
        let node1 = underlay.add_node("node1").unwrap();
        let node2 = underlay.add_node("node2").unwrap();
        assert_ne!(node1.ip(), node2.ip());
        let out = node1
            .netns()
            .exec(
                "ping",
                &["-c", "2", "-i", "0.05", "-W", "1", &node2.ip().to_string()],
            )
            .unwrap();
        assert_eq!(parse_ping_received(&out), Some(2), "{out}");
    }

    #[test]
    fn pod_reaches_its_node_and_everything_goes_away() {
        crate::require_root();
        let prefix = unique_prefix();
        let mut underlay = Underlay::create(&prefix).unwrap();
        let node = underlay.add_node("node1").unwrap();
        node.netns()
            .ip(&[
                "link",
                "add",
                "probe",
                "type",
                "veth",
                "peer",
                "name",
                "probe-peer",
            ])
            .unwrap();
        let pod = node
            .add_pod(&PodSpec {
                name: "pod1",
                host_interface: "pod1_h",
                mac: Some("0a:58:0a:00:01:02"),
                address: Some("10.0.1.2/24"),
                gateway: None,
                mtu: Some(1400),
            })
            .unwrap();
        node.netns()
            .ip(&["addr", "add", "10.0.1.1/24", "dev", "pod1_h"])
            .unwrap();
        assert_eq!(pod.netns().mac("eth0").unwrap(), "0a:58:0a:00:01:02");
        assert_eq!(pod.ping(Ipv4Addr::new(10, 0, 1, 1), 2).unwrap(), 2);
        let names = [
            pod.netns().name().to_string(),
            node.netns().name().to_string(),
        ];
        drop(pod);
        drop(node);
        drop(underlay);
        let left = crate::netns::list_named();
        assert!(
            names.iter().all(|n| !left.contains(n)),
            "left over: {left:?}"
        );
    }
}

/// The physical network of underlay tests: a namespace with a Linux bridge joining the nodes'
/// provider NICs as trunk ports, and external hosts on access ports. The kernel has no 8021q
/// module and no bridge VLAN filtering, so the bridge carries tagged frames as they are (its
/// trunk ports carry every VLAN; keeping VLANs apart on a trunk is the nodes' job, as it is
/// ovnbpf's on a real one), and access ports tag and untag with tc programs
/// ([`crate::vlan_access`]).
#[derive(Debug)]
pub struct PhysicalSwitch {
    netns: Netns,
}

impl PhysicalSwitch {
    pub fn create(prefix: &str) -> Result<Self> {
        let netns = Netns::create(&format!("{prefix}-phys"))?;
        netns.ip(&["link", "add", "br0", "type", "bridge"])?;
        netns.ip(&["link", "set", "br0", "up"])?;
        Ok(Self { netns })
    }

    #[must_use]
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// A switch with a trunk to each of `nodes`, their provider NIC `nic`.
    pub fn with_trunks(prefix: &str, nodes: &[Node], nic: &str) -> Result<Self> {
        let switch = Self::create(prefix)?;
        for node in nodes {
            switch.add_trunk(node, nic)?;
        }
        Ok(switch)
    }

    /// Gives `node` a provider NIC `nic` on the switch's port `t-<node>`.
    pub fn add_trunk(&self, node: &Node, nic: &str) -> Result<()> {
        let port = format!("t-{}", node.name());
        self.cable(node.netns(), nic, &port)?;
        node.netns().ip(&["link", "set", nic, "up"])?;
        self.netns.ip(&["link", "set", &port, "up"])?;
        Ok(())
    }

    /// A veth from `nic` in `netns` to switch port `port` (down), on the bridge.
    fn cable(&self, netns: &Netns, nic: &str, port: &str) -> Result<()> {
        check_interface_name(port)?;
        netns.veth_to(nic, port, &self.netns)?;
        self.netns.ip(&["link", "set", port, "master", "br0"])?;
        Ok(())
    }

    /// An external host `<prefix>-<name>` whose `eth0` (`address` is `ip/prefix`) sits on an
    /// access port of `vlan` (it sends and receives untagged frames, the switch carries them
    /// tagged), or with `None` on a plain port (untagged frames as they are; a tagged one
    /// reaches it but its kernel, with no VLAN device, ignores it).
    pub fn add_host(&self, name: &str, vlan: Option<u16>, address: &str) -> Result<ExternalHost> {
        let prefix = self.netns.name().trim_end_matches("-phys");
        let netns = Netns::create(&format!("{prefix}-{name}"))?;
        let port = format!("a-{name}");
        self.cable(&netns, "eth0", &port)?;
        netns.exec("sysctl", &["-qw", "net.ipv6.conf.all.disable_ipv6=1"])?;
        netns.ip(&["addr", "add", address, "dev", "eth0"])?;
        netns.ip(&["link", "set", "eth0", "up"])?;
        // The port comes up only once it tags and untags.
        let programs = vlan
            .map(|vlan| AccessPortPrograms::attach(&self.netns.path(), &port, vlan))
            .transpose()?;
        self.netns.ip(&["link", "set", &port, "up"])?;
        Ok(ExternalHost {
            _programs: programs,
            netns,
        })
    }
}

/// A host outside the cluster, on an access port of the [`PhysicalSwitch`].
#[derive(Debug)]
pub struct ExternalHost {
    _programs: Option<AccessPortPrograms>,
    netns: Netns,
}

impl ExternalHost {
    #[must_use]
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// Pings `target`: `count` echo requests 50 ms apart; how many replies came back.
    pub fn ping(&self, target: Ipv4Addr, count: u32) -> Result<u32> {
        ping_from(&self.netns, target.into(), count, "0.05")
    }

    /// The MAC of its NIC, as `ip` prints it.
    pub fn mac(&self) -> Result<String> {
        let text = self.netns.ip(&["-br", "link", "show", "eth0"])?;
        text.split_whitespace()
            .nth(2)
            .map(str::to_string)
            .with_context(|| format!("no MAC in {text:?}"))
    }
}
