//! `sluicegate reset KEY`: forget KEY's state.

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use crate::args::KeyArgs;
use crate::failure::{output, Failure};
use crate::rates::Rates;

pub fn run(args: KeyArgs) -> Result<ExitCode, Failure> {
    let (loaded, open) = args.load(false)?;
    let rates = Rates::open(&loaded, &open)?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    rates.reset(&args.key)?;
    writeln!(out, "{}: reset (its next request starts fresh)", args.key).map_err(output)?;
    out.flush().map_err(output)?;
    Ok(ExitCode::SUCCESS)
}
