//! The oracle's third leg: the same IR the evaluator reads, installed by the agent's real backend
//! ([`L2State`], [`L3State`] flushed into [`KernelPrograms`]) in a namespace of its own, and each
//! generated packet replayed through `from_pod` with `BPF_PROG_TEST_RUN`. The kernel's verdict
//! and frames must equal the evaluator's outputs.
//!
//! Placement: the sending pod is the only pod on this chassis, on the test-run device (`lo`,
//! ifindex 1); every other pod is alone on a chassis of its own (encap IP 172.31.x.y), so a frame
//! for a pod leaves Geneve-encapsulated and its outer destination, VNI and egress key name the
//! pod. A frame the kernel redirects without Geneve went to a local device: the sender itself
//! (replies) or the provider NIC (underlay switches, where a remote pod is reached through the
//! physical network); both are "here" ([`Where::Here`]). Flood copies are captured on the uplink,
//! on the provider NIC and on `lo` (a router's ARP request reaches the sender too). Compared per output: where it went and the whole packet as the
//! evaluator models it (MACs, addresses, TTL, ARP/ND fields, L4 kind and ports), read back from
//! the kernel's bytes with its IPv4 header checksum checked.
//!
//! A gateway port's chassisredirect port bound to a chassis is active on this one: what a pod
//! routes out of it is translated and leaves by the provider NIC here. A case from the external
//! network ([`KernelReplay::check_from_provider`]) runs `from_provider` with the provider NIC
//! made the test-run device, on this chassis (the gateway's), or with a distributed FIP's pod
//! plugged here (its chassis takes the FIP's traffic). The connection tables are not cleared
//! between cases: what one left behind meets the next, as on a node.
//!
//! A Geneve frame to one pod is then received as that pod's chassis would: the same programs,
//! their tunnel endpoint made the pod's chassis and the pod plugged here on `rcvh`, run
//! `from_uplink` on it (decapsulation, then the receiver's egress pipeline: egress port
//! security). What it delivers is the output compared; what it drops, none. Flood copies (the
//! group's key as egress port) are compared as sent.

#![allow(dead_code)] // each test binary uses a different part

pub mod wire;

use std::{
    collections::{BTreeSet, HashMap},
    net::Ipv4Addr,
};

use ovnbpf_agent::{
    dataplane::ebpf::{Hook, KernelPrograms, l2::L2State, l3::L3State},
    pipeline::{
        IrDiff,
        eval::{CtAssumptions, Trace},
        ir::{IrEntry, PortKind},
        packet::Packet,
        trace::Evaluator,
    },
};
use ovnbpf_tests::{
    frames::{
        FrameSocket,
        verdict::{TC_ACT_REDIRECT, TC_ACT_SHOT},
    },
    names::unique_prefix,
    netns::Netns,
};

const NODE_IP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 1);
const CHASSIS: &str = "oracle-local";
/// Outer Ethernet + IPv4 + UDP + Geneve + OVN option.
const GENEVE_OVERHEAD: usize = 14 + 20 + 8 + 8 + 8;

/// Where an output went, as the kernel can tell it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Where {
    /// To a pod on another chassis, through Geneve.
    Remote(String),
    /// To a local device: the sender, or the provider NIC of an underlay switch.
    Here,
}

/// The replay's counts and every disagreement, described.
#[derive(Debug, Default)]
pub struct Report {
    pub replayed: usize,
    pub both_drop: usize,
    pub both_forward: usize,
    /// The evaluator forwards through a router the backend declined (see
    /// [`KernelReplay::blocked`]) and the kernel drops with `router_unsupported` (the rule:
    /// unsupported → dropped, counted, reported).
    pub unsupported_router: usize,
    pub disagreements: Vec<String>,
}

