//! L1: reuse keeps the epoch; a different plan is refused with the field named; exec works in
//! the ready sandbox and returns the guest's status.

use super::{wait_until, Project};
use std::time::Duration;

/// A user config with one mount of `data`, read-only or not.
fn mount_config(data: &std::path::Path, read_only: bool) -> String {
    format!(
        "[[mount]]\nname = \"data\"\npath = \"{}\"\nread_only = {read_only}\n",
        data.display()
    )
}

#[test]
fn up_twice_reuses_the_sandbox_and_keeps_its_epoch() {
    let p = Project::new();
    let first = p.up();
    assert_eq!(first["reused"], false, "{first}");
    let second = p.up();
    assert_eq!(second["reused"], true, "{second}");
    assert_eq!(first["epoch"], second["epoch"]);
    assert_eq!(first["guest"]["pid"], second["guest"]["pid"]);
    let status = p.run(&["status", "--json"]);
    status.assert_code(0);
    let doc = status.json();
    assert_eq!(doc["health"], "ready");
    assert_eq!(doc["epoch"], first["epoch"]);
    assert_eq!(doc["operation"]["kind"], "up");
    assert_eq!(doc["operation"]["result"], "succeeded");
}

/// Renamed from `up_prints_preparation_provisioning_and_total_time_on_one_line`: `up` printed
/// "provisioned in 0 ms" without provisioning or measuring anything. Until provisioning
/// exists it prints the one time it measures, and claims no other.
#[test]
fn up_prints_its_measured_time_and_no_provisioning_time_it_did_not_measure() {
    let p = Project::new();
    let run = p.run(&["up", "--no-attach"]);
    run.assert_code(0);
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("ready in "))
        .unwrap_or_else(|| panic!("no timing line in {:?}", run.stdout));
    assert!(line.contains(" ms"), "{line}");
    assert!(!run.stdout.contains("provisioned in"), "{}", run.stdout);
    let v = p.up();
    assert!(v["timings"]["total_ms"].is_u64(), "{v}");
    assert!(v["timings"].get("provision_ms").is_none(), "{v}");
    assert!(v["timings"].get("prepare_ms").is_none(), "{v}");
}

#[test]
fn a_changed_mount_is_refused_naming_the_mount_and_airlock_down() {
    let p = Project::new();
    let data = p.env.dir("data");
    let config = |ro: bool| mount_config(&data, ro);
    p.env.write_user_config(&config(true));
    let first = p.up();
    p.env.write_user_config(&config(false));
    let run = p.run(&["up", "--no-attach"]);
    run.assert_code(1);
    let mount_field = format!("mount {}", data.display());
    assert!(run.stderr.contains(&mount_field), "{}", run.stderr);
    assert!(run.stderr.contains("read-only") && run.stderr.contains("read-write"));
    assert!(run.stderr.contains("airlock down"), "{}", run.stderr);
    // The running sandbox was not replaced.
    assert_eq!(p.status()["epoch"], first["epoch"]);
}

#[test]
fn exec_returns_the_guest_status_and_runs_in_the_workspace() {
    let p = Project::new();
    p.up();
    p.run(&["exec", "--", "sh", "-c", "exit 7"]).assert_code(7);
    p.run(&["exec", "--", "sh", "-c", "kill -TERM $$"])
        .assert_code(143);
    let run = p.run(&["exec", "--", "pwd"]);
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), p.dir.to_string_lossy());
    let run = p.run(&[
        "exec",
        "-e",
        "GREETING=hi there",
        "--",
        "sh",
        "-c",
        "echo $GREETING",
    ]);
    assert_eq!(run.stdout.trim(), "hi there");
}

