//! Checks of single values that TOML types cannot express (ranges, syntaxes, charsets).
//! Each returns the checked value or a one-sentence message for a [`crate::Diagnostic`].

use std::path::PathBuf;

use crate::effective::{DetachKey, Image};

/// Default memory limit (C5).
pub const DEFAULT_MEMORY_MB: u64 = 8192;
/// Smallest accepted memory limit (C5).
pub const MIN_MEMORY_MB: u64 = 256;
/// Largest accepted memory limit (16 TiB; anything above is a typo).
pub const MAX_MEMORY_MB: u64 = 16 * 1024 * 1024;
/// Default process limit.
pub const DEFAULT_PIDS_MAX: u64 = 4096;
/// Smallest accepted process limit.
pub const MIN_PIDS_MAX: u64 = 16;
/// Largest accepted process limit (the kernel's `pid_max` ceiling).
pub const MAX_PIDS_MAX: u64 = 4_194_304;
/// Largest accepted CPU limit.
pub const MAX_CPUS: f64 = 4096.0;
/// Default detach key.
pub const DEFAULT_DETACH_KEY: &str = "ctrl-]";

/// `memory_mb`: 256 ..= 16 TiB.
pub fn memory_mb(v: u64) -> Result<u64, String> {
    if v < MIN_MEMORY_MB {
        Err(format!("must be at least {MIN_MEMORY_MB} (MiB), got {v}"))
    } else if v > MAX_MEMORY_MB {
        Err(format!("must be at most {MAX_MEMORY_MB} (MiB), got {v}"))
    } else {
        Ok(v)
    }
}

/// `pids_max`: 16 ..= 4194304.
pub fn pids_max(v: u64) -> Result<u64, String> {
    if (MIN_PIDS_MAX..=MAX_PIDS_MAX).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "must be between {MIN_PIDS_MAX} and {MAX_PIDS_MAX}, got {v}"
        ))
    }
}

/// `cpus`: finite, greater than 0, at most 4096.
pub fn cpus(v: f64) -> Result<f64, String> {
    if v.is_finite() && v > 0.0 && v <= MAX_CPUS {
        Ok(v)
    } else {
        Err(format!(
            "must be a number greater than 0 and at most {MAX_CPUS}, got {v}"
        ))
    }
}

/// An imported image name: `[a-z0-9][a-z0-9._-]{0,62}` (the image store's own rule).
pub fn image_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')
        })
}

/// `image`: `host`, `dir:/abs/path` or `/abs/path` (a directory; only when `paths_allowed`),
/// or the name of an imported image. `exists` answers whether an image of that name is
/// imported; `None` checks the spelling only.
pub fn image(
    v: &str,
    paths_allowed: bool,
    exists: Option<&dyn Fn(&str) -> bool>,
) -> Result<Image, String> {
    if v == "host" {
        return Ok(Image::Host);
    }
    let dir = v.strip_prefix("dir:").unwrap_or(v);
    if dir.starts_with('/') {
        if !paths_allowed {
            return Err(
                "a directory image belongs in the user config (`airlock config`): a \
                        project config cannot map host directories; set `image` there, or \
                        use \"host\" or an imported image here"
                    .to_owned(),
            );
        }
        let path = PathBuf::from(dir);
        return match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => Ok(Image::Directory(path)),
            Ok(_) => Err(format!("{dir} is not a directory")),
            Err(e) => Err(format!("cannot use {dir} as a root filesystem: {e}")),
        };
    }
    if v.starts_with("dir:") {
        return Err(format!(
            "{v:?}: a directory image is `dir:` followed by an absolute path"
        ));
    }
    if !image_name(v) {
        return Err(format!(
            "{v:?} is neither \"host\", \"dir:/absolute/path\", nor an image name \
             ([a-z0-9][a-z0-9._-]{{0,62}})"
        ));
    }
    match exists {
        Some(exists) if !exists(v) => Err(format!(
            "no image named {v:?} is imported; `airlock image ls` lists the imported images, \
             `airlock image import FILE --name {v}` imports one"
        )),
        _ => Ok(Image::Named(v.to_owned())),
    }
}

/// A package name: letters, digits and `+._:=~-`, at most 128 characters, not starting with
/// `-` (it is passed to package managers as an argument, never as an option).
pub fn package(name: &str) -> Result<(), String> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, b'+' | b'.' | b'_' | b':' | b'=' | b'~' | b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid package name {name:?}: use letters, digits and +._:=~- (not starting with '-')"
        ))
    }
}

