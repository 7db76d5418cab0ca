//! `/metrics`: the Prometheus text of the service's counters (for an admin, or anyone
//! with `--metrics-open`); `/healthz` and `/readyz` for load balancers.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::metrics::render_tables;
use crate::service::auth::Admin;
use crate::service::Service;

use super::auth::Authed;
use super::error::{ApiError, Result};

/// The probes' paths, answered also on connections past the cap (see `conn`).
pub(crate) const PROBES: [&str; 2] = ["/healthz", "/readyz"];

/// `/metrics`, `/healthz` (answers while the process serves) and `/readyz` (whether it
/// can decide now).
pub(crate) fn routes() -> Router<Arc<Service>> {
    let [alive, ready_path] = PROBES;
    Router::new()
        .route(alive, get(|| async { "ok" }))
        .route(ready_path, get(ready))
        .route("/metrics", get(metrics))
}

/// 200 `{"ready": true}`, or 503 naming what it waits for (`store`, `decisions`),
/// never why: the reason, with its addresses, is in the log.
async fn ready(State(service): State<Arc<Service>>) -> Response {
    let waiting = service.waiting_for().await;
    let status = if waiting.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = serde_json::json!({ "ready": waiting.is_empty(), "waiting_for": waiting });
    (status, axum::Json(body)).into_response()
}

async fn metrics(
    State(service): State<Arc<Service>>,
    admin: Result<Authed<Admin>, ApiError>,
) -> Result<Response> {
    if !service.config.metrics_open {
        admin?;
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        service.metrics.render() + &tables(&service) + &service.backend.metrics(),
    )
        .into_response())
}

/// The fill of every in-process key table: each policy's, each rule's of Envoy's YAML
/// and each limit override's (bounded in number, see `MAX_OVERRIDES`).
fn tables(service: &Service) -> String {
    let served = service.served();
    let policies = served
        .limiters
        .iter()
        .filter_map(|(name, entry)| Some((name.as_str(), entry.table()?)));
    let rules = service.envoy().tables();
    render_tables(policies.chain(rules.iter().map(|(name, table)| (name.as_str(), *table))))
}
