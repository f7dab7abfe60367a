use super::*;

/// Runs `f` with `CI` set or unset. Tests in this file do not run in parallel with anything
/// that reads `CI` in the same process (they are the only tests of this crate touching it, and
/// they take this lock).
fn with_ci<T>(ci: bool, f: impl FnOnce() -> T) -> T {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _held = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let before = std::env::var_os(airlock_env::CI);
    // The lock serialises every change of CI made here.
    if ci {
        std::env::set_var(airlock_env::CI, "true");
    } else {
        std::env::remove_var(airlock_env::CI);
    }
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    match before {
        Some(v) => std::env::set_var(airlock_env::CI, v),
        None => std::env::remove_var(airlock_env::CI),
    }
    out.unwrap_or_else(|p| std::panic::resume_unwind(p))
}

#[test]
fn a_skip_fails_the_test_when_ci_is_set() {
    let outcome = with_ci(true, || {
        std::panic::catch_unwind(|| skip("needs a unicorn"))
    });
    assert!(outcome.is_err(), "skip must panic under CI");
}

#[test]
fn a_skip_only_prints_outside_ci() {
    with_ci(false, || skip("needs a unicorn"));
}

#[test]
fn a_missing_tool_fails_under_ci_and_an_installed_one_runs() {
    with_ci(true, || {
        assert!(needs_tool("sh"));
        let missing = std::panic::catch_unwind(|| needs_tool("airlock-no-such-tool-7f3a"));
        assert!(missing.is_err(), "a missing tool must fail under CI");
    });
    with_ci(false, || assert!(!needs_tool("airlock-no-such-tool-7f3a")));
}

#[test]
fn needing_root_matches_the_effective_uid() {
    with_ci(false, || {
        assert_eq!(needs_root("a test"), effective_uid() == 0)
    });
    if effective_uid() != 0 {
        let outcome = with_ci(true, || std::panic::catch_unwind(|| needs_root("a test")));
        assert!(outcome.is_err(), "a non-root run must fail under CI");
    }
}

#[test]
fn passwd_ids_reads_uid_and_gid_of_the_named_user() {
    let passwd = "root:x:0:0:root:/root:/bin/bash\nairlock-test:x:1500:1501::/home/t:/bin/sh\n";
    assert_eq!(passwd_ids(passwd, TEST_USER), Some((1500, 1501)));
    assert_eq!(passwd_ids(passwd, "nobody"), None);
}

mod wiring {
    //! Every `tests/**/*.rs` file of every crate is compiled into a test target: reachable
    //! through `mod` declarations from a target root (auto-discovered `tests/*.rs` and
    //! `tests/*/main.rs` unless `autotests = false`, plus every `[[test]] path`).
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.expect("dir entry").path();
            let kind = std::fs::symlink_metadata(&path).expect("lstat").file_type();
            if kind.is_dir() {
                rs_files(&path, out);
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The test-target roots of the crate in `dir`, from its manifest and its `tests/`.
    pub(super) fn target_roots(dir: &Path, manifest: &str) -> Vec<PathBuf> {
        let mut roots = Vec::new();
        let mut in_test = false;
        for line in manifest.lines().map(str::trim) {
            if line.starts_with('[') {
                in_test = line == "[[test]]";
            } else if let Some(value) = line.strip_prefix("path").map(str::trim_start) {
                if in_test {
                    if let Some(p) = value.strip_prefix('=') {
                        roots.push(dir.join(p.trim().trim_matches('"')));
                    }
                }
            }
        }
        let auto = !manifest
            .lines()
            .any(|l| l.replace(' ', "") == "autotests=false");
        if auto {
            for entry in std::fs::read_dir(dir.join("tests")).into_iter().flatten() {
                let path = entry.expect("tests entry").path();
                if path.extension().is_some_and(|e| e == "rs") {
                    roots.push(path);
                } else if path.join("main.rs").is_file() {
                    roots.push(path.join("main.rs"));
                }
            }
        }
        roots
    }

    /// The files `file` declares as modules (`mod x;`, also under `#[cfg(...)]`).
    pub(super) fn declared_modules(file: &Path, text: &str) -> Vec<PathBuf> {
        let parent = file.parent().expect("parent");
        let dir = match file.file_stem().and_then(|s| s.to_str()) {
            Some("lib" | "main" | "mod") => parent.to_path_buf(),
            Some(stem) if file.ends_with(format!("tests/{stem}.rs")) => parent.to_path_buf(),
            Some(stem) => parent.join(stem),
            None => parent.to_path_buf(),
        };
        text.lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l.strip_prefix("pub ").unwrap_or(l);
                let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
                l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
            })
            .flat_map(|name| {
                [
                    dir.join(format!("{name}.rs")),
                    dir.join(name).join("mod.rs"),
                ]
            })
            .filter(|p| p.is_file())
            .collect()
    }

    #[test]
    fn every_test_file_is_reachable_from_a_test_target() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("crates/");
        let mut unreachable = Vec::new();
        let mut checked = 0;
        for entry in std::fs::read_dir(crates).expect("read crates/") {
            let dir = entry.expect("crates entry").path();
            let mut files = Vec::new();
            rs_files(&dir.join("tests"), &mut files);
            if files.is_empty() {
                continue;
            }
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("manifest");
            let mut reached: BTreeSet<PathBuf> = BTreeSet::new();
            let mut todo = target_roots(&dir, &manifest);
            while let Some(file) = todo.pop() {
                if !reached.insert(file.clone()) {
                    continue;
                }
                let text = std::fs::read_to_string(&file).expect("read test source");
                todo.extend(declared_modules(&file, &text));
            }
            checked += files.len();
            unreachable.extend(files.into_iter().filter(|f| !reached.contains(f)));
        }
        assert!(checked > 40, "found only {checked} test files");
        assert!(
            unreachable.is_empty(),
            "these test files are compiled into no test target (add a `mod` line):\n{unreachable:#?}"
        );
    }

    #[test]
    fn a_file_no_target_declares_is_reported() {
        let tmp = std::env::temp_dir().join(format!("airlock-wiring-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("tests/all")).unwrap();
        std::fs::write(tmp.join("tests/all/main.rs"), "mod used;\n").unwrap();
        std::fs::write(tmp.join("tests/all/used.rs"), "").unwrap();
        std::fs::write(tmp.join("tests/all/forgotten.rs"), "").unwrap();
        let roots = target_roots(&tmp, "[package]\nname = \"x\"\n");
        assert_eq!(roots, [tmp.join("tests/all/main.rs")]);
        let text = std::fs::read_to_string(&roots[0]).unwrap();
        let declared = declared_modules(&roots[0], &text);
        std::fs::remove_dir_all(&tmp).unwrap();
        assert_eq!(declared, [tmp.join("tests/all/used.rs")]);
    }
}
