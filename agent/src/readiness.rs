//! Waiting, on a blocking thread, until a descriptor has something to read: link notifications on
//! a netlink socket ([`crate::netlink`]), the kernel programs' log ring buffer
//! ([`crate::dataplane::ebpf::kernel_log`]). Touches only the descriptor it is given.

use std::{
    io,
    os::fd::{AsRawFd, BorrowedFd},
    time::Duration,
};

/// Waits until `fd` is readable, up to `timeout` (rounded up to the millisecond: never less);
/// whether it became readable.
pub fn readable_within(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut descriptor = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let milliseconds = i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut descriptor, 1, milliseconds) };
        if ready >= 0 {
            return Ok(ready > 0);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}
