//! The HTTP/1.1 client: keep-alive connections sending one request after another.

use std::sync::Arc;
use std::time::Instant;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::measure::{turns, Load, Outcome, Phase, Sender};

/// What a connection sends, every part made once and cloned per request (a clone of
/// `Bytes` or a `HeaderValue` counts a reference), so the generator's work per request
/// is the same for both phases but for the body.
#[derive(Clone)]
pub struct Ask {
    method: Method,
    uri: Uri,
    host: HeaderValue,
    /// For decisions: the `Authorization` value and one body per key.
    decide: Option<(HeaderValue, Arc<[Bytes]>)>,
}

/// The most keys a run may use (their bodies are built before it).
pub const MAX_KEYS: u64 = 1_000_000;

impl Ask {
    /// `GET /healthz` on `host`: the floor, the same server answering without deciding.
    pub fn health(host: &str) -> Result<Self, String> {
        Ok(Self {
            method: Method::GET,
            uri: Uri::from_static("/healthz"),
            host: HeaderValue::from_str(host).map_err(|e| e.to_string())?,
            decide: None,
        })
    }

    /// Decisions of sluicegate's `POST /v1/decide` on `policy`, keys `k0`, `k1`, ….
    pub fn decide(host: &str, token: &str, policy: &str, keys: u64) -> Result<Self, String> {
        let bodies = (0..keys)
            .map(|k| Bytes::from(format!(r#"{{"policy":"{policy}","key":"k{k}"}}"#)))
            .collect();
        Self::posting(host, "/v1/decide", token, bodies)
    }

    /// JSON bodies (one per key) posted to `uri` with `token` as a bearer: every server's
    /// requests carry the same headers, a peer ignoring the token.
    pub fn posting(
        host: &str,
        uri: &'static str,
        token: &str,
        bodies: Arc<[Bytes]>,
    ) -> Result<Self, String> {
        let token = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| e.to_string())?;
        Ok(Self {
            method: Method::POST,
            uri: Uri::from_static(uri),
            decide: Some((token, bodies)),
            ..Self::health(host)?
        })
    }

    /// The key of the `n`th turn's decision.
    pub fn key(&self, n: u64) -> Option<u64> {
        self.decide
            .as_ref()
            .map(|(_, bodies)| n % bodies.len() as u64)
    }

    /// The request a connection sends for its `n`th turn.
    pub fn request(&self, n: u64) -> Request<Full<Bytes>> {
        let body = match (&self.decide, self.key(n)) {
            (Some((_, bodies)), Some(k)) => usize::try_from(k)
                .ok()
                .and_then(|k| bodies.get(k))
                .cloned()
                .unwrap_or_default(),
            _ => Bytes::new(),
        };
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.insert(HOST, self.host.clone());
        if let Some((token, _)) = &self.decide {
            headers.insert(AUTHORIZATION, token.clone());
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        request
    }
}

/// Reads a body to its end without keeping it.
async fn drain(mut body: Incoming) -> Result<(), hyper::Error> {
    while let Some(frame) = body.frame().await {
        frame?;
    }
    Ok(())
}

/// One HTTP/1.1 connection to `addr`.
pub async fn open(
    addr: &str,
) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("no HTTP/1.1 handshake: {e}"))?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Sends `request` once the connection is ready; the answer's status and whole body.
pub async fn exchange(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<(hyper::StatusCode, Bytes), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// One HTTP/1.1 connection's requests. A 429 (a peer's denial) is an answer like any
/// other.
struct Http {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    ask: Ask,
}

impl Sender for Http {
    async fn ready(&mut self) -> Result<(), String> {
        // A request sent before the connection is ready again (its task has not yet
        // taken the last answer's end) is refused.
        self.sender.ready().await.map_err(|e| e.to_string())
    }

    async fn send(&mut self, n: u64) -> Result<(), String> {
        let response = self
            .sender
            .send_request(self.ask.request(n))
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        if status.is_success() || status == StatusCode::TOO_MANY_REQUESTS {
            return drain(response.into_body()).await.map_err(|e| e.to_string());
        }
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        Err(format!(
            "{status} {}",
            String::from_utf8_lossy(&body.to_bytes())
        ))
    }
}

/// Connection `w` sending requests one after another as `load` says.
async fn connection(addr: String, ask: Ask, load: Load, start: Instant, w: usize) -> Outcome {
    match open(&addr).await {
        Ok(sender) => turns(Http { sender, ask }, load, start, w).await,
        Err(why) => {
            let mut outcome = Outcome::default();
            outcome.fail(why);
            outcome
        }
    }
}

/// Sends a few decisions outside the measured phases and checks their JSON: the policy
/// and key asked, a verdict and figures.
pub async fn check_answers(addr: &str, ask: &Ask, policy: &str) -> Result<(), String> {
    let mut sender = open(addr).await?;
    for n in [0, 1, 7919, 123_457] {
        let (status, body) = exchange(&mut sender, ask.request(n)).await?;
        let json: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            format!(
                "{status}: not JSON ({e}): {}",
                String::from_utf8_lossy(&body)
            )
        })?;
        let key = format!("k{}", ask.key(n).unwrap_or_default());
        let fine = status.is_success()
            && json["policy"] == policy
            && json["key"] == key.as_str()
            && json["allowed"].is_boolean()
            && [
                "limit",
                "remaining",
                "retry_after_us",
                "reset_after_us",
                "delay_us",
            ]
            .iter()
            .all(|f| json[f].is_u64());
        if !fine {
            return Err(format!("unexpected answer for {key}: {status} {json}"));
        }
    }
    Ok(())
}

/// `ask` sent over `load.workers` connections to `addr`.
pub async fn phase(addr: &str, ask: Ask, load: Load) -> Phase {
    let start = Instant::now();
    let tasks = (0..load.workers)
        .map(|w| tokio::spawn(connection(addr.to_owned(), ask.clone(), load, start, w)))
        .collect();
    Phase::gather(start, tasks).await
}

/// One call outside the measured phases (setting a server up) on a connection of its
/// own: the answer's JSON, or its status and body if it is not a success.
pub async fn call(
    addr: &str,
    method: Method,
    path: &str,
    token: &str,
    body: &str,
) -> Result<serde_json::Value, String> {
    let mut sender = open(addr).await?;
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .map_err(|e| e.to_string())?;
    let (status, body) = exchange(&mut sender, request).await?;
    if !status.is_success() {
        return Err(format!(
            "{path}: {status} {}",
            String::from_utf8_lossy(&body)
        ));
    }
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}
