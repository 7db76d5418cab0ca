//! The module's commands on a real `redis-server --loadmodule`: the server's clock and
//! the scripts' TTL rule, keys shared with the scripts at the server's time, foreign and
//! corrupt keys, peek and reset, `CL.THROTTLE` as redis-cell's and exact against the
//! core, replication of effects, key positions and `deny-oom`.

use redis::{Connection, RedisResult, Value};
use sluicegate_core::{Algorithm, FixedWindow, LeakyBucket, Ticks, TokenBucket, SECOND};
use sluicegate_redis::{Error, RedisLimiter};

use crate::common::{self, wait_until, Cluster};

fn time(con: &mut Connection) -> Ticks {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    s * SECOND + us
}

fn pttl(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).unwrap()
}

fn get(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

/// The command whose words `line` gives.
fn command(line: &str) -> redis::Cmd {
    let mut cmd = redis::cmd(line.split(' ').next().unwrap());
    for word in line.split(' ').skip(1) {
        cmd.arg(word);
    }
    cmd
}

fn run(con: &mut Connection, line: &str) -> RedisResult<Vec<i64>> {
    command(line).query(con)
}

/// Sends `line`, any reply but an error taken.
fn exec(con: &mut Connection, line: &str) {
    command(line).exec(con).expect(line);
}

fn error(con: &mut Connection, line: &str) -> String {
    let e = run(con, line).expect_err(line);
    format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or(""))
}

/// The TTL rule: `reset_after` rounded up to a millisecond, on the server's clock, for a
/// command sent at server time `sent`: the key may have aged since by at most the
/// server time elapsed until now (measured, so a stalled machine cannot fail it).
fn assert_ttl(con: &mut Connection, key: &str, reset: i64, sent: Ticks) {
    let expected = (reset + 999) / 1000;
    let ttl = pttl(con, key);
    let aged = (time(con) - sent).div_ceil(1000) as i64;
    assert!(
        ttl <= expected && ttl >= expected - aged - 1,
        "pttl {ttl}, reset {reset} µs, {aged} ms since sent"
    );
}

#[test]
fn server_time_states_expire_when_fresh_and_fresh_ones_are_deleted() {
    let server = common::server(&[]);
    let mut con = server.connection();
    let before = time(&mut con);
    let reply = run(
        &mut con,
        "SLUICEGATE.CHECK 1 tb token_bucket 10 1 1000000 COST 3",
    )
    .unwrap();
    let after = time(&mut con);
    assert_eq!(&reply[..6], [1, 10, 7, 0, 3_000_000, 0]);
    assert!(
        (before..=after).contains(&(reply[6] as u64)),
        "now is the server's TIME"
    );
    assert_ttl(&mut con, "tb", reply[4], before);

    let sent = time(&mut con);
    let reply = run(&mut con, "SLUICEGATE.CHECK 1 fw fixed_window 5 60000000").unwrap();
    assert_eq!(reply[..4], [1, 5, 4, 0]);
    assert_ttl(&mut con, "fw", reply[4], sent);

    // A composite's keys each live until their own member is fresh, as in the scripts:
    // the bucket's in 3 s, the window's at the end of its minute (the later of the two is
    // the composite's `reset_after`, whichever it is when the test runs).
    let line =
        "SLUICEGATE.CHECK 2 {c}:0 {c}:1 fixed_window 5 60000000 token_bucket 10 1 1000000 COST 3";
    let sent = time(&mut con);
    let reply = run(&mut con, line).unwrap();
    assert_eq!(reply[..3], [1, 5, 2], "the window binds: 2 of 5 left");
    let window = 60_000_000 - reply[6] % 60_000_000;
    assert_eq!(reply[4], window.max(3_000_000));
    assert_ttl(&mut con, "{c}:1", 3_000_000, sent);
    assert_ttl(&mut con, "{c}:0", window, sent);

    // A decision leaving the state fresh deletes the key (and writes none).
    run(
        &mut con,
        "SLUICEGATE.CHECK 1 zero token_bucket 10 1 1000000 COST 0",
    )
    .unwrap();
    assert_eq!(get(&mut con, "zero"), None);
    run(
        &mut con,
        "SLUICEGATE.CHECK 1 short token_bucket 1 1000 1000 NOW 5",
    )
    .unwrap();
    assert_eq!(pttl(&mut con, "short"), -1, "explicit times never expire");
    run(
        &mut con,
        "SLUICEGATE.CHECK 1 short token_bucket 1 1000 1000 COST 0 NOW 10",
    )
    .unwrap();
    assert_eq!(get(&mut con, "short"), None, "fresh again: deleted");
}

