//! The gRPC listener: its connections bounded as HTTP's are, served until shutdown; a
//! connection with no call in flight for `--idle-timeout` is closed, whatever pings it
//! answers (gRPC's MAX_CONNECTION_IDLE); each call admitted before its message is read.
//! A quota stream (RLQS) is a call in flight for as long as it is open, and only its
//! first message is due within `--header-timeout`.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::Status;

use super::admitted::Admitted;
use super::kuadrant_rls::Kuadrant;
use super::rlqs::{Rlqs, Streams};
use super::wire::status;
use super::Rls;
use crate::conn::{Bounds, Call, Connection, Gate};
use crate::metrics::Shown;
use crate::service::auth::{authenticate, bearer};
use crate::service::Service;
use crate::Config;

/// The gRPC server running on its task.
pub(crate) type Running = JoinHandle<Result<(), tonic::transport::Error>>;

/// Serves Envoy's rate limit and quota services on `listener` until `until`
/// completes, when quota streams are told to expire their assignments and end.
pub(crate) fn spawn(
    listener: tokio::net::TcpListener,
    service: Arc<Service>,
    config: &Config,
    bounds: Bounds,
    until: impl Future<Output = ()> + Send + 'static,
) -> Running {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    let gate = Gate::new(listener, config.max_connections, bounds, b"");
    let incoming = futures_util::stream::unfold(gate, |gate| async {
        let conn = gate.accept().await.http2();
        Some((Ok::<_, std::convert::Infallible>(conn), gate))
    });
    tracing::info!(listen = ?addr, "serving Envoy's rate limit and quota services (gRPC)");
    let streams = Arc::new(Streams::new(
        Arc::clone(&service),
        config.rlqs_report_interval,
    ));
    // Weak: the service holds the metrics, and the streams hold the service.
    let shown: Arc<dyn Shown> = Arc::clone(&streams) as _;
    service.metrics.add_shown(Arc::downgrade(&shown));
    if service.backend.redis().is_none() && config.store.is_some() {
        tracing::warn!(
            "Envoy's quota service (RLQS) shares each limit among the streams of this replica \
             only, its decisions being in memory: with more than one replica, each hands out \
             the whole limit; serve it from one, or decide on Redis (--decisions)"
        );
    }
    let closing = Arc::clone(&streams);
    let until = async move {
        until.await;
        closing.close();
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .timeout(config.timeout)
            .max_concurrent_streams(config.grpc_max_streams)
            .http2_max_header_list_size(MAX_METADATA)
            .http2_keepalive_interval(Some(config.grpc_keepalive))
            .http2_keepalive_timeout(Some(config.grpc_keepalive))
            .layer(Admit {
                service: Arc::clone(&service),
                in_flight: Arc::new(Semaphore::new(config.grpc_max_calls)),
                message_within: config.header_timeout,
            })
            .add_service(Kuadrant::server(Arc::clone(&service)))
            .add_service(Rls::server(service))
            .add_service(Rlqs::server(streams))
            .serve_with_incoming_shutdown(incoming, until),
    )
}

/// Waits for `running` to finish its calls, at most `deadline`: tonic waits for every
/// connection to end, so what is left then is closed.
pub(crate) async fn finish(mut running: Running, deadline: std::time::Duration) {
    match tokio::time::timeout(deadline, &mut running).await {
        Ok(Ok(Err(e))) => tracing::error!(error = %e, "gRPC server"),
        Ok(Err(e)) => tracing::error!(error = %e, "gRPC server task"),
        Ok(Ok(Ok(()))) => {}
        Err(_) => {
            tracing::warn!("gRPC shutdown deadline passed; closing its connections");
            running.abort();
        }
    }
}

/// The most bytes of metadata a call may send: Envoy's calls carry a few short headers.
const MAX_METADATA: u32 = 8 * 1024;

