//! limitador's counters in Redis (`--decisions`): a request's counters checked and
//! counted in one script (`counters.lua`), atomically, so replicas sharing a limit never
//! overshoot it (limitador's own checks and updates are separate calls); the calls of
//! concurrent requests coalesced, those of one namespace in one `EVALSHA`, as the
//! policies' decisions are; while Redis is unreachable, what `--fail` says.

use std::sync::{Arc, LazyLock};

use futures_util::future::BoxFuture;
use redis::{Cmd, RedisError};
use sluicegate_core::{FailPolicy, Ticks};
use sluicegate_redis::ReconnectingAsync;

use super::counters::{Counted, Counter, Counters, Figures, Listed, Mode};
use super::memory::InMemory;
use crate::limiters::coalesce::{self, Carrier, Coalescer};
use crate::limiters::DecideError;

static SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("counters.lua")));

/// The counters in Redis, and the answer while it is away.
#[derive(Debug)]
pub(crate) struct InRedisCounters {
    con: ReconnectingAsync,
    /// The requests' calls, sent together when they arrive together.
    coalescer: Coalescer<Script>,
    script: Arc<Script>,
    fail: FailPolicy<InMemory>,
}

/// The counters' script: a batch's calls of one namespace in one `EVALSHA`.
#[derive(Debug)]
pub(crate) struct Script;

/// One request's call, as [`Counters::apply`] takes it.
#[derive(Debug)]
pub(crate) struct Call {
    counters: Vec<Counter>,
    delta: u64,
    mode: Mode,
    now: Option<Ticks>,
}

impl Call {
    /// Its namespace's hash tag (see `served::prefix`), which names its Redis slot.
    fn tag(&self) -> &str {
        let key = self.counters.first().map_or("", |c| c.key.as_str());
        key.split_once('{')
            .and_then(|(_, rest)| rest.split_once('}'))
            .map_or(key, |(tag, _)| tag)
    }
}

/// The script's call for `calls` (see `counters.lua`).
fn command(calls: &[Call]) -> Cmd {
    let keys = calls.iter().map(|c| c.counters.len()).sum::<usize>();
    let mut cmd = Cmd::with_capacity(3 + keys * 3 + calls.len() * 4, 64 * (keys + calls.len()));
    cmd.arg("EVALSHA").arg(SCRIPT.get_hash()).arg(keys);
    for counter in calls.iter().flat_map(|c| &c.counters) {
        cmd.arg(&counter.key);
    }
    for call in calls {
        let mode = match call.mode {
            Mode::CheckAndUpdate => "cu",
            Mode::Check => "c",
            Mode::Update => "u",
        };
        cmd.arg(call.counters.len()).arg(mode).arg(call.delta);
        match call.now {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        for counter in &call.counters {
            let (limit, period) = counter
                .window
                .map_or((0, 0), |w| (w.params().limit, w.params().period));
            cmd.arg(limit).arg(period);
        }
    }
    cmd
}

/// The first `n` bytes of `reply`, taken off it.
fn take<'r>(reply: &mut &'r [u8], n: usize) -> Option<&'r [u8]> {
    let (head, rest) = reply.split_at_checked(n)?;
    *reply = rest;
    Some(head)
}

/// A u64 taken off `reply`.
fn take_u64(reply: &mut &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(take(reply, 8)?.try_into().ok()?))
}

/// `call`'s answer, its record taken off the script's `reply`; `None` where it is short.
fn answer(call: &Call, reply: &mut &[u8]) -> Option<Result<Counted, DecideError>> {
    if take(reply, 1)? == [0] {
        let admitted = take(reply, 1)? == [1];
        let figures = (call.counters.iter())
            .map(|_| {
                let remaining = take_u64(reply)?;
                let expires_in = take_u64(reply)?;
                Some(Figures {
                    remaining,
                    expires_in,
                })
            })
            .collect::<Option<_>>()?;
        return Some(Ok(Counted { admitted, figures }));
    }
    let len = u32::from_be_bytes(take(reply, 4)?.try_into().ok()?);
    let text = String::from_utf8_lossy(take(reply, len as usize)?).into_owned();
    Some(Err(DecideError::Backend(text)))
}

impl Carrier for Script {
    type Call = Call;
    type Answer = Result<Counted, DecideError>;

