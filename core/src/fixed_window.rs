use crate::encoding::{self, tag, Reader};
use crate::limits::{MAX_LIMIT, MAX_PERIOD};
use crate::report::{adjust_count, refund_adjustment};
use crate::{Algorithm, Decision, DecodeError, ParamError, Ticks, MAX_TICKS};

/// Parameters of the window algorithms: at most `limit` units of cost per `period` ticks.
///
/// Ranges: `limit` in `1..=10^9` (the sliding log: `1..=10^5`), `period` in
/// `1..=366 days`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WindowParams {
    /// Units of cost admitted per window.
    pub limit: u64,
    /// The window's length, in ticks.
    pub period: Ticks,
}

impl WindowParams {
    pub(crate) fn new(limit: u64, period: Ticks, max_limit: u64) -> Result<Self, ParamError> {
        Ok(Self {
            limit: ParamError::check("limit", limit, 1, max_limit)?,
            period: ParamError::check("period", period, 1, MAX_PERIOD)?,
        })
    }

    /// The index of the window holding `now`, windows aligned to tick 0.
    pub(crate) const fn window_of(&self, now: Ticks) -> u64 {
        now / self.period
    }

    /// The first tick of window `index`.
    pub(crate) const fn start_of(&self, index: u64) -> Ticks {
        index.saturating_mul(self.period)
    }

    /// Whether a stored window index could have come from a valid `now`.
    pub(crate) const fn valid_window(&self, index: u64) -> bool {
        index <= MAX_TICKS / self.period
    }
}

/// Fixed window: windows `[k·period, (k+1)·period)` aligned to tick 0; a request of cost
/// `c` is admitted iff `count + c <= limit`, and adds `c` to the window's count.
///
/// A denied request changes nothing, unless built with
/// [`counting_denied`](Self::counting_denied), which counts denied cost too (so a client
/// that keeps hammering stays blocked), as some peers do. Decided cost never takes the
/// count beyond `limit`: there no decision differs (no positive cost fits, and the
/// window ends at the same time), so counted cost saturates there and every host stores
/// the same bytes. Only a [report](crate::Report) takes it further, up to `limit +
/// overdraft`: a debt that admits nothing, not even a cost of zero, until the window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    params: WindowParams,
    count_denied: bool,
    overdraft: u64,
}

/// The state of a [`FixedWindow`]: the current window and the cost counted in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedWindowState {
    window: u64,
    count: u64,
}

/// Window index in the high word, count (never zero in a stored state) in the low one.
#[cfg(feature = "memory")]
impl crate::memory::__bench::WordState for FixedWindowState {
    fn to_word(self) -> u128 {
        u128::from(self.window) << 64 | u128::from(self.count)
    }

    fn from_word(word: u128) -> Option<Self> {
        let (window, count) = crate::memory::split_word(word);
        (count > 0).then_some(Self { window, count })
    }
}

impl FixedWindow {
    /// At most `limit` per aligned window of `period` ticks.
    pub fn new(limit: u64, period: Ticks) -> Result<Self, ParamError> {
        Ok(Self {
            params: WindowParams::new(limit, period, MAX_LIMIT)?,
            count_denied: false,
            overdraft: 0,
        })
    }

    /// The same limit, letting a report count up to `overdraft` (at most 10^9) units
    /// beyond it: the window stays shut until it ends (its debt ends with it).
    pub fn with_overdraft(self, overdraft: u64) -> Result<Self, ParamError> {
        Ok(Self {
            overdraft: ParamError::check("overdraft", overdraft, 0, MAX_LIMIT)?,
            ..self
        })
    }

    /// The same limit, counting denied cost as well as admitted cost.
    pub const fn counting_denied(self) -> Self {
        Self {
            count_denied: true,
            ..self
        }
    }

    /// The parameters this was built from.
    pub const fn params(&self) -> WindowParams {
        self.params
    }

    /// Whether denied cost counts too (see [`FixedWindow::counting_denied`]).
    pub const fn counts_denied(&self) -> bool {
        self.count_denied
    }
}

