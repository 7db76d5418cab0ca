//! The Lua side: each core algorithm names its script file and passes its parameters in
//! `ARGV`; a limiter's script is the shared helpers, the files its algorithm needs, and
//! the entry point.

use redis::Cmd;
use sluicegate_core::limits::{MAX_LIMIT, MAX_WAIT};
use sluicegate_core::{
    Algorithm, Ban, BucketParams, CalendarWindowAt, Composite, Decision, DecodeError, FixedWindow,
    Kind, LeakyBucket, Pacing, Report, Reserve, SlidingCounter, SlidingLog, Ticks, TokenBucket,
    MAX_TICKS,
};

use crate::error::{Error, LATEST};

pub(crate) static LIB: &str = include_str!("../lua/lib.lua");
static FIXED_WINDOW: &str = include_str!("../lua/fixed_window.lua");
static CALENDAR_WINDOW: &str = include_str!("../lua/calendar_window.lua");
static SLIDING_COUNTER: &str = include_str!("../lua/sliding_counter.lua");
static SLIDING_LOG: &str = include_str!("../lua/sliding_log.lua");
static BUCKET: &str = include_str!("../lua/bucket.lua");
static BUCKET_FAST: &str = include_str!("../lua/bucket_fast.lua");
static FAST_HEAD: &str = include_str!("../lua/fast_head.lua");
static FAST_TAIL: &str = include_str!("../lua/fast_tail.lua");
static BAN: &str = include_str!("../lua/ban.lua");
static COMPOSITE: &str = include_str!("../lua/composite.lua");
static MAIN: &str = include_str!("../lua/main.lua");
static SCRIPT_TAIL: &str = include_str!("../lua/script_tail.lua");
static LEASE: &str = include_str!("../lua/lease.lua");
static LEASE_TAIL: &str = include_str!("../lua/lease_tail.lua");
static RWLOCK: &str = include_str!("../lua/rwlock.lua");
static RWLOCK_TAIL: &str = include_str!("../lua/rwlock_tail.lua");
static REGISTER: &str = include_str!("../lua/library.lua");

/// The function library: every file once, then the registrations, under a name made of
/// a hash of its code (see `lua/library.lua`).
pub(crate) struct Library {
    /// `sluicegate_` and the first 12 hex digits of the SHA-1 of the code.
    pub(crate) name: String,
    /// The text `FUNCTION LOAD` takes.
    pub(crate) source: String,
    /// Each function's suffix and full name (see `lua/library.lua`).
    functions: Vec<(&'static str, String)>,
}

impl Library {
    /// The full name of the function registered as `suffix`.
    pub(crate) fn function(&self, suffix: &str) -> &str {
        self.functions
            .iter()
            .find(|(s, _)| *s == suffix)
            .map_or("", |(_, name)| name)
    }
}

/// The suffixes `lua/library.lua` registers.
const FUNCTIONS: [&str; 16] = [
    "decide",
    "bucket",
    "batch",
    "read",
    "reset",
    "remove",
    "seed",
    "purge",
    "take",
    "refund",
    "report",
    "acquire",
    "release",
    "renew",
    "lease_read",
    "rwlock",
];

pub(crate) static LIBRARY: std::sync::LazyLock<Library> = std::sync::LazyLock::new(|| {
    let body = [
        LIB,
        FIXED_WINDOW,
        CALENDAR_WINDOW,
        SLIDING_COUNTER,
        SLIDING_LOG,
        BUCKET_FAST,
        BUCKET,
        BAN,
        COMPOSITE,
        MAIN,
        LEASE,
        RWLOCK,
        REGISTER,
    ]
    .concat();
    let hash = redis::Script::new(&body).get_hash().to_owned();
    let name = format!("sluicegate_{}", &hash[..12]);
    let source = format!("#!lua name={name}\nlocal NAME = '{name}'\n{body}");
    let functions = FUNCTIONS
        .iter()
        .map(|&suffix| (suffix, format!("{name}_{suffix}")))
        .collect();
    Library {
        name,
        source,
        functions,
    }
});

/// The name of the function library this client loads and calls: `sluicegate_` and a hash
/// of its code, so two releases' libraries coexist on one server.
pub fn library_name() -> &'static str {
    &LIBRARY.name
}

