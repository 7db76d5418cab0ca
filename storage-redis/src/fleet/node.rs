//! One node of a fleet: the local decision paths of each mode and their calls to Redis.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use redis::ConnectionLike;
use sluicegate_core::{Algorithm, Clock, Decision, MonotonicClock, Request, Ticks};

use super::algorithm::FleetAlgorithm;
use super::config::{FleetConfig, FleetMode};
use crate::error::Error;
use crate::fail::{self, Outcome};
use crate::limiter::RedisLimiter;

static HEARTBEAT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../../lua/fleet_heartbeat.lua")));

/// A limit shared by a fleet of nodes through Redis in one of the [`FleetMode`]s: one
/// per node and key, shared by the node's threads.
///
/// ```no_run
/// use sluicegate_core::{TokenBucket, SECOND};
/// use sluicegate_redis::fleet::{FleetConfig, FleetLimiter, FleetMode};
/// use sluicegate_redis::{Reconnecting, RedisLimiter};
///
/// let limiter = RedisLimiter::new(TokenBucket::new(5000, 5000, SECOND)?)?;
/// let config = FleetConfig { max_batch: 200, ..FleetConfig::new(FleetMode::Prefetch) };
/// let fleet = FleetLimiter::new(limiter, b"api", config)?;
/// let mut con = Reconnecting::new(redis::Client::open("redis://127.0.0.1/")?);
/// let allowed = fleet.check(&mut con, 1)?.allowed();
/// fleet.tick(&mut con)?; // now and then: give back idle units, settle, heartbeat
/// fleet.shutdown(&mut con)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FleetLimiter<A: FleetAlgorithm> {
    limiter: RedisLimiter<A>,
    key: Vec<u8>,
    config: FleetConfig,
    node: String,
    /// The core's monotonic clock (the CPU's counter, a few ns a read, where `Instant`
    /// costs tens: split reads it per decision).
    clock: MonotonicClock,
    /// The origin of local time: a reading of `clock`.
    epoch: Ticks,
    /// The server's time minus local time, as of the last reply.
    offset: AtomicI64,
    /// The server's time at this node's latest call (0 before the first).
    last_server_now: AtomicU64,
    calls: AtomicU64,
    mode: Mode<A>,
}

#[derive(Debug)]
enum Mode<A: Algorithm> {
    Exact,
    Prefetch(Prefetch),
    Batch(Mutex<Batch<A>>),
    Split(Split<A>),
}

/// Prefetched units: spent with one atomic update while unexpired.
#[derive(Debug, Default)]
struct Prefetch {
    units: AtomicU64,
    /// The local time the units stop being spendable: a window's end ([`HELD`] for a
    /// bucket's, which stay valid until given back, so spending them reads no clock;
    /// 0: none held).
    expires: AtomicU64,
    asking: Mutex<Asking>,
}

/// [`Prefetch::expires`] of units valid until given back.
const HELD: Ticks = Ticks::MAX;

/// What the node remembers between takes (under the lock).
#[derive(Debug, Default)]
struct Asking {
    /// The local time the held units are given back (0: none held).
    give_back_at: Ticks,
    /// No take before this local time: the limit was drained, or Redis away.
    next_ask: Ticks,
    /// Redis did not answer the last call.
    down: bool,
    /// The local time of the last take (`None`: none yet) and the units it brought.
    last_ask: Option<Ticks>,
    granted: u64,
    /// Cost denied locally since the last take: demand the next batch must cover.
    denied: u64,
    /// The server time the held units' window ends at; a give-back reaching the server
    /// later is dropped.
    deadline: Option<Ticks>,
}

/// A batch node's view of the shared state and what it has not settled.
#[derive(Debug)]
struct Batch<A: Algorithm> {
    state: Option<A::State>,
    synced: bool,
    pending: u64,
    decisions: u64,
    last_settle: Ticks,
    next_try: Ticks,
    down: bool,
    /// Units admitted locally that the settles found no room for.
    over: u64,
}

