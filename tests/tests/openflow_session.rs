//! The OpenFlow backend's wire side (issue 19, its first part) against Open vSwitch itself:
//! - what the codec encodes (flow mods with OVN's fields and actions, cookie deletes, bundle
//!   control and add, HELLO) is what `ovs-ofctl ofp-print` reads back, field by field;
//! - a session with a real ovs-vswitchd's br-int (userspace datapath, in a namespace of the
//!   test's own): OpenFlow 1.5 negotiated, the features read, flows applied in one atomic
//!   bundle and acting as written (`ofproto/trace`), a bundle with one flow the switch refuses
//!   applied not at all (the refusal's type and code returned), the flows of our cookie deleted
//!   and another controller's flow left alone.

use std::process::Command;

use ovnbpf_agent::dataplane::openflow::{
    OpenFlowError,
    action::{Action, Instruction, PORT_LOCAL},
    connection::Connection,
    message::{self, BundleControl, FlowMod},
    oxm::{Field, Match},
};
use ovnbpf_tests::{names::unique_prefix, netns::Netns, ovs_chassis::OvsSwitch, require_root};

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
    let flow = ofp_print(&ovn_shaped_flow().encode(5));
    for expected in [
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
    ] {
        assert!(flow.contains(expected), "{expected:?} not in {flow}");
    }
    let delete = ofp_print(&FlowMod::delete_cookie(COOKIE).encode(6));
    // OFPTT_ALL (OVS prints it as table 255): every table.
    for expected in ["DEL", "table:255", "cookie:0xab/0xffffffffffffffff"] {
        assert!(delete.contains(expected), "{expected:?} not in {delete}");
    }
    let open = ofp_print(&message::bundle_control(7, 1, BundleControl::Open));
    for expected in [
        "OFPT_BUNDLE_CONTROL (OF1.5)",
        "bundle_id=0x1",
        "type=OPEN_REQUEST",
        "flags=atomic ordered",
    ] {
        assert!(open.contains(expected), "{expected:?} not in {open}");
    }
    let add = ofp_print(&message::bundle_add(8, 1, &ovn_shaped_flow().encode(8)));
    for expected in [
        "OFPT_BUNDLE_ADD_MESSAGE (OF1.5)",
        "bundle_id=0x1",
        "OFPT_FLOW_MOD",
        "resubmit(,40)",
    ] {
        assert!(add.contains(expected), "{expected:?} not in {add}");
    }
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
    assert!(
        flows.contains("cookie=0x77"),
        "another's flow went: {flows}"
    );
}
