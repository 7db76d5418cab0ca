//! `--envoy-config`: the configuration examples of envoyproxy/ratelimit's README (in
//! `data/envoy-ratelimit/`, licence in its NOTICE.md), each documented request sent over
//! gRPC by a client generated from Envoy's protos, each getting the documented answer.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};
use sluicegate_server::grpc::envoy::service::ratelimit::v3::RateLimitResponse;
use sluicegate_server::Config;

fn data(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/envoy-ratelimit")
        .join(path)
}

/// A server answering the Envoy YAML at `path` over gRPC, and an app's token.
async fn serve(path: PathBuf) -> (TestServer, String) {
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().unwrap()),
        envoy_config: Some(path),
        ..config()
    })
    .await;
    let edge = app(&server, &admin, "edge").await;
    (server, edge)
}

/// Waits, if needed, until a window of `unit_s` seconds has at least 700 ms left, so
/// that a few quick requests fall into one window.
async fn fresh_window(unit_s: u64) {
    let unit_ms = unit_s * 1000;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = u64::try_from(now.as_millis()).unwrap() % unit_ms;
    if unit_ms - into < 700 {
        tokio::time::sleep(Duration::from_millis(unit_ms - into + 20)).await;
    }
}

type Client = sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>;

/// One request of descriptors `(entries, hits)` on `domain`.
async fn request(
    client: &mut Client,
    token: &str,
    domain: &str,
    descriptors: &[(&[(&str, &str)], u32)],
) -> RateLimitResponse {
    let descriptors = descriptors
        .iter()
        .map(|(entries, hits)| descriptor(entries, Some(*hits)))
        .collect();
    ask(client, Some(token), domain, descriptors)
        .await
        .expect("an answer")
}

/// The code and (requests per unit, remaining) of one descriptor's status.
fn seen(status: &DescriptorStatus) -> (Code, Option<u32>, u32) {
    (
        Code::try_from(status.code).unwrap(),
        status.current_limit.as_ref().map(|l| l.requests_per_unit),
        status.limit_remaining,
    )
}

fn overall(answer: &RateLimitResponse) -> Code {
    Code::try_from(answer.overall_code).unwrap()
}

/// One descriptor on `domain`: its status as [`seen`].
async fn one(
    client: &mut Client,
    token: &str,
    domain: &str,
    entries: &[(&str, &str)],
    hits: u32,
) -> (Code, Option<u32>, u32) {
    let answer = request(client, token, domain, &[(entries, hits)]).await;
    let status = seen(&answer.statuses[0]);
    assert_eq!(overall(&answer), status.0, "{domain} {entries:?}");
    status
}

const OK: Code = Code::Ok;
const OVER: Code = Code::OverLimit;

/// One descriptor `(entries, hits)` sent on a domain, and the status it gets, as
/// [`seen`].
type Step<'a> = (
    &'a str,
    &'a [(&'a str, &'a str)],
    u32,
    (Code, Option<u32>, u32),
);

