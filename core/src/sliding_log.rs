use alloc::collections::VecDeque;

use crate::encoding::{self, tag, Reader};
use crate::fixed_window::WindowParams;
use crate::limits::MAX_LOG_LIMIT;
use crate::{Algorithm, Decision, DecodeError, ParamError, Ticks, MAX_TICKS};

/// Sliding window log: a request of cost `c` at `now` is admitted iff the cost admitted
/// at instants `t > now − period`, plus `c`, is at most `limit`. Exact; memory grows with
/// the entries in one period (at most `limit`, as entries at one instant are merged), so
/// `limit` is capped at 10^5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    params: WindowParams,
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
        })
    }

    /// The parameters this was built from.
    pub const fn params(&self) -> WindowParams {
        self.params
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
        let SlidingLogState {
            mut entries,
            mut used,
        } = state.unwrap_or_default();
        let now = now.min(MAX_TICKS).max(entries.back().map_or(0, |e| e.at));
        // Entries at or before `now − period` have left the window.
        while let Some(oldest) = entries
            .front()
            .filter(|e| e.at.saturating_add(period) <= now)
        {
            used -= oldest.cost;
            entries.pop_front();
        }
        let allowed = cost <= limit - used;
        if allowed && cost > 0 {
            match entries.back_mut() {
                Some(last) if last.at == now => last.cost += cost,
                _ => entries.push_back(Entry { at: now, cost }),
            }
        }
        let before = used;
        if allowed {
            used += cost;
        }
        let remaining = limit - used;
        let reset_after = entries.back().map_or(0, |e| e.at + period - now);
        let decision = if allowed {
            Decision::admit(limit, remaining, reset_after, 0)
        } else {
            // Wait for the oldest entries to leave until `cost` fits.
            let retry_after = (cost <= limit).then(|| {
                let mut freed = limit - before;
                let last_needed = entries
                    .iter()
                    .find(|e| {
                        freed += e.cost;
                        freed >= cost
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

    /// At most `limit` entries (one per instant, each of cost at least 1), in a deque
    /// that grows by doubling from four when full, and that a clone leaves exactly
    /// full: never more than twice `limit` entries' room.
    fn max_heap_bytes(&self) -> usize {
        let limit = usize::try_from(self.params.limit).unwrap_or(usize::MAX);
        limit
            .saturating_mul(2)
            .max(4)
            .saturating_mul(core::mem::size_of::<Entry>())
    }

    fn decode(&self, bytes: &[u8]) -> Result<SlidingLogState, DecodeError> {
        let limit = self.params.limit;
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
