//! Traces over OTLP against a real receiver (the collector's `TraceService`, generated
//! from the published OpenTelemetry protos): with the standard variables set, an HTTP
//! request and an Envoy call each arrive as a server span joined to the caller's
//! `traceparent`, with a child for the decision and one for its Redis round trip, each
//! report of an Envoy quota stream as a span joined to the stream's `traceparent`, and no
//! key, token or descriptor value in any attribute. One test: a process has one exporter.

use std::time::Duration;

use crate::common::*;
use hyper::{Method, StatusCode};
use sluicegate_server::grpc::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use sluicegate_server::grpc::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::rate_limit_response::Code;
use sluicegate_server::grpc::envoy::service::ratelimit::v3::RateLimitRequest;
use sluicegate_server::{Config, Telemetry, TelemetryError};
use sluicegate_test_support::otlp::{attribute, Receiver, Span};

const HTTP_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const HTTP_PARENT: &str = "b7ad6b7169203331";
const RLS_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const RLS_PARENT: &str = "00f067aa0ba902b7";
/// A trace the caller did not sample: the server follows it and exports nothing.
const UNSAMPLED_TRACE: &str = "11111111111111111111111111111111";
/// A call with a 2 MiB domain naming an unknown policy, and a request of a 64 KiB method.
const LONG_TRACE: &str = "22222222222222222222222222222222";
const METHOD_TRACE: &str = "33333333333333333333333333333333";
/// An Envoy quota stream: a span per report message, joined to the stream's trace.
const RLQS_TRACE: &str = "44444444444444444444444444444444";
const RLQS_PARENT: &str = "0123456789abcdef";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn traceparent(trace: &str, parent: &str, flags: &str) -> String {
    format!("00-{trace}-{parent}-{flags}")
}

/// The one span of `trace` named `name`.
fn span<'a>(spans: &'a [Span], trace: &str, name: &str) -> &'a Span {
    let found: Vec<&Span> = spans
        .iter()
        .filter(|s| hex(&s.trace_id) == trace && s.name == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name:?} span in trace {trace}: {spans:#?}"
    );
    found[0]
}

