//! The management page: every file under `server/web/dist/`, embedded at build time,
//! served under `/assets/`, and `index.html` at `/`.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

include!(concat!(env!("OUT_DIR"), "/assets.rs"));

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "wasm" => "application/wasm",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" | "map" => "application/json",
        "ico" => "image/x-icon",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// The page runs only its own scripts, styles and wasm (`'wasm-unsafe-eval'` is what
/// compiling wasm needs), talks only to this server, and is framed by nobody: an
/// injected string could then neither run code nor send a token elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn serve(path: &str) -> Response {
    match FILES.iter().find(|(name, _)| *name == path) {
        Some((name, bytes)) => (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(content_type(name)),
                ),
                (
                    header::X_CONTENT_TYPE_OPTIONS,
                    HeaderValue::from_static("nosniff"),
                ),
                (
                    header::CONTENT_SECURITY_POLICY,
                    HeaderValue::from_static(CSP),
                ),
                // For browsers that predate `frame-ancestors`.
                (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
            ],
            *bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

/// `GET /`: `index.html`; `GET /assets/PATH`: `dist/PATH`.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { serve("index.html") }))
        .route(
            "/assets/{*path}",
            get(|Path(path): Path<String>| async move { serve(&path) }),
        )
}
