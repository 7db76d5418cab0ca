//! Costs known after the work: `/v1/report` charges and refunds a key once per id, and
//! a decision's `estimate` is settled by the report with its id; a retried report
//! counts once, also across two servers on one PostgreSQL.

use crate::common::*;
use hyper::StatusCode;
use sluicegate_server::Config;

const WINDOW: &str = r#"{"algorithm":"fixed-window","limit":10,"period":"1h","apps":["web"]}"#;

async fn report(server: &TestServer, token: &str, key: &str, cost: u64, id: &str) -> Answer {
    let body = format!(r#"{{"policy":"tokens","key":"{key}","cost":{cost},"id":"{id}"}}"#);
    post(&server.url("/v1/report"), token, &body).await
}

async fn estimate(server: &TestServer, token: &str, estimate: u64, id: &str) -> Answer {
    let body = format!(r#"{{"policy":"tokens","key":"k","estimate":{estimate},"id":"{id}"}}"#);
    post(&server.url("/v1/decide"), token, &body).await
}

/// Asserts a 422 whose error names `field`.
fn unprocessable(answer: &Answer, field: &str) {
    let status = StatusCode::UNPROCESSABLE_ENTITY;
    assert_eq!(answer.status, status, "{}", answer.text);
    assert_eq!(answer.json["field"], field, "{}", answer.text);
}

/// `(recorded, dropped, remaining, duplicate)` of a report's answer.
fn figures(answer: &Answer) -> (u64, u64, u64, bool) {
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let j = &answer.json;
    let n = |f: &str| j[f].as_u64().unwrap_or_else(|| panic!("{f} in {j}"));
    (
        n("recorded"),
        n("dropped"),
        n("remaining"),
        j["duplicate"].as_bool().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn estimates_are_settled_by_reports_once_per_id() {
    let (server, admin) = TestServer::start().await;
    let web = app(&server, &admin, "web").await;
    let mobile = app(&server, &admin, "mobile").await;
    create_policy(&server, &admin, "tokens", WINDOW).await;

    // Admitted on an estimate of 4; the work cost 7: 3 more.
    let decided = estimate(&server, &web, 4, "r1").await;
    assert_eq!(decided.status, StatusCode::OK, "{}", decided.text);
    assert_eq!(decided.json["remaining"], 6);
    assert_eq!(
        figures(&report(&server, &web, "k", 7, "r1").await),
        (3, 0, 3, false)
    );
    // Retried: the first report's figures, nothing charged again.
    for _ in 0..3 {
        assert_eq!(
            figures(&report(&server, &web, "k", 7, "r1").await),
            (3, 0, 3, true)
        );
    }
    // Below its estimate: a refund.
    assert_eq!(estimate(&server, &web, 3, "r2").await.json["remaining"], 0);
    assert_eq!(
        figures(&report(&server, &web, "k", 1, "r2").await),
        (2, 0, 2, false)
    );
    // Without a decision, beyond what is left (no overdraft): recorded up to the limit.
    assert_eq!(
        figures(&report(&server, &web, "k", 5, "r3").await),
        (2, 3, 0, false)
    );
    // A denied estimate took nothing: its report charges the whole cost.
    let denied = estimate(&server, &web, 1, "r4").await;
    assert_eq!(denied.json["allowed"], false, "{}", denied.text);
    assert_eq!(
        figures(&report(&server, &web, "k", 1, "r4").await),
        (0, 1, 0, false)
    );

    // An id names one decision and its report.
    assert_eq!(
        estimate(&server, &web, 1, "r1").await.status,
        StatusCode::CONFLICT
    );
    assert_eq!(
        report(&server, &web, "other", 1, "r2").await.status,
        StatusCode::CONFLICT
    );
    // Ids are each app's own; another app may not use the policy at all.
    let foreign = report(&server, &mobile, "k", 1, "r1").await;
    assert_eq!(foreign.status, StatusCode::FORBIDDEN, "{}", foreign.text);
    let invalid = [
        (r#"{"policy":"tokens","key":"k","estimate":1}"#, "id"),
        (
            r#"{"policy":"tokens","key":"k","estimate":1,"cost":1,"id":"x"}"#,
            "estimate",
        ),
        (
            r#"{"policy":"tokens","key":"k","estimate":1,"id":""}"#,
            "id",
        ),
    ];
    for (body, field) in invalid {
        unprocessable(&post(&server.url("/v1/decide"), &web, body).await, field);
    }
    let huge = format!(
        r#"{{"policy":"tokens","key":"k","cost":{},"id":"h"}}"#,
        u64::MAX
    );
    unprocessable(&post(&server.url("/v1/report"), &web, &huge).await, "cost");

    // A batch settles estimates too.
    let batch = r#"{"requests":[{"policy":"tokens","key":"b","estimate":2,"id":"b1"}]}"#;
    let answer = post(&server.url("/v1/decide/batch"), &web, batch).await;
    assert_eq!(
        answer.json["decisions"][0]["remaining"], 8,
        "{}",
        answer.text
    );
    assert_eq!(
        figures(&report(&server, &web, "b", 2, "b1").await),
        (0, 0, 8, false)
    );

    let units = [
        ("sluicegate_reported_units_total", "tokens"),
        ("sluicegate_refunded_units_total", "tokens"),
    ];
    assert_eq!(metric_values(&server, &admin, &units).await, [5, 2]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_that_take_no_reports_say_so() {
    let (server, admin) = TestServer::start().await;
    let web = app(&server, &admin, "web").await;
    for (name, body) in [
        (
            "pacing",
            r#"{"algorithm":"pacing","capacity":3,"rate":1,"period":"1s","apps":["web"]}"#,
        ),
        (
            "workers",
            r#"{"algorithm":"concurrency","limit":1,"lease":"30s","apps":["web"]}"#,
        ),
    ] {
        create_policy(&server, &admin, name, body).await;
        let body = format!(r#"{{"policy":"{name}","key":"k","cost":1,"id":"{name}"}}"#);
        unprocessable(
            &post(&server.url("/v1/report"), &web, &body).await,
            "policy",
        );
        // Nothing was claimed: the id is still free once the policy can take it.
        let decide = format!(r#"{{"policy":"{name}","key":"k","estimate":1,"id":"{name}"}}"#);
        unprocessable(
            &post(&server.url("/v1/decide"), &web, &decide).await,
            "policy",
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_on_redis_decisions_move_the_shared_state() {
    let redis = Redis::start();
    let (server, admin) = TestServer::start_with(in_redis(&redis)).await;
    let web = app(&server, &admin, "web").await;
    create_policy(&server, &admin, "tokens", WINDOW).await;
    let answer = report(&server, &web, "k", 4, "r1").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert_eq!(figures(&answer), (4, 0, 6, false));
    // A refund by estimate: 3 decided, 1 used.
    assert_eq!(estimate(&server, &web, 3, "e1").await.json["remaining"], 3);
    let settled = report(&server, &web, "k", 1, "e1").await;
    assert_eq!(figures(&settled), (2, 0, 5, false));
    // A calendar month in Redis: its period from this machine's clock, its reset the
    // month's true end.
    let plan = r#"{"algorithm":"calendar-window","limit":3,"calendar":"month","time-zone":"Europe/Berlin","overdraft":2,"apps":["web"]}"#;
    create_policy(&server, &admin, "plan", plan).await;
    let decide = |cost: u64| {
        let (url, web) = (server.url("/v1/decide"), web.clone());
        async move {
            let body = format!(r#"{{"policy":"plan","key":"acme","cost":{cost}}}"#);
            post(&url, &web, &body).await.json
        }
    };
    assert_eq!(decide(3).await["allowed"], true);
    let full = decide(1).await;
    assert_eq!(full["allowed"], false, "{full}");
    let reset = full["reset_after_us"].as_u64().unwrap_or_default();
    assert!(
        reset > 0 && reset <= 31 * 86_400_000_000 + 3_600_000_000,
        "{full}"
    );
    let body = r#"{"policy":"plan","key":"acme","cost":2,"id":"p1"}"#;
    let over = post(&server.url("/v1/report"), &web, body).await;
    assert_eq!(figures(&over), (2, 0, 0, false));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_retried_ten_times_counts_once_across_two_servers() {
    let pg = Postgres::start();
    let redis = Redis::start();
    let (a, b, admin) = two_servers(Config {
        store: Some(pg.url()),
        ..in_redis(&redis)
    })
    .await;
    let web = app(&a, &admin, "web").await;
    create_policy(&a, &admin, "tokens", WINDOW).await;
    assert!(
        eventually(std::time::Duration::from_secs(5), || async {
            report(&b, &web, "k", 0, "probe").await.status == StatusCode::OK
        })
        .await
    );
    // Ten tries at once, alternating between the servers: one counts.
    let (a_url, b_url) = (a.url("/v1/report"), b.url("/v1/report"));
    let answers = at_once(10, |i| {
        let url = if i % 2 == 0 {
            a_url.clone()
        } else {
            b_url.clone()
        };
        let web = web.clone();
        async move {
            post(
                &url,
                &web,
                r#"{"policy":"tokens","key":"k","cost":4,"id":"once"}"#,
            )
            .await
        }
    })
    .await;
    // A retry while the first is applied answers without figures (`null`).
    let firsts: Vec<_> = answers
        .iter()
        .filter(|a| a.json["duplicate"] == false)
        .map(figures)
        .collect();
    assert_eq!(firsts, [(4, 0, 6, false)]);
    assert!(answers.iter().all(|a| a.status == StatusCode::OK));
    let mut reported = 0;
    for server in [&a, &b] {
        let metrics = get(&server.url("/metrics"), &admin).await.text;
        if metrics.contains("sluicegate_reported_units_total{policy=\"tokens\"}") {
            reported += metric(&metrics, "sluicegate_reported_units_total", "tokens");
        }
    }
    assert_eq!(reported, 4);
    // One state in Redis: both servers see the 4 units taken once.
    for server in [&a, &b] {
        let body = r#"{"policy":"tokens","key":"k","cost":0}"#;
        let seen = post(&server.url("/v1/decide"), &web, body).await;
        assert_eq!(seen.json["remaining"], 6, "{}", seen.text);
    }
    a.stop().await;
    b.stop().await;
}

/// A report whose charge fails (Redis away) is not lost: the id is given back, so the
/// retry the guide promises charges it, once; and the same id with another cost is a
/// conflict, not a retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_whose_charge_failed_is_charged_by_its_retry() {
    let mut redis = Redis::start();
    let (server, admin) = TestServer::start_with(in_redis(&redis)).await;
    let web = app(&server, &admin, "web").await;
    create_policy(&server, &admin, "tokens", WINDOW).await;
    redis.kill();
    let down = report(&server, &web, "k", 3, "r9").await;
    assert_eq!(
        down.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        down.text
    );
    redis.restart();
    let retried = eventually(std::time::Duration::from_secs(10), || async {
        report(&server, &web, "k", 3, "r9").await.status == StatusCode::OK
    });
    assert!(retried.await, "Redis never came back");
    // Charged once, by the retry that succeeded: 10 - 3 left, and a duplicate after.
    assert_eq!(
        figures(&report(&server, &web, "k", 3, "r9").await),
        (3, 0, 7, true)
    );
    let other = report(&server, &web, "k", 5, "r9").await;
    assert_eq!(other.status, StatusCode::CONFLICT, "{}", other.text);
    server.stop().await;
}
