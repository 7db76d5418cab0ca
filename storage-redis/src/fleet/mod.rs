//! Fleet modes: one global limit enforced by many nodes at in-process speed, trading
//! Redis calls per decision against a bounded, stated error: the three classic
//! optimizations of a central limiter (prefetching units, deciding on a synced global
//! state, splitting the limit between live nodes) beside the exact baseline.
//!
//! - [`FleetMode::Exact`]: every decision is one call ([`RedisLimiter::decide`]).
//! - [`FleetMode::Prefetch`]: a node takes up to a batch of units in one atomic call
//!   ([`RedisLimiter::take`]: as many as are admissible, not all-or-nothing) and spends
//!   them locally with an atomic counter. The batch is about [`FleetConfig::horizon`] of
//!   the node's own recent traffic, at most `max_batch`. Units are given back
//!   ([`RedisLimiter::refund`]) when the grant expires (after the horizon, by
//!   [`FleetLimiter::tick`]) and at [`FleetLimiter::shutdown`]; a window's units also
//!   expire with their window, and a give-back reaching the server after it is dropped.
//!   Never admits more than the global limit: its only error is units held by a node
//!   that does not need them (under-admission), at most one batch per node.
//! - [`FleetMode::Batch`]: a node decides locally against the last global state it saw
//!   and settles the units it admitted every `max_batch` decisions or every
//!   [`FleetConfig::interval`], taking them from the shared limit; over-admission is at
//!   most `max_batch` × nodes per settle interval (each node may spend what the last
//!   state showed free before it learns the others did too). A bucket is charged the
//!   units whole, into debt if need be ([`FleetAlgorithm::CHARGED`]), so its refill pays
//!   the over-admission back and the long-run rate stays the limit's; a window forgets
//!   at its end.
//! - [`FleetMode::Split`]: each node keeps a heartbeat (a member of a sorted set scored
//!   by its expiry, TTL = 3 × interval) and enforces its share locally: `limit / n`
//!   (and `rate / n` for a token bucket), the first `limit mod n` nodes in id order
//!   taking one unit more, so the shares add up to the limit exactly. No call per
//!   decision; one per interval. Membership changes are seen at the next heartbeat: a
//!   node that dies leaves its share unused until its heartbeat expires
//!   (under-admission, at most TTL × its share), a node that joins admits its share
//!   before the others have shrunk theirs (over-admission, at most one share per
//!   interval).
//!
//! Losing Redis: a node follows the limiter's [`FailPolicy`](crate::FailPolicy) for the
//! decisions it cannot make without Redis, and asks again no sooner than one interval
//! later. No unit is spent twice: prefetched units held when Redis went away are still
//! spent until their grant expires (they were taken from the limit), a give-back that
//! fails is dropped and never retried (so units are never returned twice; at worst they
//! are lost: under-admission), a take whose reply was lost counts as nothing taken, and
//! a batch node keeps the count it has not settled and settles it when Redis returns.
//! A split node keeps enforcing its share while its membership view is younger than
//! the heartbeat's TTL, then follows the policy.
//!
//! Algorithms: the token bucket, the fixed window and the sliding counter
//! ([`FleetAlgorithm`]): their units are a stock that can be handed out and given back
//! ([`Refund`]). The leaky bucket and pacing queue (slots in time), the sliding log
//! (timestamped entries) and composites are refused by the type system.
//!
//! A fleet limiter holds one key: a fleet-wide limit is one shared budget.
//!
//! Prefetch's and batch's calls use the function library (`FCALL`) or `EVALSHA`, also
//! where the module is loaded: the module has no take or give-back command.
//!
//! [`RedisLimiter::decide`]: crate::RedisLimiter::decide
//! [`RedisLimiter::take`]: crate::RedisLimiter::take
//! [`RedisLimiter::refund`]: crate::RedisLimiter::refund
//! [`Refund`]: sluicegate_core::Refund

mod algorithm;
mod config;
mod node;

pub use algorithm::FleetAlgorithm;
pub use config::{FleetConfig, FleetMode};
pub use node::FleetLimiter;
