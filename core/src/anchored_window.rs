use crate::encoding::{self, tag, Reader};
use crate::fixed_window::WindowParams;
use crate::limits::MAX_LIMIT;
use crate::{Algorithm, Decision, DecodeError, ParamError, Ticks, MAX_TICKS};

/// Anchored window: a fixed window of `period` ticks that starts at the first hit it
/// counts, not at a multiple of the period (Kuadrant limitador's counters); a request of
/// cost `c` is admitted iff `count + c <= limit` and adds `c`. A window that has ended
/// is fresh: the next counted hit starts another.
///
/// A denied request changes nothing, and a fresh key stays fresh until a hit is counted.
/// [`add`](Self::add) counts units unconditionally (limitador's `Report`), beyond the
/// limit if need be: such a window admits nothing until it ends.
/// [`decide_all`] decides one request on several windows at once: all admit and all
/// count, or nothing moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnchoredWindow {
    params: WindowParams,
}

/// The state of an [`AnchoredWindow`]: when its window started and the cost counted in
/// it (never zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AnchoredWindowState {
    start: Ticks,
    count: u64,
}

impl AnchoredWindowState {
    /// The instant the window started at.
    pub const fn start(&self) -> Ticks {
        self.start
    }

    /// The cost counted in the window.
    pub const fn count(&self) -> u64 {
        self.count
    }
}

impl AnchoredWindow {
    /// At most `limit` per window of `period` ticks, each starting at its first hit.
    pub fn new(limit: u64, period: Ticks) -> Result<Self, ParamError> {
        Ok(Self {
            params: WindowParams::new(limit, period, MAX_LIMIT)?,
        })
    }

    /// The parameters this was built from.
    pub const fn params(&self) -> WindowParams {
        self.params
    }

    /// `state` if its window holds `now`, else `None` (fresh).
    pub fn live(
        &self,
        state: Option<AnchoredWindowState>,
        now: Ticks,
    ) -> Option<AnchoredWindowState> {
        state.filter(|s| now.min(MAX_TICKS) < s.start.saturating_add(self.params.period))
    }

    /// Ticks from `now` until the window of `state` ends; a fresh state's window would
    /// last the whole period.
    pub fn expires_in(&self, state: Option<AnchoredWindowState>, now: Ticks) -> Ticks {
        match self.live(state, now) {
            Some(s) => s.start + self.params.period - now.min(MAX_TICKS).max(s.start),
            None => self.params.period,
        }
    }

    /// Counts `units` whatever the limit (a report of cost known afterwards); the count
    /// saturates at `u64::MAX`.
    pub fn add(
        &self,
        state: Option<AnchoredWindowState>,
        now: Ticks,
        units: u64,
    ) -> Option<AnchoredWindowState> {
        let now = now.min(MAX_TICKS);
        match self.live(state, now) {
            Some(s) => Some(AnchoredWindowState {
                count: s.count.saturating_add(units),
                ..s
            }),
            None => (units > 0).then_some(AnchoredWindowState {
                start: now,
                count: units,
            }),
        }
    }
}

impl Algorithm for AnchoredWindow {
    type State = AnchoredWindowState;

    fn decide(
        &self,
        state: Option<AnchoredWindowState>,
        now: Ticks,
        cost: u64,
    ) -> (Decision, Option<AnchoredWindowState>) {
        let WindowParams { limit, period } = self.params;
        let now = now.min(MAX_TICKS);
        let live = self.live(state, now);
        let count = live.map_or(0, |s| s.count);
        let allowed = count.checked_add(cost).is_some_and(|total| total <= limit);
        let after = if allowed {
            self.add(live, now, cost)
        } else {
            live
        };
        // A `now` before the stored start is taken as the start.
        let until_end = |s: AnchoredWindowState| s.start + period - now.max(s.start);
        let reset_after = after.map_or(0, until_end);
        let remaining = limit.saturating_sub(after.map_or(0, |s| s.count));
        let decision = if allowed {
            Decision::admit(limit, remaining, reset_after, 0)
        } else {
            // Denied with a window open (a fresh one admits any cost up to the limit).
            let retry_after = (cost <= limit).then(|| live.map_or(0, until_end));
            Decision::deny(limit, remaining, retry_after, reset_after)
        };
        (decision, after)
    }

    fn encode<E: Extend<u8>>(&self, state: &AnchoredWindowState, out: &mut E) {
        encoding::write(out, tag::ANCHORED_WINDOW, &[state.start, state.count]);
    }

    fn decode(&self, bytes: &[u8]) -> Result<AnchoredWindowState, DecodeError> {
        let mut reader = Reader::new(bytes, tag::ANCHORED_WINDOW)?;
        let start = reader.u64_where("start", &|s| s <= MAX_TICKS)?;
        // Reports count beyond the limit: any count but zero.
        let count = reader.u64_where("count", &|c| c > 0)?;
        reader.finish()?;
        Ok(AnchoredWindowState { start, count })
    }
}

/// Decides one request of `cost` at `now` on every window of `windows`, whose states are
/// `states` (in the same order): admitted iff every window admits it, and only then
/// does any state change (each counts `cost`). Returns whether it was admitted.
///
/// # Panics
/// If `windows` and `states` differ in length.
pub fn decide_all(
    windows: &[AnchoredWindow],
    states: &mut [Option<AnchoredWindowState>],
    now: Ticks,
    cost: u64,
) -> bool {
    assert_eq!(windows.len(), states.len(), "a state per window");
    let admitted = windows
        .iter()
        .zip(states.iter())
        .all(|(window, state)| window.peek(*state, now, cost).allowed);
    if admitted {
        for (window, state) in windows.iter().zip(states.iter_mut()) {
            *state = window.decide(*state, now, cost).1;
        }
    }
    admitted
}
