use std::{collections::BTreeMap, time::Duration};

use tokio::time::Instant;

use super::{Monitor, Next, Options, Probe, Protocol, Reply, Status};

/// Kube-OVN's health check options (`newLoadBalancerHealthCheck`).
fn kube_ovn() -> Options {
    let options: BTreeMap<String, String> = [
        ("interval", "5"),
        ("timeout", "20"),
        ("success_count", "3"),
        ("failure_count", "3"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Options::from_map(&options)
}

const PROBE: Probe = Probe {
    source_port: 40_000,
    seq: 7,
};

fn syn_ack() -> Reply {
    Reply::SynAck {
        destination_port: PROBE.source_port,
        ack: PROBE.seq + 1,
    }
}

fn reset() -> Reply {
    Reply::Reset {
        destination_port: PROBE.source_port,
        ack: PROBE.seq + 1,
    }
}

/// Probes `count` times, each answered by `answer` right away; the status after each.
fn answered(
    monitor: &mut Monitor,
    start: Instant,
    count: u32,
    answer: Reply,
) -> Vec<Option<Status>> {
    let mut now = start;
    (0..count)
        .map(|_| {
            let Next::Wait(until) = monitor.run(now) else {
                // Due now.
                monitor.sent(PROBE, now);
                assert!(monitor.reply(answer, now), "the answer was not taken");
                assert!(matches!(monitor.run(now), Next::Wait(_)));
                return monitor.status();
            };
            now = until;
            assert_eq!(monitor.run(now), Next::Probe);
            monitor.sent(PROBE, now);
            assert!(monitor.reply(answer, now), "the answer was not taken");
            assert!(matches!(monitor.run(now), Next::Wait(_)));
            monitor.status()
        })
        .collect()
}

#[test]
fn options_fall_back_to_pinctrls_defaults() {
    assert_eq!(Options::from_map(&BTreeMap::new()), Options::default());
    let odd: BTreeMap<String, String> =
        [("interval", "x"), ("timeout", "0"), ("success_count", "-2")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    let options = Options::from_map(&odd);
    assert_eq!(options.interval, Duration::from_secs(5));
    assert_eq!(options.timeout, Duration::from_secs(1));
    assert_eq!(options.success_count, 1);
    let kube = kube_ovn();
    assert_eq!(
        (
            kube.interval,
            kube.timeout,
            kube.success_count,
            kube.failure_count
        ),
        (Duration::from_secs(5), Duration::from_secs(20), 3, 3)
    );
}

#[test]
fn a_tcp_backend_is_online_after_success_count_answers_and_probed_every_interval() {
    let start = Instant::now();
    let mut monitor = Monitor::new(Protocol::Tcp, kube_ovn(), start);
    assert_eq!(monitor.status(), None);
    assert_eq!(monitor.run(start), Next::Probe);
    assert_eq!(
        answered(&mut monitor, start, 3, syn_ack()),
        [None, None, Some(Status::Online)]
    );
    // Probes an interval apart (answered at once): the next one an interval after the third.
    let Next::Wait(until) = monitor.run(start) else {
        panic!("a probe due at once")
    };
    assert_eq!(until, start + Duration::from_secs(15));
}

#[test]
fn resets_take_a_backend_offline_and_answers_bring_it_back() {
    let start = Instant::now();
    let mut monitor = Monitor::new(Protocol::Tcp, kube_ovn(), start);
    answered(&mut monitor, start, 3, syn_ack());
    assert_eq!(
        answered(&mut monitor, start, 3, reset()),
        [
            Some(Status::Online),
            Some(Status::Online),
            Some(Status::Offline)
        ]
    );
    // The counts restart at each decision: two answers are not enough.
    assert_eq!(
        answered(&mut monitor, start, 3, syn_ack()),
        [
            Some(Status::Offline),
            Some(Status::Offline),
            Some(Status::Online)
        ]
    );
}

#[test]
fn an_unanswered_tcp_probe_fails_at_its_timeout_and_a_udp_one_succeeds() {
    let start = Instant::now();
    let options = Options {
        success_count: 1,
        failure_count: 1,
        ..kube_ovn()
    };
    let mut tcp = Monitor::new(Protocol::Tcp, options, start);
    let mut udp = Monitor::new(Protocol::Udp, options, start);
    for monitor in [&mut tcp, &mut udp] {
        assert_eq!(monitor.run(start), Next::Probe);
        monitor.sent(PROBE, start);
        assert_eq!(monitor.run(start), Next::Wait(start + options.timeout));
    }
    let late = start + options.timeout;
    // Decided at the timeout; probed again an interval later.
    assert_eq!(tcp.run(late), Next::Wait(late + options.interval));
    assert_eq!(tcp.status(), Some(Status::Offline));
    udp.run(late);
    assert_eq!(udp.status(), Some(Status::Online));
    // A port unreachable about the probe takes the UDP backend offline.
    udp.sent(PROBE, late);
    assert!(udp.reply(
        Reply::PortUnreachable {
            source_port: PROBE.source_port
        },
        late
    ));
    udp.run(late);
    assert_eq!(udp.status(), Some(Status::Offline));
}

#[test]
fn replies_to_nothing_or_to_another_probe_are_ignored() {
    let start = Instant::now();
    let mut monitor = Monitor::new(Protocol::Tcp, Options::default(), start);
    assert!(!monitor.reply(syn_ack(), start), "no probe in flight");
    monitor.sent(PROBE, start);
    let other_port = Reply::SynAck {
        destination_port: PROBE.source_port + 1,
        ack: PROBE.seq + 1,
    };
    let other_seq = Reply::Reset {
        destination_port: PROBE.source_port,
        ack: PROBE.seq + 2,
    };
    let udp = Reply::PortUnreachable {
        source_port: PROBE.source_port,
    };
    for reply in [other_port, other_seq, udp] {
        assert!(!monitor.reply(reply, start), "{reply:?}");
    }
    assert_eq!(monitor.status(), None);
    assert!(monitor.reply(syn_ack(), start));
    // Answered once: a second answer to the same probe counts for nothing.
    assert!(!monitor.reply(syn_ack(), start));
}
