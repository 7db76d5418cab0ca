//! Policy files (TOML), read with the position of the value at fault in every error.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;

use crate::build::Built;
use crate::model::{Policy, PolicyFile};
use crate::problem::{Problem, Style};

/// Why a policy file (or a directory of them) cannot be used; each names the file and,
/// where it can, the line and column of the value at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The file or directory cannot be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file or directory.
        path: String,
        /// What the system answered.
        error: std::io::Error,
    },
    /// The text is not a policy file.
    #[error("{path}{}: {message}", at.map_or_else(String::new, |at| at.to_string()))]
    Syntax {
        /// The file.
        path: String,
        /// Where, if the parser knows.
        at: Option<Position>,
        /// The parser's message.
        message: String,
    },
    /// The file has no policy of that name.
    #[error("{path}: no policy {name:?} (it has: {})", known.join(", "))]
    NoPolicy {
        /// The file.
        path: String,
        /// The name asked for.
        name: String,
        /// The names it has.
        known: Vec<String>,
    },
    /// A policy does not build.
    #[error("{path}{}: policy {name:?}: {problem}", at.map_or_else(String::new, |at| at.to_string()))]
    Policy {
        /// The file.
        path: String,
        /// Where the value at fault (else the policy's table) is written.
        at: Option<Position>,
        /// The policy's name.
        name: String,
        /// What is wrong with it.
        problem: Problem,
    },
}

/// Errors carried on as text by callers that keep messages as strings.
impl From<FileError> for String {
    fn from(error: FileError) -> Self {
        error.to_string()
    }
}

/// A place in a file, counted from 1; shown as `:LINE:COLUMN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The line.
    pub line: usize,
    /// The column, in characters.
    pub column: usize,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, ":{}:{}", self.line, self.column)
    }
}

/// Where each parameter of a policy is written, read once the file is known to be valid.
#[derive(Debug, Deserialize)]
struct SpanFile {
    policies: BTreeMap<String, toml::Spanned<Spans>>,
}

#[derive(Debug, Deserialize)]
struct Spans {
    limit: Option<toml::Spanned<toml::Value>>,
    capacity: Option<toml::Spanned<toml::Value>>,
    rate: Option<toml::Spanned<toml::Value>>,
    period: Option<toml::Spanned<toml::Value>>,
    lease: Option<toml::Spanned<toml::Value>>,
    max_lease: Option<toml::Spanned<toml::Value>>,
    limits: Option<toml::Spanned<toml::Value>>,
    ban: Option<toml::Spanned<toml::Value>>,
    on_full: Option<toml::Spanned<toml::Value>>,
    calendar: Option<toml::Spanned<toml::Value>>,
    #[serde(rename = "time-zone", alias = "time_zone")]
    time_zone: Option<toml::Spanned<toml::Value>>,
    overdraft: Option<toml::Spanned<toml::Value>>,
    when: Option<toml::Spanned<toml::Value>>,
    key: Option<toml::Spanned<toml::Value>>,
}

impl Spans {
    /// Where the top-level field `field` is written.
    fn of(&self, field: &str) -> Option<&toml::Spanned<toml::Value>> {
        match field {
            "limit" => self.limit.as_ref(),
            "capacity" => self.capacity.as_ref(),
            "rate" => self.rate.as_ref(),
            "period" => self.period.as_ref(),
            "lease" => self.lease.as_ref(),
            "max_lease" => self.max_lease.as_ref(),
            "on_full" => self.on_full.as_ref(),
            "limits" => self.limits.as_ref(),
            "ban" => self.ban.as_ref(),
            "calendar" => self.calendar.as_ref(),
            "time-zone" => self.time_zone.as_ref(),
            "overdraft" => self.overdraft.as_ref(),
            "when" => self.when.as_ref(),
            "key" => self.key.as_ref(),
            _ => None,
        }
    }
}

impl PolicyFile {
    /// Reads a policy file's `text`; `path` names it in errors (`PATH:LINE:COLUMN: ...`).
    pub fn parse(path: &str, text: &str) -> Result<Self, FileError> {
        toml::from_str(text).map_err(|e| FileError::Syntax {
            path: path.to_owned(),
            at: e.span().map(|span| position(text, &span)),
            message: e.message().trim_end().to_owned(),
        })
    }

    /// The file at `path`, read from disk.
    pub fn read(path: &str) -> Result<(Self, String), FileError> {
        let text = std::fs::read_to_string(path).map_err(|error| FileError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::parse(path, &text).map(|file| (file, text))
    }
}

/// Reads the policy `name` from the TOML file at `path` and builds it; an error says
/// where in the file the value at fault is written.
pub fn load(path: &str, name: &str) -> Result<(Policy, Built), FileError> {
    let (file, text) = PolicyFile::read(path)?;
    let policy = file
        .policies
        .get(name)
        .cloned()
        .ok_or_else(|| FileError::NoPolicy {
            path: path.to_owned(),
            name: name.to_owned(),
            known: file.policies.keys().cloned().collect(),
        })?;
    let built = build_at(path, &text, name, &policy)?;
    Ok((policy, built))
}

impl PolicyFile {
    /// Reads a policy file's `text` and builds every policy, an error pointing at the
    /// value at fault as [`load`]'s does: a file that passes runs whole.
    pub fn parse_built(path: &str, text: &str) -> Result<Self, FileError> {
        let file = Self::parse(path, text)?;
        for (name, policy) in &file.policies {
            build_at(path, text, name, policy)?;
        }
        Ok(file)
    }
}

/// Builds `policy`, named `name` in the file at `path` whose text is `text`.
fn build_at(path: &str, text: &str, name: &str, policy: &Policy) -> Result<Built, FileError> {
    policy.build(Style::File).map_err(|problem| {
        // Point at the value at fault, else at the policy's table.
        let spans: Option<toml::Spanned<Spans>> = toml::from_str::<SpanFile>(text)
            .ok()
            .and_then(|mut f| f.policies.remove(name));
        let at = spans.map(|spans| {
            // A composite's member or the ban's field: point at the list or the table.
            let top = problem
                .field
                .as_deref()
                .map(|f| f.split(['.', '[']).next().unwrap_or(f));
            let field = top.and_then(|field| spans.get_ref().of(field));
            position(
                text,
                &field.map_or_else(|| spans.span(), toml::Spanned::span),
            )
        });
        FileError::Policy {
            path: path.to_owned(),
            at,
            name: name.to_owned(),
            problem,
        }
    })
}

/// `path` if it is a file, else the files of the directory `path` that `wanted` takes
/// (by name), sorted: how every command and the service list a directory of policy
/// files.
pub fn listed(
    path: &std::path::Path,
    wanted: impl Fn(&std::path::Path) -> bool,
) -> Result<Vec<std::path::PathBuf>, FileError> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let entries = std::fs::read_dir(path).map_err(|error| FileError::Read {
        path: path.display().to_string(),
        error,
    })?;
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|file| wanted(file) && file.is_file())
        .collect();
    files.sort_unstable();
    Ok(files)
}

/// Where `span` starts in `text`.
fn position(text: &str, span: &Range<usize>) -> Position {
    let before = text.get(..span.start).unwrap_or(text);
    Position {
        line: before.matches('\n').count() + 1,
        column: before.rsplit('\n').next().unwrap_or("").chars().count() + 1,
    }
}
