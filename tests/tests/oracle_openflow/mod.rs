//! The oracle's fourth leg: the same IR the evaluator reads, translated by the agent's OpenFlow
//! backend ([`L2Flows`], [`RouterFlows`], [`Untranslated`]) and installed into a real Open
//! vSwitch's br-int (userspace datapath, a namespace of its own) through the backend's own
//! session; each generated packet is then traced there with `ovs-appctl ofproto/trace`, and
//! what its datapath actions output, with the headers they set, must equal the evaluator's
//! outputs.
//!
//! Placement: every pod is plugged on this one chassis (an internal port of br-int each), so an
//! output names its pod by its port; the provider networks' NIC is one more port, and a frame
//! out of it names the localnet port of its VLAN. A packet from a localnet port (the external
//! network) is not traced.
//!
//! The backend forwards only what it translates: where the evaluator outputs more than br-int,
//! the difference is allowed only when br-int output nothing the evaluator did not and the
//! packet crossed a datapath the backend reports untranslated (partial or fenced): the rule
//! "unsupported → dropped, reported"; or br-int sent the packet to the agent and every output
//! it lacks is an answer the agent makes (OVN's userspace answers: the trace ends at the
//! controller). br-int forwarding what the evaluator does not is always a disagreement.

#![allow(dead_code)] // each test binary uses a different part

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::{Ipv4Addr, Ipv6Addr},
};

use ovnbpf_agent::{
    dataplane::openflow::{
        Connection, answer, l2::L2Flows, l3::RouterFlows, message::FlowMod,
        untranslated::Untranslated,
    },
    net::{format_mac, parse_mac},
    pipeline::{
        IrDiff,
        eval::{
            Evaluator,
            packet::{L3, L4, Packet},
        },
        ir::{IrEntry, PortKind},
    },
};
use ovnbpf_tests::{names::unique_prefix, netns::Netns, ovs_chassis::OvsSwitch};

const CHASSIS: &str = "oracle-openflow";
/// The most members an ECMP group's choices are tried for.
const MAX_ECMP_MEMBERS: usize = 16;
/// The provider NIC's OpenFlow port.
const PROVIDER_OFPORT: u32 = 999;

/// The replay's counts and every disagreement, described.
#[derive(Debug, Default)]
pub struct Report {
    pub traced: usize,
    pub both_drop: usize,
    pub both_forward: usize,
    /// The evaluator outputs more and br-int drops it on a datapath the backend reports
    /// untranslated, per excuse (see [`OpenFlowReplay::excused`]).
    pub untranslated: BTreeMap<&'static str, usize>,
    /// Cases through an ECMP group where br-int chose another member than the evaluator's hash
    /// and did what the evaluator does for that member.
    pub ecmp_member: usize,
    /// Cases from the external network, not traced.
    pub skipped: usize,
    pub disagreements: Vec<String>,
}

/// br-int programmed from the IR, and how its ports map to logical ports.
pub struct OpenFlowReplay {
    switch: OvsSwitch,
    _netns: Netns,
    /// Logical port → OpenFlow port (the pods').
    ofports: HashMap<String, u32>,
    /// Datapath port number → logical port (pods), or `None` for the provider NIC.
    odp_ports: HashMap<u32, Option<String>>,
    /// VLAN tag (none: untagged) → the localnet port of that VLAN.
    localnets: HashMap<Option<u16>, String>,
    /// Localnet ports (frames from them are not traced).
    localnet_ports: BTreeSet<String>,
    untranslated: Untranslated,
}

