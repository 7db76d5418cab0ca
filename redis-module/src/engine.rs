//! The decisions, with no Redis in sight: parsed arguments and the keys' values in, the
//! reply and the keys' new values out. The commands wrap this in key reads and writes.

use sluicegate_core::calendar::CalendarWindowAt;
use sluicegate_core::lease::{Acquired, Concurrency, Grant, LeaseError};
use sluicegate_core::state::AnyState;
use sluicegate_core::{
    Algorithm, AnyAlgorithm, Composite, Decision, DecodeError, Kind, Report, Reported, Reserve,
    Ticks,
};

use crate::algorithm;
use crate::args::{ArgError, Args};

/// Why a command decided nothing. Every variant is a reply, never a panic.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Malformed arguments or parameters out of range.
    Arg(ArgError),
    /// A key holds a Redis value of another type (named as `TYPE` names it).
    Foreign(&'static str),
    /// A key holds bytes that are no state of the algorithm, in the core decoder's words.
    Corrupt(DecodeError),
    /// A lease call the core refused (not held, too many holds...).
    Lease(LeaseError),
    /// A calendar window decided or reported at the server's time, this one, outside the
    /// period given: the caller computes the period again.
    OutOfPeriod(Ticks),
}

impl From<ArgError> for Failure {
    fn from(e: ArgError) -> Self {
        Self::Arg(e)
    }
}

impl From<DecodeError> for Failure {
    fn from(e: DecodeError) -> Self {
        Self::Corrupt(e)
    }
}

impl From<LeaseError> for Failure {
    /// A parameter the core refuses is the caller's argument error, as for limits.
    fn from(e: LeaseError) -> Self {
        match e {
            LeaseError::Param(e) => Self::Arg(ArgError::Param(e)),
            e => Self::Lease(e),
        }
    }
}

impl std::fmt::Display for Failure {
    /// The error reply. The first word is the error code; a state's problems read as the
    /// scripts' (`SLUICEGATE foreign ...`, `SLUICEGATE corrupt state: ...`), so a client
    /// classifies both paths alike.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Arg(e) => write!(f, "ERR {e}"),
            Self::Foreign(found) => write!(f, "SLUICEGATE foreign {found}"),
            Self::Corrupt(e) => write!(f, "SLUICEGATE corrupt state: {e}"),
            Self::Lease(e) => write!(f, "SLUICEGATE lease: {e}"),
            Self::OutOfPeriod(now) => write!(f, "SLUICEGATE out of period {now}"),
        }
    }
}

/// A key's new value: its state's bytes and the time until that state is fresh (its
/// TTL on the server's clock), or `None` when fresh (the key is deleted).
pub(crate) type Write = Option<(Encoded, Ticks)>;

/// How many bytes of a state [`Encoded`] keeps on the stack: every fixed-size state, a
/// lock held by an owner of up to 64 bytes.
const INLINE: usize = 96;

/// The word before a calendar window's parameters.
const CALENDAR_WINDOW: &str = Kind::CalendarWindow.script_name();

/// A state's bytes, on the stack up to [`INLINE`] bytes, so a decision allocates nothing
/// to encode its state; longer ones (sliding logs, lease tables) spill to the heap.
#[derive(Debug, Clone)]
pub(crate) struct Encoded {
    len: usize,
    inline: [u8; INLINE],
    heap: Vec<u8>,
}

impl Encoded {
    /// `state`'s canonical bytes under `algorithm`'s encoding.
    pub(crate) fn of<S>(encode: impl FnOnce(&mut Self, &S), state: &S) -> Self {
        let mut out = Self {
            len: 0,
            inline: [0; INLINE],
            heap: Vec::new(),
        };
        encode(&mut out, state);
        out
    }

    /// The bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        if self.heap.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }

    fn push(&mut self, byte: u8) {
        if self.heap.is_empty() {
            if let Some(slot) = self.inline.get_mut(self.len) {
                *slot = byte;
                self.len += 1;
                return;
            }
            self.heap.extend_from_slice(&self.inline);
        }
        self.heap.push(byte);
    }
}

impl Extend<u8> for Encoded {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, bytes: I) {
        for byte in bytes {
            self.push(byte);
        }
    }
}

/// The keys' new values in the keys' order; one key's without a vector.
#[derive(Debug)]
pub(crate) enum Writes {
    /// One key's (taken once).
    One(Option<Write>),
    /// A composite's, one per member.
    Many(std::vec::IntoIter<Write>),
}

