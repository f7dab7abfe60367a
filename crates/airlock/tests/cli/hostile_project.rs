//! A repository (or a sandbox) controls every file inside the project: the host reads them
//! beneath the project root without following links, only as regular files, with a size cap
//! (C7, issue 9 finding 1). Each verb that reads the project config must fail fast (exit 2)
//! naming the offending file, never allocate without bound or hang.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{Run, TestEnv};

/// Every verb that loads the project config.
const VERBS: &[&[&str]] = &[
    &["plan"],
    &["up", "--no-attach"],
    &["run", "--", "true"],
    &["policy", "ls"],
    &["trust"],
];

/// Runs airlock, killing it after `limit` (a hang is reported as a failure, not waited out).
fn run_bounded(env: &TestEnv, cwd: &Path, args: &[&str], limit: Duration) -> Run {
    let mut child = env
        .command(cwd, args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn airlock");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Run::from(child.wait_with_output().expect("collect output"))
}

/// Asserts that every verb exits 2 and names `named` in its error.
fn every_verb_refuses(env: &TestEnv, project: &Path, named: &Path, what: &str) {
    for verb in VERBS {
        let run = run_bounded(env, project, verb, Duration::from_secs(30));
        assert_eq!(
            run.code,
            Some(2),
            "{verb:?} with {what}: expected exit 2\nstdout:\n{}\nstderr:\n{}",
            run.stdout,
            run.stderr
        );
        assert!(
            run.stderr.contains(&*named.to_string_lossy()) && run.stderr.contains(what),
            "{verb:?}: the error must name {} and say {what:?}:\n{}",
            named.display(),
            run.stderr
        );
    }
}

fn project(env: &TestEnv) -> (PathBuf, PathBuf) {
    let project = env.git_project("src/hostile");
    std::fs::create_dir_all(project.join(".airlock")).unwrap();
    let config = project.join(".airlock/config.toml");
    (project, config)
}

#[test]
fn project_config_symlinked_to_dev_zero_is_refused_not_read() {
    let env = TestEnv::new();
    let (project, config) = project(&env);
    symlink("/dev/zero", &config).unwrap();
    every_verb_refuses(&env, &project, &config, "symbolic link");
}

#[test]
fn project_config_that_is_a_fifo_is_refused_without_hanging() {
    let env = TestEnv::new();
    let (project, config) = project(&env);
    let status = std::process::Command::new("mkfifo")
        .arg(&config)
        .status()
        .expect("run mkfifo");
    assert!(status.success());
    every_verb_refuses(&env, &project, &config, "a FIFO");
}

#[test]
fn project_config_over_one_mebibyte_is_refused() {
    let env = TestEnv::new();
    let (project, config) = project(&env);
    // Valid TOML (comments), so only the size can make it fail.
    let line = format!("#{}\n", "x".repeat(1023));
    std::fs::write(&config, line.repeat(2048)).unwrap();
    every_verb_refuses(&env, &project, &config, "larger than 1048576 bytes");
}

#[test]
fn airlock_directory_that_is_a_symlink_is_refused() {
    let env = TestEnv::new();
    let (project, _) = project(&env);
    let elsewhere = env.dir("elsewhere");
    std::fs::write(
        elsewhere.join("config.toml"),
        "[network]\nallow = [\"x.example.org\"]\n",
    )
    .unwrap();
    std::fs::remove_dir(project.join(".airlock")).unwrap();
    symlink(&elsewhere, project.join(".airlock")).unwrap();
    every_verb_refuses(&env, &project, &project.join(".airlock"), "symbolic link");
}
