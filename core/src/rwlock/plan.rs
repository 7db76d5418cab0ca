//! An acquire in two steps: decided on the state as it stands (expired leases and places
//! counting as gone), where every error is found, then carried out, which cannot fail.
//! So an error leaves the state untouched without a copy.

use alloc::vec::Vec;

use super::{to_usize, Answer, Ask, LockError, LockMode, RwHolder, RwLease, RwState, RwWaiter};
use super::{Place, MAX_WAITERS};
use crate::Ticks;

/// What an acquire does, decided before the state is touched.
pub(super) enum Plan {
    /// Re-enter the lease at `i`, held `holds` times, upgraded with the token given.
    Reenter {
        i: usize,
        holds: u64,
        upgrade: Option<u64>,
    },
    /// A new lease with `token`, leaving the place at `at`.
    Join { token: u64, at: Option<usize> },
    /// Denied until the blocking holders and waiters are gone at `until`.
    Deny { until: Ticks, queue: Queue },
}

/// What a denied acquire does with its caller's place.
pub(super) enum Queue {
    /// It has none and takes none.
    Absent,
    /// The place at `i`, left as it was.
    Kept(usize),
    /// The place at `i`, renewed until `expires_at`.
    Renewed { i: usize, expires_at: Ticks },
    /// A new place at the back, numbered `number`, until `expires_at`.
    Taken { number: u64, expires_at: Ticks },
}

impl RwLease {
    /// What `ask` does on `state` at `now` (at most [`MAX_TICKS`](crate::MAX_TICKS)),
    /// or the error it meets.
    pub(super) fn plan(
        &self,
        state: &RwState,
        now: Ticks,
        ask: &Ask<'_>,
    ) -> Result<Plan, LockError> {
        match state.live_holder(ask.owner, now) {
            Some(i) => self.reenter(state, i, now, ask.mode),
            None => self.join(state, now, ask),
        }
    }

    /// Whether `owner` asking `mode` at `now` would be granted: what a host asks before
    /// waking it, without touching the state.
    #[cfg(feature = "memory")]
    pub(crate) fn grants(&self, state: &RwState, now: Ticks, owner: &[u8], mode: LockMode) -> bool {
        let ask = Ask {
            owner,
            mode,
            ttl: 1,
            wait: None,
        };
        let plan = self.plan(state, now.min(crate::MAX_TICKS), &ask);
        matches!(plan, Ok(Plan::Reenter { .. } | Plan::Join { .. }))
    }

    /// An owner holding the lease at `i` asks again: re-entry, or an upgrade granted
    /// only to the sole holder and never queued.
    fn reenter(
        &self,
        state: &RwState,
        i: usize,
        now: Ticks,
        mode: LockMode,
    ) -> Result<Plan, LockError> {
        let holder = &state.holders[i];
        let upgrade = if mode == LockMode::Exclusive && holder.mode == LockMode::Shared {
            if let Some(until) = self.holders_block(state, now, mode, Some(i)) {
                let queue = Queue::Absent;
                return Ok(Plan::Deny { until, queue });
            }
            Some(state.next_token(now)?)
        } else {
            None
        };
        let holds = holder.holds.checked_add(1).ok_or(LockError::TooManyHolds)?;
        Ok(Plan::Reenter { i, holds, upgrade })
    }

    /// An owner holding nothing asks: granted when no holder blocks it and nobody waits
    /// ahead of it; else denied, and queued when `wait` says so and the rules allow.
    fn join(&self, state: &RwState, now: Ticks, ask: &Ask<'_>) -> Result<Plan, LockError> {
        let at = state.live_waiter(ask.owner, now);
        let by_queue = self.queue_blocks(state, now, at, ask.mode);
        let by_holders = self.holders_block(state, now, ask.mode, None);
        if by_queue.is_none() && by_holders.is_none() {
            let token = state.next_token(now)?;
            return Ok(Plan::Join { token, at });
        }
        let until = by_queue.unwrap_or(0).max(by_holders.unwrap_or(0));
        let queues = self.fair || ask.mode == LockMode::Exclusive;
        let queue = match (ask.wait.filter(|_| queues), at) {
            (Some(wait), Some(i)) => Queue::Renewed {
                i,
                expires_at: now + wait,
            },
            (Some(wait), None) => Queue::Taken {
                number: state.next_place(now)?,
                expires_at: now + wait,
            },
            (None, Some(i)) => Queue::Kept(i),
            (None, None) => Queue::Absent,
        };
        Ok(Plan::Deny { until, queue })
    }

