//! A paced TCP stream between two pods and a namespace's TCP counters: what the restart and
//! policy tests use to tell that a connection lost nothing.

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use ovnbpf_agent::netns::run_in;
use ovnbpf_tests::network::Pod;

/// Bytes per write of the paced stream; one write per millisecond is about 16 MB/s.
const CHUNK: usize = 16 * 1024;

/// What the two ends of a stream saw.
pub struct StreamReport {
    /// Bytes the receiver read.
    pub bytes: u64,
    /// The longest wait between two reads, printed for whoever reads the log; not asserted.
    pub longest_pause: Duration,
}

/// Every `Tcp:` and `TcpExt:` counter of a network namespace, by name: a snapshot to subtract
/// from a later one, so that what a test measures is one stream's, not what the namespace's
/// earlier connections did (a refused test connection that gives up after a second races its
/// own SYN's retransmission, due after a second too, and counts in `RetransSegs` when it loses).
#[derive(Clone, Debug, Default)]
pub struct TcpCounters(BTreeMap<String, u64>);

impl TcpCounters {
    /// The counters of the namespace at `netns` now.
    pub fn read(netns: &std::path::Path) -> Self {
        run_in(netns, || {
            let mut counters = BTreeMap::new();
            for (file, group) in [("snmp", "Tcp:"), ("netstat", "TcpExt:")] {
                let text =
                    std::fs::read_to_string(format!("/proc/thread-self/net/{file}")).unwrap();
                let mut lines = text.lines().filter(|line| line.starts_with(group));
                let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
                for (name, value) in names
                    .split_whitespace()
                    .zip(values.split_whitespace())
                    .skip(1)
                {
                    // (`Tcp: MaxConn` is -1: not a counter.)
                    if let Ok(value) = value.parse() {
                        counters.insert(name.to_string(), value);
                    }
                }
            }
            Self(counters)
        })
        .unwrap()
    }

    /// What grew since `earlier`, counter by counter.
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        let grown = self.0.iter().map(|(name, value)| {
            let before = earlier.0.get(name).copied().unwrap_or(0);
            (name.clone(), value.saturating_sub(before))
        });
        Self(grown.collect())
    }

    /// The counter `name` (0 if the kernel has none by that name).
    #[must_use]
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Segments sent again that the receiver did not report as duplicates (D-SACK, below the
    /// cumulative ACK or above it): the segments the path lost.
    #[must_use]
    pub fn lost_segments(&self) -> u64 {
        self.get("RetransSegs")
            .saturating_sub(self.get("TCPDSACKRecv") + self.get("TCPDSACKOfoRecv"))
    }
}

impl std::fmt::Display for TcpCounters {
    /// The counters that are not zero, `name=value` apart by spaces.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (name, value) in self.0.iter().filter(|(_, value)| **value != 0) {
            write!(formatter, "{}{name}={value}", if first { "" } else { " " })?;
            first = false;
        }
        Ok(())
    }
}

/// A TCP stream from `client` to `server` (at `server_ip`, `port`), paced at one chunk per
/// millisecond until `stop` is set; returns what both ends saw.
pub fn paced_stream(
    client: &Pod,
    server: &Pod,
    server_ip: Ipv4Addr,
    port: u16,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<StreamReport> {
    paced_stream_via(client, server, (server_ip, port), (server_ip, port), stop)
}

/// [`paced_stream`] with the client dialling `dial` (a Service VIP, say) while the server
/// listens on `listen`.
pub fn paced_stream_via(
    client: &Pod,
    server: &Pod,
    listen: (Ipv4Addr, u16),
    dial: (Ipv4Addr, u16),
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<StreamReport> {
    let address = SocketAddr::from(listen);
    let dial = SocketAddr::from(dial);
    // Each socket lives in the namespace of the thread that created it.
    let listener = run_in(&server.netns().path(), || TcpListener::bind(address))
        .unwrap()
        .unwrap();
    let mut sender = run_in(&client.netns().path(), || {
        TcpStream::connect_timeout(&dial, Duration::from_secs(3))
    })
    .unwrap()
    .unwrap();
    let (mut receiver, _) = listener.accept().unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let sending = thread::spawn(move || {
        let chunk = vec![0x5a_u8; CHUNK];
        while !stop.load(Ordering::Relaxed) {
            sender.write_all(&chunk).unwrap();
            thread::sleep(Duration::from_millis(1));
        }
        sender.shutdown(std::net::Shutdown::Write).unwrap();
        sender
    });
    thread::spawn(move || {
        let mut buffer = vec![0_u8; 256 * 1024];
        let mut report = StreamReport {
            bytes: 0,
            longest_pause: Duration::ZERO,
        };
        let mut last = Instant::now();
        loop {
            let read = receiver.read(&mut buffer).expect("the stream broke");
            if read == 0 {
                drop(sending.join().unwrap());
                return report;
            }
            report.longest_pause = report.longest_pause.max(last.elapsed());
            report.bytes += read as u64;
            last = Instant::now();
        }
    })
}

/// Frames the kernel dropped for want of room in a CPU's input backlog (`netdev_max_backlog`),
/// all CPUs together (`/proc/net/softnet_stat`'s second column): where a veth's receiving CPU
/// is too busy (say, verifying a restarted agent's programs), frames are lost there, beyond any
/// ovnbpf counter.
pub fn backlog_drops() -> u64 {
    let text = std::fs::read_to_string("/proc/net/softnet_stat").unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .filter_map(|dropped| u64::from_str_radix(dropped, 16).ok())
        .sum()
}
