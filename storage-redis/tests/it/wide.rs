//! The scripts' wide arithmetic (`lua/lib.lua`) against Rust's 128-bit integers, on a
//! real `redis-server`: `muldivmod` (the quotient and remainder of `a × b + c` by `d`)
//! and `product_le` (`a × b <= c × d`) for factors up to the core's limits (10^9) times
//! instants below 2^53 and divisors up to 2^50, both sides of the double path's bound.
//! And the frames instants are held in beyond 2^52 (`clock`, `frame`, `instant`).

use proptest::prelude::*;

use crate::common::{self, Server};

/// The shared helpers, then `body` (a loop over the arguments filling `out`), then the
/// reply `out`.
fn script(body: &str) -> String {
    let lib = include_str!("../../lua/lib.lua");
    format!("{lib}\nlocal out = {{}}\n{body}\nreturn out")
}

/// `muldivmod` and `product_le` over the arguments four at a time.
const WIDE: &str = "
for i = 1, #ARGV, 4 do
  local a, b, c, d = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local q, r = muldivmod(a, b, c, d)
  out[#out + 1] = q
  out[#out + 1] = r
  out[#out + 1] = product_le(a, b, c, d) and 1 or 0
end";

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
    let script = redis::Script::new(&script(WIDE));
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

/// For each (now, period, instant): the call's clock at `now`, then the frame of a
/// window of `period`: E - O, O / period and O as halves, the core's last instant
/// relative to O (-1 when not a double), `instant` relative to the epoch, and that
/// instant written back as halves.
const FRAMES: &str = "
for i = 1, #ARGV, 3 do
  clock(ARGV[i])
  local shift, origins, last = frame(tonumber(ARGV[i + 1]), 'wt')
  origins = origins or { 0, 0, 0, 0 }
  local at = tonumber(ARGV[i + 2])
  if epoch_hi ~= 0 then at = halves().instant(ARGV[i + 2]) end
  local h, l = halves().absolute(at, epoch_hi, epoch_lo)
  for _, v in ipairs({ shift, origins[1], origins[2], origins[3], origins[4],
      last < EXACT and last or -1, at, h, l }) do
    out[#out + 1] = v
  end
end";

/// `x` as the script's halves.
fn halves(x: u64) -> [i64; 2] {
    [(x >> 32) as i64, (x & 0xffff_ffff) as i64]
}

/// The epoch and frames `lua/lib.lua` holds instants in beyond 2^52, against Rust's
/// integers: times around 2^52 and up to the core's last instant, periods up to 366
/// days, and instants within 2^52 of the time either way.
#[test]
fn frames_are_exact() {
    const MAX_TICKS: u64 = 1 << 62;
    const MAX_PERIOD: u64 = 366 * 86_400 * 1_000_000;
    let server = Server::start();
    let script = redis::Script::new(&script(FRAMES));
    let case = (
        prop_oneof![near(MAX_TICKS), (1u64 << 52) - 1000..=(1 << 52) + 1000],
        near(MAX_PERIOD).prop_map(|p| p.max(1)),
        near(1 << 52),
        any::<bool>(),
    )
        .prop_map(|(now, period, delta, later)| {
            let at = if later {
                (now + delta).min(MAX_TICKS)
            } else {
                now.saturating_sub(delta)
            };
            (now, period, at)
        });
    common::cases(
        &server,
        64,
        prop::collection::vec(case, 1..100),
        |server, cases| {
            let mut invocation = script.prepare_invoke();
            for &(now, period, at) in &cases {
                invocation.arg(now).arg(period).arg(at);
            }
            let got: Vec<i64> = invocation
                .invoke(&mut server.connection())
                .expect("the script runs");
            for (&(now, period, at), got) in cases.iter().zip(got.chunks_exact(9)) {
                // Up to 2^52 the epoch is 0 and the frame the stored fields themselves.
                let epoch = if now > 1 << 52 { now } else { 0 };
                let shift = epoch % period;
                let origin = epoch - shift;
                let (q, o) = if epoch > 0 {
                    (halves(origin / period), halves(origin))
                } else {
                    ([0, 0], [0, 0])
                };
                let last = if epoch > 0 {
                    i64::try_from(MAX_TICKS - origin)
                        .ok()
                        .filter(|&l| l < 1 << 53)
                } else {
                    Some(1 << 52)
                };
                let relative = i64::try_from(i128::from(at) - i128::from(epoch)).unwrap();
                let mut want = vec![shift as i64, q[0], q[1], o[0], o[1]];
                want.extend([last.unwrap_or(-1), relative]);
                want.extend(halves(at));
                prop_assert_eq!(got, &want[..], "{} {} {}", now, period, at);
            }
            Ok(())
        },
    );
}