/// `detach_key`: comma-separated `ctrl-<key>` where key is a letter or one of `@[\]^_`;
/// at most 4 keys.
pub fn detach_key(v: &str) -> Result<DetachKey, String> {
    let bad = |part: &str| {
        format!(
            "invalid detach key {part:?} in {v:?}: use `ctrl-<key>` with key a-z or one of @ [ \\ ] ^ _, \
             comma separated (e.g. \"ctrl-]\" or \"ctrl-p,ctrl-q\")"
        )
    };
    let mut bytes = Vec::new();
    for part in v.split(',') {
        let part = part.trim();
        let key = part.strip_prefix("ctrl-").ok_or_else(|| bad(part))?;
        let mut chars = key.chars();
        let (Some(c), None) = (chars.next(), chars.next()) else {
            return Err(bad(part));
        };
        let c = c.to_ascii_lowercase();
        let byte = match c {
            'a'..='z' => c as u8 - b'a' + 1,
            '@' => 0,
            '[' => 0x1b,
            '\\' => 0x1c,
            ']' => 0x1d,
            '^' => 0x1e,
            '_' => 0x1f,
            _ => return Err(bad(part)),
        };
        bytes.push(byte);
    }
    if bytes.len() > 4 {
        return Err(format!("detach key {v:?} has more than 4 keys"));
    }
    Ok(DetachKey {
        text: v.to_owned(),
        bytes,
    })
}

/// An agent argument: no NUL byte (it could not reach `execve`).
pub fn arg(v: &str) -> Result<(), String> {
    if v.contains('\0') {
        Err("arguments cannot contain a NUL byte".to_owned())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn limits_enforce_their_minimums_and_maximums() {
        assert!(memory_mb(255).is_err());
        assert_eq!(memory_mb(256), Ok(256));
        assert!(memory_mb(MAX_MEMORY_MB + 1).is_err());
        assert!(pids_max(15).is_err());
        assert_eq!(pids_max(16), Ok(16));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 5000.0] {
            assert!(cpus(bad).is_err(), "{bad}");
        }
        assert_eq!(cpus(0.5), Ok(0.5));
    }

    #[test]
    fn detach_keys_translate_to_control_bytes() {
        let table: &[(&str, Option<&[u8]>)] = &[
            ("ctrl-]", Some(&[0x1d])),
            ("ctrl-p,ctrl-q", Some(&[0x10, 0x11])),
            ("ctrl-@", Some(&[0])),
            ("ctrl-A", Some(&[1])),
            ("ctrl-", None),
            ("alt-x", None),
            ("ctrl-ab", None),
            ("ctrl-1", None),
            ("", None),
            ("ctrl-a,ctrl-b,ctrl-c,ctrl-d,ctrl-e", None),
        ];
        for (text, want) in table {
            let got = detach_key(text).ok().map(|k| k.bytes);
            assert_eq!(got.as_deref(), *want, "{text}");
        }
    }

    #[test]
    fn package_names_cannot_smuggle_options_or_shell() {
        for ok in [
            "git",
            "libssl-dev",
            "g++",
            "python3.11",
            "nodejs=20.1~deb12",
        ] {
            assert!(package(ok).is_ok(), "{ok}");
        }
        for bad in [
            "-o",
            "--allow-unauthenticated",
            "a b",
            "x;rm",
            "$(x)",
            "",
            "a/b",
        ] {
            assert!(package(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn image_values_are_host_paths_or_names() {
        let imported = |n: &str| n == "debian-12";
        let image = |v: &str, p: bool| image(v, p, Some(&imported));
        assert_eq!(image("host", false), Ok(Image::Host));
        assert_eq!(
            image("debian-12", false),
            Ok(Image::Named("debian-12".into()))
        );
        let err = image("ubuntu-24.04", false).unwrap_err();
        assert!(err.contains("airlock image ls"), "{err}");
        assert!(err.contains("image import"), "{err}");
        assert!(image("Ubuntu", false).is_err());
        assert!(image("./rootfs", true).is_err());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().to_str().unwrap();
        assert_eq!(image(p, true), Ok(Image::Directory(dir.path().into())));
        let prefixed = format!("dir:{p}");
        assert_eq!(
            image(&prefixed, true),
            Ok(Image::Directory(dir.path().into()))
        );
        assert!(image("dir:relative", true).is_err());
        assert!(image(&prefixed, false).unwrap_err().contains("user config"));
        let err = image(p, false).unwrap_err();
        assert!(err.contains("user config"), "{err}");
        assert!(image("/nonexistent/rootfs", true).is_err());
    }

    proptest! {
        #[test]
        fn detach_key_parser_never_panics_and_accepts_only_control_bytes(s in ".{0,24}") {
            if let Ok(k) = detach_key(&s) {
                prop_assert!(!k.bytes.is_empty() && k.bytes.iter().all(|b| *b < 0x20));
            }
        }

        #[test]
        fn accepted_package_names_never_start_with_a_dash_or_contain_space(s in ".{0,40}") {
            if package(&s).is_ok() {
                prop_assert!(!s.starts_with('-'));
                prop_assert!(!s.chars().any(char::is_whitespace));
            }
        }
    }
}
