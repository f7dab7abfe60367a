//! Editing the network rules of the USER config (`airlock policy allow|deny`), keeping the
//! file's comments and formatting (`toml_edit`).
//!
//! This is the one module of the crate that writes. Order of operations in [`edit_user_rules`]:
//! 1. take an exclusive `flock` on the config directory, so two concurrent edits cannot lose
//!    each other's change (the kernel drops it if we die);
//! 2. read the current file; when it is absent, start from [`user_template`] (the same text
//!    `airlock config` writes);
//! 3. when it exists, validate it as it is (user config alone): an already broken file is
//!    reported as is, with its own lines, and never rewritten;
//! 4. apply the changes to the document ([`edit_text`], pure); when nothing changed, stop —
//!    nothing is written (a duplicate is an idempotent success);
//! 5. write the candidate into a private temporary directory beside the file and validate it
//!    *as a whole* by running the real loader on it;
//! 6. publish it atomically: fsync, `rename` over the real file, fsync of the directory.
//!
//! So the user config on disk is always either the old file or a new file that loads.
//!
//! Step 5 validates with a copy of the roots whose config root is the temporary directory.
//! Only mount checks consult that root (a mount must not touch airlock's own roots); mounts are
//! never changed here and step 3 already checked them against the real roots.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use toml_edit::{Array, DocumentMut, Item, Table, Value};

use crate::diagnostics::ConfigErrors;
use crate::load::{load, LoadRequest, Overrides};
use crate::policy::{Action, HostPattern};
use crate::roots::Roots;
use crate::templates::user_template;

/// Mode of a user config this module creates (the file may later name secrets' hosts).
const NEW_FILE_MODE: u32 = 0o600;

/// One change to the user config's `[network]` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleChange {
    /// Add the pattern to `network.allow` / `network.deny` (no-op when an equal one is there).
    Add(Action, HostPattern),
    /// Remove every equal pattern from that list (no-op when there is none).
    Remove(Action, HostPattern),
}

/// What [`edit_user_rules`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleEdit {
    /// The user config file.
    pub path: PathBuf,
    /// The file did not exist and was created from the template.
    pub created: bool,
    /// The changes that had an effect, in the order given. Empty: nothing was written.
    pub applied: Vec<RuleChange>,
}

