//! `--limitador-config`: limitador's documented examples (the limits its README
//! describes, its example file, its configuration guide's) and the file Kuadrant's
//! operator writes (in `data/limitador/`), each request sent over Envoy's RLS by a client
//! generated from its protos and getting limitador's answer; bad input answered with an
//! error that counts nothing; reloads; two replicas on one Redis.

use std::path::{Path, PathBuf};

use crate::common::*;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_response::Code;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluicegate_server::Config;

type Client = RateLimitServiceClient<tonic::transport::Channel>;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/limitador")
        .join(name)
}

/// The tests' configuration serving the limits file `path` over gRPC.
fn limits(path: &Path) -> Config {
    Config {
        grpc_listen: Some("127.0.0.1:0".parse().unwrap()),
        limitador_config: Some(path.to_path_buf()),
        ..config()
    }
}

/// A server on `config`, a client of its gRPC listener and an app's token.
async fn serve(config: Config) -> (TestServer, Client, String) {
    let (server, admin) = TestServer::start_with(config).await;
    let token = app(&server, &admin, "edge").await;
    let client = client(&server).await;
    (server, client, token)
}

/// One request of one descriptor of `entries` and `hits` on `namespace`.
async fn hit(
    client: &mut Client,
    token: &str,
    namespace: &str,
    entries: &[(&str, &str)],
    hits: u32,
) -> Result<RateLimitResponse, tonic::Status> {
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: namespace.into(),
        descriptors: vec![descriptor(entries, None)],
        hits_addend: hits,
    });
    let bearer = format!("Bearer {token}").parse().unwrap();
    request.metadata_mut().insert("authorization", bearer);
    client
        .should_rate_limit(request)
        .await
        .map(|r| r.into_inner())
}

/// The code of a request that must be answered.
async fn code(client: &mut Client, token: &str, namespace: &str, entries: &[(&str, &str)]) -> Code {
    let answer = hit(client, token, namespace, entries, 1)
        .await
        .expect("an answer");
    assert!(answer.statuses.is_empty(), "limitador sends no statuses");
    Code::try_from(answer.overall_code).unwrap()
}

/// The codes of `n` requests in a row.
async fn codes(
    client: &mut Client,
    token: &str,
    namespace: &str,
    entries: &[(&str, &str)],
    n: usize,
) -> Vec<Code> {
    let mut codes = Vec::with_capacity(n);
    for _ in 0..n {
        codes.push(code(client, token, namespace, entries).await);
    }
    codes
}

fn then_over(ok: usize, over: usize) -> Vec<Code> {
    let mut codes = vec![Code::Ok; ok];
    codes.extend(vec![Code::OverLimit; over]);
    codes
}

#[tokio::test]
async fn the_limits_their_readme_describes() {
    let (_server, mut client, token) = serve(limits(&data("get-and-post.yaml"))).await;
    let ns = "example.org";
    let alice_get = [("req.method", "GET"), ("user_id", "alice")];
    assert_eq!(
        codes(&mut client, &token, ns, &alice_get, 11).await,
        then_over(10, 1)
    );
    // Another user has a counter of their own; POST a limit of its own.
    let bob_get = [("req.method", "GET"), ("user_id", "bob")];
    assert_eq!(code(&mut client, &token, ns, &bob_get).await, Code::Ok);
    let alice_post = [("req.method", "POST"), ("user_id", "alice")];
    assert_eq!(
        codes(&mut client, &token, ns, &alice_post, 6).await,
        then_over(5, 1)
    );
    // No user: the variable's key is missing, the limit does not apply.
    let nobody = [("req.method", "GET")];
    assert_eq!(
        codes(&mut client, &token, ns, &nobody, 12).await,
        then_over(12, 0)
    );
}

/// Their example file, as their image starts with: the global limit's empty lists are
/// empty, so it applies to every request; POSTs per user.
#[tokio::test]
async fn their_example_file() {
    let (_server, mut client, token) = serve(limits(&data("examples.yaml"))).await;
    let ns = "test_namespace";
    let post = |user| [("req.method", "POST"), ("user_id", user)];
    assert_eq!(
        codes(&mut client, &token, ns, &post("alice"), 6).await,
        then_over(5, 1)
    );
    assert_eq!(code(&mut client, &token, ns, &post("bob")).await, Code::Ok);
    let get = [("req.method", "GET"), ("user_id", "alice")];
    assert_eq!(
        codes(&mut client, &token, ns, &get, 8).await,
        then_over(8, 0)
    );
}

