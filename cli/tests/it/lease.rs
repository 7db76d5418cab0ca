//! `sluicegate lock` and `sluicegate lease`: exclusive, reentrant and fenced locks, the
//! leases of a concurrency policy, waiting, and bad input, on sled and Redis alike.

use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::{
    self, assert_contains, assert_exit, examples, lock, on_sled_and_redis, run_line, sluicegate,
    spawn, stderr, stdout, woken_by, Raw, GARBAGE,
};

/// Lock and lease commands on one backend: `sluicegate lock COMMAND NAME --owner O
/// --backend B ...`, or with a policy, `sluicegate lease COMMAND KEY --config C --policy P
/// --owner O --backend B ...`.
struct Leasing<'a> {
    backend: &'a str,
    /// `--config` and `--policy` for `lease`; none for `lock`.
    policy: Option<(&'a str, &'a str)>,
}

impl<'a> Leasing<'a> {
    /// `lock` commands on `backend`.
    fn lock(backend: &'a str) -> Self {
        Self {
            backend,
            policy: None,
        }
    }

    fn run(&self, command: &str, key: &str, owner: &str, more: &[&str]) -> Output {
        let mut args = match self.policy {
            Some((config, policy)) => vec![
                "lease", command, key, "--config", config, "--policy", policy,
            ],
            None => vec!["lock", command, key],
        };
        args.extend(["--owner", owner, "--backend", self.backend]);
        sluicegate([&args[..], more].concat())
    }

    /// The command at an explicit time.
    fn at(&self, command: &str, key: &str, owner: &str, now: u64, more: &[&str]) -> Output {
        self.run(
            command,
            key,
            owner,
            &[&["--now", &now.to_string()], more].concat(),
        )
    }
}

/// The token printed by an acquire.
fn token(out: &Output) -> u64 {
    stdout(out)
        .split_whitespace()
        .find_map(|f| f.strip_prefix("token="))
        .unwrap()
        .parse()
        .unwrap()
}

/// A lock at explicit times, on sled and on Redis with the same output and exit codes:
/// acquire prints its token and expiry; another owner gets exit 1; the holder re-enters;
/// release and renew only by the holder (else exit 1); the token grows with every
/// acquire/release cycle; `inspect` shows the holder.
#[test]
fn a_lock_is_exclusive_reentrant_and_its_token_grows_on_sled_and_redis() {
    on_sled_and_redis(|backend, _| a_lock_is_exclusive_reentrant_and_its_token_grows(backend));
}