impl OpenFlowReplay {
    /// Translates `entries` as the backend does, every pod plugged here.
    pub fn new(entries: &[IrEntry]) -> Self {
        let netns = Netns::create(&format!("{}-ofo", unique_prefix())).unwrap();
        let switch = OvsSwitch::start(&netns).unwrap();
        // Every VIF bound here, whatever chassis the Southbound names.
        let entries: Vec<IrEntry> = entries
            .iter()
            .cloned()
            .map(|entry| match entry {
                IrEntry::Port {
                    datapath,
                    key,
                    name,
                    kind: PortKind::Vif { .. },
                    addresses,
                    port_security,
                } => IrEntry::Port {
                    datapath,
                    key,
                    name,
                    kind: PortKind::Vif { chassis: None },
                    addresses,
                    port_security,
                },
                other => other,
            })
            .collect();
        let mut pods = Vec::new();
        let mut localnets = HashMap::new();
        let mut networks = BTreeSet::new();
        for entry in &entries {
            match entry {
                IrEntry::Port {
                    name,
                    kind: PortKind::Vif { .. },
                    ..
                } => pods.push(name.clone()),
                IrEntry::Port {
                    name,
                    kind: PortKind::Localnet { network_name, tag },
                    ..
                } => {
                    localnets.insert(tag.filter(|tag| *tag != 0), name.clone());
                    networks.insert(network_name.clone());
                }
                _ => {}
            }
        }
        let ofports: HashMap<String, u32> = pods
            .iter()
            .zip(1..)
            .map(|(pod, ofport)| (pod.clone(), ofport))
            .collect();
        let mut add: Vec<String> = Vec::new();
        for (name, ofport) in ofports
            .values()
            .map(|ofport| (format!("o{ofport}"), *ofport))
            .chain([("prov".to_string(), PROVIDER_OFPORT)])
        {
            add.extend(
                [
                    "--",
                    "add-port",
                    "br-int",
                    &name,
                    "--",
                    "set",
                    "interface",
                    &name,
                    "type=internal",
                    &format!("ofport_request={ofport}"),
                ]
                .map(String::from),
            );
        }
        let add: Vec<&str> = add.iter().map(String::as_str).collect();
        switch.vsctl(&add).unwrap();

        let mut l2 = L2Flows::for_chassis(CHASSIS);
        let mut l3 = RouterFlows::default();
        let mut untranslated = Untranslated::default();
        let diff = IrDiff {
            added: entries.clone(),
            removed: Vec::new(),
        };
        untranslated.apply(&diff);
        l2.apply(&diff);
        l3.apply(&diff);
        for change in untranslated.take_fence_changes() {
            l2.set_fenced(change.datapath, change.fenced);
            l3.set_fenced(change.datapath, change.fenced);
            l2.set_ipv6_fenced(change.datapath, change.ipv6_fenced);
            l3.set_ipv6_fenced(change.datapath, change.ipv6_fenced);
        }
        for (pod, ofport) in &ofports {
            l2.plug(pod, *ofport);
        }
        for network in &networks {
            l2.set_provider(network, PROVIDER_OFPORT);
        }
        let mut flows: Vec<FlowMod> = l2.resync();
        flows.extend(l3.resync());
        // On a thread of its own: the oracle's test runs inside a runtime.
        let socket = switch.management_socket("br-int");
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    let mut connection = Connection::connect(&socket).await?;
                    connection.apply(&flows).await
                })
        })
        .join()
        .unwrap()
        .unwrap_or_else(|error| panic!("installing the oracle's flows: {error}"));

        let odp_ports = odp_ports(&switch, &ofports);
        Self {
            switch,
            _netns: netns,
            ofports,
            odp_ports,
            localnet_ports: localnets.values().cloned().collect(),
            localnets,
            untranslated,
        }
    }

    /// Each fenced datapath's reasons, for the summary.
    pub fn fenced(&self, datapaths: impl IntoIterator<Item = (u32, String)>) -> Vec<String> {
        use ovnbpf_agent::dataplane::openflow::untranslated::Effect;
        datapaths
            .into_iter()
            .filter_map(|(datapath, name)| {
                let reasons: Vec<String> = self
                    .untranslated
                    .reasons(datapath)
                    .into_iter()
                    .filter(|(effect, _)| *effect == Effect::Fenced)
                    .map(|(_, reason)| reason)
                    .collect();
                (!reasons.is_empty()).then(|| format!("{name}: {}", reasons.join("; ")))
            })
            .collect()
    }

    /// Traces `packet` from logical port `inport` on br-int and compares what it outputs with
    /// the evaluator's outputs.
    pub fn check(
        &self,
        report: &mut Report,
        evaluator: &Evaluator,
        what: &str,
        inport: &str,
        packet: Packet,
    ) {
        if self.localnet_ports.contains(inport) {
            report.skipped += 1;
            return;
        }
        report.traced += 1;
        let ours = evaluator.trace(inport, packet).unwrap();
        let Some(ofport) = self.ofports.get(inport) else {
            report
                .disagreements
                .push(format!("{what}: {inport} is not plugged on br-int"));
            return;
        };
        let flow = flow_text(*ofport, &packet);
        let trace = self
            .switch
            .appctl(&["ofproto/trace", "br-int", &flow])
            .unwrap_or_else(|error| format!("ofproto/trace failed: {error:#}"));
        let Some(actions) = trace
            .lines()
            .find_map(|line| line.strip_prefix("Datapath actions: "))
        else {
            report
                .disagreements
                .push(format!("{what}: no datapath actions for {flow}\n{trace}"));
            return;
        };
        let mut outputs = Vec::new();
        run_actions(
            &split_actions(actions),
            State { packet, vlan: None },
            &mut outputs,
        );
        let theirs: BTreeSet<(String, Packet)> = outputs
            .into_iter()
            .filter_map(|(port, state)| {
                let name = match self.odp_ports.get(&port)? {
                    Some(pod) => pod.clone(),
                    None => self.localnets.get(&state.vlan)?.clone(),
                };
                Some((name, state.packet))
            })
            .collect();
        let expected: BTreeSet<(String, Packet)> = ours.outputs.iter().cloned().collect();
        if theirs == expected {
            if expected.is_empty() {
                report.both_drop += 1;
            } else {
                report.both_forward += 1;
            }
            return;
        }
        // An ECMP choice: Open vSwitch's `multipath` hashes otherwise than the evaluator (and the
        // kernel): br-int must do what the evaluator does for one of the group's members.
        if !ours.selected.is_empty()
            && (0..MAX_ECMP_MEMBERS).any(|index| {
                evaluator
                    .trace_choosing(inport, packet, index)
                    .is_ok_and(|member| {
                        member.outputs.iter().cloned().collect::<BTreeSet<_>>() == theirs
                    })
            })
        {
            report.ecmp_member += 1;
            return;
        }
        // A flow that sent the packet to the agent (the answers OVN makes in userspace): the
        // trace ends there.
        // (Not a flow that only teaches the router the sender: it answers nothing.)
        let learns = format!("rule_cookie={:#x}", answer::COOKIE_LEARN);
        let sent_up = actions.contains("controller(")
            && !actions.contains(&learns)
            && expected
                .difference(&theirs)
                .all(|(_, output)| is_answer(output, &packet));
        if theirs.is_subset(&expected)
            && let Some(excuse) = self.excused(&ours, inport, &packet, sent_up)
        {
            *report.untranslated.entry(excuse).or_default() += 1;
            return;
        }
        report.disagreements.push(format!(
            "{what}\n  packet: {packet}\n  evaluator: {expected:?}\n  br-int:    {theirs:?}\n  \
             flow: {flow}\n  datapath actions: {actions}\n  evaluator steps:\n    {}",
            ours.steps.join("\n    ")
        ));
    }
}

