//! Apps and users as a whole: an app in use is not deleted behind its policies and
//! roles, and roles name only apps that exist.

use crate::common::*;
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

/// Two admins demote each other at once, `rounds` times (through `a` and `b`, which may
/// be one server): one of them stays an admin every time.
async fn demote_each_other(a: &TestServer, b: &TestServer, root: &str, rounds: usize) {
    let second = user(a, root, "second", "{}").await;
    let demote = r#"{"roles":{},"admin":false}"#;
    let promote = r#"{"roles":{},"admin":true}"#;
    for round in 0..rounds {
        let promoted = put(&a.url("/v1/users/second/roles"), root, promote, None).await;
        assert_eq!(promoted.status, StatusCode::OK, "{}", promoted.text);
        // Both servers know `second` as an admin before the race.
        let admin_on_b =
            || async { get(&b.url("/v1/users"), &second).await.status == StatusCode::OK };
        assert!(eventually(std::time::Duration::from_secs(5), admin_on_b).await);
        let (second_url, root_url) = (
            a.url("/v1/users/second/roles"),
            b.url("/v1/users/root/roles"),
        );
        let (x, y) = tokio::join!(
            put(&second_url, root, demote, None),
            put(&root_url, &second, demote, None),
        );
        // The loser is refused by the check (409) or, when the winner's change was
        // already read, as no longer an admin (403).
        let mut statuses = [x.status.as_u16(), y.status.as_u16()];
        statuses.sort_unstable();
        assert!(
            statuses == [200, 403] || statuses == [200, 409],
            "round {round}: {} / {}",
            x.text,
            y.text
        );
        let winner = if x.status == StatusCode::OK {
            root
        } else {
            &second
        };
        // One admin left, once `a` has read the change (it may have been made on `b`).
        let one_admin = || async {
            let users = get(&a.url("/v1/users"), winner).await;
            users.json["users"]
                .as_array()
                .map_or(0, |u| u.iter().filter(|u| u["admin"] == true).count())
                == 1
        };
        assert!(
            eventually(std::time::Duration::from_secs(5), one_admin).await,
            "round {round}"
        );
        if y.status == StatusCode::OK {
            // `second` won: it gives root its flag back for the next round.
            let back = put(&b.url("/v1/users/root/roles"), &second, promote, None).await;
            assert_eq!(back.status, StatusCode::OK, "{}", back.text);
            let root_on_a =
                || async { get(&a.url("/v1/users"), root).await.status == StatusCode::OK };
            assert!(eventually(std::time::Duration::from_secs(5), root_on_a).await);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_admins_demoting_each_other_leave_one() {
    let (server, root) = TestServer::start().await;
    demote_each_other(&server, &server, &root, 20).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_admins_demoting_each_other_through_two_servers_leave_one() {
    let pg = Postgres::start();
    let (a, b, root) = two_servers(sluicegate_server::Config {
        store: Some(pg.url()),
        ..config()
    })
    .await;
    demote_each_other(&a, &b, &root, 10).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn every_account_change_is_audited_without_tokens() {
    let (server, root) = TestServer::start().await;
    let web = app(&server, &root, "web").await;
    let alice = user(&server, &root, "alice", r#"{"web":"viewer"}"#).await;
    let roles = put(
        &server.url("/v1/users/alice/roles"),
        &root,
        r#"{"roles":{"web":"owner"},"admin":true}"#,
        None,
    )
    .await;
    assert_eq!(roles.status, StatusCode::OK, "{}", roles.text);
    let mut tokens = vec![root.clone(), web, alice];
    for path in ["/v1/apps/web/token", "/v1/users/alice/token"] {
        let rotated = post(&server.url(path), &root, "").await;
        assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.text);
        tokens.push(rotated.json["token"].as_str().expect("token").to_owned());
    }
    // A refused change leaves no entry.
    let refused = put(
        &server.url("/v1/users/alice/roles"),
        &root,
        r#"{"roles":{"ghost":"owner"}}"#,
        None,
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    for path in ["/v1/users/alice", "/v1/apps/web?cascade=true"] {
        let deleted = send(Method::DELETE, &server.url(path), &root).await;
        assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
    }
    let audit = get(&server.url("/v1/audit"), &root).await;
    let mut actions: Vec<String> = audit.json["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            format!(
                "{} {} by {}",
                e["action"].as_str().unwrap_or(""),
                e["policy"].as_str().unwrap_or(""),
                e["actor"].as_str().unwrap_or("")
            )
        })
        .collect();
    actions.reverse();
    assert_eq!(
        actions,
        [
            "user.create root by root",
            "app.create web by root",
            "user.create alice by root",
            "user.roles alice by root",
            "app.rotate web by root",
            "user.rotate alice by root",
            "user.delete alice by root",
            "app.delete web by root",
        ]
    );
    let roles_entry = &audit.json["entries"][4];
    assert_eq!(roles_entry["before"]["admin"], false);
    assert_eq!(roles_entry["after"]["roles"]["web"], "owner");
    for token in &tokens {
        assert!(!audit.text.contains(token.as_str()));
    }
    assert!(!audit.text.contains("sha256"), "{}", audit.text);
    server.stop().await;
}
