//! Waiting in an etcd lock's line: a waiter watches the one key that blocks it (or, first
//! behind a full count, the lock's deletions), keeps its own key's etcd lease alive
//! meanwhile, and gives its place up (revokes that lease, which deletes the key) when the
//! wait ends without a grant, is cancelled or dropped.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Event, EventType, WatchFilterType, WatchOptions, WatchStream};
use sluicegate_core::rwlock::{LockMode, RwAcquired};
use sluicegate_core::{Decision, Grant, LeaseRequest};
use tokio::time::Instant;

use crate::error::Error;
use crate::kv::{expiry_in, Kv};
use crate::rwlock::{mode_of, prefix_end, Blocker, Entry, EtcdRwLock, Waiting};
use crate::watch::KeepAlive;

/// What a waiter learns when what it watched has changed.
enum Turn {
    /// Nothing blocks it: granted (its key as read).
    Granted(Entry),
    /// Something still blocks it: watch that from `revision`.
    Behind(Blocker, i64),
    /// Its own key is gone (its etcd lease lapsed): ask again.
    Lost,
}

impl EtcdRwLock {
    /// A lease in `mode` for the request's ttl, waiting in line up to `timeout`: see
    /// [`acquire_until`](Self::acquire_until), never cancelled.
    pub async fn acquire(
        &self,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        timeout: Duration,
    ) -> Result<RwAcquired, Error> {
        self.acquire_until(request, mode, timeout, std::future::pending())
            .await
    }

