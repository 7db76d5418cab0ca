//! The module's grammar of an algorithm: the words of a command that name one of the
//! core's algorithms and its parameters, read into the core's [`AnyAlgorithm`], so
//! composites and bans of any members decide through the core's own dispatch.

use std::boxed::Box;

use sluicegate_core::calendar::{CalendarPeriod, CalendarWindow, CalendarWindowAt};
use sluicegate_core::{AnyAlgorithm, Ban, Field, Kind, Params};

use crate::args::{ArgError, Args};

/// The kinds a command names as one algorithm, in the order errors list them: those of
/// one fixed period. A composite is written as several keys, a calendar window with its
/// period, leases have their own commands.
fn kinds() -> impl Iterator<Item = Kind> {
    Kind::ALL.into_iter().filter(|kind| kind.is_periodic())
}

/// The grammar's own word for a penalty box around the algorithm that follows.
const BAN: &str = "ban";

/// How deep bans may wrap bans.
pub(crate) const MAX_BANS: usize = 4;

/// Reads one algorithm and its parameters, as the scripts name it ([`Kind::script_name`])
/// followed by its [`Kind::fields`]: `fixed_window limit period [counting_denied]`,
/// `sliding_log limit period`, `sliding_counter limit period`,
/// `token_bucket|leaky_bucket|pacing capacity rate period`,
/// `ban threshold window duration <algorithm>`; each kind that takes an overdraft may end
/// in `overdraft N`, the most a report takes a key beyond its limit.
pub(crate) fn parse(args: &mut Args<'_>) -> Result<AnyAlgorithm, ArgError> {
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
    let kind = kind(name)
        .filter(|kind| kind.is_periodic())
        .ok_or_else(|| unknown(name))?;
    let mut params = Params::new();
    for &field in kind.fields() {
        let value = args.u64(field.name())?;
        params = match field {
            Field::Limit => params.limit(value),
            Field::Capacity => params.capacity(value),
            Field::Rate => params.rate(value),
            Field::Period => params.period(value),
            // A kind of one fixed period takes numbers only.
            _ => return Err(unknown(name)),
        };
    }
    if kind == Kind::FixedWindow {
        params = params.count_denied(args.eat("counting_denied"));
    }
    if kind.takes_overdraft() {
        params = params.overdraft(overdraft(args)?);
    }
    Ok(AnyAlgorithm::new(kind, params)?)
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
    let names: Vec<&str> = kinds().map(Kind::script_name).chain([BAN]).collect();
    ArgError::Syntax(format!(
        "unexpected '{}' (expected an algorithm: {})",
        String::from_utf8_lossy(name),
        names.join(", ")
    ))
}

/// A calendar window in its period, after its name: `limit start end [overdraft N]`,
/// the period `[start, end)` computed by the caller (the core has no calendar).
pub(crate) fn calendar(args: &mut Args<'_>) -> Result<CalendarWindowAt, ArgError> {
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
        for kind in kinds() {
            let name = kind.script_name();
            for spelled in [name.to_ascii_uppercase(), name.into(), kind.name().into()] {
                let algorithm = parse_words(&[&spelled, "1", "1", "1"]).unwrap();
                assert_eq!(algorithm.kind(), kind, "{spelled}");
            }
        }
    }

    /// Composites and leases are other commands' grammar: refused as unknown words.
    #[test]
    fn composite_and_concurrency_are_not_algorithms_here() {
        let others = [Kind::Composite, Kind::Concurrency, Kind::CalendarWindow];
        let names = others.map(Kind::script_name);
        for name in names.into_iter().chain(["nope", ""]) {
            let error = parse_words(&[name, "1", "1", "1"]).unwrap_err().to_string();
            let listed = [
                Kind::FixedWindow,
                Kind::SlidingLog,
                Kind::SlidingCounter,
                Kind::TokenBucket,
                Kind::LeakyBucket,
                Kind::Pacing,
            ]
            .map(Kind::script_name)
            .join(", ");
            let expected = format!("unexpected '{name}' (expected an algorithm: {listed}, ban)");
            assert_eq!(error, expected);
        }
    }
}
