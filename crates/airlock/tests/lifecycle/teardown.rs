//! L6, issue 4 acceptance: `down` is idempotent and leaves nothing of the sandbox on the host
//! (processes, mounts, cgroups, sockets, directories); `clean` removes stale state it can prove
//! it owns and leaves everything else alone.

use std::time::Duration;

use super::{alive, cgroup_dirs, kill9, wait_until, Project};

#[test]
fn down_twice_succeeds_and_leaves_no_process_mount_cgroup_or_socket() {
    let p = Project::new();
    let up = p.up();
    let name = up["name"].as_str().unwrap().to_owned();
    let record = p.record(&name).expect("record after up");
    let guest = record["guest"]["pid"].as_u64().unwrap();
    let keeper = record["keeper"]["pid"].as_u64().unwrap();
    let init = record["backend_data"]["init"]["pid"].as_u64().unwrap();
    let instance = record["epoch"]["instance"].as_str().unwrap().to_owned();
    let socket = p
        .runtime_root()
        .join("sandboxes")
        .join(&name)
        .join("control.sock");
    assert!(socket.exists(), "no control socket at {}", socket.display());
    assert!(alive(guest) && alive(keeper) && alive(init));

    let run = p.run(&["down"]);
    run.assert_code(0);
    assert!(run.stdout.contains("removed sandbox"), "{}", run.stdout);
    let again = p.run(&["down"]);
    again.assert_code(0);
    assert!(again.stdout.contains("nothing to do"), "{}", again.stdout);

    for (what, pid) in [
        ("guest PID 1", guest),
        ("keeper", keeper),
        ("init stage", init),
    ] {
        assert!(!alive(pid), "the {what} (pid {pid}) survived down");
    }
    assert!(!socket.exists(), "the control socket survived down");
    assert!(!p.runtime_root().join("sandboxes").join(&name).exists());
    assert!(!p.state_root().join("sandboxes").join(&name).exists());
    // Nothing else either: the directory holds one entry per live sandbox (a root invoker's
    // scan cache once landed there and was counted as left behind).
    let left: Vec<_> = std::fs::read_dir(p.runtime_root().join("sandboxes"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "left in the runtime sandboxes directory: {left:?}"
    );
    assert!(
        cgroup_dirs(&instance).is_empty(),
        "cgroup left: {:?}",
        cgroup_dirs(&instance)
    );
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let world = p.env.root().to_string_lossy().into_owned();
    assert!(
        !mountinfo.contains(&world),
        "a mount of the test world survived"
    );
    let status = p.run(&["status", "--json"]);
    status.assert_code(1);
    assert_eq!(status.json()["health"], "absent");
}

#[test]
fn killing_pid1_makes_status_not_ready_and_up_recovers() {
    let p = Project::new();
    let up = p.up();
    let guest = up["guest"]["pid"].as_u64().unwrap();
    kill9(guest);
    let not_ready = wait_until(Duration::from_secs(10), || p.health() != "ready");
    assert!(not_ready, "status still says ready after PID 1 was killed");
    let status = p.run(&["status", "--json"]);
    status.assert_code(1);
    let health = status.json()["health"].as_str().unwrap().to_owned();
    assert!(
        ["failed", "stopped", "stale"].contains(&health.as_str()),
        "health {health}"
    );
    let again = p.up();
    assert_eq!(again["reused"], false);
    assert_ne!(again["epoch"], up["epoch"]);
    p.run(&["status"]).assert_code(0);
    p.run(&["exec", "--", "true"]).assert_code(0);
}

#[test]
fn clean_frees_a_stale_sandbox_and_leaves_unmarked_directories_alone() {
    let p = Project::new();
    let up = p.up();
    let name = up["name"].as_str().unwrap().to_owned();
    let keeper = p.record(&name).unwrap()["keeper"]["pid"].as_u64().unwrap();
    kill9(keeper);
    assert!(wait_until(Duration::from_secs(10), || p.health() == "stale"));
    let foreign = p.state_root().join("sandboxes").join("not-ours");
    std::fs::create_dir_all(&foreign).unwrap();

    let run = p.run(&["clean", "--json"]);
    run.assert_code(0);
    let doc = run.json();
    let cleaned: Vec<&str> = doc["cleaned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cleaned, [name.as_str()], "{doc}");
    let unmanaged = doc["unmanaged"].to_string();
    assert!(unmanaged.contains("not-ours"), "{doc}");
    assert!(
        foreign.exists(),
        "clean removed a directory without our marker"
    );
    assert_eq!(p.health(), "absent");
    assert!(!alive(up["guest"]["pid"].as_u64().unwrap()));
}

#[test]
fn ls_lists_every_sandbox_with_its_health() {
    let p = Project::new();
    let run = p.run(&["ls", "--json"]);
    run.assert_code(0);
    assert_eq!(run.json()["sandboxes"].as_array().unwrap().len(), 0);
    let up = p.up();
    let run = p.run(&["ls", "--json"]);
    run.assert_code(0);
    let doc = run.json();
    let items = doc["sandboxes"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{doc}");
    assert_eq!(items[0]["name"], up["name"]);
    assert_eq!(items[0]["health"], "ready");
    assert!(items[0]["disk_bytes"].is_u64());
    let human = p.run(&["ls"]);
    assert!(human.stdout.contains(up["name"].as_str().unwrap()) && human.stdout.contains("ready"));
}

#[test]
fn the_control_socket_key_and_records_are_private_to_the_user() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    let up = p.up();
    let name = up["name"].as_str().unwrap().to_owned();
    let instance = p.record(&name).unwrap()["epoch"]["instance"]
        .as_str()
        .unwrap()
        .to_owned();
    let runtime = p.runtime_root().join("sandboxes").join(&name);
    let state = p.state_root().join("sandboxes").join(&name);
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    for dir in [&runtime, &runtime.join(&instance), &state] {
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
    }
    for file in [
        runtime.join(&instance).join("key"),
        state.join("start.json"),
        state.join("keeper.log"),
        p.state_root().join("lifecycle/sandboxes").join(&name),
    ] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    // The key never appears in what airlock prints or records.
    let key = std::fs::read(runtime.join(&instance).join("key")).unwrap();
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let status = p.run(&["status", "--json"]).stdout;
    let record =
        std::fs::read_to_string(p.state_root().join("lifecycle/sandboxes").join(&name)).unwrap();
    assert!(!status.contains(&hex) && !record.contains(&hex));
}

#[test]
fn down_never_signals_a_process_that_merely_reuses_a_recorded_pid() {
    let p = Project::new();
    let up = p.up();
    let name = up["name"].as_str().unwrap().to_owned();
    let keeper = p.record(&name).unwrap()["keeper"]["pid"].as_u64().unwrap();
    kill9(keeper);
    assert!(wait_until(Duration::from_secs(10), || !alive(
        up["guest"]["pid"].as_u64().unwrap()
    )));
    // An unrelated process now holds the pids the record names (as after pid reuse).
    let mut bystander = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let path = p.state_root().join("lifecycle/sandboxes").join(&name);
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for who in ["keeper", "guest"] {
        doc["data"][who]["pid"] = bystander.id().into();
    }
    doc["data"]["backend_data"]["init"]["pid"] = bystander.id().into();
    std::fs::write(&path, doc.to_string()).unwrap();

    p.run(&["down"]).assert_code(0);
    assert!(alive(u64::from(bystander.id())), "down killed a bystander");
    assert_eq!(p.health(), "absent");
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}

/// The one directory under `<state>/runs` that carries a run owner marker, once there is one.
fn run_dir(p: &Project) -> Option<std::path::PathBuf> {
    let entries = std::fs::read_dir(p.state_root().join("runs")).ok()?;
    entries
        .flatten()
        .map(|e| e.path())
        .find(|d| d.join(".airlock-run-owner").exists())
}

#[test]
fn clean_removes_the_state_of_a_killed_run_and_never_a_live_runs() {
    let p = Project::new();
    // A request first: the run's state directory (its audit log) exists once its proxy does,
    // which starts at the first connection.
    let mut child = p
        .command(&[
            "run",
            "--",
            "sh",
            "-c",
            "curl -s -m 20 -o /dev/null http://denied.test/; exec sleep 300",
        ])
        .spawn()
        .expect("spawn airlock run");
    let started = wait_until(Duration::from_secs(30), || run_dir(&p).is_some());
    let dir = run_dir(&p);
    if !started {
        let _ = child.kill();
        let out = child.wait_with_output().expect("wait for run");
        panic!("run made no state directory: {out:?}");
    }
    let dir = dir.expect("run dir");
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();

    // A live run: its directory stays, and clean says why it left it.
    let live = p.run(&["clean", "--json"]);
    live.assert_code(0);
    let doc = live.json();
    assert!(dir.exists(), "clean removed a live run's directory");
    assert_eq!(doc["runs"], serde_json::json!([]), "{doc}");
    let skipped = doc["skipped"].to_string();
    assert!(skipped.contains(&id), "live run not reported: {doc}");

    // SIGKILL: the run cannot clean up after itself; its directory is left behind.
    kill9(u64::from(child.id()));
    child.wait().expect("reap airlock run");
    assert!(
        dir.exists(),
        "the killed run's directory vanished on its own"
    );

    // An unmarked directory beside it is not ours to remove.
    let stranger = p.state_root().join("runs").join("not-airlocks");
    std::fs::create_dir(&stranger).unwrap();

    let run = p.run(&["clean", "--json"]);
    run.assert_code(0);
    let doc = run.json();
    assert!(!dir.exists(), "clean left the killed run's directory");
    let removed: Vec<&str> = doc["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(removed, [id.as_str()], "{doc}");
    assert!(stranger.exists(), "clean removed an unmarked directory");
    assert!(
        doc["unmanaged"].to_string().contains("not-airlocks"),
        "{doc}"
    );
    let human = p.run(&["clean"]);
    assert!(human.stdout.contains("unmanaged"), "{}", human.stdout);
}

#[test]
fn ls_reports_a_corrupt_record_as_corrupt_and_lists_the_rest() {
    let p = Project::new();
    let up = p.up();
    let store = p.env.state_home().join("airlock/lifecycle/sandboxes");
    let broken = store.join("broken-1");
    std::fs::write(&broken, b"{ not a record").unwrap();
    // Removed before `p` runs `down` on drop, so even a failing assertion leaks no sandbox.
    let _cleanup = RemoveOnDrop(broken.clone());
    let run = p.run(&["ls", "--json"]);
    run.assert_code(0);
    let doc = run.json();
    let items = doc["sandboxes"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{doc}");
    let corrupt = items
        .iter()
        .find(|i| i["name"] == "broken-1")
        .expect("listed");
    assert_eq!(corrupt["health"], "corrupt", "{doc}");
    assert_eq!(corrupt["file"], broken.to_string_lossy().as_ref());
    let ours = items
        .iter()
        .find(|i| i["name"] == up["name"])
        .expect("listed");
    assert_eq!(ours["health"], "ready", "{doc}");
    let human = p.run(&["ls"]);
    human.assert_code(0);
    assert!(
        human
            .stdout
            .lines()
            .any(|l| l.contains("broken-1") && l.contains("corrupt") && l.contains("broken-1")),
        "{}",
        human.stdout
    );
}

struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A small tmpfs mounted over the test world's state directory; unmounted on drop.
struct FullableState {
    mount: std::path::PathBuf,
}

impl FullableState {
    fn mount(at: &std::path::Path) -> FullableState {
        std::fs::create_dir_all(at).unwrap();
        let out = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                "size=8m,mode=0700",
                "airlock-full-test",
            ])
            .arg(at)
            .output()
            .expect("spawn mount");
        assert!(out.status.success(), "mount tmpfs: {out:?}");
        FullableState {
            mount: at.to_path_buf(),
        }
    }

    /// Writes a file until the filesystem has zero free bytes.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.mount.join("filler")).unwrap();
        let chunk = vec![0u8; 4096];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                    break;
                }
            }
        }
        // Fill the last partial page too.
        while f.write(&[0u8]).is_ok_and(|n| n == 1) {}
        // `stat -f` %a: free blocks available to unprivileged users (statfs f_bavail).
        let out = std::process::Command::new("stat")
            .args(["-f", "-c", "%a"])
            .arg(&self.mount)
            .output()
            .expect("spawn stat");
        let free = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert_eq!(free, "0", "the state filesystem still has free blocks");
    }

    fn make_room(&self) {
        std::fs::remove_file(self.mount.join("filler")).unwrap();
    }
}

