//! The node's NIC on the join switch, built and read in the agent's own namespace (blocking:
//! call from a blocking task). Kube-OVN makes `ovn0` an Open vSwitch internal port; without a
//! switch, it is one end of a veth pair whose other end (`<nic>_h`) carries `from_pod` like a
//! pod's host end, built by the pod plumbing ([`crate::cni::plumbing`]) with the agent's
//! namespace as the "pod's". A NIC that already matches (an agent restart) is adopted as it is,
//! so the node's probes and connections through it go on; one that does not is rebuilt. Routes
//! through it are the agent's static routes (`proto static`), set with the node's InternalIP as
//! their source; any other static route through it is stale and removed, as kube-ovn-cni's
//! `routeDiff` does.

use std::{
    net::Ipv4Addr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::PathBuf,
    time::{Duration, Instant},
};

use crate::{
    cni::plumbing::{self, NicAddress, PlumbingError, PodNic, request_failed},
    net::internet_checksum,
    netlink::{self, StaticRoute},
};

/// The namespace the agent runs in, as a path the plumbing can open.
const OWN_NAMESPACE: &str = "/proc/self/ns/net";

/// What the node's NIC gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeNic {
    /// The node's end (`ovn0`), with the join port's MAC and address.
    pub interface: String,
    pub mac: String,
    pub ip: Ipv4Addr,
    pub prefix_len: u8,
    pub mtu: u32,
}

impl NodeNic {
    /// The datapath's end of the pair.
    #[must_use]
    pub fn host_interface(&self) -> String {
        host_interface_of(&self.interface)
    }

    fn pod_nic(&self) -> PodNic {
        PodNic {
            netns: PathBuf::from(OWN_NAMESPACE),
            host_interface: self.host_interface(),
            pod_interface: self.interface.clone(),
            mac: self.mac.clone(),
            mtu: self.mtu,
            ipv4: Some(NicAddress {
                ip: self.ip,
                prefix_len: self.prefix_len,
                gateway: None,
            }),
            ipv6: None,
            routes: Vec::new(),
        }
    }
}

/// The datapath's end of node NIC `interface`.
#[must_use]
pub fn host_interface_of(interface: &str) -> String {
    format!("{interface}_h")
}

/// What [`ensure`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Built {
    /// The NIC was there as wanted and is kept.
    Adopted { host_index: u32 },
    /// The NIC was (re)built.
    Created { host_index: u32 },
}

impl Built {
    #[must_use]
    pub fn host_index(self) -> u32 {
        match self {
            Built::Adopted { host_index } | Built::Created { host_index } => host_index,
        }
    }
}

/// Makes the NIC be as `nic` says: adopted if both ends exist and the node's end has the MAC,
/// MTU and address; otherwise (re)built.
pub fn ensure(nic: &NodeNic) -> Result<Built, PlumbingError> {
    let host = nic.host_interface();
    if matches(nic)? {
        let socket = netlink::Socket::open().map_err(request_failed("opening a netlink socket"))?;
        let index = plumbing::host_ifindex(&nic.interface)?;
        socket
            .set_up(index)
            .map_err(request_failed(&format!("bringing {} up", nic.interface)))?;
        return Ok(Built::Adopted {
            host_index: plumbing::host_ifindex(&host)?,
        });
    }
    // A node end without our host end (or the other way round) is ours to replace: both names
    // are the agent's.
    remove(&nic.interface)?;
    let pod_nic = nic.pod_nic();
    let built = plumbing::create(&pod_nic)?;
    plumbing::wait_until_up(&pod_nic, &built)?;
    Ok(Built::Created {
        host_index: built.host_index,
    })
}

/// Announces the node's join address (a gratuitous ARP from the node's end), once plugged.
pub fn announce(nic: &NodeNic) {
    plumbing::announce(&nic.pod_nic());
}

