//! The gRPC listener: its connections bounded as HTTP's are, served until shutdown; a
//! connection with no call in flight for `--idle-timeout` is closed, whatever pings it
//! answers (gRPC's MAX_CONNECTION_IDLE).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use tokio::task::JoinHandle;
use tonic::codegen::http;

use super::Rls;
use crate::conn::{Bounds, Connection, Gate};
use crate::service::Service;
use crate::Config;

/// The gRPC server running on its task.
pub(crate) type Running = JoinHandle<Result<(), tonic::transport::Error>>;

/// Serves Envoy's rate limit service on `listener` until `until` completes.
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
    tracing::info!(listen = ?addr, "serving Envoy's rate limit service (gRPC)");
    tokio::spawn(
        tonic::transport::Server::builder()
            .timeout(config.timeout)
            .max_concurrent_streams(config.grpc_max_streams)
            .http2_keepalive_interval(Some(config.grpc_keepalive))
            .http2_keepalive_timeout(Some(config.grpc_keepalive))
            .layer(CountCalls)
            .add_service(Rls::server(service))
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

/// Counts each call on its connection (see [`Connection`]), which the connection's
/// idle deadline reads.
#[derive(Debug, Clone, Copy)]
struct CountCalls;

impl<S> tower_layer::Layer<S> for CountCalls {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted(inner)
    }
}

/// A service whose calls are counted on their connection.
#[derive(Debug, Clone)]
struct Counted<S>(S);

impl<S, B> tower_service::Service<http::Request<B>> for Counted<S>
where
    S: tower_service::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let connection = request.extensions_mut().remove::<Connection>();
        let call = connection
            .as_ref()
            .and_then(|c| c.calls.as_ref().map(|c| c.start()));
        if let Some(connection) = connection {
            // The peer's address where tonic puts it (`Request::remote_addr`).
            request.extensions_mut().insert(connection.tcp);
        }
        let answer = self.0.call(request);
        Box::pin(async move {
            let _call = call;
            answer.await
        })
    }
}