impl Drop for FullableState {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.mount)
            .status();
    }
}

/// 9.11: stopping and discarding a sandbox works on a state disk with zero free bytes (the
/// `down` path writes nothing it cannot do without), and the state works again once space
/// returns.
#[test]
fn down_on_a_full_state_disk_stops_the_sandbox_and_removes_it() {
    if !airlock_testkit::needs_root("mounting a small tmpfs as the state directory") {
        return;
    }
    let p = Project::new();
    let state = FullableState::mount(&p.env.state_home());
    let up = p.up();
    let name = up["name"].as_str().unwrap().to_owned();
    let record = p.record(&name).expect("record after up");
    let keeper = record["keeper"]["pid"].as_u64().unwrap();
    let guest = record["guest"]["pid"].as_u64().unwrap();
    let instance = record["epoch"]["instance"].as_str().unwrap().to_owned();
    // Should an assertion fail, the sandbox must not outlive the test.
    struct StopKeeper(u64);
    impl Drop for StopKeeper {
        fn drop(&mut self) {
            if alive(self.0) {
                kill9(self.0);
            }
        }
    }
    let _stop = StopKeeper(keeper);

    state.fill();
    let down = p.run(&["down"]);
    down.assert_code(0);
    assert!(
        !alive(keeper) && !alive(guest),
        "down left the sandbox running"
    );
    assert!(cgroup_dirs(&instance).is_empty(), "down left the cgroup");
    assert!(!p.state_root().join("sandboxes").join(&name).exists());
    assert!(p.record(&name).is_none(), "down left the record");

    state.make_room();
    let again = p.up();
    assert_eq!(again["name"], up["name"]);
    p.run(&["down"]).assert_code(0);
}

