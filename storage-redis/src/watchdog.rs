//! Watchdogs: renew a lease at a third of its ttl while its guard lives (Redisson's
//! watchdog), say when a renewal finds it gone, release it on drop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use redis::{aio, ConnectionLike};
use sluicegate_core::{Grant, LeaseError, LeaseRequest, Ticks};

use crate::error::Error;
use crate::lease::RedisLeases;

/// What a watchdog renews: a lease on one key.
#[derive(Debug, Clone)]
struct Watched {
    leases: RedisLeases,
    key: Vec<u8>,
    owner: Vec<u8>,
    ttl: Ticks,
}

impl Watched {
    fn new(leases: &RedisLeases, request: &LeaseRequest<'_>) -> Self {
        Self {
            leases: leases.clone(),
            key: request.key.to_vec(),
            owner: request.owner.to_vec(),
            ttl: request.ttl,
        }
    }

    /// The renewals' and the release's request, at the server's time.
    fn request(&self) -> LeaseRequest<'_> {
        LeaseRequest::new(&self.key)
            .owner(&self.owner)
            .ttl(self.ttl)
    }

    /// A third of the ttl: two renewals can fail (a slow or absent server) before the
    /// lease expires.
    fn period(&self) -> Duration {
        Duration::from_micros((self.ttl / 3).max(1))
    }
}

/// A held lease renewed by a thread every `ttl / 3` while the guard lives. Dropping it
/// stops the thread, which releases the lease. If a renewal finds the lease gone
/// (expired while renewals failed, or deleted), [`LeaseGuard::is_lost`] turns true and
/// renewing stops: the holder must stop acting on it.
#[derive(Debug)]
pub struct LeaseGuard {
    held: Grant,
    lost: Arc<AtomicBool>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl LeaseGuard {
    /// The lease as granted: its token is what the protected resource checks.
    pub fn held(&self) -> Grant {
        self.held
    }

    /// Whether a renewal found the lease gone.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// [`LeaseGuard`] for tokio: a task renews, [`AsyncLeaseGuard::lost`] can be awaited.
#[derive(Debug)]
pub struct AsyncLeaseGuard {
    held: Grant,
    lost: tokio::sync::watch::Receiver<bool>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl AsyncLeaseGuard {
    /// The lease as granted.
    pub fn held(&self) -> Grant {
        self.held
    }

    /// Whether a renewal found the lease gone.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Completes when a renewal finds the lease gone (never, while it is renewed).
    pub async fn lost(&self) {
        let mut lost = self.lost.clone();
        // An error means the task ended without losing the lease: wait forever.
        if lost.wait_for(|&lost| lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for AsyncLeaseGuard {
    fn drop(&mut self) {
        // The task releases the lease and ends.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn gone(result: &Result<Grant, Error>) -> bool {
    matches!(result, Err(Error::Lease(LeaseError::NotHeld)))
}

impl RedisLeases {
    /// Acquires the requested lease and, if granted, guards it with a thread that renews it
    /// on `con` (a connection of its own, say a [`Reconnecting`](crate::Reconnecting))
    /// every `ttl / 3` until the guard is dropped, then releases it. `Ok(None)` when
    /// denied.
    pub fn acquire_watched<C: ConnectionLike + Send + 'static>(
        &self,
        mut con: C,
        request: &LeaseRequest<'_>,
    ) -> Result<Option<LeaseGuard>, Error> {
        let Some(held) = self.acquire(&mut con, request)?.grant else {
            return Ok(None);
        };
        let watched = Watched::new(self, request);
        let lost = Arc::new(AtomicBool::new(false));
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (thread_lost, thread_stop) = (Arc::clone(&lost), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let (stopped, wake) = &*thread_stop;
            let mut guard = stopped.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                let (next, _) = wake
                    .wait_timeout_while(guard, watched.period(), |stopped| !*stopped)
                    .unwrap_or_else(|e| e.into_inner());
                guard = next;
                if *guard {
                    let _ = watched.leases.release(&mut con, &watched.request());
                    return;
                }
                if gone(&watched.leases.renew(&mut con, &watched.request())) {
                    thread_lost.store(true, Ordering::Release);
                    return;
                }
            }
        });
        Ok(Some(LeaseGuard {
            held,
            lost,
            stop,
            thread: Some(thread),
        }))
    }

    /// Asynchronous [`RedisLeases::acquire_watched`]: a tokio task renews on `con`.
    pub async fn acquire_watched_async<C: aio::ConnectionLike + Send + 'static>(
        &self,
        mut con: C,
        request: &LeaseRequest<'_>,
    ) -> Result<Option<AsyncLeaseGuard>, Error> {
        let Some(held) = self.acquire_async(&mut con, request).await?.grant else {
            return Ok(None);
        };
        let watched = Watched::new(self, request);
        let period = watched.period();
        let (lost_tx, lost) = tokio::sync::watch::channel(false);
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => {
                        let _ = watched.leases.release_async(&mut con, &watched.request()).await;
                        return;
                    }
                    () = tokio::time::sleep(period) => {
                        if gone(&watched.leases.renew_async(&mut con, &watched.request()).await) {
                            let _ = lost_tx.send(true);
                            return;
                        }
                    }
                }
            }
        });
        Ok(Some(AsyncLeaseGuard {
            held,
            lost,
            stop: Some(stop),
        }))
    }
}
