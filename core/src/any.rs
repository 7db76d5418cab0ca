//! One algorithm type for every rate limit a policy, a command or a JS caller can
//! configure, so a host keeps one limiter type (and the browser build one copy of the
//! code) for every combination.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::{
    Algorithm, Ban, BanState, BucketState, CalendarLimit, CalendarWindowState, Composite, Decision,
    DecodeError, FixedWindow, FixedWindowState, Kind, LeakyBucket, Pacing, Report, Reserve,
    SlidingCounter, SlidingCounterState, SlidingLog, SlidingLogState, Ticks, TokenBucket,
};

/// Any rate algorithm of the core, including composites and bans of any of them.
///
/// Its state is an [`AnyState`] of the same variant, and its encoding is the variant's
/// own: the bytes a host stores for an `AnyAlgorithm::TokenBucket` are the bytes it
/// stores for the [`TokenBucket`] itself.
///
/// Exhaustive on purpose: every host matches on it (the Redis scripts, the module), so a
/// new algorithm fails to compile in each host until it runs there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyAlgorithm {
    /// A [`FixedWindow`].
    FixedWindow(FixedWindow),
    /// A [`SlidingLog`].
    SlidingLog(SlidingLog),
    /// A [`SlidingCounter`].
    SlidingCounter(SlidingCounter),
    /// A [`TokenBucket`].
    TokenBucket(TokenBucket),
    /// A [`LeakyBucket`].
    LeakyBucket(LeakyBucket),
    /// A [`Pacing`] queue.
    Pacing(Pacing),
    /// A [`CalendarLimit`]: a calendar window in its calendar's periods.
    CalendarWindow(CalendarLimit),
    /// Several limits on one key.
    Composite(Composite<AnyAlgorithm>),
    /// A limit in a penalty box (boxed: a ban holds its limit inline).
    Ban(Box<Ban<AnyAlgorithm>>),
}

/// The state of an [`AnyAlgorithm`]: the state of its variant's algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum AnyState {
    FixedWindow(FixedWindowState),
    SlidingLog(SlidingLogState),
    SlidingCounter(SlidingCounterState),
    TokenBucket(BucketState),
    LeakyBucket(BucketState),
    Pacing(BucketState),
    CalendarWindow(CalendarWindowState),
    Composite(Vec<Option<AnyState>>),
    Ban(Box<BanState<AnyState>>),
}

/// A transition to run on whichever algorithm an [`AnyAlgorithm`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transition {
    /// [`Algorithm::decide`].
    Decide {
        /// The time of the request.
        now: Ticks,
        /// Its cost.
        cost: u64,
    },
    /// [`Algorithm::peek`]: the slot is emptied, not updated.
    Peek {
        /// The time of the request.
        now: Ticks,
        /// Its cost.
        cost: u64,
    },
    /// [`Reserve::reserve`] where the algorithm books ahead, else `Decide` (see
    /// [`AnyAlgorithm::can_reserve`]).
    Reserve {
        /// The time of the request.
        now: Ticks,
        /// Its cost.
        cost: u64,
        /// The longest wait to book.
        max_wait: Ticks,
    },
}

/// A transition's answer: the decision and the state to store.
type Step<S> = (Decision, Option<S>);

impl Transition {
    /// On an algorithm that books ahead (buckets, pacing, composites of them).
    fn booked<A: Reserve>(self, algorithm: &A, state: Option<A::State>) -> Step<A::State> {
        match self {
            Self::Reserve {
                now,
                cost,
                max_wait,
            } => algorithm.reserve(state, now, cost, max_wait),
            other => other.decided(algorithm, state),
        }
    }

    /// On an algorithm that decides at `now` only (windows, bans): a reservation is a
    /// decision.
    fn decided<A: Algorithm>(self, algorithm: &A, state: Option<A::State>) -> Step<A::State> {
        match self {
            Self::Decide { now, cost } | Self::Reserve { now, cost, .. } => {
                algorithm.decide(state, now, cost)
            }
            Self::Peek { now, cost } => (algorithm.peek(state, now, cost), None),
        }
    }
}

/// Runs `run` (a transition or a report) on one plain variant's state: its state out of
/// the slot (a state of another variant as fresh), the new state back in.
macro_rules! on_variant {
    ($slot:ident, $variant:ident, $run:expr) => {{
        let state = match $slot.take() {
            Some(AnyState::$variant(state)) => Some(state),
            _ => None,
        };
        let (out, state) = $run(state);
        *$slot = state.map(AnyState::$variant);
        out
    }};
}