/// What a chassis did with a frame it received: its output (where it left, the packet), if
/// any, and the reasons of a drop.
type Received = (Option<(Where, Packet)>, Vec<&'static str>);

/// The evaluator's packet as OVN puts it on the wire. Its packets follow ovn-trace's model,
/// which differs from ovn-controller for three generated packets: `tcp_reset` (pinctrl's
/// `pinctrl_handle_tcp_reset`) composes the reset with TTL 63 and the offending segment's ports
/// swapped, where ovn-trace starts it at TTL 255 with the ports unchanged; `nd_ns`
/// (`pinctrl_handle_nd_ns`, `compose_nd_ns`) sends from the link-local address of eth.src to the
/// target's solicited-node group, hop limit 255, with a source link-layer option, where
/// ovn-trace keeps the packet's addresses and hop limit; `nd_na` (`compose_nd_na`) uses hop
/// limit 255, where ovn-trace keeps the solicitation's. And an ACL's `reject` of a UDP datagram
/// (`sent`) answers it with ICMP port unreachable (pinctrl's `pinctrl_handle_icmp` with
/// `set_icmp_code`), where ovn-trace shows code 1 (host unreachable). `router_macs`: the MACs
/// whose solicitations are a router's (`nd_ns`), not a pod's passing through.
fn on_the_wire(mut packet: Packet, sent: &Packet, router_macs: &BTreeSet<[u8; 6]>) -> Packet {
    use ovnbpf_agent::pipeline::packet::{L3, L4, solicited_node};
    if let (
        L3::Ipv4 {
            destination,
            l4: L4::Icmp { kind: 3, code },
            ..
        },
        L3::Ipv4 {
            source,
            l4: L4::Udp { .. },
            ..
        },
    ) = (&mut packet.l3, sent.l3)
        && *destination == source
        && *code == 1
    {
        *code = 3;
    }
    let eth_src = packet.eth_src;
    if let L3::Ipv6 {
        source,
        destination,
        ttl,
        l4: L4::Nd {
            kind, target, sll, ..
        },
    } = &mut packet.l3
    {
        if *kind == 135 && router_macs.contains(&eth_src) {
            *source = ovnbpf_agent::net::ipv6_link_local(&eth_src);
            *destination = solicited_node(*target);
            *ttl = 255;
            *sll = eth_src;
        } else if *kind == 136 {
            *ttl = 255;
        }
    }
    if let L3::Ipv4 { ttl, l4, .. } | L3::Ipv6 { ttl, l4, .. } = &mut packet.l3
        && let L4::TcpReset {
            source,
            destination,
        } = *l4
    {
        *ttl = ttl.saturating_sub(255 - 63);
        *l4 = L4::TcpReset {
            source: destination,
            destination: source,
        };
    }
    packet
}

fn chassis_ip(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(172, 31, (index / 200) as u8, (index % 200 + 1) as u8)
}

/// The namespace: `lo` is the sender; `uph`/`upp` the uplink with 172.31.0.0/16 routed through a
/// permanent neighbour; `provh`/`provp` the provider NIC.
fn build_netns(ns: &Netns) {
    for key in ["all", "default"] {
        ns.exec(
            "sysctl",
            &["-qw", &format!("net.ipv6.conf.{key}.disable_ipv6=1")],
        )
        .unwrap();
    }
    let batch = tempfile::NamedTempFile::new().unwrap();
    let commands = format!(
        "link set lo up\n\
         link add uph type veth peer name upp\nlink set uph up\nlink set upp up\n\
         addr add {NODE_IP}/24 dev uph\n\
         neigh add 172.30.0.2 lladdr 02:00:00:00:00:02 dev uph nud permanent\n\
         route add 172.31.0.0/16 via 172.30.0.2 dev uph\n\
         link add provh type veth peer name provp\nlink set provh up\nlink set provp up\n\
         link add rcvh type veth peer name rcvp\nlink set rcvh up\nlink set rcvp up\n"
    );
    std::fs::write(batch.path(), commands).unwrap();
    ns.ip(&["-batch", batch.path().to_str().unwrap()]).unwrap();
    // The kernel's FIB lookup for the chassis's next hop wants forwarding on.
    ns.exec("sysctl", &["-qw", "net.ipv4.conf.all.forwarding=1"])
        .unwrap();
}

fn is_geneve(frame: &[u8]) -> bool {
    frame.len() > GENEVE_OVERHEAD
        && frame[12..14] == [0x08, 0x00]
        && frame[23] == 17
        && frame[36..38] == 6081_u16.to_be_bytes()
}

/// A pod port of the IR: its datapath, tunnel key and whether its switch has a localnet port.
struct PodPort {
    entry: IrEntry,
    datapath: u32,
    key: u32,
    chassis_ip: Ipv4Addr,
    underlay: bool,
}

fn placed(entry: &IrEntry, chassis: &str) -> IrEntry {
    let mut entry = entry.clone();
    if let IrEntry::Port { kind, .. } = &mut entry {
        *kind = PortKind::Vif {
            chassis: Some(chassis.to_string()),
        };
    }
    entry
}

/// The replay: the backend's state, the programs in their namespace, the captures.
pub struct KernelReplay {
    ns: Netns,
    uplink_index: u32,
    /// The provider NIC's (`provh`).
    provider_index: u32,
    /// The veth a receiving pod is plugged into (see [`Self::receive`]).
    receiver_index: u32,
    l2: L2State,
    l3: L3State,
    programs: KernelPrograms,
    uplink: FrameSocket,
    provider: FrameSocket,
    /// Clones to the sender itself (a router's ARP request reaches every port of the switch).
    local: FrameSocket,
    pods: HashMap<String, PodPort>,
    /// Chassis encap IP → its pod.
    by_chassis: HashMap<Ipv4Addr, String>,
    /// Flood group keys per datapath.
    groups: BTreeSet<(u32, u32)>,
    /// Every router port's MAC.
    router_macs: BTreeSet<[u8; 6]>,
    /// Routers the backend declined (their name → why), as `L3State::blocked` reports them.
    pub blocked: BTreeSet<(String, Vec<String>)>,
    sender: Option<String>,
}

impl KernelReplay {
    /// Installs `entries` (the compiler's IR) through the backend, every pod on a chassis of its
    /// own.
    pub fn new(entries: &[IrEntry]) -> Self {
        let ns = Netns::create(&format!("{}-oracle", unique_prefix())).unwrap();
        build_netns(&ns);
        let uplink_index = ns.ifindex("uph").unwrap();
        let provider_index = ns.ifindex("provh").unwrap();
        let receiver_index = ns.ifindex("rcvh").unwrap();
        let uplink = FrameSocket::open_in(&ns, "upp").unwrap();
        let provider = FrameSocket::open_in(&ns, "provp").unwrap();
        let local = FrameSocket::open_in(&ns, "lo").unwrap();
        let underlay_switches: BTreeSet<u32> = entries
            .iter()
            .filter_map(|e| match e {
                IrEntry::Port {
                    datapath,
                    kind: PortKind::Localnet { .. },
                    ..
                } => Some(*datapath),
                _ => None,
            })
            .collect();
        let groups = entries
            .iter()
            .filter_map(|e| match e {
                IrEntry::FloodGroup { datapath, key, .. } => Some((*datapath, *key)),
                _ => None,
            })
            .collect();
        let router_macs: BTreeSet<[u8; 6]> = entries
            .iter()
            .filter_map(|e| match e {
                IrEntry::RouterPort { mac, .. } => Some(*mac),
                _ => None,
            })
            .collect();
        let mut l2 = L2State::new(CHASSIS);
        l2.set_providers(HashMap::from([("provider".to_string(), provider_index)]));
        let mut pods = HashMap::new();
        let mut by_chassis = HashMap::new();
        let mut installed = Vec::with_capacity(entries.len());
        for entry in entries {
            // A gateway bound to a chassis is active on this one (the sender's): what a pod
            // routes out of it leaves here, and the way in from its external network enters here.
            if let IrEntry::Port {
                kind: PortKind::ChassisRedirect { chassis: Some(_) },
                ..
            } = entry
            {
                let mut entry = entry.clone();
                if let IrEntry::Port { kind, .. } = &mut entry {
                    *kind = PortKind::ChassisRedirect {
                        chassis: Some(CHASSIS.to_string()),
                    };
                }
                installed.push(entry);
                continue;
            }
            let IrEntry::Port {
                datapath,
                key,
                name,
                kind: PortKind::Vif { .. },
                ..
            } = entry
            else {
                installed.push(entry.clone());
                continue;
            };
            let ip = chassis_ip(pods.len());
            let chassis = format!("oracle-{ip}");
            installed.push(IrEntry::ChassisEncap {
                chassis: chassis.clone(),
                ip: ip.into(),
                csum: false,
            });
            installed.push(placed(entry, &chassis));
            by_chassis.insert(ip, name.clone());
            pods.insert(
                name.clone(),
                PodPort {
                    entry: entry.clone(),
                    datapath: *datapath,
                    key: *key,
                    chassis_ip: ip,
                    underlay: underlay_switches.contains(datapath),
                },
            );
        }
        let everything = IrDiff {
            added: installed,
            removed: Vec::new(),
        };
        let mut l3 = L3State::default();
        l2.apply(&everything);
        l3.apply(&everything);
        let blocked = entries
            .iter()
            .filter_map(|e| match e {
                IrEntry::Datapath {
                    datapath,
                    name,
                    router: true,
                } => Some((name.clone(), l3.blocked(*datapath))),
                _ => None,
            })
            .filter(|(_, reasons)| !reasons.is_empty())
            .collect();
        let (l2, l3, programs) = ns
            .run_in(move || {
                let mut programs = match KernelPrograms::load() {
                    Ok(programs) => programs,
                    Err(error) => panic!("kernel programs failed to load:\n{error}"),
                };
                programs
                    .set_tunnel_endpoint(NODE_IP.into(), uplink_index)
                    .unwrap();
                l2.flush(&mut programs).unwrap();
                l3.flush(&mut programs).unwrap();
                Ok((l2, l3, programs))
            })
            .unwrap();
        Self {
            ns,
            uplink_index,
            provider_index,
            receiver_index,
            l2,
            l3,
            programs,
            uplink,
            provider,
            local,
            pods,
            by_chassis,
            groups,
            router_macs,
            blocked,
            sender: None,
        }
    }

    fn chassis_of(&self, port: &str) -> String {
        format!("oracle-{}", self.pods[port].chassis_ip)
    }

    /// Moves `sender` onto this chassis, on `lo`, and the previous sender back to its own: an
    /// unplug flushed, then a plug flushed (both own `lo`'s ifindex).
    fn make_sender(&mut self, sender: &str) {
        if self.sender.as_deref() == Some(sender) {
            return;
        }
        self.unplug_sender();
        let entry = &self.pods[sender].entry;
        let diff = IrDiff {
            removed: vec![placed(entry, &self.chassis_of(sender))],
            added: vec![placed(entry, CHASSIS)],
        };
        self.l2.set_interface(sender, Some(1));
        self.install(&diff);
        self.sender = Some(sender.to_string());
    }

    /// Moves the pod plugged here as the sender, if any, back to its own chassis.
    fn unplug_sender(&mut self) {
        if let Some(previous) = self.sender.take() {
            let entry = &self.pods[&previous].entry;
            let diff = IrDiff {
                removed: vec![placed(entry, CHASSIS)],
                added: vec![placed(entry, &self.chassis_of(&previous))],
            };
            self.l2.set_interface(&previous, None);
            self.install(&diff);
        }
    }

    /// Receives `frame`, Geneve to pod `port` (alone on its chassis), as that chassis: its
    /// `from_uplink`, with the pod plugged here and the tunnel endpoint its chassis's. Returns the
    /// delivered packet, if any, and the reasons of a drop. An answer to the sender (a `reject`
    /// ACL of the receiver's: to `sender_mac`) is sent back through the tunnel, and received by
    /// this chassis (the sender's), or, the sender being plugged here too meanwhile, delivered to
    /// it directly: either is what the sender gets.
    fn receive(
        &mut self,
        frame: &[u8],
        port: &str,
        sender_mac: [u8; 6],
    ) -> Result<Received, String> {
        let (entry, ip) = (self.pods[port].entry.clone(), self.pods[port].chassis_ip);
        let own = self.chassis_of(port);
        self.l2.set_interface(port, Some(self.receiver_index));
        self.install(&IrDiff {
            removed: vec![placed(&entry, &own)],
            added: vec![placed(&entry, CHASSIS)],
        });
        let (programs, uplink) = (&mut self.programs, self.uplink_index);
        let before = programs.drop_counters().unwrap();
        let outcome = self
            .ns
            .run_in(|| {
                programs.set_tunnel_endpoint(ip.into(), uplink).unwrap();
                let outcome = programs.test_run(Hook::Uplink, frame).unwrap();
                programs
                    .set_tunnel_endpoint(NODE_IP.into(), uplink)
                    .unwrap();
                Ok(outcome)
            })
            .unwrap();
        let after = self.programs.drop_counters().unwrap();
        self.l2.set_interface(port, None);
        self.install(&IrDiff {
            removed: vec![placed(&entry, CHASSIS)],
            added: vec![placed(&entry, &own)],
        });
        let reasons = after
            .iter()
            .zip(&before)
            .filter(|((_, a), (_, b))| a > b)
            .map(|((name, _), _)| *name)
            .collect();
        if outcome.verdict == TC_ACT_REDIRECT && is_geneve(&outcome.frame) {
            let programs = &self.programs;
            let back = self
                .ns
                .run_in(|| Ok(programs.test_run(Hook::Uplink, &outcome.frame).unwrap()))
                .unwrap();
            return match back.verdict {
                TC_ACT_REDIRECT => wire::decode(&back.frame)
                    .map(|(packet, _)| (Some((Where::Here, packet)), reasons))
                    .map_err(|e| format!("{port}'s answer received back: {e}")),
                _ => Ok((None, reasons)),
            };
        }
        match outcome.verdict {
            TC_ACT_REDIRECT => wire::decode(&outcome.frame)
                .map(|(packet, _)| {
                    let to = if packet.eth_dst == sender_mac {
                        Where::Here
                    } else {
                        Where::Remote(port.to_string())
                    };
                    (Some((to, packet)), reasons)
                })
                .map_err(|e| format!("{port} received: {e}")),
            TC_ACT_SHOT => Ok((None, reasons)),
            other => Err(format!("{port}'s chassis: from_uplink verdict {other}")),
        }
    }

    /// Applies `diff` to the backend's state and flushes it into the maps.
    fn install(&mut self, diff: &IrDiff) {
        self.l2.apply(diff);
        self.l3.apply(diff);
        let (l2, l3, programs) = (&mut self.l2, &mut self.l3, &mut self.programs);
        self.ns
            .run_in(|| {
                l2.flush(programs).unwrap();
                l3.flush(programs).unwrap();
                Ok(())
            })
            .unwrap();
    }

    /// Where an evaluator output to `port` leaves this chassis.
    fn expected_where(&self, port: &str) -> Where {
        match self.pods.get(port) {
            Some(pod) if self.sender.as_deref() != Some(port) && !pod.underlay => {
                Where::Remote(port.to_string())
            }
            _ => Where::Here,
        }
    }

    /// One Geneve frame read back: the pod it names and the inner packet.
    fn read_geneve(&self, frame: &[u8]) -> Result<(Where, Packet), String> {
        let outer = Ipv4Addr::new(frame[30], frame[31], frame[32], frame[33]);
        let port = self
            .by_chassis
            .get(&outer)
            .ok_or(format!("Geneve to {outer}, no pod's chassis"))?;
        let pod = &self.pods[port];
        let vni = u32::from_be_bytes([0, frame[46], frame[47], frame[48]]);
        let egress = u32::from(u16::from_be_bytes([frame[56], frame[57]]));
        if vni != pod.datapath {
            return Err(format!(
                "Geneve to {port}: VNI {vni}, want {}",
                pod.datapath
            ));
        }
        if egress != pod.key && !self.groups.contains(&(pod.datapath, egress)) {
            return Err(format!(
                "Geneve to {port}: egress key {egress}, want {} or a flood group",
                pod.key
            ));
        }
        let (packet, _) = wire::decode(&frame[GENEVE_OVERHEAD..])
            .map_err(|e| format!("inner frame to {port}: {e}"))?;
        Ok((Where::Remote(port.clone()), packet))
    }

    /// Whether Geneve `frame` names pod `port` itself as its egress port (not a flood group).
    fn unicast_to(&self, frame: &[u8], port: &str) -> bool {
        u32::from(u16::from_be_bytes([frame[56], frame[57]])) == self.pods[port].key
    }

    fn read(&self, frame: &[u8]) -> Result<(Where, Packet), String> {
        if is_geneve(frame) {
            self.read_geneve(frame)
        } else {
            wire::decode(frame).map(|(packet, _)| (Where::Here, packet))
        }
    }

    /// Replays one case and compares it with the evaluator's verdict (conntrack established,
    /// ovn-trace's default: the topologies without ACLs do not read it).
    pub fn check(
        &mut self,
        report: &mut Report,
        evaluator: &Evaluator,
        what: &str,
        inport: &str,
        packet: Packet,
    ) {
        self.check_with_ct(
            report,
            evaluator,
            what,
            inport,
            packet,
            CtAssumptions::default(),
        );
    }

    /// Replays one case entering from the external network: `packet` received on the provider
    /// NIC of this chassis, where the gateway is active and pod `resident` (a distributed FIP's,
    /// whose chassis takes its traffic) is plugged, if any; compared as [`Self::check`].
    pub fn check_from_provider(
        &mut self,
        report: &mut Report,
        evaluator: &Evaluator,
        what: &str,
        inport: &str,
        packet: Packet,
        resident: Option<&str>,
    ) {
        report.replayed += 1;
        match resident {
            Some(pod) => self.make_sender(pod),
            None => self.unplug_sender(),
        }
        let ours = evaluator.trace(inport, packet).unwrap();
        // The provider NIC is the test-run device for the run (a pod's frames are sent on it
        // otherwise; the plugged pod keeps its place in the maps).
        self.set_provider(1);
        self.compare_on(Hook::Provider, report, &ours, what, packet);
        let provider = self.provider_index;
        self.set_provider(provider);
    }

    fn set_provider(&mut self, ifindex: u32) {
        self.l2
            .set_providers(HashMap::from([("provider".to_string(), ifindex)]));
        self.install(&IrDiff::default());
    }

    /// Forgets every connection the kernel committed.
    pub fn clear_connections(&mut self) {
        self.programs.clear_connections().unwrap();
    }

    /// [`Self::check`], the evaluator assuming conntrack's states `ct` (what the kernel's table
    /// holds for the packet); returns the evaluator's trace.
    pub fn check_with_ct(
        &mut self,
        report: &mut Report,
        evaluator: &Evaluator,
        what: &str,
        inport: &str,
        packet: Packet,
        ct: CtAssumptions,
    ) -> Trace {
        report.replayed += 1;
        self.make_sender(inport);
        let ours = evaluator.trace_with_ct(inport, packet, ct).unwrap();
        self.compare_on(Hook::Pod, report, &ours, what, packet);
        ours
    }

    fn compare_on(
        &mut self,
        hook: Hook,
        report: &mut Report,
        ours: &Trace,
        what: &str,
        packet: Packet,
    ) {
        let packet_sent = packet;
        let expected: BTreeSet<(Where, Packet)> = ours
            .outputs
            .iter()
            .map(|(port, packet)| {
                (
                    self.expected_where(port),
                    on_the_wire(*packet, &packet_sent, &self.router_macs),
                )
            })
            .collect();

        self.uplink.drain();
        self.provider.drain();
        self.local.drain();
        let frame = wire::encode(&packet);
        // The codec reads back what it wrote, so frames the kernel leaves alone compare equal.
        assert_eq!(wire::decode(&frame), Ok((packet, None)), "{what}");
        let before = self.programs.drop_counters().unwrap();
        let programs = &self.programs;
        let outcome = self
            .ns
            .run_in(|| Ok(programs.test_run(hook, &frame).unwrap()))
            .unwrap();
        let after = self.programs.drop_counters().unwrap();
        let reasons: Vec<&str> = after
            .iter()
            .zip(&before)
            .filter(|((_, a), (_, b))| a > b)
            .map(|((name, _), _)| *name)
            .collect();
        let mut frames: Vec<Vec<u8>> = self
            .uplink
            .drain()
            .into_iter()
            .filter(|f| is_geneve(f))
            .collect();
        frames.extend(self.provider.drain());
        frames.extend(self.local.drain());
        if outcome.verdict == TC_ACT_REDIRECT {
            frames.push(outcome.frame.clone());
        }
        let mut got = BTreeSet::new();
        let mut unreadable = Vec::new();
        let mut receiver_drops = Vec::new();
        for frame in &frames {
            match self.read(frame) {
                // Unicast to one pod: what its chassis delivers.
                Ok((Where::Remote(port), _))
                    if is_geneve(frame) && self.unicast_to(frame, &port) =>
                {
                    match self.receive(frame, &port, packet.eth_src) {
                        Ok((Some(output), _)) => {
                            got.insert(output);
                        }
                        Ok((None, reasons)) => receiver_drops.extend(reasons),
                        Err(error) => unreadable.push(error),
                    }
                }
                Ok(output) => {
                    got.insert(output);
                }
                Err(error) => unreadable.push(error),
            }
        }
        // A frame the receiver dropped counts as the sender's drop, with its reasons.
        let (verdict, reasons) = if got.is_empty() && !receiver_drops.is_empty() {
            (TC_ACT_SHOT, receiver_drops)
        } else {
            (outcome.verdict, reasons)
        };

        let kernel = match verdict {
            TC_ACT_SHOT => format!("dropped ({})", reasons.join(", ")),
            TC_ACT_REDIRECT => "redirected".to_string(),
            other => format!("verdict {other}"),
        };
        if expected.is_empty() && got.is_empty() && verdict == TC_ACT_SHOT {
            // Where the evaluator says why a router drops, the kernel counts the same reason.
            let why = ours.steps.last().map(String::as_str).unwrap_or_default();
            let expected_reason = [
                ("dropped: discard route", "route_discard"),
                ("(gateway_unsupported)", "gateway_unsupported"),
                ("dropped: router policy", "policy_drop"),
                ("dropped: ls_in_acl", "acl_drop"),
                ("dropped: ls_out_acl", "acl_drop"),
                ("fails closed", "acl_fail_closed"),
            ]
            .iter()
            .find(|(step, _)| why.contains(step))
            .map(|(_, reason)| *reason);
            if let Some(reason) = expected_reason
                && reasons != [reason]
            {
                report.disagreements.push(format!(
                    "{what}\n  packet: {packet}\n  both drop, the kernel as {reasons:?}, not {reason}\n    {why}"
                ));
                return;
            }
            report.both_drop += 1;
            return;
        }
        if !expected.is_empty()
            && got.is_empty()
            && verdict == TC_ACT_SHOT
            && reasons == ["router_unsupported"]
            && ours.steps.iter().any(|step| {
                self.blocked
                    .iter()
                    .any(|(router, _)| step.starts_with(&format!("[{router}] router")))
            })
        {
            report.unsupported_router += 1;
            return;
        }
        if !expected.is_empty() && expected == got && unreadable.is_empty() {
            report.both_forward += 1;
            return;
        }
        report.disagreements.push(format!(
            "{what}\n  packet: {packet}\n  evaluator: {expected:?}\n  kernel: {kernel}, {got:?}{}\n{}",
            if unreadable.is_empty() {
                String::new()
            } else {
                format!(", unreadable: {unreadable:?}")
            },
            ours.steps
                .iter()
                .map(|s| format!("    {s}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
}