#[test]
fn module_and_script_share_keys_at_the_server_time() {
    let server = common::server(&[]);
    let mut con = server.connection();
    // One token an hour: nothing refills during the test.
    let bucket = TokenBucket::new(10, 1, 3600 * SECOND).unwrap();
    let limiter = RedisLimiter::new(bucket).unwrap();
    let words = "token_bucket 10 1 3600000000";
    assert_eq!(limiter.check(&mut con, b"shared", 3).unwrap().remaining, 7);
    let sent = time(&mut con);
    let reply = run(
        &mut con,
        &format!("SLUICEGATE.CHECK 1 shared {words} COST 2"),
    )
    .unwrap();
    assert_eq!(reply[..3], [1, 10, 5]);
    assert_ttl(&mut con, "shared", reply[4], sent);
    assert_eq!(limiter.check(&mut con, b"shared", 1).unwrap().remaining, 4);
    let peek = run(
        &mut con,
        &format!("SLUICEGATE.PEEK 1 shared {words} COST 5"),
    )
    .unwrap();
    assert_eq!(peek[..4], [0, 10, 4, peek[3]]);
    assert!(peek[3] > 3599 * SECOND as i64);
    let state = limiter.state(&mut con, b"shared").unwrap().unwrap();
    assert_eq!(
        get(&mut con, "shared").unwrap(),
        bucket.encode_to_vec(&state)
    );
}

#[test]
fn foreign_and_corrupt_keys_are_refused_by_every_command_and_kept() {
    let server = common::server(&[]);
    let mut con = server.connection();
    exec(&mut con, "RPUSH list x");
    exec(&mut con, "SET junk garbage");
    let window = FixedWindow::new(2, 1000).unwrap();
    let reason = window.decode(b"garbage").unwrap_err().to_string();
    for (key, expected) in [
        ("list", "SLUICEGATE foreign list".to_owned()),
        ("junk", format!("SLUICEGATE corrupt state: {reason}")),
    ] {
        for line in [
            format!("SLUICEGATE.CHECK 1 {key} fixed_window 2 1000"),
            format!("SLUICEGATE.CHECK 1 {key} fixed_window 2 1000 NOW 7"),
            format!("SLUICEGATE.PEEK 1 {key} fixed_window 2 1000"),
            format!("SLUICEGATE.RESET 1 {key} fixed_window 2 1000"),
        ] {
            assert_eq!(error(&mut con, &line), expected, "{line}");
        }
        let lease = error(
            &mut con,
            &format!("SLUICEGATE.LEASE.ACQUIRE {key} 1 me 1000"),
        );
        assert!(lease.starts_with("SLUICEGATE "), "{lease}");
        let cell = error(&mut con, &format!("CL.THROTTLE {key} 15 30 60"));
        assert!(cell.starts_with("SLUICEGATE "), "{cell}");
    }
    // The script words the same bytes the same way.
    let limiter = RedisLimiter::new(window).unwrap();
    match limiter.check(&mut con, b"junk", 1) {
        Err(Error::Corrupt { reason: r, .. }) => assert_eq!(r, reason),
        other => panic!("{other:?}"),
    }
    let len: i64 = redis::cmd("LLEN").arg("list").query(&mut con).unwrap();
    assert_eq!(len, 1);
    assert_eq!(get(&mut con, "junk").unwrap(), b"garbage");
}

