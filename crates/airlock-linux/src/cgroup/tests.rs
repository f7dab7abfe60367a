//! T1 tests on fake trees and pure functions; T2 tests on the real hierarchy (as root they
//! create real cgroups; as an unprivileged user they assert the typed "not delegated" error).
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

fn v1(base: &Path, controllers: &[Controller]) -> Hierarchy {
    Hierarchy {
        base: base.to_path_buf(),
        controllers: controllers.to_vec(),
        v2: false,
        fallback: None,
    }
}

fn v2(base: &Path) -> Hierarchy {
    Hierarchy {
        base: base.to_path_buf(),
        controllers: Controller::ALL.to_vec(),
        v2: true,
        fallback: None,
    }
}

const LIMITS: CgroupLimits = CgroupLimits {
    memory_bytes: Some(256 << 20),
    pids_max: Some(512),
    cpus: Some(1.5),
};

fn pairs(writes: &[LimitWrite]) -> Vec<(&str, &str)> {
    writes.iter().map(|w| (w.file, w.value.as_str())).collect()
}

#[test]
fn v2_limits_cap_memory_and_disable_swap() {
    let writes = limit_writes(&v2(Path::new("/x")), &LIMITS, |_| true);
    assert_eq!(
        pairs(&writes),
        [
            ("memory.max", "268435456"),
            ("memory.swap.max", "0"),
            ("pids.max", "512"),
            ("cpu.max", "150000 100000")
        ]
    );
}

#[test]
fn v1_memory_limit_is_written_before_memsw() {
    let h = v1(Path::new("/x"), &[Controller::Memory]);
    let writes = limit_writes(&h, &LIMITS, |f| f == "memory.memsw.limit_in_bytes");
    assert_eq!(
        pairs(&writes),
        [
            ("memory.limit_in_bytes", "268435456"),
            ("memory.memsw.limit_in_bytes", "268435456")
        ]
    );
}

#[test]
fn v1_hierarchies_get_only_their_own_controller_files() {
    let pids = limit_writes(&v1(Path::new("/p"), &[Controller::Pids]), &LIMITS, |_| true);
    assert_eq!(pairs(&pids), [("pids.max", "512")]);
    let cpu = limit_writes(&v1(Path::new("/c"), &[Controller::Cpu]), &LIMITS, |_| true);
    assert_eq!(
        pairs(&cpu),
        [
            ("cpu.cfs_period_us", "100000"),
            ("cpu.cfs_quota_us", "150000")
        ]
    );
}

#[test]
fn unset_limits_write_nothing_and_tiny_cpu_quota_is_clamped() {
    assert!(limit_writes(&v2(Path::new("/x")), &CgroupLimits::default(), |_| true).is_empty());
    assert_eq!(files::cpu_quota_us(0.001), 1_000);
}

#[test]
fn names_that_could_escape_the_parent_are_rejected() {
    for bad in [
        "",
        ".",
        "..",
        "../x",
        "a/b",
        ".hidden",
        "with space",
        &"x".repeat(65),
    ] {
        assert!(
            matches!(validate_name(bad), Err(CgroupError::InvalidName { .. })),
            "{bad:?}"
        );
    }
    validate_name("proj-1a2b.run_3").unwrap();
}

#[test]
fn hybrid_layout_puts_v1_sandboxes_at_each_hierarchy_root() {
    let mi = "1 0 0:1 / /cg/unified rw - cgroup2 cgroup2 rw\n2 0 0:2 / /cg/memory rw - cgroup cgroup rw,memory\n3 0 0:3 / /cg/pids rw - cgroup cgroup rw,pids\n4 0 0:4 / /cg/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
    let layout = Layout::from_texts(
        mi,
        "4:memory:/jobs/1\n3:pids:/\n2:cpu,cpuacct:/\n0::/\n",
        |_| Some(String::new()),
    );
    let hs = hierarchies(&layout).unwrap();
    assert_eq!(hs.len(), 3);
    assert_eq!(
        hs[0],
        Hierarchy {
            fallback: Some(PathBuf::from("/cg/memory/jobs/1")),
            ..v1(Path::new("/cg/memory"), &[Controller::Memory])
        }
    );
    assert_eq!(
        hs[1],
        v1(Path::new("/cg/pids"), &[Controller::Pids]),
        "root cgroup: no fallback"
    );
    assert!(hs.iter().all(|h| !h.v2));
}

