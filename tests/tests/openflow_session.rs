//! The OpenFlow backend's wire side (issue 19, its first part) against Open vSwitch itself:
//! - what the codec encodes (flow mods with OVN's fields and actions, cookie deletes, bundle
//!   control and add, HELLO) is what `ovs-ofctl ofp-print` reads back, field by field;
//! - a session with a real ovs-vswitchd's br-int (userspace datapath, in a namespace of the
//!   test's own): OpenFlow 1.5 negotiated, the features read, flows applied in one atomic
//!   bundle and acting as written (`ofproto/trace`), a bundle with one flow the switch refuses
//!   applied not at all (the refusal's type and code returned), the flows of our cookie deleted
//!   and another controller's flow left alone;
//! - the IR's L2 forwarding translated ([`ovnbpf_agent::dataplane::openflow::l2`]) and
//!   programmed into br-int carries real pings between two namespaces plugged into it (the
//!   ARP broadcast through the flood, the rest through the L2 lookup), and unplugging one port
//!   stops them.

use std::{process::Command, time::Duration};

use ovnbpf_agent::{
    dataplane::Datapath,
    dataplane::openflow::{
        OpenFlowError,
        action::{Action, Instruction, PORT_LOCAL},
        connection::Connection,
        datapath::{OpenFlowDatapath, OvsConfig},
        l2::L2Flows,
        message::{self, BundleControl, FlowMod},
        oxm::{Field, Match, NXM_REG14, NXM_REG15, NXM_TUN_ID, NXM_TUN_METADATA0, OXM_METADATA},
    },
    pipeline::ir::{IrDiff, IrEntry, PortKind},
};
use ovnbpf_tests::{
    names::unique_prefix, netns::Netns, ovs_chassis::OvsSwitch, process::wait_until, require_root,
};

/// The flows' owner.
const COOKIE: u64 = 0xab;

/// OVN's shape of a flow: the logical input port and datapath, a TCP destination, then the
/// logical output port set and the egress table resubmitted to, and an output.
fn ovn_shaped_flow() -> FlowMod {
    FlowMod::add(
        COOKIE,
        0,
        100,
        Match::new()
            .with(Field::tcp_destination(80))
            .with(Field::ipv4_destination_prefix(
                std::net::Ipv4Addr::new(10, 0, 1, 0),
                24,
            ))
            .with(Field::ip_protocol(6))
            .with(Field::eth_type(0x0800))
            .with(Field::metadata(3))
            .with(Field::register(14, 5))
            .with(Field::in_port(1)),
        vec![Instruction::ApplyActions(vec![
            Action::SetField(Field::register(15, 7)),
            Action::Resubmit(40),
            Action::Output(2),
        ])],
    )
}

