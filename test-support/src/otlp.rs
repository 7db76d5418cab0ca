//! A real OTLP trace receiver: the collector's `TraceService` over gRPC on loopback
//! (generated from the published OpenTelemetry protos), keeping every span it is sent.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
pub use opentelemetry_proto::tonic::trace::v1::Span;

/// The receiver, serving on its own runtime until dropped.
pub struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    _runtime: tokio::runtime::Runtime,
}

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans = request
            .into_inner()
            .resource_spans
            .into_iter()
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(spans);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    /// Listens on a free loopback port.
    pub fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let spans = Arc::new(Mutex::new(Vec::new()));
        // Bound here, served there: a test may call this from within its own runtime.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking socket");
        let addr = listener.local_addr().expect("its address");
        let service = TraceServiceServer::new(Sink(Arc::clone(&spans)));
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("a Tokio socket");
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await
        });
        Self {
            addr,
            spans,
            _runtime: runtime,
        }
    }

    /// Its URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The spans received once `enough` holds of them, or when `within` has passed.
    pub fn spans_when(&self, within: Duration, enough: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = Instant::now() + within;
        loop {
            let spans = self.spans();
            if enough(&spans) || Instant::now() >= deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The text of `span`'s attribute `key` (numbers and booleans written out).
pub fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|a| a.key == key)?
        .value
        .as_ref()?;
    Some(match value.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}
