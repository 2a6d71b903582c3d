//! Hand-built Ethernet frames sent from inside a namespace, and what comes back: an AF_PACKET
//! socket bound to one interface (opened in the namespace, it stays there from any thread), and
//! builders for the IPv4/TCP/UDP frames the router tests send. For comparing a router's replies
//! byte for byte between ovnbpf and real OVN. Also the tc verdicts every `BPF_PROG_TEST_RUN` test
//! compares ([`verdict`]). Touches nothing but its socket.

use std::{
    net::Ipv4Addr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::{Duration, Instant},
};

use anyhow::{Result, bail};

use crate::{icmp::checksum, netns::Netns};

/// The tc verdicts a classifier returns (`BPF_PROG_TEST_RUN`'s return value), as the kernel's
/// UAPI (`linux/pkt_cls.h`) numbers them.
pub mod verdict {
    /// `TCX_NEXT` / `TC_ACT_UNSPEC`: the program leaves the frame to the next one (or the stack).
    pub const TCX_NEXT: i32 = -1;
    pub const TC_ACT_OK: i32 = 0;
    pub const TC_ACT_SHOT: i32 = 2;
    pub const TC_ACT_REDIRECT: i32 = 7;
}

/// An AF_PACKET socket on one interface of a namespace.
#[derive(Debug)]
pub struct FrameSocket {
    socket: OwnedFd,
}

impl FrameSocket {
    /// Opens the socket on `interface` inside `netns`, receiving every protocol.
    pub fn open_in(netns: &Netns, interface: &str) -> Result<Self> {
        let ifindex = netns.ifindex(interface)?;
        netns.run_in(|| {
            let protocol = (libc::ETH_P_ALL as u16).to_be();
            // SAFETY: a plain socket call; the descriptor is owned from here on.
            let raw = unsafe {
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    i32::from(protocol),
                )
            };
            if raw < 0 {
                bail!("AF_PACKET socket: {}", std::io::Error::last_os_error());
            }
            // SAFETY: a new descriptor nothing else owns.
            let socket = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: a zeroed sockaddr_ll is valid; we fill the fields bind reads.
            let bound = unsafe {
                let mut address: libc::sockaddr_ll = std::mem::zeroed();
                address.sll_family = libc::AF_PACKET as u16;
                address.sll_protocol = protocol;
                address.sll_ifindex = ifindex as i32;
                libc::bind(
                    socket.as_raw_fd(),
                    std::ptr::addr_of!(address).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            if bound < 0 {
                bail!(
                    "binding to {interface}: {}",
                    std::io::Error::last_os_error()
                );
            }
            Ok(Self { socket })
        })
    }

    /// Sends `frame` as is.
    pub fn send(&self, frame: &[u8]) -> Result<()> {
        // SAFETY: a buffer of the length passed.
        let sent = unsafe {
            libc::send(
                self.socket.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
            )
        };
        if sent < 0 {
            bail!("sending a frame: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The first incoming frame (not one this host sent) that `accept` takes within `within`.
    pub fn receive(
        &self,
        within: Duration,
        accept: impl Fn(&[u8]) -> bool,
    ) -> Result<Option<Vec<u8>>> {
        let deadline = Instant::now() + within;
        let mut buffer = vec![0_u8; 65536];
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let mut poll = libc::pollfd {
                fd: self.socket.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let millis = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
            // SAFETY: one pollfd we own.
            if unsafe { libc::poll(&mut poll, 1, millis) } <= 0 {
                continue;
            }
            let (received, kind) = self.receive_now(&mut buffer);
            if received < 0 || kind == libc::PACKET_OUTGOING {
                continue;
            }
            let frame = &buffer[..received as usize];
            if accept(frame) {
                return Ok(Some(frame.to_vec()));
            }
        }
        Ok(None)
    }

    /// One frame into `buffer` without waiting: its length (negative: none) and packet type.
    fn receive_now(&self, buffer: &mut [u8]) -> (isize, u8) {
        // SAFETY: a zeroed sockaddr_ll to be filled, and a buffer valid for its length.
        unsafe {
            let mut address: libc::sockaddr_ll = std::mem::zeroed();
            let mut length = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            let received = libc::recvfrom(
                self.socket.as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                libc::MSG_DONTWAIT,
                std::ptr::addr_of_mut!(address).cast(),
                &mut length,
            );
            (received, address.sll_pkttype)
        }
    }

    /// Every incoming frame waiting on the socket now, without waiting for more.
    pub fn drain(&self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        let mut buffer = vec![0_u8; 65536];
        loop {
            let (received, kind) = self.receive_now(&mut buffer);
            if received < 0 {
                return frames;
            }
            if kind != libc::PACKET_OUTGOING {
                frames.push(buffer[..received as usize].to_vec());
            }
        }
    }
}

/// The EUI-64 link-local address of `mac` (RFC 4291: the universal/local bit flipped, `ff:fe`
/// in the middle), built here apart from the agent's.
#[must_use]
pub fn link_local(mac: [u8; 6]) -> [u8; 16] {
    let mut address = [0_u8; 16];
    address[..2].copy_from_slice(&[0xfe, 0x80]);
    address[8..].copy_from_slice(&[
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]);
    address
}

/// Ethernet from `source` to `destination` + IPv4 (ID 0xabcd, DF, TTL 64) from `from` to `to`
/// around `payload` of `protocol`, with a valid IPv4 checksum.
#[must_use]
pub fn ipv4_frame(
    destination: [u8; 6],
    source: [u8; 6],
    (from, to): (Ipv4Addr, Ipv4Addr),
    protocol: u8,
    payload: &[u8],
) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0xab, 0xcd, 0x40, 0, 64, protocol, 0, 0]);
    ip.extend_from_slice(&from.octets());
    ip.extend_from_slice(&to.octets());
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let mut frame = destination.to_vec();
    frame.extend_from_slice(&source);
    frame.extend_from_slice(&[0x08, 0x00]);
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(payload);
    frame
}

/// The TCP/UDP checksum of `segment` (checksum field included) with its IPv4 pseudo-header.
#[must_use]
pub fn transport_checksum((from, to): (Ipv4Addr, Ipv4Addr), protocol: u8, segment: &[u8]) -> u16 {
    let mut pseudo = from.octets().to_vec();
    pseudo.extend_from_slice(&to.octets());
    pseudo.extend_from_slice(&[0, protocol]);
    pseudo.extend_from_slice(&(segment.len() as u16).to_be_bytes());
    pseudo.extend_from_slice(segment);
    checksum(&pseudo)
}

/// A TCP SYN from `source_port` to `port` with sequence `seq` and an MSS option, checksummed
/// for `addresses`.
#[must_use]
pub fn tcp_syn(addresses: (Ipv4Addr, Ipv4Addr), source_port: u16, port: u16, seq: u32) -> Vec<u8> {
    let mut tcp = source_port.to_be_bytes().to_vec();
    tcp.extend_from_slice(&port.to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&[
        0, 0, 0, 0, 0x60, 0x02, 0xfa, 0xf0, 0, 0, 0, 0, 2, 4, 0x05, 0xb4,
    ]);
    let sum = transport_checksum(addresses, 6, &tcp);
    tcp[16..18].copy_from_slice(&sum.to_be_bytes());
    tcp
}

/// A UDP datagram from `source_port` to `port` around `payload`, checksummed for `addresses`.
#[must_use]
pub fn udp(
    addresses: (Ipv4Addr, Ipv4Addr),
    source_port: u16,
    port: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut udp = source_port.to_be_bytes().to_vec();
    udp.extend_from_slice(&port.to_be_bytes());
    udp.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let sum = transport_checksum(addresses, 17, &udp);
    udp[6..8].copy_from_slice(&sum.to_be_bytes());
    udp
}

/// The frames of a pcap file (as `tcpdump -w` writes it: the 24-byte file header, then a
/// 16-byte record header before each frame), each as captured; a truncated last record is cut
/// to what is there.
#[must_use]
pub fn pcap_frames(pcap: &[u8]) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let captured =
            u32::from_le_bytes([pcap[at + 8], pcap[at + 9], pcap[at + 10], pcap[at + 11]]) as usize;
        frames.push(&pcap[at + 16..(at + 16 + captured).min(pcap.len())]);
        at += 16 + captured;
    }
    frames
}

