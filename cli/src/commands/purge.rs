//! `sluicegate purge`: every state of one policy in its namespace, deleted.

use std::io::Write;
use std::process::ExitCode;

use crate::args::PolicyBackendArgs;
use crate::failure::{output, Failure};
use crate::rates::Rates;

pub fn run(args: PolicyBackendArgs) -> Result<ExitCode, Failure> {
    let (loaded, open) = args.load(false)?;
    let purged = Rates::open(&loaded, &open)?.purge()?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{}: purged {purged} {} (keys {}*)",
        loaded.name,
        if purged == 1 { "state" } else { "states" },
        open.namespace
    )
    .and_then(|()| out.flush())
    .map_err(output)?;
    Ok(ExitCode::SUCCESS)
}
