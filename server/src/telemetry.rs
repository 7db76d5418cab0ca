//! Traces over OTLP, configured by the standard `OTEL_*` variables: a span per HTTP
//! request and per call of Envoy's rate limit service, joined to the caller's trace by
//! its `traceparent`, with a child for each decision and each Redis round trip.
//!
//! Without an exporter asked for, nothing is built and each hook costs one read of an
//! empty cell; with one, a request the sampler leaves out costs its sampling decision.

use std::borrow::Cow;
use std::future::Future;
use std::sync::OnceLock;

use axum::http::HeaderMap;
use opentelemetry::context::FutureExt as _;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, Key, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

/// The process's tracer, once an exporter is installed.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Why traces cannot be exported as the `OTEL_*` variables ask.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// An exporter or protocol other than OTLP over gRPC.
    #[error("{variable}={value}: this server exports traces over OTLP/gRPC only (otlp, grpc)")]
    Unsupported {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// The exporter could not be built (an endpoint that is not a URL, …).
    #[error("the OTLP exporter: {0}")]
    Exporter(String),
    /// A sampler or its argument that is not one (the SDK would sample everything).
    #[error("{variable}={value}: expected {expected}")]
    Invalid {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What it may be.
        expected: String,
    },
    /// An exporter is installed already in this process.
    #[error("traces are exported already by this process")]
    Installed,
}

/// The samplers the SDK reads from `OTEL_TRACES_SAMPLER`.
const SAMPLERS: [&str; 6] = [
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
];

/// The longest text a span takes from a request (a name, an attribute's value): what is
/// queued for export stays small whatever the request holds.
const MAX_TEXT: usize = 256;

/// `text` cut to at most [`MAX_TEXT`] bytes, at a character's boundary.
pub(crate) fn clipped(text: &str) -> String {
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Refuses a sampler the SDK would read as "sample everything" without a word: a name
/// it does not know, or a ratio that is not one in 0..=1.
fn check_sampler() -> Result<(), TelemetryError> {
    let sampler = var("OTEL_TRACES_SAMPLER");
    if let Some(value) = sampler.as_ref().filter(|v| !SAMPLERS.contains(&v.as_str())) {
        return Err(TelemetryError::Invalid {
            variable: "OTEL_TRACES_SAMPLER",
            value: value.clone(),
            expected: format!("one of {}", SAMPLERS.join(", ")),
        });
    }
    if !sampler.is_some_and(|s| s.ends_with("traceidratio")) {
        return Ok(());
    }
    let is_ratio = |arg: &str| {
        arg.trim()
            .parse::<f64>()
            .is_ok_and(|r| (0.0..=1.0).contains(&r))
    };
    match var("OTEL_TRACES_SAMPLER_ARG") {
        Some(value) if !is_ratio(&value) => Err(TelemetryError::Invalid {
            variable: "OTEL_TRACES_SAMPLER_ARG",
            value,
            expected: "a ratio from 0 to 1".into(),
        }),
        _ => Ok(()),
    }
}

/// The process's trace exporter: spans go out in batches until [`Telemetry::shutdown`].
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

/// The variable's value, if set and not empty.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Telemetry {
    /// Installs an OTLP/gRPC exporter when the variables ask for one: an endpoint
    /// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`) or
    /// `OTEL_TRACES_EXPORTER=otlp`; none with `OTEL_SDK_DISABLED=true` or
    /// `OTEL_TRACES_EXPORTER=none`. The exporter reads its other variables itself
    /// (timeout, headers), the tracer its sampler (`OTEL_TRACES_SAMPLER`, `_ARG`) and
    /// resource (`OTEL_SERVICE_NAME`, default `sluicegate`; `OTEL_RESOURCE_ATTRIBUTES`).
    /// Call it within a Tokio runtime: the exporter's connection runs on it.
    pub fn from_env() -> Result<Option<Self>, TelemetryError> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let asked = match var("OTEL_TRACES_EXPORTER") {
            Some(v) if v == "none" => return Ok(None),
            Some(v) if v == "otlp" => true,
            Some(value) => {
                return Err(TelemetryError::Unsupported {
                    variable: "OTEL_TRACES_EXPORTER",
                    value,
                })
            }
            None => false,
        };
        let endpoint = [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]
        .into_iter()
        .any(|name| var(name).is_some());
        if !(asked || endpoint) {
            return Ok(None);
        }
        check_sampler()?;
        for variable in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(value) = var(variable).filter(|v| v != "grpc") {
                return Err(TelemetryError::Unsupported { variable, value });
            }
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "sluicegate");
        TRACER.set(tracer).map_err(|_| TelemetryError::Installed)?;
        Ok(Some(Self { provider }))
    }

    /// Sends the spans still batched and stops the exporter.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "exporting the last traces");
        }
    }
}

