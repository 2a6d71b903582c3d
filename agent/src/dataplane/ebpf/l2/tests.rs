use super::*;
use ovnbpf_common::FLOOD_SLOT_REMOTE;
use std::{collections::BTreeSet, net::Ipv4Addr};

use crate::dataplane::ebpf::maps::{Recorder, Slot, Writable};
use crate::pipeline::ir::PortKind;
use ovnbpf_common::{
    ARP_ANSWER_PROVIDER, ARP_ANSWER_ROUTER, ArpAnswer, FIB_LOCAL, FIB_REMOTE, FIB_ROUTER,
    FIB_SERVICE_MONITOR, FLOOD_MAX_LOCAL, FibEntry, FloodGroup, FloodMemberKey, FloodRoles,
    LOCAL_PORT_VETH_PEER, LocalPort, Localnet, NatTarget, PodPort, ProviderKey, REMOTE_ENCAP_CSUM,
    RemoteEncap,
    maps::{
        ArpResponder, FloodGroups, FloodMembers, FloodRolesMap, L2Fib, Localnets, MapDef,
        NatByExternal, NatByLogical, PodPorts, PortSecurity6Map, PortSecurityMap, ProviderNetworks,
        RemoteEncaps, SwitchRouters, TunnelPorts,
    },
};

/// Views of the recorded maps keyed as the assertions read them.
impl Recorder {
    fn pod_ports(&self) -> HashMap<u32, PodPort> {
        self.table::<PodPorts>()
    }
    fn port_security(&self) -> HashMap<u32, PortSecurity> {
        self.table::<PortSecurityMap>()
    }
    fn tunnel_ports(&self) -> HashMap<(u32, u32), LocalPort> {
        self.table_by::<TunnelPorts, _>(|k| (k.datapath, k.port))
    }
    fn fib(&self) -> HashMap<(u32, Mac), FibEntry> {
        self.table_by::<L2Fib, _>(|k| (k.datapath, k.mac))
    }
    fn arp(&self) -> HashMap<(u32, u32), ArpAnswer> {
        self.table_by::<ArpResponder, _>(|k| (k.datapath, k.ip))
    }
    fn groups(&self) -> HashMap<(u32, u32), FloodGroup> {
        self.table_by::<FloodGroups, _>(|k| (k.datapath, k.group))
    }
    fn members(&self) -> HashMap<FloodMemberKey, u32> {
        self.table::<FloodMembers>()
    }
    fn roles(&self) -> HashMap<u32, FloodRoles> {
        self.table::<FloodRolesMap>()
    }
    fn localnets(&self) -> HashMap<u32, Localnet> {
        self.table::<Localnets>()
    }
    fn providers(&self) -> HashMap<ProviderKey, u32> {
        self.table::<ProviderNetworks>()
    }
    fn switch_routers(&self) -> HashMap<u32, ovnbpf_common::SwitchRouter> {
        self.table::<SwitchRouters>()
    }
    fn nat_by_logical(&self) -> HashMap<(u32, u32), NatTarget> {
        self.table_by::<NatByLogical, _>(|k| (k.datapath, k.ip))
    }
    fn nat_by_external(&self) -> HashMap<(u32, u32), NatTarget> {
        self.table_by::<NatByExternal, _>(|k| (k.datapath, k.ip))
    }
    /// Writes to the flood-group and flood-member maps.
    fn flood_writes(&self) -> usize {
        self.writes_to::<FloodGroups>() + self.writes_to::<FloodMembers>()
    }

    /// What a program walking (datapath, group) now would reach: the slots below the counts
    /// that are present (a missing one is skipped, as the program does).
    fn walk(&self, datapath: u32, group: u32) -> (Vec<u32>, Vec<u32>) {
        let (groups, members) = (self.groups(), self.members());
        let Some(counts) = groups.get(&(datapath, group)) else {
            return (Vec::new(), Vec::new());
        };
        let slots = |count: u32, flag: u32| -> Vec<u32> {
            (0..count)
                .filter_map(|index| {
                    members.get(&FloodMemberKey {
                        datapath,
                        group,
                        slot: index | flag,
                    })
                })
                .copied()
                .collect()
        };
        (
            slots(counts.local_count, 0),
            slots(counts.remote_count, FLOOD_SLOT_REMOTE),
        )
    }

    /// A flood group as the kernel walks it: the local and remote slots below the counts, each
    /// of which must be present.
    fn flood_members(&self, datapath: u32, group: u32) -> (Vec<u32>, Vec<u32>) {
        let groups = self.groups();
        let Some(counts) = groups.get(&(datapath, group)) else {
            return (Vec::new(), Vec::new());
        };
        let members = self.members();
        let slots = |count: u32, flag: u32| -> Vec<u32> {
            (0..count)
                .map(|index| {
                    let key = FloodMemberKey {
                        datapath,
                        group,
                        slot: index | flag,
                    };
                    *members
                        .get(&key)
                        .unwrap_or_else(|| panic!("slot {key:?} below the count is missing"))
                })
                .collect()
        };
        (
            slots(counts.local_count, 0),
            slots(counts.remote_count, FLOOD_SLOT_REMOTE),
        )
    }
}

const DP: u32 = 5;
const LOCAL_MAC: Mac = [0x0a, 0x58, 0x0a, 0, 1, 2];
const REMOTE_MAC: Mac = [0x0a, 0x58, 0x0a, 0, 1, 3];
const LOCAL_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
const REMOTE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);
const NODE2: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 11);

fn port(name: &str, key: u32, chassis: Option<&str>) -> IrEntry {
    IrEntry::Port {
        datapath: DP,
        key,
        name: name.into(),
        kind: PortKind::Vif {
            chassis: chassis.map(str::to_string),
        },
        addresses: Vec::new(),
        port_security: Vec::new(),
    }
}

/// What the compiler emits for one pod: port, FIB entry, ARP answer and its owner skip.
fn pod(name: &str, key: u32, chassis: Option<&str>, mac: Mac, ip: Ipv4Addr) -> Vec<IrEntry> {
    vec![
        port(name, key, chassis),
        IrEntry::L2Fib {
            datapath: DP,
            mac,
            port: name.into(),
        },
        IrEntry::ArpReply {
            datapath: DP,
            ip,
            mac,
        },
        IrEntry::ArpReplySkip {
            datapath: DP,
            ip,
            inport: name.into(),
        },
    ]
}

fn added(entries: Vec<IrEntry>) -> IrDiff {
    IrDiff {
        added: entries,
        removed: Vec::new(),
    }
}