/// A split node's share and membership view.
#[derive(Debug)]
struct Split<A: Algorithm> {
    share: Mutex<Share<A>>,
    next_beat: AtomicU64,
}

#[derive(Debug)]
struct Share<A: Algorithm> {
    /// `None`: the share is zero (more nodes than units).
    algorithm: Option<A>,
    state: Option<A::State>,
    nodes: u64,
    rank: u64,
    /// The local time until which the membership view is trusted (a heartbeat's TTL).
    fresh_until: Ticks,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn micros(d: Duration) -> Ticks {
    sluicegate_core::ticks(d)
}

/// The error decisions made while Redis is known to be away carry.
fn away(what: &str) -> Error {
    Error::Unavailable(
        std::io::Error::new(std::io::ErrorKind::NotConnected, what.to_owned()).into(),
    )
}

impl<A: FleetAlgorithm> FleetLimiter<A> {
    /// A node of the fleet limiting `key` with `limiter` (its algorithm, prefix and
    /// [`FailPolicy`](crate::FailPolicy)); an error if `config` cannot work with the
    /// algorithm (see [`FleetConfig::validate`]).
    pub fn new(limiter: RedisLimiter<A>, key: &[u8], config: FleetConfig) -> Result<Self, Error> {
        config.validate(limiter.algorithm())?;
        let mode = match config.mode {
            FleetMode::Exact => Mode::Exact,
            FleetMode::Prefetch => Mode::Prefetch(Prefetch::default()),
            FleetMode::Batch => Mode::Batch(Mutex::new(Batch {
                state: None,
                synced: false,
                pending: 0,
                decisions: 0,
                last_settle: 0,
                next_try: 0,
                down: false,
                over: 0,
            })),
            FleetMode::Split => Mode::Split(Split {
                share: Mutex::new(Share {
                    algorithm: None,
                    state: None,
                    nodes: 0,
                    rank: 0,
                    fresh_until: 0,
                }),
                next_beat: AtomicU64::new(0),
            }),
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let clock = MonotonicClock::new();
        Ok(Self {
            limiter,
            key: key.to_vec(),
            config,
            node: format!("{}-{nanos:09}", std::process::id()),
            // Local time starts at one tick, so 0 can mean "none".
            epoch: clock.now().saturating_sub(1),
            clock,
            offset: AtomicI64::new(0),
            last_server_now: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            mode,
        })
    }

    /// Names this node in the fleet's membership (split mode ranks nodes by id); by
    /// default the process id and a clock reading.
    pub fn with_node_id(mut self, id: impl Into<String>) -> Self {
        self.node = id.into();
        self
    }

    /// The settings.
    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    /// The server's time (µs since the Unix epoch) at this node's latest call to Redis
    /// that answered, 0 before the first: the instant a decision that needed a call was
    /// made in the server's windows, which a local clock can only bracket.
    pub fn last_server_now(&self) -> Ticks {
        self.last_server_now.load(Ordering::Relaxed)
    }

    /// How many calls this node has made to Redis.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Batch mode: units admitted locally that settles found no room for (the mode's
    /// over-admission, as this node saw it).
    pub fn over_admitted(&self) -> u64 {
        match &self.mode {
            Mode::Batch(batch) => lock(batch).over,
            _ => 0,
        }
    }

    /// Split mode: the live nodes and this node's rank as of its last heartbeat.
    pub fn membership(&self) -> Option<(u64, u64)> {
        match &self.mode {
            Mode::Split(split) => {
                let share = lock(&split.share);
                (share.nodes > 0).then_some((share.nodes, share.rank))
            }
            _ => None,
        }
    }

    /// Local monotonic time, in ticks.
    fn local_now(&self) -> Ticks {
        self.clock.now().saturating_sub(self.epoch)
    }

    /// The server's time estimated from local time.
    fn server_now(&self, local: Ticks) -> Ticks {
        let server = i128::from(local) + i128::from(self.offset.load(Ordering::Relaxed));
        u64::try_from(server.max(0)).unwrap_or(Ticks::MAX)
    }

    /// Records the server's time `server` of a call sent at local time `sent`.
    fn learn_offset(&self, sent: Ticks, server: Ticks) {
        self.last_server_now.store(server, Ordering::Relaxed);
        let offset = i128::from(server) - i128::from(sent);
        self.offset
            .store(i64::try_from(offset).unwrap_or(0), Ordering::Relaxed);
    }

    fn counted<T>(&self, result: T) -> T {
        self.calls.fetch_add(1, Ordering::Relaxed);
        result
    }

    fn limit(&self) -> u64 {
        self.limiter.algorithm().limit()
    }

    /// Decides a request of `cost`: locally where the mode allows, calling Redis when it
    /// must. [`Outcome::Decided`] for decisions made by the shared limit, directly or by
    /// spending units or a share it granted; the other outcomes when the
    /// [`FailPolicy`](crate::FailPolicy) decided because Redis was away.
    pub fn check<C: ConnectionLike>(&self, con: &mut C, cost: u64) -> Result<Outcome, Error> {
        match &self.mode {
            Mode::Exact => self.counted(self.limiter.decide(con, &self.key, cost)),
            Mode::Prefetch(prefetch) => self.check_prefetch(con, prefetch, cost),
            Mode::Batch(batch) => self.check_batch(con, batch, cost),
            Mode::Split(split) => self.check_split(con, split, cost),
        }
    }

    /// Like [`FleetLimiter::check`], waiting (sleeping for each denial's `retry_after`)
    /// up to `timeout` for an admission; the last outcome when it runs out.
    pub fn acquire<C: ConnectionLike>(
        &self,
        con: &mut C,
        cost: u64,
        timeout: Duration,
    ) -> Result<Outcome, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let outcome = self.check(con, cost)?;
            let wait = match &outcome {
                Outcome::Decided(d) | Outcome::Local(d, _) if !d.allowed => d.retry_after,
                Outcome::Closed(_) => Some(micros(self.config.interval())),
                _ => return Ok(outcome),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match wait {
                Some(wait) if !left.is_zero() => {
                    std::thread::sleep(Duration::from_micros(wait.max(1)).min(left));
                }
                _ => return Ok(outcome),
            }
        }
    }