impl OpenFlowReplay {
    /// Whether the backend's reports excuse br-int dropping what the evaluator outputs: the
    /// packet crossed a fenced datapath; or it comes from or goes to a port with port security
    /// (which does not forward); or it crossed a datapath reported partial and is what the
    /// partial reasons name: IPv6 or neighbour discovery (IPv6 routing), or an answer the
    /// router makes itself (an ARP reply of its own). Where br-int sent the packet to the agent
    /// and every output it lacks is such an answer (a reset, an ICMP error, an ARP request, a
    /// neighbour advertisement: `sent_up`), the agent answers it: its bytes are the unit
    /// tests' and the end-to-end test's, not the trace's.
    fn excused(
        &self,
        trace: &ovnbpf_agent::pipeline::eval::Trace,
        inport: &str,
        packet: &Packet,
        sent_up: bool,
    ) -> Option<&'static str> {
        use ovnbpf_agent::dataplane::openflow::untranslated::Effect;
        let reasons: Vec<(Effect, String)> = trace
            .crossed
            .iter()
            .flat_map(|datapath| self.untranslated.reasons(*datapath))
            .collect();
        if reasons.iter().any(|(effect, _)| *effect == Effect::Fenced) {
            return Some("fenced");
        }
        if matches!(packet.l3, L3::Ipv6 { .. })
            && reasons
                .iter()
                .any(|(effect, _)| *effect == Effect::Ipv6Fenced)
        {
            return Some("IPv6 fenced");
        }
        // A port with port security does not forward at all: to it or from it.
        let secured = |port: &str| {
            reasons
                .iter()
                .any(|(_, reason)| reason.ends_with(&format!(": {port} does not forward")))
        };
        if secured(inport) || trace.outputs.iter().any(|(port, _)| secured(port)) {
            return Some("port security");
        }
        let generated = trace
            .outputs
            .iter()
            .any(|(_, output)| is_answer(output, packet));
        if sent_up {
            return Some("answered by the agent");
        }
        let effects: BTreeSet<Effect> = reasons.into_iter().map(|(effect, _)| effect).collect();
        if !effects.contains(&Effect::Partial) {
            return None;
        }
        let ipv6 = matches!(packet.l3, L3::Ipv6 { .. });
        if ipv6 {
            Some("IPv6")
        } else if generated {
            Some("the router's own answer")
        } else {
            None
        }
    }
}

