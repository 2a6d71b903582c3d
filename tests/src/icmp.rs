//! ICMP echo from inside a namespace without a process per ping: a raw ICMP socket opened in the
//! namespace (it stays the namespace's from any thread), echo requests sent at a fixed pace until
//! the first matching reply. For latency measurements where spawning `ping` under `ip netns
//! exec` would be most of what is measured. Also the Internet checksum that tests building frames
//! by hand use. Touches nothing but its socket.

use std::{
    net::Ipv4Addr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};

/// A raw ICMP socket of one namespace.
#[derive(Debug)]
pub struct Pinger {
    socket: OwnedFd,
}

/// The internet checksum of `bytes`.
#[must_use]
pub fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An ICMP echo request with `identifier` and `sequence`.
#[must_use]
pub fn echo_request(identifier: u16, sequence: u16) -> Vec<u8> {
    let mut packet = vec![8, 0, 0, 0];
    packet.extend_from_slice(&identifier.to_be_bytes());
    packet.extend_from_slice(&sequence.to_be_bytes());
    packet.extend_from_slice(b"ovnbpf-echo-probe");
    let sum = checksum(&packet);
    packet[2..4].copy_from_slice(&sum.to_be_bytes());
    packet
}

/// Whether `datagram` (IPv4 header and ICMP, as a raw socket receives it) is an echo reply from
/// `source` to a request with `identifier`.
#[must_use]
pub fn is_echo_reply(datagram: &[u8], source: Ipv4Addr, identifier: u16) -> bool {
    let Some(header_length) = datagram.first().map(|byte| usize::from(byte & 0x0f) * 4) else {
        return false;
    };
    let Some(icmp) = datagram.get(header_length..header_length + 8) else {
        return false;
    };
    datagram.get(12..16) == Some(&source.octets()[..])
        && icmp[0] == 0
        && icmp[4..6] == identifier.to_be_bytes()
}

impl Pinger {
    /// Opens the socket inside the namespace at `netns`.
    pub fn open_in(netns: &Path) -> Result<Self> {
        crate::netns::run_in_path(netns, || {
            // SAFETY: a plain socket call; the descriptor is owned from here on.
            let raw = unsafe {
                libc::socket(
                    libc::AF_INET,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::IPPROTO_ICMP,
                )
            };
            if raw < 0 {
                bail!("raw ICMP socket: {}", std::io::Error::last_os_error());
            }
            // SAFETY: a new descriptor nothing else owns.
            Ok(Self {
                socket: unsafe { OwnedFd::from_raw_fd(raw) },
            })
        })
    }

    /// Sends an echo request to `target` every `pace` until one is answered or `within` passed;
    /// returns when the first answer came (measured from the call), or `None`. Replies to other
    /// identifiers (other callers sharing the namespace) are ignored.
    pub fn first_answer(
        &self,
        target: Ipv4Addr,
        identifier: u16,
        pace: Duration,
        within: Duration,
    ) -> Result<Option<Duration>> {
        let start = Instant::now();
        let mut sequence: u16 = 0;
        let mut buffer = [0u8; 1500];
        while start.elapsed() < within {
            self.send(target, &echo_request(identifier, sequence))?;
            sequence = sequence.wrapping_add(1);
            let next_send = Instant::now() + pace;
            loop {
                let now = Instant::now();
                if now >= next_send {
                    break;
                }
                let Some(length) = self.receive(&mut buffer, next_send - now)? else {
                    break;
                };
                if is_echo_reply(&buffer[..length], target, identifier) {
                    return Ok(Some(start.elapsed()));
                }
            }
        }
        Ok(None)
    }

    fn send(&self, target: Ipv4Addr, packet: &[u8]) -> Result<()> {
        // SAFETY: a sockaddr_in we own and a buffer of the length passed.
        let sent = unsafe {
            let mut address: libc::sockaddr_in = std::mem::zeroed();
            address.sin_family = libc::AF_INET as u16;
            address.sin_addr.s_addr = u32::from_ne_bytes(target.octets());
            libc::sendto(
                self.socket.as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
                0,
                std::ptr::addr_of!(address).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
        // Unreachable for now (no route or neighbour yet) is a lost probe, not a failure.
        if sent < 0 {
            let error = std::io::Error::last_os_error();
            if !matches!(
                error.raw_os_error(),
                Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EAGAIN)
            ) {
                bail!("sending an echo request to {target}: {error}");
            }
        }
        Ok(())
    }

    /// One datagram, or `None` after `timeout`.
    fn receive(&self, buffer: &mut [u8], timeout: Duration) -> Result<Option<usize>> {
        let mut poll = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = i32::try_from(timeout.as_millis().max(1)).unwrap_or(i32::MAX);
        // SAFETY: one pollfd we own.
        let ready = unsafe { libc::poll(&mut poll, 1, millis) };
        if ready < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() == std::io::ErrorKind::Interrupted {
                return Ok(None);
            }
            bail!("poll: {error}");
        }
        if ready == 0 {
            return Ok(None);
        }
        // SAFETY: the buffer is valid for its length.
        let received = unsafe {
            libc::recv(
                self.socket.as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if received < 0 {
            return Ok(None);
        }
        Ok(Some(received as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071's example sums to 0xddf2; a packet with its checksum in place sums to zero.
    #[test]
    fn checksums_follow_rfc_1071() {
        let example = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum(&example), !0xddf2);
        assert_eq!(checksum(&echo_request(7, 9)), 0);
    }

    #[test]
    fn replies_match_by_source_type_and_identifier() {
        let mut datagram = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 5, 10, 0, 0, 9,
        ];
        let mut reply = echo_request(7, 1);
        reply[0] = 0;
        datagram.extend_from_slice(&reply);
        let source = Ipv4Addr::new(10, 0, 0, 5);
        assert!(is_echo_reply(&datagram, source, 7));
        assert!(!is_echo_reply(&datagram, source, 8), "another identifier");
        assert!(!is_echo_reply(&datagram, Ipv4Addr::new(10, 0, 0, 6), 7));
        let mut request = datagram.clone();
        request[20] = 8;
        assert!(
            !is_echo_reply(&request, source, 7),
            "a request, not a reply"
        );
        assert!(!is_echo_reply(&datagram[..24], source, 7), "truncated");
    }
}
