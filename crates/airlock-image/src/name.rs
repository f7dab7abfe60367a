//! Image names: `[a-z0-9][a-z0-9._-]{0,62}` (at most 63 characters), so a name is always a
//! plain, visible directory name in the store (never `.`, `..` or a hidden working directory).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImageName(String);

impl ImageName {
    /// Checks `name`; the error says what a valid name looks like.
    pub fn parse(name: &str) -> Result<Self, String> {
        let b = name.as_bytes();
        let first_ok = b
            .first()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok = b.iter().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')
        });
        if first_ok && rest_ok && b.len() <= 63 {
            Ok(Self(name.to_owned()))
        } else {
            Err(format!(
                "{:?} is not a valid image name: use 1 to 63 of a-z, 0-9, '.', '_', '-', \
                 starting with a letter or digit",
                crate::entry_path::escape_controls(name)
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ImageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_directory_names() {
        for ok in ["a", "debian-12", "x.y_z", &"a".repeat(63)] {
            assert!(ImageName::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".import-1",
            "A",
            "-x",
            "a/b",
            "a b",
            &"a".repeat(64),
        ] {
            assert!(ImageName::parse(bad).is_err(), "{bad}");
        }
    }
}
