//! Periodic router advertisements, ovn-controller's part (pinctrl's `ipv6_ra_send`): for every
//! router port whose Port_Binding northd gave `ipv6_ra_send_periodic=true` (Kube-OVN's
//! `enableIPv6RA` sends them by default), every chassis sends an unsolicited advertisement to
//! `ff02::1` from the port's `ipv6_ra_src_eth` and `ipv6_ra_src_addr`, every `min_interval` to
//! `max_interval` seconds (a random point between, the first one too), to the ports of the
//! port's switch bound here only (OVN's `MLF_LOCAL_ONLY`: no tunnel, no localnet). The frame
//! is built as pinctrl builds it ([`frame`]: header, the link-layer and MTU options, the
//! prefixes, then the DNS server, search list and routes) and written to each local port's
//! host interface (a packet socket), which hands it to the pod as OVN's output to the port
//! does.
//!
//! Owns one Tokio task per advertising router port with local ports on its switch, each
//! following its current target through a watch channel (a pod coming or going changes where
//! the next one goes, not when); reads the replica and the datapath's interface names when told
//! the Port_Binding rows changed.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    io,
    net::Ipv6Addr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{sync::watch, task::JoinHandle};
use tracing::{Instrument, info, info_span, warn};

use super::options;
use crate::{net::parse_mac, pipeline::ir::Mac, sb::Southbound};

/// `ff02::1`, all nodes.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// Its Ethernet group.
const ALL_NODES_MAC: Mac = [0x33, 0x33, 0, 0, 0, 1];

/// One router port's periodic advertisement, from its Port_Binding's `ipv6_ra_*` options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The whole Ethernet frame.
    pub frame: Vec<u8>,
    pub min_interval: Duration,
    pub max_interval: Duration,
}

impl Config {
    /// The port's advertisement, if northd asked for periodic ones (`None` otherwise); an
    /// error names the option pinctrl would refuse too.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<Option<Self>, String> {
        if options.get("ipv6_ra_send_periodic").map(String::as_str) != Some("true") {
            return Ok(None);
        }
        let get = |name: &str| options.get(name).map(String::as_str);
        let seconds = |name: &str, default: u64| -> Result<u64, String> {
            get(name).map_or(Ok(default), |text| {
                text.parse().map_err(|_| format!("{name} {text:?}"))
            })
        };
        // pinctrl's defaults (OVS's ND_RA_MAX_INTERVAL_DEFAULT, nd_ra_min_interval_default);
        // northd writes both.
        let max = seconds("ipv6_ra_max_interval", 600)?;
        let min = seconds(
            "ipv6_ra_min_interval",
            if max >= 9 { max / 3 } else { max * 3 / 4 },
        )?;
        let mode = get("ipv6_ra_address_mode").ok_or("no ipv6_ra_address_mode")?;
        let (mode_flags, prefix_flags) =
            options::mode_flags(mode).ok_or_else(|| format!("address mode {mode:?}"))?;
        let flags = mode_flags | options::preference(get("ipv6_ra_prf").unwrap_or(""));
        let source_mac = get("ipv6_ra_src_eth")
            .and_then(parse_mac)
            .ok_or("no valid ipv6_ra_src_eth")?;
        let source: Ipv6Addr = get("ipv6_ra_src_addr")
            .and_then(|text| text.parse().ok())
            .ok_or("no valid ipv6_ra_src_addr")?;
        let mut message = options::header(flags);
        message.extend(options::source_link_layer(source_mac));
        let mtu = seconds("ipv6_ra_mtu", 0)?;
        if mtu != 0 {
            let mtu = u32::try_from(mtu).map_err(|_| format!("ipv6_ra_mtu {mtu}"))?;
            message.extend(options::mtu(mtu));
        }
        for prefix in get("ipv6_ra_prefixes").unwrap_or("").split_whitespace() {
            let (address, length) = prefix
                .split_once('/')
                .and_then(|(address, length)| {
                    Some((address.parse().ok()?, length.parse::<u8>().ok()?))
                })
                .filter(|(_, length)| *length <= 128)
                .ok_or_else(|| format!("prefix {prefix:?}"))?;
            message.extend(options::prefix(address, length, prefix_flags));
        }
        if let Some(server) = get("ipv6_ra_rdnss") {
            let server = server
                .parse()
                .map_err(|_| format!("ipv6_ra_rdnss {server:?}"))?;
            message.extend(options::dns_server(server));
        }
        if let Some(domains) = get("ipv6_ra_dnssl") {
            message.extend(options::search_list(domains)?);
        }
        if let Some(routes) = get("ipv6_ra_route_info") {
            message.extend(options::route_information(routes)?);
        }
        Ok(Some(Self {
            frame: frame(source_mac, source, message),
            min_interval: Duration::from_secs(min),
            max_interval: Duration::from_secs(max.max(min)),
        }))
    }
}

