//! `lock` and `lease`: leases with fencing tokens, for shell scripts. Success prints one
//! line of `name=value` fields (`acquired token=17 expires_at_us=... holds=1`); a lease
//! held by others, or not held by the owner, is exit code 1 with a message on stderr.

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde::Serialize;
use tollgate_core::limits::MAX_OWNER_LEN;
use tollgate_core::{Clock, Concurrency, KeyDisplay, LeaseState, MonotonicClock, Ticks};

use crate::backend::Open;
use crate::policy::{self, human, Duration, Style};
use crate::{instant, json_line, output, BackendArgs, Failure, PolicyArgs};

/// How long a lease command waits for a sled database another command has open: each
/// holds it for milliseconds, so commands of concurrent scripts take turns.
const IN_USE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// While waiting (`--wait`), the longest sleep between attempts: a lease released early
/// is noticed within this, one expiring is retried at its expiry.
const POLL: Ticks = 100_000;

#[derive(Debug, Subcommand)]
pub enum LockCommand {
    /// Take the lock NAME for --owner; prints `acquired token=N expires_at_us=T holds=H`.
    /// Exit 1 if another owner holds it (after --wait). The same owner re-enters it.
    Acquire {
        #[command(flatten)]
        on: LockArgs,
        #[command(flatten)]
        ttl: Ttl,
        #[command(flatten)]
        wait: Wait,
    },
    /// Release NAME once (freed when released as often as acquired); prints
    /// `released token=N holds=H`. Exit 1 if --owner does not hold it.
    Release {
        #[command(flatten)]
        on: LockArgs,
    },
    /// Extend --owner's hold on NAME to now + --ttl; exit 1 if it does not hold it (it
    /// expired: stop acting on it).
    Renew {
        #[command(flatten)]
        on: LockArgs,
        #[command(flatten)]
        ttl: Ttl,
    },
    /// Print the lock's holder, its expiry and the last fencing token (--json for JSON).
    Inspect {
        /// The lock's name.
        name: String,
        #[command(flatten)]
        backend: BackendArgs,
        /// Read at this time (µs since the Unix epoch) instead of now.
        #[arg(long, value_parser = instant, allow_negative_numbers = true)]
        now: Option<Ticks>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum LeaseCommand {
    /// Take one of the policy's leases on KEY for --owner, for the policy's `lease`;
    /// prints `acquired token=N expires_at_us=T holds=H`. Exit 1 if all are held.
    Acquire {
        #[command(flatten)]
        on: LeaseArgs,
        #[command(flatten)]
        wait: Wait,
    },
    /// Release --owner's lease on KEY once; exit 1 if it holds none.
    Release {
        #[command(flatten)]
        on: LeaseArgs,
    },
    /// Extend --owner's lease on KEY by the policy's `lease`; exit 1 if it holds none.
    Renew {
        #[command(flatten)]
        on: LeaseArgs,
    },
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock's name; stored as PREFIX + "lock:" + NAME.
    name: String,
    #[command(flatten)]
    holder: Holder,
}

#[derive(Debug, Args)]
pub struct LeaseArgs {
    /// The key (a resource, a tenant); stored as PREFIX + policy + ":" + KEY.
    key: String,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    holder: Holder,
}

#[derive(Debug, Args)]
pub struct Holder {
    /// Who holds the lease (1 to 128 bytes): give each process or job its own.
    #[arg(long, value_parser = owner)]
    owner: String,
    #[command(flatten)]
    backend: BackendArgs,
    /// Act at this time (µs since the Unix epoch, at most 2^62; 2^52 on Redis) instead of
    /// now, the backend's clock (on Redis the server's).
    #[arg(long, value_parser = instant, allow_negative_numbers = true)]
    now: Option<Ticks>,
}

#[derive(Debug, Args)]
pub struct Ttl {
    /// How long the lease lasts unless renewed or released, e.g. 30s (at most 366 days).
    #[arg(long, value_parser = policy::parse_duration, allow_hyphen_values = true)]
    ttl: Duration,
}

#[derive(Debug, Args)]
pub struct Wait {
    /// If held, keep trying for up to this long (retrying when the earliest lease
    /// expires, and every 100 ms in case one is released sooner).
    #[arg(long, value_parser = policy::parse_duration, allow_hyphen_values = true)]
    wait: Option<Duration>,
}

/// What a lease command does.
#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire { ttl: Ticks, wait: Option<Ticks> },
    Release,
    Renew { ttl: Ticks },
}

/// `tollgate lock ...`: a lease table of one holder per name.
pub fn lock(command: LockCommand) -> Result<ExitCode, Failure> {
    let (on, op) = match command {
        LockCommand::Acquire { on, ttl, wait } => {
            let ttl = ttl_flag(ttl.ttl)?;
            (
                on,
                Op::Acquire {
                    ttl,
                    wait: wait.wait.map(|w| w.0),
                },
            )
        }
        LockCommand::Release { on } => (on, Op::Release),
        LockCommand::Renew { on, ttl } => {
            let ttl = ttl_flag(ttl.ttl)?;
            (on, Op::Renew { ttl })
        }
        LockCommand::Inspect {
            name,
            backend,
            now,
            json,
        } => {
            let open = lease_open(&backend, "lock", false)?;
            return inspect(Inspect {
                key: &name,
                model: Concurrency::lock(),
                algorithm: "lock",
                open,
                now,
                json,
            });
        }
    };
    call(&Call {
        what: format!("lock {}", KeyDisplay(on.name.as_bytes())),
        key: &on.name,
        model: Concurrency::lock(),
        open: lease_open(&on.holder.backend, "lock", matches!(op, Op::Acquire { .. }))?,
        holder: &on.holder,
        op,
    })
}

/// `tollgate lease ...`: the leases of a concurrency policy, each for its `lease`.
pub fn lease(command: LeaseCommand) -> Result<ExitCode, Failure> {
    // The ttl comes from the policy, so it is filled in once the policy is loaded.
    let (on, op) = match command {
        LeaseCommand::Acquire { on, wait } => (
            on,
            Op::Acquire {
                ttl: 0,
                wait: wait.wait.map(|w| w.0),
            },
        ),
        LeaseCommand::Release { on } => (on, Op::Release),
        LeaseCommand::Renew { on } => (on, Op::Renew { ttl: 0 }),
    };
    let loaded = on.policy.load()?;
    let (model, ttl) = loaded.limiter.leases(&loaded.name)?;
    let op = match op {
        Op::Acquire { wait, .. } => Op::Acquire { ttl, wait },
        Op::Renew { .. } => Op::Renew { ttl },
        Op::Release => Op::Release,
    };
    call(&Call {
        what: format!(
            "key {} of policy {:?}",
            KeyDisplay(on.key.as_bytes()),
            loaded.name
        ),
        key: &on.key,
        model,
        open: lease_open(
            &on.holder.backend,
            &loaded.name,
            matches!(op, Op::Acquire { .. }),
        )?,
        holder: &on.holder,
        op,
    })
}

/// The store options of a lease command: keys under `PREFIX name:`, a database created
/// only by an acquire, other commands' use of it waited out briefly.
fn lease_open(backend: &BackendArgs, name: &str, creates: bool) -> Result<Open, Failure> {
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

/// `--ttl` in the core's range, in the units written.
fn ttl_flag(ttl: Duration) -> Result<Ticks, Failure> {
    policy::check_lease(ttl.0).map_err(|e| {
        let problem = policy::param_problem(&e, Style::Flags);
        Failure::Input(problem.message.replace("--lease", "--ttl"))
    })
}

/// One lease call, ready to run.
struct Call<'a> {
    /// `lock "x"`, or `key "k" of policy "p"`: for messages.
    what: String,
    key: &'a str,
    model: Concurrency,
    open: Open,
    holder: &'a Holder,
    op: Op,
}

fn call(c: &Call) -> Result<ExitCode, Failure> {
    let holder = c.holder;
    if let (Some(_), Op::Acquire { wait: Some(_), .. }) = (holder.now, c.op) {
        return Err(Failure::Input(
            "--wait retries on the clock, so it cannot be used with --now".into(),
        ));
    }
    // The local clock only times --wait; each call is at --now or on the backend's clock.
    let now = || MonotonicClock::new().now();
    // Each attempt opens the store and closes it again, so that while this command
    // waits, the holder's `release` can open the (one-process) sled database.
    let store = || c.open.leases(c.model);
    let not_held = |e: Failure| match e {
        Failure::NotHeld => Failure::Refused(format!(
            "owner {} holds no lease on {} (never acquired, released, or expired)",
            KeyDisplay(holder.owner.as_bytes()),
            c.what
        )),
        e => e,
    };
    let line = match c.op {
        Op::Acquire { ttl, wait } => {
            let deadline = wait.map(|w| now().saturating_add(w));
            loop {
                let acquired = store()?.acquire(c.key, holder.now, &holder.owner, ttl)?;
                if let Some(grant) = acquired.grant {
                    break format!(
                        "acquired token={} expires_at_us={} holds={}",
                        grant.token, grant.expires_at, grant.holds
                    );
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
                std::thread::sleep(std::time::Duration::from_micros(pause));
            }
        }
        Op::Release => {
            let grant = store()?
                .release(c.key, holder.now, &holder.owner)
                .map_err(not_held)?;
            format!("released token={} holds={}", grant.token, grant.holds)
        }
        Op::Renew { ttl } => {
            let grant = store()?
                .renew(c.key, holder.now, &holder.owner, ttl)
                .map_err(not_held)?;
            format!(
                "renewed token={} expires_at_us={} holds={}",
                grant.token, grant.expires_at, grant.holds
            )
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(output)?;
    Ok(ExitCode::SUCCESS)
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
    let store = i.open.leases(i.model)?;
    let state: Option<LeaseState> = store.state(i.key)?;
    let now = match i.now {
        Some(now) => now,
        None => store.now()?,
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
        encoded: state.as_ref().map(|s| {
            i.model
                .encode_to_vec(s)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        }),
        leases,
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    if i.json {
        json_line(&mut out, &view)?;
    } else {
        view.write_text(&mut out).map_err(output)?;
    }
    out.flush().map_err(output)?;
    Ok(ExitCode::SUCCESS)
}

impl View {
    fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let mut rows = vec![
            ("key", self.key.clone()),
            ("stored as", self.stored_key.clone()),
            ("algorithm", self.algorithm.to_owned()),
            ("held", format!("{} of {}", self.held, self.limit)),
        ];
        for lease in &self.leases {
            rows.push((
                "lease",
                format!(
                    "owner {}, token {}, holds {}, expires in {} (at {} µs)",
                    KeyDisplay(lease.owner.as_bytes()),
                    lease.token,
                    lease.holds,
                    human(lease.expires_at_us.saturating_sub(self.now_us)),
                    lease.expires_at_us
                ),
            ));
        }
        match (self.last_token, &self.encoded) {
            (Some(token), Some(encoded)) => {
                rows.push(("last token", token.to_string()));
                rows.push(("encoded", encoded.clone()));
            }
            _ => rows.push(("state", "fresh (nothing stored)".into())),
        }
        crate::write_rows(out, &rows)
    }
}
