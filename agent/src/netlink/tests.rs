//! The requests against the kernel itself, in two network namespaces of the test's own (a "node"
//! and a "pod", made on a dedicated thread and gone with it), checked with `ip`, `tc` and
//! `/proc/sys` from inside them rather than with this module's own parsing. Needs root.

use std::{
    fs::File,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
    process::Command,
    time::Duration,
};

use super::*;

/// Runs `test` on a new thread in a fresh "node" namespace, handing it a fresh "pod" namespace.
fn in_namespaces(test: impl FnOnce(&File) + Send) {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                unshare_network();
                let pod = File::open("/proc/thread-self/ns/net").expect("the pod namespace");
                unshare_network();
                test(&pod);
            })
            .join()
            .expect("the test thread");
    });
}

fn unshare_network() {
    // SAFETY: changes the calling thread's network namespace only: a thread of this test.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "unshare(CLONE_NEWNET) (these tests need root): {}",
        io::Error::last_os_error()
    );
}

/// A socket of namespace `namespace`, opened on a thread that joined it.
fn socket_in(namespace: &File) -> Socket {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: the namespace of this short-lived thread only.
                let rc = unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns: {}", io::Error::last_os_error());
                Socket::open().expect("a socket in the namespace")
            })
            .join()
            .expect("the socket thread")
    })
}

/// The output of `command` run in the calling thread's namespace (a child inherits it), or in
/// `namespace`.
fn run(namespace: Option<&File>, command: &str) -> String {
    let mut line = Vec::new();
    if let Some(namespace) = namespace {
        line.extend([
            "nsenter".to_string(),
            // The child's own descriptors close at exec: the namespace through ours.
            format!(
                "--net=/proc/{}/fd/{}",
                std::process::id(),
                namespace.as_raw_fd()
            ),
        ]);
    }
    line.extend(command.split_whitespace().map(str::to_string));
    let output = Command::new(&line[0])
        .args(&line[1..])
        .output()
        .expect("running the command");
    assert!(
        output.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A veth pair `a`–`b` in the calling thread's namespace, both ends down; `a`'s index.
fn pair(node: &Socket, a: &str, b: &str) -> u32 {
    node.create_segmenter_pair(a, b, 1500).unwrap();
    index_of(a).unwrap()
}

/// A veth pair born across two namespaces, isolated, brought up and awaited, addressed and
/// routed, then deleted: each step as `ip` and `/proc/sys` see it.
#[test]
fn a_pod_nic_is_built_and_removed_through_netlink() {
    in_namespaces(|pod| {
        // A node forwards: new links inherit it, unless the agent turns it off on them.
        std::fs::write("/proc/sys/net/ipv4/conf/default/forwarding", "1").unwrap();
        let node = Socket::open().unwrap();
        let mac = [0x0a, 0x58, 0x0a, 0x10, 0x00, 0x05];
        node.create_veth(&VethPair {
            host: "nlt_host",
            peer: "eth0",
            peer_mac: mac,
            mtu: 1400,
            peer_netns: pod,
        })
        .unwrap();
        let error = node
            .create_veth(&VethPair {
                host: "nlt_host",
                peer: "eth1",
                peer_mac: mac,
                mtu: 1400,
                peer_netns: pod,
            })
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EEXIST), "{error}");
        let host_index = index_of("nlt_host").unwrap();
        assert!(run(None, "ip -o link show nlt_host").contains("mtu 1400"));
        let pod_link = run(Some(pod), "ip -o link show eth0");
        assert!(pod_link.contains("0a:58:0a:10:00:05"), "{pod_link}");
        assert!(pod_link.contains("mtu 1400"), "{pod_link}");
        assert!(node.peer_in_other_namespace(host_index).unwrap());

        let sysctl = |key: &str| {
            std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/nlt_host/{key}"))
                .unwrap()
                .trim()
                .to_string()
        };
        assert_eq!(sysctl("forwarding"), "1");
        node.isolate_and_up("nlt_host").unwrap();
        assert_eq!(sysctl("forwarding"), "0");
        assert_eq!(sysctl("arp_ignore"), "8");
        let pod_socket = socket_in(pod);
        // `ip`, not /sys/class/net: sysfs shows the namespace it was mounted in.
        let pod_index: u32 = pod_link.split(':').next().unwrap().parse().unwrap();
        assert!(!node.is_up(host_index).unwrap(), "the peer is still down");
        pod_socket.set_up(pod_index).unwrap();
        assert!(
            node.wait_up(host_index, Duration::from_secs(5)).unwrap(),
            "the host end comes up once its peer is"
        );
        assert!(
            pod_socket
                .wait_up(pod_index, Duration::from_secs(5))
                .unwrap()
        );
        assert!(run(None, "ip -o link show nlt_host").contains("state UP"));
        let link_local = run(None, "ip -6 -o addr show dev nlt_host");
        assert!(
            link_local.is_empty(),
            "no IPv6 address generated: {link_local}"
        );

        pod_socket
            .add_address(pod_index, Ipv4Addr::new(10, 16, 0, 5).into(), 16)
            .unwrap();
        pod_socket
            .add_address(pod_index, "fd00:10:16::5".parse().unwrap(), 64)
            .unwrap();
        let addresses = run(Some(pod), "ip -o addr show dev eth0");
        assert!(addresses.contains("inet 10.16.0.5/16"), "{addresses}");
        assert!(addresses.contains("inet6 fd00:10:16::5/64"), "{addresses}");
        assert!(
            addresses
                .lines()
                .any(|line| line.contains("fd00:10:16::5/64")
                    && line.contains("nodad")
                    && !line.contains("tentative")),
            "no DAD: {addresses}"
        );
        let gateway = IpAddr::from(Ipv4Addr::new(10, 16, 0, 1));
        pod_socket
            .replace_route(pod_index, Ipv4Addr::UNSPECIFIED.into(), 0, Some(gateway))
            .unwrap();
        pod_socket
            .replace_route(pod_index, Ipv4Addr::new(192, 168, 7, 0).into(), 24, None)
            .unwrap();
        let routes = run(Some(pod), "ip -4 route show");
        assert!(
            routes.contains("default via 10.16.0.1 dev eth0"),
            "{routes}"
        );
        assert!(
            routes.contains("192.168.7.0/24 dev eth0 scope link"),
            "{routes}"
        );
        let error = pod_socket
            .replace_route(
                pod_index,
                Ipv4Addr::UNSPECIFIED.into(),
                0,
                Some(Ipv6Addr::LOCALHOST.into()),
            )
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            pod_socket
                .next_hop(Ipv4Addr::new(8, 8, 8, 8).into())
                .unwrap(),
            (pod_index, gateway)
        );
        let on_link = IpAddr::from(Ipv4Addr::new(192, 168, 7, 9));
        assert_eq!(pod_socket.next_hop(on_link).unwrap(), (pod_index, on_link));
        pod_socket.resolve_neighbour(pod_index, on_link).unwrap();
        let neighbours = run(Some(pod), "ip -4 neigh show dev eth0");
        assert!(neighbours.contains("192.168.7.9"), "{neighbours}");

        assert!(node.delete_link_named("nlt_host").unwrap());
        assert!(!node.delete_link_named("nlt_host").unwrap());
        assert!(
            run(Some(pod), "ip -o link show")
                .lines()
                .all(|l| !l.contains("eth0"))
        );
    });
}

