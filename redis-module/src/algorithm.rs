//! The module's grammar of an algorithm: the words of a command that name one of the
//! core's algorithms and its parameters, read into the core's [`AnyAlgorithm`], so
//! composites and bans of any members decide through the core's own dispatch.

use std::boxed::Box;

use sluicegate_core::{
    AnyAlgorithm, Ban, CalendarPeriod, CalendarWindow, CalendarWindowAt, FixedWindow, Kind,
    LeakyBucket, Pacing, SlidingCounter, SlidingLog, Ticks, TokenBucket,
};

use crate::args::{ArgError, Args};

/// The kinds a command names as one algorithm, in the order errors list them. A
/// composite is written as several keys, leases have their own commands.
const KINDS: [Kind; 6] = [
    Kind::FixedWindow,
    Kind::SlidingLog,
    Kind::SlidingCounter,
    Kind::TokenBucket,
    Kind::LeakyBucket,
    Kind::Pacing,
];

/// The grammar's own word for a penalty box around the algorithm that follows.
const BAN: &str = "ban";

/// How deep bans may wrap bans.
pub const MAX_BANS: usize = 4;

/// Reads one algorithm and its parameters, as the scripts name it:
/// `fixed_window limit period [counting_denied]`, `sliding_log limit period`,
/// `sliding_counter limit period`, `token_bucket|leaky_bucket|pacing capacity rate
/// period`, `ban threshold window duration <algorithm>`; each but pacing and a ban may
/// end in `overdraft N`, the most a report takes a key beyond its limit.
pub fn parse(args: &mut Args<'_>) -> Result<AnyAlgorithm, ArgError> {
    parse_nested(args, 0)
}

/// A ban wraps at most [`MAX_BANS`] levels deep, so no argument list can make the
/// server recurse without bound.
fn parse_nested(args: &mut Args<'_>, bans: usize) -> Result<AnyAlgorithm, ArgError> {
    let name = args.bytes("an algorithm")?;
    if name.eq_ignore_ascii_case(BAN.as_bytes()) {
        let threshold = args.u64("threshold")?;
        let window = args.u64("window")?;
        let duration = args.u64("duration")?;
        if bans >= MAX_BANS {
            return Err(ArgError::Syntax(format!(
                "bans nest at most {MAX_BANS} deep"
            )));
        }
        let inner = parse_nested(args, bans + 1)?;
        return Ok(AnyAlgorithm::Ban(Box::new(Ban::new(
            inner, threshold, window, duration,
        )?)));
    }
    Ok(match kind(name) {
        Some(Kind::FixedWindow) => {
            let mut window = FixedWindow::new(args.u64("limit")?, args.u64("period")?)?;
            if args.eat("counting_denied") {
                window = window.counting_denied();
            }
            window.with_overdraft(overdraft(args)?)?.into()
        }
        Some(Kind::SlidingLog) => SlidingLog::new(args.u64("limit")?, args.u64("period")?)?
            .with_overdraft(overdraft(args)?)?
            .into(),
        Some(Kind::SlidingCounter) => SlidingCounter::new(args.u64("limit")?, args.u64("period")?)?
            .with_overdraft(overdraft(args)?)?
            .into(),
        Some(Kind::TokenBucket) => {
            let (c, r, p) = bucket(args)?;
            TokenBucket::new(c, r, p)?
                .with_overdraft(overdraft(args)?)?
                .into()
        }
        Some(Kind::LeakyBucket) => {
            let (c, r, p) = bucket(args)?;
            LeakyBucket::new(c, r, p)?
                .with_overdraft(overdraft(args)?)?
                .into()
        }
        Some(Kind::Pacing) => {
            let (c, r, p) = bucket(args)?;
            Pacing::new(c, r, p)?.into()
        }
        // Not in `KINDS`: unknown words, and kinds this grammar writes otherwise.
        _ => return Err(unknown(name)),
    })
}

/// The kind `name` spells in any case, through the core's one list of names (which
/// reads the scripts' `token_bucket` as well as `token-bucket`). Without allocating:
/// every decision parses its algorithm.
fn kind(name: &[u8]) -> Option<Kind> {
    let mut lower = [0u8; 16];
    let lower = lower.get_mut(..name.len())?;
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    Kind::from_name(std::str::from_utf8(lower).ok()?)
}

fn unknown(name: &[u8]) -> ArgError {
    let names: Vec<String> = KINDS
        .iter()
        .map(|kind| kind.name().replace('-', "_"))
        .chain([BAN.to_owned()])
        .collect();
    ArgError::Syntax(format!(
        "unexpected '{}' (expected an algorithm: {})",
        String::from_utf8_lossy(name),
        names.join(", ")
    ))
}

/// A calendar window in its period, after its name: `limit start end [overdraft N]`,
/// the period `[start, end)` computed by the caller (the core has no calendar).
pub fn calendar(args: &mut Args<'_>) -> Result<CalendarWindowAt, ArgError> {
    let window = CalendarWindow::new(args.u64("limit")?)?;
    let period = CalendarPeriod::new(args.u64("start")?, args.u64("end")?)?;
    Ok(window.with_overdraft(overdraft(args)?)?.during(period))
}

/// `overdraft N` after an algorithm's parameters; 0 if absent.
fn overdraft(args: &mut Args<'_>) -> Result<u64, ArgError> {
    if args.eat("overdraft") {
        args.u64("overdraft")
    } else {
        Ok(0)
    }
}

fn bucket(args: &mut Args<'_>) -> Result<(u64, u64, Ticks), ArgError> {
    Ok((
        args.u64("capacity")?,
        args.u64("rate")?,
        args.u64("period")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &[&str]) -> Result<AnyAlgorithm, ArgError> {
        let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        parse(&mut Args::new(&words))
    }

    /// Every kind the errors list parses under its snake_case name, in any case, and
    /// under the core's name.
    #[test]
    fn every_listed_kind_parses() {
        for kind in KINDS {
            let name = kind.name().replace('-', "_");
            for spelled in [name.to_ascii_uppercase(), name, kind.name().to_owned()] {
                let algorithm = parse_words(&[&spelled, "1", "1", "1"]).unwrap();
                assert_eq!(algorithm.kind(), kind, "{spelled}");
            }
        }
    }

    /// Composites and leases are other commands' grammar: refused as unknown words.
    #[test]
    fn composite_and_concurrency_are_not_algorithms_here() {
        for name in ["composite", "concurrency", "nope", ""] {
            let error = parse_words(&[name, "1", "1", "1"]).unwrap_err().to_string();
            assert_eq!(
                error,
                format!(
                    "unexpected '{name}' (expected an algorithm: fixed_window, sliding_log, \
                     sliding_counter, token_bucket, leaky_bucket, pacing, ban)"
                )
            );
        }
    }
}