    /// The local decision alone, without Redis: `Some` when this node can decide
    /// `cost` from what it holds (prefetched units, a fresh share), `None` when a
    /// [`FleetLimiter::check`] would have to call Redis (and always in exact and batch
    /// modes). The hot path a server may try first.
    pub fn try_local(&self, cost: u64) -> Option<Decision> {
        match &self.mode {
            Mode::Prefetch(prefetch) => {
                let left = prefetch.spend(cost, || self.local_now())?;
                Some(Decision::admit(self.limit(), left, 0, 0))
            }
            Mode::Split(split) => {
                let now = self.local_now();
                let mut share = lock(&split.share);
                (now < split.next_beat.load(Ordering::Relaxed) && now < share.fresh_until)
                    .then(|| share.decide(self.server_now(now), cost))
            }
            _ => None,
        }
    }

    /// Upkeep, to call every few milliseconds from one thread: gives back expired
    /// prefetched units, settles a batch that is due, sends a heartbeat that is due.
    pub fn tick<C: ConnectionLike>(&self, con: &mut C) -> Result<(), Error> {
        let now = self.local_now();
        match &self.mode {
            Mode::Exact => Ok(()),
            Mode::Prefetch(prefetch) => {
                let mut asking = lock(&prefetch.asking);
                if asking.give_back_at != 0 && now >= asking.give_back_at {
                    self.give_back(con, prefetch, &mut asking);
                }
                Ok(())
            }
            Mode::Batch(batch) => {
                let mut batch = lock(batch);
                if now.saturating_sub(batch.last_settle) >= micros(self.config.interval())
                    && now >= batch.next_try
                {
                    self.settle(con, &mut batch, now)?;
                }
                Ok(())
            }
            Mode::Split(split) => {
                if now >= split.next_beat.load(Ordering::Relaxed) {
                    self.heartbeat(con, split, now, true)?;
                }
                Ok(())
            }
        }
    }