/// The Ethernet frame of `message` (checksum 0) from `source_mac`/`source` to all nodes: IPv6
/// with traffic class and flow label 0, hop limit 255, the message checksummed (OVS's
/// `compose_nd_ra`).
#[must_use]
pub fn frame(source_mac: Mac, source: Ipv6Addr, mut message: Vec<u8>) -> Vec<u8> {
    let checksum = options::checksum(source, ALL_NODES, &message);
    message[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut frame = ALL_NODES_MAC.to_vec();
    frame.extend(source_mac);
    frame.extend([0x86, 0xdd, 0x60, 0, 0, 0]);
    frame.extend((message.len() as u16).to_be_bytes());
    frame.extend([58, 255]);
    frame.extend(source.octets());
    frame.extend(ALL_NODES.octets());
    frame.extend(message);
    frame
}

/// Where and what one router port advertises.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Target {
    config: Config,
    /// The host interfaces of the switch's ports bound here.
    interfaces: BTreeSet<String>,
}

/// Advertisements sent, and sends that failed (for metrics).
#[derive(Debug, Default)]
pub struct Counters {
    pub sent: AtomicU64,
    pub errors: AtomicU64,
}

struct Running {
    target: watch::Sender<Target>,
    task: JoinHandle<()>,
}

/// See the module documentation.
#[derive(Default)]
pub struct PeriodicAdverts {
    running: HashMap<String, Running>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for PeriodicAdverts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeriodicAdverts")
            .field("running", &self.running.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl PeriodicAdverts {
    /// Router ports advertising here.
    #[must_use]
    pub fn advertising(&self) -> usize {
        self.running.len()
    }

    /// Advertisements sent and sends failed.
    #[must_use]
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("sent", self.counters.sent.load(Ordering::Relaxed)),
            ("error", self.counters.errors.load(Ordering::Relaxed)),
        ]
    }

    /// Brings the tasks in line with the Southbound: one per router port with periodic
    /// advertisements whose switch has ports in `local_ports` that `interface_of` knows.
    /// O(local ports + the typed ports of their switches): the local ports' switches, their
    /// router ports (the switch side's `peer`) and those ports' options.
    pub fn reconcile(
        &mut self,
        sb: &Southbound,
        local_ports: &HashSet<String>,
        interface_of: &dyn Fn(&str) -> Option<String>,
    ) {
        // The host interfaces of the local ports, by their switch's row.
        let mut local: HashMap<uuid::Uuid, BTreeSet<String>> = HashMap::new();
        for name in local_ports {
            if let Some(datapath) = sb.port_by_name(name).and_then(|port| port.datapath)
                && let Some(interface) = interface_of(name)
            {
                local.entry(datapath).or_default().insert(interface);
            }
        }
        let mut wanted: HashMap<String, Target> = HashMap::new();
        for (switch, interfaces) in local {
            let switch_sides = sb
                .typed_ports_on_datapath(switch)
                .filter(|port| port.kind == "patch");
            for switch_side in switch_sides {
                let Some(router_port) = switch_side
                    .options
                    .get("peer")
                    .and_then(|peer| sb.port_by_name(peer))
                else {
                    continue;
                };
                match Config::from_options(&router_port.options) {
                    Ok(Some(config)) => {
                        let target = Target {
                            config,
                            interfaces: interfaces.clone(),
                        };
                        wanted.insert(router_port.logical_port, target);
                    }
                    Ok(None) => {}
                    Err(reason) => warn!(
                        port = %router_port.logical_port,
                        %reason,
                        "periodic router advertisements not sent"
                    ),
                }
            }
        }
        self.running.retain(|port, running| {
            let keep = wanted.contains_key(port);
            if !keep {
                running.task.abort();
                info!(port, "periodic router advertisements stopped");
            }
            keep
        });
        for (port, target) in wanted {
            if let Some(running) = self.running.get(&port) {
                running.target.send_if_modified(|current| {
                    let changed = *current != target;
                    *current = target.clone();
                    changed
                });
                continue;
            }
            info!(
                port,
                interfaces = target.interfaces.len(),
                min = ?target.config.min_interval,
                max = ?target.config.max_interval,
                "sending periodic router advertisements"
            );
            let (sender, receiver) = watch::channel(target);
            let counters = Arc::clone(&self.counters);
            let span = info_span!("router_advertisements", port = %port);
            let task = tokio::spawn(advertise(receiver, counters, seed(&port)).instrument(span));
            self.running.insert(
                port,
                Running {
                    target: sender,
                    task,
                },
            );
        }
    }

