//! Tests of the daemon's datapath duties through the in-memory backend
//! ([`crate::dataplane::memory`]): plugging and unplugging ports, failed writes held as pending
//! (and `nb_cfg` with them) until a retry, the backend's counters in the report and the metrics,
//! and the off-loop re-attachment check; and the CNI handler's readiness through a daemon
//! serving its commands. The Southbound is a replica built from a snapshot; the session handle
//! records instead of sending.

use serde_json::json;
use tokio::sync::oneshot;

use super::{
    Daemon, DaemonConfig,
    ports::{DaemonReport, PortCommand, PortError, PortStatus},
};
use crate::{
    chassis::ChassisConfig,
    dataplane::{Datapath, InterfaceCounters, PortAttachment, memory::MemoryDatapath},
    ovsdb::session::{Recorder, SessionEvent, UpdateFormat, recording_handle},
    sb::{Southbound, monitor::LocalScope},
};

const PORT: &str = "pod.ns";

fn config() -> DaemonConfig {
    DaemonConfig {
        sb_remotes: Vec::new(),
        tls: None,
        drop_tap: None,
        chassis: ChassisConfig {
            name: "node1".into(),
            hostname: "node1.example".into(),
            encap_ip: "172.31.0.10".into(),
            encap_csum: true,
            // No monitor condition changes to wait for: `nb_cfg` waits only for the datapath.
            monitor_all: true,
            bridge_mappings: String::new(),
        },
        local_ports: Vec::new(),
        restored_ports: Vec::new(),
        node_network: None,
        probe_interval: None,
        filter_check_interval: None,
    }
}

/// This chassis registered, `nb_cfg` 3 asked for and 2 acknowledged, and an unbound `pod.ns`.
fn southbound() -> Southbound {
    let optional = |key: serde_json::Value| json!({"type": {"key": key, "min": 0, "max": 1}});
    let us = "00000000-0000-0000-0000-0000000000c1";
    crate::sb::testing::southbound(
        &json!({
            "SB_Global": {"columns": {"nb_cfg": {"type": "integer"}}},
            "Chassis": {"columns": {"name": {"type": "string"}}},
            "Chassis_Private": {"columns": {"name": {"type": "string"},
                "chassis": optional(json!({"type": "uuid"})), "nb_cfg": {"type": "integer"}}},
            "Port_Binding": {"columns": {"logical_port": {"type": "string"},
                "chassis": optional(json!({"type": "uuid"})), "up": optional(json!("boolean"))}},
        }),
        json!({
            "SB_Global": {"00000000-0000-0000-0000-0000000000a1": {"initial": {"nb_cfg": 3}}},
            "Chassis": {us: {"initial": {"name": "node1"}}},
            "Chassis_Private": {"00000000-0000-0000-0000-0000000000d1":
                {"initial": {"name": "node1", "chassis": ["uuid", us], "nb_cfg": 2}}},
            "Port_Binding": {"00000000-0000-0000-0000-0000000000b1":
                {"initial": {"logical_port": PORT, "up": false}}},
        }),
    )
}

/// A daemon with `datapath` (if any) that has the replica of [`southbound`]; its Southbound
/// writes are recorded.
fn daemon(datapath: Option<&MemoryDatapath>) -> (Daemon, Recorder) {
    let (handle, recorder) = recording_handle();
    let datapath = datapath.map(|d| Box::new(d.clone()) as Box<dyn Datapath>);
    let mut daemon = Daemon::new(config(), handle, LocalScope::default(), datapath);
    daemon.sb = southbound();
    (daemon, recorder)
}

async fn plug(
    daemon: &mut Daemon,
    interface: &str,
    attachment: PortAttachment,
) -> oneshot::Receiver<Result<(), PortError>> {
    let (reply, answer) = oneshot::channel();
    daemon
        .command(PortCommand::Plug {
            port: PORT.into(),
            interface: interface.into(),
            attachment,
            reply,
        })
        .await;
    answer
}

async fn unplug(daemon: &mut Daemon, interface: &str) -> Result<(), PortError> {
    let (reply, mut answer) = oneshot::channel();
    daemon
        .command(PortCommand::Unplug {
            port: PORT.into(),
            interface: interface.into(),
            reply,
        })
        .await;
    answer.try_recv().unwrap()
}

async fn status(daemon: &mut Daemon) -> PortStatus {
    let (reply, mut answer) = oneshot::channel();
    daemon
        .command(PortCommand::Status {
            port: Some(PORT.into()),
            reply,
        })
        .await;
    answer.try_recv().unwrap()
}

