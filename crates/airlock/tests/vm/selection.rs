//! Choosing the `vm` backend: everything is checked before any side effect, and what is
//! missing is said with what to do. No VM boots here.

use std::os::unix::fs::MetadataExt;

use crate::common::{test_user, Run, TestEnv};

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

#[test]
fn vm_settings_are_checked_with_the_config_and_name_their_keys() {
    let env = TestEnv::new();
    let dir = env.git_project("proj");
    env.write_user_config(
        "backend = \"vmm\"\n[vm]\naccel = \"fast\"\nkernel = \"relative/dir\"\nmemory_overhead_mb = 5\nbogus = 1\n",
    );
    let run = env.run_in(&dir, &["up", "--no-attach"]);
    run.assert_code(2);
    for needle in [
        "backend",
        "\"vmm\" is not a backend",
        "vm.accel",
        "\"fast\" is not an accelerator",
        "vm.kernel",
        "not an absolute path",
        "vm.memory_overhead_mb",
        "vm.bogus",
    ] {
        assert!(
            run.stderr.contains(needle),
            "no {needle:?} in:\n{}",
            run.stderr
        );
    }
    assert!(!env.state_home().join("airlock/lifecycle").exists());
}

#[test]
fn a_project_config_cannot_choose_the_backend_or_the_monitor() {
    let env = TestEnv::new();
    let dir = env.git_project("proj");
    env.write_project_config(&dir, "backend = \"vm\"\n[vm]\nqemu = \"/tmp/evil-qemu\"\n");
    let run = env.run_in(&dir, &["up", "--no-attach"]);
    run.assert_code(2);
    assert!(run.stderr.contains("backend"), "{}", run.stderr);
    assert!(run.stderr.contains("user config"), "{}", run.stderr);
    assert!(run.stderr.contains("vm"), "{}", run.stderr);
}

#[test]
fn an_unknown_backend_flag_is_a_usage_error() {
    let env = TestEnv::new();
    let dir = env.git_project("proj");
    let run = env.run_in(&dir, &["--backend", "kvm", "run", "--", "true"]);
    run.assert_code(2);
    assert!(run.stderr.contains("kvm"), "{}", run.stderr);
}

#[test]
fn vm_backend_without_a_kernel_says_to_run_fetch_vm_kernel() {
    if !airlock_testkit::needs_tool(super::QEMU) {
        return;
    }
    let env = TestEnv::new();
    let dir = env.git_project("proj");
    // The world's own cache holds no kernel.
    env.write_user_config("backend = \"vm\"\n[vm]\naccel = \"tcg\"\n");
    let run: Run = match (is_root(), test_user()) {
        (true, Some(_)) => env
            .run_as_test_user_in(&dir, &["run", "--", "true"])
            .expect("test user"),
        (true, None) => return crate::common::skip_without_test_user(),
        (false, _) => env.run_in(&dir, &["run", "--", "true"]),
    };
    run.assert_code(69);
    assert!(run.stderr.contains("backend.vm_kernel"), "{}", run.stderr);
    assert!(
        run.stderr.contains("scripts/fetch-vm-kernel"),
        "{}",
        run.stderr
    );
    assert!(!env.runtime_dir.join("airlock/vm-runs").exists());
}
