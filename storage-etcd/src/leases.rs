//! Leases on etcd: each held lease is one key attached to an etcd lease, its fencing
//! token the key's `create_revision`.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};
use sluicegate_core::{
    Acquired, AsyncLeaseHost, Concurrency, Decision, Grant, LeaseError, LeaseRequest, LeaseState,
    Ticks,
};

use crate::error::Error;
use crate::kv::{expiry_in, one_more, slot, to_token, value, Kv, Slot};

/// How long connecting to an endpoint, and then each call, may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How many times a call re-reads the key after a transaction found it changed by
/// something other than a grant (a call by the same owner, an expiry); a grant lost to
/// another grant tries again, as each such loss is another's progress.
const ATTEMPTS: usize = 8;

/// A key's leases on an etcd cluster: at most `max` held at once, each by one owner, each
/// an etcd key attached to an etcd lease of the request's ttl.
///
/// Lease `i` of key `K` is the etcd key `PREFIX K/i` (`i` below `max`), whose value is the
/// hold count (8 bytes, big-endian) then the owner. A grant creates the key in a
/// transaction that requires it absent (`create_revision == 0`), so the key's
/// `create_revision`, the cluster's revision at that write, is the fencing token: etcd's
/// revision counts every write to the cluster, is persisted with it, and never goes back,
/// so each grant's token is above every token granted before on any key. Renewals and
/// re-entries rewrite the key without deleting it: its `create_revision`, the token,
/// stays (a `mod_revision` would change with each renewal). Release and renewal are
/// transactions that compare the key's `mod_revision` with the one the owner read: only
/// the owner's own key, unchanged since, is deleted or rewritten.
///
/// The clock is the server's: an etcd lease lives a whole number of seconds (the ttl
/// rounded up, and at least the cluster's minimum, about 1.5 election timeouts), and a
/// request with its own time is refused ([`Error::ExplicitTime`]). `expires_at` in a grant
/// is this process's clock plus the lease's ttl as etcd granted it.
#[derive(Clone)]
pub struct EtcdLeases {
    kv: Kv,
    model: Concurrency,
    prefix: Vec<u8>,
}

impl std::fmt::Debug for EtcdLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client has no `Debug`: its channel says nothing useful.
        f.debug_struct("EtcdLeases")
            .field("model", &self.model)
            .field("prefix", &sluicegate_core::KeyDisplay(&self.prefix))
            .finish_non_exhaustive()
    }
}

/// A grant with the etcd lease behind it, for the keep-alive.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    pub(crate) grant: Grant,
    pub(crate) lease: i64,
    /// The time the etcd lease had left when granted (whole seconds, at least the
    /// request's ttl): the keep-alive renews it at a third of this.
    pub(crate) left: Ticks,
}

/// An acquire's answer and the revision it read at: a waiter watches from the next one,
/// so no release after the read is missed.
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) acquired: Acquired,
    pub(crate) held: Option<Held>,
    pub(crate) revision: i64,
}

/// The endpoints of `etcd://HOST:PORT[,HOST:PORT…]`, as `http://HOST:PORT`.
pub fn endpoints(url: &str) -> Result<Vec<String>, Error> {
    let bad = |reason| Error::Url {
        url: url.to_owned(),
        reason,
    };
    let hosts = url
        .strip_prefix("etcd://")
        .ok_or(bad("it does not start with etcd://"))?;
    let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
    hosts
        .split(',')
        .map(|host| match host.rsplit_once(':') {
            Some((name, port)) if !name.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(format!("http://{host}"))
            }
            _ => Err(bad("each endpoint is HOST:PORT")),
        })
        .collect()
}

/// A client of the cluster at `endpoints`, each call bounded by [`DEFAULT_TIMEOUT`].
pub(crate) async fn connect(endpoints: &[impl AsRef<str>]) -> Result<Client, Error> {
    let options = ConnectOptions::new()
        .with_connect_timeout(DEFAULT_TIMEOUT)
        .with_timeout(DEFAULT_TIMEOUT);
    Ok(Client::connect(endpoints, Some(options)).await?)
}

/// The request's ttl, after the checks every host makes (and no explicit time).
pub(crate) fn checked(request: &LeaseRequest<'_>, with_ttl: bool) -> Result<Ticks, Error> {
    if request.now.is_some() {
        return Err(Error::ExplicitTime);
    }
    if with_ttl {
        Concurrency::check(request.owner, request.ttl)?;
    } else {
        Concurrency::check(request.owner, 1)?;
    }
    Ok(request.ttl)
}

impl EtcdLeases {
    /// Connects to the cluster at `endpoints` (`http://HOST:PORT`, see [`endpoints`]),
    /// each call bounded by [`DEFAULT_TIMEOUT`].
    pub async fn connect(endpoints: &[impl AsRef<str>], model: Concurrency) -> Result<Self, Error> {
        Ok(Self {
            kv: Kv::new(connect(endpoints).await?),
            model,
            prefix: Vec::new(),
        })
    }

