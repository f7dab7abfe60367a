//! P1, P2, P3, L7: provisioning on every `up`, in order, inside the sandbox; a failing step
//! named; a failed re-provision leaving the sandbox ready; Ctrl+C during a step; the package
//! cache surviving `down`.

use std::time::Duration;

use super::{wait_until, Project};

fn write_user_script(p: &Project, text: &str) {
    let path = p.env.config_home().join("airlock/provision.sh");
    p.env.write(&path, text);
}

fn write_project_script(p: &Project, text: &str) {
    p.env.write(&p.dir.join(".airlock/provision.sh"), text);
}

/// `up --no-attach`, returning (exit code, stderr).
fn up(p: &Project) -> (Option<i32>, String) {
    let out = p.command(&["up", "--no-attach"]).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn provisioning_runs_inside_in_order_on_fresh_and_retained_up() {
    let p = Project::new();
    // Each script appends to a file in the workspace, found through an `[env]` variable: the
    // order and the count are visible on the host; `hostname` and `id -u` prove the scripts ran
    // inside the sandbox as the sandbox user.
    let log = p.dir.join("order.log");
    p.env.write_user_config(&format!(
        "[env.vars]\nPROVISION_LOG = \"{}\"\n",
        log.display()
    ));
    write_user_script(
        &p,
        "#!/bin/sh\necho \"user $(hostname) $(id -u)\" >> \"$PROVISION_LOG\"\necho user-out\n",
    );
    write_project_script(&p, "echo \"project $(pwd)\" >> \"$PROVISION_LOG\"\n");

    let out = p.command(&["up", "--no-attach"]).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("[user-script] user-out"), "{stderr}");
    // L3: the provisioning time is measured and printed.
    assert!(stdout.contains("ms, provisioning "), "{stdout}");
    let (code, stderr) = up(&p);
    assert_eq!(code, Some(0), "retained up: {stderr}");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    for pair in lines.chunks(2) {
        assert!(pair[0].starts_with("user airlock "), "{text}");
        assert!(!pair[0].ends_with(" 0"), "ran as root: {text}");
        assert_eq!(pair[1], format!("project {}", p.dir.display()), "{text}");
    }
}

#[test]
fn failing_step_names_its_phase_owner_and_workspace_and_keeps_its_output() {
    let p = Project::new();
    write_project_script(&p, "echo about-to-fail >&2\nexit 7\n");
    let (code, stderr) = up(&p);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("[project-script] about-to-fail"),
        "{stderr}"
    );
    let script = p.dir.join(".airlock/provision.sh");
    assert!(stderr.contains("project-script"), "{stderr}");
    assert!(stderr.contains(&script.display().to_string()), "{stderr}");
    assert!(
        stderr.contains(&format!("workspace {}", p.dir.display())),
        "{stderr}"
    );
    assert!(stderr.contains("status 7"), "{stderr}");
    // P3: the sandbox is ready all the same; the failure is the operation's.
    let doc = p.status();
    assert_eq!(doc["health"], "ready", "{doc}");
    assert_eq!(doc["operation"]["result"], "failed", "{doc}");
    assert_eq!(
        doc["operation"]["phase"], "provision:project-script",
        "{doc}"
    );
}

#[test]
fn failed_reprovision_of_a_ready_sandbox_leaves_it_ready_and_the_next_up_recovers() {
    let p = Project::new();
    let first = p.up();
    write_project_script(&p, "exit 3\n");
    let (code, stderr) = up(&p);
    assert_eq!(code, Some(1), "{stderr}");
    let doc = p.status();
    assert_eq!(doc["health"], "ready", "{doc}");
    assert_eq!(doc["operation"]["result"], "failed", "{doc}");
    write_project_script(&p, "true\n");
    let again = p.up();
    assert_eq!(again["epoch"], first["epoch"], "the sandbox was kept");
}

#[test]
fn ctrl_c_during_a_step_stops_it_keeps_the_sandbox_and_exits_130() {
    let p = Project::new();
    let marker = p.dir.join("step-started");
    write_project_script(&p, &format!("touch {}\nsleep 600\n", marker.display()));
    let child = p.command(&["up", "--no-attach"]).spawn().unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || marker.exists()),
        "the step never started"
    );
    let st = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("already ready and is kept"), "{stderr}");
    assert!(stderr.contains("project-script"), "{stderr}");
    let doc = p.status();
    assert_eq!(doc["health"], "ready", "{doc}");
    assert_eq!(doc["operation"]["result"], "cancelled", "{doc}");
    // The step's process is gone: nothing inside still sleeps.
    let ps = p.run(&[
        "exec",
        "--",
        "sh",
        "-c",
        "ps -eo args 2>/dev/null || ls /proc",
    ]);
    assert!(!ps.stdout.contains("sleep 600"), "{}", ps.stdout);
}

