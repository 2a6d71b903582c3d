//! The neighbours the kernel's routers heard of (`NEIGHBOUR_EVENTS`, see
//! `ebpf/src/neighbour_learning.rs`): each event becomes a [`HeardNeighbour`] handed to the
//! daemon, which decides whether the router learns it. Owns the ring buffer handle; what the
//! kernel could not report is counted there (`neighbour_report_lost`), what the daemon's queue
//! could not take is counted here and logged.

use std::net::{IpAddr, Ipv4Addr};

use aya::maps::{MapData, RingBuf};
use ovnbpf_common::NeighbourEvent;

use super::events::follow_ring;
use crate::{
    dataplane::{HeardNeighbour, NeighbourSink},
    net::Mac,
};

/// Reports logged per second at most when the daemon's queue is full.
const FULL_LOGS_PER_SECOND: u32 = 1;

/// The consumer side of the ring buffer.
pub struct NeighbourEvents {
    ring: RingBuf<MapData>,
}

impl NeighbourEvents {
    pub(super) fn new(ring: RingBuf<MapData>) -> Self {
        Self { ring }
    }

    /// Follows the buffer until the task is dropped, handing every event to `sink`.
    pub async fn follow(self, sink: NeighbourSink) {
        let mut lost = 0_u64;
        follow_ring(
            self.ring,
            "neighbour events",
            FULL_LOGS_PER_SECOND,
            |event: NeighbourEvent, log| {
                if sink.try_send(heard(&event)).is_err() {
                    lost += 1;
                    if log {
                        tracing::warn!(
                            lost,
                            "MAC learning's queue is full; a heard neighbour is reported again by its next ARP"
                        );
                    }
                }
            },
        )
        .await;
    }
}

/// The neighbour `event` reports.
#[must_use]
pub fn heard(event: &NeighbourEvent) -> HeardNeighbour {
    HeardNeighbour {
        router: event.router,
        router_mac: Mac(event.router_mac),
        // The kernel keeps the address as it was on the wire.
        ip: IpAddr::V4(Ipv4Addr::from(event.ip.to_ne_bytes())),
        mac: Mac(event.mac),
        request: event.operation == 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_reads_as_the_neighbour_on_the_wire() {
        let event = NeighbourEvent {
            router: 7,
            ip: u32::from_ne_bytes([172, 30, 0, 1]),
            mac: [0x02, 0, 0, 0, 0, 0x01],
            router_mac: [0x0a, 0x58, 0, 0, 0, 0x10],
            operation: 2,
            reserved: 0,
        };
        assert_eq!(
            heard(&event),
            HeardNeighbour {
                router: 7,
                router_mac: "0a:58:00:00:00:10".parse().unwrap(),
                ip: "172.30.0.1".parse().unwrap(),
                mac: "02:00:00:00:00:01".parse().unwrap(),
                request: false,
            }
        );
        assert!(
            heard(&NeighbourEvent {
                operation: 1,
                ..event
            })
            .request
        );
    }
}