fn a_lock_is_exclusive_reentrant_and_its_token_grows(backend: &str) {
    let l = Leasing::lock(backend);
    let b = ["--backend", backend];
    let out = l.at("acquire", "nightly", "a", 1_000_000, &["--ttl", "30s"]);
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "acquired token=1000000 expires_at_us=31000000 holds=1\n"
    );
    let out = l.at("acquire", "nightly", "b", 2_000_000, &["--ttl", "30s"]);
    assert_exit(&out, 1);
    assert_eq!(stdout(&out), "");
    assert_eq!(
        stderr(&out),
        "sluicegate: lock \"nightly\" is held by another owner; the earliest expires in 29 s unless renewed\n"
    );
    for command in ["release", "renew"] {
        let ttl: &[&str] = if command == "renew" {
            &["--ttl", "1m"]
        } else {
            &[]
        };
        let out = l.at(command, "nightly", "b", 2_000_000, ttl);
        assert_eq!(out.status.code(), Some(1), "{command}");
        assert_eq!(
            stderr(&out),
            "sluicegate: owner \"b\" holds no lease on lock \"nightly\" (never acquired, released, or expired)\n"
        );
    }
    let out = l.at("acquire", "nightly", "a", 3_000_000, &["--ttl", "30s"]);
    assert_eq!(
        stdout(&out),
        "acquired token=1000000 expires_at_us=33000000 holds=2\n"
    );
    let out = l.at("renew", "nightly", "a", 4_000_000, &["--ttl", "1m"]);
    assert_eq!(
        stdout(&out),
        "renewed token=1000000 expires_at_us=64000000 holds=2\n"
    );
    // On Redis a lock is of the lock family: its holders' modes and its queue shown.
    let sled = backend.starts_with("sled:");
    let (algorithm, held, mode) = if sled {
        ("lock", "of 1", "")
    } else {
        ("lock (unfair)", "(at most 1024 shared)", "exclusive, ")
    };
    let inspect = lock(&[&["inspect", "nightly", "--now", "4000000"], &b[..]].concat());
    let shown = stdout(&inspect);
    let encoded = &shown[shown.find("encoded     ").unwrap()..];
    assert_eq!(
        shown,
        format!(
            "key         nightly\nstored as   sluicegate:lock:nightly\nalgorithm   {algorithm}\nheld        1 {held}\nlease       owner \"a\", {mode}token 1000000, holds 2, expires in 1 min (at 64000000 µs)\nlast token  1000000\n{encoded}"
        )
    );
    let json = stdout(&lock(
        &[
            &["inspect", "nightly", "--now", "4000000", "--json"],
            &b[..],
        ]
        .concat(),
    ));
    let wanted = if sled {
        r#"{"key":"nightly","stored_key":"sluicegate:lock:nightly","algorithm":"lock","stored":true,"now_us":4000000,"limit":1,"held":1,"leases":[{"owner":"a","token":1000000,"expires_at_us":64000000,"holds":2}],"last_token":1000000,"encoded":"01"#
    } else {
        r#"{"key":"nightly","stored_key":"sluicegate:lock:nightly","algorithm":"lock","fair":false,"stored":true,"now_us":4000000,"limit":1024,"holders":[{"owner":"a","mode":"exclusive","token":1000000,"expires_at_us":64000000,"holds":2}],"queue":[],"last_token":1000000,"encoded":"01"#
    };
    assert!(json.starts_with(wanted), "{json}");
    let release = |owner: &str, t: u64| l.at("release", "nightly", owner, t, &[]);
    assert_eq!(
        stdout(&release("a", 5_000_000)),
        "released token=1000000 holds=1\n"
    );
    assert_eq!(
        stdout(&release("a", 5_000_000)),
        "released token=1000000 holds=0\n"
    );
    assert_exit(&release("a", 5_000_000), 1);
    // Acquire/release cycles, by turns of owners, even within one µs: tokens only grow.
    let mut last = 1_000_000;
    for (i, owner) in ["b", "a", "b", "c"].iter().enumerate() {
        let t = 5_000_000 + (i as u64 / 2);
        let token = token(&l.at("acquire", "nightly", owner, t, &["--ttl", "1s"]));
        assert!(token > last, "{token} after {last}");
        last = token;
        assert_exit(&release(owner, t), 0);
    }
    // Nobody holds it; the record keeps the last token while the clock has not passed it
    // (tokens ran ahead of the clock within one µs above).
    let out = lock(&[&["inspect", "nightly", "--now", "9000000"], &b[..]].concat());
    assert_contains(
        &stdout(&out),
        &format!("held        0 {held}\nlast token  5000003\n"),
    );
    // Released once the clock is past it: fresh again. Redis deletes the record (its
    // script is atomic); sled keeps it as its last token, so that a compare-and-swap
    // that read the key as absent earlier cannot grant a smaller token after a deletion.
    let out = l.at("acquire", "nightly", "a", 9_000_000, &["--ttl", "1s"]);
    assert_eq!(
        stdout(&out),
        "acquired token=9000000 expires_at_us=10000000 holds=1\n"
    );
    assert_exit(&release("a", 9_000_001), 0);
    let out = lock(&[&["inspect", "nightly", "--now", "9000001"], &b[..]].concat());
    let fresh = if sled {
        "held        0 of 1\nlast token  9000000\n"
    } else {
        "held       0 (at most 1024 shared)\nstate      fresh (nothing stored)\n"
    };
    assert_contains(&stdout(&out), fresh);
}

#[test]
fn processes_contend_for_one_lock_on_sled_and_redis() {
    on_sled_and_redis(|backend, _| processes_contend_for_one_lock(backend));
}