    /// Leaves the fleet: gives back every prefetched unit, settles a batch, removes a
    /// split node's heartbeat (the others take its share at their next heartbeat).
    pub fn shutdown<C: ConnectionLike>(&self, con: &mut C) -> Result<(), Error> {
        match &self.mode {
            Mode::Exact => Ok(()),
            Mode::Prefetch(prefetch) => {
                let mut asking = lock(&prefetch.asking);
                self.give_back(con, prefetch, &mut asking);
                Ok(())
            }
            Mode::Batch(batch) => self.settle(con, &mut lock(batch), self.local_now()),
            Mode::Split(split) => self.heartbeat(con, split, self.local_now(), false),
        }
    }

    fn check_prefetch<C: ConnectionLike>(
        &self,
        con: &mut C,
        prefetch: &Prefetch,
        cost: u64,
    ) -> Result<Outcome, Error> {
        let limit = self.limit();
        let admit = |left| Ok(Outcome::Decided(Decision::admit(limit, left, 0, 0)));
        if let Some(left) = prefetch.spend(cost, || self.local_now()) {
            return admit(left);
        }
        let mut asking = lock(&prefetch.asking);
        let now = self.local_now();
        // Another thread may have taken a batch meanwhile.
        if let Some(left) = prefetch.spend(cost, || now) {
            return admit(left);
        }
        if asking.give_back_at != 0 && now >= asking.give_back_at {
            self.give_back(con, prefetch, &mut asking);
        }
        if now < asking.next_ask {
            if asking.down {
                return fail::apply(
                    &self.limiter.on_unavailable,
                    &self.key,
                    cost,
                    Err(away("redis was away at the last try")),
                );
            }
            asking.denied = asking.denied.saturating_add(cost);
            let retry = (cost <= limit).then_some(asking.next_ask - now);
            return Ok(Outcome::Decided(Decision::deny(limit, 0, retry, 0)));
        }
        let batch = asking.batch(
            &self.config,
            now,
            prefetch.units.load(Ordering::Acquire),
            cost,
        );
        let result = self.counted(self.limiter.take(con, &Request::new(&self.key).cost(batch)));
        let interval = micros(self.config.interval());
        let taken = match result {
            Ok(taken) => taken,
            Err(error @ Error::Unavailable(_)) => {
                asking.down = true;
                asking.next_ask = now + interval;
                return fail::apply(&self.limiter.on_unavailable, &self.key, cost, Err(error));
            }
            Err(error) => return Err(error),
        };
        self.learn_offset(now, taken.now);
        let algorithm = self.limiter.algorithm();
        let deadline = algorithm.grant_end(taken.now);
        if deadline != asking.deadline {
            // Units left from another window's grant (a multi-unit cost's remainder)
            // ended with it.
            prefetch.units.store(0, Ordering::Release);
        }
        let horizon = micros(self.config.horizon());
        let life = deadline.map_or(horizon, |end| horizon.min(end.saturating_sub(taken.now)));
        // Time runs from the call's sending, before the server's `now`: never late.
        prefetch.units.fetch_add(taken.units, Ordering::AcqRel);
        let hard = if deadline.is_some() { now + life } else { HELD };
        prefetch.expires.store(hard, Ordering::Release);
        asking.give_back_at = now + life;
        asking.deadline = deadline;
        asking.down = false;
        asking.last_ask = Some(now);
        asking.granted = taken.units;
        asking.denied = 0;
        // Drained: wait before asking again rather than calling for every request.
        asking.next_ask = if taken.units < batch {
            now + interval
        } else {
            0
        };
        if let Some(left) = prefetch.spend(cost, || now) {
            return admit(left);
        }
        asking.denied = cost;
        let retry = match taken.decision.retry_after {
            _ if cost > limit => None,
            _ if asking.next_ask > now => Some(asking.next_ask - now),
            retry => retry,
        };
        Ok(Outcome::Decided(Decision::deny(limit, 0, retry, 0)))
    }

