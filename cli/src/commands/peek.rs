//! `sluicegate peek KEY`: what a request for KEY would get, changing nothing.

use std::process::ExitCode;

use crate::args::KeyArgs;
use crate::failure::Failure;

pub fn run(args: KeyArgs) -> Result<ExitCode, Failure> {
    super::check::decide(&args, false)
}
