//! Writing a whole Ethernet frame out of an interface through an AF_PACKET socket: the one
//! `sendto` the health checks' probes (`service_monitor::socket`), the periodic router
//! advertisements (`router_advert::periodic`) and the gateway chassis's gratuitous ARPs
//! (`dataplane::ebpf::announce`) send with, and the send-only socket ([`Sender`]) the last two
//! open. Touches only the descriptors it is given or opens.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
};

/// A send-only packet socket: whole frames, each carrying its own EtherType, out of the
/// interface named per send.
#[derive(Debug)]
pub struct Sender {
    fd: OwnedFd,
}

impl Sender {
    /// Opens the socket (protocol 0: it receives nothing).
    pub fn open() -> io::Result<Self> {
        // SAFETY: a plain socket call; the descriptor is owned.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor nothing else owns.
        Ok(Self {
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
        })
    }

    /// Writes `frame` out of interface `ifindex`.
    pub fn send(&self, ifindex: u32, frame: &[u8]) -> io::Result<()> {
        let ifindex = i32::try_from(ifindex)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
        send_frame(self.fd.as_raw_fd(), ifindex, 0, frame)
    }
}

/// Sends `frame` (its destination MAC first) out of interface `ifindex` through packet socket
/// `fd`, as protocol `protocol` (host byte order).
pub fn send_frame(fd: RawFd, ifindex: i32, protocol: u16, frame: &[u8]) -> io::Result<()> {
    // SAFETY: a sockaddr_ll we own and a buffer of the length we pass.
    let sent = unsafe {
        let mut address: libc::sockaddr_ll = std::mem::zeroed();
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_protocol = protocol.to_be();
        address.sll_ifindex = ifindex;
        address.sll_halen = 6;
        address.sll_addr[..6].copy_from_slice(&frame[..6.min(frame.len())]);
        libc::sendto(
            fd,
            frame.as_ptr().cast(),
            frame.len(),
            0,
            std::ptr::addr_of!(address).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
