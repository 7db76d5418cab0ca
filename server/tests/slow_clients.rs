//! Slow and silent clients on real sockets: they are closed by the deadlines, they
//! cannot take the place of others past the connection cap, and they cannot hold a
//! shutdown past its deadline.

mod common;

use std::time::{Duration, Instant};

use common::*;
use sluicegate_server::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Opens `n` connections to `addr`, each sending `bytes` and nothing more.
async fn stalled(addr: std::net::SocketAddr, n: usize, bytes: &[u8]) -> Vec<TcpStream> {
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n {
        let mut socket = TcpStream::connect(addr).await.expect("connect");
        socket.write_all(bytes).await.expect("send");
        sockets.push(socket);
    }
    sockets
}

/// Whether the server closed `socket` within `within` (what it sent before is skipped).
async fn closed(socket: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, socket.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// Whether `/healthz` answers 200 on a new connection within 2 s.
async fn healthy(server: &TestServer) -> bool {
    let ask = async {
        let mut socket = TcpStream::connect(server.addr).await.ok()?;
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .ok()?;
        let mut buf = [0u8; 64];
        let n = socket.read(&mut buf).await.ok()?;
        Some(buf[..n].starts_with(b"HTTP/1.1 200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), ask).await,
        Ok(Some(true))
    )
}

#[tokio::test]
async fn half_sent_request_lines_neither_block_healthz_nor_stay_open() {
    let (server, _) = TestServer::start_with(Config {
        header_timeout: Duration::from_millis(500),
        ..config()
    })
    .await;
    let mut sockets = stalled(server.addr, 300, b"GET / HTTP/1.1\r\n").await;
    assert!(
        healthy(&server).await,
        "/healthz answers beside 300 stalled clients"
    );
    let start = Instant::now();
    for socket in &mut sockets {
        assert!(
            closed(socket, Duration::from_secs(3)).await,
            "a stalled client is closed"
        );
    }
    assert!(start.elapsed() < Duration::from_secs(3));
    server.stop().await;
}

#[tokio::test]
async fn a_trickled_head_is_closed_by_the_header_deadline() {
    let (server, _) = TestServer::start_with(Config {
        header_timeout: Duration::from_millis(400),
        ..config()
    })
    .await;
    let mut socket = TcpStream::connect(server.addr).await.expect("connect");
    let start = Instant::now();
    // A byte every 100 ms: each arrives well within the deadline, the head never does.
    for byte in b"GET /healthz HTTP/1.1\r\nx-slow: aaaaaaaaaaaa" {
        if socket.write_all(&[*byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        if start.elapsed() > Duration::from_secs(2) {
            break;
        }
    }
    assert!(closed(&mut socket, Duration::from_secs(1)).await);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    server.stop().await;
}

#[tokio::test]
async fn keep_alive_connections_wait_the_idle_deadline_not_the_header_one() {
    let (server, _) = TestServer::start_with(Config {
        header_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(1200),
        ..config()
    })
    .await;
    let request = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    let mut socket = TcpStream::connect(server.addr).await.expect("connect");
    let mut buf = [0u8; 1024];
    for _ in 0..2 {
        socket.write_all(request).await.expect("send");
        let n = socket.read(&mut buf).await.expect("answer");
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
        // Longer than the header deadline, shorter than the idle one.
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    let start = Instant::now();
    assert!(closed(&mut socket, Duration::from_secs(3)).await);
    let waited = start.elapsed();
    assert!(
        waited > Duration::from_millis(300),
        "closed after {waited:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn connections_past_the_cap_are_refused_at_once_and_others_served_later() {
    let (server, _) = TestServer::start_with(Config {
        max_connections: 8,
        header_timeout: Duration::from_millis(500),
        ..config()
    })
    .await;
    let _held = stalled(server.addr, 8, b"GET / HTTP/1.1\r\n").await;
    let start = Instant::now();
    let mut extra = TcpStream::connect(server.addr).await.expect("connect");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(1), extra.read_to_end(&mut answer))
        .await
        .expect("refused at once")
        .expect("read");
    assert!(answer.starts_with(b"HTTP/1.1 503"), "{answer:?}");
    assert!(start.elapsed() < Duration::from_millis(500));
    // Once the stalled ones are closed by their deadline, others are served.
    assert!(eventually(Duration::from_secs(3), || healthy(&server)).await);
    server.stop().await;
}

#[tokio::test]
async fn shutdown_ends_by_its_deadline_whatever_clients_do() {
    let (server, _) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().expect("address")),
        header_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(60),
        shutdown_timeout: Duration::from_millis(500),
        ..config()
    })
    .await;
    let grpc = server.grpc.expect("gRPC listens");
    let _http = stalled(server.addr, 50, b"POST /v1/decide HTTP/1.1\r\n").await;
    // Half of HTTP/2's preface.
    let _grpc = stalled(grpc, 50, b"PRI * HTTP/2.0\r\n").await;
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(3), server.stop())
        .await
        .expect("shutdown ends");
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn silent_grpc_connections_are_closed_by_the_header_deadline() {
    let (server, _) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().expect("address")),
        header_timeout: Duration::from_millis(400),
        ..config()
    })
    .await;
    let grpc = server.grpc.expect("gRPC listens");
    let mut silent = stalled(grpc, 20, b"").await;
    for socket in &mut silent {
        assert!(closed(socket, Duration::from_secs(2)).await);
    }
    server.stop().await;
}
