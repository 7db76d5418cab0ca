//! The HTTP API (see `API.md`): one handler per route, errors turned into responses in
//! one place ([`ApiError`]), permissions decided by [`Caller`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::decide::{Backend, DecideError, Entry, LeaseAnswer, LeaseOp, Limiters};
use crate::metrics::{Metrics, STEP_S};
use crate::policy::{Kind, Policy, Style};
use crate::store::{
    AuditEntry, Principal, Role, Snapshot, Store, StoreError, Stored, User, WriteError,
};
use crate::token;

/// The largest request body.
pub const BODY_LIMIT: usize = 64 * 1024;
/// The most requests in one batch.
pub const MAX_BATCH: usize = 1000;
/// The longest key, in bytes.
pub const MAX_KEY: usize = 1024;
/// The longest name of a policy, app or user (the `RateLimit-Policy` header's limit).
pub const MAX_NAME: usize = tollgate_tower::MAX_NAME;

/// What every handler shares.
#[derive(Debug)]
pub struct Shared {
    /// The database.
    pub store: Store,
    /// The store's contents as of its last change seen.
    pub snapshot: RwLock<Arc<Snapshot>>,
    /// A limiter per policy.
    pub limiters: RwLock<Arc<Limiters>>,
    /// Where decisions are kept.
    pub backend: Backend,
    /// The counters.
    pub metrics: Metrics,
    /// `/metrics` without a token.
    pub metrics_open: bool,
    /// Serializes reloads, so a slow one never overwrites a newer one.
    pub reloading: tokio::sync::Mutex<()>,
}

impl Shared {
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshot.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn limiters(&self) -> Arc<Limiters> {
        Arc::clone(&self.limiters.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reads the store again if its counter moved (or `force`), and rebuilds the
    /// limiters whose policies changed.
    pub async fn reload(&self, force: bool) -> Result<(), StoreError> {
        let _one = self.reloading.lock().await;
        let result = async {
            if !force && self.store.counter().await? == self.snapshot().counter {
                return Ok(());
            }
            let snapshot = self.store.snapshot().await?;
            for _ in 0..snapshot.unreadable {
                self.metrics.store_error();
            }
            let old = self.limiters();
            let mut limiters = Limiters::new();
            for (name, stored) in &snapshot.policies {
                match Entry::build(stored, &self.backend, old.get(name), &self.metrics) {
                    Ok(entry) => {
                        limiters.insert(name.clone(), entry);
                    }
                    Err(e) => tracing::error!(policy = %name, error = %e, "cannot build a limiter"),
                }
            }
            self.metrics
                .retain(|name| snapshot.policies.contains_key(name));
            *self.limiters.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(limiters);
            *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
            Ok(())
        }
        .await;
        if result.is_err() {
            self.metrics.store_error();
        }
        result
    }
}

type App = State<Arc<Shared>>;

/// An error answer: `{"error": …, "field": …}` with its status.
#[derive(Debug)]
pub struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    field: Option<String>,
    current: Option<Value>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            field: None,
            current: None,
        }
    }

    fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "a valid bearer token is required (Authorization: Bearer <token>)",
        )
    }

    fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, format!("no such {what}"))
    }

    fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "store");
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "the store is unavailable")
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

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// The routes, with the body limit and request timeout.
pub fn router(shared: Arc<Shared>, timeout: Duration) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/v1/me", get(me))
        .route("/v1/apps", get(apps).post(create_app))
        .route("/v1/apps/{name}", axum::routing::delete(delete_app))
        .route("/v1/apps/{name}/token", post(rotate_app))
        .route("/v1/users", get(users).post(create_user))
        .route("/v1/users/{name}", axum::routing::delete(delete_user))
        .route("/v1/users/{name}/roles", put(set_roles))
        .route("/v1/users/{name}/token", post(rotate_user))
        .route("/v1/policies", get(list_policies))
        .route(
            "/v1/policies/{name}",
            get(get_policy).put(put_policy).delete(delete_policy),
        )
        .route("/v1/audit", get(audit))
        .route("/v1/stats", get(stats))
        .route("/v1/decide", post(decide))
        .route("/v1/decide/batch", post(decide_batch))
        .route(
            "/v1/lease/acquire",
            post(|s, h, b| lease(s, h, b, LeaseOp::Acquire)),
        )
        .route(
            "/v1/lease/release",
            post(|s, h, b| lease(s, h, b, LeaseOp::Release)),
        )
        .route(
            "/v1/lease/renew",
            post(|s, h, b| lease(s, h, b, LeaseOp::Renew)),
        )
        .route("/", get(crate::assets::index))
        .route("/assets/{*path}", get(crate::assets::asset))
        .fallback(|| async { ApiError::not_found("route") })
        .layer(middleware::from_fn(move |r, n| bounded(r, n, timeout)))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(shared)
}

