//! Git inside the sandbox (A5): the sandbox user's `~/.gitconfig` and credential helper.
//!
//! What [`render`] writes, and why:
//! - `safe.directory` lists exactly the mapped workspaces (and a linked worktree's main git
//!   directory), never `*`: git's ownership check keeps protecting every other directory;
//! - `user.name`/`user.email` are the host's (given by the caller, read from the host's global
//!   git configuration); a value with a control character is dropped, not written;
//! - GitHub SSH remotes are rewritten to HTTPS (`url.<base>.insteadOf`): the sandbox has no SSH
//!   route and no SSH key, while HTTPS goes through the egress proxy;
//! - a credential helper for `https://github.com` answers with the *placeholder* held in
//!   `GH_TOKEN`/`GITHUB_TOKEN`; git sends it as HTTP Basic credentials and the proxy puts the
//!   real token in its place for hosts the secret is bound to (N5). No real value is written.

use std::path::{Path, PathBuf};

/// Path of the credential helper script, relative to the sandbox home.
pub const CREDENTIAL_HELPER: &str = ".config/airlock/git-credential-placeholder";

/// Environment variables the credential helper reads, in order.
pub const TOKEN_VARS: &[&str] = &["GH_TOKEN", "GITHUB_TOKEN"];

/// What the sandbox's git configuration is made of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitSetup {
    /// Directories git may treat as safe: the mapped workspaces (in-sandbox paths).
    pub safe_directories: Vec<PathBuf>,
    /// The host's `user.name`.
    pub user_name: Option<String>,
    /// The host's `user.email`.
    pub user_email: Option<String>,
}

/// A file to write into the sandbox home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitFile {
    /// Path relative to the home directory.
    pub home_rel: &'static str,
    /// Contents.
    pub contents: String,
    /// Whether it is executable.
    pub executable: bool,
}

/// A value that cannot go into the configuration, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The configuration key (`user.name`, `safe.directory`).
    pub key: &'static str,
    /// Why.
    pub reason: String,
}

/// The files to write (`~/.gitconfig` and the credential helper) and what was left out.
pub fn render(setup: &GitSetup, home: &Path) -> (Vec<GitFile>, Vec<Dropped>) {
    let mut dropped = Vec::new();
    let mut cfg = String::from("# Written by airlock on every `up` (A5); edits are replaced.\n");
    let mut user = String::new();
    for (key, value) in [("name", &setup.user_name), ("email", &setup.user_email)] {
        let Some(v) = value else { continue };
        match quoted(v) {
            Ok(q) => user.push_str(&format!("\t{key} = {q}\n")),
            Err(reason) => dropped.push(Dropped {
                key: if key == "name" {
                    "user.name"
                } else {
                    "user.email"
                },
                reason,
            }),
        }
    }
    if !user.is_empty() {
        cfg.push_str("[user]\n");
        cfg.push_str(&user);
    }
    let mut safe = String::new();
    for dir in &setup.safe_directories {
        match dir.to_str().map(quoted) {
            Some(Ok(q)) if dir.is_absolute() => safe.push_str(&format!("\tdirectory = {q}\n")),
            Some(Err(reason)) => dropped.push(Dropped {
                key: "safe.directory",
                reason,
            }),
            Some(Ok(_)) | None => dropped.push(Dropped {
                key: "safe.directory",
                reason: format!("{} is not an absolute UTF-8 path", dir.display()),
            }),
        }
    }
    if !safe.is_empty() {
        cfg.push_str("[safe]\n");
        cfg.push_str(&safe);
    }
    cfg.push_str(
        "[url \"https://github.com/\"]\n\
         \tinsteadOf = git@github.com:\n\
         \tinsteadOf = ssh://git@github.com/\n",
    );
    let helper = home.join(CREDENTIAL_HELPER);
    match helper.to_str().map(quoted) {
        Some(Ok(q)) => cfg.push_str(&format!(
            "[credential \"https://github.com\"]\n\thelper =\n\thelper = {q}\n"
        )),
        Some(Err(reason)) => dropped.push(Dropped {
            key: "credential.helper",
            reason,
        }),
        None => dropped.push(Dropped {
            key: "credential.helper",
            reason: format!("{} is not UTF-8", helper.display()),
        }),
    }
    let files = vec![
        GitFile {
            home_rel: ".gitconfig",
            contents: cfg,
            executable: false,
        },
        GitFile {
            home_rel: CREDENTIAL_HELPER,
            contents: helper_script(),
            executable: true,
        },
    ];
    (files, dropped)
}

/// The credential helper: on `get`, the placeholder of the first token variable that is set.
fn helper_script() -> String {
    let vars: Vec<String> = TOKEN_VARS.iter().map(|v| format!("\"${v}\"")).collect();
    format!(
        "#!/bin/sh\n\
         # airlock: hands git the token's placeholder; the egress proxy substitutes the real\n\
         # value in the Basic credentials for hosts the secret is bound to (N5).\n\
         [ \"$1\" = get ] || exit 0\n\
         for t in {}; do\n\
         \tif [ -n \"$t\" ]; then\n\
         \t\tprintf 'username=x-access-token\\npassword=%s\\n' \"$t\"\n\
         \t\texit 0\n\
         \tfi\n\
         done\n",
        vars.join(" ")
    )
}

/// `value` as a double-quoted git-config value, or why it cannot be one.
fn quoted(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err("empty".to_owned());
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{value:?} holds a control character"));
    }
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
    Ok(format!("\"{escaped}\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> GitSetup {
        GitSetup {
            safe_directories: vec![PathBuf::from("/home/u/src/p")],
            user_name: Some("Ada \"the\" Lovelace".to_owned()),
            user_email: Some("ada@example.com".to_owned()),
        }
    }

    #[test]
    fn safe_directory_lists_exactly_the_workspaces_never_a_wildcard() {
        let (files, dropped) = render(&setup(), Path::new("/home/u"));
        let cfg = &files[0].contents;
        assert!(dropped.is_empty());
        let safe: Vec<&str> = cfg.lines().filter(|l| l.contains("directory =")).collect();
        assert_eq!(safe, ["\tdirectory = \"/home/u/src/p\""]);
        assert!(!cfg.contains('*'));
    }

    #[test]
    fn identity_is_quoted_and_a_control_character_is_dropped() {
        let (files, _) = render(&setup(), Path::new("/home/u"));
        assert!(files[0]
            .contents
            .contains("\tname = \"Ada \\\"the\\\" Lovelace\"\n"));
        let mut s = setup();
        s.user_name = Some("x\n[core]\n\tfsmonitor = evil".to_owned());
        let (files, dropped) = render(&s, Path::new("/home/u"));
        assert!(!files[0].contents.contains("fsmonitor"));
        assert_eq!(dropped[0].key, "user.name");
    }

    #[test]
    fn github_ssh_remotes_become_https_with_the_placeholder_helper() {
        let (files, _) = render(&setup(), Path::new("/home/u"));
        let cfg = &files[0].contents;
        assert!(cfg.contains("[url \"https://github.com/\"]\n\tinsteadOf = git@github.com:\n"));
        assert!(cfg.contains(&format!(
            "\thelper =\n\thelper = \"/home/u/{CREDENTIAL_HELPER}\"\n"
        )));
        assert_eq!(files[1].home_rel, CREDENTIAL_HELPER);
        assert!(files[1].executable);
    }
}
