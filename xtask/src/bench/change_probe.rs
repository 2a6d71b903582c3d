//! One Port_Binding change's latency, end to end, measured by a packet (`bench scale`): a sender
//! pod streams small UDP datagrams to the address of a probe pod whose logical port does not
//! exist yet, so the chassis drops them: one about every 100 µs from the change until the first
//! arrives, one a millisecond otherwise (each dropped datagram costs the chassis work, and the
//! machine's two cores also run ovsdb-server and northd, whose delays would count). The bench inserts that port into
//! the NB as kube-ovn-controller does (the LSP and its switch's reference, one transaction) and
//! stamps the first datagram the probe pod receives: from the transaction's sending (NB →
//! packet: ovsdb-server, northd and the chassis) and from the arrival of the Southbound update
//! that inserted its Port_Binding ([`SbWatch`], a client of the same server: SB → packet, the
//! chassis's share). Then it deletes the port and waits until nothing has arrived for
//! 100 ms (the chassis stopped forwarding to it) before the next change. The resolution is the
//! sender's interval. Owns its two sockets and its sender thread; changes only the probe's LSP.
//!
//! SB → packet also holds the server's fan-out: ovsdb-server sends its clients their updates
//! one after another, and with northd recomputing on the same two cores the agent's came 25 ms
//! after the watch's at 10,000 pods (strace of the server, 2026-12-08: commit, 13 ms, the
//! watch's update, 25 ms, the agent's; the agent then had the port forwarding 2.7 ms later, its
//! claim's round trip included, by its debug log).

use std::{
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use ovnbpf_tests::{kubeovn, netns::Netns};
use serde_json::{Value, json};

use super::ovsdb_watch::{Ovsdb, SbWatch};

/// The probe pod's UDP port.
const PROBE_PORT: u16 = 9;
/// The sender's pause between two datagrams while a change is timed (the resolution).
const SEND_INTERVAL: Duration = Duration::from_micros(50);
/// The sender's pause between two datagrams otherwise.
const IDLE_INTERVAL: Duration = Duration::from_millis(1);
/// How long nothing must arrive for the chassis to count as no longer forwarding.
const SILENCE: Duration = Duration::from_millis(100);
/// How long one change may take to reach the datapath, or to leave it.
const CHANGE_LIMIT: Duration = Duration::from_secs(60);

/// The probe pod's logical port as kube-ovn-controller writes it.
pub struct ProbePort<'a> {
    pub switch: &'a str,
    pub pod: &'a str,
    pub namespace: &'a str,
    pub mac: &'a str,
    pub ip: Ipv4Addr,
}

impl ProbePort<'_> {
    #[must_use]
    pub fn logical_port(&self) -> String {
        kubeovn::pod_port_name(self.pod, self.namespace)
    }
}

/// One change's latency.
pub struct Sample {
    pub nb_to_packet: Duration,
    pub sb_to_packet: Duration,
}

/// A sender streaming to the probe's address, the probe's socket, and an NB connection.
pub struct ChangeProbe {
    receiver: UdpSocket,
    sending: Arc<AtomicBool>,
    /// Send every [`SEND_INTERVAL`] (else every [`IDLE_INTERVAL`]).
    timing: Arc<AtomicBool>,
    sender: Option<JoinHandle<()>>,
    nb: Ovsdb,
}

