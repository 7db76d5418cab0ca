//! A limit kept by a `sluicegate serve` (the `remote` feature): each decision is one
//! `POST /v1/decide` over a pooled keep-alive connection, bounded by a timeout; when the
//! service cannot answer, the [`RemoteFail`] policy does.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use sluicegate_core::{Decision, FailPolicy};

use crate::error::Error;
use crate::key::Key;
use crate::limiter::{Backend, InProcess, Pending, Verdict};

/// The longest decision answer read (the server's are about 200 bytes).
const MAX_ANSWER: usize = 16 * 1024;

/// What a [`Remote`] limiter answers when the service is unreachable, times out or
/// fails (a 5xx): the core's [`FailPolicy`], whose fallback limiter is in process.
///
/// - [`Error`](FailPolicy::Error), the default: report the service unavailable, which
///   the middleware answers 503 (the limiter's fault, not the client's quota).
/// - [`Closed`](FailPolicy::Closed): deny. With no figures to answer a 429 with, the
///   middleware answers 503 too, as for a Redis limit failing closed.
/// - [`Open`](FailPolicy::Open): admit, with no rate-limit headers: keep serving at the
///   cost of the limit.
/// - [`Local`](FailPolicy::Local): decide in this process: each replica enforces this
///   limit alone meanwhile.
///
/// A refusal of the request itself (401, 403, 422: a wrong token, a policy the app may
/// not use, a key too long) is a configuration error, answered 500 whatever the
/// policy, never admitted.
pub type RemoteFail = FailPolicy<Arc<InProcess>>;

/// A limit decided by a `sluicegate serve` at `server` for the app whose token is given:
/// every request is one `POST /v1/decide` of the policy, the request's key and cost.
/// Clones of the layer share one connection pool (HTTP/1.1 keep-alive), so a busy
/// service reuses its connections. Plain `http://` (a service on the same host or
/// network); the timeout bounds the whole exchange (1 s unless set).
///
/// ```no_run
/// use std::time::Duration;
/// use sluicegate_tower::{RateLimitPolicy, RateLimitLayer, Remote, RemoteFail};
///
/// # fn run() -> Result<(), sluicegate_tower::Error> {
/// let token = std::env::var("SLUICEGATE_APP_TOKEN").unwrap_or_default();
/// let remote = Remote::new("http://127.0.0.1:8080", &token, "api")?
///     .timeout(Duration::from_millis(200))
///     .on_failure(RemoteFail::Open);
/// // The headers announce the server's policy: 100 a minute.
/// let layer = RateLimitLayer::new(RateLimitPolicy::new("api", 100, Duration::from_secs(60))?, remote);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Remote {
    inner: Arc<Inner>,
}

#[derive(Debug, Clone)]
struct Inner {
    client: Client<HttpConnector, Full<Bytes>>,
    decide: Uri,
    authorization: HeaderValue,
    policy: String,
    timeout: Duration,
    fail: RemoteFail,
}

/// Why a decision could not be had from the service.
enum Failure {
    /// Unreachable, too slow, or failing (5xx): the fail policy answers.
    Unavailable,
    /// The service refused the request or answered nonsense.
    Refused(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unavailable => f.write_str("the service is unavailable"),
            Self::Refused(why) => f.write_str(why),
        }
    }
}

#[derive(Serialize)]
struct Ask<'a> {
    policy: &'a str,
    key: &'a str,
    cost: u64,
}

impl Remote {
    /// Decides `policy` at the service `server` (`http://host:port`) with the app token
    /// `token`; an error if the URL or the token cannot be used.
    pub fn new(server: &str, token: &str, policy: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::Remote(format!("{why}: {server:?}"));
        let base: Uri = server.parse().map_err(|_| bad("not a URL"))?;
        if base.scheme_str() != Some("http") || base.authority().is_none() {
            return Err(bad("the service's URL is http://host:port"));
        }
        let decide = format!("{}/v1/decide", server.trim_end_matches('/'))
            .parse()
            .map_err(|_| bad("not a URL"))?;
        let mut authorization = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Error::Remote("the token is not a header value".into()))?;
        authorization.set_sensitive(true);
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Ok(Self {
            inner: Arc::new(Inner {
                client: Client::builder(TokioExecutor::new()).build(connector),
                decide,
                authorization,
                policy: policy.to_owned(),
                timeout: Duration::from_secs(1),
                fail: RemoteFail::default(),
            }),
        })
    }

    /// The longest a decision may take, connecting included, before the fail policy
    /// answers.
    pub fn timeout(self, timeout: Duration) -> Self {
        self.configure(|inner| inner.timeout = timeout)
    }

    /// What to answer while the service cannot ([`FailPolicy::Error`], a 503, by default).
    pub fn on_failure(self, fail: RemoteFail) -> Self {
        self.configure(|inner| inner.fail = fail)
    }

    /// This limiter with `set` applied to its settings (copied first if shared).
    fn configure(mut self, set: impl FnOnce(&mut Inner)) -> Self {
        set(Arc::make_mut(&mut self.inner));
        self
    }
}

