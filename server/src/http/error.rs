//! The API's one error shape, `{"error": …, "field": …}` with its status, and the one
//! place a service error becomes one.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::service::ServiceError;

/// An error answer.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    /// The request's field at fault.
    pub(crate) field: Option<String>,
    /// The current policy, when a change named an older version.
    current: Option<Value>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            field: None,
            current: None,
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// The error as an entry of a batch's answers: its status in the body.
    pub(crate) fn to_json(&self) -> Value {
        let mut body = json!({"error": self.message, "status": self.status.as_u16()});
        if let Some(field) = &self.field {
            body["field"] = json!(field);
        }
        body
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let status = match &e {
            ServiceError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ServiceError::Forbidden(_) => StatusCode::FORBIDDEN,
            ServiceError::NotFound(_) => StatusCode::NOT_FOUND,
            ServiceError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ServiceError::Conflict(_) | ServiceError::Stale(_) => StatusCode::CONFLICT,
            ServiceError::VersionRequired => StatusCode::PRECONDITION_REQUIRED,
            ServiceError::Gone => StatusCode::PRECONDITION_FAILED,
            ServiceError::Unavailable(_) | ServiceError::Expression(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ServiceError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        match e {
            ServiceError::Invalid { message, field } => Self {
                field,
                ..Self::new(status, message)
            },
            ServiceError::Stale(current) => Self {
                current: Some(current.to_json()),
                ..Self::new(
                    status,
                    format!(
                        "the policy changed: it is at version {}; retry with If-Match: \"{}\"",
                        current.version, current.version
                    ),
                )
            },
            ServiceError::VersionRequired => Self::new(
                status,
                "changing a policy needs If-Match: \"<version>\" (the version you change)",
            ),
            e => Self::new(status, e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.message });
        if let Some(field) = self.field {
            body["field"] = json!(field);
        }
        if let Some(current) = self.current {
            body["current"] = current;
        }
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The handlers' results.
pub(crate) type Result<T, E = ApiError> = std::result::Result<T, E>;
