use crate::encoding::{self, tag, Reader};
use crate::fixed_window::WindowParams;
use crate::limits::MAX_LIMIT;
use crate::report::{adjust_count, refund_adjustment};
use crate::{Algorithm, Decision, DecodeError, ParamError, Ticks, MAX_TICKS};

/// Sliding window counter: the two-window estimate `prev · (period − e) / period + cur`,
/// where `e` is the time elapsed in the current aligned window; a request of cost `c` is
/// admitted iff `estimate + c <= limit`, compared exactly in integers.
///
/// O(1) state. It assumes the previous window's traffic was spread evenly: for even
/// traffic it matches the exact [`SlidingLog`](crate::SlidingLog); it never admits more
/// than `limit` in an aligned window, but when the previous window's traffic was bunched
/// at its end it can admit up to (not including) `2 × limit` in a sliding window of one
/// period, and when it was bunched at its start it admits less than the log would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingCounter {
    params: WindowParams,
    overdraft: u64,
}

/// The state of a [`SlidingCounter`]: the current window and the cost admitted in it
/// and in the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingCounterState {
    window: u64,
    prev: u64,
    cur: u64,
}

/// A presence bit and the window index in the high word; both counts, each at most the
/// limit plus the overdraft (below 2^31 each), in the low one.
#[cfg(feature = "memory")]
impl crate::memory::__bench::WordState for SlidingCounterState {
    fn to_word(self) -> u128 {
        1 << 127
            | u128::from(self.window) << 64
            | u128::from(self.prev) << 32
            | u128::from(self.cur)
    }

    fn from_word(word: u128) -> Option<Self> {
        let (high, low) = crate::memory::split_word(word);
        (high >> 63 == 1).then_some(Self {
            window: high & !(1 << 63),
            prev: low >> 32,
            cur: low & u64::from(u32::MAX),
        })
    }
}

impl SlidingCounter {
    /// At most `limit` per sliding `period` ticks, estimated from two counters.
    pub fn new(limit: u64, period: Ticks) -> Result<Self, ParamError> {
        Ok(Self {
            params: WindowParams::new(limit, period, MAX_LIMIT)?,
            overdraft: 0,
        })
    }

    /// The same limit, letting a report take the estimate up to `overdraft` (at most
    /// 10^9) units beyond it; the debt is carried into the next window, weighted like
    /// any count.
    pub fn with_overdraft(self, overdraft: u64) -> Result<Self, ParamError> {
        Ok(Self {
            overdraft: ParamError::check("overdraft", overdraft, 0, MAX_LIMIT)?,
            ..self
        })
    }

    /// The parameters this was built from.
    pub const fn params(&self) -> WindowParams {
        self.params
    }

    /// The window to decide in at `now` and its previous and current counts: the stored
    /// window if it is now's (or later: `now` went backwards), else now's.
    fn roll(&self, state: Option<SlidingCounterState>, now: Ticks) -> (u64, u64, u64) {
        let window = self.params.window_of(now);
        match state {
            Some(s) if s.window >= window => (s.window, s.prev, s.cur),
            Some(s) if s.window + 1 == window => (window, s.cur, 0),
            _ => (window, 0, 0),
        }
    }

    /// How long from `elapsed` into the current window until `cost` fits, or `None` if
    /// it never does. Only called when it does not fit now.
    fn wait(&self, elapsed: Ticks, prev: u64, cur: u64, cost: u64) -> Option<Ticks> {
        let WindowParams { limit, period } = self.params;
        // The first elapsed time at which `weight · (period − e) <= room · period`.
        let first_fit = |weight: u64, room: u64| {
            if weight == 0 {
                return 0;
            }
            let fits = u128::from(room) * u128::from(period) / u128::from(weight);
            period - u64::try_from(fits).unwrap_or(u64::MAX).min(period)
        };
        if cost > limit {
            None
        } else if cur + cost <= limit {
            Some(first_fit(prev, limit - cur - cost) - elapsed)
        } else {
            // Only in the next window, where `cur` becomes the previous count.
            Some(period - elapsed + first_fit(cur, limit - cost))
        }
    }
}

#[cfg(feature = "alloc")]
impl SlidingCounter {
    /// `state` of `from` as this counter's at `now` (see `AnyAlgorithm::carry_from`).
    /// With the same period, the same windows: the previous count as far as this limit
    /// holds it, the weight of the rest at `now` moved into the current count. With
    /// another, the weighted use at `now` in this counter's current window. Each count
    /// at most this limit and its overdraft.
    pub(crate) fn carry(
        &self,
        from: &Self,
        state: &SlidingCounterState,
        now: Ticks,
    ) -> Option<SlidingCounterState> {
        let now = now.min(MAX_TICKS);
        let (window, prev, cur) = from.roll(Some(*state), now);
        let period = from.params.period;
        let start = from.params.start_of(window);
        let left = u128::from(period - (now.max(start) - start));
        // What `prev` counts at `now`, in whole units rounded up (as `decide` does).
        let weighted = |prev: u64| {
            let units = (u128::from(prev) * left).div_ceil(u128::from(period));
            u64::try_from(units).unwrap_or(u64::MAX)
        };
        let most = self.params.limit + self.overdraft;
        let (window, prev, cur) = if self.params.period == period {
            let kept = prev.min(most);
            let moved = weighted(prev) - weighted(kept);
            (window, kept, cur.saturating_add(moved).min(most))
        } else {
            let cur = cur.saturating_add(weighted(prev)).min(most);
            (self.params.window_of(now), 0, cur)
        };
        (prev + cur > 0).then_some(SlidingCounterState { window, prev, cur })
    }
}