/// A link that never comes up is waited for no longer than asked.
#[test]
fn waiting_for_a_link_that_stays_down_ends_at_the_timeout() {
    in_namespaces(|_| {
        let node = Socket::open().unwrap();
        let index = pair(&node, "nlt_a", "nlt_b");
        node.set_up(index).unwrap();
        let started = std::time::Instant::now();
        assert!(!node.wait_up(index, Duration::from_millis(200)).unwrap());
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(!node.peer_in_other_namespace(index).unwrap());
        node.set_up(index_of("nlt_b").unwrap()).unwrap();
        assert!(node.wait_up(index, Duration::from_secs(5)).unwrap());
    });
}

/// Static routes with a preferred source: set, listed (only the link's `proto static` ones),
/// replaced, deleted.
#[test]
fn static_routes_are_set_listed_and_deleted() {
    in_namespaces(|_| {
        let node = Socket::open().unwrap();
        let index = pair(&node, "nlt_n0", "nlt_n1");
        node.set_up(index).unwrap();
        node.set_up(index_of("nlt_n1").unwrap()).unwrap();
        node.add_address(index, Ipv4Addr::new(100, 64, 0, 2).into(), 16)
            .unwrap();
        let route = StaticRoute {
            destination: Ipv4Addr::new(10, 16, 0, 0),
            prefix_len: 16,
            gateway: Ipv4Addr::new(100, 64, 0, 1),
            source: Ipv4Addr::new(100, 64, 0, 2),
        };
        assert!(node.wait_up(index, Duration::from_secs(5)).unwrap());
        node.replace_static_route(index, &route).unwrap();
        node.replace_route(index, Ipv4Addr::new(10, 99, 0, 0).into(), 16, None)
            .unwrap();
        let shown = run(None, "ip -4 route show proto static");
        assert!(
            shown.contains("10.16.0.0/16 via 100.64.0.1 dev nlt_n0 src 100.64.0.2"),
            "{shown}"
        );
        assert_eq!(node.static_routes(index).unwrap(), [route]);
        assert_eq!(node.static_routes(index + 100).unwrap(), []);
        let moved = StaticRoute {
            gateway: Ipv4Addr::new(100, 64, 0, 9),
            ..route
        };
        node.replace_static_route(index, &moved).unwrap();
        assert_eq!(node.static_routes(index).unwrap(), [moved]);
        assert!(
            node.delete_static_route(index, route.destination, 16)
                .unwrap()
        );
        assert!(
            !node
                .delete_static_route(index, route.destination, 16)
                .unwrap()
        );
        assert_eq!(node.static_routes(index).unwrap(), []);
    });
}

