//! The response headers: IETF `RateLimit-Policy` / `RateLimit` (httpapi draft, structured
//! fields), `Retry-After`, and optionally the legacy `X-RateLimit-*`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use sluicegate_core::{Decision, Ticks, SECOND};

use crate::error::Error;
use crate::limiter::Quota;

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The longest policy name.
pub const MAX_NAME: usize = 64;

/// A named policy as clients see it: `RateLimit-Policy: "name";q=100;w=60`. Cheap to
/// clone: its text is made once and shared.
#[derive(Debug, Clone)]
pub struct RateLimitPolicy {
    text: Arc<Text>,
}

/// A policy's text, made once per policy.
#[derive(Debug)]
struct Text {
    /// `"name";q=100;w=60`.
    header: HeaderValue,
    /// `name`.
    name: Box<str>,
    /// `"name";`, the start of every `RateLimit` value.
    prefix: Box<[u8]>,
}

impl RateLimitPolicy {
    /// The policy `name` admitting `quota` units per `window` (rounded up to whole
    /// seconds). Names are 1 to 64 letters, digits, `-`, `_` and `.`, so that every
    /// structured field parser reads them back unchanged; anything else is an error.
    pub fn new(name: &str, quota: u64, window: Duration) -> Result<Self, Error> {
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(valid) {
            return Err(Error::PolicyName(name.to_owned()));
        }
        let window = window.as_micros().div_ceil(u128::from(SECOND));
        let text = format!("\"{name}\";q={quota};w={window}");
        Ok(Self {
            text: Arc::new(Text {
                name: name.into(),
                prefix: format!("\"{name}\";").into_bytes().into(),
                header: HeaderValue::from_maybe_shared(Bytes::from(text))
                    .map_err(|_| Error::PolicyName(name.to_owned()))?,
            }),
        })
    }

    /// The policy `name` of a [`Quota`]: `q` its limit, `w` its period.
    pub fn of(name: &str, quota: &Quota) -> Result<Self, Error> {
        Self::new(name, quota.limit(), quota.period())
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.text.name
    }

    /// Sets the headers a response gets for `decision`: `RateLimit-Policy` and
    /// `RateLimit` always, the legacy `X-RateLimit-*` if asked, and `Retry-After` on a
    /// 429 or 503 answering a denial whose cost can fit (a degraded 200 gets none).
    pub fn stamp(
        &self,
        headers: &mut HeaderMap,
        status: StatusCode,
        decision: &Decision,
        legacy: bool,
    ) {
        let which = Headers { ietf: true, legacy };
        self.stamp_with(headers, status, decision, which);
    }

    /// [`stamp`](Self::stamp) with the rate-limit headers chosen: `Retry-After` is
    /// written whichever are on, since a refused client needs it to back off.
    pub(crate) fn stamp_with(
        &self,
        headers: &mut HeaderMap,
        status: StatusCode,
        decision: &Decision,
        which: Headers,
    ) {
        if which.any() {
            Stamp::new(self, decision, which).apply(headers);
        }
        let refusal = matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        );
        if refusal && !decision.allowed {
            if let Some(seconds) = retry_seconds(decision) {
                headers.insert(http::header::RETRY_AFTER, seconds.into());
            }
        }
    }
}

