//! How a direct limiter holds its one state: one atomic word where it fits, else a lock.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use portable_atomic::AtomicU128;

use super::word::{Verdict, WordBucket, WordGcra};
use crate::clock::raise;
use crate::{
    Algorithm, Ban, BucketParams, BucketState, Clock, Decision, FixedWindow, FixedWindowState,
    LeakyBucket, Pacing, Reserve, SlidingCounter, SlidingCounterState, SlidingLog, Ticks,
    TokenBucket,
};

/// A state that fits one 128-bit word, so a limiter updates it with one compare-and-swap.
pub trait WordState: Sized {
    /// The state as a word; never zero, which stands for the fresh state.
    fn to_word(self) -> u128;
    /// The state [`to_word`](Self::to_word) returned; `None` for zero.
    fn from_word(word: u128) -> Option<Self>;
}

/// The high and low 64-bit halves of a word.
pub(crate) fn split_word(word: u128) -> (u64, u64) {
    let high = u64::try_from(word >> 64).unwrap_or(0);
    let low = u64::try_from(word & u128::from(u64::MAX)).unwrap_or(0);
    (high, low)
}

/// A place holding one state that many threads update.
pub trait StateCell<S>: Default + Send + Sync {
    /// Replaces the state with the one `transition` returns, atomically, and returns the
    /// decision. `transition` may run more than once (it is pure, so that is safe).
    fn update(&self, transition: impl FnMut(Option<S>) -> (Decision, Option<S>)) -> Decision;
    /// The current state.
    fn load(&self) -> Option<S>;
    /// Forgets the state: the next request finds it fresh.
    fn clear(&self);
    /// How many compare-and-swaps failed because another thread wrote first (each
    /// failure reruns the transition); zero for cells that lock. A lower bound: counted
    /// without a locked instruction, two threads retrying at the same instant may count
    /// once.
    fn retries(&self) -> u64 {
        0
    }
}

/// An algorithm whose state an in-memory limiter can hold, and how.
pub trait InMemory: Algorithm {
    /// The cell a [`DirectLimiter`](super::DirectLimiter) keeps the state in.
    type Cell: StateCell<Self::State>;

    /// An empty cell for this algorithm's states (its parameters may choose the packing).
    fn cell(&self) -> Self::Cell {
        Self::Cell::default()
    }

    /// Where this algorithm is a bucket, its arithmetic on one 64-bit word per key,
    /// which a [`KeyedLimiter`](super::KeyedLimiter) decides on with a
    /// compare-and-swap; `None` (the default) keeps each key's state behind its own lock.
    fn word_units(&self) -> Option<WordUnits<Self::State>> {
        None
    }

    /// [`decide`](Algorithm::decide) on the state in `cell` at `clock`'s time, replacing
    /// it: the transition run by the cell's update, unless the algorithm has a cheaper
    /// route to the same decision and state (the buckets on their 64-bit word, which
    /// read the clock [unordered](Clock::now_unordered) and order the reading themselves).
    #[inline]
    fn decide_in(&self, cell: &Self::Cell, clock: &impl Clock, cost: u64) -> Decision {
        let now = clock.now();
        cell.update(|state| self.decide(state, now, cost))
    }

    /// [`reserve`](Reserve::reserve) on the state in `cell`, replacing it, like
    /// [`decide_in`](Self::decide_in).
    #[inline]
    fn reserve_in(
        &self,
        cell: &Self::Cell,
        clock: &impl Clock,
        cost: u64,
        max_wait: Ticks,
    ) -> Decision
    where
        Self: Reserve,
    {
        let now = clock.now();
        cell.update(|state| self.reserve(state, now, cost, max_wait))
    }
}

/// A state in one atomic 128-bit word, updated by compare-and-swap: no lock, and a
/// reader never waits for a writer.
#[derive(Debug)]
pub struct AtomicCell<S> {
    word: AtomicU128,
    retries: AtomicU64,
    state: PhantomData<fn() -> S>,
}

impl<S> Default for AtomicCell<S> {
    fn default() -> Self {
        Self {
            word: AtomicU128::new(0),
            retries: AtomicU64::new(0),
            state: PhantomData,
        }
    }
}

