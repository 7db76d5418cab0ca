//! A real axum server on a loopback port and hyper's client.
#![allow(dead_code)]

use std::net::SocketAddr;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

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
