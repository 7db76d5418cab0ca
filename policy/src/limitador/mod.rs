//! Kuadrant limitador's limits file (a YAML list of limits, read as it is) and which of
//! its limits a request's descriptors make apply, with its CEL conditions and variables;
//! shared by `sluicegate serve --limitador-config` and `sluicegate policy validate`.
//!
//! As limitador: a limit applies where every condition holds; its variables' values
//! (each expression's text to its value) name its counter; a variable whose key is
//! missing skips the limit. Where limitador is wrong it is not followed: comprehension
//! variables are bound (limitador reads them as unbound names and the expression is
//! false), an index out of range is an error rather than a panic, and expressions are
//! bounded (see [`Expression`]).

mod read;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::cel::LIMIT;
pub use crate::cel::{
    Bindings, EvalError, Expression, MAX_COMPREHENSION_DEPTH, MAX_EXPRESSION_LEN, MAX_NESTING,
};
use crate::file::{FileError, Position};

/// A counter's variables: each variable's text and its value, in the order of the
/// texts (the value borrowed from the request where it is a descriptor's entry).
pub type Values<'l, 'a> = Vec<(&'l str, Cow<'a, str>)>;

/// The longest value a variable may name a counter with, in bytes.
pub const MAX_VALUE_LEN: usize = 1024;

/// Why a limits file is refused: the file, where, and limitador's words where it has
/// them (`PATH:LINE:COLUMN: ...`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimitadorError {
    /// The file cannot be read.
    #[error(transparent)]
    Read(#[from] FileError),
    /// The text is not a limits file limitador (or sluicegate's range) would load.
    #[error("{path}{at}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// Where the value at fault is.
        at: Position,
        /// What is wrong.
        message: String,
    },
}

/// One limit of the file.
#[derive(Debug, Clone)]
pub struct Limit {
    /// `namespace`: the RLS `domain` (or the HTTP API's `namespace`) it belongs to.
    pub namespace: String,
    /// `max_value`: hits admitted per window (0, the default, admits none).
    pub max_value: u64,
    /// `seconds`: the window's length.
    pub seconds: u64,
    /// `name`, shown in headers and metrics, and to conditions as `limit.name`.
    pub name: Option<String>,
    /// `id`, shown to conditions as `limit.id`.
    pub id: Option<String>,
    /// `conditions`, sorted by their text, each once (limitador keeps a set).
    pub conditions: Vec<Expression>,
    /// `variables`, sorted by their text, each once.
    pub variables: Vec<Expression>,
    /// `sluicegate_apps`: the apps that may ask for its namespace; none listed: any.
    pub apps: Option<Vec<String>>,
}

impl Limit {
    /// What makes two limits one (limitador's): namespace, seconds, conditions and
    /// variables as text; a change of `max_value` or `name` keeps its counters.
    pub fn identity(&self) -> String {
        let texts = |list: &[Expression]| {
            list.iter()
                .map(|e| e.source().to_owned())
                .collect::<Vec<_>>()
        };
        let seconds = self.seconds.to_string();
        let (conditions, variables) = (texts(&self.conditions), texts(&self.variables));
        let entries = [
            ("namespace", self.namespace.as_str()),
            ("seconds", &seconds),
        ]
        .into_iter()
        .chain(conditions.iter().map(|c| ("condition", c.as_str())))
        .chain(variables.iter().map(|v| ("variable", v.as_str())));
        crate::envoy::key_of(entries)
    }

    /// Whether the limit applies to a request of `bindings`, and if it does its
    /// counter's variables (text to value): `Ok(None)` where a condition is false or a
    /// variable's key is missing.
    pub fn applies<'a>(
        &self,
        bindings: &mut Bindings<'a>,
    ) -> Result<Option<Values<'_, 'a>>, EvalError> {
        let read = (self.conditions.iter().chain(&self.variables)).any(|e| e.reads(LIMIT));
        bindings.for_limit(self.name.as_deref(), self.id.as_deref(), read);
        for condition in &self.conditions {
            if !condition.test(bindings)? {
                return Ok(None);
            }
        }
        // limitador's: a variable reading any name but the descriptors skips the limit.
        if self
            .variables
            .iter()
            .any(|v| v.reads_other_than(&[crate::cel::DESCRIPTORS]))
        {
            return Ok(None);
        }
        let mut values = Values::new();
        for variable in &self.variables {
            let Some(value) = variable.text(bindings)? else {
                return Ok(None);
            };
            if value.len() > MAX_VALUE_LEN {
                return Err(EvalError(format!(
                    "the value of {} is longer than {MAX_VALUE_LEN} bytes",
                    variable.source()
                )));
            }
            // Sorted and each once: in the order of the texts.
            values.push((variable.source(), value));
        }
        Ok(Some(values))
    }
}

/// The limits of one namespace, in file order, each identity once (the first wins).
#[derive(Debug, Clone, Default)]
pub struct Namespace {
    /// Its limits (shared: an answer names the limits it applied).
    pub limits: Vec<Arc<Limit>>,
}

impl Namespace {
    /// Whether `app` may ask for this namespace: none of its limits names apps, or one
    /// names `app`.
    pub fn admits_app(&self, app: &str) -> bool {
        let mut listed = self
            .limits
            .iter()
            .filter_map(|l| l.apps.as_ref())
            .peekable();
        listed.peek().is_none() || listed.flatten().any(|a| a == app)
    }

    /// The limits that apply to a request of `bindings`, each with its counter's
    /// variables, by index in [`Namespace::limits`].
    pub fn applying<'a>(
        &self,
        bindings: &mut Bindings<'a>,
    ) -> Result<Vec<(usize, Values<'_, 'a>)>, EvalError> {
        let mut applying = Vec::new();
        for (i, limit) in self.limits.iter().enumerate() {
            if let Some(values) = limit.applies(bindings)? {
                applying.push((i, values));
            }
        }
        Ok(applying)
    }
}

/// Whether the YAML `text` is a limits file (a list), not Envoy's (a mapping).
pub fn is_limits_file(text: &str) -> bool {
    read::is_list(text)
}

/// A limits file: its namespaces by name.
#[derive(Debug, Clone, Default)]
pub struct Config {
    namespaces: BTreeMap<String, Namespace>,
}

impl Config {
    /// The namespace `name`.
    pub fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.get(name)
    }

    /// Every namespace by name.
    pub fn namespaces(&self) -> impl Iterator<Item = (&str, &Namespace)> {
        self.namespaces.iter().map(|(n, ns)| (n.as_str(), ns))
    }

    /// One file's `text`; `path` names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, LimitadorError> {
        let mut config = Self::default();
        for limit in read::limits(path, text)? {
            let namespace = config
                .namespaces
                .entry(limit.namespace.clone())
                .or_default();
            // limitador keeps a set: a second limit of the same identity is dropped.
            let identity = limit.identity();
            if !namespace.limits.iter().any(|l| l.identity() == identity) {
                namespace.limits.push(Arc::new(limit));
            }
        }
        Ok(config)
    }

    /// The file `path`.
    pub fn load(path: &Path) -> Result<Self, LimitadorError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| FileError::Read {
            path: name.clone(),
            error,
        })?;
        Self::parse(&name, &text)
    }
}

#[cfg(test)]
mod tests;
