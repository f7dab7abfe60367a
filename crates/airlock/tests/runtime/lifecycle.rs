//! `airlock run` as a user sees it: exit statuses, stdin, working directory, limits (I8), and
//! nothing left behind after normal exit, failure and SIGKILL of airlock.

use std::path::Path;
use std::time::{Duration, Instant};

use super::harness::ok;
#[allow(unused_imports)]
use super::harness::Rt;
use crate::common::wait_until;

both! {
    /// O5: the command's exit code is returned, and 128+N when it died of signal N.
    fn run_returns_the_exit_code_and_128_plus_signal(rt) {
        rt.sh(&[], "exit 3").assert_code(3);
        rt.sh(&[], "kill -KILL $$").assert_code(137);
        rt.sh(&[], "kill -TERM $$").assert_code(143);
        rt.run_args(&["run", "--", "no-such-command-anywhere"], None).assert_code(127);
    }
}

both! {
    /// `-i` streams stdin to the command; without it the command sees end-of-file.
    fn stdin_is_streamed_only_with_i(rt) {
        let run = rt.run_args(&["run", "-i", "--", "cat"], Some(b"line one\nline two\n"));
        assert_eq!(ok(&run), "line one\nline two\n");
        let run = rt.run_args(&["run", "--", "cat"], Some(b"ignored\n"));
        assert_eq!(ok(&run), "");
    }
}

both! {
    /// `-w` runs in the named directory of the workspace; paths through /proc or outside the
    /// mapped tree are refused before anything starts (exit 2). `-e` sets variables.
    fn workdir_and_env_are_validated_and_applied(rt) {
        std::fs::create_dir_all(rt.project.join("sub")).unwrap();
        rt.hand_over(&rt.project.join("sub"));
        let run = rt.run_args(&["run", "-w", "sub", "-e", "GREETING=hi there", "--", "sh", "-c", "pwd; echo $GREETING"], None);
        let expected = format!("{}\nhi there\n", rt.project.join("sub").display());
        assert_eq!(ok(&run), expected);
        for bad in ["/proc/self/fd/3", "/etc", "../..", "/dev/fd/0"] {
            let run = rt.run_args(&["run", "-w", bad, "--", "true"], None);
            run.assert_code(2);
        }
        rt.run_args(&["run", "-e", "NOEQUALS", "--", "true"], None).assert_code(2);
        rt.run_args(&["run", "--memory-mb", "10", "--", "true"], None).assert_code(2);
        rt.run_args(&["run", "-t", "--", "true"], None).assert_code(2);
        rt.run_args(&["run", "--bogus", "--", "true"], None).assert_code(2);
    }
}

both! {
    /// L2: a refused command line or configuration has no side effect at all: not even
    /// airlock's runtime directory is created.
    fn refused_runs_change_nothing(rt) {
        let before = rt.env.snapshot();
        for args in [
            &["run", "-w", "/proc/self/fd/3", "--", "true"][..],
            &["run", "-e", "=x", "--", "true"],
            &["run", "--memory-mb", "1", "--", "true"],
            &["run", "-t", "--", "true"],
        ] {
            rt.run_args(args, None).assert_code(2);
        }
        assert_eq!(before.diff(&rt.env.snapshot()), Vec::<String>::new());
    }
}

both! {
    /// C4: outside any project, `run` refuses and points to `airlock init` (exit 2).
    fn run_outside_a_project_points_to_init(rt) {
        let elsewhere = rt.env.dir("elsewhere");
        let out = rt.command(&elsewhere, &["run", "--", "true"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("airlock init"));
    }
}

/// Processes on the host whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// Sandbox cgroups named after this test's airlock run still present on the host.
fn cgroups_named(prefix: &str) -> Vec<String> {
    let mut found = Vec::new();
    for hier in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        for dir in [hier.path().join("airlock"), hier.path()] {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with(prefix) {
                    found.push(e.path().display().to_string());
                }
            }
        }
    }
    found
}

fn host_mounts_mentioning(path: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(path.to_string_lossy().as_ref()))
        .map(str::to_owned)
        .collect()
}