/// Their configuration guide's example: a key with no dot, read as a field.
#[tokio::test]
async fn their_configuration_guides_example() {
    let (_server, mut client, token) = serve(limits(&data("configuration.yaml"))).await;
    let ns = "example.org";
    let get = |user| [("req_method", "GET"), ("user_id", user)];
    assert_eq!(
        codes(&mut client, &token, ns, &get("alice"), 11).await,
        then_over(10, 1)
    );
    assert_eq!(code(&mut client, &token, ns, &get("bob")).await, Code::Ok);
    let post = [("req_method", "POST"), ("user_id", "alice")];
    assert_eq!(
        codes(&mut client, &token, ns, &post, 12).await,
        then_over(12, 0)
    );
}

/// Both of Kuadrant's limits apply to one request: a request the per-user limit denies
/// counts nothing on the global one.
#[tokio::test]
async fn kuadrants_operator_file_all_or_nothing() {
    let (_server, mut client, token) = serve(limits(&data("kuadrant.yaml"))).await;
    let ns = "kuadrant-system/toystore";
    let request = |user| {
        [
            ("limit.create_toy__b3a6fd51", "1"),
            ("limit.per_user__a0ec30d4", "1"),
            ("auth.identity.username", user),
        ]
    };
    assert_eq!(
        codes(&mut client, &token, ns, &request("alice"), 3).await,
        then_over(2, 1)
    );
    assert_eq!(
        codes(&mut client, &token, ns, &request("bob"), 3).await,
        then_over(2, 1)
    );
    // Two denials counted nothing: one of the global five is left.
    assert_eq!(
        codes(&mut client, &token, ns, &request("carol"), 2).await,
        then_over(1, 1)
    );
    assert_eq!(
        code(&mut client, &token, ns, &request("dave")).await,
        Code::OverLimit
    );
}

#[tokio::test]
async fn hits_addend_zero_is_one_and_above_the_max_is_always_denied() {
    let (_server, mut client, token) = serve(limits(&data("get-and-post.yaml"))).await;
    let (ns, post) = ("example.org", [("req.method", "POST"), ("user_id", "u")]);
    let over = |r: RateLimitResponse| Code::try_from(r.overall_code).unwrap();
    let six = hit(&mut client, &token, ns, &post, 6).await.unwrap();
    assert_eq!(over(six), Code::OverLimit);
    for _ in 0..5 {
        let zero = hit(&mut client, &token, ns, &post, 0).await.unwrap();
        assert_eq!(over(zero), Code::Ok);
    }
    let zero = hit(&mut client, &token, ns, &post, 0).await.unwrap();
    assert_eq!(over(zero), Code::OverLimit);
}

#[tokio::test]
async fn draft_03_headers_as_theirs() {
    let (_server, mut client, token) = serve(Config {
        rate_limit_headers: true,
        ..limits(&data("kuadrant.yaml"))
    })
    .await;
    let ns = "kuadrant-system/toystore";
    let entries = [
        ("limit.create_toy__b3a6fd51", "1"),
        ("limit.per_user__a0ec30d4", "1"),
        ("auth.identity.username", "alice"),
    ];
    let answer = hit(&mut client, &token, ns, &entries, 1).await.unwrap();
    let headers: Vec<(&str, &str)> = answer
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(headers[0], (
        "X-RateLimit-Limit",
        "2, 2;w=10;name=\"kuadrant-system/toystore/per-user\", 5;w=60;name=\"kuadrant-system/toystore/create-toy\""
    ));
    assert_eq!(headers[1], ("X-RateLimit-Remaining", "1"));
    let reset: u64 = headers[2].1.parse().unwrap();
    assert_eq!(headers[2].0, "X-RateLimit-Reset");
    assert!(reset <= 10, "within the window: {reset}");
}

const BAD: &str = r#"
- namespace: types
  max_value: 5
  seconds: 60
  conditions: ["42"]
  variables: []
- namespace: index
  max_value: 5
  seconds: 60
  conditions: ['descriptors[1]["x"] == "1"']
  variables: []
- namespace: unbound
  max_value: 0
  seconds: 60
  conditions: ['user == "1"']
  variables: []
- namespace: count
  max_value: 1
  seconds: 60
  conditions: []
  variables: []
- namespace: count
  max_value: 5
  seconds: 60
  conditions: ['int(descriptors[0]["n"]) > 0']
  variables: []
