//! What the layer and its services share: the limiter, the strategy and how a request
//! is keyed, priced and stamped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::request::Parts;
use http::Response;
use sluicegate_core::Decision;

use crate::headers::{Headers, RateLimitPolicy};
use crate::key::{Key, KeyExtractor};

/// A closure pricing a request (1 unless set).
pub(super) type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;

/// What a request whose key cannot be read gets.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnBadKey {
    /// 400 Bad Request, saying why (the default: a request the limit cannot attribute
    /// is not served unlimited).
    Reject,
    /// Counted against this one shared key: all such requests share a limit.
    Shared(Key),
}

/// Everything but the limiter and the strategy, shared by every clone.
#[derive(Clone)]
pub(super) struct Config {
    pub(super) policy: RateLimitPolicy,
    pub(super) key: KeyExtractor,
    pub(super) cost: Option<CostFn>,
    pub(super) on_bad_key: OnBadKey,
    pub(super) headers: Headers,
    /// Shadow mode: every request goes through; would-be denials are only counted.
    pub(super) shadow: bool,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("policy", &self.policy)
            .field("key", &self.key)
            .field("cost", &self.cost.as_ref().map(|_| "closure"))
            .field("on_bad_key", &self.on_bad_key)
            .field("headers", &self.headers)
            .field("shadow", &self.shadow)
            .finish()
    }
}

impl Config {
    /// Keyed by the peer's IP, each request costing 1, with the IETF headers alone.
    pub(super) fn new(policy: RateLimitPolicy) -> Self {
        Self {
            policy,
            key: KeyExtractor::peer_ip(),
            cost: None,
            on_bad_key: OnBadKey::Reject,
            headers: Headers {
                ietf: true,
                legacy: false,
            },
            shadow: false,
        }
    }

    pub(super) fn stamp<B>(&self, response: &mut Response<B>, decision: &Decision) {
        let status = response.status();
        self.policy
            .stamp_with(response.headers_mut(), status, decision, self.headers);
    }
}

/// What the layer and its services share: one `Arc`, so cloning either (axum does per
/// request) is one reference count.
#[derive(Debug)]
pub(super) struct Shared<L, O> {
    pub(super) limiter: Arc<L>,
    pub(super) config: Config,
    pub(super) overload: O,
    /// Requests admitted in shadow mode that the limit denied.
    pub(super) shadow_denied: AtomicU64,
}

impl<L, O> Shared<L, O> {
    /// Whether a request the limiter `allowed` (or not) goes through: if allowed, or
    /// always in shadow mode, where a refusal is counted instead.
    pub(super) fn passes(&self, allowed: bool) -> bool {
        if !allowed && self.config.shadow {
            self.shadow_denied.fetch_add(1, Ordering::Relaxed);
        }
        allowed || self.config.shadow
    }
}

impl<L, O: Clone> Clone for Shared<L, O> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            config: self.config.clone(),
            overload: self.overload.clone(),
            shadow_denied: AtomicU64::new(self.shadow_denied.load(Ordering::Relaxed)),
        }
    }
}