/// Answers 503 for a request that takes longer than `timeout`, and logs every request.
async fn bounded(request: Request, next: Next, timeout: Duration) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let start = Instant::now();
    let response = match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => json_errors(response).await,
        Err(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the request took too long")
            .into_response(),
    };
    tracing::debug!(%method, %path, status = response.status().as_u16(), took_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX), "request");
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

/// Who is calling, resolved against one snapshot.
#[derive(Debug)]
enum Caller<'a> {
    App(&'a str),
    User(User),
}

fn caller<'a>(headers: &HeaderMap, snapshot: &'a Snapshot) -> Result<Caller<'a>> {
    caller_of(authorization(headers), snapshot)
}

/// The `Authorization` header's value, if it is text.
fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// The holder of the bearer token in an `Authorization` value.
fn caller_of<'a>(authorization: Option<&str>, snapshot: &'a Snapshot) -> Result<Caller<'a>> {
    let token = authorization
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(ApiError::unauthorized)?;
    match snapshot.tokens.get(&token::digest(token)) {
        Some(Principal::App(name)) => Ok(Caller::App(name)),
        Some(Principal::User(name)) => snapshot
            .users
            .get(name)
            .cloned()
            .map(Caller::User)
            .ok_or_else(ApiError::unauthorized),
        None => Err(ApiError::unauthorized()),
    }
}

/// The calling user; an app token may only decide.
fn user(headers: &HeaderMap, snapshot: &Snapshot) -> Result<User> {
    match caller(headers, snapshot)? {
        Caller::User(user) => Ok(user),
        Caller::App(_) => Err(ApiError::forbidden(
            "an app token may only call the decision endpoints",
        )),
    }
}

fn admin(headers: &HeaderMap, snapshot: &Snapshot) -> Result<User> {
    let user = user(headers, snapshot)?;
    if user.admin {
        Ok(user)
    } else {
        Err(ApiError::forbidden("only an admin may do this"))
    }
}

fn role(user: &User, app: &str) -> Option<Role> {
    user.roles.get(app).copied()
}

/// A role in at least one of the policy's apps (no apps: admins only).
fn can_read(user: &User, policy: &Policy) -> bool {
    user.admin || policy.apps.iter().any(|app| role(user, app).is_some())
}

/// Owner of every app the policy lists (no apps: admins only).
fn can_write(user: &User, policy: &Policy) -> bool {
    user.admin
        || (!policy.apps.is_empty()
            && policy
                .apps
                .iter()
                .all(|app| role(user, app) == Some(Role::Owner)))
}