/// The leases' script.
pub(crate) fn lease_script() -> String {
    [LIB, LEASE, LEASE_TAIL].concat()
}

/// The lock family's script.
pub(crate) fn rwlock_script() -> String {
    [LIB, RWLOCK, RWLOCK_TAIL].concat()
}

/// The largest limit, capacity or rate the scripts take: the core's. Their products with
/// periods are computed in limbs where they exceed a Lua double (see `lua/lib.lua`).
pub const MAX_LUA_LIMIT: u64 = MAX_LIMIT;
/// The largest limit of a sliding log on Redis. The script reads and checks every entry
/// of the log on each decision, blocking the server meanwhile: a full log of 2000
/// entries (one per unit, the worst case) takes about 0.6 ms; 10^4 take 3 ms and the
/// core's 10^5 30 ms, too long to block every other client.
pub const MAX_LUA_LOG_LIMIT: u64 = 2000;
/// Why a longer sliding log is refused, and what to use instead.
const LOG_TOO_LONG: &str = "the longest sliding log the Redis scripts keep (each decision \
    reads the whole log, blocking the server): use a sliding counter, or the module";
/// The latest time a sliding log's script and the leases' take: 2^52 µs is the year
/// 2112. They keep instants as doubles; every other algorithm takes the core's
/// [`MAX_TICKS`], its instants beyond 2^52 held relative to an epoch (see
/// `lua/lib.lua`). (Costs are clamped to [`LuaAlgorithm::lua_cost_cap`], so any cost
/// works.)
pub const MAX_LUA_TICKS: Ticks = 1 << 52;
/// Why a sliding log refuses a later time, and what to use instead.
const LOG_TOO_LATE: &str = "the latest time of a sliding log on Redis (its script keeps \
    instants as doubles): use a sliding counter, or the module";

/// What a decision asks of the buckets' fast path (see [`LuaAlgorithm::lua_fast_arg`]),
/// both to send it and to read its reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FastAsk {
    /// The units asked, at most [`LuaAlgorithm::lua_cost_cap`].
    pub cost: u64,
    /// The time to decide at; `None` for the server's.
    pub now: Option<Ticks>,
    /// A reservation's longest wait; `None` for a check.
    pub max_wait: Option<Ticks>,
}

