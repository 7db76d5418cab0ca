//! Authentication as an extractor (as in axum's `jwt` example): a handler names the
//! caller it needs, [`Authed<App>`], [`Authed<User>`] or [`Authed<Admin>`], and a
//! request without one is answered by the rejection, before the handler runs.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use crate::service::auth::{authenticate, bearer, Admin, App, Caller};
use crate::service::{Served, Service, ServiceError};
use crate::store::User;

use super::error::ApiError;

/// The caller, checked to be a `T`, and what was served when it was found (a decision
/// reads its policy and the policy's limiter from the same).
#[derive(Debug)]
pub(crate) struct Authed<T> {
    pub(crate) served: Arc<Served>,
    pub(crate) caller: T,
}

/// A kind of caller a handler may ask for.
pub(crate) trait Access: Sized {
    fn from_caller(caller: Caller) -> Result<Self, ServiceError>;
}

impl Access for App {
    fn from_caller(caller: Caller) -> Result<Self, ServiceError> {
        caller.app()
    }
}

impl Access for User {
    fn from_caller(caller: Caller) -> Result<Self, ServiceError> {
        caller.user()
    }
}

impl Access for Admin {
    fn from_caller(caller: Caller) -> Result<Self, ServiceError> {
        caller.admin()
    }
}

impl<T: Access + Send> FromRequestParts<Arc<Service>> for Authed<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        service: &Arc<Service>,
    ) -> Result<Self, Self::Rejection> {
        let served = service.served();
        let token = bearer(
            parts
                .headers
                .get_all(header::AUTHORIZATION)
                .iter()
                .map(|v| v.as_bytes()),
        )?;
        let caller = T::from_caller(authenticate(&served.snapshot, token)?)?;
        Ok(Self { served, caller })
    }
}
