//! A process deciding over sled is killed with SIGKILL at a random moment; the reopened
//! database must not forget what it admitted (flush per decision), or forget at most one
//! flush interval's admissions (background flushing).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use sluicegate_core::Request;
use sluicegate_sled::{Durability, SledLimiter};
use sluicegate_tests::{crash_limit, CRASH_KEY, CRASH_NOW};

/// Runs the child until a random moment in `60..360` ms after its first admission,
/// kills it, and returns (admissions it reported, admissions the database remembers).
fn crash_once(mode: &str, flush_every_ms: u64, pause_us: u64) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sled-crash-child"))
        .args([
            dir.path().to_str().unwrap(),
            mode,
            &flush_every_ms.to_string(),
            &pause_us.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the child admits").unwrap();
    assert_eq!(first, "1");
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let run_for = Duration::from_millis(60 + u64::from(nanos) % 300);
    let started = Instant::now();
    let mut reported = 1;
    while started.elapsed() < run_for {
        reported = lines
            .next()
            .expect("the child keeps deciding")
            .unwrap()
            .parse()
            .unwrap();
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Whatever the child printed before it died is still in the pipe.
    for line in lines {
        reported = line.unwrap().parse().unwrap();
    }
    let db = sled::open(dir.path()).unwrap();
    let limiter = SledLimiter::new(
        db.open_tree("crash").unwrap(),
        crash_limit(),
        Durability::EveryDecision,
    );
    let remaining = limiter
        .peek(&Request::new(CRASH_KEY).cost(0).at(CRASH_NOW))
        .unwrap()
        .remaining;
    let durable = crash_limit().params().limit - remaining;
    (reported, durable)
}

#[test]
fn flush_per_decision_forgets_no_admission() {
    for _ in 0..3 {
        let (reported, durable) = crash_once("flush", 1000, 0);
        println!("flush: reported {reported}, durable {durable}");
        assert!(reported > 1);
        // Every reported admission is on disk; at most one more was flushed but not
        // yet reported when the kill came.
        assert!(
            durable >= reported && durable <= reported + 1,
            "{reported} vs {durable}"
        );
    }
}

#[test]
fn background_flushing_forgets_at_most_one_interval() {
    const FLUSH_EVERY_MS: u64 = 50;
    const PAUSE_US: u64 = 500;
    for _ in 0..3 {
        let (reported, durable) = crash_once("background", FLUSH_EVERY_MS, PAUSE_US);
        println!("background: reported {reported}, durable {durable}");
        assert!(durable <= reported + 1);
        // At most one decision per pause: the admissions of one flush interval, with
        // 100 ms allowed for the flush itself and scheduling.
        let bound = (FLUSH_EVERY_MS + 100) * 1000 / PAUSE_US;
        assert!(
            reported - durable.min(reported) <= bound,
            "lost {} > {bound}",
            reported - durable
        );
    }
}
