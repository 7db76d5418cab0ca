//! The permission matrix: every endpoint × every kind of caller, against a real server
//! on loopback, with the status each must get.

use crate::common::*;
use hyper::{Method, StatusCode};

/// The callers, in the order of each row's expected statuses.
const CALLERS: [&str; 7] = ["none", "bad", "viewer", "other", "owner", "admin", "app"];

/// `{role}` in a path or body becomes the caller's name, so each caller's write touches
/// its own resource (prepared below) and no cell depends on another.
struct Row {
    method: Method,
    path: &'static str,
    body: Option<&'static str>,
    if_match: Option<&'static str>,
    expect: [u16; 7],
}

const fn row(
    method: Method,
    path: &'static str,
    body: Option<&'static str>,
    if_match: Option<&'static str>,
    expect: [u16; 7],
) -> Row {
    Row {
        method,
        path,
        body,
        if_match,
        expect,
    }
}

const WEB_POLICY: &str = r#"{"algorithm":"fixed-window","limit":5,"period":"1s","apps":["web"]}"#;
const BOTH_POLICY: &str =
    r#"{"algorithm":"fixed-window","limit":5,"period":"1s","apps":["web","mobile"]}"#;
const NO_APPS_POLICY: &str = r#"{"algorithm":"fixed-window","limit":5,"period":"1s"}"#;
const NEW_APP: &str = r#"{"name":"app-{role}"}"#;
const NEW_USER: &str = r#"{"name":"new-{role}","roles":{"web":"viewer"}}"#;
const ROLES: &str = r#"{"roles":{"web":"owner"},"admin":false}"#;
const DECIDE: &str = r#"{"policy":"api","key":"k"}"#;
/// Each caller's report, under an id of its own.
const REPORT: &str = r#"{"policy":"api","key":"k","cost":2,"id":"{role}"}"#;
const BATCH: &str = r#"{"requests":[{"policy":"api","key":"k"}]}"#;
/// Each caller's lease on the `workers` policy.
const LEASE: &str = r#"{"policy":"workers","key":"k","owner":"{role}"}"#;

