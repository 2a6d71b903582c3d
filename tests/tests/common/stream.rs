//! A paced TCP stream between two pods and the sender namespace's retransmission counters:
//! what the restart and policy tests use to tell that a connection lost nothing.

use std::{
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

/// A TCP counter of the calling thread's network namespace: `field` of the `group` line pair
/// (`Tcp:` in `snmp`, `TcpExt:` in `netstat`).
fn tcp_counter(file: &str, group: &str, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")).unwrap();
    let mut lines = text.lines().filter(|line| line.starts_with(group));
    let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
    let position = names.split_whitespace().position(|name| name == field);
    let position = position.unwrap_or_else(|| panic!("no {field} in {file}"));
    values
        .split_whitespace()
        .nth(position)
        .unwrap()
        .parse()
        .unwrap()
}

/// (segments retransmitted, duplicates the peer reported by D-SACK) in the namespace at `netns`.
pub fn retransmissions(netns: &std::path::Path) -> (u64, u64) {
    run_in(netns, || {
        (
            tcp_counter("snmp", "Tcp:", "RetransSegs"),
            tcp_counter("netstat", "TcpExt:", "TCPDSACKRecv"),
        )
    })
    .unwrap()
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