#[test]
fn peek_writes_nothing_and_reset_deletes_only_valid_states() {
    let server = common::server(&[]);
    let mut con = server.connection();
    let words = "fixed_window 3 1000000 sliding_counter 5 1000000";
    run(
        &mut con,
        &format!("SLUICEGATE.PEEK 2 {{p}}:0 {{p}}:1 {words} NOW 9"),
    )
    .unwrap();
    assert_eq!(get(&mut con, "{p}:0"), None);
    run(
        &mut con,
        &format!("SLUICEGATE.CHECK 2 {{p}}:0 {{p}}:1 {words} NOW 9"),
    )
    .unwrap();
    assert!(get(&mut con, "{p}:0").is_some() && get(&mut con, "{p}:1").is_some());
    // One member's key corrupt: nothing is deleted.
    exec(&mut con, "SET {p}:1 x");
    assert!(error(
        &mut con,
        &format!("SLUICEGATE.RESET 2 {{p}}:0 {{p}}:1 {words}")
    )
    .contains("corrupt"));
    assert!(get(&mut con, "{p}:0").is_some());
    exec(&mut con, "DEL {p}:1");
    let deleted: i64 = redis::cmd("SLUICEGATE.RESET")
        .arg(2)
        .arg("{p}:0")
        .arg("{p}:1")
        .arg(words.split(' ').collect::<Vec<_>>())
        .query(&mut con)
        .unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(get(&mut con, "{p}:0"), None);
}

#[test]
fn bad_arguments_are_errors() {
    let server = common::server(&[]);
    let mut con = server.connection();
    for line in [
        "SLUICEGATE.CHECK",
        "SLUICEGATE.CHECK 0 k fixed_window 1 1",
        "SLUICEGATE.CHECK 2 k fixed_window 1 1",
        "SLUICEGATE.CHECK 1 k fixed_window 0 1",
        "SLUICEGATE.CHECK 1 k fixed_window 1 1 COST -1",
        "SLUICEGATE.CHECK 1 k fixed_window 1 1 NOW 4611686018427387905",
        "SLUICEGATE.CHECK 1 k fixed_window 1 1 MAXWAIT 5",
        "SLUICEGATE.CHECK 1 k fixed_window 1 1 COST 1 COST 2",
        "SLUICEGATE.CHECK 1 k nonsense 1 1",
        "SLUICEGATE.PEEK 1 k token_bucket 1 1 1 MAXWAIT 5",
        "SLUICEGATE.LEASE.ACQUIRE k 0 me 1000",
        "SLUICEGATE.LEASE.ACQUIRE k 1 me 0",
        "SLUICEGATE.LEASE.RENEW k 1 me",
    ] {
        assert!(error(&mut con, line).starts_with("ERR "), "{line}");
    }
    let keys: Vec<Value> = redis::cmd("DBSIZE")
        .query(&mut con)
        .map(|n: i64| vec![Value::Int(n)])
        .unwrap();
    assert_eq!(keys, vec![Value::Int(0)], "nothing written");
}

#[test]
fn cl_throttle_answers_as_redis_cell() {
    let server = common::server(&[]);
    let mut con = server.connection();
    // The funnel example: 15 burst, 30 per 60 s. One unit leaks every 2 s.
    let sent = time(&mut con);
    assert_eq!(
        run(&mut con, "CL.THROTTLE laoqian:reply 15 30 60").unwrap(),
        [0, 16, 15, -1, 2]
    );
    assert_ttl(&mut con, "laoqian:reply", 2_000_000, sent);
    for remaining in (0..15).rev() {
        let reply = run(&mut con, "CL.THROTTLE laoqian:reply 15 30 60 1").unwrap();
        assert_eq!(reply[..4], [0, 16, remaining, -1]);
    }
    let reply = run(&mut con, "CL.THROTTLE laoqian:reply 15 30 60").unwrap();
    assert_eq!(reply[..3], [1, 16, 0]);
    assert_eq!(reply[3], 2, "retry after a leak of 2 s, rounded up");
    assert_eq!(reply[4], 32);
    assert_eq!(
        run(&mut con, "CL.THROTTLE big 15 30 60 17").unwrap()[..4],
        [1, 16, 16, -1]
    );
    assert_eq!(
        error(&mut con, "CL.THROTTLE k 15 30"),
        "Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"
    );
    assert_eq!(
        error(&mut con, "CL.THROTTLE k 15 x 60"),
        "Cell error: Couldn't parse as integer: x"
    );
    assert_eq!(
        error(&mut con, "CL.THROTTLE k 15 0 60"),
        "Cell error: Zero rates are not supported"
    );
}

