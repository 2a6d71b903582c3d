//! The packet socket a backend's probes go through: bound to the backend's host interface
//! (frames sent there reach the pod, as pinctrl's packet-out to the port does, past the
//! datapath's ACLs as northd's `$svc_monitor_mac` flows let them), it receives only frames
//! to the monitor's MAC (a classic BPF filter, attached before the socket is bound, so no other
//! frame is ever queued). The pod's answers are seen here before the datapath, which drops
//! them (`handle_svc_check` has no other taker). The cost: the filter runs on every frame of
//! that interface, a few instructions, while the backend is monitored. Owns its descriptor.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use tokio::io::unix::AsyncFd;

const ETH_P_IP: u16 = 0x0800;
/// Every protocol: only such a socket sees frames before the interface's tc ingress (where
/// the datapath drops the answers); one bound to IPv4 would see them after it, never.
const ETH_P_ALL: u16 = 0x0003;

/// See the module documentation.
#[derive(Debug)]
pub struct ProbeSocket {
    fd: AsyncFd<OwnedFd>,
    ifindex: i32,
}

/// `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

/// `struct sock_fprog`.
#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

/// Accepts frames whose destination MAC is `mac`: `ld [0]; jeq mac[0..4]; ldh [4]; jeq
/// mac[4..6]; ret all; ret 0`.
fn destination_filter(mac: [u8; 6]) -> [SockFilter; 6] {
    const LD_W_ABS: u16 = 0x20;
    const LD_H_ABS: u16 = 0x28;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    let high = u32::from_be_bytes([mac[0], mac[1], mac[2], mac[3]]);
    let low = u32::from(u16::from_be_bytes([mac[4], mac[5]]));
    let op = |code, jt, jf, k| SockFilter { code, jt, jf, k };
    [
        op(LD_W_ABS, 0, 0, 0),
        op(JEQ_K, 0, 3, high),
        op(LD_H_ABS, 0, 0, 4),
        op(JEQ_K, 0, 1, low),
        op(RET_K, 0, 0, 0x0004_0000),
        op(RET_K, 0, 0, 0),
    ]
}

impl ProbeSocket {
    /// A socket on interface `ifindex` receiving IPv4 frames to `monitor_mac`. Needs a Tokio
    /// runtime (it registers with its reactor).
    pub fn open(ifindex: u32, monitor_mac: [u8; 6]) -> io::Result<Self> {
        let ifindex =
            i32::try_from(ifindex).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: a plain socket call; the descriptor is owned from here on.
        let fd = unsafe {
            let raw = libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            );
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(raw)
        };
        let filter = destination_filter(monitor_mac);
        let program = SockFprog {
            len: filter.len() as u16,
            filter: filter.as_ptr(),
        };
        // SAFETY: the program and its instructions outlive the call, which copies them.
        let attached = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                std::ptr::addr_of!(program).cast(),
                std::mem::size_of::<SockFprog>() as u32,
            )
        };
        if attached < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a sockaddr_ll we own, of the length we pass.
        let bound = unsafe {
            let mut address: libc::sockaddr_ll = std::mem::zeroed();
            address.sll_family = libc::AF_PACKET as u16;
            address.sll_protocol = ETH_P_ALL.to_be();
            address.sll_ifindex = ifindex;
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::addr_of!(address).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if bound < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the `OwnedFd` keeps the descriptor open, and the same, for the `AsyncFd`'s
        // whole life (it owns it).
        let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }?;
        Ok(Self { fd, ifindex })
    }

    /// Sends `frame` out of the interface (into the pod).
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        crate::packet_socket::send_frame(
            self.fd.get_ref().as_raw_fd(),
            self.ifindex,
            ETH_P_IP,
            frame,
        )
    }

    /// The next frame received, into `buffer`: its length.
    pub async fn receive(&self, buffer: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.fd.readable().await?;
            // SAFETY: a buffer of the length we pass.
            let received = ready.try_io(|fd| {
                let length = unsafe {
                    libc::recv(
                        fd.get_ref().as_raw_fd(),
                        buffer.as_mut_ptr().cast(),
                        buffer.len(),
                        0,
                    )
                };
                if length < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(length.unsigned_abs())
                }
            });
            match received {
                Ok(result) => return result,
                Err(_would_block) => {}
            }
        }
    }
}
