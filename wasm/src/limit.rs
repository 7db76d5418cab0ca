//! One limit and the state it governs: what a client holds for itself.

use alloc::vec::Vec;

use sluicegate_core::{Algorithm, AnyAlgorithm, Decision, DecodeError, Ticks};

use crate::error::Error;
use crate::units::{land, Slots};

/// An algorithm's transitions on the one state it governs, one type for whichever
/// algorithm runs: the client module links only the plain algorithms it builds, never
/// the dispatch over every kind.
/// `Send`: the limiters live in a static table (the module has one thread).
trait Engine: Send {
    fn check(&mut self, now: Ticks, cost: u64) -> Decision;
    /// Decides `call`, the decision written into `slots` (no `Decision` passes back
    /// through memory: copying one costs a call in wasm); whether it admits, `None`
    /// where the algorithm cannot book ahead.
    fn land(&mut self, call: Call, now: Ticks, cost: u64, slots: &mut Slots) -> Option<bool>;
    /// `None` where the algorithm takes no reports.
    #[cfg(feature = "full")]
    fn report(&mut self, now: Ticks, adjustment: i64) -> Option<sluicegate_core::Reported>;
    /// Whether a fresh state admits `cost` at `now`, at once or after a wait.
    fn fits(&self, cost: u64, now: Ticks) -> bool;
    /// Whether what fits at one time fits at any (not for calendar windows).
    fn periodic(&self) -> bool;
    fn save(&self) -> Vec<u8>;
    fn load(&mut self, bytes: &[u8]) -> Result<(), DecodeError>;
    fn reset(&mut self);
}

/// What an algorithm does beyond [`Algorithm`], if anything.
trait Booking: Algorithm {
    fn book(
        &self,
        state: &mut Option<Self::State>,
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> Option<Decision>;

    #[cfg(feature = "full")]
    fn report(
        &self,
        state: &mut Option<Self::State>,
        now: Ticks,
        adjustment: i64,
    ) -> Option<sluicegate_core::Reported>;

    /// Whether what fits at one time fits at any: the plain algorithms' periods repeat.
    fn periodic(&self) -> bool {
        true
    }
}

struct Slot<A: Algorithm> {
    algorithm: A,
    state: Option<A::State>,
}

impl<A: Booking + Send> Engine for Slot<A>
where
    A::State: Send,
{
    fn check(&mut self, now: Ticks, cost: u64) -> Decision {
        let (decision, state) = self.algorithm.decide(self.state.take(), now, cost);
        self.state = state;
        decision
    }

    fn land(&mut self, call: Call, now: Ticks, cost: u64, slots: &mut Slots) -> Option<bool> {
        let decision = match call {
            Call::Check => self.check(now, cost),
            // `decide`'s answer with its state dropped, which is what `peek` promises: one
            // transition linked per algorithm instead of two.
            Call::Peek => self.algorithm.decide(self.state.clone(), now, cost).0,
            Call::Reserve(max_wait) => self.algorithm.book(&mut self.state, now, cost, max_wait)?,
        };
        Some(land(slots, &decision))
    }

    #[cfg(feature = "full")]
    fn report(&mut self, now: Ticks, adjustment: i64) -> Option<sluicegate_core::Reported> {
        Booking::report(&self.algorithm, &mut self.state, now, adjustment)
    }

    fn fits(&self, cost: u64, now: Ticks) -> bool {
        self.algorithm
            .decide(None, now, cost)
            .0
            .retry_after
            .is_some()
    }

    fn periodic(&self) -> bool {
        self.algorithm.periodic()
    }

    fn save(&self) -> Vec<u8> {
        self.state
            .as_ref()
            .map(|state| self.algorithm.encode_to_vec(state))
            .unwrap_or_default()
    }

    fn load(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        self.state = if bytes.is_empty() {
            None
        } else {
            Some(self.algorithm.decode(bytes)?)
        };
        Ok(())
    }

    fn reset(&mut self) {
        self.state = None;
    }
}

/// Windows decide at `now` only.
#[cfg(not(feature = "full"))]
macro_rules! at_now {
    ($($algorithm:ty),*) => {$(
        impl Booking for $algorithm {
            fn book(&self, _: &mut Option<Self::State>, _: Ticks, _: u64, _: Ticks) -> Option<Decision> {
                None
            }
        }
    )*};
}

/// Buckets and pacing book their slot.
#[cfg(not(feature = "full"))]
macro_rules! ahead {
    ($($algorithm:ty),*) => {$(
        impl Booking for $algorithm {
            fn book(
                &self,
                state: &mut Option<Self::State>,
                now: Ticks,
                cost: u64,
                max_wait: Ticks,
            ) -> Option<Decision> {
                let (decision, next) =
                    sluicegate_core::Reserve::reserve(self, state.take(), now, cost, max_wait);
                *state = next;
                Some(decision)
            }
        }
    )*};
}

#[cfg(not(feature = "full"))]
at_now!(
    sluicegate_core::FixedWindow,
    sluicegate_core::SlidingLog,
    sluicegate_core::SlidingCounter
);
#[cfg(not(feature = "full"))]
ahead!(
    sluicegate_core::TokenBucket,
    sluicegate_core::LeakyBucket,
    sluicegate_core::Pacing
);

#[cfg(feature = "full")]
impl Booking for AnyAlgorithm {
    fn book(
        &self,
        state: &mut Option<Self::State>,
        now: Ticks,
        cost: u64,
        max_wait: Ticks,
    ) -> Option<Decision> {
        let transition = sluicegate_core::Transition::Reserve {
            now,
            cost,
            max_wait,
        };
        self.can_reserve().then(|| self.run(state, transition))
    }