impl AnyAlgorithm {
    /// Runs `transition` on the variant's own algorithm, updating the state in `slot`:
    /// the one dispatch of every operation. In place, because moving states in and out
    /// by value costs copies the browser build makes as calls.
    ///
    /// A state of another variant than `self` is decided as fresh. It cannot arise: a
    /// state comes only from this algorithm's own transitions or [`decode`](Algorithm::decode),
    /// which return states of its variant; a host that stores states under a policy
    /// that changed kind decodes the old bytes with the new algorithm, which refuses them.
    pub fn run(&self, slot: &mut Option<AnyState>, transition: Transition) -> Decision {
        match self {
            Self::FixedWindow(a) => on_variant!(slot, FixedWindow, |s| transition.decided(a, s)),
            Self::SlidingLog(a) => on_variant!(slot, SlidingLog, |s| transition.decided(a, s)),
            Self::SlidingCounter(a) => {
                on_variant!(slot, SlidingCounter, |s| transition.decided(a, s))
            }
            Self::TokenBucket(a) => on_variant!(slot, TokenBucket, |s| transition.booked(a, s)),
            Self::LeakyBucket(a) => on_variant!(slot, LeakyBucket, |s| transition.booked(a, s)),
            Self::Pacing(a) => on_variant!(slot, Pacing, |s| transition.booked(a, s)),
            Self::CalendarWindow(a) => {
                on_variant!(slot, CalendarWindow, |s| transition.decided(a, s))
            }
            Self::Composite(a) => on_variant!(slot, Composite, |s| transition.booked(a, s)),
            Self::Ban(ban) => {
                let state = match slot.take() {
                    Some(AnyState::Ban(state)) => Some(*state),
                    _ => None,
                };
                let (decision, state) = transition.decided(&**ban, state);
                *slot = state.map(|state| AnyState::Ban(Box::new(state)));
                decision
            }
        }
    }

    /// Whether [`Reserve::reserve`] books ahead: as its [kind](Kind::can_reserve) does,
    /// a composite when every member does, never a ban. The others (windows, bans)
    /// decide at `now` only, so hosts refuse a reservation on them rather than pretend.
    pub fn can_reserve(&self) -> bool {
        self.all_can(Kind::can_reserve)
    }

    /// Whether a [`Report`] charges the key: as its [kind](Kind::takes_reports) does, a
    /// composite when every member does, never a ban (see [`Report`]); elsewhere a report
    /// records nothing and drops every unit.
    pub fn can_report(&self) -> bool {
        self.all_can(Kind::takes_reports)
    }

    /// Whether this algorithm's kind, and each member's, `can`; a ban cannot.
    fn all_can(&self, can: fn(Kind) -> bool) -> bool {
        match self {
            Self::Ban(_) => false,
            Self::Composite(composite) => {
                can(Kind::Composite) && composite.members().iter().all(|m| m.all_can(can))
            }
            plain => can(plain.kind()),
        }
    }

    /// The kind a policy names for this algorithm; a ban's is the kind of the limit it
    /// wraps (a policy writes a ban as `ban = { .. }` beside its algorithm).
    pub fn kind(&self) -> Kind {
        match self {
            Self::FixedWindow(_) => Kind::FixedWindow,
            Self::SlidingLog(_) => Kind::SlidingLog,
            Self::SlidingCounter(_) => Kind::SlidingCounter,
            Self::TokenBucket(_) => Kind::TokenBucket,
            Self::LeakyBucket(_) => Kind::LeakyBucket,
            Self::Pacing(_) => Kind::Pacing,
            Self::CalendarWindow(_) => Kind::CalendarWindow,
            Self::Composite(_) => Kind::Composite,
            Self::Ban(ban) => ban.inner().kind(),
        }
    }
}

impl Algorithm for AnyAlgorithm {
    type State = AnyState;

    fn decide(
        &self,
        mut state: Option<AnyState>,
        now: Ticks,
        cost: u64,
    ) -> (Decision, Option<AnyState>) {
        let decision = self.run(&mut state, Transition::Decide { now, cost });
        (decision, state)
    }

    fn peek(&self, mut state: Option<AnyState>, now: Ticks, cost: u64) -> Decision {
        self.run(&mut state, Transition::Peek { now, cost })
    }

    fn encode<E: Extend<u8>>(&self, state: &AnyState, out: &mut E) {
        match (self, state) {
            (Self::FixedWindow(a), AnyState::FixedWindow(s)) => a.encode(s, out),
            (Self::SlidingLog(a), AnyState::SlidingLog(s)) => a.encode(s, out),
            (Self::SlidingCounter(a), AnyState::SlidingCounter(s)) => a.encode(s, out),
            (Self::TokenBucket(a), AnyState::TokenBucket(s)) => a.encode(s, out),
            (Self::LeakyBucket(a), AnyState::LeakyBucket(s)) => a.encode(s, out),
            (Self::Pacing(a), AnyState::Pacing(s)) => a.encode(s, out),
            (Self::CalendarWindow(a), AnyState::CalendarWindow(s)) => a.encode(s, out),
            (Self::Composite(a), AnyState::Composite(s)) => a.encode(s, out),
            (Self::Ban(a), AnyState::Ban(s)) => a.encode(s, out),
            // Unreachable (see `run`): encode nothing, which decodes as an error, never
            // as a state.
            _ => {}
        }
    }

