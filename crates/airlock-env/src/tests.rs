use super::*;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[test]
fn cache_vars_are_the_names_of_cache_dirs() {
    let names: Vec<&str> = CACHE_DIRS.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, CACHE_VARS);
}

#[test]
fn proxy_url_names_the_proxy_port() {
    assert_eq!(PROXY_URL, format!("http://127.0.0.1:{PROXY_PORT}"));
}

fn is_variable_name(value: &str) -> bool {
    !value.is_empty()
        && !value.starts_with(|c: char| c.is_ascii_digit())
        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `(IDENT, value)` of every `pub const IDENT: &str = "value";` in this crate's `lib.rs`.
fn declared_constants() -> Vec<(String, String)> {
    let source = include_str!("lib.rs");
    source
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("pub const ")?;
            let (ident, rest) = rest.split_once(": &str = \"")?;
            let value = rest.strip_suffix("\";")?;
            Some((ident.to_owned(), value.to_owned()))
        })
        .collect()
}

#[test]
fn all_lists_every_catalogued_variable_once() {
    let declared: BTreeSet<String> = declared_constants()
        .into_iter()
        .map(|(_, value)| value)
        .filter(|value| is_variable_name(value))
        .collect();
    let listed: BTreeSet<String> = ALL.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(listed.len(), ALL.len(), "ALL names a variable twice");
    assert_eq!(declared, listed, "ALL and the declared constants differ");
    assert!(declared.contains("HOME") && declared.contains("http_proxy"));
}

/// The crate sources a guard scans: every `.rs` file under `crates/*/src`, except this crate.
fn crate_sources() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates directory");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(crates).expect("read crates/") {
        let dir = entry.expect("crates/ entry").path();
        if dir.file_name().is_some_and(|n| n == "airlock-env") {
            continue;
        }
        collect_rs(&dir.join("src"), &mut files);
    }
    files.sort();
    files
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("dir entry").path();
        let kind = std::fs::symlink_metadata(&path).expect("lstat").file_type();
        if kind.is_dir() {
            collect_rs(&path, out);
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The directory holding the submodules of `file` (`lib.rs`, `main.rs`, `mod.rs`: its own
/// directory; `foo.rs`: `foo/`).
fn module_dir(file: &Path) -> PathBuf {
    let parent = file.parent().expect("parent").to_path_buf();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("lib" | "main" | "mod") => parent,
        Some(stem) => parent.join(stem),
        None => parent,
    }
}

/// The non-test part of one source file, and the files its `#[cfg(test)] mod x;` lines name
/// (test-only modules, skipped by the scan). An inline `#[cfg(test)] mod x { … }` ends the
/// non-test part (the workspace keeps inline test modules last in their file).
fn split_tests(file: &Path, text: &str) -> (String, Vec<PathBuf>) {
    let mut kept = String::new();
    let mut test_files = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() != "#[cfg(test)]" {
            kept.push_str(line);
            kept.push('\n');
            continue;
        }
        let Some(next) = lines.next() else { break };
        let item = next.trim();
        let item = item.strip_prefix("pub ").unwrap_or(item);
        if let Some(name) = item.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            let dir = module_dir(file);
            test_files.push(dir.join(format!("{name}.rs")));
            test_files.push(dir.join(name));
            continue;
        }
        break;
    }
    (kept, test_files)
}

#[test]
fn no_crate_spells_a_catalogued_variable_as_a_string_literal() {
    let files = crate_sources();
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut test_only: Vec<PathBuf> = Vec::new();
    let mut offenders = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        let (kept, tests) = split_tests(file, &text);
        test_only.extend(tests);
        if test_only.iter().any(|t| file.starts_with(t)) || file.ends_with("tests.rs") {
            continue;
        }
        for (n, line) in kept.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for name in ALL {
                if line.contains(&format!("\"{name}\"")) {
                    offenders.push(format!("{}:{}: \"{name}\"", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "use the airlock_env constants instead of these literals:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_literal_scan_sees_non_test_code_and_skips_test_modules() {
    let file = Path::new("/x/src/thing.rs");
    let text = "fn a() { std::env::var(\"HOME\"); }\n#[cfg(test)]\nmod extra;\n\
                fn b() {}\n#[cfg(test)]\nmod tests {\n    const X: &str = \"PATH\";\n}\n";
    let (kept, tests) = split_tests(file, text);
    assert!(kept.contains("\"HOME\"") && kept.contains("fn b()"));
    assert!(!kept.contains("\"PATH\""));
    assert!(tests.contains(&PathBuf::from("/x/src/thing/extra.rs")));
}
