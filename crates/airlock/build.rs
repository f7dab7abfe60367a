//! Computes the values `airlock version` prints, at build time:
//! - `AIRLOCK_BUILD_LABEL`: UTC `YYYY.MM.DD.HHMMZ` from `SOURCE_DATE_EPOCH` when set (reproducible
//!   builds, <https://reproducible-builds.org/specs/source-date-epoch/>), else the build time.
//! - `AIRLOCK_GIT_REVISION`: `git rev-parse --short HEAD` of the source tree, `unknown` when the
//!   source is not a git checkout or git is not installed.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_owned());
    let revision = git(&manifest_dir, &["rev-parse", "--short", "HEAD"]);
    watch_git_head(&manifest_dir);
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or_else(now_epoch);
    println!("cargo:rustc-env=AIRLOCK_BUILD_LABEL={}", build_label(epoch));
    println!(
        "cargo:rustc-env=AIRLOCK_GIT_REVISION={}",
        revision.unwrap_or_else(|| "unknown".to_owned())
    );
}

/// Re-run when HEAD moves (a commit or a checkout), so the revision stays true.
fn watch_git_head(dir: &str) {
    if let Some(git_dir) = git(dir, &["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
    }
    if let Some(common) = git(
        dir,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    ) {
        for rel in ["refs/heads", "packed-refs"] {
            let p = Path::new(&common).join(rel);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
}

fn git(dir: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn now_epoch() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `YYYY.MM.DD.HHMMZ` for a Unix time, UTC.
fn build_label(epoch: i64) -> String {
    let days = epoch.div_euclid(86_400);
    let secs = epoch.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}.{m:02}.{d:02}.{:02}{:02}Z",
        secs / 3600,
        (secs % 3600) / 60
    )
}

/// Proleptic Gregorian date from days since 1970-01-01 (H. Hinnant, "chrono-Compatible Low-Level
/// Date Algorithms").
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
