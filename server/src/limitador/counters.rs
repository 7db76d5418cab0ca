//! The counters of limitador's limits: one anchored window per counter (the core's
//! [`AnchoredWindow`]), a request's counters decided together, in this process or in
//! Redis, behind one contract.

use std::fmt::Debug;

use futures_util::future::BoxFuture;
use sluicegate_core::state::AnchoredWindowState;
use sluicegate_core::{decide_all, Algorithm, AnchoredWindow, Ticks};

use crate::limiters::DecideError;

/// What a call does with its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Admits iff every counter has room for the delta, and then counts it on all of
    /// them (RLS, `/check_and_report`).
    CheckAndUpdate,
    /// Whether every counter has room, counting nothing (`CheckRateLimit`, `/check`).
    Check,
    /// Counts the delta on every counter whatever the limit (`Report`, `/report`).
    Update,
}

/// One counter of a request: its key and its window (`None`: a `max_value` of 0, which
/// admits nothing and keeps no count).
#[derive(Debug, Clone)]
pub(crate) struct Counter {
    pub(crate) key: String,
    pub(crate) window: Option<AnchoredWindow>,
}

/// A counter's figures after a call: what is left of its limit and when its window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Figures {
    pub(crate) remaining: u64,
    pub(crate) expires_in: Ticks,
}

/// What a call did: whether it was admitted, and each counter's figures in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counted {
    pub(crate) admitted: bool,
    pub(crate) figures: Vec<Figures>,
}

/// A live counter as listed: its key, its count and the microseconds until its window
/// ends.
pub(crate) type Listed = (String, u64, Ticks);

/// Where the counters are kept.
pub(crate) trait Counters: Send + Sync + Debug {
    /// Carries out `mode` with `delta` on `counters`, all at once, at `now` (`None`:
    /// the store's clock; tests give one).
    fn apply<'a>(
        &'a self,
        counters: &'a [Counter],
        delta: u64,
        mode: Mode,
        now: Option<Ticks>,
    ) -> BoxFuture<'a, Result<Counted, DecideError>>;

    /// The live counters whose keys start with `prefix` (at most `max`), each with its
    /// count and the microseconds until its window ends.
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<Listed>, DecideError>>;

    /// Forgets every counter whose key `keep` refuses (a limit removed loses its
    /// counters); where keys expire by themselves, nothing.
    fn retain(&self, _keep: &dyn Fn(&str) -> bool) {}
}

/// `mode` with `delta` at `now` on `windows` whose states are `states` (changed in
/// place): whether it was admitted, and each counter's figures after it. The one
/// definition every store runs (Redis's script is tested against it).
pub(crate) fn apply_states(
    windows: &[Option<AnchoredWindow>],
    states: &mut [Option<AnchoredWindowState>],
    now: Ticks,
    delta: u64,
    mode: Mode,
) -> Counted {
    // A max_value of 0 admits nothing: such a counter needs no window.
    let open: Vec<AnchoredWindow> = windows.iter().flatten().copied().collect();
    let closed = open.len() < windows.len();
    let mut live: Vec<_> = windows
        .iter()
        .zip(states.iter())
        .filter(|(w, _)| w.is_some())
        .map(|(_, s)| *s)
        .collect();
    let admitted = match mode {
        Mode::CheckAndUpdate => !closed && decide_all(&open, &mut live, now, delta),
        Mode::Check => {
            !closed
                && open
                    .iter()
                    .zip(&live)
                    .all(|(w, s)| w.peek(*s, now, delta).allowed)
        }
        Mode::Update => {
            for (window, state) in open.iter().zip(live.iter_mut()) {
                *state = window.add(*state, now, delta);
            }
            true
        }
    };
    let mut live = live.into_iter();
    let figures = windows
        .iter()
        .zip(states.iter_mut())
        .map(|(window, state)| match window {
            None => Figures {
                remaining: 0,
                expires_in: 0,
            },
            Some(window) => {
                *state = live.next().flatten();
                let count = window.live(*state, now).map_or(0, |s| s.count());
                Figures {
                    remaining: window.params().limit.saturating_sub(count),
                    expires_in: window.expires_in(*state, now),
                }
            }
        })
        .collect();
    Counted { admitted, figures }
}

#[cfg(test)]
mod tests {
    use super::{apply_states, Mode};
    use sluicegate_core::AnchoredWindow;

    #[test]
    fn modes() {
        let windows = [Some(AnchoredWindow::new(3, 100).unwrap()), None];
        let mut states = [None, None];
        // A counter of max_value 0 refuses every check, and reports still count.
        assert!(!apply_states(&windows, &mut states, 0, 1, Mode::CheckAndUpdate).admitted);
        assert_eq!(states[0], None);
        let counted = apply_states(&windows, &mut states, 10, 2, Mode::Update);
        assert!(counted.admitted);
        assert_eq!(
            (counted.figures[0].remaining, counted.figures[0].expires_in),
            (1, 100)
        );
        let one = [windows[0]];
        let mut first = [states[0]];
        assert!(apply_states(&one, &mut first, 20, 1, Mode::Check).admitted);
        assert!(!apply_states(&one, &mut first, 20, 2, Mode::Check).admitted);
        let counted = apply_states(&one, &mut first, 30, 1, Mode::CheckAndUpdate);
        assert!(counted.admitted);
        assert_eq!(
            (counted.figures[0].remaining, counted.figures[0].expires_in),
            (0, 80)
        );
    }
}
