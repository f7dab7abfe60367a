//! Test harness shared by every integration test of the `airlock` binary.
//!
//! [`TestEnv`] gives each test its own world: a temporary directory holding `home/` (HOME, with
//! the XDG config/state/data/cache directories beneath it, not created up front) and `run/`
//! (XDG_RUNTIME_DIR, 0700). The binary runs with `env_clear()` and only PATH, HOME and XDG_*
//! set, so nothing from the developer's environment leaks into a test and nothing a test does
//! reaches the developer's real config or state.

#![allow(dead_code)] // Each test module uses a different part of the harness.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The binary under test.
pub const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock");

pub struct TestEnv {
    root: tempfile::TempDir,
    pub home: PathBuf,
    pub runtime_dir: PathBuf,
    /// Extra variables for every run (e.g. `NO_COLOR`, `EDITOR`).
    extra_env: Vec<(String, String)>,
}

/// What one run of the binary produced.
#[derive(Debug)]
pub struct Run {
    /// Exit status; `None` if the process died of a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl From<std::process::Output> for Run {
    fn from(out: std::process::Output) -> Run {
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Parses stdout as exactly one JSON document (fails the test otherwise).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON document ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    /// Asserts the exit status, printing both streams when it differs.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "unexpected exit status\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
}

/// A test that fails after `up` must not leave its sandbox and keeper running: dropping the
/// world brings down every sandbox still recorded in it, as the user whose record it is (root,
/// or the T4 test user), before the temporary directory goes. A world that never ran `up`
/// has no record, and nothing is run.
impl Drop for TestEnv {
    fn drop(&mut self) {
        self.stop_sandboxes();
        self.remove_images();
    }
}

impl TestEnv {
    fn stop_sandboxes(&self) {
        let records = self.state_home().join("airlock/lifecycle/sandboxes");
        let Ok(entries) = fs::read_dir(&records) else {
            return;
        };
        let test_uid = test_user().map(|(uid, _)| uid);
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(meta) = entry.metadata() else { continue };
            if name.starts_with('.') || !meta.is_file() {
                continue;
            }
            let args = ["down", "--name", name.as_str()];
            if Some(meta.uid()) == test_uid {
                let _ = self.run_as_test_user_in(&self.home, &args);
            } else {
                let _ = self.run_in(&self.home, &args);
            }
        }
    }

    /// An image imported by an unprivileged user with subordinate ids is owned by those ids
    /// (its root is the sandbox's root): that user can only remove it through airlock, as
    /// `image rm` does. Without this the world's temporary directory outlives the test.
    fn remove_images(&self) {
        let Ok(images) = fs::read_dir(self.data_home().join("airlock/images")) else {
            return;
        };
        if nix::unistd::getuid().is_root() {
            return; // root removes them with the temporary directory
        }
        for entry in images.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(meta) = entry.metadata() else { continue };
            if name.starts_with('.') || !meta.is_dir() {
                continue;
            }
            let _ = self.run_in(&self.home, &["image", "rm", name.as_str()]);
        }
    }
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

/// The backend the runtime, lifecycle and network suites run against: `AIRLOCK_TEST_BACKEND`
/// (`linux`, the default, or `vm`). The suites are written once; every world they make selects
/// this backend in its user config ([`TestEnv::new`], [`TestEnv::write_user_config`]).
/// `scripts/test` runs them a second time with `vm` where the host's KVM boots a stock kernel.
pub fn suite_backend() -> &'static str {
    match std::env::var("AIRLOCK_TEST_BACKEND").as_deref() {
        Ok("vm") => "vm",
        Ok("linux") | Err(_) => "linux",
        Ok(other) => panic!("AIRLOCK_TEST_BACKEND={other:?}: use linux or vm"),
    }
}

/// `content` with the suite's backend selected, when it is not `linux` and the content does
/// not choose one itself.
fn with_suite_backend(content: &str) -> String {
    if suite_backend() == "linux" || content.contains("backend") {
        return content.to_owned();
    }
    // The invoker's fetched kernel (the test worlds' own caches hold none).
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let kernel = airlock_vm::kernel::Kernel::find(&home.join(".cache/airlock/vm-kernel"))
        .map(|k| format!("kernel = {:?}\n", k.root.display().to_string()))
        .unwrap_or_default();
    let vm = if content.contains("[vm]") {
        String::new()
    } else {
        format!("\n[vm]\naccel = \"kvm\"\n{kernel}")
    };
    format!("backend = \"vm\"\n{content}{vm}")
}

