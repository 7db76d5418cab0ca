//! Slow and silent clients on real sockets: they are closed by the deadlines, they
//! cannot take the place of others past the connection cap, and they cannot hold a
//! shutdown past its deadline.

use std::time::{Duration, Instant};

use crate::common::*;
use hyper::body::Bytes;
use hyper::{Method, StatusCode};
use sluicegate_server::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::codegen::http;

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

/// Stops `server`, whose --shutdown-timeout is 500 ms and whose clients would hold it
/// 10 s or more: within 5 s.
async fn stops_soon(server: TestServer) {
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), server.stop())
        .await
        .expect("shutdown ends");
    // 4.5 s late allowed on a loaded machine; waiting for the clients takes 10 s or more.
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

/// Whether `/healthz` answers 200 on a new connection within 5 s (a loaded machine's
/// answer; the stalled clients' deadlines are what it would wait for otherwise).
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
        tokio::time::timeout(Duration::from_secs(5), ask).await,
        Ok(Some(true))
    )
}

/// A server whose clients have `header_timeout` to send a request's head.
async fn with_header_timeout(header_timeout: Duration) -> TestServer {
    let (server, _) = TestServer::start_with(Config {
        header_timeout,
        ..config()
    })
    .await;
    server
}

#[tokio::test]
async fn half_sent_request_lines_neither_block_healthz_nor_stay_open() {
    let server = with_header_timeout(Duration::from_millis(500)).await;
    let mut sockets = stalled(server.addr, 300, b"GET / HTTP/1.1\r\n").await;
    assert!(
        healthy(&server).await,
        "/healthz answers beside 300 stalled clients"
    );
    let start = Instant::now();
    for socket in &mut sockets {
        assert!(
            closed(socket, Duration::from_secs(4)).await,
            "a stalled client is closed"
        );
    }
    // The 500 ms deadline late by up to 3.5 s; the default one (5 s) would be later.
    assert!(start.elapsed() < Duration::from_secs(4));
    server.stop().await;
}

