//! A temporary HOME/XDG world per test.

use std::path::{Path, PathBuf};

use airlock_config::{
    load, ConfigErrors, Diagnostic, Effective, LoadRequest, Overrides, Project, ProjectKind, Roots,
};

pub struct World {
    _dir: tempfile::TempDir,
    pub base: PathBuf,
    pub roots: Roots,
}

impl World {
    pub fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let home = base.join("home/user");
        std::fs::create_dir_all(&home).unwrap();
        let roots =
            Roots::from_env(|k| (k == "HOME").then(|| home.clone().into_os_string())).unwrap();
        World {
            _dir: dir,
            base,
            roots,
        }
    }

    pub fn home(&self) -> &Path {
        &self.roots.home
    }

    /// Creates `path` (relative to the world's base) as a directory and returns it.
    pub fn dir(&self, rel: &str) -> PathBuf {
        let p = self.base.join(rel);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    pub fn write_user(&self, text: &str) -> PathBuf {
        let path = self.roots.user_config_path();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A project at `<home>/src/<name>` with an optional config file.
    pub fn project(&self, name: &str, config: Option<&str>) -> Project {
        let root = self.home().join("src").join(name);
        std::fs::create_dir_all(root.join(".airlock")).unwrap();
        let project = Project::at(root, ProjectKind::Airlock);
        if let Some(text) = config {
            std::fs::write(&project.config_path, text).unwrap();
        }
        project
    }

    pub fn load_with(
        &self,
        project: Option<&Project>,
        overrides: Overrides,
        is_trusted: &dyn Fn(&Path, &str) -> bool,
    ) -> Result<Effective, ConfigErrors> {
        load(&LoadRequest {
            roots: &self.roots,
            project,
            overrides,
            is_trusted,
            image_exists: Some(&|name: &str| name.starts_with("imported-")),
        })
    }

    /// Loads with the project untrusted.
    pub fn load(&self, project: Option<&Project>) -> Result<Effective, ConfigErrors> {
        self.load_with(project, Overrides::default(), &|_, _| false)
    }

    pub fn ok(&self, project: Option<&Project>) -> Effective {
        match self.load(project) {
            Ok(e) => e,
            Err(e) => panic!("expected a valid configuration, got:\n{e}"),
        }
    }

    pub fn errors(&self, project: Option<&Project>) -> Vec<Diagnostic> {
        match self.load(project) {
            Ok(_) => panic!("expected configuration errors"),
            Err(e) => e.0,
        }
    }

    /// Loads a user config and returns its errors.
    pub fn user_errors(&self, text: &str) -> Vec<Diagnostic> {
        self.write_user(text);
        self.errors(None)
    }
}

/// The diagnostic for `key`, or a panic listing what was reported.
pub fn find<'d>(diags: &'d [Diagnostic], key: &str) -> &'d Diagnostic {
    diags.iter().find(|d| d.key == key).unwrap_or_else(|| {
        let all: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
        panic!("no diagnostic for {key:?}; got:\n{}", all.join("\n"))
    })
}
