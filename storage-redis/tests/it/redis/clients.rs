//! Batches, the asynchronous client and a 3-node cluster.

use super::*;

#[test]
fn batches_decide_every_request_in_one_round_trip() {
    let server = Server::start();
    let mut con = server.connection();
    let limiter = RedisLimiter::new(TokenBucket::new(2, 1, SECOND).unwrap()).unwrap();
    // The first batch finds no script on the server and falls back to EVAL.
    redis::cmd("SCRIPT").arg("FLUSH").exec(&mut con).unwrap();
    let keys: Vec<Vec<u8>> = (0..64)
        .map(|i| format!("user:{}", i % 16).into_bytes())
        .collect();
    let requests: Vec<Request> = keys.iter().map(Request::new).collect();
    let results = limiter.check_batch(&mut con, &requests).unwrap();
    let admitted = results
        .iter()
        .filter(|r| r.as_ref().unwrap().allowed)
        .count();
    assert_eq!(admitted, 16 * 2);
    // A request on a corrupt key fails alone, with the core's reason.
    redis::cmd("SET")
        .arg("b")
        .arg("hello")
        .exec(&mut con)
        .unwrap();
    let mixed = ["a", "b", "c"].map(Request::new);
    let results = limiter.check_batch(&mut con, &mixed).unwrap();
    assert!(results[0].as_ref().unwrap().allowed && results[2].as_ref().unwrap().allowed);
    assert_eq!(
        results[1].as_ref().unwrap_err().to_string(),
        "key \"b\" holds a state sluicegate cannot read: \
         state encoding version 104 is not supported (this build reads version 1)"
    );
}

#[tokio::test]
async fn the_async_client_decides_like_the_sync_one() {
    let server = Server::start();
    let mut con = common::connect_multiplexed(&server).await;
    let limiter = RedisLimiter::new(TokenBucket::new(2, 1, SECOND).unwrap()).unwrap();
    let mut allowed = Vec::new();
    for _ in 0..3 {
        allowed.push(
            limiter
                .check_request_async(&mut con, &Request::new(b"k").at(NOW))
                .await
                .unwrap()
                .allowed,
        );
    }
    assert_eq!(allowed, [true, true, false]);
    let first = limiter
        .reserve_async(&mut con, &Request::new(b"r").cost(2), 0)
        .await
        .unwrap();
    assert!(first.allowed && first.delay == 0);
    let later = limiter
        .reserve_async(&mut con, &Request::new(b"r").cost(2), 10 * SECOND)
        .await
        .unwrap();
    assert!(later.allowed && later.delay > SECOND, "{later:?}");
    let keys: Vec<Vec<u8>> = (0..40)
        .map(|i| format!("b{}", i % 10).into_bytes())
        .collect();
    let requests: Vec<Request> = keys.iter().map(Request::new).collect();
    let results = limiter.check_batch_async(&con, &requests).await;
    assert_eq!(
        results
            .iter()
            .filter(|r| r.as_ref().unwrap().allowed)
            .count(),
        20
    );
}

#[test]
fn a_cluster_takes_composites_and_batches_without_crossslot() {
    let cluster = Cluster::start();
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let mut con = client.get_connection().unwrap();
    let limits = Composite::new(vec![
        FixedWindow::new(3, SECOND).unwrap(),
        FixedWindow::new(5, 60 * SECOND).unwrap(),
    ])
    .unwrap();
    let composite = RedisLimiter::new(limits).unwrap().with_prefix("rl:");
    for user in 0..20 {
        let key = format!("user:{user}").into_bytes();
        let allowed: Vec<bool> = (0..4)
            .map(|_| common::allowed_at(&composite, &mut con, &key, NOW))
            .collect();
        assert_eq!(allowed, [true, true, true, false], "user {user}");
    }
    // The library was loaded on every primary (the keys span them) and taken.
    assert_eq!(composite.route(), Some(sluicegate_redis::Route::Functions));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let con = client.get_async_connection().await.unwrap();
        let limiter = RedisLimiter::new(TokenBucket::new(2, 1, SECOND).unwrap()).unwrap();
        let ips = (0..200).map(|i| format!("ip:{}", i % 50));
        assert_eq!(batch_admitted(&limiter, &con, ips).await, 50 * 2);
        assert_eq!(limiter.route(), Some(sluicegate_redis::Route::Functions));
        let buckets =
            Composite::new(vec![TokenBucket::new(3, 1, 60 * SECOND).unwrap(); 2]).unwrap();
        let composite = RedisLimiter::new(buckets).unwrap();
        let teams = (0..40).map(|i| format!("team:{}", i % 10));
        assert_eq!(batch_admitted(&composite, &con, teams).await, 10 * 3);
    });
}

/// How many requests of cost 1 on `keys` one asynchronous batch admits, none failing
/// (a cluster's batch spanning slots goes call by call, never `CROSSSLOT`).
async fn batch_admitted<A: LuaAlgorithm, C: redis::aio::ConnectionLike + Clone>(
    limiter: &RedisLimiter<A>,
    con: &C,
    keys: impl Iterator<Item = String>,
) -> usize {
    let keys: Vec<Vec<u8>> = keys.map(String::into_bytes).collect();
    let requests: Vec<Request> = keys.iter().map(Request::new).collect();
    let results = limiter.check_batch_async(con, &requests).await;
    results
        .iter()
        .map(|r| r.as_ref().expect("no CROSSSLOT"))
        .filter(|d| d.allowed)
        .count()
}