impl ChangeProbe {
    /// Starts streaming from `sender` (a pod whose `eth0` reaches `port.ip` on link: the probe's
    /// MAC is set as a permanent neighbour, so no ARP is needed) to the probe pod in `receiver`,
    /// and connects to the NB at `nb_remote`.
    pub fn start(
        sender: &Netns,
        receiver: &Netns,
        port: &ProbePort<'_>,
        nb_remote: &str,
    ) -> Result<Self> {
        let ip = port.ip.to_string();
        sender.ip(&[
            "neigh",
            "replace",
            &ip,
            "lladdr",
            port.mac,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ])?;
        let target = SocketAddr::V4(SocketAddrV4::new(port.ip, PROBE_PORT));
        let socket = sender.run_in(|| {
            let socket = UdpSocket::bind("0.0.0.0:0")?;
            socket.connect(target)?;
            Ok(socket)
        })?;
        let receiver = receiver.run_in(|| Ok(UdpSocket::bind(("0.0.0.0", PROBE_PORT))?))?;
        let sending = Arc::new(AtomicBool::new(true));
        let timing = Arc::new(AtomicBool::new(false));
        let (running, fast) = (Arc::clone(&sending), Arc::clone(&timing));
        let sender = std::thread::spawn(move || {
            let mut sequence = 0_u64;
            while running.load(Ordering::Relaxed) {
                sequence += 1;
                // Refused or unreachable while the port is absent: keep sending.
                let _ = socket.send(&sequence.to_be_bytes());
                std::thread::sleep(match fast.load(Ordering::Relaxed) {
                    true => SEND_INTERVAL,
                    false => IDLE_INTERVAL,
                });
            }
        });
        Ok(Self {
            receiver,
            sending,
            timing,
            sender: Some(sender),
            nb: Ovsdb::connect(nb_remote)?,
        })
    }

    /// Waits until nothing has arrived for [`SILENCE`].
    fn wait_silent(&self) -> Result<()> {
        let started = Instant::now();
        self.receiver.set_read_timeout(Some(SILENCE))?;
        let mut buffer = [0_u8; 64];
        while self.receiver.recv(&mut buffer).is_ok() {
            if started.elapsed() > CHANGE_LIMIT {
                bail!("the probe still receives {CHANGE_LIMIT:?} after its port was deleted");
            }
        }
        Ok(())
    }

    /// The instant the next datagram arrives.
    fn first_arrival(&self) -> Result<Instant> {
        self.receiver.set_read_timeout(Some(CHANGE_LIMIT))?;
        let mut buffer = [0_u8; 64];
        self.receiver.recv(&mut buffer).with_context(|| {
            format!("no datagram reached the probe within {CHANGE_LIMIT:?} of its port's insert")
        })?;
        Ok(Instant::now())
    }

    /// Inserts the probe's port, times its first datagram, deletes the port again.
    pub fn sample(&mut self, watch: &SbWatch, port: &ProbePort<'_>) -> Result<Sample> {
        self.wait_silent().context("before the change")?;
        let logical_port = port.logical_port();
        watch.forget(&logical_port);
        let row = kubeovn::pod_port_row(port.switch, port.pod, port.namespace, port.mac, port.ip);
        self.timing.store(true, Ordering::Relaxed);
        let sent = Instant::now();
        let results = self.nb.transact(
            "OVN_Northbound",
            &[
                json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "probe", "row": row}),
                json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", port.switch]],
                    "mutations": [["ports", "insert", ["set", [["named-uuid", "probe"]]]]]}),
            ],
        )?;
        let arrived = self.first_arrival();
        self.timing.store(false, Ordering::Relaxed);
        let uuid: Value = results
            .first()
            .map(|r| r["uuid"].clone())
            .context("the insert's UUID")?;
        let sb_arrived = watch.inserted_at(&logical_port, CHANGE_LIMIT);
        self.nb.transact(
            "OVN_Northbound",
            &[
                json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", port.switch]],
                    "mutations": [["ports", "delete", ["set", [uuid.clone()]]]]}),
                json!({"op": "delete", "table": "Logical_Switch_Port", "where": [["_uuid", "==", uuid]]}),
            ],
        )?;
        let (arrived, sb_arrived) = (arrived?, sb_arrived?);
        Ok(Sample {
            nb_to_packet: arrived - sent,
            sb_to_packet: arrived.saturating_duration_since(sb_arrived),
        })
    }
}

impl Drop for ChangeProbe {
    fn drop(&mut self) {
        self.sending.store(false, Ordering::Relaxed);
        if let Some(sender) = self.sender.take() {
            let _ = sender.join();
        }
    }
}