impl Iterator for Writes {
    type Item = Write;

    fn next(&mut self) -> Option<Write> {
        match self {
            Self::One(write) => write.take(),
            Self::Many(writes) => writes.next(),
        }
    }
}

/// A reply's integers: at most ten (a lease acquire's), on the stack.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields {
    values: [i64; Fields::MAX],
    len: usize,
}

impl Fields {
    /// The most integers a reply holds.
    pub(crate) const MAX: usize = 10;

    /// The integers.
    pub(crate) fn as_slice(&self) -> &[i64] {
        &self.values[..self.len]
    }
}

impl<const N: usize> From<[i64; N]> for Fields {
    fn from(fields: [i64; N]) -> Self {
        let mut values = [0; Fields::MAX];
        let len = N.min(Fields::MAX);
        values[..len].copy_from_slice(&fields[..len]);
        Self { values, len }
    }
}

/// One limit over one key, or a composite over one key per member.
#[derive(Debug)]
pub(crate) enum Limit {
    /// One algorithm.
    One(AnyAlgorithm),
    /// Every member must admit; member `i` keeps its state in key `i`.
    Many(Composite<AnyAlgorithm>),
    /// A calendar window in the period given, over one key.
    Calendar(CalendarWindowAt),
}

impl Limit {
    /// At the server's time (not `explicit`), a calendar window's `now` must lie in its
    /// period: the caller's period has turned otherwise.
    pub(crate) fn check_period(&self, now: Ticks, explicit: bool) -> Result<(), Failure> {
        match self {
            Self::Calendar(c) if !explicit => {
                let period = c.period();
                if (period.start()..period.end()).contains(&now) {
                    Ok(())
                } else {
                    Err(Failure::OutOfPeriod(now))
                }
            }
            _ => Ok(()),
        }
    }
}

/// The arguments of `SLUICEGATE.CHECK` and `SLUICEGATE.PEEK`:
/// `numkeys key [key ...] algorithm [algorithm ...] [COST c] [NOW t] [MAXWAIT w]`.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    /// The Redis keys, one per algorithm (the arguments, in place).
    pub keys: &'a [&'a [u8]],
    /// The limit.
    pub limit: Limit,
    /// The request's cost (default 1).
    pub cost: u64,
    /// The explicit time, if given.
    pub now: Option<Ticks>,
    /// The longest wait a reservation books, if given (buckets only).
    pub max_wait: Option<Ticks>,
}

/// The most keys (and composite members) one command takes: the core's bound.
pub(crate) const MAX_KEYS: u64 = 255;

/// The most keys one `SLUICEGATE.BATCH` takes (the client's batches stay within it).
pub(crate) const MAX_BATCH_KEYS: u64 = 4096;

/// Reads `numkeys key...` (at most `max` keys) and returns the keys; the first argument
/// of every multi-key command, and what Redis asks for to route it (Cluster).
pub(crate) fn keys<'a>(args: &mut Args<'a>, max: u64) -> Result<&'a [&'a [u8]], ArgError> {
    let n = args.u64("numkeys")?;
    if !(1..=max).contains(&n) {
        return Err(ArgError::Syntax(format!(
            "numkeys must be between 1 and {max}, got {n}"
        )));
    }
    // n <= max.
    args.take(usize::try_from(n).unwrap_or(usize::MAX), "a key")
}