fn two_pods() -> (L2State, Recorder) {
    let mut state = L2State::new("node1");
    state.set_interface("a1", Some(40));
    let mut entries = vec![encap("node2", NODE2)];
    entries.extend(pod("a1", 1, Some("node1"), LOCAL_MAC, LOCAL_IP));
    entries.extend(pod("a2", 2, Some("node2"), REMOTE_MAC, REMOTE_IP));
    state.apply(&added(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    (state, maps)
}

/// Chassis `chassis`'s Geneve endpoint, as the compiler emits it from its Encap row.
fn encap(chassis: &str, ip: Ipv4Addr) -> IrEntry {
    IrEntry::ChassisEncap {
        chassis: chassis.into(),
        ip: ip.into(),
        csum: false,
    }
}

/// An endpoint whose Encap asks for outer checksums gets a `REMOTE_ENCAPS` entry, keyed by its
/// IP; one that stops asking, or goes, loses it; one that never asked has none. Each change
/// writes that one key.
#[test]
fn endpoints_that_ask_for_checksums_are_listed_by_their_ip() {
    let (mut state, mut maps) = two_pods();
    let listed = |maps: &Recorder| maps.table::<RemoteEncaps>();
    assert!(listed(&maps).is_empty(), "node2 asked for nothing");
    let key = u32::from_ne_bytes(NODE2.octets());
    let with_csum = |csum| IrEntry::ChassisEncap {
        chassis: "node2".into(),
        ip: NODE2.into(),
        csum,
    };
    let writes = maps.writes_to::<RemoteEncaps>();
    state.apply(&IrDiff {
        added: vec![with_csum(true)],
        removed: vec![with_csum(false)],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(
        listed(&maps),
        HashMap::from([(
            key,
            RemoteEncap {
                flags: REMOTE_ENCAP_CSUM,
                ip6: [0; 16],
            }
        )])
    );
    assert_eq!(maps.writes_to::<RemoteEncaps>(), writes + 1);
    // The FIB still reaches node2 there.
    assert_eq!(maps.fib()[&(DP, REMOTE_MAC)].remote_ip, key);

    state.apply(&IrDiff {
        added: vec![with_csum(false)],
        removed: vec![with_csum(true)],
    });
    state.flush(&mut maps).unwrap();
    assert!(listed(&maps).is_empty(), "{:?}", listed(&maps));

    state.apply(&added(vec![IrEntry::ChassisEncap {
        chassis: "node3".into(),
        ip: Ipv4Addr::new(172, 31, 0, 30).into(),
        csum: true,
    }]));
    state.flush(&mut maps).unwrap();
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![IrEntry::ChassisEncap {
            chassis: "node3".into(),
            ip: Ipv4Addr::new(172, 31, 0, 30).into(),
            csum: true,
        }],
    });
    state.flush(&mut maps).unwrap();
    assert!(listed(&maps).is_empty(), "a gone endpoint keeps no entry");
}

/// The IR carries the chassis's endpoints: a remote pod's FIB entry follows its chassis's Encap
/// row as it moves, holds while a second endpoint of the chassis remains, and goes with the last.
#[test]
fn remote_pods_follow_their_chassis_encap_from_the_ir() {
    let (mut state, mut maps) = two_pods();
    let remote_ip = |maps: &Recorder| maps.fib().get(&(DP, REMOTE_MAC)).map(|e| e.remote_ip);
    let moved = Ipv4Addr::new(172, 31, 0, 99);
    state.apply(&IrDiff {
        added: vec![encap("node2", moved)],
        removed: vec![encap("node2", NODE2)],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(remote_ip(&maps), Some(u32::from_ne_bytes(moved.octets())));

    // A second, lower endpoint is preferred; removing it falls back to the first.
    let lower = Ipv4Addr::new(172, 31, 0, 5);
    state.apply(&added(vec![encap("node2", lower)]));
    state.flush(&mut maps).unwrap();
    assert_eq!(remote_ip(&maps), Some(u32::from_ne_bytes(lower.octets())));
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![encap("node2", lower)],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(remote_ip(&maps), Some(u32::from_ne_bytes(moved.octets())));

    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![encap("node2", moved)],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(remote_ip(&maps), None, "no endpoint: not reachable");
    assert!(maps.fib().contains_key(&(DP, LOCAL_MAC)));
}

/// Over an IPv6 underlay a remote pod's FIB entry names its chassis's IPv6 endpoint by key, and
/// that key's `REMOTE_ENCAPS` entry holds the address (an endpoint asking nothing too); a chassis
/// with both families is reached at its IPv6 endpoint, one with only an IPv4 endpoint is not
/// reachable; the endpoint's entry goes with it.
#[test]
fn over_an_ipv6_underlay_remote_pods_are_reached_at_their_chassis_ipv6_endpoint() {
    let mut state = L2State::new("node1");
    state.set_ipv6_underlay(true);
    state.set_interface("a1", Some(40));
    let node2_ip6: std::net::Ipv6Addr = "fd00:172::b".parse().unwrap();
    let encap6 = |ip: std::net::Ipv6Addr| IrEntry::ChassisEncap {
        chassis: "node2".into(),
        ip: ip.into(),
        csum: false,
    };
    let mut entries = vec![encap("node2", NODE2), encap6(node2_ip6)];
    entries.extend(pod("a1", 1, Some("node1"), LOCAL_MAC, LOCAL_IP));
    entries.extend(pod("a2", 2, Some("node2"), REMOTE_MAC, REMOTE_IP));
    state.apply(&added(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let remote = maps.fib()[&(DP, REMOTE_MAC)];
    assert_eq!((remote.kind, remote.port), (FIB_REMOTE, 2));
    let endpoints = maps.table::<RemoteEncaps>();
    assert_eq!(
        endpoints.get(&remote.remote_ip),
        Some(&RemoteEncap {
            flags: 0,
            ip6: node2_ip6.octets(),
        }),
        "the FIB's endpoint key holds node2's IPv6 address: {endpoints:?}"
    );
    assert_eq!(endpoints.len(), 1, "no entry for the IPv4 endpoint");

    // Only its IPv4 endpoint left: node2 is not reachable over this underlay.
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![encap6(node2_ip6)],
    });
    state.flush(&mut maps).unwrap();
    assert!(!maps.fib().contains_key(&(DP, REMOTE_MAC)));
    assert!(maps.table::<RemoteEncaps>().is_empty());
    assert!(maps.fib().contains_key(&(DP, LOCAL_MAC)));
}

#[test]
fn local_and_remote_pods_fill_every_map() {
    let (state, maps) = two_pods();
    assert_eq!(state.pending(), 0);
    assert_eq!(
        maps.pod_ports(),
        HashMap::from([(
            40,
            PodPort {
                datapath: DP,
                port: 1
            }
        )])
    );
    assert_eq!(
        maps.tunnel_ports(),
        HashMap::from([(
            (DP, 1),
            LocalPort {
                ifindex: 40,
                flags: LOCAL_PORT_VETH_PEER
            }
        )])
    );
    assert_eq!(maps.fib()[&(DP, LOCAL_MAC)].kind, FIB_LOCAL);
    assert_eq!(maps.fib()[&(DP, LOCAL_MAC)].ifindex, 40);
    let remote = maps.fib()[&(DP, REMOTE_MAC)];
    assert_eq!(
        (remote.kind, remote.remote_ip, remote.port),
        (FIB_REMOTE, u32::from_ne_bytes(NODE2.octets()), 2)
    );
    let answer = maps.arp()[&(DP, u32::from_ne_bytes(REMOTE_IP.octets()))];
    assert_eq!((answer.mac, answer.owner_port), (REMOTE_MAC, 2));
}

#[test]
fn a_pod_moving_to_another_chassis_rewrites_only_its_fib_entry() {
    let (mut state, mut maps) = two_pods();
    let node3 = Ipv4Addr::new(172, 31, 0, 12);
    state.set_encap("node3", Some(node3.into()));
    assert_eq!(state.pending(), 0, "no port on node3 yet");
    state.apply(&IrDiff {
        added: vec![port("a2", 2, Some("node3"))],
        removed: vec![port("a2", 2, Some("node2"))],
    });
    maps.reset_writes();
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 1, "just the FIB entry of a2");
    assert_eq!(
        maps.fib()[&(DP, REMOTE_MAC)].remote_ip,
        u32::from_ne_bytes(node3.octets())
    );
    // Node2's encap IP changing now touches nothing.
    state.set_encap("node2", Some(Ipv4Addr::new(172, 31, 0, 99).into()));
    maps.reset_writes();
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 0);
    // Node3's does: one write.
    state.set_encap("node3", Some(Ipv4Addr::new(172, 31, 0, 13).into()));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 1);
}

#[test]
fn unplugging_and_removing_pods_empties_the_maps() {
    let (mut state, mut maps) = two_pods();
    state.set_interface("a1", None);
    state.flush(&mut maps).unwrap();
    assert!(maps.pod_ports().is_empty() && maps.tunnel_ports().is_empty());
    assert!(
        !maps.fib().contains_key(&(DP, LOCAL_MAC)),
        "no veth, no local FIB entry"
    );

    let mut all = pod("a1", 1, Some("node1"), LOCAL_MAC, LOCAL_IP);
    all.extend(pod("a2", 2, Some("node2"), REMOTE_MAC, REMOTE_IP));
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: all,
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.fib().is_empty() && maps.arp().is_empty(), "{maps:?}");
}

