//! `/v1/me`, `/v1/apps` and `/v1/users`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::service::auth::Admin;
use crate::service::{Holder, Service};
use crate::store::{Role, User};

use super::auth::Authed;
use super::body::JsonBody;
use super::error::Result;
use super::page::Page;

/// The routes of apps and users.
pub(crate) fn routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/v1/me", get(me))
        .route("/v1/apps", get(apps).post(create_app))
        .route("/v1/apps/{name}", delete(delete_app))
        .route(
            "/v1/apps/{name}/token",
            post(|s, a, n| rotate(s, a, n, Holder::App)),
        )
        .route("/v1/users", get(users).post(create_user))
        .route("/v1/users/{name}", delete(delete_user))
        .route("/v1/users/{name}/roles", put(set_roles))
        .route(
            "/v1/users/{name}/token",
            post(|s, a, n| rotate(s, a, n, Holder::User)),
        )
}

type Svc = State<Arc<Service>>;

fn user_json(user: &User) -> Value {
    json!({"name": user.name, "admin": user.admin, "roles": user.roles})
}

/// A name and the token just made for it (shown once).
fn created(name: &str, token: &str) -> Response {
    (
        StatusCode::CREATED,
        Json(json!({"name": name, "token": token})),
    )
        .into_response()
}

async fn me(Authed { caller, .. }: Authed<User>) -> Json<Value> {
    Json(user_json(&caller))
}

async fn apps(
    State(service): Svc,
    Authed { caller, .. }: Authed<User>,
    Query(page): Query<Page>,
) -> Result<Json<Value>> {
    let (apps, next) = page.of(service.apps(&caller), |(name, _)| name)?;
    let apps: Vec<Value> = apps
        .into_iter()
        .map(|(name, role)| match role {
            Some(role) => json!({"name": name, "role": role}),
            None => json!({"name": name, "role": "admin"}),
        })
        .collect();
    Ok(Json(json!({ "apps": apps, "next": next })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewApp {
    name: String,
}

async fn create_app(
    State(service): Svc,
    Authed { caller, .. }: Authed<Admin>,
    JsonBody(NewApp { name }): JsonBody<NewApp>,
) -> Result<Response> {
    let token = service.create_app(&caller, &name).await?;
    Ok(created(&name, &token))
}

/// `POST /v1/apps/NAME/token` and `/v1/users/NAME/token`.
async fn rotate(
    State(service): Svc,
    Authed { caller, .. }: Authed<Admin>,
    Path(name): Path<String>,
    holder: Holder,
) -> Result<Json<Value>> {
    let token = service.rotate(&caller, holder, &name).await?;
    Ok(Json(json!({"name": name, "token": token})))
}

/// `DELETE /v1/apps/{name}?cascade=true`: take the app out of the policies and roles
/// that name it, rather than be refused while they do.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Cascade {
    #[serde(default)]
    cascade: bool,
}

async fn delete_app(
    State(service): Svc,
    Authed { caller, .. }: Authed<Admin>,
    Path(name): Path<String>,
    Query(Cascade { cascade }): Query<Cascade>,
) -> Result<StatusCode> {
    service.delete_app(&caller, &name, cascade).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn users(
    State(service): Svc,
    Authed { caller, .. }: Authed<Admin>,
    Query(page): Query<Page>,
) -> Result<Json<Value>> {
    let (users, next) = page.of(service.users(&caller), |u| &u.name)?;
    let users: Vec<Value> = users.iter().map(user_json).collect();
    Ok(Json(json!({ "users": users, "next": next })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewUser {
    name: String,
    #[serde(default)]
    roles: BTreeMap<String, Role>,
    #[serde(default)]
    admin: bool,
}

async fn create_user(
    State(service): Svc,
    Authed { caller, .. }: Authed<Admin>,
    JsonBody(NewUser { name, roles, admin }): JsonBody<NewUser>,
) -> Result<Response> {
    let user = User { name, admin, roles };
    let token = service.create_user(&caller, &user).await?;
    Ok(created(&user.name, &token))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Roles {
    roles: BTreeMap<String, Role>,
    #[serde(default)]
    admin: bool,
}

async fn set_roles(
    State(service): Svc,
    Authed { caller, .. }: Authed<Admin>,
    Path(name): Path<String>,
    JsonBody(Roles { roles, admin }): JsonBody<Roles>,
) -> Result<Json<Value>> {
    let user = User { name, admin, roles };
    service.set_roles(&caller, &user).await?;
    Ok(Json(user_json(&user)))
}

async fn delete_user(
    State(service): Svc,
    Authed { caller, .. }: Authed<Admin>,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    service.delete_user(&caller, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