    /// A lease in `mode` for the request's ttl, waiting in line up to `timeout` or until
    /// `cancel` completes ([`Error::Cancelled`]).
    ///
    /// The ask creates the caller's key (its place: see [`EtcdRwLock`]); while blocked
    /// it watches only what blocks it, from the revision it read at (no release after
    /// the read is missed), and keeps its etcd lease alive every third of its ttl. When
    /// that changes it reads the line once (a `Range`): granted, or it watches what
    /// blocks it now. A wait that ends without
    /// a grant (deadline, cancel, an error, or the future dropped) revokes its etcd lease,
    /// deleting its key, so it leaves no place behind (a drop revokes from a task on the
    /// current runtime; without one the place expires with its ttl).
    pub async fn acquire_until(
        &self,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        timeout: Duration,
        cancel: impl Future<Output = ()>,
    ) -> Result<RwAcquired, Error> {
        let deadline = Instant::now().checked_add(timeout);
        tokio::pin!(cancel);
        'ask: loop {
            let asked = Instant::now();
            let entered = self.enter(request, mode, true).await?;
            let Some(mut waiting) = entered.waiting else {
                return Ok(entered.acquired);
            };
            let mut place = PlaceGuard {
                kv: self.kv().clone(),
                lease: Some(waiting.lease),
            };
            let ttl = waiting.lease_ttl;
            let period = Duration::from_micros((ttl / 3).max(1));
            let mut keeper = KeepAlive::new(self.kv().client(), waiting.lease, ttl);
            let mut held_until = asked + Duration::from_micros(ttl);
            let mut next_keep = Instant::now() + period;
            loop {
                let mut watch = self.watch(request, &waiting).await?;
                // Until the predecessor goes (or the watch is cancelled: read again).
                loop {
                    tokio::select! {
                        () = &mut cancel => {
                            place.give_up().await;
                            return Err(Error::Cancelled);
                        }
                        () = sleep_until(deadline) => {
                            place.give_up().await;
                            return self.timed_out(waiting.blocker.entry()).await;
                        }
                        () = tokio::time::sleep_until(next_keep) => {
                            next_keep += period;
                            if let Some(until) = keeper.renew().await {
                                held_until = until;
                            }
                        }
                        moved = moved(self, &waiting.blocker, &mut watch) => {
                            moved?;
                            break;
                        }
                    }
                }
                match self.turn(request, &waiting.mine).await? {
                    Turn::Granted(me) => {
                        let mine = &me.slot;
                        // The reader behind may be watching this key for its turn.
                        if waiting.touch && !self.kv().rewrite(mine, mine.holds, mine.lease).await?
                        {
                            continue;
                        }
                        place.lease = None;
                        let left = held_until.saturating_duration_since(Instant::now());
                        let left = u64::try_from(left.as_micros()).unwrap_or(u64::MAX);
                        let grant = Grant::new(mine.token, expiry_in(left), mine.holds);
                        let decision = Decision::admit(self.lease().max_holders(), 0, left, 0);
                        return Ok(RwAcquired::new(decision, Some(grant), None));
                    }
                    Turn::Behind(blocker, revision) => {
                        waiting.blocker = blocker;
                        waiting.revision = revision;
                    }
                    Turn::Lost => continue 'ask,
                }
            }
        }
    }

    /// A watch on what blocks the waiter, from after the revision read: one key, or the
    /// lock's deletions for the first reader behind a full count.
    async fn watch(
        &self,
        request: &LeaseRequest<'_>,
        waiting: &Waiting,
    ) -> Result<WatchStream, Error> {
        let options = WatchOptions::new().with_start_revision(waiting.revision.saturating_add(1));
        let deletes = options.clone().with_filters([WatchFilterType::NoPut]);
        let (key, options) = match &waiting.blocker {
            Blocker::Ahead(e) => (e.slot.key.clone(), deletes),
            Blocker::Writer(e) | Blocker::Counted(e) => (e.slot.key.clone(), options),
            Blocker::Count(_) => {
                let lock = self.lock_prefix(request.key);
                let end = prefix_end(&lock);
                (lock, deletes.with_range(end))
            }
        };
        Ok(self.kv().client().watch(key, Some(options)).await?)
    }

    /// Where the waiter `mine` stands: one `Range` reading the line.
    async fn turn(&self, request: &LeaseRequest<'_>, mine: &Entry) -> Result<Turn, Error> {
        let line = self.line(request.key).await?;
        let me = line
            .entries
            .iter()
            .position(|e| e.slot.key == mine.slot.key);
        let Some(i) = me else {
            return Ok(Turn::Lost);
        };
        let me = &line.entries[i];
        Ok(match self.blocker(&line.entries[..i], me.mode) {
            None => Turn::Granted(me.clone()),
            Some(blocker) => Turn::Behind(blocker, line.revision),
        })
    }

    /// The denial of a wait that reached its deadline, with the time `blocker`'s etcd
    /// lease has left.
    async fn timed_out(&self, blocker: &Entry) -> Result<RwAcquired, Error> {
        let left = self.kv().lease_left(blocker.slot.lease).await?;
        let decision = Decision::deny(self.lease().max_holders(), 0, Some(left), left);
        Ok(RwAcquired::new(decision, None, None))
    }
}

/// Completes when what `blocker` names has changed so as to perhaps let the waiter in (or
/// the watch is cancelled, or its stream ended); counts every event delivered as a wake.
async fn moved(lock: &EtcdRwLock, blocker: &Blocker, watch: &mut WatchStream) -> Result<(), Error> {
    let lets_in = |event: &Event| match (blocker, event.event_type()) {
        (_, EventType::Delete) | (Blocker::Counted(_), _) => true,
        // A writer's key rewritten shared: downgraded.
        (Blocker::Writer(_), EventType::Put) => {
            event.kv().and_then(mode_of) == Some(LockMode::Shared)
        }
        _ => false,
    };
    while let Some(response) = watch.message().await? {
        lock.woken(response.events().len());
        if response.events().iter().any(lets_in) || response.canceled() {
            return Ok(());
        }
    }
    Ok(())
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A waiter's place: revoked (its key deleted) unless taken by a grant.
struct PlaceGuard {
    kv: Kv,
    lease: Option<i64>,
}

impl PlaceGuard {
    async fn give_up(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.kv.revoke(lease).await;
        }
    }
}

impl Drop for PlaceGuard {
    fn drop(&mut self) {
        let (Some(lease), Ok(runtime)) = (self.lease, tokio::runtime::Handle::try_current()) else {
            return;
        };
        let kv = self.kv.clone();
        runtime.spawn(async move { kv.revoke(lease).await });
    }
}