/// An algorithm the Redis scripts implement: every algorithm of the core.
///
/// The scripts reproduce the core's integer math exactly within the Lua range: the
/// core's limits, capacities, rates, periods and bucket horizons (a sliding log's limit
/// up to [`MAX_LUA_LOG_LIMIT`]; a reservation booking more than 2^53 ticks ahead is
/// refused), the core's ban thresholds and times (a sliding log's up to
/// [`MAX_LUA_TICKS`]); any cost.
pub trait LuaAlgorithm: Algorithm {
    /// Appends the Lua files this algorithm needs to `files`.
    fn lua_files(&self, files: &mut Vec<&'static str>);

    /// Appends this algorithm's name and parameters to the script's arguments, for a
    /// decision of `cost` (at most [`lua_cost_cap`](Self::lua_cost_cap)) whose
    /// parameters are taken at `at` (a calendar's period: the one holding `at`).
    fn lua_args(&self, cost: u64, at: Ticks, cmd: &mut Cmd);

    /// Appends this algorithm as the module's commands name it (`fixed_window limit
    /// period [counting_denied]`, `token_bucket capacity rate period`, ...; a
    /// composite's members one after another), its parameters taken at `at`.
    fn module_args(&self, at: Ticks, cmd: &mut Cmd);

    /// A cost every larger cost decides and stores exactly like: one past every limit,
    /// burst and ban threshold. Clients clamp costs to it, so any `u64` cost works.
    fn lua_cost_cap(&self) -> u64;

    /// Fails if a parameter is outside the Lua range.
    fn lua_range(&self) -> Result<(), Error>;

    /// Fails if the scripts do not decide at the explicit time `now`: beyond the core's
    /// [`MAX_TICKS`], or a sliding log's beyond [`MAX_LUA_TICKS`].
    fn lua_now_range(&self, now: Ticks) -> Result<(), Error> {
        in_range("now", now, MAX_TICKS, LATEST)
    }

    /// How many keys a decision touches: one, or one per member of a composite.
    fn lua_keys(&self) -> usize {
        1
    }

    /// The argument of a decision on the buckets' fast path (`lua/bucket_fast.lua`), the
    /// function the client calls instead of the general one when this is `Some`: for a
    /// single bucket whose `capacity × period` is below 2^52 and a cost within its burst.
    fn lua_fast_arg(&self, ask: FastAsk) -> Option<Vec<u8>> {
        let _ = ask;
        None
    }

    /// The decision the fast path's reply to `ask` stands for: the stored state's arrival
    /// time before the call, relative to its `now`, in units of `1 / rate` tick (0:
    /// fresh). The core decides it again at a `now` of 0, which gives the same decision:
    /// a bucket's depends on the arrival time relative to `now` alone. `None` if
    /// `relative` is no state of this algorithm.
    fn lua_fast_decision(&self, relative: u64, ask: FastAsk) -> Option<Decision> {
        let _ = (relative, ask);
        None
    }

    /// Decodes the values of this algorithm's keys (`None`: no such key).
    fn lua_decode(&self, values: &[Option<Vec<u8>>]) -> Result<Option<Self::State>, DecodeError> {
        match values {
            [Some(bytes)] => self.decode(bytes).map(Some),
            _ => Ok(None),
        }
    }

    /// Encodes `state` as the values of this algorithm's keys, the inverse of
    /// [`lua_decode`](Self::lua_decode) (empty: no state for that key).
    fn lua_encode(&self, state: &Self::State) -> Vec<Vec<u8>> {
        vec![self.encode_to_vec(state)]
    }
}

/// The whole script for `algorithm`.
pub(crate) fn script<A: LuaAlgorithm>(algorithm: &A) -> String {
    let mut needed = Vec::new();
    algorithm.lua_files(&mut needed);
    // A bucket's fast calls are decided before the rest of the script defines anything.
    let fast = algorithm.lua_fast_arg(FastAsk::default()).is_some();
    let mut files = if fast {
        vec![BUCKET_FAST, FAST_HEAD, LIB]
    } else {
        vec![LIB]
    };
    for file in needed.into_iter().chain([COMPOSITE, MAIN]) {
        // A composite's members name the same file once each.
        if !files.contains(&file) {
            files.push(file);
        }
    }
    if fast {
        files.push(FAST_TAIL);
    }
    files.push(SCRIPT_TAIL);
    files.concat()
}

fn in_range(what: &'static str, value: u64, max: u64, reason: &'static str) -> Result<(), Error> {
    if value <= max {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            what,
            value,
            max,
            reason,
        })
    }
}

/// Why a ban or a composite member of several keys is refused.
const ONE_KEY: &str = "the most the Redis scripts nest: a composite's members are single limits";

/// Implements [`LuaAlgorithm`] for a window algorithm: its name, limit and period, then
/// the flags named after them, then its overdraft (the module's `overdraft N`, when not
/// 0); `$range` checks its limit and overdraft; `$late`, if given, why a time beyond
/// [`MAX_LUA_TICKS`] is refused (else it takes the core's times).
macro_rules! lua_window {
    ($type:ty, $kind:expr, $file:expr, $range:expr $(, $flag:ident)? $(; $late:expr)?) => {
        impl LuaAlgorithm for $type {
            fn lua_files(&self, files: &mut Vec<&'static str>) {
                files.push($file);
            }

            fn lua_args(&self, _cost: u64, _at: Ticks, cmd: &mut Cmd) {
                let params = self.params();
                cmd.arg($kind.script_name()).arg(params.limit).arg(params.period);
                $(cmd.arg(u8::from(self.$flag()));)?
                cmd.arg(self.overdraft());
            }

            fn module_args(&self, _at: Ticks, cmd: &mut Cmd) {
                let params = self.params();
                cmd.arg($kind.script_name()).arg(params.limit).arg(params.period);
                $(if self.$flag() {
                    cmd.arg("counting_denied");
                })?
                module_overdraft(self.overdraft(), cmd);
            }

            fn lua_cost_cap(&self) -> u64 {
                self.params().limit + 1
            }

            fn lua_range(&self) -> Result<(), Error> {
                $range(self.params().limit, self.overdraft())
            }

            $(fn lua_now_range(&self, now: Ticks) -> Result<(), Error> {
                in_range("now", now, MAX_LUA_TICKS, $late)
            })?
        }
    };
}