/// A role in `app` (admins have every role).
fn check_app_role(user: &User, app: &str) -> Result<()> {
    if user.admin || role(user, app).is_some() {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "you have no role in app {app:?}"
        )))
    }
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// RFC 3339 UTC of unix second `s`: `2026-11-23T06:00:00Z`.
pub fn rfc3339(s: i64) -> String {
    let days = s.div_euclid(86_400);
    let secs = s.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The policy as the API shows it: the file's fields plus metadata.
pub fn policy_json(stored: &Stored) -> Value {
    let mut value = serde_json::to_value(&stored.policy).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut value {
        // Always present at the top (a composite's members leave them out).
        map.insert("apps".into(), json!(stored.policy.apps));
        map.insert("description".into(), json!(stored.policy.description));
        map.insert("name".into(), json!(stored.name));
        map.insert("version".into(), json!(stored.version));
        map.insert("created_by".into(), json!(stored.created_by));
        map.insert("updated_by".into(), json!(stored.updated_by));
        map.insert("created_at".into(), json!(rfc3339(stored.created_at)));
        map.insert("updated_at".into(), json!(rfc3339(stored.updated_at)));
    }
    value
}

/// Fields the server sets; ignored when a client sends them.
const METADATA: [&str; 6] = [
    "name",
    "version",
    "created_by",
    "updated_by",
    "created_at",
    "updated_at",
];

/// The JSON body of a request as a value: 413 beyond the limit, 415 if not JSON, 400
/// if malformed.
fn json_body(
    content_type: Option<&HeaderValue>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Value> {
    parse(&json_bytes(content_type, body)?)
}

/// The bytes of a JSON body: 413 beyond the limit, 415 if not JSON.
fn json_bytes(
    content_type: Option<&HeaderValue>,
    body: Result<Bytes, BytesRejection>,
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
fn parse<'a, T: Deserialize<'a>>(json: &'a [u8]) -> Result<T> {
    serde_json::from_slice(json).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ApiError::bad_request(e.to_string()),
        _ => ApiError::bad_request(format!("malformed JSON: {e}")),
    })
}

/// A JSON value as `T`, wrong types being a 400 naming the problem.
fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Result<T> {
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Names of policies, apps and users: 1 to 64 letters, digits, `-`, `_`, `.` (so they
/// go into headers, metric labels and URLs unchanged).
fn check_name(name: &str, field: &str) -> Result<()> {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(valid) {
        return Err(ApiError::invalid(format!(
            "a {field} is 1 to {MAX_NAME} letters, digits, '-', '_' or '.'"
        ))
        .field(field));
    }
    Ok(())
}

/// The policy in a PUT body: metadata dropped, the algorithm named, then the one parser.
fn parse_policy(mut value: Value) -> Result<Policy> {
    let Value::Object(map) = &mut value else {
        return Err(ApiError::bad_request("a policy is a JSON object"));
    };
    for field in METADATA {
        map.remove(field);
    }
    match map.get("algorithm") {
        None => {
            return Err(ApiError::invalid("a policy needs `algorithm`").field("algorithm"));
        }
        Some(Value::String(name)) => {
            name.parse::<Kind>()
                .map_err(|e| ApiError::invalid(e).field("algorithm"))?;
        }
        Some(_) => {
            return Err(ApiError::bad_request("`algorithm` must be a string").field("algorithm"));
        }
    }
    let policy: Policy = serde_json::from_value(value).map_err(|e| {
        let message = e.to_string();
        // serde names an unknown field in its message: point at it.
        let field = message
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split('`').next())
            .map(str::to_owned);
        let error = ApiError::bad_request(message);
        match field {
            Some(field) => error.field(field),
            None => error,
        }
    })?;
    for app in &policy.apps {
        check_name(app, "apps")?;
    }
    policy.build(Style::File).map_err(|problem| {
        let error = ApiError::invalid(problem.message);
        match problem.field {
            Some(field) => error.field(field),
            None => error,
        }
    })?;
    Ok(policy)
}

/// `If-Match: "3"` → 3; `None` without the header.
fn if_match(headers: &HeaderMap) -> Result<Option<i64>> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .map(|v| v.trim().trim_start_matches("W/").trim_matches('"'))
        .and_then(|v| v.parse().ok())
        .map(Some)
        .ok_or_else(|| ApiError::bad_request("If-Match must be a policy version, e.g. \"3\""))
}

fn etag(version: i64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{version}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
}

async fn metrics(State(shared): App, headers: HeaderMap) -> Result<Response> {
    if !shared.metrics_open {
        admin(&headers, &shared.snapshot())?;
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        shared.metrics.render() + &redis_metrics(&shared.backend),
    )
        .into_response())
}

/// The coalescing of decisions sent to Redis, when they are.
fn redis_metrics(backend: &Backend) -> String {
    let Backend::Redis { coalescer, .. } = backend else {
        return String::new();
    };
    let sent = coalescer.sent();
    let load = |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
    format!(
        "# HELP tollgate_redis_pipelines_total Pipelines of decisions sent to Redis.\n# TYPE tollgate_redis_pipelines_total counter\ntollgate_redis_pipelines_total {}\n# HELP tollgate_redis_decisions_total Decisions sent to Redis (in the pipelines).\n# TYPE tollgate_redis_decisions_total counter\ntollgate_redis_decisions_total {}\n",
        load(&sent.pipelines),
        load(&sent.decisions)
    )
}