/// Whether both ends exist and the node's end is as `nic` says.
fn matches(nic: &NodeNic) -> Result<bool, PlumbingError> {
    if !plumbing::host_interface_exists(&nic.interface)
        || !plumbing::host_interface_exists(&nic.host_interface())
    {
        return Ok(false);
    }
    let read = |what: &str| {
        std::fs::read_to_string(format!("/sys/class/net/{}/{what}", nic.interface))
            .map(|text| text.trim().to_string())
            .unwrap_or_default()
    };
    let holder = netlink::interface_with_address(nic.ip.into())
        .map_err(request_failed("listing addresses"))?;
    Ok(read("address").eq_ignore_ascii_case(&nic.mac)
        && read("mtu") == nic.mtu.to_string()
        && holder.as_deref() == Some(nic.interface.as_str()))
}

/// Removes node NIC `interface` (both ends, and the routes through it); absent is fine.
pub fn remove(interface: &str) -> Result<bool, PlumbingError> {
    let socket = netlink::Socket::open().map_err(request_failed("opening a netlink socket"))?;
    let mut removed = false;
    for name in [interface.to_string(), host_interface_of(interface)] {
        removed |= socket
            .delete_link_named(&name)
            .map_err(request_failed(&format!("deleting {name}")))?;
    }
    Ok(removed)
}

/// Sets `routes` through `interface` and removes the other static routes through it. Returns
/// how many stale routes went.
pub fn set_routes(interface: &str, routes: &[StaticRoute]) -> Result<usize, PlumbingError> {
    let socket = netlink::Socket::open().map_err(request_failed("opening a netlink socket"))?;
    let index = plumbing::host_ifindex(interface)?;
    for route in routes {
        socket
            .replace_static_route(index, route)
            .map_err(request_failed(&format!(
                "route {}/{} via {} dev {interface} src {}",
                route.destination, route.prefix_len, route.gateway, route.source
            )))?;
    }
    let present = socket
        .static_routes(index)
        .map_err(request_failed(&format!(
            "listing the routes through {interface}"
        )))?;
    let mut removed = 0;
    for stale in present.iter().filter(|present| {
        !routes.iter().any(|route| {
            (route.destination, route.prefix_len) == (present.destination, present.prefix_len)
        })
    }) {
        if socket
            .delete_static_route(index, stale.destination, stale.prefix_len)
            .map_err(request_failed(&format!(
                "deleting route {}/{} dev {interface}",
                stale.destination, stale.prefix_len
            )))?
        {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Pings `target` from `interface` (ICMP echo over a raw socket bound to it) until it answers
/// or `timeout` passes, one request per `interval`. Kube-OVN's daemon pings the join gateway
/// the same way before it reports the node's network available.
pub fn ping(
    interface: &str,
    target: Ipv4Addr,
    timeout: Duration,
    interval: Duration,
) -> std::io::Result<bool> {
    let socket = raw_icmp_socket(interface, interval)?;
    let identifier = (std::process::id() & 0xffff) as u16;
    let deadline = Instant::now() + timeout;
    let mut sequence = 0u16;
    while Instant::now() < deadline {
        sequence = sequence.wrapping_add(1);
        send_echo(&socket, target, identifier, sequence)?;
        let wait_until = Instant::now() + interval;
        while Instant::now() < wait_until {
            match receive_echo_reply(&socket, target, identifier)? {
                Some(true) => return Ok(true),
                Some(false) => continue,
                None => break,
            }
        }
    }
    Ok(false)
}

fn raw_icmp_socket(interface: &str, receive_timeout: Duration) -> std::io::Result<OwnedFd> {
    // SAFETY: plain socket calls on a descriptor owned from its creation on; the option
    // buffers are valid for the lengths passed.
    unsafe {
        let raw = libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_ICMP,
        );
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let socket = OwnedFd::from_raw_fd(raw);
        let name = interface.as_bytes();
        if libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            name.as_ptr().cast(),
            name.len() as u32,
        ) < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        let timeout = libc::timeval {
            tv_sec: receive_timeout.as_secs() as libc::time_t,
            tv_usec: libc::suseconds_t::from(receive_timeout.subsec_micros().max(1000)),
        };
        if libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::addr_of!(timeout).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        ) < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(socket)
    }
}