/// Why an edit was refused or failed. Nothing was written in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The config directory could not be opened or locked.
    #[error("cannot lock {path}: {source}")]
    Lock {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The current file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The current file does not validate; it is left untouched.
    #[error("the user config has errors, so airlock does not rewrite it:\n{0}")]
    Invalid(ConfigErrors),
    /// The current file is not TOML `toml_edit` can keep formatting of (normally caught by
    /// [`EditError::Invalid`] first).
    #[error("cannot edit {path}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// `network` or one of its lists has a shape this module cannot extend.
    #[error("cannot edit {path}: `{key}` is not {expected}")]
    Shape {
        /// The file.
        path: PathBuf,
        /// The key path.
        key: String,
        /// What it should be.
        expected: &'static str,
    },
    /// The edited file would not validate; it was not written.
    #[error("the edited user config would not be valid, so it was not written:\n{0}")]
    Rejected(ConfigErrors),
    /// Writing or publishing the new file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Applies `changes` to the user config (see the module docs for the order of operations).
/// The config directory must already exist (the CLI creates it as a private directory).
pub fn edit_user_rules(roots: &Roots, changes: &[RuleChange]) -> Result<RuleEdit, EditError> {
    let path = roots.user_config_path();
    let _lock = lock_dir(&roots.config)?;
    let (text, created) = match std::fs::read(&path) {
        Ok(bytes) => (
            String::from_utf8(bytes).map_err(|_| EditError::Syntax {
                path: path.clone(),
                message: "the file is not valid UTF-8".to_owned(),
            })?,
            false,
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (user_template(), true),
        Err(source) => return Err(EditError::Read { path, source }),
    };
    if !created {
        validate(roots).map_err(EditError::Invalid)?;
    }
    let (candidate, applied) = edit_text(&text, &path, changes)?;
    if applied.is_empty() {
        return Ok(RuleEdit {
            path,
            created: false,
            applied,
        });
    }
    let mode = match std::fs::metadata(&path) {
        Ok(m) => m.permissions().mode() & 0o7777,
        Err(_) => NEW_FILE_MODE,
    };
    publish_validated(roots, &path, &candidate, mode)?;
    Ok(RuleEdit {
        path,
        created,
        applied,
    })
}

/// Loads the user config alone, as the loader sees it under `roots`.
fn validate(roots: &Roots) -> Result<(), ConfigErrors> {
    let never_trusted = |_: &Path, _: &str| false;
    let request = LoadRequest {
        roots,
        project: None,
        overrides: Overrides::default(),
        is_trusted: &never_trusted,
        // The image store is not the config crate's to read; `plan` checks the name exists.
        image_exists: None,
    };
    load(&request).map(drop)
}

/// Steps 5 and 6 of the module docs.
fn publish_validated(roots: &Roots, path: &Path, text: &str, mode: u32) -> Result<(), EditError> {
    let write_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| EditError::Write { path: p, source }
    };
    let staging = tempfile::Builder::new()
        .prefix(".config-edit.")
        .tempdir_in(&roots.config)
        .map_err(write_err(&roots.config))?;
    let staged_roots = Roots {
        config: staging.path().to_path_buf(),
        ..roots.clone()
    };
    let staged = staged_roots.user_config_path();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&staged)
        .map_err(write_err(&staged))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(mode)))
        .and_then(|()| file.sync_all())
        .map_err(write_err(&staged))?;
    drop(file);
    validate(&staged_roots).map_err(|mut errors| {
        for d in &mut errors.0 {
            if d.file == staged {
                d.file = path.to_path_buf();
            }
        }
        EditError::Rejected(errors)
    })?;
    std::fs::rename(&staged, path).map_err(write_err(path))?;
    File::open(&roots.config)
        .and_then(|dir| dir.sync_all())
        .map_err(write_err(&roots.config))?;
    Ok(())
}

/// An exclusive `flock` on the config directory itself (never through a symlink, close-on-exec
/// so no child inherits it), released when the returned descriptor is dropped.
fn lock_dir(dir: &Path) -> Result<OwnedFd, EditError> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let lock_err = |e: rustix::io::Errno| EditError::Lock {
        path: dir.to_path_buf(),
        source: e.into(),
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, Mode::empty()).map_err(lock_err)?;
    loop {
        match rustix::fs::flock(&fd, FlockOperation::LockExclusive) {
            Ok(()) => return Ok(fd),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(lock_err(e)),
        }
    }
}

/// Applies `changes` to the TOML `text` of `path`, keeping comments and formatting. Returns the
/// new text and the changes that had an effect (empty: the text is unchanged).
pub fn edit_text(
    text: &str,
    path: &Path,
    changes: &[RuleChange],
) -> Result<(String, Vec<RuleChange>), EditError> {
    let mut doc: DocumentMut =
        text.parse()
            .map_err(|e: toml_edit::TomlError| EditError::Syntax {
                path: path.to_path_buf(),
                message: e.message().to_owned(),
            })?;
    let mut applied = Vec::new();
    for change in changes {
        let effect = match change {
            RuleChange::Add(action, pattern) => add(list_mut(&mut doc, path, *action)?, pattern),
            RuleChange::Remove(action, pattern) => match existing_list(&mut doc, path, *action)? {
                Some(list) => remove(list, pattern),
                None => false,
            },
        };
        if effect {
            applied.push(change.clone());
        }
    }
    Ok((doc.to_string(), applied))
}

fn list_key(action: Action) -> &'static str {
    match action {
        Action::Allow => "allow",
        Action::Deny => "deny",
    }
}

fn shape_error(path: &Path, key: String, expected: &'static str) -> EditError {
    EditError::Shape {
        path: path.to_path_buf(),
        key,
        expected,
    }
}

