//! `sluicegate lock` on Redis and etcd as the lock family: shared and exclusive holders,
//! a fair queue whose waiters are woken in turn by the releases, and the flags refused
//! where the family is not held (sled).

use std::process::{Child, Output};
use std::time::{Duration, Instant};

use crate::common::{assert_contains, assert_exit, lock, spawn, stderr, stdout, Server};

fn on(backend: &str, args: &[&str]) -> Output {
    lock(&[args, &["--backend", backend]].concat())
}

/// Polls `lock inspect` until `wanted` is in it, failing after 10 s.
fn until_inspect_shows(backend: &str, name: &str, fair: bool, wanted: &str) -> String {
    let start = Instant::now();
    loop {
        let mut args = vec!["inspect", name];
        if fair {
            args.push("--fair");
        }
        let shown = stdout(&on(backend, &args));
        if shown.contains(wanted) {
            return shown;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never {wanted:?}: {shown}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn readers_share_a_lock_a_writer_waits_for_them_on_redis() {
    let redis = Server::start();
    let url = redis.url();
    let at = |owner: &str, now: &str, more: &[&str]| {
        let base = [
            "acquire", "doc", "--owner", owner, "--ttl", "30s", "--now", now,
        ];
        on(&url, &[&base[..], more].concat())
    };
    let a = at("a", "1000000", &["--mode", "shared"]);
    assert_eq!(
        stdout(&a),
        "acquired token=1000000 expires_at_us=31000000 holds=1\n"
    );
    let b = at("b", "1000000", &["--mode", "shared"]);
    assert_eq!(
        stdout(&b),
        "acquired token=1000001 expires_at_us=31000000 holds=1\n"
    );
    let w = at("w", "2000000", &[]);
    assert_exit(&w, 1);
    assert_eq!(
        stderr(&w),
        "sluicegate: lock \"doc\" is held by another owner; the earliest expires in 29 s unless renewed\n"
    );
    let shown = stdout(&on(&url, &["inspect", "doc", "--now", "2000000"]));
    assert_contains(&shown, "held        2 (at most 1024 shared)\n");
    assert_contains(&shown, "lease       owner \"a\", shared, token 1000000, holds 1, expires in 29 s (at 31000000 µs)\n");
    assert_contains(
        &shown,
        "lease       owner \"b\", shared, token 1000001, holds 1, ",
    );
    for owner in ["a", "b"] {
        let out = on(
            &url,
            &["release", "doc", "--owner", owner, "--now", "3000000"],
        );
        assert_exit(&out, 0);
    }
    let w = at("w", "3000000", &[]);
    assert_eq!(
        stdout(&w),
        "acquired token=3000000 expires_at_us=33000000 holds=1\n"
    );
    // A writer's token is above every reader's; a reader is refused while it holds.
    assert_exit(&at("a", "3000000", &["--mode", "shared"]), 1);
    let json = stdout(&on(&url, &["inspect", "doc", "--now", "3000000", "--json"]));
    assert_contains(
        &json,
        r#""holders":[{"owner":"w","mode":"exclusive","token":3000000,"expires_at_us":33000000,"holds":1}],"queue":[]"#,
    );
}

fn waiter(url: &str, owner: &str) -> Child {
    let args = [
        "lock",
        "acquire",
        "q",
        "--owner",
        owner,
        "--ttl",
        "1m",
        "--wait",
        "20s",
        "--fair",
        "--backend",
        url,
    ];
    spawn(args)
}

/// Two waiters on a fair lock take places 1 and 2; each release hands the lock to the
/// next in line, and only to it.
#[test]
fn a_fair_lock_hands_over_in_queue_order_on_redis() {
    let redis = Server::start();
    let url = redis.url();
    let take = on(
        &url,
        &["acquire", "q", "--owner", "holder", "--ttl", "1m", "--fair"],
    );
    assert_exit(&take, 0);
    let first = waiter(&url, "w1");
    until_inspect_shows(
        &url,
        "q",
        true,
        "waiter      owner \"w1\", exclusive, place 1, ",
    );
    let mut second = waiter(&url, "w2");
    let shown = until_inspect_shows(
        &url,
        "q",
        true,
        "waiter      owner \"w2\", exclusive, place 2, ",
    );
    assert_contains(&shown, "algorithm   lock (fair)\n");
    // A newcomer does not overtake the queue, nor does a try.
    assert_exit(
        &on(
            &url,
            &["acquire", "q", "--owner", "late", "--ttl", "1m", "--fair"],
        ),
        1,
    );
    assert_exit(
        &on(&url, &["release", "q", "--owner", "holder", "--fair"]),
        0,
    );
    let out = first.wait_with_output().unwrap();
    assert_exit(&out, 0);
    assert!(
        stdout(&out).starts_with("acquired token="),
        "{}",
        stdout(&out)
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        second.try_wait().unwrap().is_none(),
        "w2 granted while w1 holds"
    );
    assert_exit(&on(&url, &["release", "q", "--owner", "w1", "--fair"]), 0);
    let out = second.wait_with_output().unwrap();
    assert_exit(&out, 0);
    let shown = until_inspect_shows(&url, "q", true, "lease       owner \"w2\", exclusive");
    assert!(!shown.contains("waiter"), "{shown}");
}

/// On etcd: readers share, a writer's `--wait` queues behind them (watching the last
/// reader's key), a reader after it queues behind it, and each release hands over.
#[test]
fn readers_share_and_a_waiting_writer_is_woken_in_turn_on_etcd() {
    let etcd = sluicegate_test_support::etcd::Etcd::start();
    let url = etcd.url();
    let take = |owner: &str, more: &[&str]| {
        let base = ["acquire", "q", "--owner", owner, "--ttl", "1m"];
        on(&url, &[&base[..], more].concat())
    };
    let a = take("a", &["--mode", "shared"]);
    assert_exit(&a, 0);
    assert!(stdout(&a).starts_with("acquired token="), "{}", stdout(&a));
    let b = take("b", &["--mode", "shared", "--fair"]);
    assert!(stdout(&b).ends_with(" holds=1\n"), "{}", stdout(&b));
    let writer = waiter(&url, "w");
    until_inspect_shows(
        &url,
        "q",
        false,
        "waiter      owner \"w\", exclusive, place ",
    );
    // A reader after a waiting writer waits behind it; so does a try.
    assert_exit(&take("late", &["--mode", "shared"]), 1);
    let mut reader = spawn([
        "lock",
        "acquire",
        "q",
        "--owner",
        "r",
        "--ttl",
        "1m",
        "--wait",
        "20s",
        "--mode",
        "shared",
        "--backend",
        &url,
    ]);
    let shown = until_inspect_shows(&url, "q", false, "waiter      owner \"r\", shared");
    assert_contains(&shown, "algorithm   lock (fair)\n");
    assert_contains(&shown, "q/rw/\n");
    for owner in ["a", "b"] {
        assert_exit(&on(&url, &["release", "q", "--owner", owner]), 0);
    }
    let out = writer.wait_with_output().unwrap();
    assert_exit(&out, 0);
    let token = |out: &Output| {
        let line = stdout(out);
        let token = line.split_whitespace().nth(1).unwrap();
        token.trim_start_matches("token=").parse::<u64>().unwrap()
    };
    assert!(
        token(&out) > token(&b),
        "a writer's token is above the readers'"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(reader.try_wait().unwrap().is_none(), "r granted beside w");
    assert_exit(&on(&url, &["release", "q", "--owner", "w"]), 0);
    let out = reader.wait_with_output().unwrap();
    assert_exit(&out, 0);
    until_inspect_shows(&url, "q", false, "lease       owner \"r\", shared");
}

#[test]
fn modes_and_fairness_need_redis() {
    let dir = tempfile::tempdir().unwrap();
    let sled = format!("sled:{}", dir.path().join("db").display());
    for more in [&["--mode", "shared"][..], &["--fair"]] {
        let base = ["acquire", "x", "--owner", "a", "--ttl", "1s"];
        let out = on(&sled, &[&base[..], more].concat());
        assert_exit(&out, 2);
        assert_contains(
            &stderr(&out),
            "--mode shared and --fair need --backend redis://",
        );
    }
}
