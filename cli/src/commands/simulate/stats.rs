//! What a simulation counts: offered, admitted and denied per bin of time, when admitted
//! units act, and the summary's figures. Sums are 128-bit, so no traffic overflows them.

use sluicegate_core::{Decision, Ticks};

use crate::traffic::Request;

/// The most requests one simulation decides. It keeps 32 bytes per admitted request
/// (for the windowed maxima and the delay percentiles), so at most 320 MB.
pub const MAX_OFFERED: u64 = 10_000_000;

/// An admitted request: when it acts (after its delay), its key, cost and delay.
#[derive(Debug, Clone, Copy)]
struct Act {
    at: Ticks,
    key: u64,
    cost: u64,
    delay: Ticks,
}

/// A simulation's counts so far.
#[derive(Debug)]
pub struct Run {
    pub offered: u64,
    pub denied: u64,
    /// The width of a bin of the chart.
    pub bin: Ticks,
    /// Per bin: requests (admitted, denied).
    pub bins: Vec<(u64, u64)>,
    acts: Vec<Act>,
}

/// The figures a simulation prints.
#[derive(Debug)]
pub struct Summary {
    pub offered: u64,
    pub admitted: u64,
    pub denied: u64,
    /// The most units acting within any window of one period, for the busiest key.
    pub max_one_key: u128,
    /// The same, summed over all keys.
    pub max_all_keys: u128,
    /// Delays of admitted requests: p50, p90, p99, max.
    pub delays: [Ticks; 4],
}

impl Run {
    /// A run over `duration` (more than zero), charted in bins of `bin` ticks.
    pub fn new(duration: Ticks, bin: Ticks) -> Self {
        let bin = bin.max(1);
        let count = usize::try_from(duration.div_ceil(bin)).unwrap_or(1).max(1);
        Self {
            offered: 0,
            denied: 0,
            bin,
            bins: vec![(0, 0); count],
            acts: Vec::new(),
        }
    }

    pub fn record(&mut self, request: &Request, decision: &Decision) {
        self.offered += 1;
        let last = self.bins.len() - 1;
        let bin = usize::try_from(request.at / self.bin).map_or(last, |b| b.min(last));
        if decision.allowed {
            self.bins[bin].0 += 1;
            self.acts.push(Act {
                at: request.at.saturating_add(decision.delay),
                key: request.index,
                cost: request.cost,
                delay: decision.delay,
            });
        } else {
            self.bins[bin].1 += 1;
            self.denied += 1;
        }
    }

    pub fn summary(&mut self, period: Ticks) -> Summary {
        let mut delays: Vec<Ticks> = self.acts.iter().map(|a| a.delay).collect();
        delays.sort_unstable();
        let percentile = |p: usize| {
            delays
                .get((delays.len() * p / 100).min(delays.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        let delays = [
            percentile(50),
            percentile(90),
            percentile(99),
            delays.last().copied().unwrap_or(0),
        ];
        self.acts.sort_unstable_by_key(|a| (a.at, a.key));
        let all: Vec<(Ticks, u64)> = self.acts.iter().map(|a| (a.at, a.cost)).collect();
        let max_all_keys = max_in_window(&all, period);
        drop(all);
        self.acts.sort_by_key(|a| a.key);
        let max_one_key = self
            .acts
            .chunk_by(|a, b| a.key == b.key)
            .map(|acts| {
                let acts: Vec<(Ticks, u64)> = acts.iter().map(|a| (a.at, a.cost)).collect();
                max_in_window(&acts, period)
            })
            .max()
            .unwrap_or(0);
        Summary {
            offered: self.offered,
            admitted: self.offered - self.denied,
            denied: self.denied,
            max_one_key,
            max_all_keys,
            delays,
        }
    }
}

/// The most cost acting within any `period` ticks: any half-open window `[t, t + period)`.
/// `acts` is `(instant, cost)` in time order; any values, no overflow.
pub fn max_in_window(acts: &[(Ticks, u64)], period: Ticks) -> u128 {
    let (mut start, mut sum, mut best) = (0, 0u128, 0u128);
    for (i, &(at, cost)) in acts.iter().enumerate() {
        sum += u128::from(cost);
        // `at - acts[start].0` cannot underflow: time order, and never past the current
        // act (a zero period drops it too: its window holds nothing).
        while start <= i && at - acts[start].0 >= period {
            sum -= u128::from(acts[start].1);
            start += 1;
        }
        best = best.max(sum);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every window starting at an act, summed directly.
    fn brute(acts: &[(Ticks, u64)], period: Ticks) -> u128 {
        acts.iter()
            .map(|&(start, _)| {
                acts.iter()
                    .filter(|&&(at, _)| at >= start && at - start < period)
                    .map(|&(_, cost)| u128::from(cost))
                    .sum()
            })
            .max()
            .unwrap_or(0)
    }

    fn near_max() -> impl Strategy<Value = u64> {
        prop_oneof![0..100u64, u64::MAX - 100..=u64::MAX, any::<u64>()]
    }

    proptest! {
        #[test]
        fn windowed_maximum_matches_brute_force_over_huge_values(
            mut acts in prop::collection::vec((near_max(), near_max()), 0..40),
            period in near_max(),
        ) {
            acts.sort_unstable();
            prop_assert_eq!(max_in_window(&acts, period), brute(&acts, period));
        }
    }

    #[test]
    fn a_zero_period_holds_nothing_and_the_top_of_time_does_not_overflow() {
        assert_eq!(max_in_window(&[(5, 3), (5, 4)], 0), 0);
        let top = [(u64::MAX - 1, u64::MAX), (u64::MAX, u64::MAX)];
        assert_eq!(max_in_window(&top, u64::MAX), 2 * u128::from(u64::MAX));
    }
}
