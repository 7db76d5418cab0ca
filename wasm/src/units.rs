//! JS numbers in and out: whole units, and milliseconds (JS's unit of time) to and from
//! the core's microsecond ticks.

use alloc::string::String;

use sluicegate_core::clock::MAX_TICKS;
use sluicegate_core::{Decision, Ticks};

use crate::error::Error;

/// The largest integer a JS number holds exactly (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A whole, non-negative, exactly representable number: costs, limits, rates.
// Inlined, the error built out of line: on `check`'s path a call and a returned `Error`
// cost a tenth of the decision.
#[inline(always)]
pub(crate) fn whole(name: &'static str, value: f64) -> Result<u64, Error> {
    if (0.0..=MAX_SAFE_INTEGER).contains(&value) && is_integer(value) {
        Ok(to_u64(value))
    } else {
        Err(not_whole(name, value))
    }
}

#[cold]
#[inline(never)]
fn not_whole(name: &'static str, value: f64) -> Error {
    Error::NotWhole {
        name,
        shown: show(value),
    }
}

/// Milliseconds (fractions allowed, rounded to the microsecond) as ticks.
#[inline(always)]
pub(crate) fn ticks_from_ms(name: &'static str, ms: f64) -> Result<Ticks, Error> {
    let ticks = ms * 1000.0;
    #[allow(clippy::cast_precision_loss)] // 2^62 is a power of two: exact as a double.
    let max = MAX_TICKS as f64;
    // One comparison for the common case: NaN fails it, an infinity too (as does an
    // `ms` whose product overflows). Below half a tick rounds to 0, and at 2^62 less
    // half a tick or more to 2^62, as before; checked out of line.
    if ticks >= 0.0 && ticks < max {
        // Non-negative: the fraction is exact, and rounds half up, as std's `round`.
        let whole = to_u64(ticks);
        #[allow(clippy::cast_precision_loss)] // Below 2^62: the truncation is exact.
        let fraction = ticks - whole as f64;
        Ok(whole + u64::from(fraction >= 0.5))
    } else {
        ticks_at_the_edges(name, ms)
    }
}

/// `ticks_from_ms` outside `[0, 2^62)` ticks: half a tick either side rounds in.
#[cold]
#[inline(never)]
fn ticks_at_the_edges(name: &'static str, ms: f64) -> Result<Ticks, Error> {
    let ticks = round(ms * 1000.0);
    #[allow(clippy::cast_precision_loss)] // 2^62 is a power of two: exact as a double.
    let max = MAX_TICKS as f64;
    if ms.is_finite() && (0.0..=max).contains(&ticks) {
        Ok(to_u64(ticks))
    } else {
        Err(not_milliseconds(name, ms))
    }
}

#[cold]
#[inline(never)]
fn not_milliseconds(name: &'static str, ms: f64) -> Error {
    Error::NotMilliseconds {
        name,
        shown: show(ms),
    }
}

/// A decision as `limiter.js` reads it: `allowed` (1 or 0), `limit`, `remaining`,
/// `retryAfterMs` (-1 for never), `resetAfterMs`, `delayMs`.
pub(crate) type Slots = [f64; 6];

/// Writes `decision` into `slots`; whether it admits.
#[inline(always)]
pub(crate) fn land(slots: &mut Slots, decision: &Decision) -> bool {
    // Limits are at most 10^9 and times below 2^53 µs: exact as JS numbers.
    #[allow(clippy::cast_precision_loss)]
    let number = |n: u64| n as f64;
    *slots = [
        f64::from(u8::from(decision.allowed)),
        number(decision.limit),
        number(decision.remaining),
        decision.retry_after.map_or(-1.0, ms_from_ticks),
        ms_from_ticks(decision.reset_after),
        ms_from_ticks(decision.delay),
    ];
    decision.allowed
}

/// Ticks as milliseconds, the nearest double: durations and times below 2^51 µs (71
/// years) read back exactly.
pub(crate) fn ms_from_ticks(ticks: Ticks) -> f64 {
    #[allow(clippy::cast_precision_loss)] // Reported times are below 2^53 µs.
    let ticks = ticks as f64;
    ticks / 1000.0
}

/// A JS number as JS prints it: Rust's float formatting would add 20 KB to the wasm.
#[cfg(target_arch = "wasm32")]
fn show(value: f64) -> String {
    #[wasm_bindgen::prelude::wasm_bindgen(
        inline_js = "export function show(n) { return String(n); }"
    )]
    extern "C" {
        fn show(n: f64) -> String;
    }
    show(value)
}

/// A JS number as JS prints it (natively, for tests).
#[cfg(not(target_arch = "wasm32"))]
fn show(value: f64) -> String {
    alloc::format!("{value}")
}

/// Whether `value`, at most 2^53 in size, has no fraction (`f64::fract` is std's).
fn is_integer(value: f64) -> bool {
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let truncated = value as i64 as f64;
    truncated == value
}

/// `value` rounded half away from zero, as std's `f64::round`.
#[inline(always)]
fn round(value: f64) -> f64 {
    // Beyond 2^52 every double is an integer; NaN and infinities stay as they are.
    if !(value > -4.5e15 && value < 4.5e15) {
        return value;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let truncated = value as i64 as f64;
    let fraction = value - truncated;
    if fraction >= 0.5 {
        truncated + 1.0
    } else if fraction <= -0.5 {
        truncated - 1.0
    } else {
        truncated
    }
}

/// A whole number from 0 to 2^62, already checked, as an integer.
fn to_u64(value: f64) -> u64 {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let whole = value as u64;
    whole
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers() {
        assert_eq!(whole("cost", 0.0), Ok(0));
        assert_eq!(whole("cost", 42.0), Ok(42));
        assert_eq!(whole("cost", MAX_SAFE_INTEGER), Ok((1 << 53) - 1));
        for bad in [-1.0, 1.5, f64::NAN, f64::INFINITY, MAX_SAFE_INTEGER + 1.0] {
            let err = whole("cost", bad).unwrap_err().message();
            assert!(err.starts_with("cost must be a whole number"), "{err}");
        }
    }

    #[test]
    fn milliseconds() {
        assert_eq!(ticks_from_ms("periodMs", 1000.0), Ok(1_000_000));
        assert_eq!(ticks_from_ms("periodMs", 0.0015), Ok(2));
        assert_eq!(ms_from_ticks(1_500), 1.5);
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1e20] {
            assert!(ticks_from_ms("nowMs", bad).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn rounding_is_stds(value in proptest::num::f64::ANY) {
            let (ours, std) = (round(value), value.round());
            proptest::prop_assert!(ours == std || (ours.is_nan() && std.is_nan()), "{} {}", ours, std);
        }

        #[test]
        fn milliseconds_round_as_std(
            any in proptest::num::f64::ANY,
            near in -1.0f64..1e13,
            edge in 4.611_686_018_427_387e15f64..4.611_686_018_427_389e15,
        ) {
            for ms in [any, near, edge] {
                let ticks = (ms * 1000.0).round();
                #[allow(clippy::cast_precision_loss)]
                let fits = ms.is_finite() && (0.0..=MAX_TICKS as f64).contains(&ticks);
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let expected = fits.then_some(ticks as u64);
                proptest::prop_assert_eq!(ticks_from_ms("t", ms).ok(), expected, "{}", ms);
            }
        }

        #[test]
        fn milliseconds_read_back_exactly_below_2_pow_51(ticks in 0..(1u64 << 51)) {
            proptest::prop_assert_eq!(ticks_from_ms("t", ms_from_ticks(ticks)), Ok(ticks));
        }
    }
}
