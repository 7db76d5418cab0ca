//! How many keys of a [`KeyedLimiter`] a memory budget holds.

use core::mem::size_of;

use super::room::SWEEP_BYTES;
use super::{Entry, KeyedLimiter, WideState};
use crate::Algorithm;

impl<K, A: Algorithm, C, H> KeyedLimiter<K, A, C, H> {
    /// The most bytes one key of `algorithm` can take, at the worst, in a limiter whose
    /// keys each hold up to `key_bytes` bytes on the heap (a `String` key's length, 0
    /// for a `u64`): its entry, in a table that holds `n` keys in fewer than `32n/7`
    /// slots (at most 7/8 full, doubled once more when deleted slots run out); a slot
    /// for its state and its index in the free list, in vectors that grow by doubling
    /// (every key may have one); the state's own heap
    /// ([`Algorithm::max_heap_bytes`]); and its share of a sweep's working room. The
    /// allocator's own overhead is not counted.
    pub fn bytes_per_key(algorithm: &A, key_bytes: usize) -> usize {
        let table = (size_of::<Entry<K>>() + 1) * 32 / 7 + 1;
        let slot = 2 * (size_of::<WideState<A::State>>() + size_of::<usize>());
        (table + slot + SWEEP_BYTES)
            .saturating_add(algorithm.max_heap_bytes())
            .saturating_add(key_bytes)
    }

    /// The most keys (at least one) that fit in `budget` bytes at the worst
    /// ([`bytes_per_key`](Self::bytes_per_key)): a `max_keys` that bounds a limiter's
    /// memory, beside a fixed cost per shard (its lock and the least its tables allocate:
    /// under a kilobyte).
    ///
    /// ```
    /// use sluicegate_core::memory::KeyedLimiter;
    /// use sluicegate_core::{SlidingLog, SECOND};
    ///
    /// // Up to 10 000 entries per key (320 KB at the worst), and keys of up to 1 KiB: a
    /// // 64 MiB budget holds about 200 keys.
    /// let log = SlidingLog::new(10_000, SECOND)?;
    /// let max_keys = KeyedLimiter::<String, SlidingLog>::max_keys_within(&log, 64 << 20, 1024);
    /// let limiter = KeyedLimiter::<String, _>::new(log, max_keys);
    /// assert_eq!(limiter.capacity(), max_keys);
    /// assert!((150..256).contains(&max_keys));
    /// # Ok::<(), sluicegate_core::ParamError>(())
    /// ```
    pub fn max_keys_within(algorithm: &A, budget: usize, key_bytes: usize) -> usize {
        (budget / Self::bytes_per_key(algorithm, key_bytes)).max(1)
    }
}