/// SIGTERM sent to `exec` (no stdin, no terminal: its relay thread starts only once the
/// request is out) reaches the command, and `exec` returns the command's status, 143.
#[test]
fn signals_to_exec_are_forwarded_to_the_command() {
    use std::io::{BufRead, BufReader};
    let p = Project::new();
    p.up();
    let mut child = p
        .command(&["exec", "--", "sh", "-c", "echo up; exec sleep 30"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "up");
    let st = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    assert!(
        wait_until(Duration::from_secs(10), || child
            .try_wait()
            .unwrap()
            .is_some()),
        "the command outlived the signal"
    );
    assert_eq!(child.wait().unwrap().code(), Some(143));
}

/// Regression: `exec --json` printed `null` after the guest's own output, so a caller reading
/// stdout got bytes the command never wrote.
#[test]
fn exec_with_json_leaves_stdout_to_the_guest() {
    let p = Project::new();
    p.up();
    let run = p.run(&["--json", "exec", "--", "echo", "hi"]);
    run.assert_code(0);
    assert_eq!(run.stdout, "hi\n");
    let run = p.run(&["--json", "exec", "--", "sh", "-c", "exit 3"]);
    run.assert_code(3);
    assert_eq!(run.stdout, "");
}

#[test]
fn background_processes_of_an_exec_keep_running_after_it_returns() {
    let p = Project::new();
    p.up();
    p.run(&["exec", "--", "sh", "-c", "sleep 300 >/dev/null 2>&1 &"])
        .assert_code(0);
    p.run(&[
        "exec",
        "-d",
        "--",
        "sh",
        "-c",
        "echo detached > /tmp/marker; exec sleep 301",
    ])
    .assert_code(0);
    let seen = wait_until(Duration::from_secs(10), || {
        let ps = p.run(&["exec", "--", "ps", "-eo", "args"]);
        ps.stdout.contains("sleep 300") && ps.stdout.contains("sleep 301")
    });
    assert!(seen, "{}", p.run(&["exec", "--", "ps", "-ef"]).stdout);
    let run = p.run(&["exec", "--", "cat", "/tmp/marker"]);
    assert_eq!(run.stdout.trim(), "detached");
}

#[test]
fn exec_into_an_absent_sandbox_fails_with_the_next_action() {
    let p = Project::new();
    let run = p.run(&["exec", "--", "true"]);
    run.assert_code(1);
    assert!(
        run.stderr.contains("absent") && run.stderr.contains("airlock up"),
        "{}",
        run.stderr
    );
}

/// The command line of process `pid` in the sandbox. `exec -d` returns once the command's
/// `execve` is past its point of no return (its close-on-exec descriptors are closed), which
/// is a moment before the kernel records the new arguments: until then `cmdline` reads empty.
fn cmdline_of(p: &Project, pid: u64) -> String {
    let mut cmdline = String::new();
    wait_until(Duration::from_secs(10), || {
        let run = p.run(&["exec", "--", "cat", &format!("/proc/{pid}/cmdline")]);
        run.assert_code(0);
        cmdline = run.stdout;
        !cmdline.is_empty()
    });
    cmdline
}

/// Regression: `exec -d` printed nothing, so there was no handle on what it started.
#[test]
fn exec_detached_prints_the_process_id_and_json_gives_it() {
    let p = Project::new();
    p.up();
    let run = p.run(&["exec", "-d", "--", "sleep", "302"]);
    run.assert_code(0);
    let pid: u64 = run
        .stdout
        .split_whitespace()
        .skip_while(|w| *w != "pid")
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {:?}", run.stdout));
    assert_eq!(cmdline_of(&p, pid), "sleep\x00302\x00");
    let run = p.run(&["--json", "exec", "-d", "--", "sleep", "303"]);
    run.assert_code(0);
    let v = run.json();
    assert_eq!(v["detached"], true, "{v}");
    let pid = v["pid"].as_u64().unwrap_or_else(|| panic!("no pid in {v}"));
    assert_eq!(cmdline_of(&p, pid), "sleep\x00303\x00");
}

#[test]
fn a_detached_command_that_cannot_start_is_reported() {
    let p = Project::new();
    p.up();
    let run = p.run(&["exec", "-d", "--", "no-such-command-anywhere"]);
    run.assert_code(1);
    assert!(
        run.stderr.contains("no-such-command-anywhere"),
        "{}",
        run.stderr
    );
}

#[test]
fn exec_root_is_root_of_the_sandbox_only() {
    let p = Project::new();
    p.up();
    let run = p.run(&["exec", "--root", "--", "id", "-u"]);
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), "0");
    let run = p.run(&["exec", "--", "id", "-u"]);
    run.assert_code(0);
    assert_ne!(run.stdout.trim(), "0");
    // Root inside cannot act on the host: its uid 0 maps to an unprivileged host id.
    let run = p.run(&["exec", "--root", "--", "cat", "/proc/self/uid_map"]);
    run.assert_code(0);
    let first = run.stdout.lines().next().unwrap_or_default().to_owned();
    let fields: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(fields.first(), Some(&"0"), "{first}");
    assert_ne!(
        fields.get(1),
        Some(&"0"),
        "sandbox root is host root: {first}"
    );
}