impl TryFrom<WindowParams> for SlidingCounter {
    type Error = ParamError;
    fn try_from(params: WindowParams) -> Result<Self, ParamError> {
        Self::new(params.limit, params.period)
    }
}

impl Algorithm for SlidingCounter {
    type State = SlidingCounterState;

    fn decide(
        &self,
        state: Option<SlidingCounterState>,
        now: Ticks,
        cost: u64,
    ) -> (Decision, Option<SlidingCounterState>) {
        let WindowParams { limit, period } = self.params;
        let now = now.min(MAX_TICKS);
        let (window, prev, mut cur) = self.roll(state, now);
        let start = self.params.start_of(window);
        let elapsed = now.max(start) - start;
        // prev · (period − elapsed) / period, as a numerator over `period`.
        let carried = u128::from(prev) * u128::from(period - elapsed);
        let fits = |cur: u64, cost: u64| {
            carried + u128::from(cur + cost) * u128::from(period)
                <= u128::from(limit) * u128::from(period)
        };
        let allowed = cost <= limit && fits(cur, cost);
        if allowed {
            cur += cost;
        }
        let carried_units = u64::try_from(carried.div_ceil(u128::from(period))).unwrap_or(u64::MAX);
        let remaining = limit.saturating_sub(cur).saturating_sub(carried_units);
        let reset_after = match (prev, cur) {
            (0, 0) => 0,
            (_, 0) => period - elapsed,
            _ => 2 * period - elapsed,
        };
        let state = (reset_after > 0).then_some(SlidingCounterState { window, prev, cur });
        let decision = if allowed {
            Decision::admit(limit, remaining, reset_after, 0)
        } else {
            let retry_after = self.wait(elapsed, prev, cur, cost);
            Decision::deny(limit, remaining, retry_after, reset_after)
        };
        (decision, state)
    }

    fn encode<E: Extend<u8>>(&self, state: &SlidingCounterState, out: &mut E) {
        encoding::write(
            out,
            tag::SLIDING_COUNTER,
            &[state.window, state.prev, state.cur],
        );
    }

    fn decode(&self, bytes: &[u8]) -> Result<SlidingCounterState, DecodeError> {
        let limit = self.params.limit + self.overdraft;
        let mut reader = Reader::new(bytes, tag::SLIDING_COUNTER)?;
        let window = reader.u64_where("window", &|w| self.params.valid_window(w))?;
        let prev = reader.u64_where("prev", &|p| p <= limit)?;
        let cur = reader.u64_where("cur", &|c| c <= limit && prev + c > 0)?;
        reader.finish()?;
        Ok(SlidingCounterState { window, prev, cur })
    }
}

impl crate::Report for SlidingCounter {
    fn overdraft(&self) -> u64 {
        self.overdraft
    }

    /// On now's current count: a report records while the estimate stays within
    /// `limit + overdraft`; a refund comes off the current window's count only (the
    /// previous window's count is history, and units taken in it ended with it).
    fn adjust(
        &self,
        state: Option<SlidingCounterState>,
        now: Ticks,
        adjustment: i64,
    ) -> (u64, Option<SlidingCounterState>) {
        let now = now.min(MAX_TICKS);
        let (window, prev, cur) = self.roll(state, now);
        let period = self.params.period;
        let start = self.params.start_of(window);
        let carried = u128::from(prev) * u128::from(period - (now.max(start) - start));
        // The most `cur` may reach: `carried + cur · period <= (limit + overdraft) · period`.
        let most = (u128::from(self.params.limit + self.overdraft) * u128::from(period))
            .saturating_sub(carried)
            / u128::from(period);
        let room = u64::try_from(most).unwrap_or(u64::MAX).saturating_sub(cur);
        let (recorded, cur) = adjust_count(cur, room, adjustment);
        let state = (prev + cur > 0).then_some(SlidingCounterState { window, prev, cur });
        (recorded, state)
    }
}

impl crate::Refund for SlidingCounter {
    /// See [`Report::adjust`](crate::Report::adjust).
    fn refund(
        &self,
        state: Option<SlidingCounterState>,
        now: Ticks,
        units: u64,
    ) -> Option<SlidingCounterState> {
        crate::Report::adjust(self, state, now, refund_adjustment(units)).1
    }
}