/// Two processes contend for one lock on the real clock (Redis: the server's): the second
/// gets exit 1, then 0 once the first released, with a larger token, cycle after cycle;
/// eight started at once on one store: exactly one gets the lock, the others exit 1
/// (none fails on a sled database being in use).
fn processes_contend_for_one_lock(backend: &str) {
    let l = Leasing::lock(backend);
    let acquire = |owner: &str| l.run("acquire", "job", owner, &["--ttl", "1m"]);
    let mut last = 0;
    for _cycle in 0..3 {
        let first = acquire("first");
        assert_exit(&first, 0);
        assert!(stdout(&first).starts_with("acquired token="));
        let second = acquire("second");
        assert_exit(&second, 1);
        let out = l.run("release", "job", "first", &[]);
        assert_exit(&out, 0);
        let second = acquire("second");
        assert_exit(&second, 0);
        assert!(token(&second) > token(&first));
        assert!(token(&first) > last, "{} after {last}", token(&first));
        last = token(&second);
        let out = l.run("release", "job", "second", &[]);
        assert_exit(&out, 0);
    }
    let children: Vec<_> = (0..8)
        .map(|i| {
            spawn([
                "lock",
                "acquire",
                "race",
                "--owner",
                &format!("p{i}"),
                "--ttl",
                "1m",
                "--backend",
                backend,
            ])
        })
        .collect();
    let codes: Vec<Option<i32>> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
            out.status.code()
        })
        .collect();
    assert_eq!(
        codes.iter().filter(|&&c| c == Some(0)).count(),
        1,
        "{codes:?}"
    );
}

#[test]
fn waiting_for_a_lock_is_bounded_on_sled_and_redis() {
    on_sled_and_redis(|backend, _| waiting_for_a_lock_is_bounded(backend));
}

/// `--wait` is bounded: a lock held for a minute is still refused (exit 1) after the
/// wait; a waiter gets the lock soon after the holder releases it, and when its holder's
/// lease expires.
fn waiting_for_a_lock_is_bounded(backend: &str) {
    let l = Leasing::lock(backend);
    let acquire = |owner: &str, ttl: &str, wait: &str| {
        let mut args = vec!["--ttl", ttl];
        if !wait.is_empty() {
            args.extend(["--wait", wait]);
        }
        l.run("acquire", "job", owner, &args)
    };
    assert_exit(&acquire("holder", "1m", ""), 0);
    let start = Instant::now();
    let out = acquire("waiter", "1m", "400ms");
    let waited = start.elapsed();
    assert_exit(&out, 1);
    assert_contains(
        &stderr(&out),
        "is held by another owner (after waiting 400 ms)",
    );
    // Never before its 400 ms; 10 s for a loaded machine, short of the holder's 1 min lease.
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    // Released while a waiter waits: the waiter gets it within its polling interval.
    let waiter = spawn([
        "lock",
        "acquire",
        "job",
        "--owner",
        "waiter",
        "--ttl",
        "1m",
        "--wait",
        "20s",
        "--backend",
        backend,
    ]);
    // 10 s: a loaded machine's wake-up, short of the waiter's 20 s and the lease's 1 min.
    woken_by(
        waiter,
        || l.run("release", "job", "holder", &[]),
        Duration::from_secs(10),
    );
    // A holder that never releases: its lease expires, and the waiter gets it then.
    let out = l.run("release", "job", "waiter", &[]);
    assert_exit(&out, 0);
    // Counted from before the lease was granted, so it cannot end sooner than 700 ms
    // (50 ms for the backend's clock against this one).
    let start = Instant::now();
    assert_exit(&acquire("crashed", "700ms", ""), 0);
    let out = acquire("next", "1m", "10s");
    assert_exit(&out, 0);
    assert!(
        start.elapsed() >= Duration::from_millis(650),
        "{:?}",
        start.elapsed()
    );
    // Before the waiter's own 10 s, however late; a lease that never ends fails here.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn leases_of_a_concurrency_policy_on_sled_and_redis() {
    on_sled_and_redis(|backend, _| leases_of_a_concurrency_policy(backend));
}