async fn report(daemon: &mut Daemon) -> DaemonReport {
    let (reply, mut answer) = oneshot::channel();
    daemon.command(PortCommand::Report { reply }).await;
    answer.try_recv().unwrap()
}

/// The `nb_cfg` each submitted transaction acknowledges.
fn acknowledged(recorder: &mut Recorder) -> Vec<serde_json::Value> {
    recorder
        .transactions()
        .into_iter()
        .flat_map(|(_, ops)| ops)
        .filter(|op| op["table"] == "Chassis_Private")
        .map(|op| op["row"]["nb_cfg"].clone())
        .collect()
}

#[tokio::test]
async fn a_port_plugged_while_the_backend_fails_stays_pending_and_holds_nb_cfg_until_retried() {
    let backend = MemoryDatapath::with_interfaces(&[("veth1", 7)]);
    let (mut daemon, mut recorder) = daemon(Some(&backend));
    let attachment = backend.attacher().attach(7).unwrap();
    backend.state().failing = true;

    let mut answer = plug(&mut daemon, "veth1", attachment).await;
    let answer = answer.try_recv().unwrap();
    assert!(
        matches!(&answer, Err(PortError::Rejected(reason)) if reason.contains(PORT) && reason.contains("veth1")),
        "{answer:?}"
    );
    assert_eq!(daemon.stats.datapath_errors, 1);
    assert!(backend.pending() > 0, "the failed write is kept");
    assert!(!status(&mut daemon).await.programmed);
    daemon.acknowledge_nb_cfg().await;
    assert!(
        acknowledged(&mut recorder).is_empty(),
        "nb_cfg waits while writes wait for a retry"
    );

    daemon.retry_datapath();
    assert_eq!(daemon.stats.datapath_errors, 2, "a failed retry is counted");
    assert!(!status(&mut daemon).await.programmed);

    backend.state().failing = false;
    daemon.retry_datapath();
    assert_eq!(backend.pending(), 0);
    assert_eq!(daemon.stats.datapath_writes, 1);
    assert!(status(&mut daemon).await.programmed);
    daemon.acknowledge_nb_cfg().await;
    assert_eq!(acknowledged(&mut recorder), [json!(3)]);
}

#[tokio::test]
async fn unplug_removes_the_port_and_a_stale_unplug_of_another_interface_does_not() {
    let backend = MemoryDatapath::with_interfaces(&[("veth1", 7), ("veth2", 8)]);
    let (mut daemon, _recorder) = daemon(Some(&backend));
    let attachment = backend.attacher().attach(7).unwrap();

    let mut answer = plug(&mut daemon, "veth1", attachment).await;
    assert!(
        answer.try_recv().is_err(),
        "the plug is answered once the Port_Binding is bound here and up"
    );
    assert!(backend.programmed(PORT));
    assert!(daemon.local_ports.contains(PORT));
    assert_eq!(daemon.stats.datapath_writes, 1);

    // The DEL of an older sandbox, whose NIC was veth2.
    unplug(&mut daemon, "veth2").await.unwrap();
    assert!(backend.programmed(PORT), "the port lives on in veth1");
    assert!(daemon.local_ports.contains(PORT));

    unplug(&mut daemon, "veth1").await.unwrap();
    assert!(!backend.programmed(PORT));
    assert_eq!(backend.interface_of(PORT), None);
    assert!(backend.state().installed.is_empty(), "its entries are gone");
    assert!(!daemon.local_ports.contains(PORT));
    assert!(
        daemon.sb_sync.releasing().contains(PORT),
        "its Port_Binding is released"
    );
}

#[tokio::test]
async fn a_plug_with_an_attachment_of_another_interface_is_refused() {
    let backend = MemoryDatapath::with_interfaces(&[("veth1", 7), ("veth2", 8)]);
    let (mut daemon, _recorder) = daemon(Some(&backend));
    let attachment = backend.attacher().attach(8).unwrap();
    let answer = plug(&mut daemon, "veth1", attachment)
        .await
        .try_recv()
        .unwrap();
    assert!(matches!(answer, Err(PortError::Rejected(_))), "{answer:?}");
    assert!(!backend.programmed(PORT));
    assert!(!daemon.local_ports.contains(PORT));
}

#[tokio::test]
async fn without_a_datapath_plugs_are_refused_and_nothing_is_ready() {
    let (mut daemon, _recorder) = daemon(None);
    let answer = plug(&mut daemon, "veth1", PortAttachment::attached(7))
        .await
        .try_recv()
        .unwrap();
    assert!(
        matches!(&answer, Err(PortError::Rejected(reason)) if reason.contains("does not forward")),
        "{answer:?}"
    );
    daemon.synced = true;
    let status = status(&mut daemon).await;
    assert!(!status.ready && !status.programmed);
    let report = report(&mut daemon).await;
    assert!(report.drops.is_empty() && report.interfaces.is_empty());
}

