//! Envoy's rate limit service over gRPC (`--grpc-listen`): a gateway that speaks it
//! (Envoy's `envoy.filters.http.ratelimit`, and others) decides through sluicegate, with
//! every sluicegate algorithm.
//!
//! The mapping (also in `API.md`): the call carries an app token in its
//! `authorization` metadata (`Bearer sga_…`). Each descriptor is decided on one policy:
//! the value of its first entry `policy` if it has one, else the request's `domain`. The
//! key is the descriptor's other entries as `key=value` joined by `|`, in order
//! (`remote_address=10.0.0.1|path=/a`), with `\`, `|` and `=` inside a key or value
//! escaped by a `\`, so that no two lists of entries share a key. The cost is the descriptor's `hits_addend`, else
//! the request's (if not 0), else 1. A descriptor's `limit` override is ignored here (the
//! policy is the limit; in the domains of Envoy's YAML it is honoured, see `domains.rs`).
//!
//! Reports (limitador's `report`, for costs known after the response): a descriptor
//! holding an entry [`REPORT_ENTRY`] (any value; not part of the key) charges its cost
//! to the key, as `/v1/report` does but without an id (each call counts), up to the
//! policy's overdraft. Envoy sends it as the second call of a rate limit marked
//! `apply_on_stream_done`, with the response's cost as its `hits_addend`. A report
//! never makes the `overall_code` `OVER_LIMIT`; its status is `OVER_LIMIT` while the
//! key is in debt.
//!
//! A request whose `domain` is one of envoyproxy/ratelimit's YAML (`--envoy-config`)
//! is answered by their rules instead, as their service would (see `domains.rs`).
//!
//! Shadow mode: a descriptor decided in shadow mode (its policy's `shadow`, or
//! `--shadow`) reports its would-be code in its status (`OVER_LIMIT` when enforcing
//! would deny) but never makes the `overall_code` `OVER_LIMIT`, which is what Envoy
//! acts on: the request goes through, and the status shows what would have happened.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::domains;
use crate::service::auth::{authenticate, bearer};
use crate::service::{Service, ServiceError, MAX_BATCH};
use sluicegate_policy::Built;

