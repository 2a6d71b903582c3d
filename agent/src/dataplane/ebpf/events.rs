//! Drop events from the kernel's `DROP_EVENTS` ring buffer: reading them, decoding a dropped
//! frame's first bytes into something an operator can act on (reason, interface, MACs, IPv4
//! addresses, a Geneve frame's VNI), logging them at a bounded rate while counting every one, and publishing every
//! decoded event on a [`DropTap`] for live followers (`ovnbpfctl monitor` through the control
//! socket). Owns the ring buffer handle; touches nothing else.

use std::{
    collections::HashMap,
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use ovnbpf_common::{DropEvent, drop_reason};

pub use crate::dataplane::drops::{DropReport, DropTap};

/// The consumer side of the drop-event ring buffer (one per agent: events are not duplicated).
pub struct DropEvents {
    ring: RingBuf<MapData>,
}

impl DropEvents {
    pub(super) fn new(ring: RingBuf<MapData>) -> Self {
        Self { ring }
    }

    /// Every event waiting in the buffer, oldest first.
    pub fn drain(&mut self) -> Vec<DropEvent> {
        drain::<DropEvent>(&mut self.ring)
    }

    /// Follows the buffer until the task is dropped, publishing every event on `tap` and logging
    /// at most `per_second` events a second (the rest are counted and summarised).
    pub async fn follow(self, per_second: u32, tap: DropTap) {
        follow_ring(
            self.ring,
            "drop events",
            per_second,
            |event: DropEvent, log| {
                let report = DropReport::decode(&event);
                if log {
                    tracing::info!(
                        reason = report.reason,
                        interface = %report.interface,
                        length = event.length,
                        frame = %report,
                        "frame dropped"
                    );
                }
                // Nobody following is the usual case, not an error.
                let _ = tap.send(report);
            },
        )
        .await;
    }
}

/// Follows `ring` until the task is dropped: every event, as a `T`, to `each` with whether its
/// line may be written (at most `per_second` a second); after each batch, how many were not is
/// logged once, with `what` the ring carries. The datapath's counters count every event.
pub(super) async fn follow_ring<T: aya::Pod>(
    ring: RingBuf<MapData>,
    what: &'static str,
    per_second: u32,
    mut each: impl FnMut(T, bool),
) {
    // SAFETY: the ring buffer owns its fd and moves into the AsyncFd, which deregisters the fd
    // before dropping (and closing) it.
    let mut ring = match unsafe { tokio::io::unix::AsyncFd::register(ring) } {
        Ok(ring) => ring,
        Err(error) => {
            tracing::warn!(%error, what, "cannot poll the ring buffer; its events are only counted");
            return;
        }
    };
    let mut limiter = LogLimiter::new(per_second);
    loop {
        let mut guard = match ring.readable_mut().await {
            Ok(guard) => guard,
            Err(error) => {
                tracing::warn!(%error, what, "polling the ring buffer failed");
                return;
            }
        };
        for event in drain::<T>(guard.get_inner_mut()) {
            each(event, limiter.allow(Instant::now()));
        }
        if let Some(suppressed) = limiter.take_suppressed(Instant::now()) {
            tracing::info!(
                suppressed,
                what,
                "events not logged (rate limit); the datapath's counters have them all"
            );
        }
        guard.clear_ready();
    }
}

/// Every event waiting in `ring`, oldest first.
pub(super) fn drain<T: aya::Pod>(ring: &mut RingBuf<MapData>) -> Vec<T> {
    let mut events = Vec::new();
    while let Some(item) = ring.next() {
        if item.len() >= std::mem::size_of::<T>() {
            // SAFETY: the kernel wrote a whole T (`aya::Pod`: plain data, any bit pattern
            // valid); read_unaligned copes with the ring's 8-byte alignment.
            events.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<T>()) });
        }
    }
    events
}

/// Allows `per_second` events a second and counts the rest.
pub(super) struct LogLimiter {
    per_second: u32,
    window: Instant,
    in_window: u32,
    suppressed: u64,
}

impl LogLimiter {
    pub(super) fn new(per_second: u32) -> Self {
        Self {
            per_second,
            window: Instant::now(),
            in_window: 0,
            suppressed: 0,
        }
    }

    pub(super) fn allow(&mut self, now: Instant) -> bool {
        if now.duration_since(self.window) >= Duration::from_secs(1) {
            self.window = now;
            self.in_window = 0;
        }
        if self.in_window < self.per_second {
            self.in_window += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }

    /// The number suppressed so far, once a window has passed since it was last reported.
    pub(super) fn take_suppressed(&mut self, now: Instant) -> Option<u64> {
        (self.suppressed > 0 && now.duration_since(self.window) >= Duration::from_secs(1))
            .then(|| std::mem::take(&mut self.suppressed))
    }
}

impl DropReport {
    /// Decodes a kernel drop event (its reason, interface and the frame's first bytes).
    #[must_use]
    pub fn decode(event: &DropEvent) -> Self {
        let captured = &event.header[..(event.captured as usize).min(event.header.len())];
        let mac = |range: std::ops::Range<usize>| {
            captured
                .get(range)
                .and_then(|bytes| <[u8; 6]>::try_from(bytes).ok())
        };
        let ether_type = captured
            .get(12..14)
            .map(|bytes| u16::from_be_bytes([bytes[0], bytes[1]]));
        let ipv4 = (ether_type == Some(0x0800))
            .then(|| captured.get(26..34))
            .flatten()
            .map(|bytes| {
                (
                    Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]),
                    Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]),
                )
            });
        Self {
            reason: drop_reason::NAMES
                .get(event.reason as usize)
                .copied()
                .unwrap_or("unknown"),
            interface: interface_name(event.ifindex),
            source_mac: mac(6..12),
            destination_mac: mac(0..6),
            ether_type,
            ipv4,
            geneve_vni: geneve_vni(captured),
        }
    }
}

