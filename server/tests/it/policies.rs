//! Policy CRUD with versions, the audit log, decisions with their headers, and bad input
//! (4xx with a message, nothing stored), against a real server on loopback.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::*;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

const BUCKET: &str = r#"{"algorithm":"token-bucket","capacity":3,"rate":1,"period":"1s","apps":["web"],"description":"api"}"#;

async fn setup() -> (TestServer, String, String) {
    let (server, admin) = TestServer::start().await;
    let web = app(&server, &admin, "web").await;
    (server, admin, web)
}

/// [`setup`], and policy `api` made from `policy`.
async fn serving(policy: &str) -> (TestServer, String, String) {
    let (server, admin, web) = setup().await;
    create_policy(&server, &admin, "api", policy).await;
    (server, admin, web)
}

/// The answers' statuses, sorted.
fn statuses(answers: Vec<Answer>) -> Vec<u16> {
    let mut statuses: Vec<u16> = answers.iter().map(|a| a.status.as_u16()).collect();
    statuses.sort_unstable();
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_conflicts_and_the_audit_log() {
    let (server, admin, _) = setup().await;
    let owner = user(&server, &admin, "alice", r#"{"web":"owner"}"#).await;
    let url = server.url("/v1/policies/api");
    let created = put(&url, &owner, BUCKET, None).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.headers["etag"], "\"1\"");
    assert_eq!(created.json["version"], 1);
    assert_eq!(created.json["created_by"], "alice");
    assert_eq!(created.json["period"], "1s");
    // Metadata sent by the client is ignored; the server sets it.
    let changed = BUCKET.replace(
        "\"capacity\":3",
        "\"capacity\":5,\"version\":77,\"created_by\":\"mallory\"",
    );
    let updated = put(&url, &owner, &changed, Some(1)).await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.text);
    assert_eq!(updated.json["version"], 2);
    assert_eq!(updated.json["capacity"], 5);
    assert_eq!(updated.json["created_by"], "alice");
    // Stale: 409 with the current policy; nothing changes.
    let stale = put(&url, &owner, BUCKET, Some(1)).await;
    assert_eq!(stale.status, StatusCode::CONFLICT);
    assert_eq!(stale.json["current"]["version"], 2);
    assert_eq!(stale.json["current"]["capacity"], 5);
    // No If-Match on an existing policy: 428.
    assert_eq!(
        put(&url, &owner, BUCKET, None).await.status,
        StatusCode::PRECONDITION_REQUIRED
    );
    let read = get(&url, &owner).await;
    assert_eq!(read.headers["etag"], "\"2\"");
    assert_eq!(read.json["capacity"], 5);
    // Delete needs the version too.
    for (version, status) in [
        (None, StatusCode::PRECONDITION_REQUIRED),
        (Some(1), StatusCode::CONFLICT),
        (Some(2), StatusCode::NO_CONTENT),
    ] {
        assert_eq!(delete(&url, &owner, version).await.status, status);
    }
    assert_eq!(get(&url, &owner).await.status, StatusCode::NOT_FOUND);
    // The audit log, newest first: who, what, before and after.
    let audit = get(&server.url("/v1/audit?app=web"), &owner).await;
    let entries = audit.json["entries"].as_array().unwrap();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["delete", "update", "create"]);
    assert!(entries
        .iter()
        .all(|e| e["actor"] == "alice" && e["policy"] == "api"));
    assert_eq!(entries[0]["after"], Value::Null);
    assert_eq!(entries[0]["before"]["capacity"], 5);
    assert_eq!(entries[1]["before"]["capacity"], 3);
    assert_eq!(entries[1]["after"]["capacity"], 5);
    assert_eq!(entries[2]["before"], Value::Null);
    assert!(entries[0]["id"].as_i64() > entries[1]["id"].as_i64());
    server.stop().await;
}

