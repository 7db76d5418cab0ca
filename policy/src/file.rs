//! Policy files (TOML), read with the position of the value at fault in every error.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;

use crate::build::Built;
use crate::model::{File, Policy};
use crate::problem::Style;

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
            _ => None,
        }
    }
}

impl File {
    /// Reads a policy file's `text`; `path` names it in errors (`PATH:LINE:COLUMN: ...`).
    pub fn parse(path: &str, text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|span| position(text, &span))
                .unwrap_or_default();
            format!("{path}{at}: {}", e.message().trim_end())
        })
    }

    /// The file at `path`, read from disk.
    pub fn read(path: &str) -> Result<(Self, String), String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        Self::parse(path, &text).map(|file| (file, text))
    }
}

/// Reads the policy `name` from the TOML file at `path` and builds it; an error says
/// where in the file the value at fault is written.
pub fn load(path: &str, name: &str) -> Result<(Policy, Built), String> {
    let (file, text) = File::read(path)?;
    let policy = file.policies.get(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = file.policies.keys().map(String::as_str).collect();
        format!("{path}: no policy {name:?} (it has: {})", known.join(", "))
    })?;
    let built = build_at(path, &text, name, &policy)?;
    Ok((policy, built))
}

impl File {
    /// Reads a policy file's `text` and builds every policy, an error pointing at the
    /// value at fault as [`load`]'s does: a file that passes runs whole.
    pub fn parse_built(path: &str, text: &str) -> Result<Self, String> {
        let file = Self::parse(path, text)?;
        for (name, policy) in &file.policies {
            build_at(path, text, name, policy)?;
        }
        Ok(file)
    }
}

/// Builds `policy`, named `name` in the file at `path` whose text is `text`.
fn build_at(path: &str, text: &str, name: &str, policy: &Policy) -> Result<Built, String> {
    policy.build(Style::File).map_err(|problem| {
        // Point at the value at fault, else at the policy's table.
        let spans: Option<toml::Spanned<Spans>> = toml::from_str::<SpanFile>(text)
            .ok()
            .and_then(|mut f| f.policies.remove(name));
        let at = spans.map_or_else(String::new, |spans| {
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
        format!("{path}{at}: policy {name:?}: {}", problem.message)
    })
}

/// `path` if it is a file, else the files of the directory `path` that `wanted` takes
/// (by name), sorted: how every command and the service list a directory of policy
/// files.
pub fn listed(
    path: &std::path::Path,
    wanted: impl Fn(&std::path::Path) -> bool,
) -> Result<Vec<std::path::PathBuf>, String> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let shown = path.display();
    let entries = std::fs::read_dir(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|file| wanted(file) && file.is_file())
        .collect();
    files.sort_unstable();
    Ok(files)
}

/// `:LINE:COLUMN` of the start of `span` in `text`, both counted from 1.
fn position(text: &str, span: &Range<usize>) -> String {
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!(":{line}:{column}")
}
