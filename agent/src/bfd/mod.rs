//! BFD between this chassis and the chassis it shares gateway HA groups with (ovn-controller's
//! `bfd.c`, which turns Open vSwitch's BFD on for those tunnels): a Tokio task with one UDP
//! socket on this node's Geneve port (the datapath passes a tunnel's BFD packets, VNI 0 without
//! options, to the host's stack), a session per peer chassis (`session.rs`), the packets in
//! OVS's framing (`packet.rs`). The daemon says which chassis to run sessions with and with
//! which timers ([`Peers`]); the task publishes the chassis whose session is up (OVN's "active
//! tunnels", which the gateway election reads). Owns the socket and the sessions; touches
//! nothing else.

pub mod packet;
pub mod session;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    io,
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use tokio::{net::UdpSocket, sync::watch, task::JoinHandle};
use tracing::{Instrument, debug, info, info_span};

use session::Session;
pub use session::Timers;

/// The sessions the daemon wants: peer chassis name → its Geneve endpoint, and the timers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peers {
    pub chassis: BTreeMap<String, IpAddr>,
    pub timers: Timers,
}

/// The running BFD task: set its peers, read the chassis whose sessions are up.
#[derive(Debug)]
pub struct Bfd {
    peers: watch::Sender<Peers>,
    up: watch::Receiver<BTreeSet<String>>,
    task: JoinHandle<()>,
}

impl Bfd {
    /// Binds the Geneve port of this node's endpoint `local` and starts the task.
    pub fn start(local: IpAddr) -> io::Result<Self> {
        let socket = std::net::UdpSocket::bind(SocketAddr::new(local, packet::GENEVE_PORT))?;
        socket.set_nonblocking(true)?;
        let socket = UdpSocket::from_std(socket)?;
        let (peers, peers_rx) = watch::channel(Peers::default());
        let (up_tx, up) = watch::channel(BTreeSet::new());
        let task = tokio::spawn(run(socket, peers_rx, up_tx).instrument(info_span!("bfd")));
        Ok(Self { peers, up, task })
    }

    /// The sessions to run (only a change is passed on).
    pub fn set_peers(&self, peers: Peers) {
        self.peers.send_if_modified(|current| {
            let changed = *current != peers;
            *current = peers;
            changed
        });
    }

    /// The chassis whose sessions are up, and a way to wait for a change.
    pub fn up(&mut self) -> &mut watch::Receiver<BTreeSet<String>> {
        &mut self.up
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}

/// A small xorshift generator: discriminators, ports and jitter need no more.
struct Random(u64);

impl Random {
    fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |elapsed| elapsed.as_nanos() as u64)
            ^ u64::from(std::process::id());
        Self(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn fraction(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

async fn run(
    socket: UdpSocket,
    mut peers: watch::Receiver<Peers>,
    up: watch::Sender<BTreeSet<String>>,
) {
    let mut random = Random::new();
    // OVS's defaults: a locally administered MAC, a source port from the dynamic range.
    let mut source_mac: [u8; 6] = random.next().to_be_bytes()[..6]
        .try_into()
        .unwrap_or([0x0a, 0, 0, 0, 0, 1]);
    source_mac[0] = (source_mac[0] & 0xfe) | 0x02;
    let source_port = 49_152 + (random.next() % 16_384) as u16;
    let mut sessions: BTreeMap<String, (IpAddr, Session)> = BTreeMap::new();
    let mut by_address: HashMap<IpAddr, String> = HashMap::new();
    let mut buffer = [0u8; 2048];
    loop {
        let wake = sessions
            .values()
            .map(|(_, session)| session.next_wake())
            .min()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            changed = peers.changed() => {
                if changed.is_err() {
                    break;
                }
                let wanted = peers.borrow_and_update().clone();
                sessions.retain(|name, (address, _)| {
                    let keep = wanted.chassis.get(name) == Some(address);
                    if !keep {
                        info!(chassis = %name, "BFD session removed");
                    }
                    keep
                });
                for (name, address) in &wanted.chassis {
                    let now = Instant::now();
                    let entry = sessions.entry(name.clone()).or_insert_with(|| {
                        info!(chassis = %name, %address, "BFD session added");
                        let discriminator = (random.next() as u32).max(1);
                        (*address, Session::new(discriminator, wanted.timers, now))
                    });
                    entry.1.set_timers(wanted.timers);
                }
                by_address = sessions
                    .iter()
                    .map(|(name, (address, _))| (*address, name.clone()))
                    .collect();
            }
            received = socket.recv_from(&mut buffer) => {
                let Ok((length, from)) = received else {
                    continue;
                };
                let Some(control) = packet::parse(&buffer[..length]) else {
                    continue;
                };
                let Some((_, session)) = by_address
                    .get(&from.ip())
                    .and_then(|name| sessions.get_mut(name))
                else {
                    continue;
                };
                session.receive(&control, Instant::now());
            }
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
        }
        let now = Instant::now();
        for (name, (address, session)) in &mut sessions {
            if session.expire(now) {
                info!(chassis = %name, "BFD session down: the peer fell silent");
            }
            if let Some(control) = session.transmit(now, random.fraction()) {
                let frame = packet::frame(&control, source_mac, source_port);
                let target = SocketAddr::new(*address, packet::GENEVE_PORT);
                if let Err(error) = socket.send_to(&frame, target).await {
                    debug!(chassis = %name, %error, "BFD packet not sent");
                }
            }
        }
        let now_up: BTreeSet<String> = sessions
            .iter()
            .filter(|(_, (_, session))| session.up())
            .map(|(name, _)| name.clone())
            .collect();
        up.send_if_modified(|current| {
            let changed = *current != now_up;
            if changed {
                info!(up = ?now_up, "BFD sessions up changed");
                *current = now_up;
            }
            changed
        });
    }
}
