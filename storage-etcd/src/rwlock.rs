//! The lock family on etcd: read-write and exclusive locks, fair by construction, as etcd's
//! own `concurrency.Mutex` and its read-write recipe build them. Each acquirer is one key
//! on an etcd lease of its ttl, its place in line the key's `create_revision`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use sluicegate_core::limits::MAX_LEASES;
use sluicegate_core::rwlock::{LockMode, Place, RwAcquired, RwLease, RwState};
use sluicegate_core::{Decision, Grant, LeaseRequest, Ticks};

use crate::error::Error;
use crate::kv::{expiry_in, one_more, slot, to_token, value, Kv, Slot};
use crate::leases::{checked, connect};

/// How many times a call reads again after a transaction found the owner's key changed
/// under it (calls by the same owner racing each other).
const ATTEMPTS: usize = 8;

/// Read-write and exclusive locks on an etcd cluster, granted in the order asked.
///
/// An acquire of key `K` by owner `o` in mode `m` creates the etcd key
/// `PREFIX K/rw/m/hex(o)` (`m` is `s` for shared, `x` for exclusive) attached to a new
/// etcd lease of the request's ttl, in a transaction that requires neither of the owner's
/// keys to exist; the value is the hold count (8 bytes, big-endian) then the owner. The
/// keys of a lock, ordered by `create_revision`, are its line:
/// - an **exclusive** key is granted when no key was created before it;
/// - a **shared** key is granted when no *exclusive* key was created before it, so a
///   reader arriving after a waiting writer waits behind it (writer preference, and no
///   writer starved);
/// - a blocked waiter watches only its **predecessor**, the latest key created before it
///   that blocks it (a writer: the key just before it; a reader: the latest writer before
///   it), from the revision it read at, so a release wakes the one waiter whose turn it
///   is (the readers behind a writer all watch that writer: its release grants them all).
///
/// **Fencing token**: the key's `create_revision`. etcd's revision counts every write to
/// the cluster and never goes back, and every key ahead of a waiter was created before
/// it: a writer's token is above every token granted before it on the lock, readers'
/// included. Re-entry and renewal rewrite the key, keeping its `create_revision`.
///
/// **Reentrancy**: an owner holds one key per lock; asking again in the same mode, or
/// asking to read while it writes, re-enters it (holds + 1, a new etcd lease of the
/// ttl). A reader asking to write is refused (a denial with no place): the token and
/// the place are the key's `create_revision`, so an upgrade would need the key deleted
/// and created again in one transaction, which etcd refuses (a put and a delete of one
/// key); release and ask again. There is no downgrade, for the same reason.
///
/// A dead waiter drops out when its etcd lease expires (its ttl): the waiters' keep-alive
/// runs while they wait. Readers are not counted: `max_holders` is the core's 1024 only
/// for [`state`](Self::state), which reads at most 1024 holders and 1024 waiters.
#[derive(Debug, Clone)]
pub struct EtcdRwLock {
    kv: Kv,
    prefix: Vec<u8>,
    wakes: Arc<AtomicU64>,
}

/// One acquirer's key as read: its mode and the held key.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) mode: LockMode,
    pub(crate) slot: Slot,
}

/// What an acquire's one transaction left: the answer, and for a waiter its key, the
/// lease to keep alive, its predecessor and the revision read at.
#[derive(Debug)]
pub(crate) struct Entered {
    pub(crate) acquired: RwAcquired,
    pub(crate) waiting: Option<Waiting>,
}

/// A queued key: the caller's own, the etcd lease behind it, and who it waits for.
#[derive(Debug, Clone)]
pub(crate) struct Waiting {
    pub(crate) mine: Entry,
    pub(crate) lease: i64,
    pub(crate) lease_ttl: Ticks,
    pub(crate) blocker: Entry,
    pub(crate) revision: i64,
}

impl EtcdRwLock {
    /// Connects to the cluster at `endpoints` (`http://HOST:PORT`, see
    /// [`endpoints`](crate::endpoints)), each call bounded by
    /// [`DEFAULT_TIMEOUT`](crate::DEFAULT_TIMEOUT).
    pub async fn connect(endpoints: &[impl AsRef<str>]) -> Result<Self, Error> {
        Ok(Self {
            kv: Kv::new(connect(endpoints).await?),
            prefix: Vec::new(),
            wakes: Arc::default(),
        })
    }

