//! A policy's `when` and `key` (CEL over the request's descriptors, as limitador's
//! conditions and variables) over Envoy's RLS and `/v1/decide`: `when` gates, `key`
//! names the counter, a missing key leaves the request out, a `when` that is not a
//! boolean fails the call, and expressions out of bounds are refused when the policy is.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use hyper::StatusCode;
use proptest::prelude::*;
use proptest::test_runner::{Config as Cases, TestRunner};
use sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_response::Code;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::RateLimitResponse;
use sluicegate_server::Config;

/// Two per hour for free users, one counter per user, whatever else the request holds.
const FREE: &str = r#"{"algorithm":"fixed-window","limit":2,"period":"1h","apps":["web"],
    "when":"descriptors[0][\"tier\"] == \"free\"",
    "key":"policy.name + \"/\" + descriptors[0][\"user\"]"}"#;
/// A `when` that is a string, not a boolean.
const NOT_BOOL: &str = r#"{"algorithm":"fixed-window","limit":2,"period":"1h","apps":["web"],
    "when":"descriptors[0][\"user\"]"}"#;

async fn served() -> (TestServer, String, String) {
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..config()
    })
    .await;
    let web = app(&server, &admin, "web").await;
    create_policy(&server, &admin, "free", FREE).await;
    create_policy(&server, &admin, "odd", NOT_BOOL).await;
    (server, admin, web)
}

/// The code of a one-descriptor answer, and whether the policy counted it.
fn verdict(answer: &RateLimitResponse) -> (Code, bool) {
    let status = &answer.statuses[0];
    let code = Code::try_from(answer.overall_code).unwrap();
    (code, status.current_limit.is_some())
}

type Client =
    sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<
        tonic::transport::Channel,
    >;

