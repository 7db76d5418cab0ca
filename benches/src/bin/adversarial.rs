//! Adversarial load against `sluicegate serve`, every phase bounded: slow connections,
//! connections past the cap, a key spray (refusing new keys, and evicting), a lease
//! fill, a policy of large keys, a policy flood, and a shutdown while slow clients hold
//! connections. It prints what held (see "Running sluicegate serve safely" in
//! docs/service.md).
//!
//! ```text
//! cargo run --release -p sluicegate-benches --bin adversarial
//! ```
//!
//! The server runs in this process on a fresh embedded store, with small limits so that
//! each phase reaches them quickly; the clients are plain blocking sockets.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use sluicegate_server::{Config, Server};

/// One request on its own connection: the status (0 if none came) and the body.
fn request(addr: SocketAddr, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
    let Ok(mut socket) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = socket.set_read_timeout(Some(Duration::from_secs(15)));
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    if socket
        .write_all(head.as_bytes())
        .and_then(|()| socket.write_all(body.as_bytes()))
        .is_err()
    {
        return (0, String::new());
    }
    let mut answer = String::new();
    let _ = socket.read_to_string(&mut answer);
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

/// `n` connections that each sent `bytes` and then nothing.
fn stalled(addr: SocketAddr, n: usize, bytes: &[u8]) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|_| {
            let mut socket = TcpStream::connect(addr).ok()?;
            socket.write_all(bytes).ok()?;
            Some(socket)
        })
        .collect()
}

/// How long until every socket is closed by the server (bounded by `within`).
fn all_closed(sockets: &mut [TcpStream], within: Duration) -> Option<Duration> {
    let start = Instant::now();
    for socket in sockets {
        let left = within.checked_sub(start.elapsed())?;
        socket
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        let mut buf = [0u8; 512];
        loop {
            match socket.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return None
                }
                Err(_) => break,
            }
        }
    }
    Some(start.elapsed())
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