both! {
    /// After a normal exit and after a failing command, no process, mount, cgroup or runtime
    /// directory of the sandbox remains on the host.
    fn nothing_is_left_behind_after_exit_or_failure(rt) {
        let marker = format!("airlock-left-{}", rand_suffix());
        // A background process still running when the command exits must not survive it.
        rt.sh(&[], &format!("sh -c 'sleep 30; :' {marker} & sleep 0.1")).assert_code(0);
        rt.sh(&[], &format!("sh -c 'sleep 30; :' {marker} & exit 9")).assert_code(9);
        assert!(wait_until(Duration::from_secs(3), || processes_with(&marker).is_empty()),
            "sandbox processes survived: {:?}", processes_with(&marker));
        assert!(host_mounts_mentioning(&rt.env.runtime_dir).is_empty());
        let dirs: Vec<_> = std::fs::read_dir(rt.sandboxes_dir()).map(|d| d.flatten().count()).into_iter().collect();
        assert!(dirs.iter().all(|n| *n == 0), "runtime directories left: {dirs:?}");
    }
}

both! {
    /// `run` returns only once its sandbox is gone (create, run, destroy): with background
    /// processes still running when the command exits and the proxy started by a connection,
    /// nothing of the run is left the moment it returns, without any waiting: no process (this
    /// test is a child subreaper, so a survivor would be re-parented here), cgroup, mount,
    /// runtime or egress directory, run state.
    fn nothing_is_left_the_moment_run_returns(rt) {
        use std::process::Stdio;
        use nix::sys::wait::{waitid, Id, WaitPidFlag};
        nix::sys::prctl::set_child_subreaper(true).expect("PR_SET_CHILD_SUBREAPER");
        let marker = format!("airlock-gone-{}", rand_suffix());
        let script = format!(
            "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); \
             s.connect(\"/run/airlock/proxy.sock\")' || exit 1; \
             sh -c 'sleep 30; :' {marker} & sh -c 'sleep 30; :' {marker} & exit 4"
        );
        let child = rt.command(&rt.project, &["run", "--", "sh", "-c", &script])
            .stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped())
            .spawn().expect("spawn airlock");
        let pid = child.id();
        let out = child.wait_with_output().expect("wait for airlock");
        assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
        // From here on nothing waits: the run has returned.
        let orphans = waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT);
        assert!(matches!(orphans, Err(nix::errno::Errno::ECHILD)),
            "the run left a process behind: {orphans:?}");
        assert!(processes_with(&marker).is_empty(), "{:?}", processes_with(&marker));
        let prefix = format!("run-{pid}-");
        assert!(cgroups_named(&prefix).is_empty(), "cgroups left: {:?}", cgroups_named(&prefix));
        assert!(host_mounts_mentioning(&rt.env.runtime_dir).is_empty());
        let airlock_runtime = rt.env.runtime_dir.join("airlock");
        for dir in [
            rt.sandboxes_dir(),
            airlock_runtime.join("egress"),
            rt.env.state_home().join("airlock/runs"),
        ] {
            let left: Vec<String> = std::fs::read_dir(&dir).into_iter().flatten().flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix)).collect();
            assert!(left.is_empty(), "left in {}: {left:?}", dir.display());
        }
    }
}

both! {
    /// If airlock is SIGKILLed, its sandbox dies with it (processes gone, cgroup removed by
    /// the janitor) and the next run removes the dead run's runtime directory.
    fn sigkill_of_airlock_takes_the_sandbox_down(rt) {
        let marker = format!("airlock-killed-{}", rand_suffix());
        let mut child = rt.spawn_until_up(&format!("sh -c 'sleep 60; :' {marker} & echo up; wait"));
        assert!(wait_until(Duration::from_secs(3), || !processes_with(&marker).is_empty()));
        let airlock_pid = child.id();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(wait_until(Duration::from_secs(5), || processes_with(&marker).is_empty()),
            "sandbox survived airlock: {:?}", processes_with(&marker));
        let prefix = format!("run-{airlock_pid}-");
        assert!(wait_until(Duration::from_secs(5), || cgroups_named(&prefix).is_empty()),
            "cgroups left: {:?}", cgroups_named(&prefix));
        assert!(host_mounts_mentioning(&rt.env.runtime_dir).is_empty());
        ok(&rt.sh(&[], "true"));
        let left: Vec<String> = std::fs::read_dir(rt.sandboxes_dir()).unwrap().flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix)).collect();
        assert!(left.is_empty(), "dead run's directory not swept: {left:?}");
    }
}