/// `network.allow` or `network.deny`, created (empty, with `[network]` when needed) if absent.
fn list_mut<'d>(
    doc: &'d mut DocumentMut,
    path: &Path,
    action: Action,
) -> Result<&'d mut Array, EditError> {
    let key = list_key(action);
    let network = doc
        .entry("network")
        .or_insert(Item::Table(Table::new()))
        .as_table_like_mut()
        .ok_or_else(|| shape_error(path, "network".to_owned(), "a table"))?;
    if network.get(key).is_none() {
        network.insert(key, Item::Value(Value::Array(Array::new())));
    }
    network
        .get_mut(key)
        .and_then(Item::as_array_mut)
        .ok_or_else(|| shape_error(path, format!("network.{key}"), "an array of host patterns"))
}

/// `network.allow` or `network.deny` when the file has it.
fn existing_list<'d>(
    doc: &'d mut DocumentMut,
    path: &Path,
    action: Action,
) -> Result<Option<&'d mut Array>, EditError> {
    let key = list_key(action);
    let Some(network) = doc.get_mut("network") else {
        return Ok(None);
    };
    let network = network
        .as_table_like_mut()
        .ok_or_else(|| shape_error(path, "network".to_owned(), "a table"))?;
    match network.get_mut(key) {
        None => Ok(None),
        Some(item) => item.as_array_mut().map(Some).ok_or_else(|| {
            shape_error(path, format!("network.{key}"), "an array of host patterns")
        }),
    }
}

/// Whether an array element is the pattern `p` (compared parsed, so `Example.COM` equals
/// `example.com`).
fn is_pattern(v: &Value, p: &HostPattern) -> bool {
    v.as_str()
        .and_then(|s| HostPattern::parse(s).ok())
        .is_some_and(|q| &q == p)
}

fn add(list: &mut Array, pattern: &HostPattern) -> bool {
    if list.iter().any(|v| is_pattern(v, pattern)) {
        return false;
    }
    // Follow the array's layout: one element per line when the last one starts a line.
    let indent = list
        .iter()
        .last()
        .and_then(|v| v.decor().prefix())
        .and_then(|p| p.as_str())
        // Only the indentation: a comment in the prefix is the user's note on that element.
        .and_then(|p| p.rsplit_once('\n'))
        .map(|(_, indent)| indent.to_owned());
    let mut value = Value::from(pattern.to_string());
    let prefix = match indent {
        Some(indent) => {
            // A comment after the last element (`"a", # why`) sits before `]`; it stays on
            // that element's line and the new element starts the next one.
            let trailing = list.trailing().as_str().unwrap_or("").to_owned();
            let (head, tail) = match trailing.rsplit_once('\n') {
                Some((head, tail)) => (format!("{head}\n"), tail.to_owned()),
                None => ("\n".to_owned(), trailing),
            };
            list.set_trailing(format!("\n{tail}"));
            format!("{head}{indent}")
        }
        None if list.is_empty() => String::new(),
        None => " ".to_owned(),
    };
    // The last element's own suffix (`"a" # why` without a comma) would swallow the comma.
    if let Some(last) = list.iter_mut().last() {
        let suffix = last.decor().suffix().and_then(|s| s.as_str()).unwrap_or("");
        if suffix.contains('#') || suffix.contains('\n') {
            return add_after_commented_suffix(list, value, prefix);
        }
    }
    value.decor_mut().set_prefix(prefix);
    value.decor_mut().set_suffix("");
    list.push_formatted(value);
    true
}

/// [`add`] when the last element ends in a comment with no comma after it: the comment moves
/// into the new element's prefix, after the comma toml_edit writes.
fn add_after_commented_suffix(list: &mut Array, mut value: Value, prefix: String) -> bool {
    let Some(last) = list.iter_mut().last() else {
        return false;
    };
    let suffix = last
        .decor()
        .suffix()
        .and_then(|s| s.as_str())
        .unwrap_or("")
        .to_owned();
    last.decor_mut().set_suffix("");
    let comment = suffix.trim_end_matches(['\n', ' ', '\t']);
    value.decor_mut().set_prefix(format!("{comment}{prefix}"));
    value.decor_mut().set_suffix("");
    list.push_formatted(value);
    true
}