    fn report(
        &self,
        state: &mut Option<Self::State>,
        now: Ticks,
        adjustment: i64,
    ) -> Option<sluicegate_core::Reported> {
        if !self.can_report() {
            return None;
        }
        let (reported, next) = sluicegate_core::Report::report(self, state.take(), now, adjustment);
        *state = next;
        Some(reported)
    }

    fn periodic(&self) -> bool {
        self.kind().is_periodic()
    }
}

/// What a decision does to the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// Decides and, if admitted, counts.
    Check,
    /// Decides, changing nothing.
    Peek,
    /// Books a slot within this wait.
    Reserve(Ticks),
}

/// The client's six algorithms, one variant each: a call dispatches by a jump on the
/// variant rather than through a trait object's table.
#[cfg(not(feature = "full"))]
enum Engines {
    TokenBucket(Slot<sluicegate_core::TokenBucket>),
    LeakyBucket(Slot<sluicegate_core::LeakyBucket>),
    Pacing(Slot<sluicegate_core::Pacing>),
    FixedWindow(Slot<sluicegate_core::FixedWindow>),
    SlidingLog(Slot<sluicegate_core::SlidingLog>),
    SlidingCounter(Slot<sluicegate_core::SlidingCounter>),
}

/// Runs `$call` on whichever slot `$engines` holds.
#[cfg(not(feature = "full"))]
macro_rules! each {
    ($engines:expr, $slot:ident => $call:expr) => {
        match $engines {
            Engines::TokenBucket($slot) => $call,
            Engines::LeakyBucket($slot) => $call,
            Engines::Pacing($slot) => $call,
            Engines::FixedWindow($slot) => $call,
            Engines::SlidingLog($slot) => $call,
            Engines::SlidingCounter($slot) => $call,
        }
    };
}

#[cfg(not(feature = "full"))]
impl Engine for Engines {
    #[inline(always)]
    fn check(&mut self, now: Ticks, cost: u64) -> Decision {
        each!(self, slot => slot.check(now, cost))
    }

    #[inline(always)]
    fn land(&mut self, call: Call, now: Ticks, cost: u64, slots: &mut Slots) -> Option<bool> {
        each!(self, slot => slot.land(call, now, cost, slots))
    }

    fn fits(&self, cost: u64, now: Ticks) -> bool {
        each!(self, slot => slot.fits(cost, now))
    }

    fn periodic(&self) -> bool {
        true
    }

    fn save(&self) -> Vec<u8> {
        each!(self, slot => slot.save())
    }

    fn load(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        each!(self, slot => slot.load(bytes))
    }

    fn reset(&mut self) {
        each!(self, slot => slot.reset());
    }
}

/// The full module's one engine: the core's dispatch over every kind.
#[cfg(feature = "full")]
type Engines = Slot<AnyAlgorithm>;

const fn slot<A: Algorithm>(algorithm: A) -> Slot<A> {
    Slot {
        algorithm,
        state: None,
    }
}

/// An algorithm and the one state it governs (a client limits only itself, so there is
/// one key).
pub(crate) struct Limit(Engines);

impl core::fmt::Debug for Limit {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Limit")
    }
}

impl Limit {
    /// A fresh limit; in the client module, only the algorithms it runs.
    pub(crate) fn new(algorithm: AnyAlgorithm) -> Result<Self, Error> {
        #[cfg(feature = "full")]
        let engine = slot(algorithm);
        #[cfg(not(feature = "full"))]
        let engine = match algorithm {
            AnyAlgorithm::FixedWindow(a) => Engines::FixedWindow(slot(a)),
            AnyAlgorithm::SlidingLog(a) => Engines::SlidingLog(slot(a)),
            AnyAlgorithm::SlidingCounter(a) => Engines::SlidingCounter(slot(a)),
            AnyAlgorithm::TokenBucket(a) => Engines::TokenBucket(slot(a)),
            AnyAlgorithm::LeakyBucket(a) => Engines::LeakyBucket(slot(a)),
            AnyAlgorithm::Pacing(a) => Engines::Pacing(slot(a)),
            other => {
                let name = other.kind().name();
                return Err(Error::UnknownAlgorithm(alloc::string::String::from(name)));
            }
        };
        Ok(Self(engine))
    }