    /// The same locks with every key under `prefix`.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The same locks, counting their waiters' wakes apart from this handle's.
    #[must_use]
    pub fn counted_apart(mut self) -> Self {
        self.wakes = Arc::default();
        self
    }

    /// The lock's parameters as the core names them: up to 1024 readers or one writer,
    /// fair.
    pub fn lease(&self) -> RwLease {
        RwLease::read_write().fair()
    }

    /// How many watch events the blocked waiters of this handle (and its clones, but
    /// [`counted_apart`](Self::counted_apart)) have been delivered: a release wakes one.
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

    /// The keys of one mode: `PREFIX key/rw/s/` or `…/x/`.
    pub(crate) fn mode_prefix(&self, key: &[u8], mode: LockMode) -> Vec<u8> {
        [self.lock_prefix(key), mode_dir(mode).to_vec()].concat()
    }

    /// The owner's key in `mode`.
    fn owner_key(&self, key: &[u8], owner: &[u8], mode: LockMode) -> Vec<u8> {
        [self.mode_prefix(key, mode), hex(owner)].concat()
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
    /// Round trips: a `LeaseGrant`, then one `Txn`. A queued ask's `Txn` creates the
    /// key and reads the lock's keys at the same revision. A try's `Txn` creates the key
    /// only if nothing would block it (no key at all for a writer, no writer key for a
    /// reader), checking before creating so that a refused try never writes a key (the
    /// check is a compare in the same `Txn`, so it costs no round trip); a refused try
    /// then revokes its unused etcd lease (a third round trip, and a fourth reads the
    /// blocker's time left for `retry_after`).
    pub(crate) async fn enter(
        &self,
        request: &LeaseRequest<'_>,
        mode: LockMode,
        queue: bool,
    ) -> Result<Entered, Error> {
        let ttl = checked(request, true)?;
        let (lease, lease_ttl) = self.kv.new_lease(ttl).await?;
        let entered = self.enter_on(request, mode, queue, lease, lease_ttl).await;
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
        lease: i64,
        lease_ttl: Ticks,
    ) -> Result<Entered, Error> {
        let (key, owner) = (request.key, request.owner);
        let mine = self.owner_key(key, owner, mode);
        let lock = self.lock_prefix(key);
        for _ in 0..ATTEMPTS {
            let mut when = vec![
                absent(self.owner_key(key, owner, LockMode::Shared)),
                absent(self.owner_key(key, owner, LockMode::Exclusive)),
            ];
            if !queue {
                let blocking = match mode {
                    LockMode::Exclusive => lock.clone(),
                    _ => self.mode_prefix(key, LockMode::Exclusive),
                };
                when.push(absent(blocking.clone()).with_range(prefix_end(&blocking)));
            }
            let put = TxnOp::put(
                mine.clone(),
                value(1, owner),
                Some(PutOptions::new().with_lease(lease)),
            );
            let read = TxnOp::get(lock.clone(), Some(GetOptions::new().with_prefix()));
            let then = if queue {
                vec![put, read.clone()]
            } else {
                vec![put]
            };
            let txn = Txn::new().when(when).and_then(then).or_else([read]);
            let response = self.kv.client().txn(txn).await?;
            let revision = response.header().map_or(0, |h| h.revision());
            let entries = match response.op_responses().into_iter().last() {
                Some(TxnOpResponse::Get(got)) => entries(&lock, got.kvs())?,
                _ => Vec::new(),
            };
            if response.succeeded() && !queue {
                let grant = Grant::new(to_token(revision), expiry_in(lease_ttl), 1);
                return Ok(granted(grant, &entries, mode, lease_ttl));
            }
            if response.succeeded() {
                let me = (entries.iter()).find(|e| e.slot.key == mine).cloned();
                let me = me.ok_or_else(|| corrupt(&mine, "created but not read back"))?;
                return Ok(self.placed(me, &entries, lease, lease_ttl, revision));
            }
            let own = entries.iter().find(|e| e.slot.owner == owner).cloned();
            let Some(own) = own else {
                if queue {
                    // The owner's key went between the compare and the read: ask again.
                    continue;
                }
                // Refused: the blocker is the latest key that would be ahead of a new one.
                let blocker = entries.iter().rev().find(|e| blocks(mode, e.mode));
                return self.refused(blocker, &entries).await;
            };
            if own.mode == LockMode::Shared && mode == LockMode::Exclusive {
                // An upgrade: refused, never queued (see the type's documentation).
                return self.refused(None, &entries).await;
            }
            let blocker = blocker_of(&entries, &own).cloned();
            if blocker.is_some() && !queue {
                // The owner's own place, kept by an earlier call: a try does not use it.
                return self.refused(blocker.as_ref(), &entries).await;
            }
            // Re-entry (holds + 1) on the new lease; an earlier call's place is taken
            // over as it is (its holds say how many grants it stands for).
            let holds = if blocker.is_some() {
                own.slot.holds
            } else {
                one_more(&own.slot)?
            };
            if !self.kv.rewrite(&own.slot, holds, lease).await? {
                continue;
            }
            self.kv.revoke(own.slot.lease).await;
            let mut own = own;
            own.slot.holds = holds;
            return Ok(match blocker {
                None => {
                    let grant = Grant::new(own.slot.token, expiry_in(lease_ttl), holds);
                    granted(grant, &entries, own.mode, lease_ttl)
                }
                Some(_) => self.placed(own, &entries, lease, lease_ttl, revision),
            });
        }
        Err(Error::Contended)
    }

    /// The answer for the caller's key `me` among `entries`: granted, or its place.
    fn placed(
        &self,
        me: Entry,
        entries: &[Entry],
        lease: i64,
        lease_ttl: Ticks,
        revision: i64,
    ) -> Entered {
        let Some(blocker) = blocker_of(entries, &me).cloned() else {
            let grant = Grant::new(me.slot.token, expiry_in(lease_ttl), me.slot.holds);
            return granted(grant, entries, me.mode, lease_ttl);
        };
        let ahead = entries.iter().filter(|e| e.slot.token < me.slot.token);
        let place = Place::new(me.slot.token, ahead.count() as u64, expiry_in(lease_ttl));
        let decision = Decision::deny(MAX_LEASES, 0, None, lease_ttl);
        Entered {
            acquired: RwAcquired::new(decision, None, Some(place)),
            waiting: Some(Waiting {
                mine: me,
                lease,
                lease_ttl,
                blocker,
                revision,
            }),
        }
    }

    /// A denial with no place: `retry_after` is the time `blocker`'s etcd lease has left
    /// (none when nothing but the caller's own lease blocks it).
    async fn refused(&self, blocker: Option<&Entry>, entries: &[Entry]) -> Result<Entered, Error> {
        let retry = match blocker {
            Some(b) => Some(self.kv.lease_left(b.slot.lease).await?),
            None => None,
        };
        let reset = retry.unwrap_or(0);
        let decision = Decision::deny(MAX_LEASES, remaining(entries), retry, reset);
        Ok(Entered {
            acquired: RwAcquired::new(decision, None, None),
            waiting: None,
        })
    }

    /// The owner's key on `key`, whichever its mode.
    async fn own(&self, request: &LeaseRequest<'_>) -> Result<Entry, Error> {
        let mut txn = Vec::new();
        for mode in [LockMode::Shared, LockMode::Exclusive] {
            txn.push(TxnOp::get(
                self.owner_key(request.key, request.owner, mode),
                None,
            ));
        }
        let response = self.kv.client().txn(Txn::new().and_then(txn)).await?;
        let lock = self.lock_prefix(request.key);
        for got in response.op_responses() {
            if let TxnOpResponse::Get(got) = got {
                if let Some(own) = entries(&lock, got.kvs())?.pop() {
                    return Ok(own);
                }
            }
        }
        Err(sluicegate_core::LeaseError::NotHeld.into())
    }

    /// Releases the owner's lease once; it is freed when released as often as acquired.
    ///
    /// Round trips: a `Txn` reading the owner's key, a `Txn` deleting it if unchanged
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

    /// The lock's keys, oldest first.
    pub(crate) async fn entries(&self, key: &[u8]) -> Result<Vec<Entry>, Error> {
        let lock = self.lock_prefix(key);
        let got = (self.kv.client())
            .get(lock.clone(), Some(GetOptions::new().with_prefix()))
            .await?;
        entries(&lock, got.kvs())
    }

    /// The lock as the core describes it: the granted keys as holders, the others as the
    /// queue (places are `create_revision`s), each expiring when its etcd lease would
    /// (this process's clock plus the time etcd says it has left), built in the core's
    /// canonical encoding and read back by its decoder; `None` when no key is left.
    pub async fn state(&self, key: &[u8]) -> Result<Option<RwState>, Error> {
        let entries = self.entries(key).await?;
        if entries.is_empty() {
            return Ok(None);
        }
        let (mut holders, mut waiters) = (Vec::new(), Vec::new());
        for e in &entries {
            let expires = expiry_in(self.kv.lease_left(e.slot.lease).await?);
            let code = u64::from(e.mode == LockMode::Exclusive);
            if blocker_of(&entries, e).is_none() {
                holders.push(([e.slot.token, expires, e.slot.holds, code], e));
            } else {
                waiters.push(([e.slot.token, expires, code, 0], e));
            }
        }
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
        let state = self.lease().decode(&bytes).map_err(|e| Error::Corrupt {
            key: self.lock_prefix(key),
            reason: e.to_string(),
        })?;
        Ok(Some(state))
    }
}

/// A grant among `entries` for `ttl`: `remaining` the shared leases still free.
fn granted(grant: Grant, entries: &[Entry], mode: LockMode, ttl: Ticks) -> Entered {
    let remaining = match mode {
        LockMode::Exclusive => 0,
        _ => remaining(entries),
    };
    let decision = Decision::admit(MAX_LEASES, remaining, ttl, 0);
    Entered {
        acquired: RwAcquired::new(decision, Some(grant), None),
        waiting: None,
    }
}

/// The shared leases still free: none while a writer holds.
fn remaining(entries: &[Entry]) -> u64 {
    let held = entries.iter().filter(|e| blocker_of(entries, e).is_none());
    let held: Vec<_> = held.collect();
    if held.iter().any(|e| e.mode == LockMode::Exclusive) {
        return 0;
    }
    MAX_LEASES.saturating_sub(held.len() as u64)
}

/// Whether a key of mode `ahead` created before one of `mode` keeps it waiting.
pub(crate) fn blocks(mode: LockMode, ahead: LockMode) -> bool {
    mode == LockMode::Exclusive || ahead == LockMode::Exclusive
}

/// The key `me` waits for among `entries` (oldest first): the latest one before it that
/// blocks it; `None` when it is granted.
pub(crate) fn blocker_of<'a>(entries: &'a [Entry], me: &Entry) -> Option<&'a Entry> {
    let ahead = entries.iter().take_while(|e| e.slot.token < me.slot.token);
    ahead.filter(|e| blocks(me.mode, e.mode)).last()
}

