//! HTTP/1.1 as the CNI socket speaks it, through hyper: the plugin's client (one request per
//! connection, on a current-thread Tokio runtime made for it: the plugin makes one request per
//! run), and the body limit the agent's server applies too. The framing, header parsing and
//! errors are hyper's; bodies are read up to [`MAX_BODY`].

use std::{io, path::Path, time::Duration};

use http_body_util::{BodyExt, Full, Limited};
use hyper::{
    Request,
    body::Bytes,
    header::{CONTENT_TYPE, HOST},
};
use hyper_util::rt::TokioIo;

/// Largest body accepted, either way.
pub const MAX_BODY: usize = 1024 * 1024;

/// A response as the client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

fn other(context: &str, error: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{context}: {error}"))
}

/// POSTs `body` (JSON) to `path` on the server at unix socket `socket` and returns its response;
/// the whole exchange within `timeout`.
pub fn post(socket: &Path, path: &str, body: &[u8], timeout: Duration) -> io::Result<Response> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    runtime.block_on(async {
        tokio::time::timeout(timeout, exchange(socket, path, body))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the agent did not answer"))?
    })
}

async fn exchange(socket: &Path, path: &str, body: &[u8]) -> io::Result<Response> {
    let stream = tokio::net::UnixStream::connect(socket).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| other("HTTP handshake", e))?;
    // Drives the connection while the request is sent and its answer read.
    let driver = tokio::spawn(connection);
    let request = Request::post(path)
        .header(HOST, "ovnbpf")
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::copy_from_slice(body)))
        .map_err(|e| other("building the request", e))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| other("sending the request", e))?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| other("reading the response", e))?
        .to_bytes()
        .to_vec();
    driver.abort();
    Ok(Response { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A one-shot server on a unix socket: reads the request head and whatever body it has
    /// seen, writes `answer`, closes; returns what it read.
    fn serve_once(answer: &'static [u8]) -> (tempfile_path::Dir, std::thread::JoinHandle<String>) {
        let dir = tempfile_path::Dir::new();
        let listener = std::os::unix::net::UnixListener::bind(dir.socket()).unwrap();
        let thread = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut seen = Vec::new();
            let mut chunk = [0u8; 4096];
            while !String::from_utf8_lossy(&seen).contains("{\"a\":1}") {
                let read = stream.read(&mut chunk).unwrap();
                if read == 0 {
                    break;
                }
                seen.extend_from_slice(&chunk[..read]);
            }
            stream.write_all(answer).unwrap();
            String::from_utf8_lossy(&seen).into_owned()
        });
        (dir, thread)
    }

    /// A directory of its own for a test socket, removed on drop.
    mod tempfile_path {
        pub struct Dir(std::path::PathBuf);
        impl Dir {
            pub fn new() -> Self {
                let path = std::env::temp_dir().join(format!(
                    "ovnbpf-cni-http-{}-{:?}",
                    std::process::id(),
                    std::thread::current().id()
                ));
                let _ = std::fs::remove_dir_all(&path);
                std::fs::create_dir_all(&path).unwrap();
                Self(path)
            }
            pub fn socket(&self) -> std::path::PathBuf {
                self.0.join("s.sock")
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn a_request_is_posted_and_its_answer_read() {
        let (dir, server) = serve_once(
            b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\nconnection: close\r\n\r\n{\"b\":2}",
        );
        let response = post(
            &dir.socket(),
            "/api/v1/add",
            br#"{"a":1}"#,
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.body, br#"{"b":2}"#);
        let seen = server.join().unwrap().to_ascii_lowercase();
        assert!(seen.starts_with("post /api/v1/add http/1.1\r\n"), "{seen}");
        assert!(seen.contains("content-type: application/json"), "{seen}");
        assert!(seen.contains("content-length: 7"), "{seen}");
    }

    #[test]
    fn a_cut_answer_and_a_silent_agent_are_errors() {
        let (dir, server) = serve_once(b"HTTP/1.1 200 OK\r\ncontent-length: 70\r\n\r\n{\"b\":2}");
        assert!(post(&dir.socket(), "/x", br#"{"a":1}"#, Duration::from_secs(5)).is_err());
        server.join().unwrap();
        let (dir, server) = serve_once(b"NOT HTTP\r\n\r\n");
        assert!(post(&dir.socket(), "/x", br#"{"a":1}"#, Duration::from_secs(5)).is_err());
        server.join().unwrap();
        let silent = std::os::unix::net::UnixListener::bind(dir.socket().with_extension("2"));
        let silent = silent.unwrap();
        let error = post(
            &dir.socket().with_extension("2"),
            "/x",
            b"{}",
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        drop(silent);
    }
}