fn main() -> ExitCode {
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    else {
        eprintln!("adversarial: cannot start a runtime");
        return ExitCode::FAILURE;
    };
    let Ok(dir) = tempfile::tempdir() else {
        eprintln!("adversarial: cannot make a scratch directory");
        return ExitCode::FAILURE;
    };
    let config = Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        data_dir: dir.path().to_path_buf(),
        header_timeout: Duration::from_secs(2),
        max_connections: 256,
        shutdown_timeout: Duration::from_secs(2),
        max_policies: 200,
        max_policies_per_app: 200,
        max_keys: 100,
        max_policy_bytes: 64 << 20,
        ..Config::default()
    };
    let started = runtime.block_on(async {
        let admin = sluicegate_server::init_admin(&config, "root").await?;
        let server = Server::bind(config.clone()).await?;
        Ok::<_, sluicegate_server::Error>((admin, server))
    });
    let (admin, server) = match started {
        Ok(started) => started,
        Err(e) => {
            eprintln!("adversarial: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = runtime.spawn(server.run(async {
        let _ = stopped.await;
    }));

    // 1. Slow clients: 200 half-sent request lines.
    let mut slow = stalled(addr, 200, b"GET / HTTP/1.1\r\n");
    let ((health, _), took) = timed(|| request(addr, "GET", "/healthz", "", ""));
    println!(
        "slow clients: {} half-sent request lines open; /healthz answered {health} in {took:?}",
        slow.len()
    );
    match all_closed(&mut slow, Duration::from_secs(10)) {
        Some(after) => println!(
            "slow clients: all closed {after:?} after (--header-timeout {:?})",
            config.header_timeout
        ),
        None => println!("slow clients: NOT all closed within 10 s"),
    }

    // 2. Past the cap: hold every place, then ask for 20 more.
    let held = stalled(addr, config.max_connections, b"GET / HTTP/1.1\r\n");
    let mut refused = 0;
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let ((status, _), took) = timed(|| request(addr, "GET", "/healthz", "", ""));
        refused += u32::from(status == 503);
        slowest = slowest.max(took);
    }
    println!(
        "cap: {} held; 20 more: {refused} answered 503, the slowest in {slowest:?}",
        held.len()
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(200));

    // 3. Key spray: a key denied by a 1-per-hour window, then 200 new keys, on a policy
    // that refuses new keys when full (the default) and on one that evicts.
    let (_, body) = request(addr, "POST", "/v1/apps", &admin, r#"{"name":"web"}"#);
    let app: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let web = app["token"].as_str().unwrap_or_default().to_owned();
    let hourly = r#"{"algorithm":"fixed-window","limit":1,"period":"1h","apps":["web"]"#;
    request(
        addr,
        "PUT",
        "/v1/policies/login",
        &admin,
        &format!("{hourly}}}"),
    );
    let evicting = format!(r#"{hourly},"on_full":"evict"}}"#);
    request(addr, "PUT", "/v1/policies/search", &admin, &evicting);
    let call = |path: &str, body: String| {
        let (status, body) = request(addr, "POST", path, &web, &body);
        let json = serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default();
        (status, json)
    };
    let decide = |policy: &str, key: &str| {
        let body = format!(r#"{{"policy":"{policy}","key":"{key}"}}"#);
        call("/v1/decide", body).1["allowed"] == true
    };
    for policy in ["login", "search"] {
        let first = decide(policy, "victim");
        let second = decide(policy, "victim");
        for i in 0..200 {
            decide(policy, &format!("spray-{i}"));
        }
        let after = decide(policy, "victim");
        let newcomer = decide(policy, "newcomer");
        println!(
            "key spray ({policy}): victim admitted {first}, then {second}; after 200 new keys (--max-keys {}): {}; a new key admitted {newcomer}",
            config.max_keys,
            if after { "admitted again" } else { "still denied" }
        );
    }
    let (_, metrics) = request(addr, "GET", "/metrics", &admin, "");
    let series: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("sluicegate_keys_") && !l.contains("capacity"))
        .collect();
    println!("key spray: /metrics {}", series.join(", "));

    // 4. Lease fill: a lease past the policy's max_lease, then every key of the table
    // held as long as allowed.
    let leases = r#"{"algorithm":"concurrency","limit":1,"lease":"1s","apps":["web"]}"#;
    request(addr, "PUT", "/v1/policies/workers", &admin, leases);
    let acquire = |key: &str, ttl: &str| {
        let body = format!(r#"{{"policy":"workers","key":"{key}","owner":"a"{ttl}}}"#);
        call("/v1/lease/acquire", body)
    };
    let (year, _) = acquire("k", r#","ttl_us":31536000000000"#);
    let held = (0..config.max_keys)
        .filter(|i| acquire(&format!("k{i}"), "").1["acquired"] == true)
        .count();
    let (_, refused) = acquire("newcomer", "");
    std::thread::sleep(Duration::from_millis(1100));
    let (_, later) = acquire("newcomer", "");
    println!(
        "lease fill: a 1-year ttl answered {year} (max_lease 1s); {held} keys held; a new key acquired {}, retry after {} µs; 1.1 s later acquired {}",
        refused["acquired"], refused["retry_after_us"], later["acquired"]
    );

    // 5. A sliding log of 10^5 entries a key: its key cap under --max-policy-bytes.
    let log = r#"{"algorithm":"sliding-log","limit":100000,"period":"1s","apps":["web"]}"#;
    request(addr, "PUT", "/v1/policies/log", &admin, log);
    let (_, metrics) = request(addr, "GET", "/metrics", &admin, "");
    let cap = metrics
        .lines()
        .find_map(|l| l.strip_prefix(r#"sluicegate_keys_capacity{policy="log"} "#))
        .unwrap_or("?");
    println!(
        "policy bytes: a sliding log of 100000 a key holds {cap} keys (--max-policy-bytes {} MiB)",
        config.max_policy_bytes >> 20
    );

    // 6. Policy flood: 60 KB policies until the cap refuses.
    let big = format!(
        r#"{{"algorithm":"fixed-window","limit":5,"period":"1s","apps":["web"],"description":"{}"}}"#,
        "x".repeat(60_000)
    );
    let (mut made, mut first_put, mut last_put, mut cap_status) =
        (0, Duration::ZERO, Duration::ZERO, 0);
    for i in 0..config.max_policies + 10 {
        let ((status, _), took) = timed(|| {
            request(
                addr,
                "PUT",
                &format!("/v1/policies/flood-{i}"),
                &admin,
                &big,
            )
        });
        if status != 201 {
            cap_status = status;
            break;
        }
        made += 1;
        if i == 0 {
            first_put = took;
        }
        last_put = took;
    }
    let ((_, page), page_took) =
        timed(|| request(addr, "GET", "/v1/policies?limit=100", &admin, ""));
    println!(
        "policy flood: {made} policies of 60 KB, then {cap_status} (--max-policies {}); PUT {first_put:?} first, {last_put:?} last; a page of 100: {} bytes in {page_took:?}",
        config.max_policies,
        page.len()
    );

    // 7. Shutdown while slow clients hold connections.
    let _slow = stalled(addr, 100, b"POST /v1/decide HTTP/1.1\r\n");
    let start = Instant::now();
    let _ = stop.send(());
    let ended = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), serving)
            .await
            .is_ok()
    });
    println!(
        "shutdown: {} in {:?} with 100 slow clients (--shutdown-timeout {:?})",
        if ended { "ended" } else { "NOT ended" },
        start.elapsed(),
        config.shutdown_timeout
    );
    ExitCode::SUCCESS
}
