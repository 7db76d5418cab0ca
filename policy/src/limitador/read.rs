//! The limits file read as limitador's YAML library reads it into its `Limit`s: fields
//! by name, unknown ones ignored, `max_value` 0 where missing, `name` and `id` absent
//! where null, and its wording for what it refuses; then sluicegate's ranges.

use sluicegate_core::limits::{MAX_LIMIT, MAX_PERIOD};
use sluicegate_core::SECOND;

use super::{Expression, Limit, LimitadorError};
use crate::envoy::yaml::{self, At, Located, Node, Value};
use crate::file::Position;

/// The limits of the file `path` holding `text`.
pub(super) fn limits(path: &str, text: &str) -> Result<Vec<Limit>, LimitadorError> {
    read(text).map_err(|(at, message)| LimitadorError::Invalid {
        path: path.to_owned(),
        at: Position {
            line: at.line.max(1),
            column: at.column.max(1),
        },
        message,
    })
}

/// Whether `text` is a YAML list (limitador's file), not a mapping (Envoy's).
pub(super) fn is_list(text: &str) -> bool {
    matches!(
        yaml::parse(text),
        Ok(Some(Node {
            value: Value::Seq(_),
            ..
        }))
    )
}

fn read(text: &str) -> Result<Vec<Limit>, Located> {
    let Some(root) = yaml::parse(text)? else {
        return Ok(Vec::new());
    };
    let Value::Seq(items) = &root.value else {
        return Err((root.at, invalid(&root, "a sequence")));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, node)| limit(node).map_err(|(at, e)| (at, format!("[{i}]: {e}"))))
        .collect()
}

/// serde's words for a node that is not what was expected.
fn invalid(node: &Node, expected: &str) -> String {
    let found = match &node.value {
        _ if node.is_null() => "unit value".to_owned(),
        Value::Scalar(text, _) => format!("string {text:?}"),
        Value::Seq(_) => "sequence".to_owned(),
        Value::Map(_) => "map".to_owned(),
    };
    format!("invalid type: {found}, expected {expected}")
}

fn limit(node: &Node) -> Result<Limit, Located> {
    let Value::Map(pairs) = &node.value else {
        return Err((node.at, invalid(node, "struct Limit")));
    };
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| matches!(&k.value, Value::Scalar(key, _) if key == name))
            .map(|(_, v)| v)
    };
    let missing = |name: &str| (node.at, format!("missing field `{name}`"));
    let namespace = text(get("namespace").ok_or_else(|| missing("namespace"))?)?;
    let seconds = number(get("seconds").ok_or_else(|| missing("seconds"))?)?;
    let max_value = get("max_value").map(number).transpose()?.unwrap_or(0);
    let optional = |name| get(name).filter(|n| !n.is_null()).map(text).transpose();
    let (name, id) = (optional("name")?, optional("id")?);
    let conditions = expressions(get("conditions").ok_or_else(|| missing("conditions"))?)?;
    let variables = expressions(get("variables").ok_or_else(|| missing("variables"))?)?;
    let apps = get("sluicegate_apps")
        .filter(|n| !n.is_null())
        .map(|n| strings(n)?.into_iter().map(|(_, t)| Ok(t)).collect())
        .transpose()?;
    let seconds_node = get("seconds").map_or(node.at, |n| n.at);
    if seconds == 0 || seconds > MAX_PERIOD / SECOND {
        return Err((
            seconds_node,
            format!("seconds: {seconds} is outside 1 to {}", MAX_PERIOD / SECOND),
        ));
    }
    if max_value > MAX_LIMIT {
        let at = get("max_value").map_or(node.at, |n| n.at);
        return Err((at, format!("max_value: {max_value} is above {MAX_LIMIT}")));
    }
    Ok(Limit {
        namespace,
        max_value,
        seconds,
        name,
        id,
        conditions,
        variables,
        apps,
    })
}

fn text(node: &Node) -> Result<String, Located> {
    match &node.value {
        Value::Scalar(text, _) if !node.is_null() => Ok(text.clone()),
        _ => Err((node.at, invalid(node, "a string"))),
    }
}

fn number(node: &Node) -> Result<u64, Located> {
    match &node.value {
        Value::Scalar(text, true) if !node.is_null() => text
            .parse()
            .map_err(|_| (node.at, format!("invalid value: {text:?}, expected u64"))),
        _ => Err((node.at, invalid(node, "u64"))),
    }
}

/// A sequence of strings, each with where it is.
fn strings(node: &Node) -> Result<Vec<(At, String)>, Located> {
    match &node.value {
        Value::Seq(items) => items.iter().map(|n| Ok((n.at, text(n)?))).collect(),
        // serde_yaml reads an empty value as an empty list: limitador's example file has one.
        Value::Scalar(text, true) if text.is_empty() => Ok(Vec::new()),
        _ => Err((node.at, invalid(node, "a sequence"))),
    }
}

/// Expressions compiled, sorted by text, each once (limitador keeps a set).
fn expressions(node: &Node) -> Result<Vec<Expression>, Located> {
    let mut list = strings(node)?
        .into_iter()
        .map(|(at, source)| Expression::parse(&source).map_err(|e| (at, e)))
        .collect::<Result<Vec<_>, _>>()?;
    list.sort_by(|a, b| a.source().cmp(b.source()));
    list.dedup_by(|a, b| a.source() == b.source());
    Ok(list)
}
