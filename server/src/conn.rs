//! Connections under bounds, so that slow or silent clients cannot hold the server: a
//! cap on open connections (the excess closed at once), a deadline for a request's head,
//! an idle deadline between requests (HTTP/2: with no call in flight, whatever else
//! arrives), and a shutdown that ends by a deadline.
//!
//! The deadlines live in the socket ([`Guarded`]) rather than in hyper, because hyper's
//! own header timer starts when a connection becomes ready for a request, so it cannot
//! tell a slow head from an idle keep-alive connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::Either;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// The bounds on connections (flags of `sluicegate serve`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// A request's head must arrive within this from its first byte (and a new
    /// connection's first byte within this from its opening).
    pub header: Duration,
    /// A keep-alive connection waiting for its next request is closed after this.
    pub idle: Duration,
}

/// What a connection is doing, as its socket sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Opened, or a response written: waiting for a request's first byte.
    Idle,
    /// A request's head is arriving.
    Head,
    /// HTTP/1: no deadline, a request is being served (its own timeout applies).
    /// HTTP/2, past its first bytes: the idle deadline, counted from its last call.
    Open,
}

/// The calls of an HTTP/2 connection, as its service sees them: how many are in flight,
/// and since when none has been.
#[derive(Debug)]
pub(crate) struct Calls(Mutex<(usize, Instant)>);

impl Calls {
    #[cfg(feature = "grpc")]
    fn new() -> Self {
        Self(Mutex::new((0, Instant::now())))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, Instant)> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call begins; it ends when the returned guard is dropped.
    #[cfg(feature = "grpc")]
    pub(crate) fn start(self: &Arc<Self>) -> Call {
        self.lock().0 += 1;
        Call(Arc::clone(self))
    }

    /// Since when no call has been in flight; `None` while one is.
    fn quiet_since(&self) -> Option<Instant> {
        let (in_flight, since) = *self.lock();
        (in_flight == 0).then_some(since)
    }
}

/// A call in flight on an HTTP/2 connection (see `Calls::start`).
#[cfg(feature = "grpc")]
#[derive(Debug)]
pub(crate) struct Call(Arc<Calls>);

#[cfg(feature = "grpc")]
impl Drop for Call {
    fn drop(&mut self) {
        let mut calls = self.0.lock();
        calls.0 -= 1;
        calls.1 = Instant::now();
    }
}

/// A socket holding its place under the connection cap, whose reads fail with
/// `TimedOut` when the peer misses a deadline.
#[derive(Debug)]
pub(crate) struct Guarded {
    io: TcpStream,
    _permit: OwnedSemaphorePermit,
    /// Taken in the room kept for probes: serves them alone, one request.
    probes_only: bool,
    bounds: Bounds,
    phase: Phase,
    /// Set by the HTTP service when a request's head has been read; `None` for HTTP/2.
    serving: Option<Arc<AtomicBool>>,
    /// HTTP/2: its calls, counted by its service (see [`Guarded::http2`]).
    calls: Option<Arc<Calls>>,
    deadline: Pin<Box<Sleep>>,
    /// HTTP/2: this write has yielded once already (see `poll_write`).
    deferred: bool,
}

impl Guarded {
    fn new(io: TcpStream, permit: OwnedSemaphorePermit, bounds: Bounds, probes_only: bool) -> Self {
        Self {
            io,
            _permit: permit,
            probes_only,
            bounds,
            phase: Phase::Idle,
            serving: None,
            calls: None,
            // A new connection gets the head's deadline for its first byte.
            deadline: Box::pin(tokio::time::sleep(bounds.header)),
            deferred: false,
        }
    }

    /// Watches `serving`, which the HTTP service sets when it takes a request.
    pub(crate) fn http1(mut self, serving: Arc<AtomicBool>) -> Self {
        self.serving = Some(serving);
        self
    }

    /// Counts its calls, which the service starts from the connection's
    /// [`Connection`] in each request's extensions.
    #[cfg(feature = "grpc")]
    pub(crate) fn http2(mut self) -> Self {
        self.calls = Some(Arc::new(Calls::new()));
        self
    }