/// The module's words for an overdraft, when there is one.
fn module_overdraft(overdraft: u64, cmd: &mut Cmd) {
    if overdraft > 0 {
        cmd.arg("overdraft").arg(overdraft);
    }
}

/// A fixed window and a sliding counter take the core's whole range of limits.
fn any_limit(_: u64, _: u64) -> Result<(), Error> {
    Ok(())
}

/// A log holds up to its limit plus its overdraft.
fn log_limit(limit: u64, overdraft: u64) -> Result<(), Error> {
    // Named as the policy writes it: the limit alone, unless an overdraft adds to it.
    let what = if overdraft == 0 {
        "limit"
    } else {
        "limit + overdraft"
    };
    in_range(what, limit + overdraft, MAX_LUA_LOG_LIMIT, LOG_TOO_LONG)
}

lua_window!(
    FixedWindow,
    Kind::FixedWindow,
    FIXED_WINDOW,
    any_limit,
    counts_denied
);
lua_window!(
    SlidingCounter,
    Kind::SlidingCounter,
    SLIDING_COUNTER,
    any_limit
);
lua_window!(SlidingLog, Kind::SlidingLog, SLIDING_LOG, log_limit; LOG_TOO_LATE);

/// A calendar window in its period: its limit, overdraft, and the period's start and
/// end (the module's `calendar_window limit start end [overdraft N]`).
impl LuaAlgorithm for CalendarWindowAt {
    fn lua_files(&self, files: &mut Vec<&'static str>) {
        // It decides as the fixed window does.
        files.extend([FIXED_WINDOW, CALENDAR_WINDOW]);
    }

    fn lua_args(&self, _cost: u64, _at: Ticks, cmd: &mut Cmd) {
        let period = self.period();
        cmd.arg(Kind::CalendarWindow.script_name())
            .arg(self.window().limit())
            .arg(self.overdraft())
            .arg(period.start())
            .arg(period.end());
    }

    fn module_args(&self, _at: Ticks, cmd: &mut Cmd) {
        let period = self.period();
        cmd.arg(Kind::CalendarWindow.script_name())
            .arg(self.window().limit())
            .arg(period.start())
            .arg(period.end());
        module_overdraft(self.overdraft(), cmd);
    }

    fn lua_cost_cap(&self) -> u64 {
        self.window().limit() + 1
    }

    /// Every period the core takes (ending within 366 days of its last instant).
    fn lua_range(&self) -> Result<(), Error> {
        Ok(())
    }
}

/// A bucket's script arguments: its name, then one string of eight big-endian u64 (one
/// unpack in Lua instead of eight conversions): the burst, rate and period, then
/// `burst × period / rate` and `cost × period / rate` as (ticks, remainder), which need
/// 128-bit products, then the overdraft.
fn bucket_args(
    name: &str,
    params: BucketParams,
    (burst, overdraft): (u64, u64),
    cost: u64,
    cmd: &mut Cmd,
) {
    let BucketParams {
        rate, period: p, ..
    } = params;
    let scaled = |units: u64| {
        let product = u128::from(units) * u128::from(p);
        let ticks = u64::try_from(product / u128::from(rate)).unwrap_or(u64::MAX);
        // The remainder is below the rate, a u64.
        let frac = u64::try_from(product % u128::from(rate)).unwrap_or(0);
        (ticks, frac)
    };
    // A cost above the burst is denied before its scaled size is used.
    let cost = if cost > burst { 0 } else { cost };
    let (tol_t, tol_f) = scaled(burst);
    let (cost_t, cost_f) = scaled(cost);
    let mut packed = [0u8; 64];
    for (field, value) in packed
        .chunks_exact_mut(8)
        .zip([burst, rate, p, tol_t, tol_f, cost_t, cost_f, overdraft])
    {
        field.copy_from_slice(&value.to_be_bytes());
    }
    cmd.arg(name).arg(&packed[..]);
}

