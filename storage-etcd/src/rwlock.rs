//! The lock family on etcd: exclusive, read-write and counted locks, fair by
//! construction, as etcd's own `concurrency.Mutex` builds a lock. Each acquirer is one
//! key on an etcd lease of its ttl, its place in line the key's `create_revision`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use sluicegate_core::rwlock::{LockMode, Place, RwAcquired, RwLease, RwState, MAX_WAITERS};
use sluicegate_core::{Concurrency, Decision, Grant, LeaseError, LeaseRequest, Ticks};

use crate::error::Error;
use crate::kv::{expiry_in, one_more, slot, to_token, value, Kv, Slot};
use crate::leases::{checked, connect};

/// How many times a call reads again after a transaction found the line changed under it.
const ATTEMPTS: usize = 8;

/// A family key's token field while its token is its `create_revision` (a new key's).
const TOKEN_AT_CREATE: u64 = 0;
/// A family key's token field while its token is its `mod_revision`: an upgrade's, whose
/// revision is known only once written (the key's next rewrite writes it out).
const TOKEN_AT_WRITE: u64 = u64::MAX;

/// Exclusive, read-write and counted locks on an etcd cluster, granted in the order asked.
///
/// An acquire of key `K` by owner `o` creates the etcd key `PREFIX K/rw/hex(o)` attached
/// to a new etcd lease of the request's ttl. Its value is the hold count (8 bytes,
/// big-endian), the mode (1 byte: 0 shared, 1 exclusive), the token (8 bytes; 0 while it
/// is the key's `create_revision`), then the owner. The keys of a lock, ordered by
/// `create_revision`, are its line, and a key is granted when nothing ahead blocks it:
/// - an **exclusive** key: no key ahead of it;
/// - a **shared** key: no exclusive key ahead of it (a reader arriving after a waiting
///   writer waits behind it: writer preference, no writer starved), and fewer keys ahead
///   than the lock's `max_holders` ([`counted`](Self::counted); 1024 otherwise).
///
/// A blocked waiter watches one thing, from the revision it read at (no change after the
/// read is missed): a writer its predecessor's key; a reader the latest writer's key
/// ahead of it (whose release or downgrade lets in the readers behind it, up to the
/// count); a reader past the count its predecessor's key, except the first reader behind
/// a full count of holders, which watches the lock's deletions (any holder's release
/// lets it in). A reader granted after it queued past the count rewrites its key once,
/// so the reader behind it moves up. A release wakes only waiters it may let in: the next
/// writer, the readers behind a writer up to the count, or the first reader behind a
/// full count (and, once granted, the one behind it).
///
/// **Fencing token**: the key's `create_revision`. etcd's revision counts every write to
/// the cluster and never goes back, and every key granted before a writer was created
/// before it: a writer's token is above every token granted before it on the lock,
/// readers' included. Re-entry, renewal and downgrade keep the token.
///
/// **Reentrancy**: an owner holds one key per lock; asking again in the same mode, or
/// asking to read while it writes, re-enters it (holds + 1, a new etcd lease of the
/// ttl); a key in line asked again keeps its place in the mode asked. A reader asking to
/// write is **upgraded only alone in line** (the core asks only that it hold alone:
/// here a waiter's token is its creation, which would be below the upgrade's), in a
/// transaction requiring the line and its key unchanged since read; its new token is
/// that write's revision, above every token granted before. Otherwise it is refused and
/// never queued. [`downgrade`](Self::downgrade) turns a writer into a reader, which
/// wakes the readers waiting for it.
///
/// A dead waiter drops out when its etcd lease expires (its ttl): the waiters' keep-alive
/// runs while they wait. [`state`](Self::state) reads at most `max_holders` holders and
/// 1024 waiters.
#[derive(Debug, Clone)]
pub struct EtcdRwLock {
    kv: Kv,
    prefix: Vec<u8>,
    lease: RwLease,
    wakes: Arc<AtomicU64>,
}

/// One acquirer's key as read: its mode, its place and the held key.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) mode: LockMode,
    /// Its place in line: the key's `create_revision`.
    pub(crate) place: u64,
    pub(crate) slot: Slot,
}