both! {
    /// I8: a memory hog is killed inside its sandbox (host stays fine); where this user may not
    /// create cgroups, an explicit limit refuses the run (exit 69) instead of running unlimited.
    fn memory_hog_is_contained_or_explicit_limit_refused(rt) {
        let hog = "python3 -c 'b = bytearray(700 * 1024 * 1024); b[::4096] = b\"x\" * len(b[::4096]); print(\"survived\")'";
        let run = rt.run_args(&["run", "--memory-mb", "256", "--", "sh", "-c", hog], None);
        if cgroups_delegated(&rt) {
            assert_ne!(run.code, Some(0), "{run:?}");
            assert!(!run.stdout.contains("survived"), "{run:?}");
        } else {
            run.assert_code(69);
            assert!(run.stderr.contains("airlock doctor"), "{}", run.stderr);
        }
    }
}

both! {
    /// I8: a fork bomb hits the configured `pids_max` inside the sandbox, through the cgroup or,
    /// where this user may not create cgroups, through RLIMIT_NPROC (counted per user namespace
    /// since Linux 5.14); on older kernels the explicit limit refuses the run (exit 69).
    fn process_count_is_limited(rt) {
        let enforced = cgroups_delegated(&rt) || airlock_linux::init::nproc_limit_is_per_sandbox();
        rt.env.write_user_config("pids_max = 64\n");
        rt.hand_over(&rt.env.config_home());
        let bomb = "import os, time\npids = []\ntry:\n  for i in range(200):\n    p = os.fork()\n    if p == 0:\n      time.sleep(30); os._exit(0)\n    pids.append(p)\n  print(\"unlimited\", len(pids), flush=True)\nexcept OSError as e:\n  print(\"limited\", len(pids), e.errno, flush=True)\nfor p in pids: os.kill(p, 9)";
        let run = rt.run_args(&["run", "--", "python3", "-c", bomb], None);
        if enforced {
            let out = ok(&run);
            assert!(out.starts_with("limited"), "fork bomb not contained: {out}");
            let n: u32 = out.split_whitespace().nth(1).unwrap().parse().unwrap();
            assert!(n < 64, "{n} forks despite pids_max = 64");
        } else {
            run.assert_code(69);
            assert!(run.stderr.contains("airlock doctor"), "{}", run.stderr);
        }
    }
}

/// Whether this world's airlock can create cgroups: a run with only default limits says so
/// on stderr when it cannot.
fn cgroups_delegated(rt: &Rt) -> bool {
    let probe = rt.sh(&[], "true");
    ok(&probe);
    !probe.stderr.contains("without cgroup limits")
}

