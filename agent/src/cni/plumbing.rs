//! A pod's NIC, as the CNI server builds it: a veth pair whose host end stays in the agent's
//! namespace and whose other end goes into the pod's namespace under the requested name, with the
//! logical port's MAC, the MTU, its addresses (IPv4, IPv6 or both), a default route per family
//! via its gateway and the network configuration's (IPv4) routes, and an announcement per
//! family: a gratuitous ARP, an unsolicited neighbour advertisement. Also reading a pod NIC back
//! (CHECK, with `ip`) and deleting the host end (DEL). Builds and deletes through rtnetlink
//! ([`crate::netlink`]: no process per NIC) and, for the announcements, a packet socket;
//! namespace switches happen only on helper threads ([`crate::netns::run_in`]). Blocking: call
//! from a blocking task.
//!
//! IPv6 as kube-ovn-cni configures it: in the pod's namespace IPv6 is enabled and router
//! advertisements are not accepted (`disable_ipv6=0`, `accept_ra=0` for all, default and the
//! pod's interface; the node NIC, which is in the agent's own namespace, has no IPv6). Unlike
//! kube-ovn-cni, which waits up to 5 s for duplicate address detection to end, the address is
//! added without it (`IFA_F_NODAD`), so the pod is reachable when ADD returns: the address is
//! the one the logical port lists, which OVN's IPAM gave this port alone, and port security
//! (where set) keeps other ports from using it; a detection would only delay the pod by a
//! second.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsRawFd, FromRawFd},
    path::{Path, PathBuf},
    process::Command,
};

use ovnbpf_cni::wire::Ipv4Route;

use crate::{netlink, netns};

/// Errors building or reading a pod NIC.
#[derive(Debug, thiserror::Error)]
pub enum PlumbingError {
    #[error("the pod's network namespace {0} does not exist")]
    NoNetns(String),
    #[error("`ip {what}` failed: {stderr}")]
    Ip { what: String, stderr: String },
    #[error("running ip: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("{what}: {source}")]
    Netlink {
        what: String,
        source: std::io::Error,
    },
    #[error("interface {interface}: {source}")]
    Interface {
        interface: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Netns(#[from] netns::NetnsError),
    /// The kernel refused a route of the network configuration (e.g. a gateway that is not
    /// on-link): the configuration is wrong, retrying does not help.
    #[error("the configured route {route}: {source}")]
    ConfiguredRoute {
        route: String,
        source: std::io::Error,
    },
}

/// Everything a pod NIC gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNic {
    pub netns: PathBuf,
    /// Host end, in the agent's namespace.
    pub host_interface: String,
    /// Name inside the pod (CNI_IFNAME).
    pub pod_interface: String,
    pub mac: String,
    pub mtu: u32,
    pub ipv4: Option<NicAddress<Ipv4Addr>>,
    pub ipv6: Option<NicAddress<Ipv6Addr>>,
    /// The network configuration's routes, installed after the default route via the IPv4
    /// gateway (a default route among them replaces that one).
    pub routes: Vec<Ipv4Route>,
}

/// One address of a NIC, with its prefix length and the gateway of its default route (none:
/// no default route of its family).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicAddress<A> {
    pub ip: A,
    pub prefix_len: u8,
    pub gateway: Option<A>,
}

impl PodNic {
    /// The IPv4 gateway, if the NIC has one.
    #[must_use]
    pub fn gateway4(&self) -> Option<Ipv4Addr> {
        self.ipv4.and_then(|address| address.gateway)
    }
}