    fn arm(&mut self, after: Duration) {
        self.deadline.as_mut().reset(Instant::now() + after);
    }

    /// The phase after `read` bytes arrived.
    fn on_read(&mut self, read: usize) {
        if read == 0 {
            return;
        }
        match (self.phase, &self.serving) {
            (Phase::Idle, None) => {
                self.phase = Phase::Open;
                self.arm(self.bounds.idle);
            }
            (Phase::Idle, Some(_)) => {
                self.phase = Phase::Head;
                self.arm(self.bounds.header);
            }
            _ => {}
        }
    }

    /// HTTP/2 past its first bytes: `TimedOut` once no call has been in flight for the
    /// idle deadline; pings and other frames do not count.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some(calls) = self.calls.as_ref().filter(|_| self.phase == Phase::Open) else {
            return Poll::Pending;
        };
        while self.deadline.as_mut().poll(cx).is_ready() {
            let next = match calls.quiet_since() {
                None => Instant::now() + self.bounds.idle,
                Some(since) if since.elapsed() < self.bounds.idle => since + self.bounds.idle,
                Some(_) => return Poll::Ready(io::ErrorKind::TimedOut.into()),
            };
            self.deadline.as_mut().reset(next);
        }
        Poll::Pending
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.phase == Phase::Head
            && this
                .serving
                .as_ref()
                .is_some_and(|s| s.swap(false, Ordering::AcqRel))
        {
            this.phase = Phase::Open;
        }
        // Checked before reading too, so that a byte now and then does not stretch it.
        if this.phase != Phase::Open && this.deadline.is_elapsed() {
            return Poll::Ready(Err(io::ErrorKind::TimedOut.into()));
        }
        if let Poll::Ready(e) = this.poll_idle(cx) {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.on_read(buf.filled().len() - before);
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.phase != Phase::Open => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::ErrorKind::TimedOut.into())),
                Poll::Pending => Poll::Pending,
            },
            other => other,
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        // HTTP/2 (gRPC) writes the answers ready, then flushes: yielding once first (to
        // the back of the runtime's queue) lets the calls about to finish add theirs, and
        // one `sendto` carries them all rather than one each.
        if this.serving.is_none() {
            this.deferred = !this.deferred;
            if this.deferred {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        // HTTP/1 writes only answers: once one is written, the next request may come.
        if let (Some(serving), Poll::Ready(Ok(1..))) = (&this.serving, &written) {
            serving.store(false, Ordering::Release);
            this.phase = Phase::Idle;
            this.arm(this.bounds.idle);
            // hyper may not read again until woken: the deadline wakes it.
            let _ = this.deadline.as_mut().poll(cx);
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// What tonic puts in each request's extensions: the peer's address, and the
/// connection's calls (HTTP/2), which the service counts.
#[cfg(feature = "grpc")]
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    pub(crate) tcp: tonic::transport::server::TcpConnectInfo,
    pub(crate) calls: Option<Arc<Calls>>,
}

#[cfg(feature = "grpc")]
impl tonic::transport::server::Connected for Guarded {
    type ConnectInfo = Connection;

    fn connect_info(&self) -> Self::ConnectInfo {
        Connection {
            tcp: self.io.connect_info(),
            calls: self.calls.clone(),
        }
    }
}

/// A listener admitting at most its cap of open connections, and past it a few for
/// probes (HTTP); the excess is sent `refusal` (if the socket takes it at once) and
/// closed.
#[derive(Debug)]
pub(crate) struct Gate {
    listener: TcpListener,
    open: Arc<Semaphore>,
    probes: Arc<Semaphore>,
    bounds: Bounds,
    refusal: &'static [u8],
}

/// Connections past the cap kept for the kubelet's probes, so that clients holding every
/// slot do not get a pod restarted: liveness, readiness and startup at once, and one spare.
const PROBE_ROOM: usize = 4;

/// HTTP/1's answer to a connection over the cap.
pub(crate) const HTTP_REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 37\r\nretry-after: 1\r\nconnection: close\r\n\r\n{\"error\":\"too many open connections\"}";

impl Gate {
    pub(crate) fn new(
        listener: TcpListener,
        max: usize,
        bounds: Bounds,
        refusal: &'static [u8],
    ) -> Self {
        Self {
            listener,
            open: Arc::new(Semaphore::new(max)),
            probes: Arc::new(Semaphore::new(0)),
            bounds,
            refusal,
        }
    }

    /// Keeps [`PROBE_ROOM`] connections past the cap for probes.
    pub(crate) fn with_probe_room(mut self) -> Self {
        self.probes = Arc::new(Semaphore::new(PROBE_ROOM));
        self
    }

    /// The next connection under the cap.
    pub(crate) async fn accept(&self) -> Guarded {
        loop {
            let stream = match self.listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was taken:
                    // wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let permit = match Arc::clone(&self.open).try_acquire_owned() {
                Ok(permit) => Some((permit, false)),
                Err(_) => Arc::clone(&self.probes)
                    .try_acquire_owned()
                    .ok()
                    .map(|permit| (permit, true)),
            };
            match permit {
                Some((permit, probes_only)) => {
                    let _ = stream.set_nodelay(true);
                    return Guarded::new(stream, permit, self.bounds, probes_only);
                }
                None => {
                    let _ = stream.try_write(self.refusal);
                }
            }
        }
    }
}

/// Waits for `tasks` until `deadline`, then ends those left.
async fn drain(tasks: &mut tokio::task::JoinSet<()>, deadline: Duration) {
    let finished = tokio::time::timeout(deadline, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(
            left = tasks.len(),
            "shutdown deadline passed; closing the connections left"
        );
        tasks.shutdown().await;
    }
}

/// The answer to a request other than a probe on a connection of the probes' room.
fn over_the_cap() -> axum::response::Response {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    let body = axum::Json(serde_json::json!({ "error": "too many open connections" }));
    let headers = [(header::RETRY_AFTER, "1"), (header::CONNECTION, "close")];
    (StatusCode::SERVICE_UNAVAILABLE, headers, body).into_response()
}

/// Serves HTTP/1 on `gate`'s connections until `stopped`, then lets each finish its
/// request in flight for at most `deadline`. A connection of the probes' room is
/// answered one request, at one of the `probes` paths.
pub(crate) async fn serve_http1(
    gate: Gate,
    app: axum::Router,
    probes: &'static [&'static str],
    stopped: tokio::sync::watch::Receiver<bool>,
    deadline: Duration,
) {
    let mut tasks = tokio::task::JoinSet::new();
    let mut stop = stopped.clone();
    loop {
        let guarded = tokio::select! {
            guarded = gate.accept() => guarded,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        while tasks.try_join_next().is_some() {}
        let serving = Arc::new(AtomicBool::new(false));
        let probes_only = guarded.probes_only;
        let io = hyper_util::rt::TokioIo::new(guarded.http1(Arc::clone(&serving)));
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
            serving.store(true, Ordering::Release);
            if probes_only && !probes.contains(&request.uri().path()) {
                return Either::Left(std::future::ready(Ok(over_the_cap())));
            }
            Either::Right(tower_service::Service::call(&mut app.clone(), request))
        });
        let mut stop = stopped.clone();
        tasks.spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .header_read_timeout(None)
                .keep_alive(!probes_only)
                .serve_connection(io, service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = stop.wait_for(|stop| *stop) => {}
            }
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
    }
    drop(gate);
    drain(&mut tasks, deadline).await;
}

#[cfg(test)]
mod tests {
    /// The refusal's `content-length` is its body's length, so a client reads it whole.
    #[test]
    fn the_refusal_declares_its_body_length() {
        let text = std::str::from_utf8(super::HTTP_REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let declared = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap();
        assert_eq!(declared.parse::<usize>().unwrap(), body.len());
        assert!(serde_json::from_str::<serde_json::Value>(body).is_ok());
    }
}
