//! The answers the middleware gives itself (429, 400, 500, 503), kept apart so that the
//! services and the strategies both use them without importing each other.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};

/// A response built here: plain text.
pub(crate) fn respond<B: From<Bytes>>(status: StatusCode, body: Bytes) -> Response<B> {
    let mut response = Response::new(B::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
