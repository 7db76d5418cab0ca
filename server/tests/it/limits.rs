//! What one owner may hold and read at once: caps on policies (in all, per app), and
//! lists in pages.

use crate::common::*;
use hyper::StatusCode;
use serde_json::Value;
use sluicegate_server::Config;

fn policy(apps: &str) -> String {
    format!(r#"{{"algorithm":"fixed-window","limit":5,"period":"1s","apps":{apps}}}"#)
}

#[tokio::test]
async fn policies_are_capped_in_all_and_per_app() {
    let (server, admin) = TestServer::start_with(Config {
        max_policies: 5,
        max_policies_per_app: 3,
        ..config()
    })
    .await;
    app(&server, &admin, "web").await;
    app(&server, &admin, "mobile").await;
    let web = policy(r#"["web"]"#);
    for i in 0..3 {
        create_policy(&server, &admin, &format!("w{i}"), &web).await;
    }
    let url = |name: &str| server.url(&format!("/v1/policies/{name}"));
    let refused = put(&url("w3"), &admin, &web, None).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.text);
    // Changing a policy already counted is not one more.
    let changed = put(
        &url("w0"),
        &admin,
        &web.replace("\"limit\":5", "\"limit\":6"),
        Some(1),
    )
    .await;
    assert_eq!(changed.status, StatusCode::OK, "{}", changed.text);
    // Nor may a policy join a full app.
    create_policy(&server, &admin, "m0", &policy(r#"["mobile"]"#)).await;
    let joined = put(&url("m0"), &admin, &policy(r#"["mobile","web"]"#), Some(1)).await;
    assert_eq!(joined.status, StatusCode::CONFLICT, "{}", joined.text);
    create_policy(&server, &admin, "m1", &policy(r#"["mobile"]"#)).await;
    let total = put(&url("m2"), &admin, &policy(r#"["mobile"]"#), None).await;
    assert_eq!(total.status, StatusCode::CONFLICT, "{}", total.text);
    assert!(total.text.contains("--max-policies"), "{}", total.text);
    server.stop().await;
}

/// Every page of `path` (`{key}` the list's field), `limit` at a time.
async fn pages(
    server: &TestServer,
    token: &str,
    path: &str,
    key: &str,
    limit: usize,
) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut after: Option<String> = None;
    let separator = if path.contains('?') { '&' } else { '?' };
    loop {
        let cursor = after
            .as_ref()
            .map(|a| format!("&after={a}"))
            .unwrap_or_default();
        let answer = get(
            &server.url(&format!("{path}{separator}limit={limit}{cursor}")),
            token,
        )
        .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        let names: Vec<String> = answer.json[key]
            .as_array()
            .expect("a list")
            .iter()
            .map(|v| v["name"].as_str().unwrap_or_default().to_owned())
            .collect();
        pages.push(names);
        match &answer.json["next"] {
            Value::String(next) => after = Some(next.clone()),
            _ => return pages,
        }
    }
}

#[tokio::test]
async fn every_list_comes_in_pages() {
    let (server, admin) = TestServer::start().await;
    for name in ["a", "b", "c", "d", "e"] {
        app(&server, &admin, name).await;
        user(&server, &admin, &format!("u{name}"), "{}").await;
        create_policy(&server, &admin, &format!("p{name}"), &policy(r#"["a"]"#)).await;
    }
    let flat = |pages: Vec<Vec<String>>| pages.concat();
    let policies = pages(&server, &admin, "/v1/policies", "policies", 2).await;
    assert_eq!(policies.len(), 3);
    assert_eq!(flat(policies), ["pa", "pb", "pc", "pd", "pe"]);
    assert_eq!(
        flat(pages(&server, &admin, "/v1/policies?app=a", "policies", 4).await).len(),
        5
    );
    assert_eq!(
        flat(pages(&server, &admin, "/v1/apps", "apps", 2).await),
        ["a", "b", "c", "d", "e"]
    );
    assert_eq!(
        flat(pages(&server, &admin, "/v1/users", "users", 3).await),
        ["root", "ua", "ub", "uc", "ud", "ue"]
    );
    // The audit log pages by id, newest first.
    let first = get(&server.url("/v1/audit?limit=4"), &admin).await;
    let next = first.json["next"].as_i64().expect("a cursor");
    let second = get(
        &server.url(&format!("/v1/audit?limit=4&before={next}")),
        &admin,
    )
    .await;
    let ids = |a: &Answer| -> Vec<i64> {
        a.json["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .filter_map(|e| e["id"].as_i64())
            .collect()
    };
    let (first, second) = (ids(&first), ids(&second));
    assert_eq!(first.len(), 4);
    assert!(
        first.iter().all(|a| second.iter().all(|b| a > b)),
        "{first:?} then {second:?}"
    );
    // Out of range: 400 naming the field.
    let bad = get(&server.url("/v1/policies?limit=0"), &admin).await;
    assert_eq!(
        (bad.status, bad.json["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("limit"))
    );
    server.stop().await;
}
