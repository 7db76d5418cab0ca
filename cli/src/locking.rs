//! `lock` on Redis and etcd: the lock family (shared and exclusive holders, fair or not)
//! of `RedisRwLock`, whose `--wait` sleeps in `BLPOP` until the call that makes its turn
//! wakes it, and of `EtcdRwLock` (always fair), whose `--wait` watches its predecessor's
//! key, with the same lines and exit codes as the exclusive leases elsewhere.

use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use sluicegate_core::rwlock::{LockMode, RwLease, RwState};
use sluicegate_core::{KeyDisplay, LeaseRequest, Ticks, SECOND};

use crate::failure::Failure;
use crate::family::{Change, Family};
use crate::leasing::{
    acquired_line, check_wait, expires, not_held, print_line, renewed_line, stored_rows, Call,
    Inspect, Op,
};
use crate::output::{hex, show};
use sluicegate_policy::human;

/// A waiter's place lasts this long unless it asks again, at half of it: a killed
/// waiter holds up a fair queue this long at most.
pub const PLACE_TTL: Ticks = 2 * SECOND;

/// `c` on the lock family, through `con`, asking for `mode`.
pub fn call(c: &Call, lock: &mut dyn Family, mode: LockMode) -> Result<ExitCode, Failure> {
    let holder = c.holder;
    check_wait(holder, c.op)?;
    let request = LeaseRequest::new(c.key).owner(&holder.owner);
    let request = holder.now.map_or(request, |now| request.at(now));
    let mut change = |request: &LeaseRequest<'_>, change| {
        (lock.change(request, change)).map_err(|e| not_held(holder, &c.what, e))
    };
    let line = match c.op {
        Op::Acquire { ttl, wait } => {
            let request = request.ttl(ttl);
            let acquired = lock.acquire(&request, mode, wait.map(Duration::from_micros))?;
            let Some(grant) = acquired.grant else {
                let held = match mode {
                    LockMode::Exclusive => format!("{} is held by another owner", c.what),
                    _ => format!("{} is held by a writer, or a writer waits", c.what),
                };
                let waited =
                    wait.map_or(String::new(), |w| format!(" (after waiting {})", human(w)));
                let retry = acquired.decision.retry_after.unwrap_or(0);
                return Err(Failure::Refused(format!(
                    "{held}{waited}; the earliest expires in {} unless renewed",
                    human(retry)
                )));
            };
            acquired_line(grant)
        }
        Op::Release => {
            let grant = change(&request, Change::Release)?;
            format!("released token={} holds={}", grant.token, grant.holds)
        }
        Op::Renew { ttl } => renewed_line(change(&request.ttl(ttl), Change::Renew)?),
    };
    print_line(&line)
}

/// What `lock inspect` prints on the family's hosts; `--json` prints these fields.
#[derive(Debug, Serialize)]
struct View {
    key: String,
    stored_key: String,
    algorithm: &'static str,
    fair: bool,
    /// Whether anything is stored (false: fresh).
    stored: bool,
    now_us: Ticks,
    /// The most shared holders at once.
    limit: u64,
    /// Leases unexpired at `now_us`, oldest grant first.
    holders: Vec<Holding>,
    /// Places unexpired at `now_us`, first in line first.
    queue: Vec<Waiting>,
    last_token: Option<u64>,
    encoded: Option<String>,
}

#[derive(Debug, Serialize)]
struct Holding {
    owner: String,
    mode: &'static str,
    token: u64,
    expires_at_us: Ticks,
    holds: u64,
}

#[derive(Debug, Serialize)]
struct Waiting {
    owner: String,
    mode: &'static str,
    place: u64,
    expires_at_us: Ticks,
}

fn mode_name(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Exclusive => "exclusive",
        _ => "shared",
    }
}

/// `lock inspect` on the family's hosts: the holders with their modes, and the queue.
pub fn inspect(i: &Inspect, lock: &mut dyn Family) -> Result<ExitCode, Failure> {
    let state: Option<RwState> = lock.state(i.key)?;
    let now = match i.now {
        Some(now) => now,
        None => lock.now()?,
    };
    let lease = lock.lease();
    let live = state.as_ref();
    let holders = live.iter().flat_map(|s| s.holders());
    let queue = live.iter().flat_map(|s| s.waiters());
    let view = View {
        key: i.key.to_owned(),
        stored_key: lock.stored(&i.open.namespace, i.key),
        algorithm: "lock",
        fair: lease.is_fair(),
        stored: state.is_some(),
        now_us: now,
        limit: lease.max_holders(),
        holders: holders
            .filter(|h| h.expires_at() > now)
            .map(|h| Holding {
                owner: String::from_utf8_lossy(h.owner()).into_owned(),
                mode: mode_name(h.mode()),
                token: h.token(),
                expires_at_us: h.expires_at(),
                holds: h.holds(),
            })
            .collect(),
        queue: queue
            .filter(|w| w.expires_at() > now)
            .map(|w| Waiting {
                owner: String::from_utf8_lossy(w.owner()).into_owned(),
                mode: mode_name(w.mode()),
                place: w.place(),
                expires_at_us: w.expires_at(),
            })
            .collect(),
        last_token: state.as_ref().map(RwState::last_token),
        encoded: state.as_ref().map(|s| hex(&lease.encode_to_vec(s))),
    };
    show(i.json, &view, &view.rows())?;
    Ok(ExitCode::SUCCESS)
}

impl View {
    fn rows(&self) -> Vec<(&'static str, String)> {
        let fairness = if self.fair { "fair" } else { "unfair" };
        let mut rows = vec![
            ("key", self.key.clone()),
            ("stored as", self.stored_key.clone()),
            ("algorithm", format!("{} ({fairness})", self.algorithm)),
            (
                "held",
                format!("{} (at most {} shared)", self.holders.len(), self.limit),
            ),
        ];
        let expires = |at: Ticks| expires(self.now_us, at);
        for h in &self.holders {
            let owner = KeyDisplay(h.owner.as_bytes());
            let line = format!(
                "owner {owner}, {}, token {}, holds {}, ",
                h.mode, h.token, h.holds
            );
            rows.push(("lease", line + &expires(h.expires_at_us)));
        }
        for w in &self.queue {
            let owner = KeyDisplay(w.owner.as_bytes());
            let line = format!("owner {owner}, {}, place {}, ", w.mode, w.place);
            rows.push(("waiter", line + &expires(w.expires_at_us)));
        }
        stored_rows(&mut rows, self.last_token, &self.encoded);
        rows
    }
}

/// The lock's parameters from the flags: up to 1024 readers or one writer.
pub fn lease(fair: bool) -> RwLease {
    let lease = RwLease::read_write();
    if fair {
        lease.fair()
    } else {
        lease
    }
}
