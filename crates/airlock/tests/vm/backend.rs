//! The `vm` backend behind the public commands (`backend = "vm"`, `--backend vm`), under TCG.
//! Most tests take an unprivileged invoker: as root they run airlock as the test user; in the
//! unprivileged pass they run it directly. One takes a root invoker, whose QEMU runs as an id
//! of the sandbox's own range (never host root) with id-mapped shares.
//! Each boot takes tens of seconds under emulation on a loaded host: keep them few.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_vm::kernel::Kernel;

use super::QEMU;
use crate::common::{test_user, wait_until, Run, TestEnv};

/// A project whose user config selects the vm backend under TCG with the invoker's kernel.
struct VmProject {
    env: TestEnv,
    dir: PathBuf,
    kernel: Kernel,
}

/// The unprivileged invoker's fetched kernel (`scripts/fetch-vm-kernel` ran as that user),
/// or a skip (a failure under CI).
fn invoker_kernel() -> Option<Kernel> {
    let home = match test_user() {
        // Root runs airlock as the test user, whose cache holds its kernel.
        Some(_) => PathBuf::from(format!("/home/{}", airlock_testkit::TEST_USER)),
        None if std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) => {
            crate::common::skip_without_test_user();
            return None;
        }
        None => PathBuf::from(std::env::var_os("HOME")?),
    };
    match Kernel::find(&home.join(".cache/airlock/vm-kernel")) {
        Ok(k) => Some(k),
        Err(e) => {
            airlock_testkit::skip(format_args!(
                "{e} (scripts/test runs scripts/fetch-vm-kernel)"
            ));
            None
        }
    }
}

impl VmProject {
    fn new(user_config: &str) -> Option<VmProject> {
        if !airlock_testkit::needs_tool(QEMU) {
            return None;
        }
        let kernel = invoker_kernel()?;
        let env = TestEnv::new();
        let dir = env.git_project("proj");
        env.write_user_config(&format!(
            "{user_config}\n[vm]\naccel = \"tcg\"\nkernel = \"{}\"\n",
            kernel.root.display()
        ));
        Some(VmProject { env, dir, kernel })
    }

    /// Runs airlock as the unprivileged invoker in the project.
    fn run(&self, args: &[&str]) -> Run {
        if test_user().is_some() {
            self.env
                .run_as_test_user_in(&self.dir, args)
                .expect("test user")
        } else {
            self.env.run_in(&self.dir, args)
        }
    }

    fn status(&self) -> serde_json::Value {
        self.run(&["status", "--json"]).json()
    }
}