    /// The variant's, and a ban's box.
    fn max_heap_bytes(&self) -> usize {
        match self {
            Self::SlidingLog(a) => a.max_heap_bytes(),
            Self::Composite(a) => a.max_heap_bytes(),
            Self::Ban(a) => {
                core::mem::size_of::<BanState<AnyState>>().saturating_add(a.max_heap_bytes())
            }
            Self::FixedWindow(_)
            | Self::SlidingCounter(_)
            | Self::TokenBucket(_)
            | Self::LeakyBucket(_)
            | Self::Pacing(_)
            | Self::CalendarWindow(_) => 0,
        }
    }

    fn decode(&self, bytes: &[u8]) -> Result<AnyState, DecodeError> {
        Ok(match self {
            Self::FixedWindow(a) => AnyState::FixedWindow(a.decode(bytes)?),
            Self::SlidingLog(a) => AnyState::SlidingLog(a.decode(bytes)?),
            Self::SlidingCounter(a) => AnyState::SlidingCounter(a.decode(bytes)?),
            Self::TokenBucket(a) => AnyState::TokenBucket(a.decode(bytes)?),
            Self::LeakyBucket(a) => AnyState::LeakyBucket(a.decode(bytes)?),
            Self::Pacing(a) => AnyState::Pacing(a.decode(bytes)?),
            Self::CalendarWindow(a) => AnyState::CalendarWindow(a.decode(bytes)?),
            Self::Composite(a) => AnyState::Composite(a.decode(bytes)?),
            Self::Ban(a) => AnyState::Ban(Box::new(a.decode(bytes)?)),
        })
    }
}

/// Buckets, pacing and composites book their slot; windows and bans decide at `now`
/// (see [`AnyAlgorithm::can_reserve`]).
impl Reserve for AnyAlgorithm {
    fn reserve(
        &self,
        mut state: Option<AnyState>,
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> (Decision, Option<AnyState>) {
        let transition = Transition::Reserve {
            now,
            cost,
            max_wait,
        };
        let decision = self.run(&mut state, transition);
        (decision, state)
    }
}

/// Reports on the variant's own algorithm; a pacing queue or a ban records nothing (see
/// [`AnyAlgorithm::can_report`]).
impl Report for AnyAlgorithm {
    fn overdraft(&self) -> u64 {
        match self {
            Self::FixedWindow(a) => a.overdraft(),
            Self::SlidingLog(a) => a.overdraft(),
            Self::SlidingCounter(a) => a.overdraft(),
            Self::TokenBucket(a) => a.overdraft(),
            Self::LeakyBucket(a) => a.overdraft(),
            Self::CalendarWindow(a) => a.overdraft(),
            Self::Composite(a) => a.overdraft(),
            Self::Pacing(_) | Self::Ban(_) => 0,
        }
    }

    fn adjust(
        &self,
        mut state: Option<AnyState>,
        now: Ticks,
        adjustment: i64,
    ) -> (u64, Option<AnyState>) {
        let slot = &mut state;
        let recorded = match self {
            Self::FixedWindow(a) => {
                on_variant!(slot, FixedWindow, |s| a.adjust(s, now, adjustment))
            }
            Self::SlidingLog(a) => on_variant!(slot, SlidingLog, |s| a.adjust(s, now, adjustment)),
            Self::SlidingCounter(a) => {
                on_variant!(slot, SlidingCounter, |s| a.adjust(s, now, adjustment))
            }
            Self::TokenBucket(a) => {
                on_variant!(slot, TokenBucket, |s| a.adjust(s, now, adjustment))
            }
            Self::LeakyBucket(a) => {
                on_variant!(slot, LeakyBucket, |s| a.adjust(s, now, adjustment))
            }
            Self::CalendarWindow(a) => {
                on_variant!(slot, CalendarWindow, |s| a.adjust(s, now, adjustment))
            }
            Self::Composite(a) => on_variant!(slot, Composite, |s| a.adjust(s, now, adjustment)),
            Self::Pacing(_) | Self::Ban(_) => 0,
        };
        (recorded, state)
    }
}

/// Each algorithm is the variant of its own name.
macro_rules! from_algorithm {
    ($($algorithm:ident),*) => {$(
        impl From<$algorithm> for AnyAlgorithm {
            fn from(algorithm: $algorithm) -> Self {
                Self::$algorithm(algorithm)
            }
        }
    )*};
}
from_algorithm!(
    FixedWindow,
    SlidingLog,
    SlidingCounter,
    TokenBucket,
    LeakyBucket,
    Pacing
);

impl From<CalendarLimit> for AnyAlgorithm {
    fn from(limit: CalendarLimit) -> Self {
        Self::CalendarWindow(limit)
    }
}

impl From<Composite<AnyAlgorithm>> for AnyAlgorithm {
    fn from(composite: Composite<AnyAlgorithm>) -> Self {
        Self::Composite(composite)
    }
}

impl From<Ban<AnyAlgorithm>> for AnyAlgorithm {
    fn from(ban: Ban<AnyAlgorithm>) -> Self {
        Self::Ban(Box::new(ban))
    }
}