fn remove(list: &mut Array, pattern: &HostPattern) -> bool {
    let before = list.len();
    list.retain(|v| !is_pattern(v, pattern));
    if list.len() == before {
        return false;
    }
    // A single-line array keeps no space after its `[`.
    if let Some(first) = list.get_mut(0) {
        let inline = first
            .decor()
            .prefix()
            .and_then(|p| p.as_str())
            .is_none_or(|p| !p.contains('\n'));
        if inline {
            first.decor_mut().set_prefix("");
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap()
    }

    fn edit(text: &str, changes: &[RuleChange]) -> (String, usize) {
        let (out, applied) = edit_text(text, Path::new("/c.toml"), changes).unwrap();
        (out, applied.len())
    }

    fn roots(base: &Path) -> Roots {
        Roots::from_env(|k| match k {
            "HOME" => Some(base.as_os_str().to_owned()),
            _ => None,
        })
        .unwrap()
    }

    #[test]
    fn adding_keeps_comments_and_follows_a_single_line_layout() {
        let text = "# mine\n[network]\n# why: CI\nallow = [\"a.example.com\"] # trailing\n";
        let (out, n) = edit(text, &[RuleChange::Add(Action::Allow, p("b.example.com"))]);
        assert_eq!(n, 1);
        assert_eq!(
            out,
            "# mine\n[network]\n# why: CI\nallow = [\"a.example.com\", \"b.example.com\"] # trailing\n"
        );
    }

    #[test]
    fn adding_to_a_multi_line_array_adds_one_line() {
        let text = "[network]\ndeny = [\n  \"a.example.com\", # first\n  \"b.example.com\",\n]\n";
        let (out, _) = edit(text, &[RuleChange::Add(Action::Deny, p("c.example.com"))]);
        assert_eq!(
            out,
            "[network]\ndeny = [\n  \"a.example.com\", # first\n  \"b.example.com\",\n  \"c.example.com\",\n]\n"
        );
    }

    #[test]
    fn a_comment_after_the_last_element_stays_with_it() {
        let text = "[network]\nallow = [\n  \"a.example.com\", # note a\n]\n";
        let (out, _) = edit(text, &[RuleChange::Add(Action::Allow, p("b.example.com"))]);
        assert_eq!(
            out,
            "[network]\nallow = [\n  \"a.example.com\", # note a\n  \"b.example.com\",\n]\n"
        );
    }

    #[test]
    fn a_comment_on_a_last_element_without_comma_does_not_swallow_the_new_one() {
        let text = "[network]\nallow = [\n  \"a.example.com\" # note a\n]\n";
        let (out, _) = edit(text, &[RuleChange::Add(Action::Allow, p("b.example.com"))]);
        let doc: toml::Table = toml::from_str(&out).unwrap();
        assert_eq!(
            doc["network"]["allow"],
            toml::Value::Array(vec!["a.example.com".into(), "b.example.com".into()]),
            "{out}"
        );
        assert!(out.contains("# note a"), "{out}");
    }

    #[test]
    fn a_pattern_already_listed_in_another_spelling_is_not_added_twice() {
        let text = "[network]\nallow = [\"Example.COM\"]\n";
        let (out, n) = edit(text, &[RuleChange::Add(Action::Allow, p("example.com"))]);
        assert_eq!((out.as_str(), n), (text, 0));
    }

    #[test]
    fn a_file_without_network_gains_the_section() {
        let (out, _) = edit(
            "memory_mb = 512\n",
            &[RuleChange::Add(Action::Deny, p("*.x.org:8443"))],
        );
        assert_eq!(
            out,
            "memory_mb = 512\n\n[network]\ndeny = [\"*.x.org:8443\"]\n"
        );
    }

    #[test]
    fn removing_takes_the_pattern_out_and_absent_lists_stay_absent() {
        let text = "[network]\nallow = [\"a.example.com\", \"b.example.com\"]\n";
        let (out, n) = edit(
            text,
            &[
                RuleChange::Remove(Action::Allow, p("A.example.com")),
                RuleChange::Remove(Action::Deny, p("a.example.com")),
            ],
        );
        assert_eq!(n, 1);
        assert_eq!(out, "[network]\nallow = [\"b.example.com\"]\n");
    }

    #[test]
    fn inline_and_dotted_network_tables_are_edited_in_place() {
        let (out, _) = edit(
            "network = { allow = [\"a.example.com\"] }\n",
            &[RuleChange::Add(Action::Allow, p("b.example.com"))],
        );
        assert_eq!(
            out,
            "network = { allow = [\"a.example.com\", \"b.example.com\"] }\n"
        );
        let (out, _) = edit(
            "network.deny = [\"a.example.com\"]\n",
            &[RuleChange::Add(Action::Deny, p("b.example.com"))],
        );
        assert_eq!(
            out,
            "network.deny = [\"a.example.com\", \"b.example.com\"]\n"
        );
    }

    #[test]
    fn a_list_of_the_wrong_type_is_refused_not_replaced() {
        let err = edit_text(
            "[network]\nallow = \"a.example.com\"\n",
            Path::new("/c.toml"),
            &[RuleChange::Add(Action::Allow, p("b.example.com"))],
        )
        .unwrap_err();
        assert!(
            matches!(err, EditError::Shape { ref key, .. } if key == "network.allow"),
            "{err}"
        );
    }

    #[test]
    fn edit_creates_the_file_from_the_template_and_the_result_loads() {
        let tmp = tempfile::tempdir().unwrap();
        let r = roots(tmp.path());
        std::fs::create_dir_all(&r.config).unwrap();
        let out =
            edit_user_rules(&r, &[RuleChange::Add(Action::Allow, p("api.example.com"))]).unwrap();
        assert!(out.created);
        assert_eq!(out.applied.len(), 1);
        let text = std::fs::read_to_string(&out.path).unwrap();
        assert!(text.starts_with("#:schema"), "{text}");
        assert!(text.contains("allow = [\"api.example.com\"]"), "{text}");
        let mode = std::fs::metadata(&out.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, NEW_FILE_MODE);
        validate(&r).unwrap();
        // Nothing is left behind but the file itself.
        let names: Vec<_> = std::fs::read_dir(&r.config)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["config.toml"]);
    }

    #[test]
    fn a_broken_user_config_is_reported_and_left_byte_for_byte() {
        let tmp = tempfile::tempdir().unwrap();
        let r = roots(tmp.path());
        std::fs::create_dir_all(&r.config).unwrap();
        let broken = "# keep\nmemory_mb = 1\nbogus = true\n";
        std::fs::write(r.user_config_path(), broken).unwrap();
        let err =
            edit_user_rules(&r, &[RuleChange::Add(Action::Deny, p("x.example.com"))]).unwrap_err();
        let EditError::Invalid(errors) = err else {
            panic!("expected Invalid, got {err}");
        };
        assert_eq!(errors.diagnostics().len(), 2, "{errors}");
        assert_eq!(
            std::fs::read_to_string(r.user_config_path()).unwrap(),
            broken
        );
    }

    #[test]
    fn a_duplicate_writes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let r = roots(tmp.path());
        std::fs::create_dir_all(&r.config).unwrap();
        std::fs::write(
            r.user_config_path(),
            "[network]\ndeny = [\"x.example.com\"]\n",
        )
        .unwrap();
        let before = std::fs::metadata(r.user_config_path())
            .unwrap()
            .modified()
            .unwrap();
        let out =
            edit_user_rules(&r, &[RuleChange::Add(Action::Deny, p("X.example.com"))]).unwrap();
        assert!(out.applied.is_empty() && !out.created);
        let after = std::fs::metadata(r.user_config_path())
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(before, after);
    }
}
