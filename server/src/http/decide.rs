//! `/v1/decide`, `/v1/decide/batch` and `/v1/lease/…`: what apps call.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::iter::once;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sluicegate_core::rwlock::LockMode::{Exclusive, Shared};
use sluicegate_core::Decision;
use sluicegate_policy::cel::Bindings;

use crate::limiters::{LeaseAnswer, LeaseOp, PolicyLimiter};
use crate::service::auth::App;
use crate::service::{Ask, Decided, Estimate, LeaseAsk, Served, Service, ServiceError, MAX_BATCH};

use super::auth::Authed;
use super::body::{parse, JsonBody, JsonBytes};
use super::error::{ApiError, Result};

/// The routes apps call.
pub(crate) fn routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/v1/decide", post(decide))
        .route("/v1/decide/batch", post(batch))
        .route(
            "/v1/lease/acquire",
            post(|s, a, b| {
                lease(
                    s,
                    a,
                    b,
                    LeaseOp::Acquire {
                        mode: Shared,
                        wait: None,
                    },
                )
            }),
        )
        .route(
            "/v1/lease/release",
            post(|s, a, b| lease(s, a, b, LeaseOp::Release)),
        )
        .route(
            "/v1/lease/renew",
            post(|s, a, b| lease(s, a, b, LeaseOp::Renew)),
        )
        .route(
            "/v1/lease/withdraw",
            post(|s, a, b| lease(s, a, b, LeaseOp::Withdraw)),
        )
}

/// One decision asked for, read straight from the body: the strings borrow from it
/// unless they hold escapes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideRequest<'a> {
    #[serde(borrow)]
    policy: Cow<'a, str>,
    #[serde(borrow)]
    key: Cow<'a, str>,
    /// 1 if not given.
    cost: Option<u64>,
    /// In place of `cost`: units admitted now, settled by a report with the same `id`.
    estimate: Option<u64>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    /// More of the request for a policy's `when` and `key`: with `key`, its
    /// `descriptors[0]`.
    values: Option<BTreeMap<String, String>>,
}

/// One decision's answer: the policy and key asked for, then the decision in the
/// core's wire shape (its one serializer), and in shadow mode what it would have been;
/// or, the backend unreachable, the fail policy's verdict alone.
#[derive(Serialize)]
struct DecideAnswer<'a> {
    policy: &'a str,
    key: &'a str,
    #[serde(flatten)]
    decision: Option<Decision>,
    #[serde(flatten)]
    shadow: Option<Shadow>,
    #[serde(flatten)]
    failed: Option<Failed>,
    #[serde(flatten)]
    skipped: Option<Skipped>,
}

/// The policy's `when` or `key` left the request out: it is admitted, nothing counted.
#[derive(Serialize)]
struct Skipped {
    allowed: bool,
    applied: bool,
}

/// The verdict of `--fail open` or `closed`: no figures are known.
#[derive(Serialize)]
struct Failed {
    allowed: bool,
    fail: &'static str,
}

/// A shadow answer's addition: it is `allowed`, and `would_allow` says what enforcing
/// would have answered (the other fields are the enforcing decision's).
#[derive(Serialize)]
struct Shadow {
    shadow: bool,
    would_allow: bool,
}

impl<'a> DecideAnswer<'a> {
    fn new(policy: &'a str, key: &'a str, decided: Option<&Decided>) -> Self {
        let Some(decided) = decided else {
            return Self {
                policy,
                key,
                decision: None,
                shadow: None,
                failed: None,
                skipped: Some(Skipped {
                    allowed: true,
                    applied: false,
                }),
            };
        };
        let shadow = decided.shadow.then_some(Shadow {
            shadow: true,
            would_allow: decided.outcome.allowed(),
        });
        let (decision, failed) = match decided.decision() {
            Some(decision) => {
                let mut decision = *decision;
                decision.allowed = decided.admitted();
                (Some(decision), None)
            }
            None => {
                let fail = if decided.outcome.allowed() {
                    "open"
                } else {
                    "closed"
                };
                let allowed = decided.admitted();
                (None, Some(Failed { allowed, fail }))
            }
        };
        Self {
            policy,
            key,
            decision,
            shadow,
            failed,
            skipped: None,
        }
    }
}

fn internal(e: &serde_json::Error) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// One decision for `app`: the answer, the decision as enforcing made it and the entry
/// whose headers it gets.
async fn decide_one<'r>(
    service: &Service,
    served: &Served,
    app: &App,
    request: &'r DecideRequest<'_>,
) -> Result<(DecideAnswer<'r>, Option<Decided>, Arc<PolicyLimiter>), ServiceError> {
    let (policy, key) = (&*request.policy, &*request.key);
    let (entry, decided) = match (&request.id, request.cost, request.estimate) {
        (_, Some(_), Some(_)) => {
            return Err(ServiceError::invalid(
                "give a cost or an estimate, not both",
                Some("estimate"),
            ))
        }
        (None, _, Some(_)) => {
            return Err(ServiceError::invalid(
                "an estimate is settled by a report with the same id: give an id",
                Some("id"),
            ))
        }
        (Some(id), cost, estimate) => {
            let asked = Estimate {
                policy,
                key,
                estimate: estimate.or(cost).unwrap_or(1),
                id,
            };
            let (entry, decided) = service.decide_estimate(served, app, asked).await?;
            (entry, Some(decided))
        }
        (None, cost, None) => {
            let values = request.values.iter().flatten();
            if values.clone().any(|(name, _)| name == "key") {
                return Err(ServiceError::invalid(
                    "`descriptors[0][\"key\"]` is the request's key: name the value otherwise",
                    Some("values"),
                ));
            }
            let descriptors = || {
                let entries = values.clone().map(|(k, v)| (k.as_str(), v.as_str()));
                Bindings::new([once(("key", key)).chain(entries)])
            };
            let ask = Ask {
                policy,
                key,
                cost: cost.unwrap_or(1),
                descriptors: &descriptors,
            };
            service.decide(served, app, ask).await?
        }
    };
    let answer = DecideAnswer::new(&request.policy, &request.key, decided.as_ref());
    Ok((answer, decided, entry))
}