#[test]
fn cl_throttle_reads_what_redis_cell_stored() {
    let server = common::server(&[]);
    let mut con = server.connection();
    // redis-cell keeps the arrival time in decimal nanoseconds: here half a unit of water.
    let tat_ns = (time(&mut con) + SECOND) * 1000;
    exec(&mut con, &format!("SET cell {tat_ns}"));
    assert_eq!(
        run(&mut con, "CL.THROTTLE cell 15 30 60").unwrap(),
        [0, 16, 14, -1, 3]
    );
    let bucket = LeakyBucket::redis_cell(15, 30, 60 * SECOND).unwrap();
    assert!(
        bucket.decode(&get(&mut con, "cell").unwrap()).is_ok(),
        "rewritten canonical"
    );
}

/// Every reply and stored state equals the core's at an instant between the server's
/// `TIME` just before and just after the call: exact at any rate (up to 10^6 per
/// second) and any period (1 s to a day), where redis-cell rounds through floats.
#[test]
fn cl_throttle_is_exact_against_the_core() {
    let server = common::server(&[]);
    let mut con = server.connection();
    let cases: [(u64, u64, u64); 6] = [
        (15, 30, 60),
        (0, 1_000_000, 1),
        (999_999, 1_000_000, 1),
        (1000, 1_000_000, 1),
        (5, 7, 86_400),
        (1_000_000, 1_000_000, 86_400),
    ];
    for (i, (burst, count, period)) in cases.into_iter().enumerate() {
        let bucket = LeakyBucket::redis_cell(burst, count, period * SECOND).unwrap();
        let key = format!("exact{i}");
        let mut state = None;
        for step in 0..200u64 {
            let quantity = [1, 0, 3, burst / 2 + 1, burst + 1, burst + 2][(step % 6) as usize];
            let before = time(&mut con);
            let line = format!("CL.THROTTLE {key} {burst} {count} {period} {quantity}");
            let reply = run(&mut con, &line).unwrap();
            let after = time(&mut con);
            let stored = get(&mut con, &key);
            let matched = (before..=after).find_map(|now| {
                let (d, new) = bucket.decide(state, now, quantity);
                let mut fields = d.cl_throttle_reply();
                for f in &mut fields[3..] {
                    if *f >= 0 {
                        *f = *f / SECOND as i64 + i64::from(*f % SECOND as i64 >= 1000);
                    }
                }
                let bytes = new.map(|s| bucket.encode_to_vec(&s));
                // A key whose TTL is a millisecond or two may expire before the GET;
                // its state was fresh by then.
                let gone = stored.is_none() && d.reset_after <= 2000;
                (fields == reply[..] && (bytes == stored || gone)).then_some(new)
            });
            state = matched
                .unwrap_or_else(|| panic!("{line}: {reply:?} at no instant in {before}..={after}"));
        }
    }
}

/// Writes a key of each kind: `timed` (a bucket at the server's time), `explicit` (a
/// window at a given time), `lease` and `cell` (`CL.THROTTLE`'s).
fn write_each_kind(con: &mut Connection) {
    for line in [
        "SLUICEGATE.CHECK 1 timed token_bucket 10 1 1000000 COST 4",
        "SLUICEGATE.CHECK 1 explicit fixed_window 2 1000 NOW 5",
        "SLUICEGATE.LEASE.ACQUIRE lease 2 me 5000000",
        "CL.THROTTLE cell 15 30 60",
    ] {
        run(con, line).unwrap();
    }
}

#[test]
fn effects_replicate_and_replicas_never_decide() {
    let primary = common::server(&[]);
    let port = primary.port.to_string();
    let replica = common::server(&["--replicaof", "127.0.0.1", &port]);
    let (mut p, mut r) = (primary.connection(), replica.connection());
    wait_until("the replica never synced", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut r).unwrap();
        info.contains("master_link_status:up")
    });
    write_each_kind(&mut p);
    run(&mut p, "SLUICEGATE.CHECK 1 gone fixed_window 2 1000 NOW 5").unwrap();
    run(
        &mut p,
        "SLUICEGATE.CHECK 1 gone fixed_window 2 1000 COST 0 NOW 5000",
    )
    .unwrap();
    let synced: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut p).unwrap();
    assert_eq!(synced, 1);
    for key in ["timed", "explicit", "lease", "cell", "gone"] {
        assert_eq!(get(&mut r, key), get(&mut p, key), "{key}");
        let (tp, tr) = (pttl(&mut p, key), pttl(&mut r, key));
        assert!(
            (tp - tr).abs() <= 20,
            "{key}: ttl {tp} on the primary, {tr} on the replica"
        );
    }
    assert_eq!(pttl(&mut r, "explicit"), -1);
    assert!(
        error(&mut r, "SLUICEGATE.CHECK 1 timed token_bucket 10 1 1000000").starts_with("READONLY")
    );
    assert!(run(&mut r, "SLUICEGATE.PEEK 1 timed token_bucket 10 1 1000000").is_ok());
}