- namespace: list
  max_value: 5
  seconds: 60
  conditions: []
  variables: ['[descriptors[0]["x"]]']
"#;

/// Every kind of bad input is an error naming what is wrong, counts nothing and leaves
/// the server answering.
#[tokio::test]
async fn bad_input_is_an_error_and_counts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yaml");
    std::fs::write(&file, BAD).unwrap();
    let (_server, mut client, token) = serve(limits(&file)).await;
    let refused = |r: Result<RateLimitResponse, tonic::Status>| r.expect_err("an error");
    let e = refused(hit(&mut client, &token, "types", &[("x", "1")], 1).await);
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert_eq!(e.message(), "unexpected value of type integer");
    let e = refused(hit(&mut client, &token, "index", &[("x", "1")], 1).await);
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert!(
        e.message().contains("Index out of bounds"),
        "{}",
        e.message()
    );
    let e = refused(hit(&mut client, &token, "list", &[("x", "1")], 1).await);
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert_eq!(e.message(), "unexpected value of type list");
    // A name not bound makes the condition false: the limit of 0 never applies.
    assert_eq!(
        code(&mut client, &token, "unbound", &[("user", "1")]).await,
        Code::Ok
    );
    let many: Vec<(String, String)> = (0..1000).map(|i| (format!("k{i}"), "v".into())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let e = refused(hit(&mut client, &token, "count", &many, 1).await);
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(e.message(), "a descriptor has at most 64 entries");
    // Failed calls counted nothing on the limit that applied to them.
    let e = refused(hit(&mut client, &token, "count", &[("n", "x")], 1).await);
    assert_eq!(e.code(), tonic::Code::Unavailable);
    let n = [("n", "1")];
    assert_eq!(
        codes(&mut client, &token, "count", &n, 2).await,
        then_over(1, 1)
    );
}

#[tokio::test]
async fn a_file_with_a_null_list_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yaml");
    std::fs::write(
        &file,
        "- namespace: a\n  seconds: 1\n  conditions: null\n  variables: []\n",
    )
    .unwrap();
    let refused = sluicegate_server::Server::bind(Config {
        data_dir: dir.path().join("data"),
        listen: "127.0.0.1:0".parse().unwrap(),
        ..limits(&file)
    })
    .await
    .expect_err("refused");
    assert_eq!(
        refused.to_string(),
        format!(
            "{}:3:15: [0]: invalid type: unit value, expected a sequence",
            file.display()
        )
    );
}

