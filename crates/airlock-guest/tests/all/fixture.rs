//! Starting a guest server for a test and running commands in it.

use std::io::{Cursor, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use airlock_guest::{GuestOptions, SandboxUser};
use airlock_linux::sys::process::Confinement;
use airlock_protocol::{
    control_socketpair, open_stream, ClientError, ExecClient, ExecRequest, ExecUser, ExitStatus,
    Key,
};

const ENV_KEY: &str = "AIRLOCK_TEST_GUEST_KEY";
const ENV_ROOT: &str = "AIRLOCK_TEST_GUEST_ROOT_ALLOWED";
const ENV_SANDBOX_ID: &str = "AIRLOCK_TEST_GUEST_SANDBOX_ID";

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The re-executed test binary lands here and becomes the guest, serving fd 0.
#[test]
#[ignore = "entry point of the guest child process, run by the fixture"]
fn guest_server_entry() {
    let Ok(key) = std::env::var(ENV_KEY) else {
        return;
    };
    let control = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .expect("dup control socket");
    let (uid, gid, home) = if let Ok(id) = std::env::var(ENV_SANDBOX_ID) {
        let id: u32 = id.parse().expect("sandbox id");
        (id, id, "/".to_string())
    } else if is_root() {
        (65534, 65534, "/".to_string())
    } else {
        let uid = rustix::process::getuid().as_raw();
        (
            uid,
            rustix::process::getgid().as_raw(),
            std::env::temp_dir().display().to_string(),
        )
    };
    let opts = GuestOptions {
        key: Key::from_hex(&key).expect("key"),
        env_base: vec![
            ("AIRLOCK_BASE".into(), "base".into()),
            ("PATH".into(), "/usr/bin:/bin".into()),
        ],
        sandbox_user: SandboxUser {
            name: "sandbox".into(),
            uid,
            gid,
            home,
        },
        root_allowed: std::env::var_os(ENV_ROOT).is_some(),
        // Dropping the bounding set needs CAP_SETPCAP: only as root.
        confinement: Confinement {
            drop_capabilities: is_root(),
            no_new_privs: true,
            withhold_setfcap: false,
            oom_score_adj: None,
            seccomp: None,
            mount_ns: None,
        },
        root_confinement: Confinement {
            drop_capabilities: is_root(),
            no_new_privs: true,
            withhold_setfcap: false,
            oom_score_adj: None,
            seccomp: None,
            mount_ns: None,
        },
        relays: Vec::new(),
    };
    std::process::exit(airlock_guest::run(control, opts));
}

/// A running guest server; killed on drop.
pub struct Guest {
    pub child: Child,
    pub control: Option<OwnedFd>,
    pub key: Key,
}

impl Guest {
    pub fn start() -> Self {
        Self::start_with(false)
    }

    pub fn start_with(root_allowed: bool) -> Self {
        Self::spawn(root_allowed, None)
    }

    /// A guest whose sandbox user has the same id as the guest itself (as PID 1 of an
    /// unprivileged single-id map: a non-zero uid that still holds capabilities).
    pub fn start_with_sandbox_id(id: u32) -> Self {
        Self::spawn(false, Some(id))
    }

    fn spawn(root_allowed: bool, sandbox_id: Option<u32>) -> Self {
        let key = Key::generate().unwrap();
        let (host, guest) = control_socketpair().unwrap();
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--ignored",
                "--exact",
                "fixture::guest_server_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV_KEY, key.to_hex())
            .env("AIRLOCK_TEST_GUEST_PRIVATE", "guest-only")
            .stdin(Stdio::from(guest))
            .stdout(Stdio::null());
        if root_allowed {
            command.env(ENV_ROOT, "1");
        }
        if let Some(id) = sandbox_id {
            command.env(ENV_SANDBOX_ID, id.to_string());
        }
        let child = command.spawn().unwrap();
        Guest {
            child,
            control: Some(host),
            key,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stream(&self) -> std::os::unix::net::UnixStream {
        open_stream(self.control.as_ref().unwrap().as_fd()).unwrap()
    }

    pub fn client(&self) -> Result<ExecClient, ClientError> {
        ExecClient::connect(self.stream(), &self.key)
    }

    /// Runs `request` with `stdin`, collecting output.
    pub fn run_with(
        &self,
        request: &ExecRequest,
        stdin: Option<&[u8]>,
    ) -> Result<Outcome, ClientError> {
        let client = self.client()?;
        let stdin = stdin.map(|data| Box::new(Cursor::new(data.to_vec())) as Box<dyn Read + Send>);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = client.run(request, stdin, &mut out, &mut err)?;
        Ok(Outcome {
            status,
            stdout: String::from_utf8_lossy(&out).into(),
            stderr: String::from_utf8_lossy(&err).into(),
        })
    }

    pub fn sh(&self, script: &str) -> Outcome {
        self.run_with(&request(&["sh", "-c", script]), None)
            .unwrap()
    }

    /// Waits for the guest process to exit, up to `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

pub fn request(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: Default::default(),
        cwd: None,
        user: ExecUser::Sandbox,
        tty: None,
    }
}

/// A writer that calls `hook` once when `needle` first appears in what was written.
pub struct Trigger<F: FnMut()> {
    pub seen: Vec<u8>,
    pub needle: &'static [u8],
    pub hook: Option<F>,
}

impl<F: FnMut()> Write for Trigger<F> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.seen.extend_from_slice(buf);
        if self
            .seen
            .windows(self.needle.len())
            .any(|w| w == self.needle)
        {
            if let Some(mut hook) = self.hook.take() {
                hook();
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
