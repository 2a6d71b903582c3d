//! The agent's control socket (`--control-socket`): a unix socket `ovnbpfctl` talks to for what
//! only the running agent has: `status` (which datapath runs, whether it is ready and wholly
//! programmed, what it does not translate), and `monitor`: the datapath's drop events as they
//! happen, each with its reason, interface, the logical port (pod) behind the interface, the
//! logical datapath the frame entered and its switch or router name, and the frame's addresses,
//! optionally only a pod's.
//!
//! The datapath is where the frame entered OVN's pipeline: the switch of the pod's port, or for
//! a Geneve frame from another chassis, the datapath of its VNI. The kernel's event says why
//! and where a frame was dropped, not at which stage, so a frame a router dropped after the
//! pod's switch passed it still names that switch.
//!
//! Protocol: the client sends one JSON line. `{"status": {}}` gets one JSON line back (see
//! [`status_json`]). `{"monitor": {"port": "<pod>[.<namespace>]"}}` (`port` optional) gets one
//! JSON line per event until the client goes away (`{"lagged": N}` when the client fell N
//! events behind). Reads the drop events through
//! their [`DropTap`], the interface → port names and the datapath names through the
//! [`DaemonHandle`]; owns nothing else.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{UnixListener, UnixStream},
    sync::broadcast::error::RecvError,
};
use tracing::{debug, warn};

use crate::{
    daemon::ports::{DaemonHandle, DatapathName, DatapathNames},
    dataplane::{DropReport, DropTap},
};

/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an unknown interface may make the daemon be asked for the port names again.
const NAME_REFRESH: Duration = Duration::from_millis(500);

/// Serves the control socket until the task is dropped.
pub async fn serve(listener: UnixListener, drops: DropTap, daemon: DaemonHandle) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let (drops, daemon) = (drops.clone(), daemon.clone());
                tokio::spawn(async move {
                    if let Err(error) = answer(stream, &drops, &daemon).await {
                        debug!(%error, "control connection ended");
                    }
                });
            }
            Err(error) => {
                warn!(%error, "accepting a control connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What a client asked for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// Drop events, only those of this logical port (or of the pod `port.*`) if given.
    Monitor { port: Option<String> },
    /// The datapath's status, once.
    Status,
}

fn parse_request(line: &str) -> Result<Request, String> {
    let value: Value =
        serde_json::from_str(line).map_err(|e| format!("the request is not JSON: {e}"))?;
    if value.get("status").is_some() {
        return Ok(Request::Status);
    }
    let Some(monitor) = value.get("monitor") else {
        return Err("unknown request (expected {\"monitor\": {...}} or {\"status\": {}})".into());
    };
    let port = match monitor.get("port") {
        None | Some(Value::Null) => None,
        Some(Value::String(port)) => Some(port.clone()),
        Some(other) => return Err(format!("monitor.port must be a string, not {other}")),
    };
    Ok(Request::Monitor { port })
}

async fn answer(stream: UnixStream, drops: &DropTap, daemon: &DaemonHandle) -> std::io::Result<()> {
    let (reader, mut writer) = stream.into_split();
    let mut line = String::new();
    let read =
        tokio::time::timeout(REQUEST_TIMEOUT, BufReader::new(reader).read_line(&mut line)).await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        return Ok(());
    }
    let filter = match parse_request(line.trim()) {
        Ok(Request::Monitor { port }) => port,
        Ok(Request::Status) => {
            let reply = match daemon.report().await {
                Ok(report) => status_json(&report),
                Err(error) => json!({ "error": error.to_string() }),
            };
            return writer
                .write_all((reply.to_string() + "\n").as_bytes())
                .await;
        }
        Err(error) => {
            let reply = json!({ "error": error }).to_string() + "\n";
            return writer.write_all(reply.as_bytes()).await;
        }
    };
    let mut events = drops.subscribe();
    let mut names = PortNames::default();
    loop {
        let message = match events.recv().await {
            Ok(report) => {
                let port = names.port_of(&report.interface, daemon).await;
                if !matches_filter(filter.as_deref(), port.as_deref()) {
                    continue;
                }
                let datapath = names
                    .datapath_of(port.as_deref(), report.geneve_vni, daemon)
                    .await;
                event_json(&report, port.as_deref(), datapath.as_ref())
            }
            Err(RecvError::Lagged(missed)) => json!({ "lagged": missed }),
            Err(RecvError::Closed) => return Ok(()),
        };
        writer
            .write_all((message.to_string() + "\n").as_bytes())
            .await?;
    }
}

/// The status line: the datapath this node runs (`null` without one), whether the agent is
/// ready, the datapath writes waiting for a retry, the local ports, and the datapaths the
/// datapath does not translate whole, per effect (`partial`, `fenced`; OpenFlow).
fn status_json(report: &crate::daemon::ports::DaemonReport) -> Value {
    let untranslated: serde_json::Map<String, Value> = report
        .untranslated_datapaths
        .iter()
        .map(|(effect, count)| ((*effect).to_string(), json!(count)))
        .collect();
    json!({
        "dataplane": report.dataplane,
        "ready": report.ready,
        "pending_writes": report.datapath_pending,
        "local_ports": report.local_ports,
        "untranslated_datapaths": untranslated,
    })
}

/// Whether an event of `port` passes the client's filter (`pod.namespace`, or `pod` for any
/// namespace).
fn matches_filter(filter: Option<&str>, port: Option<&str>) -> bool {
    match (filter, port) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(filter), Some(port)) => {
            port == filter
                || port
                    .strip_prefix(filter)
                    .is_some_and(|r| r.starts_with('.'))
        }
    }
}