/// Two replicas on one Redis, 8 clients at once on one counter of 100: exactly 100
/// admitted (limitador's separate check and update let replicas overshoot).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_redis_admit_exactly_the_limit() {
    let redis = Redis::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yaml");
    let limit = "- {namespace: shared, max_value: 100, seconds: 3600, conditions: [], variables: ['descriptors[0].user']}\n";
    std::fs::write(&file, limit).unwrap();
    let (a, b, admin) = two_servers(Config {
        data_dir: dir.path().join("data"),
        decisions: Some(redis.url()),
        ..limits(&file)
    })
    .await;
    let token = app(&a, &admin, "edge").await;
    // The other replica sees the new app within its poll of the store: 5 s is plenty.
    let mut other = client(&b).await;
    for _ in 0..100 {
        let asked = hit(&mut other, &token, "not-limitadors", &[("user", "u")], 1).await;
        if asked.err().map(|e| e.code()) != Some(tonic::Code::Unauthenticated) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let mut tasks = Vec::new();
    for i in 0..8 {
        let mut client = client(if i % 2 == 0 { &a } else { &b }).await;
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..30 {
                if code(&mut client, &token, "shared", &[("user", "u")]).await == Code::Ok {
                    admitted += 1;
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    assert_eq!(admitted, 100);
    // The counter is listed from Redis by either replica.
    let listed = get(&b.url("/counters/shared"), &token).await;
    assert_eq!(listed.json[0]["remaining"], 0, "{}", listed.text);
    assert_eq!(listed.json[0]["set_variables"]["descriptors[0].user"], "u");
}

/// Moves a new version of `file` into place (written beside it, then renamed), as
/// `mv` and Kubernetes' ConfigMap swap do.
fn move_into_place(file: &Path, text: &str) {
    let temporary = file.with_extension("new");
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, file).unwrap();
}

/// Waits until the namespace `probe` is served (a reload applied).
async fn served(client: &mut Client, token: &str, probe: &str) -> bool {
    // Files polled every 250 ms: 5 s for a loaded machine, never seen fails.
    for _ in 0..250 {
        if hit(client, token, probe, &[], 1).await.is_ok() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    false
}

const PROBE: &str = "conditions: [], variables: []}\n";

/// A change of `max_value` or `name` keeps the counters, a file that does not parse
/// keeps the last one served, a limit removed loses its counters.
#[tokio::test]
async fn reloads_keep_counters_as_limitador_does() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yaml");
    let limit = |max, name| {
        format!("- {{namespace: ns, max_value: {max}, seconds: 3600, name: {name}, {PROBE}")
    };
    std::fs::write(&file, limit(2, "a")).unwrap();
    let (_server, mut client, token) = serve(limits(&file)).await;
    assert_eq!(
        codes(&mut client, &token, "ns", &[], 3).await,
        then_over(2, 1)
    );
    let probe = |n| format!("- {{namespace: probe{n}, max_value: 1000, seconds: 1, {PROBE}");
    move_into_place(&file, &(limit(3, "b") + &probe(1)));
    assert!(
        served(&mut client, &token, "probe1").await,
        "the new file applied"
    );
    assert_eq!(
        codes(&mut client, &token, "ns", &[], 2).await,
        then_over(1, 1)
    );
    move_into_place(&file, &(probe(2) + "- {namespace: ns, seconds: [}"));
    assert!(
        !served(&mut client, &token, "probe2").await,
        "the broken file refused"
    );
    assert_eq!(code(&mut client, &token, "ns", &[]).await, Code::OverLimit);
    // Another window length is another limit: it counts from nothing.
    let other = limit(3, "b").replace("3600", "1800");
    move_into_place(&file, &(other + &probe(3)));
    assert!(
        served(&mut client, &token, "probe3").await,
        "the fixed file applied"
    );
    assert_eq!(
        codes(&mut client, &token, "ns", &[], 4).await,
        then_over(3, 1)
    );
}

/// limitador's HTTP API at its paths and bodies: check, report, check_and_report,
/// limits, counters, and its metrics' names.
#[tokio::test]
async fn their_http_api() {
    let (server, admin) = TestServer::start_with(Config {
        metrics_open: true,
        ..limits(&data("get-and-post.yaml"))
    })
    .await;
    let token = app(&server, &admin, "edge").await;
    let body = |delta: u64| {
        format!(
            r#"{{"namespace":"example.org","values":{{"req.method":"POST","user_id":"ann"}},"delta":{delta},"response_headers":"DraftVersion03"}}"#
        )
    };
    let check = post(&server.url("/check"), &token, &body(5)).await;
    assert_eq!(check.status, hyper::StatusCode::OK);
    assert_eq!(check.headers["x-ratelimit-remaining"], "5");
    // A report counts whatever the limit; a check counts nothing.
    let report = post(&server.url("/report"), &token, &body(4)).await;
    assert_eq!(report.status, hyper::StatusCode::OK);
    let over = post(&server.url("/check_and_report"), &token, &body(2)).await;
    assert_eq!(over.status, hyper::StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(over.headers["x-ratelimit-remaining"], "1");
    let last = post(&server.url("/check_and_report"), &token, &body(1)).await;
    assert_eq!(last.status, hyper::StatusCode::OK);
    let limits = get(&server.url("/limits/example.org"), &token).await;
    assert_eq!(limits.json[0]["max_value"], 10, "{}", limits.text);
    assert_eq!(
        limits.json[1]["conditions"][0],
        "descriptors[0]['req.method'] == 'POST'"
    );
    let counters = get(&server.url("/counters/example.org"), &token).await;
    let counter = &counters.json[0];
    assert_eq!(
        counter["set_variables"]["descriptors[0].user_id"], "ann",
        "{}",
        counters.text
    );
    assert_eq!(counter["remaining"], 0);
    assert!(counter["expires_in_seconds"].as_u64().unwrap() <= 60);
    let none = get(&server.url("/limits/nowhere"), &token).await;
    assert_eq!(none.status, hyper::StatusCode::NOT_FOUND);
    let metrics = get(&server.url("/metrics"), &token).await.text;
    for line in [
        r#"authorized_calls{limitador_namespace="example.org"} 2"#,
        r#"authorized_hits{limitador_namespace="example.org"} 5"#,
        r#"limited_calls{limitador_namespace="example.org",limit_name=""} 1"#,
        "counter_latency_count 4",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
}

/// Kuadrant's `CheckRateLimit` counts nothing and `Report` counts whatever the limit:
/// a token budget checked before a request and charged its tokens after.
#[tokio::test]
async fn kuadrants_check_and_report() {
    use sluicegate_server::grpc::kuadrant::service::ratelimit::v1::rate_limit_service_client::RateLimitServiceClient as Kuadrant;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yaml");
    let budget = "- {namespace: tokens, max_value: 10, seconds: 3600, conditions: [], variables: ['descriptors[0].user']}\n";
    std::fs::write(&file, budget).unwrap();
    let (server, _client, token) = serve(limits(&file)).await;
    let mut kuadrant = Kuadrant::connect(format!("http://{}", server.grpc.unwrap()))
        .await
        .unwrap();
    let request = |hits: u32| {
        let mut request = tonic::Request::new(RateLimitRequest {
            domain: "tokens".into(),
            descriptors: vec![descriptor(&[("user", "u")], None)],
            hits_addend: hits,
        });
        let bearer = format!("Bearer {token}").parse().unwrap();
        request.metadata_mut().insert("authorization", bearer);
        request
    };
    let code = |r: tonic::Response<RateLimitResponse>| {
        Code::try_from(r.into_inner().overall_code).unwrap()
    };
    for _ in 0..20 {
        assert_eq!(
            code(kuadrant.check_rate_limit(request(1)).await.unwrap()),
            Code::Ok
        );
    }
    assert_eq!(code(kuadrant.report(request(8)).await.unwrap()), Code::Ok);
    assert_eq!(
        code(kuadrant.check_rate_limit(request(3)).await.unwrap()),
        Code::OverLimit
    );
    assert_eq!(
        code(kuadrant.check_rate_limit(request(2)).await.unwrap()),
        Code::Ok
    );
    // The tokens came out above the budget: counted all the same.
    assert_eq!(code(kuadrant.report(request(5)).await.unwrap()), Code::Ok);
    assert_eq!(
        code(kuadrant.check_rate_limit(request(1)).await.unwrap()),
        Code::OverLimit
    );
    let mut unknown = request(1);
    unknown.get_mut().domain = "elsewhere".into();
    let refused = kuadrant.check_rate_limit(unknown).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
}

/// The counters in this process are bounded by `--max-keys`: a table full of open
/// windows refuses a new counter, and takes it once windows have ended.
#[tokio::test]
async fn the_memory_table_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yaml");
    let per_user = "- {namespace: ns, max_value: 5, seconds: 1, conditions: [], variables: ['descriptors[0].user']}\n";
    std::fs::write(&file, per_user).unwrap();
    let (_server, mut client, token) = serve(Config {
        max_keys: 3,
        ..limits(&file)
    })
    .await;
    for user in ["a", "b", "c"] {
        assert_eq!(
            code(&mut client, &token, "ns", &[("user", user)]).await,
            Code::Ok
        );
    }
    let full = hit(&mut client, &token, "ns", &[("user", "d")], 1)
        .await
        .unwrap_err();
    assert_eq!(full.code(), tonic::Code::Unavailable);
    assert!(full.message().contains("--max-keys"), "{}", full.message());
    // The windows end a second after their first hit: a loaded machine gets 5 s more.
    let mut taken = false;
    for _ in 0..60 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if hit(&mut client, &token, "ns", &[("user", "d")], 1)
            .await
            .is_ok()
        {
            taken = true;
            break;
        }
    }
    assert!(taken, "a new counter once the others' windows ended");
}

/// Redis unreachable: `--fail` answers for limitador's namespaces as for the rest.
#[tokio::test]
async fn redis_away_answers_as_fail_says() {
    use sluicegate_core::FailPolicy;
    let gone = format!("redis://127.0.0.1:{}", free_port());
    for (fail, expected) in [
        (FailPolicy::Open, Ok(Code::Ok)),
        (FailPolicy::Closed, Ok(Code::OverLimit)),
        (FailPolicy::Local(()), Ok(Code::Ok)),
        (FailPolicy::Error, Err(tonic::Code::Unavailable)),
    ] {
        let (_server, mut client, token) = serve(Config {
            decisions: Some(gone.clone()),
            fail,
            ..limits(&data("get-and-post.yaml"))
        })
        .await;
        let get = [("req.method", "GET"), ("user_id", "u")];
        let answer = hit(&mut client, &token, "example.org", &get, 1).await;
        let got = answer
            .map(|r| Code::try_from(r.overall_code).unwrap())
            .map_err(|e| e.code());
        assert_eq!(got, expected);
    }
}