    /// Decides a request and keeps the new state.
    pub(crate) fn check(&mut self, now: Ticks, cost: u64) -> Decision {
        self.0.check(now, cost)
    }

    /// Whether a request of `cost` at `now` can ever be admitted, however long it waits
    /// (a calendar window's periods need not hold tick 0).
    pub(crate) fn fits(&self, cost: u64, now: Ticks) -> bool {
        self.0.fits(cost, now)
    }

    /// Whether what [`fits`](Self::fits) at one time fits at any: not a calendar
    /// window's (nor a composite's), whose periods end.
    pub(crate) fn periodic(&self) -> bool {
        self.0.periodic()
    }

    /// Decides `call`, the decision written into `slots`; whether it admits. A
    /// reservation is refused for algorithms that cannot book ahead.
    pub(crate) fn land(
        &mut self,
        call: Call,
        now: Ticks,
        cost: u64,
        slots: &mut Slots,
    ) -> Result<bool, Error> {
        self.0
            .land(call, now, cost, slots)
            .ok_or(Error::CannotReserve)
    }

    /// Adds a cost known after the work (`adjustment`; negative: given back) to what the
    /// limit has taken, within its overdraft; refused where reports mean nothing.
    #[cfg(feature = "full")]
    pub(crate) fn report(
        &mut self,
        now: Ticks,
        adjustment: i64,
    ) -> Result<sluicegate_core::Reported, Error> {
        self.0.report(now, adjustment).ok_or(Error::NoReports)
    }

    /// The state's canonical encoding; empty when the state is fresh.
    pub(crate) fn save(&self) -> Vec<u8> {
        self.0.save()
    }

    /// Replaces the state with one [`save`](Self::save) wrote (empty: fresh). Bytes that
    /// are not a state of this algorithm are an error, and the state stays as it was.
    pub(crate) fn load(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.0.load(bytes).map_err(Error::Load)
    }

