//! The CNI socket: HTTP/1.1 on a unix socket (mode 0600), served by hyper, one request per
//! connection, routed to the [`Handler`]. Kube-OVN's statuses: ADD 200 + JSON, DEL 204; CHECK and STATUS 200, GC 204;
//! failures 400 (bad request), 422 (the pod cannot be served as configured), 500 (failed) or
//! 503 (not ready) with `{"error": …}`. Malformed
//! requests are answered and counted, never fatal; slow clients time out.

use std::{
    os::unix::fs::PermissionsExt,
    path::Path,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use http_body_util::{BodyExt, Full, Limited};
use hyper::{
    Method, Request, Response,
    body::{Bytes, Incoming},
};
use ovnbpf_cni::{
    http::MAX_BODY,
    wire::{self, CniRequest, CniResponse, GcRequest},
};
use tokio::net::{UnixListener, UnixStream};
use tracing::{Instrument, info_span, warn};

use super::handler::{Handler, HandlerError};
use crate::{
    http_server,
    metrics::{CniMetrics, ServerStats},
};

/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds `path` (replacing a stale socket file), mode 0600.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves connections until the task is dropped; counts them in `stats` and each operation's
/// latency in `operations`.
pub async fn serve(
    listener: UnixListener,
    handler: Arc<Handler>,
    stats: Arc<ServerStats>,
    operations: Arc<CniMetrics>,
) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let handler = Arc::clone(&handler);
                let stats = Arc::clone(&stats);
                let operations = Arc::clone(&operations);
                tokio::spawn(
                    async move { connection(stream, &handler, &stats, &operations).await }
                        .instrument(info_span!("cni")),
                );
            }
            Err(error) => {
                warn!(%error, "accepting a CNI connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn error_body(message: &str) -> Vec<u8> {
    serde_json::to_vec(&CniResponse {
        error: message.to_string(),
        ..CniResponse::default()
    })
    .unwrap_or_default()
}

/// The operation a path names, for the metrics.
fn operation(path: &str) -> &'static str {
    match path {
        wire::PATH_ADD => "add",
        wire::PATH_DEL => "del",
        wire::PATH_CHECK => "check",
        wire::PATH_STATUS => "status",
        wire::PATH_GC => "gc",
        _ => "other",
    }
}

/// Serves one connection: its request, or a 400 (from hyper) for one that does not parse or
/// does not come within [`READ_TIMEOUT`], counted as a bad request.
async fn connection(
    stream: UnixStream,
    handler: &Handler,
    stats: &ServerStats,
    operations: &CniMetrics,
) {
    stats.requests.fetch_add(1, Ordering::Relaxed);
    let served = http_server::serve_one(stream, READ_TIMEOUT, |request| {
        answer(request, handler, stats, operations)
    })
    .await;
    if let Err(error) = served {
        stats.bad_requests.fetch_add(1, Ordering::Relaxed);
        stats.failures.fetch_add(1, Ordering::Relaxed);
        warn!(%error, "malformed CNI request");
    }
}

/// The answer to one request whose head parsed: its body read (at most [`MAX_BODY`], within
/// [`READ_TIMEOUT`]), then routed.
async fn answer(
    request: Request<Incoming>,
    handler: &Handler,
    stats: &ServerStats,
    operations: &CniMetrics,
) -> Response<Full<Bytes>> {
    let (head, body) = request.into_parts();
    let body = tokio::time::timeout(READ_TIMEOUT, Limited::new(body, MAX_BODY).collect()).await;
    let (status, body) = match body {
        Err(_) => {
            stats.bad_requests.fetch_add(1, Ordering::Relaxed);
            (400, error_body("timed out reading the request"))
        }
        Ok(Err(reason)) => {
            stats.bad_requests.fetch_add(1, Ordering::Relaxed);
            warn!(%reason, "malformed CNI request");
            (400, error_body(&format!("reading the body: {reason}")))
        }
        Ok(Ok(body)) => {
            let start = std::time::Instant::now();
            let path = head.uri.path();
            let (status, body) = route(&head.method, path, &body.to_bytes(), handler, stats).await;
            operations.observe(operation(path), status, start.elapsed());
            (status, body)
        }
    };
    if status >= 400 {
        stats.failures.fetch_add(1, Ordering::Relaxed);
    }
    http_server::response(status, "application/json", body)
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, HandlerError> {
    serde_json::from_slice(body).map_err(|e| HandlerError::BadRequest(format!("JSON: {e}")))
}

async fn route(
    method: &Method,
    path: &str,
    body: &[u8],
    handler: &Handler,
    stats: &ServerStats,
) -> (u16, Vec<u8>) {
    if method != Method::POST {
        return (405, error_body("only POST is served"));
    }
    let result: Result<(u16, Vec<u8>), HandlerError> = async {
        match path {
            wire::PATH_ADD => {
                let request: CniRequest = parse(body)?;
                let response = handler.add(&request).await?;
                Ok((200, serde_json::to_vec(&response).unwrap_or_default()))
            }
            wire::PATH_DEL => {
                handler.del(&parse::<CniRequest>(body)?).await?;
                Ok((204, Vec::new()))
            }
            wire::PATH_CHECK => {
                handler.check(&parse::<CniRequest>(body)?).await?;
                Ok((200, b"{}".to_vec()))
            }
            wire::PATH_STATUS => {
                handler.status().await?;
                Ok((200, b"{}".to_vec()))
            }
            wire::PATH_GC => {
                let request: GcRequest = parse(body)?;
                let collected = handler.gc(&request.valid_attachments).await?;
                stats
                    .collected_by_gc
                    .fetch_add(collected as u64, Ordering::Relaxed);
                Ok((204, Vec::new()))
            }
            other => Err(HandlerError::BadRequest(format!("no endpoint {other}"))),
        }
    }
    .await;
    match result {
        Ok(reply) => reply,
        Err(error) => {
            warn!(path, %error, "CNI request failed");
            let status = match error {
                HandlerError::BadRequest(_) if path.starts_with("/api/v1/") => 400,
                HandlerError::BadRequest(_) => 404,
                HandlerError::Failed(_) => 500,
                HandlerError::NotReady(_) => 503,
                HandlerError::Unservable(_) => 422,
            };
            (status, error_body(&error.to_string()))
        }
    }
}
