//! Apps and users as a whole: an app in use is not deleted behind its policies and
//! roles, and roles name only apps that exist.

mod common;

use common::*;
use hyper::{Method, StatusCode};

const WEB_POLICY: &str = r#"{"algorithm":"fixed-window","limit":5,"period":"1s","apps":["web"]}"#;

#[tokio::test]
async fn an_app_in_use_is_deleted_only_with_cascade_and_its_name_hands_nothing_on() {
    let (server, admin) = TestServer::start().await;
    app(&server, &admin, "web").await;
    create_policy(&server, &admin, "api", WEB_POLICY).await;
    user(&server, &admin, "alice", r#"{"web":"owner"}"#).await;
    let url = server.url("/v1/apps/web");

    let refused = send(Method::DELETE, &url, &admin).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.text);
    let error = refused.json["error"].as_str().expect("error");
    assert!(
        error.contains("\"api\"") && error.contains("\"alice\""),
        "{error}"
    );
    assert_eq!(
        get(&server.url("/v1/apps"), &admin).await.json["apps"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    let deleted = send(Method::DELETE, &format!("{url}?cascade=true"), &admin).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
    // Nothing else is lost: the policy stays (for admins), the user stays, roleless.
    let policy = get(&server.url("/v1/policies/api"), &admin).await;
    assert_eq!(policy.status, StatusCode::OK);
    assert_eq!(policy.json["apps"], serde_json::json!([]));
    assert_eq!(policy.json["version"], 2);
    let users = get(&server.url("/v1/users"), &admin).await;
    let alice = users.json["users"]
        .as_array()
        .and_then(|u| u.iter().find(|u| u["name"] == "alice"))
        .expect("alice stays")
        .clone();
    assert_eq!(alice["roles"], serde_json::json!({}));

    // A new app of the same name gets neither the policy nor the roles.
    let new_web = app(&server, &admin, "web").await;
    let decided = post(
        &server.url("/v1/decide"),
        &new_web,
        r#"{"policy":"api","key":"k"}"#,
    )
    .await;
    assert_eq!(decided.status, StatusCode::FORBIDDEN, "{}", decided.text);
    server.stop().await;
}

#[tokio::test]
async fn roles_name_only_apps_that_exist() {
    let (server, admin) = TestServer::start().await;
    app(&server, &admin, "web").await;
    let created = post(
        &server.url("/v1/users"),
        &admin,
        r#"{"name":"bob","roles":{"ghost":"owner"}}"#,
    )
    .await;
    assert_eq!(
        created.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        created.text
    );
    assert_eq!(created.json["field"], "roles");
    user(&server, &admin, "bob", r#"{"web":"viewer"}"#).await;
    let set = put(
        &server.url("/v1/users/bob/roles"),
        &admin,
        r#"{"roles":{"web":"owner","ghost":"viewer"}}"#,
        None,
    )
    .await;
    assert_eq!(set.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", set.text);
    server.stop().await;
}