#[test]
fn unbound_ports_and_unknown_chassis_get_no_fib_entry() {
    let mut state = L2State::new("node1");
    let mut entries = pod("p", 3, None, REMOTE_MAC, REMOTE_IP);
    entries.extend(pod("q", 4, Some("node9"), LOCAL_MAC, LOCAL_IP));
    state.apply(&added(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    assert!(maps.fib().is_empty(), "{:?}", maps.fib());
    // The switch still answers ARP for them (as OVN's ARP responder does).
    assert_eq!(maps.arp().len(), 2);
    // node9 appears: q becomes reachable.
    state.set_encap("node9", Some(NODE2.into()));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.fib()[&(DP, LOCAL_MAC)].kind, FIB_REMOTE);
}

#[test]
fn port_security_of_local_pods_reaches_the_kernel_form() {
    let mut state = L2State::new("node1");
    state.set_interface("a1", Some(40));
    let secured = IrEntry::Port {
        datapath: DP,
        key: 1,
        name: "a1".into(),
        kind: PortKind::Vif {
            chassis: Some("node1".into()),
        },
        addresses: Vec::new(),
        port_security: vec![
            "0a:58:0a:00:01:02 10.0.1.2 10.0.1.20/32 fd00::2"
                .parse()
                .unwrap(),
        ],
    };
    state.apply(&added(vec![secured.clone()]));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let security = maps.port_security()[&40];
    assert_eq!(security.mac, LOCAL_MAC);
    assert_eq!(security.ip_count, 2);
    assert_eq!(
        security.flags,
        ovnbpf_common::PORT_SECURITY_IPV4 | ovnbpf_common::PORT_SECURITY_IPV6
    );
    assert_eq!(
        &security.ips[..2],
        &[
            u32::from_ne_bytes([10, 0, 1, 2]),
            u32::from_ne_bytes([10, 0, 1, 20])
        ]
    );
    let security6 = maps.table::<PortSecurity6Map>()[&40];
    assert_eq!(security6.ip_count, 1);
    assert_eq!(
        security6.ips[0],
        "fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets()
    );
    // An entry listing IPv4 only has no IPv6 entry (and says so: IPv6 is then refused).
    let ipv4_only = IrEntry::Port {
        datapath: DP,
        key: 1,
        name: "a1".into(),
        kind: PortKind::Vif {
            chassis: Some("node1".into()),
        },
        addresses: Vec::new(),
        port_security: vec!["0a:58:0a:00:01:02 10.0.1.2".parse().unwrap()],
    };
    state.apply(&IrDiff {
        added: vec![ipv4_only.clone()],
        removed: vec![secured.clone()],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.port_security()[&40].flags,
        ovnbpf_common::PORT_SECURITY_IPV4
    );
    assert!(maps.table::<PortSecurity6Map>().is_empty());
    state.apply(&IrDiff {
        added: vec![secured.clone()],
        removed: vec![ipv4_only],
    });
    state.flush(&mut maps).unwrap();
    // Dropping port security (lsp-set-port-security with nothing) removes the entry.
    state.apply(&IrDiff {
        added: vec![port("a1", 1, Some("node1"))],
        removed: vec![secured],
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.port_security().is_empty());
    assert!(maps.table::<PortSecurity6Map>().is_empty());
    assert_eq!(maps.pod_ports().len(), 1);
}

#[test]
fn a_restarted_agent_rewrites_nothing_away_and_sweeps_only_what_is_gone() {
    // A previous agent programmed a1, a2 and a pod "gone" that was deleted while no agent ran.
    let (_, mut maps) = two_pods();
    let gone_mac: Mac = [0x0a, 0x58, 0x0a, 0, 1, 9];
    let gone_ip = Ipv4Addr::new(10, 0, 1, 9);
    let mut previous = L2State::new("node1");
    previous.set_interface("a1", Some(40));
    previous.set_interface("gone", Some(41));
    previous.set_encap("node2", Some(NODE2.into()));
    let mut entries = pod("a1", 1, Some("node1"), LOCAL_MAC, LOCAL_IP);
    entries.extend(pod("a2", 2, Some("node2"), REMOTE_MAC, REMOTE_IP));
    entries.extend(pod("gone", 9, Some("node1"), gone_mac, gone_ip));
    previous.apply(&added(entries));
    previous.flush(&mut maps).unwrap();
    let before = (maps.pod_ports().len(), maps.fib().len(), maps.arp().len());
    assert_eq!(before, (2, 3, 3));

    // The new agent learns a1 and a2 first, without the chassis encap yet: a2's FIB entry is
    // not desired yet, but nothing it did not install is removed by a flush.
    let mut restarted = L2State::new("node1");
    restarted.set_interface("a1", Some(40));
    let mut entries = pod("a1", 1, Some("node1"), LOCAL_MAC, LOCAL_IP);
    entries.extend(pod("a2", 2, Some("node2"), REMOTE_MAC, REMOTE_IP));
    restarted.apply(&added(entries));
    restarted.flush(&mut maps).unwrap();
    assert_eq!(
        (maps.pod_ports().len(), maps.fib().len(), maps.arp().len()),
        before,
        "a flush only overwrites"
    );
    assert_eq!(maps.fib()[&(DP, REMOTE_MAC)].kind, FIB_REMOTE);

    restarted.set_encap("node2", Some(NODE2.into()));
    restarted.flush(&mut maps).unwrap();
    maps.reset_writes();
    let removed = restarted.sweep(&mut maps).unwrap();
    // gone's pod port, tunnel port, FIB entry and ARP answer.
    assert_eq!(removed, 4, "{maps:?}");
    assert_eq!(maps.writes(), 4);
    assert!(!maps.pod_ports().contains_key(&41));
    assert!(!maps.fib().contains_key(&(DP, gone_mac)));
    assert!(
        !maps
            .arp()
            .contains_key(&(DP, u32::from_ne_bytes(gone_ip.octets())))
    );
    assert_eq!(maps.fib().len(), 2, "a1 and a2 stay");
    assert_eq!(restarted.sweep(&mut maps).unwrap(), 0, "idempotent");
}

const FLOOD: u32 = 32768;

fn flood_group(members: &[u32]) -> Vec<IrEntry> {
    let mut entries = vec![
        IrEntry::FloodGroup {
            datapath: DP,
            key: FLOOD,
            name: "_MC_flood".into(),
        },
        IrEntry::FloodMulticast {
            datapath: DP,
            group: "_MC_flood".into(),
        },
    ];
    entries.extend(members.iter().map(|&port| IrEntry::FloodMember {
        datapath: DP,
        group: FLOOD,
        port,
    }));
    entries
}

#[test]
fn a_flood_group_lists_local_veths_and_each_remote_chassis_once() {
    let (mut state, mut maps) = two_pods();
    // a3 is a second pod on node2: node2 must still get a single copy.
    state.apply(&added(pod(
        "a3",
        3,
        Some("node2"),
        [0x0a, 0x58, 0x0a, 0, 1, 4],
        Ipv4Addr::new(10, 0, 1, 4),
    )));
    state.apply(&added(flood_group(&[1, 2, 3])));
    state.flush(&mut maps).unwrap();
    let node2 = u32::from_ne_bytes(NODE2.octets());
    assert_eq!(maps.flood_members(DP, FLOOD), (vec![40], vec![node2]));
    assert_eq!(
        maps.roles()[&DP],
        FloodRoles {
            broadcast: FLOOD,
            unknown: 0,
            router_originated: 0,
        }
    );
    // The group the switch's routers flood their ARP requests to (`_MC_flood_l2`), by its key.
    let router_flood = vec![
        IrEntry::FloodGroup {
            datapath: DP,
            key: FLOOD + 4,
            name: "_MC_flood_l2".into(),
        },
        IrEntry::RouterOriginatedFlood {
            datapath: DP,
            router_macs: vec![[0x0a, 0x58, 0, 0, 0, 1]],
            group: "_MC_flood_l2".into(),
        },
    ];
    state.apply(&added(router_flood.clone()));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.roles()[&DP].router_originated, FLOOD + 4);
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: router_flood,
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.roles()[&DP].router_originated, 0);

    // Node2's encap IP changes: one write, its slot.
    maps.reset_writes();
    let moved = Ipv4Addr::new(172, 31, 0, 50);
    state.set_encap("node2", Some(moved.into()));
    state.flush(&mut maps).unwrap();
    let moved = u32::from_ne_bytes(moved.octets());
    assert_eq!(maps.flood_members(DP, FLOOD), (vec![40], vec![moved]));
    assert_eq!(maps.flood_writes(), 1);
    // The local pod unplugged: the group keeps only the remote chassis.
    state.set_interface("a1", None);
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.flood_members(DP, FLOOD), (vec![], vec![moved]));
    // Every member gone: no entry, and the sweep leaves the maps as the state has them.
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: flood_group(&[1, 2, 3]),
    });
    state.flush(&mut maps).unwrap();
    assert!(
        maps.groups().is_empty() && maps.members().is_empty() && maps.roles().is_empty(),
        "{maps:?}"
    );
    assert_eq!(state.sweep(&mut maps).unwrap(), 0);
}

