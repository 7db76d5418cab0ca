//! `/v1/policies`: a policy is written as the file's fields in JSON, and shown with its
//! metadata; its version is its entity tag, and a change names the version it changes
//! (`If-Match`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::service::{Service, ServiceError};
use crate::store::{Stored, User};
use sluicegate_core::rwlock::{LockMode, RwState};
use sluicegate_policy::{list_or, Kind, Policy};

use super::auth::Authed;
use super::body::{etag, IfMatch, JsonBody};
use super::error::{ApiError, Result};
use super::page::Page;

/// The routes of policies.
pub(crate) fn routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/v1/policies", get(list))
        .route("/v1/policies/{name}", get(read).put(write).delete(remove))
        .route("/v1/policies/{name}/leases/{key}", get(leases))
}

type Svc = State<Arc<Service>>;

/// `?app=APP`.
#[derive(Deserialize)]
pub(crate) struct AppQuery {
    pub(crate) app: Option<String>,
}

/// The policy with its version as entity tag, and `status`.
fn answer(status: StatusCode, stored: &Stored) -> Response {
    (
        status,
        [(header::ETAG, etag(stored.version))],
        Json(stored.to_json()),
    )
        .into_response()
}

async fn list(
    State(service): Svc,
    Authed { caller, .. }: Authed<User>,
    Query(query): Query<AppQuery>,
    Query(page): Query<Page>,
) -> Result<Json<Value>> {
    let all = service.policies(&caller, query.app.as_deref())?;
    let (policies, next) = page.of(all, |s| &s.name)?;
    let policies: Vec<Value> = policies.iter().map(Stored::to_json).collect();
    Ok(Json(json!({ "policies": policies, "next": next })))
}

async fn read(
    State(service): Svc,
    Authed { caller, .. }: Authed<User>,
    Path(name): Path<String>,
) -> Result<Response> {
    Ok(answer(StatusCode::OK, &service.policy(&caller, &name)?))
}

/// The policy in a PUT body: metadata dropped, the algorithm named, then the one parser
/// (the service checks the rest).
fn parse_policy(mut value: Value) -> Result<Policy> {
    let Value::Object(map) = &mut value else {
        return Err(ApiError::bad_request("a policy is a JSON object"));
    };
    for field in sluicegate_policy::STORED_FIELDS {
        map.remove(field);
    }
    let invalid = |message: String| ServiceError::invalid(message, Some("algorithm"));
    match map.get("algorithm") {
        None => return Err(invalid("a policy needs `algorithm`".into()).into()),
        Some(Value::String(name)) => {
            if Kind::from_name(name).is_none() {
                let names: Vec<String> = Kind::ALL.iter().map(|k| k.name().to_owned()).collect();
                let message = format!("unknown algorithm {name:?}: use {}", list_or(&names));
                return Err(invalid(message).into());
            }
        }
        Some(_) => {
            return Err(ApiError::bad_request("`algorithm` must be a string").field("algorithm"));
        }
    }
    serde_json::from_value(value).map_err(|e| {
        let message = e.to_string();
        // serde names an unknown field in its message: point at it.
        let field = message
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split('`').next())
            .map(str::to_owned);
        let error = ApiError::bad_request(message);
        match field {
            Some(field) => error.field(field),
            None => error,
        }
    })
}

async fn write(
    State(service): Svc,
    Authed { caller, .. }: Authed<User>,
    Path(name): Path<String>,
    IfMatch(expected): IfMatch,
    JsonBody(policy): JsonBody<Value>,
) -> Result<Response> {
    let policy = parse_policy(policy)?;
    let stored = service
        .put_policy(&caller, &name, &policy, expected)
        .await?;
    let status = if stored.version == 1 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(answer(status, &stored))
}

async fn remove(
    State(service): Svc,
    Authed { caller, .. }: Authed<User>,
    Path(name): Path<String>,
    IfMatch(expected): IfMatch,
) -> Result<StatusCode> {
    service.delete_policy(&caller, &name, expected).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A key's holders and queue under a concurrency policy, expiries in µs from now.
async fn leases(
    State(service): Svc,
    Authed { served, caller }: Authed<User>,
    Path((name, key)): Path<(String, String)>,
) -> Result<Json<Value>> {
    let (state, now) = service.lease_state(&served, &caller, &name, &key).await?;
    let mode = |mode| match mode {
        LockMode::Exclusive => "exclusive",
        _ => "shared",
    };
    let left = |expires_at: u64| expires_at.saturating_sub(now);
    let holders: Vec<Value> = state
        .iter()
        .flat_map(RwState::holders)
        .filter(|h| h.expires_at() > now)
        .map(|h| {
            json!({"owner": String::from_utf8_lossy(h.owner()), "mode": mode(h.mode()),
            "token": h.token(), "holds": h.holds(), "expires_in_us": left(h.expires_at())})
        })
        .collect();
    let queue: Vec<Value> = state
        .iter()
        .flat_map(RwState::waiters)
        .filter(|w| w.expires_at() > now)
        .map(|w| {
            json!({"owner": String::from_utf8_lossy(w.owner()), "mode": mode(w.mode()),
            "place": w.place(), "expires_in_us": left(w.expires_at())})
        })
        .collect();
    Ok(Json(
        json!({"policy": name, "key": key, "holders": holders, "queue": queue}),
    ))
}
