//! Envoy's rate limit service over gRPC, called by a client generated from the same
//! vendored protos: its answers match the HTTP API's for the same history.

use crate::common::*;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code,
};
use sluicegate_server::grpc::envoy::service::ratelimit::v3::RateLimitResponse;
use sluicegate_server::Config;

/// A server with its gRPC listener, its admin's token and app `web`'s.
async fn with_grpc() -> (TestServer, String, String) {
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..config()
    })
    .await;
    let web = app(&server, &admin, "web").await;
    (server, admin, web)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_answers_as_http_does() {
    let (server, admin, web) = with_grpc().await;
    let policy =
        r#"{"algorithm":"token-bucket","capacity":3,"rate":1,"period":"1h","apps":["web"]}"#;
    create_policy(&server, &admin, "api", policy).await;
    let mut client = client(&server).await;
    // The same history on two keys, one over gRPC, one over HTTP: the same answers.
    for (step, cost) in [1u32, 1, 2, 1].into_iter().enumerate() {
        let answer = ask_one(&mut client, &web, "api", &[("user", "alice")], Some(cost))
            .await
            .expect("gRPC answer");
        let http = post(
            &server.url("/v1/decide"),
            &web,
            &format!(r#"{{"policy":"api","key":"user=bob","cost":{cost}}}"#),
        )
        .await;
        let status = &answer.statuses[0];
        let allowed = http.json["allowed"] == true;
        assert_eq!(status.code == Code::Ok as i32, allowed, "step {step}");
        assert_eq!(answer.overall_code, status.code);
        assert_eq!(
            u64::from(status.limit_remaining),
            http.json["remaining"].as_u64().unwrap()
        );
        let limit = status.current_limit.as_ref().unwrap();
        assert_eq!(
            u64::from(limit.requests_per_unit),
            http.json["limit"].as_u64().unwrap()
        );
        assert_eq!(
            (limit.name.as_str(), limit.unit),
            ("api", Unit::Hour as i32)
        );
        let reset = status.duration_until_reset.as_ref().unwrap();
        let grpc_us = reset.seconds * 1_000_000 + i64::from(reset.nanos) / 1000;
        let http_us = http.json["reset_after_us"].as_i64().unwrap();
        assert!(
            (grpc_us - http_us).abs() < 1_000_000,
            "{grpc_us} vs {http_us}"
        );
    }
    // Both keys are now over the limit; the decisions were counted like HTTP ones.
    let over = ask_one(&mut client, &web, "api", &[("user", "alice")], None)
        .await
        .unwrap();
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    // The key is the descriptor's entries; an entry `policy` names the policy instead
    // of the domain; one over-limit descriptor makes the whole answer over.
    let mixed = ask(
        &mut client,
        Some(&web),
        "elsewhere",
        vec![
            descriptor(&[("policy", "api"), ("user", "carol")], None),
            descriptor(&[("policy", "api"), ("user", "alice")], None),
        ],
    )
    .await
    .unwrap();
    let codes: Vec<i32> = mixed.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [Code::Ok as i32, Code::OverLimit as i32]);
    assert_eq!(mixed.overall_code, Code::OverLimit as i32);
    let http = post(
        &server.url("/v1/decide"),
        &web,
        r#"{"policy":"api","key":"user=carol"}"#,
    )
    .await;
    assert_eq!(
        http.json["remaining"], 1,
        "the gRPC call spent carol's first unit"
    );
    // Refusals: no token, a user's token, a policy not for this app, no descriptors.
    let code = |r: Result<RateLimitResponse, tonic::Status>| r.unwrap_err().code();
    let one = || vec![descriptor(&[("user", "x")], None)];
    assert_eq!(
        code(ask(&mut client, None, "api", one()).await),
        tonic::Code::Unauthenticated
    );
    assert_eq!(
        code(ask(&mut client, Some("sga_forged"), "api", one()).await),
        tonic::Code::Unauthenticated
    );
    assert_eq!(
        code(ask(&mut client, Some(&admin), "api", one()).await),
        tonic::Code::PermissionDenied
    );
    assert_eq!(
        code(ask(&mut client, Some(&web), "nope", one()).await),
        tonic::Code::PermissionDenied
    );
    assert_eq!(
        code(ask(&mut client, Some(&web), "api", vec![]).await),
        tonic::Code::InvalidArgument
    );
    assert_eq!(
        code(ask(&mut client, Some(&web), "api", vec![descriptor(&[], None)]).await),
        tonic::Code::InvalidArgument
    );
    server.stop().await;
}