#[cfg(feature = "alloc")]
impl FixedWindow {
    /// `state` of `from` as this window's at `now` (see `AnyAlgorithm::carry_from`):
    /// the same window where the periods are equal, else the count of `from`'s window
    /// holding `now` in this window's; at most this limit and its overdraft.
    pub(crate) fn carry(
        &self,
        from: &Self,
        state: &FixedWindowState,
        now: Ticks,
    ) -> Option<FixedWindowState> {
        let now = now.min(MAX_TICKS);
        // A window that ended before `now` holds nothing.
        if state.window < from.params.window_of(now) {
            return None;
        }
        let window = if self.params.period == from.params.period {
            state.window
        } else {
            self.params.window_of(now)
        };
        let count = state.count.min(self.params.limit + self.overdraft);
        (count > 0).then_some(FixedWindowState { window, count })
    }
}

impl TryFrom<WindowParams> for FixedWindow {
    type Error = ParamError;
    fn try_from(params: WindowParams) -> Result<Self, ParamError> {
        Self::new(params.limit, params.period)
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    fn decide(
        &self,
        state: Option<FixedWindowState>,
        now: Ticks,
        cost: u64,
    ) -> (Decision, Option<FixedWindowState>) {
        let WindowParams { limit, period } = self.params;
        let now = now.min(MAX_TICKS);
        let mut window = self.params.window_of(now);
        let mut count = 0;
        if let Some(s) = state {
            // A window later than now's means now went backwards: use the stored one.
            if s.window >= window {
                window = s.window;
                count = s.count;
            }
        }
        let now = now.max(self.params.start_of(window));
        let until_end = self.params.start_of(window).saturating_add(period) - now;
        let (decision, count) = window_decision(limit, count, cost, self.count_denied, until_end);
        let state = (count > 0).then_some(FixedWindowState { window, count });
        (decision, state)
    }

    fn encode<E: Extend<u8>>(&self, state: &FixedWindowState, out: &mut E) {
        encoding::write(out, tag::FIXED_WINDOW, &[state.window, state.count]);
    }

    fn decode(&self, bytes: &[u8]) -> Result<FixedWindowState, DecodeError> {
        let mut reader = Reader::new(bytes, tag::FIXED_WINDOW)?;
        let window = reader.u64_where("window", &|w| self.params.valid_window(w))?;
        // Counted cost saturates at the limit, so no count beyond it (and the overdraft)
        // is ever written.
        let most = self.params.limit + self.overdraft;
        let count = reader.u64_where("count", &|c| (1..=most).contains(&c))?;
        reader.finish()?;
        Ok(FixedWindowState { window, count })
    }
}

impl crate::Report for FixedWindow {
    fn overdraft(&self) -> u64 {
        self.overdraft
    }

    /// On now's window (a stored window before it has ended: fresh), the count at most
    /// `limit + overdraft`.
    fn adjust(
        &self,
        state: Option<FixedWindowState>,
        now: Ticks,
        adjustment: i64,
    ) -> (u64, Option<FixedWindowState>) {
        let current = self.params.window_of(now.min(MAX_TICKS));
        let (window, count) = match state {
            Some(s) if s.window >= current => (s.window, s.count),
            _ => (current, 0),
        };
        let room = (self.params.limit + self.overdraft).saturating_sub(count);
        let (recorded, count) = adjust_count(count, room, adjustment);
        (
            recorded,
            (count > 0).then_some(FixedWindowState { window, count }),
        )
    }
}

impl crate::Refund for FixedWindow {
    fn refund(
        &self,
        state: Option<FixedWindowState>,
        now: Ticks,
        units: u64,
    ) -> Option<FixedWindowState> {
        crate::Report::adjust(self, state, now, refund_adjustment(units)).1
    }
}

/// A window's decision on a request of `cost` with `count` taken, `until_end` before the
/// window ends; returns it and the new count. A count above the limit (a reported debt)
/// admits nothing, not even a cost of zero, until the window ends.
pub(crate) fn window_decision(
    limit: u64,
    count: u64,
    cost: u64,
    count_denied: bool,
    until_end: Ticks,
) -> (Decision, u64) {
    let allowed = count.checked_add(cost).is_some_and(|total| total <= limit);
    let mut count = count;
    if allowed || count_denied {
        // Counted cost saturates at the limit (a larger count decides the same), and
        // never lowers a debt.
        count = count.saturating_add(cost).min(limit.max(count));
    }
    let remaining = limit.saturating_sub(count);
    let reset_after = if count > 0 { until_end } else { 0 };
    let decision = if allowed {
        Decision::admit(limit, remaining, reset_after, 0)
    } else {
        let retry_after = (cost <= limit).then_some(until_end);
        Decision::deny(limit, remaining, retry_after, reset_after)
    };
    (decision, count)
}