impl TestEnv {
    pub fn new() -> Self {
        let root = tempfile::Builder::new()
            .prefix("airlock-test-")
            .tempdir()
            .expect("create temp dir");
        // Canonical, so paths printed by airlock compare equal to ours.
        let base = fs::canonicalize(root.path()).expect("canonicalize temp dir");
        let home = base.join("home");
        let runtime_dir = base.join("run");
        fs::create_dir(&home).expect("create HOME");
        fs::create_dir(&runtime_dir).expect("create XDG_RUNTIME_DIR");
        fs::set_permissions(&runtime_dir, fs::Permissions::from_mode(0o700)).expect("chmod");
        let env = Self {
            root,
            home,
            runtime_dir,
            extra_env: Vec::new(),
        };
        if suite_backend() != "linux" {
            env.write_user_config("");
        }
        env
    }

    /// The temporary directory holding this world.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    pub fn config_home(&self) -> PathBuf {
        self.home.join(".config")
    }
    pub fn state_home(&self) -> PathBuf {
        self.home.join(".local/state")
    }
    pub fn data_home(&self) -> PathBuf {
        self.home.join(".local/share")
    }
    pub fn cache_home(&self) -> PathBuf {
        self.home.join(".cache")
    }

    /// airlock's user config file in this world.
    pub fn user_config(&self) -> PathBuf {
        self.config_home().join("airlock/config.toml")
    }

    /// Adds a variable to every later run.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.extra_env.push((key.to_owned(), value.to_owned()));
    }

    /// A `Command` for the binary with the cleared, test-local environment.
    pub fn command(&self, cwd: &Path, args: &[&str]) -> Command {
        let mut cmd = self.command_for(AIRLOCK.as_ref(), cwd);
        cmd.args(args);
        cmd
    }

    /// A `Command` for any program with this world's cleared environment (e.g. `script`, to
    /// give airlock a terminal).
    pub fn command_for(&self, program: &OsStr, cwd: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(cwd)
            .env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
            )
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.config_home())
            .env("XDG_STATE_HOME", self.state_home())
            .env("XDG_DATA_HOME", self.data_home())
            .env("XDG_CACHE_HOME", self.cache_home())
            .env("XDG_RUNTIME_DIR", &self.runtime_dir);
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs the binary in `cwd` with no stdin and captures its output.
    pub fn run_in(&self, cwd: &Path, args: &[&str]) -> Run {
        let out = self
            .command(cwd, args)
            .stdin(Stdio::null())
            .output()
            .expect("spawn airlock");
        Run::from(out)
    }

    /// Runs the binary as the unprivileged test user (T4) in `cwd`, after handing this whole
    /// world to that user. `None` when not running as root or the user does not exist (create
    /// it with `scripts/setup-test-user`; `scripts/test` does).
    pub fn run_as_test_user_in(&self, cwd: &Path, args: &[&str]) -> Option<Run> {
        let (uid, gid) = test_user()?;
        chown_tree(self.root(), uid, gid);
        let mut runuser = Command::new("runuser");
        runuser.args(["-u", TEST_USER, "--", "env", "-i"]);
        let inner = self.command(cwd, args);
        for (k, v) in inner.get_envs() {
            if let Some(v) = v {
                let mut kv = k.to_os_string();
                kv.push("=");
                kv.push(v);
                runuser.arg(kv);
            }
        }
        runuser.arg(AIRLOCK).args(args).current_dir(cwd).env_clear();
        runuser.env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        );
        let out = runuser
            .stdin(Stdio::null())
            .output()
            .expect("spawn runuser");
        Some(Run::from(out))
    }

    /// Runs the binary in HOME.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_in(&self.home, args)
    }

    /// Creates a directory under HOME (with parents) and returns its path.
    pub fn dir(&self, rel: &str) -> PathBuf {
        let p = self.home.join(rel);
        fs::create_dir_all(&p).expect("create dir");
        p
    }

    /// Creates a git work tree under HOME and returns its root.
    pub fn git_project(&self, rel: &str) -> PathBuf {
        let p = self.dir(rel);
        let st = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&p)
            .env("HOME", &self.home)
            .status()
            .expect("run git init");
        assert!(st.success(), "git init failed");
        p
    }

    /// Writes a file (creating parents) and returns its path.
    pub fn write(&self, path: &Path, content: &str) -> PathBuf {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create parent");
        }
        fs::write(path, content).expect("write file");
        path.to_owned()
    }

    /// Writes the user config file.
    pub fn write_user_config(&self, content: &str) -> PathBuf {
        self.write(&self.user_config(), &with_suite_backend(content))
    }

    /// Writes `<project>/.airlock/config.toml`.
    pub fn write_project_config(&self, project: &Path, content: &str) -> PathBuf {
        self.write(&project.join(".airlock/config.toml"), content)
    }

    /// Every entry of this world (type, mode, size, content), for "changes nothing" assertions.
    pub fn snapshot(&self) -> Snapshot {
        snapshot(self.root())
    }
}

