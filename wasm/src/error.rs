//! What the bindings throw: each invalid option, call or saved state, turned into a JS
//! `Error` only where a call crosses into JS. Messages are written without `core::fmt`,
//! whose machinery would be a fifth of the client module.

use alloc::string::String;

use sluicegate_core::clock::MAX_TICKS;
use sluicegate_core::{DecodeError, Kind, ParamError, Ticks};

/// Why a limiter cannot be built or a call cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Error {
    /// A field its algorithm needs is absent.
    Required(&'static str),
    /// A duration its algorithm needs is absent.
    RequiredMs(&'static str),
    /// No `algorithm`.
    NoAlgorithm,
    /// An `algorithm` this module does not run.
    UnknownAlgorithm(String),
    /// An option only the full module reads.
    #[cfg(not(feature = "full"))]
    FullOnly(&'static str),
    /// A composite without `members`.
    #[cfg(feature = "full")]
    NoMembers,
    /// An `overdraft` on a limit that takes no reports of its own.
    #[cfg(feature = "full")]
    Overdraft,
    /// A count that is not a whole JS number.
    NotWhole { name: &'static str, shown: String },
    /// A time that is not a number of milliseconds in range.
    NotMilliseconds { name: &'static str, shown: String },
    /// A parameter out of the core's range, durations in milliseconds.
    Param(ParamError),
    /// A `calendar` that is not one.
    #[cfg(feature = "full")]
    Calendar(String),
    /// A `timeZone` the bundled database does not know.
    #[cfg(feature = "calendar")]
    TimeZone(sluicegate_core::calendar::CalendarError),
    /// `boundariesMs` that make no periods.
    #[cfg(feature = "full")]
    Boundaries,
    /// A calendar window without `boundariesMs` in a build without the zone database.
    #[cfg(all(feature = "full", not(feature = "calendar")))]
    NoBoundaries,
    /// A throttle that could queue nothing.
    MaxQueued(u64),
    /// `reserve` on a limit that cannot book ahead.
    CannotReserve,
    /// `report` on a limit that takes no reports.
    #[cfg(feature = "full")]
    NoReports,
    /// Bytes that are not a state of this limit.
    Load(DecodeError),
    /// A throttle's queue at its `maxQueued`.
    QueueFull(usize),
    /// A cost above what the limit ever admits.
    NeverFits(u64),
}

impl From<ParamError> for Error {
    fn from(error: ParamError) -> Self {
        Self::Param(error)
    }
}

/// A message under construction: text and decimal integers, nothing formatted.
struct Text(String);

// Each step outlined: inlined into every message, they were 2 KB more.
impl Text {
    #[inline(never)]
    fn with(mut self, text: &str) -> Self {
        self.0.push_str(text);
        self
    }

    #[inline(never)]
    fn number(mut self, mut n: u64) -> Self {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            // A digit: below 10.
            #[allow(clippy::cast_possible_truncation)]
            let digit = (n % 10) as u8;
            digits[at] = b'0' + digit;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        digits[at..]
            .iter()
            .for_each(|&d| self.0.push(char::from(d)));
        self
    }

    /// Ticks as milliseconds in decimal: `1500` is `1.5`.
    fn ms(self, ticks: Ticks) -> Self {
        let (ms, micros) = (ticks / 1000, ticks % 1000);
        let text = self.number(ms);
        if micros == 0 {
            return text;
        }
        let fraction = Self(String::new()).number(1000 + micros).0;
        text.with(".")
            .with(fraction.get(1..).unwrap_or_default().trim_end_matches('0'))
    }

    fn quoted(self, text: &str) -> Self {
        self.with("\"").with(text).with("\"")
    }
}

impl Error {
    /// What went wrong, in words for the `Error` JS gets.
    pub(crate) fn message(&self) -> String {
        let text = Text(String::new());
        match self {
            Self::Required(name) => text.with("options.").with(name).with(" is required"),
            Self::RequiredMs(name) => text
                .with("options.")
                .with(name)
                .with(" is required (milliseconds)"),
            Self::NoAlgorithm => algorithms(text.with("options.algorithm is required: ")),
            Self::UnknownAlgorithm(name) => algorithms(
                text.with("unknown algorithm ")
                    .quoted(name)
                    .with(": expected "),
            ),
            #[cfg(not(feature = "full"))]
            Self::FullOnly(name) => text.with("options.").with(name).with(FULL_ONLY),
            #[cfg(feature = "full")]
            Self::NoMembers => {
                text.with("options.members is required for a composite: an array of options")
            }
            #[cfg(feature = "full")]
            Self::Overdraft => text.with(
                "options.overdraft is for windows, buckets and calendar windows (a \
                 composite's members take their own; pacing and bans take no reports)",
            ),
            Self::NotWhole { name, shown } => text
                .with(name)
                .with(" must be a whole number from 0 to 2^53 - 1, got ")
                .with(shown),
            Self::NotMilliseconds { name, shown } => text
                .with(name)
                .with(" must be a number of milliseconds from 0 to ")
                .number(MAX_TICKS / 1000)
                .with(", got ")
                .with(shown),
            Self::Param(error) => param(text, error),
            #[cfg(feature = "full")]
            Self::Calendar(name) => text
                .with("options.calendar must be \"day\", \"week\" or \"month\", got ")
                .quoted(name),
            #[cfg(feature = "calendar")]
            Self::TimeZone(error) => text
                .with("options.timeZone: ")
                .with(&alloc::string::ToString::to_string(error)),
            #[cfg(feature = "full")]
            Self::Boundaries => text.with(
                "options.boundariesMs must be two or more increasing times, at most 366 days apart",
            ),
            #[cfg(all(feature = "full", not(feature = "calendar")))]
            Self::NoBoundaries => {
                text.with("options.boundariesMs is required: this build has no time-zone database")
            }
            Self::MaxQueued(n) => text.with("maxQueued must be at least 1, got ").number(*n),
            Self::CannotReserve => text.with(
                "reserve needs a token bucket, leaky bucket, pacing, or a composite of them \
                 (windows and bans cannot book ahead): use check",
            ),
            #[cfg(feature = "full")]
            Self::NoReports => text.with(
                "report needs a window, a log, a token or leaky bucket, a calendar window, or \
                 a composite of them (pacing and bans take no reports)",
            ),
            Self::Load(error) => decode(text.with("cannot load the saved state: "), error),
            Self::QueueFull(n) => text
                .with("the throttle's queue is full: ")
                .number(*n as u64)
                .with(" calls are waiting"),
            Self::NeverFits(cost) => text
                .with("a call of cost ")
                .number(*cost)
                .with(" can never fit this limit"),
        }
        .0
    }
}

/// Where the client module sends those who need more.
#[cfg(not(feature = "full"))]
const FULL_ONLY: &str = " needs the full module: import from \"sluicegate-wasm/full\"";

/// Whether this module runs `kind`: the client every window, bucket and pacing; the
/// full one every rate algorithm (leases are the server's).
pub(crate) fn runs(kind: Kind) -> bool {
    if cfg!(feature = "full") {
        kind != Kind::Concurrency
    } else {
        kind.is_periodic()
    }
}

/// The `algorithm` values this module takes, quoted, the last after "or".
fn algorithms(text: Text) -> Text {
    let mut names = Kind::ALL.into_iter().filter(|&k| runs(k)).peekable();
    let mut text = text;
    let mut first = true;
    while let Some(kind) = names.next() {
        let separator = match (first, names.peek()) {
            (true, _) => "",
            (false, None) => " or ",
            (false, Some(_)) => ", ",
        };
        text = text.with(separator).quoted(kind.name());
        first = false;
    }
    if cfg!(feature = "full") {
        text
    } else {
        text.with(FULL_MODULE_KINDS)
    }
}

/// What the client's list of algorithms adds.
const FULL_MODULE_KINDS: &str = " (composites and calendars: \"sluicegate-wasm/full\")";

/// The core's message, durations in the milliseconds JS passed them in.
fn param(text: Text, error: &ParamError) -> Text {
    match *error {
        ParamError::OutOfRange {
            name,
            value,
            min,
            max,
        } => {
            let ms = matches!(name, "period" | "window" | "duration");
            let text = text.with(name);
            if ms {
                text.with("Ms must be between ")
                    .ms(min)
                    .with(" and ")
                    .ms(max)
                    .with(" milliseconds, got ")
                    .ms(value)
            } else {
                text.with(" must be between ")
                    .number(min)
                    .with(" and ")
                    .number(max)
                    .with(", got ")
                    .number(value)
            }
        }
        ParamError::HorizonTooLong { capacity, rate, .. } => text
            .with("a bucket of capacity ")
            .number(capacity)
            .with(" refilled ")
            .number(rate)
            .with(" per period takes more than 2^53 microseconds to refill; raise the rate or lower the capacity"),
        ParamError::EmptyComposite => text.with("a composite limit needs at least one member"),
        ParamError::NotTaken { kind, name } | ParamError::Missing { kind, name } => text
            .with(kind.name())
            .with(if matches!(error, ParamError::Missing { .. }) {
                " needs a "
            } else {
                " takes no "
            })
            .with(name),
        _ => text.with("these options are not a rate limit"),
    }
}

/// The core's decoding error, in words.
fn decode(text: Text, error: &DecodeError) -> Text {
    match *error {
        DecodeError::Truncated { len } => text
            .with("state is truncated: needed more than ")
            .number(len as u64)
            .with(" bytes"),
        DecodeError::TrailingBytes { extra } => text
            .with("state has ")
            .number(extra as u64)
            .with(" unexpected trailing bytes"),
        DecodeError::UnsupportedVersion(version) => text
            .with("state encoding version ")
            .number(version.into())
            .with(" is not supported (this build reads version 1)"),
        DecodeError::WrongAlgorithm { expected, found } => text
            .with("state is another algorithm's (tag ")
            .number(found.into())
            .with(", expected ")
            .number(expected.into())
            .with(")"),
        DecodeError::InvalidField { field } => text
            .with("state field ")
            .with(field)
            .with(" is invalid for these parameters"),
        _ => text.with("these bytes are not a state of this limit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_milliseconds_as_text() {
        let ms = |ticks| Text(String::new()).ms(ticks).0;
        assert_eq!(ms(1_500), "1.5");
        assert_eq!(ms(1), "0.001");
        assert_eq!(ms(1_010), "1.01");
        assert_eq!(ms(31_622_400_000_000), "31622400000");
        assert_eq!(Text(String::new()).number(u64::MAX).0, u64::MAX.to_string());
        assert_eq!(Text(String::new()).number(0).0, "0");
    }

    /// The core's own messages, where they carry no durations, read the same.
    #[test]
    fn the_cores_messages_read_as_the_core_writes_them() {
        let out_of_range = ParamError::OutOfRange {
            name: "capacity",
            value: 0,
            min: 1,
            max: 1_000_000_000,
        };
        let decode = DecodeError::Truncated { len: 3 };
        for (ours, core) in [
            (Error::Param(out_of_range.clone()), out_of_range.to_string()),
            (
                Error::Param(ParamError::EmptyComposite),
                ParamError::EmptyComposite.to_string(),
            ),
            (
                Error::Load(decode.clone()),
                format!("cannot load the saved state: {decode}"),
            ),
        ] {
            assert_eq!(ours.message(), core);
        }
        let period = ParamError::OutOfRange {
            name: "period",
            value: 0,
            min: 1,
            max: 1_500,
        };
        assert_eq!(
            Error::Param(period).message(),
            "periodMs must be between 0.001 and 1.5 milliseconds, got 0"
        );
    }
}
