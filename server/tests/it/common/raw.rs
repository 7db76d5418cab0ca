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
    let (send, _, task) = h2_pinging_client(addr).await?;
    Some((send, task))
}

/// [`h2_client`] with its connection's pings, to learn when the server has read what
/// was sent before one (see [`read_so_far`]).
pub async fn h2_pinging_client(
    addr: std::net::SocketAddr,
) -> Option<(h2::client::SendRequest<Bytes>, h2::PingPong, JoinHandle<()>)> {
    let socket = TcpStream::connect(addr).await.ok()?;
    let (send, mut connection) = h2::client::handshake(socket).await.ok()?;
    let ping = connection.ping_pong()?;
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    Some((send, ping, task))
}

/// Whether the server has read every frame sent before on `ping`'s connection: it
/// answers a ping only after them.
pub async fn read_so_far(ping: &mut h2::PingPong) -> bool {
    ping.ping(h2::Ping::opaque()).await.is_ok()
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