#[test]
fn sandbox_cgroups_stay_at_the_root_unless_only_our_own_cgroup_is_writable() {
    let h = Hierarchy {
        fallback: Some(PathBuf::from("/cg/memory/user.slice/session-3.scope")),
        ..v1(Path::new("/cg/memory"), &[Controller::Memory])
    };
    // Root, or a user an administrator delegated `<root>/airlock` to: the stable place.
    let root = h.clone().resolve_for_user(|_| true);
    assert_eq!(root.base, PathBuf::from("/cg/memory"));
    let delegated = h
        .clone()
        .resolve_for_user(|p| p == Path::new("/cg/memory/airlock"));
    assert_eq!(delegated.base, PathBuf::from("/cg/memory"));
    // Only our own cgroup is writable (e.g. a container's): use it.
    let own = h
        .clone()
        .resolve_for_user(|p| p.starts_with("/cg/memory/user.slice"));
    assert_eq!(
        own.base,
        PathBuf::from("/cg/memory/user.slice/session-3.scope")
    );
    // Nothing writable: the root, so the error names what doctor's fix delegates.
    let nothing = h.resolve_for_user(|_| false);
    assert_eq!(nothing.base, PathBuf::from("/cg/memory"));
    assert_eq!(nothing.fallback, None);
}

#[test]
fn delegated_v2_places_sandboxes_beside_our_own_cgroup() {
    let mi = "1 0 0:1 / /cg rw - cgroup2 cgroup2 rw\n";
    let layout = Layout::from_texts(
        mi,
        "0::/user.slice/u@1000.service/app.slice/me.scope\n",
        |_| Some("cpu memory pids".into()),
    );
    let h = hierarchies(&layout).unwrap().remove(0);
    assert_eq!(h.base, PathBuf::from("/cg"));
    let app_slice = PathBuf::from("/cg/user.slice/u@1000.service/app.slice");
    assert_eq!(h.fallback.as_ref(), Some(&app_slice));
    let user = h.clone().resolve_for_user(|p| p.starts_with(&app_slice));
    assert_eq!(user.base, app_slice);
    assert_eq!(
        h.resolve_for_user(|_| true).base,
        PathBuf::from("/cg"),
        "root uses the root"
    );
}

#[test]
fn no_controllers_anywhere_means_no_hierarchy() {
    let mi = "1 0 0:1 / /cg rw - cgroup2 cgroup2 rw\n";
    let layout = Layout::from_texts(mi, "0::/\n", |_| Some("cpuset io".into()));
    assert_eq!(hierarchies(&layout), None);
}

#[test]
fn owner_start_time_survives_spaces_and_parens_in_the_command_name() {
    let stat =
        "4242 (evil) (name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
    assert_eq!(sweep::start_time_from_stat(stat), Some(987654));
    assert_eq!(
        OwnerMark::decode("12 34"),
        Some(OwnerMark {
            pid: 12,
            start_time: 34
        })
    );
    assert_eq!(OwnerMark::decode("12 34 5"), None);
    assert_eq!(OwnerMark::decode("x 34"), None);
}

/// A fake `/proc` with one live process.
fn fake_proc(root: &Path, pid: u32, start: u64) {
    let dir = root.join(pid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let stat = format!("{pid} (airlock) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0");
    std::fs::write(dir.join("stat"), stat).unwrap();
}

fn fake_sandbox(parent: &Path, name: &str, owner: Option<&str>, procs: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    if let Some(owner) = owner {
        rustix::fs::setxattr(
            &dir,
            OWNER_XATTR,
            owner.as_bytes(),
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
    }
    if !procs.is_empty() {
        std::fs::write(dir.join("cgroup.procs"), procs).unwrap();
    }
    dir
}

#[test]
fn sweep_removes_only_empty_marked_cgroups_whose_owner_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, proc_root) = (tmp.path().join("cg"), tmp.path().join("proc"));
    let parent = base.join(PARENT_DIR);
    fake_proc(&proc_root, 100, 5555);
    let dead = fake_sandbox(&parent, "dead-owner", Some("200 1"), "");
    let reused = fake_sandbox(&parent, "pid-reused", Some("100 1"), "");
    let alive = fake_sandbox(&parent, "live-owner", Some("100 5555"), "");
    let unmarked = fake_sandbox(&parent, "not-ours", None, "");
    let busy = fake_sandbox(&parent, "still-running", Some("200 1"), "77\n");
    let removed = sweep_stale_in(&[v1(&base, &[Controller::Memory])], &proc_root).unwrap();
    let mut removed_sorted = removed.clone();
    removed_sorted.sort();
    assert_eq!(removed_sorted, [dead.clone(), reused.clone()]);
    assert!(!dead.exists() && !reused.exists());
    assert!(alive.exists() && unmarked.exists() && busy.exists());
}