/// `lease` for a concurrency policy (`report-workers`: 3 in flight, lease 30s): three
/// owners in, the fourth refused until one leaves; `inspect` shows the holders; the
/// commands refuse rate policies, and rate commands refuse it; memory refuses, and an
/// unreachable Redis is exit 4.
fn leases_of_a_concurrency_policy(backend: &str) {
    let config = examples();
    let l = Leasing {
        backend,
        policy: Some((&config, "report-workers")),
    };
    let lease = |command: &str, owner: &str, t: u64| l.at(command, "export", owner, t, &[]);
    for (i, owner) in ["w1", "w2", "w3"].iter().enumerate() {
        let t = 1_000_000 * (i as u64 + 1);
        let out = lease("acquire", owner, t);
        assert_exit(&out, 0);
        assert_eq!(
            stdout(&out),
            format!(
                "acquired token={t} expires_at_us={} holds=1\n",
                t + 30_000_000
            )
        );
    }
    let out = lease("acquire", "w4", 4_000_000);
    assert_exit(&out, 1);
    assert_eq!(
        stderr(&out),
        "sluicegate: all 3 leases of key \"export\" of policy \"report-workers\" are held; the earliest expires in 27 s unless renewed\n"
    );
    let inspect = |args: &[&str]| {
        stdout(&sluicegate(
            [
                &[
                    "inspect",
                    "export",
                    "--config",
                    &config,
                    "--policy",
                    "report-workers",
                    "--backend",
                    backend,
                ],
                args,
            ]
            .concat(),
        ))
    };
    let text = inspect(&["--now", "4000000"]);
    assert!(
        text.starts_with(concat!(
            "key         export\n",
            "stored as   sluicegate:report-workers:export\n",
            "algorithm   concurrency\n",
            "held        3 of 3\n",
            "lease       owner \"w1\", token 1000000, holds 1, expires in 27 s (at 31000000 µs)\n",
            "lease       owner \"w2\", token 2000000, holds 1, expires in 28 s (at 32000000 µs)\n",
            "lease       owner \"w3\", token 3000000, holds 1, expires in 29 s (at 33000000 µs)\n",
            "last token  3000000\n",
        )),
        "{text}"
    );
    // Past w1's expiry it is no longer shown as held.
    let json = inspect(&["--now", "31000000", "--json"]);
    assert!(
        json.contains(r#""held":2,"leases":[{"owner":"w2""#),
        "{json}"
    );
    assert_exit(&lease("release", "w2", 5_000_000), 0);
    assert_exit(&lease("release", "w2", 5_000_000), 1);
    assert_eq!(
        stdout(&lease("acquire", "w4", 5_000_000)),
        "acquired token=5000000 expires_at_us=35000000 holds=1\n"
    );
    assert_eq!(
        stdout(&lease("renew", "w1", 6_000_000)),
        "renewed token=1000000 expires_at_us=36000000 holds=1\n"
    );
    // A crashed holder's slot comes back after its lease: w3's at 33 s.
    assert_exit(&lease("acquire", "w5", 32_999_999), 1);
    assert_exit(&lease("acquire", "w5", 33_000_000), 0);
    // Rate commands refuse a concurrency policy, lease commands a rate policy.
    let out = run_line(&format!(
        "check export --config {config} --policy report-workers --backend {backend}"
    ));
    assert_exit(&out, 2);
    assert_contains(&stderr(&out), "is a concurrency limit, not a rate");
    let daily = Leasing {
        backend,
        policy: Some((&config, "daily")),
    };
    let out = daily.run("acquire", "export", "w", &[]);
    assert_exit(&out, 2);
    assert_contains(&stderr(&out), "is a rate limit, not a concurrency limit");
    let unreachable = format!("redis://127.0.0.1:{}/", common::free_port());
    for (backend, code, wanted) in [
        ("memory", 2, "the memory backend forgets leases"),
        (unreachable.as_str(), 4, "redis is unavailable"),
    ] {
        let l = Leasing::lock(backend);
        let out = l.run("acquire", "x", "a", &["--ttl", "1s"]);
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        assert_contains(&stderr(&out), wanted);
    }
}

#[test]
fn bad_lease_input_and_foreign_states_change_nothing_on_sled_and_redis() {
    on_sled_and_redis(bad_lease_input_and_foreign_states_change_nothing);
}

/// Bad lease input is exit 2 before anything is stored; another state under a lock's key
/// is exit 4 with the library's message, and it is left as it is.
fn bad_lease_input_and_foreign_states_change_nothing(backend: &str, raw: &Raw) {
    let dir = tempfile::tempdir().unwrap();
    for (args, wanted) in [
        (
            vec!["--owner", "", "--ttl", "1s"],
            "'--owner <OWNER>': must be 1 to 128 bytes, got 0",
        ),
        (
            vec!["--owner", &"x".repeat(129), "--ttl", "1s"],
            "must be 1 to 128 bytes, got 129",
        ),
        (
            vec!["--owner", "a", "--ttl", "0s"],
            "--ttl must be between 1 µs and 366 days, got 0 s",
        ),
        (
            vec!["--owner", "a", "--ttl", "400d"],
            "--ttl must be between 1 µs and 366 days, got 400 days",
        ),
        (
            vec!["--owner", "a", "--ttl", "1s", "--now", "5", "--wait", "1s"],
            "--wait retries on the clock, so it cannot be used with --now",
        ),
    ] {
        let out = lock(&[&["acquire", "x", "--backend", backend][..], &args[..]].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(wanted), "{args:?}: {}", stderr(&out));
    }
    assert!(raw.is_empty());
    let bad = dir.path().join("bad.toml");
    let bad_policy = Leasing {
        backend,
        policy: Some((bad.to_str().unwrap(), "p")),
    };
    std::fs::write(
        &bad,
        "[policies.p]\nalgorithm = \"concurrency\"\nlimit = 0\nlease = \"1s\"\nperiod = \"1s\"\n",
    )
    .unwrap();
    let out = bad_policy.run("acquire", "k", "a", &[]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out)
            .ends_with("policy \"p\": concurrency takes `limit` and `lease`, not `period`\n"),
        "{}",
        stderr(&out)
    );
    std::fs::write(
        &bad,
        "[policies.p]\nalgorithm = \"concurrency\"\nlimit = 0\nlease = \"1s\"\n",
    )
    .unwrap();
    let out = bad_policy.run("acquire", "k", "a", &[]);
    assert!(
        stderr(&out)
            .ends_with("bad.toml:3:9: policy \"p\": `limit` must be between 1 and 1024, got 0\n"),
        "{}",
        stderr(&out)
    );
    // A rate state and garbage where locks live: refused by every lease command, kept.
    let l = Leasing::lock(backend);
    assert_exit(&l.run("acquire", "y", "a", &["--ttl", "1s"]), 0);
    raw.put(b"sluicegate:lock:x", GARBAGE);
    for args in [
        vec!["acquire", "x", "--owner", "a", "--ttl", "1s"],
        vec!["release", "x", "--owner", "a"],
        vec!["renew", "x", "--owner", "a", "--ttl", "1s"],
        vec!["inspect", "x"],
    ] {
        let out = lock(&[&args[..], &["--backend", backend]].concat());
        assert_eq!(out.status.code(), Some(4), "{args:?}");
        // On Redis a lock is of the lock family, whose state is a read-write lock's.
        let expected = match raw {
            Raw::Sled(_) => "a lease table's",
            Raw::Redis(_) => "a read-write lock's",
        };
        assert_eq!(
            stderr(&out),
            format!("sluicegate: key \"x\" holds a state sluicegate cannot read: state is a token bucket's, expected {expected}\n"),
            "{args:?}"
        );
    }
    assert_eq!(raw.get(b"sluicegate:lock:x").as_deref(), Some(GARBAGE));
}

