//! Watchdogs: renew a lease at a third of its ttl while its guard lives (Redisson's
//! watchdog), say when it may be gone (a renewal found it gone, or none was answered
//! for its ttl), release it on drop unless it is lost.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::{aio, ConnectionLike};
use sluicegate_core::{Grant, LeaseError, LeaseRequest, Ticks};

use crate::error::Error;
use crate::lease::RedisLeases;

/// How long dropping a [`LeaseGuard`] waits for its thread to release the lease: a round
/// trip to a server that answers, far under a connection's timeout.
const RELEASE_WAIT: Duration = Duration::from_millis(50);

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

    /// Until when a grant asked for at `sent` holds the lease at least: Redis counts the
    /// ttl from later.
    fn held_until(&self, sent: Instant) -> Instant {
        sent + Duration::from_micros(self.ttl)
    }

    /// Until when a renewal sent at `sent` shows the lease held: already past when it
    /// found the lease gone; `None` when it renewed nothing (no answer, or an error).
    fn renewed_until(&self, sent: Instant, answer: &Result<Grant, Error>) -> Option<Instant> {
        match answer {
            Ok(_) => Some(self.held_until(sent)),
            Err(Error::Lease(LeaseError::NotHeld)) => Some(sent),
            Err(_) => None,
        }
    }

    /// A [`LeaseGuard`]'s thread: renews on `con` every period until the lease is lost,
    /// or the guard is dropped, then releases it unless it is lost.
    fn renew_until_dropped(&self, shared: &Shared, con: &mut impl ConnectionLike) {
        let mut state = shared.lock();
        loop {
            (state, _) = (shared.wake)
                .wait_timeout_while(state, self.period(), |state| !state.stopped)
                .unwrap_or_else(|e| e.into_inner());
            if state.lost() {
                return;
            }
            let stopped = state.stopped;
            // Unlocked while calling Redis: `is_lost` and the drop read the state meanwhile.
            drop(state);
            if stopped {
                let _ = self.leases.release(con, &self.request());
                return;
            }
            let sent = Instant::now();
            let answer = self.leases.renew(con, &self.request());
            state = shared.lock();
            if state.renewed(self.renewed_until(sent, &answer)) {
                return;
            }
        }
    }
}

/// What a [`LeaseGuard`] and its thread share.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug)]
struct State {
    /// Set when the guard drops.
    stopped: bool,
    /// Set when the thread ends: the lease released, or lost.
    ended: bool,
    /// Until when Redis surely holds the lease; `None` once lost, for good.
    held_until: Option<Instant>,
}

impl State {
    /// Whether the lease may be gone; the first call past the deadline makes it lost.
    fn lost(&mut self) -> bool {
        if self.held_until.is_some_and(|until| Instant::now() >= until) {
            self.held_until = None;
        }
        self.held_until.is_none()
    }

    /// Moves the deadline to a renewal's, unless the lease is lost already (an answer
    /// coming after the deadline revives nothing); says whether it is lost.
    fn renewed(&mut self, until: Option<Instant>) -> bool {
        if let (false, Some(until)) = (self.lost(), until) {
            self.held_until = Some(until);
        }
        self.lost()
    }
}

/// A held lease renewed by a thread every `ttl / 3` while the guard lives. Dropping it
/// stops the thread, which releases the lease unless it is lost. The drop waits for that
/// release at most 50 ms, so a Redis that does not answer holds the caller no longer;
/// the thread releases once its call in flight returns, unless the lease is lost by then.
/// [`LeaseGuard::is_lost`] turns true when a renewal finds the lease gone, or when none
/// was answered for the ttl (Redis unreachable or stopped: it may have expired the lease
/// by its clock and granted it to another), counted from before the last answered
/// request was sent; a renewal that hangs does not delay it. Then renewing stops, for
/// good: the holder must stop acting on the lease.
#[derive(Debug)]
pub struct LeaseGuard {
    held: Grant,
    shared: Arc<Shared>,
}

impl LeaseGuard {
    /// The lease as granted: its token is what the protected resource checks.
    pub fn held(&self) -> Grant {
        self.held
    }

    /// Whether the lease may be gone: a renewal found it gone, or none was answered within
    /// its ttl; once true, it stays true.
    pub fn is_lost(&self) -> bool {
        self.shared.lock().lost()
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.stopped = true;
        self.shared.wake.notify_all();
        // Bounded: a call hanging on a Redis that does not answer ends on its own.
        let _ = (self.shared.wake).wait_timeout_while(state, RELEASE_WAIT, |state| !state.ended);
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

    /// Whether the lease may be gone, as [`LeaseGuard::is_lost`] says; once true, it
    /// stays true.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Completes when the lease may be gone (never, while it is renewed).
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
        // The task releases the lease, unless lost, and ends.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl RedisLeases {
    /// Acquires the requested lease and, if granted, guards it with a thread that renews it
    /// on `con` (a connection of its own, say a [`Reconnecting`](crate::Reconnecting))
    /// every `ttl / 3` until the guard is dropped, then releases it. `Ok(None)` when
    /// denied. See [`LeaseGuard`] for when it is lost.
    pub fn acquire_watched<C: ConnectionLike + Send + 'static>(
        &self,
        mut con: C,
        request: &LeaseRequest<'_>,
    ) -> Result<Option<LeaseGuard>, Error> {
        let asked = Instant::now();
        let Some(held) = self.acquire(&mut con, request)?.grant else {
            return Ok(None);
        };
        let watched = Watched::new(self, request);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                stopped: false,
                ended: false,
                held_until: Some(watched.held_until(asked)),
            }),
            wake: Condvar::new(),
        });
        let renewing = Arc::clone(&shared);
        std::thread::spawn(move || {
            watched.renew_until_dropped(&renewing, &mut con);
            renewing.lock().ended = true;
            renewing.wake.notify_all();
        });
        Ok(Some(LeaseGuard { held, shared }))
    }

    /// Asynchronous [`RedisLeases::acquire_watched`]: a tokio task renews on `con`, and
    /// declares the lease lost at its deadline even while a renewal hangs.
    pub async fn acquire_watched_async<C: aio::ConnectionLike + Send + 'static>(
        &self,
        mut con: C,
        request: &LeaseRequest<'_>,
    ) -> Result<Option<AsyncLeaseGuard>, Error> {
        let asked = Instant::now();
        let Some(held) = self.acquire_async(&mut con, request).await?.grant else {
            return Ok(None);
        };
        let watched = Watched::new(self, request);
        let period = watched.period();
        let (lost_tx, lost) = tokio::sync::watch::channel(false);
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut held_until = watched.held_until(asked);
            loop {
                let renewed = async {
                    tokio::time::sleep(period).await;
                    let sent = Instant::now();
                    let answer = watched
                        .leases
                        .renew_async(&mut con, &watched.request())
                        .await;
                    watched.renewed_until(sent, &answer)
                };
                let deadline = tokio::time::Instant::from_std(held_until);
                tokio::select! {
                    // A passed deadline wins over a drop: a lost lease is not released.
                    biased;
                    () = tokio::time::sleep_until(deadline) => break,
                    _ = &mut stopped => {
                        // A timer fires only at the runtime's next turn: a drop seen first
                        // reads the clock.
                        if Instant::now() >= held_until {
                            break;
                        }
                        let _ = watched.leases.release_async(&mut con, &watched.request()).await;
                        return;
                    }
                    until = renewed => held_until = until.unwrap_or(held_until),
                }
            }
            let _ = lost_tx.send(true);
        });
        Ok(Some(AsyncLeaseGuard {
            held,
            lost,
            stop: Some(stop),
        }))
    }
}
