//! Who is calling, and what they may do: a token resolved against one snapshot, and the
//! rules of roles. Both front ends authenticate here; what they hand the service back
//! ([`App`], [`Admin`], a [`User`]) is proof of the check, so no operation can be
//! reached without it.

use crate::store::{Principal, Role, Snapshot, User};
use crate::token;
use sluicegate_policy::Policy;

use super::error::{Result, ServiceError};

/// The holder of a token.
#[derive(Debug)]
pub(crate) enum Caller {
    /// An app: it decides.
    App(App),
    /// A user: it manages.
    User(User),
}

/// An app, authenticated: decisions are made for it.
#[derive(Debug, Clone)]
pub(crate) struct App(String);

impl App {
    /// The app's name.
    pub(crate) fn name(&self) -> &str {
        &self.0
    }
}

/// An admin, authenticated: manages users and apps (a proof, made only here).
#[derive(Debug)]
pub(crate) struct Admin(String);

impl Admin {
    /// The admin's name (the audit log's actor).
    pub(crate) fn name(&self) -> &str {
        &self.0
    }
}

/// Why a request is refused when it carries no token, or one nobody holds.
const NO_TOKEN: &str = "a valid bearer token is required (Authorization: Bearer <token>)";

/// The token in a request's `Authorization` values (HTTP headers or gRPC metadata):
/// `Bearer <token>`, the scheme in any case (RFC 9110). Several values are refused
/// rather than one of them picked, since a proxy and a client may each have added one.
pub(crate) fn bearer<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Result<Option<&'a str>> {
    let mut values = values.into_iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ServiceError::Unauthorized(
            "send one Authorization header, not several",
        ));
    }
    Ok(std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim()))
}

/// The holder of `token` (none: unauthorized), as of `snapshot`.
pub(crate) fn authenticate(snapshot: &Snapshot, token: Option<&str>) -> Result<Caller> {
    let token = token.ok_or(ServiceError::Unauthorized(NO_TOKEN))?;
    match snapshot.tokens.get(&token::digest(token)) {
        Some(Principal::App(name)) => Ok(Caller::App(App(name.clone()))),
        Some(Principal::User(name)) => snapshot
            .users
            .get(name)
            .cloned()
            .map(Caller::User)
            .ok_or(ServiceError::Unauthorized(NO_TOKEN)),
        None => Err(ServiceError::Unauthorized(NO_TOKEN)),
    }
}

impl Caller {
    /// The app calling; a user token may not decide.
    pub(crate) fn app(self) -> Result<App> {
        match self {
            Self::App(app) => Ok(app),
            Self::User(_) => Err(ServiceError::forbidden(
                "decisions are for app tokens; a user token manages",
            )),
        }
    }

    /// The user calling; an app token may only decide.
    pub(crate) fn user(self) -> Result<User> {
        match self {
            Self::User(user) => Ok(user),
            Self::App(_) => Err(ServiceError::forbidden(
                "an app token may only call the decision endpoints",
            )),
        }
    }

    /// The admin calling.
    pub(crate) fn admin(self) -> Result<Admin> {
        let user = self.user()?;
        if user.admin {
            Ok(Admin(user.name))
        } else {
            Err(ServiceError::forbidden("only an admin may do this"))
        }
    }
}

/// `user`'s role in `app`, if any (an admin's is not listed: an admin has every role).
pub(crate) fn role(user: &User, app: &str) -> Option<Role> {
    user.roles.get(app).copied()
}

/// A role in at least one of the policy's apps (no apps: admins only).
pub(crate) fn can_read(user: &User, policy: &Policy) -> bool {
    user.admin || policy.apps.iter().any(|app| role(user, app).is_some())
}

/// Owner of every app the policy lists (no apps: admins only).
pub(crate) fn can_write(user: &User, policy: &Policy) -> bool {
    user.admin
        || (!policy.apps.is_empty()
            && policy
                .apps
                .iter()
                .all(|app| role(user, app) == Some(Role::Owner)))
}

/// A role in `app` (admins have every role).
pub(crate) fn check_app_role(user: &User, app: &str) -> Result<()> {
    if user.admin || role(user, app).is_some() {
        Ok(())
    } else {
        Err(ServiceError::forbidden(format!(
            "you have no role in app {app:?}"
        )))
    }
}