    /// Forgets the state: the limit is fresh again.
    pub(crate) fn reset(&mut self) {
        self.0.reset();
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sluicegate_core::clock::MAX_TICKS;
    use sluicegate_core::{Kind, Reserve, TokenBucket, MILLISECOND, SECOND};

    use super::*;
    use crate::options::{algorithm, tests::bucket, tests::window};

    /// The slots `call` lands.
    fn landed(limit: &mut Limit, call: Call, now: Ticks, cost: u64) -> Result<Slots, Error> {
        let mut slots = [0.0; 6];
        limit.land(call, now, cost, &mut slots).map(|_| slots)
    }

    /// The slots `decision` lands.
    fn slots(decision: &Decision) -> Slots {
        let mut slots = [0.0; 6];
        land(&mut slots, decision);
        slots
    }

    #[test]
    fn save_and_load_round_trip_and_refuse_garbage() {
        let mut limit =
            Limit::new(algorithm(&bucket(Kind::TokenBucket, 3.0, 1.0, 1000.0)).unwrap()).unwrap();
        assert!(limit.save().is_empty());
        assert!(limit.check(0, 2).allowed);
        let saved = limit.save();
        // The bytes are the core's canonical encoding.
        let core = TokenBucket::new(3, 1, 1000 * MILLISECOND).unwrap();
        let (_, core_state) = core.decide(None, 0, 2);
        assert_eq!(saved, core.encode_to_vec(&core_state.unwrap()));

        let mut reloaded =
            Limit::new(algorithm(&bucket(Kind::TokenBucket, 3.0, 1.0, 1000.0)).unwrap()).unwrap();
        reloaded.load(&saved).unwrap();
        assert_eq!(landed(&mut reloaded, Call::Peek, 0, 1).unwrap()[2], 0.0);

        for garbage in [&saved[..saved.len() - 1], &[1, 2, 3][..], &[9; 40][..]] {
            assert!(matches!(reloaded.load(garbage), Err(Error::Load(_))));
            assert_eq!(reloaded.save(), saved, "a failed load keeps the state");
        }
        reloaded.reset();
        assert_eq!(landed(&mut reloaded, Call::Peek, 0, 1).unwrap()[2], 2.0);
    }

    #[test]
    fn reserve_is_refused_where_nothing_can_be_booked() {
        let mut limit =
            Limit::new(algorithm(&window(Kind::SlidingLog, 3.0, 1000.0)).unwrap()).unwrap();
        assert_eq!(
            landed(&mut limit, Call::Reserve(0), 0, 1),
            Err(Error::CannotReserve)
        );
        let mut limit =
            Limit::new(algorithm(&bucket(Kind::TokenBucket, 1.0, 1.0, 1000.0)).unwrap()).unwrap();
        assert_eq!(landed(&mut limit, Call::Reserve(0), 0, 1).unwrap()[5], 0.0);
        let booked = landed(&mut limit, Call::Reserve(2_000_000), 0, 1).unwrap();
        // Admitted, acting after 1000 ms.
        assert_eq!((booked[0], booked[5]), (1.0, 1000.0));
    }

    #[cfg(feature = "full")]
    #[test]
    fn reports_run_the_cores_transition_and_are_refused_without_reports() {
        let options = window(Kind::FixedWindow, 3.0, 1000.0).number("overdraft", 2.0);
        let mut limit = Limit::new(algorithm(&options).unwrap()).unwrap();
        use sluicegate_core::Report;
        let core = sluicegate_core::FixedWindow::new(3, SECOND)
            .unwrap()
            .with_overdraft(2)
            .unwrap();
        let (_, state) = core.decide(None, 0, 1);
        let (want, state) = core.report(state, 10, 9);
        assert!(limit.check(0, 1).allowed);
        let reported = limit.report(10, 9).unwrap();
        assert_eq!(reported, want);
        assert_eq!((reported.recorded, reported.dropped), (4, 5));
        assert!(!reported.decision.allowed);
        assert_eq!(limit.save(), core.encode_to_vec(&state.unwrap()));
        assert_eq!(limit.report(20, -5).unwrap().recorded, 5);
        let mut pacing =
            Limit::new(algorithm(&bucket(Kind::Pacing, 1.0, 1.0, 1000.0)).unwrap()).unwrap();
        assert_eq!(pacing.report(0, 1), Err(Error::NoReports));
    }

    #[cfg(feature = "calendar")]
    #[test]
    fn a_calendar_window_resets_at_midnight_in_its_zone() {
        use crate::options::tests::{Options, Value};
        let options = Options::new(Kind::CalendarWindow)
            .number("limit", 2.0)
            .with("calendar", Value::Text("day"))
            .with("timeZone", Value::Text("Europe/Berlin"));
        let mut limit = Limit::new(algorithm(&options).unwrap()).unwrap();
        // 2026-03-29T12:00Z, the 23-hour day: Berlin's midnight is 22:00Z.
        let noon = 1_774_785_600 * SECOND;
        assert!(limit.check(noon, 2).allowed);
        let denied = limit.check(noon, 1);
        assert_eq!(denied.retry_after, Some(10 * 3600 * SECOND));
        assert!(limit.check(noon + 10 * 3600 * SECOND, 2).allowed);
        assert_eq!(
            limit.report(noon + 10 * 3600 * SECOND, 1).unwrap().dropped,
            1
        );
    }

    proptest! {
        /// Any algorithm, through `Limit`, decides and stores exactly as the core does,
        /// from the epoch and over the last periods before the end of the time range.
        #[test]
        fn limit_matches_the_core(
            capacity in 1u64..20,
            rate in 1u64..10,
            period_ms in 1u64..5_000,
            at_the_top in any::<bool>(),
            steps in proptest::collection::vec((0u64..2_000_000, 0u64..25, any::<bool>()), 1..60),
        ) {
            let core = TokenBucket::new(capacity, rate, period_ms * MILLISECOND).unwrap();
            #[allow(clippy::cast_precision_loss)]
            let options = bucket(Kind::TokenBucket, capacity as f64, rate as f64, period_ms as f64);
            let mut limit = Limit::new(algorithm(&options).unwrap()).unwrap();
            // 60 steps of at most 2 s end before MAX_TICKS.
            let start = if at_the_top { MAX_TICKS - 130 * SECOND } else { 0 };
            let (mut now, mut state) = (start, None);
            for (gap, cost, reserve) in steps {
                now += gap;
                let (expected, next) = if reserve {
                    core.reserve(state, now, cost, gap)
                } else {
                    core.decide(state, now, cost)
                };
                state = next;
                let call = if reserve { Call::Reserve(gap) } else { Call::Check };
                prop_assert_eq!(landed(&mut limit, call, now, cost).unwrap(), slots(&expected));
                prop_assert_eq!(limit.save(), state.as_ref().map(|s| core.encode_to_vec(s)).unwrap_or_default());
            }
        }
    }
}
