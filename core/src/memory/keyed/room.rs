//! Room in a full shard of a [`KeyedLimiter`]: which keys it forgets first, and when it
//! refuses a new key rather than forget one that would refuse a request.

use core::hash::{BuildHasher, Hash};
use core::mem::size_of;
use core::sync::atomic::Ordering;
use std::vec::Vec;

use super::{Entry, KeyedLimiter, Shard, WideStates};
use crate::{Algorithm, Clock, Decision, Ticks};

/// What a full [`KeyedLimiter`] does when the only keys it could forget would refuse a
/// request now.
///
/// A full shard first drops its fresh keys, then forgets the keys that would admit a
/// request of cost 1 now, closest to fresh first: their clients are not being held
/// back. Forgetting a key that refuses would let its client, shut out, start again at
/// once; a client who chooses keys (user names, addresses) could do so at will by
/// spraying new keys, which defeats a limit on guessing passwords.
///
/// The default is [`DenyNew`](Self::DenyNew): a limiter exists to refuse, and a spray
/// must not undo a refusal. Its price is availability: a spray that fills a shard with
/// keys that refuse (each one spent, at least one admitted request per key and period)
/// refuses every new key of that shard until the earliest of them admits again, while
/// the keys already held are decided as before. Size `max_keys` above what a client can
/// hold at once ([`KeyedLimiter::max_keys_within`] turns a memory budget into it), watch
/// [`KeyedLimiter::refused`], and choose [`Evict`](Self::Evict) where refusing new
/// clients is the worse failure (a generous quota per client in front of a public API,
/// where no limit guards a secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnFull {
    /// Refuse the request on the new key: denied, `remaining` 0, `retry_after` the time
    /// until the earliest key held would admit (or the request's own wait, if longer),
    /// `reset_after` 0 (the key holds no state), the algorithm's `limit`. The shard
    /// remembers that instant and refuses without looking again until then. A `peek`
    /// stores nothing, so it still answers as for a fresh key.
    #[default]
    DenyNew,
    /// Forget the keys that refuse too, closest to fresh first: a forgotten key starts
    /// fresh if it returns (counted in [`KeyedLimiter::evicted`]).
    Evict,
}

/// A held key's place in a full shard's order of eviction: keys that would admit a
/// request of cost 1 before those that would refuse it, each the key fresh soonest
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    refuses: bool,
    fresh_at: Ticks,
}

/// The most bytes a sweep works in per key: each key's rank and instant, and the states
/// its evictions free, in a vector that grows by doubling.
pub(super) const SWEEP_BYTES: usize = size_of::<Rank>() + size_of::<Ticks>() + 2 * size_of::<u64>();

impl<K: Hash + Eq, A: Algorithm, C: Clock, H: BuildHasher> KeyedLimiter<K, A, C, H> {
    /// Makes room in `shard` for one more key, or says how long until it can. Only a full
    /// shard sweeps: until then a fresh key costs its entry and nothing else, and
    /// dropping it early would make its next decision an insertion. A sweep that leaves
    /// less than an eighth of the shard free evicts keys by [`Rank`] until an eighth is,
    /// so every sweep is paid by that many insertions. Under [`OnFull::DenyNew`] it
    /// evicts only keys that admit; one that finds too few evicts those and remembers
    /// when the first of the others admits: until then a full shard refuses at once.
    pub(super) fn make_room(
        &self,
        shard: &mut Shard<K, A::State>,
        now: Ticks,
    ) -> Result<(), Ticks> {
        if shard.table.len() < shard.capacity {
            return Ok(());
        }
        if now < shard.frees_at {
            return Err(shard.frees_at - now);
        }
        shard.retain(|e, wide| !self.is_fresh(e, wide, now));
        let most = shard.capacity - (shard.capacity / 8).max(1);
        let wanted = shard.table.len().saturating_sub(most);
        if wanted == 0 {
            return Ok(());
        }
        let (mut ranks, admits_at): (Vec<Rank>, Vec<Ticks>) = shard
            .table
            .iter()
            .map(|e| self.rank(e, &shard.wide, now))
            .unzip();
        let admitting = ranks.iter().filter(|r| !r.refuses).count();
        let count = match self.on_full {
            OnFull::DenyNew if admitting < wanted => {
                let first = ranks.iter().zip(&admits_at).filter(|(r, _)| r.refuses);
                let first = first.map(|(_, &at)| at).min().unwrap_or(now);
                shard.frees_at = first.max(now.saturating_add(1));
                admitting
            }
            OnFull::DenyNew | OnFull::Evict => wanted,
        };
        if count > 0 {
            let (_, &mut threshold, _) = ranks.select_nth_unstable(count - 1);
            let mut at_threshold = count - ranks.iter().filter(|&&r| r < threshold).count();
            shard.retain(|e, wide| {
                let rank = self.rank(e, wide, now).0;
                if rank < threshold {
                    false
                } else if rank == threshold && at_threshold > 0 {
                    at_threshold -= 1;
                    false
                } else {
                    true
                }
            });
            self.evicted.fetch_add(count as u64, Ordering::Relaxed);
        }
        if shard.table.len() < shard.capacity {
            Ok(())
        } else {
            Err(shard.frees_at - now)
        }
    }

    /// `entry`'s rank at `now`, and when it would admit a request of cost 1 (`now` if it
    /// does; its fresh instant if it never would).
    fn rank(&self, entry: &Entry<K>, wide: &WideStates<A::State>, now: Ticks) -> (Rank, Ticks) {
        let fresh_at = self.fresh_at(entry, wide);
        let one = self.algorithm.peek(self.state(entry, wide), now, 1);
        let admits_at = match one.retry_after {
            _ if one.allowed => now,
            Some(wait) => now.saturating_add(wait),
            None => fresh_at,
        };
        let rank = Rank {
            refuses: !one.allowed,
            fresh_at,
        };
        (rank, admits_at)
    }
}

/// The answer to a request on a new key that its full shard refuses for `wait` ticks
/// ([`OnFull::DenyNew`]), given `decided`, what the key would have had.
pub(super) fn refusal(decided: &Decision, wait: Ticks) -> Decision {
    Decision::deny(
        decided.limit,
        0,
        decided.retry_after.map(|r| r.max(wait)),
        0,
    )
}
