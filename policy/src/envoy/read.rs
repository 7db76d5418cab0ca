//! Their YAML read into domains, with their checks and their messages, each error
//! at `PATH:LINE:COLUMN` as for sluicegate's TOML.

use sluicegate_core::Kind;

use super::yaml::{self, At, Located, Node, Value};
use super::{Descriptor, Domain, EnvoyError, Level, Limit, Rule, Unit};
use crate::file::Position;
use crate::problem::Style;

/// Every key their service accepts: it checks names, not where they are, so a key
/// valid somewhere is ignored elsewhere. Then sluicegate's two: `sluicegate_apps` (top
/// level) and `sluicegate_algorithm` (in a `rate_limit`).
const KEYS: [&str; 18] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "sluicegate_apps",
    "sluicegate_algorithm",
];

/// A mapping's fields by name, each known ([`KEYS`]) and given once.
struct Fields<'a> {
    at: At,
    pairs: Vec<(&'a str, &'a Node)>,
}

impl<'a> Fields<'a> {
    fn of(node: &'a Node) -> Result<Self, Located> {
        let Value::Map(pairs) = &node.value else {
            return Err((node.at, "expected a mapping".into()));
        };
        let mut fields = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            let Value::Scalar(name, _) = &key.value else {
                return Err((key.at, "config error, key is not of type string".into()));
            };
            if !KEYS.contains(&name.as_str()) {
                return Err((key.at, format!("config error, unknown key '{name}'")));
            }
            if fields.iter().any(|(n, _)| n == name) {
                return Err((key.at, format!("key '{name}' given twice")));
            }
            fields.push((name.as_str(), value));
        }
        Ok(Self {
            at: node.at,
            pairs: fields,
        })
    }

    fn get(&self, name: &str) -> Option<&'a Node> {
        self.pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// A string field ("" if absent or null); a number or a boolean is its text, as
    /// their YAML library reads one into a string.
    fn string(&self, name: &str) -> Result<&'a str, Located> {
        match self.get(name) {
            None => Ok(""),
            Some(node) if node.is_null() => Ok(""),
            Some(Node {
                value: Value::Scalar(text, _),
                ..
            }) => Ok(text),
            Some(node) => Err((node.at, format!("'{name}' must be a string"))),
        }
    }

    /// A boolean field (false if absent), spelled as YAML 1.1 allows, as theirs reads it.
    fn flag(&self, name: &str) -> Result<bool, Located> {
        let Some(node) = self.get(name).filter(|n| !n.is_null()) else {
            return Ok(false);
        };
        match &node.value {
            Value::Scalar(text, true) => match text.to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "y" => Ok(true),
                "false" | "no" | "off" | "n" => Ok(false),
                _ => Err((node.at, format!("'{name}' must be true or false"))),
            },
            _ => Err((node.at, format!("'{name}' must be true or false"))),
        }
    }

    /// A list field (empty if absent or null).
    fn list(&self, name: &str) -> Result<&'a [Node], Located> {
        match self.get(name) {
            None => Ok(&[]),
            Some(node) if node.is_null() => Ok(&[]),
            Some(Node {
                value: Value::Seq(items),
                ..
            }) => Ok(items),
            Some(node) => Err((node.at, format!("'{name}' must be a list"))),
        }
    }
}

/// One file's domain and its name; `path` names the file in errors.
pub(super) fn domain(path: &str, text: &str) -> Result<(String, Domain), EnvoyError> {
    read(path, text).map_err(|(at, message)| EnvoyError::Invalid {
        path: path.to_owned(),
        at: Position {
            line: at.line,
            column: at.column,
        },
        message,
    })
}

fn read(path: &str, text: &str) -> Result<(String, Domain), Located> {
    let root =
        yaml::parse(text).map_err(|(at, e)| (at, format!("error loading config file: {e}")))?;
    let Some(root) = root.filter(|r| !r.is_null()) else {
        return Err((
            At { line: 1, column: 1 },
            "config file cannot have empty domain".into(),
        ));
    };
    let fields = Fields::of(&root)?;
    let name = fields.string("domain")?;
    if name.is_empty() {
        return Err((fields.at, "config file cannot have empty domain".into()));
    }
    let apps = match fields.get("sluicegate_apps") {
        None => None,
        Some(node) => Some(apps(node)?),
    };
    let root = descriptors(fields.list("descriptors")?, &format!("{name}."))?;
    Ok((
        name.to_owned(),
        Domain {
            file: path.to_owned(),
            apps,
            root,
        },
    ))
}

/// `sluicegate_apps: [NAME, …]`.
fn apps(node: &Node) -> Result<Vec<String>, Located> {
    let Value::Seq(items) = &node.value else {
        return Err((
            node.at,
            "'sluicegate_apps' must be a list of app names".into(),
        ));
    };
    items
        .iter()
        .map(|item| match &item.value {
            Value::Scalar(name, _) if !item.is_null() => Ok(name.clone()),
            _ => Err((
                item.at,
                "'sluicegate_apps' must be a list of app names".into(),
            )),
        })
        .collect()
}

