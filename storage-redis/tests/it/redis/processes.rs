//! Many processes of many threads on one key admit exactly the bound.

use super::*;

/// Runs four copies of this test binary, each deciding with eight threads on one key at
/// a frozen `now`, and returns the admissions they report.
fn admitted_by_four_processes(server: &Server, algorithm: &str) -> u64 {
    let children: Vec<_> = (0..4)
        .map(|_| {
            common::spawn_child(
                "redis::processes::hammer_child",
                "SLUICEGATE_HAMMER",
                server,
                algorithm,
            )
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("the child runs");
            assert!(output.status.success());
            String::from_utf8_lossy(&output.stdout)
                .split_once("admitted ")
                .and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<u64>().ok())
                .expect("the child reports its admissions")
        })
        .sum()
}

#[test]
fn four_processes_of_eight_threads_admit_exactly_the_bound() {
    let server = Server::start();
    for algorithm in ["token_bucket", "fixed_window", "sliding_log", "composite"] {
        assert_eq!(
            admitted_by_four_processes(&server, algorithm),
            100,
            "{algorithm}"
        );
    }
}

#[test]
#[ignore = "run by four_processes_of_eight_threads_admit_exactly_the_bound"]
fn hammer_child() {
    let (url, algorithm) = common::child_task("SLUICEGATE_HAMMER");
    let algorithm = algorithm.as_str();
    let admitted = match algorithm {
        "token_bucket" => hammer(&url, algorithm, TokenBucket::new(100, 1, SECOND).unwrap()),
        "fixed_window" => hammer(&url, algorithm, FixedWindow::new(100, SECOND).unwrap()),
        "sliding_log" => hammer(&url, algorithm, SlidingLog::new(100, SECOND).unwrap()),
        _ => hammer(
            &url,
            algorithm,
            Composite::new(vec![
                TokenBucket::new(100, 1, SECOND).unwrap(),
                TokenBucket::new(150, 1, SECOND).unwrap(),
            ])
            .unwrap(),
        ),
    };
    println!("admitted {admitted}");
}

/// Eight threads, 20 decisions each, on one key at a frozen time.
fn hammer<A: LuaAlgorithm>(url: &str, prefix: &str, algorithm: A) -> u64
where
    RedisLimiter<A>: Sync,
{
    let limiter = RedisLimiter::new(algorithm).unwrap().with_prefix(prefix);
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                    (0..20)
                        .filter(|_| common::allowed_at(&limiter, &mut con, b"hot", NOW))
                        .count() as u64
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    })
}
