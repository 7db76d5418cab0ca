//! Leases with fencing tokens for shell scripts, shared by `lock`, `lease` and
//! `inspect`: the holder's flags, one acquire, release or renew call (waiting when
//! asked), and the view of a lease key. Success prints one line of `name=value` fields
//! (`acquired token=17 expires_at_us=... holds=1`); a lease held by others, or not held
//! by the owner, is exit code 1 with a message on stderr.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use sluicegate_core::limits::MAX_OWNER_LEN;
use sluicegate_core::{
    Clock, Concurrency, Grant, KeyDisplay, LeaseRequest, LeaseState, MonotonicClock, Ticks,
};

use crate::args::{instant, BackendArgs};
use crate::backend::Open;
use crate::failure::{output, Failure};
use crate::output::{hex, show};
use sluicegate_policy::{human, PolicyDuration};

/// How long a lease command waits for a sled database another command has open: each
/// holds it for milliseconds, so commands of concurrent scripts take turns.
const IN_USE_WAIT: Duration = Duration::from_secs(2);

/// While waiting (`--wait`), the longest sleep between attempts: a lease released early
/// is noticed within this, one expiring is retried at its expiry.
const POLL: Ticks = 100_000;

#[derive(Debug, Args)]
pub struct Holder {
    /// Who holds the lease (1 to 128 bytes): give each process or job its own.
    #[arg(long, value_parser = owner)]
    pub owner: String,
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Act at this time (µs since the Unix epoch, at most 2^62; 2^52 on Redis) instead of
    /// now, the backend's clock (on Redis the server's).
    #[arg(long, value_parser = instant, allow_negative_numbers = true)]
    pub now: Option<Ticks>,
}

#[derive(Debug, Args)]
pub struct Wait {
    /// If held, keep trying for up to this long (retrying when the earliest lease
    /// expires, and every 100 ms in case one is released sooner).
    #[arg(long, value_parser = sluicegate_policy::parse_duration, allow_hyphen_values = true)]
    pub wait: Option<PolicyDuration>,
}

/// What a lease command does.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    Acquire { ttl: Ticks, wait: Option<Ticks> },
    Release,
    Renew { ttl: Ticks },
}

/// The backend options of a lease command: keys under `PREFIX name:`, a database created
/// only by an acquire, other commands' use of it waited out briefly.
pub fn lease_open(backend: &BackendArgs, name: &str, creates: bool) -> Result<Open, Failure> {
    Ok(Open {
        in_use_wait: IN_USE_WAIT,
        ..backend.open(name, creates)?
    })
}

/// An owner the core accepts: 1 to `MAX_OWNER_LEN` bytes.
fn owner(text: &str) -> Result<String, String> {
    let len = text.len() as u64;
    if (1..=MAX_OWNER_LEN).contains(&len) {
        Ok(text.to_owned())
    } else {
        Err(format!("must be 1 to {MAX_OWNER_LEN} bytes, got {len}"))
    }
}

/// One lease call, ready to run.
pub struct Call<'a> {
    /// `lock "x"`, or `key "k" of policy "p"`: for messages.
    pub what: String,
    pub key: &'a str,
    pub model: Concurrency,
    pub open: Open,
    pub holder: &'a Holder,
    pub op: Op,
}

/// `--wait` with `--now` is refused: a wait runs on the clock.
pub fn check_wait(holder: &Holder, op: Op) -> Result<(), Failure> {
    if let (Some(_), Op::Acquire { wait: Some(_), .. }) = (holder.now, op) {
        return Err(Failure::Input(
            "--wait retries on the clock, so it cannot be used with --now".into(),
        ));
    }
    Ok(())
}

/// A release or renew refused for want of a lease, worded with the owner and `what`.
pub fn not_held(holder: &Holder, what: &str, e: Failure) -> Failure {
    match e {
        Failure::NotHeld => Failure::Refused(format!(
            "owner {} holds no lease on {what} (never acquired, released, or expired)",
            KeyDisplay(holder.owner.as_bytes()),
        )),
        e => e,
    }
}

/// The line a grant prints.
pub fn acquired_line(grant: Grant) -> String {
    format!(
        "acquired token={} expires_at_us={} holds={}",
        grant.token, grant.expires_at, grant.holds
    )
}

/// The line a renewal prints.
pub fn renewed_line(grant: Grant) -> String {
    format!(
        "renewed token={} expires_at_us={} holds={}",
        grant.token, grant.expires_at, grant.holds
    )
}

/// Prints `line` as the command's one line of output.
pub fn print_line(line: &str) -> Result<ExitCode, Failure> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(output)?;
    Ok(ExitCode::SUCCESS)
}