#[tokio::test]
async fn the_backends_counters_reach_the_report_and_the_metrics() {
    let backend = MemoryDatapath::with_interfaces(&[]);
    {
        let mut state = backend.state();
        state.drops = vec![("port_security", 4), ("no_route", 1)];
        state.router_replies = vec![("echo_reply", 2)];
        state.interface_counters = vec![(
            "veth1".into(),
            Some(PORT.into()),
            InterfaceCounters {
                packets: 5,
                delivered_bytes: 700,
                ..InterfaceCounters::default()
            },
        )];
    }
    let (mut daemon, _recorder) = daemon(Some(&backend));
    let report = report(&mut daemon).await;
    assert_eq!(report.drops, [("port_security", 4), ("no_route", 1)]);
    assert_eq!(report.router_replies, [("echo_reply", 2)]);
    let text = crate::metrics::render(
        &crate::metrics::CniMetrics::default(),
        &crate::metrics::ServerStats::default(),
        Some(&report),
    );
    for line in [
        r#"ovnbpf_datapath_drops_total{reason="port_security"} 4"#,
        r#"ovnbpf_datapath_drops_total{reason="no_route"} 1"#,
        r#"ovnbpf_datapath_router_replies_total{kind="echo_reply"} 2"#,
        r#"ovnbpf_interface_received_packets_total{interface="veth1",port="pod.ns"} 5"#,
        r#"ovnbpf_interface_delivered_bytes_total{interface="veth1",port="pod.ns"} 700"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }

    // A reading that fails leaves only its own counters out.
    backend.state().failing = true;
    let report = super::tests::report(&mut daemon).await;
    assert!(report.interfaces.is_empty());
    assert_eq!(report.drops.len(), 2);
}

#[tokio::test]
async fn a_plugged_port_that_lost_its_attachment_is_attached_again_off_the_loop() {
    let backend = MemoryDatapath::with_interfaces(&[("veth1", 7)]);
    let (mut daemon, _recorder) = daemon(Some(&backend));
    let attachment = backend.attacher().attach(7).unwrap();
    let _answer = plug(&mut daemon, "veth1", attachment).await;
    backend.state().attached.clear();

    daemon.check_pod_filters();
    daemon.filter_check.take().unwrap().await.unwrap();
    assert!(backend.attacher().is_attached(7).unwrap());
    assert_eq!(report(&mut daemon).await.pod_filters_restored, 1);

    daemon.check_pod_filters();
    daemon.filter_check.take().unwrap().await.unwrap();
    assert_eq!(
        report(&mut daemon).await.pod_filters_restored,
        1,
        "an attached port is left alone"
    );
}

#[tokio::test]
async fn a_diff_the_backend_cannot_write_is_counted_holds_nb_cfg_and_is_written_by_the_retry() {
    let backend = MemoryDatapath::with_interfaces(&[]);
    let (mut daemon, mut recorder) = daemon(Some(&backend));
    let switch = crate::pipeline::ir::IrEntry::Datapath {
        datapath: 5,
        name: "subnet1".into(),
        router: false,
    };
    let diff = crate::pipeline::ir::IrDiff {
        added: vec![switch.clone()],
        removed: Vec::new(),
    };
    backend.state().failing = true;
    assert_eq!(daemon.program_datapath(&diff.borrowed()), 0);
    assert_eq!(daemon.stats.datapath_errors, 1);
    daemon.acknowledge_nb_cfg().await;
    assert!(acknowledged(&mut recorder).is_empty());

    backend.state().failing = false;
    daemon.retry_datapath();
    assert_eq!(daemon.stats.datapath_writes, 1);
    assert!(
        backend
            .state()
            .installed
            .contains(&crate::dataplane::memory::Key::Entry(switch))
    );
    daemon.acknowledge_nb_cfg().await;
    assert_eq!(acknowledged(&mut recorder), [json!(3)]);
}

#[tokio::test]
async fn the_sweep_removes_only_what_nobody_asked_for_and_a_failed_sweep_is_counted() {
    use crate::dataplane::memory::Key;
    let backend = MemoryDatapath::with_interfaces(&[("veth1", 7)]);
    let (mut daemon, _recorder) = daemon(Some(&backend));
    let attachment = backend.attacher().attach(7).unwrap();
    let _answer = plug(&mut daemon, "veth1", attachment).await;
    {
        let mut state = backend.state();
        let stale = Key::Port("gone.ns".into());
        state.installed.insert(stale.clone());
        state.leftovers = [stale, Key::Port(PORT.into())].into();
        state.failing = true;
    }
    daemon.sweep_at = Some(tokio::time::Instant::now());
    daemon.sweep_datapath();
    assert_eq!(daemon.sweep_at, None);
    assert_eq!(daemon.stats.datapath_errors, 1);

    backend.state().failing = false;
    let writes = daemon.stats.datapath_writes;
    daemon.sweep_datapath();
    assert_eq!(
        daemon.stats.datapath_writes,
        writes + 1,
        "one stale entry removed"
    );
    assert!(backend.programmed(PORT), "the plugged port stays");
    assert!(
        !backend
            .state()
            .installed
            .contains(&Key::Port("gone.ns".into()))
    );
}

/// Runs `daemon`'s command handling on a local task (the loop's futures stay on its thread), as
/// its loop does; returns the handle the CNI side talks to it through.
fn serve(mut daemon: Daemon) -> super::ports::DaemonHandle {
    let (handle, mut commands) = super::ports::channel();
    tokio::task::spawn_local(async move {
        while let Some(command) = commands.recv().await {
            daemon.command(command).await;
        }
    });
    handle
}

#[tokio::test]
async fn the_cni_handler_is_ready_with_a_synced_daemon_and_a_datapath_and_refuses_add_without_one()
{
    use crate::cni::{
        handler::{Handler, HandlerConfig, HandlerError},
        store::AttachmentStore,
    };
    let dir = tempfile::tempdir().unwrap();
    let handler = |daemon, attacher| {
        let store = AttachmentStore::open(dir.path()).unwrap();
        let config = HandlerConfig {
            mtu: 1400,
            port_wait: std::time::Duration::from_secs(1),
            gc_grace: std::time::Duration::ZERO,
        };
        Handler::new(daemon, attacher, store, config)
    };
    let backend = MemoryDatapath::with_interfaces(&[]);
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {

        let (unsynced, _recorder) = daemon(Some(&backend));
        let cni = handler(serve(unsynced), Some(backend.attacher()));
        let status = cni.status().await;
        assert!(matches!(status, Err(HandlerError::NotReady(_))), "{status:?}");

        let (mut synced, _recorder) = daemon(Some(&backend));
        synced.synced = true;
        let cni = handler(serve(synced), Some(backend.attacher()));
        cni.status().await.unwrap();

        let (mut without_datapath, _recorder) = daemon(None);
        without_datapath.synced = true;
        let handle = serve(without_datapath);
        let cni = handler(handle.clone(), None);
        let status = cni.status().await;
        assert!(matches!(status, Err(HandlerError::NotReady(_))), "{status:?}");
        let request = ovnbpf_cni::wire::CniRequest {
            pod_name: "pod".into(),
            pod_namespace: "ns".into(),
            container_id: "c1".into(),
            net_ns: "/var/run/netns/c1".into(),
            ..Default::default()
        };
        let added = cni.add(&request).await;
        assert!(
            matches!(&added, Err(HandlerError::Unservable(reason)) if reason.contains("does not forward")),
            "{added:?}"
        );
        assert_eq!(
            handle.report().await.unwrap().local_ports,
            0,
            "nothing was bound"
        );
        })
        .await;
}