/// What keeps a key waiting, and so what its waiter watches.
#[derive(Debug, Clone)]
pub(crate) enum Blocker {
    /// A writer: the key just ahead of it, until deleted.
    Ahead(Entry),
    /// A reader: the latest writer ahead of it, until deleted or downgraded.
    Writer(Entry),
    /// A reader past the count (behind a full count of holders, or of readers behind a
    /// writer): the key just ahead of it, until it changes (a grant rewrites it) or goes.
    Counted(Entry),
    /// The first reader held back by the count: any deletion in the lock (the entry is the
    /// oldest holder, whose expiry is the earliest retry).
    Count(Entry),
}

impl Blocker {
    pub(crate) fn entry(&self) -> &Entry {
        match self {
            Self::Ahead(e) | Self::Writer(e) | Self::Counted(e) | Self::Count(e) => e,
        }
    }
}

/// The lock's keys, oldest first, and the revision they were read at.
#[derive(Debug)]
pub(crate) struct Line {
    pub(crate) entries: Vec<Entry>,
    pub(crate) revision: i64,
}

/// What an acquire's ask left: the answer, and for a waiter its key, the lease to keep
/// alive and what it waits for.
#[derive(Debug)]
pub(crate) struct Entered {
    pub(crate) acquired: RwAcquired,
    pub(crate) waiting: Option<Waiting>,
}

/// A queued key: the caller's own, the etcd lease behind it, and what it waits for.
#[derive(Debug, Clone)]
pub(crate) struct Waiting {
    pub(crate) mine: Entry,
    pub(crate) lease: i64,
    pub(crate) lease_ttl: Ticks,
    pub(crate) blocker: Blocker,
    pub(crate) revision: i64,
    /// A reader that queued behind a full count: its grant rewrites its key, which the
    /// reader behind it may be watching.
    pub(crate) touch: bool,
}

impl EtcdRwLock {
    /// Connects to the cluster at `endpoints` (`http://HOST:PORT`, see
    /// [`endpoints`](crate::endpoints)), each call bounded by
    /// [`DEFAULT_TIMEOUT`](crate::DEFAULT_TIMEOUT): a read-write lock (up to 1024 readers
    /// or one writer).
    pub async fn connect(endpoints: &[impl AsRef<str>]) -> Result<Self, Error> {
        Ok(Self {
            kv: Kv::new(connect(endpoints).await?),
            prefix: Vec::new(),
            lease: RwLease::read_write().fair(),
            wakes: Arc::default(),
        })
    }

    /// The same locks with every key under `prefix`.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The same locks counted: at most `concurrency.max()` shared holders at once
    /// (`Concurrency(max)` with a fair queue; an exclusive caller still holds alone).
    #[must_use]
    pub fn counted(mut self, concurrency: Concurrency) -> Self {
        self.lease = RwLease::counted(concurrency).fair();
        self
    }

    /// The same locks, counting their waiters' wakes apart from this handle's.
    #[must_use]
    pub fn counted_apart(mut self) -> Self {
        self.wakes = Arc::default();
        self
    }

    /// The lock's parameters as the core names them: its `max_holders`, fair.
    pub fn lease(&self) -> RwLease {
        self.lease
    }