async fn me(State(shared): App, headers: HeaderMap) -> Result<Json<Value>> {
    let user = user(&headers, &shared.snapshot())?;
    Ok(Json(
        json!({"name": user.name, "admin": user.admin, "roles": user.roles}),
    ))
}

async fn apps(State(shared): App, headers: HeaderMap) -> Result<Json<Value>> {
    let snapshot = shared.snapshot();
    let user = user(&headers, &snapshot)?;
    let apps: Vec<Value> = snapshot
        .apps
        .iter()
        .filter_map(|app| {
            if user.admin {
                Some(json!({"name": app, "role": "admin"}))
            } else {
                role(&user, app).map(|r| json!({"name": app, "role": r}))
            }
        })
        .collect();
    Ok(Json(json!({ "apps": apps })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewApp {
    name: String,
}

async fn create_app(
    State(shared): App,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response> {
    admin(&headers, &shared.snapshot())?;
    let NewApp { name } = typed(json_body(headers.get(header::CONTENT_TYPE), body)?)?;
    check_name(&name, "name")?;
    let token = token::new(token::APP);
    if !shared.store.create_app(&name, &token::hash(&token)).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("app {name:?} exists"),
        ));
    }
    shared.reload(false).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"name": name, "token": token})),
    )
        .into_response())
}

async fn rotate_app(
    State(shared): App,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<Value>> {
    rotate(&shared, &headers, name, Holder::App).await
}

/// What holds a token: an app or a user.
#[derive(Debug, Clone, Copy)]
enum Holder {
    App,
    User,
}

/// Gives `name` a new token (the old one stops working); shown once.
async fn rotate(
    shared: &Shared,
    headers: &HeaderMap,
    name: String,
    holder: Holder,
) -> Result<Json<Value>> {
    admin(headers, &shared.snapshot())?;
    let (prefix, what) = match holder {
        Holder::App => (token::APP, "app"),
        Holder::User => (token::USER, "user"),
    };
    let token = token::new(prefix);
    let hash = token::hash(&token);
    let found = match holder {
        Holder::App => shared.store.set_app_token(&name, &hash).await?,
        Holder::User => shared.store.set_user_token(&name, &hash).await?,
    };
    if !found {
        return Err(ApiError::not_found(what));
    }
    shared.reload(false).await?;
    Ok(Json(json!({"name": name, "token": token})))
}

async fn delete_app(
    State(shared): App,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    admin(&headers, &shared.snapshot())?;
    if !shared.store.delete_app(&name).await? {
        return Err(ApiError::not_found("app"));
    }
    shared.reload(false).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn users(State(shared): App, headers: HeaderMap) -> Result<Json<Value>> {
    let snapshot = shared.snapshot();
    admin(&headers, &snapshot)?;
    let users: Vec<Value> = snapshot
        .users
        .values()
        .map(|u| json!({"name": u.name, "admin": u.admin, "roles": u.roles}))
        .collect();
    Ok(Json(json!({ "users": users })))
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

fn check_roles(roles: &BTreeMap<String, Role>) -> Result<()> {
    for app in roles.keys() {
        check_name(app, "roles")?;
    }
    Ok(())
}

async fn create_user(
    State(shared): App,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response> {
    admin(&headers, &shared.snapshot())?;
    let NewUser { name, roles, admin } =
        typed(json_body(headers.get(header::CONTENT_TYPE), body)?)?;
    check_name(&name, "name")?;
    check_roles(&roles)?;
    let token = token::new(token::USER);
    let user = User { name, admin, roles };
    if !shared
        .store
        .create_user(&user, &token::hash(&token))
        .await?
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("user {:?} exists", user.name),
        ));
    }
    shared.reload(false).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"name": user.name, "token": token})),
    )
        .into_response())
}