fn event_json(report: &DropReport, port: Option<&str>, datapath: Option<&DatapathName>) -> Value {
    let mut event = json!({
        "reason": report.reason,
        "interface": report.interface,
        "port": port,
        "datapath": datapath.map(|d| json!({
            "tunnel_key": d.tunnel_key,
            "type": d.kind,
            "name": d.name,
        })),
        "ipv4_source": report.ipv4.map(|(source, _)| source.to_string()),
        "ipv4_destination": report.ipv4.map(|(_, destination)| destination.to_string()),
        "frame": report.to_string(),
    });
    // The name under its kind too, as operators look for it: "switch": "subnet-a".
    if let Some(DatapathName {
        kind,
        name: Some(name),
        ..
    }) = datapath
    {
        event[*kind] = json!(name);
    }
    event
}

/// Interface name → logical port, from the daemon's report, and the datapaths' names, each
/// asked again (at most every [`NAME_REFRESH`]) when a name is not known.
#[derive(Default)]
struct PortNames {
    ports: HashMap<String, Option<String>>,
    asked: Option<Instant>,
    datapaths: DatapathNames,
    datapaths_asked: Option<Instant>,
}

impl PortNames {
    async fn port_of(&mut self, interface: &str, daemon: &DaemonHandle) -> Option<String> {
        if !self.ports.contains_key(interface)
            && self.asked.is_none_or(|at| at.elapsed() >= NAME_REFRESH)
        {
            self.asked = Some(Instant::now());
            if let Ok(report) = daemon.report().await {
                self.ports = report
                    .interfaces
                    .into_iter()
                    .map(|(name, port, _)| (name, port))
                    .collect();
            }
        }
        self.ports.get(interface).cloned().flatten()
    }

    /// The datapath a frame entered: its Geneve VNI's, else its port's.
    async fn datapath_of(
        &mut self,
        port: Option<&str>,
        vni: Option<u32>,
        daemon: &DaemonHandle,
    ) -> Option<DatapathName> {
        if entered(&self.datapaths, port, vni).is_none()
            && (vni.is_some() || port.is_some())
            && self
                .datapaths_asked
                .is_none_or(|at| at.elapsed() >= NAME_REFRESH)
        {
            self.datapaths_asked = Some(Instant::now());
            if let Ok(names) = daemon.datapath_names().await {
                self.datapaths = names;
            }
        }
        entered(&self.datapaths, port, vni).cloned()
    }
}

/// The datapath of `vni`, else of `port`, as `names` has them.
fn entered<'a>(
    names: &'a DatapathNames,
    port: Option<&str>,
    vni: Option<u32>,
) -> Option<&'a DatapathName> {
    let key = vni.or_else(|| names.ports.get(port?).copied())?;
    names.datapaths.get(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_request(r#"{"monitor": {}}"#),
            Ok(Request::Monitor { port: None })
        );
        assert_eq!(
            parse_request(r#"{"monitor": {"port": "web.ns"}}"#),
            Ok(Request::Monitor {
                port: Some("web.ns".into())
            })
        );
        assert_eq!(parse_request(r#"{"status": {}}"#), Ok(Request::Status));
        assert!(parse_request("monitor").unwrap_err().contains("not JSON"));
        assert!(
            parse_request(r#"{"watch": {}}"#)
                .unwrap_err()
                .contains("unknown")
        );
        assert!(
            parse_request(r#"{"monitor": {"port": 7}}"#)
                .unwrap_err()
                .contains("string")
        );
    }

    #[test]
    fn an_event_names_the_datapath_its_port_or_vni_entered() {
        let switch = DatapathName {
            tunnel_key: 3,
            kind: "switch",
            name: Some("subnet-a".into()),
        };
        let router = DatapathName {
            tunnel_key: 1,
            kind: "router",
            name: Some("vpc-a".into()),
        };
        let names = DatapathNames {
            datapaths: [(3, switch.clone()), (1, router.clone())].into(),
            ports: [("web.ns".to_string(), 3)].into(),
        };
        assert_eq!(entered(&names, Some("web.ns"), None), Some(&switch));
        assert_eq!(entered(&names, None, Some(1)), Some(&router));
        assert_eq!(entered(&names, Some("web.ns"), Some(1)), Some(&router));
        assert_eq!(entered(&names, Some("other.ns"), None), None);
        assert_eq!(entered(&names, None, Some(9)), None);

        let report = DropReport {
            reason: "port_security",
            interface: "web_h".into(),
            source_mac: None,
            destination_mac: None,
            ether_type: None,
            ipv4: None,
            geneve_vni: None,
        };
        let event = event_json(&report, Some("web.ns"), Some(&switch));
        assert_eq!(event["switch"], "subnet-a");
        assert_eq!(event["datapath"]["tunnel_key"], 3);
        assert_eq!(event["datapath"]["type"], "switch");
        assert!(event.get("router").is_none());
        let event = event_json(&report, None, None);
        assert!(event["datapath"].is_null() && event.get("switch").is_none());
    }

    #[test]
    fn a_pod_filter_matches_its_port_in_any_namespace_and_nothing_else() {
        assert!(matches_filter(None, None));
        assert!(matches_filter(Some("web.ns"), Some("web.ns")));
        assert!(matches_filter(Some("web"), Some("web.ns")));
        assert!(!matches_filter(Some("web"), Some("webapp.ns")));
        assert!(!matches_filter(Some("web.ns"), Some("web.other")));
        assert!(!matches_filter(Some("web"), None));
    }
}
