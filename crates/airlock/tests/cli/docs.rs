//! The user documentation stands alone and keeps up with the command line: every link in
//! README.md and docs/ resolves inside this repository, and the guide has a section for every
//! command `airlock --help` lists.

use std::path::{Path, PathBuf};

use crate::common::TestEnv;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// README.md and every Markdown file in docs/.
fn documents() -> Vec<PathBuf> {
    let root = repo();
    let mut docs = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("read docs/") {
        let path = entry.expect("docs entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    docs
}

/// Targets of inline Markdown links `](target)`.
fn links(text: &str) -> Vec<&str> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .collect()
}

#[test]
fn documentation_links_resolve_inside_the_repository() {
    let root = repo();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read a document");
        for forbidden in ["../shared", "PRODUCT.md", "ARCHITECTURE.md"] {
            assert!(
                !text.contains(forbidden),
                "{} points outside the repository ({forbidden})",
                doc.display()
            );
        }
        for link in links(&text) {
            if link.starts_with("http") || link.starts_with('#') {
                continue;
            }
            let file = link.split('#').next().unwrap_or(link);
            let target = doc.parent().unwrap().join(file);
            let resolved = target
                .canonicalize()
                .unwrap_or_else(|e| panic!("{}: link {link}: {e}", doc.display()));
            assert!(
                resolved.starts_with(&root),
                "{}: link {link} leaves the repository",
                doc.display()
            );
        }
    }
}

#[test]
fn the_guide_has_a_section_for_every_command() {
    let env = TestEnv::new();
    let help = env.run(&["--help"]);
    help.assert_code(0);
    let verbs: Vec<&str> = help
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| *v != "help")
        .collect();
    assert!(verbs.len() > 10, "{}", help.stdout);
    let guide = std::fs::read_to_string(repo().join("docs/guide.md")).expect("docs/guide.md");
    for verb in verbs {
        let heading = guide
            .lines()
            .any(|l| l.starts_with("### ") && l.contains(&format!("`airlock {verb}")));
        assert!(heading, "docs/guide.md has no section for `airlock {verb}`");
    }
}
