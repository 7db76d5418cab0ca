//! Waiting for a lease by watching its keys, and holding one with etcd's keep-alive.

use std::time::Duration;

use etcd_client::{Event, EventType, LeaseKeepAliveStream, LeaseKeeper, WatchOptions};
use sluicegate_core::{Acquired, Grant, LeaseRequest};
use tokio::time::Instant;

use crate::error::Error;
use crate::leases::{is_slot, EtcdLeases, Held};

impl EtcdLeases {
    /// Acquires the request's lease, waiting up to `max_wait` while it is held: after a
    /// denial it watches the key's slots from the revision the denial read, and tries
    /// again when one is deleted (released, or its lease expired), so a release is seen
    /// within a round trip, not a polling interval, and none after the read is missed.
    /// The answer is the last attempt's: a denial once `max_wait` has passed.
    pub async fn acquire_waiting(
        &self,
        request: &LeaseRequest<'_>,
        max_wait: Duration,
    ) -> Result<Acquired, Error> {
        Ok(self.held_waiting(request, max_wait).await?.0)
    }

    /// [`acquire_waiting`](Self::acquire_waiting), with the etcd lease behind a grant.
    async fn held_waiting(
        &self,
        request: &LeaseRequest<'_>,
        max_wait: Duration,
    ) -> Result<(Acquired, Option<Held>), Error> {
        let deadline = Instant::now() + max_wait;
        loop {
            let attempt = self.attempt(request).await?;
            if attempt.held.is_some() || Instant::now() >= deadline {
                return Ok((attempt.acquired, attempt.held));
            }
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(attempt.revision.saturating_add(1));
            let prefix = self.slots_prefix(request.key);
            let mut watch = (self.client()).watch(prefix.clone(), Some(options)).await?;
            let freed = |event: &Event| {
                event.event_type() == EventType::Delete
                    && event.kv().is_some_and(|kv| is_slot(&prefix, kv.key()))
            };
            let deleted = async {
                while let Some(response) = watch.message().await? {
                    // A cancelled watch (history compacted) says nothing: try again.
                    if response.canceled() || response.events().iter().any(freed) {
                        break;
                    }
                }
                Ok::<(), Error>(())
            };
            if let Ok(result) = tokio::time::timeout_at(deadline, deleted).await {
                result?;
            }
        }
    }

    /// Acquires the request's lease (waiting up to `max_wait` as
    /// [`acquire_waiting`](Self::acquire_waiting) does) and, if granted, keeps its etcd
    /// lease alive from a task, every third of the ttl etcd granted (whole seconds, so a
    /// sub-second ttl does not renew every millisecond), until the guard is dropped,
    /// which releases it. `Ok(None)` when still held by others after `max_wait`.
    ///
    /// The keep-alive is the watchdog: if this process stops (a pause, a crash) the
    /// keep-alives stop and etcd deletes the key once the lease's ttl has passed, whatever
    /// the process's own clock says. A keep-alive that finds the lease gone sets
    /// [`EtcdLeaseGuard::is_lost`]; the holder must stop acting on it, and a resource
    /// checking tokens refuses it once a later holder has written.
    pub async fn acquire_watched(
        &self,
        request: &LeaseRequest<'_>,
        max_wait: Duration,
    ) -> Result<Option<EtcdLeaseGuard>, Error> {
        let (_, Some(held)) = self.held_waiting(request, max_wait).await? else {
            return Ok(None);
        };
        // A stream that cannot be opened now is opened at the next period, as a broken
        // one is: the lease is granted, and an error here would leave it held until its
        // ttl with no guard to release it.
        let mut stream = self.client().lease_keep_alive(held.lease).await.ok();
        let period = Duration::from_micros((held.left / 3).max(1));
        let (lost_tx, lost) = tokio::sync::watch::channel(false);
        // The guard holds the sender: dropping it completes `stopped`.
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let leases = self.clone();
        let (key, owner) = (request.key.to_vec(), request.owner.to_vec());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => {
                        let release = LeaseRequest::new(&key).owner(&owner);
                        let _ = sluicegate_core::AsyncLeaseHost::release(&leases, &release).await;
                        return;
                    }
                    () = tokio::time::sleep(period) => {
                        // A broken stream (etcd restarted, unreachable) is opened again at
                        // the next period; only an answer with no ttl left says the lease
                        // is gone.
                        if stream.is_none() {
                            stream = leases.client().lease_keep_alive(held.lease).await.ok();
                        }
                        let Some((keeper, answers)) = stream.as_mut() else { continue };
                        match keep_alive(keeper, answers).await {
                            Some(ttl) if ttl <= 0 => {
                                let _ = lost_tx.send(true);
                                return;
                            }
                            Some(_) => {}
                            None => stream = None,
                        }
                    }
                }
            }
        });
        Ok(Some(EtcdLeaseGuard {
            held: held.grant,
            lost,
            _stop: stop,
        }))
    }
}

/// One keep-alive: the ttl etcd answers the lease has (0 once gone), or `None` if the
/// stream broke.
async fn keep_alive(keeper: &mut LeaseKeeper, answers: &mut LeaseKeepAliveStream) -> Option<i64> {
    keeper.keep_alive().await.ok()?;
    Some(answers.message().await.ok()??.ttl())
}

/// A lease kept alive by a task while the guard lives; dropping it releases the lease.
#[derive(Debug)]
pub struct EtcdLeaseGuard {
    held: Grant,
    lost: tokio::sync::watch::Receiver<bool>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl EtcdLeaseGuard {
    /// The lease as granted: its token is what the protected resource checks.
    pub fn held(&self) -> Grant {
        self.held
    }

    /// Whether a keep-alive found the lease gone.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Completes when a keep-alive finds the lease gone; never while it is kept alive
    /// (the task only ends otherwise once the guard is dropped).
    pub async fn lost(&self) {
        let _ = self.lost.clone().wait_for(|&lost| lost).await;
    }
}
