//! A fleet: servers sharing a real PostgreSQL (policies, users) and a real Redis
//! (decisions) enforce one limit and see each other's changes within a second; a store
//! or Redis killed mid-run gives 503 (or the fail policy), and service resumes after a
//! restart.

use std::time::Duration;

use crate::common::*;
use hyper::StatusCode;
use sluicegate_core::FailPolicy;
use sluicegate_server::Config;

fn fleet_config(pg: &Postgres, redis: Option<&Redis>, fail: FailPolicy<()>) -> Config {
    Config {
        store: Some(pg.url()),
        decisions: redis.map(Redis::url),
        fail,
        ..config()
    }
}

async fn decide(server: &TestServer, token: &str, key: &str) -> Answer {
    post(
        &server.url("/v1/decide"),
        token,
        &format!(r#"{{"policy":"api","key":"{key}"}}"#),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_one_limit_and_one_set_of_policies() {
    let pg = Postgres::start();
    let redis = Redis::start();
    let config = fleet_config(&pg, Some(&redis), FailPolicy::Error);
    let (a, b, admin) = two_servers(config.clone()).await;
    // A second --init-admin is refused.
    assert!(sluicegate_server::init_admin(&config, "again")
        .await
        .is_err());
    let web = app(&a, &admin, "web").await;
    let policy = r#"{"algorithm":"fixed-window","limit":10,"period":"1h","apps":["web"]}"#;
    create_policy(&a, &admin, "api", policy).await;
    // The core's range runs on Redis: ten million a month.
    let monthly = policy.replace(
        "\"limit\":10,\"period\":\"1h\"",
        "\"limit\":10000000,\"period\":\"30d\"",
    );
    let created = put(&a.url("/v1/policies/monthly"), &admin, &monthly, None).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    // A sliding log beyond what a script may keep: 422, nothing stored.
    let huge = r#"{"algorithm":"sliding-log","limit":2001,"period":"1h","apps":["web"]}"#;
    let refused = put(&a.url("/v1/policies/huge"), &admin, huge, None).await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert_eq!(refused.json["field"], "limit");
    let banned_composite = r#"{"algorithm":"composite","limits":[{"algorithm":"fixed-window","limit":1,"period":"1s"},{"algorithm":"fixed-window","limit":5,"period":"1m"}],"ban":{"threshold":1,"window":"1s","duration":"1s"},"apps":["web"]}"#;
    let refused = put(&a.url("/v1/policies/huge"), &admin, banned_composite, None).await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert_eq!(
        get(&a.url("/v1/policies/huge"), &admin).await.status,
        StatusCode::NOT_FOUND
    );
    // B sees the app, its token and the policy: its store is polled every 100 ms, 5 s
    // allowed for a loaded machine (never seen fails).
    assert!(
        eventually(Duration::from_secs(5), || async {
            decide(&b, &web, "probe").await.status == StatusCode::OK
        })
        .await,
        "B never saw the policy"
    );
    // One limit across both: 10 admitted in all, alternating servers.
    let mut admitted = 0;
    for i in 0..30 {
        let server = if i % 2 == 0 { &a } else { &b };
        let answer = decide(server, &web, "shared").await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        admitted += u32::from(answer.json["allowed"] == true);
    }
    assert_eq!(admitted, 10);
    // A change made on B reaches A (polled as above: within 5 s).
    let stricter = policy.replace("\"limit\":10", "\"limit\":3");
    let changed = put(&b.url("/v1/policies/api"), &admin, &stricter, Some(1)).await;
    assert_eq!(changed.status, StatusCode::OK, "{}", changed.text);
    assert!(
        eventually(Duration::from_secs(5), || async {
            decide(&a, &web, "fresh").await.json["limit"] == 3
        })
        .await,
        "A never saw the change"
    );
    // Concurrent writers on both servers: one wins.
    let (on_a, on_b) = (a.url("/v1/policies/api"), b.url("/v1/policies/api"));
    let (x, y) = tokio::join!(
        put(&on_a, &admin, policy, Some(2)),
        put(&on_b, &admin, policy, Some(2)),
    );
    let mut statuses = [x.status.as_u16(), y.status.as_u16()];
    statuses.sort();
    assert_eq!(statuses, [200, 409]);
    // Leases in Redis: one holder across both servers.
    let workers = r#"{"algorithm":"concurrency","limit":1,"lease":"30s","apps":["web"]}"#;
    create_policy(&a, &admin, "workers", workers).await;
    let acquire = |server: &TestServer, owner: &str| {
        let (url, web, body) = (
            server.url("/v1/lease/acquire"),
            web.clone(),
            format!(r#"{{"policy":"workers","key":"job","owner":"{owner}"}}"#),
        );
        async move { post(&url, &web, &body).await }
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            acquire(&b, "b").await.json["acquired"] == true
        })
        .await
    );
    let on_a = acquire(&a, "a").await;
    assert_eq!(on_a.json["acquired"], false, "{}", on_a.text);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_killed_then_restarted() {
    let pg = Postgres::start();
    let config = fleet_config(&pg, None, FailPolicy::Error);
    let admin = sluicegate_server::init_admin(&config, "root")
        .await
        .expect("admin");
    let server = TestServer::with(config).await;
    let web = app(&server, &admin, "web").await;
    let policy = r#"{"algorithm":"fixed-window","limit":100,"period":"1h","apps":["web"]}"#;
    let url = server.url("/v1/policies/api");
    assert_eq!(
        put(&url, &admin, policy, None).await.status,
        StatusCode::CREATED
    );
    pg.kill();
    // Management needs the store: 503 with a message, within the request timeout.
    let down = put(&url, &admin, policy, Some(1)).await;
    assert_eq!(
        down.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        down.text
    );
    assert!(down.json["error"].is_string());
    let audit = get(&server.url("/v1/audit"), &admin).await;
    assert_eq!(audit.status, StatusCode::SERVICE_UNAVAILABLE);
    // Decisions go on with the policies last read.
    assert_eq!(decide(&server, &web, "k").await.json["allowed"], true);
    let metrics = get(&server.url("/metrics"), &admin).await;
    assert!(
        !metrics.text.contains("sluicegate_store_errors_total 0"),
        "{}",
        metrics.text
    );
    pg.restart();
    assert!(
        eventually(Duration::from_secs(10), || async {
            put(&url, &admin, policy, Some(1)).await.status == StatusCode::OK
        })
        .await,
        "writes never resumed"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_then_restarted() {
    let pg = Postgres::start();
    let mut redis = Redis::start();
    let config = fleet_config(&pg, Some(&redis), FailPolicy::Error);
    let admin = sluicegate_server::init_admin(&config, "root")
        .await
        .expect("admin");
    let strict = TestServer::with(config.clone()).await;
    let local = TestServer::with(Config {
        fail: FailPolicy::Local(()),
        ..config.clone()
    })
    .await;
    let closed = TestServer::with(Config {
        fail: FailPolicy::Closed,
        ..config
    })
    .await;
    let web = app(&strict, &admin, "web").await;
    let policy = r#"{"algorithm":"fixed-window","limit":2,"period":"1h","apps":["web"]}"#;
    create_policy(&strict, &admin, "api", policy).await;
    for server in [&local, &closed] {
        assert!(
            eventually(Duration::from_secs(5), || async {
                decide(server, &web, "probe").await.status == StatusCode::OK
            })
            .await
        );
    }
    assert_eq!(decide(&strict, &web, "k").await.json["allowed"], true);
    redis.kill();
    // The default: 503, nothing decided silently.
    let down = decide(&strict, &web, "k").await;
    assert_eq!(
        down.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        down.text
    );
    // --fail closed: a denial; --fail local: this server's own limit of 2.
    // Without figures: none is known, none is invented.
    let denied = decide(&closed, &web, "k").await;
    assert_eq!(
        (denied.status, &denied.json["allowed"], &denied.json["fail"]),
        (StatusCode::OK, &false.into(), &"closed".into())
    );
    assert!(
        denied.json.get("retry_after_us").is_none(),
        "{}",
        denied.text
    );
    assert!(denied.headers.get("retry-after").is_none());
    let local_allowed: Vec<bool> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(decide(&local, &web, "k").await.json["allowed"] == true);
        }
        v
    };
    assert_eq!(local_allowed, [true, true, false]);
    redis.restart();
    assert!(
        eventually(Duration::from_secs(10), || async {
            decide(&strict, &web, "after").await.status == StatusCode::OK
        })
        .await,
        "decisions never resumed"
    );
    strict.stop().await;
    local.stop().await;
    closed.stop().await;
}
