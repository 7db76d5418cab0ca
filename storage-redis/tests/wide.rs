//! The scripts' wide arithmetic (`lua/lib.lua`) against Rust's 128-bit integers, on a
//! real `redis-server`: `muldivmod` (the quotient and remainder of `a × b + c` by `d`)
//! and `product_le` (`a × b <= c × d`) for factors up to the core's limits (10^9) times
//! instants below 2^53 and divisors up to 2^50, both sides of the double path's bound.

mod common;

use proptest::prelude::*;

use common::Server;

/// The shared helpers, then a loop over the arguments four at a time.
fn script() -> String {
    let lib = include_str!("../lua/lib.lua");
    format!(
        "{lib}
local out = {{}}
for i = 1, #ARGV, 4 do
  local a, b, c, d = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local q, r = muldivmod(a, b, c, d)
  out[#out + 1] = q
  out[#out + 1] = r
  out[#out + 1] = product_le(a, b, c, d) and 1 or 0
end
return out"
    )
}

/// A value up to `max`: anywhere, within a thousand of it, or a power of two's
/// neighbourhood (where limbs carry).
fn near(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        0..=max,
        max.saturating_sub(1000)..=max,
        (0..64u32).prop_map(move |k| (1u64 << k).min(max)),
        (0..64u32, 0..3u64).prop_map(move |(k, d)| (1u64 << k).saturating_sub(d).min(max)),
    ]
}

/// `(a, b, c, d)` whose quotient is below 2^53, as the scripts' callers guarantee.
fn operands() -> impl Strategy<Value = (u64, u64, u64, u64)> {
    (near(1_000_000_002), near((1 << 53) - 1), near(1 << 50))
        .prop_flat_map(|(a, b, d)| {
            let d = d.max(1);
            (Just(a), Just(b), 0..d, Just(d))
        })
        .prop_filter("a quotient below 2^53", |&(a, b, c, d)| {
            (u128::from(a) * u128::from(b) + u128::from(c)) / u128::from(d) < 1 << 53
        })
}

#[test]
fn wide_arithmetic_is_exact() {
    let server = Server::start();
    let script = redis::Script::new(&script());
    common::cases(
        &server,
        256,
        prop::collection::vec(operands(), 1..200),
        |server, cases| {
            let mut invocation = script.prepare_invoke();
            for &(a, b, c, d) in &cases {
                invocation.arg(a).arg(b).arg(c).arg(d);
            }
            let got: Vec<u64> = invocation
                .invoke(&mut server.connection())
                .expect("the script runs");
            for (&(a, b, c, d), got) in cases.iter().zip(got.chunks_exact(3)) {
                let n = u128::from(a) * u128::from(b) + u128::from(c);
                let d = u128::from(d);
                let le = u128::from(a) * u128::from(b) <= u128::from(c) * d;
                let want = [n / d, n % d, u128::from(le)];
                let got = got.iter().map(|&v| u128::from(v)).collect::<Vec<_>>();
                prop_assert_eq!(&got[..], &want[..], "{} {} {} {}", a, b, c, d);
            }
            Ok(())
        },
    );
}
