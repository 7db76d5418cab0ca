//! `/metrics`: the Prometheus text of the service's counters (for an admin, or anyone
//! with `--metrics-open`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::limiters::Backend;
use crate::metrics::render_tables;
use crate::service::auth::Admin;
use crate::service::Service;

use super::auth::Authed;
use super::error::{ApiError, Result};

/// `/metrics`, and `/healthz` (answers while the process serves).
pub(crate) fn routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
}

async fn metrics(
    State(service): State<Arc<Service>>,
    admin: Result<Authed<Admin>, ApiError>,
) -> Result<Response> {
    if !service.metrics_open {
        admin?;
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        service.metrics.render() + &tables(&service) + &redis_metrics(&service.backend),
    )
        .into_response())
}

/// The fill of every policy's in-process key table.
fn tables(service: &Service) -> String {
    let limiters = service.limiters();
    render_tables(
        limiters
            .iter()
            .filter_map(|(name, entry)| Some((name.as_str(), entry.table()?))),
    )
}

/// The coalescing of decisions sent to Redis, when they are.
fn redis_metrics(backend: &Backend) -> String {
    let Backend::Redis { coalescer, .. } = backend else {
        return String::new();
    };
    let sent = coalescer.sent();
    let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
    format!(
        "# HELP sluicegate_redis_pipelines_total Pipelines of decisions sent to Redis.\n# TYPE sluicegate_redis_pipelines_total counter\nsluicegate_redis_pipelines_total {}\n# HELP sluicegate_redis_decisions_total Decisions sent to Redis (in the pipelines).\n# TYPE sluicegate_redis_decisions_total counter\nsluicegate_redis_decisions_total {}\n",
        load(&sent.pipelines),
        load(&sent.decisions)
    )
}
