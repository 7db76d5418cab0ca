//! Trust at the edge: what one client controls in a request (a header, a path) cannot
//! turn Envoy's call into an error, which Envoy lets through by default.

use crate::common::*;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_response::Code;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::RateLimitResponse;
use sluicegate_server::Config;

fn codes(answer: &RateLimitResponse) -> (i32, Vec<i32>) {
    let statuses = answer.statuses.iter().map(|s| s.code).collect();
    (answer.overall_code, statuses)
}

/// A server answering the Envoy YAML `yaml` over gRPC: its admin's token, app `web`'s,
/// and the YAML's directory (kept while the server runs).
async fn serve(yaml: &str) -> (TestServer, String, String, tempfile::TempDir) {
    let (config, dir) = envoy_yaml(yaml);
    let (server, admin) = TestServer::start_with(config).await;
    let web = app(&server, &admin, "web").await;
    (server, admin, web, dir)
}

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// On a sluicegate policy and on a domain of Envoy's YAML alike: a descriptor whose
/// value is past the longest key is decided (on a digest of its key, counted like any
/// other), and its sibling over the limit still makes the call `OVER_LIMIT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_descriptor_value_cannot_open_its_siblings_limits() {
    let yaml = "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: path\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
    let (server, admin, web, _dir) = serve(yaml).await;
    let policy = r#"{"algorithm":"fixed-window","limit":1,"period":"1h","apps":["web"]}"#;
    create_policy(&server, &admin, "api", policy).await;
    let mut c = client(&server).await;
    let long = "/".repeat(4096);
    for domain in ["api", "edge"] {
        let both = || {
            vec![
                descriptor(&[("ip", "10.0.0.1")], None),
                descriptor(&[("path", long.as_str())], None),
            ]
        };
        let first = ask(&mut c, Some(&web), domain, both()).await;
        assert_eq!(
            codes(&first.expect("an answer")),
            (OK, vec![OK, OK]),
            "{domain}"
        );
        // Both counted: each is at its limit of one now.
        let second = ask(&mut c, Some(&web), domain, both()).await;
        let second = second.expect("an answer, not an error Envoy lets through");
        assert_eq!(codes(&second), (OVER, vec![OVER, OVER]), "{domain}");
        // Alone, the long value is over too: it was counted, under its digest.
        let alone = ask_one(&mut c, &web, domain, &[("path", long.as_str())], None)
            .await
            .expect("an answer");
        assert_eq!(codes(&alone), (OVER, vec![OVER]), "{domain}");
    }
    server.stop().await;
}

/// A descriptor that cannot be decided (its state in Redis overwritten with bytes no
/// algorithm wrote) leaves its siblings decided: the call is `OVER_LIMIT` when one of
/// them is, and the error only when none is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_that_fails_does_not_fail_its_siblings() {
    let redis = Redis::start();
    let (envoy, _dir) = envoy_yaml(
        "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
    );
    let (server, admin) = TestServer::start_with(Config {
        decisions: Some(redis.url()),
        ..envoy
    })
    .await;
    let web = app(&server, &admin, "web").await;
    let mut c = client(&server).await;
    let (ip, user) = (
        || descriptor(&[("ip", "10.0.0.2")], None),
        || descriptor(&[("user", "bob")], None),
    );
    let first = ask(&mut c, Some(&web), "edge", vec![user()]).await;
    assert_eq!(codes(&first.expect("decided")), (OK, vec![OK]));
    let mut con = redis.client().get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*bob*").query(&mut con).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let () = redis::cmd("SET")
        .arg(&keys[0])
        .arg("not a state")
        .query(&mut con)
        .unwrap();
    let alone = ask(&mut c, Some(&web), "edge", vec![ip(), user()]).await;
    alone.expect_err("nothing over: the error");
    let over = ask(&mut c, Some(&web), "edge", vec![ip(), user()]).await;
    let over = over.expect("a sibling over: the call is over");
    assert_eq!(codes(&over), (OVER, vec![OVER, Code::Unknown as i32]));
    server.stop().await;
}

/// Rules are named by joining names with dots: two domains whose rules would share a
/// name (and so a limiter) are refused, both files named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_domains_cannot_share_a_rule() {
    let dir = tempfile::tempdir().unwrap();
    let (outer, inner) = (dir.path().join("a.yaml"), dir.path().join("ab.yaml"));
    std::fs::write(
        &outer,
        "domain: a\ndescriptors:\n  - key: b\n    descriptors:\n      - key: c\n        rate_limit: {unit: hour, requests_per_unit: 100}\n",
    )
    .unwrap();
    std::fs::write(
        &inner,
        "domain: a.b\ndescriptors:\n  - key: c\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
    )
    .unwrap();
    let message = envoy_refused(dir.path(), dir.path().to_path_buf()).await;
    assert!(
        message.contains("a.yaml") && message.contains("ab.yaml"),
        "{message}"
    );
}
