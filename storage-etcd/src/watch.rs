//! Waiting for a lease by watching its keys, and holding one with etcd's keep-alive.

use std::time::Duration;

use etcd_client::{Client, Event, EventType, LeaseKeepAliveStream, LeaseKeeper, WatchOptions};
use sluicegate_core::{Acquired, Grant, LeaseRequest, Ticks};
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

    /// [`acquire_waiting`](Self::acquire_waiting), with the etcd lease behind a grant and
    /// the instant before the attempt that got it (before etcd granted its ttl).
    async fn held_waiting(
        &self,
        request: &LeaseRequest<'_>,
        max_wait: Duration,
    ) -> Result<(Acquired, Option<(Held, Instant)>), Error> {
        let deadline = Instant::now() + max_wait;
        loop {
            let asked = Instant::now();
            let attempt = self.attempt(request).await?;
            if attempt.held.is_some() || Instant::now() >= deadline {
                return Ok((attempt.acquired, attempt.held.map(|held| (held, asked))));
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
    /// the process's own clock says. [`EtcdLeaseGuard::is_lost`] turns true when a
    /// keep-alive finds the lease gone, or when none was answered for the ttl (etcd cut
    /// off: it may have deleted the key by its clock and granted it to another), counted
    /// on this process's clock from before the last answered keep-alive was sent, so it
    /// errs toward "lost". Then the task ends: no more keep-alives, and dropping the
    /// guard releases nothing, also when the drop comes as the deadline passes; a key
    /// etcd still holds expires with its lease. A release frees only the guard's own
    /// grant (the key's revision, its token), never one its owner acquired since. The
    /// holder must stop acting on a lost lease, and a resource checking tokens refuses it
    /// once a later holder has written.
    pub async fn acquire_watched(
        &self,
        request: &LeaseRequest<'_>,
        max_wait: Duration,
    ) -> Result<Option<EtcdLeaseGuard>, Error> {
        let (_, Some((held, asked))) = self.held_waiting(request, max_wait).await? else {
            return Ok(None);
        };
        let period = Duration::from_micros((held.left / 3).max(1));
        let mut keeper = KeepAlive::new(self.client(), held.lease, held.left);
        let leases = self.clone();
        let (lost_tx, lost) = tokio::sync::watch::channel(false);
        // The guard holds the sender: dropping it completes `stopped`.
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let (key, owner) = (request.key.to_vec(), request.owner.to_vec());
        let token = held.grant.token;
        tokio::spawn(async move {
            // etcd holds the lease at least until then: it counts the ttl from later.
            let mut held_until = asked + keeper.granted;
            loop {
                let renewed = async {
                    tokio::time::sleep(period).await;
                    keeper.renew().await
                };
                tokio::select! {
                    // A passed deadline wins over a drop and a renewal: a lost lease stays so.
                    biased;
                    () = tokio::time::sleep_until(held_until) => break,
                    _ = &mut stopped => {
                        // A timer fires only at the runtime's next turn: a drop seen first
                        // reads the clock.
                        if Instant::now() >= held_until {
                            break;
                        }
                        let release = LeaseRequest::new(&key).owner(&owner);
                        let _ = leases.release_once(&release, Some(token)).await;
                        return;
                    }
                    renewed = renewed => held_until = renewed.unwrap_or(held_until),
                }
            }
            let _ = lost_tx.send(true);
        });
        Ok(Some(EtcdLeaseGuard {
            held: held.grant,
            lost,
            _stop: stop,
        }))
    }
}

/// One etcd lease's keep-alives, on a stream opened again when it breaks (etcd restarted,
/// unreachable).
pub(crate) struct KeepAlive {
    client: Client,
    lease: i64,
    /// The ttl a new stream's first keep-alive is counted to give (its answer is not shown).
    granted: Duration,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
}

impl KeepAlive {
    /// The keep-alives of `lease`, granted `granted` ticks.
    pub(crate) fn new(client: Client, lease: i64, granted: Ticks) -> Self {
        Self {
            client,
            lease,
            granted: Duration::from_micros(granted),
            stream: None,
        }
    }

    /// One keep-alive: the instant until which its answer shows the lease held (the
    /// instant before sending plus the ttl answered, so etcd's lease outlives it; already
    /// past once the lease is gone), or `None` if none came.
    pub(crate) async fn renew(&mut self) -> Option<Instant> {
        let sent = Instant::now();
        let Some((keeper, answers)) = self.stream.as_mut() else {
            return match self.client.clone().lease_keep_alive(self.lease).await {
                Ok(stream) => {
                    self.stream = Some(stream);
                    Some(sent + self.granted)
                }
                // Opening reads the first answer: this error says it had no ttl left.
                Err(etcd_client::Error::LeaseKeepAliveError(_)) => Some(sent),
                Err(_) => None,
            };
        };
        let answer = async {
            keeper.keep_alive().await.ok()?;
            answers.message().await.ok()?
        };
        let Some(answer) = answer.await else {
            self.stream = None;
            return None;
        };
        Some(sent + Duration::from_secs(u64::try_from(answer.ttl()).unwrap_or(0)))
    }
}

/// A lease kept alive by a task while the guard lives; dropping it releases the lease
/// unless it is lost.
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

    /// Whether the lease may be gone: a keep-alive found it gone, or none was answered
    /// within its ttl (see [`EtcdLeases::acquire_watched`]); once true, it stays true.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Completes when the lease may be gone, as [`is_lost`](Self::is_lost) says; never
    /// while it is kept alive (the task only ends otherwise once the guard is dropped).
    pub async fn lost(&self) {
        let _ = self.lost.clone().wait_for(|&lost| lost).await;
    }
}
