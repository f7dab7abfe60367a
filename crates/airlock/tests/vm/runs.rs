//! `run` with the vm backend keeps its files in `<runtime>/vm-runs/<id>/`; a `run` killed by
//! SIGKILL cannot remove them, so the next run sweeps the directories whose owner is gone.
//! No VM boots here: the monitor is `/bin/false`, so the run fails right after the sweep.

use crate::runtime::harness::Rt;

/// This process's start time (field 22 of `/proc/self/stat`).
fn own_start_time() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    after.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// A run directory whose owner marker names a process that is gone (this pid with another
/// start time: the pid was reused) is removed by the next `run`; one whose owner lives and
/// one without a marker (not airlock's to judge) are left alone.
#[test]
fn vm_run_sweeps_run_directories_whose_owner_is_gone() {
    if !airlock_testkit::needs_tool(super::QEMU) {
        return;
    }
    let Some(kernel) = super::needs_kernel() else {
        return;
    };
    let rt = Rt::invoker();
    rt.env.write_user_config(&format!(
        "backend = \"vm\"\n[vm]\naccel = \"tcg\"\nkernel = \"{}\"\nqemu = \"/bin/false\"\n",
        kernel.root.display()
    ));
    let runs = rt.env.runtime_dir.join("airlock/vm-runs");
    // Private, as airlock makes them.
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(&runs)
        .unwrap();
    let me = std::process::id();
    for (name, owner) in [
        ("killed", Some(format!("{me} 1\n"))),
        ("running", Some(format!("{me} {}\n", own_start_time()))),
        ("unmarked", None),
    ] {
        let dir = runs.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("qemu.log"), "left by a killed run\n").unwrap();
        if let Some(owner) = owner {
            std::fs::write(dir.join(airlock_linux::host::OWNER_FILE), owner).unwrap();
        }
    }
    let run = rt.run_args(&["run", "--", "true"], None);
    run.assert_code(69);
    assert!(run.stderr.contains("backend.vm_boot"), "{run:?}");
    let mut left: Vec<String> = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["running", "unmarked"], "{run:?}");
}