/// 9.10: a persistent sandbox's egress proxy (the keeper's child, started by the first
/// connection) lives in the sandbox's cgroup, next to the init stage, so a connection flood
/// from inside costs the sandbox; `down` ends it.
#[test]
fn the_keepers_egress_proxy_runs_in_the_sandbox_cgroup() {
    if !airlock_testkit::needs_root("creating the sandbox's cgroup") {
        return;
    }
    let p = Project::new();
    let up = p.up();
    let name = up["name"].as_str().unwrap().to_owned();
    let record = p.record(&name).expect("record after up");
    let keeper = record["keeper"]["pid"].as_u64().unwrap();
    let init = record["backend_data"]["init"]["pid"].as_u64().unwrap();
    let proxies = || {
        let mut proxies = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{keeper}/task"))
            .unwrap()
            .flatten()
        {
            let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in list.split_whitespace() {
                let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmdline).contains("__proxy") {
                    proxies.push(child.to_owned());
                }
            }
        }
        proxies
    };
    // The first connection to the proxy's port starts it.
    p.run(&[
        "exec",
        "--",
        "sh",
        "-c",
        "curl -s -m 5 -o /dev/null http://127.0.0.1:3128/; true",
    ])
    .assert_code(0);
    let started = proxies();
    let cgroup_of = |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let sandbox = cgroup_of(&init.to_string());
    let proxy = started.first().map(|pid| cgroup_of(pid));
    p.run(&["down"]).assert_code(0);
    for pid in &started {
        assert!(!alive(pid.parse().unwrap()), "down left the proxy {pid}");
    }
    assert!(
        sandbox.contains("/airlock/"),
        "init not in an airlock cgroup: {sandbox}"
    );
    assert_eq!(
        proxy.as_deref(),
        Some(sandbox.as_str()),
        "the keeper's proxy is outside the sandbox's cgroup"
    );
}

