//! Writing a whole Ethernet frame out of an interface through an AF_PACKET socket: the one
//! `sendto` the health checks' probes (`service_monitor::socket`) and the periodic router
//! advertisements (`router_advert::periodic`) both send with. Touches only the descriptor it is
//! given.

use std::{io, os::fd::RawFd};

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