/// A shadow policy's descriptor shows its would-be code, but only an enforcing one makes
/// the whole answer over the limit (what Envoy acts on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_policy_answers_ok_with_the_would_be_status() {
    let (server, admin, web) = with_grpc().await;
    let once = r#"{"algorithm":"fixed-window","limit":1,"period":"1h","apps":["web"]"#;
    create_policy(&server, &admin, "trial", &shadow(&format!("{once}}}"))).await;
    create_policy(&server, &admin, "strict", &format!("{once}}}")).await;
    let mut client = client(&server).await;
    let trial = || descriptor(&[("policy", "trial"), ("user", "alice")], None);
    let strict = || descriptor(&[("policy", "strict"), ("user", "alice")], None);
    let codes = |r: &RateLimitResponse| -> Vec<i32> { r.statuses.iter().map(|s| s.code).collect() };
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    // Each call: its descriptors, then the overall code and each descriptor's.
    for (descriptors, overall, each) in [
        (vec![trial()], ok, vec![ok]),
        (vec![trial(), strict()], ok, vec![over, ok]),
        (vec![trial(), strict()], over, vec![over, over]),
    ] {
        let answer = ask(&mut client, Some(&web), "any", descriptors)
            .await
            .unwrap();
        assert_eq!((answer.overall_code, codes(&answer)), (overall, each));
        // The trial's one unit is spent by the first call.
        assert_eq!(answer.statuses[0].limit_remaining, 0);
    }
    let shadow_denied = [
        ("sluicegate_shadow_denied_total", "trial"),
        ("sluicegate_shadow_denied_total", "strict"),
    ];
    assert_eq!(metric_values(&server, &admin, &shadow_denied).await, [2, 0]);
    server.stop().await;
}

/// limitador's report over Envoy's call: a descriptor marked `sluicegate.report` charges
/// its `hits_addend` after the response (into debt's bound, here none), never denying
/// the call, and later decisions see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_descriptor_charges_after_the_response() {
    let (server, admin, web) = with_grpc().await;
    let policy = r#"{"algorithm":"fixed-window","limit":10,"period":"1h","apps":["web"]}"#;
    create_policy(&server, &admin, "tokens", policy).await;
    let mut client = client(&server).await;
    let user = ("user", "alice");
    let report = [user, (sluicegate_server::grpc::REPORT_ENTRY, "true")];
    let first = ask_one(&mut client, &web, "tokens", &[user], None)
        .await
        .expect("decision");
    assert_eq!(first.statuses[0].limit_remaining, 9);
    // The response cost 12: recorded up to the limit, the call still OK.
    let charged = ask_one(&mut client, &web, "tokens", &report, Some(12))
        .await
        .expect("report");
    assert_eq!(charged.overall_code, Code::Ok as i32);
    assert_eq!(charged.statuses[0].limit_remaining, 0);
    // The marker is not part of the key: the same key is spent.
    let http = post(
        &server.url("/v1/decide"),
        &web,
        r#"{"policy":"tokens","key":"user=alice"}"#,
    )
    .await;
    assert_eq!(http.json["allowed"], false, "{}", http.text);
    let reported = [("sluicegate_reported_units_total", "tokens")];
    assert_eq!(metric_values(&server, &admin, &reported).await, [9]);
    server.stop().await;
}
