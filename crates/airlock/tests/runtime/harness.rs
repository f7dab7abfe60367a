//! The runtime-test harness: a [`TestEnv`] world with a project, run as a chosen host user.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub use crate::common::TEST_USER;
use crate::common::{chown_tree, Run, TestEnv, AIRLOCK};
/// Explicit opt-out of the unprivileged runs.
pub const OPT_OUT: &str = "AIRLOCK_TEST_NO_UNPRIVILEGED";

/// Who runs airlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum As {
    /// Whoever runs the test suite (root in CI).
    Invoker,
    /// `airlock-test`, switched to with `setpriv` (needs the suite to run as root).
    Unprivileged { uid: u32, gid: u32 },
}

/// One test world: HOME/XDG dirs, a project directory (`<home>/proj`, holding `.airlock/`),
/// and the identity airlock runs as.
pub struct Rt {
    pub env: TestEnv,
    pub project: PathBuf,
    pub who: As,
}

fn id_of(flag: &str) -> Option<u32> {
    let out = Command::new("id").args([flag, TEST_USER]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The test user must be able to execute the binary: every ancestor directory searchable and
/// the file itself readable and executable by others (scripts/test arranges this).
fn assert_reachable_by_others(binary: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode())
            .unwrap_or(0)
    };
    assert!(
        mode(binary) & 0o005 == 0o005,
        "{} is not readable and executable by {TEST_USER}: run scripts/test as root",
        binary.display()
    );
    for dir in binary.ancestors().skip(1) {
        assert!(
            mode(dir) & 0o001 != 0,
            "{} is not searchable by {TEST_USER}: run scripts/test as root",
            dir.display()
        );
    }
}

pub fn current_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

impl Rt {
    pub fn invoker() -> Rt {
        Self::build(As::Invoker)
    }

    /// The unprivileged world; `None` only when explicitly opted out (or when the suite already
    /// runs unprivileged, so the invoker runs cover it).
    pub fn unprivileged() -> Option<Rt> {
        if std::env::var_os(OPT_OUT).is_some() {
            airlock_testkit::skip(format_args!("{OPT_OUT} is set: no run as {TEST_USER}"));
            return None;
        }
        if current_uid() != 0 {
            // The unprivileged pass (nextest profile `unprivileged`) filters these variants
            // out: there the invoker runs are the unprivileged runs.
            airlock_testkit::skip(format_args!(
                "switching to {TEST_USER} needs root; the suite runs as uid {} (its invoker \
                 runs are the unprivileged runs)",
                current_uid()
            ));
            return None;
        }
        let (Some(uid), Some(gid)) = (id_of("-u"), id_of("-g")) else {
            panic!(
                "the unprivileged test user {TEST_USER} does not exist: run scripts/test as root \
                 (or scripts/setup-test-user), or set {OPT_OUT}=1 to skip these runs explicitly"
            );
        };
        assert_reachable_by_others(Path::new(AIRLOCK));
        Some(Self::build(As::Unprivileged { uid, gid }))
    }

    fn build(who: As) -> Rt {
        let env = TestEnv::new();
        let project = env.dir("proj");
        std::fs::create_dir_all(project.join(".airlock")).expect("create .airlock");
        let rt = Rt { env, project, who };
        // The whole world belongs to the test user, as a real user's home would.
        rt.hand_over(rt.env.root());
        rt
    }

    /// Gives `path` and everything below it to the user airlock runs as (nothing to do for the
    /// invoker): for files a test writes after [`Rt::build`] handed the world over.
    pub fn hand_over(&self, path: &Path) {
        if let As::Unprivileged { uid, gid } = self.who {
            chown_tree(path, uid, gid);
        }
    }

    /// The host uid airlock runs as.
    pub fn uid(&self) -> u32 {
        match self.who {
            As::Invoker => current_uid(),
            As::Unprivileged { uid, .. } => uid,
        }
    }

    pub fn is_root(&self) -> bool {
        self.uid() == 0
    }

