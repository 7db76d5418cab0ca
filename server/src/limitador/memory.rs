//! limitador's counters in this process: one table behind one lock, so that a
//! request's counters are decided together; bounded by `--max-keys` (a full table
//! forgets the counters whose windows have ended, and refuses new ones while none has).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use sluicegate_core::state::AnchoredWindowState;
use sluicegate_core::Ticks;

use super::counters::{apply_states, Counted, Counter, Counters, Listed, Mode};
use crate::limiters::DecideError;

/// The table: each counter's state and the instant its window ends.
#[derive(Debug)]
pub(crate) struct InMemory {
    table: Mutex<HashMap<String, (AnchoredWindowState, Ticks)>>,
    max_keys: usize,
}

/// The wall clock in microseconds, as Redis's `TIME` gives it.
fn now_us() -> Ticks {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl InMemory {
    /// A table of at most `max_keys` counters.
    pub(crate) fn new(max_keys: usize) -> Self {
        Self {
            table: Mutex::new(HashMap::new()),
            max_keys: max_keys.max(1),
        }
    }

    fn apply_at(
        &self,
        counters: &[Counter],
        delta: u64,
        mode: Mode,
        now: Ticks,
    ) -> Result<Counted, DecideError> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let windows: Vec<_> = counters.iter().map(|c| c.window).collect();
        let mut states: Vec<_> = counters
            .iter()
            .map(|c| table.get(&c.key).map(|(s, _)| *s))
            .collect();
        let counted = apply_states(&windows, &mut states, now, delta, mode);
        let new = counters
            .iter()
            .zip(&states)
            .filter(|(c, s)| s.is_some() && !table.contains_key(&c.key))
            .count();
        if new > 0 && table.len() + new > self.max_keys {
            table.retain(|_, (_, end)| *end > now);
            if table.len() + new > self.max_keys {
                return Err(DecideError::Unavailable(format!(
                    "limitador's counters fill this process's table ({} counters, --max-keys)",
                    self.max_keys
                )));
            }
        }
        for ((counter, state), figures) in counters.iter().zip(states).zip(&counted.figures) {
            match state {
                Some(state) => {
                    let held = (state, now + figures.expires_in);
                    // The key is copied only the first time.
                    match table.get_mut(&counter.key) {
                        Some(entry) => *entry = held,
                        None => {
                            table.insert(counter.key.clone(), held);
                        }
                    }
                }
                None => {
                    table.remove(&counter.key);
                }
            }
        }
        Ok(counted)
    }
}

impl Counters for InMemory {
    fn apply<'a>(
        &'a self,
        counters: &'a [Counter],
        delta: u64,
        mode: Mode,
        now: Option<Ticks>,
    ) -> BoxFuture<'a, Result<Counted, DecideError>> {
        let now = now.unwrap_or_else(now_us);
        Box::pin(async move { self.apply_at(counters, delta, mode, now) })
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<Listed>, DecideError>> {
        Box::pin(async move {
            let now = now_us();
            let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
            Ok(table
                .iter()
                .filter(|(key, (_, end))| key.starts_with(prefix) && *end > now)
                .take(max)
                .map(|(key, (state, end))| (key.clone(), state.count(), end - now))
                .collect())
        })
    }

    fn retain(&self, keep: &dyn Fn(&str) -> bool) {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        table.retain(|key, _| keep(key));
    }
}
