//! What is wrong with a policy, named by the field at fault in the caller's own terms:
//! `--limit` on the command line, `` `limit` `` in a file or the API's JSON.

use std::fmt;

use sluicegate_core::ParamError;

use crate::duration::human;

/// How parameters are named in messages: as flags or as keys of a policy file (and of
/// the API's JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `--limit`.
    Flags,
    /// `` `limit` ``.
    File,
}

impl Style {
    /// `field` as this style writes it.
    pub fn name(self, field: &str) -> String {
        match self {
            Self::Flags => format!("--{field}"),
            Self::File => format!("`{field}`"),
        }
    }
}

/// What is wrong with a policy, and the parameter at fault if it is one (`limits[1].rate`
/// for a composite's member, `ban.window` for the ban's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The field at fault, as the file names it.
    pub field: Option<String>,
    /// A sentence for people.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Problem {}

impl Problem {
    /// A problem with the policy as a whole, no one field.
    pub fn whole(message: String) -> Self {
        Self {
            field: None,
            message,
        }
    }

    /// The same problem inside `outer` (`limits[1]`, `ban`).
    pub(crate) fn within(self, outer: &str, style: Style) -> Self {
        Self {
            field: Some(
                self.field
                    .map_or_else(|| outer.to_owned(), |f| format!("{outer}.{f}")),
            ),
            message: format!("{}: {}", style.name(outer), self.message),
        }
    }
}

/// A parameter error in the units the user wrote: durations as durations.
pub fn param_problem(e: &ParamError, style: Style) -> Problem {
    match *e {
        ParamError::OutOfRange {
            name,
            value,
            min,
            max,
        } => {
            let (value, min, max) = if matches!(
                name,
                "period" | "lease" | "max_lease" | "ttl" | "window" | "duration"
            ) {
                (human(value), human(min), human(max))
            } else {
                (value.to_string(), min.to_string(), max.to_string())
            };
            Problem {
                field: Some(name.to_owned()),
                message: format!(
                    "{} must be between {min} and {max}, got {value}",
                    style.name(name)
                ),
            }
        }
        ParamError::HorizonTooLong {
            capacity,
            rate,
            period,
        } => Problem {
            field: Some("capacity".into()),
            message: format!(
                "a bucket of capacity {capacity} refilled {rate} per {} takes more than 2^53 µs (285 years) to refill; raise {} or lower {}",
                human(period),
                style.name("rate"),
                style.name("capacity")
            ),
        },
        ref other => Problem::whole(other.to_string()),
    }
}

/// `a`, `a and b`, `a, b and c`.
pub fn list(items: &[String]) -> String {
    join(items, "and")
}

/// `a`, `a or b`, `a, b or c`.
pub fn list_or(items: &[String]) -> String {
    join(items, "or")
}

fn join(items: &[String], word: &str) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} {word} {last}", init.join(", ")),
    }
}