    /// How many watch events the blocked waiters of this handle (and its clones, but
    /// [`counted_apart`](Self::counted_apart)) have been delivered: a release wakes one
    /// (two on a counted lock).
    pub fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }

    pub(crate) fn woken(&self, events: usize) {
        self.wakes.fetch_add(events as u64, Ordering::Relaxed);
    }

    pub(crate) fn kv(&self) -> &Kv {
        &self.kv
    }

    /// Every key of the lock `key`: `PREFIX key/rw/`.
    pub(crate) fn lock_prefix(&self, key: &[u8]) -> Vec<u8> {
        [&self.prefix[..], key, b"/rw/"].concat()
    }

    fn owner_key(&self, key: &[u8], owner: &[u8]) -> Vec<u8> {
        [self.lock_prefix(key), hex(owner)].concat()
    }

    /// What keeps a key of `mode` behind `ahead` waiting; `None`: it is granted.
    pub(crate) fn blocker(&self, ahead: &[Entry], mode: LockMode) -> Option<Blocker> {
        if mode == LockMode::Exclusive {
            return ahead.last().cloned().map(Blocker::Ahead);
        }
        let (Some(first), Some(last)) = (ahead.first(), ahead.last()) else {
            return None;
        };
        let max = self.lease.max_holders();
        if let Some(w) = ahead.iter().rposition(|e| e.mode == LockMode::Exclusive) {
            // The writer's going lets in at most the count behind it: those past it wait
            // on their predecessor instead.
            let between = (ahead.len() - w - 1) as u64;
            return Some(if between < max {
                Blocker::Writer(ahead[w].clone())
            } else {
                Blocker::Counted(last.clone())
            });
        }
        match (ahead.len() as u64).cmp(&max) {
            std::cmp::Ordering::Less => None,
            std::cmp::Ordering::Equal => Some(Blocker::Count(first.clone())),
            std::cmp::Ordering::Greater => Some(Blocker::Counted(last.clone())),
        }
    }

    /// The keys of `line` granted now: always its first keys (a writer alone, or readers
    /// up to the count before the first writer).
    fn holders<'a>(&self, line: &'a [Entry]) -> &'a [Entry] {
        let shared = |e: &Entry| e.mode == LockMode::Shared;
        let max = self.lease.max_holders();
        let shared_run = line.iter().take_while(|e| shared(e)).count() as u64;
        let held = match line.first() {
            None => 0,
            Some(first) if !shared(first) => 1,
            Some(_) => shared_run.min(max),
        };
        &line[..usize::try_from(held).unwrap_or(usize::MAX)]
    }

    /// A lease in `mode` now, or a denial that leaves nothing behind: a try never queues.
    pub async fn try_acquire(
        &self,
        request: &LeaseRequest<'_>,
        mode: LockMode,
    ) -> Result<RwAcquired, Error> {
        Ok(self.enter(request, mode, false).await?.acquired)
    }

    /// One ask: with `queue`, a refused caller's key stays as its place in line.
    ///
    /// Round trips: a `LeaseGrant` and one `Txn` for a queued ask, which creates the key
    /// (unless the owner has one) and reads the line at the same revision. A try reads
    /// the line beside its `LeaseGrant`, then creates the key only if nothing would block
    /// it, in a `Txn` requiring the line unchanged since the read, so a refused try never
    /// writes a key; a refused try revokes its unused etcd lease and reads the blocker's
    /// time left for `retry_after`.
    pub(crate) async fn enter(
        &self,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        queue: bool,
    ) -> Result<Entered, Error> {
        let ttl = checked(request, true)?;
        let read = async {
            if queue {
                Ok(None)
            } else {
                self.line(request.key).await.map(Some)
            }
        };
        let ((lease, lease_ttl), read) = tokio::try_join!(self.kv.new_lease(ttl), read)?;
        let entered = self
            .enter_on(request, mode, queue, (lease, lease_ttl), read)
            .await;
        if !matches!(&entered, Ok(e) if e.acquired.grant.is_some() || e.waiting.is_some()) {
            self.kv.revoke(lease).await;
        }
        entered
    }

    async fn enter_on(
        &self,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        queue: bool,
        (lease, lease_ttl): (i64, Ticks),
        mut read: Option<Line>,
    ) -> Result<Entered, Error> {
        let (key, owner) = (request.key, request.owner);
        let mine = self.owner_key(key, owner);
        let lock = self.lock_prefix(key);
        let put = TxnOp::put(
            mine.clone(),
            value(1, &head(mode, TOKEN_AT_CREATE), owner),
            Some(PutOptions::new().with_lease(lease)),
        );
        for _ in 0..ATTEMPTS {
            let (line, created) = match read.take() {
                Some(line) => (line, false),
                None if !queue => (self.line(key).await?, false),
                None => {
                    let read = TxnOp::get(lock.clone(), Some(GetOptions::new().with_prefix()));
                    let txn = Txn::new()
                        .when([Compare::create_revision(mine.clone(), CompareOp::Equal, 0)])
                        .and_then([put.clone(), read.clone()])
                        .or_else([read]);
                    let response = self.kv.client().txn(txn).await?;
                    (line_of(&lock, &response)?, response.succeeded())
                }
            };
            let own = line.entries.iter().position(|e| e.slot.owner == owner);
            let answer = match own {
                Some(i) if created => Some(self.placed(&line, i, lease, lease_ttl)),
                Some(i) => {
                    self.again(&line, &lock, i, (mode, queue), (lease, lease_ttl))
                        .await?
                }
                // The owner's key went between the compare and the read: ask again.
                None if queue => None,
                None => {
                    self.new_key(&line, &lock, put.clone(), mode, lease_ttl)
                        .await?
                }
            };
            if let Some(answer) = answer {
                return Ok(answer);
            }
        }
        Err(Error::Contended)
    }

    /// A try by an owner with no key: refused, or the key created if the line is
    /// unchanged since read (`None`: it changed, read again).
    async fn new_key(
        &self,
        line: &Line,
        lock: &[u8],
        put: TxnOp,
        mode: LockMode,
        lease_ttl: Ticks,
    ) -> Result<Option<Entered>, Error> {
        if let Some(blocker) = self.blocker(&line.entries, mode) {
            return self.refused(Some(blocker.entry()), line).await.map(Some);
        }
        let Some(token) = self.put_if_unchanged(lock, line, [], put).await? else {
            return Ok(None);
        };
        let holders = self.holders(&line.entries).len() + 1;
        let grant = Grant::new(token, expiry_in(lease_ttl), 1);
        Ok(Some(self.granted(grant, mode, holders, lease_ttl)))
    }

    /// The owner asks again with its key `line.entries[i]`: re-entry, an upgrade of a
    /// reader alone in line, or (queued) its place kept in the mode asked now; `None` if
    /// its key changed since read.
    async fn again(
        &self,
        line: &Line,
        lock: &[u8],
        i: usize,
        (mode, queue): (LockMode, bool),
        lease: (i64, Ticks),
    ) -> Result<Option<Entered>, Error> {
        let own = &line.entries[i];
        let Some(blocker) = self.blocker(&line.entries[..i], own.mode) else {
            if own.mode == LockMode::Exclusive || mode == LockMode::Shared {
                // Re-entry, a writer asking to read included.
                let holds = one_more(&own.slot)?;
                return self.rewritten(line, i, own.mode, holds, lease).await;
            }
            // Upgraded only alone in line: a waiter's token is its creation, which would
            // be below the upgrade's. Never queued: two readers each waiting for the other
            // to leave would wait forever.
            return match line.entries.iter().find(|e| e.place != own.place) {
                Some(other) => self.refused(Some(other), line).await.map(Some),
                None => self.upgrade(line, lock, own, lease).await,
            };
        };
        if !queue {
            // The owner's own place, kept by an earlier call: a try does not use it.
            return self.refused(Some(blocker.entry()), line).await.map(Some);
        }
        // The place is taken over as it is (its holds say how many grants it stands for),
        // in the mode asked now, as the core does.
        self.rewritten(line, i, mode, own.slot.holds, lease).await
    }

    /// The owner's key `line.entries[i]` rewritten in `mode` with `holds` on the new
    /// lease if unchanged since read (`None`: it changed), and the answer for it.
    async fn rewritten(
        &self,
        line: &Line,
        i: usize,
        mode: LockMode,
        holds: u64,
        (lease, lease_ttl): (i64, Ticks),
    ) -> Result<Option<Entered>, Error> {
        let own = &line.entries[i];
        let mut slot = own.slot.clone();
        slot.head = head(mode, own.slot.token);
        if !self.kv.rewrite(&slot, holds, lease).await? {
            return Ok(None);
        }
        self.kv.revoke(own.slot.lease).await;
        (slot.holds, slot.lease) = (holds, lease);
        let mut entries = line.entries.clone();
        entries[i] = Entry {
            mode,
            place: own.place,
            slot,
        };
        let line = Line {
            entries,
            revision: line.revision,
        };
        Ok(Some(self.placed(&line, i, lease, lease_ttl)))
    }

    /// The sole holder `own`, a reader, made a writer with holds + 1 on `lease` if the
    /// line is unchanged since read: its token is the write's revision.
    async fn upgrade(
        &self,
        line: &Line,
        lock: &[u8],
        own: &Entry,
        (lease, lease_ttl): (i64, Ticks),
    ) -> Result<Option<Entered>, Error> {
        let holds = one_more(&own.slot)?;
        let mut up = own.slot.clone();
        up.head = head(LockMode::Exclusive, TOKEN_AT_WRITE);
        let put = TxnOp::put(
            up.key.clone(),
            up.value(holds),
            Some(PutOptions::new().with_lease(lease)),
        );
        // Its own key unchanged too: gone since the read (expired), it would come back
        // at the back of the line behind whoever was granted meanwhile.
        let same = Compare::mod_revision(up.key.clone(), CompareOp::Equal, up.mod_revision);
        let Some(token) = self.put_if_unchanged(lock, line, [same], put).await? else {
            return Ok(None);
        };
        self.kv.revoke(own.slot.lease).await;
        let grant = Grant::new(token, expiry_in(lease_ttl), holds);
        Ok(Some(self.granted(grant, LockMode::Exclusive, 1, lease_ttl)))
    }

    /// Runs `put` if no key of the lock `lock` was created or changed since `line` was
    /// read (keys deleted since only let more in) and `also` holds: the write's revision,
    /// or `None`. Any write in the lock's range fails it, a holder's renewal included:
    /// the caller reads again, [`Error::Contended`] after a few attempts.
    async fn put_if_unchanged<const N: usize>(
        &self,
        lock: &[u8],
        line: &Line,
        also: [Compare; N],
        put: TxnOp,
    ) -> Result<Option<u64>, Error> {
        let after = line.revision.saturating_add(1);
        let unchanged = Compare::mod_revision(lock.to_vec(), CompareOp::Less, after)
            .with_range(prefix_end(lock));
        let txn = Txn::new()
            .when([&[unchanged][..], &also].concat())
            .and_then([put]);
        let response = self.kv.client().txn(txn).await?;
        let revision = response.header().map_or(0, |h| h.revision());
        Ok(response.succeeded().then_some(to_token(revision)))
    }

    /// The answer for the caller's key `line.entries[i]`: granted, or its place.
    fn placed(&self, line: &Line, i: usize, lease: i64, lease_ttl: Ticks) -> Entered {
        let me = &line.entries[i];
        let Some(blocker) = self.blocker(&line.entries[..i], me.mode) else {
            let grant = Grant::new(me.slot.token, expiry_in(lease_ttl), me.slot.holds);
            let holders = self.holders(&line.entries).len();
            return self.granted(grant, me.mode, holders, lease_ttl);
        };
        let place = Place::new(me.place, i as u64, expiry_in(lease_ttl));
        let max = self.lease.max_holders();
        let decision = Decision::deny(max, 0, None, lease_ttl);
        Entered {
            acquired: RwAcquired::new(decision, None, Some(place)),
            waiting: Some(Waiting {
                mine: me.clone(),
                lease,
                lease_ttl,
                blocker,
                revision: line.revision,
                touch: me.mode == LockMode::Shared && i as u64 >= max,
            }),
        }
    }

    /// A grant in `mode` with `holders` holding (the caller's included) for `ttl`.
    fn granted(&self, grant: Grant, mode: LockMode, holders: usize, ttl: Ticks) -> Entered {
        let max = self.lease.max_holders();
        let remaining = match mode {
            LockMode::Exclusive => 0,
            _ => max.saturating_sub(holders as u64),
        };
        let decision = Decision::admit(max, remaining, ttl, 0);
        Entered {
            acquired: RwAcquired::new(decision, Some(grant), None),
            waiting: None,
        }
    }

    /// A denial with no place: `retry_after` is the time `blocker`'s etcd lease has left.
    async fn refused(&self, blocker: Option<&Entry>, line: &Line) -> Result<Entered, Error> {
        let retry = match blocker {
            Some(b) => Some(self.kv.lease_left(b.slot.lease).await?),
            None => None,
        };
        let max = self.lease.max_holders();
        let holders = self.holders(&line.entries);
        let remaining = match holders.iter().any(|e| e.mode == LockMode::Exclusive) {
            true => 0,
            false => max.saturating_sub(holders.len() as u64),
        };
        let decision = Decision::deny(max, remaining, retry, retry.unwrap_or(0));
        Ok(Entered {
            acquired: RwAcquired::new(decision, None, None),
            waiting: None,
        })
    }

    /// The owner's key on `key`, held or in line.
    async fn own(&self, request: &LeaseRequest<'_>) -> Result<Entry, Error> {
        let got = (self.kv.client())
            .get(self.owner_key(request.key, request.owner), None)
            .await?;
        let own = entries(&self.lock_prefix(request.key), got.kvs())?.pop();
        Ok(own.ok_or(LeaseError::NotHeld)?)
    }

    /// Releases the owner's lease once; it is freed when released as often as acquired.
    ///
    /// Round trips: a `Range` reading the owner's key, a `Txn` deleting it if unchanged
    /// (this wakes the next waiter), a `LeaseRevoke` (or, with holds left, a `Txn`
    /// rewriting it and a `LeaseTimeToLive`).
    pub async fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        checked(request, false)?;
        for _ in 0..ATTEMPTS {
            let own = self.own(request).await?;
            if let Some(grant) = self.kv.release_hold(&own.slot).await? {
                return Ok(grant);
            }
        }
        Err(Error::Contended)
    }

    /// Extends the owner's lease (or place) to the request's ttl from now, on a new etcd
    /// lease: its token and place stay.
    pub async fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        let ttl = checked(request, true)?;
        for _ in 0..ATTEMPTS {
            let own = self.own(request).await?;
            if let Some(grant) = self.kv.renew_hold(&own.slot, ttl).await? {
                return Ok(grant);
            }
        }
        Err(Error::Contended)
    }

    /// Turns the owner's held lease into a shared one, keeping its token, holds and etcd
    /// lease (a shared lease stays as it is); the readers waiting for it are granted.
    /// A key still in line is not held ([`LeaseError::NotHeld`]).
    ///
    /// Round trips: a `Range` reading the line, a `Txn` rewriting the key if unchanged,
    /// a `LeaseTimeToLive` for the grant's expiry.
    pub async fn downgrade(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        checked(request, false)?;
        for _ in 0..ATTEMPTS {
            let line = self.line(request.key).await?;
            let entries = &line.entries;
            let i = entries.iter().position(|e| e.slot.owner == request.owner);
            let i = i.ok_or(LeaseError::NotHeld)?;
            if self.blocker(&entries[..i], entries[i].mode).is_some() {
                return Err(LeaseError::NotHeld.into());
            }
            let own = &entries[i].slot;
            let mut down = own.clone();
            down.head = head(LockMode::Shared, own.token);
            if entries[i].mode == LockMode::Shared
                || self.kv.rewrite(&down, own.holds, own.lease).await?
            {
                let left = self.kv.lease_left(own.lease).await?;
                return Ok(Grant::new(own.token, expiry_in(left), own.holds));
            }
        }
        Err(Error::Contended)
    }

    /// The lock's keys, oldest first, and the revision read at.
    pub(crate) async fn line(&self, key: &[u8]) -> Result<Line, Error> {
        let lock = self.lock_prefix(key);
        let got = (self.kv.client())
            .get(lock.clone(), Some(GetOptions::new().with_prefix()))
            .await?;
        Ok(Line {
            entries: entries(&lock, got.kvs())?,
            revision: got.header().map_or(0, |h| h.revision()),
        })
    }

    /// The lock as the core describes it: the granted keys as holders, the others as the
    /// queue (places are `create_revision`s), each expiring when its etcd lease would
    /// (this process's clock plus the time etcd says it has left), built in the core's
    /// canonical encoding and read back by its decoder; `None` when no key is left.
    pub async fn state(&self, key: &[u8]) -> Result<Option<RwState>, Error> {
        let line = self.line(key).await?.entries;
        if line.is_empty() {
            return Ok(None);
        }
        let (mut holders, mut waiters) = (Vec::new(), Vec::new());
        let held = self.holders(&line).len();
        // The holders, then the first waiters, as many as the core's decoder reads: the
        // others' leases are not asked for.
        let kept = held.saturating_add(usize::try_from(MAX_WAITERS).unwrap_or(usize::MAX));
        for (i, e) in line.iter().take(kept).enumerate() {
            let expires = expiry_in(self.kv.lease_left(e.slot.lease).await?);
            let code = u64::from(e.mode == LockMode::Exclusive);
            if i < held {
                holders.push(([e.slot.token, expires, e.slot.holds, code], e));
            } else {
                waiters.push(([e.place, expires, code, 0], e));
            }
        }
        // Holders in token order (an upgraded holder's token is above its place).
        holders.sort_by_key(|(f, _)| f[0]);
        let last_token = holders.last().map_or(0, |(f, _)| f[0]);
        let last_place = waiters.last().map_or(0, |(f, _)| f[0]);
        // Version 1, tag 12 (the lock family), then each holder and waiter.
        let mut bytes = vec![1, 12];
        for field in [
            last_token,
            last_place,
            holders.len() as u64,
            waiters.len() as u64,
        ] {
            bytes.extend(field.to_be_bytes());
        }
        let fields = holders.iter().map(|(f, e)| (&f[..], e));
        let places = waiters.iter().map(|(f, e)| (&f[..3], e));
        for (fields, e) in fields.chain(places) {
            for field in fields.iter().chain([&(e.slot.owner.len() as u64)]) {
                bytes.extend(field.to_be_bytes());
            }
            bytes.extend(&e.slot.owner);
        }
        let state = self.lease.decode(&bytes).map_err(|e| Error::Corrupt {
            key: self.lock_prefix(key),
            reason: e.to_string(),
        })?;
        Ok(Some(state))
    }
}