/// 9.10: `exec` of a command that fills a persistent sandbox's memory reports
/// "out of memory (memory_mb = N)" and 137, never 70 "a bug in airlock".
#[test]
fn exec_of_a_command_that_fills_memory_is_reported_out_of_memory_with_137() {
    if !airlock_testkit::needs_root("creating the sandbox's memory cgroup") {
        return;
    }
    let p = Project::new();
    p.run(&["up", "--no-attach", "--memory-mb", "256"])
        .assert_code(0);
    let hog = "echo hog-started; python3 -c 'x = bytearray(4 << 30); print(len(x))'";
    let run = p.run(&["exec", "--", "sh", "-c", hog]);
    p.run(&["down"]).assert_code(0);
    assert!(run.stdout.starts_with("hog-started"), "{run:?}");
    assert_eq!(run.code, Some(137), "{run:?}");
    assert!(
        run.stderr.contains("out of memory (memory_mb = 256)"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("bug in airlock"), "{}", run.stderr);
}

/// The harness itself: a test that fails after `up` leaves nothing running, because dropping
/// its world brings down every sandbox recorded in it (keeper, PID 1 and all).
#[test]
fn a_test_that_fails_after_up_leaves_no_keeper_or_sandbox_running() {
    let env = crate::common::TestEnv::new();
    let dir = env.git_project("proj");
    let up = env.run_in(&dir, &["up", "--no-attach", "--json"]);
    up.assert_code(0);
    let name = up.json()["name"].as_str().unwrap().to_owned();
    let path = env
        .state_home()
        .join("airlock/lifecycle/sandboxes")
        .join(&name);
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let keeper = record["data"]["keeper"]["pid"].as_u64().unwrap();
    let guest = record["data"]["guest"]["pid"].as_u64().unwrap();
    assert!(alive(keeper) && alive(guest));
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _world = env;
        panic!("an assertion of the test failed");
    }));
    assert!(failed.is_err());
    assert!(
        wait_until(Duration::from_secs(10), || !alive(keeper) && !alive(guest)),
        "the keeper ({keeper}) or PID 1 ({guest}) outlived the failed test's world"
    );
}
