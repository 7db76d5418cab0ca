//! Waiting in an etcd lock's line: a waiter watches its predecessor's key only, keeps
//! its own key's etcd lease alive meanwhile, and gives its place up (revokes that lease,
//! which deletes the key) when the wait ends without a grant, is cancelled or dropped.

use std::future::Future;
use std::time::Duration;

use etcd_client::{
    EventType, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions,
    WatchStream,
};
use sluicegate_core::limits::MAX_LEASES;
use sluicegate_core::rwlock::{LockMode, RwAcquired};
use sluicegate_core::{Decision, Grant, LeaseRequest};
use tokio::time::Instant;

use crate::error::Error;
use crate::kv::{expiry_in, Kv};
use crate::rwlock::{entries, Entry, EtcdRwLock, Waiting};
use crate::watch::KeepAlive;

/// What a waiter learns when its predecessor has gone.
enum Turn {
    /// Nothing blocks it: granted.
    Granted,
    /// Another key ahead blocks it: watch that one from `revision`.
    Behind(Entry, i64),
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
    /// it watches only its predecessor's key, from the revision it read at (no release
    /// after the read is missed), and keeps its etcd lease alive every third of its ttl.
    /// When the predecessor goes it reads once (a `Txn` reading its own key and the
    /// latest key ahead that blocks it, `sort by create_revision desc, limit 1,
    /// max_create_revision`): granted, or it watches that key. A wait that ends without
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
                let mut watch = self.watch(&waiting).await?;
                // Until the predecessor goes (or the watch is cancelled: read again).
                loop {
                    tokio::select! {
                        () = &mut cancel => {
                            place.give_up().await;
                            return Err(Error::Cancelled);
                        }
                        () = sleep_until(deadline) => {
                            place.give_up().await;
                            return self.timed_out(&waiting.blocker).await;
                        }
                        () = tokio::time::sleep_until(next_keep) => {
                            next_keep += period;
                            if let Some(until) = keeper.renew().await {
                                held_until = until;
                            }
                        }
                        gone = gone(self, &mut watch) => {
                            gone?;
                            break;
                        }
                    }
                }
                match self.turn(request, &waiting.mine).await? {
                    Turn::Granted => {
                        place.lease = None;
                        let left = held_until.saturating_duration_since(Instant::now());
                        let left = u64::try_from(left.as_micros()).unwrap_or(u64::MAX);
                        let mine = &waiting.mine.slot;
                        let grant = Grant::new(mine.token, expiry_in(left), mine.holds);
                        let decision = Decision::admit(MAX_LEASES, 0, left, 0);
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

    /// A watch on the waiter's predecessor's key alone, from after the revision read.
    async fn watch(&self, waiting: &Waiting) -> Result<WatchStream, Error> {
        let options = WatchOptions::new().with_start_revision(waiting.revision.saturating_add(1));
        let key = waiting.blocker.slot.key.clone();
        Ok(self.kv().client().watch(key, Some(options)).await?)
    }

    /// Where the waiter `mine` stands: one `Txn` reading its own key and the latest key
    /// created before it that blocks it (for a reader, among the writers only).
    async fn turn(&self, request: &LeaseRequest<'_>, mine: &Entry) -> Result<Turn, Error> {
        let lock = self.lock_prefix(request.key);
        let blocking = match mine.mode {
            LockMode::Exclusive => lock.clone(),
            _ => self.mode_prefix(request.key, LockMode::Exclusive),
        };
        let before = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(i64::try_from(mine.slot.token).unwrap_or(i64::MAX) - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1);
        let txn = Txn::new().and_then([
            TxnOp::get(mine.slot.key.clone(), None),
            TxnOp::get(blocking, Some(before)),
        ]);
        let response = self.kv().client().txn(txn).await?;
        let revision = response.header().map_or(0, |h| h.revision());
        let mut got = response.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(got) => entries(&lock, got.kvs()),
            _ => Ok(Vec::new()),
        });
        let own = got.next().transpose()?.unwrap_or_default();
        if own.is_empty() {
            return Ok(Turn::Lost);
        }
        let ahead = got.next().transpose()?.unwrap_or_default();
        if let Some(blocker) = ahead.into_iter().next() {
            return Ok(Turn::Behind(blocker, revision));
        }
        // The latest key ahead may be one of another lock named under this one, which
        // `entries` leaves out: then read the whole line.
        let line = self.entries(request.key).await?;
        let me = line.iter().find(|e| e.slot.key == mine.slot.key);
        let Some(me) = me else {
            return Ok(Turn::Lost);
        };
        Ok(match crate::rwlock::blocker_of(&line, me) {
            None => Turn::Granted,
            Some(blocker) => Turn::Behind(blocker.clone(), revision),
        })
    }

    /// The denial of a wait that reached its deadline, with the time `blocker`'s etcd
    /// lease has left.
    async fn timed_out(&self, blocker: &Entry) -> Result<RwAcquired, Error> {
        let left = self.kv().lease_left(blocker.slot.lease).await?;
        let decision = Decision::deny(MAX_LEASES, 0, Some(left), left);
        Ok(RwAcquired::new(decision, None, None))
    }
}

/// Completes when the watched key is deleted (or the watch cancelled, or its stream
/// ended); counts every event delivered as a wake.
async fn gone(lock: &EtcdRwLock, watch: &mut WatchStream) -> Result<(), Error> {
    while let Some(response) = watch.message().await? {
        lock.woken(response.events().len());
        let deleted = (response.events().iter()).any(|e| e.event_type() == EventType::Delete);
        if deleted || response.canceled() {
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