impl<'a> Request<'a> {
    /// Parses the arguments after the command's name; `MAXWAIT` only with `wait`.
    pub(crate) fn parse(args: &'a [&'a [u8]], wait: bool) -> Result<Self, ArgError> {
        let mut args = Args::new(args);
        let (keys, limit) = keys_and_limit(&mut args)?;
        let [cost, now, max_wait] = if wait {
            args.options(["COST", "NOW", "MAXWAIT"])?
        } else {
            let [cost, now] = args.options(["COST", "NOW"])?;
            [cost, now, None]
        };
        let reserves = match &limit {
            Limit::One(spec) => spec.can_reserve(),
            Limit::Many(c) => c.members().iter().all(AnyAlgorithm::can_reserve),
            Limit::Calendar(_) => false,
        };
        if max_wait.is_some() && !reserves {
            return Err(ArgError::Syntax(
                "MAXWAIT needs buckets (token_bucket, leaky_bucket, pacing)".into(),
            ));
        }
        Ok(Self {
            keys,
            limit,
            cost: cost.unwrap_or(1),
            now,
            max_wait,
        })
    }

    /// Parses `SLUICEGATE.BATCH`'s arguments, `numkeys key [key ...] algorithm
    /// [algorithm ...] COSTS cost [cost ...] [NOW t]`: one limit of as many members as
    /// algorithms (or one calendar window, alone), each request as many keys in a row
    /// and one cost. The request returned has the first request's keys and cost; the
    /// costs are all of them.
    pub(crate) fn parse_batch(args: &'a [&'a [u8]]) -> Result<(Self, Vec<u64>), ArgError> {
        let mut args = Args::new(args);
        let keys = keys(&mut args, MAX_BATCH_KEYS)?;
        let mut specs = Vec::new();
        let calendar = if args.eat(CALENDAR_WINDOW) {
            let calendar = algorithm::calendar(&mut args)?;
            if !args.eat("COSTS") {
                return Err(ArgError::Syntax(
                    "a calendar window is alone in a batch: COSTS follows it".into(),
                ));
            }
            Some(calendar)
        } else {
            while !args.eat("COSTS") {
                specs.push(algorithm::parse(&mut args)?);
            }
            None
        };
        let members = if calendar.is_some() { 1 } else { specs.len() };
        if members == 0 || members as u64 > MAX_KEYS || keys.len() % members != 0 {
            return Err(ArgError::Syntax(format!(
                "{} keys cannot be split among {members} algorithms",
                keys.len()
            )));
        }
        let costs = (0..keys.len() / members)
            .map(|_| args.u64("a cost"))
            .collect::<Result<Vec<_>, _>>()?;
        let [now] = args.options(["NOW"])?;
        let limit = match calendar {
            Some(calendar) => Limit::Calendar(calendar),
            None if members == 1 => Limit::One(specs.remove(0)),
            None => Limit::Many(Composite::new(specs)?),
        };
        let request = Self {
            keys: &keys[..members],
            limit,
            cost: costs[0],
            now,
            max_wait: None,
        };
        Ok((request, costs))
    }

    /// Decides at `now` from the keys' values (`None`: absent): the decision and each
    /// key's new value.
    pub(crate) fn decide(
        &self,
        values: &[Option<&[u8]>],
        now: Ticks,
    ) -> Result<(Decision, Writes), Failure> {
        let (cost, wait) = (self.cost, self.max_wait);
        let reset = |d: &Decision| d.reset_after;
        match &self.limit {
            Limit::One(spec) => on_one(spec, values, reset, |state| match wait {
                Some(w) => spec.reserve(state, now, cost, w),
                None => spec.decide(state, now, cost),
            }),
            Limit::Calendar(c) => on_one(c, values, reset, |state| c.decide(state, now, cost)),
            Limit::Many(composite) => {
                let state = composite_state(composite, values)?;
                let (d, new) = match wait {
                    Some(w) => composite.reserve(state, now, cost, w),
                    None => composite.decide(state, now, cost),
                };
                Ok((d, member_writes(composite, new, now)))
            }
        }
    }

    /// Checks that every value is a state of its member, as `SLUICEGATE.RESET` does
    /// before deleting anything.
    pub(crate) fn validate(&self, values: &[Option<&[u8]>]) -> Result<(), Failure> {
        let one;
        let members = match &self.limit {
            Limit::One(spec) => {
                one = [spec];
                &one[..]
            }
            Limit::Many(c) => return validate_all(c.members().iter(), values),
            Limit::Calendar(c) => return on_one(c, values, |_| 0, |state| ((), state)).map(|_| ()),
        };
        validate_all(members.iter().copied(), values)
    }
}

/// Runs `transition` on the first key's value, decoded by `alg`: its answer and the
/// key's new value, living for what `reset` says of the answer.
fn on_one<A: Algorithm, T>(
    alg: &A,
    values: &[Option<&[u8]>],
    reset: impl FnOnce(&T) -> Ticks,
    transition: impl FnOnce(Option<A::State>) -> (T, Option<A::State>),
) -> Result<(T, Writes), Failure> {
    let value = values.first().copied().flatten();
    let state = value.map(|b| alg.decode(b)).transpose()?;
    let (answer, new) = transition(state);
    let ttl = reset(&answer);
    let write = new.map(|s| (Encoded::of(|out, s| alg.encode(s, out), &s), ttl));
    Ok((answer, Writes::One(Some(write))))
}

