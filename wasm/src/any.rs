//! One algorithm type for every shape a JS caller can configure, so the bindings hold a
//! single concrete limiter instead of one generic instance per combination (which would
//! multiply the code shipped to the browser).

use tollgate_core::{
    Algorithm, Ban, BanState, BucketState, Composite, Decision, DecodeError, FixedWindow,
    FixedWindowState, LeakyBucket, Pacing, Reserve, SlidingCounter, SlidingCounterState,
    SlidingLog, SlidingLogState, Ticks, TokenBucket,
};

/// Declares [`Any`] and [`AnyState`] with one variant per algorithm, and dispatches a
/// transition to the variant's own algorithm. A state is only ever produced by the same
/// `Any` that reads it back, so a state of another variant cannot reach `run`; it would
/// be decided as fresh.
macro_rules! any {
    ($($variant:ident($algorithm:ty, $state:ty)),* $(,)?) => {
        /// Any algorithm of the core, including bans and composites of any of them.
        #[derive(Debug, Clone)]
        pub enum Any {
            $(
                #[allow(missing_docs)]
                $variant($algorithm),
            )*
        }

        /// The state of an [`Any`].
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum AnyState {
            $(
                #[allow(missing_docs)]
                $variant($state),
            )*
        }

        impl Any {
            /// Runs `transition` (decide or reserve) on the variant's own algorithm, updating
            /// the state in its slot. In place, because moving the state in and out by
            /// value costs copies the browser build makes as calls.
            pub fn run(&self, slot: &mut Option<AnyState>, transition: Transition) -> Decision {
                match self {
                    $(Self::$variant(algorithm) => {
                        let state = match slot.take() {
                            Some(AnyState::$variant(state)) => Some(state),
                            _ => None,
                        };
                        let (decision, state) = transition.apply(algorithm, state);
                        *slot = state.map(AnyState::$variant);
                        decision
                    })*
                }
            }
        }

        impl Algorithm for Any {
            type State = AnyState;

            fn decide(&self, mut state: Option<AnyState>, now: Ticks, cost: u64) -> (Decision, Option<AnyState>) {
                let decision = self.run(&mut state, Transition::Decide { now, cost });
                (decision, state)
            }

            fn encode<E: Extend<u8>>(&self, state: &AnyState, out: &mut E) {
                match (self, state) {
                    $((Self::$variant(algorithm), AnyState::$variant(state)) => {
                        algorithm.encode(state, out)
                    })*
                    // Unreachable by construction (see the macro's doc): encode nothing,
                    // which decodes as an error, never as a state.
                    _ => {}
                }
            }

            fn decode(&self, bytes: &[u8]) -> Result<AnyState, DecodeError> {
                match self {
                    $(Self::$variant(algorithm) => {
                        algorithm.decode(bytes).map(AnyState::$variant)
                    })*
                }
            }
        }
    };
}

any! {
    FixedWindow(FixedWindow, FixedWindowState),
    SlidingLog(SlidingLog, SlidingLogState),
    SlidingCounter(SlidingCounter, SlidingCounterState),
    TokenBucket(TokenBucket, BucketState),
    LeakyBucket(LeakyBucket, BucketState),
    Pacing(Pacing, BucketState),
    Composite(Composite<Any>, Vec<Option<AnyState>>),
    Ban(Ban<Box<Any>>, BanState<Box<AnyState>>),
}

/// A transition to run on whichever algorithm an [`Any`] holds.
#[derive(Debug, Clone, Copy)]
pub enum Transition {
    Decide {
        now: Ticks,
        cost: u64,
    },
    Reserve {
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    },
}

impl Transition {
    fn apply<A: Reservable>(
        self,
        algorithm: &A,
        state: Option<A::State>,
    ) -> (Decision, Option<A::State>) {
        match self {
            Self::Decide { now, cost } => algorithm.decide(state, now, cost),
            Self::Reserve {
                now,
                cost,
                max_wait,
            } => algorithm.reserve_or_decide(state, now, cost, max_wait),
        }
    }
}

/// Reservation where the algorithm has it; see [`Any::can_reserve`]. By default an
/// algorithm books nothing ahead and decides at `now` (windows and bans).
trait Reservable: Algorithm {
    fn reserve_or_decide(
        &self,
        state: Option<Self::State>,
        now: Ticks,
        cost: u64,
        _max_wait: Ticks,
    ) -> (Decision, Option<Self::State>) {
        self.decide(state, now, cost)
    }
}

impl Reservable for FixedWindow {}
impl Reservable for SlidingLog {}
impl Reservable for SlidingCounter {}
impl Reservable for Ban<Box<Any>> {}

/// Buckets, pacing and composites book their slot.
macro_rules! books_ahead {
    ($($algorithm:ty),*) => {$(
        impl Reservable for $algorithm {
            fn reserve_or_decide(
                &self,
                state: Option<Self::State>,
                now: Ticks,
                cost: u64,
                max_wait: Ticks,
            ) -> (Decision, Option<Self::State>) {
                self.reserve(state, now, cost, max_wait)
            }
        }
    )*};
}
books_ahead!(TokenBucket, LeakyBucket, Pacing, Composite<Any>);

impl Any {
    /// Whether [`Reserve::reserve`] books ahead: buckets, pacing and composites of them.
    /// The others (windows, bans) decide at `now` only, so hosts refuse `reserve` on
    /// them rather than pretend.
    pub fn can_reserve(&self) -> bool {
        match self {
            Self::TokenBucket(_) | Self::LeakyBucket(_) | Self::Pacing(_) => true,
            Self::Composite(composite) => composite.members().iter().all(Self::can_reserve),
            Self::FixedWindow(_) | Self::SlidingLog(_) | Self::SlidingCounter(_) | Self::Ban(_) => {
                false
            }
        }
    }
}

impl Reserve for Any {
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

/// A ban holds its inner limiter and state inline, so a ban inside `Any` holds them
/// boxed to keep the types finite.
impl Algorithm for Box<Any> {
    type State = Box<AnyState>;

    fn decide(
        &self,
        state: Option<Box<AnyState>>,
        now: Ticks,
        cost: u64,
    ) -> (Decision, Option<Box<AnyState>>) {
        let (decision, state) = (**self).decide(state.map(|s| *s), now, cost);
        (decision, state.map(Box::new))
    }

    fn encode<E: Extend<u8>>(&self, state: &Box<AnyState>, out: &mut E) {
        (**self).encode(state, out);
    }

    fn decode(&self, bytes: &[u8]) -> Result<Box<AnyState>, DecodeError> {
        (**self).decode(bytes).map(Box::new)
    }
}
