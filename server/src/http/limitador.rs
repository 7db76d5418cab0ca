//! limitador's HTTP API at its own paths and bodies, over the namespaces of its limits
//! file (`--limitador-config`): `POST /check`, `/report` and `/check_and_report` with
//! `{"namespace", "values", "delta", "response_headers"?}` (the values bound as
//! `descriptors[0]`) answered 200 or 429; `GET /limits/{namespace}` and
//! `/counters/{namespace}`; `GET /status`. Each call carries an app token, as every
//! decision does here.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use sluicegate_core::SECOND;
use sluicegate_policy::limitador::{Limit, Namespace};

use crate::limitador::{self, Applied, Asked, LimitsError, Mode};
use crate::service::auth::App;
use crate::service::Service;

use super::auth::Authed;
use super::body::JsonBody;
use super::error::{ApiError, Result};

/// The most counters `/counters/{namespace}` lists.
const MAX_LISTED: usize = 10_000;

/// limitador's routes.
pub(crate) fn routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/check", post(|s, a, b| call(s, a, b, Mode::Check)))
        .route("/report", post(|s, a, b| call(s, a, b, Mode::Update)))
        .route(
            "/check_and_report",
            post(|s, a, b| call(s, a, b, Mode::CheckAndUpdate)),
        )
        .route("/limits/{namespace}", get(limits))
        .route("/counters/{namespace}", get(counters))
        .route("/status", get(|| async { Json(json!({"status": "ok"})) }))
}

/// limitador's `CheckAndReportInfo`.
#[derive(Debug, Deserialize)]
struct Info {
    namespace: String,
    values: HashMap<String, String>,
    delta: u64,
    /// `DraftVersion03` (or limitador's flag's spelling) asks for the headers.
    response_headers: Option<String>,
}

impl From<LimitsError> for ApiError {
    fn from(e: LimitsError) -> Self {
        let status = match &e {
            LimitsError::NotFound(_) => StatusCode::NOT_FOUND,
            LimitsError::Invalid(_) => StatusCode::BAD_REQUEST,
            LimitsError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self::new(status, e.to_string())
    }
}

async fn call(
    State(service): State<Arc<Service>>,
    Authed { caller, .. }: Authed<App>,
    JsonBody(info): JsonBody<Info>,
    mode: Mode,
) -> Result<Response> {
    let asked = Asked {
        namespace: &info.namespace,
        descriptors: vec![info
            .values
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()],
        delta: info.delta,
        mode,
        now: None,
    };
    let answer = limitador::decide(&service, &caller, &asked).await?;
    // A JSON body: the router's error shape keeps the headers of a 429 that has one.
    let (status, body) = if answer.admitted {
        (StatusCode::OK, json!({}))
    } else {
        let status = StatusCode::TOO_MANY_REQUESTS;
        (status, json!({"error": "Too Many Requests"}))
    };
    let wanted = info.response_headers.as_deref().is_some_and(|h| {
        matches!(
            h.replace('_', "").to_ascii_lowercase().as_str(),
            "draftversion03"
        )
    });
    let mut response = (status, Json(body)).into_response();
    if wanted {
        for (name, value) in answer.headers() {
            let name = HeaderName::from_bytes(name.as_bytes());
            if let (Ok(name), Ok(value)) = (name, HeaderValue::from_str(&value)) {
                response.headers_mut().insert(name, value);
            }
        }
    }
    Ok(response)
}

/// A limit as limitador's API shows it.
fn limit_json(limit: &Limit) -> Value {
    let texts = |list: &[sluicegate_policy::limitador::Expression]| {
        list.iter()
            .map(|e| e.source().to_owned())
            .collect::<Vec<_>>()
    };
    json!({
        "id": limit.id,
        "namespace": limit.namespace,
        "max_value": limit.max_value,
        "seconds": limit.seconds,
        "name": limit.name,
        "conditions": texts(&limit.conditions),
        "variables": texts(&limit.variables),
    })
}

/// The namespace `name`'s limits, if `app` may ask for it.
async fn limits(
    State(service): State<Arc<Service>>,
    Authed { caller, .. }: Authed<App>,
    Path(name): Path<String>,
) -> Result<Json<Value>> {
    let served = service.limitador();
    let ns = visible(&served, &name, &caller)?;
    Ok(Json(Value::Array(
        ns.limits.iter().map(|l| limit_json(l)).collect(),
    )))
}

/// The namespace `name` of `served`, if `app` may ask for it (else 404, as for none).
fn visible<'a>(served: &'a limitador::Limits, name: &str, app: &App) -> Result<&'a Namespace> {
    served
        .config
        .namespace(name)
        .filter(|ns| ns.admits_app(app.name()))
        .ok_or_else(|| {
            LimitsError::NotFound(format!("no such namespace for this app: {name:?}")).into()
        })
}

/// The namespace `name`'s live counters, if `app` may ask for it.
async fn counters(
    State(service): State<Arc<Service>>,
    Authed { caller, .. }: Authed<App>,
    Path(name): Path<String>,
) -> Result<Json<Value>> {
    let served = service.limitador();
    let ns = visible(&served, &name, &caller)?;
    let listed = served
        .counters_of(&name, ns, &*service.counters, MAX_LISTED)
        .await?;
    let counter = |c: &Applied| {
        let variables: BTreeMap<&str, &str> = c
            .variables
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        json!({
            "limit": limit_json(&c.limit),
            "set_variables": variables,
            "remaining": c.figures.remaining,
            "expires_in_seconds": c.figures.expires_in / SECOND,
        })
    };
    Ok(Json(Value::Array(listed.iter().map(counter).collect())))
}