/// The line a `Txn` read last, at the revision it ran at.
fn line_of(lock: &[u8], response: &TxnResponse) -> Result<Line, Error> {
    let entries = match response.op_responses().into_iter().last() {
        Some(TxnOpResponse::Get(got)) => entries(lock, got.kvs())?,
        _ => Vec::new(),
    };
    let revision = response.header().map_or(0, |h| h.revision());
    Ok(Line { entries, revision })
}

/// The lock's keys among `kvs` (read under `lock`, `PREFIX key/rw/`), oldest first: a key
/// of a lock named under this one (`key/rw/ab/rw/…`) is not one of them.
pub(crate) fn entries(lock: &[u8], kvs: &[KeyValue]) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::new();
    for kv in kvs {
        let Some(name) = kv.key().strip_prefix(lock) else {
            continue;
        };
        if let Some((b"s/" | b"x/", old)) = name.split_at_checked(2) {
            if is_hex(old) {
                let reason = "a key of the older layout (the mode in its name): release it \
                              with the older client, or wait for its etcd lease to expire";
                return Err(corrupt(kv.key(), reason));
            }
        }
        if !is_hex(name) {
            continue;
        }
        let entry = entry(kv)?;
        if hex(&entry.slot.owner) != name {
            return Err(corrupt(kv.key(), "its owner is not the one its name says"));
        }
        entries.push(entry);
    }
    entries.sort_by_key(|e| e.place);
    Ok(entries)
}

