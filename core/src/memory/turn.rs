//! A waiter's turn: the one signal a release sends to the waiter it wakes, and the
//! handle that cancels a wait.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// What a blocked caller sleeps on: its own condition, so waking it wakes nobody else.
#[derive(Debug, Default)]
pub(super) struct Turn {
    signal: Mutex<Signal>,
    changed: Condvar,
    /// A blocked task's: a wake before it awaits is kept as the permit.
    #[cfg(feature = "tokio")]
    notify: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Signal {
    /// Sticky until the waiter sees it, so a wake before it sleeps is not lost.
    woken: bool,
    cancelled: bool,
}

impl Turn {
    /// Wakes the waiter; `false` if a wake was already pending.
    pub(super) fn wake(&self) -> bool {
        let fresh = !std::mem::replace(&mut self.signal().woken, true);
        self.notify_one();
        fresh
    }

    fn notify_one(&self) {
        self.changed.notify_one();
        #[cfg(feature = "tokio")]
        self.notify.notify_one();
    }

    pub(super) fn is_cancelled(&self) -> bool {
        self.signal().cancelled
    }

    /// Sleeps until woken, cancelled or `pause` has passed, and takes the wake.
    pub(super) fn sleep(&self, pause: Duration) {
        let signal = self.signal();
        let (mut signal, _) = self
            .changed
            .wait_timeout_while(signal, pause, |s| !s.woken && !s.cancelled)
            .unwrap_or_else(PoisonError::into_inner);
        signal.woken = false;
    }

    /// [`sleep`](Self::sleep) in a task.
    #[cfg(feature = "tokio")]
    pub(super) async fn sleep_async(&self, pause: Duration) {
        let pending = {
            let signal = self.signal();
            !signal.woken && !signal.cancelled
        };
        if pending {
            let _ = tokio::time::timeout(pause, self.notify.notified()).await;
        }
        self.signal().woken = false;
    }

    fn signal(&self) -> std::sync::MutexGuard<'_, Signal> {
        self.signal.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Cancels a blocking [`RwLeases::acquire`](super::RwLeases::acquire) (or
/// `acquire_async`) from another thread or task: the waiter gives up its place and returns
/// [`RwAcquireError::Cancelled`](super::RwAcquireError::Cancelled). Once cancelled, a
/// handle cancels every wait it is given.
#[derive(Debug, Clone, Default)]
pub struct WaitCancel(Arc<Turn>);

impl WaitCancel {
    /// A handle not yet cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ends the waits this handle was given, now and later.
    pub fn cancel(&self) {
        self.0.signal().cancelled = true;
        self.0.notify_one();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }

    pub(super) fn turn(&self) -> Arc<Turn> {
        Arc::clone(&self.0)
    }
}
