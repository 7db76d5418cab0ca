//! The bucket algorithms: token bucket, leaky bucket (meter) and pacing queue.
//!
//! All three are one computation, the generic cell rate algorithm (GCRA): the state is
//! the theoretical arrival time `tat` at which the bucket is back to full (token bucket)
//! or empty (leaky bucket); one unit of cost moves it by the emission interval
//! `T = period / rate`, kept as an exact fraction. A token bucket of capacity `B` holding
//! `B - (tat - now) / T` tokens and a leaky bucket of capacity `B` holding
//! `(tat - now) / T` water are the same state seen from two sides.

use crate::encoding::{self, tag, Reader};
use crate::exact::{div_wide, Exact};
use crate::limits::{MAX_HORIZON, MAX_LIMIT, MAX_PERIOD};
use crate::{Algorithm, Decision, DecodeError, ParamError, Reserve, Ticks, MAX_TICKS};

/// Parameters of a bucket: `rate` units of cost refill (or leak) every `period` ticks, up
/// to `capacity`.
///
/// Ranges: `capacity` and `rate` in `1..=10^9` (a pacing queue's capacity may be 0),
/// `period` in `1..=366 days`, and `capacity × period / rate` at most 2^53 ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BucketParams {
    /// The most units the bucket holds.
    pub capacity: u64,
    /// Units refilled or leaked per period.
    pub rate: u64,
    /// The period, in ticks.
    pub period: Ticks,
}

/// The state of a bucket: its theoretical arrival time, exact to a fraction of a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketState {
    tat: Exact,
}

/// The shared GCRA engine behind the three bucket algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gcra {
    params: BucketParams,
    tag: u8,
    /// Units admitted at once from a fresh state.
    burst: u64,
    /// `period / rate`.
    interval: Exact,
    /// `burst × interval`.
    tolerance: Exact,
}

impl Gcra {
    fn new(params: BucketParams, tag: u8, min_capacity: u64) -> Result<Self, ParamError> {
        let capacity = ParamError::check("capacity", params.capacity, min_capacity, MAX_LIMIT)?;
        let rate = ParamError::check("rate", params.rate, 1, MAX_LIMIT)?;
        let period = ParamError::check("period", params.period, 1, MAX_PERIOD)?;
        // A pacing queue of capacity C admits C + 1 at once: one acts now, C wait.
        let burst = if tag == tag::PACING {
            capacity + 1
        } else {
            capacity
        };
        if u128::from(burst) * u128::from(period) > u128::from(MAX_HORIZON) * u128::from(rate) {
            return Err(ParamError::HorizonTooLong {
                capacity,
                rate,
                period,
            });
        }
        let interval = Exact {
            ticks: period / rate,
            frac: period % rate,
        };
        let mut gcra = Self {
            params,
            tag,
            burst,
            interval,
            tolerance: Exact::default(),
        };
        gcra.tolerance = gcra.times(burst);
        Ok(gcra)
    }

    /// `n × interval`, for `n <= burst` (so it stays within the horizon).
    fn times(&self, n: u64) -> Exact {
        let rate = self.params.rate;
        let spill = n * self.interval.frac;
        Exact {
            ticks: n * self.interval.ticks + spill / rate,
            frac: spill % rate,
        }
    }

    /// Whole intervals in `span`.
    fn units_in(&self, span: Exact) -> u64 {
        let scaled = u128::from(span.ticks) * u128::from(self.params.rate) + u128::from(span.frac);
        u64::try_from(div_wide(scaled, self.params.period)).unwrap_or(u64::MAX)
    }

