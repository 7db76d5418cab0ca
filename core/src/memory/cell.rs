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
#[path = "cell_tests.rs"]
mod tests;
