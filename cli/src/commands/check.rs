//! `sluicegate check KEY`: decide one request now, on the backend's clock (or at `--now`),
//! and print the decision.

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use sluicegate_core::{Clock, MonotonicClock, Request};

use crate::args::KeyArgs;
use crate::failure::{output, Failure};
use crate::output::{json_line, Record};
use crate::rates::Rates;

pub fn run(args: KeyArgs) -> Result<ExitCode, Failure> {
    decide(&args, true)
}

/// `check` (`records`) and `peek`: one decision as a JSON line; exit 1 when denied.
/// Only a recorded decision may create a sled database.
pub(super) fn decide(args: &KeyArgs, records: bool) -> Result<ExitCode, Failure> {
    let (loaded, open) = args.load(records)?;
    let rates = Rates::open(&loaded, &open)?;
    let now = args.now.unwrap_or_else(|| MonotonicClock::new().now());
    let mut out = BufWriter::new(std::io::stdout().lock());
    let request = Request::new(&args.key).cost(args.cost);
    // Without `--now`, on the backend's clock (Redis: the server's, so its keys expire).
    let request = match args.now {
        Some(now) => request.at(now),
        None => request,
    };
    let decision = if records {
        rates.decide(&request)?
    } else {
        rates.peek(&request)?
    };
    json_line(&mut out, &Record::new(now, &args.key, args.cost, &decision))?;
    out.flush().map_err(output)?;
    Ok(ExitCode::from(u8::from(!decision.allowed)))
}
