//! Sandbox names (issue 4 item 10).
//!
//! A name is 1–[`MAX_LEN`] characters from `[a-z0-9-]`, starting with a lowercase letter or a
//! digit. So a name is always one plain path component (no `/`, no `.`/`..`), never looks like
//! an option (`-rf`), never carries a control character, and fits every place it is used: state
//! record names, directory names, cgroup names.
//!
//! Without `--name` a project's sandbox is named `<dir>-<digest>`: the project directory's base
//! name folded into the charset (at most 40 characters, `project` when nothing is left), then
//! the first 8 hex digits of the SHA-256 of the canonical project path, so two projects with the
//! same directory name get different sandboxes and one project always gets the same one.

use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Longest accepted name.
pub const MAX_LEN: usize = 63;
/// Longest directory-derived prefix of a project's default name.
const PREFIX_LEN: usize = 40;

/// Why a string is not a sandbox name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("a sandbox name cannot be empty")]
    Empty,
    #[error("sandbox name is {len} characters long; the limit is {MAX_LEN}")]
    TooLong { len: usize },
    #[error("sandbox name {name:?} contains {ch:?}; allowed are a-z, 0-9 and '-'")]
    BadChar { name: String, ch: char },
    #[error("sandbox name {name:?} must start with a lowercase letter or a digit")]
    BadStart { name: String },
}

/// A validated sandbox name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SandboxName(String);

impl SandboxName {
    /// Validates `text` (see the module docs for the rules).
    pub fn parse(text: &str) -> Result<SandboxName, NameError> {
        let len = text.chars().count();
        if len == 0 {
            return Err(NameError::Empty);
        }
        if len > MAX_LEN {
            return Err(NameError::TooLong { len });
        }
        if let Some(ch) = text
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return Err(NameError::BadChar {
                name: text.to_owned(),
                ch,
            });
        }
        if text.starts_with('-') {
            return Err(NameError::BadStart {
                name: text.to_owned(),
            });
        }
        Ok(SandboxName(text.to_owned()))
    }

    /// The default name of the project rooted at `root` (a canonical path): `<dir>-<digest>`.
    pub fn for_project(root: &Path) -> SandboxName {
        let base = root
            .file_name()
            .map(|n| n.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        let mut prefix = String::new();
        for c in base.chars() {
            let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            };
            if !(c == '-' && (prefix.is_empty() || prefix.ends_with('-'))) {
                prefix.push(c);
            }
            if prefix.len() >= PREFIX_LEN {
                break;
            }
        }
        let prefix = prefix.trim_end_matches('-');
        let prefix = if prefix.is_empty() { "project" } else { prefix };
        let digest = Sha256::digest(root.as_os_str().as_bytes());
        let name = format!("{prefix}-{}", &hex::encode(digest)[..8]);
        SandboxName(name)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SandboxName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for SandboxName {
    type Error = NameError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        SandboxName::parse(&value)
    }
}

impl From<SandboxName> for String {
    fn from(value: SandboxName) -> String {
        value.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_escape_a_directory_or_pose_as_options_are_refused() {
        let long = "a".repeat(300);
        for bad in [
            "",
            "../x",
            "-rf",
            "a\nb",
            "A",
            "a.b",
            "a/b",
            "a b",
            long.as_str(),
        ] {
            assert!(SandboxName::parse(bad).is_err(), "{bad:?} was accepted");
        }
        for good in ["a", "web-1", "0abc", &"a".repeat(MAX_LEN)] {
            assert!(SandboxName::parse(good).is_ok(), "{good:?} was refused");
        }
    }

    #[test]
    fn project_names_are_stable_valid_and_distinct_per_path() {
        let a = SandboxName::for_project(Path::new("/home/u/My Project!"));
        assert_eq!(
            a,
            SandboxName::for_project(Path::new("/home/u/My Project!"))
        );
        assert!(a.as_str().starts_with("my-project-"), "{a}");
        assert!(SandboxName::parse(a.as_str()).is_ok());
        let b = SandboxName::for_project(Path::new("/srv/My Project!"));
        assert_ne!(a, b);
        let odd = SandboxName::for_project(Path::new("/home/u/...."));
        assert!(odd.as_str().starts_with("project-"), "{odd}");
        let long = SandboxName::for_project(Path::new(&format!("/x/{}", "z".repeat(200))));
        assert!(long.as_str().len() <= MAX_LEN);
    }
}
