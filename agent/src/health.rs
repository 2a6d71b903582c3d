//! Health probes on the metrics port, with Kube-OVN's CNI daemon's paths and meaning (it serves
//! them on 10665 too): `/healthz` and `/livez` answer whether the agent works (its daemon loop
//! answers; `/livez` also dials the CNI socket, as Kube-OVN's does, so a hung or vanished socket
//! restarts the pod), `/readyz` whether it serves (Southbound connected and synced, this chassis
//! registered, the datapath loaded with no write waiting for a retry, the CNI socket accepting). A failing probe answers 503 with
//! each reason on its own line. Owns nothing; reads the daemon through its handle and dials the
//! socket.

use std::{path::Path, time::Duration};

use crate::daemon::ports::{DaemonHandle, DaemonReport};

/// How long a probe waits for the daemon loop's report or the CNI socket: longer than the loop
/// is busy applying a large Southbound update, shorter than a probe's timeout should be (the
/// DaemonSet gives 5 s).
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// One of the probe paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    Healthz,
    Livez,
    Readyz,
}

impl Probe {
    /// The probe a request path asks for.
    #[must_use]
    pub fn from_path(path: &str) -> Option<Self> {
        match path {
            "/healthz" => Some(Self::Healthz),
            "/livez" => Some(Self::Livez),
            "/readyz" => Some(Self::Readyz),
            _ => None,
        }
    }
}

/// What a probe found: an HTTP status and the body that explains it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub status: u16,
    pub body: String,
}

/// Runs `probe`: asks the daemon loop for its report (if the agent has one) and dials the CNI
/// socket (if it serves one).
pub async fn check(
    probe: Probe,
    daemon: Option<&DaemonHandle>,
    cni_socket: Option<&Path>,
) -> Verdict {
    let report = match daemon {
        Some(daemon) => match tokio::time::timeout(PROBE_TIMEOUT, daemon.report()).await {
            Ok(Ok(report)) => Some(report),
            _ => None,
        },
        None => None,
    };
    let socket = match (probe, cni_socket) {
        (Probe::Healthz, _) | (_, None) => None,
        (_, Some(path)) => Some(dial(path).await),
    };
    judge(probe, daemon.is_some(), report.as_ref(), socket)
}

/// Whether the CNI socket accepts a connection within the probe's time.
async fn dial(path: &Path) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::UnixStream::connect(path)).await,
        Ok(Ok(_))
    )
}

/// The verdict from what was observed: `has_daemon` (the agent runs a daemon loop), its
/// `report` (None: it did not answer), and whether the CNI socket accepted (None: not dialled).
#[must_use]
pub fn judge(
    probe: Probe,
    has_daemon: bool,
    report: Option<&DaemonReport>,
    socket: Option<bool>,
) -> Verdict {
    let mut problems = Vec::new();
    if has_daemon && report.is_none() {
        problems.push("the daemon loop does not answer");
    }
    if socket == Some(false) {
        problems.push("the CNI socket does not accept connections");
    }
    if probe == Probe::Readyz
        && let Some(report) = report
    {
        if !report.connected {
            problems.push("not connected to the Southbound DB");
        }
        if !report.synced {
            problems.push("the Southbound DB is not synced yet");
        } else if !report.ready {
            problems.push("this chassis is not registered or the datapath is not loaded");
        } else if report.datapath_pending > 0 {
            problems.push("the datapath is not wholly programmed (writes wait for a retry)");
        }
    }
    if problems.is_empty() {
        Verdict {
            status: 200,
            body: "ok\n".into(),
        }
    } else {
        Verdict {
            status: 503,
            body: problems.iter().map(|p| format!("{p}\n")).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(connected: bool, synced: bool, ready: bool) -> DaemonReport {
        DaemonReport {
            connected,
            synced,
            ready,
            ..DaemonReport::default()
        }
    }

    #[test]
    fn paths_map_to_probes() {
        assert_eq!(Probe::from_path("/livez"), Some(Probe::Livez));
        assert_eq!(Probe::from_path("/readyz"), Some(Probe::Readyz));
        assert_eq!(Probe::from_path("/healthz"), Some(Probe::Healthz));
        assert_eq!(Probe::from_path("/metrics"), None);
    }

    #[test]
    fn ready_needs_the_southbound_the_chassis_and_the_socket() {
        let good = report(true, true, true);
        assert_eq!(
            judge(Probe::Readyz, true, Some(&good), Some(true)).status,
            200
        );
        let down = judge(
            Probe::Readyz,
            true,
            Some(&report(false, true, true)),
            Some(true),
        );
        assert_eq!(down.status, 503);
        assert_eq!(down.body, "not connected to the Southbound DB\n");
        let syncing = judge(
            Probe::Readyz,
            true,
            Some(&report(true, false, false)),
            Some(true),
        );
        assert_eq!(syncing.body, "the Southbound DB is not synced yet\n");
        let unregistered = judge(
            Probe::Readyz,
            true,
            Some(&report(true, true, false)),
            Some(true),
        );
        assert_eq!(unregistered.status, 503);
        let unprogrammed = DaemonReport {
            datapath_pending: 3,
            ..good.clone()
        };
        let unprogrammed = judge(Probe::Readyz, true, Some(&unprogrammed), Some(true));
        assert_eq!(unprogrammed.status, 503);
        assert_eq!(
            unprogrammed.body,
            "the datapath is not wholly programmed (writes wait for a retry)\n"
        );
        assert_eq!(
            judge(Probe::Readyz, true, Some(&good), Some(false)).body,
            "the CNI socket does not accept connections\n"
        );
    }

    #[test]
    fn liveness_ignores_the_southbound_but_not_a_hung_loop_or_socket() {
        let disconnected = report(false, false, false);
        assert_eq!(
            judge(Probe::Livez, true, Some(&disconnected), Some(true)).status,
            200
        );
        assert_eq!(
            judge(Probe::Healthz, true, Some(&disconnected), None).status,
            200
        );
        let hung = judge(Probe::Livez, true, None, Some(true));
        assert_eq!(hung.status, 503);
        assert_eq!(hung.body, "the daemon loop does not answer\n");
        assert_eq!(
            judge(Probe::Livez, true, Some(&disconnected), Some(false)).status,
            503
        );
    }
}