    /// The same leases with every key under `prefix`.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The client, for the keep-alive and the watch.
    pub(crate) fn client(&self) -> Client {
        self.kv.client()
    }

    /// The key's slots' common prefix: `PREFIX key/`.
    pub(crate) fn slots_prefix(&self, key: &[u8]) -> Vec<u8> {
        [&self.prefix[..], key, b"/"].concat()
    }

    /// The leases held on `key` and the revision read at.
    async fn read(&self, key: &[u8]) -> Result<(Vec<Slot>, i64), Error> {
        let prefix = self.slots_prefix(key);
        let response = self
            .kv
            .client()
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await?;
        let revision = response.header().map_or(0, |h| h.revision());
        let slots = response
            .kvs()
            .iter()
            .filter(|kv| is_slot(&prefix, kv.key()))
            .map(|kv| slot(kv, 0))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((slots, revision))
    }

    /// Acquires, or re-enters, the request's lease (see [`AsyncLeaseHost::acquire`]).
    pub(crate) async fn attempt(&self, request: &LeaseRequest<'_>) -> Result<Attempt, Error> {
        let ttl = checked(request, true)?;
        // At most `max` grants can be won before the key is full, each a lost attempt.
        let attempts = u64::try_from(ATTEMPTS).unwrap_or(u64::MAX) + self.model.max();
        for _ in 0..attempts {
            let (slots, revision) = self.read(request.key).await?;
            let (done, new) = match slots.iter().find(|s| s.owner == request.owner) {
                Some(mine) => (self.reenter(mine, ttl).await?, false),
                None => (self.grant(request, &slots, revision, ttl).await?, true),
            };
            let Some(held) = done else { continue };
            let taken = slots.len() as u64 + u64::from(new && held.is_some());
            let remaining = self.model.max().saturating_sub(taken);
            let acquired = match held {
                Some(held) => Acquired::new(
                    Decision::admit(self.model.max(), remaining, ttl, 0),
                    Some(held.grant),
                ),
                None => {
                    let retry = self.earliest_expiry(&slots).await?;
                    Acquired::new(
                        Decision::deny(self.model.max(), 0, Some(retry), retry),
                        None,
                    )
                }
            };
            return Ok(Attempt {
                acquired,
                held,
                revision,
            });
        }
        Err(Error::Contended)
    }

    /// A new lease in a free slot: `Some(None)` when none is free, `None` when a slot was
    /// created since the read at `revision` (read again: it may be the owner's own).
    async fn grant(
        &self,
        request: &LeaseRequest<'_>,
        slots: &[Slot],
        revision: i64,
        ttl: Ticks,
    ) -> Result<Option<Option<Held>>, Error> {
        // Counted, not only looked for: leases granted under a higher `max` may still
        // hold slots at or above this one's.
        if slots.len() as u64 >= self.model.max() {
            return Ok(Some(None));
        }
        let free = (0..self.model.max()).find(|i| {
            !slots
                .iter()
                .any(|s| s.key == self.slot_key(request.key, *i))
        });
        let Some(free) = free else {
            return Ok(Some(None));
        };
        let (lease, lease_ttl) = self.kv.new_lease(ttl).await?;
        let key = self.slot_key(request.key, free);
        let put = TxnOp::put(
            key.clone(),
            value(1, &[], request.owner),
            Some(PutOptions::new().with_lease(lease)),
        );
        // No slot created since the read (the owner had none then, and a slot's owner
        // never changes): two grants to one owner cannot both pass, as on Redis. The
        // range holds every slot (`PREFIX key/` then digits; ':' follows '9').
        let prefix = self.slots_prefix(request.key);
        let slots_range = Compare::create_revision(
            [&prefix[..], b"0"].concat(),
            CompareOp::Less,
            revision.saturating_add(1),
        )
        .with_range([&prefix[..], b":"].concat());
        let txn = Txn::new()
            .when([
                Compare::create_revision(key, CompareOp::Equal, 0),
                slots_range,
            ])
            .and_then([put]);
        let response = self.kv.client().txn(txn).await?;
        if !response.succeeded() {
            self.kv.revoke(lease).await;
            return Ok(None);
        }
        let token = response.header().map_or(0, |h| h.revision());
        let grant = Grant::new(to_token(token), expiry_in(lease_ttl), 1);
        Ok(Some(Some(Held {
            grant,
            lease,
            left: lease_ttl,
        })))
    }

