//! Carrying a key's state across a change of its limit's parameters, so that what the key
//! has used counts under the new limit at once (see `docs/` on changing a policy).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::mem::discriminant;

use crate::{AnyAlgorithm, AnyState, Ticks};

impl AnyAlgorithm {
    /// The state under these parameters that holds the use `state` holds under `from` at
    /// `now`, so a limit's change applies at once: a raise admits what the key has left
    /// under the new limit, a cut refuses until the use it holds has passed. A window of
    /// the same period keeps its window and count; one of another period puts the count
    /// (or a sliding counter's weighted use) of `from`'s window holding `now` in its own.
    /// A sliding log keeps its entries within both periods, a bucket its units in use
    /// (exactly, rescaled to its rate), a ban its end and denied cost. Each is held to
    /// what these parameters store (a limit or capacity plus its overdraft, the newest
    /// entries of a log), so the result always encodes and decodes under them. `None`:
    /// fresh, because `state` holds nothing at `now`, or the kinds (or a composite's
    /// members, or a ban's presence) differ.
    pub fn carry_from(
        &self,
        from: &AnyAlgorithm,
        state: &AnyState,
        now: Ticks,
    ) -> Option<AnyState> {
        if !self.same_shape(from) {
            return None;
        }
        self.carried(from, state, now)
    }

    /// Whether `from` is of the same variant, member by member.
    fn same_shape(&self, from: &AnyAlgorithm) -> bool {
        match (self, from) {
            (Self::Composite(to), Self::Composite(from)) => {
                to.members().len() == from.members().len()
                    && to
                        .members()
                        .iter()
                        .zip(from.members())
                        .all(|(t, f)| t.same_shape(f))
            }
            (Self::Ban(to), Self::Ban(from)) => to.inner().same_shape(from.inner()),
            (to, from) => discriminant(to) == discriminant(from),
        }
    }

    /// [`carry_from`](Self::carry_from) of the same shape; a state of another variant
    /// than `from`'s is fresh.
    fn carried(&self, from: &AnyAlgorithm, state: &AnyState, now: Ticks) -> Option<AnyState> {
        match (self, from, state) {
            (Self::FixedWindow(to), Self::FixedWindow(from), AnyState::FixedWindow(s)) => {
                to.carry(from, s, now).map(AnyState::FixedWindow)
            }
            (Self::SlidingLog(to), Self::SlidingLog(from), AnyState::SlidingLog(s)) => {
                to.carry(from, s, now).map(AnyState::SlidingLog)
            }
            (Self::SlidingCounter(to), Self::SlidingCounter(from), AnyState::SlidingCounter(s)) => {
                to.carry(from, s, now).map(AnyState::SlidingCounter)
            }
            (Self::TokenBucket(to), Self::TokenBucket(from), AnyState::TokenBucket(s)) => {
                to.0.carry(&from.0, s, now).map(AnyState::TokenBucket)
            }
            (Self::LeakyBucket(to), Self::LeakyBucket(from), AnyState::LeakyBucket(s)) => {
                to.0.carry(&from.0, s, now).map(AnyState::LeakyBucket)
            }
            (Self::Pacing(to), Self::Pacing(from), AnyState::Pacing(s)) => {
                to.0.carry(&from.0, s, now).map(AnyState::Pacing)
            }
            (Self::CalendarWindow(to), Self::CalendarWindow(from), AnyState::CalendarWindow(s)) => {
                to.carry(from, s, now).map(AnyState::CalendarWindow)
            }
            (Self::Composite(to), Self::Composite(from), AnyState::Composite(states))
                if states.len() == to.members().len() =>
            {
                let carried: Vec<Option<AnyState>> = to
                    .members()
                    .iter()
                    .zip(from.members())
                    .zip(states)
                    .map(|((t, f), s)| s.as_ref().and_then(|s| t.carried(f, s, now)))
                    .collect();
                carried
                    .iter()
                    .any(Option::is_some)
                    .then_some(AnyState::Composite(carried))
            }
            (Self::Ban(to), Self::Ban(from), AnyState::Ban(s)) => to
                .carry(from, s, now, |inner| {
                    to.inner().carried(from.inner(), inner, now)
                })
                .map(|s| AnyState::Ban(Box::new(s))),
            _ => None,
        }
    }
}