/// Which rate-limit headers a layer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Headers {
    /// `RateLimit-Policy` and `RateLimit` (on by default).
    pub(crate) ietf: bool,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset` (off by default).
    pub(crate) legacy: bool,
}

impl Headers {
    /// Whether any is on: with none, a request does no header work at all.
    pub(crate) fn any(self) -> bool {
        self.ietf || self.legacy
    }
}

/// The rate-limit headers of one decision: the figures they need, carried in an
/// admitted request's response future (small, since the future is moved a few times
/// per request) and written when the response arrives.
#[derive(Debug)]
pub(crate) struct Stamp {
    policy: RateLimitPolicy,
    limit: u64,
    remaining: u64,
    /// `t`, and the legacy reset.
    reset: u64,
    which: Headers,
}

impl Stamp {
    /// The headers `which` asks for.
    pub(crate) fn new(policy: &RateLimitPolicy, decision: &Decision, which: Headers) -> Self {
        Self {
            policy: policy.clone(),
            limit: decision.limit,
            remaining: decision.remaining,
            reset: reset_seconds(decision),
            which,
        }
    }

    pub(crate) fn apply(&self, headers: &mut HeaderMap) {
        if self.which.ietf {
            headers.insert(RATELIMIT_POLICY, self.policy.text.header.clone());
            if let Some(value) = self.ratelimit() {
                headers.insert(RATELIMIT, value);
            }
        }
        if self.which.legacy {
            headers.insert(X_LIMIT, self.limit.into());
            headers.insert(X_REMAINING, self.remaining.into());
            headers.insert(X_RESET, self.reset.into());
        }
    }

    /// `RateLimit: "name";r=R;t=T`.
    fn ratelimit(&self) -> Option<HeaderValue> {
        let (mut remaining, mut t) = (itoa::Buffer::new(), itoa::Buffer::new());
        let (remaining, t) = (remaining.format(self.remaining), t.format(self.reset));
        let prefix = &self.policy.text.prefix;
        // One exactly sized allocation, handed to the header value as it is: this runs
        // for every request.
        let mut value = Vec::with_capacity(prefix.len() + 2 + remaining.len() + 3 + t.len());
        value.extend_from_slice(prefix);
        value.extend_from_slice(b"r=");
        value.extend_from_slice(remaining.as_bytes());
        value.extend_from_slice(b";t=");
        value.extend_from_slice(t.as_bytes());
        // Names are checked and the rest is digits: always a valid value.
        HeaderValue::from_maybe_shared(Bytes::from(value)).ok()
    }
}

fn seconds_up(ticks: Ticks) -> u64 {
    ticks.div_ceil(SECOND)
}

/// `Retry-After` for a denial, in whole seconds rounded up and at least 1 (a sub-second
/// wait is never `0`, which clients read as "now"); `None` if the cost can never fit.
pub(crate) fn retry_seconds(decision: &Decision) -> Option<u64> {
    decision.retry_after.map(|r| seconds_up(r).max(1))
}

/// `t` of `RateLimit`: for an admission, the seconds until the state is fresh again (the
/// remaining `r` is a budget until then), counted from when the request proceeds (after
/// a reservation's delay); for a denial, the same as `Retry-After` (`r` is 0 until
/// then), or the reset if the cost can never fit.
pub(crate) fn reset_seconds(decision: &Decision) -> u64 {
    if decision.allowed {
        seconds_up(decision.reset_after.saturating_sub(decision.delay))
    } else {
        retry_seconds(decision).unwrap_or_else(|| seconds_up(decision.reset_after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamped(decision: Decision) -> HeaderMap {
        let policy = RateLimitPolicy::new("api", 100, Duration::from_millis(59_500)).unwrap();
        let mut headers = HeaderMap::new();
        policy.stamp(&mut headers, StatusCode::TOO_MANY_REQUESTS, &decision, true);
        headers
    }

    fn get<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
        headers.get(name).map(|v| v.to_str().unwrap())
    }

    #[test]
    fn seconds_round_up_and_never_read_now() {
        let denied = Decision::deny(100, 0, Some(1), 30 * SECOND);
        let h = stamped(denied);
        assert_eq!(get(&h, "ratelimit-policy"), Some("\"api\";q=100;w=60"));
        assert_eq!(get(&h, "ratelimit"), Some("\"api\";r=0;t=1"));
        assert_eq!(get(&h, "retry-after"), Some("1"));
        let h = stamped(Decision::deny(100, 0, Some(2 * SECOND + 1), 30 * SECOND));
        assert_eq!(get(&h, "retry-after"), Some("3"));
        assert_eq!(get(&h, "x-ratelimit-reset"), Some("3"));
        // A cost that never fits: no Retry-After to obey.
        let h = stamped(Decision::deny(100, 0, None, 30 * SECOND));
        assert_eq!(get(&h, "retry-after"), None);
        assert_eq!(get(&h, "ratelimit"), Some("\"api\";r=0;t=30"));
        // Admitted: no Retry-After, t until fresh, less the delay already waited.
        let h = stamped(Decision::admit(100, 7, 10 * SECOND + 1, 4 * SECOND));
        assert_eq!(get(&h, "retry-after"), None);
        assert_eq!(get(&h, "ratelimit"), Some("\"api\";r=7;t=7"));
        assert_eq!(get(&h, "x-ratelimit-limit"), Some("100"));
        assert_eq!(get(&h, "x-ratelimit-remaining"), Some("7"));
        // Admitted after waiting out the whole reset: fresh on arrival, `t=0`.
        let h = stamped(Decision::admit(100, 7, 4 * SECOND, 4 * SECOND));
        assert_eq!(get(&h, "ratelimit"), Some("\"api\";r=7;t=0"));
        assert_eq!(get(&h, "x-ratelimit-reset"), Some("0"));
    }

    #[test]
    fn names_are_checked() {
        let long = "x".repeat(MAX_NAME + 1);
        for bad in ["", "a b", "a\"b", "a;b", "a,b", "é", &long] {
            assert!(
                RateLimitPolicy::new(bad, 1, Duration::from_secs(1)).is_err(),
                "{bad}"
            );
        }
        assert!(RateLimitPolicy::new("per-ip_v1.2", 1, Duration::from_secs(1)).is_ok());
        // The longest name with the largest figures still fits the header's buffer.
        let policy = RateLimitPolicy::new(&long[1..], u64::MAX, Duration::MAX).unwrap();
        let mut headers = HeaderMap::new();
        let most = Decision::admit(u64::MAX, u64::MAX, u64::MAX, 0);
        policy.stamp(&mut headers, StatusCode::OK, &most, false);
        let expected = format!(
            "\"{}\";r={};t={}",
            &long[1..],
            u64::MAX,
            u64::MAX.div_ceil(SECOND)
        );
        assert_eq!(headers[RATELIMIT], expected.as_str());
    }
}