impl<S: WordState> AtomicCell<S> {
    /// Replaces the state, whatever it is.
    fn store(&self, state: Option<S>) {
        self.word
            .store(state.map_or(0, S::to_word), Ordering::Release);
    }
}

/// Counts a retry without a locked instruction: the counter shares the contended word's
/// cache line, which the failed compare-and-swap has just brought in, and a locked add
/// would cost about what the retry does. Two threads counting at the same instant may
/// count once, so the count is a lower bound.
#[inline(always)]
fn count_retry(retries: &AtomicU64) {
    retries.store(retries.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// Publishes `next` in a 64-bit `word`, which held `current` when the decision read it: nothing
/// to write when they are equal (a decision that changes nothing writes nothing), else
/// one compare-and-swap; `Err` with the word found when another decision changed it
/// first.
#[inline(always)]
pub(super) fn publish(word: &AtomicU64, current: u64, next: u64) -> Result<(), u64> {
    if next == current {
        return Ok(());
    }
    word.compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
        .map(|_| ())
}

impl<S: WordState> StateCell<S> for AtomicCell<S> {
    fn update(&self, mut transition: impl FnMut(Option<S>) -> (Decision, Option<S>)) -> Decision {
        let mut current = self.word.load(Ordering::Acquire);
        loop {
            let (decision, next) = transition(S::from_word(current));
            let next = next.map_or(0, S::to_word);
            if next == current {
                return decision;
            }
            match self
                .word
                .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return decision,
                Err(actual) => {
                    count_retry(&self.retries);
                    current = actual;
                }
            }
        }
    }

    fn load(&self) -> Option<S> {
        S::from_word(self.word.load(Ordering::Acquire))
    }

    fn clear(&self) {
        self.word.store(0, Ordering::Release);
    }

    fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
}

/// A bucket's state in one atomic 64-bit word: a plain load and a 64-bit
/// compare-and-swap per decision, where the 128-bit word takes portable-atomic's 16-byte
/// compare-and-swap, chosen at run time.
///
/// A bucket's arrival time, counted in `1 / rate` tick, is a sum of instants times the
/// rate and of costs times the period, so a multiple of `g = gcd(rate, period)`; the word
/// holds it divided by `g`, exactly. That fits 64 bits at every instant if `rate / g` is
/// at most 3, else up to `2^64 × g / rate` ticks (for 10^9 or 1000 per second, to the year
/// 2554; for a rate prime to the period and near 10^9, never on the Unix clock). A state
/// that does not fit moves the cell, once and for good, to a 128-bit word: decisions and
/// states are the same either way.
///
/// Beside the word, the cell keeps the latest instant a decision on it was taken at, and
/// raises every later decision's reading to it: the clock as its decisions see it never
/// goes backwards, also across cores, at no cost beyond the word's own cache line: it is
/// read after the word and raised before the word is replaced.
#[derive(Debug)]
#[repr(C)]
pub struct NarrowCell<S> {
    /// The state divided by `g`; zero for fresh, [`MOVING`] or [`WIDE`]. First, and
    /// with `floor` in the first 16 bytes of a 16-byte aligned cell: one cache line.
    word: AtomicU64,
    /// The latest instant a decision on the cell was taken at.
    floor: AtomicU64,
    retries: AtomicU64,
    /// Where the state lives once it has outgrown the word.
    wide: AtomicCell<S>,
    divisor: ExactDivisor,
}

/// The word while one thread moves the state to the wide cell.
pub(crate) const MOVING: u64 = u64::MAX - 1;
/// The word once the state lives in the wide cell.
pub(crate) const WIDE: u64 = u64::MAX;

impl<S> NarrowCell<S> {
    /// An empty cell for states that are multiples of `gcd(a, b)` (the parameters
    /// of a bucket: its rate and period; zero is taken as one).
    pub fn new(a: u64, b: u64) -> Self {
        Self {
            word: AtomicU64::new(0),
            floor: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            wide: AtomicCell::default(),
            divisor: ExactDivisor::new(gcd(a.max(1), b.max(1))),
        }
    }
}

impl<S> Default for NarrowCell<S> {
    fn default() -> Self {
        Self::new(1, 1)
    }
}

impl<S: WordState> NarrowCell<S> {
    fn unpack(&self, word: u64) -> Option<S> {
        S::from_word(self.divisor.times(word))
    }

    /// The word for `state`; `None` if it does not fit.
    fn pack(&self, state: Option<S>) -> Option<u64> {
        state.map_or(Some(0), |s| {
            self.divisor
                .exact_quotient(s.to_word())
                .filter(|&w| w < MOVING)
        })
    }

    /// The word once no move to the wide cell is under way (a move takes a few
    /// instructions, once in a cell's life).
    fn settled(&self) -> u64 {
        loop {
            match self.word.load(Ordering::Acquire) {
                MOVING => std::thread::yield_now(),
                word => return word,
            }
        }
    }

    /// Moves the state the word holds as `current` to the wide cell, unless another
    /// thread changed the word first.
    fn widen(&self, current: u64) {
        if self
            .word
            .compare_exchange(current, MOVING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            self.wide.store(self.unpack(current));
            self.word.store(WIDE, Ordering::Release);
        }
    }
}

impl<S: WordState + Send> NarrowCell<S> {
    /// Replaces the word with the one `step` returns from it, atomically, and returns the
    /// decision of the verdict `step` returned with it; `step` sees and returns the word's
    /// own value (the state divided by `g`, zero for fresh), and decides at `reading`
    /// raised to the cell's floor. `Err` with that instant where the state is not in the
    /// word, or `step` returns `None` (an operand that does not fit) or a word that does
    /// not fit: [`update`](StateCell::update) on the state decides those.
    ///
    /// The floor is read after the word and raised before the word is replaced, so a
    /// decision that reads the word another replaced decides no earlier than that one
    /// did: the instants of the decisions, in the order they replace the word, never go
    /// backwards, however early or on whichever core each clock reading was taken.
    #[inline(always)]
    pub(crate) fn update_word<T>(
        &self,
        reading: Ticks,
        mut step: impl FnMut(u64, Ticks) -> Option<(T, u64)>,
        decision: impl FnOnce(T) -> Decision,
    ) -> Result<Decision, Ticks> {
        let mut current = self.word.load(Ordering::Acquire);
        loop {
            let now = raise(&self.floor, reading);
            if current >= MOVING {
                return Err(now);
            }
            let Some((verdict, next)) = step(current, now).filter(|&(_, next)| next < MOVING)
            else {
                return Err(now);
            };
            match publish(&self.word, current, next) {
                Ok(()) => return Ok(decision(verdict)),
                Err(actual) => {
                    count_retry(&self.retries);
                    current = actual;
                }
            }
        }
    }
}

impl<S: WordState + Send> StateCell<S> for NarrowCell<S> {
    #[inline]
    fn update(&self, mut transition: impl FnMut(Option<S>) -> (Decision, Option<S>)) -> Decision {
        let mut current = self.word.load(Ordering::Acquire);
        loop {
            if current >= MOVING {
                self.settled();
                return self.wide.update(transition);
            }
            let (decision, next) = transition(self.unpack(current));
            let Some(next) = self.pack(next) else {
                self.widen(current);
                current = self.word.load(Ordering::Acquire);
                continue;
            };
            match publish(&self.word, current, next) {
                Ok(()) => return decision,
                Err(actual) => {
                    count_retry(&self.retries);
                    current = actual;
                }
            }
        }
    }

    fn load(&self) -> Option<S> {
        match self.settled() {
            WIDE => self.wide.load(),
            word => self.unpack(word),
        }
    }

    fn clear(&self) {
        loop {
            match self.settled() {
                WIDE => return self.wide.clear(),
                word => {
                    if self
                        .word
                        .compare_exchange(word, 0, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        return;
                    }
                }
            }
        }
    }

    fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed) + self.wide.retries()
    }
}

