//! The buckets' arithmetic on the 64-bit word of an in-memory limiter: the same
//! decisions as the exact 128-bit path, in 64-bit operations.

use crate::bucket::{Divisor, Gcra};
use crate::encoding::tag;
use crate::limits::MAX_WAIT;
use crate::memory::__bench::WordState;
use crate::{BucketState, Decision, LeakyBucket, Pacing, Ticks, TokenBucket, MAX_TICKS};

impl WordState for BucketState {
    fn to_word(self) -> u128 {
        self.tat.get()
    }

    fn from_word(word: u128) -> Option<Self> {
        Self::new(word)
    }
}

/// A bucket's decision on the 64-bit word of an in-memory limiter, in the word's own
/// units: every scaled quantity divided by `g = gcd(rate, period)`. Instants times the
/// rate, costs times the period and the arrival time (a sum of those) are multiples of
/// `g`, so dividing them all by it changes no comparison and no quotient: the decision
/// is the bucket's own, computed with 64-bit operations and two multiplications by
/// reciprocals where that one takes 128-bit ones. An operand that does not fit returns
/// `None`, for the exact path to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WordGcra {
    burst: u64,
    pacing: bool,
    /// `burst × period / g`.
    tolerance: u64,
    /// The latest instant the word decides: within the range, and early enough that
    /// `now × rate / g + tolerance` fits 64 bits, so one comparison guards both.
    latest_now: Ticks,
    /// `rate / g`.
    rate: Divisor,
    /// `period / g`.
    period: Divisor,
}

impl WordGcra {
    /// The units of `bucket`'s word, whose states are multiples of `g` (its
    /// rate and period's greatest common divisor):
    /// `None` if a full burst does not fit 64 bits in them (the exact 128-bit path then
    /// decides every request).
    pub(crate) fn new<B: WordBucket>(bucket: &B, g: u64) -> Option<Self> {
        let gcra = bucket.gcra();
        let rate = gcra.params.rate / g;
        let period = gcra.params.period / g;
        let tolerance = gcra.burst.checked_mul(period)?;
        Some(Self {
            burst: gcra.burst,
            pacing: gcra.tag == tag::PACING,
            tolerance,
            latest_now: MAX_TICKS.min((u64::MAX - tolerance) / rate),
            rate: Divisor::new(rate),
            period: Divisor::new(period),
        })
    }

    /// [`decide`](Self::decide) with the default wait of a plain check (none, but a
    /// pacing queue's unbounded one).
    #[inline(always)]
    pub(crate) fn check(&self, word: u64, now: Ticks, cost: u64) -> Option<(Verdict, u64)> {
        self.check_with(self.pacing, word, now, cost)
    }

    /// [`check`](Self::check) for a bucket whose caller knows whether it paces: a
    /// constant where the bucket's type is known ([`WordBucket::PACING`]), so that the
    /// branch folds away.
    #[inline(always)]
    pub(crate) fn check_with(
        &self,
        pacing: bool,
        word: u64,
        now: Ticks,
        cost: u64,
    ) -> Option<(Verdict, u64)> {
        debug_assert_eq!(pacing, self.pacing);
        if pacing {
            return self.decide(word, now, cost, Ticks::MAX);
        }
        // `decide` with no wait, shortened: a bucket admits what fits its tolerance now,
        // and acting by now is then the same condition, so the check is one comparison.
        let at = self.at(now)?;
        let (now, full_at) = (at.now, at.full_at);
        let tat = word.max(now);
        // A denial keeps the word, but a state whose arrival time has passed is fresh.
        let kept = || if word > now { word } else { 0 };
        if cost > self.burst {
            return Some((at.verdict(false, tat, None), kept()));
        }
        let new_tat = tat.checked_add(cost.checked_mul(self.period.d)?)?;
        if new_tat <= full_at {
            let next = if new_tat > now { new_tat } else { 0 };
            Some((at.verdict(true, new_tat, Some(0)), next))
        } else {
            Some((at.verdict(false, tat, Some(new_tat - full_at)), kept()))
        }
    }

    /// `now` in the word's units; `None` past `latest_now` (for the exact path, which
    /// decides a `now` beyond the range as at `MAX_TICKS`). A branch rather than a select
    /// on the way from the clock to the word's compare-and-swap, which waits for every
    /// select.
    #[inline(always)]
    fn at(&self, now: Ticks) -> Option<At> {
        if now > self.latest_now {
            return None;
        }
        let now = now * self.rate.d;
        Some(At {
            now,
            full_at: now + self.tolerance,
        })
    }