/// The lock and lease commands on etcd: the same lines and exit codes as on sled and
/// Redis, on the server's clock (so no `--now`), the token a revision of the cluster.
#[test]
fn locks_and_leases_on_etcd() {
    let etcd = sluicegate_test_support::etcd::Etcd::start();
    let url = etcd.url();
    let l = Leasing::lock(&url);
    let out = l.run("acquire", "nightly", "a", &["--ttl", "30s"]);
    assert_exit(&out, 0);
    let first = token(&out);
    assert!(stdout(&out).ends_with(" holds=1\n"), "{}", stdout(&out));
    let out = l.run("acquire", "nightly", "b", &["--ttl", "30s"]);
    assert_exit(&out, 1);
    assert_contains(
        &stderr(&out),
        "sluicegate: lock \"nightly\" is held by another owner; the earliest expires in 2",
    );
    let out = l.run("release", "nightly", "b", &[]);
    assert_exit(&out, 1);
    assert_contains(
        &stderr(&out),
        "owner \"b\" holds no lease on lock \"nightly\"",
    );
    let out = l.run("acquire", "nightly", "a", &["--ttl", "30s"]);
    assert_eq!(token(&out), first);
    assert!(stdout(&out).ends_with(" holds=2\n"), "{}", stdout(&out));
    let out = l.run("renew", "nightly", "a", &["--ttl", "1m"]);
    assert!(stdout(&out).starts_with(&format!("renewed token={first} ")));
    let inspect = stdout(&lock(&["inspect", "nightly", "--backend", &url]));
    // A lock on etcd is of the lock family: its holder's mode is shown.
    assert_contains(
        &inspect,
        &format!("owner \"a\", exclusive, token {first}, holds 2"),
    );
    for holds in [1, 0] {
        let out = l.run("release", "nightly", "a", &[]);
        assert_eq!(
            stdout(&out),
            format!("released token={first} holds={holds}\n")
        );
    }
    let out = l.run("acquire", "nightly", "b", &["--ttl", "30s", "--wait", "1s"]);
    assert!(token(&out) > first);
    let out = l.run("acquire", "nightly", "c", &["--ttl", "1s", "--now", "5"]);
    assert_exit(&out, 2);
    assert_contains(&stderr(&out), "etcd leases expire on the server's clock");
    // A concurrency policy's leases: three slots, the fourth owner refused.
    let config = examples();
    let leases = Leasing {
        backend: &url,
        policy: Some((&config, "report-workers")),
    };
    for owner in ["w1", "w2", "w3"] {
        assert_exit(&leases.run("acquire", "export", owner, &[]), 0);
    }
    let out = leases.run("acquire", "export", "w4", &[]);
    assert_exit(&out, 1);
    assert_contains(&stderr(&out), "all 3 leases of key \"export\"");
    // A waiter is woken by etcd's watch when a slot frees, long before its bound.
    let waiter = spawn([
        "lease",
        "acquire",
        "export",
        "--config",
        &config,
        "--policy",
        "report-workers",
        "--owner",
        "w4",
        "--backend",
        &url,
        "--wait",
        "20s",
    ]);
    woken_by(
        waiter,
        || leases.run("release", "export", "w1", &[]),
        Duration::from_secs(10),
    );
    // Rate limits are not etcd's; an unreachable cluster is a backend failure.
    let out = sluicegate([
        "check",
        "k",
        "--config",
        &config,
        "--policy",
        "daily",
        "--backend",
        &url,
    ]);
    assert_exit(&out, 2);
    assert_contains(&stderr(&out), "etcd holds locks and leases only");
    let unreachable = format!("etcd://127.0.0.1:{}", common::free_port());
    let out = Leasing::lock(&unreachable).run("acquire", "x", "a", &["--ttl", "1s"]);
    assert_exit(&out, 4);
    assert_contains(&stderr(&out), "etcd is unavailable");
}