/// The bound of the fast path's quantities, in units of `1 / rate` tick: below it every
/// integer, and every sum of two, is a double (see `lua/bucket_fast.lua`).
const FAST_BOUND: u128 = 1 << 52;

/// The fast path's argument for `ask` of a bucket tagged `tag` (the core's encoding's),
/// waiting at most `wait`: tag, burst, rate, period, cost, max wait and now (`u64::MAX`:
/// the server's time), big-endian; `None` where the fast path cannot decide (`burst ×
/// period` beyond its bound, a cost beyond the burst).
fn fast_arg(
    tag: u8,
    params: BucketParams,
    burst: u64,
    ask: FastAsk,
    wait: Ticks,
) -> Option<Vec<u8>> {
    let FastAsk { cost, now, .. } = ask;
    // A later explicit time is decided on the general path (the fast one reads a time
    // beyond 2^52 as the server's).
    let late = now.is_some_and(|now| u128::from(now) > FAST_BOUND);
    if u128::from(burst) * u128::from(params.period) >= FAST_BOUND || cost > burst || late {
        return None;
    }
    let mut arg = Vec::with_capacity(49);
    arg.push(tag);
    for value in [
        burst,
        params.rate,
        params.period,
        cost,
        wait.min(MAX_WAIT),
        now.unwrap_or(u64::MAX),
    ] {
        arg.extend_from_slice(&value.to_be_bytes());
    }
    Some(arg)
}

/// The state a fast path's reply stands for, at a `now` of 0 (see
/// [`LuaAlgorithm::lua_fast_decision`]): decoded by the core from its encoding, so a
/// reply that is no state is refused as any stored bytes would be.
fn fast_state<A: Algorithm>(
    algorithm: &A,
    tag: u8,
    rate: u64,
    relative: u64,
) -> Option<Option<A::State>> {
    if relative == 0 {
        return Some(None);
    }
    let mut bytes = vec![1, tag];
    bytes.extend_from_slice(&(relative / rate).to_be_bytes());
    bytes.extend_from_slice(&(relative % rate).to_be_bytes());
    algorithm.decode(&bytes).ok().map(Some)
}

/// Implements [`LuaAlgorithm`] for a bucket whose burst is `capacity + $extra`, tagged
/// `$tag` in the core's encoding, whose checks wait at most `$wait`, with the overdraft
/// `$overdraft` gives.
macro_rules! lua_bucket {
    ($type:ty, $kind:expr, $extra:literal, $tag:literal, $wait:expr, $overdraft:expr) => {
        impl LuaAlgorithm for $type {
            fn lua_files(&self, files: &mut Vec<&'static str>) {
                files.push(BUCKET);
            }

            fn lua_args(&self, cost: u64, _at: Ticks, cmd: &mut Cmd) {
                let params = self.params();
                let burst = (params.capacity + $extra, $overdraft(self));
                bucket_args($kind.script_name(), params, burst, cost, cmd);
            }

            fn module_args(&self, _at: Ticks, cmd: &mut Cmd) {
                let params = self.params();
                cmd.arg($kind.script_name())
                    .arg(params.capacity)
                    .arg(params.rate)
                    .arg(params.period);
                module_overdraft($overdraft(self), cmd);
            }

            fn lua_cost_cap(&self) -> u64 {
                self.params().capacity + $extra + 1
            }

            /// The core's horizons (see `lua/bucket.lua`).
            fn lua_range(&self) -> Result<(), Error> {
                Ok(())
            }

            fn lua_fast_arg(&self, ask: FastAsk) -> Option<Vec<u8>> {
                let params = self.params();
                let wait = ask.max_wait.unwrap_or($wait);
                fast_arg($tag, params, params.capacity + $extra, ask, wait)
            }

            fn lua_fast_decision(&self, relative: u64, ask: FastAsk) -> Option<Decision> {
                let state = fast_state(self, $tag, self.params().rate, relative)?;
                Some(match ask.max_wait {
                    Some(wait) => self.reserve(state, 0, ask.cost, wait).0,
                    None => self.decide(state, 0, ask.cost).0,
                })
            }
        }
    };
}