    /// A command for `airlock ARGS…` in `cwd` as the chosen user, with the world's env only.
    pub fn command(&self, cwd: &Path, args: &[&str]) -> Command {
        let mut cmd = match self.who {
            As::Invoker => Command::new(AIRLOCK),
            As::Unprivileged { uid, gid } => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={gid}"),
                    "--init-groups",
                    "--",
                    AIRLOCK,
                ]);
                c
            }
        };
        cmd.args(args)
            .current_dir(cwd)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", &self.env.home)
            .env("XDG_CONFIG_HOME", self.env.config_home())
            .env("XDG_STATE_HOME", self.env.state_home())
            .env("XDG_DATA_HOME", self.env.data_home())
            .env("XDG_CACHE_HOME", self.env.cache_home())
            .env("XDG_RUNTIME_DIR", &self.env.runtime_dir);
        cmd
    }

    /// `airlock run [opts] -- sh -c SCRIPT` in the project, no stdin.
    pub fn sh(&self, opts: &[&str], script: &str) -> Run {
        let mut args = vec!["run"];
        args.extend_from_slice(opts);
        args.extend_from_slice(&["--", "sh", "-c", script]);
        self.run_args(&args, None)
    }

    /// `airlock ARGS…` in the project with optional stdin bytes.
    pub fn run_args(&self, args: &[&str], stdin: Option<&[u8]>) -> Run {
        let mut cmd = self.command(&self.project, args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = cmd.spawn().expect("spawn airlock");
        if let Some(bytes) = stdin {
            use std::io::Write;
            let mut pipe = child.stdin.take().expect("stdin pipe");
            pipe.write_all(bytes).expect("write stdin");
        }
        let out = child.wait_with_output().expect("wait for airlock");
        Run::from(out)
    }

    /// Spawns `airlock run -- sh -c SCRIPT` in the project and returns once the script printed
    /// its first line, which must be `up` (stdout is consumed up to there, stderr discarded).
    pub fn spawn_until_up(&self, script: &str) -> Child {
        use std::io::BufRead;
        let mut child = self
            .command(&self.project, &["run", "--", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn airlock");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout pipe"))
            .read_line(&mut line)
            .expect("read the first line");
        assert_eq!(line, "up\n");
        child
    }

    /// Runs `airlock ARGS…` in the project on a terminal of its own: under util-linux
    /// `script(1)`, with the world's env only and no stdin. The arguments are single-quoted
    /// for script's shell, so they must not contain `'`.
    pub fn on_a_terminal(&self, args: &[&str]) -> std::process::Output {
        let airlock = self.command(&self.project, args);
        let mut line: Vec<String> = vec![airlock.get_program().to_string_lossy().into_owned()];
        line.extend(airlock.get_args().map(|a| {
            let a = a.to_string_lossy();
            assert!(!a.contains('\''), "cannot quote {a:?} for script(1)");
            format!("'{a}'")
        }));
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &line.join(" "), "/dev/null"])
            .current_dir(&self.project)
            .env_clear()
            .stdin(Stdio::null());
        for (k, v) in airlock.get_envs() {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        cmd.output().expect("run script(1)")
    }

    /// Whether `--root` is available to this invoker (root invokers always; unprivileged ones
    /// with subordinate ids and newuidmap).
    pub fn root_available(&self) -> bool {
        if self.is_root() {
            return true;
        }
        let helpers = ["/usr/bin/newuidmap", "/usr/bin/newgidmap"]
            .iter()
            .all(|p| Path::new(p).exists());
        let name = match self.who {
            As::Unprivileged { .. } => TEST_USER.to_owned(),
            As::Invoker => Command::new("id")
                .arg("-un")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default(),
        };
        let listed = |f: &str| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .any(|l| {
                    l.starts_with(&format!("{name}:")) || l.starts_with(&format!("{}:", self.uid()))
                })
        };
        helpers && listed("/etc/subuid") && listed("/etc/subgid")
    }

    /// Options that run a script as in-sandbox root when available, else as the sandbox user.
    pub fn most_privileged(&self) -> &'static [&'static str] {
        if self.root_available() {
            &["--root"]
        } else {
            &[]
        }
    }

    /// The per-user runtime directory holding sandbox directories.
    pub fn sandboxes_dir(&self) -> PathBuf {
        self.env.runtime_dir.join("airlock/sandboxes")
    }
}

/// Asserts success and returns stdout.
#[track_caller]
pub fn ok(run: &Run) -> &str {
    run.assert_code(0);
    &run.stdout
}

/// Defines a test module `$name` with `as_invoker` and `as_unprivileged_user` tests running
/// `$body` with an [`Rt`] bound to `$rt`.
macro_rules! both {
    ($(#[$meta:meta])* fn $name:ident($rt:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[allow(clippy::needless_pass_by_value)]
            fn body($rt: $crate::runtime::harness::Rt) $body
            #[test]
            fn as_invoker() {
                body($crate::runtime::harness::Rt::invoker())
            }
            #[test]
            fn as_unprivileged_user() {
                if let Some(rt) = $crate::runtime::harness::Rt::unprivileged() {
                    body(rt)
                }
            }
        }
    };
}