    /// Stops every task.
    pub fn stop(&mut self) {
        for (_, running) in self.running.drain() {
            running.task.abort();
        }
    }
}

impl Drop for PeriodicAdverts {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A per-port seed for the intervals' randomness (the clock and the port's name).
fn seed(port: &str) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    port.bytes().fold(nanos | 1, |seed, byte| {
        seed.rotate_left(5) ^ u64::from(byte)
    })
}

/// A point between `min` and `max` (xorshift over `state`): pinctrl's `random_range`.
fn interval(state: &mut u64, min: Duration, max: Duration) -> Duration {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    let span = (max - min).as_millis() as u64;
    min + Duration::from_millis(if span == 0 { 0 } else { *state % span })
}

/// One router port's task: waits a random interval, then sends the current target's frame to
/// each of its interfaces; forever.
async fn advertise(mut target: watch::Receiver<Target>, counters: Arc<Counters>, mut state: u64) {
    let socket = match PacketSocket::open() {
        Ok(socket) => socket,
        Err(error) => {
            counters.errors.fetch_add(1, Ordering::Relaxed);
            warn!(%error, "no packet socket: periodic router advertisements not sent");
            return;
        }
    };
    loop {
        let (min, max) = {
            let current = target.borrow();
            (current.config.min_interval, current.config.max_interval)
        };
        tokio::time::sleep(interval(&mut state, min, max)).await;
        let current = target.borrow_and_update().clone();
        for interface in &current.interfaces {
            match socket.send(interface, &current.config.frame) {
                Ok(()) => counters.sent.fetch_add(1, Ordering::Relaxed),
                Err(error) => {
                    warn!(interface, %error, "a periodic router advertisement was not sent");
                    counters.errors.fetch_add(1, Ordering::Relaxed)
                }
            };
        }
    }
}

/// A packet socket that writes whole frames to an interface named per send.
struct PacketSocket(crate::packet_socket::Sender);

impl PacketSocket {
    fn open() -> io::Result<Self> {
        crate::packet_socket::Sender::open().map(Self)
    }

