//! The man pages in `docs/man/`, generated from the clap definition with `clap_mangen`: one
//! page for `airlock` and one per visible subcommand (`airlock-policy-allow.1`, …), so they can
//! never describe options the binary does not have.
//!
//! The test below fails when the committed pages differ from what the definition generates;
//! `AIRLOCK_UPDATE_DOCS=1 cargo test -p airlock --bin airlock man_pages` (or
//! `scripts/update-docs`) rewrites them. The version in the pages is the release version only
//! (not the build label or revision, which change with every build).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::cli::Cli;
use crate::commands::version::VERSION;

/// Sections appended to `airlock.1`: what clap does not know.
const TOP_EXTRA: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
success
.TP
\fB1\fR
the operation failed, or the sandbox is not ready
.TP
\fB2\fR
usage or configuration error; nothing was changed
.TP
\fB69\fR
the sandbox backend is unavailable on this host (see \fBairlock doctor\fR)
.TP
\fB70\fR
internal or infrastructure failure
.TP
\fB75\fR
busy: another airlock command holds the sandbox's lock
.TP
\fB130\fR
interrupted (Ctrl+C)
.PP
\fBexec\fR and \fBrun\fR return the command's own status, 128+N when it died of signal N.
.SH FILES
.TP
\fI$XDG_CONFIG_HOME/airlock/config.toml\fR
the user config (mounts, secrets' hosts, network, limits)
.TP
\fI<project>/.airlock/config.toml\fR
the project config (may only tighten the network policy until \fBairlock trust\fR)
.TP
\fI$XDG_STATE_HOME/airlock/\fR
state: trust records, sandbox records, locks
.TP
\fI$XDG_DATA_HOME/airlock/secrets/\fR
secret values (0600 files); they never enter a sandbox
.SH "SEE ALSO"
The user guide (docs/guide.md), the configuration reference (docs/config-reference.md) and the
security model (docs/security.md) in the airlock source tree.
"#;

/// Every page: file name → roff text.
pub fn pages() -> BTreeMap<String, Vec<u8>> {
    let mut cmd = Cli::command()
        .version(VERSION)
        .disable_help_subcommand(true);
    cmd.build();
    let mut out = BTreeMap::new();
    add(&cmd, &mut out);
    if let Some(top) = out.get_mut("airlock.1") {
        top.extend_from_slice(TOP_EXTRA.as_bytes());
    }
    out
}

fn add(cmd: &clap::Command, out: &mut BTreeMap<String, Vec<u8>>) {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        add(sub, out);
    }
    let man = clap_mangen::Man::new(cmd.clone())
        .source(format!("airlock {VERSION}"))
        .manual("airlock manual");
    let mut text = Vec::new();
    man.render(&mut text)
        .unwrap_or_else(|e| unreachable!("rendering into memory cannot fail: {e}"));
    out.insert(man.get_filename(), text);
}

fn man_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/man")
}

#[test]
fn committed_man_pages_match_the_cli_definition() {
    let want = pages();
    let dir = man_dir();
    let committed: BTreeMap<String, Vec<u8>> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .map(|e| e.expect("read docs/man"))
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    (name, std::fs::read(e.path()).expect("read a man page"))
                })
                .collect()
        })
        .unwrap_or_default();
    if std::env::var_os("AIRLOCK_UPDATE_DOCS").is_some() {
        std::fs::create_dir_all(&dir).expect("create docs/man");
        for name in committed.keys().filter(|n| !want.contains_key(*n)) {
            std::fs::remove_file(dir.join(name)).expect("remove a stale page");
        }
        for (name, text) in &want {
            std::fs::write(dir.join(name), text).expect("write a man page");
        }
        return;
    }
    let stale: std::collections::BTreeSet<&String> = want
        .keys()
        .chain(committed.keys())
        .filter(|n| want.get(*n) != committed.get(*n))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/man is stale ({stale:?}); regenerate it with scripts/update-docs"
    );
}

#[test]
fn man_pages_cover_every_visible_verb_and_no_hidden_one() {
    let pages = pages();
    for verb in Cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
    {
        let name = format!("airlock-{}.1", verb.get_name());
        assert!(pages.contains_key(&name), "no page {name}");
    }
    assert!(pages.contains_key("airlock-policy-allow.1"));
    for (name, text) in &pages {
        let text = String::from_utf8_lossy(text);
        for hidden in ["__init", "__keeper", "__proxy"] {
            assert!(!text.contains(hidden), "{name} names {hidden}");
        }
        assert!(
            !text.contains(crate::commands::version::BUILD_LABEL),
            "{name} carries the build label and would be stale after every build"
        );
    }
}