    /// Gives back every unit held, once: a failed give-back is dropped, never retried.
    fn give_back<C: ConnectionLike>(&self, con: &mut C, prefetch: &Prefetch, asking: &mut Asking) {
        prefetch.expires.store(0, Ordering::Release);
        asking.give_back_at = 0;
        let left = prefetch.units.swap(0, Ordering::AcqRel);
        if left > 0 {
            let result = self.counted(self.limiter.refund(
                con,
                &Request::new(&self.key).cost(left),
                asking.deadline,
            ));
            if let Err(Error::Unavailable(_)) = result {
                asking.down = true;
            }
        }
    }

    fn check_batch<C: ConnectionLike>(
        &self,
        con: &mut C,
        batch: &Mutex<Batch<A>>,
        cost: u64,
    ) -> Result<Outcome, Error> {
        let mut batch = lock(batch);
        let now = self.local_now();
        let due = !batch.synced
            || batch.down
            || batch.decisions >= self.config.max_batch
            || now.saturating_sub(batch.last_settle) >= micros(self.config.interval());
        if due && now >= batch.next_try {
            self.settle(con, &mut batch, now)?;
        }
        if !batch.synced || batch.down {
            return fail::apply(
                &self.limiter.on_unavailable,
                &self.key,
                cost,
                Err(away("redis was away at the last settle")),
            );
        }
        let algorithm = self.limiter.algorithm();
        let (decision, state) = algorithm.decide(batch.state.take(), self.server_now(now), cost);
        batch.state = state;
        if decision.allowed {
            batch.pending = batch.pending.saturating_add(cost);
        }
        batch.decisions += 1;
        Ok(Outcome::Decided(decision))
    }

