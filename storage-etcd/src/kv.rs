//! What the leases and the lock family share on etcd: a held key (an owner's hold count
//! on an etcd lease, its token) and the calls that grant, renew, rewrite and revoke the
//! etcd leases behind such keys.

use etcd_client::{Client, Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp};
use sluicegate_core::{Clock, Grant, LeaseError, MonotonicClock, Ticks, SECOND};

use crate::error::Error;

/// One held key as read: its key, its owner's hold count, its revisions, its etcd lease.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) key: Vec<u8>,
    pub(crate) owner: Vec<u8>,
    pub(crate) holds: u64,
    /// What the value holds between the hold count and the owner: nothing for a lease,
    /// the mode and the token for the lock family.
    pub(crate) head: Vec<u8>,
    /// The fencing token: the key's `create_revision`, unless the family's head says
    /// otherwise.
    pub(crate) token: u64,
    pub(crate) mod_revision: i64,
    pub(crate) lease: i64,
}

/// An etcd client with the calls on held keys and their etcd leases.
#[derive(Clone)]
pub(crate) struct Kv(Client);

impl std::fmt::Debug for Kv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client has no `Debug`: its channel says nothing useful.
        f.debug_struct("Kv").finish_non_exhaustive()
    }
}

impl Kv {
    pub(crate) fn new(client: Client) -> Self {
        Self(client)
    }

    pub(crate) fn client(&self) -> Client {
        self.0.clone()
    }

    /// A new etcd lease living at least `ttl`: its id and its ttl as granted.
    pub(crate) async fn new_lease(&self, ttl: Ticks) -> Result<(i64, Ticks), Error> {
        let seconds = i64::try_from(ttl.div_ceil(SECOND)).unwrap_or(i64::MAX);
        let lease = self.client().lease_grant(seconds, None).await?;
        Ok((lease.id(), seconds_to_ticks(lease.ttl())))
    }

    /// The time `lease` has left (0 once expired).
    pub(crate) async fn lease_left(&self, lease: i64) -> Result<Ticks, Error> {
        let left = self.client().lease_time_to_live(lease, None).await?;
        Ok(seconds_to_ticks(left.ttl()))
    }

    /// Revokes `lease`, which this call no longer uses; a failure leaves it to expire.
    pub(crate) async fn revoke(&self, lease: i64) {
        let _ = self.client().lease_revoke(lease).await;
    }

    /// Runs `op` if the owner's key is unchanged since it was read.
    pub(crate) async fn if_unchanged(&self, mine: &Slot, op: TxnOp) -> Result<bool, Error> {
        let txn = Txn::new()
            .when([Compare::mod_revision(
                mine.key.clone(),
                CompareOp::Equal,
                mine.mod_revision,
            )])
            .and_then([op]);
        Ok(self.client().txn(txn).await?.succeeded())
    }

    /// Rewrites the owner's key with `holds` on `lease` if it is unchanged since read.
    pub(crate) async fn rewrite(&self, mine: &Slot, holds: u64, lease: i64) -> Result<bool, Error> {
        let put = TxnOp::put(
            mine.key.clone(),
            mine.value(holds),
            Some(PutOptions::new().with_lease(lease)),
        );
        self.if_unchanged(mine, put).await
    }

    /// The owner's key attached to a new lease of `ttl` with `holds`, the old lease
    /// revoked: the new lease and its ttl, or `None` if the key changed meanwhile.
    pub(crate) async fn relet(
        &self,
        mine: &Slot,
        holds: u64,
        ttl: Ticks,
    ) -> Result<Option<(i64, Ticks)>, Error> {
        let (lease, lease_ttl) = self.new_lease(ttl).await?;
        if self.rewrite(mine, holds, lease).await? {
            self.revoke(mine.lease).await;
            Ok(Some((lease, lease_ttl)))
        } else {
            self.revoke(lease).await;
            Ok(None)
        }
    }

    /// Gives back one of the owner's holds on `mine`: the key rewritten with one hold
    /// less, or deleted (and its lease revoked) at the last; `None` if the key changed
    /// since it was read (read again).
    pub(crate) async fn release_hold(&self, mine: &Slot) -> Result<Option<Grant>, Error> {
        let holds = mine.holds - 1;
        if holds > 0 {
            if self.rewrite(mine, holds, mine.lease).await? {
                let left = self.lease_left(mine.lease).await?;
                return Ok(Some(Grant::new(mine.token, expiry_in(left), holds)));
            }
        } else if self
            .if_unchanged(mine, TxnOp::delete(mine.key.clone(), None))
            .await?
        {
            self.revoke(mine.lease).await;
            return Ok(Some(Grant::new(mine.token, MonotonicClock::new().now(), 0)));
        }
        Ok(None)
    }

    /// Extends the owner's key to `ttl` from now on a new lease: `None` if the key
    /// changed since it was read (read again).
    pub(crate) async fn renew_hold(&self, mine: &Slot, ttl: Ticks) -> Result<Option<Grant>, Error> {
        let relet = self.relet(mine, mine.holds, ttl).await?;
        Ok(relet.map(|(_, left)| Grant::new(mine.token, expiry_in(left), mine.holds)))
    }
}

/// The hold count after one more acquire.
pub(crate) fn one_more(mine: &Slot) -> Result<u64, LeaseError> {
    mine.holds.checked_add(1).ok_or(LeaseError::TooManyHolds)
}

impl Slot {
    /// The key's value with `holds`.
    pub(crate) fn value(&self, holds: u64) -> Vec<u8> {
        value(holds, &self.head, &self.owner)
    }
}

/// A held key's value: the hold count, `head` (see [`Slot::head`]), then the owner.
pub(crate) fn value(holds: u64, head: &[u8], owner: &[u8]) -> Vec<u8> {
    [&holds.to_be_bytes()[..], head, owner].concat()
}

/// Reads a held key's value back, `head` bytes long between the hold count and the
/// owner.
pub(crate) fn slot(kv: &KeyValue, head: usize) -> Result<Slot, Error> {
    let corrupt = |reason: &str| Error::Corrupt {
        key: kv.key().to_vec(),
        reason: reason.to_owned(),
    };
    let (holds, rest) = kv
        .value()
        .split_first_chunk::<8>()
        .ok_or_else(|| corrupt("shorter than a hold count"))?;
    let (head, owner) = (rest.split_at_checked(head)).ok_or_else(|| corrupt("too short"))?;
    let holds = u64::from_be_bytes(*holds);
    if holds == 0 || owner.is_empty() {
        return Err(corrupt("no holds or no owner"));
    }
    // Every key sluicegate writes expires with its etcd lease; one without would be
    // held forever.
    if kv.lease() == 0 {
        return Err(corrupt("not attached to an etcd lease"));
    }
    Ok(Slot {
        key: kv.key().to_vec(),
        owner: owner.to_vec(),
        holds,
        head: head.to_vec(),
        token: to_token(kv.create_revision()),
        mod_revision: kv.mod_revision(),
        lease: kv.lease(),
    })
}

/// A revision as a token (revisions are positive).
pub(crate) fn to_token(revision: i64) -> u64 {
    u64::try_from(revision).unwrap_or(0)
}

pub(crate) fn seconds_to_ticks(seconds: i64) -> Ticks {
    u64::try_from(seconds).unwrap_or(0).saturating_mul(SECOND)
}

/// The instant `left` from now on this process's clock.
pub(crate) fn expiry_in(left: Ticks) -> Ticks {
    MonotonicClock::new().now().saturating_add(left)
}
