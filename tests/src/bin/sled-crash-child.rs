//! Decides in a loop over a sled database until killed, printing the running count of
//! admissions after each one has returned (so, in `flush` mode, after it is durable).
//!
//! Usage: `sled-crash-child DIR flush|background FLUSH_EVERY_MS PAUSE_US`

use std::io::Write;
use std::time::Duration;

use sluicegate_core::Request;
use sluicegate_sled::{Durability, SledLimiter};
use sluicegate_tests::{crash_limit, CRASH_KEY, CRASH_NOW};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, mode, flush_every_ms, pause_us] = args.as_slice() else {
        eprintln!("usage: sled-crash-child DIR flush|background FLUSH_EVERY_MS PAUSE_US");
        std::process::exit(2);
    };
    let durability = match mode.as_str() {
        "flush" => Durability::EveryDecision,
        _ => Durability::Background,
    };
    let db = sled::Config::new()
        .path(dir)
        .flush_every_ms(Some(flush_every_ms.parse().unwrap()))
        .open()
        .unwrap();
    let limiter = SledLimiter::new(db.open_tree("crash").unwrap(), crash_limit(), durability);
    let pause = Duration::from_micros(pause_us.parse().unwrap());
    let mut stdout = std::io::stdout().lock();
    let mut admitted = 0u64;
    loop {
        if limiter
            .check_request(&Request::new(CRASH_KEY).at(CRASH_NOW))
            .unwrap()
            .allowed
        {
            admitted += 1;
            writeln!(stdout, "{admitted}").unwrap();
            stdout.flush().unwrap();
        }
        std::thread::sleep(pause);
    }
}