/// One descriptor of `entries` on the policy `free`: its code, and whether it counted.
async fn ask(client: &mut Client, web: &str, entries: &[(&str, &str)]) -> (Code, bool) {
    let answer = ask_one(client, web, "free", entries, None).await;
    verdict(&answer.expect("an answer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_rls_when_gates_and_key_splits_counters() {
    let (server, _admin, web) = served().await;
    let mut client = client(&server).await;
    let c = &mut client;
    let ann = |path| [("tier", "free"), ("user", "ann"), ("path", path)];
    assert_eq!(ask(c, &web, &ann("/a")).await, (Code::Ok, true));
    assert_eq!(ask(c, &web, &ann("/b")).await, (Code::Ok, true));
    // The key is the user's alone: another path counts on ann's counter.
    assert_eq!(ask(c, &web, &ann("/c")).await, (Code::OverLimit, true));
    let bob = [("tier", "free"), ("user", "bob")];
    assert_eq!(ask(c, &web, &bob).await, (Code::Ok, true));
    // `when` false: admitted, nothing counted, however often.
    for _ in 0..4 {
        let paid = [("tier", "paid"), ("user", "ann")];
        assert_eq!(ask(c, &web, &paid).await, (Code::Ok, false));
    }
    // No user: the key's key is missing, the policy does not apply.
    for _ in 0..4 {
        assert_eq!(ask(c, &web, &[("tier", "free")]).await, (Code::Ok, false));
    }
    // A `when` that is not a boolean: the call fails as limitador's does.
    let status = ask_one(c, &web, "odd", &[("user", "ann")], None)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(
        status
            .message()
            .contains("policy \"odd\": unexpected value of type string"),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_values_are_the_first_descriptor() {
    let (server, _admin, web) = served().await;
    let url = server.url("/v1/decide");
    let decide = |body: String| {
        let (url, web) = (url.clone(), web.clone());
        async move { post(&url, &web, &body).await }
    };
    let ask = |key: &str, values: &str| {
        decide(format!(
            r#"{{"policy":"free","key":"{key}","values":{values}}}"#
        ))
    };
    let ann = r#"{"tier":"free","user":"ann"}"#;
    for (key, allowed) in [("k1", true), ("k2", true), ("k3", false)] {
        let answer = ask(key, ann).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        assert_eq!(answer.json["allowed"], allowed, "{}", answer.text);
        assert_eq!(answer.json["limit"], 2);
    }
    let bob = ask("k1", r#"{"tier":"free","user":"bob"}"#).await;
    assert_eq!(bob.json["allowed"], true, "{}", bob.text);
    for values in [
        r#"{"tier":"paid","user":"ann"}"#,
        r#"{"tier":"free"}"#,
        "{}",
    ] {
        let answer = ask("k1", values).await;
        assert_eq!(answer.json["allowed"], true, "{}", answer.text);
        assert_eq!(answer.json["applied"], false, "{}", answer.text);
        assert!(answer.json.get("remaining").is_none(), "{}", answer.text);
    }
    // `descriptors[0]["key"]` is the request's key.
    let answer = decide(r#"{"policy":"odd","key":"k","values":{"user":"ann"}}"#.into()).await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.text
    );
    assert!(answer.json["error"]
        .as_str()
        .unwrap()
        .contains("unexpected value of type string"));
    let named = decide(r#"{"policy":"free","key":"k","values":{"key":"x"}}"#.into()).await;
    assert_eq!(
        named.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        named.text
    );
    assert_eq!(named.json["field"], "values");
    let estimate = r#"{"policy":"free","key":"k","estimate":1,"id":"e1"}"#;
    let refused = decide(estimate.into()).await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert!(refused.text.contains("takes no estimates nor reports"));
}

#[tokio::test]
async fn expressions_out_of_bounds_are_refused_with_the_policy() {
    let (server, admin) = TestServer::start().await;
    let refused = |field: &str, source: String| {
        let body = serde_json::json!({
            "algorithm": "fixed-window", "limit": 1, "period": "1s", field: source,
        });
        let url = server.url("/v1/policies/p");
        let admin = admin.clone();
        async move { put(&url, &admin, &body.to_string(), None).await }
    };
    let long = refused("key", format!("'{}'", "a".repeat(5000))).await;
    assert_eq!(
        long.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        long.text
    );
    assert!(
        long.text.contains("longer than 4096 bytes"),
        "{}",
        long.text
    );
    let deep = refused("when", format!("{}true{}", "[".repeat(40), "]".repeat(40))).await;
    assert_eq!(
        deep.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        deep.text
    );
    assert!(deep.text.contains("nested deeper than 32"), "{}", deep.text);
    let unbound = refused("when", "tier == 'free'".into()).await;
    assert_eq!(unbound.json["field"], "when", "{}", unbound.text);
}

/// A policy keyed by `descriptors[0]["user"]` counts exactly as a plain policy asked
/// with the user as its key.
#[test]
fn a_key_expression_counts_as_per_user_keys() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (server, web) = runtime.block_on(async {
        let (server, admin) = TestServer::start().await;
        let web = app(&server, &admin, "web").await;
        let plain = r#"{"algorithm":"sliding-log","limit":3,"period":"1h","apps":["web"]}"#;
        create_policy(&server, &admin, "plain", plain).await;
        let keyed = r#"{"algorithm":"sliding-log","limit":3,"period":"1h","apps":["web"],
            "key":"descriptors[0][\"user\"]"}"#;
        create_policy(&server, &admin, "keyed", keyed).await;
        (server, web)
    });
    let url = server.url("/v1/decide");
    // Each case its own users: a case starts from fresh counters.
    let case = AtomicUsize::new(0);
    let requests = prop::collection::vec((0..3usize, 1..3u64), 1..16);
    TestRunner::new(Cases::with_cases(12))
        .run(&requests, |requests| {
            let n = case.fetch_add(1, Ordering::Relaxed);
            runtime.block_on(async {
                for (user, cost) in requests {
                    let user = format!("c{n}u{user}");
                    let plain = format!(r#"{{"policy":"plain","key":"{user}","cost":{cost}}}"#);
                    let keyed = format!(
                        r#"{{"policy":"keyed","key":"any","cost":{cost},"values":{{"user":"{user}"}}}}"#
                    );
                    let (plain, keyed) = (post(&url, &web, &plain).await, post(&url, &web, &keyed).await);
                    for field in ["allowed", "limit", "remaining"] {
                        prop_assert_eq!(&plain.json[field], &keyed.json[field], "{}", field);
                    }
                }
                Ok(())
            })
        })
        .unwrap();
}

/// A new `when` or `key` is not a new limiter: the counters it keeps count on.
#[tokio::test]
async fn changing_when_keeps_the_counts() {
    let (server, admin) = TestServer::start().await;
    let web = app(&server, &admin, "web").await;
    create_policy(&server, &admin, "free", FREE).await;
    let url = server.url("/v1/decide");
    let ann = r#"{"policy":"free","key":"k","values":{"tier":"free","user":"ann"}}"#;
    assert_eq!(post(&url, &web, ann).await.json["remaining"], 1);
    let wider = FREE.replace(r#"== \"free\""#, r#"!= \"paid\""#);
    let changed = put(&server.url("/v1/policies/free"), &admin, &wider, Some(1)).await;
    assert_eq!(changed.status, StatusCode::OK, "{}", changed.text);
    let answer = post(&url, &web, ann).await;
    assert_eq!(answer.json["remaining"], 0, "{}", answer.text);
    let trial = r#"{"policy":"free","key":"k","values":{"tier":"trial","user":"ann"}}"#;
    assert_eq!(post(&url, &web, trial).await.json["allowed"], false);
}
