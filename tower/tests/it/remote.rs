//! The layer on a limit kept by a real `sluicegate serve` on loopback: decisions and
//! headers, one pooled connection for many decisions, and the fail policy when the
//! service is stopped, hangs or refuses the app.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{get, root, serve};
use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sluicegate_server::{Config, Server};
use sluicegate_tower::{Quota, RateLimitLayer, RateLimitPolicy, Remote, RemoteFail};
use tokio::net::{TcpListener, TcpStream};

const MINUTE: Duration = Duration::from_secs(60);

/// A `sluicegate serve` in this process with an app `web` and a policy `api` (a bucket of
/// 3 a minute) it may use: its address, the app's token, and a handle that stops it.
struct Service {
    addr: SocketAddr,
    token: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Service {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().to_path_buf(),
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Config::default()
        };
        let admin = sluicegate_server::init_admin(&config, "root")
            .await
            .unwrap();
        let server = Server::bind(config).await.unwrap();
        let addr = server.local_addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = server
                .run(async {
                    let _ = stopped.await;
                })
                .await;
        });
        let url = format!("http://{addr}");
        let (status, app) = call(Method::POST, &url, "/v1/apps", &admin, r#"{"name":"web"}"#).await;
        assert_eq!(status, StatusCode::CREATED, "{app}");
        let app: serde_json::Value = serde_json::from_str(&app).unwrap();
        let policy =
            r#"{"algorithm":"token-bucket","capacity":3,"rate":3,"period":"1m","apps":["web"]}"#;
        let (status, body) = call(Method::PUT, &url, "/v1/policies/api", &admin, policy).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        Self {
            addr,
            token: app["token"].as_str().unwrap().to_owned(),
            stop: Some(stop),
            task,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// One request to the service: its status and body.
async fn call(
    method: Method,
    url: &str,
    path: &str,
    token: &str,
    body: &str,
) -> (StatusCode, String) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let request = http::Request::builder()
        .method(method)
        .uri(format!("{url}{path}"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// An app limited by `remote`, announcing the service's policy.
async fn app(remote: Remote) -> SocketAddr {
    let layer = RateLimitLayer::new(RateLimitPolicy::new("api", 3, MINUTE).unwrap(), remote);
    serve(root("ok").layer(layer)).await
}

/// Forwards connections to `to`, counting them.
async fn counting_proxy(to: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut server) = TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (addr, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_decides_and_the_headers_say_so() {
    let service = Service::start().await;
    let remote = Remote::new(&service.url(), &service.token, "api").unwrap();
    let addr = app(remote).await;
    for left in [2, 1, 0] {
        let reply = get(addr, "/", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("ratelimit-policy"), Some("\"api\";q=3;w=60"));
        // One token back every 20 s.
        let t = if left == 2 { 20 } else { 20 * (3 - left) };
        assert_eq!(
            reply.header("ratelimit"),
            Some(format!("\"api\";r={left};t={t}").as_str())
        );
    }
    let denied = get(addr, "/", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), Some("20"));
    // The service holds the state: the same key asked directly is denied too.
    let (status, body) = call(
        Method::POST,
        &service.url(),
        "/v1/decide",
        &service.token,
        r#"{"policy":"api","key":"ip:127.0.0.1"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("\"allowed\":false"), "{body}");
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_reuse_one_connection() {
    let service = Service::start().await;
    let (proxy, connections) = counting_proxy(service.addr).await;
    let remote = Remote::new(&format!("http://{proxy}"), &service.token, "api").unwrap();
    let addr = app(remote).await;
    for _ in 0..20 {
        get(addr, "/", &[]).await;
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_service_follows_the_fail_policy() {
    let service = Service::start().await;
    let (url, token) = (service.url(), service.token.clone());
    let remote = |fail| Remote::new(&url, &token, "api").unwrap().on_failure(fail);
    let closed = app(remote(RemoteFail::Closed)).await;
    let error = app(remote(RemoteFail::Error)).await;
    let open = app(remote(RemoteFail::Open)).await;
    let local = Arc::new(Quota::per(1, MINUTE).in_process(100).unwrap());
    let local = app(remote(RemoteFail::Local(local))).await;
    // Up: the service decides for all three (one key, one shared limit of 3;
    // `error` waits for the outage).
    assert_eq!(get(closed, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(get(open, "/", &[]).await.status, StatusCode::OK);
    let reply = get(local, "/", &[]).await;
    assert_eq!(reply.header("ratelimit"), Some("\"api\";r=0;t=60"));
    service.stop().await;
    // Down: 503 (denied or reported alike), admitted with no figures, and the local
    // limit of 1 (then 429).
    for fails in [closed, error] {
        let reply = get(fails, "/", &[]).await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    let reply = get(open, "/", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit"), None);
    let reply = get(local, "/", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit"), Some("\"api\";r=0;t=60"));
    assert_eq!(
        get(local, "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// In shadow mode a stopped service's refusal (failing closed) lets the request through,
/// counted as a would-be denial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_lets_a_refusal_through_and_counts_it() {
    let service = Service::start().await;
    let remote = Remote::new(&service.url(), &service.token, "api")
        .unwrap()
        .on_failure(RemoteFail::Closed);
    let layer =
        RateLimitLayer::new(RateLimitPolicy::new("api", 3, MINUTE).unwrap(), remote).shadow(true);
    let addr = serve(root("ok").layer(layer.clone())).await;
    for _ in 0..4 {
        assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
    }
    assert_eq!(
        layer.shadow_denied(),
        1,
        "the fourth was over the limit of 3"
    );
    service.stop().await;
    let reply = get(addr, "/", &[]).await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    assert_eq!(layer.shadow_denied(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_service_is_bounded_by_the_timeout() {
    // Accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let remote = Remote::new(&format!("http://{silent}"), "sga_x", "api")
        .unwrap()
        .timeout(Duration::from_millis(200));
    let addr = app(remote).await;
    let start = Instant::now();
    let reply = get(addr, "/", &[]).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    let took = start.elapsed();
    // Never before the 200 ms timeout; 5 s late allowed, a service never answering hangs.
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_app_is_never_admitted() {
    let service = Service::start().await;
    // A wrong token (401) and a policy the app may not use (403), even failing open.
    for (token, policy) in [("sga_wrong", "api"), (service.token.as_str(), "other")] {
        let remote = Remote::new(&service.url(), token, policy)
            .unwrap()
            .on_failure(RemoteFail::Open);
        let reply = get(app(remote).await, "/", &[]).await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    service.stop().await;
}

#[test]
fn urls_and_tokens_are_checked() {
    for bad in [
        "",
        "localhost:8080",
        "https://example.test",
        "http://",
        "ftp://x",
    ] {
        assert!(Remote::new(bad, "sga_x", "api").is_err(), "{bad}");
    }
    assert!(Remote::new("http://127.0.0.1:1", "bad\ntoken", "api").is_err());
    assert!(Remote::new("http://127.0.0.1:1/", "sga_x", "api").is_ok());
}