    fn send<'a>(
        &'a self,
        con: &'a ReconnectingAsync,
        calls: Vec<Call>,
    ) -> BoxFuture<'a, Vec<Self::Answer>> {
        Box::pin(async move {
            let mut con = con.clone();
            // A command per run of one namespace's calls: its keys in one slot.
            let runs: Vec<&[Call]> = calls.chunk_by(|a, b| a.tag() == b.tag()).collect();
            let mut pipe = redis::pipe();
            for run in &runs {
                pipe.add_command(command(run));
            }
            let sent: Result<Vec<redis::RedisResult<Vec<u8>>>, _> =
                pipe.ignore_errors().query_async(&mut con).await;
            let replies = match sent {
                Ok(replies) if replies.len() == runs.len() => replies,
                Ok(_) => return vec![Err(short()); calls.len()],
                Err(e) => return vec![Err(classify(e)); calls.len()],
            };
            let mut all = Vec::with_capacity(calls.len());
            for ((reply, cmd), run) in replies.into_iter().zip(pipe.cmd_iter()).zip(runs) {
                let reply = match reply {
                    // The server lost the script (a restart, `SCRIPT FLUSH`): these calls
                    // did not run; they go again with the script loaded.
                    Err(e) if e.code() == Some("NOSCRIPT") => again(&mut con, cmd).await,
                    reply => reply.map_err(classify),
                };
                match reply {
                    Ok(bytes) => {
                        let mut rest = bytes.as_slice();
                        let answered =
                            |call| answer(call, &mut rest).unwrap_or_else(|| Err(short()));
                        all.extend(run.iter().map(answered));
                    }
                    Err(e) => all.extend(run.iter().map(|_| Err(e.clone()))),
                }
            }
            all
        })
    }
}

/// `cmd` sent again after loading the script.
async fn again(con: &mut ReconnectingAsync, cmd: &Cmd) -> Result<Vec<u8>, DecideError> {
    SCRIPT.load_async(con).await.map_err(classify)?;
    cmd.query_async(con).await.map_err(classify)
}

/// The script's answer did not match its call.
fn short() -> DecideError {
    DecideError::Backend("the counters' script answered short".into())
}

impl InRedisCounters {
    /// Counters through `con`, their calls queued on `coalescer`; `fail` answers while
    /// Redis is unreachable.
    pub(crate) fn new(
        con: ReconnectingAsync,
        coalescer: Coalescer<Script>,
        fail: FailPolicy<InMemory>,
    ) -> Self {
        Self {
            con,
            coalescer,
            script: Arc::new(Script),
            fail,
        }
    }

    /// [`Counters::apply`], without the fail policy.
    async fn apply_at(
        &self,
        counters: &[Counter],
        delta: u64,
        mode: Mode,
        now: Option<Ticks>,
    ) -> Result<Counted, DecideError> {
        let call = Call {
            counters: counters.to_vec(),
            delta,
            mode,
            now,
        };
        match self.coalescer.send(&self.script, call).await {
            Ok(counted) => Ok(counted),
            Err(coalesce::Error::Redis(e)) => Err(e),
            Err(e @ coalesce::Error::Stopped) => Err(DecideError::Backend(e.to_string())),
        }
    }
}

/// `text` with Redis's glob characters escaped, to match itself alone.
fn glob_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An anchored window's count from its stored bytes (see `counters.lua`).
fn stored_count(bytes: &[u8]) -> Option<u64> {
    let count: [u8; 8] = bytes.get(10..18)?.try_into().ok()?;
    (bytes.len() == 18 && bytes[..2] == [1, 11]).then(|| u64::from_be_bytes(count))
}

/// An error from Redis: unreachable (the fail policy answers) or a refusal.
fn classify(e: RedisError) -> DecideError {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        DecideError::Unavailable(e.to_string())
    } else {
        DecideError::Backend(e.to_string())
    }
}

impl Counters for InRedisCounters {
    /// Found by `SCAN`, each read with `GET` and `PTTL`.
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<Listed>, DecideError>> {
        Box::pin(async move {
            let mut con = self.con.clone();
            let pattern = format!("{}*", glob_escaped(prefix));
            let (mut cursor, mut listed) = (0u64, Vec::new());
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut con)
                    .await
                    .map_err(classify)?;
                for key in keys {
                    let (bytes, ttl): (Option<Vec<u8>>, i64) = redis::pipe()
                        .get(&key)
                        .pttl(&key)
                        .query_async(&mut con)
                        .await
                        .map_err(classify)?;
                    let count = bytes.as_deref().and_then(stored_count);
                    if let (Some(count), Ok(ttl_ms)) = (count, u64::try_from(ttl)) {
                        listed.push((key, count, ttl_ms * 1000));
                    }
                    if listed.len() >= max {
                        return Ok(listed);
                    }
                }
                cursor = next;
                if cursor == 0 {
                    return Ok(listed);
                }
            }
        })
    }

    fn apply<'a>(
        &'a self,
        counters: &'a [Counter],
        delta: u64,
        mode: Mode,
        now: Option<Ticks>,
    ) -> BoxFuture<'a, Result<Counted, DecideError>> {
        Box::pin(async move {
            match self.apply_at(counters, delta, mode, now).await {
                Err(DecideError::Unavailable(why)) => {
                    tracing::warn!(error = %why, "limitador's counters: Redis unavailable");
                    let full = |admitted| Counted {
                        admitted,
                        figures: counters
                            .iter()
                            .map(|c| Figures {
                                remaining: c.window.map_or(0, |w| w.params().limit),
                                expires_in: c.window.map_or(0, |w| w.params().period),
                            })
                            .collect(),
                    };
                    match &self.fail {
                        FailPolicy::Open => Ok(full(true)),
                        FailPolicy::Closed => Ok(full(false)),
                        FailPolicy::Local(local) => local.apply(counters, delta, mode, now).await,
                        _ => Err(DecideError::Unavailable(why)),
                    }
                }
                other => other,
            }
        })
    }
}
