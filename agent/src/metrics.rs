//! The agent's Prometheus metrics, served as text (exposition format 0.0.4) on `GET /metrics` of
//! `--metrics-address`: CNI operations (count and latency per operation and HTTP status, like
//! Kube-OVN's `cni_op_latency_seconds`), the CNI socket's malformed requests, attachments collected
//! without a DEL, and what the daemon loop reports on each scrape (Southbound sync, local ports,
//! its counters, the datapath's drops per reason and counters per interface); the same port answers
//! the health probes ([`crate::health`]). The exposition is `prometheus-client`'s ([`Scrape`]: a
//! registry built per scrape from the daemon's snapshot, the CNI histograms kept between scrapes),
//! which writes names, label escaping and histogram series as the format says; HTTP is hyper's.
//! Owns the CNI operation histograms (the CNI server records into them) and its
//! TCP listener; reads the daemon only through a [`DaemonHandle`].

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use http_body_util::Full;
use hyper::{
    Method, Request, Response,
    body::{Bytes, Incoming},
};
use prometheus_client::{
    encoding::prometheus_text,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::{Metric, Registry},
};
use tokio::net::TcpListener;
use tracing::warn;

use crate::{
    daemon::ports::{DaemonHandle, DaemonReport},
    health::{self, Probe},
    http_server,
};

