//! The routes a call takes to the server: the module's commands where it is loaded, the
//! function library where Redis offers it
//! (loaded on first use, reloaded when flushed), `EVALSHA` where `FUNCTION` is refused,
//! and an explicit choice.

use redis::Value;
use sluicegate_core::{Concurrency, FixedWindow, LeaseRequest, Request, TokenBucket, SECOND};
use sluicegate_redis::{library_name, Error, LuaAlgorithm, RedisLeases, RedisLimiter, Route};

use crate::common::{self, Server};

fn bucket() -> RedisLimiter<TokenBucket> {
    RedisLimiter::new(TokenBucket::new(2, 1, SECOND).unwrap()).unwrap()
}

fn libraries(con: &mut redis::Connection) -> String {
    let list: Value = redis::cmd("FUNCTION").arg("LIST").query(con).unwrap();
    format!("{list:?}")
}

/// A bucket whose calls take `route`, chosen.
fn bucket_on(route: Route) -> RedisLimiter<TokenBucket> {
    let limiter = bucket().with_route(route).unwrap();
    assert_eq!(limiter.route(), Some(route));
    limiter
}

/// Whether each request on `keys`, checked in one batch, was allowed.
fn batch_allowed<A: LuaAlgorithm>(
    limiter: &RedisLimiter<A>,
    con: &mut redis::Connection,
    keys: &[&str],
) -> Vec<bool> {
    let requests: Vec<Request> = keys.iter().map(Request::new).collect();
    let batch = limiter.check_batch(con, &requests).unwrap();
    batch.into_iter().map(|d| d.unwrap().allowed).collect()
}

/// A lock whose lease on `l` was just granted to `a`.
fn lock_held(con: &mut redis::Connection) -> RedisLeases {
    let leases = RedisLeases::new(Concurrency::lock());
    let held = leases.acquire(con, &LeaseRequest::new(b"l").owner(b"a").ttl(SECOND));
    assert!(held.unwrap().decision.allowed);
    leases
}

fn cached(con: &mut redis::Connection, sha1: &str) -> bool {
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha1)
        .query(con)
        .unwrap();
    exists == [true]
}

#[test]
fn the_library_is_loaded_on_first_use_and_again_when_flushed() {
    let server = Server::start();
    let mut con = server.connection();
    let limiter = bucket();
    assert_eq!(limiter.route(), None);
    assert!(limiter.check(&mut con, b"k", 1).unwrap().allowed);
    assert_eq!(limiter.route(), Some(Route::Functions));
    assert!(libraries(&mut con).contains(library_name()));
    // No script was sent: the decision went through FCALL.
    let sha1 = redis::Script::new(limiter.script()).get_hash().to_owned();
    assert!(!cached(&mut con, &sha1));

    let () = redis::cmd("FUNCTION").arg("FLUSH").query(&mut con).unwrap();
    let d = limiter.check(&mut con, b"k", 1).unwrap();
    assert!(d.allowed && d.remaining == 0);
    let () = redis::cmd("FUNCTION").arg("FLUSH").query(&mut con).unwrap();
    // In a pipeline: every call goes again alone once the library is back.
    let allowed = batch_allowed(&limiter, &mut con, &["k", "j", "j"]);
    assert_eq!(allowed, [false, true, true]);
    assert!(limiter.state(&mut con, b"j").unwrap().is_some());

    let () = redis::cmd("FUNCTION").arg("FLUSH").query(&mut con).unwrap();
    let leases = lock_held(&mut con);
    assert_eq!(leases.route(), Some(Route::Functions));
    assert!(leases.state(&mut con, b"l").unwrap().is_some());
    let sha1 = redis::Script::new(leases.script()).get_hash().to_owned();
    assert!(!cached(&mut con, &sha1));
}

#[test]
fn reads_are_flagged_no_writes() {
    let server = Server::start();
    let mut con = server.connection();
    let limiter = bucket();
    assert!(limiter.check(&mut con, b"k", 1).unwrap().allowed);
    let flags = |function: &str| {
        let list: Value = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg(library_name())
            .query(&mut server.connection())
            .unwrap();
        // The function's entry: its name, then its description and flags.
        let text = format!("{list:?}");
        let name = format!("{}_{function}", library_name());
        let at = text
            .find(&format!("\"{name}\""))
            .expect("the function is listed");
        let entry = &text[at..];
        let end = entry[1..].find("name").map_or(entry.len(), |e| e + 1);
        entry[..end].contains("no-writes")
    };
    assert!(flags("read"));
    assert!(flags("lease_read"));
    assert!(!flags("decide"));
    assert!(!flags("acquire"));
}

