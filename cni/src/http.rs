//! HTTP/1.1 as the CNI socket speaks it: one request per connection (`Connection: close`),
//! bodies framed by `Content-Length`. The plugin's blocking client, and the head parsing the
//! agent's server shares. Limits keep a bad peer from growing buffers without bound.

use std::{
    io::{self, Read, Write},
    os::unix::net::UnixStream,
    path::Path,
    time::Duration,
};

/// Longest request or response head accepted.
pub const MAX_HEAD: usize = 16 * 1024;
/// Largest body accepted.
pub const MAX_BODY: usize = 1024 * 1024;

/// A parsed request line and the headers that matter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    pub path: String,
    pub content_length: usize,
}

/// A response as the client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Where the head ends (index just past the blank line), if it is complete.
#[must_use]
pub fn head_end(buffer: &[u8]) -> Option<usize> {
    buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

fn content_length(lines: std::str::Lines<'_>) -> io::Result<usize> {
    let mut length = 0;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            length = value
                .trim()
                .parse()
                .map_err(|_| bad(format!("bad Content-Length {value:?}")))?;
        }
    }
    if length > MAX_BODY {
        return Err(bad(format!("body of {length} bytes exceeds {MAX_BODY}")));
    }
    Ok(length)
}

/// Parses a request head (request line and headers, without the blank line).
pub fn parse_request_head(head: &[u8]) -> io::Result<RequestHead> {
    let text = std::str::from_utf8(head).map_err(|_| bad("request head is not UTF-8"))?;
    let mut lines = text.lines();
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(path), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad(format!("bad request line {request_line:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(bad(format!("unsupported protocol {version:?}")));
    }
    Ok(RequestHead {
        method: method.to_string(),
        path: path.to_string(),
        content_length: content_length(lines)?,
    })
}

/// Encodes a response with a JSON (or empty) body.
#[must_use]
pub fn encode_response(status: u16, body: &[u8]) -> Vec<u8> {
    encode_response_as(status, "application/json", body)
}

/// Encodes a response whose body has `content_type`.
#[must_use]
pub fn encode_response_as(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Parses a whole response (read until the server closed the connection).
pub fn parse_response(bytes: &[u8]) -> io::Result<Response> {
    let end = head_end(bytes).ok_or_else(|| bad("response without a complete head"))?;
    let text = std::str::from_utf8(&bytes[..end]).map_err(|_| bad("response head is not UTF-8"))?;
    let mut lines = text.lines();
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
    let length = content_length(lines)?;
    let body = &bytes[end..];
    if body.len() < length {
        return Err(bad(format!(
            "response body cut short: {} of {length} bytes",
            body.len()
        )));
    }
    Ok(Response {
        status,
        body: body[..length].to_vec(),
    })
}

/// POSTs `body` (JSON) to `path` on the server at unix socket `socket` and returns its response.
pub fn post(socket: &Path, path: &str, body: &[u8], timeout: Duration) -> io::Result<Response> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: dummy\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request)?;
    let mut response = Vec::new();
    stream
        .take((MAX_HEAD + MAX_BODY) as u64)
        .read_to_end(&mut response)?;
    parse_response(&response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_parse_and_reject_garbage() {
        let head = parse_request_head(
            b"POST /api/v1/add HTTP/1.1\r\nHost: dummy\r\ncontent-length: 12\r\n",
        )
        .unwrap();
        assert_eq!(
            (head.method.as_str(), head.path.as_str()),
            ("POST", "/api/v1/add")
        );
        assert_eq!(head.content_length, 12);
        for garbage in [
            &b"POST\r\n"[..],
            b"POST /x SPDY/3\r\n",
            b"POST /x HTTP/1.1\r\nContent-Length: lots\r\n",
            b"POST /x HTTP/1.1\r\nContent-Length: 99999999\r\n",
            b"\xff\xfe",
        ] {
            assert!(parse_request_head(garbage).is_err(), "{garbage:?}");
        }
    }

    #[test]
    fn responses_round_trip_and_short_bodies_are_errors() {
        let encoded = encode_response(200, br#"{"a":1}"#);
        let response = parse_response(&encoded).unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.body, br#"{"a":1}"#);
        let empty = parse_response(&encode_response(204, b"")).unwrap();
        assert_eq!((empty.status, empty.body.len()), (204, 0));
        assert!(parse_response(&encoded[..encoded.len() - 2]).is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
    }
}
