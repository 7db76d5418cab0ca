//! Raw HTTP/2 clients on real sockets: a gRPC call can be left in flight, as a slow
//! client leaves it.

use hyper::body::Bytes;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tonic::codegen::http;

/// An HTTP/2 client on `addr`: its handle for requests, and its connection's task,
/// which answers the server's pings and ends when the server closes the connection.
pub async fn h2_client(
    addr: std::net::SocketAddr,
) -> Option<(h2::client::SendRequest<Bytes>, JoinHandle<()>)> {
    let socket = TcpStream::connect(addr).await.ok()?;
    let (send, connection) = h2::client::handshake(socket).await.ok()?;
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    Some((send, task))
}

/// Starts a rate limit call on `send` with `token` (if any), its body ended at once or
/// left open; `None` when the connection takes no call.
pub async fn start_call(
    send: &mut h2::client::SendRequest<Bytes>,
    token: Option<&str>,
    end: bool,
) -> Option<(h2::client::ResponseFuture, h2::SendStream<Bytes>)> {
    let mut request =
        http::Request::post("http://x/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
            .header("content-type", "application/grpc")
            .header("te", "trailers");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = request.body(()).ok()?;
    send.clone()
        .ready()
        .await
        .ok()?
        .send_request(request, end)
        .ok()
}
