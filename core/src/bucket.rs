//! The bucket algorithms: token bucket, leaky bucket (meter) and pacing queue.
//!
//! All three are one computation, the generic cell rate algorithm (GCRA): the state is
//! the theoretical arrival time `tat` at which the bucket is back to full (token bucket)
//! or empty (leaky bucket); one unit of cost moves it by the emission interval
//! `T = period / rate`. A token bucket of capacity `B` holding `B - (tat - now) / T`
//! tokens and a leaky bucket of capacity `B` holding `(tat - now) / T` water are the same
//! state seen from two sides.
//!
//! Instants are counted in units of `1 / rate` tick ("scaled"), where `T` is exactly
//! `period`: every step is integer addition, nothing rounds, and only the reported
//! durations are divided back into ticks (rounded up, so a retry is never early).
//!
//! Nothing saturates for a `now` up to [`MAX_TICKS`]: a state may lie up to the bucket's
//! horizon (`capacity × period / rate`) plus the longest booked wait ([`MAX_WAIT`])
//! beyond it, which 128 bits hold with room to spare, and the decoder accepts exactly
//! that range.

use core::num::NonZeroU128;
use core::ops::Add;

use crate::encoding::{self, tag, Reader};
use crate::limits::{MAX_HORIZON, MAX_LIMIT, MAX_PERIOD, MAX_WAIT};
use crate::report::refund_adjustment;
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
    /// The arrival time in units of `1 / rate` tick; always after the last decision's
    /// `now`, so never zero.
    pub(crate) tat: NonZeroU128,
}

impl BucketState {
    pub(crate) const fn new(tat: u128) -> Option<Self> {
        match NonZeroU128::new(tat) {
            Some(tat) => Some(Self { tat }),
            None => None,
        }
    }
}

/// The units a report recorded on a bucket, and its new state.
type Adjusted = (u64, Option<BucketState>);

