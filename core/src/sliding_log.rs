use alloc::collections::VecDeque;

use crate::encoding::{self, tag, Reader};
use crate::fixed_window::WindowParams;
use crate::limits::MAX_LOG_LIMIT;
use crate::report::adjust_count;
use crate::{Algorithm, Decision, DecodeError, ParamError, Ticks, MAX_TICKS};

/// Sliding window log: a request of cost `c` at `now` is admitted iff the cost admitted
/// at instants `t > now − period`, plus `c`, is at most `limit`. Exact; memory grows with
/// the entries in one period (at most `limit`, as entries at one instant are merged), so
/// `limit` is capped at 10^5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    params: WindowParams,
    overdraft: u64,
}

/// The state of a [`SlidingLog`]: admitted cost per instant, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SlidingLogState {
    entries: VecDeque<Entry>,
    /// The sum of the entries' costs, kept so a decision is O(1) amortized.
    used: u64,
}

/// The bytes before the entries: version, tag and length.
const HEADER_BYTES: usize = 10;
/// The bytes of one encoded entry: its instant and its cost.
const ENTRY_BYTES: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Entry {
    at: Ticks,
    cost: u64,
}

impl SlidingLog {
    /// At most `limit` (up to 10^5) per sliding `period` ticks, exactly.
    pub fn new(limit: u64, period: Ticks) -> Result<Self, ParamError> {
        Ok(Self {
            params: WindowParams::new(limit, period, MAX_LOG_LIMIT)?,
            overdraft: 0,
        })
    }

    /// The same limit, letting a report log up to `overdraft` (at most 10^5) units
    /// beyond it; the debt leaves the window with the entries that hold it.
    pub fn with_overdraft(self, overdraft: u64) -> Result<Self, ParamError> {
        Ok(Self {
            overdraft: ParamError::check("overdraft", overdraft, 0, MAX_LOG_LIMIT)?,
            ..self
        })
    }

    /// The most cost the log holds: the limit and the overdraft.
    const fn most(&self) -> u64 {
        self.params.limit + self.overdraft
    }

    /// The state's entries and their sum at `now` (raised to the newest entry's
    /// instant), the entries that left the window dropped.
    fn expire(
        state: Option<SlidingLogState>,
        now: Ticks,
        period: Ticks,
    ) -> (SlidingLogState, Ticks) {
        let mut state = state.unwrap_or_default();
        let now = now
            .min(MAX_TICKS)
            .max(state.entries.back().map_or(0, |e| e.at));
        // Entries at or before `now − period` have left the window.
        while let Some(oldest) = state
            .entries
            .front()
            .filter(|e| e.at.saturating_add(period) <= now)
        {
            state.used -= oldest.cost;
            state.entries.pop_front();
        }
        (state, now)
    }

    /// Logs `cost` at `now`, the newest instant (merged with an entry there).
    fn log(entries: &mut VecDeque<Entry>, now: Ticks, cost: u64) {
        match entries.back_mut() {
            Some(last) if last.at == now => last.cost += cost,
            _ => entries.push_back(Entry { at: now, cost }),
        }
    }

    /// The parameters this was built from.
    pub const fn params(&self) -> WindowParams {
        self.params
    }

    /// `state` of `from` as this log's at `now` (see `AnyAlgorithm::carry_from`): the
    /// entries within both periods of `now`, the newest as far as this log holds them
    /// (the oldest kept in part).
    pub(crate) fn carry(
        &self,
        from: &Self,
        state: &SlidingLogState,
        now: Ticks,
    ) -> Option<SlidingLogState> {
        let period = self.params.period.min(from.params.period);
        let (SlidingLogState { mut entries, .. }, _) =
            Self::expire(Some(state.clone()), now, period);
        let mut room = self.most();
        let mut kept = VecDeque::new();
        while let Some(mut entry) = entries.pop_back().filter(|_| room > 0) {
            entry.cost = entry.cost.min(room);
            room -= entry.cost;
            kept.push_front(entry);
        }
        let used = self.most() - room;
        (!kept.is_empty()).then_some(SlidingLogState {
            entries: kept,
            used,
        })
    }
}