/// The VNI of an IPv4 Geneve frame's header, if `captured` holds it.
fn geneve_vni(captured: &[u8]) -> Option<u32> {
    if captured.get(12..14)? != [0x08, 0x00] || *captured.get(23)? != 17 {
        return None;
    }
    let udp = 14 + usize::from(captured.get(14)? & 0x0f) * 4;
    let port = captured.get(udp + 2..udp + 4)?;
    if u16::from_be_bytes([port[0], port[1]]) != ovnbpf_common::geneve::UDP_PORT {
        return None;
    }
    let vni = captured.get(udp + 12..udp + 15)?;
    Some(u32::from_be_bytes([0, vni[0], vni[1], vni[2]]))
}

/// The name of interface `ifindex` in this process's network namespace.
fn interface_name(ifindex: u32) -> String {
    let mut buffer = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes, NUL-terminated, into `buffer`.
    let name = unsafe { libc::if_indextoname(ifindex, buffer.as_mut_ptr()) };
    if name.is_null() {
        return format!("ifindex {ifindex}");
    }
    // SAFETY: on success the buffer holds a NUL-terminated name.
    unsafe { std::ffi::CStr::from_ptr(buffer.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Interface index → name, from /sys/class/net.
#[must_use]
pub fn interface_names() -> HashMap<u32, String> {
    let Ok(entries) = std::fs::read_dir("/sys/class/net") else {
        return HashMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let index = std::fs::read_to_string(entry.path().join("ifindex")).ok()?;
            Some((
                index.trim().parse().ok()?,
                entry.file_name().to_string_lossy().into_owned(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_drop_is_decoded_and_a_short_one_is_not_invented() {
        let mut header = [0_u8; ovnbpf_common::DROP_EVENT_HEADER];
        header[..6].copy_from_slice(&[0x0a, 0x58, 0x0a, 0, 1, 3]);
        header[6..12].copy_from_slice(&[0x0a, 0x58, 0x0a, 0, 1, 66]);
        header[12..14].copy_from_slice(&[0x08, 0x00]);
        header[26..30].copy_from_slice(&[10, 0, 1, 66]);
        header[30..34].copy_from_slice(&[10, 0, 1, 3]);
        let event = DropEvent {
            reason: drop_reason::PORT_SECURITY.0,
            ifindex: u32::MAX,
            length: 98,
            captured: 64,
            header,
        };
        let report = DropReport::decode(&event);
        assert_eq!(report.reason, "port_security");
        assert_eq!(report.interface, format!("ifindex {}", u32::MAX));
        assert_eq!(
            report.to_string(),
            "0a:58:0a:00:01:42 > 0a:58:0a:00:01:03 type 0x0800 10.0.1.66 > 10.0.1.3"
        );
        let short = DropEvent {
            captured: 14,
            ..event
        };
        assert_eq!(DropReport::decode(&short).ipv4, None);
        let unknown = DropEvent {
            reason: 999,
            captured: 0,
            ..event
        };
        let report = DropReport::decode(&unknown);
        assert_eq!((report.reason, report.ether_type), ("unknown", None));
        assert_eq!(report.geneve_vni, None);
    }

    #[test]
    fn a_geneve_drop_has_its_vni_and_other_udp_has_none() {
        let mut header = [0_u8; ovnbpf_common::DROP_EVENT_HEADER];
        header[12..14].copy_from_slice(&[0x08, 0x00]);
        header[14] = 0x45;
        header[23] = 17;
        // UDP to 6081, then Geneve: version/length, flags, protocol, VNI 0x012345, reserved.
        header[36..38].copy_from_slice(&6081_u16.to_be_bytes());
        header[42..50].copy_from_slice(&[0x02, 0x00, 0x65, 0x58, 0x01, 0x23, 0x45, 0x00]);
        let event = DropEvent {
            reason: drop_reason::PORT_SECURITY.0,
            ifindex: u32::MAX,
            length: 120,
            captured: 64,
            header,
        };
        assert_eq!(DropReport::decode(&event).geneve_vni, Some(0x012345));
        let cut = DropEvent {
            captured: 48,
            ..event
        };
        assert_eq!(
            DropReport::decode(&cut).geneve_vni,
            None,
            "VNI not captured"
        );
        let mut dns = event;
        dns.header[36..38].copy_from_slice(&53_u16.to_be_bytes());
        assert_eq!(DropReport::decode(&dns).geneve_vni, None);
    }

    #[test]
    fn the_limiter_lets_a_burst_through_then_counts() {
        let start = Instant::now();
        let mut limiter = LogLimiter::new(2);
        limiter.window = start;
        assert!(limiter.allow(start) && limiter.allow(start));
        assert!(!limiter.allow(start));
        assert_eq!(
            limiter.take_suppressed(start),
            None,
            "not before a window passed"
        );
        let later = start + Duration::from_secs(1);
        assert_eq!(limiter.take_suppressed(later), Some(1));
        assert!(limiter.allow(later));
    }
}