/// Reads one family key: its head is the mode and the token field, which the entry
/// carries written out (a rewrite keeps the token, whichever revision it came from).
fn entry(kv: &KeyValue) -> Result<Entry, Error> {
    let mut slot = slot(kv, 9)?;
    let mode = match slot.head[0] {
        0 => LockMode::Shared,
        1 => LockMode::Exclusive,
        _ => {
            return Err(corrupt(
                kv.key(),
                "its mode is neither shared nor exclusive",
            ))
        }
    };
    let mut field = [0; 8];
    field.copy_from_slice(&slot.head[1..]);
    slot.token = match u64::from_be_bytes(field) {
        TOKEN_AT_CREATE => to_token(kv.create_revision()),
        TOKEN_AT_WRITE => to_token(kv.mod_revision()),
        token => token,
    };
    slot.head = head(mode, slot.token);
    Ok(Entry {
        mode,
        place: to_token(kv.create_revision()),
        slot,
    })
}

/// The mode of a family key's value, if it reads as one.
pub(crate) fn mode_of(kv: &KeyValue) -> Option<LockMode> {
    entry(kv).ok().map(|e| e.mode)
}

/// A family key's head: its mode, then its token field.
fn head(mode: LockMode, token: u64) -> Vec<u8> {
    let code = u8::from(mode == LockMode::Exclusive);
    [&[code][..], &token.to_be_bytes()].concat()
}

fn corrupt(key: &[u8], reason: &str) -> Error {
    Error::Corrupt {
        key: key.to_vec(),
        reason: reason.to_owned(),
    }
}

/// The end of the range of keys starting with `prefix` (it ends in `/`, so adding one to
/// its last byte is enough).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

fn is_hex(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|b| b"0123456789abcdef".contains(b))
}

/// Lowercase hexadecimal: owners are any bytes, key names stay unambiguous.
fn hex(bytes: &[u8]) -> Vec<u8> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digit = |n: u8| DIGITS[usize::from(n)];
    bytes
        .iter()
        .flat_map(|b| [digit(b >> 4), digit(b & 15)])
        .collect()
}