#[tokio::test]
async fn a_port_whose_writes_succeed_on_retry_is_reported_up_by_the_retry() {
    let backend = MemoryDatapath::with_interfaces(&[("veth1", 7)]);
    let (mut daemon, mut recorder) = daemon(Some(&backend));
    daemon.synced = true;
    let attachment = backend.attacher().attach(7).unwrap();
    let _answer = plug(&mut daemon, "veth1", attachment).await;
    let claims = recorder.transactions();
    let claim = claims
        .iter()
        .find(|(_, ops)| ops.iter().any(|op| op["table"] == "Port_Binding"))
        .unwrap_or_else(|| panic!("no claim: {claims:?}"));
    // The port's entries are to be written again and the backend fails: not programmed.
    {
        let mut state = backend.state();
        state
            .dirty
            .insert(crate::dataplane::memory::Key::Port(PORT.into()));
        state.failing = true;
    }
    assert!(!backend.programmed(PORT));
    // The claim lands while the port is not programmed: bound here, down.
    let us = "00000000-0000-0000-0000-0000000000c1";
    daemon
        .handle(SessionEvent::Update {
            updates: json!({"Port_Binding": {"00000000-0000-0000-0000-0000000000b1":
                {"modify": {"chassis": ["uuid", us]}}}})
            .into(),
            format: UpdateFormat::Update2,
        })
        .await;
    daemon
        .handle(SessionEvent::Transacted {
            id: claim.0,
            result: Ok(()),
        })
        .await;
    recorder.transactions();
    daemon.retry_tick().await;
    assert!(
        recorder.transactions().is_empty(),
        "still failing: nothing to report"
    );

    // The retry writes the entries: the port is programmed, and the same tick says it is up.
    backend.state().failing = false;
    daemon.retry_tick().await;
    assert!(backend.programmed(PORT));
    let ups: Vec<serde_json::Value> = recorder
        .transactions()
        .into_iter()
        .flat_map(|(_, ops)| ops)
        .filter(|op| op["table"] == "Port_Binding")
        .map(|op| op["row"]["up"].clone())
        .collect();
    assert_eq!(ups, [json!(true)]);
}