/// A switch of `local` pods on node1 (keys 1.., veths 1001..) and one pod on each of `remote`
/// other chassis (keys 10001.., encap IPs 172.31.x.y), all in its broadcast group.
fn large_switch(local: u32, remote: u32) -> (L2State, Vec<u32>, Vec<u32>) {
    let mut state = L2State::new("node1");
    let mut entries = Vec::new();
    let mut members = Vec::new();
    let mut veths = Vec::new();
    let mut encaps = Vec::new();
    for key in 1..=local {
        let name = format!("p{key}");
        state.set_interface(&name, Some(1000 + key));
        entries.push(port(&name, key, Some("node1")));
        members.push(key);
        veths.push(1000 + key);
    }
    for index in 0..remote {
        let (key, chassis) = (10_001 + index, format!("node-{index}"));
        let ip = Ipv4Addr::new(172, 31, (index / 250) as u8, (index % 250 + 1) as u8);
        state.set_encap(&chassis, Some(ip.into()));
        entries.push(port(&format!("r{key}"), key, Some(&chassis)));
        members.push(key);
        encaps.push(u32::from_ne_bytes(ip.octets()));
    }
    entries.extend(flood_group(&members));
    state.apply(&added(entries));
    encaps.sort_unstable();
    (state, veths, encaps)
}

#[test]
fn a_large_group_is_installed_whole_and_one_member_change_writes_only_its_slot() {
    let (mut state, veths, encaps) = large_switch(256, 1_000);
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let (local, remote) = maps.flood_members(DP, FLOOD);
    assert_eq!(local, veths, "every local pod, lowest member keys first");
    assert_eq!(remote, encaps, "each chassis once");
    assert_eq!(state.truncated_groups(), 0);

    // A pod in the middle leaves: the last slot moves into its place, the count drops, the last
    // slot goes: 3 writes.
    maps.reset_writes();
    state.set_interface("p10", None);
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.flood_writes(), 3);
    let (local, _) = maps.flood_members(DP, FLOOD);
    assert_eq!(local.len(), 255);
    assert_eq!(local[9], 1256, "the last member took the leaver's slot");
    assert!(!local.contains(&1010));
    let mut sorted = local.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 255, "no member twice");

    // The last slot's member leaves: the count and the slot, 2 writes.
    maps.reset_writes();
    state.set_interface("p255", None);
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.flood_writes(), 2);
    assert_eq!(maps.flood_members(DP, FLOOD).0.len(), 254);

    // A pod joins: its slot, then the count.
    maps.reset_writes();
    state.set_interface("p10", Some(2010));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.flood_writes(), 2);
    let (local, _) = maps.flood_members(DP, FLOOD);
    assert_eq!(local.last(), Some(&2010));

    // A pod's veth changes (re-plugged): its slot only.
    maps.reset_writes();
    state.set_interface("p1", Some(3001));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.flood_writes(), 1);
    assert_eq!(maps.flood_members(DP, FLOOD).0[0], 3001);

    // A chassis leaves (its only pod unbinds), another's encap moves.
    maps.reset_writes();
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![IrEntry::FloodMember {
            datapath: DP,
            group: FLOOD,
            port: 10_001,
        }],
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.flood_writes() <= 3, "{}", maps.flood_writes());
    let (_, remote) = maps.flood_members(DP, FLOOD);
    assert_eq!(remote.len(), 999);
    assert!(!remote.contains(&encaps[0]));

    // A restarted agent adopts the maps: it rewrites the slots then the count, and its sweep
    // leaves exactly the slots it installed (it removes the old agent's entries of the veths
    // it does not know).
    let (mut restarted, _, _) = large_switch(256, 1_000);
    restarted.flush(&mut maps).unwrap();
    assert_eq!(
        maps.flood_members(DP, FLOOD),
        (veths.clone(), encaps.clone())
    );
    restarted.sweep(&mut maps).unwrap();
    assert_eq!(maps.flood_members(DP, FLOOD), (veths, encaps));
    assert_eq!(maps.members().len(), 1_256);
}

#[test]
fn a_shrinking_group_after_a_restart_is_swept_to_its_slots() {
    let (mut state, _, _) = large_switch(20, 5);
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    // The new agent sees fewer members: the old slots beyond its count are left for the sweep.
    let (mut restarted, veths, encaps) = large_switch(10, 2);
    restarted.flush(&mut maps).unwrap();
    assert_eq!(maps.flood_members(DP, FLOOD), (veths, encaps));
    assert_eq!(maps.members().len(), 25);
    restarted.sweep(&mut maps).unwrap();
    assert_eq!(
        maps.members().len(),
        12,
        "the 13 slots beyond the counts are gone"
    );
    assert_eq!(maps.flood_members(DP, FLOOD).0.len(), 10);
}