/// Whether `output` is an answer made for `packet` rather than `packet` forwarded: another
/// kind of packet, a reset, an ICMP error, a router or neighbour advertisement, a router's
/// neighbour solicitation.
fn is_answer(output: &Packet, packet: &Packet) -> bool {
    let kind_changed = std::mem::discriminant(&output.l3) != std::mem::discriminant(&packet.l3);
    let answer = match output.l3 {
        L3::Ipv4 { l4, .. } => matches!(l4, L4::TcpReset { .. } | L4::Icmp { kind: 3 | 11, .. }),
        // ICMPv6 unreachable, time exceeded, router advertisement; the router's solicitation
        // for a next hop, a neighbour advertisement.
        L3::Ipv6 { l4, .. } => matches!(
            l4,
            L4::TcpReset { .. }
                | L4::Icmp {
                    kind: 1 | 3 | 134,
                    ..
                }
                | L4::Nd {
                    kind: 135 | 136,
                    ..
                }
        ),
        L3::Arp { .. } => true,
    };
    kind_changed || answer
}

/// br-int's datapath port numbers → logical port (`None`: the provider NIC), from
/// `dpif/show`'s `name ofport/odp-port` lines.
fn odp_ports(switch: &OvsSwitch, ofports: &HashMap<String, u32>) -> HashMap<u32, Option<String>> {
    let by_ofport: HashMap<u32, &String> = ofports.iter().map(|(pod, o)| (*o, pod)).collect();
    let text = switch.appctl(&["dpif/show"]).unwrap();
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let _name = words.next()?;
            let (ofport, odp) = words.next()?.trim_end_matches(':').split_once('/')?;
            let (ofport, odp): (u32, u32) = (ofport.parse().ok()?, odp.parse().ok()?);
            if ofport == PROVIDER_OFPORT {
                return Some((odp, None));
            }
            Some((odp, Some((*by_ofport.get(&ofport)?).clone())))
        })
        .collect()
}

/// `ofproto/trace`'s flow for `packet` entering by OpenFlow port `ofport`.
fn flow_text(ofport: u32, packet: &Packet) -> String {
    let mac = |m: [u8; 6]| format_mac(&m);
    let mut flow = format!(
        "in_port={ofport},dl_src={},dl_dst={}",
        mac(packet.eth_src),
        mac(packet.eth_dst)
    );
    match packet.l3 {
        L3::Arp {
            op,
            sha,
            spa,
            tha,
            tpa,
        } => {
            flow += &format!(
                ",arp,arp_op={op},arp_sha={},arp_spa={spa},arp_tha={},arp_tpa={tpa}",
                mac(sha),
                mac(tha)
            )
        }
        L3::Ipv4 {
            source,
            destination,
            ttl,
            l4,
        } => {
            let (protocol, fields) = l4_text(l4, false);
            flow +=
                &format!(",{protocol},nw_src={source},nw_dst={destination},nw_ttl={ttl}{fields}");
        }
        L3::Ipv6 {
            source,
            destination,
            ttl,
            l4,
        } => {
            let (protocol, fields) = l4_text(l4, true);
            flow += &format!(
                ",{protocol},ipv6_src={source},ipv6_dst={destination},nw_ttl={ttl}{fields}"
            );
        }
    }
    flow
}

/// The protocol keyword and transport fields of `l4`.
fn l4_text(l4: L4, ipv6: bool) -> (&'static str, String) {
    let six = |v4: &'static str, v6: &'static str| if ipv6 { v6 } else { v4 };
    match l4 {
        // Its IPv6 names for ICMPv6 (`icmp_type` after `icmp6` fails the trace's prerequisites).
        L4::Icmp { kind, code } if ipv6 => {
            ("icmp6", format!(",icmpv6_type={kind},icmpv6_code={code}"))
        }
        L4::Icmp { kind, code } => ("icmp", format!(",icmp_type={kind},icmp_code={code}")),
        L4::Tcp {
            source,
            destination,
        }
        | L4::TcpReset {
            source,
            destination,
        } => (
            six("tcp", "tcp6"),
            format!(",tcp_src={source},tcp_dst={destination}"),
        ),
        L4::Udp {
            source,
            destination,
        } => (
            // Open vSwitch 3.1's trace refuses `tp_src` after `udp` (its prerequisites), not
            // `udp_src`.
            six("udp", "udp6"),
            format!(",udp_src={source},udp_dst={destination}"),
        ),
        L4::Nd { kind, target, .. } => (
            "icmp6",
            format!(",icmpv6_type={kind},icmpv6_code=0,nd_target={target}"),
        ),
    }
}