/// A bucket's arithmetic on a 64-bit word per key, for a keyed limiter: the word holds
/// the state divided by `g = gcd(rate, period)` (zero for fresh), as in a
/// [`NarrowCell`], and the bucket decides on it in those units. Built by the buckets'
/// [`InMemory::word_units`]; the limiter keeps one and
/// each key only its word.
#[derive(Debug, Clone, Copy)]
pub struct WordUnits<S> {
    gcra: WordGcra,
    divisor: ExactDivisor,
    to_word: fn(S) -> u128,
    from_word: fn(u128) -> Option<S>,
}

impl WordUnits<BucketState> {
    /// `bucket`'s units; `None` where a full burst does not fit them.
    pub(crate) fn bucket(bucket: &impl WordBucket, params: BucketParams) -> Option<Self> {
        let divisor = ExactDivisor::new(gcd(params.rate.max(1), params.period.max(1)));
        Some(Self {
            gcra: WordGcra::new(bucket, divisor.d)?,
            divisor,
            to_word: BucketState::to_word,
            from_word: BucketState::from_word,
        })
    }
}

impl<S> WordUnits<S> {
    /// The arithmetic deciding on the word.
    #[inline(always)]
    pub(crate) const fn gcra(&self) -> &WordGcra {
        &self.gcra
    }

