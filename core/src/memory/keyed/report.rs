//! Reports on a keyed limiter: costs known after the work, charged to a key's state.

use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use std::borrow::ToOwned;
use std::vec::Vec;

use super::KeyedLimiter;
use crate::{Clock, ParamError, Report, ReportRequest, Reported, Reporter, Ticks};

impl<K: Hash + Eq, A: Report, C: Clock, H: BuildHasher> KeyedLimiter<K, A, C, H> {
    /// Reports a cost known after the work for `key`, now: `adjustment` units added to
    /// what the key has taken (negative: given back), within the algorithm's overdraft.
    /// A new key that its full shard refuses ([`OnFull::DenyNew`](super::OnFull))
    /// records nothing.
    pub fn report<Q>(&self, key: &Q, adjustment: i64) -> Reported
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.report_at(key, self.clock.now(), adjustment)
    }

    /// [`report`](Self::report) at `now`.
    fn report_at<Q>(&self, key: &Q, now: Ticks, adjustment: i64) -> Reported
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.update_exact(key, now, |state, now| {
            let (reported, state) = self.algorithm.report(state, now, adjustment);
            (Some(reported), reported.decision, state)
        })
        .unwrap_or_else(|decision| Reported::new(adjustment, 0, decision))
    }
}

/// The report on byte keys, at the request's time or the clock's (as [`Limiter`](crate::Limiter)).
impl<A: Report, C: Clock, H: BuildHasher> Reporter for KeyedLimiter<Vec<u8>, A, C, H> {
    /// Only a `now` beyond `MAX_TICKS` is an error.
    type Error = ParamError;

    fn report(&self, r: &ReportRequest<'_>) -> Result<Reported, ParamError> {
        let now = super::time(r.now, &self.clock)?;
        Ok(self.report_at(r.key, now, r.adjustment))
    }
}
