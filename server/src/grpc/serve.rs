//! The gRPC listener: its connections bounded as HTTP's are, served until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::task::JoinHandle;

use super::Rls;
use crate::conn::{Bounds, Gate};
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
        let conn = gate.accept().await;
        Some((Ok::<_, std::convert::Infallible>(conn), gate))
    });
    tracing::info!(listen = ?addr, "serving Envoy's rate limit service (gRPC)");
    tokio::spawn(
        tonic::transport::Server::builder()
            .timeout(config.timeout)
            .max_concurrent_streams(config.grpc_max_streams)
            .http2_keepalive_interval(Some(config.grpc_keepalive))
            .http2_keepalive_timeout(Some(config.grpc_keepalive))
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
