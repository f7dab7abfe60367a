//! Resource limits (`memory_mb`, `cpus`, `pids_max`) with trust-aware precedence (C5, C6).
//!
//! Precedence is default < user < project < `--memory-mb`, with one exception: a project
//! config the user has not trusted may only *lower* what the default and the user config give.
//! A repository that asks for more memory, CPUs or processes than the user allows is listed in
//! [`Ignored`] (shown by `plan` as `ignored (untrusted)`) and the lower value stays in force;
//! after `airlock trust` the project may raise them. The command-line flag is the user's own
//! act and always applies.

use std::path::PathBuf;

use crate::diagnostics::Diagnostic;
use crate::effective::{Ignored, Origin, Sourced};
use crate::load::{Overrides, COMMAND_LINE};
use crate::parse::ParsedFile;
use crate::raw::RawConfig;
use crate::values;

/// The reason given for a raise dropped from an untrusted project config.
fn reason(current: &str, origin: Origin) -> String {
    format!(
        "the project config is untrusted, so it may only lower limits ({} gives {current}); \
         review .airlock/config.toml and run `airlock trust` to apply it",
        match origin {
            Origin::Default => "the default",
            Origin::User => "your user config",
            Origin::Project | Origin::Flag => "a higher-precedence setting",
        }
    )
}

/// The three limits after precedence and trust, plus what an untrusted project could not raise.
pub(crate) struct Limits {
    pub memory_mb: Sourced<u64>,
    pub cpus: Sourced<Option<f64>>,
    pub pids_max: Sourced<u64>,
    pub ignored: Vec<Ignored>,
}

/// One limit: how to read, check, compare and show it.
struct Limit<'k, R, T> {
    key: &'k str,
    get: fn(&RawConfig) -> Option<&R>,
    check: fn(&R) -> Result<T, String>,
    /// Whether the first value asks for more than the second.
    raises: fn(&T, &T) -> bool,
    show: fn(&T) -> String,
}

fn resolve<R, T>(
    files: &[(Origin, &ParsedFile)],
    trusted: bool,
    limit: &Limit<'_, R, T>,
    default: T,
    ignored: &mut Vec<Ignored>,
    d: &mut Vec<Diagnostic>,
) -> Sourced<T> {
    let mut out = Sourced::new(default, Origin::Default);
    for (origin, file) in files {
        let Some(raw) = (limit.get)(&file.raw) else {
            continue;
        };
        match (limit.check)(raw) {
            Err(message) => d.push(file.diag(limit.key, message)),
            Ok(v) if *origin == Origin::Project && !trusted && (limit.raises)(&v, &out.value) => {
                ignored.push(Ignored {
                    key: limit.key.to_owned(),
                    value: (limit.show)(&v),
                    reason: reason(&(limit.show)(&out.value), out.origin),
                })
            }
            Ok(v) => out = Sourced::new(v, *origin),
        }
    }
    out
}

/// Resolves the limits of `files` (user first, then project).
pub(crate) fn resolve_all(
    files: &[(Origin, &ParsedFile)],
    trusted: bool,
    overrides: Overrides,
    d: &mut Vec<Diagnostic>,
) -> Limits {
    let mut ignored = Vec::new();
    let memory = Limit {
        key: "memory_mb",
        get: |r| r.memory_mb.as_ref(),
        check: |v| values::memory_mb(*v),
        raises: |a, b| a > b,
        show: u64::to_string,
    };
    let from_files = resolve(
        files,
        trusted,
        &memory,
        values::DEFAULT_MEMORY_MB,
        &mut ignored,
        d,
    );
    let memory_mb = match overrides.memory_mb.map(values::memory_mb) {
        None => from_files,
        Some(Ok(v)) => Sourced::new(v, Origin::Flag),
        Some(Err(message)) => {
            d.push(Diagnostic {
                file: PathBuf::from(COMMAND_LINE),
                key: "--memory-mb".to_owned(),
                line: 0,
                column: 0,
                message,
            });
            from_files
        }
    };
    let cpus = Limit {
        key: "cpus",
        get: |r| r.cpus.as_ref(),
        check: |v| values::cpus(*v).map(Some),
        // `None` is "unlimited": any number lowers it, nothing raises above it.
        raises: |a, b| match (a, b) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(a), Some(b)) => a > b,
        },
        show: |v| v.map_or("unlimited".to_owned(), |c| c.to_string()),
    };
    let cpus = resolve(files, trusted, &cpus, None, &mut ignored, d);
    let pids = Limit {
        key: "pids_max",
        get: |r| r.pids_max.as_ref(),
        check: |v| values::pids_max(*v),
        raises: |a, b| a > b,
        show: u64::to_string,
    };
    let pids_max = resolve(
        files,
        trusted,
        &pids,
        values::DEFAULT_PIDS_MAX,
        &mut ignored,
        d,
    );
    Limits {
        memory_mb,
        cpus,
        pids_max,
        ignored,
    }
}
