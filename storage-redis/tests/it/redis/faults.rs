//! An unreachable or wrong server: typed errors within the timeout, the fail policy,
//! reconnecting, and the handshake under the deadline.

use super::*;

/// Expects `result` to fail as unavailable within `timeout` (plus scheduling slack).
fn assert_unavailable_within<T: std::fmt::Debug>(
    started: Instant,
    timeout: Duration,
    result: Result<T, Error>,
) {
    let elapsed = started.elapsed();
    assert!(matches!(result, Err(Error::Unavailable(_))), "{result:?}");
    assert!(elapsed < timeout + MARGIN, "took {elapsed:?}");
}

#[test]
fn an_unreachable_server_is_a_typed_error_and_the_fail_policy_holds() {
    // 1 s: a loaded machine's reply fits; the margin below stays under a second timeout.
    let timeout = Duration::from_secs(1);
    let mut server = Server::start();
    let mut con = Reconnecting::new(server.client()).with_timeout(timeout);
    let bucket = TokenBucket::new(2, 1, SECOND).unwrap();
    let default = RedisLimiter::new(bucket).unwrap();
    let closed = RedisLimiter::new(bucket)
        .unwrap()
        .on_unavailable(FailPolicy::Closed);
    let open = RedisLimiter::new(bucket)
        .unwrap()
        .on_unavailable(FailPolicy::Open);
    let local = RedisLimiter::new(bucket)
        .unwrap()
        .on_unavailable(FailPolicy::Local(KeyedLimiter::new(bucket, 1000)));
    assert!(matches!(closed.decide(&mut con, b"k", 1).unwrap(), Outcome::Decided(d) if d.allowed));

    // A server that accepts connections but never answers: the reply times out.
    server.pause();
    let started = Instant::now();
    assert_unavailable_within(started, timeout, closed.check(&mut con, b"k", 1));
    server.resume();

    // A dead server: refused at once, and each policy answers.
    server.kill();
    let started = Instant::now();
    assert_unavailable_within(started, timeout, closed.check(&mut con, b"k", 1));
    // The core's default: the error, for the caller to decide.
    assert!(matches!(
        default.decide(&mut con, b"k", 1),
        Err(Error::Unavailable(_))
    ));
    assert!(matches!(
        closed.decide(&mut con, b"k", 1).unwrap(),
        Outcome::Closed(Error::Unavailable(_))
    ));
    assert!(matches!(
        open.decide(&mut con, b"k", 1).unwrap(),
        Outcome::Open(Error::Unavailable(_))
    ));
    let local_allowed: Vec<bool> = (0..3)
        .map(|_| local.decide(&mut con, b"k", 1).unwrap().allowed())
        .collect();
    assert_eq!(
        local_allowed,
        [true, true, false],
        "the local bucket of 2 holds"
    );

    server.restart();
    assert!(matches!(closed.decide(&mut con, b"k", 1).unwrap(), Outcome::Decided(d) if d.allowed));
}

#[tokio::test]
async fn the_async_connection_fails_within_the_timeout_and_reconnects() {
    // 1 s: a loaded machine's reply fits; the margin below stays under a second timeout.
    let timeout = Duration::from_secs(1);
    let mut server = Server::start();
    let mut con = connect_async(server.client(), timeout).unwrap();
    let limiter = RedisLimiter::new(TokenBucket::new(2, 1, SECOND).unwrap()).unwrap();
    assert!(
        limiter
            .check_async(&mut con, b"k", 1)
            .await
            .unwrap()
            .allowed
    );
    server.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let result = limiter.check_async(&mut con, b"k", 1).await;
        assert_unavailable_within(started, timeout, result);
    }
    server.restart();
    // Reconnecting polled for 10 s: a loaded machine's restart; one never made fails.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match limiter.check_async(&mut con, b"k", 1).await {
            Ok(decision) => break assert!(decision.allowed),
            Err(Error::Unavailable(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no reconnection: {e}"),
        }
    }
}

/// A loopback listener on its own thread until dropped: it accepts connections and
/// either never answers or answers every request with `reply` and hangs up.
struct Listener {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    fn start(reply: Option<&'static [u8]>) -> Self {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut stream, _)) => match reply {
                        Some(reply) => {
                            stream.set_nonblocking(false).unwrap();
                            let mut buf = [0; 4096];
                            let _ = stream.read(&mut buf);
                            let _ = stream.write_all(reply);
                        }
                        None => held.push(stream),
                    },
                    Err(_) => sleep(Duration::from_millis(2)),
                }
            }
        });
        Self {
            port,
            stop,
            thread: Some(thread),
        }
    }

    fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).unwrap()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How much longer than the (1 s) timeout a failing call may take: scheduling on a
