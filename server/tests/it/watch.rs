//! What a team watches before it enforces a limit. Shadow mode over HTTP: a shadow
//! policy (or `--shadow`) decides and counts as if enforcing, admits every request, and
//! says what it would have denied, in the answer, in `/metrics` and, switched on or off,
//! in the audit log. Near-limit counts: admissions that left a key 80% used or more.

use crate::common::*;
use hyper::StatusCode;
use serde_json::Value;
use sluicegate_server::Config;

const HOURLY: &str = r#"{"algorithm":"fixed-window","limit":2,"period":"1h","apps":["web"]"#;

/// The fields of an answer, sorted.
fn fields(answer: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = answer
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_policy_admits_reports_counts_and_is_audited() {
    let (server, admin) = TestServer::start().await;
    let web = app(&server, &admin, "web").await;
    create_policy(&server, &admin, "login", &shadow(&format!("{HOURLY}}}"))).await;
    let url = server.url("/v1/decide");
    let decide = || post(&url, &web, r#"{"policy":"login","key":"bob"}"#);
    let mut would = Vec::new();
    for _ in 0..4 {
        let answer = decide().await;
        assert_eq!(answer.status, 200, "{}", answer.text);
        assert_eq!(answer.json["allowed"], true, "{}", answer.text);
        assert_eq!(answer.json["shadow"], true, "{}", answer.text);
        would.push(answer.json["would_allow"].as_bool().expect("would_allow"));
        // The headers as usual, but no Retry-After: the request goes through.
        assert!(
            answer.headers.contains_key("ratelimit"),
            "{:?}",
            answer.headers
        );
        assert!(!answer.headers.contains_key("retry-after"));
        if !would[would.len() - 1] {
            assert_eq!(answer.json["remaining"], 0);
            assert!(answer.json["retry_after_us"].as_u64() > Some(0));
        }
    }
    assert_eq!(would, [true, true, false, false]);
    let metrics = get(&server.url("/metrics"), &admin).await.text;
    assert_eq!(
        metric(&metrics, "sluicegate_shadow_denied_total", "login"),
        2
    );
    assert!(metrics.contains(r#"sluicegate_decisions_total{policy="login",outcome="allowed"} 4"#));
    assert!(metrics.contains(r#"sluicegate_decisions_total{policy="login",outcome="denied"} 0"#));
    // Enforcing again: the key's state was kept (two units spent), so it is denied, and
    // the answer is the core's shape alone.
    let policy = server.url("/v1/policies/login");
    let enforcing = put(&policy, &admin, &format!("{HOURLY}}}"), Some(1)).await;
    assert_eq!(enforcing.status, 200, "{}", enforcing.text);
    let answer = decide().await;
    assert_eq!(answer.json["allowed"], false, "{}", answer.text);
    assert_eq!(
        fields(&answer.json),
        [
            "allowed",
            "delay_us",
            "key",
            "limit",
            "policy",
            "remaining",
            "reset_after_us",
            "retry_after_us"
        ]
    );
    assert!(answer.headers.contains_key("retry-after"));
    // The switch is audited as any change.
    let audit = get(&server.url("/v1/audit?app=web"), &admin).await;
    let entries = audit.json["entries"].as_array().expect("entries");
    assert_eq!(entries[0]["action"], "update");
    assert_eq!(entries[0]["before"]["shadow"], true);
    assert_eq!(entries[0]["after"]["shadow"], Value::Null);
    assert_eq!(entries[1]["after"]["shadow"], true);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_shadow_makes_every_rate_policy_a_shadow() {
    let (server, admin) = TestServer::start_with(Config {
        shadow: true,
        ..config()
    })
    .await;
    let web = app(&server, &admin, "web").await;
    create_policy(&server, &admin, "login", &format!("{HOURLY}}}")).await;
    let one = r#"{"policy":"login","key":"bob"}"#;
    let body = format!(r#"{{"requests":[{one},{one},{one}]}}"#);
    let batch = post(&server.url("/v1/decide/batch"), &web, &body).await;
    let decisions = batch.json["decisions"].as_array().expect("decisions");
    let seen: Vec<(bool, bool, bool)> = decisions
        .iter()
        .map(|d| {
            (
                d["allowed"] == true,
                d["shadow"] == true,
                d["would_allow"] == true,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [(true, true, true), (true, true, true), (true, true, false)]
    );
    let shadow_denied = [("sluicegate_shadow_denied_total", "login")];
    assert_eq!(metric_values(&server, &admin, &shadow_denied).await, [1]);
    server.stop().await;
}

/// `sluicegate_near_limit_total` counts admissions leaving a key at least 80% used
/// (`(limit - remaining) / limit`), not denials, per policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_limit_counts_admissions_at_four_fifths_used_or_more() {
    let (server, admin) = TestServer::start().await;
    let web = app(&server, &admin, "web").await;
    let of = |limit: u64| {
        format!(r#"{{"algorithm":"fixed-window","limit":{limit},"period":"1h","apps":["web"]}}"#)
    };
    create_policy(&server, &admin, "five", &of(5)).await;
    create_policy(&server, &admin, "ten", &of(10)).await;
    let url = server.url("/v1/decide");
    let near = |policy: &'static str| {
        let (url, server, admin) = (url.clone(), &server, admin.clone());
        let web = web.clone();
        async move {
            let body = format!(r#"{{"policy":"{policy}","key":"bob"}}"#);
            post(&url, &web, &body).await;
            let near_limit = [("sluicegate_near_limit_total", policy)];
            metric_values(server, &admin, &near_limit).await[0]
        }
    };
    // Five: 1/5 .. 3/5 used, then 4/5 (exactly 80%) and 5/5, then a denial.
    let mut five = Vec::new();
    for _ in 0..6 {
        five.push(near("five").await);
    }
    assert_eq!(five, [0, 0, 0, 1, 2, 2]);
    // Ten: 8, 9 and 10 of 10 used.
    let mut ten = Vec::new();
    for _ in 0..11 {
        ten.push(near("ten").await);
    }
    assert_eq!(ten, [0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 3]);
    server.stop().await;
}

/// `--key-usage POLICY` shows each of its most used keys' share of the limit, at most
/// `--key-usage-max` keys (the most used), and nothing for other policies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_usage_shows_the_most_used_keys_within_its_bound() {
    let config = Config {
        key_usage: vec!["api".into()],
        key_usage_max: 2,
        ..config()
    };
    let (server, admin) = TestServer::start_with(config).await;
    let web = app(&server, &admin, "web").await;
    let policy = r#"{"algorithm":"fixed-window","limit":4,"period":"1h","apps":["web"]}"#;
    create_policy(&server, &admin, "api", policy).await;
    create_policy(&server, &admin, "other", policy).await;
    let url = server.url("/v1/decide");
    // alice takes 3 of 4, bob 1, carol 2 (displacing bob), a "quoted" key 4.
    for (key, times) in [("alice", 3), ("bob", 1), ("carol", 2), ("q\\\"x", 4)] {
        for _ in 0..times {
            for policy in ["api", "other"] {
                let body = format!(r#"{{"policy":"{policy}","key":"{key}"}}"#);
                assert_eq!(post(&url, &web, &body).await.status, StatusCode::OK);
            }
        }
    }
    let metrics = get(&server.url("/metrics"), &admin).await.text;
    let gauge: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("sluicegate_key_usage_ratio{"))
        .collect();
    assert_eq!(
        gauge,
        [
            r#"sluicegate_key_usage_ratio{policy="api",key="q\"x"} 1"#,
            r#"sluicegate_key_usage_ratio{policy="api",key="alice"} 0.75"#,
        ],
        "{metrics}"
    );
    server.stop().await;
}
