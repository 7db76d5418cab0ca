//! The namespaces of limitador's limits file (`--limitador-config`) over Envoy's rate
//! limit service, answered as limitador answers: the request's descriptors bound for
//! the limits' CEL, `hits_addend` (0 is 1) checked against every counter that applies
//! and counted on all of them or none, `OK` or `OVER_LIMIT` with no statuses, and with
//! `--rate-limit-headers DRAFT_VERSION_03` their `X-RateLimit-*` headers.

use tonic::Status;

use super::envoy::config::core::v3::HeaderValue;
use super::envoy::service::ratelimit::v3::rate_limit_response::Code;
use super::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use crate::limitador::{self, Answer, Asked, LimitsError, Mode};
use crate::service::auth::App;
use crate::service::Service;

/// A limitador error as gRPC's code: an expression failing on the request is
/// `UNAVAILABLE` (limitador's), a request out of bounds `INVALID_ARGUMENT`.
pub(super) fn limits_status(e: LimitsError) -> Status {
    match e {
        LimitsError::NotFound(why) => Status::permission_denied(why),
        LimitsError::Invalid(why) => Status::invalid_argument(why),
        LimitsError::Unavailable(why) => Status::unavailable(why),
    }
}

/// limitador's headers as Envoy's.
pub(super) fn header_values(service: &Service, answer: &Answer) -> Vec<HeaderValue> {
    if !service.config.rate_limit_headers {
        return Vec::new();
    }
    answer
        .headers()
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key: key.to_owned(),
            value,
            ..HeaderValue::default()
        })
        .collect()
}

/// The request's descriptors as entries, the delta it asks for (0 is 1), and `mode`.
pub(super) fn asked<'a>(domain: &'a str, request: &'a RateLimitRequest, mode: Mode) -> Asked<'a> {
    Asked {
        namespace: domain,
        descriptors: request
            .descriptors
            .iter()
            .map(|d| {
                d.entries
                    .iter()
                    .map(|e| (e.key.as_str(), e.value.as_str()))
                    .collect()
            })
            .collect(),
        delta: u64::from(request.hits_addend.max(1)),
        mode,
        now: None,
    }
}

/// The answer to `request`, whose domain is one of limitador's namespaces, for `app`.
pub(super) async fn should_rate_limit(
    service: &Service,
    app: &App,
    request: &RateLimitRequest,
) -> Result<RateLimitResponse, Status> {
    let asked = asked(&request.domain, request, Mode::CheckAndUpdate);
    let answer = limitador::decide(service, app, &asked)
        .await
        .map_err(limits_status)?;
    let over = !answer.admitted && !service.config.shadow;
    Ok(RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        response_headers_to_add: header_values(service, &answer),
        ..RateLimitResponse::default()
    })
}