/// A packet as the datapath actions leave it so far.
#[derive(Clone, Copy, Debug)]
struct State {
    packet: Packet,
    vlan: Option<u16>,
}

/// The top-level actions of `text` (commas inside parentheses kept).
fn split_actions(text: &str) -> Vec<&str> {
    let mut actions = Vec::new();
    let (mut depth, mut start) = (0_i32, 0);
    for (index, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                actions.push(text[start..index].trim());
                start = index + 1;
            }
            _ => {}
        }
    }
    actions.push(text[start..].trim());
    actions.retain(|action| !action.is_empty());
    actions
}

/// Runs datapath actions on `state`, recording each output (port, state then).
fn run_actions(actions: &[&str], mut state: State, outputs: &mut Vec<(u32, State)>) {
    for action in actions {
        if let Ok(port) = action.parse::<u32>() {
            outputs.push((port, state));
        } else if let Some(inner) = action
            .strip_prefix("clone(")
            .and_then(|rest| rest.strip_suffix(')'))
        {
            run_actions(&split_actions(inner), state, outputs);
        } else if let Some(inner) = action
            .strip_prefix("set(")
            .and_then(|rest| rest.strip_suffix(')'))
        {
            set(inner, &mut state);
        } else if let Some(inner) = action.strip_prefix("push_vlan(") {
            state.vlan = fields(inner.trim_end_matches(')'))
                .get("vid")
                .and_then(|vid| vid.parse().ok());
        } else if *action == "pop_vlan" {
            state.vlan = None;
        }
        // `drop` and anything else output nothing.
    }
}

/// `key=value` pairs of a datapath action's fields (masks dropped).
fn fields(text: &str) -> BTreeMap<&str, &str> {
    text.split(',')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            Some((key.trim(), value.split('/').next()?.trim()))
        })
        .collect()
}

/// Applies one `set(kind(fields))` to `state`.
fn set(inner: &str, state: &mut State) {
    let Some((kind, rest)) = inner.split_once('(') else {
        return;
    };
    let values = fields(rest.trim_end_matches(')'));
    let packet = &mut state.packet;
    let mac = |key: &str| values.get(key).and_then(|v| parse_mac(v));
    match kind {
        "eth" => {
            if let Some(m) = mac("src") {
                packet.eth_src = m;
            }
            if let Some(m) = mac("dst") {
                packet.eth_dst = m;
            }
        }
        "ipv4" => {
            if let L3::Ipv4 {
                source,
                destination,
                ttl,
                ..
            } = &mut packet.l3
            {
                let ip = |key: &str| values.get(key).and_then(|v| v.parse::<Ipv4Addr>().ok());
                *source = ip("src").unwrap_or(*source);
                *destination = ip("dst").unwrap_or(*destination);
                *ttl = values
                    .get("ttl")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(*ttl);
            }
        }
        "ipv6" => {
            if let L3::Ipv6 {
                source,
                destination,
                ttl,
                ..
            } = &mut packet.l3
            {
                let ip = |key: &str| values.get(key).and_then(|v| v.parse::<Ipv6Addr>().ok());
                *source = ip("src").unwrap_or(*source);
                *destination = ip("dst").unwrap_or(*destination);
                *ttl = values
                    .get("hlimit")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(*ttl);
            }
        }
        "arp" => {
            if let L3::Arp {
                op,
                sha,
                spa,
                tha,
                tpa,
            } = &mut packet.l3
            {
                let ip = |key: &str| values.get(key).and_then(|v| v.parse::<Ipv4Addr>().ok());
                *op = values.get("op").and_then(|v| v.parse().ok()).unwrap_or(*op);
                *sha = mac("sha").unwrap_or(*sha);
                *tha = mac("tha").unwrap_or(*tha);
                *spa = ip("sip").unwrap_or(*spa);
                *tpa = ip("tip").unwrap_or(*tpa);
            }
        }
        // ICMP under IPv4, ICMPv6 under IPv6.
        "icmp" | "icmpv6" => {
            if let L3::Ipv4 {
                l4: L4::Icmp { kind, code },
                ..
            }
            | L3::Ipv6 {
                l4: L4::Icmp { kind, code },
                ..
            } = &mut packet.l3
            {
                *kind = values
                    .get("type")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(*kind);
                *code = values
                    .get("code")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(*code);
            }
        }
        _ => {}
    }
}