    fn decide(
        &self,
        state: Option<BucketState>,
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> (Decision, Option<BucketState>) {
        let rate = self.params.rate;
        let now = Exact::whole(now.min(MAX_TICKS));
        // A state whose arrival time has passed is fresh: return it as `None`.
        let state = state.filter(|s| s.tat > now);
        let tat = state.map_or(now, |s| s.tat);
        let start = tat.max(now);
        let full_at = now.add(self.tolerance, rate);
        let remaining = |tat: Exact| self.units_in(full_at.saturating_sub(tat.max(now), rate));
        let reset_after = |tat: Exact| tat.saturating_sub(now, rate).ceil();
        if cost > self.burst {
            return (
                Decision::deny(self.burst, remaining(tat), None, reset_after(tat)),
                state,
            );
        }
        let wait = Exact::whole(max_wait);
        let new_tat = start.add(self.times(cost), rate);
        // The meter acts once the bucket has room; a pacing request acts at its slot.
        let (act_at, latest_tat) = if self.tag == tag::PACING {
            (start, full_at)
        } else {
            (
                new_tat.saturating_sub(self.tolerance, rate),
                full_at.add(wait, rate),
            )
        };
        if new_tat <= latest_tat && act_at <= now.add(wait, rate) {
            let delay = act_at.saturating_sub(now, rate).ceil();
            let decision =
                Decision::admit(self.burst, remaining(new_tat), reset_after(new_tat), delay);
            let state = (new_tat > now).then_some(BucketState { tat: new_tat });
            (decision, state)
        } else {
            let admissible_at = new_tat
                .saturating_sub(latest_tat.saturating_sub(now, rate), rate)
                .max(act_at.saturating_sub(wait, rate));
            let retry_after = admissible_at.saturating_sub(now, rate).ceil();
            (
                Decision::deny(
                    self.burst,
                    remaining(tat),
                    Some(retry_after),
                    reset_after(tat),
                ),
                state,
            )
        }
    }

    fn encode<E: Extend<u8>>(&self, state: &BucketState, out: &mut E) {
        encoding::write(out, self.tag, &[state.tat.ticks, state.tat.frac]);
    }

    fn decode(&self, bytes: &[u8]) -> Result<BucketState, DecodeError> {
        let mut reader = Reader::new(bytes, self.tag)?;
        let ticks = reader.u64_where("tat", |t| t <= MAX_TICKS)?;
        let frac = reader.u64_where("tat_frac", |f| {
            f < self.params.rate && (ticks < MAX_TICKS || f == 0)
        })?;
        reader.finish()?;
        Ok(BucketState {
            tat: Exact { ticks, frac },
        })
    }
}

/// Implements [`Algorithm`] and [`Reserve`] for a newtype over [`Gcra`].
macro_rules! gcra_algorithm {
    ($name:ident, $tag:expr, $min_capacity:expr, $default_wait:expr, $new_doc:literal) => {
        impl $name {
            #[doc = $new_doc]
            pub fn new(capacity: u64, rate: u64, period: Ticks) -> Result<Self, ParamError> {
                let params = BucketParams {
                    capacity,
                    rate,
                    period,
                };
                Gcra::new(params, $tag, $min_capacity).map(Self)
            }

            /// The parameters this was built from.
            pub const fn params(&self) -> BucketParams {
                self.0.params
            }
        }

        impl TryFrom<BucketParams> for $name {
            type Error = ParamError;
            fn try_from(params: BucketParams) -> Result<Self, ParamError> {
                Self::new(params.capacity, params.rate, params.period)
            }
        }

        impl Algorithm for $name {
            type State = BucketState;

            fn decide(
                &self,
                state: Option<BucketState>,
                now: Ticks,
                cost: u64,
            ) -> (Decision, Option<BucketState>) {
                self.0.decide(state, now, cost, $default_wait)
            }

            fn encode<E: Extend<u8>>(&self, state: &BucketState, out: &mut E) {
                self.0.encode(state, out);
            }

            fn decode(&self, bytes: &[u8]) -> Result<BucketState, DecodeError> {
                self.0.decode(bytes)
            }
        }

        impl Reserve for $name {
            fn reserve(
                &self,
                state: Option<BucketState>,
                now: Ticks,
                cost: u64,
                max_wait: Ticks,
            ) -> (Decision, Option<BucketState>) {
                self.0.decide(state, now, cost, max_wait)
            }
        }
    };
}

/// Token bucket: holds up to `capacity` tokens, starts full, refills `rate` tokens per
/// `period` (continuously and exactly); a request of cost `c` is admitted iff at least
/// `c` tokens are present, and takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket(Gcra);

gcra_algorithm!(
    TokenBucket,
    tag::TOKEN_BUCKET,
    1,
    0,
    "A bucket of `capacity` tokens refilled at `rate` per `period` ticks."
);

/// Leaky bucket as a meter (the "funnel"): holds up to `capacity` units of water, starts
/// empty, leaks `rate` units per `period`; a request of cost `c` is admitted iff
/// `water + c <= capacity`, and pours `c` in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket(Gcra);

impl LeakyBucket {
    /// The funnel redis-cell's `CL.THROTTLE key max_burst count period` uses: capacity
    /// `max_burst + 1`, leaking `count` per `period`. Report its decisions with
    /// [`Decision::cl_throttle_reply`].
    pub fn redis_cell(max_burst: u64, count: u64, period: Ticks) -> Result<Self, ParamError> {
        Self::new(max_burst.saturating_add(1), count, period)
    }
}
gcra_algorithm!(
    LeakyBucket,
    tag::LEAKY_BUCKET,
    1,
    0,
    "A funnel of `capacity` leaking `rate` per `period` ticks."
);

/// Leaky bucket as a queue: admitted requests act exactly `period / rate` apart (a
/// request of cost `c` holds `c` slots); a request is admitted, with a `delay` until its
/// slot, while at most `capacity` units wait ahead of its own, else denied.
/// With no traffic the first request acts at once, so `capacity + 1` are admitted in a
/// burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing(Gcra);

gcra_algorithm!(
    Pacing,
    tag::PACING,
    0,
    Ticks::MAX,
    "A queue of `capacity` waiting units drained at `rate` per `period` ticks."
);

impl Decision {
    /// The 5-field reply of redis-cell's `CL.THROTTLE`: limited (0 or 1), limit,
    /// remaining, retry after (-1 when admitted or never), reset after. Times are in
    /// ticks, exact, where redis-cell rounds to whole seconds.
    pub fn cl_throttle_reply(&self) -> [i64; 5] {
        let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let retry = match self.retry_after {
            Some(t) if !self.allowed => signed(t),
            _ => -1,
        };
        [
            i64::from(!self.allowed),
            signed(self.limit),
            signed(self.remaining),
            retry,
            signed(self.reset_after),
        ]
    }
}