/// `--backend redis+sentinel://…`: decisions and a lock on the primary the sentinels
/// name (a primary, a replica and three sentinels on loopback), and on the replica they
/// promote once the primary is killed.
#[test]
fn decisions_and_locks_through_sentinel() {
    let mut set = sluicegate_test_support::sentinel::Sentinels::start();
    let url = set.url();
    let check = || {
        sluicegate([
            "check",
            "k",
            "--algorithm",
            "fixed-window",
            "--limit",
            "2",
            "--period",
            "1h",
            "--backend",
            &url,
        ])
    };
    let taken = Leasing::lock(&url).run("acquire", "nightly", "a", &["--ttl", "1h"]);
    assert_exit(&taken, 0);
    let first = token(&taken);
    assert_exit(&check(), 0);
    // Replication is asynchronous: the replica acknowledges both writes before the kill.
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(&mut set.primary.connection())
        .unwrap();
    assert_eq!(acked, 1, "the replica acknowledged the writes");
    set.primary.kill();
    sluicegate_test_support::wait_until("no promotion", || {
        set.primary_port() == Some(set.replica.port)
    });
    // The lock and the window replicated before the kill: the lock is still held, its
    // holder renews it, and one request of the window is left.
    let deadline = Instant::now() + Duration::from_secs(30);
    let renewed = loop {
        let out = Leasing::lock(&url).run("renew", "nightly", "a", &["--ttl", "1h"]);
        if out.status.code() == Some(0) || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_exit(&renewed, 0);
    assert_eq!(token(&renewed), first);
    assert_exit(
        &Leasing::lock(&url).run("acquire", "nightly", "b", &["--ttl", "1h"]),
        1,
    );
    assert_exit(&check(), 0);
    assert_exit(&check(), 1);
}