fn alive(pid: u64) -> bool {
    // A zombie is gone (its parent has not reaped it yet).
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn host_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn vm_backend_up_exec_status_down_run_the_guest_kernel_and_down_leaves_nothing() {
    let Some(p) = VmProject::new("backend = \"vm\"") else {
        return;
    };
    p.run(&["up", "--no-attach", "--timeout", "10m"])
        .assert_code(0);
    let status = p.status();
    assert_eq!(status["health"], "ready", "{status}");
    assert_eq!(status["backend"], "vm", "{status}");
    let qemu = status["guest"]["pid"].as_u64().expect("guest pid");
    let keeper = status["keeper"]["pid"].as_u64().expect("keeper pid");
    // The "guest" the record proves is QEMU, an unprivileged process.
    let cmdline = std::fs::read(format!("/proc/{qemu}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("qemu-system"),
        "guest pid {qemu} is not QEMU"
    );
    let uid = std::fs::metadata(format!("/proc/{qemu}")).unwrap().uid();
    assert_ne!(uid, 0, "QEMU runs as host root");

    // The guest's own kernel, not the host's.
    let uname = p.run(&["exec", "--", "uname", "-r"]);
    uname.assert_code(0);
    assert_eq!(uname.stdout.trim(), p.kernel.release);
    assert_ne!(uname.stdout.trim(), host_release());
    // No /dev/kvm and no host devices inside: only the nodes the guest makes.
    let devs = p.run(&["exec", "--", "ls", "/dev"]);
    devs.assert_code(0);
    for absent in ["kvm", "sda", "vda", "mem", "kmsg", "nvme0"] {
        assert!(
            !devs.stdout.lines().any(|l| l.trim() == absent),
            "/dev/{absent} is visible in the guest:\n{}",
            devs.stdout
        );
    }
    // The workspace at its path; what the guest writes is the invoker's.
    p.run(&["exec", "--", "sh", "-c", "echo from-the-vm > made-in-vm"])
        .assert_code(0);
    let made = p.dir.join("made-in-vm");
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "from-the-vm\n");
    assert_eq!(std::fs::metadata(&made).unwrap().uid(), uid);

    // Egress leaves only through the host's proxy: a host no rule allows is the proxy's
    // denial (the guest has no network device of its own).
    let denied = p.run(super::EXEC_DENIED_REQUEST);
    assert_eq!(denied.stdout.trim(), "403", "{}", denied.stderr);

    p.run(&["down"]).assert_code(0);
    assert!(
        wait_until(Duration::from_secs(10), || !alive(qemu) && !alive(keeper)),
        "QEMU ({qemu}) or the keeper ({keeper}) outlived down"
    );
    assert_eq!(p.status()["health"], "absent");
    super::assert_nothing_left(&[
        p.env.runtime_dir.join("airlock/sandboxes"),
        p.env.state_home().join("airlock/sandboxes"),
    ]);
}

#[test]
fn vm_backend_killing_the_monitor_is_detected_as_stale_and_exec_refuses() {
    let Some(p) = VmProject::new("backend = \"vm\"") else {
        return;
    };
    p.run(&["up", "--no-attach", "--timeout", "10m"])
        .assert_code(0);
    let status = p.status();
    let qemu = status["guest"]["pid"].as_u64().expect("guest pid");
    let keeper = status["keeper"]["pid"].as_u64().expect("keeper pid");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &qemu.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(
        wait_until(Duration::from_secs(20), || p.status()["health"] == "stale"),
        "status after killing QEMU: {}",
        p.status()
    );
    // The keeper does not linger for a VM that is gone.
    assert!(
        wait_until(Duration::from_secs(10), || !alive(keeper)),
        "the keeper outlived its VM"
    );
    let exec = p.run(&["exec", "--", "true"]);
    exec.assert_code(1);
    assert!(exec.stderr.contains("stale"), "{}", exec.stderr);
    p.run(&["down"]).assert_code(0);
    assert_eq!(p.status()["health"], "absent");
}

#[test]
fn vm_backend_flag_runs_one_command_in_a_vm_and_leaves_no_monitor() {
    // The user config says nothing of the backend: the flag alone selects it.
    let Some(p) = VmProject::new("") else {
        return;
    };
    let run = p.run(&["--backend", "vm", "run", "--", "uname", "-r"]);
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), p.kernel.release, "{}", run.stderr);
    let monitors = std::process::Command::new("pgrep")
        .args([
            "-f",
            &format!("qemu-system.*{}", p.env.runtime_dir.display()),
        ])
        .output()
        .unwrap();
    assert!(
        monitors.stdout.is_empty(),
        "a QEMU of this run is still running: {}",
        String::from_utf8_lossy(&monitors.stdout)
    );
    assert!(!Path::new(&p.env.runtime_dir.join("airlock/vm-runs"))
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some()));
}

/// Every QEMU on the host whose real, effective, saved or filesystem uid is `uid`, each as its
/// pid and start time. Read it while the sandbox holds its id range: once the range is free
/// again another sandbox (a test running beside this one) may take it, and so the id.
fn monitors_of(uid: u32) -> Vec<(u64, u64)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if status_ids(&status, "Uid:").contains(&uid)
            && String::from_utf8_lossy(&cmdline).contains("qemu-system")
        {
            if let Some(started) = start_time(pid) {
                found.push((pid, started));
            }
        }
    }
    found
}