    /// Writes `frame` out of `interface` (to whatever is behind it: a pod's veth peer).
    fn send(&self, interface: &str, frame: &[u8]) -> io::Result<()> {
        let name = std::ffi::CString::new(interface)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        self.0.send(ifindex, frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_string(), (*value).to_string()))
            .collect()
    }

    /// northd 23.03's options for Kube-OVN's default `ipv6_ra_configs`.
    fn kube_ovn_default() -> BTreeMap<String, String> {
        options(&[
            ("ipv6_ra_address_mode", "dhcpv6_stateful"),
            ("ipv6_ra_max_interval", "30"),
            ("ipv6_ra_min_interval", "5"),
            ("ipv6_ra_prefixes", "fd00:10:16::/64"),
            ("ipv6_ra_prf", "MEDIUM"),
            ("ipv6_ra_send_periodic", "true"),
            ("ipv6_ra_src_addr", "fe80::200:ff:feaa:bbcc"),
            ("ipv6_ra_src_eth", "00:00:00:aa:bb:cc"),
            ("peer", "ovn-default-ovn-cluster"),
        ])
    }

    #[test]
    fn kube_ovns_default_is_pinctrls_frame() {
        let config = Config::from_options(&kube_ovn_default()).unwrap().unwrap();
        assert_eq!(config.min_interval, Duration::from_secs(5));
        assert_eq!(config.max_interval, Duration::from_secs(30));
        let frame = &config.frame;
        assert_eq!(
            &frame[..12],
            &[0x33, 0x33, 0, 0, 0, 1, 0, 0, 0, 0xaa, 0xbb, 0xcc]
        );
        // IPv6: class and flow label 0, 56 bytes of ICMPv6, hop limit 255, to ff02::1.
        assert_eq!(&frame[12..22], &[0x86, 0xdd, 0x60, 0, 0, 0, 0, 56, 58, 255]);
        let source: Ipv6Addr = "fe80::200:ff:feaa:bbcc".parse().unwrap();
        assert_eq!(&frame[22..38], &source.octets());
        assert_eq!(&frame[38..54], &ALL_NODES.octets());
        let mut expected = vec![
            0x86, 0, 0, 0, 0xff, 0x80, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0xaa,
            0xbb, 0xcc, 3, 4, 64, 0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0,
        ];
        expected.extend("fd00:10:16::".parse::<Ipv6Addr>().unwrap().octets());
        let message = &frame[54..];
        assert_eq!(&message[4..], &expected[4..]);
        // The checksum, summed independently with the pseudo header, comes to 0xffff.
        let mut covered = source.octets().to_vec();
        covered.extend(ALL_NODES.octets());
        covered.extend((message.len() as u32).to_be_bytes());
        covered.extend([0, 0, 0, 58]);
        covered.extend(message);
        let mut sum: u64 = covered
            .chunks(2)
            .map(|pair| u64::from(pair[0]) << 8 | u64::from(pair[1]))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
    }

    #[test]
    fn options_come_in_pinctrls_order_and_modes_set_their_flags() {
        let mut slaac = kube_ovn_default();
        for (name, value) in [
            ("ipv6_ra_address_mode", "slaac"),
            ("ipv6_ra_prf", "HIGH"),
            ("ipv6_ra_mtu", "1400"),
            ("ipv6_ra_rdnss", "fd01::53"),
            ("ipv6_ra_dnssl", "example.com"),
            ("ipv6_ra_route_info", "LOW-fd05::/64"),
            ("ipv6_ra_prefixes", "fd01::/64 fd02::/64"),
        ] {
            slaac.insert(name.into(), value.into());
        }
        let config = Config::from_options(&slaac).unwrap().unwrap();
        let message = &config.frame[54..];
        assert_eq!(message[5], 0x08, "no M or O; HIGH");
        let kinds: Vec<u8> = {
            let mut kinds = Vec::new();
            let mut at = 16;
            while at < message.len() {
                kinds.push(message[at]);
                at += usize::from(message[at + 1]) * 8;
            }
            kinds
        };
        // SLLA, MTU, both prefixes, then DNS server, search list, route: pinctrl's order (the
        // solicited answer's differs: the flow's).
        assert_eq!(kinds, [1, 5, 3, 3, 0x19, 0x1f, 0x18]);
        assert_eq!(message[16 + 16 + 3], 0xc0, "L and A for SLAAC");
        let stateless = {
            let mut options = kube_ovn_default();
            options.insert("ipv6_ra_address_mode".into(), "dhcpv6_stateless".into());
            Config::from_options(&options).unwrap().unwrap()
        };
        assert_eq!(stateless.frame[54 + 5], 0x40);
    }

    #[test]
    fn ports_without_periodic_advertisements_or_with_bad_options() {
        let mut options = kube_ovn_default();
        options.remove("ipv6_ra_send_periodic");
        assert_eq!(Config::from_options(&options), Ok(None));
        for (name, value) in [
            ("ipv6_ra_address_mode", "other"),
            ("ipv6_ra_src_eth", "not a mac"),
            ("ipv6_ra_prefixes", "fd00::"),
            ("ipv6_ra_max_interval", "soon"),
        ] {
            let mut options = kube_ovn_default();
            options.insert(name.into(), value.into());
            assert!(Config::from_options(&options).is_err(), "{name}={value}");
        }
    }

    #[test]
    fn intervals_fall_between_min_and_max() {
        let (min, max) = (Duration::from_secs(3), Duration::from_secs(4));
        let mut state = seed("rp");
        let picks: Vec<Duration> = (0..200).map(|_| interval(&mut state, min, max)).collect();
        assert!(picks.iter().all(|pick| *pick >= min && *pick < max));
        let distinct: BTreeSet<Duration> = picks.into_iter().collect();
        assert!(distinct.len() > 100, "{} distinct", distinct.len());
        assert_eq!(interval(&mut state, min, min), min);
    }

    /// Switch `subnet` (pods `a.ns` and `b.ns`), another switch (`c.ns`), and the router port
    /// of `subnet` with `router_options`, as a replica built from a snapshot.
    fn southbound(router_options: serde_json::Value) -> Southbound {
        use serde_json::json;
        const SWITCH: &str = "00000000-0000-0000-0000-0000000000d1";
        const OTHER: &str = "00000000-0000-0000-0000-0000000000d3";
        const ROUTER: &str = "00000000-0000-0000-0000-0000000000d2";
        let map =
            json!({"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}});
        let tables = json!({
            "Datapath_Binding": {"columns": {"tunnel_key": {"type": "integer"}}},
            "Port_Binding": {"columns": {"logical_port": {"type": "string"},
                "type": {"type": "string"}, "tunnel_key": {"type": "integer"},
                "datapath": {"type": {"key": {"type": "uuid"}, "min": 0, "max": 1}},
                "options": map}},
        });
        let port = |name: &str, kind: &str, datapath: &str, key: u32, options| {
            json!({"initial": {"logical_port": name, "type": kind, "tunnel_key": key,
                "datapath": ["uuid", datapath], "options": options}})
        };
        let none = json!(["map", []]);
        crate::sb::testing::southbound(
            &tables,
            json!({
                "Datapath_Binding": {
                    SWITCH: {"initial": {"tunnel_key": 1}},
                    OTHER: {"initial": {"tunnel_key": 3}},
                    ROUTER: {"initial": {"tunnel_key": 2}},
                },
                "Port_Binding": {
                    "00000000-0000-0000-0000-0000000000b1": port("a.ns", "", SWITCH, 1, none.clone()),
                    "00000000-0000-0000-0000-0000000000b2": port("b.ns", "", SWITCH, 2, none.clone()),
                    "00000000-0000-0000-0000-0000000000b3": port("c.ns", "", OTHER, 1, none.clone()),
                    "00000000-0000-0000-0000-0000000000b4": port("subnet-vpc", "patch", SWITCH, 3,
                        json!(["map", [["peer", "vpc-subnet"]]])),
                    "00000000-0000-0000-0000-0000000000b5": port("vpc-subnet", "patch", ROUTER, 1,
                        router_options),
                },
            }),
        )
    }

    fn router_options(periodic: bool) -> serde_json::Value {
        let mut options = kube_ovn_default();
        options.insert("peer".into(), "subnet-vpc".into());
        if !periodic {
            options.remove("ipv6_ra_send_periodic");
        }
        serde_json::json!([
            "map",
            options.into_iter().map(|(k, v)| [k, v]).collect::<Vec<_>>()
        ])
    }

    /// Where advertisements go follows the local ports: one task for the router port while
    /// its switch has local ports (their interfaces its targets, not the other switch's), none
    /// once they leave or the port stops asking for periodic ones.
    #[tokio::test]
    async fn tasks_follow_the_local_ports_of_the_advertising_switch() {
        let interface_of = |port: &str| Some(format!("h-{port}"));
        let local = |ports: &[&str]| {
            ports
                .iter()
                .map(|p| (*p).to_string())
                .collect::<HashSet<_>>()
        };
        let mut adverts = PeriodicAdverts::default();
        let sb = southbound(router_options(true));
        adverts.reconcile(&sb, &local(&["a.ns", "c.ns"]), &interface_of);
        assert_eq!(adverts.advertising(), 1);
        let targets = |adverts: &PeriodicAdverts| {
            adverts.running["vpc-subnet"]
                .target
                .borrow()
                .interfaces
                .clone()
        };
        assert_eq!(targets(&adverts), BTreeSet::from(["h-a.ns".to_string()]));
        adverts.reconcile(&sb, &local(&["a.ns", "b.ns"]), &interface_of);
        assert_eq!(
            targets(&adverts),
            BTreeSet::from(["h-a.ns".to_string(), "h-b.ns".to_string()])
        );
        // Only the other switch's pod here: nothing to send to.
        adverts.reconcile(&sb, &local(&["c.ns"]), &interface_of);
        assert_eq!(adverts.advertising(), 0);
        // A port that does not ask for them.
        let sb = southbound(router_options(false));
        adverts.reconcile(&sb, &local(&["a.ns"]), &interface_of);
        assert_eq!(adverts.advertising(), 0);
    }
}
