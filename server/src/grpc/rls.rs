//! Envoy's rate limit service for sluicegate's own policies: each descriptor decided on
//! the policy it names, or reported.

use std::sync::{Arc, OnceLock};

use opentelemetry::KeyValue;
use tonic::{Request, Response, Status};

use sluicegate_policy::cel::Bindings;
use sluicegate_policy::Built;

use super::admitted::Admitted;
use super::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use super::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use super::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use super::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use super::wire::{bounded, duration, saturate, status, undecided, unit_of};
use super::{domains, limitador};
use crate::service::auth::App;
use crate::service::{Ask, Served, Service, ServiceError, MAX_BATCH};
use crate::telemetry;

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

/// A descriptor's policy (its first entry `policy`) and its key: the other entries,
/// escaped so that the key names one list ([`sluicegate_policy::envoy::key_of`], shared
/// with the domains of Envoy's YAML and with quota buckets).
pub(super) fn descriptor_key<'a>(
    entries: impl Iterator<Item = (&'a str, &'a str)> + Clone,
) -> (Option<&'a str>, String) {
    let named = entries.clone().position(|(key, _)| key == "policy");
    let others = entries
        .clone()
        .enumerate()
        .filter(|(i, (key, _))| Some(*i) != named && *key != REPORT_ENTRY)
        .map(|(_, entry)| entry);
    (
        named
            .and_then(|i| entries.clone().nth(i))
            .map(|(_, value)| value),
        sluicegate_policy::envoy::key_of(others),
    )
}

/// A descriptor's entries as pairs.
fn entry_pairs(entries: &[Entry]) -> impl Iterator<Item = (&str, &str)> + Clone {
    entries.iter().map(|e| (e.key.as_str(), e.value.as_str()))
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
        let answer = telemetry::request(
            request,
            |_| "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit".into(),
            |request| {
                vec![
                    KeyValue::new("rpc.system", "grpc"),
                    KeyValue::new(
                        "sluicegate.domain",
                        telemetry::clipped(&request.get_ref().domain),
                    ),
                ]
            },
            |request| self.answer(request),
            |answer| match answer {
                Ok(response) => {
                    let code =
                        Code::try_from(response.get_ref().overall_code).unwrap_or(Code::Unknown);
                    (
                        vec![KeyValue::new("sluicegate.code", code.as_str_name())],
                        None,
                    )
                }
                // The code's own words: a status message may hold a descriptor's value.
                Err(status) => (
                    vec![KeyValue::new("rpc.grpc.status_code", status.code() as i64)],
                    Some(status.code().description().to_owned()),
                ),
            },
        );
        answer.await
    }
}

impl Rls {
    /// The answer to one call.
    async fn answer(
        &self,
        mut request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let Some(Admitted { app, served }) = request.extensions_mut().remove::<Admitted>() else {
            return Err(Status::unauthenticated("the call was not admitted"));
        };
        let request = request.into_inner();
        if self
            .service
            .limitador()
            .config
            .namespace(&request.domain)
            .is_some()
        {
            return limitador::should_rate_limit(&self.service, &app, &request)
                .await
                .map(Response::new);
        }
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
        // Built once, for the first policy with a `when` or `key`.
        let bindings = OnceLock::new();
        let descriptors = || {
            let all = request.descriptors.iter().map(|d| entry_pairs(&d.entries));
            bindings.get_or_init(|| Bindings::new(all)).clone()
        };
        let mut statuses = Vec::with_capacity(request.descriptors.len());
        // A descriptor that fails never fails its siblings: the call is over if any
        // enforcing one is, and the first failure is its error only when none is.
        let (mut over, mut failed) = (false, None);
        for i in 0..request.descriptors.len() {
            let decided = self.descriptor(&served, &app, &request, i, &descriptors);
            match decided.await {
                Ok((status, admitted)) => {
                    over |= !admitted;
                    statuses.push(status);
                }
                Err(e) => {
                    failed.get_or_insert(e);
                    statuses.push(undecided());
                }
            }
        }
        if let (false, Some(e)) = (over, failed) {
            return Err(status(e));
        }
        Ok(Response::new(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            ..RateLimitResponse::default()
        }))
    }

    /// The status of the request's descriptor `i`, and whether it admits the request
    /// (a report always does; a shadow decision does, its status showing the denial).
    async fn descriptor<'r>(
        &self,
        served: &Served,
        app: &App,
        request: &'r RateLimitRequest,
        i: usize,
        descriptors: &(dyn Fn() -> Bindings<'r> + Sync),
    ) -> Result<(DescriptorStatus, bool), ServiceError> {
        let entries = &request.descriptors[i].entries;
        let (policy, key) = descriptor_key(entry_pairs(entries));
        let (policy, key) = (policy.unwrap_or(request.domain.as_str()), bounded(key));
        let cost = cost(request, i);
        // The decision's own verdict (a shadow denial shows), and its figures.
        let (limiter, allowed, admitted, figures) = if entries.iter().any(|e| e.key == REPORT_ENTRY)
        {
            let (_, limiter) = Service::reporting(served, app, policy, &key)?;
            let adjustment = i64::try_from(cost).unwrap_or(i64::MAX);
            let reported = self.service.apply(&limiter, &key, adjustment);
            let decision = reported.await?.decision;
            (limiter, decision.allowed, true, Some(decision))
        } else {
            let ask = Ask {
                policy,
                key: &key,
                cost,
                descriptors,
            };
            let (limiter, decided) = self.service.decide(served, app, ask).await?;
            // Left out by the policy's `when` or `key`: admitted, nothing counted.
            let Some(decided) = decided else {
                let status = DescriptorStatus {
                    code: Code::Ok as i32,
                    ..DescriptorStatus::default()
                };
                return Ok((status, true));
            };
            let allowed = decided.outcome.allowed();
            (
                limiter,
                allowed,
                decided.admitted(),
                decided.decision().copied(),
            )
        };
        let period = match &limiter.built {
            Built::Rule(_) => served
                .snapshot
                .policies
                .get(policy)
                .map_or(0, |s| s.policy.period()),
            _ => 0,
        };
        let status = DescriptorStatus {
            code: if allowed { Code::Ok } else { Code::OverLimit } as i32,
            current_limit: figures.map(|decision| RateLimit {
                name: policy.to_owned(),
                requests_per_unit: saturate(decision.limit),
                unit: unit_of(period),
            }),
            limit_remaining: figures.map_or(0, |decision| saturate(decision.remaining)),
            duration_until_reset: figures.map(|decision| duration(decision.reset_after)),
        };
        Ok((status, admitted))
    }
}

#[cfg(test)]
mod tests {
    use super::{descriptor_key, entry_pairs, Entry};
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
        let (policy, key) = descriptor_key(entry_pairs(&entries));
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
            descriptor_key(entry_pairs(&entries(&one))),
            descriptor_key(entry_pairs(&entries(&two)))
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
        let (policy, key) = descriptor_key(entry_pairs(&entries));
            let mut rest = pairs.clone();
            let named = rest.iter().position(|(k, _)| k == "policy").map(|i| rest.remove(i).1);
            prop_assert_eq!(policy.map(str::to_owned), named);
            prop_assert_eq!(decode(&key), rest);
        }
    }
}