/// The code generated from the vendored protos (`vendor/proto/`).
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    missing_debug_implementations
)]
pub mod envoy {
    /// `envoy.config.core.v3`.
    pub mod config {
        /// `envoy.config.core`.
        pub mod core {
            /// `envoy.config.core.v3`.
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
    /// `envoy.extensions`.
    pub mod extensions {
        /// `envoy.extensions.common`.
        pub mod common {
            /// `envoy.extensions.common.ratelimit`.
            pub mod ratelimit {
                /// `envoy.extensions.common.ratelimit.v3`.
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }
    /// `envoy.type`.
    pub mod r#type {
        /// `envoy.type.v3`.
        pub mod v3 {
            include!(concat!(env!("OUT_DIR"), "/envoy.r#type.v3.rs"));
        }
    }
    /// `envoy.service`.
    pub mod service {
        /// `envoy.service.ratelimit`.
        pub mod ratelimit {
            /// `envoy.service.ratelimit.v3`.
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
    }
}

use envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit,
};
use envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// The entry that makes a descriptor a report of a cost known after the response.
pub const REPORT_ENTRY: &str = "sluicegate.report";

/// The most descriptors in one call (as `/v1/decide/batch`).
const MAX_DESCRIPTORS: usize = MAX_BATCH;

/// The rate limit service, deciding through the decision service (as HTTP does).
#[derive(Debug, Clone)]
pub(crate) struct Rls {
    service: Arc<Service>,
}

impl Rls {
    /// The gRPC service over `service`.
    pub(crate) fn server(service: Arc<Service>) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(Self { service })
    }
}

/// A service error as the gRPC code that means the same.
fn status(e: ServiceError) -> Status {
    let message = e.to_string();
    match e {
        ServiceError::Unauthorized(_) => Status::unauthenticated(message),
        ServiceError::Forbidden(_) => Status::permission_denied(message),
        ServiceError::NotFound(_) => Status::not_found(message),
        ServiceError::Invalid { .. } => Status::invalid_argument(message),
        ServiceError::Unavailable(_) => Status::unavailable(message),
        ServiceError::Conflict(_)
        | ServiceError::Stale(_)
        | ServiceError::Gone
        | ServiceError::VersionRequired => Status::failed_precondition(message),
        ServiceError::Internal(_) => Status::internal(message),
    }
}

/// Envoy's unit for a period of exactly one second, minute, hour or day.
fn unit(period: u64) -> Unit {
    match period {
        1_000_000 => Unit::Second,
        60_000_000 => Unit::Minute,
        3_600_000_000 => Unit::Hour,
        86_400_000_000 => Unit::Day,
        _ => Unit::Unknown,
    }
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A descriptor's policy (its first entry `policy`) and its key: the other entries,
/// escaped so that the key names one list ([`envoy::key_of`], shared with the domains
/// of Envoy's YAML).
fn descriptor_key(entries: &[Entry]) -> (Option<&str>, String) {
    let named = entries.iter().position(|e| e.key == "policy");
    let others = entries
        .iter()
        .enumerate()
        .filter(|(i, e)| Some(*i) != named && e.key != REPORT_ENTRY)
        .map(|(_, e)| (e.key.as_str(), e.value.as_str()));
    (
        named.map(|i| entries[i].value.as_str()),
        sluicegate_policy::envoy::key_of(others),
    )
}

/// The cost of the request's descriptor `i`: its `hits_addend`, else the request's
/// (if not 0), else 1.
fn cost(request: &RateLimitRequest, i: usize) -> u64 {
    request
        .descriptors
        .get(i)
        .and_then(|d| d.hits_addend)
        .map(u64::from)
        .or((request.hits_addend != 0).then_some(u64::from(request.hits_addend)))
        .unwrap_or(1)
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let snapshot = self.service.snapshot();
        let values = request.metadata().get_all("authorization");
        let token = bearer(values.iter().map(|v| v.as_encoded_bytes())).map_err(status)?;
        let app = authenticate(&snapshot, token)
            .and_then(|caller| caller.app())
            .map_err(status)?;
        let request = request.into_inner();
        if request.descriptors.is_empty() || request.descriptors.len() > MAX_DESCRIPTORS {
            return Err(Status::invalid_argument(format!(
                "a request has 1 to {MAX_DESCRIPTORS} descriptors"
            )));
        }
        let rules = self.service.envoy();
        if let Some(domain) = rules.config.domain(&request.domain) {
            let cost = |i| cost(&request, i);
            return domains::answer(&self.service, &rules, domain, &app, &request, cost)
                .await
                .map(Response::new)
                .map_err(status);
        }
        let limiters = self.service.limiters();
        let mut statuses = Vec::with_capacity(request.descriptors.len());
        let mut over = false;
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            let (policy, key) = descriptor_key(&descriptor.entries);
            let policy = policy.unwrap_or(request.domain.as_str());
            let cost = cost(&request, i);
            let (entry, decision) = if descriptor.entries.iter().any(|e| e.key == REPORT_ENTRY) {
                let (stored, entry) =
                    Service::reporting(&snapshot, &limiters, &app, policy, &key).map_err(status)?;
                let adjustment = i64::try_from(cost).unwrap_or(i64::MAX);
                let service = &self.service;
                let reported = service.apply(&entry, &stored.name, &key, adjustment).await;
                (entry, reported.map_err(status)?.decision)
            } else {
                let (entry, decided) = self
                    .service
                    .decide(&snapshot, &limiters, &app, policy, &key, cost)
                    .await
                    .map_err(status)?;
                over |= !decided.admitted();
                (entry, decided.decision)
            };
            let period = match &entry.built {
                Built::Rule(_) => snapshot
                    .policies
                    .get(policy)
                    .map_or(0, |s| s.policy.period()),
                _ => 0,
            };
            let reset = decision.reset_after;
            statuses.push(DescriptorStatus {
                code: if decision.allowed {
                    Code::Ok
                } else {
                    Code::OverLimit
                } as i32,
                current_limit: Some(RateLimit {
                    name: policy.to_owned(),
                    requests_per_unit: saturate(decision.limit),
                    unit: unit(period) as i32,
                }),
                limit_remaining: saturate(decision.remaining),
                duration_until_reset: Some(prost_types::Duration {
                    seconds: i64::try_from(reset / 1_000_000).unwrap_or(i64::MAX),
                    // Below 10^9: the remainder of a division by 10^6, times 1000.
                    nanos: i32::try_from(reset % 1_000_000 * 1000).unwrap_or(0),
                }),
            });
        }
        Ok(Response::new(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            ..RateLimitResponse::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::{descriptor_key, Entry};
    use proptest::prelude::*;

    fn entries(pairs: &[(String, String)]) -> Vec<Entry> {
        pairs
            .iter()
            .map(|(key, value)| Entry {
                key: key.clone(),
                value: value.clone(),
            })
            .collect()
    }

    /// Names and values from the characters that could make two lists look alike.
    fn lists() -> impl Strategy<Value = Vec<(String, String)>> {
        let text = "(policy|[a|=\\\\]{0,3})";
        prop::collection::vec((text, text), 0..4)
    }

    #[test]
    fn plain_entries_keep_their_readable_key() {
        let pairs = [("remote_address", "10.0.0.1"), ("path", "/a")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let entries = entries(&pairs);
        let (policy, key) = descriptor_key(&entries);
        assert_eq!(
            (policy, key.as_str()),
            (None, "remote_address=10.0.0.1|path=/a")
        );
    }

    #[test]
    fn one_entry_holding_a_separator_is_not_two_entries() {
        let one = [("user".to_owned(), "bob|ip=1.2.3.4".to_owned())];
        let two = [("user", "bob"), ("ip", "1.2.3.4")].map(|(k, v)| (k.to_owned(), v.to_owned()));
        assert_ne!(
            descriptor_key(&entries(&one)),
            descriptor_key(&entries(&two))
        );
    }

    /// Reads a key back into its entries: that it can is why no two lists share one.
    fn decode(key: &str) -> Vec<(String, String)> {
        let mut pairs = Vec::new();
        if key.is_empty() {
            return pairs;
        }
        let (mut name, mut text, mut chars) = (None, String::new(), key.chars());
        while let Some(c) = chars.next() {
            match c {
                '\\' => text.push(chars.next().expect("an escaped character")),
                '=' if name.is_none() => name = Some(std::mem::take(&mut text)),
                '|' => pairs.push((name.take().expect("a name"), std::mem::take(&mut text))),
                c => text.push(c),
            }
        }
        pairs.push((name.expect("a name"), text));
        pairs
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// A descriptor's policy and key give back its entries: distinct descriptors
        /// have distinct (policy, key).
        #[test]
        fn a_key_names_one_descriptor(pairs in lists()) {
            let entries = entries(&pairs);
        let (policy, key) = descriptor_key(&entries);
            let mut rest = pairs.clone();
            let named = rest.iter().position(|(k, _)| k == "policy").map(|i| rest.remove(i).1);
            prop_assert_eq!(policy.map(str::to_owned), named);
            prop_assert_eq!(decode(&key), rest);
        }
    }
}
