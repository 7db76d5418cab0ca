use crate::encoding::{self, tag, Reader};
use crate::limits::MAX_PERIOD;
use crate::{Algorithm, Decision, DecodeError, ParamError, Ticks, MAX_TICKS};

/// A penalty box around any limiter: once the cost it denies a key within one aligned
/// window of `window` ticks exceeds `threshold`, the key is denied outright for
/// `duration` ticks.
///
/// While banned, requests change nothing; the inner limiter resumes where it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ban<A> {
    inner: A,
    threshold: u64,
    window: Ticks,
    duration: Ticks,
}

/// The state of a [`Ban`]: the inner limiter's state, the cost denied in the current
/// window, and the end of the ban (zero when none was imposed).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BanState<S> {
    inner: Option<S>,
    window: u64,
    denied: u64,
    banned_until: Ticks,
}

impl<A: Algorithm> Ban<A> {
    /// Bans a key for `duration` once more than `threshold` cost is denied within one
    /// window of `window` ticks. `threshold` is below `u64::MAX` (the state keeps
    /// `threshold + 1` for "over"); `window` and `duration` are in `1..=366 days`.
    pub fn new(
        inner: A,
        threshold: u64,
        window: Ticks,
        duration: Ticks,
    ) -> Result<Self, ParamError> {
        Ok(Self {
            inner,
            threshold: ParamError::check("threshold", threshold, 0, u64::MAX - 1)?,
            window: ParamError::check("window", window, 1, MAX_PERIOD)?,
            duration: ParamError::check("duration", duration, 1, MAX_PERIOD)?,
        })
    }

    /// The wrapped limiter.
    pub const fn inner(&self) -> &A {
        &self.inner
    }

    /// Denied units within one window that trigger a ban (more than this many).
    pub const fn threshold(&self) -> u64 {
        self.threshold
    }

    /// The window, in ticks, over which denied units are counted.
    pub const fn window(&self) -> Ticks {
        self.window
    }

    /// How long, in ticks, a ban lasts.
    pub const fn duration(&self) -> Ticks {
        self.duration
    }

    /// The most denied cost a state holds: one unit past the threshold already bans.
    const fn max_denied(&self) -> u64 {
        self.threshold.saturating_add(1)
    }

    /// `state` of `from` as this ban's at `now` (see `AnyAlgorithm::carry_from`), its
    /// limit's state carried by `inner`: the ban's end as it is, the cost denied in the
    /// window holding `now` (at most this threshold's) in this ban's window holding it.
    #[cfg(feature = "alloc")]
    pub(crate) fn carry(
        &self,
        from: &Self,
        state: &BanState<A::State>,
        now: Ticks,
        inner: impl FnOnce(&A::State) -> Option<A::State>,
    ) -> Option<BanState<A::State>> {
        let now = now.min(MAX_TICKS);
        // A window index counts windows of its own length: kept only where that is this one's.
        let (window, denied) = if state.window < now / from.window {
            (now / self.window, 0)
        } else if self.window == from.window {
            (state.window, state.denied)
        } else {
            (now / self.window, state.denied)
        };
        let carried = BanState {
            inner: state.inner.as_ref().and_then(inner),
            window,
            denied: denied.min(self.max_denied()),
            banned_until: state.banned_until,
        };
        let fresh = carried.inner.is_none() && carried.denied == 0 && carried.banned_until <= now;
        (!fresh).then_some(carried)
    }
}

impl<A: Algorithm> Algorithm for Ban<A> {
    type State = BanState<A::State>;

    fn decide(
        &self,
        state: Option<Self::State>,
        now: Ticks,
        cost: u64,
    ) -> (Decision, Option<Self::State>) {
        let now = now.min(MAX_TICKS);
        let mut state = state.unwrap_or(BanState {
            inner: None,
            window: 0,
            denied: 0,
            banned_until: 0,
        });
        let window = now / self.window;
        if state.window < window {
            state.window = window;
            state.denied = 0;
        }
        let (mut decision, inner) = self.inner.decide(state.inner.clone(), now, cost);
        let banned = now < state.banned_until;
        if banned {
            // The inner state stays as stored, so report its reset time, not the one
            // it would have had after admitting.
            let stored = self.inner.peek(state.inner.clone(), now, 0);
            decision = Decision::deny(decision.limit, 0, decision.retry_after, stored.reset_after);
        } else if decision.allowed {
            state.inner = inner;
        } else {
            // Beyond `threshold + 1` no decision differs: denied cost saturates there.
            state.denied = state.denied.saturating_add(cost).min(self.max_denied());
            if state.denied > self.threshold {
                state.banned_until = now.saturating_add(self.duration);
                decision.remaining = 0;
            }
        }
        let ban_left = state.banned_until.saturating_sub(now);
        if !decision.allowed {
            decision.retry_after = decision.retry_after.map(|t| t.max(ban_left));
        }
        let window_left = if state.denied > 0 {
            (state.window + 1).saturating_mul(self.window) - now
        } else {
            0
        };
        decision.reset_after = decision.reset_after.max(ban_left).max(window_left);
        let fresh = state.inner.is_none() && state.denied == 0 && ban_left == 0;
        (decision, (!fresh).then_some(state))
    }

    /// The inner limit's state is held inline.
    fn max_heap_bytes(&self) -> usize {
        self.inner().max_heap_bytes()
    }

    fn encode<E: Extend<u8>>(&self, state: &Self::State, out: &mut E) {
        encoding::write(
            out,
            tag::BAN,
            &[state.window, state.denied, state.banned_until],
        );
        if let Some(inner) = &state.inner {
            self.inner.encode(inner, out);
        }
    }

    fn decode(&self, bytes: &[u8]) -> Result<Self::State, DecodeError> {
        let mut reader = Reader::new(bytes, tag::BAN)?;
        let window = reader.u64_where("window", &|w| w <= MAX_TICKS / self.window)?;
        let denied = reader.u64_where("denied", &|d| d <= self.max_denied())?;
        let banned_until = reader.u64_where("banned_until", &|t| {
            t <= MAX_TICKS.saturating_add(MAX_PERIOD)
        })?;
        let rest = reader.rest();
        let inner = if rest.is_empty() {
            None
        } else {
            Some(self.inner.decode(rest)?)
        };
        Ok(BanState {
            inner,
            window,
            denied,
            banned_until,
        })
    }
}