#[test]
fn between_any_two_writes_a_walk_sees_only_members_and_every_unchanged_one() {
    let (mut state, veths, _) = large_switch(6, 0);
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    // Each change: what leaves, what joins (veth numbers as in `large_switch`).
    let changes: [(&str, Option<u32>); 4] = [
        ("p2", None),       // from the middle: swap with the last, count, delete
        ("p6", None),       // the last: count, delete
        ("p2", Some(2002)), // joins: slot, count
        ("p1", Some(3001)), // its veth changes: the slot in place
    ];
    let mut members: BTreeSet<u32> = veths.iter().copied().collect();
    for (port, veth) in changes {
        let old = members.clone();
        let key: u32 = port[1..].parse().unwrap();
        members.remove(&(1000 + key));
        members.remove(&(2000 + key));
        members.remove(&(3000 + key));
        if let Some(veth) = veth {
            members.insert(veth);
        }
        let mut watched = Watched {
            maps,
            states: Vec::new(),
        };
        state.set_interface(port, veth);
        state.flush(&mut watched).unwrap();
        let Watched { maps: back, states } = watched;
        maps = back;
        assert!(!states.is_empty(), "{port}: no flood write");
        assert!(states.len() <= 3, "{port}: {} writes", states.len());
        let unchanged: BTreeSet<u32> = old.intersection(&members).copied().collect();
        for (local, _) in &states {
            let seen: BTreeSet<u32> = local.iter().copied().collect();
            assert!(
                seen.iter().all(|v| old.contains(v) || members.contains(v)),
                "{port}: a frame would reach a non-member: {local:?}"
            );
            assert!(
                unchanged.is_subset(&seen),
                "{port}: a frame would miss an unchanged member: {local:?}"
            );
        }
        let (local, _) = maps.flood_members(DP, FLOOD);
        assert_eq!(local.iter().copied().collect::<BTreeSet<_>>(), members);
        assert_eq!(local.len(), members.len(), "each once");
    }
}

