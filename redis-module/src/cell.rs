//! `CL.THROTTLE key max_burst count period [quantity]`, as redis-cell's: the same
//! arguments, errors and five-integer reply (limited, limit, remaining, retry after and
//! reset after in whole seconds), decided by the core's exact
//! [`LeakyBucket::redis_cell`].

use sluicegate_core::state::BucketState;
use sluicegate_core::{Algorithm, Decision, DecodeError, LeakyBucket, ParamError, Ticks, SECOND};

use crate::engine::{Encoded, Write};

/// A parsed `CL.THROTTLE`.
#[derive(Debug)]
pub(crate) struct Throttle {
    /// The funnel: capacity `max_burst + 1`, leaking `count` per `period` seconds.
    pub bucket: LeakyBucket,
    /// The request's cost.
    pub quantity: u64,
}

/// Why `CL.THROTTLE`'s arguments are refused, worded as redis-cell's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CellError {
    #[error(
        "Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"
    )]
    Usage,
    #[error("Cell error: Couldn't parse as integer: {0}")]
    NotInteger(String),
    #[error("Cell error: Zero rates are not supported")]
    ZeroRate,
    #[error("Cell error: {0} must not be negative, got {1}")]
    Negative(&'static str, i64),
    #[error("Cell error: period of {0} seconds is too long")]
    PeriodTooLong(i64),
    /// Beyond the core's range, in the core's words.
    #[error("Cell error: {0}")]
    Param(#[from] ParamError),
}

impl Throttle {
    /// Parses the arguments after the command's name; errors worded as redis-cell's
    /// (`Cell error: ...`), parameters beyond the core's range in the core's words.
    /// (The key, the first argument, is opened by the command.)
    pub(crate) fn parse(args: &[&[u8]]) -> Result<Self, CellError> {
        let numbers = match args {
            [_key, rest @ ..] if (3..=4).contains(&rest.len()) => rest,
            _ => return Err(CellError::Usage),
        };
        let mut values = [0i64, 0, 0, 1];
        for (value, arg) in values.iter_mut().zip(numbers) {
            *value = std::str::from_utf8(arg)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| CellError::NotInteger(String::from_utf8_lossy(arg).into_owned()))?;
        }
        let [max_burst, count, period, quantity] = values;
        if count == 0 || period == 0 {
            return Err(CellError::ZeroRate);
        }
        let unsigned =
            |name: &'static str, v: i64| u64::try_from(v).map_err(|_| CellError::Negative(name, v));
        let period = unsigned("period", period)?
            .checked_mul(SECOND)
            .ok_or(CellError::PeriodTooLong(period))?;
        let bucket = LeakyBucket::redis_cell(
            unsigned("max_burst", max_burst)?,
            unsigned("count per period", count)?,
            period,
        )?;
        Ok(Self {
            bucket,
            quantity: unsigned("quantity", quantity)?,
        })
    }

    /// Decides at `now` from the key's value: the decision and the key's new value. A
    /// value redis-cell itself wrote (its arrival time in decimal nanoseconds) is read
    /// too, rounded up to the microsecond, so swapping the module keeps every limit.
    pub(crate) fn decide(
        &self,
        value: Option<&[u8]>,
        now: Ticks,
    ) -> Result<(Decision, Write), DecodeError> {
        let state = value.map(|b| self.decode(b)).transpose()?;
        let (d, new) = self.bucket.decide(state, now, self.quantity);
        Ok((
            d,
            new.map(|s| {
                let bytes = Encoded::of(|out, s| self.bucket.encode(s, out), &s);
                (bytes, d.reset_after)
            }),
        ))
    }

    fn decode(&self, bytes: &[u8]) -> Result<BucketState, DecodeError> {
        match legacy_tat(bytes) {
            Some(ticks) => {
                // The canonical encoding of that instant: whole ticks, no fraction.
                let mut canonical = vec![1, 5];
                canonical.extend(ticks.to_be_bytes());
                canonical.extend(0u64.to_be_bytes());
                self.bucket.decode(&canonical)
            }
            None => self.bucket.decode(bytes),
        }
    }
}

/// redis-cell's stored value, decimal nanoseconds, as microseconds rounded up. (A
/// canonical state starts with the version byte 1, never an ASCII digit.)
fn legacy_tat(bytes: &[u8]) -> Option<Ticks> {
    if bytes.is_empty() || bytes.len() > 20 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let ns: u64 = std::str::from_utf8(bytes).ok()?.parse().ok()?;
    Some(ns.div_ceil(1000))
}

/// The five integers redis-cell replies: times in whole seconds, rounded as redis-cell
/// rounds them (up when at least a millisecond is left over), retry -1 when admitted.
pub(crate) fn reply(d: &Decision) -> [i64; 5] {
    let mut fields = d.cl_throttle_reply();
    for field in &mut fields[3..] {
        if *field >= 0 {
            *field = seconds(*field);
        }
    }
    fields
}

/// Ticks as redis-cell's seconds: whole seconds, plus one if the rest has a whole
/// millisecond.
pub(crate) fn seconds(ticks: i64) -> i64 {
    let second = SECOND as i64;
    ticks / second + i64::from(ticks % second >= 1000)
}