#[test]
fn an_owner_killed_but_not_yet_reaped_no_longer_holds_its_cgroup() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, proc_root) = (tmp.path().join("cg"), tmp.path().join("proc"));
    let parent = base.join(PARENT_DIR);
    // A zombie: the keeper was SIGKILLed and whoever inherited it has not reaped it yet.
    let dir = proc_root.join("300");
    std::fs::create_dir_all(&dir).unwrap();
    let stat = "300 (exe) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 7777 0 0";
    std::fs::write(dir.join("stat"), stat).unwrap();
    let owner = OwnerMark {
        pid: 300,
        start_time: 7777,
    };
    assert!(!owner.is_alive(&proc_root));
    let left = fake_sandbox(&parent, "zombie-owner", Some("300 7777"), "");
    let removed = sweep_stale_in(&[v1(&base, &[Controller::Memory])], &proc_root).unwrap();
    assert_eq!(removed, [left]);
}

#[test]
fn sweep_without_a_parent_directory_is_a_no_op() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(sweep_stale_in(&[v2(tmp.path())], tmp.path())
        .unwrap()
        .is_empty());
}

// ---- T2: the real hierarchy -------------------------------------------------------------

fn unique(tag: &str) -> String {
    format!("test-{}-{tag}", std::process::id())
}

/// Destroys the cgroup even when the test panics, so a failed test leaves nothing behind.
struct Guard(Option<Cgroup>);

impl std::ops::Deref for Guard {
    type Target = Cgroup;
    fn deref(&self) -> &Cgroup {
        self.0.as_ref().expect("not yet destroyed")
    }
}

impl Guard {
    fn destroy(mut self, timeout: Duration) -> Result<(), CgroupError> {
        self.0.take().expect("not yet destroyed").destroy(timeout)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(cg) = self.0.take() {
            let _ = cg.destroy(Duration::from_secs(10));
        }
    }
}

/// Creates a real cgroup as root; as any other user asserts the rootless contract instead
/// (or, on a host that delegated a subtree, exercises it like root would).
fn real_cgroup(tag: &str, limits: &CgroupLimits) -> Option<Guard> {
    let result = Cgroup::create(&unique(tag), limits);
    if rustix::process::geteuid().is_root() {
        return Some(Guard(Some(result.expect("root can create cgroups"))));
    }
    match result {
        Err(CgroupError::NotDelegated { .. } | CgroupError::NoControllers) => {
            airlock_testkit::skip("needs root or a delegated cgroup subtree");
            None
        }
        Ok(cg) => Some(Guard(Some(cg))),
        Err(other) => panic!("rootless create must fail as not delegated, got {other}"),
    }
}

/// A shell that waits for one line on stdin before running `script`, so it can be moved into
/// the cgroup before it does anything.
fn gated_shell(script: &str) -> std::process::Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!("read _gate; {script}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn open_gate(child: &mut std::process::Child) {
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
}

/// Moves a `sleep` into `cg`, destroys `cg` and asserts the sleep died of SIGKILL.
fn destroy_kills_a_member(cg: Guard) {
    let mut child = Command::new("sleep").arg("100").spawn().unwrap();
    cg.add_pid(child.id()).unwrap();
    assert_eq!(cg.pids().unwrap(), [child.id()]);
    cg.destroy(Duration::from_secs(5)).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
}