/// The resource the variables describe, named `sluicegate` unless they name it.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        detected
    } else {
        Resource::builder().with_service_name("sluicegate").build()
    }
}

/// Headers (HTTP's, or gRPC metadata's) as the propagator reads them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// A request as a front end receives it: its headers carry the caller's trace.
pub(crate) trait Incoming {
    /// Its headers (HTTP's, or gRPC's metadata).
    fn headers(&self) -> &HeaderMap;
}

impl<B> Incoming for axum::http::Request<B> {
    fn headers(&self) -> &HeaderMap {
        self.headers()
    }
}

#[cfg(feature = "grpc")]
impl<T> Incoming for tonic::Request<T> {
    fn headers(&self) -> &HeaderMap {
        self.metadata().as_ref()
    }
}

/// Handles `request` with `handle`, as a server span named `name` (a child of its
/// `traceparent` if any) when traced, and ends that span with what `describe` says of
/// the answer: attributes, and why it failed if it did.
pub(crate) async fn request<R: Incoming, F: Future>(
    request: R,
    name: impl FnOnce(&R) -> Cow<'static, str>,
    attributes: impl FnOnce(&R) -> Vec<KeyValue>,
    handle: impl FnOnce(R) -> F,
    describe: impl FnOnce(&F::Output) -> (Vec<KeyValue>, Option<String>),
) -> F::Output {
    let cx = incoming(
        request.headers(),
        || name(&request),
        || attributes(&request),
    );
    traced(cx, handle(request), describe).await
}

/// The trace of a request arriving with `headers`: a server span named `name`, a child
/// of their `traceparent` if any; `None` when not traced (no exporter, or sampled out).
fn incoming(
    headers: &HeaderMap,
    name: impl FnOnce() -> Cow<'static, str>,
    attributes: impl FnOnce() -> Vec<KeyValue>,
) -> Option<Context> {
    let tracer = TRACER.get()?;
    let parent = TraceContextPropagator::new().extract(&Headers(headers));
    let span = tracer
        .span_builder(name())
        .with_kind(SpanKind::Server)
        .start_with_context(tracer, &parent);
    let cx = parent.with_span(span);
    if !cx.span().span_context().is_sampled() {
        return None;
    }
    cx.span().set_attributes(attributes());
    Some(cx)
}

/// Runs `future` traced as `cx` (as it is, when untraced), and ends that span with what
/// `describe` says of its output.
async fn traced<F: Future>(
    cx: Option<Context>,
    future: F,
    describe: impl FnOnce(&F::Output) -> (Vec<KeyValue>, Option<String>),
) -> F::Output {
    let Some(cx) = cx else {
        return future.await;
    };
    let output = future.with_context(cx.clone()).await;
    let (attributes, failed) = describe(&output);
    let span = cx.span();
    span.set_attributes(attributes);
    if let Some(why) = failed {
        span.set_status(Status::error(why));
    }
    span.end();
    output
}

/// Runs `future` as the child span `name` of the current request's trace, described
/// by `describe` once it is done; only when that request is traced.
pub(crate) async fn child<F: Future>(
    name: &'static str,
    future: F,
    describe: impl FnOnce(&F::Output) -> Vec<KeyValue>,
) -> F::Output {
    let Some(tracer) = TRACER.get() else {
        return future.await;
    };
    let parent = Context::current();
    if !parent.span().span_context().is_sampled() {
        return future.await;
    }
    let cx = parent.with_span(tracer.start_with_context(name, &parent));
    traced(Some(cx), future, |output| (describe(output), None)).await
}
