//! Project roots airlock has used (PRODUCT C7: a workspace never silently widens).
//!
//! Discovery (C4) finds a project from its markers (`.airlock/`, else `.git`). Those markers
//! live inside the workspace, where a sandbox or a repository can delete them: after
//! `rm -rf .airlock .git` in `~/src/proj`, discovery from `~/src/proj` would find an enclosing
//! repository such as `~/src` and map *it* read-write. So every root a sandbox was built for is
//! remembered here (one state record, `project-roots.json`, written with the store's atomic
//! compare-and-swap), and [`KnownRoots::widened_from`] tells the caller when the project found
//! for a directory is an ancestor of a remembered root that contains that directory: the
//! caller refuses instead of mapping the ancestor.
//!
//! Reading creates nothing (`plan` checks too); only [`KnownRoots::remember`] and
//! [`KnownRoots::forget`] write, and only when the record changes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::state::{StateError, StateStore};

/// The record name of the remembered roots inside the state store.
pub const KNOWN_ROOTS_RECORD: &str = "project-roots.json";

/// Failures of the remembered-roots store.
#[derive(Debug, thiserror::Error)]
pub enum KnownRootsError {
    /// A root that is not an absolute path (a caller bug).
    #[error("project root {path} is not an absolute path")]
    NotAbsolute {
        /// The path.
        path: PathBuf,
    },
    /// A root that cannot be a JSON key.
    #[error("project root {path} is not valid UTF-8, so it cannot be remembered")]
    NonUtf8Path {
        /// The path.
        path: PathBuf,
    },
    /// The state store failed.
    #[error(transparent)]
    State(#[from] StateError),
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RootMap {
    roots: BTreeMap<String, RootEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RootEntry {
    first_used_unix: u64,
}

/// Remembered project roots, stored in a [`StateStore`].
#[derive(Debug, Clone)]
pub struct KnownRoots {
    store: StateStore,
}

impl KnownRoots {
    /// The store in the state root `state_root` (absolute). Touches nothing.
    pub fn open(state_root: impl Into<PathBuf>) -> Result<Self, KnownRootsError> {
        Ok(KnownRoots {
            store: StateStore::open(state_root)?,
        })
    }

    /// Remembers `root` (canonical, as discovery returns it). Writes only when it is new;
    /// returns whether it was.
    pub fn remember(&self, root: &Path) -> Result<bool, KnownRootsError> {
        let key = key(root)?;
        let entry = RootEntry {
            first_used_unix: now_unix(),
        };
        let written = self
            .store
            .update_if(KNOWN_ROOTS_RECORD, |map: Option<RootMap>| {
                let mut map = map.unwrap_or_default();
                if map.roots.contains_key(&key) {
                    return None;
                }
                map.roots.insert(key.clone(), entry.clone());
                Some(map)
            })?;
        Ok(written.is_some())
    }

    /// Forgets `root`; returns whether it was remembered. Writes nothing when it was not.
    pub fn forget(&self, root: &Path) -> Result<bool, KnownRootsError> {
        let key = key(root)?;
        let written = self
            .store
            .update_if(KNOWN_ROOTS_RECORD, |map: Option<RootMap>| {
                let mut map = map?;
                map.roots.remove(&key).is_some().then_some(map)
            })?;
        Ok(written.is_some())
    }

    /// Every remembered root, sorted. Creates nothing.
    pub fn list(&self) -> Result<Vec<PathBuf>, KnownRootsError> {
        let Some(record) = self.store.read::<RootMap>(KNOWN_ROOTS_RECORD)? else {
            return Ok(Vec::new());
        };
        Ok(record.data.roots.into_keys().map(PathBuf::from).collect())
    }

    /// The remembered root that `discovered` (the project found for `dir`) would widen: one
    /// strictly inside `discovered` that contains `dir` (the deepest, if several). `None` when
    /// discovery is consistent with every remembered root. Both paths are canonical.
    pub fn widened_from(
        &self,
        discovered: &Path,
        dir: &Path,
    ) -> Result<Option<PathBuf>, KnownRootsError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|r| r != discovered && r.starts_with(discovered) && dir.starts_with(r))
            .max_by_key(|r| r.components().count()))
    }
}

fn key(root: &Path) -> Result<String, KnownRootsError> {
    if !root.is_absolute() {
        return Err(KnownRootsError::NotAbsolute {
            path: root.to_owned(),
        });
    }
    root.to_str()
        .map(str::to_owned)
        .ok_or_else(|| KnownRootsError::NonUtf8Path {
            path: root.to_owned(),
        })
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, KnownRoots) {
        let t = tempfile::tempdir().unwrap();
        let k = KnownRoots::open(t.path().join("state")).unwrap();
        (t, k)
    }

    #[test]
    fn a_parent_project_found_from_inside_a_remembered_root_is_reported() {
        let (_t, k) = store();
        assert!(k.remember(Path::new("/src/proj")).unwrap());
        assert!(!k.remember(Path::new("/src/proj")).unwrap(), "written once");
        let hit = k
            .widened_from(Path::new("/src"), Path::new("/src/proj/lib"))
            .unwrap();
        assert_eq!(hit.as_deref(), Some(Path::new("/src/proj")));
    }

    #[test]
    fn consistent_discovery_is_not_reported() {
        let (_t, k) = store();
        k.remember(Path::new("/src/proj")).unwrap();
        // The remembered root itself, a nested project, and a sibling directory are fine.
        for (found, dir) in [
            ("/src/proj", "/src/proj/lib"),
            ("/src/proj/sub", "/src/proj/sub"),
            ("/src", "/src/other"),
            ("/src", "/src"),
        ] {
            let hit = k.widened_from(Path::new(found), Path::new(dir)).unwrap();
            assert_eq!(hit, None, "{found} from {dir}");
        }
    }

    #[test]
    fn the_deepest_remembered_root_is_named_and_forget_removes_it() {
        let (_t, k) = store();
        k.remember(Path::new("/a/b")).unwrap();
        k.remember(Path::new("/a/b/c")).unwrap();
        let hit = k
            .widened_from(Path::new("/a"), Path::new("/a/b/c/d"))
            .unwrap();
        assert_eq!(hit.as_deref(), Some(Path::new("/a/b/c")));
        assert!(k.forget(Path::new("/a/b/c")).unwrap());
        assert!(!k.forget(Path::new("/a/b/c")).unwrap());
        let hit = k
            .widened_from(Path::new("/a"), Path::new("/a/b/c/d"))
            .unwrap();
        assert_eq!(hit.as_deref(), Some(Path::new("/a/b")));
    }

    #[test]
    fn reading_an_empty_store_creates_nothing() {
        let t = tempfile::tempdir().unwrap();
        let k = KnownRoots::open(t.path().join("state")).unwrap();
        assert_eq!(
            k.widened_from(Path::new("/"), Path::new("/x")).unwrap(),
            None
        );
        assert!(!t.path().join("state").exists());
    }
}