#[test]
fn package_cache_is_per_project_and_survives_down() {
    let p = Project::new();
    p.up();
    let run = p.run(&[
        "exec",
        "--",
        "sh",
        "-c",
        "mkdir -p \"$PIP_CACHE_DIR\" && echo kept > \"$PIP_CACHE_DIR/probe\" && echo $PIP_CACHE_DIR $CARGO_HOME $npm_config_cache",
    ]);
    run.assert_code(0);
    assert_eq!(
        run.stdout.trim(),
        "/var/cache/airlock/pip /var/cache/airlock/cargo /var/cache/airlock/npm"
    );
    p.run(&["down"]).assert_code(0);
    let projects = p.env.cache_home().join("airlock/projects");
    let dirs: Vec<_> = std::fs::read_dir(&projects).unwrap().flatten().collect();
    assert_eq!(dirs.len(), 1, "one cache directory for the project");
    assert!(
        dirs[0].path().join("pip/probe").is_file(),
        "the cache lost its file on down"
    );
    p.up();
    let run = p.run(&["exec", "--", "cat", "/var/cache/airlock/pip/probe"]);
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), "kept");
}

#[test]
fn up_killed_during_provisioning_is_recorded_interrupted_and_the_next_up_recovers() {
    let p = Project::new();
    let log = p.dir.join("runs.log");
    write_project_script(&p, &format!("echo ran >> {}\n", log.display()));
    let out = p
        .command(&["up", "--no-attach"])
        .env("AIRLOCK_TEST_CRASH_AT", "provision:project-script")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        None,
        "up was not aborted: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = p.status();
    assert_eq!(doc["health"], "ready", "the sandbox was ready: {doc}");
    assert_eq!(doc["operation"]["result"], "interrupted", "{doc}");
    assert_eq!(
        doc["operation"]["phase"], "provision:project-script",
        "{doc}"
    );
    assert!(!log.exists(), "the step ran although up died before it");
    let up = p.up();
    assert_eq!(up["reused"], true, "{up}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "ran\n");
    assert_eq!(p.status()["operation"]["result"], "succeeded");
}

#[test]
fn packages_in_the_host_image_are_refused_at_plan_time_for_an_unprivileged_user() {
    let p = Project::new();
    p.env.write_project_config(&p.dir, "packages = [\"jq\"]\n");
    let Some(run) = p.env.run_as_test_user_in(&p.dir, &["plan"]) else {
        crate::common::skip_without_test_user();
        return;
    };
    run.assert_code(2);
    assert!(
        run.stderr.contains("`packages` (jq) cannot be installed"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("directory image"), "{}", run.stderr);
    let Some(up) = p.env.run_as_test_user_in(&p.dir, &["up", "--no-attach"]) else {
        return;
    };
    up.assert_code(2);
    assert!(up.stderr.contains("cannot be installed"), "{}", up.stderr);
    assert!(
        !up.stderr.contains("starting the sandbox"),
        "refused after a side effect"
    );
}

/// C7: the project's provision script is hostile input to the host — a link is never followed
/// (not even to a file the user could read), and an oversized script is refused, both before
/// anything starts.
#[test]
fn linked_or_oversized_project_scripts_are_refused_before_any_side_effect() {
    let p = Project::new();
    let outside = p
        .env
        .write(&p.env.root().join("outside.sh"), "echo followed\n");
    std::fs::create_dir_all(p.dir.join(".airlock")).unwrap();
    std::os::unix::fs::symlink(&outside, p.dir.join(".airlock/provision.sh")).unwrap();
    let (code, stderr) = up(&p);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("provision.sh"), "{stderr}");
    assert!(!stderr.contains("starting the sandbox"), "{stderr}");
    assert_eq!(p.status()["health"], "absent");

    std::fs::remove_file(p.dir.join(".airlock/provision.sh")).unwrap();
    let big = format!("{}\n", "#".repeat(70 * 1024));
    write_project_script(&p, &big);
    let (code, stderr) = up(&p);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("provision.sh"), "{stderr}");
    assert!(!stderr.contains("starting the sandbox"), "{stderr}");
}

/// T4: an unprivileged invoker's sandbox provisions too: the scripts run as its sandbox user
/// and the package cache is its own private directory.
#[test]
fn unprivileged_invoker_provisions_with_its_own_cache() {
    let p = Project::new();
    let log = p.dir.join("ran.log");
    write_project_script(
        &p,
        &format!(
            "id -u > {}\necho $PIP_CACHE_DIR >> {}\n",
            log.display(),
            log.display()
        ),
    );
    let Some(up) = p.env.run_as_test_user_in(&p.dir, &["up", "--no-attach"]) else {
        crate::common::skip_without_test_user();
        return;
    };
    up.assert_code(0);
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_ne!(lines[0], "0", "the script ran as root: {text}");
    assert_eq!(lines[1], "/var/cache/airlock/pip", "{text}");
    use std::os::unix::fs::MetadataExt;
    let projects = p.env.cache_home().join("airlock/projects");
    let cache = std::fs::read_dir(&projects)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let meta = std::fs::metadata(&cache).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o700, "{}", cache.display());
    assert_eq!(Some(meta.uid()), crate::common::test_user().map(|(u, _)| u));
    p.env
        .run_as_test_user_in(&p.dir, &["down"])
        .unwrap()
        .assert_code(0);
}