    /// The state a word below [`MOVING`] holds.
    pub(crate) fn unpack(&self, word: u64) -> Option<S> {
        (self.from_word)(self.divisor.times(word))
    }

    /// The word for `state`; `None` if it does not fit below [`MOVING`].
    pub(crate) fn pack(&self, state: Option<S>) -> Option<u64> {
        state.map_or(Some(0), |s| {
            self.divisor
                .exact_quotient((self.to_word)(s))
                .filter(|&w| w < MOVING)
        })
    }
}

/// Exact division by a fixed `d`: a shift and a multiplication by the inverse of its
/// odd part modulo 2^64, checked by multiplying back.
#[derive(Debug, Clone, Copy)]
struct ExactDivisor {
    d: u64,
    shift: u32,
    odd: u64,
    /// `odd × inverse ≡ 1 (mod 2^64)`.
    inverse: u64,
}

impl ExactDivisor {
    fn new(d: u64) -> Self {
        let shift = d.trailing_zeros();
        let odd = d >> shift;
        // Newton's iteration doubles the correct low bits each step; `odd` is its own
        // inverse modulo 8, so five steps reach 96 bits.
        let mut inverse = odd;
        for _ in 0..5 {
            inverse = inverse.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(inverse)));
        }
        Self {
            d,
            shift,
            odd,
            inverse,
        }
    }

    /// `n × d`.
    #[inline]
    fn times(self, n: u64) -> u128 {
        u128::from(n) * u128::from(self.d)
    }

    /// `n / d` if `d` divides `n` and the quotient fits 64 bits, else `None`.
    #[inline]
    fn exact_quotient(self, n: u128) -> Option<u64> {
        if n.trailing_zeros() < self.shift {
            return None;
        }
        let m = n >> self.shift;
        let low = u64::try_from(m & u128::from(u64::MAX)).unwrap_or(0);
        // If `m = q × odd` with `q < 2^64`, the low word times the inverse is `q`;
        // multiplying back rejects every other `m`.
        let q = low.wrapping_mul(self.inverse);
        (u128::from(q) * u128::from(self.odd) == m).then_some(q)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A state behind a mutex, for states too big for a word (the sliding log, the ban).
#[derive(Debug)]
pub struct LockedCell<S>(Mutex<Option<S>>);

impl<S> Default for LockedCell<S> {
    fn default() -> Self {
        Self(Mutex::new(None))
    }
}

impl<S: Clone + Send> StateCell<S> for LockedCell<S> {
    fn update(&self, mut transition: impl FnMut(Option<S>) -> (Decision, Option<S>)) -> Decision {
        // A transition cannot panic while holding the lock, but a poisoned lock must not
        // turn every later request into a panic either.
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (decision, next) = transition(state.take());
        *state = next;
        decision
    }

    fn load(&self) -> Option<S> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn clear(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// A bucket's state: a [`NarrowCell`] packed by the bucket's rate and period, and the
/// bucket's arithmetic in the word's units, so that a decision on a state in the word
/// reads and writes the word alone, in 64-bit operations (the same decisions and
/// states as [`decide`](Algorithm::decide) on the unpacked state, which decides where
/// an operand does not fit).
#[derive(Debug, Default)]
pub struct BucketCell {
    narrow: NarrowCell<BucketState>,
    /// `None` where a full burst does not fit the word's units: never the word path.
    word: Option<WordGcra>,
}

impl BucketCell {
    fn new(bucket: &impl WordBucket, params: BucketParams) -> Self {
        let narrow = NarrowCell::new(params.rate, params.period);
        Self {
            word: WordGcra::new(bucket, narrow.divisor.d),
            narrow,
        }
    }

    /// Decides with `step` on the word at `reading` raised to the cell's floor; `Err`
    /// with that instant where the word cannot (see [`NarrowCell::update_word`]).
    #[inline(always)]
    fn update_with(
        &self,
        reading: Ticks,
        step: impl Fn(&WordGcra, u64, Ticks) -> Option<(Verdict, u64)>,
    ) -> Result<Decision, Ticks> {
        let Some(word) = self.word.as_ref() else {
            return Err(raise(&self.narrow.floor, reading));
        };
        self.narrow
            .update_word(reading, |w, now| step(word, w, now), |v| word.decision(v))
    }
}

/// [`Algorithm::decide`] on a bucket's state in its cell, where the word cannot decide:
/// out of line and given its operands alone, so that the word path stores nothing on
/// the way to its compare-and-swap (which waits for every earlier store).
#[cold]
#[inline(never)]
fn decide_exact<A: Algorithm<State = BucketState>>(
    bucket: &A,
    cell: &BucketCell,
    now: Ticks,
    cost: u64,
) -> Decision {
    cell.narrow.update(|state| bucket.decide(state, now, cost))
}

/// [`Reserve::reserve`] on a bucket's state in its cell, where the word cannot decide
/// (as [`decide_exact`]).
#[cold]
#[inline(never)]
fn reserve_exact<A: Reserve<State = BucketState>>(
    bucket: &A,
    cell: &BucketCell,
    now: Ticks,
    cost: u64,
    max_wait: Ticks,
) -> Decision {
    cell.narrow
        .update(|state| bucket.reserve(state, now, cost, max_wait))
}

impl StateCell<BucketState> for BucketCell {
    fn update(
        &self,
        transition: impl FnMut(Option<BucketState>) -> (Decision, Option<BucketState>),
    ) -> Decision {
        self.narrow.update(transition)
    }

    fn load(&self) -> Option<BucketState> {
        self.narrow.load()
    }

    fn clear(&self) {
        self.narrow.clear();
    }

    fn retries(&self) -> u64 {
        self.narrow.retries()
    }
}

/// The buckets keep their state in a [`BucketCell`] and decide on its word.
macro_rules! narrow_bucket {
    ($($bucket:ty),*) => {$(
        impl InMemory for $bucket {
            type Cell = BucketCell;

            fn cell(&self) -> BucketCell {
                BucketCell::new(self, self.params())
            }

            fn word_units(&self) -> Option<WordUnits<BucketState>> {
                WordUnits::bucket(self, self.params())
            }

            #[inline(always)]
            fn decide_in(&self, cell: &BucketCell, clock: &impl Clock, cost: u64) -> Decision {
                cell.update_with(clock.now_unordered(), |word, w, now| {
                    word.check_with(Self::PACING, w, now, cost)
                })
                .unwrap_or_else(|now| decide_exact(self, cell, now, cost))
            }

            #[inline]
            fn reserve_in(
                &self,
                cell: &BucketCell,
                clock: &impl Clock,
                cost: u64,
                max_wait: Ticks,
            ) -> Decision {
                cell.update_with(clock.now_unordered(), |word, w, now| {
                    word.decide(w, now, cost, max_wait)
                })
                .unwrap_or_else(|now| reserve_exact(self, cell, now, cost, max_wait))
            }
        }
    )*};
}
narrow_bucket!(TokenBucket, LeakyBucket, Pacing);
impl InMemory for FixedWindow {
    type Cell = AtomicCell<FixedWindowState>;
}
impl InMemory for SlidingCounter {
    type Cell = AtomicCell<SlidingCounterState>;
}
impl InMemory for SlidingLog {
    type Cell = LockedCell<Self::State>;
}
impl<A: Algorithm> InMemory for Ban<A>
where
    A::State: Send,
{
    type Cell = LockedCell<Self::State>;
}
impl<A: Algorithm> InMemory for crate::Composite<A>
where
    A::State: Send,
{
    type Cell = LockedCell<Self::State>;
}
/// Any algorithm keeps its state behind a lock: its buckets pay for the dispatch that
/// keeps one limiter type for every policy, not for their word.
impl InMemory for crate::AnyAlgorithm {
    type Cell = LockedCell<crate::AnyState>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MAX_PERIOD;
    use crate::{ManualClock, Reserve, Ticks, MAX_TICKS};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn exact_quotient_is_division(d in prop_oneof![1..=1_000u64, 1..=u64::MAX], q: u64, r: u64, n: u128) {
            let divisor = ExactDivisor::new(d);
            let exact = u128::from(q) * u128::from(d);
            for n in [n, exact, exact + u128::from(r % d), 0] {
                let expected = (n % u128::from(d) == 0)
                    .then(|| u64::try_from(n / u128::from(d)).ok())
                    .flatten();
                prop_assert_eq!(divisor.exact_quotient(n), expected);
            }
            prop_assert_eq!(divisor.times(q), exact);
        }

        #[test]
        fn word_decides_as_the_exact_path(
            capacity in prop_oneof![1..=10u64, 1..=1_000_000_000u64],
            rate in prop_oneof![1..=10u64, 1..=1_000_000_000u64, Just(1_000_000_000)],
            period in prop_oneof![1..=10u64, 1..=1_000_000u64, Just(1_000_000), 1..=MAX_PERIOD],
            now in prop_oneof![0..=MAX_TICKS, Just(u64::MAX), any::<u64>(), (1u64 << 50)..=(1 << 51)],
            offset: i64,
            state in 0..4u8,
            cost in prop_oneof![0..=3u64, any::<u64>()],
            wait in prop_oneof![Just(None), any::<u64>().prop_map(Some), (0..=1_000_000u64).prop_map(Some)],
        ) {
            let g = gcd(rate, period);
            let now_units = |now: u64| u128::from(now.min(MAX_TICKS)) * u128::from(rate / g);
            // `u64::MAX` stands for the last instant whose `now × rate / g` fits the word,
            // moved by the offset: the fallback's boundary.
            let now = if now == u64::MAX {
                (u64::MAX / (rate / g)).saturating_add_signed(offset % 4_000_000)
            } else {
                now
            };
            let here = u64::try_from(now_units(now)).unwrap_or(u64::MAX);
            let word = match state {
                0 => 0,
                // About the arrival time a busy bucket holds: around now, a horizon away.
                1 => here.saturating_add_signed(offset % (1 << 40)),
                2 => here.saturating_add(offset.unsigned_abs()),
                _ => offset.unsigned_abs(),
            }
            .min(MOVING - 1);
            let wait = wait.map(|w| w.min(MAX_TICKS));
            if let Ok(token) = TokenBucket::new(capacity, rate, period) {
                same_on_the_word(&token, token.params(), false, g, word, now, cost, wait)?;
            }
            if let Ok(funnel) = LeakyBucket::new(capacity, rate, period) {
                same_on_the_word(&funnel, funnel.params(), false, g, word, now, cost, wait)?;
            }
            if let Ok(queue) = Pacing::new(capacity - 1, rate, period) {
                same_on_the_word(&queue, queue.params(), true, g, word, now, cost, wait)?;
            }
        }

        /// The 64-bit word against the 128-bit one, through the same transitions (checks
        /// and reservations of every bucket).
        #[test]
        fn narrow_cell_decides_as_the_wide_cell(
            capacity in prop_oneof![1..=10u64, 1..=1_000_000_000u64],
            rate in prop_oneof![1..=10u64, 1..=1_000_000_000u64],
            period in prop_oneof![1..=10u64, 1..=1_000_000u64],
            start in prop_oneof![0..=1u64 << 52, Just(u64::MAX), 0..=MAX_TICKS],
            steps in prop::collection::vec((0..4u8, any::<u64>(), any::<u64>(), any::<u64>()), 1..60),
        ) {
            let (Ok(token), Ok(funnel), Ok(queue)) = (
                TokenBucket::new(capacity, rate, period),
                LeakyBucket::new(capacity, rate, period),
                Pacing::new(capacity, rate, period),
            ) else {
                return Ok(());
            };
            // Start where the word just overflows for these parameters, unless told.
            let overflow = u64::try_from(
                (u128::from(u64::MAX) * u128::from(gcd(rate, period)) / u128::from(rate))
                    .min(u128::from(MAX_TICKS)),
            ).unwrap_or(MAX_TICKS);
            let start = if start == u64::MAX { overflow.saturating_sub(3 * period) } else { start };
            same_cells(&token, start, period, capacity, &steps)?;
            same_cells(&funnel, start, period, capacity, &steps)?;
            same_cells(&queue, start, period, capacity, &steps)?;
        }
    }

    /// Readings that go backwards, as a lagging core's or an early one's: each bucket's
    /// decision is taken at the latest instant its cell has decided at, the same
    /// decision as the pure transition's at that instant.
    #[test]
    fn a_bucket_decides_no_earlier_than_it_has() {
        /// A clock whose unordered readings are 100, 40, 100, 130, 70.
        struct Lagging(std::cell::Cell<usize>);
        impl Clock for Lagging {
            fn now(&self) -> Ticks {
                unreachable!("the buckets read the clock unordered")
            }
            fn now_unordered(&self) -> Ticks {
                let i = self.0.replace(self.0.get() + 1);
                [100, 40, 100, 130, 70][i]
            }
        }
        let bucket = TokenBucket::new(2, 1, 10).unwrap();
        let cell = bucket.cell();
        let clock = Lagging(std::cell::Cell::new(0));
        let mut state = None;
        for now in [100, 100, 100, 130, 130] {
            let (expected, next) = bucket.decide(state, now, 1);
            assert_eq!(bucket.decide_in(&cell, &clock, 1), expected, "at {now}");
            state = next;
        }
    }

    /// Threads whose readings lag one another's by up to 50 ticks, updating one word:
    /// the instants the cell decided at, in the order the word was replaced, never go
    /// backwards.
    #[test]
    fn a_word_is_replaced_in_the_order_of_time() {
        use std::vec::Vec;
        const THREADS: u64 = 4;
        const DECISIONS: u64 = 20_000;
        let cell = NarrowCell::<BucketState>::default();
        let time = AtomicU64::new(1_000);
        let decided: Vec<Vec<(u64, Ticks)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..THREADS)
                .map(|lag| {
                    let (cell, time) = (&cell, &time);
                    s.spawn(move || {
                        (0..DECISIONS)
                            .map(|_| {
                                let reading = time.fetch_add(1, Ordering::Relaxed) - lag * 50 / 3;
                                let mut replaced = None;
                                let decision = cell.update_word(
                                    reading,
                                    |word, now| Some(((word + 1, now), word + 1)),
                                    |verdict| {
                                        replaced = Some(verdict);
                                        Decision::admit(1, 0, 0, 0)
                                    },
                                );
                                assert!(decision.is_ok());
                                replaced.expect("every step replaces the word")
                            })
                            .collect()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let mut order: Vec<(u64, Ticks)> = decided.into_iter().flatten().collect();
        order.sort_unstable();
        assert_eq!(order.len() as u64, THREADS * DECISIONS);
        for pair in order.windows(2) {
            assert_eq!(pair[1].0, pair[0].0 + 1, "one replacement per word");
            assert!(pair[1].1 >= pair[0].1, "{pair:?}: time went backwards");
        }
    }

    /// The bucket's cell both ways (the transition on the unpacked state, and the
    /// decision on the word) against the 128-bit cell: the same decisions and states,
    /// and the word moves to the wide cell only once a state does not fit it.
    fn same_cells<A: InMemory<Cell = BucketCell> + Reserve<State = BucketState>>(
        alg: &A,
        start: Ticks,
        period: Ticks,
        capacity: u64,
        steps: &[(u8, u64, u64, u64)],
    ) -> Result<(), TestCaseError> {
        let (packed, fast) = (alg.cell(), alg.cell());
        let wide = AtomicCell::<BucketState>::default();
        let mut now = start;
        let mut outgrown = false;
        for &(kind, gap, cost, wait) in steps {
            now = now.saturating_add(gap % (2 * period + 1)).min(MAX_TICKS);
            let cost = cost % (capacity + 2);
            let wait = match kind {
                1 => wait % (4 * period),
                2 => wait,
                _ => 0,
            };
            let mut step = |s| match kind {
                0 => alg.decide(s, now, cost),
                1 | 2 => alg.reserve(s, now, cost, wait),
                _ => alg.decide(s, now, 1),
            };
            let expected = wide.update(&mut step);
            prop_assert_eq!(packed.update(&mut step), expected);
            let clock = ManualClock::new(now);
            let decided = match kind {
                0 => alg.decide_in(&fast, &clock, cost),
                1 | 2 => alg.reserve_in(&fast, &clock, cost, wait),
                _ => alg.decide_in(&fast, &clock, 1),
            };
            prop_assert_eq!(decided, expected);
            let state = wide.load();
            outgrown |= packed.narrow.pack(state).is_none();
            for cell in [&packed, &fast] {
                prop_assert_eq!(cell.load(), state);
                prop_assert_eq!(cell.narrow.word.load(Ordering::Relaxed) == WIDE, outgrown);
            }
        }
        Ok(())
    }

    /// [`WordGcra`] decides exactly as the bucket on the unpacked state, and gives up
    /// (`None`) only where an operand does not fit 64 bits.
    #[allow(clippy::too_many_arguments)]
    fn same_on_the_word<A: WordBucket + Reserve<State = BucketState>>(
        alg: &A,
        params: BucketParams,
        pacing: bool,
        g: u64,
        word: u64,
        now: Ticks,
        cost: u64,
        wait: Option<Ticks>,
    ) -> Result<(), TestCaseError> {
        let burst = params.capacity + u64::from(pacing);
        let Some(units) = WordGcra::new(alg, g) else {
            let tolerance = u128::from(burst) * u128::from(params.period / g);
            prop_assert!(tolerance > u128::from(u64::MAX));
            return Ok(());
        };
        let state = BucketState::from_word(u128::from(word) * u128::from(g));
        let (exact, next) = match wait {
            Some(wait) => alg.reserve(state, now, cost, wait),
            None => alg.decide(state, now, cost),
        };
        let fast = match wait {
            Some(wait) => units.decide(word, now, cost, wait),
            None => units.check(word, now, cost),
        };
        match fast {
            Some((verdict, next_word)) => {
                prop_assert_eq!(units.decision(verdict), exact);
                prop_assert_eq!(
                    u128::from(next_word) * u128::from(g),
                    next.map_or(0, |s| s.to_word())
                );
            }
            None => {
                // The operands of the exact path, in the word's units.
                let (rate, period) = (u128::from(params.rate / g), u128::from(params.period / g));
                // A time beyond the range goes to the exact path, which clamps it.
                let beyond = now > MAX_TICKS;
                let now = u128::from(now.min(MAX_TICKS)) * rate;
                let full_at = now + u128::from(burst) * period;
                let default_wait = if pacing { Ticks::MAX } else { 0 };
                let wait =
                    u128::from(wait.unwrap_or(default_wait).min(crate::limits::MAX_WAIT)) * rate;
                let new_tat = u128::from(word).max(now) + u128::from(cost) * period;
                let widest = if cost > burst {
                    full_at
                } else {
                    full_at.max(new_tat).max(full_at + wait)
                };
                prop_assert!(
                    widest > u128::from(u64::MAX) || beyond,
                    "gave up with operands that fit, at a time in range"
                );
            }
        }
        Ok(())
    }
}
