//! What commands print: aligned `name  value` rows, JSON lines, a decision's record.

use std::io::{BufWriter, Write};

use serde::Serialize;
use sluicegate_core::{Decision, Reported, Ticks};

use crate::failure::{output, Failure};

/// One decision as a JSON line: what `replay`, `check` and `peek` print. The decision
/// is in the core's one wire shape, beside the request it answers.
#[derive(Debug, Serialize)]
pub struct Record<'a> {
    t_us: Ticks,
    key: &'a str,
    cost: u64,
    /// A report's or refund's row: its kind and units (a decision's row has none).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    report: Option<ReportFields>,
    #[serde(flatten)]
    decision: Decision,
}

/// What a `replay` report or refund row adds: the units recorded and dropped; its
/// decision is the key's standing after it.
#[derive(Debug, Serialize)]
struct ReportFields {
    kind: &'static str,
    recorded: u64,
    dropped: u64,
}

impl<'a> Record<'a> {
    pub fn new(t_us: Ticks, key: &'a str, cost: u64, decision: &Decision) -> Self {
        Self {
            t_us,
            key,
            cost,
            report: None,
            decision: *decision,
        }
    }

    /// A report (`kind`: `report` or `refund`) of `cost` units and what it did.
    pub fn reported(
        t_us: Ticks,
        key: &'a str,
        cost: u64,
        kind: &'static str,
        reported: &Reported,
    ) -> Self {
        Self {
            report: Some(ReportFields {
                kind,
                recorded: reported.recorded,
                dropped: reported.dropped,
            }),
            ..Self::new(t_us, key, cost, &reported.decision)
        }
    }
}

/// Writes `rows` as `name  value` lines, the values aligned after the longest name:
/// what `simulate` and `inspect` print.
pub fn write_rows<N: AsRef<str>>(
    out: &mut impl Write,
    rows: &[(N, String)],
) -> std::io::Result<()> {
    let width = rows
        .iter()
        .map(|(name, _)| name.as_ref().chars().count())
        .max()
        .unwrap_or(0);
    for (name, value) in rows {
        writeln!(out, "{:<width$}  {value}", name.as_ref())?;
    }
    Ok(())
}

/// Writes `value` as one JSON line.
pub fn json_line(out: &mut impl Write, value: &impl Serialize) -> Result<(), Failure> {
    serde_json::to_writer(&mut *out, value).map_err(|e| output(e.into()))?;
    writeln!(out).map_err(output)
}

/// A stored state's canonical encoding as `inspect` shows it: lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What `inspect` prints: `view` as one JSON object with `--json`, else its `rows`.
pub fn show(json: bool, view: &impl Serialize, rows: &[(&str, String)]) -> Result<(), Failure> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    if json {
        json_line(&mut out, view)?;
    } else {
        write_rows(&mut out, rows).map_err(output)?;
    }
    out.flush().map_err(output)
}
