//! The routes, and what wraps every request: the body limit, the timeout, the log line,
//! and axum's own refusals in the API's error shape.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use opentelemetry::KeyValue;

use crate::service::Service;
use crate::telemetry;

use super::body::BODY_LIMIT;
use super::error::ApiError;
use super::{accounts, assets, audit, decide, limitador, metrics, policies, report};

/// The routes, with the body limit and request timeout.
pub(crate) fn router(service: Arc<Service>, timeout: Duration) -> Router {
    Router::new()
        .merge(metrics::routes())
        .merge(accounts::routes())
        .merge(policies::routes())
        .merge(audit::routes())
        .merge(decide::routes())
        .merge(report::routes())
        .merge(limitador::routes())
        .merge(assets::routes())
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(middleware::from_fn(move |r, n| bounded(r, n, timeout)))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(service)
}

/// HTTP's own methods, which a span may name.
const KNOWN_METHODS: [Method; 9] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::CONNECT,
    Method::OPTIONS,
    Method::TRACE,
    Method::PATCH,
];

/// Answers 503 for a request that takes longer than `timeout`, logs every request, and
/// traces it when traces are exported.
async fn bounded(request: Request, next: Next, timeout: Duration) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    // The route's pattern, never the path: a path may hold a key.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|route| route.as_str().to_owned());
    // OpenTelemetry's HTTP conventions: a method not of HTTP's own is `_OTHER`, and
    // names its span `HTTP`; a method's text is the client's, of any length.
    let (method_name, span_name) = match KNOWN_METHODS.contains(&method) {
        true => (method.as_str(), method.as_str()),
        false => ("_OTHER", "HTTP"),
    };
    let start = Instant::now();
    let answered = |request| async move {
        match tokio::time::timeout(timeout, next.run(request)).await {
            Ok(response) => json_errors(response).await,
            Err(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the request took too long")
                .into_response(),
        }
    };
    let response = telemetry::request(
        request,
        |_| match &route {
            Some(route) => format!("{span_name} {route}").into(),
            None => span_name.to_owned().into(),
        },
        |_| {
            let method = KeyValue::new("http.request.method", method_name.to_owned());
            let mut attributes = vec![method];
            attributes.extend(route.clone().map(|r| KeyValue::new("http.route", r)));
            attributes
        },
        answered,
        |response| {
            let status = response.status();
            (
                vec![KeyValue::new(
                    "http.response.status_code",
                    i64::from(status.as_u16()),
                )],
                status.is_server_error().then(|| status.to_string()),
            )
        },
    )
    .await;
    let status = response.status();
    tracing::debug!(%method, %path, status = status.as_u16(), took_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX), "request");
    response
}

/// Errors answered by axum itself (a query string or path it cannot read, a method the
/// route does not take) in the API's one error shape: `{"error": …}`.
async fn json_errors(response: Response) -> Response {
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if json || !(response.status().is_client_error() || response.status().is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    // axum's own messages are short; anything else is not worth echoing.
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let text = if text.is_empty() {
        parts
            .status
            .canonical_reason()
            .unwrap_or("error")
            .to_owned()
    } else {
        text
    };
    let mut answer = ApiError::new(parts.status, text).into_response();
    for name in [header::ALLOW, header::WWW_AUTHENTICATE] {
        if let Some(value) = parts.headers.get(&name) {
            answer.headers_mut().insert(name, value.clone());
        }
    }
    answer
}