    /// The bucket's decision on the state `word × g` (`0` for fresh): its verdict (the
    /// decision once [`decision`](Self::decision) has divided its durations) and the
    /// next word, or `None` if an operand does not fit 64 bits. Only the word is needed to
    /// replace the state, so the divisions wait until it is replaced, and a decision
    /// computed again after a lost compare-and-swap does not pay for them.
    #[inline(always)]
    pub(crate) fn decide(
        &self,
        word: u64,
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> Option<(Verdict, u64)> {
        let at = self.at(now)?;
        let (now, full_at) = (at.now, at.full_at);
        let tat = word.max(now);
        // A state whose arrival time has passed is fresh: the word becomes zero.
        let kept = if word > now { word } else { 0 };
        if cost > self.burst {
            return Some((at.verdict(false, tat, None), kept));
        }
        let wait = max_wait.min(MAX_WAIT).checked_mul(self.rate.d)?;
        let new_tat = tat.checked_add(cost.checked_mul(self.period.d)?)?;
        let (act_at, latest_tat) = if self.pacing {
            (tat, full_at)
        } else {
            (
                new_tat.saturating_sub(self.tolerance),
                full_at.checked_add(wait)?,
            )
        };
        if new_tat <= latest_tat && act_at <= now.checked_add(wait)? {
            let delay = act_at.saturating_sub(now);
            let next = if new_tat > now { new_tat } else { 0 };
            Some((at.verdict(true, new_tat, Some(delay)), next))
        } else {
            let admissible_at = new_tat
                .saturating_sub(latest_tat - now)
                .max(act_at.saturating_sub(wait));
            let retry_after = admissible_at.saturating_sub(now);
            Some((at.verdict(false, tat, Some(retry_after)), kept))
        }
    }

    /// The instant the state `word` holds is fresh again: its arrival time in whole
    /// ticks, rounded up.
    pub(crate) fn fresh_at(&self, word: u64) -> Ticks {
        self.rate.quotient_up(word)
    }

    /// The decision of a [`Verdict`]: its durations divided back into ticks.
    #[inline(always)]
    pub(crate) fn decision(&self, v: Verdict) -> Decision {
        let remaining = self.period.quotient(v.full_at.saturating_sub(v.tat));
        let reset_after = self.rate.quotient_up(v.tat - v.now);
        let wait = v.wait.map(|w| self.rate.quotient_up(w));
        if v.allowed {
            Decision::admit(self.burst, remaining, reset_after, wait.unwrap_or(0))
        } else {
            Decision::deny(self.burst, remaining, wait, reset_after)
        }
    }
}

/// An instant in a word's units, where a decision takes place.
#[derive(Debug, Clone, Copy)]
struct At {
    now: u64,
    /// When a bucket fresh now is full (token bucket) or empty (leaky bucket) again.
    full_at: u64,
}

impl At {
    /// The verdict of a decision at this instant.
    #[inline(always)]
    fn verdict(self, allowed: bool, tat: u64, wait: Option<u64>) -> Verdict {
        Verdict {
            allowed,
            now: self.now,
            full_at: self.full_at,
            tat,
            wait,
        }
    }
}

/// A decision on a bucket's word before its durations are divided into ticks (all in
/// the word's units).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Verdict {
    allowed: bool,
    now: u64,
    /// When the bucket is full (token bucket) or empty (leaky bucket) again.
    full_at: u64,
    /// The arrival time the decision reports on: the new one if admitted.
    tat: u64,
    /// The delay if admitted; if denied, the wait until admissible (`None`: never).
    wait: Option<u64>,
}

/// The buckets, whose in-memory word a [`WordGcra`] decides.
pub(crate) trait WordBucket {
    /// Whether the bucket paces (a queue that waits by default) rather than rejects.
    const PACING: bool;

    /// The engine behind the bucket.
    fn gcra(&self) -> &Gcra;
}

/// The three buckets share one engine.
macro_rules! word_bucket {
    ($($bucket:ty: $pacing:expr),*) => {$(
        impl WordBucket for $bucket {
            const PACING: bool = $pacing;

            fn gcra(&self) -> &Gcra {
                &self.0
            }
        }
    )*};
}
word_bucket!(TokenBucket: false, LeakyBucket: false, Pacing: true);

impl Divisor {
    /// `⌊n / d⌋` for a 64-bit `n`.
    #[inline(always)]
    fn quotient(self, n: u64) -> u64 {
        u64::try_from(self.div_rem(u128::from(n)).0).unwrap_or(u64::MAX)
    }

    /// `⌈n / d⌉` for a 64-bit `n`: a duration in the word's units as whole ticks.
    #[inline(always)]
    fn quotient_up(self, n: u64) -> u64 {
        let (q, r) = self.div_rem(u128::from(n));
        u64::try_from(q).unwrap_or(u64::MAX) + u64::from(r != 0)
    }
}
