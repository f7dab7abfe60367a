//! Guards on the shape of the binary crate (issue 8): it stays argv, printing and exit codes.
//!
//! - [`the_binary_holds_under_5000_lines_of_non_test_rust`]: every `.rs` file under `src/`
//!   counts with all its physical lines (blank and comment lines included, like `wc -l`),
//!   except test code: a `#[cfg(test)]` attribute at column 0 and the item it marks, up to the
//!   item's closing `}` at column 0 (rustfmt puts the closing brace of a top-level item there)
//!   or its `;` when the item is one line (`#[cfg(test)] mod man_pages;`); a file declared by
//!   such a one-line item is test-only and does not count at all. A `#[cfg(test)]` inside an
//!   indented item is not recognised and counts as non-test, so the count can only err high.
//! - [`no_verb_module_imports_a_sibling_verb_module`]: what two verbs share lives outside
//!   `commands/` (or in `airlock-host`), so a verb can be read and changed on its own.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The ceiling of issue 8's acceptance: the binary stays under this many non-test lines.
const MAX_NON_TEST_LINES: usize = 5_000;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out
}

/// Non-test lines of one file's text, and the modules it declares test-only (`mod x;` under
/// `#[cfg(test)]`).
fn count_file(text: &str) -> (usize, Vec<String>) {
    let mut count = 0;
    let mut test_mods = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line != "#[cfg(test)]" {
            count += 1;
            continue;
        }
        // Skip further attributes, then the item: one line ending in `;`, or up to its `}`.
        for item in lines.by_ref() {
            if item.starts_with("#[") {
                continue;
            }
            if item.ends_with(';') {
                if let Some(name) = item
                    .trim_start_matches("pub ")
                    .strip_prefix("mod ")
                    .and_then(|rest| rest.strip_suffix(';'))
                {
                    test_mods.push(name.trim().to_owned());
                }
                break;
            }
            for rest in lines.by_ref() {
                if rest == "}" {
                    break;
                }
            }
            break;
        }
    }
    (count, test_mods)
}

/// The non-test lines of every file under `src/`, by path.
fn non_test_lines() -> Vec<(PathBuf, usize)> {
    let files = rust_files(&src_dir());
    let mut test_only = BTreeSet::new();
    let mut counts = Vec::new();
    for path in &files {
        let text = fs::read_to_string(path).expect("read source");
        let (n, mods) = count_file(&text);
        let dir = if path
            .file_name()
            .is_some_and(|f| f == "main.rs" || f == "mod.rs")
        {
            path.parent().expect("parent").to_owned()
        } else {
            path.with_extension("")
        };
        for m in mods {
            test_only.insert(dir.join(format!("{m}.rs")));
            test_only.insert(dir.join(&m).join("mod.rs"));
        }
        counts.push((path.clone(), n));
    }
    counts.retain(|(p, _)| !test_only.contains(p));
    counts
}

#[test]
fn the_binary_holds_under_5000_lines_of_non_test_rust() {
    let counts = non_test_lines();
    let total: usize = counts.iter().map(|(_, n)| n).sum();
    let mut largest = counts.clone();
    largest.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let largest: Vec<String> = largest
        .iter()
        .take(5)
        .map(|(p, n)| format!("{n} {}", p.display()))
        .collect();
    eprintln!("crates/airlock/src: {total} non-test lines");
    assert!(
        total < MAX_NON_TEST_LINES,
        "crates/airlock/src holds {total} non-test lines (limit {MAX_NON_TEST_LINES}); move \
         what is not argv, printing or exit codes into airlock-host. Largest:\n{}",
        largest.join("\n")
    );
}

#[test]
fn the_count_leaves_out_test_modules_and_test_only_files() {
    let text = "fn a() {}\n\n#[cfg(test)]\nmod pages;\n#[cfg(test)]\nmod tests {\n    \
                #[test]\n    fn t() {\n    }\n}\nfn b() {}\n";
    let (n, mods) = count_file(text);
    assert_eq!(n, 3, "fn a, the blank line, fn b");
    assert_eq!(mods, ["pages"]);
    // The real tree: the man-page test file is test-only.
    let counts = non_test_lines();
    assert!(counts.iter().all(|(p, _)| !p.ends_with("man_pages.rs")));
    assert!(counts.iter().any(|(p, _)| p.ends_with("main.rs")));
}

/// The verb modules: `pub mod X;` in `commands/mod.rs`.
fn verbs(commands: &Path) -> BTreeSet<String> {
    fs::read_to_string(commands.join("mod.rs"))
        .expect("read commands/mod.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .map(str::to_owned)
        .collect()
}

/// The first path segment after each occurrence of `prefix` in `text` (inside `{…}` groups,
/// the first segment of every entry).
fn segments_after(text: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in text.match_indices(prefix) {
        // Not part of a longer path (`super::super::` seen as `super::`).
        if text[..i].ends_with("::") {
            continue;
        }
        let rest = &text[i + prefix.len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                out.extend(group.split(',').map(ident));
            }
            None => out.push(ident(rest)),
        }
    }
    out.retain(|s| !s.is_empty() && s != "super" && s != "self");
    out
}

#[test]
fn no_verb_module_imports_a_sibling_verb_module() {
    let commands = src_dir().join("commands");
    let verbs = verbs(&commands);
    assert!(verbs.contains("up") && verbs.contains("ports"), "{verbs:?}");
    let mut found = Vec::new();
    for path in rust_files(&commands) {
        let rel = path.strip_prefix(&commands).expect("under commands");
        let Some(own) = rel.iter().next().and_then(|s| s.to_str()) else {
            continue;
        };
        let own = own.trim_end_matches(".rs");
        if own == "mod" {
            continue;
        }
        let text = fs::read_to_string(&path).expect("read source");
        let parent = if rel.components().count() == 1 {
            "super::"
        } else {
            "super::super::"
        };
        for named in segments_after(&text, parent)
            .into_iter()
            .chain(segments_after(&text, "crate::commands::"))
        {
            if named != own && verbs.contains(&named) {
                found.push(format!("{} uses verb module {named}", rel.display()));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_sibling_guard_sees_grouped_and_nested_paths() {
    let text = "use super::{ports, Report};\nlet x = super::super::up::key;\n";
    assert_eq!(segments_after(text, "super::"), ["ports", "Report"]);
    assert_eq!(segments_after(text, "super::super::"), ["up"]);
}