/// Sends each step in turn, each getting its status.
async fn steps(client: &mut Client, token: &str, steps: &[Step<'_>]) {
    for &(domain, entries, hits, want) in steps {
        let got = one(client, token, domain, entries, hits).await;
        assert_eq!(got, want, "{domain} {entries:?} {hits}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_examples_answer_as_documented() {
    let (server, token) = serve(data("")).await;
    let mut c = client(&server).await;
    let t = token.as_str();

    // Example 1: 500 per second for database=users and database=default.
    fresh_window(1).await;
    let (users, default) = ([("database", "users")], [("database", "default")]);
    let example_1: [Step; 3] = [
        ("mongo_cps", &users, 500, (OK, Some(500), 0)),
        ("mongo_cps", &users, 1, (OVER, Some(500), 0)),
        ("mongo_cps", &default, 1, (OK, Some(500), 499)),
    ];
    steps(&mut c, t, &example_1).await;

    // Example 2: 5 marketing messages a day per number, 100 messages a day per number;
    // one request with both descriptors is decided on both.
    let marketing = [("message_type", "marketing"), ("to_number", "2061111111")];
    let number = [("to_number", "2061111111")];
    for sent in 1..=5 {
        let answer = request(&mut c, t, "messaging", &[(&marketing, 1), (&number, 1)]).await;
        assert_eq!(overall(&answer), OK);
        assert_eq!(seen(&answer.statuses[0]), (OK, Some(5), 5 - sent));
        assert_eq!(seen(&answer.statuses[1]), (OK, Some(100), 100 - sent));
    }
    let answer = request(&mut c, t, "messaging", &[(&marketing, 1), (&number, 1)]).await;
    assert_eq!(overall(&answer), OVER);
    assert_eq!(seen(&answer.statuses[0]).0, OVER);
    assert_eq!(seen(&answer.statuses[1]), (OK, Some(100), 94));
    // Another number has its own 5.
    let other = [("message_type", "marketing"), ("to_number", "2062222222")];
    steps(&mut c, t, &[("messaging", &other, 1, (OK, Some(5), 4))]).await;

    // Example 3: 10 per second per address; 50.0.0.5, the more specific, gets none.
    // Example 5: ldap unlimited (remaining is the largest u32), azure 100 a minute.
    fresh_window(1).await;
    let (ip, banned) = (
        [("remote_address", "50.0.0.1")],
        [("remote_address", "50.0.0.5")],
    );
    let examples_3_and_5: [Step; 5] = [
        ("edge_proxy_per_ip", &ip, 10, (OK, Some(10), 0)),
        ("edge_proxy_per_ip", &ip, 1, (OVER, Some(10), 0)),
        ("edge_proxy_per_ip", &banned, 1, (OVER, Some(0), 0)),
        ("internal", &[("ldap", "x")], 1000, (OK, None, u32::MAX)),
        ("internal", &[("azure", "x")], 1, (OK, Some(100), 99)),
    ];
    steps(&mut c, t, &examples_3_and_5).await;

    // Example 6: user-a is in shadow mode (never limited), user-b 20 per second.
    fresh_window(1).await;
    let a = [("service", "auth-service"), ("user", "user-a")];
    let b = [("service", "auth-service"), ("user", "user-b")];
    let example_6: [Step; 4] = [
        ("example6", &a, 10, (OK, Some(10), 0)),
        ("example6", &a, 5, (OK, Some(10), 0)),
        ("example6", &b, 20, (OK, Some(20), 0)),
        ("example6", &b, 1, (OVER, Some(20), 0)),
    ];
    steps(&mut c, t, &example_6).await;

    // Example 7: with both descriptors, the replacing 10/s applies and the replaced
    // 5/s is left untouched.
    fresh_window(1).await;
    let one_of = [("key_1", "value_1"), ("user", "bkthomps")];
    let two_of = [("key_2", "value_2"), ("user", "bkthomps")];
    let answer = request(&mut c, t, "example7", &[(&one_of, 6), (&two_of, 6)]).await;
    assert_eq!(overall(&answer), OK);
    assert_eq!(seen(&answer.statuses[0]), (OK, None, 0));
    assert_eq!(seen(&answer.statuses[1]), (OK, Some(10), 4));
    let example_7: [Step; 2] = [
        ("example7", &one_of, 5, (OK, Some(5), 0)),
        ("example7", &one_of, 1, (OVER, Some(5), 0)),
    ];
    steps(&mut c, t, &example_7).await;

    // Example 8: any value 10 a minute (each its own), value1 20 a minute.
    // Example 10: three levels, the rule on the last.
    fresh_window(60).await;
    let (any, other_any) = (
        [("key1", "unspecified_value")],
        [("key1", "unspecified_value2")],
    );
    let e10 = [
        ("route", "api"),
        ("http_method", "GET"),
        ("subject_id", "123"),
    ];
    let read = [
        ("user", "alice"),
        ("action", "readfile"),
        ("resource", "documents"),
    ];
    let write = [
        ("user", "alice"),
        ("action", "writefile"),
        ("resource", "documents"),
    ];
    let examples_8_and_10: [Step; 8] = [
        ("example8", &any, 10, (OK, Some(10), 0)),
        ("example8", &any, 1, (OVER, Some(10), 0)),
        ("example8", &other_any, 10, (OK, Some(10), 0)),
        ("example8", &other_any, 1, (OVER, Some(10), 0)),
        ("example8", &[("key1", "value1")], 1, (OK, Some(20), 19)),
        ("example10", &e10, 1, (OK, Some(60), 59)),
        ("example10_wildcard", &read, 1, (OK, Some(100), 99)),
        ("example10_wildcard", &write, 1, (OK, None, 0)),
    ];
    steps(&mut c, t, &examples_8_and_10).await;

    // Example 11: files/* share one threshold; files_no_share/* each have their own.
    fresh_window(3600).await;
    let shared = |f| [("files", f)];
    let unshared = |f| [("files_no_share", f)];
    let (pdf, csv, txt) = (
        shared("files/a.pdf"),
        shared("files/b.csv"),
        shared("files/c.txt"),
    );
    let (own_pdf, own_csv) = (
        unshared("files_no_share/a.pdf"),
        unshared("files_no_share/b.csv"),
    );
    let api = [("route", "api/v1"), ("method", "GET")];
    let example_11: [Step; 7] = [
        ("example11", &pdf, 5, (OK, Some(10), 5)),
        ("example11", &csv, 5, (OK, Some(10), 0)),
        ("example11", &txt, 1, (OVER, Some(10), 0)),
        ("example11", &own_pdf, 10, (OK, Some(10), 0)),
        ("example11", &own_pdf, 1, (OVER, Some(10), 0)),
        ("example11", &own_csv, 10, (OK, Some(10), 0)),
        ("example11_metrics", &api, 1, (OK, Some(60), 59)),
    ];
    steps(&mut c, t, &example_11).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_4_matches_only_as_many_entries_as_levels() {
    let two = [("key", "value"), ("subkey", "subvalue")];
    for (file, want) in [("no-match", (OK, None, 0)), ("match", (OK, Some(300), 299))] {
        let (server, token) = serve(data(&format!("example4/{file}.yaml"))).await;
        let mut c = client(&server).await;
        steps(&mut c, &token, &[("example4", &two, 1, want)]).await;
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_9_wildcards_match_as_documented() {
    let cases: [(&str, &str, &[&str], &[&str]); 3] = [
        (
            "trailing",
            "key1",
            &["value1", "value2", "valueXYZ"],
            &["other"],
        ),
        (
            "middle",
            "path",
            &["/api/123/action", "/api/user-id/action"],
            &["/api/123/other"],
        ),
        (
            "multiple",
            "route",
            &["/api/v1/resource/123/action", "/api/v2/resource/456/action"],
            &["/api/v1/other/123/action"],
        ),
    ];
    for (file, key, matching, other) in cases {
        let (server, token) = serve(data(&format!("example9/{file}.yaml"))).await;
        let mut c = client(&server).await;
        for value in matching {
            assert_eq!(
                one(&mut c, &token, "example9", &[(key, value)], 1).await.1,
                Some(20),
                "{value}"
            );
        }
        for value in other {
            assert_eq!(
                one(&mut c, &token, "example9", &[(key, value)], 1).await,
                (OK, None, 0)
            );
        }
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluicegate_apps_restricts_a_domain_and_other_domains_are_policies() {
    let (config, _dir) = envoy_yaml(
        "domain: private\nsluicegate_apps: [edge]\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3, sluicegate_algorithm: sliding-log}\n",
    );
    let (server, admin) = TestServer::start_with(config).await;
    let edge = app(&server, &admin, "edge").await;
    let web = app(&server, &admin, "web").await;
    let mut c = client(&server).await;
    assert_eq!(
        one(&mut c, &edge, "private", &[("k", "v")], 1).await,
        (OK, Some(3), 2)
    );
    let refused = ask_one(&mut c, &web, "private", &[("k", "v")], None)
        .await
        .expect_err("web may not ask");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    // A domain not in the YAML is a sluicegate policy, as without --envoy-config.
    let policy = r#"{"algorithm":"fixed-window","limit":1,"period":"1h","apps":["web"]}"#;
    create_policy(&server, &admin, "api", policy).await;
    assert_eq!(one(&mut c, &web, "api", &[("ip", "1")], 1).await.0, OK);
    assert_eq!(one(&mut c, &web, "api", &[("ip", "1")], 1).await.0, OVER);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_stops_the_start_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n",
    )
    .unwrap();
    assert_eq!(
        envoy_refused(dir.path(), file.clone()).await,
        format!(
            "{}:4:24: invalid rate limit unit 'fortnight'",
            file.display()
        )
    );
}

/// A descriptor of `entries` whose limit Envoy overrides with `requests_per_unit` per
/// `unit` (Envoy's `RateLimitUnit` number).
fn overridden(
    entries: &[(&str, &str)],
    requests_per_unit: u32,
    unit: i32,
) -> sluicegate_server::grpc::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor {
    use sluicegate_server::grpc::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    let mut d = descriptor(entries, Some(1));
    d.limit = Some(RateLimitOverride {
        requests_per_unit,
        unit,
    });
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_override_is_the_limit_in_a_known_domain() {
    const HOUR: i32 = 3;
    let (server, token) = serve(data("example1.yaml")).await;
    let mut c = client(&server).await;
    let t = Some(token.as_str());
    fresh_window(3600).await;
    // The rule says 500 per second; the override 2 per hour, counted per key.
    let users = [("database", "users")];
    for remaining in [1, 0] {
        let answer = ask(&mut c, t, "mongo_cps", vec![overridden(&users, 2, HOUR)]).await;
        assert_eq!(seen(&answer.unwrap().statuses[0]), (OK, Some(2), remaining));
    }
    let answer = ask(&mut c, t, "mongo_cps", vec![overridden(&users, 2, HOUR)]).await;
    let answer = answer.unwrap();
    assert_eq!(
        (overall(&answer), seen(&answer.statuses[0])),
        (OVER, (OVER, Some(2), 0))
    );
    // Without the override the rule holds, its count apart.
    assert_eq!(
        one(&mut c, &token, "mongo_cps", &users, 1).await,
        (OK, Some(500), 499)
    );
    // A descriptor no rule matches is limited by its override too, on its own key.
    let other = [("database", "other")];
    let answer = ask(&mut c, t, "mongo_cps", vec![overridden(&other, 2, HOUR)]).await;
    assert_eq!(seen(&answer.unwrap().statuses[0]), (OK, Some(2), 1));
    // An unknown unit: the rule decides, never an error for the call.
    let answer = ask(&mut c, t, "mongo_cps", vec![overridden(&users, 2, 0)]).await;
    let (code, limit, _) = seen(&answer.unwrap().statuses[0]);
    assert_eq!((code, limit), (OK, Some(500)));
    // An override of 0 (a suspended tenant) refuses every request, as a rule of 0 does.
    let suspended = [("database", "suspended")];
    for _ in 0..3 {
        let answer = ask(
            &mut c,
            t,
            "mongo_cps",
            vec![overridden(&suspended, 0, HOUR)],
        )
        .await;
        let answer = answer.unwrap();
        assert_eq!(
            (overall(&answer), seen(&answer.statuses[0])),
            (OVER, (OVER, Some(0), 0))
        );
    }
    server.stop().await;
}

/// The key tables of Envoy's rules and of limit overrides are in `/metrics` beside the
/// policies': a key a table forgot or refused can be seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_and_overrides_show_their_key_tables() {
    const HOUR: i32 = 3;
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().unwrap()),
        envoy_config: Some(data("example1.yaml")),
        metrics_open: true,
        ..config()
    })
    .await;
    let edge = app(&server, &admin, "edge").await;
    let mut c = client(&server).await;
    let users = [("database", "users")];
    one(&mut c, &edge, "mongo_cps", &users, 1).await;
    let answer = ask(
        &mut c,
        Some(&edge),
        "mongo_cps",
        vec![overridden(&users, 2, HOUR)],
    );
    answer.await.expect("an answer");
    let metrics = get(&server.url("/metrics"), "").await.text;
    let held: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("sluicegate_keys{policy=\"envoy:mongo_cps."))
        .collect();
    let one_key = |override_: bool| {
        let held = held
            .iter()
            .filter(|l| l.contains(".override.2_per_") == override_);
        held.into_iter().any(|l| l.ends_with(" 1"))
    };
    assert!(one_key(false), "the rule's one key: {held:?}");
    assert!(one_key(true), "the override's one key: {held:?}");
    server.stop().await;
}

/// An app holds at most 32 overrides at once (the guide's figure): one more is decided
/// by the rule the descriptor matches, never an error for the call; another app still
/// holds its own; an override unused for its window is dropped, making room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_are_bounded_per_app_and_never_fail_the_call() {
    const SECOND: i32 = 1;
    const HOUR: i32 = 3;
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().unwrap()),
        envoy_config: Some(data("example1.yaml")),
        ..config()
    })
    .await;
    let (greedy, other) = (
        app(&server, &admin, "greedy").await,
        app(&server, &admin, "other").await,
    );
    let mut c = client(&server).await;
    // 31 overrides of an hour, the 32nd of a second, each of its own figure.
    for n in 1..=31 {
        let limit = override_limit(&mut c, &greedy, 1000 + n, HOUR).await;
        assert_eq!(limit, Some(1000 + n));
    }
    for (token, asked, unit, applied, why) in [
        (&greedy, 7, SECOND, 7, "the 32nd"),
        (&greedy, 9, HOUR, 500, "the 33rd is the rule's own limit"),
        (&other, 9, HOUR, 9, "another app holds its own"),
    ] {
        let limit = override_limit(&mut c, token, asked, unit).await;
        assert_eq!(limit, Some(applied), "{why}");
    }
    // The override of a second, unused for more than a second, makes room.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(override_limit(&mut c, &greedy, 11, HOUR).await, Some(11));
    server.stop().await;
}