/// Upper bounds (seconds) of the latency histogram's buckets.
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A metric's labels, in the order they are written.
type Labels = Vec<(&'static str, String)>;

/// The CNI operation histograms, by operation and HTTP status.
type OperationHistograms = Family<Labels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// CNI operations by (operation, HTTP status): how many and how long they took.
#[derive(Debug)]
pub struct CniMetrics {
    operations: OperationHistograms,
}

impl Default for CniMetrics {
    fn default() -> Self {
        Self {
            operations: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl CniMetrics {
    /// Records one operation (`add`, `del`, …) answered with `status` after `elapsed`.
    pub fn observe(&self, operation: &'static str, status: u16, elapsed: Duration) {
        self.operations
            .get_or_create(&vec![
                ("op", operation.to_string()),
                ("code", status.to_string()),
            ])
            .observe(elapsed.as_secs_f64());
    }
}

/// Counters of the CNI socket (the CNI server counts into them).
#[derive(Debug, Default)]
pub struct ServerStats {
    pub requests: AtomicU64,
    pub bad_requests: AtomicU64,
    pub failures: AtomicU64,
    /// Attachments removed by the runtime's CNI GC (not in its list of valid attachments).
    pub collected_by_gc: AtomicU64,
    /// Attachments removed by the periodic sweep (their network namespace is gone).
    pub collected_by_sweep: AtomicU64,
}

/// Everything the metrics are rendered from.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub cni: Arc<CniMetrics>,
    pub server: Arc<ServerStats>,
    pub daemon: Option<DaemonHandle>,
    /// The CNI socket the agent serves (dialled by `/livez` and `/readyz`), if it serves one.
    pub cni_socket: Option<std::path::PathBuf>,
    /// The node's network on the join switch, when the agent manages it.
    pub node_network: Option<Arc<crate::node_network::NodeNetworkStatus>>,
}

/// The families of one scrape, registered as they are read (the daemon's values are snapshots:
/// each scrape builds its own registry) and written by `prometheus-client` in the Prometheus
/// text format 0.0.4 (names, label escaping, histogram series).
pub struct Scrape {
    registry: Registry,
}

impl Scrape {
    fn new() -> Self {
        Self {
            registry: Registry::default(),
        }
    }

    /// The library appends the help's full stop and a counter's `_total`.
    fn register(&mut self, name: &str, help: &str, metric: impl Metric) {
        let name = name.strip_suffix("_total").unwrap_or(name);
        let help = help.strip_suffix('.').unwrap_or(help);
        self.registry.register(name, help, metric);
    }

    /// A counter `name` (ending in `_total`) without labels.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        let counter: Counter = Counter::default();
        counter.inc_by(value);
        self.register(name, help, counter);
    }

    /// A gauge `name` without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: u64) {
        let gauge: Gauge = Gauge::default();
        gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        self.register(name, help, gauge);
    }

    /// A counter family `name` (ending in `_total`): one series per label set.
    fn counters(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (Labels, u64)>,
    ) {
        let family = Family::<Labels, Counter>::default();
        for (labels, value) in series {
            family.get_or_create(&labels).inc_by(value);
        }
        self.register(name, help, family);
    }

    /// A gauge family `name`: one series per label set.
    fn gauges(&mut self, name: &str, help: &str, series: impl IntoIterator<Item = (Labels, u64)>) {
        let family = Family::<Labels, Gauge>::default();
        for (labels, value) in series {
            family
                .get_or_create(&labels)
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
        self.register(name, help, family);
    }

    fn text(&self) -> String {
        let mut out = String::new();
        // Writing to a String does not fail.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

/// A counter family with one label: its name, the label, its help and the counts by label value.
type NamedCounters<'a> = (&'a str, &'static str, &'a str, &'a [(&'static str, u64)]);

/// One label.
fn label(name: &'static str, value: impl ToString) -> Labels {
    vec![(name, value.to_string())]
}

/// The text exposition of `cni`, `server` and the daemon's `report` (`None` when the loop did
/// not answer: its metrics are left out and `ovnbpf_daemon_up` is 0).
#[must_use]
pub fn render(cni: &CniMetrics, server: &ServerStats, report: Option<&DaemonReport>) -> String {
    let mut scrape = Scrape::new();
    register(&mut scrape, cni, server, report);
    scrape.text()
}

/// Registers the families of `cni`, `server` and the daemon's `report` in `scrape`.
fn register(
    scrape: &mut Scrape,
    cni: &CniMetrics,
    server: &ServerStats,
    report: Option<&DaemonReport>,
) {
    scrape.register(
        "ovnbpf_cni_op_latency_seconds",
        "CNI operations served by the agent, by operation and HTTP status.",
        cni.operations.clone(),
    );
    for (name, help, value) in [
        (
            "ovnbpf_cni_requests_total",
            "Connections to the CNI socket.",
            &server.requests,
        ),
        (
            "ovnbpf_cni_bad_requests_total",
            "CNI requests that could not be read (malformed, too long, too slow).",
            &server.bad_requests,
        ),
        (
            "ovnbpf_cni_failures_total",
            "CNI requests answered with an error status.",
            &server.failures,
        ),
    ] {
        scrape.counter(name, help, value.load(Ordering::Relaxed));
    }
    scrape.counters(
        "ovnbpf_cni_gc_collected_total",
        "CNI attachments removed without a DEL: by the runtime's GC, or by the sweep because \
         their network namespace was gone.",
        [
            ("gc", &server.collected_by_gc),
            ("sweep", &server.collected_by_sweep),
        ]
        .map(|(by, value)| (label("by", by), value.load(Ordering::Relaxed))),
    );
    scrape.gauge(
        "ovnbpf_daemon_up",
        "1 when the daemon loop answered this scrape.",
        u64::from(report.is_some()),
    );
    let Some(report) = report else {
        return;
    };
    let stats = &report.stats;
    for (name, kind, help, value) in [
        (
            "ovnbpf_southbound_synced",
            "gauge",
            "1 once a Southbound snapshot has been applied.",
            u64::from(report.synced),
        ),
        (
            "ovnbpf_southbound_connected",
            "gauge",
            "1 while the Southbound session is up (0 while it reconnects).",
            u64::from(report.connected),
        ),
        (
            "ovnbpf_southbound_disconnects_total",
            "counter",
            "Southbound connections lost.",
            stats.disconnects,
        ),
        (
            "ovnbpf_ready",
            "gauge",
            "1 when synced, registered and the datapath loaded (CNI STATUS).",
            u64::from(report.ready),
        ),
        (
            "ovnbpf_local_ports",
            "gauge",
            "Logical ports bound to this chassis.",
            report.local_ports as u64,
        ),
        (
            "ovnbpf_acl_unenforced_switches",
            "gauge",
            "Switches with ACLs (NetworkPolicies, subnet ACLs) the datapath does not enforce.",
            report.unenforced_acl_switches as u64,
        ),
        (
            "ovnbpf_acl_unenforced",
            "gauge",
            "ACLs the datapath does not enforce, counted once per switch they apply to.",
            report.unenforced_acls as u64,
        ),
        (
            "ovnbpf_flood_groups_truncated",
            "gauge",
            "Flood groups with more members than the datapath installs (4,096 local ports and \
             4,096 other chassis): members beyond the limit get no broadcasts. Alert on it.",
            report.truncated_flood_groups as u64,
        ),
        (
            "ovnbpf_side_duty_datapaths",
            "gauge",
            "Datapaths whose flows ask for a side duty the datapath does not do (MAC learning); \
             they are forwarded.",
            report.side_duty_datapaths as u64,
        ),
        (
            "ovnbpf_pod_filters_restored_total",
            "counter",
            "Pod veths whose removed from_pod filter the agent attached again.",
            report.pod_filters_restored,
        ),
        (
            "ovnbpf_conntrack_swept_total",
            "counter",
            "Expired connections the agent deleted from the datapath's connection table.",
            report.connections_swept,
        ),
        (
            "ovnbpf_southbound_updates_total",
            "counter",
            "Southbound updates applied.",
            stats.events,
        ),
        (
            "ovnbpf_southbound_rows_changed_total",
            "counter",
            "Southbound rows inserted, modified or deleted.",
            stats.rows_changed,
        ),
        (
            "ovnbpf_southbound_rejected_rows_total",
            "counter",
            "Southbound rows refused as malformed (the rest of the update is applied).",
            stats.rejected_rows,
        ),
        (
            "ovnbpf_southbound_bad_addresses_total",
            "counter",
            "Port_Binding address entries (mac, port_security) left out because they do not \
             parse, counted each time their row is compiled.",
            stats.bad_addresses,
        ),
        (
            "ovnbpf_southbound_transactions_total",
            "counter",
            "Transactions the agent sent to the Southbound.",
            stats.transactions,
        ),
        (
            "ovnbpf_southbound_failed_transactions_total",
            "counter",
            "Transactions the Southbound refused or that failed.",
            stats.failed_transactions,
        ),
        (
            "ovnbpf_ir_changes_total",
            "counter",
            "Pipeline IR entries added and removed by the compiler.",
            stats.ir_changes,
        ),
        (
            "ovnbpf_datapath_map_writes_total",
            "counter",
            "Kernel map writes.",
            stats.datapath_writes,
        ),
        (
            "ovnbpf_datapath_errors_total",
            "counter",
            "Failed kernel map writes (retried with the next change).",
            stats.datapath_errors,
        ),
    ] {
        match kind {
            "gauge" => scrape.gauge(name, help, value),
            _ => scrape.counter(name, help, value),
        }
    }
    scrape.counters(
        "ovnbpf_southbound_writes_total",
        "Southbound transactions the agent submitted, by purpose (one may serve several).",
        crate::daemon::Purpose::ALL.into_iter().map(|purpose| {
            let count = stats
                .southbound
                .transactions
                .get(&purpose)
                .copied()
                .unwrap_or(0);
            (label("purpose", purpose.as_str()), count)
        }),
    );
    for (name, help, value) in [
        (
            "ovnbpf_southbound_write_retries_total",
            "Rows written again after a failed or lost Southbound write.",
            stats.southbound.retries,
        ),
        (
            "ovnbpf_southbound_rows_out_of_date_total",
            "Rows of this chassis found different from what the agent wants (each one written).",
            stats.southbound.out_of_date,
        ),
        (
            "ovnbpf_southbound_claims_postponed_total",
            "Claims of a port another chassis holds put off (at most one claim per 500 ms).",
            stats.southbound.claims_postponed,
        ),
        (
            "ovnbpf_neighbours_learning_dropped_total",
            "Learned neighbours dropped because 1,000 were already waiting for their MAC_Binding \
             write (each sender is reported again by its next ARP).",
            stats.southbound.learning_dropped,
        ),
        (
            "ovnbpf_neighbours_heard_total",
            "ARP senders the routers heard of and did not know at that MAC (MAC learning; \
             the learned ones are written as MAC_Binding, purpose mac_binding).",
            stats.neighbours_heard,
        ),
    ] {
        scrape.counter(name, help, value);
    }
    scrape.counters(
        "ovnbpf_neighbours_not_learned_total",
        "Heard ARP senders the routers did not learn, by reason (known: the binding exists; \
         unknown_port, unknown_router: the packet's router port is not in the Southbound).",
        crate::daemon::NotLearned::ALL.into_iter().map(|reason| {
            let reason = reason.as_str();
            let count = stats
                .neighbours_not_learned
                .get(reason)
                .copied()
                .unwrap_or(0);
            (label("reason", reason), count)
        }),
    );
    scrape.gauges(
        "ovnbpf_gateway_ports",
        "Gateway ports (chassisredirect) whose gateway chassis group names this chassis, by its \
         role: active (it holds the port), standby (another chassis of the group is elected, or \
         none is reachable: no BFD session up).",
        crate::daemon::gateway::Role::ALL.into_iter().map(|role| {
            let role = role.as_str();
            let count = stats.gateway_ports.get(role).copied().unwrap_or(0);
            (label("role", role), count)
        }),
    );
    // Known once the agent swept its connection table.
    if let Some(table) = report.connections {
        for (name, help, value) in [
            (
                "ovnbpf_conntrack_entries",
                "Connections live in the datapath's connection table at its last sweep (every \
                 few seconds). Near the capacity, new connections evict the least recently used.",
                table.live as u64,
            ),
            (
                "ovnbpf_conntrack_capacity",
                "Connections the datapath's connection table holds.",
                table.capacity as u64,
            ),
            (
                "ovnbpf_lb_translations",
                "Translations of connections to Service VIPs live at the last sweep (two a \
                 connection: the client's packets and the replies).",
                table.balanced_live as u64,
            ),
        ] {
            scrape.gauge(name, help, value);
        }
    }
    // (name, label, help, counts by the label's value).
    let named_counters: [NamedCounters<'_>; 9] = [
        (
            "ovnbpf_datapath_drops_total",
            "reason",
            "Frames the datapath dropped, by reason.",
            &report.drops,
        ),
        (
            "ovnbpf_datapath_router_replies_total",
            "kind",
            "Answers the datapath sent to pods for its routers (echo replies, ICMP errors, TCP resets) and its reject ACLs (acl_*), by kind.",
            &report.router_replies,
        ),
        (
            "ovnbpf_acl_logged_total",
            "verdict",
            "Packets ACLs with OVN's log option decided, by verdict (allow, drop, reject); lost: events the log ring buffer had no room for.",
            &report.acl_logged,
        ),
        (
            "ovnbpf_conntrack_commits_total",
            "event",
            "Connections the datapath's connection table committed (inserted), and commits that failed (insert_failed). A full table evicts its least recently used entry: inserted minus live minus swept is what it evicted.",
            &report.conntrack,
        ),
        (
            "ovnbpf_lb_connections_total",
            "kind",
            "New connections to Service VIPs the datapath balanced (balanced), of them the ones a client's session affinity placed (affinity) and hairpins (hairpin), translations the table could not store (insert_failed: the next packet is balanced again, to the same backend), and ICMP errors about a balanced connection given back the VIP on their way to its client (icmp_error).",
            &report.lb,
        ),
        (
            "ovnbpf_socket_lb_total",
            "kind",
            "What the socket-level balancer (--socket-lb) did for this node's pods: connect() calls to a Service VIP sent to a backend instead (connect), datagrams sent to a VIP by address sent to a backend (sendmsg), backends shown to the socket's owner as their VIP (reversed: getpeername, a datagram's source), VIPs left to the per-packet balancer (left: the client is one of the VIP's backends, or there are none), and reverse entries the table could not store (insert_failed).",
            &report.socket_lb,
        ),
        (
            "ovnbpf_service_monitor_probes_total",
            "result",
            "Load balancer health-check probes this chassis sent to the backends it hosts (sent), the ones answered (answered: a SYN+ACK or a reset for TCP, a port unreachable for UDP), those whose timeout passed unanswered (unanswered), and probes or sockets that failed (error).",
            &report.service_monitor_probes,
        ),
        (
            "ovnbpf_router_advertisements_total",
            "result",
            "Periodic router advertisements (a router port's ipv6_ra_send_periodic, Kube-OVN's enableIPv6RA) this chassis wrote to its local ports of the port's switch (sent), and writes that failed (error). Solicited advertisements are the datapath's: ovnbpf_datapath_router_replies_total{kind=\"router_advertisement\"}.",
            &report.router_advertisements,
        ),
        (
            "ovnbpf_acl_verdict_cache_total",
            "result",
            "Walks of a switch's ACL rules the datapath's verdict cache answered (hit: an earlier packet with the same fields was judged under the same rules), and walks done (miss).",
            &report.acl_verdict_cache,
        ),
    ];
    for (name, key, help, counts) in named_counters {
        let series = counts
            .iter()
            .map(|(value, count)| (label(key, value), *count));
        scrape.counters(name, help, series);
    }
    scrape.gauges(
        "ovnbpf_dataplane",
        "The datapath this node runs (1 for it): ebpf, or openflow (Open vSwitch's br-int, experimental).",
        report
            .dataplane
            .map(|kind| (label("dataplane", kind), 1)),
    );
    scrape.gauges(
        "ovnbpf_dataplane_untranslated_datapaths",
        "Datapaths the dataplane does not translate whole (OpenFlow): partial, some of their traffic dropped where OVN forwards or answers it; fenced, not forwarded at all, because what is left out (ACLs, load balancers, NAT, ECMP) would otherwise let through what OVN would not. The agent's log names each datapath and reason.",
        report
            .untranslated_datapaths
            .iter()
            .map(|(effect, count)| (label("effect", effect), *count as u64)),
    );
    scrape.gauges(
        "ovnbpf_service_monitors",
        "Load balancer backends this chassis probes for their health checks (Service_Monitor rows of its ports), by the status its probes decided and wrote (undecided: not yet, and northd keeps the backend).",
        report
            .service_monitors
            .iter()
            .map(|(status, count)| (label("status", status), *count)),
    );
    type Field = fn(&crate::dataplane::InterfaceCounters) -> u64;
    let fields: [(&str, &str, Field); 5] = [
        (
            "ovnbpf_interface_received_packets_total",
            "Frames the datapath took in from the interface.",
            |c| c.packets,
        ),
        (
            "ovnbpf_interface_received_bytes_total",
            "Bytes the datapath took in from the interface.",
            |c| c.bytes,
        ),
        (
            "ovnbpf_interface_dropped_packets_total",
            "Frames from the interface the datapath dropped.",
            |c| c.dropped,
        ),
        (
            "ovnbpf_interface_delivered_packets_total",
            "Frames the datapath delivered to the interface.",
            |c| c.delivered_packets,
        ),
        (
            "ovnbpf_interface_delivered_bytes_total",
            "Bytes the datapath delivered to the interface.",
            |c| c.delivered_bytes,
        ),
    ];
    for (name, help, field) in fields {
        let series = report.interfaces.iter().map(|(interface, port, counters)| {
            let labels = vec![
                ("interface", interface.clone()),
                ("port", port.clone().unwrap_or_default()),
            ];
            (labels, field(counters))
        });
        scrape.counters(name, help, series);
    }
}

/// Serves `GET /metrics` and the health probes (`/healthz`, `/livez`, `/readyz`; see
/// [`health`]); anything else: 404. Until the task is dropped.
pub async fn serve(listener: TcpListener, sources: Sources) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let sources = sources.clone();
                tokio::spawn(async move {
                    let answered =
                        http_server::serve_one(stream, Duration::from_secs(5), |request| {
                            let sources = &sources;
                            async move { answer(&request, sources).await }
                        })
                        .await;
                    if let Err(error) = answered {
                        tracing::debug!(%error, "metrics connection");
                    }
                });
            }
            Err(error) => {
                warn!(%error, "accepting a metrics connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// `GET /metrics`, a health probe, or 404.
async fn answer(request: &Request<Incoming>, sources: &Sources) -> Response<Full<Bytes>> {
    let path = if request.method() == Method::GET {
        request.uri().path()
    } else {
        ""
    };
    let (status, content_type, body) = if let Some(probe) = Probe::from_path(path) {
        let verdict = health::check(
            probe,
            sources.daemon.as_ref(),
            sources.cni_socket.as_deref(),
        )
        .await;
        (verdict.status, "text/plain", verdict.body)
    } else if path == "/metrics" {
        let report = match &sources.daemon {
            Some(daemon) => daemon.report().await.ok(),
            None => None,
        };
        let mut scrape = Scrape::new();
        register(&mut scrape, &sources.cni, &sources.server, report.as_ref());
        if let Some(node_network) = &sources.node_network {
            node_network.register(&mut scrape);
        }
        (200, prometheus_text::CONTENT_TYPE, scrape.text())
    } else {
        (404, "text/plain", String::new())
    };
    http_server::response(status, content_type, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_per_operation_and_status() {
        let cni = CniMetrics::default();
        cni.observe("add", 200, Duration::from_millis(30));
        cni.observe("add", 200, Duration::from_millis(300));
        cni.observe("add", 500, Duration::from_millis(2));
        let server = ServerStats::default();
        server.bad_requests.fetch_add(2, Ordering::Relaxed);
        let text = render(&cni, &server, None);
        for line in [
            r#"ovnbpf_cni_op_latency_seconds_bucket{op="add",code="200",le="0.025"} 0"#,
            r#"ovnbpf_cni_op_latency_seconds_bucket{op="add",code="200",le="0.05"} 1"#,
            r#"ovnbpf_cni_op_latency_seconds_bucket{op="add",code="200",le="0.5"} 2"#,
            r#"ovnbpf_cni_op_latency_seconds_bucket{op="add",code="200",le="+Inf"} 2"#,
            r#"ovnbpf_cni_op_latency_seconds_count{op="add",code="200"} 2"#,
            r#"ovnbpf_cni_op_latency_seconds_bucket{op="add",code="500",le="0.005"} 1"#,
            "ovnbpf_cni_bad_requests_total 2",
            "ovnbpf_daemon_up 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert!(!text.contains("ovnbpf_southbound_synced"), "{text}");
    }

    /// The exposition as a scraper reads it (`prometheus-parse`, a parser of the text format
    /// 0.0.4 of its own): every family typed as declared, every sample's value and labels as
    /// the agent holds them. A label value with a quote, a backslash and a line break is
    /// escaped as the format says (that parser does not unescape: checked on the line).
    #[test]
    fn a_scraper_reads_every_family_back() {
        let cni = CniMetrics::default();
        cni.observe("add", 200, Duration::from_millis(30));
        cni.observe("add", 200, Duration::from_millis(300));
        let mut report = rich_report();
        let mut odd = report.interfaces[0].clone();
        odd.0 = "odd_h".into();
        odd.1 = Some("we\"ird\\port\nname".into());
        report.interfaces.push(odd);
        let mut scrape = Scrape::new();
        register(&mut scrape, &cni, &ServerStats::default(), Some(&report));
        let node = crate::node_network::NodeNetworkStatus::default();
        node.routes.store(3, Ordering::Relaxed);
        node.register(&mut scrape);
        let text = scrape.text();
        let escaped = r#"ovnbpf_interface_received_packets_total{interface="odd_h",port="we\"ird\\port\nname"} 7"#;
        assert!(
            text.lines().any(|l| l == escaped),
            "{escaped} missing in\n{text}"
        );
        let text: String = text
            .lines()
            .filter(|l| !l.contains("odd_h"))
            .map(|l| format!("{l}\n"))
            .collect();
        let parsed = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("the exposition parses");
        let sample = |metric: &str, labels: &[(&str, &str)]| {
            parsed
                .samples
                .iter()
                .find(|s| {
                    s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
                })
                .map(|s| s.value.clone())
                .unwrap_or_else(|| panic!("{metric} {labels:?} missing in\n{text}"))
        };
        use prometheus_parse::Value;
        assert_eq!(sample("ovnbpf_daemon_up", &[]), Value::Gauge(1.0));
        assert_eq!(sample("ovnbpf_local_ports", &[]), Value::Gauge(3.0));
        assert_eq!(
            sample(
                "ovnbpf_datapath_drops_total",
                &[("reason", "port_security")]
            ),
            Value::Counter(4.0)
        );
        assert_eq!(
            sample("ovnbpf_southbound_writes_total", &[("purpose", "claim")]),
            Value::Counter(2.0)
        );
        assert_eq!(
            sample(
                "ovnbpf_interface_received_packets_total",
                &[("interface", "web_h"), ("port", "web.ns")]
            ),
            Value::Counter(7.0)
        );
        assert_eq!(sample("ovnbpf_node_routes", &[]), Value::Gauge(3.0));
        let Value::Histogram(buckets) = sample(
            "ovnbpf_cni_op_latency_seconds",
            &[("op", "add"), ("code", "200")],
        ) else {
            panic!("the CNI latency is not a histogram:\n{text}");
        };
        let count = |bound: f64| {
            buckets
                .iter()
                .find(|b| b.less_than == bound)
                .map(|b| b.count)
        };
        assert_eq!(
            (count(0.025), count(0.05), count(0.5), count(f64::INFINITY)),
            (Some(0.0), Some(1.0), Some(2.0), Some(2.0))
        );
        // Every family is documented and every sample belongs to one.
        for sample in &parsed.samples {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| sample.metric.strip_suffix(suffix))
                .filter(|family| parsed.docs.contains_key(*family))
                .unwrap_or(&sample.metric);
            assert!(
                parsed.docs.contains_key(family),
                "{} has no HELP",
                sample.metric
            );
        }
    }

    /// A report with a value in every family.
    fn rich_report() -> DaemonReport {
        DaemonReport {
            synced: true,
            connected: true,
            ready: true,
            local_ports: 3,
            unenforced_acl_switches: 1,
            side_duty_datapaths: 2,
            truncated_flood_groups: 1,
            dataplane: Some("openflow"),
            untranslated_datapaths: vec![("partial", 2), ("fenced", 1)],
            drops: vec![("port_security", 4)],
            router_replies: vec![("tcp_reset", 2)],
            acl_logged: vec![("drop", 3), ("lost", 0)],
            conntrack: vec![("inserted", 9), ("insert_failed", 0)],
            acl_verdict_cache: vec![("hit", 7), ("miss", 2)],
            lb: vec![("balanced", 5), ("hairpin", 1)],
            socket_lb: vec![("connect", 3), ("reversed", 2)],
            service_monitors: vec![("online", 2), ("offline", 1), ("undecided", 0)],
            service_monitor_probes: vec![("sent", 9), ("answered", 8)],
            router_advertisements: vec![("sent", 6), ("error", 0)],
            connections: Some(crate::dataplane::ConnectionSweep {
                removed: 3,
                live: 11,
                capacity: 262_144,
                balanced_live: 4,
                balanced_removed: 2,
            }),
            stats: crate::daemon::DaemonStats {
                transactions: 4,
                failed_transactions: 1,
                southbound: crate::daemon::SbWriteStats {
                    transactions: [
                        (crate::daemon::Purpose::Claim, 2),
                        (crate::daemon::Purpose::Up, 3),
                    ]
                    .into(),
                    failures: 1,
                    retries: 1,
                    out_of_date: 5,
                    claims_postponed: 2,
                    learning_dropped: 0,
                },
                ..Default::default()
            },
            interfaces: vec![(
                "web_h".into(),
                Some("web.ns".into()),
                ovnbpf_common::InterfaceCounters {
                    packets: 7,
                    delivered_bytes: 900,
                    ..Default::default()
                },
            )],
            ..DaemonReport::default()
        }
    }

    #[test]
    fn the_daemon_report_is_rendered() {
        let report = rich_report();
        let text = render(
            &CniMetrics::default(),
            &ServerStats::default(),
            Some(&report),
        );
        for line in [
            "ovnbpf_daemon_up 1",
            "ovnbpf_southbound_synced 1",
            "ovnbpf_southbound_connected 1",
            "ovnbpf_southbound_disconnects_total 0",
            "ovnbpf_southbound_failed_transactions_total 1",
            r#"ovnbpf_southbound_writes_total{purpose="claim"} 2"#,
            r#"ovnbpf_southbound_writes_total{purpose="up"} 3"#,
            r#"ovnbpf_southbound_writes_total{purpose="release"} 0"#,
            "ovnbpf_southbound_write_retries_total 1",
            "ovnbpf_southbound_rows_out_of_date_total 5",
            "ovnbpf_southbound_claims_postponed_total 2",
            "ovnbpf_local_ports 3",
            "ovnbpf_acl_unenforced_switches 1",
            "ovnbpf_side_duty_datapaths 2",
            "ovnbpf_flood_groups_truncated 1",
            r#"ovnbpf_datapath_drops_total{reason="port_security"} 4"#,
            "# TYPE ovnbpf_datapath_drops_total counter",
            r#"ovnbpf_datapath_router_replies_total{kind="tcp_reset"} 2"#,
            r#"ovnbpf_acl_logged_total{verdict="drop"} 3"#,
            r#"ovnbpf_conntrack_commits_total{event="inserted"} 9"#,
            r#"ovnbpf_acl_verdict_cache_total{result="miss"} 2"#,
            r#"ovnbpf_acl_logged_total{verdict="lost"} 0"#,
            "# TYPE ovnbpf_conntrack_entries gauge",
            "ovnbpf_conntrack_entries 11",
            "ovnbpf_conntrack_capacity 262144",
            "ovnbpf_lb_translations 4",
            r#"ovnbpf_lb_connections_total{kind="balanced"} 5"#,
            r#"ovnbpf_socket_lb_total{kind="connect"} 3"#,
            r#"ovnbpf_service_monitors{status="offline"} 1"#,
            r#"ovnbpf_service_monitor_probes_total{result="answered"} 8"#,
            r#"ovnbpf_router_advertisements_total{result="sent"} 6"#,
            r#"ovnbpf_dataplane{dataplane="openflow"} 1"#,
            r#"ovnbpf_dataplane_untranslated_datapaths{effect="fenced"} 1"#,
            r#"ovnbpf_interface_received_packets_total{interface="web_h",port="web.ns"} 7"#,
            r#"ovnbpf_interface_delivered_bytes_total{interface="web_h",port="web.ns"} 900"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