/// Two writers with the same version at once: exactly one wins, the other gets 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_one_wins() {
    let (server, admin, _) = setup().await;
    let url = server.url("/v1/policies/api");
    assert_eq!(
        put(&url, &admin, BUCKET, None).await.status,
        StatusCode::CREATED
    );
    for round in 1..=5 {
        let writers = at_once(4, |i| {
            let (url, admin) = (url.clone(), admin.clone());
            let body = BUCKET.replace("\"capacity\":3", &format!("\"capacity\":{}", 10 + i));
            async move { put(&url, &admin, &body, Some(round)).await }
        });
        assert_eq!(
            statuses(writers.await),
            [200, 409, 409, 409],
            "round {round}"
        );
    }
    let audit = get(&server.url("/v1/audit"), &admin).await;
    assert_eq!(policy_entries(&audit).len(), 6);
    // Creating the same name at once: one 201, the others see it exists (428).
    let creators = at_once(4, |_| {
        let (url, admin) = (server.url("/v1/policies/fresh"), admin.clone());
        async move { put(&url, &admin, BUCKET, None).await }
    });
    assert_eq!(statuses(creators.await), [201, 428, 428, 428]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_carry_the_headers() {
    let policy = r#"{"algorithm":"fixed-window","limit":2,"period":"10s","apps":["web"]}"#;
    let (server, admin, web) = serving(policy).await;
    let url = server.url("/v1/decide");
    let first = post(&url, &web, r#"{"policy":"api","key":"alice"}"#).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.json["allowed"], true);
    assert_eq!(first.json["limit"], 2);
    assert_eq!(first.json["remaining"], 1);
    assert_eq!(first.json["retry_after_us"], 0);
    assert_eq!(first.headers["ratelimit-policy"], "\"api\";q=2;w=10");
    assert!(first.headers["ratelimit"]
        .to_str()
        .unwrap()
        .starts_with("\"api\";r=1;t="));
    assert!(first.headers.get("retry-after").is_none());
    let second = post(&url, &web, r#"{"policy":"api","key":"alice","cost":1}"#).await;
    assert_eq!(second.json["remaining"], 0);
    // A denial is still 200, with Retry-After in whole seconds (never 0).
    let denied = post(&url, &web, r#"{"policy":"api","key":"alice"}"#).await;
    assert_eq!(denied.status, StatusCode::OK);
    assert_eq!(denied.json["allowed"], false);
    let retry = denied.json["retry_after_us"].as_u64().unwrap();
    let header: u64 = denied.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(header, retry.div_ceil(1_000_000).max(1));
    // A cost that never fits: retry_after_us null, no Retry-After.
    let never = post(
        &url,
        &web,
        r#"{"policy":"api","key":"bob","cost":18446744073709551615}"#,
    )
    .await;
    assert_eq!(never.status, StatusCode::OK);
    assert_eq!(never.json["retry_after_us"], Value::Null);
    assert!(never.headers.get("retry-after").is_none());
    // Batch: in order, errors in place.
    let batch = post(
        &server.url("/v1/decide/batch"),
        &web,
        r#"{"requests":[{"policy":"api","key":"carol"},{"policy":"nope","key":"carol"},{"policy":"api","key":"carol","cost":-1}]}"#,
    )
    .await;
    assert_eq!(batch.status, StatusCode::OK, "{}", batch.text);
    let decisions = batch.json["decisions"].as_array().unwrap();
    assert_eq!(decisions[0]["allowed"], true);
    assert_eq!(decisions[1]["status"], 403);
    assert_eq!(decisions[2]["status"], 400);
    // The metrics count what was decided.
    let metrics = get(&server.url("/metrics"), &admin).await;
    assert!(
        metrics
            .text
            .contains("sluicegate_decisions_total{policy=\"api\",outcome=\"allowed\"} 3"),
        "{}",
        metrics.text
    );
    assert!(metrics
        .text
        .contains("sluicegate_decisions_total{policy=\"api\",outcome=\"denied\"} 2"));
    assert!(metrics.text.contains("sluicegate_decision_seconds_count 5"));
    let stats = get(&server.url("/v1/stats?app=web"), &admin).await;
    let series = &stats.json["policies"]["api"];
    let sum = |field: &str| -> u64 {
        series[field]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum()
    };
    assert_eq!((sum("allowed"), sum("denied")), (3, 2));
    assert_eq!(series["t"].as_array().unwrap().len(), 120);
    server.stop().await;
}

/// Every way a request can be wrong: a 4xx with a message, never a panic, nothing
/// stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_nothing_is_stored() {
    let (server, admin, web) = setup().await;
    let url = server.url("/v1/policies/p");
    let cases: Vec<(&str, String, u16, Option<&str>)> = vec![
        ("malformed", "{".into(), 400, None),
        ("not an object", "[1,2]".into(), 400, None),
        ("wrong type", r#"{"algorithm":"fixed-window","limit":"ten","period":"1s","apps":["web"]}"#.into(), 400, None),
        ("negative", r#"{"algorithm":"fixed-window","limit":-1,"period":"1s","apps":["web"]}"#.into(), 400, None),
        ("unknown algorithm", r#"{"algorithm":"magic","limit":1,"period":"1s"}"#.into(), 422, Some("algorithm")),
        ("no algorithm", r#"{"limit":1,"period":"1s"}"#.into(), 422, Some("algorithm")),
        ("unknown field", r#"{"algorithm":"fixed-window","limit":1,"period":"1s","burst":3}"#.into(), 400, Some("burst")),
        ("zero rate", r#"{"algorithm":"token-bucket","capacity":1,"rate":0,"period":"1s","apps":["web"]}"#.into(), 422, Some("rate")),
        ("huge limit", r#"{"algorithm":"fixed-window","limit":18446744073709551615,"period":"1s","apps":["web"]}"#.into(), 422, Some("limit")),
        ("bad duration", r#"{"algorithm":"fixed-window","limit":1,"period":"soon","apps":["web"]}"#.into(), 400, None),
        ("long period", r#"{"algorithm":"fixed-window","limit":1,"period":"400d","apps":["web"]}"#.into(), 422, Some("period")),
        ("missing", r#"{"algorithm":"token-bucket","capacity":1,"period":"1s","apps":["web"]}"#.into(), 422, Some("rate")),
        ("bad member", r#"{"algorithm":"composite","limits":[{"algorithm":"fixed-window","limit":1,"period":"1s"},{"algorithm":"token-bucket","capacity":1,"rate":0,"period":"1s"}],"apps":["web"]}"#.into(), 422, Some("limits[1].rate")),
        ("bad ban", r#"{"algorithm":"fixed-window","limit":1,"period":"1s","ban":{"threshold":1,"window":"0s","duration":"1m"},"apps":["web"]}"#.into(), 422, Some("ban.window")),
        ("bad app name", r#"{"algorithm":"fixed-window","limit":1,"period":"1s","apps":["a b"]}"#.into(), 422, Some("apps")),
        ("oversize", format!(r#"{{"algorithm":"fixed-window","limit":1,"period":"1s","description":"{}"}}"#, "x".repeat(70_000)), 413, None),
    ];
    for (what, body, status, field) in &cases {
        let answer = put(&url, &admin, body, None).await;
        assert_eq!(answer.status.as_u16(), *status, "{what}: {}", answer.text);
        assert!(
            answer.json["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{what}: {}",
            answer.text
        );
        assert_eq!(
            answer.json["field"].as_str(),
            *field,
            "{what}: {}",
            answer.text
        );
    }
    // Not JSON at all.
    let text = call(
        Method::PUT,
        &url,
        Some(&admin),
        None,
        &[("content-type", "text/plain")],
    )
    .await;
    assert_eq!(text.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // A bad name.
    let long = format!("/v1/policies/{}", "n".repeat(65));
    let named = put(&server.url(&long), &admin, BUCKET, None).await;
    assert_eq!(
        (named.status, named.json["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("name"))
    );
    // Nothing was stored, nothing audited.
    assert_eq!(
        get(&server.url("/v1/policies"), &admin).await.json["policies"],
        json!([])
    );
    assert_eq!(
        policy_entries(&get(&server.url("/v1/audit"), &admin).await),
        Vec::<Value>::new()
    );
    // Decisions: bad keys, types and sizes.
    create_policy(&server, &admin, "api", BUCKET).await;
    let decide = server.url("/v1/decide");
    let huge_key = format!(r#"{{"policy":"api","key":"{}"}}"#, "k".repeat(2000));
    let many = format!(
        r#"{{"requests":[{}]}}"#,
        vec![r#"{"policy":"api","key":"k"}"#; 1001].join(",")
    );
    for (body, status) in [
        ("{", 400),
        (r#"{"policy":"api"}"#, 400),
        (r#"{"policy":"api","key":"k","cost":1.5}"#, 400),
        (r#"{"policy":"api","key":"k","cost":-3}"#, 400),
        (r#"{"policy":"api","key":""}"#, 422),
        (huge_key.as_str(), 422),
        (r#"{"policy":"api","key":"k","extra":1}"#, 400),
    ] {
        let answer = post(&decide, &web, body).await;
        assert_eq!(answer.status.as_u16(), status, "{body}: {}", answer.text);
        assert!(answer.json["error"].is_string());
    }
    let batch = post(&server.url("/v1/decide/batch"), &web, &many).await;
    assert_eq!(batch.status, StatusCode::UNPROCESSABLE_ENTITY);
    let metrics = get(&server.url("/metrics"), &admin).await;
    assert!(
        !metrics.text.contains("sluicegate_decisions_total{"),
        "{}",
        metrics.text
    );
    // What axum refuses itself answers in the same shape.
    let query = get(&server.url("/v1/audit?limit=many"), &admin).await;
    assert_eq!(query.status, StatusCode::BAD_REQUEST);
    assert!(query.json["error"].is_string(), "{}", query.text);
    let method = send(Method::PATCH, &server.url("/v1/policies/api"), &admin).await;
    assert_eq!(method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(method.json["error"].is_string(), "{}", method.text);
    // Users and apps: bad names, duplicates.
    assert_eq!(
        post(&server.url("/v1/apps"), &admin, r#"{"name":"web"}"#)
            .await
            .status,
        StatusCode::CONFLICT
    );
    assert_eq!(
        post(&server.url("/v1/apps"), &admin, r#"{"name":""}"#)
            .await
            .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        post(
            &server.url("/v1/users"),
            &admin,
            r#"{"name":"u","roles":{"web":"boss"}}"#
        )
        .await
        .status,
        StatusCode::BAD_REQUEST
    );
    server.stop().await;
}

/// The policy file's ban and composite are the API's too: one parser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ban_and_composite_decide() {
    let (server, admin, web) = setup().await;
    let composite = r#"{"algorithm":"composite","limits":[{"algorithm":"fixed-window","limit":3,"period":"1h"},{"algorithm":"token-bucket","capacity":2,"rate":1,"period":"1h"}],"apps":["web"]}"#;
    let made = put(&server.url("/v1/policies/both"), &admin, composite, None).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    assert_eq!(made.json["limits"][1]["capacity"], 2);
    // Members are written with their algorithm and parameters only.
    assert_eq!(
        made.json["limits"][0],
        json!({"algorithm": "fixed-window", "limit": 3, "period": "1h"})
    );
    assert_eq!(made.json["description"], "");
    let decide = |key: &'static str, policy: &'static str| {
        let (url, web) = (server.url("/v1/decide"), web.clone());
        async move {
            post(
                &url,
                &web,
                &format!(r#"{{"policy":"{policy}","key":"{key}"}}"#),
            )
            .await
        }
    };
    // The bucket (2) is the tighter limit.
    let allowed: Vec<bool> = [0; 3].iter().map(|_| true).collect();
    let mut got = Vec::new();
    for _ in &allowed {
        got.push(decide("k", "both").await.json["allowed"] == true);
    }
    assert_eq!(got, [true, true, false]);
    let ban = r#"{"algorithm":"fixed-window","limit":1,"period":"1h","ban":{"threshold":1,"window":"1h","duration":"1h"},"apps":["web"]}"#;
    create_policy(&server, &admin, "banned", ban).await;
    let outcomes = [
        decide("k", "banned").await.json,
        decide("k", "banned").await.json,
        decide("k", "banned").await.json,
    ];
    assert_eq!(
        outcomes
            .iter()
            .map(|o| o["allowed"] == true)
            .collect::<Vec<_>>(),
        [true, false, false]
    );
    server.stop().await;
}

/// Leases of a concurrency policy: at most `limit` owners, release and renew by the
/// owner only, tokens growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_over_http() {
    let (server, admin, web) = setup().await;
    let workers =
        r#"{"algorithm":"concurrency","limit":1,"lease":"30s","max_lease":"1m","apps":["web"]}"#;
    let made = put(&server.url("/v1/policies/workers"), &admin, workers, None).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    let lease = |op: &'static str, owner: &'static str, extra: &'static str| {
        let (url, web) = (server.url(&format!("/v1/lease/{op}")), web.clone());
        async move {
            post(
                &url,
                &web,
                &format!(r#"{{"policy":"workers","key":"build","owner":"{owner}"{extra}}}"#),
            )
            .await
        }
    };
    let first = lease("acquire", "a", "").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert_eq!(first.json["acquired"], true);
    assert_eq!(first.json["holds"], 1);
    let token = first.json["token"].as_u64().unwrap();
    let busy = lease("acquire", "b", "").await;
    assert_eq!(busy.json["acquired"], false);
    assert!(busy.json["retry_after_us"].as_u64().unwrap() <= 30_000_000);
    assert_eq!(lease("release", "b", "").await.json["released"], false);
    assert_eq!(lease("renew", "b", "").await.json["renewed"], false);
    let renewed = lease("renew", "a", r#","ttl_us":60000000"#).await;
    assert_eq!(renewed.json["renewed"], true);
    // Past the policy's max_lease: 422 naming the field, to acquire or renew.
    for op in ["renew", "acquire"] {
        let long = lease(op, "a", r#","ttl_us":60000001"#).await;
        assert_eq!(
            (long.status.as_u16(), long.json["field"].as_str()),
            (422, Some("ttl_us")),
            "{}",
            long.text
        );
        assert!(long.text.contains("max_lease"), "{}", long.text);
    }
    assert_eq!(lease("release", "a", "").await.json["released"], true);
    let second = lease("acquire", "b", "").await;
    assert_eq!(second.json["acquired"], true);
    assert!(second.json["token"].as_u64().unwrap() > token);
    // Bad arguments: 422 naming the field; a rate policy is not leases, nor the reverse.
    let zero = lease("acquire", "c", r#","ttl_us":0"#).await;
    assert_eq!(
        (zero.status.as_u16(), zero.json["field"].as_str()),
        (422, Some("ttl_us"))
    );
    create_policy(&server, &admin, "api", BUCKET).await;
    let long_owner = format!(
        r#"{{"policy":"workers","key":"k","owner":"{}"}}"#,
        "o".repeat(200)
    );
    // (path, token, body, status); users may not take leases.
    let refusals = [
        ("/v1/lease/acquire", &web, long_owner.as_str(), 422),
        ("/v1/decide", &web, r#"{"policy":"workers","key":"k"}"#, 422),
        (
            "/v1/lease/acquire",
            &web,
            r#"{"policy":"api","key":"k","owner":"a"}"#,
            422,
        ),
        (
            "/v1/lease/acquire",
            &admin,
            r#"{"policy":"workers","key":"k","owner":"a"}"#,
            403,
        ),
    ];
    for (path, token, body, status) in refusals {
        let answer = post(&server.url(path), token, body).await;
        assert_eq!(
            answer.status.as_u16(),
            status,
            "{path} {body}: {}",
            answer.text
        );
    }
    server.stop().await;
}

/// The audit log is read a page at a time: an app's entries behind a page of another
/// app's are still found, and `limit` bounds the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_pages_past_other_apps_entries() {
    let (server, admin, _) = setup().await;
    app(&server, &admin, "mobile").await;
    let web = BUCKET;
    let mobile = BUCKET.replace("\"web\"", "\"mobile\"");
    create_policy(&server, &admin, "w", web).await;
    create_policy(&server, &admin, "m", &mobile).await;
    for version in 1..=505 {
        let answer = put(
            &server.url("/v1/policies/m"),
            &admin,
            &mobile,
            Some(version),
        )
        .await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    let audit = get(&server.url("/v1/audit?app=web"), &admin).await;
    let entries = audit.json["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (entries[0]["policy"].as_str(), entries[0]["action"].as_str()),
        (Some("w"), Some("create"))
    );
    let limited = get(&server.url("/v1/audit?app=mobile&limit=7"), &admin).await;
    assert_eq!(limited.json["entries"].as_array().unwrap().len(), 7);
    let all = get(&server.url("/v1/audit?limit=1000"), &admin).await;
    assert_eq!(policy_entries(&all).len(), 507);
    server.stop().await;
}

/// Many concurrent decisions on one key admit exactly the limit, never one more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_decisions_admit_exactly_the_limit() {
    let policy = r#"{"algorithm":"sliding-log","limit":25,"period":"1h","apps":["web"]}"#;
    let (server, _, web) = serving(policy).await;
    let calls = at_once(100, |_| {
        let (url, web) = (server.url("/v1/decide"), web.clone());
        async move { post(&url, &web, r#"{"policy":"api","key":"hot"}"#).await }
    });
    let mut admitted = 0;
    for answer in calls.await {
        assert_eq!(answer.status, StatusCode::OK);
        admitted += u32::from(answer.json["allowed"] == true);
    }
    assert_eq!(admitted, 25);
    server.stop().await;
}

/// The embedded store lives in any directory, whatever characters its name holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_dir_names_are_paths_not_urls() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a dir?mode=ro#x%41");
    let config = sluicegate_server::Config {
        data_dir: data.clone(),
        ..config()
    };
    let admin = sluicegate_server::init_admin(&config, "root")
        .await
        .expect("store opens");
    assert!(data.join("sluicegate.db").exists());
    let server = TestServer::with(config).await;
    assert_eq!(
        get(&server.url("/v1/me"), &admin).await.status,
        StatusCode::OK
    );
    server.stop().await;
}

#[tokio::test]
async fn a_conditional_write_on_a_deleted_policy_fails_and_creates_nothing() {
    let (server, admin, _) = serving(BUCKET).await;
    let url = server.url("/v1/policies/api");
    let deleted = delete(&url, &admin, Some(1)).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
    let late = put(&url, &admin, BUCKET, Some(1)).await;
    assert_eq!(
        late.status,
        StatusCode::PRECONDITION_FAILED,
        "{}",
        late.text
    );
    assert_eq!(get(&url, &admin).await.status, StatusCode::NOT_FOUND);
    server.stop().await;
}

/// Requests deciding on a policy while it is deleted and created again find it as it
/// was (200) or gone (403, as any policy the app may not use), never without its
/// limiter (503): a request reads the policies and their limiters of one moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_deleted_mid_request_is_found_whole_or_not_at_all() {
    let policy = r#"{"algorithm":"fixed-window","limit":1000000,"period":"1h","apps":["web"]}"#;
    let (server, admin, web) = serving(policy).await;
    let (decide, url) = (server.url("/v1/decide"), server.url("/v1/policies/api"));
    let done = Arc::new(AtomicBool::new(false));
    let deciders: Vec<_> = (0..4)
        .map(|_| {
            let (decide, web, done) = (decide.clone(), web.clone(), done.clone());
            tokio::spawn(async move {
                let mut odd = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    let answer = post(&decide, &web, r#"{"policy":"api","key":"k"}"#).await;
                    if ![StatusCode::OK, StatusCode::FORBIDDEN].contains(&answer.status) {
                        odd.push(format!("{} {}", answer.status, answer.text));
                    }
                }
                odd
            })
        })
        .collect();
    for _ in 0..100 {
        let deleted = delete(&url, &admin, Some(1)).await;
        assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
        create_policy(&server, &admin, "api", policy).await;
    }
    done.store(true, Ordering::Relaxed);
    for decider in deciders {
        let odd = decider.await.unwrap();
        assert!(odd.is_empty(), "{odd:?}");
    }
    server.stop().await;
}
