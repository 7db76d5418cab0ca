//! What the bindings throw: each invalid option, call or saved state, turned into a JS
//! `Error` only where a call crosses into JS.

use sluicegate_core::clock::MAX_TICKS;
use sluicegate_core::{DecodeError, Kind, ParamError, Ticks};

/// Why a limiter cannot be built or a call cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Error {
    /// The options are not an object.
    #[error("options must be an object")]
    NotAnObject,
    /// Reading a field threw (a getter).
    #[error("cannot read options.{0}")]
    Unreadable(&'static str),
    /// A field holds another type.
    #[error("options.{name} must be {expected}")]
    WrongType {
        name: &'static str,
        expected: &'static str,
    },
    /// A field its algorithm needs is absent.
    #[error("options.{0} is required")]
    Required(&'static str),
    /// A duration its algorithm needs is absent.
    #[error("options.{0} is required (milliseconds)")]
    RequiredMs(&'static str),
    /// No `algorithm`.
    #[error("options.algorithm is required: {list}", list = Algorithms)]
    NoAlgorithm,
    /// An `algorithm` this build does not run.
    #[error("unknown algorithm \"{0}\": expected {list}", list = Algorithms)]
    UnknownAlgorithm(String),
    /// A composite without `members`.
    #[error("options.members is required for a composite: an array of options")]
    NoMembers,
    /// An `overdraft` on a limit that takes no reports of its own.
    #[error(
        "options.overdraft is for windows, buckets and calendar windows (a composite's \
         members take their own; pacing and bans take no reports)"
    )]
    Overdraft,
    /// A count that is not a whole JS number.
    #[error("{name} must be a whole number from 0 to 2^53 - 1, got {shown}")]
    NotWhole { name: &'static str, shown: String },
    /// A time that is not a number of milliseconds in range.
    #[error(
        "{name} must be a number of milliseconds from 0 to {max}, got {shown}",
        max = MAX_TICKS / 1000
    )]
    NotMilliseconds { name: &'static str, shown: String },
    /// A parameter out of the core's range, durations in milliseconds.
    #[error("{}", describe(.0))]
    Param(#[from] ParamError),
    /// A `calendar` that is not one.
    #[error("options.calendar must be \"day\", \"week\" or \"month\", got \"{0}\"")]
    Calendar(String),
    /// A `timeZone` the bundled database does not know.
    #[cfg(feature = "calendar")]
    #[error("options.timeZone: {0}")]
    TimeZone(sluicegate_core::calendar::CalendarError),
    /// `boundariesMs` that make no periods.
    #[error("options.boundariesMs must be two or more increasing times, at most 366 days apart")]
    Boundaries,
    /// A calendar window without `boundariesMs` in a build without the zone database.
    #[cfg(not(feature = "calendar"))]
    #[error("options.boundariesMs is required: this build has no time-zone database")]
    NoBoundaries,
    /// A throttle that could queue nothing.
    #[error("maxQueued must be at least 1, got {0}")]
    MaxQueued(u64),
    /// `reserve` on a limit that cannot book ahead.
    #[error(
        "reserve needs a token bucket, leaky bucket, pacing, or a composite of them \
         (windows and bans cannot book ahead): use check"
    )]
    CannotReserve,
    /// `report` on a limit that takes no reports.
    #[error(
        "report needs a window, a log, a token or leaky bucket, a calendar window, or a \
         composite of them (pacing and bans take no reports)"
    )]
    NoReports,
    /// Bytes that are not a state of this limit.
    #[error("cannot load the saved state: {0}")]
    Load(DecodeError),
    /// A throttle's queue at its `maxQueued`.
    #[error("the throttle's queue is full: {0} calls are waiting")]
    QueueFull(usize),
    /// A cost above what the limit ever admits.
    #[error("a call of cost {0} can never fit this limit")]
    NeverFits(u64),
}

/// Whether this build runs `kind`: every rate algorithm; leases are the server's.
pub(crate) fn runs(kind: Kind) -> bool {
    kind != Kind::Concurrency
}

/// The `algorithm` values this build takes, quoted: each kind's name in quotes, the last after "or".
struct Algorithms;

impl std::fmt::Display for Algorithms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = Kind::ALL.into_iter().filter(|&k| runs(k)).collect();
        for (i, kind) in names.iter().enumerate() {
            let separator = match i {
                0 => "",
                i if i + 1 == names.len() => " or ",
                _ => ", ",
            };
            write!(f, "{separator}\"{kind}\"")?;
        }
        Ok(())
    }
}

/// The core's message, with durations in the milliseconds JS passed them in.
fn describe(error: &ParamError) -> String {
    match *error {
        ParamError::OutOfRange {
            name,
            value,
            min,
            max,
        } if matches!(name, "period" | "window" | "duration") => format!(
            "{name}Ms must be between {} and {} milliseconds, got {}",
            ms_text(min),
            ms_text(max),
            ms_text(value)
        ),
        ref other => other.to_string(),
    }
}

/// Ticks as milliseconds in decimal, written with integers only: `1500` is `"1.5"`.
fn ms_text(ticks: Ticks) -> String {
    let (ms, micros) = (ticks / 1000, ticks % 1000);
    if micros == 0 {
        format!("{ms}")
    } else {
        format!("{ms}.{micros:03}").trim_end_matches('0').to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_as_text() {
        assert_eq!(ms_text(1_500), "1.5");
        assert_eq!(ms_text(1), "0.001");
        assert_eq!(ms_text(31_622_400_000_000), "31622400000");
    }
}