/// loaded 2-core machine (measured quiet: at most 30 ms over), short of a timeout applied
/// twice (once per step rather than to the whole call).
const MARGIN: Duration = Duration::from_millis(800);

/// Runs `call` three times (the first connects, later ones reconnect), each failing
/// with `want` within the timeout plus [`MARGIN`].
fn fails_within<T: std::fmt::Debug>(
    timeout: Duration,
    want: &str,
    mut call: impl FnMut() -> Result<T, Error>,
) {
    for _ in 0..3 {
        let started = Instant::now();
        let result = call();
        let elapsed = started.elapsed();
        assert_eq!(result.unwrap_err().to_string(), want);
        assert!(elapsed < timeout + MARGIN, "took {elapsed:?}");
    }
}

/// Issue 16, item 8: the timeout bounds the whole call (connecting included), and the
/// error says what happened: no reply, a refused connection, or a server that is not
/// Redis (an HTTP server). Sync and async.
#[test]
fn timeouts_bound_the_whole_call_and_say_what_happened() {
    // 1 s: a loaded machine's reply fits; the margin below stays under a second timeout.
    let timeout = Duration::from_secs(1);
    let limiter = RedisLimiter::new(TokenBucket::new(2, 1, SECOND).unwrap()).unwrap();
    let silent = Listener::start(None);
    let http = Listener::start(Some(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
    ));
    let server = Server::start();
    let refused = common::free_port();
    let refused_client = redis::Client::open(format!("redis://127.0.0.1:{refused}/")).unwrap();
    let cases = [
        (
            silent.client(),
            format!("redis is unavailable: no reply from 127.0.0.1:{} within 1000 ms", silent.port),
        ),
        (
            http.client(),
            format!(
                "not a Redis server: 127.0.0.1:{} answered with something other than Redis's protocol",
                http.port
            ),
        ),
        (
            refused_client,
            format!("redis is unavailable: 127.0.0.1:{refused} refused the connection"),
        ),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _runtime = runtime.enter();
    for (client, want) in &cases {
        let mut con = Reconnecting::new(client.clone()).with_timeout(timeout);
        fails_within(timeout, want, || limiter.check(&mut con, b"k", 1));
        let mut con = connect_async(client.clone(), timeout).unwrap();
        fails_within(timeout, want, || {
            runtime.block_on(limiter.check_async(&mut con, b"k", 1))
        });
    }
    // A paused redis-server, with a connection made before and one made after.
    let mut con = Reconnecting::new(server.client()).with_timeout(timeout);
    let mut con_async = connect_async(server.client(), timeout).unwrap();
    assert!(limiter.check(&mut con, b"k", 1).unwrap().allowed);
    assert!(
        runtime
            .block_on(limiter.check_async(&mut con_async, b"k", 1))
            .unwrap()
            .allowed
    );
    server.pause();
    let want = format!(
        "redis is unavailable: no reply from 127.0.0.1:{} within 1000 ms",
        server.port
    );
    fails_within(timeout, &want, || limiter.check(&mut con, b"k", 1));
    fails_within(timeout, &want, || {
        runtime.block_on(limiter.check_async(&mut con_async, b"k", 1))
    });
    let mut fresh = Reconnecting::new(server.client()).with_timeout(timeout);
    fails_within(timeout, &want, || limiter.check(&mut fresh, b"k", 1));
    server.resume();
    assert!(limiter.check(&mut con, b"k", 0).unwrap().allowed);
}

/// `Reconnecting` sends the handshake the URL asks for (a password, a database) itself,
/// under the call's deadline.
#[test]
fn reconnecting_authenticates_and_selects_the_database() {
    let server = Server::start();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret")
        .exec(&mut server.connection())
        .unwrap();
    let url = format!("redis://:s3cret@127.0.0.1:{}/2", server.port);
    let mut con = Reconnecting::new(redis::Client::open(url).unwrap());
    let limiter = RedisLimiter::new(FixedWindow::new(1, SECOND).unwrap()).unwrap();
    assert!(common::allowed_at(&limiter, &mut con, b"k", NOW));
    assert!(!common::allowed_at(&limiter, &mut con, b"k", NOW));
    let direct = format!("redis://:s3cret@127.0.0.1:{}/2", server.port);
    let mut direct = redis::Client::open(direct)
        .unwrap()
        .get_connection()
        .unwrap();
    let exists: u64 = redis::cmd("EXISTS").arg("k").query(&mut direct).unwrap();
    assert_eq!(exists, 1, "the key is in database 2");
    let wrong = format!("redis://:wrong@127.0.0.1:{}/", server.port);
    let mut con = Reconnecting::new(redis::Client::open(wrong).unwrap());
    assert!(matches!(
        limiter.check(&mut con, b"k", 1),
        Err(Error::Redis(_))
    ));
}
