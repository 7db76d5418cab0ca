//! `/metrics`: the Prometheus text of the service's counters (for an admin, or anyone
//! with `--metrics-open`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

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
        service.metrics.render() + &tables(&service) + &service.backend.metrics(),
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
