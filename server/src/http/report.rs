//! `/v1/report`: what an app's work cost, known after it.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use sluicegate_core::Decision;

use crate::service::auth::App;
use crate::service::Service;

use super::auth::Authed;
use super::body::JsonBody;
use super::error::Result;

/// The route.
pub(crate) fn routes() -> Router<Arc<Service>> {
    Router::new().route("/v1/report", post(report))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportRequest {
    policy: String,
    key: String,
    cost: u64,
    id: String,
}

/// A report's answer: what it recorded and dropped, whether it was a retry, and the
/// key's standing after it in the decision's wire shape.
#[derive(Serialize)]
struct ReportAnswer {
    policy: String,
    key: String,
    id: String,
    recorded: Option<u64>,
    dropped: Option<u64>,
    duplicate: bool,
    #[serde(flatten)]
    decision: Decision,
}

async fn report(
    State(service): State<Arc<Service>>,
    Authed { served, caller }: Authed<App>,
    JsonBody(request): JsonBody<ReportRequest>,
) -> Result<Json<ReportAnswer>> {
    let answer = service
        .report(
            &served,
            &caller,
            &request.policy,
            &request.key,
            request.cost,
            &request.id,
        )
        .await?;
    Ok(Json(ReportAnswer {
        policy: request.policy,
        key: request.key,
        id: request.id,
        recorded: answer.recorded,
        dropped: answer.dropped,
        duplicate: answer.duplicate,
        decision: answer.decision,
    }))
}