fn rand_suffix() -> String {
    let mut b = [0u8; 6];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

both! {
    /// SIGTERM sent to airlock reaches the command (it is forwarded to its process group), and
    /// airlock returns the command's status: 143 when the command does not handle it.
    fn signals_to_airlock_are_forwarded_to_the_command(rt) {
        let mut child = rt.spawn_until_up("echo up; exec sleep 30");
        std::thread::sleep(Duration::from_millis(100));
        let st = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let started = Instant::now();
        let status = child.wait().unwrap();
        assert!(started.elapsed() < Duration::from_secs(10), "command outlived the signal");
        assert_eq!(status.code(), Some(143), "{status:?}");
    }
}

both! {
    /// `-t` gives the command a terminal of its own (a PTY of the sandbox's private devpts) with
    /// the host terminal's size; the status still comes back. Runs under script(1) for a TTY.
    fn tty_mode_gives_the_command_a_private_terminal(rt) {
        let out = rt.on_a_terminal(&["run", "-t", "--", "sh", "-c", "tty; exit 4"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(4), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("/dev/pts/0"), "no private PTY: {stdout}");
    }
}

both! {
    /// `airlock run -- yes | head`: when the reader of the output goes away, airlock ends
    /// quietly with 128+SIGPIPE and the sandbox is destroyed, like any pipeline member.
    fn closed_output_pipe_ends_run_quietly(rt) {
        let mut child = rt
            .command(&rt.project, &["run", "--", "yes"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut buf = [0u8; 4];
        use std::io::Read;
        out.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"y\ny\n");
        drop(out);
        let started = Instant::now();
        let result = child.wait_with_output().unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(result.status.code(), Some(141));
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(!stderr.contains("error["), "{stderr}");
    }
}

both! {
    /// A start that fails half-way (here: the image path cannot be an overlay layer, detected
    /// while building the root filesystem) reports the stage, exits 69 and leaves no runtime
    /// directory, cgroup, mount or process behind.
    fn nothing_is_left_behind_after_a_failed_start(rt) {
        let image = rt.env.dir("img,with-comma");
        rt.env.write_user_config(&format!("image = \"{}\"\n", image.display()));
        rt.hand_over(rt.env.root());
        let spawned = rt
            .command(&rt.project, &["run", "--", "true"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let airlock_pid = spawned.id();
        let child = spawned.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&child.stderr);
        assert_eq!(child.status.code(), Some(69), "{stderr}");
        assert!(stderr.contains("overlay"), "{stderr}");
        let left: Vec<_> = std::fs::read_dir(rt.sandboxes_dir())
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "runtime directories left: {left:?}");
        assert!(host_mounts_mentioning(&rt.env.runtime_dir).is_empty());
        assert!(processes_with(&rt.env.runtime_dir.to_string_lossy()).is_empty());
        let prefix = format!("run-{airlock_pid}-");
        assert!(cgroups_named(&prefix).is_empty(), "{:?}", cgroups_named(&prefix));
    }
}

/// The cgroup directory (under `/sys/fs/cgroup`) of host process `pid` for `controller`
/// (v1 hierarchy named after it, else the v2 unified one).
fn cgroup_dir_of(pid: u32, controller: &str) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        if ctrls.split(',').any(|c| c == controller) {
            return Some(
                Path::new("/sys/fs/cgroup")
                    .join(controller)
                    .join(path.trim_start_matches('/')),
            );
        }
    }
    let v2 = text.lines().find(|l| l.starts_with("0::"))?;
    let rel = v2.trim_start_matches("0::").trim_start_matches('/');
    ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .iter()
        .map(|base| Path::new(base).join(rel))
        .find(|p| p.join("cpu.max").exists())
}

both! {
    /// I8: the configured `cpus` becomes the CPU bandwidth of the sandbox's cgroup (checked on
    /// the host, on the cgroup a sandbox process actually sits in); where this user may not
    /// create cgroups the configured limit refuses the run (exit 69).
    fn cpu_limit_is_applied_to_the_sandbox_cgroup(rt) {
        let delegated = cgroups_delegated(&rt);
        rt.env.write_user_config("cpus = 0.5\n");
        rt.hand_over(&rt.env.config_home());
        if !delegated {
            let run = rt.sh(&[], "true");
            run.assert_code(69);
            assert!(run.stderr.contains("airlock doctor"), "{}", run.stderr);
            return;
        }
        let marker = format!("airlock-cpu-{}", rand_suffix());
        let mut child = rt.spawn_until_up(&format!("sh -c 'sleep 20; :' {marker} & echo up; wait"));
        assert!(wait_until(Duration::from_secs(3), || !processes_with(&marker).is_empty()));
        // The host-side airlock's own command line holds the marker too: take a sandbox `sh`.
        let pid = processes_with(&marker)
            .into_iter()
            .find(|p| {
                let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                cmdline.split(|b| *b == 0).next() == Some(b"sh")
            })
            .expect("a sandbox process");
        let dir = cgroup_dir_of(pid, "cpu").expect("the sandbox process has a cpu cgroup");
        let quota = std::fs::read_to_string(dir.join("cpu.cfs_quota_us"))
            .or_else(|_| std::fs::read_to_string(dir.join("cpu.max")))
            .unwrap();
        let period = std::fs::read_to_string(dir.join("cpu.cfs_period_us")).unwrap_or_default();
        child.kill().unwrap();
        child.wait().unwrap();
        let (q, p): (f64, f64) = match quota.split_whitespace().collect::<Vec<_>>()[..] {
            [q, p] => (q.parse().unwrap(), p.parse().unwrap()),
            [q] => (q.parse().unwrap(), period.trim().parse().unwrap()),
            _ => panic!("unreadable quota {quota:?}"),
        };
        assert!((q / p - 0.5).abs() < 0.01, "cpu bandwidth {q}/{p} in {}", dir.display());
    }
}

both! {
    /// A command that ignores SIGTERM keeps running after the first forwarded signal, and the
    /// second one kills it: airlock always ends on a repeated Ctrl+C / TERM (status 137).
    fn a_second_signal_kills_a_command_that_ignores_the_first(rt) {
        let mut child = rt.spawn_until_up("trap '' TERM INT; echo up; while :; do sleep 1; done");
        let pid = child.id().to_string();
        let term = || {
            let st = std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap();
            assert!(st.success());
        };
        term();
        std::thread::sleep(Duration::from_millis(300));
        assert!(child.try_wait().unwrap().is_none(), "the first TERM was not ignorable");
        term();
        let started = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "run outlived two signals");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(137), "{status:?}");
    }
}