#[test]
fn exec_streams_stdin_with_i_and_honours_w() {
    use std::io::Write;
    let p = Project::new();
    p.up();
    std::fs::create_dir(p.dir.join("sub")).unwrap();
    let mut child = p
        .command(&["exec", "-i", "--", "cat"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"one\ntwo\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\ntwo\n");
    let run = p.run(&["exec", "-w", "sub", "--", "pwd"]);
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), p.dir.join("sub").to_string_lossy());
    p.run(&["exec", "-w", "/proc/self/fd/3", "--", "pwd"])
        .assert_code(2);
}

/// Every path under `root` with its kind, mode and, for regular files, mtime and content
/// (sockets and fifos are listed, never opened).
fn world(root: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let kind = meta.file_type();
            let mode = meta.mode() & 0o7777;
            let desc = if kind.is_dir() {
                stack.push(path.clone());
                format!("dir {mode:o}")
            } else if kind.is_file() {
                let content = std::fs::read(&path).expect("read file");
                format!("file {mode:o} {} {content:?}", meta.mtime())
            } else if kind.is_socket() || kind.is_fifo() {
                format!("special {mode:o}")
            } else {
                format!("other {mode:o} {:?}", std::fs::read_link(&path).ok())
            };
            out.insert(path, desc);
        }
    }
    out
}

#[test]
fn plan_lists_each_field_a_running_sandbox_differs_in_and_changes_nothing() {
    let p = Project::new();
    let data = p.env.dir("data");
    let config = |ro: bool| mount_config(&data, ro);
    p.env.write_user_config(&config(true));
    let first = p.up();

    // Same plan: plan says `up` would reuse it.
    let same = p.run(&["plan", "--json"]);
    same.assert_code(0);
    let doc = same.json();
    assert_eq!(doc["running_sandbox"]["verdict"], "reuse", "{doc}");
    assert_eq!(doc["running_sandbox"]["health"], "ready", "{doc}");
    let human = p.run(&["plan"]);
    assert!(human.stdout.contains("would reuse it"), "{}", human.stdout);

    p.env.write_user_config(&config(false));
    let before = world(p.env.root());
    let run = p.run(&["plan"]);
    run.assert_code(0);
    let mount_field = format!("mount {}", data.display());
    let line = run
        .stdout
        .lines()
        .find(|l| l.contains(&mount_field))
        .unwrap_or_else(|| panic!("no {mount_field} line in:\n{}", run.stdout));
    assert!(
        line.contains("read-only") && line.contains("read-write"),
        "{line}"
    );
    assert!(
        run.stdout.contains("would refuse") && run.stdout.contains("airlock down"),
        "{}",
        run.stdout
    );
    let json = p.run(&["plan", "--json"]);
    json.assert_code(0);
    let running = &json.json()["running_sandbox"];
    assert_eq!(running["verdict"], "refuse", "{running}");
    let diffs = running["differences"].as_array().expect("differences");
    assert_eq!(diffs.len(), 1, "{running}");
    assert_eq!(diffs[0]["field"], mount_field.as_str());
    assert!(diffs[0]["recorded"].as_str().unwrap().contains("read-only"));
    assert!(diffs[0]["planned"].as_str().unwrap().contains("read-write"));
    // Nothing anywhere changed, and the sandbox is the same one.
    let after = world(p.env.root());
    let changed: Vec<_> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(v))
        .map(|(k, _)| k.display().to_string())
        .chain(
            after
                .keys()
                .filter(|k| !before.contains_key(*k))
                .map(|k| format!("created {}", k.display())),
        )
        .collect();
    assert!(changed.is_empty(), "plan changed: {changed:?}");
    assert_eq!(p.status()["epoch"], first["epoch"]);
}

#[test]
fn plan_without_a_sandbox_says_up_would_create_one() {
    let p = Project::new();
    let run = p.run(&["plan", "--json"]);
    run.assert_code(0);
    assert_eq!(run.json()["running_sandbox"]["verdict"], "absent");
}