/// The index of `interface` in the agent's namespace.
pub fn host_ifindex(interface: &str) -> Result<u32, PlumbingError> {
    let error = |source| PlumbingError::Interface {
        interface: interface.to_string(),
        source,
    };
    std::fs::read_to_string(format!("/sys/class/net/{interface}/ifindex"))
        .map_err(error)?
        .trim()
        .parse()
        .map_err(|e| error(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

/// Whether `interface` exists in the agent's namespace.
#[must_use]
pub fn host_interface_exists(interface: &str) -> bool {
    Path::new("/sys/class/net").join(interface).exists()
}

/// A NIC [`create`] built: the host end's index, and the pod end's index with a netlink socket
/// of the pod's namespace (it stays the namespace's from any thread), for [`wait_until_up`].
pub struct BuiltNic {
    pub host_index: u32,
    pod_index: u32,
    pod_socket: netlink::Socket,
}

impl BuiltNic {
    /// The cookie of the pod's network namespace (see [`netns::cookie_of`]).
    pub fn netns_cookie(&self) -> std::io::Result<u64> {
        use std::os::fd::AsFd;
        netns::cookie_of(self.pod_socket.as_fd())
    }
}

/// Builds the NIC. On failure nothing is left behind.
pub fn create(nic: &PodNic) -> Result<BuiltNic, PlumbingError> {
    if !nic.netns.exists() {
        return Err(PlumbingError::NoNetns(nic.netns.display().to_string()));
    }
    let socket = netlink::Socket::open().map_err(request_failed("opening a netlink socket"))?;
    // A leftover host end of the same container (a retried ADD) is replaced.
    delete_with(&socket, &nic.host_interface)?;
    let mac = crate::net::parse_mac(&nic.mac).ok_or_else(|| PlumbingError::Netlink {
        what: format!("the MAC {:?}", nic.mac),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a MAC address"),
    })?;
    let netns = std::fs::File::open(&nic.netns).map_err(|source| PlumbingError::Netlink {
        what: format!("opening {}", nic.netns.display()),
        source,
    })?;
    socket
        .create_veth(&netlink::VethPair {
            host: &nic.host_interface,
            peer: &nic.pod_interface,
            peer_mac: mac,
            mtu: nic.mtu,
            peer_netns: &netns,
        })
        .map_err(request_failed(&format!(
            "creating veth {} with {} in {}",
            nic.host_interface,
            nic.pod_interface,
            nic.netns.display()
        )))?;
    let result = socket
        .isolate_and_up(&nic.host_interface)
        .map_err(request_failed(&format!("isolating {}", nic.host_interface)))
        .and_then(|()| configure_pod_side(nic))
        .and_then(|(pod_socket, pod_index)| {
            Ok(BuiltNic {
                host_index: host_ifindex(&nic.host_interface)?,
                pod_index,
                pod_socket,
            })
        });
    if result.is_err() {
        let _ = delete_with(&socket, &nic.host_interface);
    }
    result
}

/// Maps an I/O error of the netlink request `what`.
pub(crate) fn request_failed(what: &str) -> impl FnOnce(std::io::Error) -> PlumbingError + '_ {
    move |source| PlumbingError::Netlink {
        what: what.to_string(),
        source,
    }
}

/// Brings the pod end up with its address and routes; returns a socket of the pod's namespace
/// and the pod end's index.
fn configure_pod_side(nic: &PodNic) -> Result<(netlink::Socket, u32), PlumbingError> {
    let name = &nic.pod_interface;
    netns::run_in(&nic.netns, || {
        let socket = netlink::Socket::open().map_err(request_failed("opening a netlink socket"))?;
        let index = netlink::index_of(name).map_err(request_failed(&format!("finding {name}")))?;
        socket
            .set_up(index)
            .map_err(request_failed(&format!("bringing {name} up")))?;
        if nic.ipv6.is_some() {
            enable_ipv6(name);
        }
        let addresses = nic
            .ipv4
            .map(|a| (IpAddr::from(a.ip), a.prefix_len))
            .into_iter()
            .chain(nic.ipv6.map(|a| (IpAddr::from(a.ip), a.prefix_len)));
        for (address, prefix_len) in addresses {
            socket
                .add_address(index, address, prefix_len)
                .map_err(request_failed(&format!(
                    "adding {address}/{prefix_len} to {name}"
                )))?;
        }
        if let Some(gateway) = nic.ipv6.and_then(|address| address.gateway) {
            socket
                .replace_route(index, Ipv6Addr::UNSPECIFIED.into(), 0, Some(gateway.into()))
                .map_err(request_failed(&format!(
                    "route ::/0 via {gateway} dev {name}"
                )))?;
        }
        for route in &routes_of(nic.gateway4(), &nic.routes) {
            let shown = format!(
                "{}/{} via {}",
                route.destination,
                route.prefix_len,
                route.gateway.map_or("the link".into(), |gw| gw.to_string())
            );
            socket
                .replace_route(
                    index,
                    route.destination.into(),
                    route.prefix_len,
                    route.gateway.map(IpAddr::from),
                )
                .map_err(|source| {
                    if nic.routes.contains(route) {
                        PlumbingError::ConfiguredRoute {
                            route: shown.clone(),
                            source,
                        }
                    } else {
                        request_failed(&format!("route {shown} dev {name}"))(source)
                    }
                })?;
        }
        Ok((socket, index))
    })?
}

/// Turns IPv6 on in the calling thread's namespace and off router advertisements, for all its
/// interfaces, new ones and `interface`, as kube-ovn-cni does (`sysctlEnableIPv6`). Best effort
/// like there: a sysctl that cannot be written is logged; the address that follows fails with
/// the reason if IPv6 is really off.
fn enable_ipv6(interface: &str) {
    for scope in ["all", "default", interface] {
        for (key, value) in [("disable_ipv6", "0"), ("accept_ra", "0")] {
            let path = format!("/proc/sys/net/ipv6/conf/{scope}/{key}");
            if let Err(error) = std::fs::write(&path, value) {
                tracing::info!(path, %error, "cannot set the sysctl");
            }
        }
    }
}

/// The IPv4 routes a NIC gets, in order: the default route via its gateway, unless the network
/// configuration has a default route of its own, then the configuration's routes.
#[must_use]
pub fn routes_of(gateway: Option<Ipv4Addr>, configured: &[Ipv4Route]) -> Vec<Ipv4Route> {
    let custom_default = configured.iter().any(|route| route.prefix_len == 0);
    let gateway_default = gateway
        .filter(|_| !custom_default)
        .map(|gateway| Ipv4Route {
            destination: Ipv4Addr::UNSPECIFIED,
            prefix_len: 0,
            gateway: Some(gateway),
        });
    gateway_default
        .into_iter()
        .chain(configured.iter().copied())
        .collect()
}

/// How long ADD waits for a new link to be operationally up.
const UP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits until both ends of the NIC [`create`] built (`built`) are operationally
/// up: before, frames they send are dropped (a pod's first ARP would go unanswered for a
/// second). Best effort: a link that stays down is logged; the pod gets it when it comes up.
pub fn wait_until_up(nic: &PodNic, built: &BuiltNic) -> Result<(), PlumbingError> {
    let socket = netlink::Socket::open().map_err(request_failed("opening a netlink socket"))?;
    wait_up(&socket, built.host_index, &nic.host_interface);
    wait_up(&built.pod_socket, built.pod_index, &nic.pod_interface);
    Ok(())
}

fn wait_up(socket: &netlink::Socket, index: u32, interface: &str) {
    match socket.wait_up(index, UP_WAIT) {
        Ok(true) => {}
        Ok(false) => tracing::warn!(interface, "the link is not up after {UP_WAIT:?}"),
        Err(error) => tracing::warn!(interface, %error, "cannot read the link's state"),
    }
}

/// Announces the pod's addresses from inside the pod, once the datapath forwards for it (so the
/// announcements reach the pod's neighbours): one gratuitous ARP request for its IPv4 address,
/// one unsolicited neighbour advertisement (to all nodes, override set) for its IPv6 address.
/// Best effort: a failure is logged; neighbours learn the addresses at the first exchange anyway.
pub fn announce(nic: &PodNic) {
    let name = &nic.pod_interface;
    let Some(mac) = crate::net::parse_mac(&nic.mac) else {
        return;
    };
    let frames: Vec<(&str, Vec<u8>)> = nic
        .ipv4
        .map(|address| ("gratuitous ARP", gratuitous_arp(mac, address.ip)))
        .into_iter()
        .chain(nic.ipv6.map(|address| {
            (
                "unsolicited neighbour advertisement",
                unsolicited_advertisement(mac, address.ip),
            )
        }))
        .collect();
    let sent = netns::run_in(&nic.netns, || {
        // The index in the pod's namespace: /sys/class/net shows the agent's.
        let index = netlink::index_of(name)?;
        let results: Vec<(&str, std::io::Result<()>)> = frames
            .iter()
            .map(|(what, frame)| (*what, send_frame(index, frame)))
            .collect();
        Ok::<_, std::io::Error>(results)
    });
    match sent {
        Ok(Ok(results)) => {
            for (what, result) in results {
                if let Err(error) = result {
                    tracing::info!(interface = name, %error, "{what} not sent");
                }
            }
        }
        Ok(Err(error)) => tracing::info!(interface = name, %error, "announcements not sent"),
        Err(error) => tracing::info!(interface = name, %error, "announcements not sent"),
    }
}

/// A gratuitous ARP request for `ip` from `mac`, broadcast.
fn gratuitous_arp(mac: [u8; 6], ip: Ipv4Addr) -> Vec<u8> {
    let mut frame = Vec::with_capacity(42);
    frame.extend_from_slice(&[0xff; 6]);
    frame.extend_from_slice(&mac);
    frame.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    frame.extend_from_slice(&mac);
    frame.extend_from_slice(&ip.octets());
    frame.extend_from_slice(&[0; 6]);
    frame.extend_from_slice(&ip.octets());
    frame
}

/// An unsolicited neighbour advertisement of `ip` at `mac` (RFC 4861 7.2.6): from `ip` to the
/// all-nodes group, hop limit 255, override set (solicited and router clear), `mac` in a
/// target link-layer address option.
fn unsolicited_advertisement(mac: [u8; 6], ip: Ipv6Addr) -> Vec<u8> {
    const ICMPV6: u8 = 58;
    const ADVERTISEMENT: u8 = 136;
    const OVERRIDE: u8 = 0x20;
    const TARGET_LINK_LAYER: u8 = 2;
    let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let mut message = vec![ADVERTISEMENT, 0, 0, 0, OVERRIDE, 0, 0, 0];
    message.extend_from_slice(&ip.octets());
    message.extend_from_slice(&[TARGET_LINK_LAYER, 1]);
    message.extend_from_slice(&mac);
    let length = message.len() as u16;
    let mut pseudo_header = Vec::with_capacity(40 + message.len());
    pseudo_header.extend_from_slice(&ip.octets());
    pseudo_header.extend_from_slice(&all_nodes.octets());
    pseudo_header.extend_from_slice(&u32::from(length).to_be_bytes());
    pseudo_header.extend_from_slice(&[0, 0, 0, ICMPV6]);
    pseudo_header.extend_from_slice(&message);
    let checksum = crate::net::internet_checksum(&pseudo_header);
    message[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut frame = Vec::with_capacity(14 + 40 + message.len());
    frame.extend_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    frame.extend_from_slice(&mac);
    frame.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(&[ICMPV6, 255]);
    frame.extend_from_slice(&ip.octets());
    frame.extend_from_slice(&all_nodes.octets());
    frame.extend_from_slice(&message);
    frame
}

/// Sends the Ethernet frame `frame` (destination, source and type included) out of `ifindex`.
fn send_frame(ifindex: u32, frame: &[u8]) -> std::io::Result<()> {
    let ifindex = i32::try_from(ifindex)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let header = frame.get(..14).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "shorter than an Ethernet header",
        )
    })?;
    let protocol = u16::from_be_bytes([header[12], header[13]]);
    // SAFETY: plain socket calls with a sockaddr_ll we own and a buffer of the length we pass;
    // the descriptor is owned by an `OwnedFd` from its creation on.
    let socket = unsafe {
        let raw = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        std::os::fd::OwnedFd::from_raw_fd(raw)
    };
    // SAFETY: see above.
    let sent = unsafe {
        let mut address: libc::sockaddr_ll = std::mem::zeroed();
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_protocol = protocol.to_be();
        address.sll_ifindex = ifindex;
        address.sll_halen = 6;
        address.sll_addr[..6].copy_from_slice(&header[..6]);
        libc::sendto(
            socket.as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            std::ptr::addr_of!(address).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    let error = std::io::Error::last_os_error();
    // Closing a packet socket waits for an RCU grace period (packet_release calls
    // synchronize_net: about 15 ms here); ADD need not wait for it.
    std::thread::spawn(move || drop(socket));
    if sent < 0 {
        return Err(error);
    }
    Ok(())
}

/// Deletes the host end (and with it the pod end); an absent interface is fine.
pub fn delete(host_interface: &str) -> Result<(), PlumbingError> {
    let socket = netlink::Socket::open().map_err(request_failed("opening a netlink socket"))?;
    delete_with(&socket, host_interface)
}

fn delete_with(socket: &netlink::Socket, host_interface: &str) -> Result<(), PlumbingError> {
    socket
        .delete_link_named(host_interface)
        .map(drop)
        .map_err(request_failed(&format!("deleting {host_interface}")))
}

/// What a pod NIC looks like from inside the pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NicState {
    pub mac: String,
    /// IPv4 and IPv6 addresses with their prefix lengths (`10.0.1.2/24`, `fd00::2/64`),
    /// link-local ones too.
    pub addresses: Vec<String>,
    /// The IPv4 routes through the interface, the connected one too.
    pub routes: Vec<Ipv4Route>,
    /// The gateway of the IPv6 default route through the interface, if there is one.
    pub default_gateway6: Option<Ipv6Addr>,
}

/// Reads `interface` in the namespace at `netns` (CHECK).
pub fn inspect(netns_path: &Path, interface: &str) -> Result<NicState, PlumbingError> {
    if !netns_path.exists() {
        return Err(PlumbingError::NoNetns(netns_path.display().to_string()));
    }
    let run = |args: &[&str]| -> Result<String, PlumbingError> {
        let output = Command::new("ip")
            .args(args)
            .output()
            .map_err(PlumbingError::Spawn)?;
        if !output.status.success() {
            return Err(PlumbingError::Ip {
                what: args.join(" "),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    netns::run_in(netns_path, || {
        let link = run(&["-o", "link", "show", "dev", interface])?;
        let mac = link
            .split("link/ether ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_default()
            .to_string();
        let addresses = run(&["-o", "addr", "show", "dev", interface])?
            .lines()
            .filter_map(|line| {
                let (_, rest) = line
                    .split_once(" inet ")
                    .or_else(|| line.split_once(" inet6 "))?;
                rest.split_whitespace().next()
            })
            .map(str::to_string)
            .collect();
        let routes = parse_routes(&run(&["-4", "route", "show", "dev", interface])?);
        let default_gateway6 = run(&["-6", "route", "show", "default", "dev", interface])?
            .lines()
            .find_map(|line| {
                line.split(" via ")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            });
        Ok(NicState {
            mac,
            addresses,
            routes,
            default_gateway6,
        })
    })?
}

/// The routes in `ip -4 route show dev X`'s output: `default` is 0.0.0.0/0, an address without a
/// length is a /32, `via` names the gateway; lines it cannot read are skipped.
fn parse_routes(text: &str) -> Vec<Ipv4Route> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let destination = words.next()?;
            let (destination, prefix_len) = match destination {
                "default" => (Ipv4Addr::UNSPECIFIED, 0),
                cidr => match cidr.split_once('/') {
                    Some((address, length)) => (address.parse().ok()?, length.parse().ok()?),
                    None => (cidr.parse().ok()?, 32),
                },
            };
            let gateway = line
                .split(" via ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok());
            Some(Ipv4Route {
                destination,
                prefix_len,
                gateway,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_read_from_ip_route_show() {
        let text = "default via 10.0.1.1 proto boot \n\
                    10.0.1.0/24 proto kernel scope link src 10.0.1.2 \n\
                    192.168.5.0/24 via 10.0.1.254 proto boot \n\
                    10.9.9.9 proto boot scope link \n\
                    garbage line\n";
        let route = |destination: [u8; 4], prefix_len, gateway: Option<[u8; 4]>| Ipv4Route {
            destination: destination.into(),
            prefix_len,
            gateway: gateway.map(Ipv4Addr::from),
        };
        assert_eq!(
            parse_routes(text),
            vec![
                route([0, 0, 0, 0], 0, Some([10, 0, 1, 1])),
                route([10, 0, 1, 0], 24, None),
                route([192, 168, 5, 0], 24, Some([10, 0, 1, 254])),
                route([10, 9, 9, 9], 32, None),
            ]
        );
    }

    #[test]
    fn an_unsolicited_advertisement_is_what_rfc_4861_asks() {
        let mac = [0x0a, 0x58, 0x0a, 0, 1, 2];
        let ip: Ipv6Addr = "fd00:10:1::2".parse().unwrap();
        let frame = unsolicited_advertisement(mac, ip);
        assert_eq!(frame.len(), 14 + 40 + 32);
        assert_eq!(&frame[..6], &[0x33, 0x33, 0, 0, 0, 1], "to all nodes' MAC");
        assert_eq!(&frame[6..12], &mac);
        assert_eq!(&frame[12..14], &[0x86, 0xdd]);
        let (header, message) = frame[14..].split_at(40);
        assert_eq!(header[0] >> 4, 6);
        assert_eq!(
            u16::from_be_bytes([header[4], header[5]]),
            32,
            "payload length"
        );
        assert_eq!((header[6], header[7]), (58, 255), "ICMPv6, hop limit 255");
        assert_eq!(&header[8..24], &ip.octets());
        assert_eq!(
            &header[24..40],
            &"ff02::1".parse::<Ipv6Addr>().unwrap().octets()
        );
        assert_eq!((message[0], message[1]), (136, 0));
        assert_eq!(
            message[4], 0x20,
            "override only: neither router nor solicited"
        );
        assert_eq!(&message[8..24], &ip.octets(), "target");
        assert_eq!(&message[24..26], &[2, 1], "target link-layer option");
        assert_eq!(&message[26..32], &mac);
        // A receiver's check: the sum over the pseudo-header and the message is all ones.
        let mut checked = header[8..40].to_vec();
        checked.extend_from_slice(&32u32.to_be_bytes());
        checked.extend_from_slice(&[0, 0, 0, 58]);
        checked.extend_from_slice(message);
        assert_eq!(crate::net::internet_checksum(&checked), 0);
    }

    #[test]
    fn a_configured_default_route_replaces_the_gateways() {
        let gateway = Some(Ipv4Addr::new(10, 0, 1, 1));
        let extra = Ipv4Route {
            destination: Ipv4Addr::new(192, 168, 0, 0),
            prefix_len: 16,
            gateway: Some(Ipv4Addr::new(10, 0, 1, 254)),
        };
        let routes = routes_of(gateway, &[extra]);
        assert_eq!(routes.len(), 2);
        assert_eq!((routes[0].prefix_len, routes[0].gateway), (0, gateway));
        assert_eq!(routes[1], extra);
        let own_default = Ipv4Route {
            destination: Ipv4Addr::UNSPECIFIED,
            prefix_len: 0,
            gateway: Some(Ipv4Addr::new(10, 0, 1, 254)),
        };
        assert_eq!(routes_of(gateway, &[own_default]), vec![own_default]);
    }
}