#[test]
fn groups_beyond_the_agent_limit_are_reported_not_silently_cut() {
    let mut state = L2State::new("node1");
    let mut entries = Vec::new();
    let members: Vec<u32> = (1..=(FLOOD_MAX_LOCAL + 3)).collect();
    for &key in &members {
        let name = format!("p{key}");
        state.set_interface(&name, Some(100 + key));
        entries.push(port(&name, key, Some("node1")));
    }
    entries.extend(flood_group(&members));
    state.apply(&added(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let (local, _) = maps.flood_members(DP, FLOOD);
    assert_eq!(local.len(), FLOOD_MAX_LOCAL as usize);
    assert_eq!(local[0], 101, "lowest keys first");
    assert_eq!(state.truncated_groups(), 1);
}

/// A patch port (a router port, or its switch-side peer) with `address` as the compiler types
/// it: "router" is a keyword, no address.
fn patch(datapath: u32, key: u32, name: &str, peer: &str, address: &str) -> IrEntry {
    IrEntry::Port {
        datapath,
        key,
        name: name.into(),
        kind: PortKind::Patch { peer: peer.into() },
        addresses: address.parse().ok().into_iter().collect(),
        port_security: Vec::new(),
    }
}

/// A switch's router port (key 2 on `DP`, "ls-lr") patched to port 1 of router `router`
/// ("lr-ls", 0a:58:63:5f:04:aa 10.0.1.1/24).
fn router_patches(router: u32) -> [IrEntry; 2] {
    [
        patch(DP, 2, "ls-lr", "lr-ls", "router"),
        patch(router, 1, "lr-ls", "ls-lr", "0a:58:63:5f:04:aa 10.0.1.1/24"),
    ]
}

#[test]
fn router_addresses_are_flagged_for_the_kernel_router() {
    const ROUTER_DP: u32 = 9;
    const ROUTER_MAC: Mac = [0x0a, 0x58, 0x63, 0x5f, 0x04, 0xaa];
    let gateway = Ipv4Addr::new(10, 0, 1, 1);
    let mut state = L2State::new("node1");
    let mut entries = router_patches(ROUTER_DP).to_vec();
    entries.extend([
        IrEntry::L2Fib {
            datapath: DP,
            mac: ROUTER_MAC,
            port: "ls-lr".into(),
        },
        IrEntry::ArpForRouterIp {
            datapath: DP,
            ip: gateway,
            router_port: "ls-lr".into(),
            group: None,
        },
    ]);
    // northd also lists the router's address among the switch's ARP replies.
    entries.extend(
        pod("ls-lr", 2, None, ROUTER_MAC, gateway)
            .into_iter()
            .skip(2),
    );
    state.apply(&added(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let key = (DP, u32::from_ne_bytes(gateway.octets()));
    assert_eq!(maps.arp()[&key].mac, ROUTER_MAC);
    assert_eq!(maps.arp()[&key].flags, ARP_ANSWER_ROUTER);
    let fib = maps.fib()[&(DP, ROUTER_MAC)];
    assert_eq!(
        (fib.kind, fib.ifindex, fib.port),
        (FIB_ROUTER, ROUTER_DP, 2)
    );

    // The switch stops sending ARP for the address to the router: the answer stays (northd's
    // ARP reply), the router flag goes, one write.
    maps.reset_writes();
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![IrEntry::ArpForRouterIp {
            datapath: DP,
            ip: gateway,
            router_port: "ls-lr".into(),
            group: None,
        }],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 1);
    assert_eq!(maps.arp()[&key].flags, 0);
}

#[test]
fn an_underlay_switch_meets_its_provider_nic_with_its_vlan() {
    let mut state = L2State::new("node1");
    let localnet = |tag: Option<u16>| IrEntry::Port {
        datapath: DP,
        key: 7,
        name: "localnet.subnet-u".into(),
        kind: PortKind::Localnet {
            network_name: "physnet1".into(),
            tag,
        },
        // "unknown" is a keyword, no address.
        addresses: Vec::new(),
        port_security: Vec::new(),
    };
    state.apply(&added(vec![localnet(Some(100))]));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    assert!(
        maps.localnets().is_empty(),
        "no bridge mapping for physnet1 yet"
    );
    state.set_providers(HashMap::from([("physnet1".to_string(), 30)]));
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.localnets()[&DP],
        Localnet {
            ifindex: 30,
            vlan: 100
        }
    );
    assert_eq!(
        maps.providers()[&ProviderKey {
            ifindex: 30,
            vlan: 100
        }],
        DP
    );
    // The VLAN changes: the old provider entry goes.
    state.apply(&IrDiff {
        added: vec![localnet(Some(200))],
        removed: vec![localnet(Some(100))],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.providers().len(), 1);
    assert_eq!(
        maps.providers()[&ProviderKey {
            ifindex: 30,
            vlan: 200
        }],
        DP
    );
    assert_eq!(state.sweep(&mut maps).unwrap(), 0);
}

/// A [`Recorder`] that notes the group (DP, FLOOD) as the kernel would walk it after each write
/// to the flood maps.
struct Watched {
    maps: Recorder,
    states: Vec<(Vec<u32>, Vec<u32>)>,
}

impl Watched {
    fn note<M: MapDef>(&mut self) {
        if M::NAME == FloodGroups::NAME || M::NAME == FloodMembers::NAME {
            self.states.push(self.maps.walk(DP, FLOOD));
        }
    }
}

impl Maps for Watched {
    fn set<M: Writable>(&mut self, slot: Slot<M>, value: M::Value) -> Result<(), EbpfError> {
        self.maps.set::<M>(slot, value)?;
        self.note::<M>();
        Ok(())
    }
    fn remove<M: Writable>(&mut self, slot: Slot<M>) -> Result<(), EbpfError> {
        self.maps.remove::<M>(slot)?;
        self.note::<M>();
        Ok(())
    }
    fn keys<M: Writable>(&self) -> Result<Vec<Slot<M>>, EbpfError> {
        self.maps.keys::<M>()
    }
    fn get<M: Writable>(&self, slot: Slot<M>) -> Result<Option<M::Value>, EbpfError> {
        self.maps.get::<M>(slot)
    }
}

#[test]
fn the_nd_responder_answers_like_the_arp_responder_with_the_router_flag_and_the_owner() {
    use ovnbpf_common::{Ipv6Key, maps::NdResponder};
    use std::net::Ipv6Addr;
    const ROUTER_DP: u32 = 9;
    const ROUTER_MAC: Mac = [0x0a, 0x58, 0x63, 0x5f, 0x04, 0xaa];
    let pod_ip: Ipv6Addr = "fd00::5".parse().unwrap();
    let router_ip: Ipv6Addr = "fe80::858:63ff:fe5f:4aa".parse().unwrap();
    let mut state = L2State::new("node1");
    let owner = IrEntry::NdReplySkip {
        datapath: DP,
        ip: pod_ip,
        inport: "a1".into(),
    };
    let mut entries = router_patches(ROUTER_DP).to_vec();
    entries.extend([
        port("a1", 1, Some("node1")),
        IrEntry::NdReply {
            datapath: DP,
            ip: pod_ip,
            mac: LOCAL_MAC,
        },
        owner.clone(),
        IrEntry::NdReply {
            datapath: DP,
            ip: router_ip,
            mac: ROUTER_MAC,
        },
        IrEntry::NdForRouterIp {
            datapath: DP,
            ip: router_ip,
            router_port: "ls-lr".into(),
            group: None,
        },
    ]);
    state.apply(&added(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let key = |ip: Ipv6Addr| Ipv6Key {
        datapath: DP,
        ip: ip.octets(),
    };
    let answers = maps.table::<NdResponder>();
    let pod = answers[&key(pod_ip)];
    assert_eq!((pod.mac, pod.flags, pod.owner_port), (LOCAL_MAC, 0, 1));
    let router = answers[&key(router_ip)];
    assert_eq!((router.mac, router.flags), (ROUTER_MAC, ARP_ANSWER_ROUTER));
    // IPv4's responder gets nothing from IPv6 entries.
    assert!(maps.arp().is_empty());
    // Without its owner, the pod's address is answered for every port: one write.
    maps.reset_writes();
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![owner],
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.writes(), 1);
    assert_eq!(maps.table::<NdResponder>()[&key(pod_ip)].owner_port, 0);
}

#[test]
fn a_switchs_service_monitor_mac_is_the_agents_until_northd_drops_it() {
    const MONITOR_MAC: Mac = [0xb2, 0xfb, 0x7f, 0x27, 0x57, 0x01];
    let (mut state, mut maps) = two_pods();
    let answers = IrEntry::ServiceMonitorAnswers {
        datapath: DP,
        mac: MONITOR_MAC,
    };
    state.apply(&added(vec![answers.clone()]));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.fib()[&(DP, MONITOR_MAC)].kind, FIB_SERVICE_MONITOR);
    state.apply(&IrDiff {
        added: vec![],
        removed: vec![answers],
    });
    state.flush(&mut maps).unwrap();
    assert!(!maps.fib().contains_key(&(DP, MONITOR_MAC)));
}

/// A distributed NAT rule (a FIP of pod "e2" on router 9's gateway port "lr-ls", whose switch
/// is `DP`): where e2 is plugged, both NAT entries, the answer for the FIP with e2's MAC (also
/// to the provider network) and the FIB entry handing frames to that MAC to the router; where
/// e2 is not (unplugged, or on another chassis), none of them, and the FIP is not answered
/// (though the switch sends ARP for it to the router); the rule gone, nothing.
#[test]
fn a_distributed_nat_rule_is_installed_where_its_pod_is() {
    const ROUTER: u32 = 9;
    const FIP_MAC: Mac = [0x0a, 0x58, 0x85, 0x1a, 0xd0, 0x96];
    let (fip, logical) = (Ipv4Addr::new(172, 30, 0, 11), Ipv4Addr::new(10, 60, 2, 3));
    let rule = IrEntry::DistributedNat {
        datapath: ROUTER,
        gateway_port: "lr-ls".into(),
        logical_ip: logical,
        external_ip: fip,
        external_mac: FIP_MAC,
        logical_port: "e2".into(),
    };
    let mut state = L2State::new("node1");
    let mut entries = router_patches(ROUTER).to_vec();
    entries.extend([
        IrEntry::Port {
            datapath: 77,
            key: 3,
            name: "e2".into(),
            kind: PortKind::Vif {
                chassis: Some("node1".into()),
            },
            addresses: Vec::new(),
            port_security: Vec::new(),
        },
        // northd sends ARP for the FIP on the switch to the router (every chassis).
        IrEntry::ArpForRouterIp {
            datapath: DP,
            ip: fip,
            router_port: "ls-lr".into(),
            group: None,
        },
        rule.clone(),
    ]);
    state.apply(&added(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    let answer_key = (DP, u32::from_ne_bytes(fip.octets()));
    assert!(maps.nat_by_logical().is_empty(), "e2 is not plugged yet");
    assert!(
        !maps.arp().contains_key(&answer_key),
        "the FIP is not answered"
    );
    assert!(!maps.fib().contains_key(&(DP, FIP_MAC)));

    state.set_interface("e2", Some(41));
    state.flush(&mut maps).unwrap();
    let key = |ip: Ipv4Addr| (ROUTER, u32::from_ne_bytes(ip.octets()));
    let out = maps.nat_by_logical()[&key(logical)];
    assert_eq!(
        (out.ip, out.switch, out.mac),
        (u32::from_ne_bytes(fip.octets()), DP, FIP_MAC)
    );
    let inward = maps.nat_by_external()[&key(fip)];
    assert_eq!(
        (inward.ip, inward.switch, inward.mac),
        (u32::from_ne_bytes(logical.octets()), DP, FIP_MAC)
    );
    assert_eq!(maps.arp()[&answer_key].mac, FIP_MAC);
    assert_eq!(maps.arp()[&answer_key].flags, ARP_ANSWER_PROVIDER);
    let fib = maps.fib()[&(DP, FIP_MAC)];
    assert_eq!(
        (fib.kind, fib.ifindex, fib.port),
        (FIB_ROUTER, ROUTER, 2),
        "frames to the FIP's MAC go to the router"
    );

    // Unplugged: nothing of the rule stays.
    state.set_interface("e2", None);
    state.flush(&mut maps).unwrap();
    assert!(maps.nat_by_logical().is_empty() && maps.nat_by_external().is_empty());
    assert!(!maps.arp().contains_key(&answer_key));
    assert!(!maps.fib().contains_key(&(DP, FIP_MAC)));

    // Plugged again, then the rule goes.
    state.set_interface("e2", Some(41));
    state.flush(&mut maps).unwrap();
    assert_eq!(maps.nat_by_logical().len(), 1);
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![rule],
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.nat_by_logical().is_empty() && maps.nat_by_external().is_empty());
    assert!(!maps.fib().contains_key(&(DP, FIP_MAC)));
    assert_eq!(
        maps.arp()[&answer_key].flags,
        ARP_ANSWER_ROUTER,
        "back to northd's answer of the router's"
    );
}

/// A switch's router (the one its broadcast ARP reaches, for MAC learning): the router behind
/// its router port, with that port's MAC, whichever of the pair comes first; gone with either.
#[test]
fn a_switch_names_the_router_its_broadcast_arp_reaches() {
    const ROUTER: u32 = 9;
    let [switch_side, router_side] = router_patches(ROUTER);
    let mut state = L2State::new("node1");
    let mut maps = Recorder::default();
    // The router's port first, then the switch's.
    state.apply(&added(vec![router_side.clone()]));
    state.flush(&mut maps).unwrap();
    assert!(maps.switch_routers().is_empty());
    state.apply(&added(vec![switch_side.clone()]));
    state.flush(&mut maps).unwrap();
    let router = maps.switch_routers()[&DP];
    assert_eq!(
        (router.router, router.mac),
        (ROUTER, [0x0a, 0x58, 0x63, 0x5f, 0x04, 0xaa])
    );
    assert!(
        !maps.switch_routers().contains_key(&ROUTER),
        "a router is no switch"
    );
    // The router's port goes: the switch floods to no router.
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![router_side],
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.switch_routers().is_empty());
}

/// Router 9's gateway port "lr-ls" (on switch `DP`, by its port "ls-lr") with chassisredirect
/// port "cr-lr-ls" (key 3), bound to `chassis`; the router's other port "lr-pods" (key 4,
/// 10.1.0.1) faces the pods' switch 6.
fn gateway_router(chassis: Option<&str>) -> Vec<IrEntry> {
    let mut entries = router_patches(9).to_vec();
    entries.extend([
        patch(6, 1, "pods-lr", "lr-pods", "router"),
        patch(9, 4, "lr-pods", "pods-lr", "0a:58:63:5f:04:bb 10.1.0.1/24"),
        IrEntry::Port {
            datapath: 9,
            key: 3,
            name: "cr-lr-ls".into(),
            kind: PortKind::ChassisRedirect {
                chassis: chassis.map(str::to_string),
            },
            addresses: Vec::new(),
            port_security: Vec::new(),
        },
        IrEntry::ArpForRouterIp {
            datapath: DP,
            ip: Ipv4Addr::new(10, 0, 1, 1),
            router_port: "ls-lr".into(),
            group: None,
        },
    ]);
    entries
}

/// A gateway port is carried where its chassisredirect port is active: on another chassis,
/// its routes are tunnelled there (the chassis's endpoint, the port's key, the router ports
/// packets enter by); here, they go on to the switch, what others tunnel to the port leaves by
/// that switch, the provider network's frames to its MAC enter the router and its address is
/// answered to the provider network; with a centralized SNAT rule, a `dnat` rule or a router
/// load balancer's VIP, the NAT stage both ways; fenced by centralized NAT, or unbound,
/// nothing.
#[test]
fn a_gateway_port_is_carried_where_its_chassisredirect_port_is_active() {
    use ovnbpf_common::{
        FIB_ROUTER_GATEWAY, FIB_ROUTER_SNAT, GATEWAY_SNAT, GatewayEgress, GatewayKey,
        GatewayRedirect,
        maps::{GatewayEgressMap, GatewayInports, GatewayRedirects, SnatRules},
    };
    const ROUTER_MAC: Mac = [0x0a, 0x58, 0x63, 0x5f, 0x04, 0xaa];
    let gateway = IrEntry::GatewayPort {
        datapath: 9,
        port: "lr-ls".into(),
        redirect: "cr-lr-ls".into(),
    };
    let fence = IrEntry::CentralizedNat {
        datapath: 9,
        redirect: "cr-lr-ls".into(),
    };
    let ip = |address: Ipv4Addr| u32::from_ne_bytes(address.octets());
    let inports =
        |maps: &Recorder| -> HashMap<u32, u32> { maps.table_by::<GatewayInports, _>(|key| key.ip) };
    let answer_flags = |maps: &Recorder| maps.arp()[&(DP, ip(Ipv4Addr::new(10, 0, 1, 1)))].flags;
    let mut state = L2State::new("node1");
    let mut entries = gateway_router(Some("node2"));
    entries.extend([encap("node2", NODE2), gateway.clone()]);
    state.apply(&added(entries));
    let mut maps = Recorder::default();
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.table::<GatewayRedirects>()[&GatewayKey {
            router: 9,
            switch: DP
        }],
        GatewayRedirect {
            remote_ip: ip(NODE2),
            port: 3,
            switch: DP,
            flags: 0,
        }
    );
    assert_eq!(
        inports(&maps),
        HashMap::from([
            (ip(Ipv4Addr::new(10, 1, 0, 1)), 4),
            (ip(Ipv4Addr::new(10, 0, 1, 1)), 1)
        ])
    );
    assert!(maps.table::<GatewayEgressMap>().is_empty());
    assert!(!maps.fib().contains_key(&(DP, ROUTER_MAC)));
    assert_eq!(answer_flags(&maps), ARP_ANSWER_ROUTER);

    // Elected here.
    state.apply(&IrDiff {
        added: gateway_router(Some("node1")).split_off(4),
        removed: gateway_router(Some("node2")).split_off(4),
    });
    state.flush(&mut maps).unwrap();
    assert_eq!(
        maps.table::<GatewayRedirects>()[&GatewayKey {
            router: 9,
            switch: DP
        }]
            .remote_ip,
        0
    );
    assert!(inports(&maps).is_empty());
    assert_eq!(
        maps.table_by::<GatewayEgressMap, _>(|key| (key.datapath, key.port))[&(9, 3)],
        GatewayEgress {
            switch: DP,
            switch_port: 2,
            flags: 0,
            reserved: 0,
        }
    );
    let fib = maps.fib()[&(DP, ROUTER_MAC)];
    assert_eq!(
        (fib.kind, fib.ifindex, fib.flags, fib.remote_ip, fib.port),
        (
            FIB_ROUTER,
            9,
            FIB_ROUTER_GATEWAY,
            ip(Ipv4Addr::new(10, 0, 1, 1)),
            2
        )
    );
    assert_eq!(answer_flags(&maps), ARP_ANSWER_ROUTER | ARP_ANSWER_PROVIDER);

    // A centralized SNAT rule, applied here: its prefix in SNAT_RULES, the NAT stage asked
    // for on both ways, its external address answered with the port's MAC.
    let snat = IrEntry::CentralizedSnat {
        datapath: 9,
        gateway_port: "lr-ls".into(),
        logical: crate::net::Ipv4Prefix {
            network: Ipv4Addr::new(10, 1, 0, 0),
            length: 16,
        },
        external: Ipv4Addr::new(10, 0, 1, 100),
    };
    state.apply(&added(vec![snat.clone()]));
    state.flush(&mut maps).unwrap();
    let rules = maps.table_by::<SnatRules, _>(|(key, length)| {
        (
            u32::from_be(key.router),
            u32::from_be(key.switch),
            key.ip,
            length,
        )
    });
    assert_eq!(
        rules[&(9, DP, ip(Ipv4Addr::new(10, 1, 0, 0)), 80)].external,
        ip(Ipv4Addr::new(10, 0, 1, 100))
    );
    assert_eq!(
        maps.table::<GatewayRedirects>()[&GatewayKey {
            router: 9,
            switch: DP
        }]
            .flags,
        GATEWAY_SNAT
    );
    assert_eq!(
        maps.table_by::<GatewayEgressMap, _>(|key| (key.datapath, key.port))[&(9, 3)].flags,
        GATEWAY_SNAT
    );
    assert_eq!(
        maps.fib()[&(DP, ROUTER_MAC)].flags,
        FIB_ROUTER_GATEWAY | FIB_ROUTER_SNAT
    );
    let external_answer = maps.arp()[&(DP, ip(Ipv4Addr::new(10, 0, 1, 100)))];
    assert_eq!(
        (external_answer.mac, external_answer.flags),
        (ROUTER_MAC, ARP_ANSWER_PROVIDER)
    );
    // Its address is a NAT address of the router (for the NAT stage's hairpin and way in).
    let eip = maps.nat_by_external()[&(9, ip(Ipv4Addr::new(10, 0, 1, 100)))];
    assert_eq!(
        (eip.ip, eip.flags),
        (
            0,
            ovnbpf_common::NAT_CENTRALIZED | ovnbpf_common::NAT_SNAT_ADDRESS
        )
    );
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![snat],
    });
    state.flush(&mut maps).unwrap();
    assert!(
        maps.table_by::<SnatRules, _>(|(key, length)| (key.ip, length))
            .is_empty()
    );
    assert_eq!(
        maps.table::<GatewayRedirects>()[&GatewayKey {
            router: 9,
            switch: DP
        }]
            .flags,
        0
    );
    assert!(maps.nat_by_external().is_empty());
    assert!(
        !maps
            .arp()
            .contains_key(&(DP, ip(Ipv4Addr::new(10, 0, 1, 100))))
    );

    // A `dnat` rule (no SNAT twin): its address to its pod in NAT_BY_EXTERNAL, stateful (the
    // NAT stage translates the way in and records the connection), the pod itself in no
    // NAT_BY_LOGICAL entry (what it opens is not translated by the rule), the NAT stage asked
    // for on both ways, the address answered with the port's MAC.
    let (dnat_ip, dnat_pod) = (Ipv4Addr::new(10, 0, 1, 102), Ipv4Addr::new(10, 1, 0, 5));
    let dnat = IrEntry::CentralizedDnat {
        datapath: 9,
        gateway_port: "lr-ls".into(),
        external: dnat_ip,
        logical: dnat_pod,
    };
    state.apply(&added(vec![dnat.clone()]));
    state.flush(&mut maps).unwrap();
    let target = maps.nat_by_external()[&(9, ip(dnat_ip))];
    assert_eq!(
        (target.ip, target.flags, target.mac),
        (
            ip(dnat_pod),
            ovnbpf_common::NAT_CENTRALIZED | ovnbpf_common::NAT_STATEFUL,
            ROUTER_MAC
        )
    );
    assert!(!maps.nat_by_logical().contains_key(&(9, ip(dnat_pod))));
    assert_eq!(
        maps.table::<GatewayRedirects>()[&GatewayKey {
            router: 9,
            switch: DP
        }]
            .flags,
        GATEWAY_SNAT
    );
    assert_eq!(
        maps.fib()[&(DP, ROUTER_MAC)].flags,
        FIB_ROUTER_GATEWAY | FIB_ROUTER_SNAT
    );
    assert_eq!(maps.arp()[&(DP, ip(dnat_ip))].mac, ROUTER_MAC);
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![dnat],
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.nat_by_external().is_empty());
    assert_eq!(
        maps.table::<GatewayRedirects>()[&GatewayKey {
            router: 9,
            switch: DP
        }]
            .flags,
        0
    );
    assert!(!maps.arp().contains_key(&(DP, ip(dnat_ip))));

    // A router load balancer's VIP (an `OvnDnatRule`): its LB_VIPS entry keyed by the router
    // (no switch's VIP address: LB_ADDRESSES and LB_SWITCHES untouched), the NAT stage asked
    // for both ways, the VIP answered with the port's MAC; all gone with it.
    let vip_ip = Ipv4Addr::new(10, 0, 1, 110);
    let router_vip = IrEntry::RouterLoadBalancer {
        datapath: 9,
        redirect: "cr-lr-ls".into(),
        vip: Box::new(crate::pipeline::ir::LbVip {
            vip: vip_ip,
            port: Some(8080),
            protocol: Some(crate::pipeline::ir::LbProtocol::Tcp),
            backends: vec![crate::pipeline::ir::LbBackend {
                ip: Ipv4Addr::new(10, 1, 0, 5),
                port: Some(80),
            }],
            hash_fields: Vec::new(),
            reject: false,
        }),
    };
    state.apply(&added(vec![router_vip.clone()]));
    state.flush(&mut maps).unwrap();
    let vips = maps.table::<ovnbpf_common::maps::LbVips>();
    let kernel_vip = vips[&ovnbpf_common::lb::LbVipKey {
        datapath: 9,
        vip: ip(vip_ip),
        port: 8080,
        protocol: 6,
        padding: 0,
    }];
    assert_eq!(kernel_vip.count, 1);
    assert!(maps.table::<ovnbpf_common::maps::LbAddresses>().is_empty());
    assert!(maps.table::<ovnbpf_common::maps::LbSwitches>().is_empty());
    assert_eq!(
        maps.table::<GatewayRedirects>()[&GatewayKey {
            router: 9,
            switch: DP
        }]
            .flags,
        GATEWAY_SNAT
    );
    assert_eq!(
        maps.fib()[&(DP, ROUTER_MAC)].flags,
        FIB_ROUTER_GATEWAY | FIB_ROUTER_SNAT
    );
    assert_eq!(maps.arp()[&(DP, ip(vip_ip))].mac, ROUTER_MAC);
    state.apply(&IrDiff {
        added: Vec::new(),
        removed: vec![router_vip],
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.table::<ovnbpf_common::maps::LbVips>().is_empty());
    assert!(maps.table::<ovnbpf_common::maps::LbBackends>().is_empty());
    assert_eq!(
        maps.table::<GatewayRedirects>()[&GatewayKey {
            router: 9,
            switch: DP
        }]
            .flags,
        0
    );
    assert!(!maps.arp().contains_key(&(DP, ip(vip_ip))));

    // Centralized NAT fences it: nothing of the gateway stays.
    state.apply(&added(vec![fence.clone()]));
    state.flush(&mut maps).unwrap();
    assert!(maps.table::<GatewayRedirects>().is_empty());
    assert!(maps.table::<GatewayEgressMap>().is_empty());
    assert!(!maps.fib().contains_key(&(DP, ROUTER_MAC)));
    assert_eq!(answer_flags(&maps), ARP_ANSWER_ROUTER);

    // Unfenced but bound nowhere: nothing either.
    state.apply(&IrDiff {
        added: gateway_router(None).split_off(4),
        removed: [gateway_router(Some("node1")).split_off(4), vec![fence]].concat(),
    });
    state.flush(&mut maps).unwrap();
    assert!(maps.table::<GatewayRedirects>().is_empty() && inports(&maps).is_empty());
}