/// Refuses to remove the last admin (`name` losing the flag or deleted): nobody could
/// manage users and apps any more.
fn keep_an_admin(snapshot: &Snapshot, name: &str) -> Result<()> {
    let others = snapshot.users.values().any(|u| u.admin && u.name != name);
    let is_admin = snapshot.users.get(name).is_some_and(|u| u.admin);
    if is_admin && !others {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("{name:?} is the last admin; make another admin first"),
        ));
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Roles {
    roles: BTreeMap<String, Role>,
    #[serde(default)]
    admin: bool,
}

async fn set_roles(
    State(shared): App,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let snapshot = shared.snapshot();
    admin(&headers, &snapshot)?;
    let Roles { roles, admin } = typed(json_body(headers.get(header::CONTENT_TYPE), body)?)?;
    check_roles(&roles)?;
    if !admin {
        keep_an_admin(&snapshot, &name)?;
    }
    let user = User { name, admin, roles };
    if !shared.store.set_roles(&user).await? {
        return Err(ApiError::not_found("user"));
    }
    shared.reload(false).await?;
    Ok(Json(
        json!({"name": user.name, "admin": user.admin, "roles": user.roles}),
    ))
}

async fn rotate_user(
    State(shared): App,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<Value>> {
    rotate(&shared, &headers, name, Holder::User).await
}

async fn delete_user(
    State(shared): App,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    let snapshot = shared.snapshot();
    admin(&headers, &snapshot)?;
    keep_an_admin(&snapshot, &name)?;
    if !shared.store.delete_user(&name).await? {
        return Err(ApiError::not_found("user"));
    }
    shared.reload(false).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct AppQuery {
    app: Option<String>,
}

async fn list_policies(
    State(shared): App,
    headers: HeaderMap,
    Query(query): Query<AppQuery>,
) -> Result<Json<Value>> {
    let snapshot = shared.snapshot();
    let user = user(&headers, &snapshot)?;
    if let Some(app) = &query.app {
        check_app_role(&user, app)?;
    }
    let policies: Vec<Value> = snapshot
        .policies
        .values()
        .filter(|s| match &query.app {
            Some(app) => s.policy.apps.contains(app),
            None => can_read(&user, &s.policy),
        })
        .map(policy_json)
        .collect();
    Ok(Json(json!({ "policies": policies })))
}

async fn get_policy(
    State(shared): App,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Response> {
    let snapshot = shared.snapshot();
    let user = user(&headers, &snapshot)?;
    let stored = snapshot
        .policies
        .get(&name)
        .filter(|s| can_read(&user, &s.policy))
        .ok_or_else(|| ApiError::not_found("policy"))?;
    Ok((
        [(header::ETAG, etag(stored.version))],
        Json(policy_json(stored)),
    )
        .into_response())
}

/// Why a write was refused inside its transaction.
enum Refusal {
    Api(ApiError),
    /// The current policy (boxed: it is large, and rare).
    Stale(Box<Stored>),
}

/// The permission and version checks of a write, against the current version.
fn check_write(
    user: &User,
    current: Option<&Stored>,
    next: Option<&Policy>,
    expected: Option<i64>,
) -> Result<(), Refusal> {
    if let Some(next) = next {
        if !can_write(user, next) {
            return Err(Refusal::Api(ApiError::forbidden(
                "you must own every app the policy lists",
            )));
        }
    }
    match current {
        None if next.is_none() => Err(Refusal::Api(ApiError::not_found("policy"))),
        None => Ok(()),
        Some(current) => {
            if !can_read(user, &current.policy) {
                // Exists where the caller may not look: a delete sees nothing; a write
                // cannot take the name.
                return Err(Refusal::Api(if next.is_none() {
                    ApiError::not_found("policy")
                } else {
                    ApiError::forbidden("you must own every app the policy lists")
                }));
            }
            if !can_write(user, &current.policy) {
                return Err(Refusal::Api(ApiError::forbidden(
                    "you must own every app the policy lists",
                )));
            }
            match expected {
                None => Err(Refusal::Api(ApiError::new(
                    StatusCode::PRECONDITION_REQUIRED,
                    "changing a policy needs If-Match: \"<version>\" (the version you change)",
                ))),
                Some(v) if v != current.version => Err(Refusal::Stale(Box::new(current.clone()))),
                Some(_) => Ok(()),
            }
        }
    }
}

async fn write(
    shared: &Shared,
    user: &User,
    name: &str,
    next: Option<&Policy>,
    expected: Option<i64>,
) -> Result<Option<Stored>> {
    let result = shared
        .store
        .write_policy(name, next, &user.name, now_s(), |current| {
            check_write(user, current, next, expected)
        })
        .await;
    match result {
        Ok(stored) => {
            // This server sees its own change at once; the others within a poll.
            if let Err(e) = shared.reload(false).await {
                tracing::warn!(error = %e, "reload after a write");
            }
            Ok(stored)
        }
        Err(WriteError::Store(e)) => Err(e.into()),
        Err(WriteError::Refused(Refusal::Api(e))) => Err(e),
        Err(WriteError::Refused(Refusal::Stale(current))) => {
            let mut e = ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "the policy changed: it is at version {}; retry with If-Match: \"{}\"",
                    current.version, current.version
                ),
            );
            e.current = Some(policy_json(&current));
            Err(e)
        }
    }
}

async fn put_policy(
    State(shared): App,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let user = user(&headers, &shared.snapshot())?;
    let expected = if_match(&headers)?;
    check_name(&name, "name")?;
    let policy = parse_policy(json_body(headers.get(header::CONTENT_TYPE), body)?)?;
    crate::decide::check_backend(&policy, &shared.backend).map_err(|(field, message)| {
        let error = ApiError::invalid(message);
        match field {
            Some(field) => error.field(field),
            None => error,
        }
    })?;
    let stored = write(&shared, &user, &name, Some(&policy), expected)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "nothing written"))?;
    let status = if stored.version == 1 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        [(header::ETAG, etag(stored.version))],
        Json(policy_json(&stored)),
    )
        .into_response())
}

