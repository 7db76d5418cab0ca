//! An algorithm named in a command's arguments: every algorithm of the core behind one
//! type, so composites and bans of any members work through the core's own
//! [`Composite`](tollgate_core::Composite) and [`Ban`].

use std::boxed::Box;

use tollgate_core::{
    Algorithm, Ban, BanState, BucketState, Decision, DecodeError, FixedWindow, FixedWindowState,
    LeakyBucket, Pacing, Reserve, SlidingCounter, SlidingCounterState, SlidingLog, SlidingLogState,
    Ticks, TokenBucket,
};

use crate::args::{ArgError, Args};

/// The algorithms' names, as the scripts name them.
const ALGORITHMS: [&str; 7] = [
    "fixed_window",
    "sliding_log",
    "sliding_counter",
    "token_bucket",
    "leaky_bucket",
    "pacing",
    "ban",
];

/// How deep bans may wrap bans.
pub const MAX_BANS: usize = 4;

/// One algorithm with its validated parameters, as the scripts name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// `fixed_window limit period [counting_denied]`
    FixedWindow(FixedWindow),
    /// `sliding_log limit period`
    SlidingLog(SlidingLog),
    /// `sliding_counter limit period`
    SlidingCounter(SlidingCounter),
    /// `token_bucket capacity rate period`
    TokenBucket(TokenBucket),
    /// `leaky_bucket capacity rate period`
    LeakyBucket(LeakyBucket),
    /// `pacing capacity rate period`
    Pacing(Pacing),
    /// `ban threshold window duration <algorithm>`
    Ban(Box<Ban<Spec>>),
}

/// The state of a [`Spec`]: the state of its algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// A fixed window's.
    FixedWindow(FixedWindowState),
    /// A sliding log's.
    SlidingLog(SlidingLogState),
    /// A sliding window counter's.
    SlidingCounter(SlidingCounterState),
    /// A token bucket's, leaky bucket's or pacing queue's.
    Bucket(BucketState),
    /// A ban's.
    Ban(Box<BanState<State>>),
}

/// Applies `$f(algorithm, its state)` to the variant, wrapping the new state back. A state
/// of another variant cannot reach here (every state is decoded by the same `Spec`); it
/// would be taken as fresh.
macro_rules! each {
    ($spec:expr, $state:expr, |$a:ident, $s:ident| $body:expr) => {{
        match $spec {
            Spec::FixedWindow($a) => each!(@one FixedWindow, $state, $a, $s, $body),
            Spec::SlidingLog($a) => each!(@one SlidingLog, $state, $a, $s, $body),
            Spec::SlidingCounter($a) => each!(@one SlidingCounter, $state, $a, $s, $body),
            Spec::TokenBucket($a) => each!(@one Bucket, $state, $a, $s, $body),
            Spec::LeakyBucket($a) => each!(@one Bucket, $state, $a, $s, $body),
            Spec::Pacing($a) => each!(@one Bucket, $state, $a, $s, $body),
            Spec::Ban(ban) => {
                let $a = &**ban;
                let $s = match $state {
                    Some(State::Ban(s)) => Some(*s),
                    _ => None,
                };
                let (d, n) = $body;
                (d, n.map(|s| State::Ban(Box::new(s))))
            }
        }
    }};
    // A variant whose state is `State::$variant` as it is.
    (@one $variant:ident, $state:expr, $a:ident, $s:ident, $body:expr) => {{
        let $s = match $state {
            Some(State::$variant(s)) => Some(s),
            _ => None,
        };
        let (d, n) = $body;
        (d, n.map(State::$variant))
    }};
}

impl Algorithm for Spec {
    type State = State;

    fn decide(&self, state: Option<State>, now: Ticks, cost: u64) -> (Decision, Option<State>) {
        each!(self, state, |a, s| a.decide(s, now, cost))
    }

    fn encode<E: Extend<u8>>(&self, state: &State, out: &mut E) {
        match (self, state) {
            (Spec::FixedWindow(a), State::FixedWindow(s)) => a.encode(s, out),
            (Spec::SlidingLog(a), State::SlidingLog(s)) => a.encode(s, out),
            (Spec::SlidingCounter(a), State::SlidingCounter(s)) => a.encode(s, out),
            (Spec::TokenBucket(a), State::Bucket(s)) => a.encode(s, out),
            (Spec::LeakyBucket(a), State::Bucket(s)) => a.encode(s, out),
            (Spec::Pacing(a), State::Bucket(s)) => a.encode(s, out),
            (Spec::Ban(a), State::Ban(s)) => a.encode(s, out),
            // States come from this spec's own decode or decide.
            _ => {}
        }
    }