/// The server span of `trace` (named `name`, a child of `parent`), its decision's span
/// and that decision's Redis round trip, each the child of the one before.
fn assert_chain(spans: &[Span], trace: &str, parent: &str, name: &str) -> (Span, Span) {
    let server = span(spans, trace, name);
    assert_eq!(hex(&server.parent_span_id), parent, "joined to the caller");
    assert_eq!(server.kind, 2, "a server span");
    let decide = span(spans, trace, "decide");
    assert_eq!(decide.parent_span_id, server.span_id);
    assert_eq!(
        attribute(decide, "sluicegate.policy").as_deref(),
        Some("api")
    );
    assert_eq!(
        attribute(decide, "sluicegate.backend").as_deref(),
        Some("redis")
    );
    assert_eq!(
        attribute(decide, "sluicegate.outcome").as_deref(),
        Some("allowed")
    );
    let redis = span(spans, trace, "redis");
    assert_eq!(redis.parent_span_id, decide.span_id);
    assert_eq!(attribute(redis, "db.system.name").as_deref(), Some("redis"));
    (server.clone(), decide.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_join_the_callers_trace_and_name_no_key() {
    const VARIABLES: [&str; 4] = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ];
    for name in VARIABLES {
        std::env::remove_var(name);
    }
    // Nothing asked: no exporter.
    assert!(Telemetry::from_env().expect("no variables").is_none());
    let receiver = Receiver::start();
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
    assert!(matches!(
        Telemetry::from_env(),
        Err(TelemetryError::Unsupported { .. })
    ));
    std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    // A sampler the SDK would read as "everything" is refused, naming its variable.
    for (sampler, arg, refused) in [
        ("traceidraito", None, "OTEL_TRACES_SAMPLER"),
        ("traceidratio", Some("half"), "OTEL_TRACES_SAMPLER_ARG"),
        (
            "parentbased_traceidratio",
            Some("1.5"),
            "OTEL_TRACES_SAMPLER_ARG",
        ),
    ] {
        std::env::set_var("OTEL_TRACES_SAMPLER", sampler);
        match arg {
            Some(arg) => std::env::set_var("OTEL_TRACES_SAMPLER_ARG", arg),
            None => std::env::remove_var("OTEL_TRACES_SAMPLER_ARG"),
        }
        match Telemetry::from_env() {
            Err(e @ TelemetryError::Invalid { .. }) => {
                assert!(e.to_string().starts_with(refused), "{e}")
            }
            other => panic!("{sampler} {arg:?}: {other:?}"),
        }
    }
    std::env::remove_var("OTEL_TRACES_SAMPLER");
    std::env::remove_var("OTEL_TRACES_SAMPLER_ARG");
    std::env::set_var("OTEL_SERVICE_NAME", "sluicegate-test");
    // Batches sent every 50 ms, not every 5 s.
    std::env::set_var("OTEL_BSP_SCHEDULE_DELAY", "50");
    let traces = Telemetry::from_env()
        .expect("an exporter")
        .expect("asked for");

    let redis = Redis::start();
    let (server, admin) = TestServer::start_with(Config {
        grpc_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..in_redis(&redis)
    })
    .await;
    let web = app(&server, &admin, "web").await;
    let policy =
        r#"{"algorithm":"token-bucket","capacity":5,"rate":1,"period":"1h","apps":["web"]}"#;
    create_policy(&server, &admin, "api", policy).await;

    let decide = |trace: &str, parent: &str, flags: &str| {
        let header = traceparent(trace, parent, flags);
        let (url, web) = (server.url("/v1/decide"), web.clone());
        async move {
            let body = r#"{"policy":"api","key":"secret-key-alice"}"#;
            call(
                Method::POST,
                &url,
                Some(&web),
                Some(body),
                &[("traceparent", &header)],
            )
            .await
        }
    };
    assert_eq!(
        decide(HTTP_TRACE, HTTP_PARENT, "01").await.status,
        StatusCode::OK
    );
    assert_eq!(
        decide(UNSAMPLED_TRACE, HTTP_PARENT, "00").await.status,
        StatusCode::OK
    );

    let mut client = client(&server).await;
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![descriptor(&[("user", "secret-value-bob")], None)],
        hits_addend: 0,
    });
    let metadata = request.metadata_mut();
    metadata.insert("authorization", format!("Bearer {web}").parse().unwrap());
    let header = traceparent(RLS_TRACE, RLS_PARENT, "01");
    metadata.insert("traceparent", header.parse().unwrap());
    let answer = client.should_rate_limit(request).await.expect("an answer");
    assert_eq!(answer.into_inner().overall_code, Code::Ok as i32);

    // What a span takes of a request is bounded: a 2 MiB domain, a descriptor's policy
    // (in the status message), a 64 KiB extension method.
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "secret-domain-".repeat(150_000),
        descriptors: vec![descriptor(&[("policy", "secret-policy")], None)],
        hits_addend: 0,
    });
    let metadata = request.metadata_mut();
    metadata.insert("authorization", format!("Bearer {web}").parse().unwrap());
    let header = traceparent(LONG_TRACE, RLS_PARENT, "01");
    metadata.insert("traceparent", header.parse().unwrap());
    let refused = client
        .should_rate_limit(request)
        .await
        .expect_err("no such policy");
    assert!(refused.message().contains("secret-policy"), "{refused:?}");
    let method = Method::from_bytes(&[b'X'; 64 * 1024]).unwrap();
    let header = traceparent(METHOD_TRACE, HTTP_PARENT, "01");
    let url = server.url("/v1/decide");
    let answered = call(method, &url, Some(&web), None, &[("traceparent", &header)]).await;
    assert!(answered.status.is_client_error(), "{:?}", answered.status);

    // Two reports on a quota stream: a bucket alone at first, then a periodic one.
    let header = traceparent(RLQS_TRACE, RLQS_PARENT, "01");
    let bearer = format!("Bearer {web}");
    let metadata = [("authorization", bearer.as_str()), ("traceparent", &header)];
    let (outbox, mut responses) = open_with(server.grpc.unwrap(), &metadata)
        .await
        .expect("a quota stream");
    let tenant = [("tenant", "secret-value-carol")];
    for allowed in [1, 4] {
        let usage = RateLimitQuotaUsageReports {
            domain: "api".into(),
            bucket_quota_usages: vec![BucketQuotaUsage {
                bucket_id: Some(bucket(&tenant)),
                time_elapsed: Some(prost_types::Duration::default()),
                num_requests_allowed: allowed,
                num_requests_denied: 0,
            }],
        };
        outbox.send(usage).expect("the stream is open");
    }
    let assigned = tokio::time::timeout(Duration::from_secs(5), responses.message()).await;
    assert!(matches!(assigned, Ok(Ok(Some(_)))), "{assigned:?}");

    let rls_name = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    let rlqs_name = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";
    let spans = tokio::task::spawn_blocking(move || {
        receiver.spans_when(Duration::from_secs(10), |spans| {
            let count = |t: &str| spans.iter().filter(|s| hex(&s.trace_id) == t).count();
            count(HTTP_TRACE) >= 3
                && count(RLS_TRACE) >= 3
                && count(LONG_TRACE) >= 1
                && count(METHOD_TRACE) >= 1
                && count(RLQS_TRACE) >= 2
        })
    })
    .await
    .unwrap();
    let long = span(&spans, LONG_TRACE, rls_name);
    let domain = attribute(long, "sluicegate.domain").expect("the domain");
    assert!(
        domain.len() <= 256 && domain.starts_with("secret-domain-"),
        "{}",
        domain.len()
    );
    let why = long
        .status
        .as_ref()
        .map(|s| s.message.clone())
        .unwrap_or_default();
    assert!(!why.is_empty() && !why.contains("secret"), "{why}");
    let odd = spans
        .iter()
        .find(|s| hex(&s.trace_id) == METHOD_TRACE)
        .unwrap();
    assert!(
        odd.name.starts_with("HTTP") && odd.name.len() < 64,
        "{}",
        odd.name
    );
    assert_eq!(
        attribute(odd, "http.request.method").as_deref(),
        Some("_OTHER")
    );
    let (http, _) = assert_chain(&spans, HTTP_TRACE, HTTP_PARENT, "POST /v1/decide");
    assert_eq!(
        attribute(&http, "http.route").as_deref(),
        Some("/v1/decide")
    );
    assert_eq!(
        attribute(&http, "http.response.status_code").as_deref(),
        Some("200")
    );
    let (rls, _) = assert_chain(&spans, RLS_TRACE, RLS_PARENT, rls_name);
    assert_eq!(attribute(&rls, "sluicegate.domain").as_deref(), Some("api"));
    assert_eq!(attribute(&rls, "sluicegate.code").as_deref(), Some("OK"));
    let reports: Vec<&Span> = (spans.iter())
        .filter(|s| hex(&s.trace_id) == RLQS_TRACE)
        .collect();
    assert_eq!(reports.len(), 2, "a span per report: {reports:#?}");
    for report in reports {
        assert_eq!(report.name, rlqs_name);
        assert_eq!(
            hex(&report.parent_span_id),
            RLQS_PARENT,
            "joined to the stream"
        );
        assert_eq!(
            attribute(report, "sluicegate.domain").as_deref(),
            Some("api")
        );
        assert_eq!(
            attribute(report, "sluicegate.buckets").as_deref(),
            Some("1")
        );
    }
    assert!(
        spans.iter().all(|s| hex(&s.trace_id) != UNSAMPLED_TRACE),
        "a trace its caller did not sample is not exported"
    );
    // Never a key, a descriptor value or a token (a domain is the call's, bounded).
    for span in &spans {
        let status = span.status.as_ref().map(|s| s.message.as_str());
        assert!(!span.name.contains("secret") && !status.unwrap_or("").contains("secret"));
        for a in span
            .attributes
            .iter()
            .filter(|a| a.key != "sluicegate.domain")
        {
            let text = format!("{:?}", a.value);
            assert!(
                !text.contains("secret") && !text.contains(&web),
                "{} = {text}",
                a.key
            );
        }
    }
    server.stop().await;
    tokio::task::spawn_blocking(move || traces.shutdown())
        .await
        .unwrap();
}
