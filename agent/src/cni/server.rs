//! The CNI socket: HTTP/1.1 on a unix socket (mode 0600), one request per connection, routed to
//! the [`Handler`]. Kube-OVN's statuses: ADD 200 + JSON, DEL 204; CHECK and STATUS 200, GC 204;
//! failures 400 (bad request), 422 (the pod cannot be served as configured), 500 (failed) or
//! 503 (not ready) with `{"error": …}`. Malformed
//! requests are answered and counted, never fatal; slow clients time out.

use std::{
    os::unix::fs::PermissionsExt,
    path::Path,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use ovnbpf_cni::{
    http::{self, MAX_HEAD},
    wire::{self, CniRequest, CniResponse, GcRequest},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{UnixListener, UnixStream},
};
use tracing::{Instrument, info_span, warn};

use super::handler::{Handler, HandlerError};
use crate::metrics::{CniMetrics, ServerStats};

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

/// Reads one request: head and body.
async fn read_request(stream: &mut UnixStream) -> Result<(http::RequestHead, Vec<u8>), String> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0_u8; 4096];
    let end = loop {
        if let Some(end) = http::head_end(&buffer) {
            break end;
        }
        if buffer.len() > MAX_HEAD {
            return Err("request head too long".into());
        }
        let read = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("connection closed before the request was complete".into());
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = http::parse_request_head(&buffer[..end - 2]).map_err(|e| e.to_string())?;
    let mut body = buffer[end..].to_vec();
    while body.len() < head.content_length {
        let read = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("connection closed inside the body".into());
        }
        body.extend_from_slice(&chunk[..read]);
    }
    body.truncate(head.content_length);
    Ok((head, body))
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

async fn connection(
    mut stream: UnixStream,
    handler: &Handler,
    stats: &ServerStats,
    operations: &CniMetrics,
) {
    stats.requests.fetch_add(1, Ordering::Relaxed);
    let (status, body) = match tokio::time::timeout(READ_TIMEOUT, read_request(&mut stream)).await {
        Err(_) => {
            stats.bad_requests.fetch_add(1, Ordering::Relaxed);
            (400, error_body("timed out reading the request"))
        }
        Ok(Err(reason)) => {
            stats.bad_requests.fetch_add(1, Ordering::Relaxed);
            warn!(%reason, "malformed CNI request");
            (400, error_body(&reason))
        }
        Ok(Ok((head, body))) => {
            let start = std::time::Instant::now();
            let (status, body) = route(&head, &body, handler, stats).await;
            operations.observe(operation(&head.path), status, start.elapsed());
            (status, body)
        }
    };
    if status >= 400 {
        stats.failures.fetch_add(1, Ordering::Relaxed);
    }
    let response = http::encode_response(status, &body);
    if let Err(error) = stream.write_all(&response).await {
        warn!(%error, "writing the CNI response failed");
    }
    let _ = stream.shutdown().await;
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, HandlerError> {
    serde_json::from_slice(body).map_err(|e| HandlerError::BadRequest(format!("JSON: {e}")))
}

async fn route(
    head: &http::RequestHead,
    body: &[u8],
    handler: &Handler,
    stats: &ServerStats,
) -> (u16, Vec<u8>) {
    if head.method != "POST" {
        return (405, error_body("only POST is served"));
    }
    let result: Result<(u16, Vec<u8>), HandlerError> = async {
        match head.path.as_str() {
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
            warn!(path = head.path, %error, "CNI request failed");
            let status = match error {
                HandlerError::BadRequest(_) if head.path.starts_with("/api/v1/") => 400,
                HandlerError::BadRequest(_) => 404,
                HandlerError::Failed(_) => 500,
                HandlerError::NotReady(_) => 503,
                HandlerError::Unservable(_) => 422,
            };
            (status, error_body(&error.to_string()))
        }
    }
}