async fn delete_policy(
    State(shared): App,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    let user = user(&headers, &shared.snapshot())?;
    let expected = if_match(&headers)?;
    write(&shared, &user, &name, None, expected).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct AuditQuery {
    app: Option<String>,
    limit: Option<usize>,
}

async fn audit(
    State(shared): App,
    headers: HeaderMap,
    Query(query): Query<AuditQuery>,
) -> Result<Json<Value>> {
    let user = user(&headers, &shared.snapshot())?;
    if let Some(app) = &query.app {
        check_app_role(&user, app)?;
    }
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let visible = |entry: &AuditEntry| match &query.app {
        Some(app) => entry.apps.contains(app),
        None => user.admin || entry.apps.iter().any(|app| role(&user, app).is_some()),
    };
    let entries = shared.store.audit(limit, visible).await?;
    let entries: Vec<Value> = entries
        .into_iter()
        .map(|e| {
            json!({"id": e.id, "at": rfc3339(e.at), "actor": e.actor, "action": e.action,
                   "policy": e.policy, "before": e.before, "after": e.after})
        })
        .collect();
    Ok(Json(json!({ "entries": entries })))
}

async fn stats(
    State(shared): App,
    headers: HeaderMap,
    Query(query): Query<AppQuery>,
) -> Result<Json<Value>> {
    let snapshot = shared.snapshot();
    let user = user(&headers, &snapshot)?;
    let Some(app) = query.app else {
        return Err(ApiError::bad_request("stats need ?app=APP").field("app"));
    };
    check_app_role(&user, &app)?;
    let now = u64::try_from(now_s()).unwrap_or(0);
    let policies: serde_json::Map<String, Value> = snapshot
        .policies
        .values()
        .filter(|s| s.policy.apps.contains(&app))
        .map(|s| (s.name.clone(), shared.metrics.series(&s.name, now)))
        .collect();
    Ok(Json(
        json!({"app": app, "step_s": STEP_S, "policies": policies}),
    ))
}

/// One decision asked for, read straight from the body: the strings borrow from it
/// unless they hold escapes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideRequest<'a> {
    #[serde(borrow)]
    policy: Cow<'a, str>,
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(default = "one")]
    cost: u64,
}