#[test]
fn limits_land_in_control_files_and_destroy_kills_members_and_removes_dirs() {
    let Some(cg) = real_cgroup("roundtrip", &LIMITS) else {
        return;
    };
    let paths = cg.paths().to_vec();
    for dir in &paths {
        assert!(dir.is_dir(), "{}", dir.display());
        if dir.join("pids.max").exists() {
            assert_eq!(
                std::fs::read_to_string(dir.join("pids.max"))
                    .unwrap()
                    .trim(),
                "512"
            );
        }
        if dir.join("memory.limit_in_bytes").exists() {
            assert_eq!(
                std::fs::read_to_string(dir.join("memory.limit_in_bytes"))
                    .unwrap()
                    .trim(),
                "268435456"
            );
        }
    }
    destroy_kills_a_member(cg);
    assert!(
        paths.iter().all(|p| !p.exists()),
        "cgroup directories left behind"
    );
}

#[test]
fn memory_hog_is_oom_killed_inside_the_cgroup_and_the_host_survives() {
    let limits = CgroupLimits {
        memory_bytes: Some(64 << 20),
        ..Default::default()
    };
    let Some(cg) = real_cgroup("memhog", &limits) else {
        return;
    };
    // `tail` keeps a newline-free stream in memory: 512 MiB against a 64 MiB limit.
    // The marker proves the hog started inside the cgroup before the kill.
    let mut child =
        gated_shell("echo hog-started; head -c 536870912 /dev/zero | tail; echo exit=$?");
    cg.add_pid(child.id()).unwrap();
    open_gate(&mut child);
    let mut out = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_to_string(&mut out)
        .unwrap();
    child.wait().unwrap();
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["hog-started", "exit=137"],
        "the hog must start and tail must die of SIGKILL (OOM)"
    );
    assert!(
        cg.oom_kills().unwrap() >= 1,
        "the kernel must record the OOM kill in this cgroup"
    );
    cg.destroy(Duration::from_secs(5)).unwrap();
}

