//! Waiting for a lease: a table behind a mutex whose releases wake the threads and tasks
//! waiting in it.

use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::error::{AcquireError, Released};
use crate::memory::lease_table::Locked;
use crate::{Decision, Ticks};

/// A value behind a mutex, with threads and tasks waiting for a lease in it to be freed.
pub(super) struct Waitable<T> {
    value: Mutex<T>,
    /// Waiters registered under the lock; a release wakes them only if there are any
    /// (waking costs a system call even with nobody to wake).
    waiting: AtomicUsize,
    freed: Condvar,
    #[cfg(feature = "tokio")]
    notify: tokio::sync::Notify,
}

impl<T> Waitable<T> {
    pub(super) fn new(value: T) -> Self {
        Self {
            value: Mutex::new(value),
            waiting: AtomicUsize::new(0),
            freed: Condvar::new(),
            #[cfg(feature = "tokio")]
            notify: tokio::sync::Notify::new(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, T> {
        // Transitions do not panic, but a poisoned lock must not turn every later call
        // into a panic either.
        self.value.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every waiter if `released` freed a lease; called with the lock released.
    pub(super) fn woken_by(&self, released: &Released) {
        let freed = matches!(released, Ok(grant) if grant.holds == 0);
        if freed && self.waiting.load(Ordering::SeqCst) > 0 {
            // A waiter registers under the lock and keeps it until it sleeps (a lease
            // freed lock-free is freed without it): taking the lock waits for that.
            drop(self.lock());
            self.freed.notify_all();
            #[cfg(feature = "tokio")]
            self.notify.notify_waiters();
        }
    }

    /// After a first attempt was denied, runs `attempt` (on the value and a clock
    /// reading) until it grants, fails other than busy, or `timeout` passes; between
    /// attempts the thread sleeps until a lease is freed or the earliest one expires.
    pub(super) fn wait<R>(
        &self,
        timeout: Duration,
        read: impl Fn() -> Ticks,
        mut attempt: impl FnMut(&mut T, Ticks) -> Result<R, AcquireError>,
    ) -> Result<R, AcquireError> {
        let mut deadline = Deadline::new(timeout);
        let mut value = self.lock();
        loop {
            // Registered before the attempt: a release after it sees the waiter.
            let waiting = Waiting::new(&self.waiting);
            let pause = match deadline.after(attempt(&mut value, read())) {
                Ok(pause) => pause,
                Err(done) => return done,
            };
            value = self
                .freed
                .wait_timeout(value, pause)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            drop(waiting);
        }
    }

    /// [`wait`](Self::wait) as a future.
    #[cfg(feature = "tokio")]
    pub(super) async fn wait_async<R>(
        &self,
        timeout: Duration,
        read: impl Fn() -> Ticks,
        mut attempt: impl FnMut(&mut T, Ticks) -> Result<R, AcquireError>,
    ) -> Result<R, AcquireError> {
        let mut deadline = Deadline::new(timeout);
        loop {
            // Registered before the attempt, so a release right after it is not missed.
            let mut notified = core::pin::pin!(self.notify.notified());
            notified.as_mut().enable();
            let _waiting = Waiting::new(&self.waiting);
            let now = read();
            let pause = match deadline.after(attempt(&mut self.lock(), now)) {
                Ok(pause) => pause,
                Err(done) => return done,
            };
            let _ = tokio::time::timeout(pause, notified).await;
        }
    }
}

/// The end of a wait, fixed at the first denial: an attempt that succeeds at once (and
/// every `try_acquire`) reads no second clock.
pub(super) struct Deadline {
    timeout: Duration,
    /// `Some(None)` once started with no representable end: wait forever.
    at: Option<Option<Instant>>,
}

impl Deadline {
    pub(super) const fn new(timeout: Duration) -> Self {
        Self { timeout, at: None }
    }

    /// How long to sleep after an attempt that was denied, or else (granted, failed, or
    /// the deadline passed) what the wait returns: the attempt's answer.
    fn after<R>(
        &mut self,
        attempt: Result<R, AcquireError>,
    ) -> Result<Duration, Result<R, AcquireError>> {
        match attempt {
            Err(AcquireError::Busy(denied)) => match self.pause(&denied) {
                Some(pause) => Ok(pause),
                None => Err(Err(AcquireError::Busy(denied))),
            },
            done => Err(done),
        }
    }

    /// How long to sleep after `denied`: until the earliest lease expires or the
    /// deadline, `None` once the deadline has passed.
    fn pause(&mut self, denied: &Decision) -> Option<Duration> {
        if self.timeout.is_zero() {
            return None;
        }
        let now = Instant::now();
        let left = match *self.at.get_or_insert_with(|| now.checked_add(self.timeout)) {
            Some(at) => at
                .checked_duration_since(now)
                .filter(|left| !left.is_zero())?,
            None => Duration::MAX,
        };
        let expiry = denied
            .retry_after
            .map_or(Duration::MAX, Duration::from_micros);
        Some(left.min(expiry))
    }
}

/// One waiter registered in a [`Waitable`], from under its lock until dropped.
pub(super) struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    pub(super) fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<T> Locked for Waitable<T> {
    type Shard = T;
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock()
    }
}
