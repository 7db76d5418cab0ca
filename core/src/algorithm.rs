use crate::{Decision, DecodeError, Ticks};

/// A rate-limiting algorithm: validated parameters and a pure transition.
///
/// `decide` never reads a clock and never writes: hosts pass the key's state in
/// (`None` for a fresh key) and store the state it returns (`None` means the state is
/// fresh again and the key may be deleted). Requests whose `now` is earlier than one the
/// state has seen are decided as if at that later time, or more strictly; never as a
/// negative interval. Every decision at a `now` up to [`MAX_TICKS`](crate::MAX_TICKS) is
/// exact; a later `now` is decided as at `MAX_TICKS` (hosts taking a time from their
/// caller refuse it first with [`check_now`](crate::check_now)).
pub trait Algorithm {
    /// The per-key state.
    type State: Clone + core::fmt::Debug + PartialEq + Eq;

    /// Decides a request of `cost` units at `now`.
    fn decide(
        &self,
        state: Option<Self::State>,
        now: Ticks,
        cost: u64,
    ) -> (Decision, Option<Self::State>);

    /// What a request of `cost` would get at `now`, without changing anything.
    fn peek(&self, state: Option<Self::State>, now: Ticks, cost: u64) -> Decision {
        self.decide(state, now, cost).0
    }

    /// Appends the canonical encoding of `state`.
    fn encode<E: Extend<u8>>(&self, state: &Self::State, out: &mut E);

    /// Reads a state written by [`encode`](Self::encode), with the same parameters,
    /// in any host. Bytes that no valid state encodes are an error, never a panic.
    fn decode(&self, bytes: &[u8]) -> Result<Self::State, DecodeError>;

    /// The most heap bytes one state holds beyond its own `size_of` (a sliding log's
    /// entries, a composite's members), as allocated by its transitions: with the
    /// state's size, what a host keeping states in memory bounds a key's memory by.
    /// Zero, the default, for states without heap.
    fn max_heap_bytes(&self) -> usize {
        0
    }

    /// The canonical encoding of `state` as a new vector.
    #[cfg(feature = "alloc")]
    fn encode_to_vec(&self, state: &Self::State) -> alloc::vec::Vec<u8> {
        let mut out = alloc::vec::Vec::new();
        self.encode(state, &mut out);
        out
    }
}

/// Algorithms that can admit a request ahead of time: the caller waits `delay` once
/// instead of retrying ("wait in line").
pub trait Reserve: Algorithm {
    /// Admits `cost` if it can act within `max_wait` ticks of `now`, booking its slot.
    /// The decision's `delay` says how long to wait before acting. A `max_wait` beyond
    /// [`MAX_WAIT`](crate::limits::MAX_WAIT) (about 285 years) is taken as `MAX_WAIT`.
    fn reserve(
        &self,
        state: Option<Self::State>,
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> (Decision, Option<Self::State>);
}

/// Algorithms whose units can be taken in advance and given back: what a fleet node
/// needs to spend a share of a central limit locally (see `sluicegate-redis`'s `fleet`).
///
/// Implemented by the token bucket, the fixed window and the sliding counter. Not by the
/// leaky bucket or pacing queue (their units are slots in time, not a stock), the
/// sliding log (a unit is a timestamped entry: giving one back would rewrite history),
/// bans and composites.
pub trait Refund: Algorithm {
    /// Gives back `units` admitted earlier and never used, at `now`. A token bucket gets
    /// them back as tokens (never above its capacity); a window gets them back only while
    /// `now` is still in the window the state counts (a window that has ended is fresh,
    /// and units taken in it are gone with it), never below zero.
    fn refund(&self, state: Option<Self::State>, now: Ticks, units: u64) -> Option<Self::State>;

    /// Takes up to `max` units at once: as many as are admissible now (the decision's
    /// `remaining`), where an all-or-nothing request of `max` would get none near
    /// exhaustion. Returns the units taken, the decision for them (for none: the decision
    /// for a cost of zero) and the new state.
    fn take(
        &self,
        state: Option<Self::State>,
        now: Ticks,
        max: u64,
    ) -> (u64, Decision, Option<Self::State>) {
        let (idle, after) = self.decide(state.clone(), now, 0);
        let units = max.min(idle.remaining);
        if units == 0 {
            return (0, idle, after);
        }
        let (decision, after) = self.decide(state, now, units);
        (units, decision, after)
    }
}