impl TryFrom<WindowParams> for SlidingLog {
    type Error = ParamError;
    fn try_from(params: WindowParams) -> Result<Self, ParamError> {
        Self::new(params.limit, params.period)
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;

    fn decide(
        &self,
        state: Option<SlidingLogState>,
        now: Ticks,
        cost: u64,
    ) -> (Decision, Option<SlidingLogState>) {
        let WindowParams { limit, period } = self.params;
        let (
            SlidingLogState {
                mut entries,
                mut used,
            },
            now,
        ) = Self::expire(state, now, period);
        // A reported debt (`used` above the limit) admits nothing, not even a cost of zero.
        let allowed = used.checked_add(cost).is_some_and(|total| total <= limit);
        if allowed && cost > 0 {
            Self::log(&mut entries, now, cost);
        }
        let before = used;
        if allowed {
            used += cost;
        }
        let remaining = limit.saturating_sub(used);
        let reset_after = entries.back().map_or(0, |e| e.at + period - now);
        let decision = if allowed {
            Decision::admit(limit, remaining, reset_after, 0)
        } else {
            // Wait for the oldest entries to leave until `cost` fits.
            let retry_after = (cost <= limit).then(|| {
                // The cost that must leave the window before this one fits.
                let excess = before + cost - limit;
                let mut freed = 0;
                let last_needed = entries
                    .iter()
                    .find(|e| {
                        freed += e.cost;
                        freed >= excess
                    })
                    .map_or(now, |e| e.at + period);
                last_needed - now
            });
            Decision::deny(limit, remaining, retry_after, reset_after)
        };
        let state = (!entries.is_empty()).then_some(SlidingLogState { entries, used });
        (decision, state)
    }

    fn encode<E: Extend<u8>>(&self, state: &SlidingLogState, out: &mut E) {
        let len = state.entries.len() as u64;
        encoding::write(out, tag::SLIDING_LOG, &[len]);
        for entry in &state.entries {
            out.extend(entry.at.to_be_bytes());
            out.extend(entry.cost.to_be_bytes());
        }
    }

    /// At most `limit + overdraft` entries (one per instant, each of cost at least 1), in a deque
    /// that grows by doubling from four when full, and that a clone leaves exactly
    /// full: never more than twice `limit` entries' room.
    fn max_heap_bytes(&self) -> usize {
        let most = usize::try_from(self.most()).unwrap_or(usize::MAX);
        most.saturating_mul(2)
            .max(4)
            .saturating_mul(core::mem::size_of::<Entry>())
    }

    fn decode(&self, bytes: &[u8]) -> Result<SlidingLogState, DecodeError> {
        let limit = self.most();
        let mut reader = Reader::new(bytes, tag::SLIDING_LOG)?;
        let len = reader.u64_where("len", &|n| (1..=limit).contains(&n))?;
        let mut entries = VecDeque::with_capacity(entries_to_reserve(len, bytes.len()));
        let mut used = 0;
        for _ in 0..len {
            let after = entries.back().map(|e: &Entry| e.at);
            let at = reader.u64_where("at", &|t| t <= MAX_TICKS && after.is_none_or(|a| t > a))?;
            let cost = reader.u64_where("cost", &|c| c >= 1 && c <= limit - used)?;
            used += cost;
            entries.push_back(Entry { at, cost });
        }
        reader.finish()?;
        Ok(SlidingLogState { entries, used })
    }
}

impl crate::Report for SlidingLog {
    fn overdraft(&self) -> u64 {
        self.overdraft
    }

    /// A report logs its units at `now` while the window holds at most
    /// `limit + overdraft`; a refund takes units off the newest entries first (the undo
    /// of the latest admissions, which a report follows).
    fn adjust(
        &self,
        state: Option<SlidingLogState>,
        now: Ticks,
        adjustment: i64,
    ) -> (u64, Option<SlidingLogState>) {
        let (SlidingLogState { mut entries, used }, now) =
            Self::expire(state, now, self.params.period);
        let (recorded, used) = adjust_count(used, self.most().saturating_sub(used), adjustment);
        if adjustment >= 0 {
            if recorded > 0 {
                Self::log(&mut entries, now, recorded);
            }
        } else {
            let mut owed = recorded;
            while let Some(newest) = entries.back_mut().filter(|_| owed > 0) {
                let taken = owed.min(newest.cost);
                newest.cost -= taken;
                owed -= taken;
                if newest.cost == 0 {
                    entries.pop_back();
                }
            }
        }
        let state = (!entries.is_empty()).then_some(SlidingLogState { entries, used });
        (recorded, state)
    }
}

/// How many entries to reserve for a log whose header says `len`, read from `bytes`
/// bytes: no more than those bytes can hold, so a short input claiming a long log
/// allocates nothing for it.
fn entries_to_reserve(len: u64, bytes: usize) -> usize {
    let fits = bytes.saturating_sub(HEADER_BYTES) / ENTRY_BYTES;
    usize::try_from(len).map_or(fits, |len| len.min(fits))
}

#[cfg(test)]
mod tests {
    /// Issue 16, item 10: 26 bytes claiming 10^5 entries reserved 1.6 MB.
    #[test]
    fn a_short_input_reserves_what_it_holds() {
        assert_eq!(super::entries_to_reserve(100_000, 26), 1);
        assert_eq!(super::entries_to_reserve(100_000, 2), 0);
        assert_eq!(super::entries_to_reserve(3, 10 + 16 * 100), 3);
    }
}