/// Sends a router solicitation out of eth0 of `netns` (MAC `mac`, from its link-local
/// address, with a source link-layer option) and returns the router advertisement that comes
/// back within two seconds, its ICMPv6 checksum checked.
pub fn solicit_router(netns: &Netns, mac: [u8; 6]) -> Option<Vec<u8>> {
    let source = link_local(mac);
    let mut all_routers = [0_u8; 16];
    all_routers[..2].copy_from_slice(&[0xff, 2]);
    all_routers[15] = 2;
    let mut message = vec![133, 0, 0, 0, 0, 0, 0, 0, 1, 1];
    message.extend(mac);
    let mut frame = vec![0x33, 0x33, 0, 0, 0, 2];
    frame.extend(mac);
    frame.extend([0x86, 0xdd, 0x60, 0, 0, 0]);
    frame.extend((message.len() as u16).to_be_bytes());
    frame.extend([58, 255]);
    frame.extend(source);
    frame.extend(all_routers);
    frame.extend(&message);
    // Over the checksum's zeros, the sum is the checksum itself.
    let sum = checksum6(&frame);
    frame[56..58].copy_from_slice(&sum.to_be_bytes());
    let socket = FrameSocket::open_in(netns, "eth0").unwrap();
    socket.send(&frame).unwrap();
    let advertisement = socket
        .receive(Duration::from_secs(2), |frame| {
            // The answer, not a periodic advertisement to all nodes.
            frame.len() > 54
                && frame[12..14] == [0x86, 0xdd]
                && frame[20] == 58
                && frame[54] == 134
                && frame[38..54] == source
        })
        .unwrap()?;
    assert_eq!(checksum6(&advertisement), 0, "the advertisement's checksum");
    Some(advertisement)
}

/// The ICMPv6 checksum over an IPv6 frame's pseudo header and message, its checksum included:
/// 0 when it is right (and, over a checksum field of zeros, the checksum to write there).
pub fn checksum6(frame: &[u8]) -> u16 {
    let message = &frame[54..];
    let mut covered = frame[22..54].to_vec();
    covered.extend((message.len() as u32).to_be_bytes());
    covered.extend([0, 0, 0, 58]);
    covered.extend(message);
    checksum(&covered)
}