#[test]
fn a_server_refusing_function_falls_back_to_scripts() {
    let server = Server::start_with(&["--rename-command", "FUNCTION", ""]);
    let mut con = server.connection();
    let limiter = bucket();
    assert!(limiter.check(&mut con, b"k", 1).unwrap().allowed);
    assert_eq!(limiter.route(), Some(Route::Scripts));
    let d = limiter.check(&mut con, b"k", 1).unwrap();
    assert!(d.allowed && d.remaining == 0);
    assert!(!limiter.check(&mut con, b"k", 1).unwrap().allowed);

    // A fresh limiter's first calls in a pipeline fall back too.
    let window = RedisLimiter::new(FixedWindow::new(1, SECOND).unwrap()).unwrap();
    assert_eq!(batch_allowed(&window, &mut con, &["w", "w"]), [true, false]);
    assert_eq!(window.route(), Some(Route::Scripts));

    let leases = lock_held(&mut con);
    assert_eq!(leases.route(), Some(Route::Scripts));

    // Chosen, the library route reports the refusal instead of falling back.
    let forced = bucket_on(Route::Functions);
    assert!(matches!(
        forced.check(&mut con, b"f", 1),
        Err(Error::Redis(_))
    ));
    assert_eq!(forced.route(), Some(Route::Functions));
}

/// A chosen route is the one taken, never another: scripts where the library is offered;
/// the module where it is not loaded, an error.
#[test]
fn a_chosen_route_is_taken_and_no_other() {
    let server = Server::start();
    let mut con = server.connection();
    let scripts = bucket_on(Route::Scripts);
    assert!(scripts.check(&mut con, b"k", 1).unwrap().allowed);
    assert!(!libraries(&mut con).contains(library_name()));
    let sha1 = redis::Script::new(scripts.script()).get_hash().to_owned();
    assert!(cached(&mut con, &sha1));

    let module = bucket_on(Route::Module);
    assert!(module.check(&mut con, b"m", 1).is_err());
    let leases = RedisLeases::new(Concurrency::lock())
        .with_route(Route::Module)
        .unwrap();
    assert!(leases
        .acquire(&mut con, &LeaseRequest::new(b"l").owner(b"a").ttl(SECOND))
        .is_err());
    // Nothing was written by another route: the scripts' decision holds the only key.
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, [b"k"]);
}

#[test]
fn the_module_is_detected_and_taken_when_loaded() {
    let server = Server::start_with_module(false);
    let mut con = server.connection();
    let limiter = bucket();
    assert_eq!(limiter.route(), None);
    assert!(limiter.check(&mut con, b"k", 1).unwrap().allowed);
    assert_eq!(limiter.route(), Some(Route::Module));
    let allowed = batch_allowed(&limiter, &mut con, &["k", "k", "j"]);
    assert_eq!(allowed, [true, false, true]);
    let leases = lock_held(&mut con);
    assert_eq!(leases.route(), Some(Route::Module));
    let _freed = leases
        .release(&mut con, &LeaseRequest::new(b"l").owner(b"a"))
        .unwrap();
    // Neither the library nor a script was needed for the decisions.
    assert!(!libraries(&mut con).contains(library_name()));
    let sha1 = redis::Script::new(limiter.script()).get_hash().to_owned();
    assert!(!cached(&mut con, &sha1));
    // Reads have no module command: they load the library, and decisions stay native.
    assert!(limiter.state(&mut con, b"j").unwrap().is_some());
    assert!(libraries(&mut con).contains(library_name()));
    assert!(!limiter.check(&mut con, b"j", 2).unwrap().allowed);
    assert_eq!(limiter.route(), Some(Route::Module));
}

#[tokio::test]
async fn the_async_client_detects_and_takes_the_module() {
    let server = Server::start_with_module(false);
    let mut con = common::connect_multiplexed(&server).await;
    let limiter = bucket();
    let mut allowed = Vec::new();
    for _ in 0..3 {
        let d = limiter.check_async(&mut con, b"k", 1).await.unwrap();
        allowed.push(d.allowed);
    }
    assert_eq!(allowed, [true, true, false]);
    assert_eq!(limiter.route(), Some(Route::Module));
    let leases = RedisLeases::new(Concurrency::lock());
    let held = leases
        .acquire_async(&mut con, &LeaseRequest::new(b"l").owner(b"a").ttl(SECOND))
        .await;
    assert!(held.unwrap().decision.allowed);
    assert_eq!(leases.route(), Some(Route::Module));
    // Neither the library nor a script was needed.
    let mut sync = server.connection();
    assert!(!libraries(&mut sync).contains(library_name()));
}
