//! `/v1/audit` (who changed which policy) and `/v1/stats` (the page's chart).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::metrics::STEP_S;
use crate::service::Service;
use crate::store::User;
use crate::time::rfc3339;

use super::auth::Authed;
use super::error::{ApiError, Result};
use super::policies::AppQuery;

/// The routes of the audit log and the statistics.
pub(crate) fn routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/v1/audit", get(audit))
        .route("/v1/stats", get(stats))
}

#[derive(Deserialize)]
pub(crate) struct AuditQuery {
    app: Option<String>,
    limit: Option<usize>,
    /// The cursor: entries older than this id (the previous page's `next`).
    before: Option<i64>,
}

async fn audit(
    State(service): State<Arc<Service>>,
    Authed { caller, .. }: Authed<User>,
    Query(query): Query<AuditQuery>,
) -> Result<Json<Value>> {
    let limit = query.limit.unwrap_or(100);
    let entries = service
        .audit(&caller, query.app.as_deref(), limit, query.before)
        .await?;
    // A full page may have more after it.
    let next = (entries.len() >= limit.clamp(1, 1000))
        .then(|| entries.last().map(|e| e.id))
        .flatten();
    let entries: Vec<Value> = entries
        .into_iter()
        .map(|e| {
            json!({"id": e.id, "at": rfc3339(e.at), "actor": e.actor, "action": e.action,
                   "policy": e.subject, "before": e.before, "after": e.after})
        })
        .collect();
    Ok(Json(json!({ "entries": entries, "next": next })))
}

async fn stats(
    State(service): State<Arc<Service>>,
    Authed { caller, .. }: Authed<User>,
    Query(query): Query<AppQuery>,
) -> Result<Json<Value>> {
    let Some(app) = query.app else {
        return Err(ApiError::bad_request("stats need ?app=APP").field("app"));
    };
    let policies = service.stats(&caller, &app)?;
    Ok(Json(
        json!({"app": app, "step_s": STEP_S, "policies": policies}),
    ))
}
