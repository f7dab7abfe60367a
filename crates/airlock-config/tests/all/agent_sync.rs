//! Config sync (A2) for every catalogue agent: the allowlist, the credential-shape refusal,
//! links and oversized files.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use airlock_config::agent_sync::{self, SkipReason, FILE_CAP};
use airlock_config::agents::{AgentSpec, CATALOGUE};
use airlock_config::credential_shapes::Shape;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn config_dir(home: &Path, spec: &AgentSpec) -> PathBuf {
    home.join(spec.config_dir)
}

/// Every allowlisted entry, as files: `(path relative to the config dir, contents)`.
fn populate_allowlist(home: &Path, spec: &AgentSpec) -> Vec<PathBuf> {
    let dir = config_dir(home, spec);
    let mut expected = Vec::new();
    for entry in spec.config_sync {
        let rels: Vec<String> = match entry.strip_suffix('/') {
            Some(d) => vec![format!("{d}/one.md"), format!("{d}/nested/two.md")],
            None => vec![(*entry).to_owned()],
        };
        for rel in rels {
            write(&dir.join(&rel), &format!("user-authored {rel}\n"));
            expected.push(PathBuf::from(spec.config_dir).join(rel));
        }
    }
    expected.sort();
    expected
}

/// Files an agent keeps next to its configuration that must never be copied.
fn populate_private(home: &Path, spec: &AgentSpec) -> Vec<PathBuf> {
    let dir = config_dir(home, spec);
    let mut out = Vec::new();
    for rel in [
        ".credentials.json",
        "auth.json",
        "oauth_creds.json",
        "history.jsonl",
        "projects/x/transcript.jsonl",
        "logs/today.log",
        "cache/blob",
    ] {
        write(&dir.join(rel), "private\n");
        out.push(PathBuf::from(spec.config_dir).join(rel));
    }
    out
}

fn copied(set: &agent_sync::SyncSet) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = set.files.iter().map(|f| f.home_rel.clone()).collect();
    v.sort();
    v
}

#[test]
fn config_sync_copies_exactly_the_allowlist_for_every_catalogue_agent() {
    for spec in CATALOGUE {
        let home = tempfile::tempdir().unwrap();
        let expected = populate_allowlist(home.path(), spec);
        let private = populate_private(home.path(), spec);
        let set = agent_sync::collect(home.path(), spec);
        assert_eq!(copied(&set), expected, "{}", spec.name);
        assert!(set.skipped.is_empty(), "{}: {:?}", spec.name, set.skipped);
        for p in private {
            assert!(!copied(&set).contains(&p), "{}: {}", spec.name, p.display());
        }
        for f in &set.files {
            assert!(
                String::from_utf8_lossy(&f.contents).starts_with("user-authored"),
                "{}: {}",
                spec.name,
                f.home_rel.display()
            );
        }
    }
}

#[test]
fn config_sync_refuses_a_credential_shaped_file_naming_file_and_line_for_every_agent() {
    let token = format!("sk-{}-api03-{}", "ant", "Q".repeat(80));
    for spec in CATALOGUE {
        let home = tempfile::tempdir().unwrap();
        let expected = populate_allowlist(home.path(), spec);
        // Poison the first allowlisted file (for a directory entry, a file inside it).
        let victim = home.path().join(&expected[0]);
        write(
            &victim,
            &format!("# instructions\nuse the key\nKEY={token}\nmore\n"),
        );
        let set = agent_sync::collect(home.path(), spec);
        assert!(
            !copied(&set).contains(&expected[0]),
            "{}: the poisoned file was copied",
            spec.name
        );
        assert_eq!(copied(&set).len(), expected.len() - 1, "{}", spec.name);
        assert_eq!(set.skipped.len(), 1, "{}", spec.name);
        let skip = &set.skipped[0];
        assert_eq!(skip.path, victim, "{}", spec.name);
        assert_eq!(
            skip.reason,
            SkipReason::Credential {
                line: 3,
                shape: Shape::AnthropicKey
            }
        );
        let message = skip.message();
        assert!(
            message.contains(&format!("{}:3:", victim.display())),
            "{message}"
        );
        assert!(!message.contains(&token), "the message leaks the token");
        for f in &set.files {
            assert!(!String::from_utf8_lossy(&f.contents).contains(&token));
        }
    }
}

#[test]
fn config_sync_never_follows_a_link_out_of_the_config_dir() {
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("secret.md"), "host secret outside\n");
    for spec in CATALOGUE {
        let home = tempfile::tempdir().unwrap();
        let expected = populate_allowlist(home.path(), spec);
        let dir = config_dir(home.path(), spec);
        // Replace every allowlisted file and directory by a link out of the config dir.
        for entry in spec.config_sync {
            let target = dir.join(entry.trim_end_matches('/'));
            if target.is_dir() {
                std::fs::remove_dir_all(&target).unwrap();
                symlink(outside.path(), &target).unwrap();
            } else {
                std::fs::remove_file(&target).unwrap();
                symlink(outside.path().join("secret.md"), &target).unwrap();
            }
        }
        let set = agent_sync::collect(home.path(), spec);
        assert!(set.files.is_empty(), "{}: {:?}", spec.name, copied(&set));
        assert_eq!(set.skipped.len(), spec.config_sync.len(), "{}", spec.name);
        assert!(set.skipped.iter().all(|s| s.reason == SkipReason::Link));
        drop(expected);
    }
}

#[test]
fn config_sync_skips_a_link_inside_an_allowed_directory_and_keeps_the_rest() {
    let spec = airlock_config::agents::find("claude").unwrap();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".claude/commands");
    write(&dir.join("ok.md"), "fine\n");
    symlink("/etc/passwd", dir.join("passwd.md")).unwrap();
    let set = agent_sync::collect(home.path(), spec);
    assert_eq!(copied(&set), [PathBuf::from(".claude/commands/ok.md")]);
    assert_eq!(set.skipped.len(), 1);
    assert_eq!(set.skipped[0].path, dir.join("passwd.md"));
    assert_eq!(set.skipped[0].reason, SkipReason::Link);
}

#[test]
fn config_sync_skips_an_oversized_file_and_a_fifo_without_blocking() {
    let spec = airlock_config::agents::find("claude").unwrap();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".claude");
    write(&dir.join("CLAUDE.md"), &"x".repeat(FILE_CAP as usize + 1));
    std::fs::create_dir_all(dir.join("commands")).unwrap();
    let fifo = dir.join("commands/pipe.md");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let set = agent_sync::collect(home.path(), spec);
    assert!(set.files.is_empty());
    let reasons: Vec<_> = set.skipped.iter().map(|s| s.reason.clone()).collect();
    assert_eq!(
        reasons,
        [
            SkipReason::TooLarge { cap: FILE_CAP },
            SkipReason::NotRegular {
                what: "a FIFO".to_owned()
            }
        ]
    );
}

#[test]
fn config_sync_of_an_absent_config_dir_is_empty() {
    for spec in CATALOGUE {
        let home = tempfile::tempdir().unwrap();
        let set = agent_sync::collect(home.path(), spec);
        assert!(
            set.files.is_empty() && set.skipped.is_empty(),
            "{}",
            spec.name
        );
    }
}