/// An ICMP echo request (RFC 792), with its checksum.
#[must_use]
pub fn echo_request(identifier: u16, sequence: u16) -> [u8; 16] {
    let mut message = [0u8; 16];
    message[0] = 8;
    message[4..6].copy_from_slice(&identifier.to_be_bytes());
    message[6..8].copy_from_slice(&sequence.to_be_bytes());
    message[8..].copy_from_slice(b"ovnbpf\0\0");
    let sum = internet_checksum(&message);
    message[2..4].copy_from_slice(&sum.to_be_bytes());
    message
}

fn send_echo(
    socket: &OwnedFd,
    target: Ipv4Addr,
    identifier: u16,
    sequence: u16,
) -> std::io::Result<()> {
    let message = echo_request(identifier, sequence);
    // SAFETY: the buffer and the sockaddr_in are valid for the lengths passed.
    let sent = unsafe {
        let mut address: libc::sockaddr_in = std::mem::zeroed();
        address.sin_family = libc::AF_INET as u16;
        address.sin_addr.s_addr = u32::from(target).to_be();
        libc::sendto(
            socket.as_raw_fd(),
            message.as_ptr().cast(),
            message.len(),
            0,
            std::ptr::addr_of!(address).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
    };
    if sent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Reads one datagram: `Some(true)` for our echo reply from `target`, `Some(false)` for any
/// other ICMP message, `None` when the receive timed out.
fn receive_echo_reply(
    socket: &OwnedFd,
    target: Ipv4Addr,
    identifier: u16,
) -> std::io::Result<Option<bool>> {
    let mut buffer = [0u8; 1500];
    // SAFETY: the buffer is valid for its length.
    let received = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            0,
        )
    };
    if received < 0 {
        let error = std::io::Error::last_os_error();
        return match error.kind() {
            std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted => Ok(None),
            _ => Err(error),
        };
    }
    Ok(Some(is_echo_reply(
        &buffer[..received as usize],
        target,
        identifier,
    )))
}

/// Whether `packet` (an IPv4 packet, as a raw socket reads it) is an echo reply from `target`
/// to `identifier`.
fn is_echo_reply(packet: &[u8], target: Ipv4Addr, identifier: u16) -> bool {
    let Some(header_length) = packet.first().map(|b| usize::from(b & 0x0f) * 4) else {
        return false;
    };
    let source = packet
        .get(12..16)
        .and_then(|bytes| <[u8; 4]>::try_from(bytes).ok())
        .map(Ipv4Addr::from);
    let Some(icmp) = packet.get(header_length..header_length + 8) else {
        return false;
    };
    source == Some(target) && icmp[0] == 0 && icmp[4..6] == identifier.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_requests_carry_a_checksum_that_sums_to_zero() {
        let message = echo_request(0x1234, 7);
        assert_eq!(message[0], 8);
        assert_eq!(&message[4..8], &[0x12, 0x34, 0, 7]);
        assert_eq!(internet_checksum(&message), 0);
    }

    #[test]
    fn only_our_echo_reply_from_the_target_counts() {
        let target = Ipv4Addr::new(100, 64, 0, 1);
        let mut packet = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0];
        packet.extend_from_slice(&target.octets());
        packet.extend_from_slice(&[100, 64, 0, 2]);
        packet.extend_from_slice(&[0, 0, 0, 0, 0x12, 0x34, 0, 1]);
        assert!(is_echo_reply(&packet, target, 0x1234));
        assert!(
            !is_echo_reply(&packet, target, 0x1235),
            "another identifier"
        );
        assert!(!is_echo_reply(
            &packet,
            Ipv4Addr::new(100, 64, 0, 9),
            0x1234
        ));
        packet[20] = 8;
        assert!(!is_echo_reply(&packet, target, 0x1234), "a request");
        assert!(!is_echo_reply(&packet[..24], target, 0x1234), "truncated");
    }
}
