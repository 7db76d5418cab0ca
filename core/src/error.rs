use thiserror::Error;

/// Parameters outside the documented ranges. Returned by every constructor.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParamError {
    /// A parameter is outside its range.
    #[error("{name} must be between {min} and {max}, got {value}")]
    OutOfRange {
        /// The parameter's name.
        name: &'static str,
        /// The value given.
        value: u64,
        /// The smallest value accepted.
        min: u64,
        /// The largest value accepted.
        max: u64,
    },
    /// A bucket would take longer than [`MAX_HORIZON`](crate::limits::MAX_HORIZON) ticks to
    /// refill from empty (`capacity × period / rate`).
    #[error("a bucket of capacity {capacity} refilled {rate} per {period} ticks takes more than 2^53 ticks to refill; raise the rate or lower the capacity")]
    HorizonTooLong {
        /// The capacity given.
        capacity: u64,
        /// The rate given.
        rate: u64,
        /// The period given.
        period: u64,
    },
    /// A composite limit with no members.
    #[error("a composite limit needs at least one member")]
    EmptyComposite,
    /// A parameter given to a kind that takes none ([`AnyAlgorithm::new`](crate::AnyAlgorithm::new)).
    #[error("{kind} takes no {name}")]
    NotTaken {
        /// The kind built.
        kind: crate::Kind,
        /// The parameter's name.
        name: &'static str,
    },
    /// A parameter the kind needs was not given.
    #[error("{kind} needs a {name}")]
    Missing {
        /// The kind built.
        kind: crate::Kind,
        /// The parameter's name.
        name: &'static str,
    },
    /// A kind that is not a rate algorithm (leases) asked of [`AnyAlgorithm::new`](crate::AnyAlgorithm::new).
    #[error("{0} is not a rate algorithm")]
    NotRate(crate::Kind),
}

impl ParamError {
    #[inline]
    pub(crate) fn check(name: &'static str, value: u64, min: u64, max: u64) -> Result<u64, Self> {
        if (min..=max).contains(&value) {
            Ok(value)
        } else {
            Err(Self::OutOfRange {
                name,
                value,
                min,
                max,
            })
        }
    }
}

/// An algorithm named by its tag in a message: "a token bucket's".
struct Whose(u8);

impl core::fmt::Display for Whose {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match crate::encoding::tag::name(self.0) {
            Some(name) => write!(f, "a {name}'s"),
            None => write!(f, "for an unknown algorithm (tag {})", self.0),
        }
    }
}

/// Bytes that are not a valid state of the algorithm decoding them.
///
/// Returned for truncated, corrupt, foreign or newer-version bytes; decoding never
/// panics and never yields a state that admits more than a real one could.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Fewer bytes than the encoding needs.
    #[error("state is truncated: needed more than {len} bytes")]
    Truncated {
        /// The number of bytes given.
        len: usize,
    },
    /// More bytes than the encoding has.
    #[error("state has {extra} unexpected trailing bytes")]
    TrailingBytes {
        /// How many bytes were left over.
        extra: usize,
    },
    /// The version byte is not one this build reads.
    #[error("state encoding version {0} is not supported (this build reads version 1)")]
    UnsupportedVersion(u8),
    /// The state belongs to another algorithm. The message names both algorithms.
    #[error("state is {}, expected {}", Whose(*found), Whose(*expected))]
    WrongAlgorithm {
        /// The tag this algorithm writes.
        expected: u8,
        /// The tag found.
        found: u8,
    },
    /// A field holds a value no valid state of these parameters can have.
    #[error("state field {field} is invalid for these parameters")]
    InvalidField {
        /// The field's name.
        field: &'static str,
    },
}
