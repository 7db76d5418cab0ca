//! Extractors for what requests carry besides the caller: JSON bodies (413 beyond the
//! limit, 415 if not JSON, 400 if malformed) and the policy version a change names
//! (`If-Match`); and policy versions as entity tags.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use super::error::{ApiError, Result};

/// The largest request body.
pub(crate) const BODY_LIMIT: usize = 64 * 1024;

/// The bytes of a JSON body, not yet parsed (a decision parses them borrowing).
#[derive(Debug)]
pub(crate) struct JsonBytes(pub(crate) Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBytes {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self> {
        let content_type = request.headers().get(header::CONTENT_TYPE).cloned();
        let body = Bytes::from_request(request, state).await;
        json_bytes(content_type.as_ref(), body).map(Self)
    }
}

/// A JSON body as a `T` (read as a value first, so errors name fields as serde does).
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self> {
        let JsonBytes(bytes) = JsonBytes::from_request(request, state).await?;
        typed(parse::<Value>(&bytes)?).map(Self)
    }
}

/// `If-Match: "3"`: the policy version a change names (none without the header).
#[derive(Debug)]
pub(crate) struct IfMatch(pub(crate) Option<i64>);

impl<S: Send + Sync> FromRequestParts<S> for IfMatch {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self> {
        let Some(value) = parts.headers.get(header::IF_MATCH) else {
            return Ok(Self(None));
        };
        value
            .to_str()
            .ok()
            .map(|v| v.trim().trim_start_matches("W/").trim_matches('"'))
            .and_then(|v| v.parse().ok())
            .map(|v| Self(Some(v)))
            .ok_or_else(|| ApiError::bad_request("If-Match must be a policy version, e.g. \"3\""))
    }
}

/// The bytes of a JSON body: 413 beyond the limit, 415 if not JSON.
fn json_bytes(
    content_type: Option<&HeaderValue>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Bytes> {
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is larger than {BODY_LIMIT} bytes"),
            )
        } else {
            ApiError::bad_request(format!("cannot read the body: {e}"))
        }
    })?;
    let json = content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            let v = v.trim();
            v.eq_ignore_ascii_case("application/json")
                || (v.starts_with("application/") && v.ends_with("+json"))
        });
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the body must be JSON (Content-Type: application/json)",
        ));
    }
    Ok(body)
}

/// JSON text read straight into `T` (borrowing from it where `T` does): 400 with
/// "malformed JSON" for bad syntax, else serde's message for wrong fields or types.
pub(crate) fn parse<'a, T: Deserialize<'a>>(json: &'a [u8]) -> Result<T> {
    serde_json::from_slice(json).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ApiError::bad_request(e.to_string()),
        _ => ApiError::bad_request(format!("malformed JSON: {e}")),
    })
}

/// A JSON value as `T`, wrong types being a 400 naming the problem.
fn typed<T: DeserializeOwned>(value: Value) -> Result<T> {
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// The entity tag of policy version `version`.
pub(crate) fn etag(version: i64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{version}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
}