/// One decision's answer (fields in alphabetical order, as the API has always
/// written them).
#[derive(Serialize)]
struct DecideAnswer<'a> {
    allowed: bool,
    delay_us: u64,
    key: &'a str,
    limit: u64,
    policy: &'a str,
    remaining: u64,
    reset_after_us: u64,
    retry_after_us: Option<u64>,
}

const fn one() -> u64 {
    1
}

/// The policy `name` if app `app` may use it: a policy that does not exist and one
/// that does not list the app answer alike.
fn policy_for_app<'a>(snapshot: &'a Snapshot, app: &str, name: &str) -> Result<&'a Stored> {
    snapshot
        .policies
        .get(name)
        .filter(|s| s.policy.apps.iter().any(|a| a == app))
        .ok_or_else(|| ApiError::forbidden(format!("no such policy for this app: {name:?}")))
}

/// A decision backend's failure as an answer.
fn backend_error(e: DecideError) -> ApiError {
    match e {
        DecideError::Leases(_) | DecideError::Rate(_) => {
            ApiError::invalid(e.to_string()).field("policy")
        }
        DecideError::Lease(ref inner) => {
            let field = match inner {
                tollgate_core::LeaseError::Param(tollgate_core::ParamError::OutOfRange {
                    name,
                    ..
                }) if *name == "ttl" => "ttl_us",
                _ => "owner",
            };
            ApiError::invalid(e.to_string()).field(field)
        }
        DecideError::Unavailable(_) | DecideError::Full => {
            tracing::warn!(error = %e, "decision backend");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the decision backend is unavailable",
            )
        }
        _ => {
            tracing::error!(error = %e, "decision backend");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the decision backend failed",
            )
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseRequest {
    policy: String,
    key: String,
    owner: String,
    ttl_us: Option<u64>,
}

async fn lease(
    State(shared): App,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    op: LeaseOp,
) -> Result<Json<Value>> {
    let snapshot = shared.snapshot();
    let app = app_caller(&headers, &snapshot)?;
    let request: LeaseRequest = typed(json_body(headers.get(header::CONTENT_TYPE), body)?)?;
    let stored = policy_for_app(&snapshot, app, &request.policy)?;
    check_key(&request.key)?;
    let limiters = shared.limiters();
    let entry = limiters.get(&stored.name).ok_or_else(|| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the policy has no limiter")
    })?;
    let Some(ttl) = request.ttl_us.or(entry.lease_ttl()) else {
        return Err(backend_error(DecideError::Rate(stored.name.clone())));
    };
    let answer = entry
        .lease(
            &shared.backend,
            &stored.name,
            op,
            &request.key,
            &request.owner,
            ttl,
        )
        .await
        .map_err(backend_error)?;
    Ok(Json(match (op, answer) {
        (_, LeaseAnswer::Acquired(acquired)) => match acquired.grant {
            Some(grant) => json!({"acquired": true, "token": grant.token,
                "expires_at_us": grant.expires_at, "holds": grant.holds}),
            None => json!({"acquired": false, "retry_after_us": acquired.decision.retry_after}),
        },
        (LeaseOp::Renew, LeaseAnswer::Held(grant)) => {
            json!({"renewed": true, "expires_at_us": grant.expires_at})
        }
        (LeaseOp::Renew, _) => json!({"renewed": false, "expires_at_us": null}),
        (_, LeaseAnswer::Held(grant)) => json!({"released": true, "holds": grant.holds}),
        (_, LeaseAnswer::NotHeld) => json!({"released": false}),
    }))
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(ApiError::invalid(format!("a key is 1 to {MAX_KEY} bytes")).field("key"));
    }
    Ok(())
}

/// Decides `cost` units of `key` on `policy` for app `app`, counting it in the metrics;
/// the HTTP and gRPC APIs both decide here.
pub(crate) async fn decide_for(
    shared: &Shared,
    snapshot: &Snapshot,
    limiters: &Limiters,
    app: &str,
    policy: &str,
    key: &str,
    cost: u64,
) -> Result<(Arc<Entry>, tollgate_core::Decision)> {
    let stored = policy_for_app(snapshot, app, policy)?;
    check_key(key)?;
    let entry = limiters.get(&stored.name).ok_or_else(|| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the policy has no limiter")
    })?;
    let start = Instant::now();
    let decision = entry
        .decide(&shared.backend, &stored.name, key, cost)
        .await
        .map_err(backend_error)?;
    shared.metrics.decision(
        entry.counters(),
        decision.allowed,
        u64::try_from(now_s()).unwrap_or(0),
        start.elapsed(),
    );
    Ok((Arc::clone(entry), decision))
}