    /// When the live waiters that keep the owner (waiting at `at`) from `mode` will all
    /// have dropped out if none asks again; `None` when none does.
    fn queue_blocks(
        &self,
        state: &RwState,
        now: Ticks,
        at: Option<usize>,
        mode: LockMode,
    ) -> Option<Ticks> {
        let ahead = match (self.fair, mode) {
            (true, _) => &state.waiters[..at.unwrap_or(state.waiters.len())],
            (false, LockMode::Shared) => &state.waiters[..],
            (false, LockMode::Exclusive) => &[],
        };
        let others = ahead.iter().enumerate();
        let others = others.filter(|&(j, w)| Some(j) != at && w.expires_at > now);
        others.map(|(_, w)| w.expires_at).max()
    }

    /// When the live holders (but the one at `except`) that keep a newcomer from `mode`
    /// will have expired if none renews; `None` when none does.
    fn holders_block(
        &self,
        state: &RwState,
        now: Ticks,
        mode: LockMode,
        except: Option<usize>,
    ) -> Option<Ticks> {
        let others = state
            .holders
            .iter()
            .enumerate()
            .filter(|&(j, h)| Some(j) != except && h.expires_at > now)
            .map(|(_, h)| h);
        let writer = others.clone().find(|h| h.mode == LockMode::Exclusive);
        match (mode, writer) {
            (LockMode::Exclusive, _) => others.map(|h| h.expires_at).max(),
            (LockMode::Shared, Some(writer)) => Some(writer.expires_at),
            (LockMode::Shared, None) => {
                let count = others.clone().count() as u64;
                if count < self.max_holders {
                    return None;
                }
                // The reader fits once `count - max + 1` of the holders have expired.
                let mut expiries: Vec<Ticks> = others.map(|h| h.expires_at).collect();
                expiries.sort_unstable();
                let k = to_usize(count - self.max_holders);
                expiries.get(k).copied()
            }
        }
    }
}

impl RwState {
    /// Carries out `plan`, decided for `ask` at `now`, then drops what expired: the
    /// grant, or the instant the blocking holders and waiters are gone and the place.
    pub(super) fn commit(&mut self, now: Ticks, ask: &Ask<'_>, plan: Plan) -> Answer {
        let answer = match plan {
            Plan::Reenter { i, holds, upgrade } => {
                let holder = &mut self.holders[i];
                holder.holds = holds;
                holder.expires_at = holder.expires_at.max(now + ask.ttl);
                if let Some(token) = upgrade {
                    holder.token = token;
                    holder.mode = LockMode::Exclusive;
                    self.last_token = token;
                }
                (Some(holder.grant()), now, None)
            }
            Plan::Join { token, at } => {
                if let Some(i) = at {
                    self.waiters.remove(i);
                }
                self.last_token = token;
                let holder = RwHolder {
                    owner: ask.owner.to_vec(),
                    mode: ask.mode,
                    token,
                    expires_at: now + ask.ttl,
                    holds: 1,
                };
                let grant = holder.grant();
                self.holders.push(holder);
                (Some(grant), now, None)
            }
            Plan::Deny { until, queue } => {
                let at = self.keep_place(ask, queue);
                (None, until, at.map(|i| self.place_at(i, now)))
            }
        };
        self.reclaim(now);
        answer
    }

    /// Does what `queue` says with `ask`'s place: where it is, if it has one.
    fn keep_place(&mut self, ask: &Ask<'_>, queue: Queue) -> Option<usize> {
        match queue {
            Queue::Absent => None,
            Queue::Kept(i) => Some(i),
            Queue::Renewed { i, expires_at } => {
                let waiter = &mut self.waiters[i];
                waiter.mode = ask.mode;
                waiter.expires_at = expires_at;
                Some(i)
            }
            Queue::Taken { number, expires_at } => {
                self.last_place = number;
                self.waiters.push(RwWaiter {
                    owner: ask.owner.to_vec(),
                    mode: ask.mode,
                    place: number,
                    expires_at,
                });
                Some(self.waiters.len() - 1)
            }
        }
    }

    /// The number of a new place, if the queue has room for one at `now`.
    fn next_place(&self, now: Ticks) -> Result<u64, LockError> {
        let live = self.waiters.iter().filter(|w| w.expires_at > now).count();
        if live as u64 >= MAX_WAITERS {
            return Err(LockError::QueueFull);
        }
        let next = self.last_place.checked_add(1);
        next.ok_or(LockError::PlacesExhausted)
    }

    /// The place at `i`, counting only the waiters live at `now` ahead of it.
    fn place_at(&self, i: usize, now: Ticks) -> Place {
        let waiter = &self.waiters[i];
        let ahead = self.waiters[..i].iter().filter(|w| w.expires_at > now);
        Place {
            number: waiter.place,
            ahead: ahead.count() as u64,
            expires_at: waiter.expires_at,
        }
    }
}
