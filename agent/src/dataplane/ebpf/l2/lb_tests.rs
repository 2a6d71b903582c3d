//! The load-balancer family against a recording of the maps: a Service's VIP on every subnet
//! of its VPC shares one backend group, a backend change rewrites only that group, the ports of
//! switches with VIPs are listed in `LB_SWITCHES`, and everything goes with the last VIP; the
//! socket-level balancer's pods are listed by their namespace.

use std::net::Ipv4Addr;

use ovnbpf_common::{
    lb::{LB_HASH_IP_SRC, LB_VIP_HAIRPIN, LbAddressKey, LbVipKey, SockLbClient},
    maps::{LbAddresses, LbBackends, LbMembers, LbSwitches, LbVips, SockLbClients},
};

use super::super::L2State;
use crate::dataplane::ebpf::maps::Recorder;
use crate::pipeline::ir::{IrDiff, IrEntry, LbBackend, LbHashField, LbProtocol, LbVip, PortKind};

const SUBNET_A: u32 = 5;
const SUBNET_B: u32 = 6;

fn service(datapath: u32, backends: &[[u8; 4]]) -> IrEntry {
    IrEntry::LoadBalancer {
        datapath,
        vip: Box::new(LbVip {
            vip: Ipv4Addr::new(10, 96, 0, 10),
            port: Some(80),
            protocol: Some(LbProtocol::Tcp),
            backends: backends
                .iter()
                .map(|ip| LbBackend {
                    ip: Ipv4Addr::from(*ip),
                    port: Some(8080),
                })
                .collect(),
            hash_fields: vec![LbHashField::IpSrc],
            reject: false,
        }),
    }
}

fn apply(state: &mut L2State, maps: &mut Recorder, added: Vec<IrEntry>, removed: Vec<IrEntry>) {
    state.apply(&IrDiff { added, removed });
    state.flush(maps).unwrap();
}

fn vip_key(datapath: u32) -> LbVipKey {
    LbVipKey {
        datapath,
        vip: u32::from_ne_bytes([10, 96, 0, 10]),
        port: 80,
        protocol: 6,
        padding: 0,
    }
}

#[test]
fn a_service_on_two_subnets_shares_its_backends_and_lists_the_switches() {
    let mut state = L2State::new("node1");
    state.set_interface("client", Some(40));
    let mut maps = Recorder::default();
    let client = IrEntry::Port {
        datapath: SUBNET_A,
        key: 3,
        name: "client".into(),
        kind: PortKind::Vif {
            chassis: Some("node1".into()),
        },
        addresses: Vec::new(),
        port_security: Vec::new(),
    };
    apply(&mut state, &mut maps, vec![client], vec![]);
    assert!(maps.table::<LbSwitches>().is_empty());
    let three = [[10, 0, 1, 2], [10, 0, 1, 3], [10, 0, 2, 2]];
    apply(
        &mut state,
        &mut maps,
        vec![
            service(SUBNET_A, &three),
            service(SUBNET_B, &three),
            IrEntry::LbHairpin { datapath: SUBNET_A },
        ],
        vec![],
    );
    let vips = maps.table::<LbVips>();
    let (a, b) = (vips[&vip_key(SUBNET_A)], vips[&vip_key(SUBNET_B)]);
    assert_eq!(
        (a.count, a.group),
        (3, b.group),
        "one group for both switches"
    );
    assert_eq!(a.flags, LB_HASH_IP_SRC | LB_VIP_HAIRPIN);
    assert_eq!(b.flags, LB_HASH_IP_SRC, "subnet-b has no hairpin stages");
    assert_eq!(maps.table::<LbBackends>().len(), 3);
    assert_eq!(maps.table::<LbMembers>().len(), 3);
    assert_eq!(a.affinity_seconds, 0);
    assert_eq!(maps.table::<LbAddresses>().len(), 2);
    assert!(maps.table::<LbAddresses>().contains_key(&LbAddressKey {
        datapath: SUBNET_A,
        ip: u32::from_ne_bytes([10, 96, 0, 10]),
    }));
    // Both switches have VIPs: replies delivered to their ports are translated back.
    let switches = maps.table::<LbSwitches>();
    assert_eq!(switches.len(), 2, "{switches:?}");
    assert_eq!(switches[&SUBNET_A], 1);

    // A backend leaves on both switches: the new group is written once, the old one goes.
    maps.reset_writes();
    let two = [[10, 0, 1, 2], [10, 0, 2, 2]];
    apply(
        &mut state,
        &mut maps,
        vec![service(SUBNET_A, &two), service(SUBNET_B, &two)],
        vec![service(SUBNET_A, &three), service(SUBNET_B, &three)],
    );
    let backends = maps.table::<LbBackends>();
    assert_eq!(backends.len(), 2, "{backends:?}");
    let vips = maps.table::<LbVips>();
    assert_eq!(vips[&vip_key(SUBNET_A)].count, 2);
    let group = vips[&vip_key(SUBNET_A)].group;
    assert!(backends.keys().all(|key| key.group == group));
    assert_eq!(maps.writes_to::<LbAddresses>(), 0, "the addresses stayed");
    assert!(maps.writes_to::<LbBackends>() <= 5, "{}", maps.writes());
    let members = maps.table::<LbMembers>();
    assert_eq!(members.len(), 2);
    assert!(members.keys().all(|key| key.group == group));
    // Session affinity: the VIP carries its timeout, on the switch whose flows say it.
    apply(
        &mut state,
        &mut maps,
        vec![IrEntry::LbAffinity {
            datapath: SUBNET_B,
            vip: Ipv4Addr::new(10, 96, 0, 10),
            port: Some(80),
            protocol: Some(LbProtocol::Tcp),
            timeout: 10800,
        }],
        vec![],
    );
    let vips = maps.table::<LbVips>();
    assert_eq!(vips[&vip_key(SUBNET_B)].affinity_seconds, 10800);
    assert_eq!(vips[&vip_key(SUBNET_A)].affinity_seconds, 0);

    // The Service goes: nothing is left.
    apply(
        &mut state,
        &mut maps,
        vec![],
        vec![service(SUBNET_A, &two), service(SUBNET_B, &two)],
    );
    assert!(maps.table::<LbVips>().is_empty());
    assert!(maps.table::<LbBackends>().is_empty());
    assert!(maps.table::<LbMembers>().is_empty());
    assert!(maps.table::<LbAddresses>().is_empty());
    assert!(maps.table::<LbSwitches>().is_empty());
}