#[test]
fn fork_bomb_stops_at_pids_max_and_destroy_still_cleans_up() {
    let limits = CgroupLimits {
        pids_max: Some(24),
        ..Default::default()
    };
    let Some(cg) = real_cgroup("forkbomb", &limits) else {
        return;
    };
    let paths = cg.paths().to_vec();
    let pids_dir = paths
        .iter()
        .find(|p| p.join("pids.max").exists())
        .unwrap()
        .clone();
    // bash retries a failed fork instead of exiting, so the bomb keeps pressing on the limit.
    let mut child = Command::new("bash")
        .arg("-c")
        .arg("read _gate; bomb() { bomb & bomb & wait; }; bomb")
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    cg.add_pid(child.id()).unwrap();
    open_gate(&mut child);
    let refused = || {
        let text = std::fs::read_to_string(pids_dir.join("pids.events")).unwrap();
        files::parse_key_value(&text, "max").unwrap_or(0)
    };
    let until = Instant::now() + Duration::from_secs(10);
    let mut peak = 0;
    while refused() == 0 && Instant::now() < until {
        peak = peak.max(cg.pids().unwrap().len());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(refused() > 0, "the kernel must refuse forks at pids.max");
    assert!(peak <= 24, "pids.max must hold: saw {peak} processes");
    assert!(
        std::fs::metadata("/proc/self").is_ok(),
        "the host keeps working"
    );
    cg.destroy(Duration::from_secs(10)).unwrap();
    let _ = child.wait();
    assert!(paths.iter().all(|p| !p.exists()));
}

const HELPER_ENV: &str = "AIRLOCK_TEST_JANITOR_HELPER";

/// Plays an airlock process for the SIGKILL test: creates a cgroup with a janitor, puts a
/// sleeper in it, prints the cgroup paths and the sleeper pid, then waits to be killed.
#[test]
#[ignore = "helper process for janitor_removes_cgroup_after_airlock_is_sigkilled"]
fn janitor_helper_process() {
    let Ok(name) = std::env::var(HELPER_ENV) else {
        return;
    };
    let cg = Cgroup::create(
        &name,
        &CgroupLimits {
            pids_max: Some(64),
            ..Default::default()
        },
    )
    .unwrap();
    let janitor = cg.spawn_janitor(Duration::from_secs(5)).unwrap();
    // Never waited for: this process is SIGKILLed by the test and the janitor reaps nothing.
    #[allow(clippy::zombie_processes)]
    let sleeper = Command::new("sleep").arg("1000").spawn().unwrap();
    cg.add_pid(sleeper.id()).unwrap();
    let paths: Vec<String> = cg.paths().iter().map(|p| p.display().to_string()).collect();
    println!("READY {} {}", sleeper.id(), paths.join(" "));
    std::mem::forget(janitor);
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn janitor_removes_cgroup_after_airlock_is_sigkilled() {
    if !airlock_testkit::needs_root("needs a real cgroup") {
        return;
    }
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "cgroup::tests::janitor_helper_process",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, unique("janitor"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(helper.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("READY ") {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "helper ended before READY"
        );
    }
    let mut fields = line[line.find("READY ").unwrap()..]
        .split_whitespace()
        .skip(1);
    let sleeper: u32 = fields.next().unwrap().parse().unwrap();
    let paths: Vec<PathBuf> = fields.map(PathBuf::from).collect();
    assert!(paths.iter().all(|p| p.is_dir()));
    helper.kill().unwrap(); // SIGKILL: no destructor, no cleanup code in the helper runs
    helper.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while paths.iter().any(|p| p.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        paths.iter().all(|p| !p.exists()),
        "janitor left cgroups behind: {paths:?}"
    );
    let stat = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z "),
        "sandbox process survived: {stat}"
    );
}

#[test]
fn not_delegated_is_reported_when_the_base_refuses_mkdir() {
    // sysfs refuses mkdir with EPERM even for root: the same errno a rootless user gets from
    // a cgroup hierarchy that was not delegated to it.
    let h = v1(Path::new("/sys/kernel"), &[Controller::Pids]);
    match Cgroup::create_in(vec![h], &unique("nodeleg"), &LIMITS) {
        Err(CgroupError::NotDelegated { path, .. }) => assert_eq!(path, Path::new("/sys/kernel")),
        other => panic!("expected NotDelegated, got {other:?}"),
    }
}

#[test]
fn releasing_the_janitor_cleans_up_a_cgroup_airlock_did_not_destroy() {
    let Some(mut guard) = real_cgroup("release", &LIMITS) else {
        return;
    };
    let cg = guard.0.take().unwrap();
    let paths = cg.paths().to_vec();
    let janitor = cg.spawn_janitor(Duration::from_secs(5)).unwrap();
    let mut sleeper = Command::new("sleep").arg("100").spawn().unwrap();
    cg.add_pid(sleeper.id()).unwrap();
    drop(cg); // forgotten, as if airlock lost track of it: only the janitor is left
    assert!(
        janitor.release(Duration::from_secs(5)),
        "janitor must exit in time"
    );
    let status = sleeper.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    assert!(paths.iter().all(|p| !p.exists()), "janitor left {paths:?}");
}

#[test]
fn a_dismissed_janitor_is_reaped_after_airlock_destroyed_the_cgroup() {
    let Some(mut guard) = real_cgroup("dismiss", &LIMITS) else {
        return;
    };
    let cg = guard.0.take().unwrap();
    let paths = cg.paths().to_vec();
    let janitor = cg.spawn_janitor(Duration::from_secs(5)).unwrap();
    let pid = janitor.pid();
    cg.destroy(Duration::from_secs(5)).unwrap();
    assert!(
        janitor.dismiss(Duration::from_secs(5)),
        "the dismissed janitor must be gone and reaped"
    );
    // Reaped: not even a zombie is left.
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the janitor was not reaped"
    );
    assert!(paths.iter().all(|p| !p.exists()), "left {paths:?}");
}

#[test]
fn v2_destroy_kills_members_with_cgroup_kill_and_removes_the_directory() {
    // This host binds every controller to v1, but its (controller-less) cgroup2 hierarchy still
    // has cgroup.procs and cgroup.kill: enough to exercise the v2 kill and removal path.
    if !airlock_testkit::needs_root("needs to create a cgroup at the cgroup2 root") {
        return;
    }
    let layout = Layout::detect().expect("a cgroup layout");
    let Some(v2) = layout.v2.filter(|v| v.own_dir == v.mount_point) else {
        return airlock_testkit::host_lacks("a cgroup2 hierarchy mounted at this process's cgroup");
    };
    if !v2.own_dir.join("cgroup.kill").exists() {
        return airlock_testkit::host_lacks("cgroup.kill (Linux 5.14)");
    }
    let h = Hierarchy {
        controllers: Vec::new(),
        ..super::tests::v2(&v2.own_dir)
    };
    let cg = Guard(Some(
        Cgroup::create_in(vec![h], &unique("v2kill"), &CgroupLimits::default()).unwrap(),
    ));
    let path = cg.paths()[0].clone();
    destroy_kills_a_member(cg);
    assert!(!path.exists());
}

#[test]
fn create_marks_its_directories_refuses_duplicates_and_destroy_removes_them() {
    // T1 on a fake tree: no limits (a plain directory has no control files), one v1 hierarchy.
    let tmp = tempfile::tempdir().unwrap();
    let h = v1(tmp.path(), &[Controller::Pids]);
    let name = unique("fake");
    let cg = Cgroup::create_in(vec![h.clone()], &name, &CgroupLimits::default()).unwrap();
    let dir = tmp.path().join(PARENT_DIR).join(&name);
    assert_eq!(cg.paths(), std::slice::from_ref(&dir));
    let mut buf = [0u8; 64];
    let n = rustix::fs::getxattr(&dir, OWNER_XATTR, &mut buf).unwrap();
    let owner = OwnerMark::decode(std::str::from_utf8(&buf[..n]).unwrap()).unwrap();
    assert_eq!(
        owner,
        OwnerMark::current(),
        "the owner mark names this process"
    );
    let n = rustix::fs::getxattr(tmp.path().join(PARENT_DIR), PARENT_XATTR, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"parent");
    match Cgroup::create_in(vec![h], &name, &CgroupLimits::default()) {
        Err(CgroupError::AlreadyExists { path }) => assert_eq!(path, dir),
        other => panic!("a second sandbox must not share the cgroup: {other:?}"),
    }
    assert!(
        dir.exists(),
        "the failed create must not remove the existing cgroup"
    );
    cg.destroy(Duration::from_secs(1)).unwrap();
    assert!(!dir.exists());
    assert!(
        !tmp.path().join(PARENT_DIR).exists(),
        "an empty parent is removed too"
    );
}

#[test]
fn a_child_joining_through_the_join_files_is_in_the_cgroup_of_every_hierarchy_before_exec() {
    let Some(cg) = real_cgroup("joinfds", &CgroupLimits::default()) else {
        return;
    };
    let join = cg.join_fds().unwrap();
    assert_eq!(join.paths().len(), cg.paths().len());
    // What the child's own first instruction sees: it was moved before its exec.
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "cat /proc/self/cgroup; read _wait"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    crate::sys::fd::join_before_exec(&mut cmd, join.raw());
    let mut child = cmd.spawn().unwrap();
    let suffix = format!("/{PARENT_DIR}/{}", cg.name());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut inside = 0;
    for line in lines.by_ref().map_while(Result::ok) {
        inside += usize::from(line.ends_with(&suffix));
        if line.starts_with("0::") || line.starts_with("1:") {
            break;
        }
    }
    assert!(
        inside >= cg.paths().len(),
        "in {inside} of {} hierarchies",
        cg.paths().len()
    );
    for dir in cg.paths() {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert!(
            procs.lines().any(|p| p == child.id().to_string()),
            "{} does not hold {}: {procs}",
            dir.display(),
            child.id()
        );
    }
    drop(child.stdin.take());
    child.wait().unwrap();
    // A duplicate (the egress proxy's, in `run`) joins the same cgroup, also once the
    // original descriptors are closed.
    let dup = join.try_clone().unwrap();
    drop(join);
    let mut cmd = Command::new("/bin/cat");
    cmd.arg("/proc/self/cgroup").stdout(Stdio::piped());
    crate::sys::fd::join_before_exec(&mut cmd, dup.raw());
    let out = cmd.output().unwrap();
    let inside = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.ends_with(&suffix))
        .count();
    assert!(
        inside >= cg.paths().len(),
        "through the duplicate: in {inside} of {} hierarchies",
        cg.paths().len()
    );
    cg.destroy(Duration::from_secs(5)).unwrap();
}