/// The body is parsed in place (no copy of the headers is made, as axum's `HeaderMap`
/// extractor would): this runs for every decision.
async fn decide(
    State(service): State<Arc<Service>>,
    Authed { served, caller }: Authed<App>,
    JsonBytes(body): JsonBytes,
) -> Result<Response> {
    let request: DecideRequest = parse(&body)?;
    let (answer, decided, entry) = decide_one(&service, &served, &caller, &request).await?;
    // Written once into a buffer sized for a usual answer.
    let mut json = Vec::with_capacity(160 + answer.key.len() + answer.policy.len());
    serde_json::to_writer(&mut json, &answer).map_err(|e| internal(&e))?;
    let mut response = Response::new(Body::from(json));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let decision = decided.as_ref().and_then(Decided::decision);
    if let (Some(policy), Some(decision), Some(decided)) = (&entry.header, decision, &decided) {
        // Stamped as a refusal so a denial carries Retry-After; the status stays 200.
        // A shadow admission gets the enforcing decision's figures, but no Retry-After.
        let status = if decided.admitted() {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        policy.stamp(headers, status, decision, false);
    }
    Ok(response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    requests: Vec<Value>,
}

async fn batch(
    State(service): State<Arc<Service>>,
    Authed { served, caller }: Authed<App>,
    JsonBody(Batch { requests }): JsonBody<Batch>,
) -> Result<Json<Value>> {
    if requests.len() > MAX_BATCH {
        return Err(ServiceError::invalid(
            format!(
                "a batch holds at most {MAX_BATCH} requests, got {}",
                requests.len()
            ),
            Some("requests"),
        )
        .into());
    }
    let mut decisions = Vec::with_capacity(requests.len());
    for request in requests {
        let answer = match DecideRequest::deserialize(&request) {
            Ok(request) => match decide_one(&service, &served, &caller, &request).await {
                Ok((answer, ..)) => serde_json::to_value(answer).map_err(|e| internal(&e)),
                Err(e) => Err(e.into()),
            },
            Err(e) => Err(ApiError::bad_request(e.to_string())),
        };
        decisions.push(answer.unwrap_or_else(|e| e.to_json()));
    }
    Ok(Json(json!({ "decisions": decisions })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseBody {
    policy: String,
    key: String,
    owner: String,
    ttl_us: Option<u64>,
    /// Acquire: `shared` (the default: one of the policy's `limit` holders) or
    /// `exclusive` (the only holder).
    mode: Option<Mode>,
    /// Acquire: refused, wait in the key's queue, the place lasting this long unless
    /// asked for again; none: never queue.
    wait_us: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Shared,
    Exclusive,
}

/// `/v1/lease/acquire`, `release`, `renew` and `withdraw`.
async fn lease(
    State(service): State<Arc<Service>>,
    Authed { served, caller }: Authed<App>,
    JsonBody(body): JsonBody<LeaseBody>,
    op: LeaseOp,
) -> Result<Json<Value>> {
    let op = match op {
        LeaseOp::Acquire { .. } => LeaseOp::Acquire {
            mode: match body.mode {
                Some(Mode::Exclusive) => Exclusive,
                _ => Shared,
            },
            wait: body.wait_us,
        },
        op => {
            for (field, given) in [
                ("mode", body.mode.is_some()),
                ("wait_us", body.wait_us.is_some()),
            ] {
                if given {
                    let message = format!("only /v1/lease/acquire takes {field}");
                    return Err(ServiceError::invalid(message, Some(field)).into());
                }
            }
            op
        }
    };
    let ask = LeaseAsk {
        policy: &body.policy,
        key: &body.key,
        owner: &body.owner,
        ttl: body.ttl_us,
    };
    let answer = service.lease(&served, &caller, op, &ask).await?;
    Ok(Json(match (op, answer) {
        (_, LeaseAnswer::Granted(grant)) => json!({"acquired": true, "token": grant.token,
            "expires_at_us": grant.expires_at, "holds": grant.holds}),
        // The decision's own `retry_after_us`, as `/v1/decide` writes it.
        (_, LeaseAnswer::Busy(decision, place)) => json!({"acquired": false,
            "retry_after_us": decision.retry_after,
            "place": place.map(|p| json!({"number": p.number, "ahead": p.ahead,
                "expires_at_us": p.expires_at}))}),
        (LeaseOp::Renew, LeaseAnswer::Held(grant)) => {
            json!({"renewed": true, "expires_at_us": grant.expires_at})
        }
        (LeaseOp::Renew, _) => json!({"renewed": false, "expires_at_us": null}),
        (_, LeaseAnswer::Held(grant)) => json!({"released": true, "holds": grant.holds}),
        (_, LeaseAnswer::NotHeld) => json!({"released": false}),
        (_, LeaseAnswer::Withdrawn) => json!({"withdrawn": true}),
        (_, LeaseAnswer::NotQueued) => json!({"withdrawn": false}),
    }))
}
