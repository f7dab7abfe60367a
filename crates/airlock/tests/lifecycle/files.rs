//! `airlock push` / `airlock pull` against a running sandbox (PRODUCT F1–F6, issue 11). The
//! sandbox is the attacker here: it plants links in both destinations, races the walk of a
//! workspace, names files with control characters, and dies mid-transfer.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::{kill9, wait_until, Project};

fn staged(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|items| {
            items
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(".airlock-partial-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn sh(p: &Project, script: &str) -> String {
    let run = p.run(&["exec", "--", "sh", "-c", script]);
    run.assert_code(0);
    run.stdout
}

#[test]
fn push_and_pull_round_trip_a_tree_through_a_running_sandbox() {
    let p = Project::new();
    p.up();
    let src = p.env.dir("data");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("sub/file.txt"), "hello from the host\n").unwrap();
    symlink("sub/file.txt", src.join("link")).unwrap();
    let run = p.run(&["push", "--json", src.to_str().unwrap(), "/tmp"]);
    run.assert_code(0);
    let doc = run.json();
    assert_eq!(
        (doc["files"].as_u64(), doc["bytes"].as_u64()),
        (Some(1), Some(20))
    );
    assert_eq!(doc["to"], "/tmp/data");
    assert!(doc["seconds"].as_f64().is_some());
    assert_eq!(
        sh(&p, "cat /tmp/data/sub/file.txt; readlink /tmp/data/link"),
        "hello from the host\nsub/file.txt\n"
    );
    let out = p.env.dir("out");
    fs::create_dir_all(&out).unwrap();
    p.run(&["pull", "/tmp/data", out.to_str().unwrap()])
        .assert_code(0);
    assert_eq!(
        fs::read_to_string(out.join("data/sub/file.txt")).unwrap(),
        "hello from the host\n"
    );
    assert_eq!(
        fs::read_link(out.join("data/link")).unwrap(),
        Path::new("sub/file.txt")
    );
    // The target now exists: refused without --replace, swapped with it.
    let run = p.run(&["pull", "/tmp/data", out.to_str().unwrap()]);
    run.assert_code(1);
    assert!(run.stderr.contains("--replace"), "{}", run.stderr);
    p.run(&["pull", "--replace", "/tmp/data", out.to_str().unwrap()])
        .assert_code(0);
    assert!(staged(&out).is_empty());
}

#[test]
fn bad_paths_are_refused_while_the_command_line_is_read() {
    let p = Project::new();
    // No sandbox exists: a refusal here cannot have touched one.
    let src = p.env.dir("data");
    fs::create_dir_all(&src).unwrap();
    let s = src.to_str().unwrap();
    for args in [
        vec!["push", "", "/tmp"],
        vec!["push", s, ""],
        vec!["push", s, "tmp/relative"],
        vec!["push", s, "/tmp/../etc"],
        vec!["push", s, "/proc/1/root"],
        vec!["push", s, "/sys/kernel"],
        vec!["push", "/dev/null", "/tmp"],
        vec!["push", "/", "/tmp"],
        vec!["pull", "/proc/self/environ", s],
        vec!["pull", "/dev/shm/x", s],
        vec!["pull", "/", s],
        vec!["pull", "/tmp/x", "/proc/self/cwd"],
        vec!["pull", "/tmp/x", ""],
    ] {
        let run = p.run(&args);
        run.assert_code(2);
    }
    assert_eq!(p.health(), "absent");
}

#[test]
fn a_link_planted_in_the_workspace_never_redirects_a_pull() {
    let p = Project::new();
    p.up();
    let outside = p.env.dir("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("keep"), "host file").unwrap();
    sh(&p, "mkdir -p /tmp/tree && echo pwned > /tmp/tree/keep");
    // The sandbox plants a link in its workspace, pointing at a host directory.
    sh(
        &p,
        &format!("ln -s {} {}/out", outside.display(), p.dir.display()),
    );
    let via_link = format!("{}/out/tree", p.dir.display());
    let run = p.run(&["pull", "/tmp/tree", &via_link]);
    run.assert_code(1);
    assert!(run.stderr.contains("symbolic link"), "{}", run.stderr);
    let at_link = format!("{}/out", p.dir.display());
    p.run(&["pull", "/tmp/tree", &at_link]).assert_code(1);
    // Replacing swaps the link itself for the tree; the host directory is untouched.
    p.run(&["pull", "--replace", "/tmp/tree", &at_link])
        .assert_code(0);
    assert!(fs::symlink_metadata(p.dir.join("out")).unwrap().is_dir());
    assert_eq!(
        fs::read_to_string(outside.join("keep")).unwrap(),
        "host file"
    );
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
}

#[test]
fn a_link_planted_in_the_sandbox_destination_is_never_written_through() {
    let p = Project::new();
    p.up();
    let src = p.env.dir("data");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), "x").unwrap();
    sh(&p, "mkdir -p /tmp/victim && ln -s /tmp/victim /tmp/dest");
    let run = p.run(&["push", src.to_str().unwrap(), "/tmp/dest/data"]);
    run.assert_code(1);
    p.run(&["push", src.to_str().unwrap(), "/tmp/dest"])
        .assert_code(1);
    assert_eq!(sh(&p, "ls -A /tmp/victim | wc -l").trim(), "0");
}