    /// Takes the units admitted since the last settle from the shared limit and adopts
    /// the shared state. When Redis is away the count is kept for the next settle.
    fn settle<C: ConnectionLike>(
        &self,
        con: &mut C,
        batch: &mut Batch<A>,
        now: Ticks,
    ) -> Result<(), Error> {
        let pending = Request::new(&self.key).cost(batch.pending);
        match self.counted(self.limiter.settle(con, &pending, A::CHARGED)) {
            Ok(taken) => {
                self.learn_offset(now, taken.now);
                let algorithm = self.limiter.algorithm();
                batch.state = match taken.state {
                    Some(bytes) => Some(algorithm.decode(&bytes).map_err(|e| Error::Corrupt {
                        key: self.key.clone(),
                        reason: e.to_string(),
                    })?),
                    None => None,
                };
                batch.over += batch.pending.saturating_sub(taken.units);
                batch.pending = 0;
                batch.decisions = 0;
                batch.last_settle = now;
                batch.synced = true;
                batch.down = false;
                Ok(())
            }
            Err(Error::Unavailable(_)) => {
                batch.down = true;
                batch.next_try = now + micros(self.config.interval());
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    fn check_split<C: ConnectionLike>(
        &self,
        con: &mut C,
        split: &Split<A>,
        cost: u64,
    ) -> Result<Outcome, Error> {
        let now = self.local_now();
        if now >= split.next_beat.load(Ordering::Relaxed) {
            self.heartbeat(con, split, now, true)?;
        }
        let mut share = lock(&split.share);
        if now >= share.fresh_until {
            drop(share);
            return fail::apply(
                &self.limiter.on_unavailable,
                &self.key,
                cost,
                Err(away("no heartbeat within its ttl")),
            );
        }
        Ok(Outcome::Decided(share.decide(self.server_now(now), cost)))
    }

    /// Sends this node's heartbeat (or, with `join` false, removes it) and recomputes
    /// its share when the membership changed. Redis being away is no error here: the
    /// view ages, and decisions follow the policy once it is older than the TTL.
    fn heartbeat<C: ConnectionLike>(
        &self,
        con: &mut C,
        split: &Split<A>,
        now: Ticks,
        join: bool,
    ) -> Result<(), Error> {
        let interval = micros(self.config.interval());
        split.next_beat.store(now + interval, Ordering::Relaxed);
        let ttl = 3 * interval;
        let members_key = [&self.limiter.prefix[..], &self.key, b":nodes"].concat();
        let reply: Result<Vec<redis::Value>, _> = self.counted(
            HEARTBEAT
                .key(&members_key)
                .arg(&self.node)
                .arg(if join { ttl } else { 0 })
                .invoke(con),
        );
        let values = match reply {
            Ok(values) => values,
            Err(e) => {
                return match Error::from_redis(e, &self.key) {
                    Error::Unavailable(_) => Ok(()),
                    error => Err(error),
                }
            }
        };
        let mut values = values.into_iter();
        let server_now: Ticks = values
            .next()
            .and_then(|v| redis::from_redis_value(v).ok())
            .ok_or(Error::Reply)?;
        self.learn_offset(now, server_now);
        let mut members: Vec<String> = values
            .map(redis::from_redis_value)
            .collect::<Result<_, _>>()
            .map_err(|_| Error::Reply)?;
        if !join {
            return Ok(());
        }
        // The set is ordered by expiry; shares go by id.
        members.sort_unstable();
        let nodes = members.len() as u64;
        let rank = members.iter().position(|m| *m == self.node).unwrap_or(0) as u64;
        let mut share = lock(&split.share);
        share.fresh_until = now + ttl;
        if (share.nodes, share.rank) != (nodes, rank) {
            let algorithm = self.limiter.algorithm().share(nodes.max(1), rank);
            share.rebuild(algorithm, self.server_now(now), nodes, rank);
        }
        Ok(())
    }
}

impl Prefetch {
    /// Spends `cost` of the held units if they are unexpired at `now` (read only for
    /// units that expire: a clock read costs more than the rest); the units left.
    #[inline]
    fn spend(&self, cost: u64, now: impl FnOnce() -> Ticks) -> Option<u64> {
        let expires = self.expires.load(Ordering::Acquire);
        if expires != HELD && now() >= expires {
            return None;
        }
        let before = self
            .units
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_sub(cost))
            .ok()?;
        Some(before - cost)
    }
}

impl Asking {
    /// The units the next take asks for: the node's demand since its last take,
    /// scaled to the horizon, at least `cost`, at most `max_batch` (the first take asks
    /// for `max_batch`).
    fn batch(&self, config: &FleetConfig, now: Ticks, held: u64, cost: u64) -> u64 {
        let Some(last) = self.last_ask else {
            return config.max_batch.max(cost);
        };
        let used = (self.granted.saturating_sub(held))
            .saturating_add(self.denied)
            .saturating_add(cost);
        let elapsed = now.saturating_sub(last).max(1);
        let scaled = u128::from(used) * u128::from(micros(config.horizon())) / u128::from(elapsed);
        u64::try_from(scaled)
            .unwrap_or(u64::MAX)
            .clamp(cost.max(1), config.max_batch.max(cost))
    }
}

impl<A: FleetAlgorithm> Share<A> {
    fn decide(&mut self, now: Ticks, cost: u64) -> Decision {
        match &self.algorithm {
            Some(algorithm) => {
                let (decision, state) = algorithm.decide(self.state.take(), now, cost);
                self.state = state;
                decision
            }
            None => Decision::deny(0, 0, None, 0),
        }
    }

    /// Moves to a new share, carrying the units the old one had used (capped at the
    /// new share's limit): a membership change neither refills nor empties a node.
    fn rebuild(&mut self, algorithm: Option<A>, now: Ticks, nodes: u64, rank: u64) {
        let used = match &self.algorithm {
            Some(old) => old
                .limit()
                .saturating_sub(old.peek(self.state.take(), now, 0).remaining),
            None => 0,
        };
        self.state = algorithm
            .as_ref()
            .and_then(|new| new.decide(None, now, used.min(new.limit())).1);
        self.algorithm = algorithm;
        self.nodes = nodes;
        self.rank = rank;
    }
}