/// The AOF holds the effects (`SET ... PXAT`, `SET`, `DEL`), never a module command that
/// a replay would decide again at another time. Every write reaches the file before its
/// reply (`appendfsync always`): with the default, a loaded machine's slow fsync lets
/// Redis postpone writing the buffer, and the file was read with one effect of five.
#[test]
fn the_aof_holds_effects_not_commands() {
    let server = common::server(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.connection();
    write_each_kind(&mut con);
    let _: i64 = redis::cmd("SLUICEGATE.RESET")
        .arg(1)
        .arg("explicit")
        .arg(&["fixed_window", "2", "1000"][..])
        .query(&mut con)
        .unwrap();
    let mut aof = Vec::new();
    for entry in std::fs::read_dir(server.dir().join("appendonlydir")).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".incr.aof") {
            aof.extend(std::fs::read(path).unwrap());
        }
    }
    let aof = String::from_utf8_lossy(&aof).to_ascii_uppercase();
    assert!(
        !aof.contains("SLUICEGATE.") && !aof.contains("CL.THROTTLE"),
        "{aof}"
    );
    assert_eq!(aof.matches("PXAT").count(), 3, "{aof}");
    assert_eq!(aof.matches("\r\nSET\r\n").count(), 4, "{aof}");
    assert_eq!(aof.matches("\r\nDEL\r\n").count(), 1, "{aof}");
}

/// Redis finds `keys` in `line` (`COMMAND GETKEYS`, which asks the module).
fn assert_keys(con: &mut Connection, line: &str, keys: &[&str]) {
    let found: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(line.split(' ').collect::<Vec<_>>())
        .query(con)
        .unwrap();
    assert_eq!(found, keys, "{line}");
}

#[test]
fn keys_are_declared_and_writes_refused_out_of_memory() {
    let server = common::server(&[]);
    let mut con = server.connection();
    let check = "SLUICEGATE.CHECK 2 {a}:0 {a}:1 fixed_window 1 1 fixed_window 1 1";
    assert_keys(&mut con, check, &["{a}:0", "{a}:1"]);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert!(error(&mut con, "SLUICEGATE.CHECK 1 k fixed_window 1 1000").starts_with("OOM"));
    assert!(error(&mut con, "CL.THROTTLE k 15 30 60").starts_with("OOM"));
    assert!(run(&mut con, "SLUICEGATE.PEEK 1 k fixed_window 1 1000").is_ok());
}

