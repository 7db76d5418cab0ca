//! Costs known only after the work: a decision admits on an estimate, and the actual
//! cost is reported afterwards as a signed adjustment (see `docs/design/reported-costs.md`).

use crate::{Algorithm, Decision, Ticks};

/// What a report did: the units it recorded, the units it could not, and the key's
/// standing after it.
///
/// A positive adjustment records units up to the algorithm's overdraft (the most the key
/// may owe beyond its limit); a negative one (a refund) returns units up to what the key
/// has taken (never above capacity, never below an empty window). `recorded + dropped`
/// is the adjustment's magnitude.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Reported {
    /// Units added to (or, for a refund, taken off) what the key has taken.
    pub recorded: u64,
    /// Units beyond the bound, not recorded.
    pub dropped: u64,
    /// What a request of cost zero gets after the report: `allowed` is false while the
    /// key is in debt, and `retry_after` says when it is out.
    pub decision: Decision,
}

impl Reported {
    /// A report whose `recorded` units of `adjustment` were applied; for hosts that apply
    /// it elsewhere (a Lua script) and report here.
    pub const fn new(adjustment: i64, recorded: u64, decision: Decision) -> Self {
        Self {
            recorded,
            dropped: adjustment.unsigned_abs().saturating_sub(recorded),
            decision,
        }
    }
}

/// Algorithms whose key may be charged after the decision: the buckets, the windows, the
/// sliding log and composites of them.
///
/// Not the pacing queue (its units are slots in time already handed out as delays: a
/// cost reported after acting cannot move a slot that was used, and a refund would let
/// a later caller act before ones already told to wait), nor bans (a report is not a
/// request and denies nothing, so a ban has nothing to count; its limit can report
/// directly).
pub trait Report: Algorithm {
    /// The most units the key may owe beyond its limit (0: never below zero).
    fn overdraft(&self) -> u64;

    /// Adds `adjustment` units to what the key has taken at `now` (a negative one gives
    /// them back), within the bounds; returns the units recorded and the new state.
    fn adjust(
        &self,
        state: Option<Self::State>,
        now: Ticks,
        adjustment: i64,
    ) -> (u64, Option<Self::State>);

    /// [`adjust`](Self::adjust), with what it recorded and dropped and the key's standing
    /// after it.
    fn report(
        &self,
        state: Option<Self::State>,
        now: Ticks,
        adjustment: i64,
    ) -> (Reported, Option<Self::State>) {
        let (recorded, state) = self.adjust(state, now, adjustment);
        let decision = self.peek(state.clone(), now, 0);
        (Reported::new(adjustment, recorded, decision), state)
    }
}

/// A count moved by `adjustment`: up by at most `room` units, down to zero at most.
/// Returns the units recorded and the new count.
pub(crate) const fn adjust_count(count: u64, room: u64, adjustment: i64) -> (u64, u64) {
    let units = adjustment.unsigned_abs();
    if adjustment >= 0 {
        let recorded = if units < room { units } else { room };
        (recorded, count + recorded)
    } else {
        let recorded = if units < count { units } else { count };
        (recorded, count - recorded)
    }
}

/// A refund of `units` as a report's adjustment (refunds beyond `i64::MAX` give back
/// everything there is anyway).
pub(crate) fn refund_adjustment(units: u64) -> i64 {
    -i64::try_from(units).unwrap_or(i64::MAX)
}