    /// The owner's lease held once more, living at least `ttl` from now: `None` if the
    /// key changed meanwhile (read again).
    async fn reenter(&self, mine: &Slot, ttl: Ticks) -> Result<Option<Option<Held>>, Error> {
        let holds = one_more(mine)?;
        let left = self.kv.lease_left(mine.lease).await?;
        let held = if left >= ttl {
            let rewritten = self.kv.rewrite(mine, holds, mine.lease).await?;
            rewritten.then_some((mine.lease, left))
        } else {
            self.kv.relet(mine, holds, ttl).await?
        };
        Ok(held.map(|(lease, left)| {
            let grant = Grant::new(mine.token, expiry_in(left), holds);
            Some(Held { grant, lease, left })
        }))
    }

    /// Releases the owner's lease once (see [`AsyncLeaseHost::release`]); with `token`,
    /// only the grant of that token, not one the owner acquired since.
    pub(crate) async fn release_once(
        &self,
        request: &LeaseRequest<'_>,
        token: Option<u64>,
    ) -> Result<Grant, Error> {
        checked(request, false)?;
        for _ in 0..ATTEMPTS {
            let mine = self.mine(request, token).await?;
            if let Some(grant) = self.kv.release_hold(&mine).await? {
                return Ok(grant);
            }
        }
        Err(Error::Contended)
    }

    /// Extends the owner's lease to `ttl` from now (see [`AsyncLeaseHost::renew`]).
    async fn renew_once(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        let ttl = checked(request, true)?;
        for _ in 0..ATTEMPTS {
            let mine = self.mine(request, None).await?;
            if let Some(grant) = self.kv.renew_hold(&mine, ttl).await? {
                return Ok(grant);
            }
        }
        Err(Error::Contended)
    }

    /// The owner's lease on the request's key (the grant of `token`, if given), or
    /// [`LeaseError::NotHeld`].
    async fn mine(&self, request: &LeaseRequest<'_>, token: Option<u64>) -> Result<Slot, Error> {
        let (slots, _) = self.read(request.key).await?;
        let mine = (slots.into_iter())
            .find(|s| s.owner == request.owner && token.is_none_or(|token| s.token == token));
        Ok(mine.ok_or(LeaseError::NotHeld)?)
    }

    /// The key's lease table as the core describes it: the held leases by token, the last
    /// token the highest held, built in the core's canonical encoding (the format every
    /// host writes) and read back by its decoder.
    async fn table(&self, key: &[u8]) -> Result<Option<LeaseState>, Error> {
        let (mut slots, _) = self.read(key).await?;
        if slots.is_empty() {
            return Ok(None);
        }
        slots.sort_by_key(|s| s.token);
        let last = slots.last().map_or(0, |s| s.token);
        // Version 1, tag 9 (leases): the last token and the count, then each lease.
        let mut bytes = vec![1, 9];
        bytes.extend(last.to_be_bytes());
        bytes.extend((slots.len() as u64).to_be_bytes());
        for s in &slots {
            let left = self.kv.lease_left(s.lease).await?;
            for field in [s.token, expiry_in(left), s.holds, s.owner.len() as u64] {
                bytes.extend(field.to_be_bytes());
            }
            bytes.extend(&s.owner);
        }
        // Leases granted under a higher `max` may still be held: read with room for all.
        let held = Concurrency::new(self.model.max().max(slots.len() as u64));
        let state = (held.unwrap_or(self.model).decode(&bytes)).map_err(|e| Error::Corrupt {
            key: self.slots_prefix(key),
            reason: e.to_string(),
        })?;
        Ok(Some(state))
    }

    /// The time until the earliest of `slots`' leases expires.
    async fn earliest_expiry(&self, slots: &[Slot]) -> Result<Ticks, Error> {
        let mut earliest = Ticks::MAX;
        for s in slots {
            earliest = earliest.min(self.kv.lease_left(s.lease).await?);
        }
        Ok(if slots.is_empty() { 0 } else { earliest })
    }

    fn slot_key(&self, key: &[u8], i: u64) -> Vec<u8> {
        [self.slots_prefix(key), i.to_string().into_bytes()].concat()
    }
}

impl AsyncLeaseHost for EtcdLeases {
    type Error = Error;

    async fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired, Error> {
        Ok(self.attempt(request).await?.acquired)
    }

    async fn release(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        self.release_once(request, None).await
    }

    async fn renew(&self, request: &LeaseRequest<'_>) -> Result<Grant, Error> {
        self.renew_once(request).await
    }

    async fn state(&self, key: &[u8]) -> Result<Option<LeaseState>, Error> {
        self.table(key).await
    }
}

/// Whether `etcd_key` is one of the slots under `prefix` (`PREFIX key/`): the prefix
/// then a slot number. The slots of a key named under another (`key/0`'s `key/0/0`)
/// share the other's prefix and are not its own.
pub(crate) fn is_slot(prefix: &[u8], etcd_key: &[u8]) -> bool {
    etcd_key
        .strip_prefix(prefix)
        .is_some_and(|i| !i.is_empty() && i.iter().all(u8::is_ascii_digit))
}