/// The lock's keys among `kvs` (read under `lock`, `PREFIX key/rw/`), oldest first: a key
/// of a lock named under this one (`key/rw/x/…/rw/…`) is not one of them.
pub(crate) fn entries(lock: &[u8], kvs: &[KeyValue]) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::new();
    for kv in kvs {
        let Some(rest) = kv.key().strip_prefix(lock) else {
            continue;
        };
        let (mode, name) = match rest.split_at_checked(2) {
            Some((b"s/", name)) => (LockMode::Shared, name),
            Some((b"x/", name)) => (LockMode::Exclusive, name),
            _ => continue,
        };
        if name.is_empty() || !name.iter().all(|b| b"0123456789abcdef".contains(b)) {
            continue;
        }
        let slot = slot(kv)?;
        if hex(&slot.owner) != name {
            return Err(corrupt(kv.key(), "its owner is not the one its name says"));
        }
        entries.push(Entry { mode, slot });
    }
    entries.sort_by_key(|e| e.slot.token);
    Ok(entries)
}

fn corrupt(key: &[u8], reason: &str) -> Error {
    Error::Corrupt {
        key: key.to_vec(),
        reason: reason.to_owned(),
    }
}

/// A compare that `key` (or, with a range, every key in it) does not exist.
fn absent(key: Vec<u8>) -> Compare {
    Compare::create_revision(key, CompareOp::Equal, 0)
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

fn mode_dir(mode: LockMode) -> &'static [u8] {
    match mode {
        LockMode::Exclusive => b"x/",
        _ => b"s/",
    }
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
