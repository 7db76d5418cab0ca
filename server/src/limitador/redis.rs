//! limitador's counters in Redis (`--decisions`): a request's counters checked and
//! counted in one script (`counters.lua`), atomically, so replicas sharing a limit never
//! overshoot it (limitador's own checks and updates are separate calls); the calls of
//! concurrent requests coalesced into one pipeline, as the policies' decisions are; while
//! Redis is unreachable, what `--fail` says.

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

/// The counters' script: each request's call one `EVALSHA` of a batch's pipeline.
#[derive(Debug)]
pub(crate) struct Script;

impl Carrier for Script {
    type Call = Cmd;
    type Answer = Result<Vec<u64>, DecideError>;

    fn send<'a>(
        &'a self,
        con: &'a ReconnectingAsync,
        calls: Vec<Cmd>,
    ) -> BoxFuture<'a, Vec<Self::Answer>> {
        Box::pin(async move {
            let mut con = con.clone();
            let mut pipe = redis::pipe();
            for cmd in calls {
                pipe.add_command(cmd);
            }
            let sent: Result<Vec<redis::RedisResult<Vec<u64>>>, _> =
                pipe.ignore_errors().query_async(&mut con).await;
            let replies = match sent {
                Ok(replies) if replies.len() == pipe.len() => replies,
                Ok(_) => return vec![Err(short()); pipe.len()],
                Err(e) => return vec![Err(classify(e)); pipe.len()],
            };
            let mut answers = Vec::with_capacity(replies.len());
            for (reply, cmd) in replies.into_iter().zip(pipe.cmd_iter()) {
                answers.push(match reply {
                    // The server lost the script (a restart, `SCRIPT FLUSH`): this call
                    // did not run; it goes again with the script loaded.
                    Err(e) if e.code() == Some("NOSCRIPT") => again(&mut con, cmd).await,
                    reply => reply.map_err(classify),
                });
            }
            answers
        })
    }
}

/// `cmd` sent again after loading the script.
async fn again(con: &mut ReconnectingAsync, cmd: &Cmd) -> Result<Vec<u64>, DecideError> {
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
        let mode_arg = match mode {
            Mode::CheckAndUpdate => "cu",
            Mode::Check => "c",
            Mode::Update => "u",
        };
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(SCRIPT.get_hash()).arg(counters.len());
        for counter in counters {
            cmd.arg(&counter.key);
        }
        cmd.arg(mode_arg)
            .arg(delta)
            .arg(now.map_or_else(String::new, |n| n.to_string()));
        for counter in counters {
            let (limit, period) = counter
                .window
                .map_or((0, 0), |w| (w.params().limit, w.params().period));
            cmd.arg(limit).arg(period);
        }
        let reply = match self.coalescer.send(&self.script, cmd).await {
            Ok(reply) => reply,
            Err(coalesce::Error::Redis(e)) => return Err(e),
            Err(e @ coalesce::Error::Stopped) => return Err(DecideError::Backend(e.to_string())),
        };
        let figures = reply
            .get(1..)
            .unwrap_or_default()
            .chunks_exact(2)
            .map(|pair| Figures {
                remaining: pair[0],
                expires_in: pair[1],
            })
            .collect::<Vec<_>>();
        if figures.len() != counters.len() {
            return Err(short());
        }
        Ok(Counted {
            admitted: reply.first() == Some(&1),
            figures,
        })
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
