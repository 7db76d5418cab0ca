//! `sluicegate replay`: a CSV trace decided request by request, one JSON line each.

use std::io::{BufWriter, Read, Write};
use std::process::ExitCode;

use clap::Args;
use sluicegate_core::{check_now, Request, Ticks};

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
    let store = Rates::open(&loaded, &open)?;
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
            if fields != ["t_us", "key", "cost"] {
                return Err(bad(line, "the header must be t_us,key,cost".into()));
            }
            continue;
        }
        let [t_us, key, cost] = fields[..] else {
            return Err(bad(
                line,
                format!("expected 3 fields (t_us,key,cost), found {}", fields.len()),
            ));
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
        let decision = store.decide(&Request::new(key).cost(cost).at(t_us))?;
        json_line(&mut out, &Record::new(t_us, key, cost, &decision))?;
    }
    if line == 0 {
        return Err(bad(1, "the header must be t_us,key,cost".into()));
    }
    out.flush().map_err(output)?;
    if let Some(warning) = store.warning() {
        let _ = writeln!(std::io::stderr(), "sluicegate: {warning}");
    }
    Ok(ExitCode::SUCCESS)
}