pub fn call(c: &Call) -> Result<ExitCode, Failure> {
    let holder = c.holder;
    check_wait(holder, c.op)?;
    // The local clock only times --wait; each call is at --now or on the backend's clock.
    let now = || MonotonicClock::new().now();
    // Each attempt opens the backend and closes it again, so that while this command
    // waits, the holder's `release` can open the (one-process) sled database.
    let leases = || c.open.leases(c.model);
    let request = LeaseRequest::new(c.key).owner(&holder.owner);
    let request = holder.now.map_or(request, |now| request.at(now));
    let not_held = |e: Failure| not_held(holder, &c.what, e);
    let line = match c.op {
        Op::Acquire { ttl, wait } => {
            let deadline = wait.map(|w| now().saturating_add(w));
            loop {
                let left = deadline.map_or(0, |d| d.saturating_sub(now()));
                let acquired = leases()?.acquire_within(&request.ttl(ttl), left)?;
                if let Some(grant) = acquired.grant {
                    break acquired_line(grant);
                }
                // Denied: the time until the earliest lease expires.
                let retry = acquired.decision.retry_after.unwrap_or(0);
                let left = deadline.map_or(0, |d| d.saturating_sub(now()));
                if left == 0 {
                    let held = if c.model.max() == 1 {
                        format!("{} is held by another owner", c.what)
                    } else {
                        format!("all {} leases of {} are held", c.model.max(), c.what)
                    };
                    let waited =
                        wait.map_or(String::new(), |w| format!(" (after waiting {})", human(w)));
                    return Err(Failure::Refused(format!(
                        "{held}{waited}; the earliest expires in {} unless renewed",
                        human(retry)
                    )));
                }
                let pause = retry.min(POLL).min(left).max(1);
                std::thread::sleep(Duration::from_micros(pause));
            }
        }
        Op::Release => {
            let grant = leases()?.release(&request).map_err(not_held)?;
            format!("released token={} holds={}", grant.token, grant.holds)
        }
        Op::Renew { ttl } => {
            let grant = leases()?.renew(&request.ttl(ttl)).map_err(not_held)?;
            renewed_line(grant)
        }
    };
    print_line(&line)
}

/// `inspect` of a lease key: its holders, their expiries, the last fencing token.
pub struct Inspect<'a> {
    pub key: &'a str,
    pub model: Concurrency,
    /// `lock`, or `concurrency` for a policy's leases.
    pub algorithm: &'static str,
    pub open: Open,
    pub now: Option<Ticks>,
    pub json: bool,
}

/// What `inspect` prints for a lease key; `--json` prints these fields.
#[derive(Debug, Serialize)]
struct View {
    key: String,
    stored_key: String,
    /// `lock` or `concurrency`.
    algorithm: &'static str,
    /// Whether anything is stored (false: fresh).
    stored: bool,
    now_us: Ticks,
    /// The most leases held at once.
    limit: u64,
    /// Leases unexpired at `now_us`.
    held: u64,
    /// Leases unexpired at `now_us`, oldest grant first.
    leases: Vec<Holding>,
    /// The last fencing token granted (null when fresh).
    last_token: Option<u64>,
    /// The canonical encoding, in hex (null when fresh).
    encoded: Option<String>,
}

#[derive(Debug, Serialize)]
struct Holding {
    owner: String,
    token: u64,
    expires_at_us: Ticks,
    holds: u64,
}

pub fn inspect(i: Inspect) -> Result<ExitCode, Failure> {
    let leases = i.open.leases(i.model)?;
    let state: Option<LeaseState> = leases.state(i.key)?;
    let now = match i.now {
        Some(now) => now,
        None => leases.now()?,
    };
    let leases: Vec<Holding> = state
        .iter()
        .flat_map(LeaseState::leases)
        .filter(|lease| lease.expires_at() > now)
        .map(|lease| Holding {
            owner: String::from_utf8_lossy(lease.owner()).into_owned(),
            token: lease.token(),
            expires_at_us: lease.expires_at(),
            holds: lease.holds(),
        })
        .collect();
    let view = View {
        key: i.key.to_owned(),
        stored_key: format!("{}{}", i.open.namespace, i.key),
        algorithm: i.algorithm,
        stored: state.is_some(),
        now_us: now,
        limit: i.model.max(),
        held: leases.len() as u64,
        last_token: state.as_ref().map(LeaseState::last_token),
        encoded: state.as_ref().map(|s| hex(&i.model.encode_to_vec(s))),
        leases,
    };
    show(i.json, &view, &view.rows())?;
    Ok(ExitCode::SUCCESS)
}

impl View {
    fn rows(&self) -> Vec<(&'static str, String)> {
        let mut rows = vec![
            ("key", self.key.clone()),
            ("stored as", self.stored_key.clone()),
            ("algorithm", self.algorithm.to_owned()),
            ("held", format!("{} of {}", self.held, self.limit)),
        ];
        for lease in &self.leases {
            let owner = KeyDisplay(lease.owner.as_bytes());
            let line = format!(
                "owner {owner}, token {}, holds {}, ",
                lease.token, lease.holds
            );
            rows.push(("lease", line + &expires(self.now_us, lease.expires_at_us)));
        }
        stored_rows(&mut rows, self.last_token, &self.encoded);
        rows
    }
}

/// When an entry seen at `now` expires, as `inspect` words it.
pub fn expires(now: Ticks, at: Ticks) -> String {
    format!("expires in {} (at {at} µs)", human(at.saturating_sub(now)))
}

/// The last rows of `inspect`: the last token and the encoding, or that nothing is stored.
pub fn stored_rows(
    rows: &mut Vec<(&'static str, String)>,
    last_token: Option<u64>,
    encoded: &Option<String>,
) {
    match (last_token, encoded) {
        (Some(token), Some(encoded)) => {
            rows.push(("last token", token.to_string()));
            rows.push(("encoded", encoded.clone()));
        }
        _ => rows.push(("state", "fresh (nothing stored)".into())),
    }
}