/// Asserts that `text` (what ovs-ofctl printed) holds each of `expected`.
fn assert_printed(text: &str, expected: &[&str]) {
    for part in expected {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
}

/// `ovs-ofctl ofp-print` of `bytes`.
fn ofp_print(bytes: &[u8]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let output = Command::new("ovs-ofctl")
        .args(["ofp-print", &hex.join(" ")])
        .output()
        .expect("ovs-ofctl");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success() && !text.contains("***"),
        "ovs-ofctl could not read {hex:?}: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

#[test]
fn our_messages_decode_as_open_vswitch_reads_them() {
    assert_printed(
        &ofp_print(&ovn_shaped_flow().encode(5)),
        &[
            "OFPT_FLOW_MOD (OF1.5)",
            "xid=0x5",
            "ADD",
            "priority=100",
            "cookie:0xab",
            "tcp",
            "reg14=0x5",
            "metadata=0x3",
            "in_port=1",
            "nw_dst=10.0.1.0/24",
            "tp_dst=80",
            "actions=set_field:0x7->reg15,resubmit(,40),output:2",
        ],
    );
    // OFPTT_ALL (OVS prints it as table 255): every table; the owner's bits of the cookie
    // (the low 32: the high ones name a drop's reason).
    assert_printed(
        &ofp_print(&FlowMod::delete_cookie(COOKIE).encode(6)),
        &["DEL", "table:255", "cookie:0xab/0xffffffff"],
    );
    assert_printed(
        &ofp_print(&message::bundle_control(7, 1, BundleControl::Open)),
        &[
            "OFPT_BUNDLE_CONTROL (OF1.5)",
            "bundle_id=0x1",
            "type=OPEN_REQUEST",
            "flags=atomic ordered",
        ],
    );
    assert_printed(
        &ofp_print(&message::bundle_add(8, 1, &ovn_shaped_flow().encode(8))),
        &[
            "OFPT_BUNDLE_ADD_MESSAGE (OF1.5)",
            "bundle_id=0x1",
            "OFPT_FLOW_MOD",
            "resubmit(,40)",
        ],
    );
    // OVN's Geneve plumbing: the option mapped to tun_metadata0; out by a tunnel with the VNI,
    // the egress key and the ingress port moved from reg14; in from it, the other way.
    assert_printed(
        &ofp_print(&message::tlv_table_add(9, (0x0102, 0x80, 4, 0))),
        &[
            "NXT_TLV_TABLE_MOD (OF1.5)",
            "ADD",
            "class",
            "0x102",
            "0x80",
            "tun_metadata0",
        ],
    );
    let tunnel_out = FlowMod::add(
        COOKIE,
        40,
        100,
        Match::new()
            .with(Field::metadata(5))
            .with(Field::register(15, 3)),
        vec![Instruction::ApplyActions(vec![
            Action::SetField(Field::tunnel_id(5)),
            Action::SetField(Field::tunnel_metadata0(&3_u32.to_be_bytes())),
            Action::Move {
                source: NXM_REG14,
                source_offset: 0,
                destination: NXM_TUN_METADATA0,
                destination_offset: 16,
                bits: 15,
            },
            Action::Output(9),
        ])],
    );
    assert_printed(
        &ofp_print(&tunnel_out.encode(10)),
        &[
            "set_field:0x5->tun_id",
            "move:NXM_NX_REG14[0..14]->NXM_NX_TUN_METADATA0[16..30]",
            "output:9",
        ],
    );
    let tunnel_in = FlowMod::add(
        COOKIE,
        0,
        100,
        Match::new().with(Field::in_port(9)),
        vec![Instruction::ApplyActions(vec![
            Action::Move {
                source: NXM_TUN_ID,
                source_offset: 0,
                destination: OXM_METADATA,
                destination_offset: 0,
                bits: 24,
            },
            Action::Move {
                source: NXM_TUN_METADATA0,
                source_offset: 0,
                destination: NXM_REG15,
                destination_offset: 0,
                bits: 16,
            },
        ])],
    );
    assert_printed(
        &ofp_print(&tunnel_in.encode(11)),
        &[
            "move:NXM_NX_TUN_ID[0..23]->OXM_OF_METADATA[0..23]",
            "move:NXM_NX_TUN_METADATA0[0..15]->NXM_NX_REG15[0..15]",
        ],
    );
    let hello = ofp_print(&message::hello(1));
    assert!(
        hello.contains("OFPT_HELLO (OF1.5)") && hello.contains("version bitmap: 0x06"),
        "{hello}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_session_programs_br_int_atomically_and_only_its_own_flows() {
    require_root();
    let netns = Netns::create(&format!("{}-of", unique_prefix())).unwrap();
    let switch = OvsSwitch::start(&netns).unwrap();
    let logs = || switch.log_tails();
    // Another controller's flow, which ours must never touch.
    switch
        .ofctl(&[
            "add-flow",
            "br-int",
            "cookie=0x77,table=0,priority=5,actions=drop",
        ])
        .unwrap();
    let socket = switch.management_socket("br-int");
    let mut connection = Connection::connect(&socket)
        .await
        .unwrap_or_else(|error| panic!("connecting to {}: {error}{}", socket.display(), logs()));
    assert!(connection.tables() > 40, "{} tables", connection.tables());

    // Two tables in one bundle; they act as written: the packet from the bridge's own port
    // gets reg15 = 7 in table 0 and leaves by port 42 from table 40.
    let to_egress = FlowMod::add(
        COOKIE,
        0,
        100,
        Match::new()
            .with(Field::in_port(PORT_LOCAL))
            .with(Field::eth_type(0x0800)),
        vec![Instruction::ApplyActions(vec![
            Action::SetField(Field::register(15, 7)),
            Action::Resubmit(40),
        ])],
    );
    let egress = FlowMod::add(
        COOKIE,
        40,
        50,
        Match::new().with(Field::register(15, 7)),
        vec![Instruction::ApplyActions(vec![Action::Output(42)])],
    );
    connection
        .apply(&[to_egress, egress])
        .await
        .unwrap_or_else(|error| panic!("{error}{}", logs()));
    let flows = switch.ofctl(&["dump-flows", "br-int"]).unwrap();
    let ours = |flows: &str| {
        flows
            .lines()
            .filter(|line| line.contains("cookie=0xab"))
            .count()
    };
    assert_eq!(ours(&flows), 2, "{flows}");
    assert!(
        flows.contains("table=40") && flows.contains("reg15=0x7 actions=output:42"),
        "{flows}"
    );
    // The session counts them too (a flow stats request for the cookie), and nothing of a
    // cookie no one uses.
    assert_eq!(connection.count_flows(COOKIE).await.unwrap(), 2);
    assert_eq!(connection.count_flows(0x0dd).await.unwrap(), 0);
    let trace = switch
        .appctl(&[
            "ofproto/trace",
            "br-int",
            "in_port=LOCAL,ip,nw_dst=10.0.1.5",
        ])
        .unwrap();
    assert!(
        trace.contains("resubmit(,40)") && trace.contains("output:42"),
        "{trace}"
    );

    // A bundle with a flow the switch refuses (a goto to an earlier table): none of it is
    // applied, and the refusal comes back with its OpenFlow error.
    let fine = FlowMod::add(
        COOKIE,
        1,
        10,
        Match::new(),
        vec![Instruction::ApplyActions(vec![Action::Output(43)])],
    );
    let backwards = FlowMod::add(COOKIE, 5, 10, Match::new(), vec![Instruction::GotoTable(2)]);
    let refused = connection.apply(&[fine, backwards]).await;
    assert!(
        matches!(refused, Err(OpenFlowError::Refused { .. })),
        "{refused:?}"
    );
    let flows = switch.ofctl(&["dump-flows", "br-int"]).unwrap();
    assert_eq!(ours(&flows), 2, "a refused bundle applied in part: {flows}");
    assert!(!flows.contains("output:43"), "{flows}");

    // Our cookie's flows deleted; the other controller's stays. The session goes on.
    connection
        .apply(&[FlowMod::delete_cookie(COOKIE)])
        .await
        .unwrap();
    connection.barrier().await.unwrap();
    let flows = switch.ofctl(&["dump-flows", "br-int"]).unwrap();
    assert_eq!(ours(&flows), 0, "{flows}");
    assert_eq!(connection.count_flows(COOKIE).await.unwrap(), 0);
    assert!(
        flows.contains("cookie=0x77"),
        "another's flow went: {flows}"
    );

    // The matches the routers' and switches' translation adds, as the switch reads them: a
    // source prefix, a TTL, a port range's masked block, a solicitation's target.
    let range = FlowMod::add(
        COOKIE,
        23,
        100,
        Match::new()
            .with(Field::eth_type(0x0800))
            .with(Field::ipv4_source_prefix(
                std::net::Ipv4Addr::new(10, 3, 0, 0),
                16,
            ))
            .with(Field::ip_ttl(1))
            .with(Field::ip_protocol(6))
            .with(Field::tcp_destination(1000).masked(&0xfff8_u16.to_be_bytes())),
        Vec::new(),
    );
    let solicitation = FlowMod::add(
        COOKIE,
        5,
        90,
        Match::new()
            .with(Field::eth_type(0x86dd))
            .with(Field::ip_protocol(58))
            .with(Field::icmpv6_type(135))
            .with(Field::nd_target("fe80::1".parse().unwrap())),
        Vec::new(),
    );
    connection
        .apply(&[range, solicitation])
        .await
        .unwrap_or_else(|error| panic!("{error}{}", logs()));
    let flows = switch.ofctl(&["dump-flows", "br-int"]).unwrap();
    for expected in [
        "nw_src=10.3.0.0/16,nw_ttl=1,tp_dst=0x3e8/0xfff8",
        "icmp_type=135,nd_target=fe80::1",
    ] {
        assert!(flows.contains(expected), "{expected} not in {flows}");
    }
}

/// Pod namespace `pod` joined to `host_netns` by a veth whose host end is `host` (TX checksum
/// offload off on both ends: OVS's userspace datapath does not complete partial checksums),
/// the pod end `eth0` with `mac` and `ip`/24.
fn veth_pod(host_netns: &Netns, pod: &Netns, host: &str, mac: &str, ip: &str) {
    host_netns
        .ip(&[
            "link",
            "add",
            host,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            pod.name(),
        ])
        .unwrap();
    host_netns.ip(&["link", "set", host, "up"]).unwrap();
    host_netns
        .exec("ethtool", &["-K", host, "tx", "off"])
        .unwrap();
    pod.ip(&["link", "set", "eth0", "address", mac]).unwrap();
    pod.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"])
        .unwrap();
    pod.ip(&["link", "set", "eth0", "up"]).unwrap();
    pod.exec("ethtool", &["-K", "eth0", "tx", "off"]).unwrap();
}

/// [`veth_pod`], its host end added to br-int: its OpenFlow port.
fn plug_pod(
    switch: &OvsSwitch,
    host_netns: &Netns,
    pod: &Netns,
    host: &str,
    mac: &str,
    ip: &str,
) -> u32 {
    veth_pod(host_netns, pod, host, mac, ip);
    switch.vsctl(&["add-port", "br-int", host]).unwrap();
    switch
        .vsctl(&["get", "interface", host, "ofport"])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Switch 5 with pods `a.ns` and `b.ns` (keys 1 and 2, `macs`), their MACs and the flood
/// group, as the compiler writes them.
fn two_pod_switch(macs: [[u8; 6]; 2]) -> Vec<IrEntry> {
    let mut entries = Vec::new();
    for (index, name) in ["a.ns", "b.ns"].iter().enumerate() {
        let key = index as u32 + 1;
        entries.push(IrEntry::Port {
            datapath: 5,
            key,
            name: (*name).into(),
            kind: PortKind::Vif { chassis: None },
            addresses: Vec::new(),
            port_security: Vec::new(),
        });
        entries.push(IrEntry::L2Fib {
            datapath: 5,
            mac: macs[index],
            port: (*name).into(),
        });
        entries.push(IrEntry::FloodMember {
            datapath: 5,
            group: 32768,
            port: key,
        });
    }
    entries.push(IrEntry::FloodGroup {
        datapath: 5,
        key: 32768,
        name: "_MC_flood".into(),
    });
    entries.push(IrEntry::FloodMulticast {
        datapath: 5,
        group: "_MC_flood".into(),
    });
    entries
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// [`pings`] after `from` forgets its neighbours (so that it asks for `to`'s MAC again).
fn pings_afresh(from: &Netns, to: &str) -> bool {
    from.ip(&["neigh", "flush", "dev", "eth0"]).unwrap();
    pings(from, to)
}

/// Three pings from `from` to `to` answered.
fn pings(from: &Netns, to: &str) -> bool {
    from.exec("ping", &["-c", "3", "-i", "0.2", "-W", "1", to])
        .is_ok_and(|text| text.contains(" 3 received"))
}

const MACS: [[u8; 6]; 2] = [[2, 0, 0, 0, 0xa, 1], [2, 0, 0, 0, 0xa, 2]];

#[tokio::test(flavor = "current_thread")]
async fn the_irs_l2_forwarding_programmed_into_br_int_carries_pings() {
    require_root();
    let prefix = unique_prefix();
    let host = Netns::create(&format!("{prefix}-ofh")).unwrap();
    let pods = [
        Netns::create(&format!("{prefix}-ofa")).unwrap(),
        Netns::create(&format!("{prefix}-ofb")).unwrap(),
    ];
    let switch = OvsSwitch::start(&host).unwrap();
    let logs = || switch.log_tails();
    let ofports = [
        plug_pod(
            &switch,
            &host,
            &pods[0],
            "ofa",
            &mac_text(MACS[0]),
            "10.9.0.1",
        ),
        plug_pod(
            &switch,
            &host,
            &pods[1],
            "ofb",
            &mac_text(MACS[1]),
            "10.9.0.2",
        ),
    ];
    let mut flows = L2Flows::new();
    flows.apply(&IrDiff {
        added: two_pod_switch(MACS),
        removed: Vec::new(),
    });
    flows.plug("a.ns", ofports[0]);
    flows.plug("b.ns", ofports[1]);
    let socket = switch.management_socket("br-int");
    let mut connection = Connection::connect(&socket)
        .await
        .unwrap_or_else(|error| panic!("{error}{}", logs()));
    connection
        .apply(&flows.changes())
        .await
        .unwrap_or_else(|error| panic!("{error}{}", logs()));
    assert!(
        pings(&pods[0], "10.9.0.2"),
        "a → b through br-int\n{}{}",
        switch.ofctl(&["dump-flows", "br-int"]).unwrap_or_default(),
        logs()
    );
    assert!(pings(&pods[1], "10.9.0.1"), "b → a");
    // b unplugged: its classification and output go; a no longer reaches it.
    flows.unplug("b.ns");
    connection.apply(&flows.changes()).await.unwrap();
    assert!(
        !pings_afresh(&pods[0], "10.9.0.2"),
        "a still reaches an unplugged b"
    );
    drop(connection);
    drop(switch);
}

/// An OpenFlow datapath over `switch` (`config`) with `two_pod_switch`'s IR applied and the
/// pods' host interfaces (in `host`) attached and plugged.
fn datapath_with_two_pods(
    switch: &OvsSwitch,
    host: &Netns,
    config: &OvsConfig,
) -> OpenFlowDatapath {
    let mut datapath = OpenFlowDatapath::start(config.clone()).unwrap();
    datapath
        .apply(
            &IrDiff {
                added: two_pod_switch(MACS),
                removed: Vec::new(),
            }
            .borrowed(),
        )
        .unwrap_or_else(|error| panic!("{error}{}", switch.log_tails()));
    let attacher = datapath.attacher();
    for (port, interface) in [("a.ns", "ofa"), ("b.ns", "ofb")] {
        let attachment = host
            .run_in(|| {
                // The interface's index in this namespace (sysfs shows the caller's).
                let name = std::ffi::CString::new(interface)?;
                // SAFETY: a NUL-terminated name.
                let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
                anyhow::ensure!(index != 0, "no interface {interface}");
                Ok(attacher.attach(index)?)
            })
            .unwrap_or_else(|error| panic!("attaching {interface}: {error}{}", switch.log_tails()));
        datapath.plug(port, interface, attachment).unwrap();
        assert!(datapath.programmed(port));
    }
    datapath
}

/// How many flows of the OpenFlow datapath br-int holds (their cookie's low 32 bits).
fn our_flows(switch: &OvsSwitch) -> usize {
    switch
        .ofctl(&["dump-flows", "br-int", "cookie=0xb0f0001/0xffffffff"])
        .unwrap()
        .lines()
        .filter(|line| line.contains("cookie="))
        .count()
}

/// The OpenFlow backend as the daemon drives it: the IR applied before any pod (the first
/// write resyncs), pods' host interfaces added to br-int by its attacher and plugged, pings
/// between them; a second datapath over the same switch (a restarted agent) resyncs: our
/// cookie's flows replaced (a stale one of ours gone), the pings go on; Open vSwitch restarted
/// under it (its flows gone), the lost session is noticed and the retry resyncs; a pod unplugged is taken out of br-int and no
/// longer reached.
#[test]
fn the_openflow_datapath_plugs_pods_into_br_int_and_forwards_between_them() {
    require_root();
    let prefix = unique_prefix();
    let host = Netns::create(&format!("{prefix}-ofh")).unwrap();
    let pods = [
        Netns::create(&format!("{prefix}-ofa")).unwrap(),
        Netns::create(&format!("{prefix}-ofb")).unwrap(),
    ];
    let mut switch = OvsSwitch::start(&host).unwrap();
    veth_pod(&host, &pods[0], "ofa", &mac_text(MACS[0]), "10.9.0.1");
    veth_pod(&host, &pods[1], "ofb", &mac_text(MACS[1]), "10.9.0.2");
    let config = OvsConfig {
        management_socket: switch.management_socket("br-int"),
        db_remote: switch.db_remote(),
        interfaces: Vec::new(),
        chassis: "node1".into(),
        providers: Vec::new(),
    };
    let first = datapath_with_two_pods(&switch, &host, &config);
    assert!(pings(&pods[0], "10.9.0.2"), "a → b{}", switch.log_tails());
    assert!(pings(&pods[1], "10.9.0.1"), "b → a");
    let installed = our_flows(&switch);
    assert_eq!(
        installed, 14,
        "two ports in and out (each out three ways: its port, back by the input port, not to \
         itself), the switch's ingress, two MACs and the unknown ones' drop, the flood and its \
         delivery from other chassis"
    );
    drop(first);
    // A flow of our cookie the new agent does not want (left by the one before): the
    // resync takes it away.
    switch
        .ofctl(&[
            "add-flow",
            "br-int",
            "cookie=0xb0f0001,table=10,priority=1,actions=drop",
        ])
        .unwrap();
    assert_eq!(our_flows(&switch), installed + 1);
    let mut second = datapath_with_two_pods(&switch, &host, &config);
    assert_eq!(
        our_flows(&switch),
        installed,
        "the resync left a stale flow of ours"
    );
    assert!(pings(&pods[0], "10.9.0.2"), "a → b after the resync");
    // Open vSwitch restarted under the agent: its flows are gone; the idle session notices
    // within its probe interval, a resync waits as a pending write, and the daemon's retry
    // (done here by hand) puts every flow back.
    switch.restart_vswitchd().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || switch
            .ofctl(&["dump-flows", "br-int"])
            .is_ok()),
        "ovs-vswitchd did not come back{}",
        switch.log_tails()
    );
    assert!(
        wait_until(Duration::from_secs(10), || our_flows(&switch) == 0
            && second.pending() > 0),
        "the lost session is not noticed: {} flows, {} pending{}",
        our_flows(&switch),
        second.pending(),
        switch.log_tails()
    );
    assert!(
        wait_until(Duration::from_secs(10), || second.retry().is_ok()),
        "the resync failed{}",
        switch.log_tails()
    );
    assert_eq!(second.pending(), 0);
    assert_eq!(
        our_flows(&switch),
        installed,
        "not every flow is back after the resync"
    );
    assert!(
        pings(&pods[0], "10.9.0.2"),
        "a → b after Open vSwitch restarted"
    );
    second.unplug("b.ns").unwrap();
    let ports = switch.vsctl(&["list-ports", "br-int"]).unwrap();
    assert!(!ports.contains("ofb") && ports.contains("ofa"), "{ports}");
    assert!(
        !pings_afresh(&pods[0], "10.9.0.2"),
        "a still reaches an unplugged b"
    );
    drop(second);
    drop(switch);
}