    fn decode(&self, bytes: &[u8]) -> Result<State, DecodeError> {
        Ok(match self {
            Spec::FixedWindow(a) => State::FixedWindow(a.decode(bytes)?),
            Spec::SlidingLog(a) => State::SlidingLog(a.decode(bytes)?),
            Spec::SlidingCounter(a) => State::SlidingCounter(a.decode(bytes)?),
            Spec::TokenBucket(a) => State::Bucket(a.decode(bytes)?),
            Spec::LeakyBucket(a) => State::Bucket(a.decode(bytes)?),
            Spec::Pacing(a) => State::Bucket(a.decode(bytes)?),
            Spec::Ban(a) => State::Ban(Box::new(a.decode(bytes)?)),
        })
    }
}

impl Reserve for Spec {
    /// Buckets book their slot; the parser refuses `MAXWAIT` for any other algorithm
    /// (see [`Spec::reserves`]), which would decide as without it.
    fn reserve(
        &self,
        state: Option<State>,
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> (Decision, Option<State>) {
        match self {
            Spec::TokenBucket(a) => {
                each!(@one Bucket, state, a, s, a.reserve(s, now, cost, max_wait))
            }
            Spec::LeakyBucket(a) => {
                each!(@one Bucket, state, a, s, a.reserve(s, now, cost, max_wait))
            }
            Spec::Pacing(a) => each!(@one Bucket, state, a, s, a.reserve(s, now, cost, max_wait)),
            other => other.decide(state, now, cost),
        }
    }
}

impl Spec {
    /// Whether the core can reserve with this algorithm (the buckets).
    pub fn reserves(&self) -> bool {
        matches!(
            self,
            Spec::TokenBucket(_) | Spec::LeakyBucket(_) | Spec::Pacing(_)
        )
    }

    /// Reads one algorithm and its parameters, as the scripts name them.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, ArgError> {
        Self::parse_nested(args, 0)
    }

    /// A ban wraps at most [`MAX_BANS`] levels deep, so no argument list can make the
    /// server recurse without bound.
    fn parse_nested(args: &mut Args<'_>, bans: usize) -> Result<Self, ArgError> {
        let name = args.one_of("an algorithm", &ALGORITHMS)?;
        Ok(match ALGORITHMS[name] {
            "fixed_window" => {
                let (limit, period) = (args.u64("limit")?, args.u64("period")?);
                let window = FixedWindow::new(limit, period)?;
                if args.eat("counting_denied") {
                    Spec::FixedWindow(window.counting_denied())
                } else {
                    Spec::FixedWindow(window)
                }
            }
            "sliding_log" => {
                Spec::SlidingLog(SlidingLog::new(args.u64("limit")?, args.u64("period")?)?)
            }
            "sliding_counter" => Spec::SlidingCounter(SlidingCounter::new(
                args.u64("limit")?,
                args.u64("period")?,
            )?),
            "token_bucket" => {
                let (c, r, p) = bucket(args)?;
                Spec::TokenBucket(TokenBucket::new(c, r, p)?)
            }
            "leaky_bucket" => {
                let (c, r, p) = bucket(args)?;
                Spec::LeakyBucket(LeakyBucket::new(c, r, p)?)
            }
            "pacing" => {
                let (c, r, p) = bucket(args)?;
                Spec::Pacing(Pacing::new(c, r, p)?)
            }
            // "ban", the last of ALGORITHMS.
            _ => {
                let threshold = args.u64("threshold")?;
                let window = args.u64("window")?;
                let duration = args.u64("duration")?;
                if bans >= MAX_BANS {
                    return Err(ArgError::Syntax(format!(
                        "bans nest at most {MAX_BANS} deep"
                    )));
                }
                let inner = Spec::parse_nested(args, bans + 1)?;
                Spec::Ban(Box::new(Ban::new(inner, threshold, window, duration)?))
            }
        })
    }
}

fn bucket(args: &mut Args<'_>) -> Result<(u64, u64, Ticks), ArgError> {
    Ok((
        args.u64("capacity")?,
        args.u64("rate")?,
        args.u64("period")?,
    ))
}
