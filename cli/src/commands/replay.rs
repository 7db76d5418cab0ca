//! `sluicegate replay`: a CSV trace decided request by request, one JSON line each. An
//! optional fourth column `kind` makes a row a `report` (the cost beyond what was
//! decided, charged after the work) or a `refund` (units given back) instead of a
//! `decide`.

use std::io::{BufWriter, Read, Write};
use std::process::ExitCode;

use clap::Args;
use sluicegate_core::{check_now, ReportRequest, Request, Ticks};

use crate::args::PolicyBackendArgs;
use crate::failure::{output, Failure};
use crate::output::{json_line, Record};
use crate::rates::Rates;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace, or - for standard input; t_us must not decrease.
    #[arg(long)]
    trace: String,
    #[command(flatten)]
    target: PolicyBackendArgs,
}

const HEADER: &str = "the header must be t_us,key,cost or t_us,key,cost,kind";

pub fn run(args: ReplayArgs) -> Result<ExitCode, Failure> {
    let (loaded, open) = args.target.load(true)?;
    // A concurrency policy is refused before the trace is read.
    loaded.rate()?;
    let trace = args.trace.as_str();
    let (name, input): (&str, Box<dyn Read>) = if trace == "-" {
        ("stdin", Box::new(std::io::stdin().lock()))
    } else {
        let file = std::fs::File::open(trace)
            .map_err(|e| Failure::Input(format!("cannot read {trace}: {e}")))?;
        (trace, Box::new(std::io::BufReader::new(file)))
    };
    let rates = Rates::open(&loaded, &open)?;
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .has_headers(false)
        .from_reader(input);
    // Every error in a trace reads `FILE:LINE: what`.
    let bad = |line: u64, what: String| Failure::Input(format!("{name}:{line}: {what}"));
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut last = 0;
    let mut row = csv::StringRecord::new();
    let mut line = 0;
    // Whether the header names the fourth column.
    let mut kinds = false;
    loop {
        let more = reader.read_record(&mut row).map_err(|e| {
            let at = e.position().map_or(line + 1, csv::Position::line);
            match e.kind() {
                csv::ErrorKind::Utf8 { .. } => bad(at, "not UTF-8 text".into()),
                _ => bad(at, e.to_string()),
            }
        })?;
        if !more {
            break;
        }
        line = row.position().map_or(line + 1, csv::Position::line);
        let fields: Vec<&str> = row.iter().map(str::trim).collect();
        if line == 1 {
            kinds = match fields[..] {
                ["t_us", "key", "cost"] => false,
                ["t_us", "key", "cost", "kind"] => true,
                _ => return Err(bad(line, HEADER.into())),
            };
            continue;
        }
        let (t_us, key, cost, kind) = match (kinds, &fields[..]) {
            (_, [t_us, key, cost]) => (*t_us, *key, *cost, ""),
            (true, [t_us, key, cost, kind]) => (*t_us, *key, *cost, *kind),
            (true, _) => {
                return Err(bad(
                    line,
                    format!(
                        "expected 3 or 4 fields (t_us,key,cost[,kind]), found {}",
                        fields.len()
                    ),
                ))
            }
            (false, _) => {
                return Err(bad(
                    line,
                    format!("expected 3 fields (t_us,key,cost), found {}", fields.len()),
                ))
            }
        };
        let t_us: Ticks = t_us
            .parse()
            .ok()
            .and_then(|t| check_now(t).ok())
            .ok_or_else(|| {
                bad(
                    line,
                    format!("t_us must be a whole number of microseconds up to 2^62, got {t_us:?}"),
                )
            })?;
        let cost: u64 = cost
            .parse()
            .map_err(|_| bad(line, format!("cost must be a whole number, got {cost:?}")))?;
        if t_us < last {
            return Err(bad(
                line,
                format!("t_us goes backwards ({t_us} after {last})"),
            ));
        }
        last = t_us;
        let record = match kind {
            "" | "decide" => {
                let decision = rates.decide(&Request::new(key).cost(cost).at(t_us))?;
                Record::new(t_us, key, cost, &decision)
            }
            "report" | "refund" => {
                // Beyond i64::MAX, a refund gives back all there is and a report records
                // up to its bound anyway.
                let units = i64::try_from(cost).unwrap_or(i64::MAX);
                let adjustment = if kind == "refund" { -units } else { units };
                let reported = rates
                    .report(&ReportRequest::new(key).adjust(adjustment).at(t_us))
                    .map_err(|e| match e {
                        Failure::Input(what) => bad(line, what),
                        e => e,
                    })?;
                let kind = if kind == "refund" { "refund" } else { "report" };
                Record::reported(t_us, key, cost, kind, &reported)
            }
            _ => {
                return Err(bad(
                    line,
                    format!("kind must be decide, report or refund, got {kind:?}"),
                ))
            }
        };
        json_line(&mut out, &record)?;
    }
    if line == 0 {
        return Err(bad(1, HEADER.into()));
    }
    out.flush().map_err(output)?;
    if let Some(warning) = rates.warning() {
        let _ = writeln!(std::io::stderr(), "sluicegate: {warning}");
    }
    Ok(ExitCode::SUCCESS)
}