/// An agent restarting over a running datapath gives each backend list the group id the
/// previous one gave it, whatever order the Services arrive in, so no VIP points at another
/// Service's backends while the groups are rewritten.
#[test]
fn group_ids_follow_the_backend_list_not_the_order() {
    let services = [
        [[10, 0, 1, 2], [10, 0, 1, 3]],
        [[10, 0, 2, 2], [10, 0, 2, 3]],
        [[10, 0, 3, 2], [10, 0, 3, 3]],
    ];
    let entry = |index: usize| {
        let IrEntry::LoadBalancer { datapath, mut vip } = service(SUBNET_A, &services[index])
        else {
            unreachable!()
        };
        vip.vip = Ipv4Addr::new(10, 96, 0, 20 + index as u8);
        IrEntry::LoadBalancer { datapath, vip }
    };
    let groups = |order: [usize; 3]| {
        let mut state = L2State::new("node1");
        let mut maps = Recorder::default();
        apply(
            &mut state,
            &mut maps,
            order.iter().map(|&i| entry(i)).collect(),
            vec![],
        );
        let mut groups: Vec<(u32, u32)> = maps
            .table::<LbVips>()
            .iter()
            .map(|(key, vip)| (key.vip, vip.group))
            .collect();
        groups.sort_unstable();
        groups
    };
    let first = groups([0, 1, 2]);
    assert_eq!(first.len(), 3);
    assert_eq!(groups([2, 0, 1]), first);
    assert_eq!(groups([1, 2, 0]), first);
}

/// The client as the compiler emits it on switch `datapath`, with its address.
fn addressed_client(datapath: u32) -> IrEntry {
    IrEntry::Port {
        datapath,
        key: 3,
        name: "client".into(),
        kind: PortKind::Vif {
            chassis: Some("node1".into()),
        },
        addresses: vec![crate::net::LspAddress {
            mac: [0x0a, 0x58, 0x0a, 0, 1, 10],
            ipv4: vec![crate::net::Ipv4Prefix {
                network: Ipv4Addr::new(10, 0, 1, 10),
                length: 32,
            }],
            ipv6: Vec::new(),
        }],
        port_security: Vec::new(),
    }
}

/// With `--socket-lb`, a plugged pod whose namespace is known is listed by its namespace's
/// cookie with its switch and address; its switch changing rewrites that entry, unplugging it
/// removes it; without the balancer nothing is listed.
#[test]
fn the_socket_balancer_knows_plugged_pods_by_their_namespace() {
    const NETNS: u64 = 0x1234_5678_9abc;
    let clients = |maps: &Recorder| maps.table::<SockLbClients>();
    let mut state = L2State::new("node1");
    state.set_socket_lb(true);
    let mut maps = Recorder::default();
    state.set_interface("client", Some(40));
    state.set_netns("client", Some(NETNS));
    apply(
        &mut state,
        &mut maps,
        vec![addressed_client(SUBNET_A)],
        vec![],
    );
    let listed = SockLbClient {
        datapath: SUBNET_A,
        ip: u32::from_ne_bytes([10, 0, 1, 10]),
    };
    assert_eq!(clients(&maps), [(NETNS, listed)].into());

    apply(
        &mut state,
        &mut maps,
        vec![addressed_client(SUBNET_B)],
        vec![addressed_client(SUBNET_A)],
    );
    let moved = SockLbClient {
        datapath: SUBNET_B,
        ..listed
    };
    assert_eq!(clients(&maps), [(NETNS, moved)].into());

    state.set_interface("client", None);
    state.set_netns("client", None);
    state.flush(&mut maps).unwrap();
    assert!(clients(&maps).is_empty());

    let mut off = L2State::new("node1");
    let mut off_maps = Recorder::default();
    off.set_interface("client", Some(40));
    off.set_netns("client", Some(NETNS));
    apply(
        &mut off,
        &mut off_maps,
        vec![addressed_client(SUBNET_A)],
        vec![],
    );
    assert!(clients(&off_maps).is_empty());
}
