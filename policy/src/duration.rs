//! Durations as policies write them (`"250ms"`) and as people read them (`250 ms`).

use std::fmt;

use serde::{Deserialize, Serialize};
use sluicegate_core::Ticks;

/// A duration in microseconds, written `"1500us"`, `"250ms"`, `"1s"`, `"5m"`, `"1h"`,
/// `"1d"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyDuration(pub Ticks);

impl<'de> Deserialize<'de> for PolicyDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for PolicyDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&short(self.0))
    }
}

impl fmt::Display for PolicyDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&short(self.0))
    }
}

/// Units a duration is written in, largest first: (suffix, ticks, name for people).
const UNITS: [(&str, Ticks, &str); 6] = [
    ("d", 86_400_000_000, "days"),
    ("h", 3_600_000_000, "h"),
    ("m", 60_000_000, "min"),
    ("s", 1_000_000, "s"),
    ("ms", 1_000, "ms"),
    ("us", 1, "µs"),
];

/// A duration that does not read: the text given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad duration {0:?}: use a whole number with us, ms, s, m, h or d")]
pub struct DurationError(pub String);

/// Reads `"250ms"`: a whole number and one of `us`, `ms`, `s`, `m`, `h`, `d`.
pub fn parse_duration(text: &str) -> Result<PolicyDuration, DurationError> {
    let bad = || DurationError(text.to_owned());
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = UNITS
        .iter()
        .find(|(suffix, _, _)| *suffix == unit)
        .map(|&(_, scale, _)| scale)
        .ok_or_else(bad)?;
    number
        .parse::<Ticks>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .map(PolicyDuration)
        .ok_or_else(bad)
}

/// A duration as the flags and files write it, in its largest exact unit: `1s`, `1500ms`.
pub fn short(ticks: Ticks) -> String {
    let (suffix, scale, _) = UNITS
        .iter()
        .find(|(_, scale, _)| ticks % *scale == 0)
        .copied()
        .unwrap_or(UNITS[5]);
    format!("{}{suffix}", ticks / scale)
}

/// A duration for people, in the largest unit it reaches, to at most three decimals:
/// `2 days`, `1.5 s`, `250 ms`, `0 s`.
pub fn human(ticks: Ticks) -> String {
    if ticks == 0 {
        return "0 s".into();
    }
    let (_, scale, name) = UNITS
        .iter()
        .find(|(_, scale, _)| ticks >= *scale)
        .copied()
        .unwrap_or(UNITS[5]);
    let whole = ticks / scale;
    // Thousandths of the unit, rounded to nearest.
    let milli = (u128::from(ticks % scale) * 1000 + u128::from(scale) / 2) / u128::from(scale);
    let (whole, milli) = if milli == 1000 {
        (whole + 1, 0)
    } else {
        (whole, milli)
    };
    let name = day_or_days(name, whole == 1 && milli == 0);
    if milli == 0 {
        format!("{whole} {name}")
    } else {
        let fraction = format!("{milli:03}");
        format!("{whole}.{} {name}", fraction.trim_end_matches('0'))
    }
}

/// `ticks` in the largest unit `step` is a whole number of, for the ticks of an axis:
/// `0`, `6 h`, `12 h`, `18 h`, `24 h`.
pub fn in_unit_of(ticks: Ticks, step: Ticks) -> String {
    if ticks == 0 {
        return "0".into();
    }
    let (_, scale, name) = UNITS
        .iter()
        .find(|(_, scale, _)| step % *scale == 0 && ticks % *scale == 0)
        .copied()
        .unwrap_or(UNITS[5]);
    let count = ticks / scale;
    format!("{count} {}", day_or_days(name, count == 1))
}

/// The one unit whose name has a singular.
fn day_or_days(name: &'static str, one: bool) -> &'static str {
    if name == "days" && one {
        "day"
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_for_people() {
        for (us, text) in [
            (0, "0 s"),
            (1, "1 µs"),
            (1_500_000, "1.5 s"),
            (250_000, "250 ms"),
            (86_400_000_000, "1 day"),
            (2 * 86_400_000_000, "2 days"),
            (366 * 86_400_000_000, "366 days"),
            (59_999_999, "60 s"),
        ] {
            assert_eq!(human(us), text, "{us} µs");
        }
        assert!(human(u64::MAX).ends_with(" days"));
        assert_eq!(short(1_000_000), "1s");
        assert_eq!(short(1_500_000), "1500ms");
        assert_eq!(short(0), "0d");
        assert_eq!(in_unit_of(86_400_000_000, 86_400_000_000), "1 day");
        assert_eq!(in_unit_of(6 * 3_600_000_000, 3_600_000_000), "6 h");
    }

    #[test]
    fn durations_parse_and_print_back() {
        for text in ["1500us", "250ms", "1s", "5m", "1h", "1d"] {
            assert_eq!(parse_duration(text).unwrap().to_string(), text);
        }
        for bad in ["", "1", "ms", "1.5s", "-1s", "1 s", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