/// One list of descriptors, whose full keys start with `prefix` (`domain.` and the
/// keys above).
fn descriptors(items: &[Node], prefix: &str) -> Result<Level, Located> {
    let mut level = Level::default();
    for item in items {
        let fields = Fields::of(item)?;
        let key = fields.string("key")?;
        if key.is_empty() {
            return Err((fields.at, "descriptor has empty key".into()));
        }
        let value = fields.string("value")?;
        let own = if value.is_empty() {
            key.to_owned()
        } else {
            format!("{key}_{value}")
        };
        let full = format!("{prefix}{own}");
        if level.by_key.contains_key(&own) {
            return Err((
                fields.at,
                format!("duplicate descriptor composite key '{full}'"),
            ));
        }
        let share_threshold = fields.flag("share_threshold")?;
        if share_threshold && !own.contains('*') {
            return Err((fields.at, format!("share_threshold can only be used with wildcard values (containing '*'), but found key '{own}'")));
        }
        let rule = match fields.get("rate_limit") {
            Some(node) if !node.is_null() => Some(rule(node, &full, &fields)?),
            _ => None,
        };
        if own.contains('*') {
            let parts = own.split('*').map(str::to_owned).collect();
            level.wildcards.push((own.clone(), parts));
        }
        let children = descriptors(fields.list("descriptors")?, &format!("{full}."))?;
        level.by_key.insert(
            own,
            Descriptor {
                rule,
                children,
                share_threshold,
            },
        );
    }
    Ok(level)
}

/// The rule of a `rate_limit` block at `node`, of the descriptor `descriptor` whose
/// full key is `id`.
fn rule(node: &Node, id: &str, descriptor: &Fields<'_>) -> Result<Rule, Located> {
    let fields = Fields::of(node)?;
    let unlimited = fields.flag("unlimited")?;
    let unit_name = fields.string("unit")?;
    let unit = Unit::from_name(unit_name);
    let unit_at = fields.get("unit").map_or(fields.at, |n| n.at);
    let limit = match unit {
        Some(_) if unlimited => {
            return Err((
                unit_at,
                "should not specify rate limit unit when unlimited".into(),
            ))
        }
        None if unlimited => Limit::Unlimited,
        None => return Err((unit_at, format!("invalid rate limit unit '{unit_name}'"))),
        Some(unit) => Limit::Rate {
            requests_per_unit: requests(&fields)?,
            unit,
            algorithm: algorithm(&fields)?,
        },
    };
    let name = fields.string("name")?;
    let mut replaces = Vec::new();
    for entry in fields.list("replaces")? {
        let replaced = Fields::of(entry)?.string("name")?;
        if replaced.is_empty() {
            return Err((entry.at, "should not have an empty replaces entry".into()));
        }
        if replaced == name {
            return Err((
                entry.at,
                "replaces should not contain name of same descriptor".into(),
            ));
        }
        replaces.push(replaced.to_owned());
    }
    let rule = Rule {
        id: id.to_owned(),
        limit,
        shadow: descriptor.flag("shadow_mode")?,
        quota: descriptor.flag("quota_mode")?,
        name: (!name.is_empty()).then(|| name.to_owned()),
        replaces,
        detailed_metric: descriptor.flag("detailed_metric")?,
    };
    if let (Some(policy), Limit::Rate { algorithm, .. }) = (rule.policy(), &rule.limit) {
        policy.build(Style::File).map_err(|problem| {
            let at = fields.get("requests_per_unit").map_or(fields.at, |n| n.at);
            (
                at,
                format!("requests_per_unit with {algorithm}: {}", problem.message),
            )
        })?;
    }
    Ok(rule)
}

/// `requests_per_unit` (0 if absent, as theirs: a rule denying every request).
fn requests(fields: &Fields<'_>) -> Result<u32, Located> {
    let Some(node) = fields.get("requests_per_unit").filter(|n| !n.is_null()) else {
        return Ok(0);
    };
    match &node.value {
        Value::Scalar(text, true) => text.parse().ok(),
        _ => None,
    }
    .ok_or((
        node.at,
        "'requests_per_unit' must be an integer from 0 to 4294967295".into(),
    ))
}

/// `sluicegate_algorithm`: a rate algorithm (theirs, a fixed window, if absent).
fn algorithm(fields: &Fields<'_>) -> Result<Kind, Located> {
    let name = fields.string("sluicegate_algorithm")?;
    if name.is_empty() {
        return Ok(Kind::FixedWindow);
    }
    // Not leases, composites or calendar windows: a unit of time is a period.
    let rate = |kind: &Kind| {
        !matches!(
            kind,
            Kind::Concurrency | Kind::Composite | Kind::CalendarWindow
        )
    };
    Kind::from_name(name).filter(rate).ok_or_else(|| {
        let at = fields
            .get("sluicegate_algorithm")
            .map_or(fields.at, |n| n.at);
        let rates: Vec<&str> = Kind::ALL
            .iter()
            .filter(|k| rate(k))
            .map(|k| k.name())
            .collect();
        (
            at,
            format!(
                "'sluicegate_algorithm' must be one of {}, got '{name}'",
                rates.join(", ")
            ),
        )
    })
}