/// A composite's state from its keys' values; `None` when every member is fresh.
fn composite_state(
    composite: &Composite<AnyAlgorithm>,
    values: &[Option<&[u8]>],
) -> Result<Option<Vec<Option<AnyState>>>, Failure> {
    let states = composite
        .members()
        .iter()
        .zip(values)
        .map(|(m, v)| decode(m, *v))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(states.iter().any(Option::is_some).then_some(states))
}

/// Reads `numkeys key...` and one algorithm per key: a composite of several.
fn keys_and_limit<'a>(args: &mut Args<'a>) -> Result<(&'a [&'a [u8]], Limit), ArgError> {
    let keys = keys(args, MAX_KEYS)?;
    // One key, the common case, needs no vector of specs.
    let limit = if let [_] = keys {
        if args.eat(CALENDAR_WINDOW) {
            Limit::Calendar(algorithm::calendar(args)?)
        } else {
            Limit::One(algorithm::parse(args)?)
        }
    } else {
        let specs = keys
            .iter()
            .map(|_| algorithm::parse(args))
            .collect::<Result<Vec<_>, _>>()?;
        Limit::Many(Composite::new(specs)?)
    };
    Ok((keys, limit))
}

/// A composite's new states as its keys' values: each key lives until its own member is
/// fresh, as in the scripts.
fn member_writes(
    composite: &Composite<AnyAlgorithm>,
    new: Option<Vec<Option<AnyState>>>,
    now: Ticks,
) -> Writes {
    let members = composite.members();
    let new = new.unwrap_or_else(|| vec![None; members.len()]);
    let writes = members
        .iter()
        .zip(new)
        .map(|(m, s)| {
            s.map(|s| {
                let reset = m.peek(Some(s.clone()), now, 0).reset_after;
                (encode(m, &s), reset)
            })
        })
        .collect::<Vec<_>>();
    Writes::Many(writes.into_iter())
}

/// The arguments of `SLUICEGATE.REPORT`:
/// `numkeys key [key ...] algorithm [algorithm ...] ADJUST a [NOW t]`, `a` signed: the
/// keys, limit and time as a request's (of no cost), and the adjustment.
#[derive(Debug)]
pub(crate) struct ReportRequest<'a> {
    /// The keys, limit and explicit time.
    pub request: Request<'a>,
    /// Units added to what the key has taken (negative: given back).
    pub adjustment: i64,
}

impl<'a> ReportRequest<'a> {
    /// Parses the arguments after the command's name.
    pub(crate) fn parse(args: &'a [&'a [u8]]) -> Result<Self, ArgError> {
        let mut args = Args::new(args);
        let (keys, limit) = keys_and_limit(&mut args)?;
        args.one_of("ADJUST", &["ADJUST"])?;
        let adjustment = args.i64("the adjustment")?;
        let [now] = args.options(["NOW"])?;
        let request = Request {
            keys,
            limit,
            cost: 0,
            now,
            max_wait: None,
        };
        Ok(Self {
            request,
            adjustment,
        })
    }

    /// The core's report at `now` on the keys' values (`None`: absent): what it recorded
    /// and each key's new value.
    pub(crate) fn report(
        &self,
        values: &[Option<&[u8]>],
        now: Ticks,
    ) -> Result<(Reported, Writes), Failure> {
        let adjustment = self.adjustment;
        let reset = |r: &Reported| r.decision.reset_after;
        match &self.request.limit {
            Limit::One(spec) => on_one(spec, values, reset, |state| {
                spec.report(state, now, adjustment)
            }),
            Limit::Calendar(c) => {
                on_one(c, values, reset, |state| c.report(state, now, adjustment))
            }
            Limit::Many(composite) => {
                let state = composite_state(composite, values)?;
                let (reported, new) = composite.report(state, now, adjustment);
                Ok((reported, member_writes(composite, new, now)))
            }
        }
    }
}

fn validate_all<'s>(
    members: impl Iterator<Item = &'s AnyAlgorithm>,
    values: &[Option<&[u8]>],
) -> Result<(), Failure> {
    for (m, v) in members.zip(values) {
        decode(m, *v)?;
    }
    Ok(())
}

/// `state`'s bytes under `spec`.
pub(crate) fn encode(spec: &AnyAlgorithm, state: &AnyState) -> Encoded {
    Encoded::of(|out, s| spec.encode(s, out), state)
}

fn decode(spec: &AnyAlgorithm, value: Option<&[u8]>) -> Result<Option<AnyState>, Failure> {
    Ok(value.map(|b| spec.decode(b)).transpose()?)
}