/// When process `pid` started (clock ticks since boot), `None` once it is gone or a zombie.
fn start_time(pid: u64) -> Option<u64> {
    alive(pid).then_some(())?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis start at field 3; starttime is field 22.
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Which of `procs` (from [`monitors_of`]) still run: the same pid with the same start time,
/// so a pid the kernel has handed to a new process does not count.
fn still_running(procs: &[(u64, u64)]) -> Vec<u64> {
    procs
        .iter()
        .filter(|&&(pid, started)| start_time(pid) == Some(started))
        .map(|&(pid, _)| pid)
        .collect()
}

/// The four ids of a `/proc/PID/status` line (`Uid:` or `Gid:`).
fn status_ids(status: &str, key: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|ids| {
            ids.split_whitespace()
                .filter_map(|i| i.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A root invoker's project selecting the vm backend under TCG with root's fetched kernel,
/// or `None` (a skip; a failure under CI).
fn root_project() -> Option<(TestEnv, PathBuf)> {
    if !airlock_testkit::needs_root("the root invoker's monitor")
        || !airlock_testkit::needs_tool(QEMU)
    {
        return None;
    }
    let kernel = super::needs_kernel()?;
    let env = TestEnv::new();
    let dir = env.git_project("proj");
    env.write_user_config(&format!(
        "backend = \"vm\"\n[vm]\naccel = \"tcg\"\nkernel = \"{}\"\n",
        kernel.root.display()
    ));
    Some((env, dir))
}

/// A root invoker: `up`, `exec`, `status` and `down` work with the vm backend, QEMU (every
/// thread) runs as one id Q of a range no host file belongs to, without groups, in a mount
/// namespace of its own; the guest's user is Q, the workspace is root's inside; what the
/// guest writes in the workspace is root's on the host; egress goes through the proxy;
/// `down` leaves no QEMU, no sandbox state and no mount behind.
#[test]
fn vm_backend_for_a_root_invoker_runs_qemu_as_an_unprivileged_id_and_the_workspace_stays_roots() {
    let Some((env, dir)) = root_project() else {
        return;
    };
    std::fs::write(dir.join("roots-file"), "root's\n").unwrap();
    std::fs::set_permissions(
        dir.join("roots-file"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let run = |args: &[&str]| env.run_in(&dir, args);
    run(&["up", "--no-attach", "--timeout", "10m"]).assert_code(0);
    let status = run(&["status", "--json"]).json();
    assert_eq!(status["health"], "ready", "{status}");
    assert_eq!(status["backend"], "vm", "{status}");
    let qemu = status["guest"]["pid"].as_u64().expect("guest pid");
    let keeper = status["keeper"]["pid"].as_u64().expect("keeper pid");
    let cmdline = std::fs::read(format!("/proc/{qemu}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).starts_with("qemu-system")
            || String::from_utf8_lossy(&cmdline).contains("/qemu-system"),
        "guest pid {qemu} is not QEMU"
    );
    let own = std::fs::read_to_string(format!("/proc/{qemu}/status")).unwrap();
    let uids = status_ids(&own, "Uid:");
    let q = uids[0];
    assert!(
        q >= airlock_linux::idmap::ROOT_INVOKER_BASE,
        "QEMU runs as {q}, not an id of a root invoker's range: {own}"
    );
    assert_eq!(uids, vec![q; 4], "{own}");
    assert_eq!(status_ids(&own, "Gid:"), vec![q; 4], "{own}");
    let groups = own.lines().find(|l| l.starts_with("Groups:")).unwrap();
    assert_eq!(groups.trim(), "Groups:", "{own}");
    // Every thread of QEMU, not only the main one.
    for task in std::fs::read_dir(format!("/proc/{qemu}/task"))
        .unwrap()
        .flatten()
    {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        assert_eq!(
            status_ids(&status, "Uid:"),
            vec![q; 4],
            "thread {:?}",
            task.path()
        );
    }
    // QEMU's mounts are its own: nothing of it is mounted in the host's namespace.
    assert_ne!(
        std::fs::read_link(format!("/proc/{qemu}/ns/mnt")).unwrap(),
        std::fs::read_link("/proc/self/ns/mnt").unwrap()
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!crate::common::mentions(&mounts, env.root()), "{mounts}");

    // The guest's user is Q and owns the invoker's files inside.
    let ids = run(&[
        "exec",
        "--",
        "sh",
        "-c",
        "id -u; stat -c %u roots-file; cat roots-file",
    ]);
    ids.assert_code(0);
    assert_eq!(ids.stdout, format!("{q}\n{q}\nroot's\n"), "{}", ids.stderr);
    // What it writes in the workspace is root's on the host.
    run(&[
        "exec",
        "--",
        "sh",
        "-c",
        "echo from-the-vm > made-in-vm && mkdir dir-in-vm",
    ])
    .assert_code(0);
    for made in ["made-in-vm", "dir-in-vm"] {
        let meta = std::fs::metadata(dir.join(made)).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (0, 0),
            "{made} is not root's on the host"
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("made-in-vm")).unwrap(),
        "from-the-vm\n"
    );
    // Egress through the host's proxy (the egress directory is shared id-mapped too).
    let denied = run(super::EXEC_DENIED_REQUEST);
    assert_eq!(denied.stdout.trim(), "403", "{}", denied.stderr);

    // Every QEMU of Q is this sandbox's while it holds Q's range.
    let monitors = monitors_of(q);
    assert!(
        monitors.iter().any(|&(pid, _)| pid == qemu),
        "{monitors:?} misses QEMU {qemu}"
    );
    run(&["down"]).assert_code(0);
    assert!(
        wait_until(Duration::from_secs(10), || !alive(qemu) && !alive(keeper)),
        "QEMU ({qemu}) or the keeper ({keeper}) outlived down"
    );
    assert_eq!(run(&["status", "--json"]).json()["health"], "absent");
    assert_eq!(
        still_running(&monitors),
        Vec::<u64>::new(),
        "a QEMU of {q} outlived down"
    );
    super::assert_nothing_left(&[
        env.runtime_dir.join("airlock/sandboxes"),
        env.state_home().join("airlock/sandboxes"),
    ]);
}

/// A root invoker's `run`: one command in a VM of its own, as an id of a root invoker's range;
/// what it writes is root's on the host; no QEMU and no run directory is left after it.
#[test]
fn vm_backend_run_for_a_root_invoker_writes_as_root_and_leaves_no_monitor() {
    let Some((env, dir)) = root_project() else {
        return;
    };
    // The command waits for `gate`, so that the QEMUs of its id are read while the run holds
    // the id's range (after the run another sandbox may take it).
    let mut one = env
        .command(
            &dir,
            &[
                "run",
                "--",
                "sh",
                "-c",
                "id -u > made-by-run.tmp && mv made-by-run.tmp made-by-run && \
                 while [ ! -e gate ]; do sleep 0.1; done",
            ],
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let made = dir.join("made-by-run");
    let ended = |one: &mut std::process::Child| one.try_wait().unwrap().is_some();
    assert!(
        wait_until(Duration::from_secs(150), || made.exists()
            || ended(&mut one)),
        "run wrote nothing in 150 s"
    );
    assert!(made.exists(), "{:?}", one.wait_with_output());
    let inside: u32 = std::fs::read_to_string(&made)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let monitors = monitors_of(inside);
    assert!(!monitors.is_empty(), "no QEMU of {inside} during the run");
    std::fs::write(dir.join("gate"), "").unwrap();
    Run::from(one.wait_with_output().unwrap()).assert_code(0);
    let meta = std::fs::metadata(&made).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (0, 0),
        "made-by-run is not root's"
    );
    assert!(
        inside >= airlock_linux::idmap::ROOT_INVOKER_BASE,
        "run's guest user is {inside}"
    );
    assert_eq!(
        still_running(&monitors),
        Vec::<u64>::new(),
        "a QEMU of {inside} outlived run"
    );
    assert!(!env
        .runtime_dir
        .join("airlock/vm-runs")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some()));
}

/// A root invoker's mount on a filesystem that cannot be id-mapped (sysfs here, bound outside
/// `/sys`; NFS and FUSE elsewhere) is refused with the path and the reason, as a `linux`
/// sandbox refuses it, instead of being shown to QEMU as host root's files; no QEMU ran (the
/// helper stops before its exec), so nothing boots here.
#[test]
fn vm_backend_for_a_root_invoker_refuses_a_mount_that_cannot_be_id_mapped() {
    let Some((env, dir)) = root_project() else {
        return;
    };
    let target = env.dir("sysfs-mm");
    nix::mount::mount(
        Some("/sys/kernel/mm"),
        &target,
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .expect("bind /sys/kernel/mm for the test");
    struct Unbind(PathBuf);
    impl Drop for Unbind {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let _bound = Unbind(target.clone());
    let config = std::fs::read_to_string(env.user_config()).unwrap();
    env.write_user_config(&format!(
        "{config}\n[[mount]]\nname = \"mm\"\npath = \"{}\"\nread_only = true\n",
        target.display()
    ));
    let run = env.run_in(&dir, &["run", "--", "echo", "started"]);
    run.assert_code(69);
    assert!(!run.stdout.contains("started"), "{run:?}");
    assert!(
        crate::common::mentions(&run.stderr, &target) && run.stderr.contains("id-mapped"),
        "{}",
        run.stderr
    );
}
