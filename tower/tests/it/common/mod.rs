//! A real axum server on a loopback port and hyper's client.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sluicegate_tower::{Backend, Key, Pending, Settled};

/// Serves `app` on a free loopback port, recording each connection's peer address.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// An app answering `body` to a GET of `/`.
pub fn root(body: &'static str) -> axum::Router {
    axum::Router::new().route("/", axum::routing::get(move || async move { body }))
}

/// One response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// A client; `pooled: false` opens a new connection per request.
pub fn client(pooled: bool) -> Client<hyper_util::client::legacy::connect::HttpConnector, Body> {
    let mut builder = Client::builder(TokioExecutor::new());
    if !pooled {
        builder.pool_max_idle_per_host(0);
    }
    builder.build_http()
}

/// GET `path` with `headers` on a new connection.
pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    send(&client(false), addr, path, headers).await
}

pub async fn send(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Body>,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let mut request = Request::get(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body: Bytes = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// A limiter counting the reservations it has answered: a test sends its next request
/// once the last is booked, so the bookings are in order without a sleep between them.
#[derive(Debug)]
pub struct Booked<L> {
    limiter: L,
    booked: Arc<AtomicUsize>,
}

impl<L> Booked<L> {
    pub fn new(limiter: L) -> Self {
        Self {
            limiter,
            booked: Arc::default(),
        }
    }

    /// Waits (bounded) until `n` reservations have been answered.
    pub async fn until(&self, n: usize) {
        let start = std::time::Instant::now();
        while self.booked.load(Ordering::SeqCst) < n {
            assert!(start.elapsed() < Duration::from_secs(5), "{n} never booked");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

impl<L: Backend> Backend for Booked<L> {
    fn check(&self, key: &Key, cost: u64) -> Pending {
        self.limiter.check(key, cost)
    }

    fn reserve(&self, key: &Key, cost: u64, max_wait: Duration) -> Pending {
        let booked = self.booked.clone();
        match self.limiter.reserve(key, cost, max_wait) {
            Pending::Ready(verdict) => {
                booked.fetch_add(1, Ordering::SeqCst);
                Pending::Ready(verdict)
            }
            Pending::Later(answer) => Pending::Later(Box::pin(async move {
                let verdict = answer.await;
                booked.fetch_add(1, Ordering::SeqCst);
                verdict
            })),
        }
    }

    fn report(&self, key: &Key, adjustment: i64) -> Pending<Settled> {
        self.limiter.report(key, adjustment)
    }
}
