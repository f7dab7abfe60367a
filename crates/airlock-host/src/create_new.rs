//! Creating a file that must not exist yet (`init`, `config`: "never overwrites").
//!
//! The file is opened with `O_CREAT|O_EXCL` (`create_new`), so an existing file — or a symlink
//! planted at the path — is never written through, even if it appears between a check and the
//! write. If writing fails after the open, the half-written file (which this call created) is
//! removed, so a later run can try again instead of finding a truncated file it must not touch.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Why a new file could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateNewError {
    #[error("{path} already exists")]
    Exists { path: PathBuf },
    #[error("cannot create {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
}

/// Creates `path` with `contents` and `mode`; fails with [`CreateNewError::Exists`] if anything
/// is already at `path`. Data and directory entry are synced before returning.
pub fn create_new(path: &Path, contents: &[u8], mode: u32) -> Result<(), CreateNewError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|source| match source.kind() {
            io::ErrorKind::AlreadyExists => CreateNewError::Exists {
                path: path.to_owned(),
            },
            _ => CreateNewError::Create {
                path: path.to_owned(),
                source,
            },
        })?;
    let written = file
        .write_all(contents)
        .and_then(|()| file.sync_all())
        .and_then(|()| sync_parent(path));
    if let Err(source) = written {
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(CreateNewError::Write {
            path: path.to_owned(),
            source,
        });
    }
    Ok(())
}

fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_the_file_with_the_requested_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.toml");
        create_new(&p, b"x = 1\n", 0o600).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"x = 1\n");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn never_overwrites_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.toml");
        std::fs::write(&p, "mine").unwrap();
        let err = create_new(&p, b"template", 0o600).unwrap_err();
        assert!(matches!(err, CreateNewError::Exists { .. }), "{err}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "mine");
    }

    #[test]
    fn never_writes_through_a_planted_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        let p = dir.path().join("config.toml");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        let err = create_new(&p, b"template", 0o600).unwrap_err();
        assert!(matches!(err, CreateNewError::Exists { .. }), "{err}");
        assert!(!target.exists());
    }
}