/// One decision for app `app`: the answer's fields and the entry whose headers it
/// gets, or an error with its status.
async fn decide_one<'r>(
    shared: &Shared,
    snapshot: &Snapshot,
    limiters: &Limiters,
    app: &str,
    request: &'r DecideRequest<'_>,
) -> Result<(DecideAnswer<'r>, Arc<Entry>, tollgate_core::Decision)> {
    let (entry, decision) = decide_for(
        shared,
        snapshot,
        limiters,
        app,
        &request.policy,
        &request.key,
        request.cost,
    )
    .await?;
    let answer = DecideAnswer {
        allowed: decision.allowed,
        delay_us: decision.delay,
        key: &request.key,
        limit: decision.limit,
        policy: &request.policy,
        remaining: decision.remaining,
        reset_after_us: decision.reset_after,
        retry_after_us: decision.retry_after,
    };
    Ok((answer, entry, decision))
}

fn app_caller<'a>(headers: &HeaderMap, snapshot: &'a Snapshot) -> Result<&'a str> {
    app_of(authorization(headers), snapshot)
}

/// The app whose token is in an `Authorization` value; a user token may not decide.
pub(crate) fn app_of<'a>(authorization: Option<&str>, snapshot: &'a Snapshot) -> Result<&'a str> {
    match caller_of(authorization, snapshot)? {
        Caller::App(app) => Ok(app),
        Caller::User(_) => Err(ApiError::forbidden(
            "decisions are for app tokens; a user token manages",
        )),
    }
}

/// The whole request is taken (not a copy of its headers, as axum's `HeaderMap`
/// extractor makes): this runs for every decision.
async fn decide(State(shared): App, request: Request) -> Result<Response> {
    let snapshot = shared.snapshot();
    let app = app_caller(request.headers(), &snapshot)?;
    let content_type = request.headers().get(header::CONTENT_TYPE).cloned();
    let body = Bytes::from_request(request, &()).await;
    let body = json_bytes(content_type.as_ref(), body)?;
    let request: DecideRequest = parse(&body)?;
    let (answer, entry, decision) =
        decide_one(&shared, &snapshot, &shared.limiters(), app, &request).await?;
    // Written once into a buffer sized for a usual answer.
    let mut json = Vec::with_capacity(160 + answer.key.len() + answer.policy.len());
    serde_json::to_writer(&mut json, &answer)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let mut response = Response::new(axum::body::Body::from(json));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(policy) = &entry.header {
        // Stamped as a refusal so a denial carries Retry-After; the status stays 200.
        let status = if decision.allowed {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        policy.stamp(headers, status, &decision, false);
    }
    Ok(response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    requests: Vec<Value>,
}

async fn decide_batch(
    State(shared): App,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let snapshot = shared.snapshot();
    let app = app_caller(&headers, &snapshot)?;
    let Batch { requests } = typed(json_body(headers.get(header::CONTENT_TYPE), body)?)?;
    if requests.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!(
            "a batch holds at most {MAX_BATCH} requests, got {}",
            requests.len()
        ))
        .field("requests"));
    }
    let limiters = shared.limiters();
    let mut decisions = Vec::with_capacity(requests.len());
    for request in requests {
        let answer = match DecideRequest::deserialize(&request) {
            Ok(request) => decide_one(&shared, &snapshot, &limiters, app, &request)
                .await
                .and_then(|(answer, ..)| {
                    serde_json::to_value(answer).map_err(|e| {
                        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
                    })
                }),
            Err(e) => Err(ApiError::bad_request(e.to_string())),
        };
        decisions.push(answer.unwrap_or_else(|e| {
            let mut body = json!({"error": e.message, "status": e.status.as_u16()});
            if let Some(field) = e.field {
                body["field"] = json!(field);
            }
            body
        }));
    }
    Ok(Json(json!({ "decisions": decisions })))
}