/// Admits each call before its message is read, so that what a call not yet answered
/// holds is bounded: counted on its connection (see [`Connection`]), authenticated from
/// its metadata, one of `--grpc-max-calls` in flight, and its message due within
/// `--header-timeout`. A call refused is answered at once.
#[derive(Debug, Clone)]
struct Admit {
    service: Arc<Service>,
    in_flight: Arc<Semaphore>,
    message_within: Duration,
}

impl<S> tower_layer::Layer<S> for Admit {
    type Service = Admitting<S>;

    fn layer(&self, inner: S) -> Admitting<S> {
        Admitting {
            inner,
            admit: self.clone(),
        }
    }
}

/// A service whose calls are admitted by [`Admit`].
#[derive(Debug, Clone)]
struct Admitting<S> {
    inner: S,
    admit: Admit,
}

impl Admit {
    /// The call's caller and its place among the calls in flight, or why it has none.
    fn admit(
        &self,
        metadata: &http::HeaderMap,
    ) -> Result<(Admitted, OwnedSemaphorePermit), Status> {
        let served = self.service.served();
        let values = metadata.get_all("authorization");
        let token = bearer(values.iter().map(|v| v.as_bytes())).map_err(status)?;
        let app = authenticate(&served.snapshot, token)
            .and_then(|caller| caller.app())
            .map_err(status)?;
        let permit = Arc::clone(&self.in_flight)
            .try_acquire_owned()
            .map_err(|_| Status::resource_exhausted("too many calls in flight; retry"))?;
        Ok((Admitted { app, served }, permit))
    }
}

impl<S> tower_service::Service<http::Request<Body>> for Admitting<S>
where
    S: tower_service::Service<http::Request<Deadline<Body>>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let connection = request.extensions_mut().remove::<Connection>();
        let call = connection
            .as_ref()
            .and_then(|c| c.calls.as_ref().map(|c| c.start()));
        if let Some(connection) = connection {
            // The peer's address where tonic puts it (`Request::remote_addr`).
            request.extensions_mut().insert(connection.tcp);
        }
        let (admitted, permit) = match self.admit.admit(request.headers()) {
            Ok(admitted) => admitted,
            Err(refused) => return Box::pin(async move { Ok(refused.into_http()) }),
        };
        request.extensions_mut().insert(admitted);
        let within = self.admit.message_within;
        let stream = request.uri().path() == QUOTA_STREAM;
        let answer = self
            .inner
            .call(request.map(|body| Deadline::new(body, within, stream)));
        Box::pin(async move {
            let answered = answer.await;
            drop(permit);
            match call {
                // The stream's response outlives this future: so does its call.
                Some(call) if stream => {
                    answered.map(|r| r.map(|body| Body::new(Holding { body, _call: call })))
                }
                _ => answered,
            }
        })
    }
}

/// The path of the quota stream, a call as long as it is open.
const QUOTA_STREAM: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

/// A response holding its call in flight until it ends.
#[derive(Debug)]
struct Holding {
    body: Body,
    _call: Call,
}

impl http_body::Body for Holding {
    type Data = <Body as http_body::Body>::Data;
    type Error = <Body as http_body::Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A call's message, which fails once `within` has passed before it ends (a stream's:
/// before its first message arrives).
#[derive(Debug)]
pub(crate) struct Deadline<B> {
    body: B,
    /// None once a stream's first message has arrived.
    until: Option<Instant>,
    stream: bool,
    /// Made the first time the message is not all there: most arrive whole.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> Deadline<B> {
    fn new(body: B, within: Duration, stream: bool) -> Self {
        Self {
            body,
            until: Some(Instant::now() + within),
            stream,
            timer: None,
        }
    }
}

impl<B> http_body::Body for Deadline<B>
where
    B: http_body::Body + Unpin,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Data = B::Data;
    type Error = tonic::codegen::StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            if this.stream {
                this.until = None;
                this.timer = None;
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let Some(until) = this.until else {
            return Poll::Pending;
        };
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
        match timer.as_mut().poll(cx) {
            // A status in the error is the call's answer (tonic looks for one).
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(Status::deadline_exceeded(
                "the call's message took too long",
            ))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
