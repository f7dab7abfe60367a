//! Hidden verbs of the `airlock` executable, dispatched on argv before clap sees it.
//!
//! The guest side of a sandbox runs as a hidden verb of this same binary (docs/architecture.md),
//! started inside the new namespaces; it must never appear in `--help` and must not depend on
//! clap's parsing of the public surface. The runtime owns the verbs added here.

use std::ffi::OsString;

/// Runs a hidden verb when `args` names one and returns its exit status; `None` for every
/// public command line, which then goes to clap.
pub fn dispatch(args: &[OsString]) -> Option<i32> {
    let _verb = args.get(1)?;
    None
}
