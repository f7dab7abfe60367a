//! `airlock version`: release version, UTC build label and source revision (computed by
//! `build.rs`). Touches no state and reads no configuration.

use clap::Args;

use super::Report;
use crate::context::Context;
use crate::error::HostError;
use crate::output::Doc;

/// The release version of this build.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// UTC build time, `YYYY.MM.DD.HHMMZ` (from `SOURCE_DATE_EPOCH` when the build set it).
pub const BUILD_LABEL: &str = env!("AIRLOCK_BUILD_LABEL");
/// Abbreviated git revision of the source, `unknown` outside a git checkout.
pub const REVISION: &str = env!("AIRLOCK_GIT_REVISION");
/// What `airlock --version` prints after the program name.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("AIRLOCK_BUILD_LABEL"),
    " ",
    env!("AIRLOCK_GIT_REVISION"),
    ")"
);

#[derive(Args, Debug)]
pub struct VersionArgs {}

pub fn run(_args: VersionArgs, _ctx: &Context) -> Result<Report, HostError> {
    let mut doc = Doc::new();
    doc.heading("airlock")
        .field(1, "version", VERSION)
        .field(1, "build", BUILD_LABEL)
        .field(1, "revision", REVISION);
    Ok(Report::new(doc, json()))
}

/// The JSON form of the version (also what `airlock --json --version` prints).
pub fn json() -> serde_json::Value {
    serde_json::json!({
        "version": VERSION,
        "build": BUILD_LABEL,
        "revision": REVISION,
    })
}