impl Inner {
    async fn decide(&self, key: &Key, cost: u64) -> Verdict {
        let answer = tokio::time::timeout(self.timeout, self.ask(key, cost))
            .await
            .unwrap_or(Err(Failure::Unavailable));
        // The service's own fail policy answered (its store away): its verdict stands.
        let answer = match answer {
            Ok(Answered::Failed { allowed: true, .. }) => return Verdict::Open,
            Ok(Answered::Failed { allowed: false, .. }) => return Verdict::Closed,
            Ok(Answered::Decided(decision)) => Ok(decision),
            Err(failure) => Err(failure),
        };
        let unreachable = |failure: &Failure| matches!(failure, Failure::Unavailable);
        let outcome = self
            .fail
            .apply(answer, unreachable, |limiter| limiter.check(key, cost));
        Verdict::of(outcome, unreachable)
    }

    async fn ask(&self, key: &Key, cost: u64) -> Result<Answered, Failure> {
        let key = remote_key(key);
        let ask = Ask {
            policy: &self.policy,
            key: &key,
            cost,
        };
        let body = serde_json::to_vec(&ask).map_err(|e| Failure::Refused(e.to_string()))?;
        let mut request = Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.decide.clone();
        let headers = request.headers_mut();
        headers.insert(header::AUTHORIZATION, self.authorization.clone());
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let response = self
            .client
            .request(request)
            .await
            .map_err(|_| Failure::Unavailable)?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|_| Failure::Unavailable)?
            .to_bytes();
        if status.is_server_error() {
            return Err(Failure::Unavailable);
        }
        if status != StatusCode::OK {
            let text = String::from_utf8_lossy(&body);
            return Err(Failure::Refused(format!(
                "the service answered {status}: {text}"
            )));
        }
        serde_json::from_slice(&body).map_err(|e| Failure::Refused(format!("not a decision: {e}")))
    }
}

/// The service's answer: the core's wire shape of a decision, or, its store
/// unreachable, its fail policy's verdict without figures (`"fail": "open"|"closed"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Answered {
    Failed {
        allowed: bool,
        #[serde(rename = "fail")]
        _fail: String,
    },
    Decided(Decision),
}

/// The key as the service takes it (a string): IP keys as `ip:` and the address, text
/// as it is, other bytes as `hex:` and their hexadecimal digits.
fn remote_key(key: &Key) -> String {
    let bytes = key.to_bytes();
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let mut hex = String::from("hex:");
            for b in e.as_bytes() {
                hex.push_str(&format!("{b:02x}"));
            }
            hex
        }
    }
}

impl Backend for Remote {
    fn check(&self, key: &Key, cost: u64) -> Pending {
        let (inner, key) = (self.inner.clone(), key.clone());
        Pending::Later(Box::pin(async move { inner.decide(&key, cost).await }))
    }
}

#[cfg(test)]
mod tests {
    use sluicegate_core::Decision;

    use super::Answered;

    #[test]
    fn the_services_fail_verdicts_are_told_from_its_decisions() {
        let parse = |text: &str| serde_json::from_str::<Answered>(text).unwrap();
        let open = parse(r#"{"policy":"p","key":"k","allowed":true,"fail":"open"}"#);
        assert!(matches!(open, Answered::Failed { allowed: true, .. }));
        let closed = parse(r#"{"policy":"p","key":"k","allowed":false,"fail":"closed"}"#);
        assert!(matches!(closed, Answered::Failed { allowed: false, .. }));
        let denial = Decision::deny(3, 0, Some(5), 5);
        let decided = parse(&serde_json::to_string(&denial).unwrap());
        assert!(matches!(decided, Answered::Decided(d) if d == denial));
    }
}