/// The limit one hit of `database=users` on `mongo_cps` (example 1's) is decided by when
/// `token`'s app overrides it with `requests_per_unit` per `unit`: never an error.
async fn override_limit(
    client: &mut Client,
    token: &str,
    requests_per_unit: u32,
    unit: i32,
) -> Option<u32> {
    let users = overridden(&[("database", "users")], requests_per_unit, unit);
    let answer = ask(client, Some(token), "mongo_cps", vec![users]).await;
    let answer = answer.expect("never an error for the call");
    seen(&answer.statuses[0]).1
}

/// Envoy's YAML of two quota rules (`user`: 2 an hour, `team`: 3) and a plain one
/// (`path`: 1 an hour), written in `dir`.
fn quotas(dir: &std::path::Path) -> PathBuf {
    let file = dir.join("quotas.yaml");
    std::fs::write(
        &file,
        "domain: quotas
descriptors:
  - key: user
    quota_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: team
    quota_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: path
    rate_limit:
      unit: hour
      requests_per_unit: 1
",
    )
    .unwrap();
    file
}

/// Each descriptor's code and the overall one.
fn codes(answer: &RateLimitResponse) -> (Code, Vec<Code>) {
    let each = answer.statuses.iter().map(|s| seen(s).0).collect();
    (overall(answer), each)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_rules_refuse_only_when_all_of_the_request_are_over() {
    let dir = tempfile::tempdir().unwrap();
    let file = quotas(dir.path());
    let (server, token) = serve(file).await;
    let mut c = client(&server).await;
    let t = token.as_str();
    fresh_window(3600).await;
    let (user, team) = ([("user", "a")], [("team", "t")]);
    let mut seen_codes = Vec::new();
    for _ in 0..4 {
        let answer = request(&mut c, t, "quotas", &[(&user, 1), (&team, 1)]).await;
        seen_codes.push(codes(&answer));
    }
    assert_eq!(
        seen_codes,
        [
            (OK, vec![OK, OK]),
            (OK, vec![OK, OK]),
            // One quota over, the other with room: admitted, the status says so.
            (OK, vec![OVER, OK]),
            (OVER, vec![OVER, OVER]),
        ]
    );
    // A rule not in quota mode refuses alone, as always.
    let path = [("path", "/a")];
    let fresh_user = [("user", "b")];
    let answer = request(&mut c, t, "quotas", &[(&path, 1), (&fresh_user, 1)]).await;
    assert_eq!(codes(&answer), (OK, vec![OK, OK]));
    let answer = request(&mut c, t, "quotas", &[(&path, 1), (&fresh_user, 1)]).await;
    assert_eq!(codes(&answer), (OVER, vec![OVER, OK]));
    server.stop().await;
}

/// `--quota-mode` (their `QUOTA_MODE`): every rule is a quota rule, the plain one too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_quota_mode_every_rule_is_a_quota_rule() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().unwrap()),
        envoy_config: Some(quotas(dir.path())),
        quota_mode: true,
        ..config()
    })
    .await;
    let token = app(&server, &admin, "edge").await;
    let mut c = client(&server).await;
    fresh_window(3600).await;
    let (path, user) = ([("path", "/a")], [("user", "b")]);
    let answer = request(&mut c, &token, "quotas", &[(&path, 1), (&user, 1)]).await;
    assert_eq!(codes(&answer), (OK, vec![OK, OK]));
    // The plain rule over, the quota rule with room: admitted.
    let answer = request(&mut c, &token, "quotas", &[(&path, 1), (&user, 1)]).await;
    assert_eq!(codes(&answer), (OK, vec![OVER, OK]));
    let answer = request(&mut c, &token, "quotas", &[(&path, 1)]).await;
    assert_eq!(codes(&answer), (OVER, vec![OVER]));
    server.stop().await;
}