/// `SLUICEGATE.BATCH` declares every key; `PACKED` replies a lease command's integers as
/// one string, the same integers.
#[test]
fn batch_keys_and_packed_lease_replies() {
    let server = common::server(&[]);
    let mut con = server.connection();
    let batch = "SLUICEGATE.BATCH 3 a b a fixed_window 1 1 COSTS 1 1 1";
    assert_keys(&mut con, batch, &["a", "b", "a"]);
    for (plain, packed) in [
        (
            "SLUICEGATE.LEASE.ACQUIRE p 2 me 5000000 NOW 100",
            "SLUICEGATE.LEASE.ACQUIRE q 2 me 5000000 PACKED NOW 100",
        ),
        (
            "SLUICEGATE.LEASE.RENEW p 2 me 6000000 NOW 200",
            "SLUICEGATE.LEASE.RENEW q 2 me 6000000 PACKED NOW 200",
        ),
        (
            "SLUICEGATE.LEASE.RELEASE p 2 me NOW 300",
            "SLUICEGATE.LEASE.RELEASE q 2 me PACKED NOW 300",
        ),
    ] {
        let plain = run(&mut con, plain).unwrap();
        let words: Vec<&str> = packed.split(' ').collect();
        let mut cmd = redis::cmd(words[0]);
        cmd.arg(&words[1..]);
        let bytes: Vec<u8> = cmd.query(&mut con).unwrap();
        let unpacked: Vec<i64> = bytes
            .chunks(8)
            .map(|b| i64::from_be_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(unpacked, plain, "{packed}");
    }
}

/// On a 3-node cluster, a cluster client routes a composite by its keys' hash tag, and
/// keys in different slots are refused by Redis (`CROSSSLOT`), as for any command.
#[test]
fn cluster_routes_by_the_declared_keys() {
    let cluster = Cluster::start_with(common::server);
    let mut con = redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_connection()
        .unwrap();
    let words = [
        "fixed_window",
        "1",
        "1000000000",
        "fixed_window",
        "5",
        "1000000000",
    ];
    for user in 0..20 {
        let (a, b) = (format!("{{user{user}}}:0"), format!("{{user{user}}}:1"));
        let check = |con: &mut redis::cluster::ClusterConnection| -> Vec<i64> {
            redis::cmd("SLUICEGATE.CHECK")
                .arg(2)
                .arg(&a)
                .arg(&b)
                .arg(&words[..])
                .arg("NOW")
                .arg(7)
                .query(con)
                .unwrap()
        };
        assert_eq!(check(&mut con)[..3], [1, 1, 0]);
        assert_eq!(check(&mut con)[..3], [0, 1, 0]);
    }
    let crossed: RedisResult<Vec<i64>> = redis::cmd("SLUICEGATE.CHECK")
        .arg(2)
        .arg("a")
        .arg("b")
        .arg(&words[..])
        .query(&mut cluster.nodes[0].connection());
    let e = crossed.unwrap_err();
    assert!(matches!(e.code(), Some("CROSSSLOT") | Some("MOVED")), "{e}");
}

/// `SLUICEGATE.BATCH` decides a calendar window (alone: it has one key per request),
/// each request as `SLUICEGATE.CHECK` would; at the server's time, a period that does
/// not hold it is refused in each record, as alone.
#[test]
fn a_batch_decides_a_calendar_window() {
    let server = common::server(&[]);
    let mut con = server.connection();
    let batch = |con: &mut Connection, line: &str| -> Vec<u8> {
        let words: Vec<&str> = line.split(' ').collect();
        redis::cmd(words[0]).arg(&words[1..]).query(con).unwrap()
    };
    // Limit 2 in [0, 10^9): costs 1 and 2 on one key, then 1 on another.
    let records = batch(
        &mut con,
        "SLUICEGATE.BATCH 3 a a b calendar_window 2 0 1000000000 COSTS 1 2 1 NOW 100",
    );
    let allowed: Vec<(u8, i64)> = records
        .chunks(49)
        .map(|r| (r[0], i64::from_be_bytes(r[1..9].try_into().unwrap())))
        .collect();
    assert_eq!(allowed, [(1, 1), (1, 0), (1, 1)]);
    let alone = run(
        &mut con,
        "SLUICEGATE.CHECK 1 a calendar_window 2 0 1000000000 NOW 100",
    );
    assert_eq!(alone.unwrap()[0], 1, "a holds 1 of 2, as the batch left it");
    // A period long past at the server's time: every record is the error CHECK gives
    // (naming the server's time, which moved on).
    let out = "SLUICEGATE out of period ";
    let alone = error(&mut con, "SLUICEGATE.CHECK 1 c calendar_window 2 0 1000");
    assert!(alone.starts_with(out), "{alone}");
    let records = batch(
        &mut con,
        "SLUICEGATE.BATCH 2 c d calendar_window 2 0 1000 COSTS 1 1",
    );
    let mut rest = &records[..];
    for _ in 0..2 {
        assert_eq!(rest[0], 2);
        let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
        let text = std::str::from_utf8(&rest[5..5 + len]).unwrap();
        assert!(text.starts_with(out), "{text}");
        rest = &rest[5 + len..];
    }
    assert!(rest.is_empty());
    // A calendar window with another algorithm is refused.
    let mixed = error(
        &mut con,
        "SLUICEGATE.BATCH 2 a b calendar_window 2 0 10 fixed_window 1 1 COSTS 1",
    );
    assert!(mixed.contains("alone"), "{mixed}");
}