/// Polls `f` every 20 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: std::time::Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Name of the unprivileged user T4 tests run as (created by `scripts/setup-test-user`).
pub const TEST_USER: &str = "airlock-test";

/// uid and gid of [`TEST_USER`], when this process is root and the user exists.
pub fn test_user() -> Option<(u32, u32)> {
    if fs::metadata("/proc/self").ok()?.uid() != 0 {
        return None;
    }
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() > 3 && f[0] == TEST_USER)
            .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

/// Called by a T4 test that cannot run here: fails under CI (where `scripts/test` creates the
/// user as root, so a missing user is a broken setup), otherwise says why it was skipped.
pub fn skip_without_test_user() {
    airlock_testkit::skip(format_args!(
        "T4 test needs root and the {TEST_USER} user (run scripts/test as root; \
         scripts/setup-test-user creates the user)"
    ));
}

/// Gives every entry under `root` (and `root`) to `uid:gid`, without following links.
pub fn chown_tree(root: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(root, Some(uid), Some(gid)).expect("chown");
    if fs::symlink_metadata(root).expect("lstat").is_dir() {
        for entry in fs::read_dir(root).expect("read dir") {
            chown_tree(&entry.expect("dir entry").path(), uid, gid);
        }
    }
}

/// A recursive listing: relative path → description (kind, mode, content or link target).
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot(pub BTreeMap<PathBuf, String>);

impl Snapshot {
    /// Paths that differ between two snapshots, for a readable assertion message.
    pub fn diff(&self, after: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        for (p, v) in &self.0 {
            match after.0.get(p) {
                None => out.push(format!("removed {}", p.display())),
                Some(w) if w != v => out.push(format!("changed {}", p.display())),
                Some(_) => {}
            }
        }
        for p in after.0.keys().filter(|p| !self.0.contains_key(*p)) {
            out.push(format!("created {}", p.display()));
        }
        out
    }
}

pub fn snapshot(root: &Path) -> Snapshot {
    let mut map = BTreeMap::new();
    walk(root, root, &mut map);
    Snapshot(map)
}

fn walk(root: &Path, dir: &Path, map: &mut BTreeMap<PathBuf, String>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let meta = fs::symlink_metadata(&path).expect("lstat");
        let rel = path.strip_prefix(root).expect("under root").to_owned();
        let mode = meta.mode() & 0o7777;
        let desc = if meta.file_type().is_symlink() {
            format!(
                "link {mode:o} -> {}",
                fs::read_link(&path).expect("readlink").display()
            )
        } else if meta.is_dir() {
            walk(root, &path, map);
            format!("dir {mode:o}")
        } else {
            let mut content = Vec::new();
            fs::File::open(&path)
                .and_then(|mut f| f.read_to_end(&mut content))
                .expect("read file");
            format!(
                "file {mode:o} {} {:?}",
                meta.mtime(),
                String::from_utf8_lossy(&content)
            )
        };
        map.insert(rel, desc);
    }
}

/// Whether `needle` occurs in `haystack` (for readable assertions on OsStr paths).
pub fn mentions(haystack: &str, needle: impl AsRef<OsStr>) -> bool {
    haystack.contains(needle.as_ref().to_string_lossy().as_ref())
}