#[test]
fn names_with_control_characters_are_escaped_in_human_output() {
    let p = Project::new();
    p.up();
    let root = p.run(&["exec", "--root", "--", "true"]);
    if root.code != Some(0) {
        assert!(
            std::env::var_os("CI").is_none(),
            "--root is unavailable: {}",
            root.stderr
        );
        eprintln!("skipped: this host gives the sandbox no root identity");
        return;
    }
    // A file the sandbox user cannot read, named to drive a terminal: the error names it.
    let script =
        "mkdir -p /tmp/evil && printf x > \"/tmp/evil/$(printf 'a\\033]0;pwned\\007\\nb')\" \
                  && chmod 600 /tmp/evil/a* && chmod 755 /tmp/evil";
    let setup = p.run(&["exec", "--root", "--", "sh", "-c", script]);
    setup.assert_code(0);
    let out = p.env.dir("out");
    fs::create_dir_all(&out).unwrap();
    let run = p.run(&["pull", "/tmp/evil", out.to_str().unwrap()]);
    run.assert_code(1);
    assert!(
        run.stderr.contains("nothing was published"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains('\u{1b}') && !run.stderr.contains('\u{7}'),
        "{:?}",
        run.stderr
    );
    assert!(
        run.stderr.contains("\\x1b]0;pwned\\x07\\nb"),
        "{:?}",
        run.stderr
    );
    assert!(fs::read_dir(&out).unwrap().next().is_none());
}

#[test]
fn a_workspace_raced_by_the_sandbox_never_leaks_a_host_file_into_a_push() {
    let p = Project::new();
    p.up();
    let secret = p.env.dir("secret");
    fs::create_dir_all(&secret).unwrap();
    fs::write(secret.join("key"), "HOST-SECRET").unwrap();
    let src = p.dir.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..20 {
        fs::write(src.join(format!("sub/f{i}")), "ordinary").unwrap();
    }
    fs::write(src.join("sub/key"), "ordinary").unwrap();
    // Inside the sandbox, swap the directory for a link to the host secret as fast as it can
    // (the link means nothing inside the sandbox; it would only leak if the host followed it).
    let racer = format!(
        "cd {} && while :; do mv sub aside; ln -s {} sub; rm sub; mv aside sub; done",
        src.display(),
        secret.display()
    );
    p.run(&["exec", "-d", "--", "sh", "-c", &racer])
        .assert_code(0);
    for round in 0..30 {
        let dest = format!("/tmp/copy{round}");
        let _ = p.run(&["push", src.to_str().unwrap(), &dest]);
    }
    let leaked = sh(&p, "grep -rl HOST-SECRET /tmp/copy* 2>/dev/null | wc -l");
    assert_eq!(leaked.trim(), "0");
}

#[test]
fn a_sandbox_killed_mid_transfer_publishes_nothing_and_says_so() {
    let p = Project::new();
    let up = p.up();
    sh(&p, "head -c 400000000 /dev/zero > /tmp/big");
    let out = p.env.dir("out");
    fs::create_dir_all(&out).unwrap();
    let child = p
        .command(&["pull", "/tmp/big", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let started = wait_until(Duration::from_secs(20), || !staged(&out).is_empty());
    let guest = up["guest"]["pid"]
        .as_u64()
        .or_else(|| p.status()["guest"]["pid"].as_u64());
    kill9(guest.expect("the guest's pid"));
    let run: crate::common::Run = child.wait_with_output().unwrap().into();
    if !started {
        // The transfer finished before it could be interrupted: nothing to check here.
        panic!("the pull never staged anything: {}", run.stderr);
    }
    run.assert_code(1);
    assert!(
        run.stderr.contains("nothing was published"),
        "{}",
        run.stderr
    );
    assert!(
        fs::read_dir(&out).unwrap().next().is_none(),
        "{:?}",
        fs::read_dir(&out).unwrap().collect::<Vec<_>>()
    );
}

#[test]
fn a_one_gigabyte_file_round_trips_byte_for_byte() {
    let p = Project::new();
    p.up();
    let src = p.env.root().join("big.bin");
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(fs::File::create(&src).unwrap());
        let mut block: Vec<u8> = (0..1u32 << 20)
            .map(|j| j.wrapping_mul(2_654_435_761).to_le_bytes()[1])
            .collect();
        for i in 0..1024u32 {
            // Real bytes, different in every MiB: not sparse, not one repeated block.
            block[..4].copy_from_slice(&i.to_le_bytes());
            f.write_all(&block).unwrap();
        }
    }
    let run = p.run(&["push", "--json", src.to_str().unwrap(), "/tmp/big.bin"]);
    run.assert_code(0);
    assert_eq!(run.json()["bytes"].as_u64(), Some(1 << 30));
    let back = p.env.root().join("back.bin");
    p.run(&["pull", "/tmp/big.bin", back.to_str().unwrap()])
        .assert_code(0);
    let same = std::process::Command::new("cmp")
        .arg(&src)
        .arg(&back)
        .status()
        .unwrap();
    assert!(same.success(), "the pulled copy differs");
    fs::remove_file(&src).unwrap();
    fs::remove_file(&back).unwrap();
}

#[test]
fn ctrl_c_during_a_pull_publishes_nothing_and_exits_130() {
    let p = Project::new();
    p.up();
    sh(&p, "head -c 400000000 /dev/zero > /tmp/big");
    let out = p.env.dir("out");
    let child = p
        .command(&["pull", "/tmp/big", out.to_str().unwrap()])
        .spawn()
        .unwrap();
    let staged_seen = wait_until(Duration::from_secs(20), || !staged(&out).is_empty());
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let run: crate::common::Run = child.wait_with_output().unwrap().into();
    assert!(
        staged_seen,
        "the pull never staged anything: {}",
        run.stderr
    );
    run.assert_code(130);
    assert!(
        run.stderr.contains("nothing was published"),
        "{}",
        run.stderr
    );
    assert!(fs::read_dir(&out).unwrap().next().is_none());
    // The sandbox is unharmed.
    assert_eq!(p.health(), "ready");
}

#[test]
fn an_unprivileged_user_pushes_and_pulls_with_the_sandbox_users_rights_only() {
    use std::os::unix::fs::MetadataExt;
    let Some((uid, _)) = crate::common::test_user() else {
        return crate::common::skip_without_test_user();
    };
    let p = Project::new();
    let as_user = |args: &[&str]| p.env.run_as_test_user_in(&p.dir, args).expect("test user");
    let src = p.env.dir("data");
    fs::write(src.join("f"), "from the host").unwrap();
    as_user(&["up", "--no-attach"]).assert_code(0);
    // Into the workspace: written by the sandbox user, owned by the invoker on the host.
    let dest = format!("{}/in", p.dir.display());
    as_user(&["push", src.to_str().unwrap(), &dest]).assert_code(0);
    assert_eq!(fs::metadata(p.dir.join("in/f")).unwrap().uid(), uid);
    // A file the sandbox user made unreadable stays unreadable, whatever PID 1 may do.
    as_user(&[
        "exec",
        "--",
        "sh",
        "-c",
        "printf x > /tmp/locked && chmod 000 /tmp/locked",
    ])
    .assert_code(0);
    let out = p.env.dir("out");
    let run = as_user(&["pull", "/tmp/locked", out.to_str().unwrap()]);
    run.assert_code(1);
    assert!(run.stderr.contains("ermission denied"), "{}", run.stderr);
    as_user(&["exec", "--", "chmod", "600", "/tmp/locked"]).assert_code(0);
    as_user(&["pull", "/tmp/locked", out.to_str().unwrap()]).assert_code(0);
    assert_eq!(fs::metadata(out.join("locked")).unwrap().uid(), uid);
}