/// A decision as the scripts reply it: allowed, limit, remaining, retry (-1: never),
/// reset, delay, now.
pub(crate) fn reply(d: &Decision, now: Ticks) -> [i64; 7] {
    let retry = match d.retry_after {
        Some(t) if !d.allowed => signed(t),
        Some(_) => 0,
        None => -1,
    };
    [
        i64::from(d.allowed),
        signed(d.limit),
        signed(d.remaining),
        retry,
        signed(d.reset_after),
        signed(d.delay),
        signed(now),
    ]
}

/// Every value the core reports fits (times up to 2^62 plus a horizon); saturate anyway.
pub(crate) fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The arguments of the lease commands: `key max owner [ttl] [NOW t]`.
#[derive(Debug)]
pub(crate) struct LeaseRequest<'a> {
    /// The limit.
    pub leases: Concurrency,
    /// Who asks.
    pub owner: &'a [u8],
    /// The lease's time to live (acquire, renew).
    pub ttl: Ticks,
    /// The explicit time, if given.
    pub now: Option<Ticks>,
    /// Whether the reply is packed: the same integers as one bulk string.
    pub packed: bool,
}

/// A lease operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseOp {
    /// Grant or re-enter.
    Acquire,
    /// Release once.
    Release,
    /// Extend.
    Renew,
}

/// What a lease operation answers.
#[derive(Debug)]
pub(crate) enum LeaseReply {
    /// An acquire's decision and grant.
    Acquired(Acquired),
    /// A release's or renewal's lease as it stands.
    Grant(Grant),
}

impl<'a> LeaseRequest<'a> {
    /// Parses `key max owner ttl [PACKED] [NOW t]` (no `ttl` for a release) and checks
    /// the owner and ttl as the core does, before the command opens the key.
    pub(crate) fn parse(args: &'a [&'a [u8]], op: LeaseOp) -> Result<Self, Failure> {
        let mut args = Args::new(args);
        args.bytes("a key")?;
        let leases = Concurrency::new(args.u64("max")?).map_err(ArgError::from)?;
        let owner = args.bytes("an owner")?;
        let ttl = match op {
            LeaseOp::Release => 0,
            _ => args.u64("ttl")?,
        };
        let packed = args.eat("PACKED");
        let [now] = args.options(["NOW"])?;
        // A release has no ttl; its transition checks the owner before touching anything.
        if op != LeaseOp::Release {
            Concurrency::check(owner, ttl)?;
        }
        Ok(Self {
            leases,
            owner,
            ttl,
            now,
            packed,
        })
    }

    /// Runs `op` at `now` on the key's value: the reply and the key's new value.
    pub(crate) fn run(
        &self,
        op: LeaseOp,
        value: Option<&[u8]>,
        now: Ticks,
    ) -> Result<(LeaseReply, Write), Failure> {
        let state = value.map(|b| self.leases.decode(b)).transpose()?;
        let (reply, new) = match op {
            LeaseOp::Acquire => {
                let (a, new) = self.leases.acquire(state, now, self.owner, self.ttl)?;
                (LeaseReply::Acquired(a), new)
            }
            LeaseOp::Release => {
                let (g, new) = self.leases.release(state, now, self.owner)?;
                (LeaseReply::Grant(g), new)
            }
            LeaseOp::Renew => {
                let (g, new) = self.leases.renew(state, now, self.owner, self.ttl)?;
                (LeaseReply::Grant(g), new)
            }
        };
        let write = new.map(|s| {
            let bytes = Encoded::of(|out, s| self.leases.encode(s, out), &s);
            (bytes, s.fresh_after(now))
        });
        Ok((reply, write))
    }
}

impl LeaseReply {
    /// Acquire: the decision's seven fields, then token, expires_at and holds (0 when
    /// denied). Release and renew: token, expires_at, holds (0 once released), now.
    pub(crate) fn fields(&self, now: Ticks) -> Fields {
        match self {
            LeaseReply::Acquired(a) => {
                let [ok, limit, free, retry, reset, delay, now] = reply(&a.decision, now);
                let g = a.grant.map_or([0; 3], |g| [g.token, g.expires_at, g.holds]);
                let [token, expires_at, holds] = g.map(signed);
                [
                    ok, limit, free, retry, reset, delay, now, token, expires_at, holds,
                ]
                .into()
            }
            LeaseReply::Grant(g) => [g.token, g.expires_at, g.holds, now].map(signed).into(),
        }
    }
}
