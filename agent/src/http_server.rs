//! HTTP/1.1 as the agent's two servers serve it (the CNI socket, the metrics port), through
//! hyper: one request per connection, its head within a time limit; and the response they
//! answer with. Touches only the connection it is given.

use std::{convert::Infallible, future::Future, time::Duration};

use http_body_util::Full;
use hyper::{
    Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{CONTENT_TYPE, HeaderValue},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};

/// Serves the one request of connection `io` with `answer`; an error for a request that does
/// not parse (hyper answers it 400) or whose head took longer than `head_timeout`.
pub async fn serve_one<T, F, Fut>(
    io: T,
    head_timeout: Duration,
    answer: F,
) -> Result<(), hyper::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    F: Fn(Request<Incoming>) -> Fut,
    Fut: Future<Output = Response<Full<Bytes>>>,
{
    let service = service_fn(|request| {
        let answered = answer(request);
        async move { Ok::<_, Infallible>(answered.await) }
    });
    http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .keep_alive(false)
        .serve_connection(TokioIo::new(io), service)
        .await
}

/// A response with `status`, `content_type` and `body`.
pub fn response(
    status: u16,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