/// 9.10: a command that fills the sandbox's memory is killed by the OOM killer inside the
/// sandbox's cgroup, and `run` says so: "out of memory (memory_mb = N)" and exit 137, never
/// 70 "a bug in airlock". The marker proves the hog started.
#[test]
fn a_command_that_fills_memory_is_reported_out_of_memory_with_137() {
    if !airlock_testkit::needs_root("creating the sandbox's memory cgroup") {
        return;
    }
    let rt = Rt::invoker();
    let hog = "echo hog-started; python3 -c 'x = bytearray(4 << 30); print(len(x))'";
    let run = rt.sh(&["--memory-mb", "256"], hog);
    assert!(run.stdout.starts_with("hog-started"), "{run:?}");
    assert_eq!(run.code, Some(137), "{run:?}");
    assert!(
        run.stderr.contains("out of memory (memory_mb = 256)"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("bug in airlock"), "{}", run.stderr);
}

/// Children of `pid` (every thread's), with their command lines.
fn children_of(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in list
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
        {
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            out.push((child, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    out
}

/// 9.10: with cgroups, `run`'s egress proxy lives in the sandbox's cgroup, next to the init
/// stage and PID 1, so a connection flood from inside costs the sandbox's limits.
#[test]
fn the_egress_proxy_runs_in_the_sandbox_cgroup() {
    if !airlock_testkit::needs_root("creating the sandbox's cgroup") {
        return;
    }
    let rt = Rt::invoker();
    // `run` starts its proxy at the sandbox's first connection: make one.
    let mut child =
        rt.spawn_until_up("curl -s -m 20 -o /dev/null http://denied.test/; echo up; exec sleep 20");
    let kids = children_of(child.id());
    let find = |verb: &str| {
        kids.iter()
            .find(|(_, cmd)| cmd.contains(verb))
            .unwrap_or_else(|| panic!("no {verb} child in {kids:?}"))
            .0
    };
    let cgroup_of = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let (proxy, init) = (find("__proxy"), find("__init"));
    let (sandbox, proxy) = (cgroup_of(init), cgroup_of(proxy));
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        sandbox.contains("/airlock/"),
        "init stage not in an airlock cgroup: {sandbox}"
    );
    assert_eq!(proxy, sandbox, "the proxy is outside the sandbox's cgroup");
}