#[rustfmt::skip]
fn rows() -> Vec<Row> {
    use Method as M;
    // method, path, body, If-Match; the statuses for: none bad viewer other owner admin app
    vec![
        row(M::GET,    "/healthz",                     None,                 None,          [200, 200, 200, 200, 200, 200, 200]),
        row(M::GET,    "/",                            None,                 None,          [200, 200, 200, 200, 200, 200, 200]),
        row(M::GET,    "/metrics",                     None,                 None,          [401, 401, 403, 403, 403, 200, 403]),
        row(M::GET,    "/v1/me",                       None,                 None,          [401, 401, 200, 200, 200, 200, 403]),
        row(M::GET,    "/v1/apps",                     None,                 None,          [401, 401, 200, 200, 200, 200, 403]),
        row(M::POST,   "/v1/apps",                     Some(NEW_APP),        None,          [401, 401, 403, 403, 403, 201, 403]),
        row(M::POST,   "/v1/apps/spare-{role}/token",  None,                 None,          [401, 401, 403, 403, 403, 200, 403]),
        row(M::DELETE, "/v1/apps/spare-{role}",        None,                 None,          [401, 401, 403, 403, 403, 204, 403]),
        row(M::GET,    "/v1/users",                    None,                 None,          [401, 401, 403, 403, 403, 200, 403]),
        row(M::POST,   "/v1/users",                    Some(NEW_USER),       None,          [401, 401, 403, 403, 403, 201, 403]),
        row(M::PUT,    "/v1/users/spare-{role}/roles", Some(ROLES),          None,          [401, 401, 403, 403, 403, 200, 403]),
        row(M::POST,   "/v1/users/spare-{role}/token", None,                 None,          [401, 401, 403, 403, 403, 200, 403]),
        row(M::DELETE, "/v1/users/spare-{role}",       None,                 None,          [401, 401, 403, 403, 403, 204, 403]),
        row(M::GET,    "/v1/policies",                 None,                 None,          [401, 401, 200, 200, 200, 200, 403]),
        row(M::GET,    "/v1/policies?app=web",         None,                 None,          [401, 401, 200, 403, 200, 200, 403]),
        // Whether or not the app exists: the same 403.
        row(M::GET,    "/v1/policies?app=nowhere",     None,                 None,          [401, 401, 403, 403, 403, 200, 403]),
        row(M::GET,    "/v1/policies/api",             None,                 None,          [401, 401, 200, 404, 200, 200, 403]),
        row(M::GET,    "/v1/policies/missing",         None,                 None,          [401, 401, 404, 404, 404, 404, 403]),
        row(M::PUT,    "/v1/policies/new-{role}",      Some(WEB_POLICY),     None,          [401, 401, 403, 403, 201, 201, 403]),
        row(M::PUT,    "/v1/policies/both-{role}",     Some(BOTH_POLICY),    None,          [401, 401, 403, 403, 403, 201, 403]),
        row(M::PUT,    "/v1/policies/bare-{role}",     Some(NO_APPS_POLICY), None,          [401, 401, 403, 403, 403, 201, 403]),
        row(M::PUT,    "/v1/policies/upd-{role}",      Some(WEB_POLICY),     Some("\"1\""), [401, 401, 403, 403, 200, 200, 403]),
        row(M::PUT,    "/v1/policies/upd-{role}",      Some(WEB_POLICY),     None,          [401, 401, 403, 403, 428, 428, 403]),
        row(M::DELETE, "/v1/policies/del-{role}",      None,                 Some("\"1\""), [401, 401, 403, 404, 204, 204, 403]),
        row(M::GET,    "/v1/audit",                    None,                 None,          [401, 401, 200, 200, 200, 200, 403]),
        row(M::GET,    "/v1/audit?app=web",            None,                 None,          [401, 401, 200, 403, 200, 200, 403]),
        row(M::GET,    "/v1/stats?app=web",            None,                 None,          [401, 401, 200, 403, 200, 200, 403]),
        row(M::POST,   "/v1/decide",                   Some(DECIDE),         None,          [401, 401, 403, 403, 403, 403, 200]),
        row(M::POST,   "/v1/lease/acquire",            Some(LEASE),          None,          [401, 401, 403, 403, 403, 403, 200]),
        row(M::POST,   "/v1/lease/renew",              Some(LEASE),          None,          [401, 401, 403, 403, 403, 403, 200]),
        row(M::POST,   "/v1/lease/release",            Some(LEASE),          None,          [401, 401, 403, 403, 403, 403, 200]),
        row(M::POST,   "/v1/lease/withdraw",           Some(LEASE),          None,          [401, 401, 403, 403, 403, 403, 200]),
        row(M::GET,    "/v1/policies/workers/leases/k", None,                None,          [401, 401, 200, 404, 200, 200, 403]),
        row(M::POST,   "/v1/decide/batch",             Some(BATCH),          None,          [401, 401, 403, 403, 403, 403, 200]),
        row(M::POST,   "/v1/report",                   Some(REPORT),         None,          [401, 401, 403, 403, 403, 403, 200]),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_for_every_caller() {
    let (server, admin) = TestServer::start().await;
    app(&server, &admin, "web").await;
    app(&server, &admin, "mobile").await;
    let viewer = user(&server, &admin, "viewer", r#"{"web":"viewer"}"#).await;
    let other = user(&server, &admin, "other", r#"{"mobile":"owner"}"#).await;
    let owner = user(&server, &admin, "owner", r#"{"web":"owner"}"#).await;
    // Apps are named like the callers' resources; the app token is web's own.
    let web = post(&server.url("/v1/apps/web/token"), &admin, "").await;
    assert_eq!(web.status, StatusCode::OK, "{}", web.text);
    let web = web.json["token"].as_str().unwrap().to_owned();
    let api = put(&server.url("/v1/policies/api"), &admin, WEB_POLICY, None).await;
    assert_eq!(api.status, StatusCode::CREATED, "{}", api.text);
    let workers = r#"{"algorithm":"concurrency","limit":1,"lease":"30s","apps":["web"]}"#;
    let made = put(&server.url("/v1/policies/workers"), &admin, workers, None).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);

    let tokens = [
        None,
        Some("sgu_not-a-token".to_owned()),
        Some(viewer),
        Some(other),
        Some(owner),
        Some(admin.clone()),
        Some(web),
    ];
    // Each caller's own resources, prepared by the admin.
    for caller in CALLERS {
        for name in ["upd", "del"] {
            let path = format!("/v1/policies/{name}-{caller}");
            let made = put(&server.url(&path), &admin, WEB_POLICY, None).await;
            assert_eq!(made.status, StatusCode::CREATED, "{path}: {}", made.text);
        }
        app(&server, &admin, &format!("spare-{caller}")).await;
        user(&server, &admin, &format!("spare-{caller}"), "{}").await;
    }

    let mut failures = Vec::new();
    for row in rows() {
        for (i, caller) in CALLERS.iter().enumerate() {
            let path = row.path.replace("{role}", caller);
            let body = row.body.map(|b| b.replace("{role}", caller));
            let extra: Vec<(&str, &str)> = row.if_match.iter().map(|v| ("if-match", *v)).collect();
            let answer = call(
                row.method.clone(),
                &server.url(&path),
                tokens[i].as_deref(),
                body.as_deref(),
                &extra,
            )
            .await;
            if answer.status.as_u16() != row.expect[i] {
                failures.push(format!(
                    "{} {path} as {caller}: expected {}, got {} {}",
                    row.method, row.expect[i], answer.status, answer.text
                ));
            }
            // Errors have one shape; 401 says how to authenticate.
            if answer.status.is_client_error() && path != "/" {
                assert!(answer.json["error"].is_string(), "{path}: {}", answer.text);
            }
            if answer.status == StatusCode::UNAUTHORIZED {
                assert_eq!(answer.headers["www-authenticate"], "Bearer");
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    server.stop().await;
}

/// Listings show only what the caller may read; a hidden policy answers like a missing
/// one; an app decides only on its policies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_leaks_beyond_the_roles() {
    let (server, admin) = TestServer::start().await;
    let web = app(&server, &admin, "web").await;
    let mobile = app(&server, &admin, "mobile").await;
    let other = user(&server, &admin, "other", r#"{"mobile":"owner"}"#).await;
    for (name, body) in [("api", WEB_POLICY), ("bare", NO_APPS_POLICY)] {
        let made = put(
            &server.url(&format!("/v1/policies/{name}")),
            &admin,
            body,
            None,
        )
        .await;
        assert_eq!(made.status, StatusCode::CREATED);
    }
    let listed = get(&server.url("/v1/policies"), &other).await;
    assert_eq!(listed.json["policies"], serde_json::json!([]));
    let all = get(&server.url("/v1/policies"), &admin).await;
    assert_eq!(all.json["policies"].as_array().unwrap().len(), 2);
    let audit = get(&server.url("/v1/audit"), &other).await;
    assert_eq!(audit.json["entries"], serde_json::json!([]));
    let apps = get(&server.url("/v1/apps"), &other).await;
    assert_eq!(
        apps.json["apps"],
        serde_json::json!([{"name": "mobile", "role": "owner"}])
    );
    // Hidden and missing look alike.
    let hidden = get(&server.url("/v1/policies/api"), &other).await;
    let missing = get(&server.url("/v1/policies/nope"), &other).await;
    assert_eq!(
        (hidden.status, &hidden.json),
        (missing.status, &missing.json)
    );
    // The other app's token: 403 as for a policy that does not exist, no decision.
    let decide = |token: String, policy: &'static str| {
        let url = server.url("/v1/decide");
        async move {
            post(
                &url,
                &token,
                &format!(r#"{{"policy":"{policy}","key":"k"}}"#),
            )
            .await
        }
    };
    let foreign = decide(mobile.clone(), "api").await;
    let absent = decide(mobile, "nope").await;
    assert_eq!(foreign.status, StatusCode::FORBIDDEN);
    assert_eq!(foreign.status, absent.status);
    assert_eq!(
        foreign.text.replace("api", "P"),
        absent.text.replace("nope", "P")
    );
    // A policy with no apps serves no app.
    assert_eq!(
        decide(web.clone(), "bare").await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(decide(web, "api").await.status, StatusCode::OK);
    // A rotated token stops working at once; a deleted user's too.
    let rotated = post(&server.url("/v1/users/other/token"), &admin, "").await;
    assert_eq!(
        get(&server.url("/v1/me"), &other).await.status,
        StatusCode::UNAUTHORIZED
    );
    let new = rotated.json["token"].as_str().unwrap().to_owned();
    assert_eq!(
        get(&server.url("/v1/me"), &new).await.status,
        StatusCode::OK
    );
    // The last admin can be neither demoted nor deleted.
    let demote = call(
        Method::PUT,
        &server.url("/v1/users/root/roles"),
        Some(&admin),
        Some(r#"{"roles":{},"admin":false}"#),
        &[],
    )
    .await;
    assert_eq!(demote.status, StatusCode::CONFLICT, "{}", demote.text);
    let delete = send(Method::DELETE, &server.url("/v1/users/root"), &admin).await;
    assert_eq!(delete.status, StatusCode::CONFLICT);
    assert_eq!(
        get(&server.url("/v1/users"), &admin).await.status,
        StatusCode::OK
    );
    let deleted = send(Method::DELETE, &server.url("/v1/users/other"), &admin).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert_eq!(
        get(&server.url("/v1/me"), &new).await.status,
        StatusCode::UNAUTHORIZED
    );
    server.stop().await;
}

/// `GET /v1/me` with these `Authorization` values, as they are sent.
async fn me_with(server: &TestServer, values: &[&str]) -> Answer {
    let headers: Vec<(&str, &str)> = values.iter().map(|v| ("authorization", *v)).collect();
    call(Method::GET, &server.url("/v1/me"), None, None, &headers).await
}

#[tokio::test]
async fn the_bearer_scheme_is_read_in_any_case() {
    let (server, admin) = TestServer::start().await;
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let answer = me_with(&server, &[&format!("{scheme} {admin}")]).await;
        assert_eq!(answer.status, StatusCode::OK, "{scheme}: {}", answer.text);
    }
    let answer = me_with(&server, &[&format!("Basic {admin}")]).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    server.stop().await;
}

#[tokio::test]
async fn two_authorization_headers_are_refused_even_when_both_are_valid() {
    let (server, admin) = TestServer::start().await;
    let value = format!("Bearer {admin}");
    let answer = me_with(&server, &[&value, &value]).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(
        answer.json["error"]
            .as_str()
            .is_some_and(|e| e.contains("one Authorization header")),
        "{}",
        answer.text
    );
    server.stop().await;
}

/// The page and its files run only their own code and cannot be framed.
#[tokio::test]
async fn the_page_is_served_under_a_strict_content_security_policy() {
    let (server, _) = TestServer::start().await;
    for path in ["/", "/assets/app.js"] {
        let answer = call(Method::GET, &server.url(path), None, None, &[]).await;
        assert_eq!(answer.status, StatusCode::OK);
        let csp = answer.headers["content-security-policy"]
            .to_str()
            .expect("ASCII");
        for directive in [
            "default-src 'none'",
            "script-src 'self' 'wasm-unsafe-eval'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(answer.headers["x-frame-options"], "DENY");
    }
    server.stop().await;
}