#[tokio::test]
async fn a_trickled_head_is_closed_by_the_header_deadline() {
    let server = with_header_timeout(Duration::from_millis(400)).await;
    let mut socket = TcpStream::connect(server.addr).await.expect("connect");
    let start = Instant::now();
    // A byte every 100 ms for up to 4 s: each arrives well within the deadline, the head
    // never does.
    let head = b"GET /healthz HTTP/1.1\r\nx-slow: ".iter();
    for byte in head.chain(std::iter::repeat(&b'a')) {
        if socket.write_all(&[*byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        if start.elapsed() > Duration::from_secs(4) {
            break;
        }
    }
    assert!(closed(&mut socket, Duration::from_secs(1)).await);
    // The 400 ms deadline late by up to 3.6 s; one renewed by each byte closes after 4.4 s.
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    server.stop().await;
}

#[tokio::test]
async fn keep_alive_connections_wait_the_idle_deadline_not_the_header_one() {
    let (server, _) = TestServer::start_with(Config {
        header_timeout: Duration::from_millis(300),
        // 2.4 s more than the pause below: room for a late wake-up.
        idle_timeout: Duration::from_secs(3),
        ..config()
    })
    .await;
    let request = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    let mut socket = TcpStream::connect(server.addr).await.expect("connect");
    let mut buf = [0u8; 1024];
    let mut answered = Instant::now();
    for _ in 0..2 {
        socket.write_all(request).await.expect("send");
        let n = socket.read(&mut buf).await.expect("answer");
        answered = Instant::now();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
        // Longer than the header deadline, shorter than the idle one.
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    assert!(closed(&mut socket, Duration::from_secs(10)).await);
    let waited = answered.elapsed();
    // Half the 3 s idle deadline: not the header one (300 ms), even if the answer was read late.
    assert!(
        waited > Duration::from_millis(1500),
        "closed after {waited:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn connections_past_the_cap_are_refused_at_once_and_others_served_later() {
    let (server, _) = TestServer::start_with(Config {
        max_connections: 8,
        // Long enough that no place frees while the test opens its connections under load.
        header_timeout: Duration::from_secs(4),
        ..config()
    })
    .await;
    // The cap, and the probes' room past it.
    let _held = stalled(server.addr, 8 + 4, b"GET / HTTP/1.1\r\n").await;
    let mut extra = TcpStream::connect(server.addr).await.expect("connect");
    let mut answer = Vec::new();
    // 2 s: late on a loaded machine, yet before a stalled client's 4 s deadline frees a place.
    tokio::time::timeout(Duration::from_secs(2), extra.read_to_end(&mut answer))
        .await
        .expect("refused at once")
        .expect("read");
    assert!(answer.starts_with(b"HTTP/1.1 503"), "{answer:?}");
    // Once the stalled ones are closed by their deadline (4 s, 6 s late allowed), others are served.
    assert!(eventually(Duration::from_secs(10), || healthy(&server)).await);
    server.stop().await;
}

/// Idle keep-alive clients holding every connection leave room for the kubelet's probes:
/// `/healthz` and `/readyz` answer, anything else is refused and closed.
#[tokio::test]
async fn probes_are_answered_while_clients_hold_every_connection() {
    let (server, _) = TestServer::start_with(Config {
        max_connections: 8,
        ..config()
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..8 {
        let mut socket = TcpStream::connect(server.addr).await.expect("connect");
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("send");
        let mut buf = [0u8; 256];
        let n = socket.read(&mut buf).await.expect("an answer");
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        idle.push(socket);
    }
    for _ in 0..3 {
        assert!(healthy(&server).await, "a liveness probe at the cap");
    }
    let ready = call(Method::GET, &server.url("/readyz"), None, None, &[]).await;
    assert_eq!(ready.status, StatusCode::OK);
    let other = call(Method::GET, &server.url("/v1/policies"), None, None, &[]).await;
    assert_eq!(
        other.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        other.text
    );
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
    stops_soon(server).await;
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
        // The 400 ms deadline late by up to 3.6 s; the default one (5 s) would be later.
        assert!(closed(socket, Duration::from_secs(4)).await);
    }
    server.stop().await;
}

/// Whether a new HTTP/2 client gets an answer to a call within 2 s (one refused at the cap
/// is closed at once).
async fn grpc_answers(addr: std::net::SocketAddr) -> bool {
    let ask = async {
        let (mut send, _task) = h2_client(addr).await?;
        let (answer, _) = start_call(&mut send, None, true).await?;
        answer.await.ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), ask).await,
        Ok(Some(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_connections_answering_pings_without_calls_are_closed_when_idle() {
    // Long enough for the five connections to be opened before it on a loaded machine.
    let idle = Duration::from_secs(3);
    let (server, _) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().expect("address")),
        max_connections: 4,
        idle_timeout: idle,
        // Pinged every second: each ping answered (within a second), so keep-alive never
        // closes them.
        grpc_keepalive: Duration::from_secs(1),
        ..config()
    })
    .await;
    let grpc = server.grpc.expect("gRPC listens");
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(h2_client(grpc).await.expect("an HTTP/2 connection"));
    }
    let start = Instant::now();
    assert!(
        !grpc_answers(grpc).await,
        "a fifth connection is over the cap"
    );
    for (_, task) in &mut held {
        // The 3 s deadline late by up to 7 s; without it they would stay for good.
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("an idle connection is closed")
            .expect("its task");
    }
    let waited = start.elapsed();
    // Not before the idle deadline, less 1.5 s the connections may have been open already.
    assert!(waited > idle / 2, "closed after {waited:?}");
    assert!(grpc_answers(grpc).await, "their places are free again");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_connections_with_calls_stay_open_and_shutdown_ends_by_its_deadline() {
    let idle = Duration::from_millis(1500);
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().expect("address")),
        idle_timeout: idle,
        // The open call's message is due by then: past its 3 s wait and a late wake-up.
        header_timeout: Duration::from_secs(10),
        // A ping a second, each answered within one by the client's task.
        grpc_keepalive: Duration::from_secs(1),
        shutdown_timeout: Duration::from_millis(500),
        ..config()
    })
    .await;
    let token = app(&server, &admin, "web").await;
    let t = Some(token.as_str());
    let grpc = server.grpc.expect("gRPC listens");
    let (mut send, mut ping, task) = h2_pinging_client(grpc).await.expect("an HTTP/2 connection");
    // A call in flight (its body not ended) for two idle deadlines.
    let (answer, mut body) = start_call(&mut send, t, false).await.expect("a call");
    tokio::time::sleep(idle * 2).await;
    assert!(!task.is_finished(), "a call in flight holds its connection");
    body.send_data(Bytes::new(), true).expect("the body's end");
    let answer = tokio::time::timeout(Duration::from_secs(5), answer).await;
    assert!(matches!(answer, Ok(Ok(_))), "{answer:?}");
    // Calls arriving more often than the idle deadline, for two of them: 500 ms apart,
    // 1 s late allowed.
    for _ in 0..6 {
        let (answer, _) = start_call(&mut send, t, true).await.expect("a call");
        answer.await.expect("an answer");
        tokio::time::sleep(idle / 3).await;
    }
    assert!(!task.is_finished(), "arriving calls hold their connection");
    // One call left in flight: shutdown waits for it at most its deadline.
    let _in_flight = start_call(&mut send, t, false).await.expect("a call");
    assert!(read_so_far(&mut ping).await, "the server read the call");
    stops_soon(server).await;
}

/// The gRPC status a call was answered with (in its head: a refusal has no body).
async fn grpc_status(answer: h2::client::ResponseFuture, within: Duration) -> Option<String> {
    let answer = tokio::time::timeout(within, answer).await.ok()?.ok()?;
    let status = answer.headers().get("grpc-status")?;
    Some(status.to_str().ok()?.to_owned())
}

/// A call is admitted before its message is read: without a valid token it is answered
/// at once, its message never awaited; past `--grpc-max-calls` in flight, at once too;
/// admitted, its message is due within `--header-timeout`, not the call's 10 s. Each
/// bound below is a second or two where the server's own deadline is 10 s: room for a
/// loaded machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_hold_nothing_before_they_are_admitted() {
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().expect("address")),
        grpc_max_calls: 4,
        // Long enough for the five calls to be open at once on a loaded machine.
        header_timeout: Duration::from_secs(3),
        ..config()
    })
    .await;
    let token = app(&server, &admin, "web").await;
    let grpc = server.grpc.expect("gRPC listens");
    let (mut send, _task) = h2_client(grpc).await.expect("an HTTP/2 connection");
    for bad in [None, Some("sga_nobody")] {
        let (answer, _body) = start_call(&mut send, bad, false).await.expect("a call");
        let status = grpc_status(answer, Duration::from_secs(2)).await;
        assert_eq!(status.as_deref(), Some("16"), "UNAUTHENTICATED at once");
    }
    // Five calls for four places, the fifth on another connection (the cap is the
    // server's): whichever four it reads first hold the places and the other is refused
    // at once; the server's read order across connections is its own, so all five are
    // awaited together.
    let mut calls = Vec::new();
    for _ in 0..4 {
        calls.push(
            start_call(&mut send, Some(&token), false)
                .await
                .expect("a call"),
        );
    }
    let (mut other, _other_task) = h2_client(grpc).await.expect("an HTTP/2 connection");
    calls.push(
        start_call(&mut other, Some(&token), false)
            .await
            .expect("a call"),
    );
    let start = Instant::now();
    let (answers, _bodies): (Vec<_>, Vec<_>) = calls.into_iter().unzip();
    // 8 s: the 3 s deadline plus a loaded machine's delay; a deadline never applied fails.
    let mut statuses: Vec<_> = futures_util::future::join_all(
        answers
            .into_iter()
            .map(|answer| grpc_status(answer, Duration::from_secs(8))),
    )
    .await
    .into_iter()
    .map(|status| status.unwrap_or_else(|| "none".into()))
    .collect();
    statuses.sort();
    assert_eq!(
        statuses,
        ["4", "4", "4", "4", "8"],
        "four DEADLINE_EXCEEDED (a message never sent), one RESOURCE_EXHAUSTED"
    );
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    let (answer, _body) = start_call(&mut send, Some(&token), true)
        .await
        .expect("a call");
    let status = grpc_status(answer, Duration::from_secs(2)).await;
    assert_ne!(status.as_deref(), Some("8"), "the places are free again");
    server.stop().await;
}

/// Metadata past its bound (8 KiB) is refused before any call is made of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_with_too_much_metadata_is_refused() {
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().expect("address")),
        ..config()
    })
    .await;
    let token = app(&server, &admin, "web").await;
    let grpc = server.grpc.expect("gRPC listens");
    let (send, _task) = h2_client(grpc).await.expect("an HTTP/2 connection");
    let request =
        http::Request::post("http://x/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
            .header("content-type", "application/grpc")
            .header("authorization", format!("Bearer {token}"))
            .header("x-padding", "p".repeat(14 * 1024))
            .body(())
            .expect("a request");
    let send = send.ready().await.expect("ready");
    let answer = send
        .clone()
        .send_request(request, true)
        .map(|(answer, _)| answer);
    let refused = match answer {
        Err(_) => true,
        // 10 s: an answer on a loaded machine; what is checked is which answer.
        Ok(answer) => match tokio::time::timeout(Duration::from_secs(10), answer).await {
            Ok(Err(_)) => true,
            Ok(Ok(answer)) => answer.status() == http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Err(_) => false,
        },
    };
    assert!(refused, "14 KiB of metadata is refused");
    server.stop().await;
}