lua_bucket!(TokenBucket, Kind::TokenBucket, 0, 4, 0, Report::overdraft);
lua_bucket!(LeakyBucket, Kind::LeakyBucket, 0, 5, 0, Report::overdraft);
// A pacing queue of capacity C admits C + 1 at once: one acts now, C wait; it takes no
// reports.
lua_bucket!(Pacing, Kind::Pacing, 1, 6, Ticks::MAX, |_| 0);

impl<A: LuaAlgorithm> LuaAlgorithm for Ban<A> {
    fn lua_files(&self, files: &mut Vec<&'static str>) {
        self.inner().lua_files(files);
        files.push(BAN);
    }

    fn lua_args(&self, cost: u64, at: Ticks, cmd: &mut Cmd) {
        cmd.arg("ban")
            .arg(self.threshold())
            .arg(self.window())
            .arg(self.duration());
        self.inner().lua_args(cost, at, cmd);
    }

    fn module_args(&self, at: Ticks, cmd: &mut Cmd) {
        cmd.arg("ban")
            .arg(self.threshold())
            .arg(self.window())
            .arg(self.duration());
        self.inner().module_args(at, cmd);
    }

    fn lua_cost_cap(&self) -> u64 {
        // Denied cost saturates at threshold + 1 (at most u64::MAX: the core's threshold
        // is below it), counted in halves in Lua beyond 2^52.
        self.inner().lua_cost_cap().max(self.threshold() + 1)
    }

    fn lua_range(&self) -> Result<(), Error> {
        in_range(
            "keys of a banned limit",
            self.inner().lua_keys() as u64,
            1,
            ONE_KEY,
        )?;
        self.inner().lua_range()
    }

    fn lua_now_range(&self, now: Ticks) -> Result<(), Error> {
        self.inner().lua_now_range(now)
    }
}

impl<A: LuaAlgorithm> LuaAlgorithm for Composite<A> {
    fn lua_files(&self, files: &mut Vec<&'static str>) {
        for member in self.members() {
            member.lua_files(files);
        }
    }

    fn lua_args(&self, cost: u64, at: Ticks, cmd: &mut Cmd) {
        cmd.arg(Kind::Composite.script_name())
            .arg(self.members().len());
        for member in self.members() {
            member.lua_args(cost, at, cmd);
        }
    }

    fn module_args(&self, at: Ticks, cmd: &mut Cmd) {
        for member in self.members() {
            member.module_args(at, cmd);
        }
    }

    fn lua_cost_cap(&self) -> u64 {
        self.members()
            .iter()
            .map(LuaAlgorithm::lua_cost_cap)
            .max()
            .unwrap_or(1)
    }

    fn lua_range(&self) -> Result<(), Error> {
        for member in self.members() {
            in_range(
                "keys of a composite member",
                member.lua_keys() as u64,
                1,
                ONE_KEY,
            )?;
            member.lua_range()?;
        }
        Ok(())
    }

    fn lua_now_range(&self, now: Ticks) -> Result<(), Error> {
        self.members().iter().try_for_each(|m| m.lua_now_range(now))
    }

    fn lua_keys(&self) -> usize {
        self.members().len()
    }

    fn lua_encode(&self, state: &Self::State) -> Vec<Vec<u8>> {
        self.members()
            .iter()
            .zip(state)
            .map(|(member, state)| {
                state
                    .as_ref()
                    .map(|s| member.encode_to_vec(s))
                    .unwrap_or_default()
            })
            .collect()
    }

    fn lua_decode(&self, values: &[Option<Vec<u8>>]) -> Result<Option<Self::State>, DecodeError> {
        let states = self
            .members()
            .iter()
            .zip(values)
            .map(|(member, value)| value.as_deref().map(|b| member.decode(b)).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(states.iter().any(Option::is_some).then_some(states))
    }
}
