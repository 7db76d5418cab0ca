//! A key's state moved in and out of a [`KeyedLimiter`] whole: what a host needs to carry
//! each key's use to a limiter with new parameters (see `AnyAlgorithm::carry_from`).

use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use std::borrow::ToOwned;

use super::{write, KeyedLimiter};
use crate::{Algorithm, Clock};

impl<K: Hash + Eq, A: Algorithm, C: Clock, H: BuildHasher> KeyedLimiter<K, A, C, H> {
    /// Removes `key` and returns the state it held (`None`: it held none); its next
    /// request finds it fresh.
    pub fn remove_state<Q>(&self, key: &Q) -> Option<A::State>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut guard = write(self.shard(hash));
        let shard = &mut *guard;
        let entry = shard
            .table
            .find_entry(hash, |e| e.key.borrow() == key)
            .ok()?;
        let state = self.state(entry.get(), &shard.wide);
        let (removed, _) = entry.remove();
        shard.wide.release(removed.word.into_inner());
        state
    }

    /// Gives `key` `state` if it holds none, now: stored as a request of cost zero on it
    /// leaves it (nothing, where it is fresh by now). Returns whether `key` held none (or a
    /// state fresh by now); a key holding a state keeps it. As for a request on a new key, a full shard makes
    /// room as [`OnFull`](super::OnFull) says: under `DenyNew`, where only keys that
    /// refuse are left, it stores nothing, returns `false` and counts the key in
    /// [`refused`](Self::refused).
    pub fn seed_state<Q>(&self, key: &Q, state: A::State) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.update_exact(key, self.clock.now(), |held, now| {
            let kept = self.algorithm.peek(held.clone(), now, 0);
            // A state is fresh exactly when its reset is due.
            if kept.reset_after > 0 {
                return (None, kept, held);
            }
            let (decision, state) = self.algorithm.decide(Some(state.clone()), now, 0);
            (Some(()), decision, state)
        })
        .is_ok()
    }
}