#[tokio::test]
async fn an_adopted_datapath_is_written_once_the_southbound_view_is_complete() {
    use crate::{
        dataplane::memory::Key,
        pipeline::ir::{IrDiff, IrEntry},
    };
    let backend = MemoryDatapath::with_interfaces(&[]);
    backend.state().adopted = true;
    let (mut daemon, _recorder) = daemon(Some(&backend));
    let switch = |datapath: u32| IrEntry::Datapath {
        datapath,
        name: format!("subnet{datapath}"),
        router: false,
    };
    // The snapshot is in, a monitor condition still waits for its rows: held, though the
    // views come in two steps (the second takes back what the first added).
    daemon.synced = true;
    daemon.conditions_pending.insert(7);
    let first = IrDiff {
        added: vec![switch(5), switch(6)],
        removed: Vec::new(),
    };
    let second = IrDiff {
        added: Vec::new(),
        removed: vec![switch(6)],
    };
    assert_eq!(daemon.program_datapath(&first.borrowed()), 0);
    assert_eq!(daemon.program_datapath(&second.borrowed()), 0);
    assert!(!daemon.release_held(), "a condition is pending");
    assert!(backend.state().installed.is_empty(), "nothing written yet");
    // The condition's rows are in: the whole view is written at once.
    daemon.conditions_pending.clear();
    assert!(daemon.release_held());
    assert_eq!(
        backend.state().installed,
        [Key::Entry(switch(5))].into_iter().collect()
    );
    // From then on each diff is written as it comes.
    let third = IrDiff {
        added: vec![switch(8)],
        removed: Vec::new(),
    };
    assert_eq!(daemon.program_datapath(&third.borrowed()), 1);
    assert!(!daemon.release_held(), "nothing held any more");
}

/// The tunnel next-hop refresh follows every Encap of every other chassis, and resolves those of
/// this node's underlay family only: a chassis with an IPv4 and an IPv6 endpoint keeps its IPv4
/// one refreshed on an IPv4 node whichever the IR named last, and loses it only when that one
/// goes.
#[tokio::test]
async fn the_next_hop_refresh_resolves_each_chassis_endpoints_of_the_underlay_family() {
    use crate::pipeline::ir::{IrDiff, IrEntry};
    let backend = MemoryDatapath::with_interfaces(&[]);
    let (mut daemon, _recorder) = daemon(Some(&backend));
    let encap = |chassis: &str, ip: &str| IrEntry::ChassisEncap {
        chassis: chassis.into(),
        ip: ip.parse().unwrap(),
        csum: false,
    };
    async fn refreshed(
        daemon: &mut Daemon,
        backend: &MemoryDatapath,
        diff: IrDiff,
    ) -> Vec<std::net::IpAddr> {
        daemon.program_datapath(&diff.borrowed());
        let job = daemon.neighbour_refresh.take().expect("a refresh starts");
        job.await.unwrap();
        let mut jobs = std::mem::take(&mut backend.state().neighbour_jobs);
        jobs.pop().unwrap_or_default()
    }
    let both = IrDiff {
        added: vec![
            encap("node2", "172.31.0.11"),
            encap("node2", "fd00:172:31::b"),
            encap("node1", "172.31.0.10"),
        ],
        removed: Vec::new(),
    };
    assert_eq!(
        refreshed(&mut daemon, &backend, both).await,
        ["172.31.0.11".parse::<std::net::IpAddr>().unwrap()],
        "node2's IPv4 endpoint only; not this node's own"
    );
    let ipv6_gone = IrDiff {
        added: Vec::new(),
        removed: vec![encap("node2", "fd00:172:31::b")],
    };
    assert_eq!(
        refreshed(&mut daemon, &backend, ipv6_gone).await,
        ["172.31.0.11".parse::<std::net::IpAddr>().unwrap()]
    );
}