/// The shared GCRA engine behind the three bucket algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gcra {
    pub(crate) params: BucketParams,
    pub(crate) tag: u8,
    /// Units admitted at once from a fresh state.
    pub(crate) burst: u64,
    /// `burst × period`: the scaled time a full burst occupies.
    tolerance: u128,
    /// The most units a report may take a key into debt (see [`crate::Report`]).
    pub(crate) overdraft: u64,
    /// `overdraft × period`: the scaled time the deepest debt occupies beyond a burst.
    debt: u128,
    /// The latest scaled instant a state of this bucket can hold: [`MAX_TICKS`] plus
    /// the horizon, plus [`MAX_WAIT`] for the algorithms whose reservations book
    /// beyond the horizon (a pacing queue books within it).
    latest: u128,
    /// Relative instants below it fit 64 bits with a burst added (0: a burst does not).
    narrow_below: u128,
    rate: Divisor,
    period: Divisor,
    /// `period / rate` and `tolerance / rate` where the rate divides the period (the
    /// emission interval is a whole number of ticks): the decision is then taken in
    /// ticks (see [`decide_exact`](Self::decide_exact)).
    exact: Option<(Divisor, u64)>,
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
        let tolerance = u128::from(burst) * u128::from(period);
        if tolerance > u128::from(MAX_HORIZON) * u128::from(rate) {
            return Err(ParamError::HorizonTooLong {
                capacity,
                rate,
                period,
            });
        }
        Ok(Self {
            params,
            tag,
            burst,
            tolerance,
            overdraft: 0,
            debt: 0,
            latest: wide(MAX_TICKS, rate)
                + tolerance
                + if tag == tag::PACING {
                    0
                } else {
                    wide(MAX_WAIT, rate)
                },
            narrow_below: (u128::from(u64::MAX) + 1).saturating_sub(tolerance),
            rate: Divisor::new(rate),
            period: Divisor::new(period),
            // `tolerance / rate = burst × interval`, within the horizon.
            exact: (period % rate == 0).then(|| {
                let interval = period / rate;
                (Divisor::new(interval), burst * interval)
            }),
        })
    }

    /// The same bucket with `overdraft` (at most 10^9, and `(capacity + overdraft) ×
    /// period / rate` at most 2^53 ticks). The deepest debt then lies within
    /// [`MAX_WAIT`] of a full burst, where a reservation may already book: the range of
    /// states (`latest`), and so the decoder, are unchanged.
    fn with_overdraft(self, overdraft: u64) -> Result<Self, ParamError> {
        let overdraft = ParamError::check("overdraft", overdraft, 0, MAX_LIMIT)?;
        let BucketParams {
            capacity,
            rate,
            period,
        } = self.params;
        let debt = wide(overdraft, period);
        if self.tolerance + debt > u128::from(MAX_HORIZON) * u128::from(rate) {
            return Err(ParamError::HorizonTooLong {
                capacity: capacity.saturating_add(overdraft),
                rate,
                period,
            });
        }
        Ok(Self {
            overdraft,
            debt,
            ..self
        })
    }

    /// A report on the arrival time: `adjustment` whole units move it later (at most to
    /// a full burst plus the overdraft after `now`) or earlier (not before `now`: never
    /// above capacity). A refund records the whole units it took to reach `now`, the
    /// last of them possibly in part, and at most a burst plus the overdraft: the most a
    /// report can owe (a fleet's charge may take a key deeper; one refund gives back no
    /// more than a full bucket's worth, as the scripts do).
    fn adjust(&self, state: Option<BucketState>, now: Ticks, adjustment: i64) -> Adjusted {
        let now = self.scaled(now);
        let tat = state.map_or(now, |s| s.tat.get()).max(now);
        let units = adjustment.unsigned_abs();
        let (recorded, tat) = if adjustment >= 0 {
            let bound = now + self.tolerance + self.debt;
            let room = self.period.div_rem(bound.saturating_sub(tat)).0;
            let recorded = u64::try_from(room).unwrap_or(u64::MAX).min(units);
            (recorded, tat + wide(recorded, self.params.period))
        } else {
            let (whole, part) = self.period.div_rem(tat - now);
            let owed = u64::try_from(whole + u128::from(part != 0)).unwrap_or(u64::MAX);
            let recorded = owed
                .min(units)
                .min(self.burst.saturating_add(self.overdraft));
            let back = tat.saturating_sub(wide(recorded, self.params.period));
            (recorded, back.max(now))
        };
        (recorded, BucketState::new(tat).filter(|_| tat > now))
    }

    /// `state` of `from` as this bucket's at `now` (see `AnyAlgorithm::carry_from`): the
    /// units in use at `now`, exactly (in this bucket's scale, rounded up: never fewer),
    /// at most this bucket's burst and overdraft.
    #[cfg(feature = "alloc")]
    pub(crate) fn carry(
        &self,
        from: &Self,
        state: &BucketState,
        now: Ticks,
    ) -> Option<BucketState> {
        // `from`'s scaled time in use: its units times its period.
        let in_use = state.tat.get().checked_sub(from.scaled(now))?;
        let (from_period, period) = (from.period.d, self.period.d);
        let most = self.burst.saturating_add(self.overdraft);
        // Compared before scaling, so the product below stays within 2^121.
        let held = if in_use >= wide(most, from_period) {
            self.tolerance + self.debt
        } else {
            (in_use * u128::from(period)).div_ceil(u128::from(from_period))
        };
        BucketState::new(self.scaled(now) + held).filter(|_| held > 0)
    }

    // The helpers of `decide` are inlined even where the build optimizes for size (the
    // browser's), where calling them cost about a tenth of a `check()` from JS.

    /// `now` as a scaled instant; a `now` beyond [`MAX_TICKS`] is decided as at it.
    #[inline(always)]
    fn scaled(&self, now: Ticks) -> u128 {
        wide(now.min(MAX_TICKS), self.params.rate)
    }

    /// A scaled duration in whole ticks, rounded up.
    #[inline(always)]
    fn ticks(&self, scaled: u128) -> Ticks {
        if scaled == 0 {
            return 0;
        }
        let (ticks, frac) = self.rate.div_rem(scaled);
        u64::try_from(ticks + u128::from(frac != 0)).unwrap_or(Ticks::MAX)
    }

    fn decide(
        &self,
        state: Option<BucketState>,
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> (Decision, Option<BucketState>) {
        // Where wasm's divider beats a reciprocal built from 32-bit products.
        cfg!(target_arch = "wasm32")
            .then_some(self.exact)
            .flatten()
            .and_then(|exact| self.decide_exact(exact, state, now, cost, max_wait))
            .or_else(|| self.decide_word(state, now, cost, max_wait))
            .unwrap_or_else(|| {
                let wait = wide(max_wait.min(MAX_WAIT), self.params.rate);
                self.decide_wide(state, self.scaled(now), cost, wait)
            })
    }

    /// [`decide`](Self::decide) where the instants themselves fit one 64-bit word (a
    /// client's rate at today's date): `now × rate` in one product and the state's
    /// time beyond it in one subtraction, then the same 64-bit step as
    /// [`decide_wide`](Self::decide_wide)'s; `None` where an operand does not fit.
    #[inline(always)]
    fn decide_word(
        &self,
        state: Option<BucketState>,
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> Option<(Decision, Option<BucketState>)> {
        let rate = self.params.rate;
        let now = now.min(MAX_TICKS).checked_mul(rate)?;
        let tat = u64::try_from(state.map_or(0, |s| s.tat.get())).ok()?;
        let wait = max_wait.min(MAX_WAIT).checked_mul(rate)?;
        let held = tat.saturating_sub(now);
        if u128::from(held) + u128::from(wait) >= self.narrow_below {
            return None;
        }
        // A state whose arrival time has passed is fresh: return it as `None`.
        let state = state.filter(|_| tat > now);
        let verdict = self.verdict(held, cost, wait).widen();
        Some(self.finish(verdict, u128::from(now), state))
    }

    /// [`decide`](Self::decide) where the emission interval is a whole number of ticks
    /// and the state fits one word: every duration in whole ticks, no scaling back. A
    /// scaled duration `d` is `⌈d / rate⌉` ticks, and every bound the verdict compares
    /// it with is a multiple of `rate`, so the verdict in ticks is the scaled one's
    /// rounded up, and the units remaining `⌊(tolerance − held) / interval⌋` in ticks
    /// are the scaled `⌊(tolerance − held) / period⌋`. Two word divisions, which wasm
    /// does in one instruction each; `None` where the state does not fit. `exact`: the
    /// interval and the tolerance in ticks.
    #[inline(always)]
    fn decide_exact(
        &self,
        (interval, tolerance): (Divisor, u64),
        state: Option<BucketState>,
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> Option<(Decision, Option<BucketState>)> {
        let now = now.min(MAX_TICKS);
        let tat = u64::try_from(state.map_or(0, |s| s.tat.get())).ok()?;
        let rate = self.params.rate;
        // `⌈tat / rate⌉`, after `now` exactly where `tat` is.
        let due = tat / rate + u64::from(tat % rate != 0);
        let held = due.saturating_sub(now);
        let wait = max_wait.min(MAX_WAIT);
        held.checked_add(wait)?.checked_add(tolerance)?;
        let state = state.filter(|_| due > now);
        let verdict = self.verdict_in(held, cost, wait, interval.d, tolerance);
        let remaining = tolerance.saturating_sub(verdict.held) / interval.d;
        let next = state.map_or(wide(now, self.params.rate), |s| s.tat.get())
            + wide(cost, self.params.period);
        Some(self.conclude(verdict, remaining, next, state))
    }

    /// [`decide`](Self::decide) at the scaled instant `now`, waiting at most the scaled
    /// `wait`: on 128-bit instants, relative to `now` in 64 bits where they fit.
    fn decide_wide(
        &self,
        state: Option<BucketState>,
        now: u128,
        cost: u64,
        wait: u128,
    ) -> (Decision, Option<BucketState>) {
        // A state whose arrival time has passed is fresh: return it as `None`.
        let state = state.filter(|s| s.tat.get() > now);
        let held = state.map_or(0, |s| s.tat.get() - now);
        // Relative to `now` a client's bucket fits 64 bits, whatever the time: one
        // instruction a step where 128-bit ones take several (wasm has no 128-bit type).
        let verdict = if held + wait < self.narrow_below {
            self.verdict(u64::narrow(held), cost, u64::narrow(wait))
                .widen()
        } else {
            self.verdict(held, cost, wait)
        };
        self.finish(verdict, now, state)
    }

    /// A verdict at the scaled instant `now` as a decision and the next state (`state`
    /// if denied): its durations divided into ticks.
    #[inline(always)]
    fn finish(
        &self,
        verdict: Verdict<u128>,
        now: u128,
        state: Option<BucketState>,
    ) -> (Decision, Option<BucketState>) {
        let remaining = self
            .period
            .div_rem(self.tolerance.saturating_sub(verdict.held))
            .0;
        let remaining = u64::try_from(remaining).unwrap_or(u64::MAX);
        let verdict_ticks = Verdict {
            allowed: verdict.allowed,
            held: self.ticks(verdict.held),
            wait: verdict.wait.map(|wait| self.ticks(wait)),
        };
        self.conclude(verdict_ticks, remaining, now + verdict.held, state)
    }

    /// The decision of a verdict in whole ticks, with the units `remaining`, and the
    /// next state: `next` if admitted and held, `state` if denied.
    #[inline(always)]
    fn conclude(
        &self,
        verdict: Verdict<Ticks>,
        remaining: u64,
        next: u128,
        state: Option<BucketState>,
    ) -> (Decision, Option<BucketState>) {
        let (reset_after, wait) = (verdict.held, verdict.wait);
        if verdict.allowed {
            let decision = Decision::admit(self.burst, remaining, reset_after, wait.unwrap_or(0));
            // `held > 0`, so the kept state is never zero.
            let next = BucketState::new(next).filter(|_| verdict.held > 0);
            (decision, next)
        } else {
            (
                Decision::deny(self.burst, remaining, wait, reset_after),
                state,
            )
        }
    }

    /// [`decide`](Self::decide) before its durations are divided into ticks, with every
    /// instant relative to `now`: `held` the scaled time the state holds beyond it,
    /// `wait` the longest scaled delay allowed.
    #[inline(always)]
    fn verdict<S: Scaled>(&self, held: S, cost: u64, wait: S) -> Verdict<S> {
        // No sum below overflows: `held + wait + tolerance` fits `S` (`narrow_below`).
        let tolerance = S::narrow(self.tolerance);
        self.verdict_in(held, cost, wait, self.params.period, tolerance)
    }

    /// [`verdict`](Self::verdict) in units where a unit takes `unit` and a burst
    /// `tolerance`; `held + wait + tolerance` fits `S`.
    #[inline(always)]
    fn verdict_in<S: Scaled>(
        &self,
        held: S,
        cost: u64,
        wait: S,
        unit: u64,
        tolerance: S,
    ) -> Verdict<S> {
        let denied = |wait| Verdict {
            allowed: false,
            held,
            wait,
        };
        if cost > self.burst {
            return denied(None);
        }
        let next = held + S::product(cost, unit);
        // The meter acts once the bucket has room; a pacing request acts at its slot.
        let (act_at, latest) = if self.tag == tag::PACING {
            (held, tolerance)
        } else {
            (next.saturating_sub(tolerance), tolerance + wait)
        };
        if next <= latest && act_at <= wait {
            Verdict {
                allowed: true,
                held: next,
                wait: Some(act_at),
            }
        } else {
            denied(Some(
                next.saturating_sub(latest).max(act_at.saturating_sub(wait)),
            ))
        }
    }

    fn encode<E: Extend<u8>>(&self, state: &BucketState, out: &mut E) {
        let (ticks, frac) = self.rate.div_rem(state.tat.get());
        // States are at most `latest`, below 2^63 ticks, so the ticks fit.
        let ticks = u64::try_from(ticks).unwrap_or(u64::MAX);
        encoding::write(out, self.tag, &[ticks, frac]);
    }

    fn decode(&self, bytes: &[u8]) -> Result<BucketState, DecodeError> {
        let mut reader = Reader::new(bytes, self.tag)?;
        let ticks = reader.u64_where("tat", &|t| wide(t, self.params.rate) <= self.latest)?;
        let tat = wide(ticks, self.params.rate);
        let frac = reader.u64_where("tat_frac", &|f| {
            f < self.params.rate && tat + u128::from(f) <= self.latest
        })?;
        reader.finish()?;
        BucketState::new(tat + u128::from(frac)).ok_or(DecodeError::InvalidField { field: "tat" })
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

            #[inline(always)]
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
pub struct TokenBucket(pub(crate) Gcra);

gcra_algorithm!(
    TokenBucket,
    tag::TOKEN_BUCKET,
    1,
    0,
    "A bucket of `capacity` tokens refilled at `rate` per `period` ticks."
);

impl crate::Refund for TokenBucket {
    fn refund(&self, state: Option<BucketState>, now: Ticks, units: u64) -> Option<BucketState> {
        self.0.adjust(state, now, refund_adjustment(units)).1
    }
}

/// Implements [`Report`](crate::Report) and the overdraft's builder for the buckets
/// whose units are a stock (not the pacing queue's slots).
macro_rules! reported_bucket {
    ($($name:ident),*) => {$(
        impl $name {
            /// The same bucket, letting a report take a key up to `overdraft` units
            /// into debt: the tokens go below zero (the water above capacity), and the
            /// next admission waits until they are paid back. `overdraft` is at most
            /// 10^9, and `(capacity + overdraft) × period / rate` at most 2^53 ticks.
            pub fn with_overdraft(self, overdraft: u64) -> Result<Self, ParamError> {
                self.0.with_overdraft(overdraft).map(Self)
            }
        }

        impl crate::Report for $name {
            fn overdraft(&self) -> u64 {
                self.0.overdraft
            }

            fn adjust(&self, state: Option<BucketState>, now: Ticks, by: i64) -> Adjusted {
                self.0.adjust(state, now, by)
            }
        }
    )*};
}
reported_bucket!(TokenBucket, LeakyBucket);

/// Leaky bucket as a meter (the "funnel"): holds up to `capacity` units of water, starts
/// empty, leaks `rate` units per `period`; a request of cost `c` is admitted iff
/// `water + c <= capacity`, and pours `c` in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket(pub(crate) Gcra);

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
pub struct Pacing(pub(crate) Gcra);

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

/// `a × b` in full. wasm32 has no 64 × 64 → 128-bit multiply and would call the generic
/// 128 × 128-bit routine for it; four 32-bit partial products are cheaper there. Other
/// targets multiply in one instruction.
#[inline(always)]
fn wide(a: u64, b: u64) -> u128 {
    if cfg!(target_arch = "wasm32") {
        mul_by_halves(a, b)
    } else {
        u128::from(a) * u128::from(b)
    }
}

/// `a × b` from four 32 × 32-bit products.
#[inline(always)]
fn mul_by_halves(a: u64, b: u64) -> u128 {
    let (a_hi, a_lo) = (a >> 32, a & 0xffff_ffff);
    let (b_hi, b_lo) = (b >> 32, b & 0xffff_ffff);
    let (cross, cross_carry) = (a_hi * b_lo).overflowing_add(a_lo * b_hi);
    let (low, low_carry) = (a_lo * b_lo).overflowing_add(cross << 32);
    let high = a_hi * b_hi + (cross >> 32) + (u64::from(cross_carry) << 32) + u64::from(low_carry);
    (u128::from(high) << 64) | u128::from(low)
}

/// Division by a divisor fixed at construction: the hot path divides by the rate and the
/// period on every decision, and a multiplication by a precomputed reciprocal is several
/// times cheaper than the hardware divider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Divisor {
    pub(crate) d: u64,
    /// `⌊(2^64 − 1) / d⌋`.
    inverse: u64,
}

impl Divisor {
    pub(crate) const fn new(d: u64) -> Self {
        Self {
            d,
            inverse: u64::MAX / d,
        }
    }

    /// `(n / d, n % d)`.
    #[inline(always)]
    pub(crate) fn div_rem(self, n: u128) -> (u128, u64) {
        let Ok(n) = u64::try_from(n) else {
            let d = u128::from(self.d);
            // The remainder is below `d`, which is a u64.
            return (n / d, u64::try_from(n % d).unwrap_or(0));
        };
        // `inverse ≥ 2^64 / d − 1`, so `n × inverse / 2^64 > n / d − 1` for `n < 2^64`:
        // the estimate is the quotient or one below it. One step corrects it without a
        // branch or a loop, which a caller that never reads the result can drop.
        let q = u64::try_from(wide(n, self.inverse) >> 64).unwrap_or(0);
        let r = n - q * self.d;
        let short = r >= self.d;
        (
            u128::from(q + u64::from(short)),
            r - if short { self.d } else { 0 },
        )
    }
}

/// The integer a decision's scaled durations are formed in: `u64` where they fit (a
/// client's bucket), else `u128`.
trait Scaled: Copy + Ord + Add<Output = Self> + Into<u128> {
    /// `n`, which the caller knows fits.
    fn narrow(n: u128) -> Self;
    /// `a × b`, which the caller knows fits.
    fn product(a: u64, b: u64) -> Self;
    fn saturating_sub(self, other: Self) -> Self;
}

impl Scaled for u64 {
    #[inline(always)]
    fn narrow(n: u128) -> Self {
        #[allow(clippy::cast_possible_truncation)] // Checked by the caller.
        let n = n as u64;
        n
    }

    #[inline(always)]
    fn product(a: u64, b: u64) -> Self {
        a * b
    }

    #[inline(always)]
    fn saturating_sub(self, other: Self) -> Self {
        u64::saturating_sub(self, other)
    }
}

impl Scaled for u128 {
    #[inline(always)]
    fn narrow(n: u128) -> Self {
        n
    }

    #[inline(always)]
    fn product(a: u64, b: u64) -> Self {
        wide(a, b)
    }

    #[inline(always)]
    fn saturating_sub(self, other: Self) -> Self {
        u128::saturating_sub(self, other)
    }
}

/// A bucket's decision before its durations are divided into ticks, relative to `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Verdict<S> {
    allowed: bool,
    /// The scaled time the state holds beyond `now`: the new state's if admitted.
    held: S,
    /// If admitted, the delay; if denied, the wait until admissible (`None`: never).
    wait: Option<S>,
}

impl<S: Scaled> Verdict<S> {
    #[inline(always)]
    fn widen(self) -> Verdict<u128> {
        Verdict {
            allowed: self.allowed,
            held: self.held.into(),
            wait: self.wait.map(Into::into),
        }
    }
}

#[cfg(test)]
mod tests;
