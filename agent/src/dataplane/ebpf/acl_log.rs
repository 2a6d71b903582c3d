//! ACL log events from the kernel's `ACL_LOG_EVENTS` ring buffer: a packet a rule with OVN's
//! `log` option decided, named after its ACL through the [`AclLogBook`] the ACL family fills,
//! and logged as ovn-controller logs it (`acl_log` target, info level, OVN's line: `name="…",
//! verdict=…, severity=…, direction=…: <flow>`) at a bounded rate. The flow part carries what
//! the event has: protocol, MACs, IPv4 addresses, ports (ICMP: the type) and TCP flags. Every
//! such packet is counted in the kernel by verdict (`ACL_LOGGED`, the metrics), whether or not
//! its line is written. Owns the ring buffer handle; reads the book.

use std::{
    collections::HashMap,
    fmt::Write as _,
    net::Ipv4Addr,
    sync::{Arc, RwLock},
};

use aya::maps::{MapData, RingBuf};
use ovnbpf_common::acl::AclLogEvent;

use super::events::{drain, follow_ring};
use crate::net::format_mac;

/// What a log id stands for: the ACL's name, severity and verdict (as northd wrote them in the
/// flow's `log(…)`), and the pipeline its rule is in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AclLogName {
    pub name: Option<String>,
    pub severity: String,
    pub verdict: String,
    pub egress: bool,
}

/// Log id → what it stands for; the ACL family writes it, the event reader reads it.
pub type AclLogBook = Arc<RwLock<HashMap<u32, AclLogName>>>;

/// The consumer side of the ACL log ring buffer.
pub struct AclLogEvents {
    ring: RingBuf<MapData>,
    book: AclLogBook,
}

impl AclLogEvents {
    pub(super) fn new(ring: RingBuf<MapData>, book: AclLogBook) -> Self {
        Self { ring, book }
    }

    /// Every line waiting in the buffer, oldest first.
    pub fn drain(&mut self) -> Vec<String> {
        drain::<AclLogEvent>(&mut self.ring)
            .iter()
            .map(|event| line(event, &self.book))
            .collect()
    }

    /// Follows the buffer until the task is dropped, logging at most `per_second` lines a
    /// second (the rest are counted by the kernel, `ovnbpf_acl_logged_total`).
    pub async fn follow(self, per_second: u32) {
        let book = self.book;
        follow_ring(
            self.ring,
            "ACL log",
            per_second,
            |event: AclLogEvent, log| {
                if log {
                    tracing::info!(target: "acl_log", "{}", line(&event, &book));
                }
            },
        )
        .await;
    }
}

/// OVN's `acl_log` line for `event`: a log id the book does not know (its ACL gone meanwhile)
/// is `<unknown>`.
#[must_use]
pub fn line(event: &AclLogEvent, book: &AclLogBook) -> String {
    let name = book
        .read()
        .ok()
        .and_then(|book| book.get(&event.log).cloned());
    let mut line = String::new();
    match &name {
        Some(AclLogName {
            name,
            severity,
            verdict,
            egress,
        }) => {
            let direction = if *egress { "to-lport" } else { "from-lport" };
            let _ = write!(
                line,
                "name={:?}, verdict={verdict}, severity={severity}, direction={direction}: ",
                name.as_deref().unwrap_or("<unnamed>")
            );
        }
        None => line.push_str("name=\"<unknown>\", verdict=<unknown>, severity=<unknown>: "),
    }
    let protocol = match event.protocol {
        1 => "icmp",
        6 => "tcp",
        17 => "udp",
        132 => "sctp",
        _ => "ip",
    };
    let _ = write!(
        line,
        "{protocol},dl_src={},dl_dst={},nw_src={},nw_dst={}",
        format_mac(&event.eth_source),
        format_mac(&event.eth_destination),
        Ipv4Addr::from(u32::from_be(event.source)),
        Ipv4Addr::from(u32::from_be(event.destination)),
    );
    match event.protocol {
        1 => {
            let _ = write!(line, ",icmp_type={}", event.source_port);
        }
        6 | 17 | 132 => {
            let _ = write!(
                line,
                ",tp_src={},tp_dst={}",
                event.source_port, event.destination_port
            );
        }
        other => {
            let _ = write!(line, ",nw_proto={other}");
        }
    }
    if event.protocol == 6 {
        let _ = write!(line, ",tcp_flags={}", tcp_flags(event.tcp_flags));
    }
    line
}

/// TCP flags as OVS's `flow_format` writes them (`syn|ack`; `0` for none).
fn tcp_flags(flags: u8) -> String {
    const NAMES: [(u8, &str); 8] = [
        (0x01, "fin"),
        (0x02, "syn"),
        (0x04, "rst"),
        (0x08, "psh"),
        (0x10, "ack"),
        (0x20, "urg"),
        (0x40, "ece"),
        (0x80, "cwr"),
    ];
    let set: Vec<&str> = NAMES
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, name)| *name)
        .collect();
    if set.is_empty() {
        "0".into()
    } else {
        set.join("|")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_drop_reads_as_ovn_controllers_line() {
        let book: AclLogBook = Arc::default();
        book.write().unwrap().insert(
            7,
            AclLogName {
                name: Some("ns/web".into()),
                severity: "warning".into(),
                verdict: "drop".into(),
                egress: true,
            },
        );
        let event = AclLogEvent {
            log: 7,
            source: u32::from(Ipv4Addr::new(10, 0, 1, 5)).to_be(),
            destination: u32::from(Ipv4Addr::new(10, 0, 1, 3)).to_be(),
            source_port: 40000,
            destination_port: 5201,
            protocol: 6,
            tcp_flags: 0x02,
            eth_source: [0x0a, 0x58, 0, 0, 0, 5],
            eth_destination: [0x0a, 0x58, 0, 0, 0, 3],
            ..AclLogEvent::default()
        };
        assert_eq!(
            line(&event, &book),
            "name=\"ns/web\", verdict=drop, severity=warning, direction=to-lport: \
             tcp,dl_src=0a:58:00:00:00:05,dl_dst=0a:58:00:00:00:03,nw_src=10.0.1.5,\
             nw_dst=10.0.1.3,tp_src=40000,tp_dst=5201,tcp_flags=syn"
        );
        let ping = AclLogEvent {
            log: 99,
            protocol: 1,
            source_port: 8,
            ..event
        };
        let text = line(&ping, &book);
        assert!(
            text.starts_with("name=\"<unknown>\"") && text.ends_with(",icmp_type=8"),
            "{text}"
        );
        assert_eq!(tcp_flags(0x12), "syn|ack");
        assert_eq!(tcp_flags(0), "0");
    }
}