/// A SCHED_CLS program `r0 = 0; exit`, loaded through the bpf syscall.
fn trivial_classifier() -> OwnedFd {
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
    let instructions: [u64; 2] = [
        u64::from_le_bytes([0xb7, 0, 0, 0, 0, 0, 0, 0]),
        u64::from_le_bytes([0x95, 0, 0, 0, 0, 0, 0, 0]),
    ];
    let license = c"GPL";
    // union bpf_attr for BPF_PROG_LOAD: prog_type, insn_cnt, insns, license; the rest zero.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&BPF_PROG_TYPE_SCHED_CLS.to_ne_bytes());
    attr[4..8].copy_from_slice(&2u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&(instructions.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    // SAFETY: the attribute buffer and the memory it points to outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            attr.as_mut_ptr(),
            attr.len() as u32,
        )
    };
    assert!(fd >= 0, "BPF_PROG_LOAD: {}", io::Error::last_os_error());
    // SAFETY: a new descriptor nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// A direct-action cls_bpf filter on clsact ingress: created, read back by name, replaced in
/// place, deleted; what `tc` shows at each step.
#[test]
fn an_ingress_filter_is_attached_read_replaced_and_deleted() {
    in_namespaces(|_| {
        let node = Socket::open().unwrap();
        let index = pair(&node, "nlt_f0", "nlt_f1");
        let filter = IngressFilter {
            priority: 1,
            handle: 1,
            name: "ovnbpf_test",
        };
        assert_eq!(node.ingress_filter_name(index, &filter).unwrap(), None);
        assert!(!node.delete_ingress_filter(index, &filter).unwrap());
        node.ensure_clsact(index).unwrap();
        node.ensure_clsact(index).unwrap();
        let program = trivial_classifier();
        node.set_ingress_filter(index, &filter, program.as_fd())
            .unwrap();
        let shown = run(None, "tc filter show dev nlt_f0 ingress");
        assert!(shown.contains("pref 1 bpf"), "{shown}");
        assert!(
            shown.contains("handle 0x1 ovnbpf_test direct-action"),
            "{shown}"
        );
        assert_eq!(
            node.ingress_filter_name(index, &filter).unwrap().as_deref(),
            Some("ovnbpf_test")
        );
        let renamed = IngressFilter {
            name: "ovnbpf_next",
            ..filter
        };
        node.set_ingress_filter(index, &renamed, program.as_fd())
            .unwrap();
        let shown = run(None, "tc filter show dev nlt_f0 ingress");
        assert_eq!(shown.matches("direct-action").count(), 1, "{shown}");
        assert_eq!(
            node.ingress_filter_name(index, &filter).unwrap().as_deref(),
            Some("ovnbpf_next")
        );
        assert!(node.delete_ingress_filter(index, &filter).unwrap());
        assert_eq!(node.ingress_filter_name(index, &filter).unwrap(), None);
        assert!(run(None, "tc filter show dev nlt_f0 ingress").is_empty());
    });
}

#[test]
fn the_loopback_address_is_found_on_lo() {
    assert_eq!(
        interface_with_address(Ipv4Addr::LOCALHOST.into())
            .unwrap()
            .as_deref(),
        Some("lo")
    );
    assert_eq!(
        interface_with_address(Ipv4Addr::new(192, 0, 2, 254).into()).unwrap(),
        None
    );
}

/// A datagram holding two messages is split at their (aligned) lengths; a truncated one is an
/// error, not a panic.
#[test]
fn datagrams_are_split_into_their_messages() {
    let message = |sequence: u32| {
        let mut header = NetlinkHeader::default();
        header.sequence_number = sequence;
        let mut packet = NetlinkMessage::new(
            header,
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::GetLink(Default::default())),
        );
        packet.finalize();
        let mut bytes = vec![0; packet.buffer_len()];
        packet.serialize(&mut bytes);
        bytes
    };
    let mut datagram = message(7);
    datagram.extend(message(8));
    let split = datagrams_messages(&datagram).unwrap();
    assert_eq!(split.len(), 2);
    assert_eq!(
        NetlinkBuffer::new_checked(split[1])
            .unwrap()
            .sequence_number(),
        8
    );
    assert!(datagrams_messages(&datagram[..datagram.len() - 3]).is_err());
}
